//! One error type for the whole crate. Each variant says what went wrong and, for a
//! failed append, whether its entries may still become durable ([`Durability`]), so a
//! caller knows whether retrying could duplicate them.

use std::sync::Arc;

use crate::format::FormatError;

/// Whether the entries of a failed append may still become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Refused before any create was sent: the entries will never be replayed.
    NotWritten,
    /// A create holding the entries was sent and its outcome is not known: the entries
    /// may be replayed (whole, never in part, at most once) or never. A retry could
    /// duplicate them.
    MayBeDurable,
}

/// Why an epoch ended (DESIGN.md, "Ending an epoch").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EpochEndReason {
    /// A late object of an earlier instance (a lower epoch) holds the sequence.
    StaleTail {
        /// The epoch found at the sequence.
        found_epoch: u64,
    },
    /// The create's outcome was still unknown when the retry bound was spent.
    UnknownOutcome,
    /// The create took longer than `max_create_duration`.
    CreateTooSlow,
    /// An earlier object of this epoch failed, so later ones cannot be acknowledged.
    EarlierObjectFailed,
    /// The previous create of this epoch started longer ago than `reclaim_grace -
    /// max_create_duration`: its successor's key may have been reclaimed by a newer
    /// instance, so nothing more is written under this epoch.
    PredecessorTooOld,
}

impl std::fmt::Display for EpochEndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EpochEndReason::StaleTail { found_epoch } => {
                write!(f, "a late object of epoch {found_epoch} holds the sequence")
            }
            EpochEndReason::UnknownOutcome => {
                write!(f, "the create's outcome is still unknown after every retry")
            }
            EpochEndReason::CreateTooSlow => write!(f, "the create took too long"),
            EpochEndReason::EarlierObjectFailed => {
                write!(f, "an earlier object of the epoch failed")
            }
            EpochEndReason::PredecessorTooOld => write!(
                f,
                "the previous create of the epoch is too old for the next one to be safe"
            ),
        }
    }
}

/// Which bound refused a request with [`Error::Backpressure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackpressureLimit {
    /// `max_pending_bytes`: payload bytes admitted and not yet acknowledged, when the
    /// caller asked not to wait.
    PendingBytes,
    /// Requests waiting for the WAL to open (or reopen after an epoch ended), or appends
    /// waiting for room under `max_pending_bytes`: a count.
    QueuedRequests,
}

impl std::fmt::Display for BackpressureLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackpressureLimit::PendingBytes => write!(f, "bytes pending (max_pending_bytes)"),
            BackpressureLimit::QueuedRequests => write!(f, "requests queued"),
        }
    }
}

