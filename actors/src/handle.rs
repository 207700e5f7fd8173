//! `WalHandle`: async methods over the supervisor's messages, for callers that are not
//! actors, and the functions that spawn the WAL.
//!
//! A call waits as long as the WAL takes unless the handle has a per-call timeout
//! ([`WalHandle::with_timeout`]); then it gives up with [`Error::CallTimeout`], which
//! withdraws nothing: the request stays with the WAL, and a timed-out append may still
//! become durable, so its error says [`Durability::MayBeDurable`].

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::{
    AppendParts, AppendReceipt, BootClock, Config, CreateClock, Durability, Error, Piece,
    RegionHolding, Released, Result, WalStores,
};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::{wait_durable_through, Admitted, PendingReceipt, Progress, ProgressState};
use crate::entries::{EntryReceiver, EntryStream};
use crate::messages::{AppendRequest, WalMsg};
use crate::stats::WalStats;
use crate::supervisor::{RestartPolicy, Supervisor, SupervisorArgs};

/// Why the WAL could not be spawned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The configuration is invalid.
    #[error(transparent)]
    Invalid(#[from] Error),
    /// The actor system refused the spawn.
    #[error("cannot spawn the WAL supervisor: {0}")]
    Spawn(#[from] ractor::SpawnErr),
}

/// Spawns the WAL (its supervisor, which starts recovery, the writer and readers).
/// Returns at once; appends and reads wait until recovery is done. `stores` is one
/// store, or several that hold one log ([`WalStores::quorum`]: each object durable once
/// a majority of them holds it).
///
/// ```
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
///
/// use bytes::Bytes;
/// use object_store::memory::InMemory;
/// use object_store_wal::Config;
/// use object_store_wal_actors::{spawn_wal, RestartPolicy};
///
/// let store = Arc::new(InMemory::new());
/// let config = Config::new("node-7/wal").with_create_if_missing(true);
/// let (wal, join) = spawn_wal(store, config, RestartPolicy::default()).await?;
/// let receipt = wal.append(1, vec![Bytes::from_static(b"put k v")]).await?;
/// let entries = wal.read(1, 0).await?;
/// let entry = entries.recv_async().await.expect("an entry")?;
/// assert_eq!(entry.id, receipt.parts[0].first_id);
/// wal.stop().await?;
/// join.await.expect("the WAL ended");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// # }).unwrap();
/// ```
pub async fn spawn_wal(
    stores: impl Into<WalStores>,
    config: Config,
    restarts: RestartPolicy,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    spawn_wal_with(stores, config, restarts, Arc::new(BootClock), None).await
}

/// Spawns the WAL linked under `parent`, which sees it fail when it escalates (fenced,
/// damaged data, restarts exhausted).
pub async fn spawn_wal_linked(
    stores: impl Into<WalStores>,
    config: Config,
    restarts: RestartPolicy,
    parent: ActorCell,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    spawn_wal_with(stores, config, restarts, Arc::new(BootClock), Some(parent)).await
}

/// Spawns the WAL with every option: the clock creates are measured on (`BootClock` by
/// default; tests drive one by hand) and an optional parent supervisor.
pub async fn spawn_wal_with(
    stores: impl Into<WalStores>,
    config: Config,
    restarts: RestartPolicy,
    clock: Arc<dyn CreateClock>,
    parent: Option<ActorCell>,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    config.validate()?;
    let io = stores.into().into_io(&config)?;
    spawn_wal_io(io, config, restarts, clock, parent).await
}

/// [`spawn_wal_with`] through `io` (tests that wrap the store access).
#[doc(hidden)]
pub async fn spawn_wal_io(
    io: WalIo,
    config: Config,
    restarts: RestartPolicy,
    clock: Arc<dyn CreateClock>,
    parent: Option<ActorCell>,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    config.validate()?;
    let terminal = Arc::new(Mutex::new(None));
    let (progress, progress_rx) = Progress::new();
    let args = SupervisorArgs {
        io: io.clone(),
        config,
        restarts,
        terminal: terminal.clone(),
        clock,
        progress,
    };
    let (actor, join) = match parent {
        Some(p) => Actor::spawn_linked(None, Supervisor, args, p).await?,
        None => Actor::spawn(None, Supervisor, args).await?,
    };
    let handle = WalHandle {
        actor,
        terminal,
        timeout: None,
        progress: progress_rx,
        io,
    };
    Ok((handle, join))
}

/// A cloneable handle on a running WAL: each region actor of a node keeps a clone, and
/// every call goes to the one supervisor. Calls wait for recovery; an append returns
/// once its object is durable, with the ids its entries got.
///
/// ```
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
///
/// use bytes::Bytes;
/// use futures::TryStreamExt;
/// use object_store::memory::InMemory;
/// use object_store_wal::Config;
/// use object_store_wal_actors::{spawn_wal, RestartPolicy};
///
/// let store = Arc::new(InMemory::new());
/// let config = Config::new("node-7/wal").with_create_if_missing(true);
/// let (wal, join) = spawn_wal(store.clone(), config.clone(), RestartPolicy::default()).await?;
///
/// // Two regions append through their own clones, at once; each learns its ids.
/// let (a, b) = (wal.clone(), wal.clone());
/// let (ra, rb) = tokio::join!(
///     a.append(1, vec![Bytes::from_static(b"put a 1")]),
///     b.append_many(vec![
///         (2, vec![Bytes::from_static(b"put b 1")]),
///         (3, vec![Bytes::from_static(b"put c 1")]), // one append, two regions: atomic
///     ]),
/// );
/// let (ra, rb) = (ra?, rb?);
/// assert_eq!(wal.last_entry_id(1).await?, Some(ra.parts[0].first_id));
/// let first_epoch = wal.stats().await?.epoch;
/// wal.stop().await?;
/// join.await.expect("the WAL ended");
///
/// // After a restart, a replay gives every acknowledged entry back with its id.
/// let (wal, join) = spawn_wal(store, config, RestartPolicy::default()).await?;
/// let replayed: Vec<_> = wal.replay_stream(vec![(1, 0), (2, 0), (3, 0)]).await?.try_collect().await?;
/// let mut ids: Vec<u64> = replayed.iter().map(|e| e.id).collect();
/// ids.sort_unstable();
/// let mut acknowledged = vec![ra.parts[0].first_id, rb.parts[0].first_id, rb.parts[1].first_id];
/// acknowledged.sort_unstable();
/// assert_eq!(ids, acknowledged);
/// assert!(wal.stats().await?.epoch > first_epoch); // the second instance fenced the first
/// wal.stop().await?;
/// join.await.expect("the WAL ended");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct WalHandle {
    actor: ActorRef<WalMsg>,
    terminal: Arc<Mutex<Option<Error>>>,
    /// Each call's timeout, if any.
    timeout: Option<Duration>,
    /// Where the ids handed out at admission stand (the barrier waits on it).
    progress: watch::Receiver<ProgressState>,
    /// The instance's store access, closed by `abort` (and `stop`) before they return.
    io: WalIo,
}

