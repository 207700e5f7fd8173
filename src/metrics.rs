//! Metrics, through the `metrics` facade crate.
//!
//! The WAL only emits; the node installs whatever recorder (exporter) it uses, before it
//! opens or spawns the WAL: the handles are registered once per open, from the WAL's
//! [`WalIo`](crate::internal::store::objects::WalIo), and a handle registered while no recorder was installed
//! stays a no-op. With no recorder nothing is exported and each update is a call on a
//! no-op handle. The actor runtime's `WalStats` stays for callers that poll.
//!
//! Names follow Prometheus: the unit in the name, `_total` for counters, durations as
//! histograms in seconds. Every metric has the label `prefix` (the WAL's prefix, so one
//! node's WALs are told apart); `wal_requests_total` also has `op` and `outcome`.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `wal_requests_total` | counter | `prefix`, `op`, `outcome` | Requests sent to the store, each counted once when it ends. `op`: `put` (a conditional create), `get`, `list`, `delete`. `outcome`: `ok`; `conflict` (a create found its key taken); `error` (the store answered with an error); `timed_out` (no answer within `request_timeout`); `hedged` (the slower of two twin attempts, whose answer was not used: a GET is cancelled then, a create is left to finish and counted when it does). Summed over `outcome`, each `op` equals the requests the store received. |
//! | `wal_create_retries_total` | counter | `prefix` | Creates sent again with identical bytes after an unknown outcome. |
//! | `wal_throttle_replies_total` | counter | `prefix` | Create attempts the store refused for its request rate (S3's `503 SlowDown`, GCS's `429`, Azure's `503 ServerBusy`): each is retried with the same bytes without spending the retry budget, and the writer spaces its objects further apart (DESIGN.md "Throttled stores"). |
//! | `wal_creates_found_landed_total` | counter | `prefix` | Creates whose answer was lost (an unknown outcome, or a hedge's twin) and whose retry found our own bytes at the key: durable, and counted so a store that drops answers shows. |
//! | `wal_objects_created_total` | counter | `prefix` | Objects created and acknowledged (data objects and the idle keep-alive objects; claims and opening objects are only in `wal_requests_total{op="put"}`). |
//! | `wal_objects_created_bytes_total` | counter | `prefix` | The bytes of those objects. |
//! | `wal_entries_acknowledged_total` | counter | `prefix` | Entries acknowledged (durable). |
//! | `wal_appends_acknowledged_total` | counter | `prefix` | Appends acknowledged (durable). |
//! | `wal_appends_failed_total` | counter | `prefix` | Appends answered with an error (actor runtime). |
//! | `wal_writer_restarts_total` | counter | `prefix` | Writers replaced by a new open: an epoch ended, a writer or an open failed (actor runtime). |
//! | `wal_damaged_segments_total` | counter | `prefix` | Damaged segments met, by a recovery that read their object whole or by a read of their region; each finding counts. |
//! | `wal_reclaimed_objects_total` | counter | `prefix` | Objects deleted below the floor by the reclaimer (actor runtime). |
//! | `wal_epoch` | gauge | `prefix` | The epoch of the last open as the writer. |
//! | `wal_floor_sequence` | gauge | `prefix` | The floor carried by the last object acknowledged (or opening object): objects below it may be reclaimed. |
//! | `wal_live_objects` | gauge | `prefix` | Objects on the chain in the catalog, after the last open or acknowledgement. |
//! | `wal_pending_bytes` | gauge | `prefix` | Payload bytes admitted and not yet acknowledged or failed (actor runtime; `max_pending_bytes` bounds it). |
//! | `wal_object_interval_seconds` | gauge | `prefix` | The writer's interval between object starts now: `min_object_interval` (the sequential front end's: none), or more while the store throttles it. |
//! | `wal_uploads_in_flight` | gauge | `prefix` | Objects being created now (actor runtime; `max_in_flight` bounds it). |
//! | `wal_append_to_durable_seconds` | histogram | `prefix` | Per append acknowledged: from its admission into a batch to its acknowledgement. |
//! | `wal_seal_to_durable_seconds` | histogram | `prefix` | Per object acknowledged: from sealing its batch to its acknowledgement (waiting for an upload slot, the create and its retries, waiting for earlier objects). |
//! | `wal_recovery_duration_seconds` | histogram | `prefix` | Per open as the writer that succeeded: from the first listing to the opening object created, every attempt of the open included. |
//! | `wal_replay_duration_seconds` | histogram | `prefix` | Per replay of many regions that ran to its end: from its start to its last entry handed on (a consumer that reads slowly lengthens it; a replay dropped early is not recorded; actor runtime). |
//!
//! Choices: requests are counted where they end in the [`transport`](crate::internal::store::transport),
//! the only module that calls the store, so the counts hold for both front ends and for every caller
//! (recovery, writer, readers, reclaimer). The sequential front end
//! ([`ObjectStoreLogStore`](crate::ObjectStoreLogStore)) emits everything not marked
//! "actor runtime"; its append latency runs from `append` to the `flush` that made it
//! durable. A read-only open emits only requests and damaged segments.

