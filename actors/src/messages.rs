//! The typed messages of the WAL's actors and their replies.
//!
//! A node talks to the supervisor ([`WalMsg`]), directly from its own actors or through
//! the [`WalHandle`](crate::WalHandle). Every request carries an `RpcReplyPort`; every
//! reply is a `Result` with the core's [`Error`], whose
//! [`durability`](Error::durability) says whether a failed append may still be replayed.

use std::sync::atomic::{AtomicU64, Ordering};

use object_store_wal::metrics::{Counter, Gauge, Metrics};
use object_store_wal::open::Opened;
use object_store_wal::persist::PersistOutcome;
use object_store_wal::{AppendParts, AppendReceipt, Entry, Error, Result};
use ractor::RpcReplyPort;

/// A stream of a region's entries: a bounded channel fed by the region's reader.
pub type EntryReceiver = flume::Receiver<Result<Entry>>;

/// An [`EntryReceiver`] as a `futures::Stream` (from the handle's `*_stream` calls): it
/// ends when the read does; dropping it ends the read.
pub type EntryStream = flume::r#async::RecvStream<'static, Result<Entry>>;

/// One append: its parts (one region or several, landing atomically in one object).
/// Built with [`AppendRequest::new`]; later releases may add fields.
#[derive(Debug)]
#[non_exhaustive]
pub struct AppendRequest {
    /// `(region, entries)` parts.
    pub parts: AppendParts,
    /// When `max_pending_bytes` are held: `true` fails at once with
    /// [`Error::Backpressure`], `false` waits for room.
    pub fail_fast: bool,
    /// Gets the receipt once the append is durable, or the error.
    pub reply: RpcReplyPort<Result<AppendReceipt>>,
    /// If set, gets the append's ids as soon as it is admitted into the open batch,
    /// before it is durable (the two-stage acknowledgement: [`Admitted`](crate::Admitted)). The
    /// ids are final; `reply` still answers once the append is durable or failed. Left
    /// unanswered (dropped) when the append is refused before admission: `reply` then
    /// has the error.
    pub admitted: Option<RpcReplyPort<AppendReceipt>>,
}

impl AppendRequest {
    /// An append of `parts` whose answer goes to `reply`: it waits for room under
    /// `max_pending_bytes`, and its ids come with the durable receipt only.
    pub fn new(parts: AppendParts, reply: RpcReplyPort<Result<AppendReceipt>>) -> Self {
        AppendRequest {
            parts,
            fail_fast: false,
            reply,
            admitted: None,
        }
    }

    /// This append, failing at once with [`Error::Backpressure`] instead of waiting for
    /// room.
    pub fn fail_fast(mut self) -> Self {
        self.fail_fast = true;
        self
    }

    /// This append, with its ids sent to `admitted` as soon as it is admitted (the
    /// two-stage acknowledgement).
    pub fn with_admitted(mut self, admitted: RpcReplyPort<AppendReceipt>) -> Self {
        self.admitted = Some(admitted);
        self
    }
}

