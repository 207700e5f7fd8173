//! The segment cache: verified, decoded segments of recent objects, by object and
//! region, so that a read at the tail, a follow and a re-read of a recent segment send
//! no request to the store.
//!
//! Two ways in: the writer hands over each region's entries of every object as it
//! acknowledges it (they are in memory already: `Bytes` clones, no copy), and a read
//! inserts each segment it fetched and verified. Entries are the stored ones exactly,
//! so a hit is what a GET would have returned.
//!
//! Bounded two ways, by bytes (each entry's payload plus [`ENTRY_OVERHEAD`], each
//! segment [`SEGMENT_OVERHEAD`] more): in total (`Config::segment_cache_bytes`), least
//! recently used first, and per region (`Config::segment_cache_region_bytes`), that
//! region's least recently used first, so a hot region cannot evict every other
//! region's tail. A segment larger than the region bound is not kept. Keys name the
//! object's sequence and epoch: another object at a reclaimed key is another key.
//!
//! Fetches are shared: a read that misses while another read fetches the same segment
//! waits for that fetch ([`SegmentCache::lookup`]), so the followers of a region cost
//! one GET per segment however many they are. A fetch is in the table exactly while
//! its reader awaits it; if that reader is dropped, the waiting ones fetch again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::Result;

/// Bytes counted per cached entry beyond its payload (its `Bytes` handle).
pub const ENTRY_OVERHEAD: u64 = 32;
/// Bytes counted per cached segment beyond its entries (key, order, maps).
pub const SEGMENT_OVERHEAD: u64 = 128;

/// A cached segment's identity: object sequence, object epoch, region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId {
    /// The object's sequence.
    pub sequence: u64,
    /// The object's epoch.
    pub epoch: u64,
    /// The region.
    pub region: u64,
}

/// The payloads of one region's segment, in entry order.
pub type Payloads = Arc<[Bytes]>;

#[derive(Debug)]
struct Cached {
    payloads: Payloads,
    cost: u64,
    stamp: u64,
}

#[derive(Debug, Default)]
struct RegionUse {
    bytes: u64,
    /// This region's segments, least recently used first.
    order: BTreeMap<u64, SegmentId>,
}

/// Where a shared fetch's result arrives: `None` until it ends.
type FetchResult = tokio::sync::watch::Receiver<Option<Result<Payloads>>>;

#[derive(Debug, Default)]
struct Lru {
    /// Follows under way, by region: their regions' tails are kept.
    watched: HashMap<u64, usize>,
    /// Fetches under way, each with where its result arrives.
    fetching: HashMap<SegmentId, FetchResult>,
    bytes: u64,
    next_stamp: u64,
    segments: HashMap<SegmentId, Cached>,
    /// Every segment, least recently used first.
    order: BTreeMap<u64, SegmentId>,
    regions: HashMap<u64, RegionUse>,
}

impl Lru {
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    fn remove(&mut self, key: &SegmentId) {
        let Some(cached) = self.segments.remove(key) else {
            return;
        };
        self.bytes = self.bytes.saturating_sub(cached.cost);
        self.order.remove(&cached.stamp);
        if let Some(region) = self.regions.get_mut(&key.region) {
            region.bytes = region.bytes.saturating_sub(cached.cost);
            region.order.remove(&cached.stamp);
            if region.order.is_empty() {
                self.regions.remove(&key.region);
            }
        }
    }
}

/// What the cache answered so far.
#[derive(Debug, Default)]
pub struct CacheCounts {
    /// Lookups answered from memory.
    pub hits: AtomicU64,
    /// Lookups that went to the store.
    pub misses: AtomicU64,
    /// Lookups that waited for another read's fetch of the segment.
    pub shared: AtomicU64,
}

/// What [`SegmentCache::lookup`] found.
#[derive(Debug)]
pub enum Lookup {
    /// The segment, from memory.
    Hit(Payloads),
    /// Another read is fetching it: wait for that ([`SharedFetch::wait`]).
    Wait(SharedFetch),
    /// Nobody is: fetch it and hand the result to [`FetchLead::finish`].
    Fetch(FetchLead),
}

/// Another read's fetch of a segment, under way.
#[derive(Debug)]
pub struct SharedFetch(FetchResult);

