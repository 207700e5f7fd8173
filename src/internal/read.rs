//! Reads: a region's entries, many regions replayed at once, and followers.
//!
//! Every read is lazy and bounded: segments are looked up in the catalog one at a time
//! (a read that starts after an append sees it), fetched with one ranged read of exactly
//! their bytes, verified (CRC) before decoding and read once more if verification fails.
//! A region's read stays at most `read_ahead` segments ahead of the consumer. A replay of
//! many regions fetches each chain object once, with one ranged read over the segments it
//! needs, up to `replay_concurrency` objects at once while the bytes fetched and not yet
//! handed to the consumer fit `replay_budget_bytes` ([`ReplayLimits`]; an object larger
//! than the budget is fetched alone). A follower reads on as the chain grows; what tells
//! it the chain grew is its [`ChainGrowth`]: the writer's acknowledgements in-process, or
//! polling the prefix for a read-only open.
//!
//! Damage stays local (FORMAT.md, "What a reader verifies"): a segment that fails its
//! checks twice is reported ([`WalIo::report_damaged_segment`]) and fails only its own
//! region, as an [`Error::CorruptSegment`] naming the key and region. Under
//! [`CorruptSegmentPolicy::Fail`] that region's read ends there; under `Skip` the error
//! is yielded as the report of the hole and the region's read goes on after it. This
//! holds alike for a region's read, a follow, and each region of a replay of many
//! regions: the other regions of the same object are read in full.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use tracing::{debug, info_span, warn, Instrument};

use crate::cache::{Lookup, Payloads, RegionWatch, SegmentId};
use crate::catalog::{choose_chain, next_on_chain, walk_probes, Catalog, SegmentLocation};
use crate::config::{Config, CorruptSegmentPolicy};
use crate::error::{Error, Result};
use crate::format::{self, Header, Link, ObjectSummary, TRAILER_LEN};
use crate::objects::{read_again_once, ListedObject, WalIo, TAIL_READ_BYTES};
use crate::open::{list_replicas, recover};
use crate::quorum::{decided_value, quorum, ValueId};

/// One replayed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its region.
    pub region: u64,
    /// The id it was acknowledged with.
    pub id: u64,
    /// Its payload.
    pub payload: Bytes,
}

/// Reads `region` from entry id `from` over a shared catalog, which may grow meanwhile:
/// the segments are looked up one by one as the stream is polled. A read is a follow
/// ([`follow_region`]) that ends at the chain's end: the same fetch, the same
/// corrupt-segment policy (`skips`: a damaged segment yields its
/// [`Error::CorruptSegment`], then the read ends under `Fail` or goes on under `Skip`).
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

/// Whether a read, follow or replay under `policy` goes on past `error`: only past a
/// damaged segment under `Skip`. Any other error (a failed GET) ends it, since skipping
/// would lose entries that are intact at rest. The one place the policy is applied.
fn skips(policy: CorruptSegmentPolicy, error: &Error) -> bool {
    policy == CorruptSegmentPolicy::Skip && matches!(error, Error::CorruptSegment { .. })
}

/// The segments of `region` holding ids `>= from`, looked up one by one in the catalog
/// as the stream is polled, each with what fetching it gave, in order, at most
/// `read_ahead` ahead of the consumer. (A segment not found is the follow's to judge:
/// [`follow_region`] looks again over an up-to-date catalog.)
fn region_segments(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    from: u64,
    read_ahead: usize,
) -> BoxStream<'static, (SegmentLocation, Result<Vec<Entry>>)> {
    let locations = stream::unfold(from, move |next| {
        let catalog = catalog.clone();
        async move {
            let location = catalog
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .segments_from(region, next)
                .first()
                .copied()?;
            Some((location, location.record.last_entry_id + 1))
        }
    });
    locations
        .map(move |location| {
            let io = io.clone();
            async move { (location, fetch_segment(&io, &location).await) }
        })
        .buffered(read_ahead.max(1))
        .boxed()
}