/// The crate's error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of range.
    #[error("invalid configuration: {field}: {reason}")]
    Config {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The WAL prefix is not a valid relative key prefix.
    #[error("invalid prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A store URL could not be turned into a store.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store cannot create an object only if it is absent; the WAL cannot fence
    /// without it and refuses the store.
    #[error("store {store} does not support conditional creates (PutMode::Create); the WAL cannot fence earlier instances on it")]
    ConditionalCreateUnsupported {
        /// The store's description.
        store: String,
    },
    /// An object under the prefix is damaged or malformed. Nothing is dropped silently:
    /// recovery stops and names the key.
    #[error("damaged object {key}: {source}")]
    CorruptObject {
        /// The object's key.
        key: String,
        /// The rule it violates.
        #[source]
        source: FormatError,
    },
    /// An object's header sequence differs from the sequence in its key.
    #[error("object {key} holds sequence {found}, its key says {expected}")]
    SequenceMismatch {
        /// The object's key.
        key: String,
        /// The sequence in the key.
        expected: u64,
        /// The sequence in the header.
        found: u64,
    },
    /// A region's segment failed its CRC or decoding (after one retry).
    #[error("damaged segment of region {region} in {key}: {source}")]
    CorruptSegment {
        /// The object's key.
        key: String,
        /// The region.
        region: u64,
        /// The rule it violates.
        #[source]
        source: FormatError,
    },
    /// The chain is inconsistent (a sequence held twice, a region's ids not increasing).
    #[error("inconsistent chain at sequence {sequence}: {reason}")]
    InconsistentChain {
        /// The sequence where it was found.
        sequence: u64,
        /// What is wrong.
        reason: String,
    },
    /// No entry id is left above `above`: ids (sequence plus id offset, shifted by 20
    /// bits) end at 2^64.
    #[error("no entry id is left above {above}: entry ids end at 2^64")]
    IdsExhausted {
        /// The id every later one would have to be above.
        above: u64,
    },
    /// An acquire of a region this log released at an id above the last id the earlier
    /// owner gave: this log's own piece would come before the earlier one.
    #[error("region {region}: this log holds id {own}, above the acquired last id {last_id}")]
    AcquireBelowOwnIds {
        /// The region.
        region: u64,
        /// The last id the acquire named.
        last_id: u64,
        /// The largest id this log holds of the region.
        own: u64,
    },
    /// An append to a region this log released, or a second release of it (DESIGN.md
    /// "Regions moving between nodes"): another node owns it now. Nothing was written.
    #[error(
        "region {region} was released by this log: its last id here {:?}, its next owner \
         acquires above {}",
        released.last_id,
        released.acquire_above
    )]
    RegionReleased {
        /// The region.
        region: u64,
        /// What its release answered: its last id here, and what the next owner
        /// acquires above.
        released: Released,
    },
    /// A release of a region this log holds nothing of (DESIGN.md "Regions moving
    /// between nodes"): no entry on its chain, in flight or in the open batch, and no
    /// earlier piece recorded. Nothing changed: in particular this log does not refuse
    /// the region's appends (it has no record of owning it; the node refuses them, as
    /// for any region it does not own). A region whose entries here were all reclaimed
    /// counts as unknown: its next owner acquires above the region's flushed id and
    /// `acquire_above`.
    #[error(
        "region {region} is unknown to this log: no entry or earlier piece of it here (a \
         next owner acquires above {acquire_above})"
    )]
    ///
    /// No longer returned by a release: a release of a region this log holds nothing
    /// of records it with no last id, and fences it as any release does (DESIGN.md
    /// "Regions moving between nodes"). Kept so that code matching it still compiles.
    UnknownRegion {
        /// The region.
        region: u64,
        /// An id above every id this log handed out, as [`Released::acquire_above`]: an
        /// append of the region that failed `MayBeDurable` here and never landed had an
        /// id below it.
        acquire_above: u64,
    },
    /// A catch-up through an id its source's chain does not hold for the region: the
    /// source released the region at another last id, or holds a later entry of it
    /// without this one (DESIGN.md "Regions moving between nodes").
    #[error("id {id} of region {region} is not on the source's chain (found: {found:?})")]
    NotOnChain {
        /// The region.
        region: u64,
        /// The id asked for.
        id: u64,
        /// What the source holds instead: the last id it released the region at, or the
        /// first id of the region past `id`.
        found: Option<u64>,
    },
    /// A follow or catch-up of a region its source log was opened without
    /// ([`SourceLog::open_regions`](crate::SourceLog::open_regions)): it keeps no
    /// segment of the region.
    #[error("region {region} is not among the regions this source log keeps")]
    NotKept {
        /// The region.
        region: u64,
    },
    /// An append to a region the log keeps for itself: the control region (`2^64 - 1`,
    /// FORMAT.md "Control entries").
    #[error("region {region} is reserved for the log's own control entries")]
    ReservedRegion {
        /// The region.
        region: u64,
    },
    /// An append with no entries, or a region part with no entries.
    #[error("empty append: every append holds at least one entry per region part")]
    EmptyAppend,
    /// An entry larger than `max_entry_bytes`.
    #[error("entry of {len} bytes for region {region} exceeds max_entry_bytes ({max})")]
    EntryTooLarge {
        /// The region.
        region: u64,
        /// The entry's length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// An append with more than 2^20 entries for one region: no object can hold it.
    #[error(
        "append holds {count} entries for region {region}; an object holds at most 2^20 per region"
    )]
    TooManyEntries {
        /// The region.
        region: u64,
        /// Its entries in the append.
        count: u64,
    },
    /// An append that cannot fit one object even alone.
    #[error("append of {bytes} encoded bytes exceeds the object limit max_batch_bytes ({max})")]
    AppendTooLarge {
        /// Its encoded size alone in an object.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The open batch cannot take this append: flush, then append again.
    #[error("the batch is full: flush it, then append again")]
    BatchFull,
    /// Another instance opened the prefix above this one. Terminal: this instance accepts
    /// nothing more and must not be restarted by itself.
    #[error("fenced: sequence {sequence} is held by epoch {fenced_by} above this instance's epoch {epoch}")]
    Fenced {
        /// This instance's epoch.
        epoch: u64,
        /// The sequence where the newer instance was found.
        sequence: u64,
        /// The newer instance's epoch.
        fenced_by: u64,
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// The epoch ended; the instance must open again before writing. Retryable.
    #[error("epoch {epoch} ended at sequence {sequence}: {reason}")]
    EpochEnded {
        /// The epoch that ended.
        epoch: u64,
        /// The sequence whose create ended it.
        sequence: u64,
        /// Why.
        reason: EpochEndReason,
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// The store holds an object of this epoch at our sequence with other bytes, or a
    /// damaged one (DESIGN.md's outcome table): impossible by construction, so the
    /// instance stops writing. Tampering or a store bug.
    #[error("poisoned: {reason}")]
    Poisoned {
        /// What was found.
        reason: String,
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// An object, claim or opening object could not be encoded (a limit the batch
    /// should have enforced): a bug in this crate. Nothing was sent.
    #[error("cannot encode {what}: {reason}")]
    EncodeFailed {
        /// Which object.
        what: String,
        /// The format's error.
        reason: String,
    },
    /// An object the writer found durable does not fit the chain it keeps (a sequence
    /// twice, a region's ids not increasing): a bug in this crate. Its appends fail
    /// rather than be acknowledged; they may be replayed.
    #[error("object {sequence} does not fit the chain: {reason}")]
    CommitRefused {
        /// The object.
        sequence: u64,
        /// The catalog's error.
        reason: String,
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// The open lost to concurrent openers or unknown outcomes too many times.
    #[error("open did not succeed after {attempts} attempts: {last}")]
    OpenContended {
        /// How many attempts were made.
        attempts: u32,
        /// What stopped the last one.
        last: String,
    },
    /// The open ended without an answer (it panicked); the WAL opens again.
    #[error("the open failed unexpectedly: {reason}")]
    OpenPanicked {
        /// What was seen.
        reason: String,
    },
    /// A request to the store failed.
    #[error("store {op} of {key} failed: {source}")]
    Store {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The store's error.
        #[source]
        source: Arc<object_store::Error>,
    },
    /// The store refused a request for permission or authentication (a missing
    /// permission, wrong or expired credentials; for a local directory, a permission
    /// error from the filesystem). Definite: a refused create wrote nothing. Not
    /// retryable as it is: fix the credentials or the bucket's policy, then open again.
    #[error("store {op} of {key} refused (permission or authentication): {source}")]
    AccessDenied {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The store's error.
        #[source]
        source: Arc<object_store::Error>,
    },
    /// An open as the writer found no WAL object under the prefix, and
    /// `create_if_missing` is off: nothing was written. Not retryable as it is: check the
    /// URL and prefix (a typo?), or set `create_if_missing` to start a new WAL there.
    #[error(
        "no WAL at {location}: nothing to recover, and create_if_missing is off \
         (a typo in the URL or prefix? set create_if_missing to start a new WAL there)"
    )]
    WalMissing {
        /// The store and prefix opened.
        location: String,
    },
    /// A writer's open of a prefix that holds a closed opening object: another node
    /// fenced it for good and took its regions over (DESIGN.md "A node's regions after
    /// it died"). Terminal: this node must not write the prefix again (its supervisor
    /// does not reopen, and `create_if_missing` never starts a WAL there); what it
    /// acknowledged is on the fenced chain, which read-only opens still read. Rejoin on
    /// a new prefix.
    #[error(
        "{location} was fenced for good (closed object {sequence}): its regions were \
         taken over; rejoin on a new prefix"
    )]
    PrefixClosed {
        /// The store and prefix opened.
        location: String,
        /// The closed opening object's sequence.
        sequence: u64,
    },
    /// A retirement of a prefix that is not fenced (no closed opening object a quorum
    /// holds): only a fenced prefix is retired. Nothing was deleted.
    #[error("{location} is not fenced: fence it before retiring it")]
    NotFenced {
        /// The store and prefix.
        location: String,
    },
    /// A retirement asked before `reclaim_grace` (plus a margin of
    /// `max_create_duration`) passed since the fence's closed object landed (by the
    /// store's clock): a create of the old owner stalled in the air could still land on
    /// a key it frees. Nothing was deleted; ask again later.
    #[error(
        "{location} was fenced {since:?} ago: retire it no earlier than {grace:?} after \
         the fence (reclaim_grace and a margin of max_create_duration)"
    )]
    RetireTooEarly {
        /// The store and prefix.
        location: String,
        /// How long ago the closed object landed.
        since: std::time::Duration,
        /// The wait required: `reclaim_grace` plus `max_create_duration`.
        grace: std::time::Duration,
    },
    /// A retirement of a prefix that another prefix's log still names as a piece of a
    /// region (its owner has not flushed past it yet). Nothing was deleted; ask again
    /// once that owner flushed the region.
    #[error("{location} holds a piece of region {region} that {prefix} still needs")]
    PieceStillNeeded {
        /// The store and prefix to retire.
        location: String,
        /// The prefix whose holdings name it.
        prefix: String,
        /// The region.
        region: u64,
    },
    /// A request to the store had not answered within `request_timeout`: for a create,
    /// its outcome is unknown; for a read, it failed.
    #[error("store {op} of {key} did not answer within {after:?}")]
    RequestTimeout {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The timeout.
        after: std::time::Duration,
    },
    /// Over several stores, a request that fewer than a quorum of them answered
    /// definitely (the rest down, skipped while down, or still unanswered): for a create,
    /// its outcome is unknown; for a read or listing, it failed. Retry later. A create
    /// whose quorum only throttle replies withheld (`throttled` above zero) is a throttle
    /// reply, retried as one (DESIGN.md "Throttled stores").
    #[error("store {op} of {key}: {answered} of {stores} stores answered, a quorum is {quorum}{note}; last error: {last}", note = throttled_note(*.throttled))]
    NoQuorum {
        /// The operation.
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// Stores that answered definitely.
        answered: usize,
        /// Stores in all.
        stores: usize,
        /// The quorum.
        quorum: usize,
        /// For a create: the stores that answered with a throttle reply (the store
        /// refused the request for its rate), when those replies alone withheld the
        /// quorum, that is, had those stores created the object it would have been
        /// decided; 0 otherwise, and for every other request.
        throttled: usize,
        /// The last store error seen, or why a store was not asked.
        last: String,
    },
    /// A bound on what the WAL holds was reached ([`BackpressureLimit`] says which) and
    /// the request was refused rather than let memory grow. Nothing was sent; retry later.
    #[error("backpressure: {held} {limit} held, limit {max}")]
    Backpressure {
        /// The bound that was reached.
        limit: BackpressureLimit,
        /// What was held when the request came (in the limit's unit).
        held: u64,
        /// The bound.
        max: u64,
    },
    /// The writer failed (panicked) with the append admitted; a new epoch replaces it.
    #[error("the writer failed with the append admitted")]
    WriterFailed {
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// The instance was opened read-only.
    #[error("the instance is read-only")]
    ReadOnly,
    /// The WAL is stopped (or stopping) and takes no more appends.
    #[error("the WAL is stopped")]
    Stopped {
        /// Whether the failed append's entries may still be replayed.
        durability: Durability,
    },
    /// A call on a handle with a per-call timeout did not answer in time. The caller
    /// stopped waiting; the request was not withdrawn and may still be served. A timed-out
    /// append is [`Durability::MayBeDurable`]: it may still be admitted and become
    /// durable (and be replayed), so retrying it could duplicate its entries.
    #[error("{op} did not answer within {after:?}")]
    CallTimeout {
        /// The call (`append`, `read`, `ready`, ...).
        op: &'static str,
        /// The handle's timeout.
        after: std::time::Duration,
        /// Whether the call's entries may still be replayed: `MayBeDurable` for an
        /// append, `NotWritten` for every other call.
        durability: Durability,
    },
}