impl SharedFetch {
    /// That fetch's result; `None` if its reader was dropped before it ended (look up
    /// again).
    pub async fn wait(mut self) -> Option<Result<Payloads>> {
        let result = self.0.wait_for(Option::is_some).await.ok()?;
        result.clone()
    }
}

/// The one fetch of a segment under way: the reads that look it up meanwhile wait for
/// it. Dropped unfinished, it leaves the table and they look up again.
#[derive(Debug)]
pub struct FetchLead {
    cache: Arc<SegmentCache>,
    key: SegmentId,
    result: tokio::sync::watch::Sender<Option<Result<Payloads>>>,
    finished: bool,
}

impl FetchLead {
    /// Ends the fetch: a verified segment is kept, and every waiting read gets `result`.
    pub fn finish(mut self, result: Result<Payloads>) -> Result<Payloads> {
        {
            let mut lru = self.cache.lru();
            if let Ok(payloads) = &result {
                self.cache
                    .insert_locked(&mut lru, self.key, payloads.clone());
            }
            lru.fetching.remove(&self.key);
        }
        self.finished = true;
        self.result.send_replace(Some(result.clone()));
        result
    }
}

impl Drop for FetchLead {
    fn drop(&mut self) {
        if !self.finished {
            self.cache.lru().fetching.remove(&self.key);
        }
    }
}

/// The bounded cache of verified segments, shared by every reader of a WAL (see the
/// module docs).
#[derive(Debug)]
pub struct SegmentCache {
    total_limit: u64,
    region_limit: u64,
    lru: Mutex<Lru>,
    counts: CacheCounts,
}

