//! What the WAL counts: the counters its actors share (feeding the metrics too) and the
//! [`WalStats`] snapshot a caller polls.

use std::sync::atomic::{AtomicU64, Ordering};

use object_store_wal::metrics::{Counter, Gauge, Metrics};

/// Counters shared by the WAL's actors.
#[derive(Debug, Default)]
pub struct Counters {
    /// Objects acknowledged (opening objects excluded).
    pub objects: Stat,
    /// Bytes of the objects acknowledged.
    pub object_bytes: Stat,
    /// Entries acknowledged.
    pub entries: Stat,
    /// Appends acknowledged.
    pub appends: Stat,
    /// Payload bytes acknowledged.
    pub payload_bytes: Stat,
    /// Create requests sent for acknowledged objects.
    pub puts: Stat,
    /// Creates retried after an unknown outcome.
    pub retries: Stat,
    /// Creates that met an existing object of another epoch or content.
    pub conflicts: Stat,
    /// Appends failed.
    pub failed_appends: Stat,
    /// Writers replaced.
    pub restarts: Stat,
    /// Reads started.
    pub reads: Stat,
    /// Payload bytes admitted and not yet acknowledged or failed.
    pub pending_bytes: Stat,
    /// Uploads in flight.
    pub in_flight: Stat,
    /// The floor of the last object acknowledged.
    pub floor: Stat,
    /// Everything below this sequence was deleted by the reclaimer.
    pub reclaimed_below: Stat,
    /// Objects deleted by the reclaimer.
    pub deleted: Stat,
}

impl Counters {
    /// Counters that also feed the WAL's metrics ([`object_store_wal::metrics`]): failed
    /// appends, restarts, reclaimed objects, pending bytes and uploads in flight. The
    /// rest are `WalStats`' only (the core emits the acknowledgements' metrics).
    pub fn new(metrics: &Metrics) -> Self {
        Counters {
            failed_appends: Stat::counting(&metrics.appends_failed),
            restarts: Stat::counting(&metrics.writer_restarts),
            deleted: Stat::counting(&metrics.reclaimed_objects),
            pending_bytes: Stat::gauging(&metrics.pending_bytes),
            in_flight: Stat::gauging(&metrics.uploads_in_flight),
            ..Counters::default()
        }
    }

    pub(crate) fn add(c: &Stat, n: u64) {
        c.value.fetch_add(n, Ordering::Relaxed);
        match &c.metric {
            Feeds::Nothing => {}
            Feeds::Counter(m) => m.increment(n),
            Feeds::Gauge(m) => m.increment(n as f64),
        }
    }

    pub(crate) fn set(c: &Stat, n: u64) {
        c.value.store(n, Ordering::Relaxed);
        match &c.metric {
            Feeds::Nothing => {}
            Feeds::Counter(m) => m.absolute(n),
            Feeds::Gauge(m) => m.set(n as f64),
        }
    }

    pub(crate) fn get(c: &Stat) -> u64 {
        c.value.load(Ordering::Relaxed)
    }
}

/// One of the [`Counters`]: its value for `WalStats`, and the metric it feeds, if any.
#[derive(Debug, Default)]
pub struct Stat {
    value: AtomicU64,
    metric: Feeds,
}

/// The metric a [`Stat`] feeds.
#[derive(Debug, Default)]
enum Feeds {
    #[default]
    Nothing,
    Counter(Counter),
    Gauge(Gauge),
}

impl Stat {
    fn counting(counter: &Counter) -> Self {
        Stat {
            value: AtomicU64::new(0),
            metric: Feeds::Counter(counter.clone()),
        }
    }

    fn gauging(gauge: &Gauge) -> Self {
        Stat {
            value: AtomicU64::new(0),
            metric: Feeds::Gauge(gauge.clone()),
        }
    }
}