/// What [`Error::NoQuorum`]'s message says of its throttle replies.
fn throttled_note(throttled: usize) -> String {
    match throttled {
        0 => String::new(),
        n => format!(" ({n} refused it for the store's request rate)"),
    }
}

impl Error {
    /// Whether the entries of the failed append may still become durable.
    pub fn durability(&self) -> Durability {
        match self {
            Error::Fenced { durability, .. }
            | Error::EpochEnded { durability, .. }
            | Error::Poisoned { durability, .. }
            | Error::CommitRefused { durability, .. }
            | Error::Stopped { durability }
            | Error::WriterFailed { durability }
            | Error::CallTimeout { durability, .. } => *durability,
            _ => Durability::NotWritten,
        }
    }

    /// What the caller does about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. }
            | Error::InvalidPrefix { .. }
            | Error::InvalidUrl { .. }
            | Error::EmptyAppend
            | Error::EntryTooLarge { .. }
            | Error::TooManyEntries { .. }
            | Error::AppendTooLarge { .. }
            | Error::IdsExhausted { .. }
            | Error::ReservedRegion { .. }
            | Error::RegionReleased { .. }
            | Error::UnknownRegion { .. }
            | Error::NotOnChain { .. }
            | Error::NotKept { .. }
            | Error::AcquireBelowOwnIds { .. }
            | Error::ReadOnly
            | Error::NotFenced { .. }
            | Error::WalMissing { .. } => ErrorKind::FixInput,
            Error::Backpressure { .. }
            | Error::Store { .. }
            | Error::RequestTimeout { .. }
            | Error::NoQuorum { .. }
            | Error::CallTimeout { .. }
            | Error::OpenContended { .. }
            | Error::OpenPanicked { .. }
            | Error::RetireTooEarly { .. }
            | Error::PieceStillNeeded { .. }
            | Error::BatchFull => ErrorKind::Retry,
            Error::EpochEnded { .. } | Error::WriterFailed { .. } => ErrorKind::Reopen,
            Error::Fenced { .. }
            | Error::PrefixClosed { .. }
            | Error::AccessDenied { .. }
            | Error::ConditionalCreateUnsupported { .. }
            | Error::CorruptObject { .. }
            | Error::SequenceMismatch { .. }
            | Error::CorruptSegment { .. }
            | Error::InconsistentChain { .. }
            | Error::Poisoned { .. }
            | Error::EncodeFailed { .. }
            | Error::CommitRefused { .. }
            | Error::Stopped { .. } => ErrorKind::Escalate,
        }
    }

    /// Whether the same request may succeed later (after a new open, or when the store
    /// recovers): the kinds [`Retry`](ErrorKind::Retry) and
    /// [`Reopen`](ErrorKind::Reopen). `Fenced`, bad input and damaged data are not.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind(), ErrorKind::Retry | ErrorKind::Reopen)
    }

    /// Whether the store said the object does not exist: for a WAL object, the reclaimer
    /// (this node's or the owner's) deleted it, below a floor.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Store { source, .. }
            if matches!(**source, object_store::Error::NotFound { .. }))
    }

    pub(crate) fn store(op: &'static str, key: impl ToString, source: object_store::Error) -> Self {
        if access_denied(&source) {
            return Error::AccessDenied {
                op,
                key: key.to_string(),
                source: Arc::new(source),
            };
        }
        Error::Store {
            op,
            key: key.to_string(),
            source: Arc::new(source),
        }
    }

    /// This error as seen by a waiter whose entries have the given durability.
    pub fn with_durability(&self, durability: Durability) -> Self {
        let mut e = self.clone();
        match &mut e {
            Error::Fenced { durability: d, .. }
            | Error::EpochEnded { durability: d, .. }
            | Error::Poisoned { durability: d, .. }
            | Error::CommitRefused { durability: d, .. }
            | Error::Stopped { durability: d }
            | Error::WriterFailed { durability: d }
            | Error::CallTimeout { durability: d, .. } => *d = durability,
            _ => {}
        }
        e
    }
}