impl SegmentCache {
    /// A cache of at most `total_limit` bytes, `region_limit` of them per region (0:
    /// nothing is kept).
    pub fn new(total_limit: u64, region_limit: u64) -> Self {
        SegmentCache {
            total_limit,
            region_limit: region_limit.min(total_limit),
            lru: Mutex::new(Lru::default()),
            counts: CacheCounts::default(),
        }
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes a segment of `payloads` counts for.
    pub fn cost(payloads: &[Bytes]) -> u64 {
        payloads
            .iter()
            .map(|p| p.len() as u64 + ENTRY_OVERHEAD)
            .sum::<u64>()
            + SEGMENT_OVERHEAD
    }

    /// The segment's payloads, if cached (it becomes the most recently used).
    pub fn get(&self, key: &SegmentId) -> Option<Payloads> {
        let found = Self::get_locked(&mut self.lru(), key);
        let count = match found {
            Some(_) => &self.counts.hits,
            None => &self.counts.misses,
        };
        count.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn get_locked(lru: &mut Lru, key: &SegmentId) -> Option<Payloads> {
        let stamp = lru.stamp();
        let cached = lru.segments.get_mut(key)?;
        let old = std::mem::replace(&mut cached.stamp, stamp);
        let payloads = cached.payloads.clone();
        lru.order.remove(&old);
        lru.order.insert(stamp, *key);
        if let Some(region) = lru.regions.get_mut(&key.region) {
            region.order.remove(&old);
            region.order.insert(stamp, *key);
        }
        Some(payloads)
    }

    /// The segment from memory, or the fetch of it under way to wait for, or the fetch to
    /// make (registered as under way until it is finished or dropped).
    pub fn lookup(self: &Arc<Self>, key: SegmentId) -> Lookup {
        let mut lru = self.lru();
        // Under the lock a finished fetch is either kept or no longer under way.
        if let Some(payloads) = Self::get_locked(&mut lru, &key) {
            drop(lru);
            self.counts.hits.fetch_add(1, Ordering::Relaxed);
            return Lookup::Hit(payloads);
        }
        if let Some(fetching) = lru.fetching.get(&key) {
            let fetching = fetching.clone();
            drop(lru);
            self.counts.shared.fetch_add(1, Ordering::Relaxed);
            return Lookup::Wait(SharedFetch(fetching));
        }
        let (result, receiver) = tokio::sync::watch::channel(None);
        lru.fetching.insert(key, receiver);
        drop(lru);
        self.counts.misses.fetch_add(1, Ordering::Relaxed);
        Lookup::Fetch(FetchLead {
            cache: self.clone(),
            key,
            result,
            finished: false,
        })
    }

    /// Keeps a segment (the most recently used), evicting the least recently used of its
    /// region, then of all, to stay within the bounds; one larger than the region bound
    /// is not kept.
    pub fn insert(&self, key: SegmentId, payloads: Payloads) {
        self.insert_locked(&mut self.lru(), key, payloads);
    }

    fn insert_locked(&self, lru: &mut Lru, key: SegmentId, payloads: Payloads) {
        let cost = Self::cost(&payloads);
        if cost > self.region_limit {
            return;
        }
        lru.remove(&key);
        while lru
            .regions
            .get(&key.region)
            .is_some_and(|r| r.bytes + cost > self.region_limit)
        {
            let oldest = lru
                .regions
                .get(&key.region)
                .and_then(|r| r.order.first_key_value().map(|(_, k)| *k));
            match oldest {
                Some(oldest) => lru.remove(&oldest),
                None => break,
            }
        }
        while lru.bytes + cost > self.total_limit {
            match lru.order.first_key_value().map(|(_, k)| *k) {
                Some(oldest) => lru.remove(&oldest),
                None => break,
            }
        }
        let stamp = lru.stamp();
        lru.bytes += cost;
        lru.order.insert(stamp, key);
        let region = lru.regions.entry(key.region).or_default();
        region.bytes += cost;
        region.order.insert(stamp, key);
        lru.segments.insert(
            key,
            Cached {
                payloads,
                cost,
                stamp,
            },
        );
    }

    /// The writer's hand-off of an acknowledged object (`sequence`, `epoch`): each
    /// region's entries are kept if the region is read (a follow is under way, or a read
    /// left a segment of it here), and cost nothing otherwise (a region nobody reads
    /// costs one lookup).
    pub fn hand_off<'a>(
        &self,
        sequence: u64,
        epoch: u64,
        segments: impl IntoIterator<Item = (u64, &'a [Bytes])>,
    ) {
        if self.region_limit == 0 {
            return;
        }
        let mut lru = self.lru();
        if lru.watched.is_empty() && lru.regions.is_empty() {
            return;
        }
        for (region, entries) in segments {
            if lru.watched.contains_key(&region) || lru.regions.contains_key(&region) {
                let key = SegmentId {
                    sequence,
                    epoch,
                    region,
                };
                self.insert_locked(&mut lru, key, Payloads::from(entries));
            }
        }
    }

    /// Whether segments of `region` are wanted here: a follow is under way, or a read
    /// left a segment of it.
    pub fn wants(&self, region: u64) -> bool {
        if self.region_limit == 0 {
            return false;
        }
        let lru = self.lru();
        lru.watched.contains_key(&region) || lru.regions.contains_key(&region)
    }

    /// Marks `region` as followed until the guard is dropped: the writer hands its
    /// segments over from now on.
    pub fn watch(self: &Arc<Self>, region: u64) -> RegionWatch {
        *self.lru().watched.entry(region).or_default() += 1;
        RegionWatch {
            cache: self.clone(),
            region,
        }
    }

    /// Bytes held now (as counted: payloads and overheads).
    pub fn bytes(&self) -> u64 {
        self.lru().bytes
    }

    /// Segments held now.
    pub fn segments(&self) -> usize {
        self.lru().segments.len()
    }

    /// Hits and misses so far.
    pub fn counts(&self) -> &CacheCounts {
        &self.counts
    }
}

/// A follow's mark on its region ([`SegmentCache::watch`]); unmarks when dropped.
#[derive(Debug)]
pub struct RegionWatch {
    cache: Arc<SegmentCache>,
    region: u64,
}

impl Drop for RegionWatch {
    fn drop(&mut self) {
        let mut lru = self.cache.lru();
        if let std::collections::hash_map::Entry::Occupied(mut e) = lru.watched.entry(self.region) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

impl SegmentCache {
    /// Drops a segment if it is kept (its bytes failed a check).
    pub fn remove(&self, key: &SegmentId) {
        self.lru().remove(key);
    }

    /// The segment from memory, or the result of the fetch of it under way, or of
    /// `fetch` (kept if it succeeds, and handed to the reads that look it up meanwhile).
    pub async fn get_or_fetch<F, Fut>(
        self: &Arc<Self>,
        key: SegmentId,
        fetch: F,
    ) -> Result<Payloads>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Payloads>>,
    {
        let lead = loop {
            match self.lookup(key) {
                Lookup::Hit(payloads) => return Ok(payloads),
                Lookup::Wait(fetch) => {
                    if let Some(result) = fetch.wait().await {
                        return result;
                    }
                    // That read was dropped before its fetch ended: look again.
                }
                Lookup::Fetch(lead) => break lead,
            }
        };
        lead.finish(fetch().await)
    }
}

/// Whole objects of a log read by a node that takes regions from it (a source log,
/// DESIGN.md "Regions moving between nodes"): each region's segment of an object is a
/// slice of the one read of the object, so a node catching up any number of a
/// source's regions fetches each object once while it is kept here. Bounded by bytes,
/// least recently used first; objects larger than [`largest`](Self::largest) are not
/// read whole (their segments are ranged reads, as elsewhere). Every slice is verified
/// against the catalog's record before it is used; a copy that fails is dropped.
#[derive(Debug)]
pub struct WholeObjects {
    /// The objects, as one-part segments of region 0 (by sequence and epoch): the
    /// segment cache's bounds and shared fetches, reused.
    objects: Arc<SegmentCache>,
    largest: u64,
    /// Catch-ups under way: while any is, probes read objects whole.
    wanted: AtomicU64,
}

impl WholeObjects {
    /// At most `bytes` of objects, each at most `largest` bytes.
    pub fn new(bytes: u64, largest: u64) -> Self {
        WholeObjects {
            objects: Arc::new(SegmentCache::new(bytes, bytes)),
            largest: largest.min(bytes),
            wanted: AtomicU64::new(0),
        }
    }

    /// The largest object read whole.
    pub fn largest(&self) -> u64 {
        self.largest
    }

    fn key(sequence: u64, epoch: u64) -> SegmentId {
        SegmentId {
            sequence,
            epoch,
            region: 0,
        }
    }

    /// Keeps an object read whole (by a probe or a summary read) if it is not too large.
    pub fn keep(&self, sequence: u64, epoch: u64, object: Bytes) {
        if object.len() as u64 <= self.largest {
            let key = Self::key(sequence, epoch);
            self.objects.insert(key, Payloads::from(vec![object]));
        }
    }

    /// Drops an object (a slice of it failed its check).
    pub fn forget(&self, sequence: u64, epoch: u64) {
        self.objects.remove(&Self::key(sequence, epoch));
    }

    /// The object, if kept (it becomes the most recently used).
    pub fn get(&self, sequence: u64, epoch: u64) -> Option<Bytes> {
        let object = self.objects.get(&Self::key(sequence, epoch))?;
        object.first().cloned()
    }

    /// The object kept, or the result of the read of it under way, or of `read` (kept
    /// if it succeeds and fits).
    pub async fn get_or_read<F, Fut>(&self, sequence: u64, epoch: u64, read: F) -> Result<Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Bytes>>,
    {
        let key = Self::key(sequence, epoch);
        let read = || async { read().await.map(|object| Payloads::from(vec![object])) };
        let object = self.objects.get_or_fetch(key, read).await?;
        Ok(object.first().cloned().unwrap_or_default())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.objects.bytes()
    }

    /// Whether a catch-up is under way (probes then read objects whole).
    pub fn wanted(&self) -> bool {
        self.wanted_by() > 0
    }

    /// Catch-ups under way.
    pub fn wanted_by(&self) -> u64 {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Marks a catch-up under way until the guard is dropped.
    pub fn want(self: &Arc<Self>) -> WholeObjectsWanted {
        self.wanted.fetch_add(1, Ordering::Relaxed);
        WholeObjectsWanted(self.clone())
    }
}

/// A catch-up's mark on its source's [`WholeObjects`]; unmarks when dropped.
#[derive(Debug)]
pub struct WholeObjectsWanted(Arc<WholeObjects>);

impl Drop for WholeObjectsWanted {
    fn drop(&mut self) {
        self.0.wanted.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sequence: u64, region: u64) -> SegmentId {
        SegmentId {
            sequence,
            epoch: 1,
            region,
        }
    }

    fn payloads(len: usize) -> Payloads {
        vec![Bytes::from(vec![7u8; len])].into()
    }

    /// The cost of one segment of one entry of `len` bytes.
    fn cost(len: u64) -> u64 {
        len + ENTRY_OVERHEAD + SEGMENT_OVERHEAD
    }

    #[test]
    fn whole_objects_keep_what_fits_until_forgotten_and_know_when_wanted() {
        let whole = Arc::new(WholeObjects::new(1 << 20, 1000));
        let object = Bytes::from(vec![5u8; 1000]);
        whole.keep(3, 1, object.clone());
        whole.keep(4, 1, Bytes::from(vec![5u8; 1001]));
        assert_eq!(whole.get(3, 1), Some(object));
        // Too large to keep; another epoch is another object.
        assert_eq!(whole.get(4, 1), None);
        assert_eq!(whole.get(3, 2), None);
        whole.forget(3, 1);
        assert_eq!(whole.get(3, 1), None);

        assert!(!whole.wanted());
        let (a, b) = (whole.want(), whole.want());
        drop(a);
        assert!(whole.wanted());
        drop(b);
        assert!(!whole.wanted());
    }

    #[test]
    fn a_hit_is_the_inserted_payloads_and_a_miss_is_none() {
        let cache = SegmentCache::new(1 << 20, 1 << 20);
        let p: Payloads = vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")].into();
        cache.insert(key(1, 5), p.clone());
        assert_eq!(cache.get(&key(1, 5)).as_deref(), Some(&p[..]));
        assert_eq!(cache.get(&key(1, 6)), None);
        // Another epoch at the same sequence is another object.
        let other = SegmentId {
            epoch: 2,
            ..key(1, 5)
        };
        assert_eq!(cache.get(&other), None);
        assert_eq!(cache.counts().hits.load(Ordering::Relaxed), 1);
        assert_eq!(cache.counts().misses.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_total_bound_evicts_the_least_recently_used() {
        let cache = SegmentCache::new(3 * cost(100), 3 * cost(100));
        for s in 1..=3 {
            cache.insert(key(s, s), payloads(100));
        }
        // 1 used last: 2 is the least recently used.
        assert!(cache.get(&key(1, 1)).is_some());
        cache.insert(key(4, 4), payloads(100));
        assert!(cache.get(&key(2, 2)).is_none());
        for s in [1, 3, 4] {
            assert!(cache.get(&key(s, s)).is_some(), "{s}");
        }
        assert_eq!(cache.bytes(), 3 * cost(100));
    }

    #[test]
    fn a_hot_region_evicts_its_own_segments_first() {
        let cache = SegmentCache::new(10 * cost(100), 2 * cost(100));
        cache.insert(key(1, 9), payloads(100));
        for s in 1..=50 {
            cache.insert(key(s, 1), payloads(100));
        }
        assert!(
            cache.get(&key(1, 9)).is_some(),
            "the other region's tail stays"
        );
        assert!(cache.get(&key(50, 1)).is_some());
        assert!(cache.get(&key(49, 1)).is_some());
        assert!(cache.get(&key(48, 1)).is_none());
        assert_eq!(cache.segments(), 3);
    }

    #[test]
    fn memory_stays_within_the_bounds_under_many_regions() {
        let total = 64 * cost(100);
        let cache = SegmentCache::new(total, 4 * cost(100));
        for s in 0..10_000u64 {
            cache.insert(key(s, s % 1000), payloads(100));
            assert!(cache.bytes() <= total);
        }
        assert_eq!(cache.segments(), 64);
        // The bookkeeping holds no more than the segments themselves.
        let lru = cache.lru();
        assert_eq!(lru.order.len(), 64);
        assert_eq!(
            lru.regions.values().map(|r| r.order.len()).sum::<usize>(),
            64
        );
        assert!(lru.regions.len() <= 64);
    }

    #[test]
    fn the_hand_off_keeps_only_regions_that_are_read() {
        let cache = Arc::new(SegmentCache::new(1 << 20, 1 << 20));
        let entries = [Bytes::from_static(b"x")];
        let object = || [(1, &entries[..]), (2, &entries[..]), (3, &entries[..])];
        cache.hand_off(1, 1, object());
        assert_eq!(cache.segments(), 0, "nobody reads: nothing kept");
        // Region 2 is followed, region 3 was read (a fetched segment is here).
        let watch = cache.watch(2);
        cache.insert(key(1, 3), payloads(1));
        cache.hand_off(2, 1, object());
        assert!(cache.get(&key(2, 1)).is_none());
        assert!(cache.get(&key(2, 2)).is_some());
        assert!(cache.get(&key(2, 3)).is_some());
        drop(watch);
        cache.hand_off(3, 1, object());
        assert!(
            cache.get(&key(3, 2)).is_some(),
            "its tail is still here: still read"
        );
        assert_eq!(cache.lru().watched.len(), 0);
    }

    #[test]
    fn a_segment_larger_than_the_region_bound_is_not_kept() {
        let cache = SegmentCache::new(1 << 20, cost(100));
        cache.insert(key(1, 1), payloads(101));
        assert!(cache.get(&key(1, 1)).is_none());
        let off = SegmentCache::new(0, 0);
        off.insert(key(1, 1), payloads(0));
        assert_eq!(off.segments(), 0);
    }

    fn lead(lookup: Lookup) -> FetchLead {
        match lookup {
            Lookup::Fetch(lead) => lead,
            other => panic!("expected to fetch, got {other:?}"),
        }
    }

    fn waiting(lookup: Lookup) -> SharedFetch {
        match lookup {
            Lookup::Wait(fetch) => fetch,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn reads_of_a_segment_under_way_share_its_fetch() {
        let cache = Arc::new(SegmentCache::new(1 << 20, 1 << 20));
        let first = lead(cache.lookup(key(1, 5)));
        let second = waiting(cache.lookup(key(1, 5)));
        let third = waiting(cache.lookup(key(1, 5)));
        // Another segment of the same object is another fetch.
        drop(lead(cache.lookup(key(1, 6))));
        let p = payloads(10);
        assert_eq!(first.finish(Ok(p.clone())).ok(), Some(p.clone()));
        for waiter in [second, third] {
            assert_eq!(waiter.wait().await.and_then(|r| r.ok()), Some(p.clone()));
        }
        assert!(matches!(cache.lookup(key(1, 5)), Lookup::Hit(hit) if hit == p));
        let counts = cache.counts();
        assert_eq!(counts.misses.load(Ordering::Relaxed), 2);
        assert_eq!(counts.shared.load(Ordering::Relaxed), 2);
        assert_eq!(counts.hits.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_failed_fetch_fails_its_waiters_and_is_not_kept() {
        let cache = Arc::new(SegmentCache::new(1 << 20, 1 << 20));
        let first = lead(cache.lookup(key(1, 5)));
        let second = waiting(cache.lookup(key(1, 5)));
        let gone = object_store::Error::NotFound {
            path: "wal/1".to_string(),
            source: "gone".into(),
        };
        let failed = first.finish(Err(crate::error::Error::store("get", "wal/1", gone)));
        assert!(failed.is_err_and(|e| e.is_not_found()));
        let shared = second.wait().await;
        assert!(
            matches!(&shared, Some(Err(e)) if e.is_not_found()),
            "{shared:?}"
        );
        // The next read fetches again.
        drop(lead(cache.lookup(key(1, 5))));
    }

    #[tokio::test]
    async fn a_dropped_fetch_sends_its_waiters_to_fetch_again() {
        let cache = Arc::new(SegmentCache::new(1 << 20, 1 << 20));
        let first = lead(cache.lookup(key(1, 5)));
        let second = waiting(cache.lookup(key(1, 5)));
        drop(first);
        assert!(second.wait().await.is_none());
        let again = lead(cache.lookup(key(1, 5)));
        let p = payloads(3);
        assert_eq!(again.finish(Ok(p.clone())).ok(), Some(p));
    }

    #[tokio::test]
    async fn with_nothing_kept_fetches_are_still_shared() {
        let cache = Arc::new(SegmentCache::new(0, 0));
        let first = lead(cache.lookup(key(1, 5)));
        let second = waiting(cache.lookup(key(1, 5)));
        let p = payloads(3);
        assert!(first.finish(Ok(p.clone())).is_ok());
        assert_eq!(second.wait().await.and_then(|r| r.ok()), Some(p));
        assert_eq!(cache.segments(), 0);
        drop(lead(cache.lookup(key(1, 5))));
    }
}
