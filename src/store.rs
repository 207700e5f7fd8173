//! `ObjectStoreLogStore`: opening a prefix (recovery and fencing), the write steps
//! (seal, persist, commit) and region reads.
//!
//! The actor runtime drives the same steps: it owns a [`Batch`] and an [`EpochState`],
//! seals objects, runs [`persist`] in spawned tasks and commits in sequence order. This
//! module also offers a sequential write path for callers without actors:
//! [`ObjectStoreLogStore::append`] then [`ObjectStoreLogStore::flush`].

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::ObjectStore;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::batch::{Admit, AppendParts, AppendReceipt, Batch, BatchLimits, SealedObject};
use crate::catalog::{choose_chain, plan_opening, Catalog, SegmentLocation};
use crate::error::{Durability, EpochEndReason, Error, Result};
use crate::format::{self, encode_object, EncodedObject, Header, Link, ObjectSummary};
use crate::io::{CreateAttempt, ListedObject, WalIo};

/// What a read does with a segment whose CRC or decoding fails twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CorruptSegmentPolicy {
    /// The read yields the error and ends.
    #[default]
    Fail,
    /// The read yields the error as a report of the hole and goes on with the next segment.
    Skip,
}

/// Bounds on retrying a create whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles each time.
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Configuration, validated by [`Config::validate`] (each bad value is an error naming
/// its field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The WAL prefix: keys are `<prefix>/<20-digit sequence>.wal`.
    pub prefix: String,
    /// The longest an admitted entry waits for company before its batch is sealed.
    pub flush_interval: Duration,
    /// The shortest time between the starts of two objects' creates: the PUT-rate
    /// bound, the cost control. Zero: no bound.
    pub min_object_interval: Duration,
    /// The largest object, header to trailer; a batch is sealed before it grows past it.
    pub max_batch_bytes: u64,
    /// The largest single entry.
    pub max_entry_bytes: u64,
    /// Objects uploaded at once.
    pub max_in_flight: usize,
    /// Payload bytes admitted but not yet acknowledged before appends wait.
    pub max_pending_bytes: u64,
    /// Objects whose header, footer and trailer recovery reads at once.
    pub recovery_concurrency: usize,
    /// Objects no larger than this are read with one GET during recovery.
    pub whole_read_threshold: u64,
    /// Segments a read fetches ahead of its consumer.
    pub read_ahead: usize,
    /// Retries of a create whose outcome is unknown.
    pub retry: RetryPolicy,
    /// Opens attempted (listing, claims, opening object) before giving up.
    pub open_attempts: u32,
    /// A create that takes longer than this is never acknowledged.
    pub max_create_duration: Duration,
    /// How long after the object carrying a floor is acknowledged objects below it are
    /// deleted; well above `max_create_duration`.
    pub reclaim_grace: Duration,
    /// What a read does with a damaged segment.
    pub corrupt_segment_policy: CorruptSegmentPolicy,
}

impl Config {
    /// The defaults, for `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Config {
            prefix: prefix.into(),
            flush_interval: Duration::from_millis(100),
            min_object_interval: Duration::from_millis(20),
            max_batch_bytes: 8 * 1024 * 1024,
            max_entry_bytes: 4 * 1024 * 1024,
            max_in_flight: 4,
            max_pending_bytes: 64 * 1024 * 1024,
            recovery_concurrency: 32,
            whole_read_threshold: 1024 * 1024,
            read_ahead: 2,
            retry: RetryPolicy::default(),
            open_attempts: 8,
            max_create_duration: Duration::from_secs(60),
            reclaim_grace: Duration::from_secs(600),
            corrupt_segment_policy: CorruptSegmentPolicy::Fail,
        }
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        crate::io::validate_prefix(&self.prefix)?;
        let bad = |field: &'static str, reason: &str| {
            Err(Error::Config {
                field,
                reason: reason.to_string(),
            })
        };
        let min_object = (format::EMPTY_OBJECT_LEN + format::FOOTER_RECORD_LEN + 4) as u64;
        if self.max_batch_bytes < min_object {
            return bad(
                "max_batch_bytes",
                "must hold at least one empty entry (108 bytes)",
            );
        }
        if self.max_batch_bytes > u64::from(u32::MAX) {
            return bad("max_batch_bytes", "must be below 4 GiB");
        }
        if self.max_entry_bytes == 0 {
            return bad("max_entry_bytes", "must be at least 1");
        }
        if self.max_entry_bytes + min_object > self.max_batch_bytes {
            return bad(
                "max_entry_bytes",
                "an entry this large would not fit an object of max_batch_bytes",
            );
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight", "must be at least 1");
        }
        if self.max_pending_bytes < self.max_entry_bytes {
            return bad("max_pending_bytes", "must be at least max_entry_bytes");
        }
        if self.recovery_concurrency == 0 {
            return bad("recovery_concurrency", "must be at least 1");
        }
        if self.read_ahead == 0 {
            return bad("read_ahead", "must be at least 1");
        }
        if self.flush_interval.is_zero() {
            return bad("flush_interval", "must be above zero");
        }
        if self.retry.max_attempts == 0 {
            return bad("retry.max_attempts", "must be at least 1");
        }
        if self.retry.initial_backoff > self.retry.max_backoff {
            return bad("retry.initial_backoff", "must not exceed retry.max_backoff");
        }
        if self.open_attempts == 0 {
            return bad("open_attempts", "must be at least 1");
        }
        if self.max_create_duration.is_zero() {
            return bad("max_create_duration", "must be above zero");
        }
        if self.reclaim_grace < self.max_create_duration.saturating_mul(2) {
            return bad(
                "reclaim_grace",
                "must be at least twice max_create_duration, so a stalled create cannot land on a reclaimed key and be acknowledged",
            );
        }
        Ok(())
    }

    /// The longest time from the start of one create of an epoch to the start of the
    /// next: `reclaim_grace - max_create_duration`. Within it, the next object's key
    /// cannot have been reclaimed by a newer instance (its floor-carrying object came
    /// after our previous create landed, and deletion waits `reclaim_grace`), so the
    /// next create collides with the newer instance's object there and we learn we are
    /// fenced. Past it, the epoch ends (an idle writer writes an empty object at half the
    /// window to stay inside it).
    pub fn link_window(&self) -> Duration {
        self.reclaim_grace.saturating_sub(self.max_create_duration)
    }

    /// The limits a batch enforces under this configuration.
    pub fn batch_limits(&self) -> BatchLimits {
        BatchLimits {
            max_object_bytes: self.max_batch_bytes,
            max_entry_bytes: self.max_entry_bytes,
        }
    }
}

