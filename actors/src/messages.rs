//! The typed messages of the WAL's actors and their replies.
//!
//! A node talks to the supervisor ([`WalMsg`]), directly from its own actors or through
//! the [`WalHandle`](crate::WalHandle). Every request carries an `RpcReplyPort`; every
//! reply is a `Result` with the core's [`Error`], whose
//! [`durability`](Error::durability) says whether a failed append may still be replayed.

use object_store_wal::internal::chain::holdings::{Holdings, Piece};
use object_store_wal::internal::open::Opened;
use object_store_wal::internal::write::persist::PersistOutcome;
use object_store_wal::{
    AppendParts, AppendReceipt, Durability, Error, RegionHolding, Released, Result,
};
use ractor::RpcReplyPort;

use crate::stats::WalStats;

pub use crate::entries::EntryReceiver;

/// The answer to a request the WAL will not serve because it stopped (or is stopping):
/// nothing of it was written. Here beside the messages, for the supervisor and the
/// parts it owns (the source logs) refuse requests alike.
pub(crate) fn stopped() -> Error {
    Error::Stopped {
        durability: Durability::NotWritten,
    }
}

/// Requests (appends, reads, watermarks, positions) that wait for an open at most; also
/// the most appends the writer keeps waiting for room under `max_pending_bytes`. The
/// next one is refused with [`Error::Backpressure`](object_store_wal::Error::Backpressure).
pub const MAX_QUEUED_REQUESTS: usize = 4096;

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
    /// Release a region to another node (DESIGN.md "Regions moving between nodes"):
    /// no more of its appends are admitted, what was admitted is written now, and the
    /// answer comes once the release is recorded on the chain, with the region's last
    /// id here and the id its next owner acquires above. See `WalHandle::release`.
    Release {
        /// The region.
        region: u64,
        /// Gets the release's answer.
        reply: RpcReplyPort<Result<Released>>,
    },
    /// Take a region over from the logs of its earlier owners: every id this WAL gives
    /// it from now on is above `last_id`, across restarts, and `pieces` (its pieces in
    /// those logs, not flushed yet) are recorded for replays. Answered once the raise
    /// is durable. See `WalHandle::acquire_with_pieces`.
    Acquire {
        /// The region.
        region: u64,
        /// The largest id an earlier owner gave it (at least the release's
        /// `acquire_above`).
        last_id: u64,
        /// Its pieces in earlier owners' logs, in id order.
        pieces: Vec<Piece>,
        /// Acknowledges the acquire.
        reply: RpcReplyPort<Result<()>>,
    },
    /// List what the live log holds of each region (its ids on the chain, its release,
    /// its earlier pieces), as the chain records it. See `WalHandle::holdings`.
    Holdings {
        /// Gets the list, in region order.
        reply: RpcReplyPort<Result<Vec<RegionHolding>>>,
    },
    /// What the live log holds of one region: its entry of [`WalMsg::Holdings`]'s list,
    /// or `None` where that lists nothing of it, at the cost of one region however many
    /// the log holds. See `WalHandle::holding`.
    Holding {
        /// The region.
        region: u64,
        /// Gets its holding.
        reply: RpcReplyPort<Result<Option<RegionHolding>>>,
    },
    /// Read a region's piece from the log of its earlier owner (DESIGN.md "Regions
    /// moving between nodes", catch-up): its entries with ids from `from` through
    /// `through`, each once and in order, ending after `through`. The source prefix is
    /// opened read-only (on the same store or stores as this WAL, read with this WAL's
    /// codec and keys) on the first catch-up from it, and shared by every later one.
    /// The stream fails [`Error::NotOnChain`] if the source does not hold `through`
    /// (it met a later id of the region, or the source's snapshot records the region
    /// released below it), and [`Error::CallTimeout`] once `within` passed.
    CatchUp {
        /// The source log's prefix.
        source: String,
        /// The region.
        region: u64,
        /// The first id wanted.
        from: u64,
        /// The last id wanted: the source's release's last id
        /// ([`Released::last_id`]).
        through: u64,
        /// The object that recorded the release ([`Released::sequence`]), if known:
        /// the catch-up probes for it and every key before it at once.
        released_in: Option<u64>,
        /// How long the whole catch-up may take, the source's open included.
        within: std::time::Duration,
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
    /// A message of the WAL's own actors (recovery, writer, timers). A [`RuntimeMsg`]
    /// cannot be built outside this crate, so nobody holding the actor can forge one.
    Runtime(RuntimeMsg),
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

/// A message the WAL's own actors (recovery, writer, timers) send its supervisor, in
/// [`WalMsg::Runtime`]. Opaque: a node neither builds nor reads one.
#[derive(Debug)]
pub struct RuntimeMsg(pub(crate) InternalMsg);

/// The messages behind [`RuntimeMsg`].
#[derive(Debug)]
pub(crate) enum InternalMsg {
    /// From the recovery actor: the open finished.
    Recovered(Box<Result<(Opened, Holdings)>>),
    /// From the writer: its epoch ended (or it was fenced or poisoned).
    WriterEnded {
        /// The writer's epoch.
        epoch: u64,
        /// Why.
        error: Error,
    },
    /// Start a new open after a backoff.
    Restart,
    /// A source log's open finished (a catch-up's).
    SourceOpened {
        /// Its prefix.
        source: String,
        /// The log, or why it cannot be opened.
        result: Result<std::sync::Arc<object_store_wal::SourceLog>>,
    },
    /// A release or an acquire, for the writer.
    Control(ControlRequest),
    /// Time to drop the source logs no catch-up read over for a while.
    SweepSources,
}

/// A region moving between nodes (DESIGN.md "Regions moving between nodes"), for the
/// writer: each is answered once the object holding its effect is acknowledged.
#[derive(Debug)]
pub(crate) enum ControlRequest {
    /// Raise the writer's ids above `last_id` for `region`, which this log takes over
    /// (taking it back if it had released it); answered once the raise is durable.
    Acquire {
        /// The region.
        region: u64,
        /// The largest id the earlier owner gave it.
        last_id: u64,
        /// Its pieces in the logs of earlier owners, recorded for replays.
        pieces: Vec<Piece>,
        /// Answered once an acknowledged object carries the raised id offset (and the
        /// snapshot that takes the region back, if it was released).
        reply: RpcReplyPort<Result<()>>,
    },
    /// Stop admitting `region`'s appends and record the release; answered with its last
    /// id here once the snapshot recording it is acknowledged.
    Release {
        /// The region.
        region: u64,
        /// Its last id here (`None`: this log held no entry of it), and what the next
        /// owner acquires above.
        reply: RpcReplyPort<Result<Released>>,
    },
    /// `region` is flushed through `id` (an obsolete): its earlier pieces at or below
    /// it are forgotten. Not answered.
    Flushed {
        /// The region.
        region: u64,
        /// The watermark.
        id: u64,
    },
    /// List what the live log holds of each region.
    Holdings {
        /// Every region on the chain or released, in region order.
        reply: RpcReplyPort<Result<Vec<RegionHolding>>>,
    },
    /// What the live log holds of one region (its entry of the list `Holdings` gives).
    Holding {
        /// The region.
        region: u64,
        /// Its holding, `None` where the list has no entry for it.
        reply: RpcReplyPort<Result<Option<RegionHolding>>>,
    },
}

impl ControlRequest {
    /// Answers it with `error`.
    pub(crate) fn refuse(self, error: Error) {
        // A caller that gave up waiting dropped its end; nothing to do.
        match self {
            ControlRequest::Acquire { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ControlRequest::Release { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ControlRequest::Holdings { reply } => {
                let _ = reply.send(Err(error));
            }
            ControlRequest::Holding { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ControlRequest::Flushed { .. } => {}
        }
    }
}

impl From<InternalMsg> for WalMsg {
    fn from(msg: InternalMsg) -> Self {
        WalMsg::Runtime(RuntimeMsg(msg))
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
    /// An upload's create met a throttle reply and is being retried (DESIGN.md
    /// "Throttled stores"): the writer spaces its objects further apart.
    Throttled {
        /// The object's sequence.
        sequence: u64,
    },
    /// Stop gracefully.
    Stop {
        /// Answered once every upload in flight finished, or was abandoned at the stop
        /// deadline.
        reply: RpcReplyPort<()>,
    },
    /// A release or an acquire, forwarded by the supervisor.
    Control(ControlRequest),
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
    /// Follow the region from `from`: what the catalog holds, then each object as it is
    /// acknowledged.
    Follow {
        /// The first id wanted.
        from: u64,
        /// Bumped with every acknowledged sequence, and after each recovery.
        commits: tokio::sync::watch::Receiver<u64>,
        /// Gets the stream.
        reply: RpcReplyPort<Result<EntryReceiver>>,
    },
    /// Fault injection: panic.
    #[cfg(feature = "testing")]
    Panic,
}

impl ReaderMsg {
    /// Answers the request with `error` (a reader that could not take it).
    pub fn refuse(self, error: Error) {
        match self {
            ReaderMsg::Read { reply, .. } | ReaderMsg::Follow { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            #[cfg(feature = "testing")]
            ReaderMsg::Panic => {}
        }
    }
}
