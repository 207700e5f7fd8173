//! Configuration: every knob of the WAL in one validated [`Config`].
//!
//! A node builds one `Config` per WAL prefix. [`Config::validate`] runs before anything
//! touches the store (every open and every spawn), and its error names the bad field, so
//! a bad value fails fast instead of misbehaving under load. The timing fields
//! (`max_create_duration`, `reclaim_grace` and the [`link_window`](Config::link_window)
//! they imply) are the assumption reclaiming rests on (DESIGN.md, "Reclaiming space").
//!
//! A node builds it in code with chained setters (`Config::new("node-7")
//! .with_max_batch_bytes(8 << 20)`), one `with_<field>` per field, which check nothing
//! ([`Config::validate`] does), or reads it from its configuration file.
//!
//! ## In a configuration file (feature `serde`)
//!
//! `Config` and `WalSection` implement `Deserialize`. The field names are `Config`'s.
//! Durations are humantime strings (`"10ms"`, `"2s"`, `"10min"`); sizes are a number of
//! bytes or a string with an IEC or SI unit (`"8MiB"` is 8 × 2^20 bytes, `"8MB"`
//! 8 × 10^6); counts are integers; `retry`, `hedge_after` and `corrupt_segment_policy`
//! take the forms their types document. Every field but the prefix may be left out and
//! then takes [`Config::new`]'s value. A field this version does not know is refused
//! with its name, so a misspelt knob (or `flush_interval`, which sealing no longer has:
//! `min_object_interval` paces it) fails the read instead of being ignored. The values
//! are validated once read: a bad one fails the read with the message of the
//! [`Error::Config`] (or [`Error::InvalidPrefix`]) that [`Config::validate`] returns for
//! it; a deserializer carries only that message, not the typed error.
//!
//! Two shapes: `Config` itself (the knobs and `prefix`; the node builds the store
//! apart) and [`WalSection`](crate::WalSection) (the knobs and `url`, naming the store
//! and the prefix in one string, as [`split_store_url`](crate::split_store_url) splits
//! it). Both `Deserialize` impls are in the crate's `section` module, above the stores
//! a `WalSection` builds; this module uses none of them.

use object_store::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::format;
use crate::transform::{Cipher, Compression, KeyProvider, Keys};

/// What a read of a region does with a segment of it whose CRC or decoding fails twice
/// ([`Error::CorruptSegment`]), alike in a read, a follow and each region of a replay.
/// Other regions are never affected, and any other error (a failed GET) ends the read
/// under either policy. In a file: `"fail"` or `"skip"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum CorruptSegmentPolicy {
    /// The region's read yields the error and ends (in a replay, only that region's part
    /// ends; the other regions go on).
    #[default]
    Fail,
    /// The region's read yields the error as a report of the hole and goes on with the
    /// next segment.
    Skip,
}

/// What recovery does with an object the chain may need (at or above the floor of the
/// chain it would choose) that cannot be read: damaged, or truncated. In a file:
/// `"strict"` or `"point-in-time"`, after RocksDB's `WALRecoveryMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The default: the open fails with [`Error::CorruptObject`] (or the store's error)
    /// naming the object, and nothing is dropped. The error is not retryable: an
    /// operator looks (`walctl chain`, `walctl verify`) and chooses.
    #[default]
    Strict,
    /// Recovery goes on without the objects it cannot read: the chain is the best one
    /// among the readable objects, which ends before the damage, and a writer's opening
    /// object goes above everything present (the damaged objects included), fencing as
    /// always. What that gave up is reported:
    /// [`RecoveryReport::given_up_damaged`](crate::RecoveryReport::given_up_damaged)
    /// (the unreadable objects, with the entry ids each may have held: its header, with
    /// its id offset, cannot be read) and
    /// [`RecoveryReport::given_up`](crate::RecoveryReport::given_up) (readable objects
    /// left off the chain because their links run through one of them, with the entry
    /// ids they held). Acknowledged entries may be among them: an operator's explicit
    /// choice, for a node that must come back when the damaged object cannot be repaired.
    PointInTime,
}