/// One replayed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its region.
    pub region: u64,
    /// The id it was acknowledged with.
    pub id: u64,
    /// Its payload.
    pub payload: Bytes,
}

/// One object as recovery saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its header.
    pub header: Header,
    /// Number of segments.
    pub segments: usize,
    /// Number of entries.
    pub entries: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// Whether it is on the replayed chain.
    pub on_chain: bool,
}

/// What recovery found under the prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Every WAL object, ascending.
    pub objects: Vec<ObjectInfo>,
    /// Keys under the prefix that are not WAL objects (skipped).
    pub foreign: Vec<String>,
    /// The chain end, if any.
    pub chain_end: Option<Header>,
    /// The largest sequence present (orphans and claims included), 0 when empty.
    pub max_sequence: u64,
    /// Objects not on the chain: never replayed, never reused.
    pub orphans: usize,
}

/// Recovery's result: the catalog of the chain and the report.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// The catalog of the chain.
    pub catalog: Catalog,
    /// What was found.
    pub report: RecoveryReport,
}

/// Steps 1 and 2 of the open: list, read every object's header, footer and trailer
/// (bounded concurrency, never a segment), choose the chain and index it.
pub async fn recover(io: &WalIo, concurrency: usize) -> Result<Recovery> {
    recover_cached(io, concurrency, &mut BTreeMap::new()).await
}