impl WalHandle {
    /// The supervisor, for actors that send [`WalMsg`]s themselves.
    pub fn actor(&self) -> &ActorRef<WalMsg> {
        &self.actor
    }

    /// The error that ended the WAL, if it ended by failing (e.g. [`Error::Fenced`]).
    pub fn terminal_error(&self) -> Option<Error> {
        self.terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A handle on the same WAL whose every call gives up after `timeout` with
    /// [`Error::CallTimeout`] (this handle and its other clones keep theirs).
    ///
    /// Giving up withdraws nothing: the request stays with the WAL and may still be
    /// served. A timed-out append may still be admitted, become durable and be replayed,
    /// so its error is [`Durability::MayBeDurable`], never `NotWritten`: retrying it
    /// could duplicate its entries (read the region to learn whether it landed). A
    /// timed-out `obsolete` may still be recorded, a timed-out `stop` still stops. For
    /// reads the timeout bounds getting the stream, not consuming it. It is measured on
    /// tokio's clock (virtual time when the clock is paused).
    pub fn with_timeout(&self, timeout: Duration) -> WalHandle {
        WalHandle {
            timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// The per-call timeout of this handle, if it has one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Runs `call` under the handle's timeout, if any.
    async fn timed<T>(
        &self,
        op: &'static str,
        durability: Durability,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        timed_within(op, self.timeout, durability, call).await
    }

    /// Waits until the first recovery is done and the WAL serves appends and reads.
    /// Fails with the error that ended the WAL if its first open failed terminally
    /// (damaged data, a store without conditional creates, restarts exhausted: the
    /// error of the last attempt) or it stopped first ([`Error::Stopped`]). A retryable
    /// failure of an open is not an answer: the WAL opens again and `ready` waits on.
    pub async fn ready(&self) -> Result<()> {
        self.timed("ready", Durability::NotWritten, async {
            self.call(|reply| WalMsg::Ready { reply }, || self.gone())
                .await?
        })
        .await
    }

    /// The error of a release or an acquire that lost its answer: the writer that had
    /// it ended (its epoch ended, or it failed) or the WAL ended. It may have been
    /// recorded: ask again (a new writer answers it, or says the WAL ended).
    fn control_gone(&self) -> Error {
        match self.terminal_error() {
            Some(e) => e.with_durability(Durability::MayBeDurable),
            None => Error::WriterFailed {
                durability: Durability::MayBeDurable,
            },
        }
    }

    fn gone(&self) -> Error {
        self.terminal_error()
            .map(|e| e.with_durability(Durability::NotWritten))
            .unwrap_or(Error::Stopped {
                durability: Durability::NotWritten,
            })
    }

    async fn call<T: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<T>) -> WalMsg,
        dropped: impl FnOnce() -> Error,
    ) -> Result<T> {
        match self.actor.call(build, None).await {
            Ok(CallResult::Success(v)) => Ok(v),
            Ok(CallResult::SenderError) | Ok(CallResult::Timeout) => Err(dropped()),
            Err(_) => Err(self.gone()),
        }
    }

    /// Appends `entries` to `region`; returns once they are durable, with their ids.
    pub async fn append(&self, region: u64, entries: Vec<Bytes>) -> Result<AppendReceipt> {
        self.append_many(vec![(region, entries)]).await
    }

    /// Appends to several regions at once, atomically (one object); waits for room
    /// under backpressure.
    pub async fn append_many(&self, parts: AppendParts) -> Result<AppendReceipt> {
        self.timed(
            "append",
            Durability::MayBeDurable,
            self.append_inner(parts, false),
        )
        .await
    }

    /// Like [`append_many`](Self::append_many), but fails at once with
    /// [`Error::Backpressure`] when `max_pending_bytes` are held.
    pub async fn try_append_many(&self, parts: AppendParts) -> Result<AppendReceipt> {
        self.timed(
            "append",
            Durability::MayBeDurable,
            self.append_inner(parts, true),
        )
        .await
    }

    /// Appends `entries` to `region` and returns as soon as they are admitted into the
    /// open batch, with their ids and a future for their durability (the two-stage
    /// acknowledgement, [`Admitted`]): apply them to memory now, and await
    /// [`Admitted::durable`] (or [`durable_through`](Self::durable_through)) before
    /// answering a client or flushing.
    ///
    /// The ids are final: the receipt `durable` resolves with has the same ids, and a
    /// replay returns the entries with them. If the append fails after admission,
    /// `durable` says how ([`Error::durability`]), and its ids are never given to
    /// other entries by this WAL, nor replayed unless its object turned out durable
    /// (possible only when the error is `MayBeDurable`). Waits for room under
    /// backpressure; a refusal before admission (bad input, the WAL stopped or ended)
    /// is returned here. Under the handle's timeout, the wait for admission is bounded
    /// (`MayBeDurable`: it may still be admitted), `durable` is not.
    pub async fn append_admitted(&self, region: u64, entries: Vec<Bytes>) -> Result<Admitted> {
        self.append_many_admitted(vec![(region, entries)]).await
    }

    /// [`append_admitted`](Self::append_admitted) for several regions at once,
    /// atomically (one object).
    pub async fn append_many_admitted(&self, parts: AppendParts) -> Result<Admitted> {
        self.timed(
            "append",
            Durability::MayBeDurable,
            self.append_admitted_inner(parts),
        )
        .await
    }

    async fn append_admitted_inner(&self, parts: AppendParts) -> Result<Admitted> {
        let (reply, durable_rx) = ractor::concurrency::oneshot();
        let (admitted, admitted_rx) = ractor::concurrency::oneshot();
        let durable = PendingReceipt::new(durable_rx, self.terminal.clone());
        let request = AppendRequest {
            parts,
            fail_fast: false,
            reply: reply.into(),
            admitted: Some(admitted.into()),
        };
        if self.actor.cast(WalMsg::Append(request)).is_err() {
            return Err(self.gone());
        }
        match admitted_rx.await {
            Ok(ids) => Ok(Admitted { ids, durable }),
            // Not admitted: the durability reply has the refusal. (A receipt there
            // would mean it was admitted and acknowledged unannounced: take its ids.)
            Err(_) => {
                let receipt = durable.await?;
                Ok(Admitted {
                    ids: receipt.clone(),
                    durable: PendingReceipt::resolved(Ok(receipt), self.terminal.clone()),
                })
            }
        }
    }

    /// Waits until every entry id up to `id` that this WAL handed out (at admission or
    /// in a receipt) before the call is durable: the barrier before a flush or an
    /// [`obsolete`](Self::obsolete). Ids are object-granular, so the whole object
    /// holding `id` is waited for; `u64::MAX` waits for everything handed out so far.
    ///
    /// Fails if an object holding such an id failed, with that object's error: the
    /// lowest one that may still be durable ([`Durability::MayBeDurable`]: an unknown
    /// outcome may land and be replayed, even after recovery), else the lowest failed
    /// one (`NotWritten`). A failure is permanent: every later barrier at or above it
    /// fails too, since the ids below can no longer all be durable (the failed appends'
    /// own `durable` futures say which entries; a region that dealt with them, say by
    /// rebuilding from a replay, goes on by the `durable` futures of its later appends).
    /// Ids of a failed plain [`append`](Self::append) were never handed out and fail no
    /// barrier.
    pub async fn durable_through(&self, id: u64) -> Result<()> {
        let closed = || match self.terminal_error() {
            Some(e) => e.with_durability(Durability::MayBeDurable),
            None => Error::Stopped {
                durability: Durability::MayBeDurable,
            },
        };
        self.timed(
            "durable_through",
            Durability::MayBeDurable,
            wait_durable_through(self.progress.clone(), id, closed),
        )
        .await
    }

    async fn append_inner(&self, parts: AppendParts, fail_fast: bool) -> Result<AppendReceipt> {
        // A reply port dropped unanswered means the writer failed holding the append.
        // If the WAL ended by failing (e.g. fenced), the reply port may instead have been
        // dropped with the supervisor's mailbox: say why it ended, conservatively.
        let dropped = || match self.terminal_error() {
            Some(e) => e.with_durability(Durability::MayBeDurable),
            None => Error::WriterFailed {
                durability: Durability::MayBeDurable,
            },
        };
        self.call(
            |reply| {
                WalMsg::Append(AppendRequest {
                    parts,
                    fail_fast,
                    reply,
                    admitted: None,
                })
            },
            dropped,
        )
        .await?
    }

    /// The entries of `region` with id `>= from` (and above its obsolete watermark), in
    /// order, through a bounded channel.
    pub async fn read(&self, region: u64, from: u64) -> Result<EntryReceiver> {
        self.timed(
            "read",
            Durability::NotWritten,
            self.read_inner(region, from),
        )
        .await
    }

    async fn read_inner(&self, region: u64, from: u64) -> Result<EntryReceiver> {
        // A read that reached a reader just as it failed is dropped unanswered; reads
        // are idempotent, so it is sent again (to the restarted reader), a few times.
        for _ in 0..3 {
            match self
                .actor
                .call(
                    |reply| WalMsg::Read {
                        region,
                        from,
                        reply,
                    },
                    None,
                )
                .await
            {
                Ok(CallResult::Success(result)) => return result,
                Ok(_) => continue,
                Err(_) => return Err(self.gone()),
            }
        }
        Err(Error::Stopped {
            durability: Durability::NotWritten,
        })
    }

    /// Replays many regions at once, each from its own id: every object is fetched
    /// once, up to `replay_concurrency` objects at once, with at most
    /// `replay_budget_bytes` fetched and not yet handed to the channel. Each region's
    /// entries come in order; regions are interleaved.
    pub async fn replay(&self, regions: Vec<(u64, u64)>) -> Result<EntryReceiver> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.timed("replay", Durability::NotWritten, async {
            self.call(|reply| WalMsg::Replay { regions, reply }, gone)
                .await?
        })
        .await
    }