use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, Unit};
pub use ::metrics::{Counter, Gauge, Histogram};

/// A request's kind, the `op` label of `wal_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A conditional create.
    Put,
    /// A GET, ranged or whole.
    Get,
    /// A listing.
    List,
    /// A delete.
    Delete,
}

impl Op {
    /// In declaration order: `op as usize` is its index here.
    const ALL: [Op; 4] = [Op::Put, Op::Get, Op::List, Op::Delete];

    fn label(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::List => "list",
            Op::Delete => "delete",
        }
    }
}

/// How a request ended, the `outcome` label of `wal_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with success.
    Ok,
    /// A create found its key taken.
    Conflict,
    /// Answered with an error.
    Error,
    /// The slower of two twin attempts; its answer was not used.
    Hedged,
    /// No answer within the request timeout.
    TimedOut,
}

impl Outcome {
    /// In declaration order: `outcome as usize` is its index here.
    const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Conflict,
        Outcome::Error,
        Outcome::Hedged,
        Outcome::TimedOut,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Conflict => "conflict",
            Outcome::Error => "error",
            Outcome::Hedged => "hedged",
            Outcome::TimedOut => "timed_out",
        }
    }
}

/// The metric handles of one WAL, registered once with its `prefix` label (see the
/// module doc for what each means). Shared by the clones of its
/// [`WalIo`](crate::internal::store::objects::WalIo); the actor runtime reaches it there.
#[doc(hidden)]
#[derive(Debug)]
pub struct Metrics {
    requests: [[Counter; Outcome::ALL.len()]; Op::ALL.len()],
    /// `wal_create_retries_total`.
    pub create_retries: Counter,
    /// `wal_creates_found_landed_total`.
    pub creates_found_landed: Counter,
    /// `wal_throttle_replies_total`.
    pub throttle_replies: Counter,
    /// `wal_objects_created_total`.
    pub objects_created: Counter,
    /// `wal_objects_created_bytes_total`.
    pub objects_created_bytes: Counter,
    /// `wal_entries_acknowledged_total`.
    pub entries_acknowledged: Counter,
    /// `wal_appends_acknowledged_total`.
    pub appends_acknowledged: Counter,
    /// `wal_appends_failed_total`.
    pub appends_failed: Counter,
    /// `wal_writer_restarts_total`.
    pub writer_restarts: Counter,
    /// `wal_damaged_segments_total`.
    pub damaged_segments: Counter,
    /// `wal_reclaimed_objects_total`.
    pub reclaimed_objects: Counter,
    /// `wal_epoch`.
    pub epoch: Gauge,
    /// `wal_floor_sequence`.
    pub floor_sequence: Gauge,
    /// `wal_live_objects`.
    pub live_objects: Gauge,
    /// `wal_pending_bytes`.
    pub pending_bytes: Gauge,
    /// `wal_uploads_in_flight`.
    pub uploads_in_flight: Gauge,
    /// `wal_object_interval_seconds`.
    pub object_interval: Gauge,
    /// `wal_append_to_durable_seconds`.
    pub append_to_durable: Histogram,
    /// `wal_seal_to_durable_seconds`.
    pub seal_to_durable: Histogram,
    /// `wal_recovery_duration_seconds`.
    pub recovery_duration: Histogram,
    /// `wal_replay_duration_seconds`.
    pub replay_duration: Histogram,
}

impl Metrics {
    /// Registers the handles of the WAL under `prefix` with the recorder installed now
    /// (no-ops when there is none).
    pub fn new(prefix: &str) -> Self {
        describe();
        let p = prefix.to_string();
        let requests = Op::ALL.map(|op| {
            Outcome::ALL.map(|outcome| {
                counter!("wal_requests_total", "prefix" => p.clone(),
                    "op" => op.label(), "outcome" => outcome.label())
            })
        });
        Metrics {
            requests,
            create_retries: counter!("wal_create_retries_total", "prefix" => p.clone()),
            creates_found_landed: counter!(
                "wal_creates_found_landed_total",
                "prefix" => p.clone()
            ),
            throttle_replies: counter!("wal_throttle_replies_total", "prefix" => p.clone()),
            objects_created: counter!("wal_objects_created_total", "prefix" => p.clone()),
            objects_created_bytes: counter!("wal_objects_created_bytes_total", "prefix" => p.clone()),
            entries_acknowledged: counter!("wal_entries_acknowledged_total", "prefix" => p.clone()),
            appends_acknowledged: counter!("wal_appends_acknowledged_total", "prefix" => p.clone()),
            appends_failed: counter!("wal_appends_failed_total", "prefix" => p.clone()),
            writer_restarts: counter!("wal_writer_restarts_total", "prefix" => p.clone()),
            damaged_segments: counter!("wal_damaged_segments_total", "prefix" => p.clone()),
            reclaimed_objects: counter!("wal_reclaimed_objects_total", "prefix" => p.clone()),
            epoch: ::metrics::gauge!("wal_epoch", "prefix" => p.clone()),
            floor_sequence: ::metrics::gauge!("wal_floor_sequence", "prefix" => p.clone()),
            live_objects: ::metrics::gauge!("wal_live_objects", "prefix" => p.clone()),
            pending_bytes: ::metrics::gauge!("wal_pending_bytes", "prefix" => p.clone()),
            uploads_in_flight: ::metrics::gauge!("wal_uploads_in_flight", "prefix" => p.clone()),
            object_interval: ::metrics::gauge!("wal_object_interval_seconds", "prefix" => p.clone()),
            append_to_durable: ::metrics::histogram!("wal_append_to_durable_seconds", "prefix" => p.clone()),
            seal_to_durable: ::metrics::histogram!("wal_seal_to_durable_seconds", "prefix" => p.clone()),
            recovery_duration: ::metrics::histogram!("wal_recovery_duration_seconds", "prefix" => p.clone()),
            replay_duration: ::metrics::histogram!("wal_replay_duration_seconds", "prefix" => p),
        }
    }