/// [`recover`], reusing the summaries in `cache` of objects listed again with the same
/// size (objects are immutable), and leaving there the summaries of this listing. An
/// open that starts over reads only what appeared since, which keeps its window short
/// while an earlier instance is still writing.
pub async fn recover_cached(
    io: &WalIo,
    concurrency: usize,
    cache: &mut BTreeMap<u64, ObjectSummary>,
) -> Result<Recovery> {
    let listing = io.list().await?;
    for key in &listing.foreign {
        warn!(key = %key, "skipping a key under the WAL prefix that is not a WAL object");
    }
    let mut by_sequence: BTreeMap<u64, ObjectSummary> = BTreeMap::new();
    let mut to_read: Vec<ListedObject> = Vec::new();
    for listed in &listing.objects {
        match cache.remove(&listed.sequence) {
            Some(known) if known.length == listed.size => {
                by_sequence.insert(listed.sequence, known);
            }
            _ => to_read.push(listed.clone()),
        }
    }
    let summaries: Vec<Result<ObjectSummary>> = stream::iter(to_read)
        .map(|listed: ListedObject| {
            let io = io.clone();
            async move { io.read_summary(&listed).await }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await;
    let mut failed = None;
    for summary in summaries {
        match summary {
            Ok(summary) => {
                by_sequence.insert(summary.header.sequence, summary);
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        // What was read stays known: an open that starts over reads only the rest.
        cache.extend(by_sequence);
        return Err(e);
    }
    let headers: BTreeMap<u64, Header> = by_sequence.iter().map(|(s, o)| (*s, o.header)).collect();
    let chain = choose_chain(&headers);
    let mut catalog = Catalog::new();
    for sequence in &chain {
        if let Some(o) = by_sequence.get(sequence) {
            catalog.insert(&o.header, &o.footer.records, o.length)?;
        }
    }
    let on_chain: std::collections::HashSet<u64> = chain.iter().copied().collect();
    let objects: Vec<ObjectInfo> = by_sequence
        .values()
        .map(|o| ObjectInfo {
            header: o.header,
            segments: o.footer.records.len(),
            entries: o.footer.records.iter().map(|r| r.entry_count()).sum(),
            bytes: o.length,
            on_chain: on_chain.contains(&o.header.sequence),
        })
        .collect();
    let report = RecoveryReport {
        orphans: objects.iter().filter(|o| !o.on_chain).count(),
        chain_end: chain.last().and_then(|s| headers.get(s)).copied(),
        max_sequence: listing.objects.last().map_or(0, |o| o.sequence),
        foreign: listing.foreign,
        objects,
    };
    // What this listing showed, for an open that starts over.
    *cache = by_sequence;
    Ok(Recovery { catalog, report })
}

/// The write position of an open epoch: the next sequence, the link it extends and the
/// floor it carries. Sealing advances it; objects of one epoch form a chain back to the
/// opening object even while several are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochState {
    /// This instance's epoch.
    pub epoch: u64,
    /// Sequence of the next object.
    pub next_sequence: u64,
    /// The link of the next object: the last object sealed in this epoch.
    pub link: Link,
    /// The floor the next object carries.
    pub floor: u64,
}

impl EpochState {
    /// Seals the batch as the next object of the epoch.
    pub fn seal(&mut self, batch: &mut Batch) -> Result<SealedObject> {
        let sequence = self.next_sequence;
        let sealed = batch
            .seal(sequence, self.epoch, self.link, self.floor)
            .map_err(|e| Error::Poisoned {
                reason: format!("cannot encode object {sequence}: {e}"),
                durability: Durability::NotWritten,
            })?;
        self.link = Link {
            sequence,
            epoch: self.epoch,
        };
        self.next_sequence = sequence + 1;
        Ok(sealed)
    }
}

/// An instance that finished opening: its recovered catalog and its epoch.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The recovery (the catalog includes the opening object).
    pub recovery: Recovery,
    /// Where writing starts.
    pub epoch: EpochState,
    /// When the opening object's create started, on the open's [`CreateClock`].
    pub opening_started: Duration,
}

/// The whole open (DESIGN.md "Opening an instance", steps 1 to 4): recover, claim every
/// hole above the chain end, and only once every claim is created, create the opening
/// object. An `AlreadyExists` or an unknown outcome is never taken as success: the open
/// starts over from the listing, at most `config.open_attempts` times.
pub async fn open_instance(io: &WalIo, config: &Config) -> Result<Opened> {
    open_instance_with(io, config, &BootClock).await
}

/// [`open_instance`], noting on `clock` when the opening object's create started (the
/// writer bounds the time from each create to the next: [`Config::link_window`]).
pub async fn open_instance_with(
    io: &WalIo,
    config: &Config,
    clock: &dyn CreateClock,
) -> Result<Opened> {
    let mut last = String::new();
    let mut cache: BTreeMap<u64, ObjectSummary> = BTreeMap::new();
    // The store error that ended the last attempt, returned if it was the last one.
    let mut store_error: Option<Error> = None;
    for attempt in 1..=config.open_attempts {
        if attempt > 1 {
            tokio::time::sleep(config.retry.backoff(attempt - 1)).await;
        }
        store_error = None;
        let failed_read = &mut store_error;
        let span = info_span!("open", prefix = %io.prefix(), attempt);
        let step = async {
            // The plan rests on this listing: see the age check before the opening.
            let listed_at = clock.now();
            let mut recovery =
                match recover_cached(io, config.recovery_concurrency, &mut cache).await {
                    Ok(recovery) => recovery,
                    // A listing or a read that failed: start over, keeping the summaries
                    // read (a large prefix under occasional read errors still opens).
                    Err(e @ Error::Store { .. }) => {
                        let why = format!("recovery failed: {e}");
                        *failed_read = Some(e);
                        return Ok(Err(why));
                    }
                    Err(e) => return Err(e),
                };
            let present: Vec<u64> = recovery
                .report
                .objects
                .iter()
                .map(|o| o.header.sequence)
                .collect();
            let plan = plan_opening(&present, recovery.report.chain_end.as_ref())?;
            let claims: Vec<EncodedObject> = plan
                .claims
                .iter()
                .map(|h| encode_object(h, std::iter::empty()))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Poisoned {
                    reason: format!("cannot encode a claim: {e}"),
                    durability: Durability::NotWritten,
                })?;
            let outcomes: Vec<CreateAttempt> = stream::iter(claims)
                .map(|c| {
                    let io = io.clone();
                    async move { io.create(&c).await }
                })
                .buffer_unordered(config.recovery_concurrency.max(1))
                .collect()
                .await;
            for outcome in outcomes {
                match outcome {
                    CreateAttempt::Created => {}
                    CreateAttempt::Unsupported => return Err(unsupported(io)),
                    CreateAttempt::AlreadyExists => {
                        return Ok(Err("a claim found its sequence taken".to_string()))
                    }
                    CreateAttempt::Unknown(e) => {
                        return Ok(Err(format!("a claim's outcome is unknown: {e}")))
                    }
                }
            }
            let opening =
                encode_object(&plan.opening, std::iter::empty()).map_err(|e| Error::Poisoned {
                    reason: format!("cannot encode the opening object: {e}"),
                    durability: Durability::NotWritten,
                })?;
            let opening_started = clock.now();
            // The same bound as between two creates of an epoch (`Config::link_window`):
            // a newer instance that opened after the listing may have reclaimed keys
            // since, and an opening object planned on an older listing could land on one
            // of them unfenced, above objects that instance acknowledged.
            let age = opening_started.saturating_sub(listed_at);
            if age > config.link_window() {
                return Ok(Err(format!(
                    "the listing is {age:?} old, past the link window, before the opening object"
                )));
            }
            match io.create(&opening).await {
                CreateAttempt::Created => {
                    // Like any create (`max_create_duration`): one that stalled may have
                    // landed on a key reclaimed meanwhile.
                    let took = clock.now().saturating_sub(opening_started);
                    if took > config.max_create_duration {
                        return Ok(Err(format!(
                            "the opening object's create took {took:?}, past max_create_duration"
                        )));
                    }
                }
                CreateAttempt::Unsupported => return Err(unsupported(io)),
                CreateAttempt::AlreadyExists => {
                    return Ok(Err("the opening object's sequence was taken".to_string()))
                }
                CreateAttempt::Unknown(e) => {
                    return Ok(Err(format!("the opening object's outcome is unknown: {e}")))
                }
            }
            recovery.catalog.insert(&plan.opening, &[], opening.len())?;
            info!(
                epoch = plan.epoch,
                sequence = plan.opening.sequence,
                claims = plan.claims.len(),
                orphans = recovery.report.orphans,
                "opened"
            );
            Ok(Ok(Opened {
                opening_started,
                recovery,
                epoch: EpochState {
                    epoch: plan.epoch,
                    next_sequence: plan.opening.sequence + 1,
                    link: Link {
                        sequence: plan.opening.sequence,
                        epoch: plan.epoch,
                    },
                    floor: plan.opening.floor,
                },
            }))
        };
        match step.instrument(span).await? {
            Ok(opened) => return Ok(opened),
            Err(why) => {
                debug!(attempt, why = %why, "open starts over");
                last = why;
            }
        }
    }
    if let Some(e) = store_error {
        return Err(e);
    }
    Err(Error::OpenContended {
        attempts: config.open_attempts,
        last,
    })
}

fn unsupported(io: &WalIo) -> Error {
    Error::ConditionalCreateUnsupported {
        store: io.store().to_string(),
    }
}

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
    /// The store refuses conditional creates.
    Unsupported,
    /// Created, but the create took longer than `max_create_duration`: never acknowledged.
    TooSlow {
        /// Create attempts made.
        attempts: u32,
        /// How long it took.
        took: Duration,
    },
}

