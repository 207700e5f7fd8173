//! The sequential front end: [`ObjectStoreLogStore`], for callers without actors.
//!
//! It drives the same write protocol as the actor runtime's writer
//! ([`crate::internal::write::protocol`]), one object at a time: the open (recovery and fencing), then
//! [`append`](ObjectStoreLogStore::append) into the open batch and
//! [`flush`](ObjectStoreLogStore::flush) to seal, persist and commit it as the next
//! object of the epoch. A failed flush ends the epoch;
//! [`reopen`](ObjectStoreLogStore::reopen) starts a new one. Reads go through the shared
//! catalog, lazily. [`obsolete`](ObjectStoreLogStore::obsolete) raises the floor the
//! next objects carry, as in the actor runtime (so recovery reads only the live part);
//! this front end has no reclaimer: deleting below the floor is the caller's.
//!
//! A store that throttles creates (DESIGN.md "Throttled stores") is retried without
//! spending the retry budget, as in the runtime, and paced by the same rule
//! ([`crate::internal::write::pace`], through the write protocol): a flush whose create
//! met a throttle reply widens the interval between object starts, and the next
//! flush's create waits until an interval after it was answered; flushes whose creates
//! land without one narrow it back to none, this front end's usual interval.
//!
//! Metrics ([`crate::metrics`]): an append's latency runs from `append` to the `flush`
//! that made it durable; the interval between object starts is published as in the
//! runtime; pending bytes, uploads in flight, failed appends, restarts and reclaims are
//! the actor runtime's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use futures::stream::BoxStream;
use tracing::{info_span, warn, Instrument};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::internal::chain::catalog::{Catalog, Retention};
use crate::internal::open::{open_instance, recover_in, Opened, RecoveryReport};
use crate::internal::read::{
    follow_read_only, read_open_holdings, read_region, replay_regions, Entry, ReplayLimits,
};
use crate::internal::store::objects::WalIo;
use crate::internal::store::stores::WalStores;
use crate::internal::store::transport::RequestCounts;
use crate::internal::write::batch::{AppendParts, AppendReceipt};
use crate::internal::write::clock::{BootClock, CreateClock};
use crate::internal::write::epoch::WritePosition;
use crate::internal::write::persist::{persist_paced, PersistOutcome};
use crate::internal::write::protocol::{Action, Limits, Now, SharedChain, WhenFull, WriteProtocol};

/// The receipt of one flushed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReceipt {
    /// The object's sequence.
    pub sequence: u64,
    /// One receipt per append, in admission order.
    pub appends: Vec<AppendReceipt>,
}

/// The writing side of an instance opened as the writer: the write protocol of its
/// epoch, driven one object at a time.
type Writing = WriteProtocol<(), SharedChain>;

fn lock(retention: &Mutex<Retention>) -> MutexGuard<'_, Retention> {
    retention.lock().unwrap_or_else(|p| p.into_inner())
}

/// A WAL on one prefix of one object store.
///
/// Open it with [`open`](Self::open) (recovery and fencing: every earlier instance is
/// fenced) or [`open_read_only`](Self::open_read_only) (recovery only: it writes nothing
/// and fences nobody).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
///
/// use bytes::Bytes;
/// use futures::TryStreamExt;
/// use object_store::memory::InMemory;
/// use object_store_wal::{Config, ObjectStoreLogStore};
///
/// let store = Arc::new(InMemory::new());
/// let config = Config::new("node-7/wal").with_create_if_missing(true);
/// let mut wal = ObjectStoreLogStore::open(store.clone(), config.clone()).await?;
/// let receipt = wal
///     .append_and_flush(vec![(1, vec![Bytes::from_static(b"put k v")])])
///     .await?;
/// drop(wal);
///
/// // Another instance opens the prefix (fencing the first) and replays region 1.
/// let wal = ObjectStoreLogStore::open(store, config).await?;
/// let entries: Vec<_> = wal.read(1, 0).try_collect().await?;
/// assert_eq!(entries[0].id, receipt.parts[0].first_id);
/// assert_eq!(entries[0].payload, Bytes::from_static(b"put k v"));
/// # Ok::<(), object_store_wal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct ObjectStoreLogStore {
    io: WalIo,
    config: Config,
    catalog: Arc<RwLock<Catalog>>,
    retention: Arc<Mutex<Retention>>,
    report: RecoveryReport,
    writing: Option<Writing>,
    clock: Arc<dyn CreateClock>,
}