/// A release's answer (DESIGN.md "Regions moving between nodes"): where the region's
/// piece in this log ends, and what the next owner's ids must be above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The region's largest id on this log's chain: a catch-up from this log ends
    /// here. `None` when the log holds no entry of it.
    pub last_id: Option<u64>,
    /// At least `last_id` and every id this log handed out for the region, acknowledged
    /// or not (an append that failed `MayBeDurable` had ids too, whose object may never
    /// land): the next owner acquires the region above it, so no id of the region
    /// ever names two entries.
    pub acquire_above: u64,
    /// The sequence of the object that records the release (its snapshot), when this
    /// answer comes from the release itself: every entry of the region on the chain is
    /// at or below it, so a catch-up probes up to it at once.
    pub sequence: Option<u64>,
}

/// What a caller does about an error ([`Error::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input or the configuration is wrong (an append, a URL, a prefix, a missing
    /// WAL): fix it; sent again as it is, it fails the same way. Nothing was written.
    FixInput,
    /// Transient (a bound reached, the store's error or silence, a lost open): retry
    /// later; for an append, mind [`Error::durability`] first.
    Retry,
    /// The epoch or the writer ended: open again (the actor runtime does it by itself;
    /// `ObjectStoreLogStore::reopen`), then retry, minding [`Error::durability`].
    Reopen,
    /// Stop writing and escalate: another instance owns the prefix, the store refuses
    /// access or conditional creates, data is damaged, a bug, or the WAL was stopped.
    Escalate,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether the store refused a request for permission or authentication: `object_store`'s