/// What the supervisor (the WAL) accepts. Later releases may add messages.
#[derive(Debug)]
#[non_exhaustive]
pub enum WalMsg {
    /// Append entries; the reply comes once they are durable.
    Append(AppendRequest),
    /// Read a region's entries with id `>= from` (ids at or below its obsolete watermark
    /// are hidden), lazily, through a bounded channel.
    Read {
        /// The region.
        region: u64,
        /// The first id wanted.
        from: u64,
        /// Gets the receiving end of the entry stream.
        reply: RpcReplyPort<Result<EntryReceiver>>,
    },
    /// Follow a region: its entries with id `>= from`, then every new one as it is
    /// acknowledged, until the WAL stops. Survives writer restarts. Entries declared
    /// obsolete that fall below the floor before the follower reaches them are skipped,
    /// as a read started then would hide them (the catalog no longer holds them).
    Follow {
        /// The region.
        region: u64,
        /// The first id wanted.
        from: u64,
        /// Gets the receiving end of the entry stream.
        reply: RpcReplyPort<Result<EntryReceiver>>,
    },
    /// Replay many regions at once, each from its own id (a node restarting): every
    /// object is fetched once; each region's entries come in order, regions interleaved.
    Replay {
        /// `(region, from)` pairs.
        regions: Vec<(u64, u64)>,
        /// Gets the receiving end of the entry stream.
        reply: RpcReplyPort<Result<EntryReceiver>>,
    },
    /// Record that the region's entries up to `id` are safe elsewhere (`u64::MAX`: all
    /// of them, a dropped region).
    Obsolete {
        /// The region.
        region: u64,
        /// The watermark: entries with id `<= id` are obsolete.
        id: u64,
        /// Acknowledges the record.
        reply: RpcReplyPort<Result<()>>,
    },
    /// The last entry id of a region (`Some`) or of the whole log (`None`).
    LastEntryId {
        /// The region, or `None` for all of them.
        region: Option<u64>,
        /// Gets the id, `None` when there is no entry (a region's entries that all fell
        /// below the floor count as none, as after a restart); an error when the request
        /// was refused (the WAL stopped, or [`Error::Backpressure`] while it opens).
        reply: RpcReplyPort<Result<Option<u64>>>,
    },
    /// Answered once the first recovery is done (`Ok`), or with the error that ended
    /// the WAL before it was (the first open failed terminally, or the WAL stopped).
    Ready {
        /// Gets the answer.
        reply: RpcReplyPort<Result<()>>,
    },
    /// Counters and positions.
    Stats {
        /// Gets the stats.
        reply: RpcReplyPort<WalStats>,
    },
    /// Stop gracefully: uploads in flight finish and are acknowledged or failed (within
    /// `max_create_duration`, past which those still unanswered fail as unknown
    /// outcomes), appends not yet sent get [`Error::Stopped`]. Idempotent.
    Stop {
        /// Answered once stopped: nothing of the instance reaches the store any more.
        reply: RpcReplyPort<()>,
    },
    /// A message of the WAL's own actors (recovery, writer, timers). It cannot be built
    /// outside this crate, so nobody holding the actor can forge one.
    Internal(Internal),
    /// Fault injection (feature `testing`): the writer panics.
    #[cfg(feature = "testing")]
    PanicWriter,
    /// Fault injection (feature `testing`): the region's reader panics.
    #[cfg(feature = "testing")]
    PanicReader {
        /// The region.
        region: u64,
    },
}

/// A message the WAL's own actors send the supervisor; opaque outside this crate.
#[derive(Debug)]
pub struct Internal(pub(crate) InternalMsg);

/// The messages behind [`Internal`].
#[derive(Debug)]
pub(crate) enum InternalMsg {
    /// From the recovery actor: the open finished.
    Recovered(Box<Result<Opened>>),
    /// From the writer: its epoch ended (or it was fenced or poisoned).
    WriterEnded {
        /// The writer's epoch.
        epoch: u64,
        /// Why.
        error: Error,
    },
    /// Start a new open after a backoff.
    Restart,
}

impl From<InternalMsg> for WalMsg {
    fn from(msg: InternalMsg) -> Self {
        WalMsg::Internal(Internal(msg))
    }
}

/// What the writer accepts.
#[derive(Debug)]
pub enum WriterMsg {
    /// An append forwarded by the supervisor.
    Append(AppendRequest),
    /// A time the sealing decision waits for (the end of `min_object_interval`, or of
    /// a batch's gathering) has come: decide again, and start what may start.
    Wake,
    /// Time to check whether the idle epoch needs an empty object to stay inside its
    /// link window.
    KeepAlive,
    /// An upload task finished.
    Uploaded {
        /// The object's sequence.
        sequence: u64,
        /// Its definite outcome.
        outcome: PersistOutcome,
    },
    /// Stop gracefully.
    Stop {
        /// Answered once every upload in flight finished, or was abandoned at the stop
        /// deadline.
        reply: RpcReplyPort<()>,
    },
    /// `max_create_duration` passed since the stop: the uploads still in flight are
    /// abandoned as unknown outcomes.
    StopDeadline,
    /// Fault injection: panic.
    #[cfg(feature = "testing")]
    Panic,
}

/// What a region reader accepts.
#[derive(Debug)]
pub enum ReaderMsg {
    /// Stream the region's entries with id `>= from`.
    Read {
        /// The first id wanted.
        from: u64,
        /// Gets the stream.
        reply: RpcReplyPort<Result<EntryReceiver>>,
    },
    /// Fault injection: panic.
    #[cfg(feature = "testing")]
    Panic,
}

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
    /// Region readers running: at most
    /// [`MAX_READERS`](crate::supervisor::MAX_READERS).
    pub readers: u64,
    /// Requests waiting for an open to finish: at most
    /// [`MAX_QUEUED_REQUESTS`](crate::supervisor::MAX_QUEUED_REQUESTS).
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