/// The live chain of an [`ObjectStoreLogStore`] at one moment
/// ([`ObjectStoreLogStore::chain_summary`]): what recovery kept above the floor, and what
/// this instance appended since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainSummary {
    /// Objects on the chain.
    pub objects: u64,
    /// Entries in them.
    pub entries: u64,
    /// Regions with entries on the chain, the log's control region included once it
    /// has entries (of a [`SourceLog`](crate::SourceLog) opened for a few regions:
    /// those of them with entries).
    pub regions: u64,
    /// Segments of those regions on the chain: what the catalog holds an entry for.
    pub segments: u64,
}

impl ChainSummary {
    /// The summary of `catalog`'s live chain.
    pub(crate) fn of(catalog: &Catalog) -> Self {
        ChainSummary {
            objects: catalog.object_count() as u64,
            entries: catalog.objects().map(|(_, o)| o.entries).sum(),
            regions: catalog.region_count() as u64,
            segments: catalog.segment_count() as u64,
        }
    }
}

impl ObjectStoreLogStore {
    /// Opens the prefix as its writer: recovers the chain, claims holes, writes the
    /// opening object (fencing every earlier instance) and starts a new epoch. `stores`
    /// is one store, or several that hold one log ([`WalStores::quorum`]).
    pub async fn open(stores: impl Into<WalStores>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = stores.into().into_io(&config)?;
        Self::open_io(io, config).await
    }