/// Whether `error`, met reading the object at `sequence`, says the reclaimer deleted it
/// after `catalog` dropped it below a floor (its entries obsolete): a read passes over
/// such an object, with a warning. An object not found that the catalog still holds is
/// an error.
fn reclaimed(catalog: &RwLock<Catalog>, sequence: u64, error: &Error) -> bool {
    let reclaimed = error.is_not_found()
        && catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .object(sequence)
            .is_none();
    if reclaimed {
        warn!(sequence, "an object was reclaimed below the floor before it was read; the read goes on above the floor");
    }
    reclaimed
}

/// Fetches one segment with a ranged read of exactly its bytes and decodes it, verified
/// (`fetch_verified`), unless the segment cache holds it or another read is fetching
/// it (then its result is this one's: one GET however many read the segment at once);
/// what it fetched and verified goes into the cache.
pub async fn fetch_segment(io: &WalIo, location: &SegmentLocation) -> Result<Vec<Entry>> {
    let record = &location.record;
    let id = SegmentId {
        sequence: location.sequence,
        epoch: location.epoch,
        region: record.region,
    };
    let payloads = loop {
        match io.segment_cache().lookup(id) {
            Lookup::Hit(payloads) => break payloads,
            Lookup::Wait(fetch) => match fetch.wait().await {
                Some(result) => break result?,
                // That read was dropped before its fetch ended: look again.
                None => continue,
            },
            Lookup::Fetch(lead) => {
                let fetched = match fetch_verified(io, std::slice::from_ref(location)).await {
                    Ok(fetched) => match fetched.into_iter().next() {
                        Some(payloads) => payloads.map(Payloads::from),
                        None => Ok(Payloads::from(Vec::new())),
                    },
                    Err(e) => Err(e),
                };
                break lead.finish(fetched)?;
            }
        }
    };
    Ok(entries_of(
        record,
        payloads.iter().cloned(),
        record.first_entry_id,
    ))
}

/// The one verified segment fetch every read path uses: reads the span of one object
/// that covers `records` (its segments, sorted by offset) with one ranged read, checks
/// each segment's CRC and decodes it, and reads the span again once if one fails. Over
/// several stores a copy whose segments do not all verify is replaced by another first.
/// Each record gets its payloads, or, failed twice, an [`Error::CorruptSegment`] naming
/// the key and region (reported as damage): only that segment's region is affected.
/// `Err` only if the span could not be read.
async fn fetch_verified(
    io: &WalIo,
    records: &[SegmentLocation],
) -> Result<Vec<Result<Vec<Bytes>>>> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Ok(Vec::new());
    };
    let sequence = first.sequence;
    let span = first.record.offset..last.record.range().end;
    let segment_of = |bytes: &Bytes, record: &format::SegmentRecord| {
        let start = usize::try_from(record.offset.checked_sub(span.start)?).ok()?;
        let end = start.checked_add(usize::try_from(record.length).ok()?)?;
        bytes
            .get(start..end)
            .map(|segment| bytes.slice_ref(segment))
    };
    let checked = read_again_once(|| async {
        let verify = |b: &Bytes| {
            records.iter().all(|loc| {
                segment_of(b, &loc.record)
                    .is_some_and(|segment| format::check_segment(&segment, &loc.record).is_ok())
            })
        };
        let bytes = io.read_range_verified(sequence, span.clone(), &verify).await?;
        let decoded: Vec<_> = records
            .iter()
            .map(|loc| {
                let record = &loc.record;
                let Some(segment) = segment_of(&bytes, record) else {
                    return Err(format::FormatError::Truncated {
                        part: "segment",
                        needed: record.range().end.saturating_sub(span.start),
                        got: bytes.len() as u64,
                    });
                };
                let decoded = io.decode_segment(segment, record, loc.epoch);
                if let Err(e) = &decoded {
                    debug!(sequence, region = record.region, error = %e, "segment failed verification");
                }
                decoded
            })
            .collect();
        let damaged = decoded.iter().any(|d| d.is_err());
        Ok(if damaged { Err(decoded) } else { Ok(decoded) })
    })
    .await?;
    let decoded = checked.unwrap_or_else(|decoded| decoded);
    Ok(records
        .iter()
        .zip(decoded)
        .map(|(loc, decoded)| {
            decoded.map_err(|source| {
                io.report_damaged_segment(sequence, loc.record.region, &source);
                Error::CorruptSegment {
                    key: io.key(sequence).to_string(),
                    region: loc.record.region,
                    source,
                }
            })
        })
        .collect())
}

