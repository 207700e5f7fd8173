//! Another node's log opened read-only: the source of regions this node takes over
//! (DESIGN.md "Regions moving between nodes", catch-up), and the one tail that the
//! read-only followers of its regions in this process share (DESIGN.md "Tailing without
//! listing", many followers of one prefix). Its chain is recovered once and
//! extended by probing (as a read-only follower's, `tail`), and every region taken from
//! it reads over that one catalog, one segment cache and one cache of whole objects
//! (each region's segment copied out of the object's one read), so one node fetches each
//! source object once however many of its regions it takes (DESIGN.md says when an
//! object costs more: larger than `SOURCE_OBJECT_LARGEST`, or probed while idle).
//!
//! A catch-up delivers a region's entries from an id up to exactly the id the source's
//! release answered, then ends. It never hangs on an id the source does not hold: once
//! the source's last control snapshot records the region released (its release is
//! acknowledged before it answers), a catch-up that has read everything and not met the
//! id fails [`Error::NotOnChain`], and so does one that meets a later id of the region
//! first, and one that has read everything of a chain that ends at a closed object (a
//! fenced prefix never grows), at once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use tracing::info_span;

use super::fetch::*;
use super::follow::*;
use super::tail::{tail_catalog, TailedGrowth};
use crate::config::Config;
use crate::error::Released;
use crate::error::{Durability, Error, Result};
use crate::format::control::CONTROL_REGION;
use crate::internal::chain::catalog::Catalog;
use crate::internal::open::recover;
use crate::internal::sequential::ChainSummary;
use crate::internal::store::cache::WholeObjectsWanted;
use crate::internal::store::objects::{WalIo, IDLE_WHOLE_PROBE};
use crate::internal::store::stores::WalStores;

/// Bytes of a source's objects kept whole for its catch-ups
/// ([`WholeObjects`](crate::internal::store::cache::WholeObjects)): objects of a few
/// hundred milliseconds of a busy source, so that the catch-ups of regions moved
/// together share each object's one read.
pub const SOURCE_OBJECT_BYTES: u64 = 8 * 1024 * 1024;

/// The largest source object read whole (at most `Config::whole_read_threshold`);
/// a larger object's segments are ranged reads, one per region.
pub const SOURCE_OBJECT_LARGEST: u64 = 1024 * 1024;

/// Bytes of objects kept whole by a source log opened for a few regions' followers
/// ([`SourceLog::open_regions`]): a round of probes' objects (up to `MAX_PROBES`
/// of 64 KiB) twice, long enough for the follows to copy their segments out; its
/// followers read each object once and never again.
pub const FOLLOWED_OBJECT_BYTES: u64 = 1024 * 1024;

/// `within` from now; a caller's too long wait is a year, never an overflow.
pub fn deadline_after(within: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(within)
        .unwrap_or_else(|| now + crate::config::MAX_DURATION)
}

/// A source log opened read-only (see the module docs). Dropping it ends its polling
/// task once no catch-up or follow over it is left. A poll that fails (a probe's error
/// and then the listing's) ends the polling for good ([`has_failed`](Self::has_failed)):
/// a later follow or catch-up over it reads what the catalog holds, then fails with
/// that error. Open the source again (the WAL's catch-ups do).
pub struct SourceLog {
    io: WalIo,
    config: Config,
    catalog: Arc<RwLock<Catalog>>,
    growth: TailedGrowth,
    /// Whether a follow reads objects whole (up to `SOURCE_OBJECT_LARGEST`) as a
    /// catch-up does: a source's, whose regions move together, not a few regions'
    /// follower's, which would read every region's bytes of every object for its few.
    follows_read_whole: bool,
    /// One clone per follow or catch-up over it ([`readers`](Self::readers)).
    readers: Arc<()>,
}

/// What a follow or catch-up over a source log holds while it lives: it counts among
/// the log's readers, and (if it reads whole objects) makes probes read them whole.
struct ReadGuard {
    _reader: Arc<()>,
    _wanted: Option<WholeObjectsWanted>,
}

impl std::fmt::Debug for SourceLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceLog")
            .field("prefix", &self.io.prefix().as_ref())
            .finish_non_exhaustive()
    }
}