    /// [`open`](Self::open) through `io` (tests that wrap the store access).
    #[doc(hidden)]
    pub async fn open_io(io: WalIo, config: Config) -> Result<Self> {
        config.validate()?;
        let mut opened = open_instance(&io, &config).await?;
        // Regions this log released stay refused (DESIGN.md "Regions moving between
        // nodes"); this front end neither releases nor acquires.
        let holdings = read_open_holdings(&io, config.recovery_mode, &mut opened.recovery).await?;
        let Opened {
            recovery,
            epoch,
            opening_started,
        } = opened;
        let retention = Retention::new(&recovery.catalog, epoch.floor);
        let limits = Limits::sequential(&config).for_chain(&config, &recovery.catalog);
        let chain = SharedChain {
            catalog: Arc::new(RwLock::new(recovery.catalog)),
            retention: Arc::new(Mutex::new(retention)),
        };
        let writing = WriteProtocol::new(epoch, opening_started, limits, chain.clone())
            .with_holdings(holdings);
        Ok(ObjectStoreLogStore {
            writing: Some(writing),
            io,
            catalog: chain.catalog,
            retention: chain.retention,
            report: recovery.report,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix for reading only: recovery (steps 1 and 2), no write, no fencing.
    /// Over several stores ([`WalStores::quorum`]), the chain over the values a quorum
    /// holds.
    pub async fn open_read_only(stores: impl Into<WalStores>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = stores.into().into_io(&config)?;
        Self::open_read_only_io(io, config).await
    }

    /// [`open_read_only`](Self::open_read_only) through `io` (tests).
    #[doc(hidden)]
    pub async fn open_read_only_io(io: WalIo, config: Config) -> Result<Self> {
        config.validate()?;
        let recovery = recover_in(&io, config.recovery_concurrency, config.recovery_mode)
            .instrument(info_span!("recover", prefix = %io.prefix()))
            .await?;
        Ok(ObjectStoreLogStore {
            io,
            catalog: Arc::new(RwLock::new(recovery.catalog)),
            retention: Arc::new(Mutex::new(Retention::default())),
            report: recovery.report,
            writing: None,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix again after the epoch ended: a fresh recovery and a new epoch.
    /// Admitted but unflushed appends are dropped (they were never sent).
    pub async fn reopen(&mut self) -> Result<()> {
        if self.writing.is_none() {
            return Err(Error::ReadOnly);
        }
        let mut opened = open_instance(&self.io, &self.config).await?;
        let mode = self.config.recovery_mode;
        let holdings = read_open_holdings(&self.io, mode, &mut opened.recovery).await?;
        // Watermarks reported before stay true in the new epoch.
        lock(&self.retention).reopen(&opened.recovery.catalog, opened.epoch.floor);
        let chain = SharedChain {
            catalog: self.catalog.clone(),
            retention: self.retention.clone(),
        };
        let limits =
            Limits::sequential(&self.config).for_chain(&self.config, &opened.recovery.catalog);
        let mut writing = WriteProtocol::new(opened.epoch, opened.opening_started, limits, chain)
            .with_holdings(holdings);
        writing.restart_clock(self.clock.now());
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = opened.recovery.catalog;
        self.writing = Some(writing);
        self.report = opened.recovery.report;
        Ok(())
    }

    /// Measures creates on `clock` instead of [`BootClock`] (tests drive it by hand).
    pub fn with_clock(mut self, clock: Arc<dyn CreateClock>) -> Self {
        if let Some(w) = self.writing.as_mut() {
            w.restart_clock(clock.now());
        }
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store access of this WAL.
    #[doc(hidden)]
    pub fn io(&self) -> &WalIo {
        &self.io
    }

    /// What recovery found at the last open.
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The live chain as the catalog holds it now: its objects, entries and regions.
    pub fn chain_summary(&self) -> ChainSummary {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        ChainSummary::of(&catalog)
    }

    /// What happened to this WAL's requests since it was opened (hedges, timeouts,
    /// damage found), shared by every store beneath it.
    pub fn request_counts(&self) -> RequestCounts {
        self.io.request_stats().counts()
    }

    /// The catalog, shared with reads.
    #[doc(hidden)]
    pub fn catalog(&self) -> Arc<RwLock<Catalog>> {
        self.catalog.clone()
    }

    /// The interval between object starts, `None` when read-only: zero, or wider while
    /// the store throttles creates (tests).
    #[doc(hidden)]
    pub fn object_interval(&self) -> Option<Duration> {
        self.writing.as_ref().map(|w| w.object_interval())
    }

    /// The write position, `None` when read-only.
    pub fn epoch(&self) -> Option<WritePosition> {
        self.writing.as_ref().map(|w| w.position())
    }

    /// Admits an append (one or more regions, atomically) into the open batch; returns its
    /// index among the batch's appends. [`Error::BatchFull`]: flush first.
    pub fn append(&mut self, parts: AppendParts) -> Result<usize> {
        let now = Now {
            at: Instant::now(),
            clock: self.clock.now(),
        };
        let writing = self.writing.as_mut().ok_or(Error::ReadOnly)?;
        writing
            .admit(parts, (), false, WhenFull::Refuse, now)
            .map(|admitted| admitted.index)
            .map_err(|(_, e)| e)
    }

    /// Flushes the open batch as the next object (seal, persist, commit) and returns the
    /// ids of its appends; `None` when nothing was admitted.
    ///
    /// While the store throttles creates, the create waits first for its start slot:
    /// an interval (widened by each flush whose create met a throttle reply) after the
    /// last throttled create was answered (DESIGN.md "Throttled stores").
    ///
    /// A failure ends the epoch (or fences the instance): nothing more is written under
    /// it, and [`reopen`](Self::reopen) starts a new one.
    ///
    /// Dropped before it returns (a caller's timeout): an object sealed and not yet
    /// started (waiting for its slot) is started by the next flush, whose receipt is
    /// then its last object's; a create under way has an unknown outcome, so the next
    /// flush ends the epoch (`EpochEnded`, `MayBeDurable`): reopen.
    pub async fn flush(&mut self) -> Result<Option<FlushReceipt>> {
        let clock = self.clock.clone();
        let now = || Now {
            at: Instant::now(),
            clock: clock.now(),
        };
        let writing = self.writing.as_mut().ok_or(Error::ReadOnly)?;
        if let Some(e) = writing.ended() {
            return Err(e.with_durability(crate::error::Durability::NotWritten));
        }
        if writing.uploading() > 0 {
            // An earlier flush was dropped while its create was under way: nobody will
            // learn its outcome, so the epoch ends (its appends may be durable).
            writing.abandon_uploads(now());
        } else if writing.batch_is_empty() && writing.pending_bytes() == 0 {
            return Ok(None);
        }
        if !writing.batch_is_empty() {
            writing.flush(now())?;
        }
        writing.poll(now());
        let mut receipt = None;
        while let Some(action) = writing.poll_action() {
            match action {
                Action::Create(sealed) => {
                    let sequence = sealed.sequence();
                    let throttled = AtomicBool::new(false);
                    let on_throttle = || throttled.store(true, Ordering::Relaxed);
                    let outcome = match sealed.encoded() {
                        Ok(object) => {
                            persist_paced(
                                &self.io,
                                object,
                                &self.config.retry,
                                self.config.max_create_duration,
                                clock.as_ref(),
                                &on_throttle,
                            )
                            .instrument(info_span!("upload", sequence, bytes = object.len()))
                            .await
                        }
                        Err(e) => PersistOutcome::not_encoded(sequence, &e),
                    };
                    if throttled.load(Ordering::Relaxed) {
                        // Once per create (one object at a time: its replies are one
                        // round): the interval widens and the next start slot is an
                        // interval from now.
                        writing.handle_throttled(sequence, now());
                    }
                    writing.handle_outcome(sequence, outcome, now());
                    self.io
                        .metrics()
                        .object_interval
                        .set(writing.object_interval().as_secs_f64());
                }
                Action::Acknowledge {
                    sealed,
                    waiters,
                    sealed_at,
                    live_objects,
                    ..
                } => {
                    let metrics = self.io.metrics();
                    metrics.acknowledged(sealed.acknowledged(), sealed_at.elapsed(), live_objects);
                    for pending in waiters {
                        metrics.append_to_durable.record(pending.admitted.elapsed());
                    }
                    receipt = Some(FlushReceipt {
                        sequence: sealed.sequence(),
                        appends: sealed.receipts.clone(),
                    });
                }
                Action::EpochEnded { error, .. } => {
                    warn!(error = %error, "object not acknowledged; the epoch is over");
                    return Err(error);
                }
                // The object's start slot has not come (the store throttled the last
                // create: the interval is paced): wait for it, then start it.
                Action::WakeAt(due) => {
                    tokio::time::sleep_until(due).await;
                    writing.poll(now());
                }
                // No reclaimer here, no ids handed out at admission; failed appends are
                // this call's error.
                Action::PublishFloor(_) | Action::Fail { .. } | Action::HandedOutFailed { .. } => {}
            }
        }
        Ok(receipt)
    }

    /// Records that `region`'s entries with id `<= id` are obsolete (safe elsewhere):
    /// reads no longer return them, and the floor the next objects carry rises past the
    /// objects no region needs, so a recovery reads only the live part. Nothing is
    /// deleted by this front end.
    pub fn obsolete(&mut self, region: u64, id: u64) -> Result<()> {
        if self.writing.is_none() {
            return Err(Error::ReadOnly);
        }
        crate::internal::chain::holdings::node_region(region)?;
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        lock(&self.retention).obsolete(&catalog, region, id);
        Ok(())
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
        // Ids at or below the region's obsolete watermark are hidden.
        let from = match lock(&self.retention).watermark(region) {
            Some(w) => from.max(w.saturating_add(1)),
            None => from,
        };
        read_region(
            self.io.clone(),
            self.catalog.clone(),
            region,
            from,
            &self.config,
        )
    }

    /// Every entry of the regions of `from` (region -> first id), each object fetched once
    /// whatever the regions it holds (a node's restart), within the configuration's
    /// `replay_concurrency` and `replay_budget_bytes`. A region's entries come in order;
    /// regions interleave. Ids at or below a region's obsolete watermark are hidden.
    pub fn replay(
        &self,
        from: impl IntoIterator<Item = (u64, u64)>,
    ) -> BoxStream<'static, Result<Entry>> {
        let retention = lock(&self.retention);
        let from = from
            .into_iter()
            .map(|(region, id)| match retention.watermark(region) {
                Some(w) => (region, id.max(w.saturating_add(1))),
                None => (region, id),
            })
            .collect();
        replay_regions(
            self.io.clone(),
            self.catalog.clone(),
            from,
            ReplayLimits::of(&self.config),
            self.config.corrupt_segment_policy,
        )
    }

    /// Follows `region` from `from` by probing the keys after the chain end every
    /// `poll_interval` while objects appear, backing off to once a second while none
    /// does, without listing (see [`follow_read_only`]); meant for a read-only open of
    /// another node's prefix. The open's `Config` should be the owner's: its link window
    /// bounds how long the next key may stay absent before the follower lists.
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
