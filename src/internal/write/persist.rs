//! Persisting one object: a conditional create resolved to a definite outcome
//! (DESIGN.md, the outcome table), measured on the creation clock.
//!
//! A create that has not answered within the hedge delay is sent again beside the first
//! ([`WalIo::create_hedged`]); the first definite answer decides, and a twin's "already
//! exists" is resolved like any identical retry. An unknown outcome is retried with the
//! identical bytes; an `AlreadyExists` is resolved
//! by reading the key: our own bytes (an earlier attempt landed) are durable, a higher
//! epoch fences us, a lower epoch is a stale tail that ends the epoch. A create that took
//! longer than `max_create_duration` is never acknowledged, so a stalled create cannot
//! land on a reclaimed key and be acknowledged.
//!
//! A *throttle reply* (the store refused the attempt for its request rate; over several
//! stores, a quorum that only such refusals withheld: [`CreateAttempt::Throttled`]) is an
//! unknown outcome like any other: an earlier hidden attempt
//! of the client may still land, so it is retried with the identical bytes and resolved
//! by the same table. Under [`persist_paced`] (both writers) it does not spend the retry
//! budget: it is retried after the retry policy's backoff, jittered, for as long as the
//! next attempt would still start within `max_create_duration` of the first, and the
//! driver is told of it so that it can space its objects (DESIGN.md "Throttled stores").

use std::time::Duration;

use bytes::Bytes;

use tracing::{debug, warn};

use crate::config::{FirstRetryWait, RetryPolicy};
use crate::error::{Durability, EpochEndReason, Error};
use crate::format::{self, EncodedObject};
use crate::internal::store::objects::{read_again_once, CreateAttempt, WalIo};
use crate::internal::write::clock::CreateClock;
use crate::internal::write::epoch::create_too_slow;

/// The definite result of persisting one object (DESIGN.md's outcome table).
#[derive(Debug, Clone)]
pub enum PersistOutcome {
    /// Created, or found identical after an earlier attempt had landed: durable.
    Durable {
        /// Create attempts made.
        attempts: u32,
    },
    /// A higher epoch holds the sequence: this instance is fenced.
    Fenced {
        /// The epoch found.
        fenced_by: u64,
    },
    /// A lower epoch (a late object of an earlier instance) holds the sequence.
    StaleTail {
        /// The epoch found.
        found_epoch: u64,
    },
    /// Still unknown when the retry bound was spent.
    Unknown {
        /// The last error.
        last: Error,
    },
    /// This epoch holds the sequence with other bytes, or the key holds a damaged object.
    Poisoned {
        /// What was found.
        reason: String,
    },
    /// The store refuses conditional creates (the error names it).
    Unsupported(Error),
    /// Nothing was written, and it is known: the store refused the create for
    /// permission or authentication ([`Error::AccessDenied`]), or the object could not
    /// be encoded and was never sent ([`Error::EncodeFailed`]).
    Refused(Error),
    /// Created, but the create took longer than `max_create_duration`: never acknowledged.
    TooSlow {
        /// Create attempts made.
        attempts: u32,
        /// How long it took.
        took: Duration,
    },
}

/// [`persist`], measured on `clock` from the first attempt to the definite answer: a
/// create that took longer than `max_duration` is never acknowledged
/// ([`PersistOutcome::TooSlow`]), so a stalled create cannot land on a reclaimed key and
/// be acknowledged after `reclaim_grace` (DESIGN.md, "Reclaiming space"). Throttle
/// replies are retried as [`persist_paced`] does, told to no one.
pub async fn persist_within(
    io: &WalIo,
    object: &EncodedObject,
    retry: &RetryPolicy,
    max_duration: Duration,
    clock: &dyn CreateClock,
) -> PersistOutcome {
    persist_paced(io, object, retry, max_duration, clock, &|| {}).await
}

/// [`persist_within`], and a throttle reply does not spend the retry budget: it is
/// retried with the identical bytes after the retry policy's backoff for the throttle
/// replies met so far, jittered (between half of it and all of it), while that retry
/// would start within `max_duration` of the first attempt (past it the outcome is
/// unknown, as when the budget is spent: a create that slow could never be acknowledged
/// anyway). `on_throttle` is called at each throttle reply, before the wait.
pub async fn persist_paced(
    io: &WalIo,
    object: &EncodedObject,
    retry: &RetryPolicy,
    max_duration: Duration,
    clock: &dyn CreateClock,
    on_throttle: &(dyn Fn() + Send + Sync),
) -> PersistOutcome {
    let started = clock.now();
    let pacing = Pacing {
        clock,
        started,
        max_duration,
        on_throttle,
    };
    let outcome = create_until_definite(io, object, retry, Some(&pacing)).await;
    match outcome {
        PersistOutcome::Durable { attempts } => {
            match create_too_slow(started, clock.now(), max_duration) {
                Some(took) => {
                    warn!(
                        sequence = object.header().sequence,
                        took_ms = took.as_millis() as u64,
                        "create took longer than max_create_duration; not acknowledged"
                    );
                    PersistOutcome::TooSlow { attempts, took }
                }
                None => outcome,
            }
        }
        other => other,
    }
}