/// A clock for create durations. It must keep counting while the process or the machine
/// is suspended: a create that stalled across a suspension must not look fast.
pub trait CreateClock: Send + Sync + std::fmt::Debug {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// `CLOCK_BOOTTIME` on Linux and Android (it counts suspended time); the monotonic
/// clock elsewhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct BootClock;

impl CreateClock for BootClock {
    fn now(&self) -> Duration {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime only writes the timespec we own and pass by pointer.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
            if rc == 0 {
                return Duration::new(
                    ts.tv_sec.max(0) as u64,
                    ts.tv_nsec.clamp(0, 999_999_999) as u32,
                );
            }
        }
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }
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
    let took = clock.now().saturating_sub(started);
    match outcome {
        PersistOutcome::Durable { attempts } if took > max_duration => {
            warn!(
                sequence = object.header().sequence,
                took_ms = took.as_millis() as u64,
                "create took longer than max_create_duration; not acknowledged"
            );
            PersistOutcome::TooSlow { attempts, took }
        }
        other => other,
    }
}

/// Creates an object and resolves the answer to a definite outcome: an unknown outcome
/// is retried with the identical bytes (with backoff) until it is definite or the retry
/// bound is spent; an `AlreadyExists` is resolved by reading the object at the key.
pub async fn persist(io: &WalIo, object: &EncodedObject, retry: &RetryPolicy) -> PersistOutcome {
    let sequence = object.header().sequence;
    let epoch = object.header().epoch;
    let mut last = None;
    for attempt in 1..=retry.max_attempts.max(1) {
        if attempt > 1 {
            tokio::time::sleep(retry.backoff(attempt - 1)).await;
        }
        match io.create(object).await {
            CreateAttempt::Created => return PersistOutcome::Durable { attempts: attempt },
            CreateAttempt::Unsupported => return PersistOutcome::Unsupported,
            CreateAttempt::Unknown(e) => {
                debug!(sequence, attempt, error = %e, "create outcome unknown, retrying identical bytes");
                last = Some(e);
            }
            CreateAttempt::AlreadyExists => match io.read_whole(sequence).await {
                Ok(found) => {
                    if object.same_bytes(&found) {
                        return PersistOutcome::Durable { attempts: attempt };
                    }
                    let found = match format::decode_header(&found) {
                        // The header is checksummed: another epoch is a definite answer.
                        Ok(h) if h.epoch != epoch => found,
                        // Other bytes of this epoch, or a damaged header: bytes damaged in
                        // transit must not pass for damage at rest; read once more.
                        _ => match io.read_whole(sequence).await {
                            Ok(again) => again,
                            Err(e) => {
                                last = Some(e);
                                continue;
                            }
                        },
                    };
                    if object.same_bytes(&found) {
                        return PersistOutcome::Durable { attempts: attempt };
                    }
                    return match format::decode_header(&found) {
                        Ok(h) if h.epoch > epoch => PersistOutcome::Fenced { fenced_by: h.epoch },
                        Ok(h) if h.epoch < epoch => PersistOutcome::StaleTail {
                            found_epoch: h.epoch,
                        },
                        Ok(_) => PersistOutcome::Poisoned {
                            reason: format!(
                                "object {} holds other bytes of this epoch {epoch}",
                                io.key(sequence)
                            ),
                        },
                        Err(e) => PersistOutcome::Poisoned {
                            reason: format!("object {} is damaged: {e}", io.key(sequence)),
                        },
                    };
                }
                Err(e) => last = Some(e),
            },
        }
    }
    PersistOutcome::Unknown {
        last: last.unwrap_or(Error::OpenContended {
            attempts: retry.max_attempts,
            last: "no attempt".into(),
        }),
    }
}