/// `PermissionDenied` and `Unauthenticated`, or an I/O permission error anywhere in the
/// error's sources (how a local directory reports one, wrapped as `Generic`).
pub(crate) fn access_denied(e: &object_store::Error) -> bool {
    if matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return true;
            }
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> Box<std::io::Error> {
        Box::new(std::io::Error::new(kind, "io"))
    }

    /// The store's refusals, in each shape `object_store` reports one, are told from every
    /// other error (docs/OPERATIONS.md, "What each store error means").
    #[test]
    fn refusals_are_told_from_other_store_errors() {
        use std::io::ErrorKind::{Other, PermissionDenied};
        let path = || "wal/1".to_string();
        let refused = [
            object_store::Error::PermissionDenied {
                path: path(),
                source: io(Other),
            },
            object_store::Error::Unauthenticated {
                path: path(),
                source: io(Other),
            },
            // LocalFileSystem: its own error inside `Generic`, an I/O error inside that.
            object_store::Error::Generic {
                store: "LocalFileSystem",
                source: io(PermissionDenied),
            },
        ];
        for e in refused {
            let e = Error::store("create", "wal/1", e);
            assert!(
                matches!(e, Error::AccessDenied { op: "create", .. }),
                "{e:?}"
            );
            assert!(!e.is_retryable());
        }
        let other = [
            object_store::Error::Generic {
                store: "S3",
                source: io(Other),
            },
            object_store::Error::NotFound {
                path: path(),
                source: io(Other),
            },
        ];
        for e in other {
            let e = Error::store("get", "wal/1", e);
            assert!(matches!(e, Error::Store { .. }), "{e:?}");
            assert!(e.is_retryable());
        }
    }

    /// Each kind says what the caller does; retryable is exactly Retry and Reopen.
    #[test]
    fn every_error_has_the_kind_its_caller_acts_on() {
        use ErrorKind::*;
        let nw = Durability::NotWritten;
        let cases = [
            (Error::EmptyAppend, FixInput),
            (Error::ReservedRegion { region: u64::MAX }, FixInput),
            (
                Error::RegionReleased {
                    region: 7,
                    released: Released {
                        last_id: Some(9),
                        acquire_above: 9,
                        sequence: None,
                    },
                },
                FixInput,
            ),
            (
                Error::NotOnChain {
                    region: 7,
                    id: 9,
                    found: None,
                },
                FixInput,
            ),
            (
                Error::UnknownRegion {
                    region: 7,
                    acquire_above: 9,
                },
                FixInput,
            ),
            (Error::ReadOnly, FixInput),
            (
                Error::WalMissing {
                    location: "x".into(),
                },
                FixInput,
            ),
            (
                Error::PrefixClosed {
                    location: "x".into(),
                    sequence: 9,
                },
                Escalate,
            ),
            (
                Error::NotFenced {
                    location: "x".into(),
                },
                FixInput,
            ),
            (
                Error::RetireTooEarly {
                    location: "x".into(),
                    since: std::time::Duration::from_secs(1),
                    grace: std::time::Duration::from_secs(600),
                },
                Retry,
            ),
            (
                Error::PieceStillNeeded {
                    location: "x".into(),
                    prefix: "node-b".into(),
                    region: 7,
                },
                Retry,
            ),
            (Error::BatchFull, Retry),
            (
                Error::OpenContended {
                    attempts: 8,
                    last: "x".into(),
                },
                Retry,
            ),
            (
                Error::EpochEnded {
                    epoch: 2,
                    sequence: 3,
                    reason: EpochEndReason::UnknownOutcome,
                    durability: Durability::MayBeDurable,
                },
                Reopen,
            ),
            (Error::WriterFailed { durability: nw }, Reopen),
            (
                Error::Fenced {
                    epoch: 2,
                    sequence: 3,
                    fenced_by: 5,
                    durability: nw,
                },
                Escalate,
            ),
            (
                Error::Poisoned {
                    reason: "x".into(),
                    durability: nw,
                },
                Escalate,
            ),
            (
                Error::EncodeFailed {
                    what: "x".into(),
                    reason: "y".into(),
                },
                Escalate,
            ),
            (Error::Stopped { durability: nw }, Escalate),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e:?}");
            assert_eq!(e.is_retryable(), matches!(kind, Retry | Reopen), "{e:?}");
        }
    }
}