    /// [`replay`](Self::replay) as a `Stream`.
    pub async fn replay_stream(&self, regions: Vec<(u64, u64)>) -> Result<EntryStream> {
        Ok(self.replay(regions).await?.into_stream())
    }

    /// Follows `region`: its entries with id `>= from`, then every new one as it is
    /// acknowledged, in order, exactly once, across writer restarts, until the WAL stops.
    pub async fn follow(&self, region: u64, from: u64) -> Result<EntryReceiver> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.timed("follow", Durability::NotWritten, async {
            self.call(
                |reply| WalMsg::Follow {
                    region,
                    from,
                    reply,
                },
                gone,
            )
            .await?
        })
        .await
    }

    /// [`follow`](Self::follow) as a `Stream`: it ends only when the WAL stops (or
    /// with an error).
    pub async fn follow_stream(&self, region: u64, from: u64) -> Result<EntryStream> {
        Ok(self.follow(region, from).await?.into_stream())
    }

    /// Takes `region` over from another node's log, where its largest id is `last_id`
    /// (DESIGN.md "Regions moving between nodes"): every id this WAL gives the region
    /// from now on is above `last_id`, across restarts too, for the answer comes once
    /// an acknowledged object carries the raised id offset (one create at most; it
    /// may be one already in flight). Pass the source's [`Released::acquire_above`]
    /// (or, for a region whose entries there were all flushed, at least the region's
    /// flushed id). A region this log had released is taken back (its appends are
    /// admitted again). Refused, changing nothing, if this log released the region at
    /// an id above `last_id` ([`Error::AcquireBelowOwnIds`]: its own piece would come
    /// first) and for the control region ([`Error::ReservedRegion`]). Ids of the region
    /// above `last_id` in a log that holds it are taken for this acquire's own effect
    /// (asked again after its raise object landed): that a region is this node's to
    /// acquire is the coordinator's to check.
    ///
    /// An error with [`Durability::MayBeDurable`] means the raise may be durable: ask
    /// again (an acquire is idempotent).
    pub async fn acquire(&self, region: u64, last_id: u64) -> Result<()> {
        self.acquire_with_pieces(region, last_id, Vec::new()).await
    }

    /// [`acquire`](Self::acquire), recording the region's pieces in the logs of its
    /// earlier owners that are not flushed yet (each a prefix and ids: what the
    /// catch-ups read; the source's own piece, and the pieces its
    /// [`holdings`](Self::holdings) list for the region), so that a replay after a
    /// restart of this node reads them before this log's own entries
    /// ([`read_history`](Self::read_history)). Each is kept until
    /// [`obsolete`](Self::obsolete) passes its last id. A piece whose ids overlap one
    /// recorded, or end above `last_id`, is refused with [`Error::Config`], changing
    /// nothing.
    pub async fn acquire_with_pieces(
        &self,
        region: u64,
        last_id: u64,
        pieces: Vec<Piece>,
    ) -> Result<()> {
        let acquire = |reply| WalMsg::Acquire {
            region,
            last_id,
            pieces,
            reply,
        };
        self.control("acquire", Durability::MayBeDurable, acquire)
            .await
    }

    /// Sends a release, an acquire or a listing and waits for its answer (under the
    /// handle's timeout, with `durability` if it passes).
    async fn control<T: Send + 'static>(
        &self,
        op: &'static str,
        durability: Durability,
        build: impl FnOnce(RpcReplyPort<Result<T>>) -> WalMsg,
    ) -> Result<T> {
        let call = self.call(build, || self.control_gone());
        self.timed(op, durability, async { call.await? }).await
    }

    /// Releases `region` to another node (DESIGN.md "Regions moving between nodes"):
    /// this WAL admits no more of its appends (each fails [`Error::RegionReleased`],
    /// never written), writes what it admitted of it now (not at its next start slot),
    /// and answers once nothing of it is in flight and the release is recorded in the
    /// log, with the region's **last id** ([`Released::last_id`]): its largest id on
    /// this log's chain (which can be above the last one acknowledged: an append that
    /// failed `MayBeDurable` whose object landed is on the chain), where a catch-up
    /// from this log ends (`None` when this log holds no entry of it: a region created
    /// here and moved before its first entry is released too, so that a late append
    /// of it is refused here rather than acknowledged where no new owner catches it
    /// up; that the region is this node's is the coordinator's to check). The next
    /// owner acquires the region above [`Released::acquire_above`], which is above
    /// every id this log handed out, landed or not. The release holds across restarts
    /// until [`acquire`](Self::acquire) takes the region back.
    ///
    /// A release asked again while the first is still on its way (after a
    /// [`Error::CallTimeout`], say) waits for the same record and answers the same
    /// last id. Refused, changing nothing: a release already recorded, with
    /// [`Error::RegionReleased`] (which carries the same answer); the control region,
    /// with [`Error::ReservedRegion`]. An error with
    /// [`Durability::MayBeDurable`] means the release may be recorded: ask again, and a
    /// recorded one answers `RegionReleased` with its last id.
    pub async fn release(&self, region: u64) -> Result<Released> {
        let release = |reply| WalMsg::Release { region, reply };
        self.control("release", Durability::MayBeDurable, release)
            .await
    }

    /// What the live log holds of each region, in region order (DESIGN.md "Regions
    /// moving between nodes"): its first and last ids on the chain, its release if
    /// this log released it, and its pieces in earlier owners' logs, as the chain
    /// records them (never a release or acquire still in flight), for a node to
    /// reconcile its log with its routes. A released region's entries stay until
    /// [`obsolete`](Self::obsolete) says the new owner no longer needs them.
    pub async fn holdings(&self) -> Result<Vec<RegionHolding>> {
        let list = |reply| WalMsg::Holdings { reply };
        self.control("holdings", Durability::NotWritten, list).await
    }

    /// What the live log holds of `region`: its entry of [`holdings`](Self::holdings)
    /// (its ids on the chain, its release, its earlier pieces, as the chain records
    /// them), or `None` where that lists nothing of it (no entry on the chain, no
    /// release and no earlier piece; and the control region). It costs one region
    /// whatever the number the log holds, where `holdings` lists them all: what a
    /// node asks of each region it replays ([`read_history`](Self::read_history)
    /// does).
    pub async fn holding(&self, region: u64) -> Result<Option<RegionHolding>> {
        let ask = |reply| WalMsg::Holding { region, reply };
        self.control("holding", Durability::NotWritten, ask).await
    }

    /// The region's history from id `from` (DESIGN.md "Regions moving between
    /// nodes"): first its pieces in earlier owners' logs that this log records
    /// ([`holding`](Self::holding); each read from its log as a
    /// [`catch_up`](Self::catch_up) is, in id order, `within` bounding each), then
    /// this log's own entries, as [`read`](Self::read) gives them. What a node replays
    /// for a region it took from another node whose entries there are not flushed yet;
    /// for any other region it is [`read`](Self::read). An error ends the stream.
    pub async fn read_history(
        &self,
        region: u64,
        from: u64,
        within: Duration,
    ) -> Result<EntryStream> {
        // This region's holding alone: a node replaying R regions asks R small
        // questions, not R listings of every region.
        let mut pieces: Vec<Piece> = self
            .holding(region)
            .await?
            .map(|h| h.pieces)
            .unwrap_or_default();
        pieces.sort_by_key(|p| p.first_id);
        // This log's own entries of the region come after every piece (an acquire's
        // last id is at least their last ids): any below are an earlier tenure's, which
        // a piece replays if they are not flushed.
        let own_from = pieces
            .iter()
            .map(|p| p.last_id.saturating_add(1))
            .fold(from, u64::max);
        let parts = pieces
            .into_iter()
            .filter(move |p| p.last_id >= from)
            .map(Some)
            .chain([None]);
        let wal = self.clone();
        // Each part starts once the one before it ended, so `within` bounds each.
        let history = futures::stream::iter(parts)
            .then(move |part| {
                let wal = wal.clone();
                async move {
                    match part {
                        Some(piece) => {
                            let first = from.max(piece.first_id);
                            wal.catch_up(&piece.prefix, region, first, piece.last_id, within)
                                .await
                        }
                        None => wal.read_stream(region, own_from).await,
                    }
                }
            })
            .flat_map(|part| match part {
                Ok(entries) => entries.boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .boxed();
        let span = tracing::info_span!("history", region, from);
        Ok(crate::reader::forward(history, span).into_stream())
    }

    /// Catches up `region` from the log of its earlier owner, under the prefix
    /// `source` on this WAL's store or stores (DESIGN.md "Regions moving between
    /// nodes"): its entries with ids from `from` through `through` (the source's
    /// [`Released::last_id`]), each once and in order; the stream ends after `through`.
    /// The source is opened read-only (read with this WAL's codec and keys) on the first
    /// catch-up from it and shared by every later one, and keeps its objects whole, so
    /// this node fetches each source object once however many of its regions it takes
    /// (DESIGN.md "Catch-up" says when an object costs more: above 1 MiB, evicted, or
    /// over a quorum). The stream
    /// fails [`Error::NotOnChain`] if the source does not hold `through` (it met a later
    /// id of the region first, or the source's snapshot records the region released
    /// below it), never hanging; and [`Error::CallTimeout`] once `within` passed (the
    /// source's open and every read included).
    pub async fn catch_up(
        &self,
        source: &str,
        region: u64,
        from: u64,
        through: u64,
        within: Duration,
    ) -> Result<EntryStream> {
        self.catch_up_to(source, region, from, through, None, within)
            .await
    }

    /// [`catch_up`](Self::catch_up) through the source's release: its last id, and the
    /// object that recorded it ([`Released::sequence`]), probed for at once with every
    /// key before it (one round trip once the release answered). A release with no
    /// last id leaves nothing to catch up: the stream is empty.
    pub async fn catch_up_released(
        &self,
        source: &str,
        region: u64,
        from: u64,
        released: &Released,
        within: Duration,
    ) -> Result<EntryStream> {
        match released.last_id {
            Some(through) => {
                let sequence = released.sequence;
                self.catch_up_to(source, region, from, through, sequence, within)
                    .await
            }
            None => Ok(EntryReceiver::empty().into_stream()),
        }
    }

    async fn catch_up_to(
        &self,
        source: &str,
        region: u64,
        from: u64,
        through: u64,
        released_in: Option<u64>,
        within: Duration,
    ) -> Result<EntryStream> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        let source = source.to_owned();
        let call = self.call(
            |reply| WalMsg::CatchUp {
                source,
                region,
                from,
                through,
                released_in,
                within,
                reply,
            },
            gone,
        );
        let call = async { call.await? };
        let entries = timed_within("catch_up", Some(within), Durability::NotWritten, call).await?;
        Ok(entries.into_stream())
    }

    /// Records that every entry `region` has now is safe elsewhere (a dropped region).
    pub async fn obsolete_all(&self, region: u64) -> Result<()> {
        self.obsolete(region, u64::MAX).await
    }

    /// [`read`](Self::read) as a `Stream`.
    pub async fn read_stream(&self, region: u64, from: u64) -> Result<EntryStream> {
        Ok(self.read(region, from).await?.into_stream())
    }

    /// Records that `region`'s entries with id `<= id` are safe elsewhere: reads hide them.
    /// The control region (`2^64 - 1`) is the log's own: refused with
    /// [`Error::ReservedRegion`].
    pub async fn obsolete(&self, region: u64, id: u64) -> Result<()> {
        object_store_wal::internal::chain::holdings::node_region(region)?;
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.timed("obsolete", Durability::NotWritten, async {
            self.call(|reply| WalMsg::Obsolete { region, id, reply }, gone)
                .await?
        })
        .await
    }

    /// The last entry id of `region` on the live chain (`None` once its entries all fell
    /// below the floor, as after a restart).
    pub async fn last_entry_id(&self, region: u64) -> Result<Option<u64>> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        let call = self.call(
            |reply| WalMsg::LastEntryId {
                region: Some(region),
                reply,
            },
            gone,
        );
        self.timed("last_entry_id", Durability::NotWritten, async {
            call.await?
        })
        .await
    }

    /// The last entry id of the whole log.
    pub async fn last_entry_id_overall(&self) -> Result<Option<u64>> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        let call = self.call(
            |reply| WalMsg::LastEntryId {
                region: None,
                reply,
            },
            gone,
        );
        self.timed("last_entry_id", Durability::NotWritten, async {
            call.await?
        })
        .await
    }

    /// Counters and positions.
    pub async fn stats(&self) -> Result<WalStats> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        let call = self.call(|reply| WalMsg::Stats { reply }, gone);
        self.timed("stats", Durability::NotWritten, call).await
    }

    /// Stops gracefully: uploads in flight finish and are acknowledged or failed, within
    /// `max_create_duration` (those still unanswered then fail as unknown outcomes,
    /// [`Durability::MayBeDurable`]); appends not sent get [`Error::Stopped`]. Returns
    /// `Ok` once the WAL has stopped, or the error that had ended it (e.g.
    /// [`Error::Fenced`], damaged data, restarts exhausted; as
    /// [`terminal_error`](Self::terminal_error), with `NotWritten`: it says nothing of
    /// any append). Idempotent: a second stop answers as the first. An append failing
    /// during the stop gets its own error, not the stop. Once it returns, nothing of this
    /// instance reaches the store: no request is sent, none in flight goes on, every
    /// task the WAL spawned ends (a read's after its consumer took the `Stopped` error).
    pub async fn stop(&self) -> Result<()> {
        self.timed("stop", Durability::NotWritten, async {
            // Answered once stopped; an error means the supervisor had already ended.
            let _ = self.actor.call(|reply| WalMsg::Stop { reply }, None).await;
            // Already closed by the supervisor, unless it had ended before.
            self.io.close();
            match self.terminal_error() {
                Some(e) => Err(e.with_durability(Durability::NotWritten)),
                None => Ok(()),
            }
        })
        .await
    }

    /// Ends the WAL at once, as a crash would: no upload is waited for, nothing more is
    /// answered. Uploads already sent may still land (the next open deals with them),
    /// but once this returns nothing more of this instance reaches the store: requests
    /// waiting for an answer are dropped, none is sent again, and the actors and tasks
    /// end.
    pub fn abort(&self) {
        // First: the actors below end asynchronously, and one still handling a message
        // could otherwise start a request after this returned.
        self.io.close();
        self.actor.stop_children(None);
        self.actor.kill();
    }

    /// Fault injection (feature `testing`): the writer panics.
    #[cfg(feature = "testing")]
    pub fn panic_writer(&self) {
        let _ = self.actor.cast(WalMsg::PanicWriter);
    }

    /// Fault injection (feature `testing`): the region's reader panics.
    #[cfg(feature = "testing")]
    pub fn panic_reader(&self, region: u64) {
        let _ = self.actor.cast(WalMsg::PanicReader { region });
    }
}

/// Runs `call` within `after`, if given; past it, [`Error::CallTimeout`] naming `op`.
async fn timed_within<T>(
    op: &'static str,
    after: Option<Duration>,
    durability: Durability,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let Some(after) = after else {
        return call.await;
    };
    match tokio::time::timeout(after, call).await {
        Ok(result) => result,
        Err(_) => Err(Error::CallTimeout {
            op,
            after,
            durability,
        }),
    }
}