impl PersistOutcome {
    /// The error the appends of an object that ended this way get; `None` when durable.
    pub fn error(&self, io: &WalIo, epoch: u64, sequence: u64) -> Option<Error> {
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
            PersistOutcome::Unsupported => Some(unsupported(io)),
            PersistOutcome::TooSlow { .. } => Some(Error::EpochEnded {
                epoch,
                sequence,
                reason: EpochEndReason::CreateTooSlow,
                durability: Durability::MayBeDurable,
            }),
        }
    }
}

/// The receipt of one flushed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReceipt {
    /// The object's sequence.
    pub sequence: u64,
    /// One receipt per append, in admission order.
    pub appends: Vec<AppendReceipt>,
}

#[derive(Debug)]
struct Writer {
    epoch: EpochState,
    batch: Batch,
    /// When the last create of the epoch (the opening object's, at first) started.
    last_start: Duration,
    /// Set once the epoch ended, the instance was fenced or poisoned: nothing more is
    /// written under this epoch.
    terminal: Option<Error>,
}

/// A WAL on one prefix of one object store.
///
/// Open it with [`open`](Self::open) (recovery and fencing: every earlier instance is
/// fenced) or [`open_read_only`](Self::open_read_only) (recovery only: it writes nothing
/// and fences nobody).
#[derive(Debug)]
pub struct ObjectStoreLogStore {
    io: WalIo,
    config: Config,
    catalog: Arc<RwLock<Catalog>>,
    report: RecoveryReport,
    writer: Option<Writer>,
    clock: Arc<dyn CreateClock>,
}