/// `Config::segment_cache_bytes` by default.
pub(crate) const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// `Config::segment_cache_region_bytes` by default.
pub(crate) const DEFAULT_CACHE_REGION_BYTES: u64 = 4 * 1024 * 1024;
/// `Config::source_idle_close` by default: long enough for the catch-ups of one move and
/// for a coordinator that moves regions every few seconds, short enough that a node
/// that took its regions and moved on soon stops polling their source.
const DEFAULT_SOURCE_IDLE_CLOSE: Duration = Duration::from_secs(30);
/// The shortest `Config::source_idle_close`: the runtime sweeps at half of it.
const MIN_SOURCE_IDLE_CLOSE: Duration = Duration::from_secs(1);

/// The largest duration any field takes: a year (a retention-minded node may keep
/// objects for weeks through `reclaim_grace`).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The largest count (concurrency, attempts) any field takes.
pub const MAX_COUNT: u64 = 4096;
/// The largest byte budget any field takes: 64 GiB.
pub const MAX_BYTES: u64 = 64 << 30;
// A decoder without a configuration bounds a segment by the same size.
const _: () = assert!(MAX_BYTES == format::UNCONFIGURED_MAX_DECODED);

fn too_large(field: &'static str, reason: &str) -> Result<()> {
    Err(Error::Config {
        field,
        reason: reason.to_string(),
    })
}

/// Bounds on retrying a create whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt, and the most an adaptive first wait may be
    /// ([`first_wait`](Self::first_wait)); doubles each time (from the third attempt
    /// on, whatever the first wait was).
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// How the wait before a failed create's first retry is chosen.
    pub first_wait: FirstRetryWait,
}

/// How the wait before a failed create's first retry is chosen (throttle replies are
/// paced apart: DESIGN.md "Throttled stores").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FirstRetryWait {
    /// About the store's recent median create latency (between half of it and all of
    /// it, jittered per object), at least [`ADAPTIVE_FIRST_WAIT_MIN`] and at most
    /// `initial_backoff`; `initial_backoff` until the store's creates have answered
    /// often enough for a median. Later retries wait as under `Fixed`, so a run of
    /// faults spends the same time before the epoch ends. A fault on a store that answers in 20 ms is retried
    /// after about 15 ms, not after a fixed wait tuned for another store.
    #[default]
    Adaptive,
    /// Always `initial_backoff`.
    Fixed,
}

/// The shortest adaptive first wait ([`FirstRetryWait::Adaptive`]): a store that
/// answers in microseconds (memory, a local directory) still gets a breath.
pub const ADAPTIVE_FIRST_WAIT_MIN: Duration = Duration::from_millis(1);

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            first_wait: FirstRetryWait::Adaptive,
        }
    }
}

impl RetryPolicy {
    /// `max_attempts` in all, waiting `initial_backoff` before the second, doubling up
    /// to `max_backoff`.
    pub fn new(max_attempts: u32, initial_backoff: Duration, max_backoff: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            initial_backoff,
            max_backoff,
            first_wait: FirstRetryWait::Adaptive,
        }
    }

    /// With the first retry's wait chosen as `first_wait` says.
    #[must_use]
    pub fn with_first_wait(mut self, first_wait: FirstRetryWait) -> Self {
        self.first_wait = first_wait;
        self
    }

    /// With `max_attempts` in all, the first included.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// With `initial_backoff` before the second attempt.
    #[must_use]
    pub fn with_initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.initial_backoff = initial_backoff;
        self
    }

    /// With `max_backoff` as the longest wait between attempts.
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// The wait after failed attempt `attempt` (1-based), from `initial_backoff`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// The wait after a create's failed attempt `attempt` (1-based), before jitter:
    /// under [`FirstRetryWait::Adaptive`] the first is the store's recent median create
    /// latency (`create_median`, if known) within [`ADAPTIVE_FIRST_WAIT_MIN`] and
    /// `initial_backoff`; every later one is [`backoff`](Self::backoff)'s, so the retry
    /// budget in time (about 5 s by default) does not shrink on a fast store.
    pub fn create_backoff(&self, attempt: u32, create_median: Option<Duration>) -> Duration {
        match (self.first_wait, create_median) {
            (FirstRetryWait::Adaptive, Some(median)) if attempt <= 1 => median
                .min(self.initial_backoff)
                .max(ADAPTIVE_FIRST_WAIT_MIN.min(self.initial_backoff)),
            _ => self.backoff(attempt),
        }
    }
}