impl SourceLog {
    /// Recovers the source's chain (read-only: nothing is written, nothing fenced) and
    /// starts polling it for new objects every `poll_interval` while objects appear.
    pub async fn open(io: WalIo, config: Config, poll_interval: Duration) -> Result<Self> {
        Self::open_keeping(io, config, poll_interval, None).await
    }

    /// [`open`](Self::open) for followers of a few of the source's regions: its catalog
    /// keeps the segments of `regions` (and of the control region) alone, from the
    /// recovered chain on, so its memory grows with the regions followed, not with every
    /// region of every object it reads (a follower of 8 regions of a log of 1,000 holds
    /// 8 regions' segments). A [`follow`](Self::follow) or catch-up of any other region
    /// fails [`Error::NotKept`]. Every follow over it shares its one poll and its reads:
    /// each object's footer is fetched once however many regions are followed. An
    /// object up to `IDLE_WHOLE_PROBE` (64 KiB) is read whole in that one GET; a larger
    /// one's followed segments are ranged reads (a follow here does not read objects
    /// whole up to `SOURCE_OBJECT_LARGEST` as a catch-up does: a follower of a few
    /// regions would download every region's bytes of every object).
    pub async fn open_regions(
        io: WalIo,
        config: Config,
        poll_interval: Duration,
        regions: impl IntoIterator<Item = u64>,
    ) -> Result<Self> {
        let regions: Vec<u64> = regions.into_iter().collect();
        Self::open_keeping(io, config, poll_interval, Some(regions)).await
    }

    async fn open_keeping(
        io: WalIo,
        config: Config,
        poll_interval: Duration,
        regions: Option<Vec<u64>>,
    ) -> Result<Self> {
        let kept_few = regions.is_some();
        // A few regions' log reads no object whole past 64 KiB, a catch-up's probes
        // included: its 1 MiB holds two rounds of probes of those.
        let (budget, largest) = if kept_few {
            (FOLLOWED_OBJECT_BYTES, IDLE_WHOLE_PROBE)
        } else {
            (SOURCE_OBJECT_BYTES, SOURCE_OBJECT_LARGEST)
        };
        let largest = config.whole_read_threshold.min(largest);
        let io = io.with_whole_objects(budget, largest);
        // Reads at the node's `read_ahead`: catch-ups of many regions at once must not
        // crowd out the node's own work (at 8 segments at once, as a lone read-only
        // follower fetches, the cluster example's unmoved appends' p99 rose by 15 ms).
        let mut recovery = recover(&io, config.recovery_concurrency).await?;
        if let Some(regions) = regions {
            recovery.catalog.keep_only(regions);
        }
        let span = info_span!("source", prefix = %io.prefix());
        let (catalog, growth) =
            span.in_scope(|| tail_catalog(&io, recovery.catalog, &config, poll_interval));
        Ok(SourceLog {
            io,
            config,
            catalog,
            growth,
            follows_read_whole: !kept_few,
            readers: Arc::new(()),
        })
    }

    /// [`open`](Self::open) over `stores` (one, or a quorum) under `config.prefix`.
    pub async fn open_stores(
        stores: impl Into<WalStores>,
        config: Config,
        poll_interval: Duration,
    ) -> Result<Self> {
        let io = Self::io_of(stores, &config)?;
        Self::open(io, config, poll_interval).await
    }

    /// The store access under `config.prefix` of a valid `config`.
    fn io_of(stores: impl Into<WalStores>, config: &Config) -> Result<WalIo> {
        config.validate()?;
        stores.into().into_io(config)
    }

    /// [`open_regions`](Self::open_regions) over `stores` (one, or a quorum) under
    /// `config.prefix`.
    pub async fn open_stores_regions(
        stores: impl Into<WalStores>,
        config: Config,
        poll_interval: Duration,
        regions: impl IntoIterator<Item = u64>,
    ) -> Result<Self> {
        let io = Self::io_of(stores, &config)?;
        Self::open_regions(io, config, poll_interval, regions).await
    }