    /// One request ended so.
    pub fn request(&self, op: Op, outcome: Outcome) {
        self.requests[op as usize][outcome as usize].increment(1);
    }

    /// An open as the writer succeeded after `took`, in `epoch` with `floor`, its catalog
    /// holding `live_objects`.
    pub fn opened(&self, epoch: u64, floor: u64, live_objects: usize, took: Duration) {
        self.recovery_duration.record(took);
        self.epoch.set(epoch as f64);
        self.floor_sequence.set(floor as f64);
        self.live_objects.set(live_objects as f64);
    }

    /// An object was acknowledged, `since_seal` after it was sealed; the catalog now holds
    /// `live_objects`. (Each append's latency is the front end's to record.)
    pub fn acknowledged(&self, object: Acknowledged, since_seal: Duration, live_objects: usize) {
        self.objects_created.increment(1);
        self.objects_created_bytes.increment(object.bytes);
        self.entries_acknowledged.increment(object.entries);
        self.appends_acknowledged.increment(object.appends);
        self.seal_to_durable.record(since_seal);
        self.floor_sequence.set(object.floor as f64);
        self.live_objects.set(live_objects as f64);
    }
}

/// What [`Metrics::acknowledged`] counts of an acknowledged object.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acknowledged {
    /// Its encoded bytes.
    pub bytes: u64,
    /// The entries it holds.
    pub entries: u64,
    /// The appends it acknowledges.
    pub appends: u64,
    /// The floor its header carries.
    pub floor: u64,
}

/// Names, units and help texts, for exporters that show them (Prometheus's `# HELP`).
fn describe() {
    describe_counter!(
        "wal_requests_total",
        "Requests sent to the object store, by op and outcome."
    );
    describe_counter!(
        "wal_create_retries_total",
        "Creates sent again with identical bytes after an unknown outcome."
    );
    describe_counter!(
        "wal_creates_found_landed_total",
        "Creates whose answer was lost and whose retry found our own bytes at the key."
    );
    describe_counter!(
        "wal_throttle_replies_total",
        "Create attempts the store refused for its request rate (503 SlowDown, 429, 503 ServerBusy)."
    );
    describe_counter!(
        "wal_objects_created_total",
        "WAL objects created and acknowledged (opening objects and claims excluded)."
    );
    describe_counter!(
        "wal_objects_created_bytes_total",
        Unit::Bytes,
        "Bytes of the WAL objects created and acknowledged."
    );
    describe_counter!("wal_entries_acknowledged_total", "Entries acknowledged.");
    describe_counter!("wal_appends_acknowledged_total", "Appends acknowledged.");
    describe_counter!(
        "wal_appends_failed_total",
        "Appends answered with an error."
    );
    describe_counter!(
        "wal_writer_restarts_total",
        "Writers replaced by a new open."
    );
    describe_counter!(
        "wal_damaged_segments_total",
        "Damaged segments met by recoveries and reads."
    );
    describe_counter!(
        "wal_reclaimed_objects_total",
        "Objects deleted below the floor by the reclaimer."
    );
    describe_gauge!("wal_epoch", "The epoch of the last open as the writer.");
    describe_gauge!(
        "wal_object_interval_seconds",
        Unit::Seconds,
        "The writer's interval between object starts now (more than min_object_interval while throttled)."
    );
    describe_gauge!(
        "wal_floor_sequence",
        "The floor carried by the last object acknowledged."
    );
    describe_gauge!("wal_live_objects", "Objects on the chain in the catalog.");
    describe_gauge!(
        "wal_pending_bytes",
        Unit::Bytes,
        "Payload bytes admitted, not yet acknowledged or failed."
    );
    describe_gauge!("wal_uploads_in_flight", "Objects being created now.");
    describe_histogram!(
        "wal_append_to_durable_seconds",
        Unit::Seconds,
        "From an append's admission to its acknowledgement."
    );
    describe_histogram!(
        "wal_seal_to_durable_seconds",
        Unit::Seconds,
        "From sealing an object to its acknowledgement."
    );
    describe_histogram!(
        "wal_recovery_duration_seconds",
        Unit::Seconds,
        "An open as the writer: first listing to opening object created."
    );
    describe_histogram!(
        "wal_replay_duration_seconds",
        Unit::Seconds,
        "A replay of many regions, start to last entry handed on."
    );
}