/// A snapshot of the WAL's counters and positions. Later releases may add fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalStats {
    /// The current epoch, 0 while the first recovery runs.
    pub epoch: u64,
    /// Objects in the catalog: the live chain, from the floor of its newest object up
    /// (what is below the floor is dropped). Bounded by the live part of the log.
    pub chain_objects: u64,
    /// Regions with entries in the catalog (a region whose entries all fell below the
    /// floor is dropped).
    pub catalog_regions: u64,
    /// Region readers running: at most `Config::max_readers`
    /// ([`MAX_READERS`](crate::supervisor::MAX_READERS) by default).
    pub readers: u64,
    /// Requests waiting for an open to finish: at most
    /// [`MAX_QUEUED_REQUESTS`](crate::messages::MAX_QUEUED_REQUESTS).
    pub queued: u64,
    /// Obsolete watermarks kept (by the WAL's one `Retention`): about the live regions
    /// (those that hide nothing any more are forgotten).
    pub watermarks: u64,
    /// Orphans found by the last recovery.
    pub orphans: u64,
    /// Objects acknowledged since spawn.
    pub objects: u64,
    /// Bytes of those objects.
    pub object_bytes: u64,
    /// Entries acknowledged.
    pub entries: u64,
    /// Appends acknowledged.
    pub appends: u64,
    /// Payload bytes acknowledged.
    pub payload_bytes: u64,
    /// Create requests sent for acknowledged objects.
    pub puts: u64,
    /// Creates retried after an unknown outcome.
    pub retries: u64,
    /// Creates that met another object at their key.
    pub conflicts: u64,
    /// Appends failed.
    pub failed_appends: u64,
    /// Writers replaced by a new epoch.
    pub restarts: u64,
    /// Reads started.
    pub reads: u64,
    /// Payload bytes admitted and not yet acknowledged or failed.
    pub pending_bytes: u64,
    /// Uploads in flight.
    pub in_flight: u64,
    /// The last entry id on the chain.
    pub last_entry_id: Option<u64>,
    /// The floor of the last object acknowledged: objects below it may be reclaimed.
    pub floor: u64,
    /// Everything below this sequence was deleted; `reclaimed_below..floor` is the
    /// range still to reclaim.
    pub reclaimed_below: u64,
    /// Objects deleted by the reclaimer.
    pub deleted: u64,
    /// Requests (creates and GETs) sent again beside a first attempt that had not
    /// answered within `hedge_after`.
    pub hedged: u64,
    /// Hedged requests whose second attempt answered first.
    pub hedge_wins: u64,
    /// Requests that had not answered within `request_timeout`.
    pub timeouts: u64,
    /// Damaged segments met: by a recovery that read their object whole, or by a read,
    /// replay or follow of their region. Each finding counts (a segment met twice counts
    /// twice); the warnings in the log name key and region.
    pub damaged_segments: u64,
    /// Creates whose answer was lost (an unknown outcome, or a hedge's twin) and whose
    /// retry found this WAL's own bytes at the key: durable, counted so that a store or
    /// network that drops answers shows.
    pub creates_found_landed: u64,
}

impl WalStats {
    pub(crate) fn from_counters(c: &Counters) -> Self {
        WalStats {
            objects: Counters::get(&c.objects),
            object_bytes: Counters::get(&c.object_bytes),
            entries: Counters::get(&c.entries),
            appends: Counters::get(&c.appends),
            payload_bytes: Counters::get(&c.payload_bytes),
            puts: Counters::get(&c.puts),
            retries: Counters::get(&c.retries),
            conflicts: Counters::get(&c.conflicts),
            failed_appends: Counters::get(&c.failed_appends),
            restarts: Counters::get(&c.restarts),
            reads: Counters::get(&c.reads),
            pending_bytes: Counters::get(&c.pending_bytes),
            in_flight: Counters::get(&c.in_flight),
            floor: Counters::get(&c.floor),
            reclaimed_below: Counters::get(&c.reclaimed_below),
            deleted: Counters::get(&c.deleted),
            ..Default::default()
        }
    }
}