impl ObjectStoreLogStore {
    /// Opens the prefix as its writer: recovers the chain, claims holes, writes the
    /// opening object (fencing every earlier instance) and starts a new epoch.
    pub async fn open(store: Arc<dyn ObjectStore>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = WalIo::new(store, &config.prefix, config.whole_read_threshold)?;
        let opened = open_instance(&io, &config).await?;
        Ok(ObjectStoreLogStore {
            writer: Some(Writer {
                epoch: opened.epoch,
                batch: Batch::new(config.batch_limits()),
                last_start: opened.opening_started,
                terminal: None,
            }),
            io,
            catalog: Arc::new(RwLock::new(opened.recovery.catalog)),
            report: opened.recovery.report,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix for reading only: recovery (steps 1 and 2), no write, no fencing.
    pub async fn open_read_only(store: Arc<dyn ObjectStore>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = WalIo::new(store, &config.prefix, config.whole_read_threshold)?;
        let recovery = recover(&io, config.recovery_concurrency)
            .instrument(info_span!("recover", prefix = %io.prefix()))
            .await?;
        Ok(ObjectStoreLogStore {
            io,
            catalog: Arc::new(RwLock::new(recovery.catalog)),
            report: recovery.report,
            writer: None,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix again after the epoch ended: a fresh recovery and a new epoch.
    /// Admitted but unflushed appends are dropped (they were never sent).
    pub async fn reopen(&mut self) -> Result<()> {
        if self.writer.is_none() {
            return Err(Error::ReadOnly);
        }
        let opened = open_instance(&self.io, &self.config).await?;
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = opened.recovery.catalog;
        self.report = opened.recovery.report;
        self.writer = Some(Writer {
            epoch: opened.epoch,
            batch: Batch::new(self.config.batch_limits()),
            last_start: opened.opening_started,
            terminal: None,
        });
        Ok(())
    }

    /// Measures creates on `clock` instead of [`BootClock`] (tests drive it by hand).
    pub fn with_clock(mut self, clock: Arc<dyn CreateClock>) -> Self {
        if let Some(w) = self.writer.as_mut() {
            w.last_start = clock.now();
        }
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store access of this WAL.
    pub fn io(&self) -> &WalIo {
        &self.io
    }

    /// What recovery found at the last open.
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The catalog, shared with reads.
    pub fn catalog(&self) -> Arc<RwLock<Catalog>> {
        self.catalog.clone()
    }

    /// The write position, `None` when read-only.
    pub fn epoch(&self) -> Option<EpochState> {
        self.writer.as_ref().map(|w| w.epoch)
    }

    /// Admits an append (one or more regions, atomically) into the open batch; returns its
    /// index among the batch's appends. [`Error::BatchFull`]: flush first.
    pub fn append(&mut self, parts: AppendParts) -> Result<usize> {
        let writer = self.writer.as_mut().ok_or(Error::ReadOnly)?;
        if let Some(e) = &writer.terminal {
            return Err(e.with_durability(Durability::NotWritten));
        }
        writer.batch.admit(parts).map_err(|a| match a {
            Admit::Full(_) => Error::BatchFull,
            Admit::Invalid(e) => e,
        })
    }

    /// Flushes the open batch as the next object (seal, persist, commit) and returns the
    /// ids of its appends; `None` when nothing was admitted.
    ///
    /// A failure ends the epoch (or fences the instance): nothing more is written under
    /// it, and [`reopen`](Self::reopen) starts a new one.
    pub async fn flush(&mut self) -> Result<Option<FlushReceipt>> {
        let writer = self.writer.as_mut().ok_or(Error::ReadOnly)?;
        if let Some(e) = &writer.terminal {
            return Err(e.with_durability(Durability::NotWritten));
        }
        if writer.batch.is_empty() {
            return Ok(None);
        }
        let now = self.clock.now();
        if now.saturating_sub(writer.last_start) > self.config.link_window() {
            // Our next key may have been reclaimed by a newer instance: never write it.
            let error = Error::EpochEnded {
                epoch: writer.epoch.epoch,
                sequence: writer.epoch.next_sequence,
                reason: EpochEndReason::PredecessorTooOld,
                durability: Durability::NotWritten,
            };
            writer.terminal = Some(error.clone());
            return Err(error);
        }
        writer.last_start = now;
        let sealed = writer.epoch.seal(&mut writer.batch)?;
        let sequence = sealed.sequence();
        let outcome = persist_within(
            &self.io,
            &sealed.encoded,
            &self.config.retry,
            self.config.max_create_duration,
            self.clock.as_ref(),
        )
        .instrument(info_span!("upload", sequence, bytes = sealed.encoded.len()))
        .await;
        if let Some(error) = outcome.error(&self.io, writer.epoch.epoch, sequence) {
            warn!(sequence, error = %error, "object not acknowledged; the epoch is over");
            writer.terminal = Some(error.clone());
            return Err(error);
        }
        self.catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                sealed.encoded.header(),
                sealed.encoded.records(),
                sealed.encoded.len(),
            )?;
        Ok(Some(FlushReceipt {
            sequence,
            appends: sealed.receipts,
        }))
    }

    /// Appends one append and flushes it at once, alone or with what was admitted before.
    pub async fn append_and_flush(&mut self, parts: AppendParts) -> Result<AppendReceipt> {
        let index = match self.append(parts.clone()) {
            Err(Error::BatchFull) => {
                self.flush().await?;
                self.append(parts)?
            }
            other => other?,
        };
        let receipt = self.flush().await?;
        receipt
            .and_then(|r| r.appends.into_iter().nth(index))
            .ok_or(Error::EmptyAppend)
    }

    /// The last entry id of `region` on the chain.
    pub fn last_entry_id(&self, region: u64) -> Option<u64> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last_entry_id(region)
    }

    /// The largest entry id of any region on the chain.
    pub fn last_entry_id_overall(&self) -> Option<u64> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last_entry_id_overall()
    }

    /// Region `region`'s entries with id `>= from`, in order, fetched lazily: one ranged
    /// read of exactly each segment's bytes, verified before decoding, at most
    /// `read_ahead` segments ahead of the consumer.
    pub fn read(&self, region: u64, from: u64) -> BoxStream<'static, Result<Entry>> {
        read_region(
            self.io.clone(),
            self.catalog.clone(),
            region,
            from,
            self.config.read_ahead,
            self.config.corrupt_segment_policy,
        )
    }
}

impl ObjectStoreLogStore {
    /// Follows `region` from `from` by polling the prefix every `poll_interval` (see
    /// [`follow_read_only`]); meant for a read-only open of another node's prefix.
    pub fn follow(
        &self,
        region: u64,
        from: u64,
        poll_interval: Duration,
    ) -> BoxStream<'static, Result<Entry>> {
        follow_read_only(
            self.io.clone(),
            self.config.clone(),
            region,
            from,
            poll_interval,
        )
    }
}

/// Reads `region` from entry id `from` over a shared catalog, which may grow meanwhile:
/// the segments are looked up one by one as the stream is polled.
pub fn read_region(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    from: u64,
    read_ahead: usize,
    policy: CorruptSegmentPolicy,
) -> BoxStream<'static, Result<Entry>> {
    let locations = stream::unfold(from, move |next| {
        let catalog = catalog.clone();
        async move {
            let location = catalog
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .segments_from(region, next)
                .first()
                .copied()?;
            Some((location, location.record.last_entry_id + 1))
        }
    });
    let entries = locations
        .map(move |location| {
            let io = io.clone();
            async move { fetch_segment(&io, &location).await }
        })
        .buffered(read_ahead.max(1))
        .scan(false, move |failed, result| {
            let item = if *failed {
                None
            } else {
                match result {
                    Ok(entries) => Some(stream::iter(
                        entries
                            .into_iter()
                            .filter(|e| e.id >= from)
                            .map(Ok)
                            .collect::<Vec<_>>(),
                    )),
                    Err(e) => {
                        *failed = policy == CorruptSegmentPolicy::Fail;
                        Some(stream::iter(vec![Err(e)]))
                    }
                }
            };
            futures::future::ready(item)
        })
        .flatten();
    entries.boxed()
}

/// Fetches one segment with a ranged read of exactly its bytes and decodes it; a CRC or
/// decode failure is retried once.
pub async fn fetch_segment(io: &WalIo, location: &SegmentLocation) -> Result<Vec<Entry>> {
    let record = &location.record;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let bytes = io.read_range(location.sequence, record.range()).await?;
        match format::decode_segment(bytes, record) {
            Ok(payloads) => {
                return Ok(payloads
                    .into_iter()
                    .zip(record.first_entry_id..)
                    .map(|(payload, id)| Entry {
                        region: record.region,
                        id,
                        payload,
                    })
                    .collect())
            }
            Err(source) if attempt >= 2 => {
                return Err(Error::CorruptSegment {
                    key: io.key(location.sequence).to_string(),
                    region: record.region,
                    source,
                })
            }
            Err(source) => {
                warn!(sequence = location.sequence, region = record.region, error = %source, "segment failed verification, reading it again");
            }
        }
    }
}

