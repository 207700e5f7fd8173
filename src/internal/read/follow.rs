//! A region's entries in order as the chain grows. Every read is lazy and bounded:
//! segments are looked up in the catalog one at a time (a read that starts after an
//! append sees it) and a region's read stays at most `read_ahead` segments ahead of the
//! consumer. What tells a follower that the chain grew is its [`ChainGrowth`]: the
//! writer's acknowledgements in-process, or probing the prefix for a read-only open
//! (`tail`). A read is a follow whose chain never grows ([`read_region`]).

use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};

use super::fetch::*;
use crate::config::{Config, CorruptSegmentPolicy};
use crate::error::Result;
use crate::internal::chain::catalog::{Catalog, SegmentLocation};
use crate::internal::store::cache::RegionWatch;
use crate::internal::store::objects::WalIo;

/// Reads `region` from entry id `from` over a shared catalog, which may grow meanwhile:
/// the segments are looked up one by one as the stream is polled. A read is a follow
/// ([`follow_region`]) that ends at the chain's end: the same fetch, the same
/// corrupt-segment policy (`skips`: a damaged segment yields its
/// [`Error::CorruptSegment`](crate::Error::CorruptSegment), then the read ends under `Fail` or goes on under `Skip`).
pub fn read_region(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    from: u64,
    config: &Config,
) -> BoxStream<'static, Result<Entry>> {
    follow_region(io, catalog, region, from, config, ChainEnd)
}

/// The growth of a read: none, it ends where the chain ends when it gets there.
struct ChainEnd;

impl ChainGrowth for ChainEnd {
    fn grown(&mut self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async { Ok(false) })
    }
}

/// What tells a follower that the chain may have grown.
pub trait ChainGrowth: Send + 'static {
    /// Called before each pass over the catalog: growth after this call must wake
    /// [`grown`](Self::grown).
    fn mark(&mut self) {}

    /// Waits until the chain may have grown (and, for a read-only follower, extends the
    /// catalog); `Ok(false)` ends the follow (the WAL stopped).
    fn grown(&mut self) -> BoxFuture<'_, Result<bool>>;

    /// Brings the catalog up to date now, without waiting: after a segment was not found,
    /// so that an object the owner reclaimed leaves the catalog. In-process the writer's
    /// catalog is always current (it drops objects before the reclaimer deletes them).
    fn refresh(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// In-process growth: the writer bumps the watch with every acknowledged sequence (and
/// after each recovery); the follow ends when the sender is dropped.
impl ChainGrowth for tokio::sync::watch::Receiver<u64> {
    fn mark(&mut self) {
        self.borrow_and_update();
    }

    fn grown(&mut self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move { Ok(self.changed().await.is_ok()) })
    }
}

/// Follows `region` from entry id `from` over `catalog`: what it holds, then, each time
/// `growth` says the chain may have grown, what was added, in order, exactly once. Ends
/// when `growth` ends, when the consumer drops the stream, or at the first error (after
/// yielding it), except a damaged segment under [`CorruptSegmentPolicy::Skip`]: its
/// error is yielded as the report of the hole and the follow goes on after it. A segment
/// not found is looked up again once after [`ChainGrowth::refresh`]: if its object left
/// the catalog (below the floor: reclaimed) the follow goes on above the floor; if not,
/// the error is yielded and the follow ends.
pub fn follow_region(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    from: u64,
    config: &Config,
    growth: impl ChainGrowth,
) -> BoxStream<'static, Result<Entry>> {
    type Segments = BoxStream<'static, (SegmentLocation, Result<Vec<Entry>>)>;
    struct Following<G> {
        io: WalIo,
        catalog: Arc<RwLock<Catalog>>,
        region: u64,
        /// The first id not yet handed over (or skipped).
        next: u64,
        read_ahead: usize,
        policy: CorruptSegmentPolicy,
        growth: G,
        pass: Option<Segments>,
        /// The entries of the segment being handed over.
        pending: std::vec::IntoIter<Entry>,
        /// The object last found missing, after which the pass started again.
        missing: Option<u64>,
        ended: bool,
        /// The region's tail is handed to the cache while the follow lives.
        _watch: RegionWatch,
    }
    let state = Following {
        _watch: io.watch_region(region),
        io,
        catalog,
        region,
        next: from,
        read_ahead: config.read_ahead,
        policy: config.corrupt_segment_policy,
        growth,
        pass: None,
        pending: Vec::new().into_iter(),
        missing: None,
        ended: false,
    };
    stream::unfold(state, |mut s| async move {
        loop {
            if s.ended {
                return None;
            }
            if let Some(entry) = s.pending.next() {
                s.next = entry.id + 1;
                return Some((Ok(entry), s));
            }
            let pass = match &mut s.pass {
                Some(pass) => pass,
                None => {
                    s.growth.mark();
                    let pass = region_segments(
                        s.io.clone(),
                        s.catalog.clone(),
                        s.region,
                        s.next,
                        s.read_ahead,
                    );
                    s.pass.insert(pass)
                }
            };
            match pass.next().await {
                Some((_, Ok(mut entries))) => {
                    let next = s.next;
                    entries.retain(|e| e.id >= next);
                    s.pending = entries.into_iter();
                }
                Some((location, Err(e)))
                    if e.is_not_found() && s.missing != Some(location.sequence) =>
                {
                    // Reclaimed, maybe: look again over a catalog brought up to date.
                    s.missing = Some(location.sequence);
                    s.pass = None;
                    if let Err(e) = s.growth.refresh().await {
                        s.ended = true;
                        return Some((Err(e), s));
                    }
                    // Warns when it left the catalog: the next pass goes on above it.
                    reclaimed(&s.catalog, location.sequence, &e);
                }
                Some((location, Err(e))) => {
                    if skips(s.policy, &e) {
                        // The next pass starts after the hole.
                        s.next = s.next.max(location.record.last_entry_id + 1);
                    } else {
                        s.ended = true;
                    }
                    return Some((Err(e), s));
                }
                None => {
                    s.pass = None;
                    match s.growth.grown().await {
                        Ok(true) => {}
                        Ok(false) => return None,
                        Err(e) => {
                            s.ended = true;
                            return Some((Err(e), s));
                        }
                    }
                }
            }
        }
    })
    .boxed()
}
