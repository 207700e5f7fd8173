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

use std::time::Duration;

use bytes::Bytes;

use tracing::{debug, warn};

use crate::config::RetryPolicy;
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
/// be acknowledged after `reclaim_grace` (DESIGN.md, "Reclaiming space").
pub async fn persist_within(
    io: &WalIo,
    object: &EncodedObject,
    retry: &RetryPolicy,
    max_duration: Duration,
    clock: &dyn CreateClock,
) -> PersistOutcome {
    let started = clock.now();
    let outcome = persist(io, object, retry).await;
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

/// Creates an object and resolves the answer to a definite outcome: an unknown outcome
/// is retried with the identical bytes (with backoff) until it is definite or the retry
/// bound is spent; an `AlreadyExists` is resolved by reading the object at the key.
/// Once `io` is closed ([`WalIo::close`](crate::internal::store::objects::WalIo::close)) the outcome is unknown at once.
pub async fn persist(io: &WalIo, object: &EncodedObject, retry: &RetryPolicy) -> PersistOutcome {
    let sequence = object.header().sequence;
    let mut attempt = 1;
    loop {
        let last = match io.create_hedged(object).await {
            CreateAttempt::Created => return PersistOutcome::Durable { attempts: attempt },
            CreateAttempt::Unsupported => return PersistOutcome::Unsupported(io.unsupported()),
            CreateAttempt::Refused(e) => return PersistOutcome::Refused(e),
            CreateAttempt::Unknown(e) => {
                debug!(sequence, attempt, error = %e, "create outcome unknown, retrying identical bytes");
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
        if attempt >= retry.max_attempts || io.is_closed() {
            return PersistOutcome::Unknown { last };
        }
        io.metrics().create_retries.increment(1);
        tokio::select! {
            _ = tokio::time::sleep(retry.backoff(attempt)) => {}
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