/// Replays many regions at once, each from its own entry id: every chain object that
/// holds a wanted entry is fetched once, with one ranged read spanning its needed
/// segments, and each needed segment is verified (CRC) before it is decoded. Entries
/// come object by object in sequence order, so each region's entries are in order. At
/// most `read_ahead` objects are fetched ahead of the consumer.
pub fn replay_regions(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    from: std::collections::HashMap<u64, u64>,
    read_ahead: usize,
) -> BoxStream<'static, Result<Entry>> {
    let from = Arc::new(from);
    let wanted = from.clone();
    // The chain objects to fetch, looked up one at a time so memory stays bounded.
    let plans = stream::unfold(0u64, move |after| {
        let catalog = catalog.clone();
        let from = wanted.clone();
        async move {
            let catalog = catalog.read().unwrap_or_else(|p| p.into_inner());
            let mut next = catalog
                .objects_from(after.saturating_add(1))
                .filter(|(_, o)| o.segments > 0)
                .map(|(s, _)| s);
            loop {
                let sequence = next.next()?;
                let mut records: Vec<SegmentLocation> = Vec::new();
                for (&region, &first) in from.iter() {
                    let start = first.max(format::entry_id(sequence, 0));
                    if let Some(loc) = catalog
                        .segments_from(region, start)
                        .first()
                        .filter(|l| l.sequence == sequence)
                    {
                        records.push(*loc);
                    }
                }
                if !records.is_empty() {
                    records.sort_by_key(|l| l.record.offset);
                    return Some((records, sequence));
                }
            }
        }
    });
    plans
        .map(move |records| {
            let io = io.clone();
            let from = from.clone();
            async move { fetch_segments(&io, records, &from).await }
        })
        .buffered(read_ahead.max(1))
        .flat_map(|result| match result {
            Ok(entries) => stream::iter(entries.into_iter().map(Ok).collect::<Vec<_>>()),
            Err(e) => stream::iter(vec![Err(e)]),
        })
        .boxed()
}