/// How [`persist_paced`] retries throttle replies.
struct Pacing<'a> {
    clock: &'a dyn CreateClock,
    started: Duration,
    max_duration: Duration,
    on_throttle: &'a (dyn Fn() + Send + Sync),
}

impl Pacing<'_> {
    /// The wait before retrying after the `n`-th throttle reply (1-based) of the create
    /// of `sequence`, or `None` when that retry would start past `max_duration` after
    /// the first attempt.
    fn wait(&self, retry: &RetryPolicy, sequence: u64, n: u32) -> Option<Duration> {
        let wait = jittered(retry.backoff(n), sequence, n);
        let elapsed = self.clock.now().saturating_sub(self.started);
        (elapsed.saturating_add(wait) < self.max_duration).then_some(wait)
    }
}

/// Added to a fault's retry number to draw its jitter apart from a throttle reply's.
const FAULT_JITTER: u32 = 1 << 16;

/// Between half of `full` and all of it, drawn from `sequence` and `n`: creates
/// throttled together do not all come back at once.
fn jittered(full: Duration, sequence: u64, n: u32) -> Duration {
    // SplitMix64's finalizer over the pair.
    let mut z = sequence
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(n).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let fraction = (z >> 11) as f64 / (1u64 << 53) as f64;
    Duration::try_from_secs_f64(full.as_secs_f64() * (0.5 + 0.5 * fraction)).unwrap_or(full)
}

/// Creates an object and resolves the answer to a definite outcome: an unknown outcome
/// is retried with the identical bytes (with backoff) until it is definite or the retry
/// bound is spent; an `AlreadyExists` is resolved by reading the object at the key.
/// Once `io` is closed ([`WalIo::close`](crate::internal::store::objects::WalIo::close)) the outcome is unknown at once.
/// A throttle reply spends an attempt of the budget here, as any unknown outcome does
/// ([`persist_paced`] retries it apart).
pub async fn persist(io: &WalIo, object: &EncodedObject, retry: &RetryPolicy) -> PersistOutcome {
    create_until_definite(io, object, retry, None).await
}

/// [`persist`]'s loop; with `pacing`, throttle replies are retried as
/// [`persist_paced`] says.
async fn create_until_definite(
    io: &WalIo,
    object: &EncodedObject,
    retry: &RetryPolicy,
    pacing: Option<&Pacing<'_>>,
) -> PersistOutcome {
    let sequence = object.header().sequence;
    let mut attempt = 1;
    // Attempts that spent the retry budget (every one but a paced throttle reply's).
    let mut spent = 0;
    let mut throttle_replies = 0;
    loop {
        // The transport's verdict: a throttle reply is carried, not read from the text.
        let mut throttled = false;
        let last = match io.create_hedged(object).await {
            CreateAttempt::Created => return PersistOutcome::Durable { attempts: attempt },
            CreateAttempt::Unsupported => return PersistOutcome::Unsupported(io.unsupported()),
            CreateAttempt::Refused(e) => return PersistOutcome::Refused(e),
            CreateAttempt::Unknown(e) => {
                debug!(sequence, attempt, error = %e, "create outcome unknown, retrying identical bytes");
                e
            }
            CreateAttempt::Throttled(e) => {
                debug!(sequence, attempt, error = %e, "create throttled, retrying identical bytes");
                throttled = true;
                e
            }
            CreateAttempt::AlreadyExists { found } => {
                // The transport may have read the object already (over several stores it
                // must, and has checked what it read): then that answer is final, since
                // a read of "the key" there could be served by our own minority copy.
                // Otherwise the key is read; bytes damaged in transit must not pass for
                // damage at rest, so what is not definite (other bytes of this epoch, a
                // damaged header) is read again.
                let resolved = match found {
                    Some(found) => Ok(resolve_conflict(io, object, &found, attempt)),
                    None => {
                        read_again_once(|| async {
                            let found = io.read_whole(sequence).await?;
                            Ok(resolve_conflict(io, object, &found, attempt))
                        })
                        .await
                    }
                };
                match resolved {
                    Ok(Ok(outcome) | Err(outcome)) => return outcome,
                    Err(e) => e,
                }
            }
        };
        // A closed view sends nothing more: the outcome stays unknown.
        if io.is_closed() {
            return PersistOutcome::Unknown { last };
        }
        let wait = match pacing.filter(|_| throttled) {
            Some(pacing) => {
                // Still unknown (a hidden attempt may land): the same bytes again, later,
                // without spending the budget, within `max_create_duration`.
                throttle_replies += 1;
                (pacing.on_throttle)();
                match pacing.wait(retry, sequence, throttle_replies) {
                    Some(wait) => wait,
                    None => return PersistOutcome::Unknown { last },
                }
            }
            None => {
                spent += 1;
                if spent >= retry.max_attempts {
                    return PersistOutcome::Unknown { last };
                }
                match retry.first_wait {
                    // About the store's median, jittered: creates that failed together
                    // do not all come back at once. Later retries as before.
                    FirstRetryWait::Adaptive if spent == 1 => jittered(
                        retry.create_backoff(spent, io.create_median()),
                        sequence,
                        FAULT_JITTER,
                    ),
                    _ => retry.backoff(spent),
                }
            }
        };
        io.metrics().create_retries.increment(1);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = io.closed() => return PersistOutcome::Unknown { last },
        }
        attempt += 1;
    }
}

