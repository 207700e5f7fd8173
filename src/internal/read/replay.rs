//! A replay of many regions at once (a node's recovery): each chain object is fetched
//! once, with one ranged read over the segments it needs, up to `replay_concurrency`
//! objects at once while the bytes fetched and not yet handed to the consumer fit
//! `replay_budget_bytes` ([`ReplayLimits`]; an object larger than the budget is fetched
//! alone). The other regions of an object with a damaged segment are read in full.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock};

use futures::stream::{self, BoxStream, StreamExt};
use tracing::Instrument;

use super::fetch::*;
use crate::config::{Config, CorruptSegmentPolicy};
use crate::error::{Error, Result};
use crate::format::{self};
use crate::internal::chain::catalog::{Catalog, SegmentLocation};
use crate::internal::store::objects::WalIo;

/// How much a replay of many regions ([`replay_regions`]) fetches ahead of its consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Objects fetched at once, at most (0 counts as 1).
    pub concurrency: usize,
    /// Bytes fetched (or being fetched) and not yet handed to the consumer, at most: each
    /// object's planned span counts from before its GET starts until its last entry has
    /// been handed over. An object whose span alone exceeds this is still fetched, alone.
    pub budget_bytes: u64,
}

impl ReplayLimits {
    /// The limits `config` sets: `replay_concurrency` and `replay_budget_bytes`.
    pub fn of(config: &Config) -> Self {
        ReplayLimits {
            concurrency: config.replay_concurrency,
            budget_bytes: config.replay_budget_bytes,
        }
    }
}

/// Replays many regions at once, each from its own entry id: every chain object that
/// holds a wanted entry is fetched once, with one ranged read spanning its needed
/// segments, and each needed segment is verified (CRC) before it is decoded. Entries
/// come object by object in sequence order, so each region's entries are in order.
///
/// Up to `limits.concurrency` objects are fetched at once, each in a task of its own,
/// as long as the spans fetched and not yet handed to the consumer fit
/// `limits.budget_bytes` (an object larger than the budget waits until nothing else is
/// held and is then fetched alone). The chain objects are looked up in the catalog one
/// at a time as the budget admits them, so memory stays bounded whatever the log's
/// length. The stream must be polled within a Tokio runtime (the fetches are spawned
/// tasks); dropping it aborts the fetches in flight.
///
/// A damaged segment yields its [`Error::CorruptSegment`] in its place and touches no
/// other region: under [`CorruptSegmentPolicy::Fail`] its region's replay ends there
/// (none of its later entries come, so a consumer never mistakes a hole for the end)
/// while the other regions go on; under `Skip` its region goes on after the hole. Any
/// other error (a failed GET) concerns every region of its object: the replay yields it
/// and ends, under either policy; except an object not found that the catalog dropped
/// below a floor meanwhile (reclaimed: its entries are obsolete), which is passed over.
pub fn replay_regions(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    from: HashMap<u64, u64>,
    limits: ReplayLimits,
    policy: CorruptSegmentPolicy,
) -> BoxStream<'static, Result<Entry>> {
    let from = Arc::new(from);
    let replay = Replay {
        io,
        planner: Planner {
            catalog,
            from: from.clone(),
            ended_regions: HashSet::new(),
            after: 0,
            exhausted: false,
        },
        from,
        limits,
        policy,
        waiting: None,
        fetching: VecDeque::new(),
        held: 0,
        handing: Vec::new().into_iter(),
        handing_bytes: 0,
        ended: false,
    };
    let started = tokio::time::Instant::now();
    stream::unfold(replay, move |mut replay| async move {
        let Some(item) = replay.next_entry().await else {
            let took = started.elapsed();
            replay.io.metrics().replay_duration.record(took);
            return None;
        };
        Some((item, replay))
    })
    .boxed()
}

/// One chain object a replay fetches: the segments it needs, sorted by offset.
struct Plan {
    records: Vec<SegmentLocation>,
    /// The bytes of the span that covers them: what the budget counts.
    bytes: u64,
}

/// Looks the chain objects a replay needs up in the catalog, one at a time, in sequence
/// order (a catalog that grows meanwhile is seen).
struct Planner {
    catalog: Arc<RwLock<Catalog>>,
    from: Arc<HashMap<u64, u64>>,
    /// Regions whose replay ended at a damaged segment (`Fail`): no longer planned.
    ended_regions: HashSet<u64>,
    /// The last sequence planned.
    after: u64,
    exhausted: bool,
}

impl Planner {
    fn next(&mut self) -> Option<Plan> {
        if self.exhausted {
            return None;
        }
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        let objects = catalog
            .objects_from(self.after.saturating_add(1))
            .filter(|(_, o)| o.segments > 0)
            .map(|(s, o)| (s, *o));
        for (sequence, object) in objects {
            let mut records: Vec<SegmentLocation> = Vec::new();
            for (&region, &first) in self.from.iter() {
                if self.ended_regions.contains(&region) {
                    continue;
                }
                let start = first.max(format::entry_id(sequence + object.id_offset, 0));
                if let Some(loc) = catalog
                    .segments_from(region, start)
                    .first()
                    .filter(|l| l.sequence == sequence)
                {
                    records.push(*loc);
                }
            }
            records.sort_by_key(|l| l.record.offset);
            if let (Some(first), Some(last)) = (records.first(), records.last()) {
                let bytes = last.record.range().end.saturating_sub(first.record.offset);
                self.after = sequence;
                return Some(Plan { records, bytes });
            }
        }
        self.exhausted = true;
        None
    }
}