/// The entries of a decoded segment with ids `>= min`.
fn entries_of(
    record: &format::SegmentRecord,
    payloads: impl IntoIterator<Item = Bytes>,
    min: u64,
) -> Vec<Entry> {
    payloads
        .into_iter()
        .zip(record.first_entry_id..)
        .filter(|(_, id)| *id >= min)
        .map(|(payload, id)| Entry {
            region: record.region,
            id,
            payload,
        })
        .collect()
}

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
            .map(|(s, _)| s);
        for sequence in objects {
            let mut records: Vec<SegmentLocation> = Vec::new();
            for (&region, &first) in self.from.iter() {
                if self.ended_regions.contains(&region) {
                    continue;
                }
                let start = first.max(format::entry_id(sequence, 0));
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
    let fetched = fetch_verified(io, &records).await?;
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

/// The longest a read-only follower waits between two polls of an idle prefix.
pub const IDLE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Keys a read-only follower probes at once, at most (while it catches up).
pub const MAX_PROBES: usize = 8;

/// The least a probe reads from the end of a key: an empty object whole, and the
/// footer of a few dozen segments.
const MIN_PROBE_TAIL: u64 = 2048;

/// Growth of another node's prefix opened read-only, found by polling (DESIGN.md
/// "Tailing without listing"): each poll probes the keys after the chain end in order
/// ([`WalIo::probe_summary`]: a key's trailer and footer, and its header) and walks
/// them with [`walk_probes`]; no LIST. Several keys are probed at once while every one
/// holds an object (a follower that fell behind catches up at several objects per round
/// trip), one while the next key is absent. Polls come every `poll_interval` while
/// objects appear and back off, doubling, to [`IDLE_POLL_INTERVAL`] while none does, so
/// an idle follower costs one GET a second.
///
/// Over several stores a key's object is its decided value
/// ([`probe_decided`](Self::probe_decided)). It lists (as [`extend`](Self::extend) does:
/// one LIST after the chain end) when the next key stays absent longer than the owner is
/// ever idle (`link_window`: the owner's floor may have passed this follower and its
/// next key been reclaimed), and when a probe meets an error other than not-found.
struct PolledGrowth {
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    poll_interval: Duration,
    last: Link,
    pending: BTreeMap<u64, ObjectSummary>,
    /// The wait before the next poll.
    wait: Duration,
    /// Keys probed at once.
    probes: usize,
    /// The first key not yet passed over (claims and orphans above the chain end are
    /// not probed again).
    next_key: u64,
    /// Bytes a probe reads from a key's end: the last footer and trailer, with slack.
    tail_len: u64,
    /// Since when `next_key` has been absent.
    absent_since: Option<tokio::time::Instant>,
    /// How long the next key may stay absent before the follower lists.
    list_after_absent: Duration,
    /// Over several stores, idle polls so far: each probes the next store in turn.
    idle_polls: usize,
}

impl PolledGrowth {
    fn new(
        io: WalIo,
        catalog: Arc<RwLock<Catalog>>,
        config: &Config,
        poll_interval: Duration,
        last: Link,
    ) -> Self {
        PolledGrowth {
            io,
            catalog,
            poll_interval,
            last,
            pending: BTreeMap::new(),
            wait: poll_interval,
            probes: 1,
            next_key: last.sequence.saturating_add(1),
            tail_len: MIN_PROBE_TAIL,
            absent_since: None,
            list_after_absent: config.link_window(),
            idle_polls: 0,
        }
    }

    async fn poll(&mut self) -> Result<bool> {
        tokio::time::sleep(self.wait).await;
        let before = self.last;
        let more = self.probe().await?;
        self.wait = if more {
            // Every probed key held an object: poll again as soon as these are read.
            Duration::ZERO
        } else if self.last != before {
            self.poll_interval
        } else {
            // From zero (after a round that found every key full) too.
            self.wait
                .saturating_mul(2)
                .max(self.poll_interval)
                .min(IDLE_POLL_INTERVAL.max(self.poll_interval))
        };
        Ok(true)
    }

    /// One round of probes after the chain end; extends the catalog by what links on.
    /// `Ok(true)` when every probed key held an object (more may follow at once).
    async fn probe(&mut self) -> Result<bool> {
        let first = self.next_key;
        // Idle, a probe is one request (the header only once the key holds an
        // object); active, the header is read beside the tail (one round trip).
        let header_at_once = self.wait <= self.poll_interval;
        let replicas = self.io.replicas();
        let probed = if replicas.is_empty() {
            futures::future::join_all((0..self.probes as u64).map(|i| {
                self.io
                    .probe_summary(first.saturating_add(i), self.tail_len, header_at_once)
            }))
            .await
        } else {
            // Idle, one store is probed, each poll the next one (see `probe_decided`).
            let idle = (!header_at_once).then_some(self.idle_polls);
            self.idle_polls = self.idle_polls.wrapping_add(usize::from(idle.is_some()));
            futures::future::join_all((0..self.probes as u64).map(|i| {
                self.probe_decided(&replicas, first.saturating_add(i), header_at_once, idle)
            }))
            .await
        };
        let mut summaries = Vec::with_capacity(probed.len());
        for result in probed {
            match result {
                Ok(summary) => summaries.push(summary),
                Err(e) => {
                    warn!(error = %e, "a probe failed; the follower lists instead");
                    return self.extend().await.map(|()| false);
                }
            }
        }
        let headers: Vec<Option<&Header>> = summaries
            .iter()
            .map(|s| s.as_ref().map(|s| &s.header))
            .collect();
        let walk = walk_probes(self.last, first, &headers);
        if let Some(tail) = summaries
            .iter()
            .flatten()
            .map(|s| (TRAILER_LEN + format::Footer::encoded_len(s.footer.records.len())) as u64)
            .max()
        {
            // The next footer is likely as long as these: read it in the probe.
            self.tail_len = (tail + tail / 4 + 256).clamp(MIN_PROBE_TAIL, TAIL_READ_BYTES);
        }
        if !walk.extended.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            for summary in summaries.iter().flatten() {
                if walk.extended.contains(&summary.header.sequence) {
                    catalog.insert(&summary.header, &summary.footer.records, summary.length)?;
                }
            }
            self.last = walk.last;
            self.pending = self.pending.split_off(&(self.last.sequence + 1));
        }
        let moved = walk.next_key != self.next_key;
        self.next_key = walk.next_key;
        if walk.met_absent {
            // Probe as many keys next time as held objects this time.
            let held = usize::try_from(walk.next_key - first).unwrap_or(MAX_PROBES);
            self.probes = held.clamp(1, MAX_PROBES);
            if moved {
                self.absent_since = None;
                return Ok(false);
            }
            let now = tokio::time::Instant::now();
            let since = *self.absent_since.get_or_insert(now);
            if now.duration_since(since) > self.list_after_absent {
                self.absent_since = None;
                self.extend().await?;
            }
            return Ok(false);
        }
        self.absent_since = None;
        self.probes = (self.probes * 2).min(MAX_PROBES);
        Ok(true)
    }

    /// One LIST after the chain end; extends the catalog by what links on from it, or,
    /// when the owner's floor has passed this follower, by the chain a fresh read-only
    /// open would choose now.
    async fn extend(&mut self) -> Result<()> {
        let replicas = self.io.replicas();
        if replicas.is_empty() {
            let listing = self.io.list_after(self.last.sequence).await?;
            for listed in listing.objects {
                if let std::collections::btree_map::Entry::Vacant(slot) =
                    self.pending.entry(listed.sequence)
                {
                    match self.io.read_summary(&listed).await {
                        Ok(read) => {
                            slot.insert(read.summary);
                        }
                        // Deleted since the listing: below the owner's floor.
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        } else {
            self.take_decided(&replicas).await?;
        }
        let headers: BTreeMap<u64, Header> =
            self.pending.iter().map(|(s, o)| (*s, o.header)).collect();
        let mut at = self.last;
        let mut extended = Vec::new();
        while let Some(sequence) = next_on_chain(at, &headers) {
            let epoch = headers.get(&sequence).map_or(0, |h| h.epoch);
            extended.push(sequence);
            at = Link { sequence, epoch };
        }
        // Where nothing links on (the whole way, or part of it: the owner's deletes run
        // concurrently and out of order), what is listed above holds a complete chain
        // that needs nothing at or below the end reached only if its floor is above that
        // end: the owner let go of it, and may have deleted the next link.
        let above = headers
            .range(at.sequence.saturating_add(1)..)
            .next()
            .is_some();
        let chain = if above {
            choose_chain(&headers)
        } else {
            Vec::new()
        };
        let tip = chain.last().and_then(|s| headers.get(s));
        if let Some(tip) =
            tip.filter(|t| t.floor > at.sequence && (t.epoch, t.sequence) > (at.epoch, at.sequence))
        {
            warn!(
                chain_end = at.sequence,
                floor = tip.floor,
                "the owner's floor passed this follower; it goes on from the chain above the floor"
            );
            at = Link {
                sequence: tip.sequence,
                epoch: tip.epoch,
            };
            // Every object of that chain lies at or above its floor, above the end.
            extended.extend(chain);
        }
        if !extended.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            for sequence in &extended {
                if let Some(o) = self.pending.get(sequence) {
                    catalog.insert(&o.header, &o.footer.records, o.length)?;
                }
            }
            self.last = at;
        }
        // What lies at or below the chain end can never extend it.
        self.pending = self.pending.split_off(&(self.last.sequence + 1));
        self.next_key = self.next_key.max(self.last.sequence.saturating_add(1));
        Ok(())
    }
}

impl PolledGrowth {
    /// Over several stores, a probe of `sequence` finds its decided value (DESIGN.md:
    /// "over several stores, object means decided value"): every store's copy is probed
    /// and the value Q of them hold is the key's object; a key with no decided value yet
    /// is absent (it ends the poll; a copy in fewer than Q stores may be a create that
    /// was never acknowledged and that a later open claims over). A store whose probe
    /// fails counts as holding no copy, unless every store's fails (then the error, and
    /// the follower lists). Idle (`idle`: the count of idle polls), only one store is
    /// probed, the next one each poll, and the others only if it holds a copy: a value
    /// decided in Q of N stores is found within N - Q + 1 idle polls, at one GET a poll.
    async fn probe_decided(
        &self,
        replicas: &[WalIo],
        sequence: u64,
        header_at_once: bool,
        idle: Option<usize>,
    ) -> Result<Option<ObjectSummary>> {
        let n = replicas.len();
        let probe = |store: usize| async move {
            match replicas.get(store) {
                Some(replica) => {
                    replica
                        .probe_summary(sequence, self.tail_len, header_at_once)
                        .await
                }
                None => Ok(None),
            }
        };
        let q = quorum(n);
        let mut copies = ProbedCopies {
            ids: vec![None; n],
            summaries: Vec::new(),
            failure: None,
            failed: 0,
        };
        let mut first_store = None;
        if let Some(polls) = idle.filter(|_| n > 0) {
            let store = polls % n;
            let first = probe(store).await;
            if matches!(first, Ok(None)) {
                return Ok(None);
            }
            copies.record(store, first);
            first_store = Some(store);
        }
        let mut pending: futures::stream::FuturesUnordered<_> = (0..n)
            .filter(|store| Some(*store) != first_store)
            .map(|store| async move { (store, probe(store).await) })
            .collect();
        // Answers are taken as they come: a slow or down store holds the probe up only
        // while the others leave the key's value open.
        loop {
            if let Some(value) = decided_value(&copies.ids) {
                let summary = copies
                    .summaries
                    .into_iter()
                    .find(|s| ValueId::of(s) == value);
                return Ok(summary);
            }
            if copies.most_of_one_value() + pending.len() < q {
                break;
            }
            match pending.next().await {
                Some((store, result)) => copies.record(store, result),
                None => break,
            }
        }
        match copies.failure {
            Some(e) if copies.failed == n => Err(e),
            _ => Ok(None),
        }
    }

    /// Over several stores, only decided objects may be delivered (a copy in fewer than
    /// Q stores may be a writer's create that was never acknowledged and that a later
    /// open claims over): each store is listed (a store that has not answered soon after
    /// a quorum did is left out, as at an open), and a key listed in Q stores is kept
    /// once Q of its copies' summaries are the same value. Costs one summary read per
    /// listed copy (N per object instead of one, read at once); a key with fewer copies
    /// is looked at again at the next poll.
    async fn take_decided(&mut self, replicas: &[WalIo]) -> Result<()> {
        let q = quorum(replicas.len());
        let after = self.last.sequence;
        let (listings, _) = list_replicas(&self.io, replicas, Some(after)).await?;
        let mut copies: BTreeMap<u64, Vec<(usize, ListedObject)>> = BTreeMap::new();
        for (store, listing) in listings.into_iter().enumerate() {
            for listed in listing.into_iter().flat_map(|l| l.objects) {
                if !self.pending.contains_key(&listed.sequence) {
                    copies
                        .entry(listed.sequence)
                        .or_default()
                        .push((store, listed));
                }
            }
        }
        for (sequence, listed) in copies.into_iter().filter(|(_, c)| c.len() >= q) {
            let reads = futures::future::join_all(listed.iter().map(|(store, listed)| {
                let replica = replicas.get(*store);
                async move {
                    match replica {
                        Some(replica) => replica.read_summary(listed).await.map(Some),
                        None => Ok(None),
                    }
                }
            }))
            .await;
            // One entry per store, as the quorum rules take them.
            let mut ids: Vec<Option<ValueId>> = vec![None; replicas.len()];
            let mut summaries = Vec::new();
            for ((store, _), read) in listed.iter().zip(reads) {
                match read {
                    Ok(Some(read)) => {
                        if let Some(slot) = ids.get_mut(*store) {
                            *slot = Some(ValueId::of(&read.summary));
                        }
                        summaries.push(read.summary);
                    }
                    Ok(None) => {}
                    // Deleted since the listing: below the owner's floor.
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            if let Some(value) = decided_value(&ids) {
                if let Some(summary) = summaries.into_iter().find(|s| ValueId::of(s) == value) {
                    self.pending.insert(sequence, summary);
                }
            }
        }
        Ok(())
    }
}

/// What the probes of one key in several stores found so far.
struct ProbedCopies {
    /// Per store, the value of its copy, if it answered with one.
    ids: Vec<Option<ValueId>>,
    summaries: Vec<ObjectSummary>,
    failure: Option<Error>,
    failed: usize,
}

impl ProbedCopies {
    fn record(&mut self, store: usize, result: Result<Option<ObjectSummary>>) {
        match result {
            Ok(Some(summary)) => {
                if let Some(slot) = self.ids.get_mut(store) {
                    *slot = Some(ValueId::of(&summary));
                }
                self.summaries.push(summary);
            }
            Ok(None) => {}
            Err(e) => {
                self.failed += 1;
                self.failure = Some(e);
            }
        }
    }

    /// The most copies any one value has.
    fn most_of_one_value(&self) -> usize {
        self.ids
            .iter()
            .flatten()
            .map(|v| self.ids.iter().filter(|w| **w == Some(*v)).count())
            .max()
            .unwrap_or(0)
    }
}

/// A request to bring the catalog up to date now, with where to answer.
type RefreshRequest = tokio::sync::oneshot::Sender<Result<()>>;

impl PolledGrowth {
    /// Polls in a task of its own, beside the follow that reads what it finds: the next
    /// keys are probed while the last round's segments are fetched. Each extension of
    /// the catalog bumps `grown`; a failed poll is left in `failed` and ends the task.
    /// Ends when the follow drops its end (every receiver of `grown`).
    async fn run(
        mut self,
        grown: tokio::sync::watch::Sender<u64>,
        failed: Arc<std::sync::Mutex<Option<Error>>>,
        mut refreshes: tokio::sync::mpsc::Receiver<RefreshRequest>,
    ) {
        enum Next {
            Closed,
            Refresh(RefreshRequest),
            Polled(Result<bool>),
        }
        loop {
            let before = self.last;
            let next = tokio::select! {
                _ = grown.closed() => Next::Closed,
                request = refreshes.recv() => match request {
                    Some(reply) => Next::Refresh(reply),
                    None => Next::Closed,
                },
                polled = self.poll() => Next::Polled(polled),
            };
            match next {
                Next::Closed => return,
                Next::Refresh(reply) => {
                    let _ = reply.send(self.extend().await);
                }
                Next::Polled(Ok(_)) => {}
                Next::Polled(Err(e)) => {
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    grown.send_modify(|n| *n += 1);
                    return;
                }
            }
            if self.last != before {
                grown.send_modify(|n| *n += 1);
            }
        }
    }
}

/// A read-only follow's view of its [`PolledGrowth`] task.
struct TailedGrowth {
    grown: tokio::sync::watch::Receiver<u64>,
    failed: Arc<std::sync::Mutex<Option<Error>>>,
    refreshes: tokio::sync::mpsc::Sender<RefreshRequest>,
}

impl TailedGrowth {
    /// Starts `growth`'s task and returns the follow's end of it.
    fn spawn(growth: PolledGrowth, span: tracing::Span) -> Self {
        let (grown_tx, grown) = tokio::sync::watch::channel(0);
        let failed = Arc::new(std::sync::Mutex::new(None));
        let (refreshes, refresh_rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(
            growth
                .run(grown_tx, failed.clone(), refresh_rx)
                .instrument(span),
        );
        TailedGrowth {
            grown,
            failed,
            refreshes,
        }
    }

    fn failure(&self) -> Option<Error> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ChainGrowth for TailedGrowth {
    fn mark(&mut self) {
        self.grown.borrow_and_update();
    }

    fn grown(&mut self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            let alive = self.grown.changed().await.is_ok();
            match self.failure() {
                Some(e) => Err(e),
                None => Ok(alive),
            }
        })
    }

    fn refresh(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            if self.refreshes.send(reply).await.is_err() {
                return Err(self.failure().unwrap_or(Error::Stopped {
                    durability: crate::error::Durability::NotWritten,
                }));
            }
            match answer.await {
                Ok(result) => result,
                Err(_) => Err(self.failure().unwrap_or(Error::Stopped {
                    durability: crate::error::Durability::NotWritten,
                })),
            }
        })
    }
}

/// Follows `region` of a prefix opened read-only (another node's log): recovers the
/// chain, yields the entries with id `>= from` on it, then each object that extends it,
/// found by probing the keys after the chain end (DESIGN.md "Tailing without listing"). It
/// never writes and never fences the owner.
/// A spawned task polls and reads ahead into a bounded channel; it ends at the first
/// error, or as soon as the consumer drops the stream. Its catalog drops what lies below
/// the floor of the newest object it saw (as the owner's does): a follower that lags
/// behind the floor skips those entries, as a fresh read-only open would (the owner may
/// delete them any time after its grace).
pub fn follow_read_only(
    io: WalIo,
    config: Config,
    region: u64,
    from: u64,
    poll_interval: Duration,
) -> BoxStream<'static, Result<Entry>> {
    let span = info_span!("follow_read_only", prefix = %io.prefix(), region, from);
    // As many segments fetched at once as keys are probed at once: a follower that
    // fell behind catches up a round of objects per round trip, not two.
    let mut config = config;
    config.read_ahead = config.read_ahead.max(MAX_PROBES);
    let mut entries = stream::once(async move {
        let recovery = match recover(&io, config.recovery_concurrency).await {
            Ok(recovery) => recovery,
            Err(e) => return stream::iter([Err(e)]).boxed(),
        };
        let last = recovery
            .catalog
            .tip()
            .map(|(sequence, o)| Link {
                sequence,
                epoch: o.epoch,
            })
            .unwrap_or(Link::NONE);
        let catalog = Arc::new(RwLock::new(recovery.catalog));
        let growth = PolledGrowth::new(io.clone(), catalog.clone(), &config, poll_interval, last);
        let growth = TailedGrowth::spawn(growth, tracing::Span::current());
        follow_region(io, catalog, region, from, &config, growth)
    })
    .flatten()
    .boxed();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Entry>>(FOLLOW_CHANNEL_ENTRIES);
    tokio::spawn(
        async move {
            loop {
                let item = tokio::select! {
                    item = entries.next() => item,
                    _ = tx.closed() => return,
                };
                match item {
                    Some(item) => {
                        if tx.send(item).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                }
            }
        }
        .instrument(span),
    );
    stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// Entries a read-only follower reads ahead of its consumer.
pub const FOLLOW_CHANNEL_ENTRIES: usize = 1024;