/// Fetches the span of one object that covers `records` (sorted by offset) with one
/// ranged read and decodes each segment, verified.
async fn fetch_segments(
    io: &WalIo,
    records: Vec<SegmentLocation>,
    from: &std::collections::HashMap<u64, u64>,
) -> Result<Vec<Entry>> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Ok(Vec::new());
    };
    let sequence = first.sequence;
    let span = first.record.offset..last.record.range().end;
    let mut attempt = 0;
    'fetch: loop {
        attempt += 1;
        let bytes = io.read_range(sequence, span.clone()).await?;
        let mut entries = Vec::new();
        for loc in &records {
            let record = &loc.record;
            let start = (record.offset - span.start) as usize;
            let end = start + record.length as usize;
            if end > bytes.len() {
                return Err(Error::CorruptObject {
                    key: io.key(sequence).to_string(),
                    source: format::FormatError::Truncated {
                        part: "segment",
                        needed: end as u64,
                        got: bytes.len() as u64,
                    },
                });
            }
            let segment = bytes.slice(start..end);
            match format::decode_segment(segment, record) {
                Ok(payloads) => {
                    let min = from.get(&record.region).copied().unwrap_or(0);
                    entries.extend(
                        payloads
                            .into_iter()
                            .zip(record.first_entry_id..)
                            .filter(|(_, id)| *id >= min)
                            .map(|(payload, id)| Entry {
                                region: record.region,
                                id,
                                payload,
                            }),
                    );
                }
                Err(source) if attempt >= 2 => {
                    return Err(Error::CorruptSegment {
                        key: io.key(sequence).to_string(),
                        region: record.region,
                        source,
                    })
                }
                Err(_) => continue 'fetch,
            }
        }
        return Ok(entries);
    }
}

/// Follows `region` of a prefix opened read-only (another node's log): the entries with
/// id `>= from` on the recovered chain, then each object that extends the chain, found by
/// polling: one LIST per `poll_interval`, starting after the last chain object (a start
/// offset, not a full listing). It never writes and never fences the owner. Objects
/// that do not extend the chain yet (an orphan, a claim, an object whose predecessor has
/// not landed) are kept and looked at again; each object's summary is read once. Ends
/// at the first error, or when the consumer drops the stream.
pub fn follow_read_only(
    io: WalIo,
    config: Config,
    region: u64,
    from: u64,
    poll_interval: Duration,
) -> BoxStream<'static, Result<Entry>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Entry>>(1024);
    let span = info_span!("follow_read_only", prefix = %io.prefix(), region, from);
    tokio::spawn(
        async move {
            let run = async {
                let recovery = recover(&io, config.recovery_concurrency).await?;
                let mut last = recovery
                    .catalog
                    .tip()
                    .map(|(sequence, o)| Link {
                        sequence,
                        epoch: o.epoch,
                    })
                    .unwrap_or(Link::NONE);
                let catalog = Arc::new(RwLock::new(recovery.catalog));
                let mut pending: BTreeMap<u64, ObjectSummary> = BTreeMap::new();
                let mut next = from;
                loop {
                    let mut entries = read_region(
                        io.clone(),
                        catalog.clone(),
                        region,
                        next,
                        config.read_ahead,
                        config.corrupt_segment_policy,
                    );
                    while let Some(item) = entries.next().await {
                        let entry = item?;
                        next = entry.id + 1;
                        if tx.send(Ok(entry)).await.is_err() {
                            return Ok(());
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(poll_interval) => {}
                        _ = tx.closed() => return Ok(()),
                    }
                    let listing = io.list_after(last.sequence).await?;
                    for listed in listing.objects {
                        if let std::collections::btree_map::Entry::Vacant(slot) =
                            pending.entry(listed.sequence)
                        {
                            slot.insert(io.read_summary(&listed).await?);
                        }
                    }
                    let headers: BTreeMap<u64, Header> =
                        pending.iter().map(|(s, o)| (*s, o.header)).collect();
                    let mut extended = Vec::new();
                    let mut at = last;
                    while let Some(sequence) = crate::catalog::next_on_chain(at, &headers) {
                        let epoch = headers.get(&sequence).map_or(0, |h| h.epoch);
                        extended.push(sequence);
                        at = Link { sequence, epoch };
                    }
                    if !extended.is_empty() {
                        let mut catalog = catalog.write().unwrap_or_else(|p| p.into_inner());
                        for sequence in &extended {
                            if let Some(o) = pending.get(sequence) {
                                catalog.insert(&o.header, &o.footer.records, o.length)?;
                            }
                        }
                        last = at;
                    }
                    // What lies at or below the chain end can never extend it.
                    pending = pending.split_off(&(last.sequence + 1));
                }
            };
            if let Err(e) = run.await {
                let _ = tx.send(Err(e)).await;
            }
        }
        .instrument(span),
    );
    stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}