    /// Follows `region` from id `from` as the source's chain grows: a read-only
    /// follower of another node's region, or a reader ahead of a region's release (so
    /// that only the tail is left for the catch-up). Ends at the first error, or when
    /// the polling fails for good ([`has_failed`](Self::has_failed)).
    pub fn follow(&self, region: u64, from: u64) -> BoxStream<'static, Result<Entry>> {
        if let Err(e) = self.kept(region) {
            return stream::iter([Err(e)]).boxed();
        }
        let (io, catalog) = (self.io.clone(), self.catalog.clone());
        let guard = self.read_guard(self.follows_read_whole);
        follow_region(io, catalog, region, from, &self.config, self.growth.clone())
            .map(move |entry| {
                let _guard = &guard;
                entry
            })
            .boxed()
    }

    /// Delivers `region`'s entries with ids from `from` through `through` (the last id
    /// the source's release answered), each once and in order, and ends after
    /// `through`. Fails [`Error::NotOnChain`] if the source does not hold `through`,
    /// and [`Error::CallTimeout`] if the whole catch-up takes longer than `within`
    /// (reads included, not only the wait for the chain to grow); either ends the
    /// stream.
    pub fn catch_up(
        &self,
        region: u64,
        from: u64,
        through: u64,
        within: Duration,
    ) -> BoxStream<'static, Result<Entry>> {
        self.catch_up_to(region, from, through, None, within)
    }

    /// [`catch_up`](Self::catch_up) through the release's answer: its last id, and the
    /// object that recorded it ([`Released::sequence`]), which the catch-up probes for
    /// at once with every key before it (one round trip). A release with no last id
    /// leaves nothing to catch up.
    pub fn catch_up_released(
        &self,
        region: u64,
        from: u64,
        released: &Released,
        within: Duration,
    ) -> BoxStream<'static, Result<Entry>> {
        match released.last_id {
            Some(through) => self.catch_up_to(region, from, through, released.sequence, within),
            None => stream::empty().boxed(),
        }
    }

    /// [`catch_up`](Self::catch_up), probing at once for `recorded_at` (the object that
    /// recorded the release, [`Released::sequence`]) and every key before it, if known.
    pub fn catch_up_to(
        &self,
        region: u64,
        from: u64,
        through: u64,
        recorded_at: Option<u64>,
        within: Duration,
    ) -> BoxStream<'static, Result<Entry>> {
        if let Err(e) = self.kept(region) {
            return stream::iter([Err(e)]).boxed();
        }
        if from > through {
            return stream::empty().boxed();
        }
        let growth = CatchUpGrowth {
            inner: self.growth.clone(),
            io: self.io.clone(),
            catalog: self.catalog.clone(),
            region,
            through,
            recorded_at,
            checked_control: None,
            refreshed: false,
            _guard: self.read_guard(true),
        };
        let (io, catalog) = (self.io.clone(), self.catalog.clone());
        let follow = follow_region(io, catalog, region, from, &self.config, growth);
        let deadline = deadline_after(within);
        stream::unfold(Some(follow), move |follow| async move {
            let mut follow = follow?;
            let next = match tokio::time::timeout_at(deadline, follow.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let timeout = Error::CallTimeout {
                        op: "catch_up",
                        after: within,
                        durability: Durability::NotWritten,
                    };
                    return Some((Err(timeout), None));
                }
            };
            match next {
                Some(Ok(entry)) if entry.id < through => Some((Ok(entry), Some(follow))),
                Some(Ok(entry)) if entry.id == through => Some((Ok(entry), None)),
                Some(Ok(entry)) => {
                    let passed = Error::NotOnChain {
                        region,
                        id: through,
                        found: Some(entry.id),
                    };
                    Some((Err(passed), None))
                }
                Some(Err(e)) => Some((Err(e), None)),
                None => {
                    let stopped = Error::Stopped {
                        durability: Durability::NotWritten,
                    };
                    Some((Err(stopped), None))
                }
            }
        })
        .boxed()
    }

    /// Fails [`Error::NotKept`] for a region the catalog drops
    /// ([`open_regions`](Self::open_regions)).
    fn kept(&self, region: u64) -> Result<()> {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        if catalog.keeps(region) {
            Ok(())
        } else {
            Err(Error::NotKept { region })
        }
    }

    /// Marks a read under way: while the guard lives, it counts among the readers and,
    /// with `whole`, probes read objects whole.
    fn read_guard(&self, whole: bool) -> ReadGuard {
        ReadGuard {
            _reader: self.readers.clone(),
            _wanted: self.io.whole_objects().filter(|_| whole).map(|w| w.want()),
        }
    }

    /// Follows and catch-ups over it still running (streams not yet dropped): a log
    /// with none only polls, and its keeper may drop it.
    pub fn readers(&self) -> usize {
        Arc::strong_count(&self.readers).saturating_sub(1)
    }

    /// Whether its polling ended for good on a failed poll (a follow or catch-up over
    /// it still reads what its catalog holds, then fails with that error): open the
    /// source again.
    pub fn has_failed(&self) -> bool {
        self.growth.failure().is_some()
    }

    /// The catalog of the source's chain as far as this node has seen it.
    #[doc(hidden)]
    pub fn catalog(&self) -> &Arc<RwLock<Catalog>> {
        &self.catalog
    }

    /// The source's chain as far as this node has seen it: its objects, their entries,
    /// and the regions and segments this log keeps of them.
    pub fn chain_summary(&self) -> ChainSummary {
        ChainSummary::of(&self.catalog.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A catch-up's growth: the shared polling, plus a look at the source's last control
/// snapshot whenever a new one is on the catalog. The first wait probes the keys after
/// the chain end at once (the release just landed: no wait for the next poll).
struct CatchUpGrowth {
    inner: TailedGrowth,
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    through: u64,
    /// The object that recorded the release, if known: probed for at once.
    recorded_at: Option<u64>,
    /// The sequence of the last control segment looked at.
    checked_control: Option<u64>,
    refreshed: bool,
    /// While it reads, it counts among the source's readers, and the source's probes
    /// read objects whole.
    _guard: ReadGuard,
}

impl CatchUpGrowth {
    /// Fails if the source's last snapshot records the region released below
    /// `through`: then `through` is not, and will never be, on its chain. Called when
    /// the follow has read all the catalog held at its last pass.
    async fn check_release(&mut self) -> Result<()> {
        let (control, object_len) = {
            let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
            let control = catalog.segments_from(CONTROL_REGION, 0).last().copied();
            let object_len = control.and_then(|c| catalog.object_len(c.sequence));
            (control, object_len)
        };
        let sequence = control.map(|c| c.sequence);
        // A snapshot older than the release's own (the catalog not there yet) may
        // record an earlier release of the region: not the one to judge by.
        let older = matches!((sequence, self.recorded_at), (Some(s), Some(r)) if s < r);
        if sequence.is_none() || sequence == self.checked_control || older {
            return Ok(());
        }
        self.checked_control = sequence;
        let holdings = read_holdings_at(&self.io, control, object_len).await?;
        match holdings.released(self.region) {
            // Released below `through` (or holding nothing): the region's entries there
            // end below it for good. (Released above it, the follow meets `through` or
            // passes it.)
            Some(last) if last.is_none_or(|last| last < self.through) => Err(Error::NotOnChain {
                region: self.region,
                id: self.through,
                found: last,
            }),
            _ => Ok(()),
        }
    }
}

impl CatchUpGrowth {
    /// Fails once the chain ends at a closed object (a fenced prefix, DESIGN.md "A
    /// node's regions after it died") and holds nothing of the region at or above
    /// `through`: it never grows, so `through` is not, and will never be, there. No
    /// wait for a poll. (A poll may have brought the closed object after the follow's
    /// last pass, with objects before it the follow has not read: while the catalog
    /// holds the region's ids up to `through`, the follow passes again.)
    fn check_closed(&self) -> Result<()> {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        let last = catalog.last_entry_id(self.region);
        match catalog.tip() {
            Some((_, tip)) if tip.closed && last.is_none_or(|l| l < self.through) => {
                Err(Error::NotOnChain {
                    region: self.region,
                    id: self.through,
                    found: last,
                })
            }
            _ => Ok(()),
        }
    }
}

impl ChainGrowth for CatchUpGrowth {
    fn mark(&mut self) {
        self.inner.mark();
    }

    fn grown(&mut self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            if !self.refreshed {
                // The release just landed: probe for it now, not at the next poll.
                self.refreshed = true;
                self.inner.probe_now(self.recorded_at).await?;
                return Ok(true);
            }
            self.check_closed()?;
            self.check_release().await?;
            self.inner.grown().await
        })
    }

    fn refresh(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.refresh()
    }
}