/// Configuration, validated by [`Config::validate`] (each bad value is an error naming
/// its field).
///
/// ```
/// use std::time::Duration;
///
/// use object_store_wal::{Config, Error};
///
/// let config = Config::new("node-7/wal").with_min_object_interval(Duration::from_millis(10));
/// assert!(config.validate().is_ok());
/// match Config::new("node-7/wal").with_max_in_flight(0).validate() {
///     Err(Error::Config { field, .. }) => assert_eq!(field, "max_in_flight"),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The WAL prefix: keys are `<prefix>/<20-digit sequence>.wal`.
    pub prefix: String,
    /// The PUT-rate bound, the cost control: objects' creates start in slots this far
    /// apart, at most one per interval over any stretch of time; two starts are never
    /// closer than the interval less 1 ms (a start that a timer tick delayed does not
    /// delay the next). Zero: no bound.
    pub min_object_interval: Duration,
    /// The largest object, header to trailer; a batch is sealed before it grows past it.
    /// Counted with a 56-byte header: an object that carries an id offset (a region
    /// moved in, FORMAT.md version 3) may be 8 bytes longer.
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
    /// When a create, or a summary or segment GET, that has not answered is sent again
    /// alongside the first (a hedged request).
    pub hedge_after: HedgeAfter,
    /// The longest any single request may take; one that has not answered by then is an
    /// unknown outcome (a create) or a failed read, and follows the usual rules. A
    /// listing, many pages long, is bounded by its progress instead: each key must come
    /// within this of the one before. Once the store's latencies are known, a data
    /// create up to 1 MiB is given up sooner (an unknown outcome, retried with the same
    /// bytes): after 8 times the recent 99th percentile, at least 1 s, at most this (see
    /// the store's hedging rules).
    pub request_timeout: Duration,
    /// Objects a replay of many regions fetches at once.
    pub replay_concurrency: usize,
    /// Bytes a replay of many regions may hold at once: fetched and not yet consumed
    /// (an object larger than this, written under a larger `max_batch_bytes`, is
    /// fetched alone).
    pub replay_budget_bytes: u64,
    /// Whether an open as the writer may start a new WAL where the prefix holds no WAL
    /// object. Off by default (RocksDB's `create_if_missing`): a typo in a URL or prefix
    /// then fails the open with [`Error::WalMissing`] naming
    /// the location, instead of starting an empty WAL with nothing to replay. Read-only
    /// opens never create.
    pub create_if_missing: bool,
    /// What recovery does with an unreadable object the chain may need
    /// ([`RecoveryMode`]): strict by default.
    pub recovery_mode: RecoveryMode,
    /// The compression tried on each segment ([`crate::transform`]); off by default. A
    /// segment that does not shrink is stored plain. Readers need no setting: each
    /// segment names its codec.
    pub compression: Compression,
    /// The node's keys: with them every segment written is encrypted with the current
    /// key, and encrypted segments are read with the key they name
    /// ([`crate::transform`]). None by default: nothing is encrypted, and an encrypted
    /// segment cannot be read (its reads fail, naming the key id).
    pub encryption_keys: Option<Keys>,
    /// The cipher new segments are encrypted with, when there are `encryption_keys`
    /// ([`Cipher`]): by default [`Cipher::Auto`], XAES-256-GCM for a new WAL where the
    /// CPU has AES and carry-less multiplication instructions, else XChaCha20-Poly1305;
    /// an existing WAL last written with XChaCha20-Poly1305 keeps it under `Auto`
    /// (releases before XAES-256-GCM cannot read it; name the cipher to move). Readers
    /// need no setting: each segment names its cipher, so a WAL's older objects stay
    /// readable whichever cipher its newer ones use.
    pub cipher: Cipher,
    /// Bytes of verified segments kept in memory for reads (`internal::store::cache`): each
    /// region's entries of every object the writer acknowledges, and every segment a
    /// read fetched, least recently used out first. A read, follow or re-read of what
    /// it holds sends no request. 64 MiB by default; 0 keeps nothing.
    pub segment_cache_bytes: u64,
    /// Of `segment_cache_bytes`, the most one region's segments may hold (its least
    /// recently used out first), so that a hot region does not evict the others' tails.
    /// 4 MiB by default.
    pub segment_cache_region_bytes: u64,
    /// Region readers the runtime (the actors crate) keeps at most: one per region read
    /// or followed recently, each holding its region's tail; past this the least
    /// recently used is retired (its follows go on). 64 by default; 1 to 4096.
    pub max_readers: usize,
    /// How long the runtime (the actors crate) keeps a source log open that no catch-up
    /// has read over (DESIGN.md "Regions moving between nodes", catch-up). A kept source
    /// polls its owner's prefix and reads each new object, which a node that took its
    /// regions and moved on should not pay for; a source dropped is opened again by the
    /// next catch-up from it (one recovery of its live chain), so a node that rebalances
    /// in rounds further apart than this reopens its sources each round: set it above
    /// the time between rounds. A source is dropped between this long after its last
    /// catch-up ended and two sweeps later; the runtime sweeps every
    /// `min(5 s, source_idle_close / 2)` while a source is open. 30 s by default; 1 s
    /// (below, a sweep would come more than twice a second, and a source could close
    /// between the catch-ups of one move) to a year.
    pub source_idle_close: Duration,
}