/// One object being fetched (and decoded) in a task of its own, aborted if dropped
/// before it finished (the consumer dropped the replay).
struct Fetch {
    sequence: u64,
    bytes: u64,
    task: tokio::task::JoinHandle<Result<Vec<Result<Entry>>>>,
}

impl Drop for Fetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The state of a replay of many regions.
struct Replay {
    io: WalIo,
    from: Arc<HashMap<u64, u64>>,
    planner: Planner,
    limits: ReplayLimits,
    policy: CorruptSegmentPolicy,
    /// The next object to fetch, looked up but waiting for the budget.
    waiting: Option<Plan>,
    /// The objects being fetched, in sequence order.
    fetching: VecDeque<Fetch>,
    /// Span bytes counted against the budget: every object in `fetching`, and the one
    /// being handed over.
    held: u64,
    /// The entries of the object being handed to the consumer, with the errors of its
    /// damaged segments in their places.
    handing: std::vec::IntoIter<Result<Entry>>,
    /// Its span bytes, released with its last entry.
    handing_bytes: u64,
    ended: bool,
}

impl Replay {
    /// Starts fetching the next objects while the concurrency and the budget allow.
    fn admit(&mut self) {
        while self.fetching.len() < self.limits.concurrency.max(1) {
            let Some(plan) = self.waiting.take().or_else(|| self.planner.next()) else {
                return;
            };
            let fits =
                self.held == 0 || self.held.saturating_add(plan.bytes) <= self.limits.budget_bytes;
            if !fits {
                self.waiting = Some(plan);
                return;
            }
            self.held = self.held.saturating_add(plan.bytes);
            let sequence = plan.records.first().map_or(0, |r| r.sequence);
            let io = self.io.clone();
            let from = self.from.clone();
            let task = tokio::spawn(
                async move { fetch_segments(&io, plan.records, &from).await }.in_current_span(),
            );
            self.fetching.push_back(Fetch {
                sequence,
                bytes: plan.bytes,
                task,
            });
        }
    }

    fn release(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
    }

    /// The next entry, in order; `None` at the end.
    async fn next_entry(&mut self) -> Option<Result<Entry>> {
        loop {
            if self.ended {
                return None;
            }
            // Admission happens before this call hands anything over, so bytes released
            // below are reused only once the consumer asks for more.
            self.admit();
            while let Some(item) = self.handing.next() {
                if self.handing.len() == 0 {
                    let bytes = std::mem::take(&mut self.handing_bytes);
                    self.release(bytes);
                }
                if let Some(item) = self.pass_on(item) {
                    return Some(item);
                }
            }
            // Nothing held but the fetches, so `admit` started every object it could:
            // none in flight means none left.
            let mut fetch = self.fetching.pop_front()?;
            let result = match (&mut fetch.task).await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Cancelled: only the runtime shutting down does that.
                Err(_) => Err(Error::Stopped {
                    durability: crate::error::Durability::NotWritten,
                }),
            };
            match result {
                Ok(entries) => {
                    self.handing = entries.into_iter();
                    if self.handing.len() == 0 {
                        self.release(fetch.bytes);
                    } else {
                        self.handing_bytes = fetch.bytes;
                    }
                }
                Err(e) if reclaimed(&self.planner.catalog, fetch.sequence, &e) => {
                    self.release(fetch.bytes);
                }
                Err(e) => {
                    // A failed GET (not a damaged segment: those come as items).
                    self.release(fetch.bytes);
                    self.ended = true;
                    self.waiting = None;
                    self.fetching.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Replay {
    /// What the consumer gets of one item of a fetched object: nothing for a region whose
    /// replay ended at a damaged segment; a damaged segment's error ends its region's
    /// replay under `Fail`.
    fn pass_on(&mut self, item: Result<Entry>) -> Option<Result<Entry>> {
        let region = match &item {
            Ok(entry) => entry.region,
            Err(Error::CorruptSegment { region, .. }) => *region,
            Err(_) => return Some(item),
        };
        if self.planner.ended_regions.contains(&region) {
            return None;
        }
        if matches!(&item, Err(e) if !skips(self.policy, e)) {
            self.planner.ended_regions.insert(region);
        }
        Some(item)
    }
}

/// Fetches the segments of one object that cover `records` (sorted by offset) with one
/// ranged read ([`fetch_verified`]): each intact segment's entries with ids at least
/// `from` of its region, and a damaged segment's error in its place.
async fn fetch_segments(
    io: &WalIo,
    records: Vec<SegmentLocation>,
    from: &HashMap<u64, u64>,
) -> Result<Vec<Result<Entry>>> {
    let fetched = fetch_verified(io, &records, None).await?;
    let mut entries = Vec::new();
    for (loc, payloads) in records.iter().zip(fetched) {
        match payloads {
            Ok(payloads) => {
                let min = from.get(&loc.record.region).copied().unwrap_or(0);
                entries.extend(entries_of(&loc.record, payloads, min).into_iter().map(Ok));
            }
            Err(e) => entries.push(Err(e)),
        }
    }
    Ok(entries)
}