/// What the object `found` at our key means for `object` (DESIGN.md's outcome table):
/// `Ok` when definite (our own bytes, or another epoch's checksummed header), `Err` when
/// it may be damage in transit (other bytes of this epoch, a damaged header).
fn resolve_conflict(
    io: &WalIo,
    object: &EncodedObject,
    found: &Bytes,
    attempts: u32,
) -> Result<PersistOutcome, PersistOutcome> {
    if object.same_bytes(found) {
        // An earlier attempt (or a twin) landed and its answer was lost: say so.
        let stats = io.request_stats();
        stats
            .creates_found_landed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        io.metrics().creates_found_landed.increment(1);
        return Ok(PersistOutcome::Durable { attempts });
    }
    let epoch = object.header().epoch;
    let key = io.key(object.header().sequence);
    match format::decode_header(found) {
        Ok(h) if h.epoch > epoch => Ok(PersistOutcome::Fenced { fenced_by: h.epoch }),
        Ok(h) if h.epoch < epoch => Ok(PersistOutcome::StaleTail {
            found_epoch: h.epoch,
        }),
        Ok(_) => Err(PersistOutcome::Poisoned {
            reason: format!("object {key} holds other bytes of this epoch {epoch}"),
        }),
        Err(e) => Err(PersistOutcome::Poisoned {
            reason: format!("object {key} is damaged: {e}"),
        }),
    }
}

impl PersistOutcome {
    /// The outcome of an object that could not be encoded (its transforms failed, for
    /// one: the key provider had no current key): never sent, nothing written.
    pub fn not_encoded(sequence: u64, error: &crate::format::FormatError) -> Self {
        PersistOutcome::Refused(Error::EncodeFailed {
            what: format!("object {sequence}"),
            reason: error.to_string(),
        })
    }

    /// The error the appends of an object that ended this way get; `None` when durable.
    pub fn error(&self, epoch: u64, sequence: u64) -> Option<Error> {
        match self {
            PersistOutcome::Durable { .. } => None,
            PersistOutcome::Fenced { fenced_by } => Some(Error::Fenced {
                epoch,
                sequence,
                fenced_by: *fenced_by,
                durability: Durability::NotWritten,
            }),
            PersistOutcome::StaleTail { found_epoch } => Some(Error::EpochEnded {
                epoch,
                sequence,
                reason: EpochEndReason::StaleTail {
                    found_epoch: *found_epoch,
                },
                durability: Durability::NotWritten,
            }),
            PersistOutcome::Unknown { .. } => Some(Error::EpochEnded {
                epoch,
                sequence,
                reason: EpochEndReason::UnknownOutcome,
                durability: Durability::MayBeDurable,
            }),
            // The create was sent and the key holds what may be our object, damaged:
            // its entries may be replayed.
            PersistOutcome::Poisoned { reason } => Some(Error::Poisoned {
                reason: reason.clone(),
                durability: Durability::MayBeDurable,
            }),
            PersistOutcome::Unsupported(e) | PersistOutcome::Refused(e) => Some(e.clone()),
            PersistOutcome::TooSlow { .. } => Some(Error::EpochEnded {
                epoch,
                sequence,
                reason: EpochEndReason::CreateTooSlow,
                durability: Durability::MayBeDurable,
            }),
        }
    }
}