/// When a request that has not answered is hedged: sent again, identical, with the first
/// left running; the first definite answer decides (DESIGN.md, "Hedging"). In a file:
/// `"off"`, a duration (`"25ms"`: fixed), `"adaptive"` (the default: the 90th percentile,
/// floor 10 ms), or a table `{ percentile = 95, floor = "5ms" }` (adaptive, either key
/// defaulting as in `"adaptive"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HedgeAfter {
    /// Never hedge.
    Off,
    /// After this long.
    Fixed(Duration),
    /// After 1.25 times the `percentile` of the recent latencies of the same kind of
    /// request (creates apart from GETs), never sooner than `floor`: only the slow tail is
    /// hedged, whatever the store's usual latency. Until 16 latencies are known, after
    /// 500 ms.
    Adaptive {
        /// The percentile of recent latencies, 1 to 99.
        percentile: u8,
        /// The shortest hedge delay.
        floor: Duration,
    },
}

/// The default hedge's percentile.
pub(crate) const ADAPTIVE_PERCENTILE: u8 = 90;
/// The default hedge's floor.
pub(crate) const ADAPTIVE_FLOOR: Duration = Duration::from_millis(10);

impl Default for HedgeAfter {
    fn default() -> Self {
        HedgeAfter::Adaptive {
            percentile: ADAPTIVE_PERCENTILE,
            floor: ADAPTIVE_FLOOR,
        }
    }
}

/// Chainable setters, one per field: `with_<field>(value)` sets the field and returns the
/// config. They check nothing; [`Config::validate`] does.
macro_rules! setters {
    ($( $(#[$doc:meta])* $name:ident($field:ident: $ty:ty) $(=> $value:expr)?; )*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, $field: $ty) -> Self {
                self.$field = setters!(@value $field $(, $value)?);
                self
            }
        )*
    };
    (@value $field:ident) => { $field };
    (@value $field:ident, $value:expr) => { $value };
}

impl Config {
    /// The defaults, for `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Config {
            prefix: prefix.into(),
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
            hedge_after: HedgeAfter::default(),
            request_timeout: Duration::from_secs(30),
            replay_concurrency: 32,
            replay_budget_bytes: 64 * 1024 * 1024,
            create_if_missing: false,
            recovery_mode: RecoveryMode::Strict,
            compression: Compression::Off,
            encryption_keys: None,
            cipher: Cipher::Auto,
            segment_cache_bytes: DEFAULT_CACHE_BYTES,
            segment_cache_region_bytes: DEFAULT_CACHE_REGION_BYTES,
            max_readers: 64,
            source_idle_close: DEFAULT_SOURCE_IDLE_CLOSE,
        }
    }

    setters! {
        /// With the WAL prefix `prefix`.
        with_prefix(prefix: impl Into<String>) => prefix.into();
        /// With `min_object_interval`, the PUT-rate bound (zero: no bound).
        with_min_object_interval(min_object_interval: Duration);
        /// With `max_batch_bytes`, the largest object.
        with_max_batch_bytes(max_batch_bytes: u64);
        /// With `max_entry_bytes`, the largest single entry.
        with_max_entry_bytes(max_entry_bytes: u64);
        /// With `max_in_flight` objects uploaded at once.
        with_max_in_flight(max_in_flight: usize);
        /// With `max_pending_bytes` admitted and not yet acknowledged before appends wait.
        with_max_pending_bytes(max_pending_bytes: u64);
        /// With `recovery_concurrency` summaries read at once during recovery.
        with_recovery_concurrency(recovery_concurrency: usize);
        /// With `whole_read_threshold`: objects no larger are read with one GET in recovery.
        with_whole_read_threshold(whole_read_threshold: u64);
        /// With `read_ahead` segments fetched ahead of a read's consumer.
        with_read_ahead(read_ahead: usize);
        /// With the retry policy of creates whose outcome is unknown.
        with_retry(retry: RetryPolicy);
        /// With `open_attempts` opens attempted before giving up.
        with_open_attempts(open_attempts: u32);
        /// With `max_create_duration`: a create taking longer is never acknowledged.
        with_max_create_duration(max_create_duration: Duration);
        /// With `reclaim_grace`, the wait before objects below a floor are deleted.
        with_reclaim_grace(reclaim_grace: Duration);
        /// With what a read does with a damaged segment.
        with_corrupt_segment_policy(corrupt_segment_policy: CorruptSegmentPolicy);
        /// With when an unanswered request is hedged.
        with_hedge_after(hedge_after: HedgeAfter);
        /// With `request_timeout`, the longest any single request may take.
        with_request_timeout(request_timeout: Duration);
        /// With `replay_concurrency` objects a replay fetches at once.
        with_replay_concurrency(replay_concurrency: usize);
        /// With `replay_budget_bytes` a replay may hold fetched and not yet consumed.
        with_replay_budget_bytes(replay_budget_bytes: u64);
        /// With `segment_cache_bytes` of verified segments kept for reads.
        with_segment_cache_bytes(segment_cache_bytes: u64);
        /// With at most `segment_cache_region_bytes` of them per region.
        with_segment_cache_region_bytes(segment_cache_region_bytes: u64);
        /// With at most `max_readers` region readers in the runtime.
        with_max_readers(max_readers: usize);
        /// With `source_idle_close`: how long the runtime keeps a source log no
        /// catch-up reads over.
        with_source_idle_close(source_idle_close: Duration);
        /// With `create_if_missing`: whether an open as the writer may start a new WAL.
        with_create_if_missing(create_if_missing: bool);
        /// With what recovery does with an unreadable object the chain may need.
        with_recovery_mode(recovery_mode: RecoveryMode);
        /// With the compression tried on each segment.
        with_compression(compression: Compression);
        /// With the node's keys: every segment written is encrypted.
        with_encryption_keys(encryption_keys: Arc<dyn KeyProvider>) => Some(Keys(encryption_keys));
        /// With the cipher new segments are encrypted with.
        with_cipher(cipher: Cipher);
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        let bad = |field: &'static str, reason: &str| {
            Err(Error::Config {
                field,
                reason: reason.to_string(),
            })
        };
        // Sizes count a 56-byte header: an object with an id offset is 8 bytes longer.
        let min_object = (format::EMPTY_OBJECT_LEN + format::FOOTER_RECORD_LEN + 4) as u64;
        if self.max_batch_bytes < min_object {
            return bad(
                "max_batch_bytes",
                "must hold at least one empty entry (148 bytes)",
            );
        }
        if self.max_batch_bytes > u64::from(u32::MAX) {
            return bad("max_batch_bytes", "must be below 4 GiB");
        }
        if self.max_entry_bytes == 0 {
            return bad("max_entry_bytes", "must be at least 1");
        }
        if self.max_entry_bytes.saturating_add(min_object) > self.max_batch_bytes {
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
        if self.replay_concurrency == 0 {
            return bad("replay_concurrency", "must be at least 1");
        }
        if self.max_readers == 0 {
            return bad("max_readers", "must be at least 1");
        }
        if self.source_idle_close < MIN_SOURCE_IDLE_CLOSE {
            return bad(
                "source_idle_close",
                "must be at least 1 s (the runtime sweeps for idle sources at half of it)",
            );
        }
        if self.segment_cache_region_bytes > self.segment_cache_bytes {
            return bad(
                "segment_cache_region_bytes",
                "must be at most segment_cache_bytes",
            );
        }
        if self.replay_budget_bytes < self.max_batch_bytes {
            return bad(
                "replay_budget_bytes",
                "must hold at least one object of max_batch_bytes",
            );
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "must be above zero");
        }
        match self.hedge_after {
            HedgeAfter::Fixed(d) if d.is_zero() => {
                return bad("hedge_after", "a fixed hedge delay must be above zero")
            }
            HedgeAfter::Adaptive { percentile, .. } if !(1..=99).contains(&percentile) => {
                return bad("hedge_after", "the percentile must be from 1 to 99")
            }
            _ => {}
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
        self.validate_upper_bounds()
    }

    /// Every value has an upper bound that keeps the arithmetic on it (deadlines,
    /// backoffs, sums of bytes) in range; the error names the first value above its.
    fn validate_upper_bounds(&self) -> Result<()> {
        let durations = [
            ("min_object_interval", self.min_object_interval),
            ("retry.initial_backoff", self.retry.initial_backoff),
            ("retry.max_backoff", self.retry.max_backoff),
            ("max_create_duration", self.max_create_duration),
            ("reclaim_grace", self.reclaim_grace),
            ("request_timeout", self.request_timeout),
            ("source_idle_close", self.source_idle_close),
        ];
        for (field, value) in durations {
            if value > MAX_DURATION {
                return too_large(field, "must be at most a year");
            }
        }
        match self.hedge_after {
            HedgeAfter::Fixed(d) | HedgeAfter::Adaptive { floor: d, .. } if d > MAX_DURATION => {
                return too_large("hedge_after", "must be at most a year");
            }
            _ => {}
        }
        let counts = [
            ("max_in_flight", self.max_in_flight as u64),
            ("recovery_concurrency", self.recovery_concurrency as u64),
            ("read_ahead", self.read_ahead as u64),
            ("replay_concurrency", self.replay_concurrency as u64),
            ("max_readers", self.max_readers as u64),
            ("open_attempts", u64::from(self.open_attempts)),
            ("retry.max_attempts", u64::from(self.retry.max_attempts)),
        ];
        for (field, value) in counts {
            if value > MAX_COUNT {
                return too_large(field, "must be at most 4096");
            }
        }
        let bytes = [
            ("max_pending_bytes", self.max_pending_bytes),
            ("replay_budget_bytes", self.replay_budget_bytes),
            ("whole_read_threshold", self.whole_read_threshold),
            ("segment_cache_bytes", self.segment_cache_bytes),
        ];
        for (field, value) in bytes {
            if value > MAX_BYTES {
                return too_large(field, "must be at most 64 GiB");
            }
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
}

/// Checks a WAL prefix: non-empty, relative, no trailing `/`, no empty, `.` or `..`
/// component.
pub(crate) fn validate_prefix(prefix: &str) -> Result<Path> {
    let bad = |reason| Error::InvalidPrefix {
        prefix: prefix.to_string(),
        reason,
    };
    if prefix.is_empty() {
        return Err(bad("it is empty"));
    }
    if prefix.starts_with('/') {
        return Err(bad("it starts with '/'; prefixes are relative"));
    }
    if prefix.ends_with('/') {
        return Err(bad("it ends with '/'"));
    }
    for part in prefix.split('/') {
        match part {
            "" => return Err(bad("it has an empty component")),
            "." | ".." => return Err(bad("it has a '.' or '..' component")),
            _ => {}
        }
    }
    Path::parse(prefix).map_err(|_| bad("it is not a valid object store path"))
}
