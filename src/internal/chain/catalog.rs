//! The in-memory index over the footers of the live part of the chain.
//!
//! Recovery reads every chain object's footer (never a segment) and inserts it here in
//! sequence order; the writer inserts each object it acknowledges. Reads then ask which
//! segments of a region hold ids at or above a given id, and fetch exactly those bytes.
//! The catalog refuses a sequence it already holds (or one below its last) and a region
//! whose ids would not increase: either means the chain is inconsistent. Pure: no I/O.
//!
//! **Bounded by the live part of the log.** Each object carries the floor its writer
//! computed (DESIGN.md, "Reclaiming space"); once an object with floor `F` is inserted,
//! the catalog drops every object below `F`, the segments they held, and the regions left
//! with none. It does so at once, not when the reclaimer has deleted them: the catalog
//! then holds exactly the chain a recovery would choose now (recovery never reads below
//! the chain end's floor), in the writer's process and in a follower's alike, and the
//! rule needs no message from the reclaimer (a follower of another node's log never
//! learns of its deletes). What is dropped is no longer needed by any region: each
//! region's entries below `F` are at or below its obsolete watermark, which reads of this
//! process already hide; a read-only reader sees the log as a fresh open would, and the
//! owner may delete those objects any time after the grace. The floor a catalog has
//! reached ([`Catalog::floor`]) never decreases.
//!
//! So a region whose entries all fell below the floor has no [`last_entry_id`] here, as
//! after a restart; [`Catalog::last_entry_id_overall`] stays the largest id ever inserted
//! (one number). Ids still increase per region across the drop: an entry id carries its
//! object's sequence ([`entry_id`](crate::format::entry_id)), and sequences increase.
//!
//! [`last_entry_id`]: Catalog::last_entry_id

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::error::{Durability, Error};
use crate::format::control::CONTROL_REGION;
use crate::format::{EncodedObject, Header, Link, SegmentRecord};

/// A fast hasher for region ids (u64 keys the WAL's own writer chose or read back from
/// verified footers): one multiply, as in FxHash. SipHash's flooding resistance buys
/// nothing here and costs a measurable share of every commit.
#[derive(Debug, Default, Clone, Copy)]
pub struct RegionHasher(u64);

impl Hasher for RegionHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type RegionMap<V> = HashMap<u64, V, BuildHasherDefault<RegionHasher>>;

/// Where one segment of a region lies: its object's sequence and its footer record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLocation {
    /// Sequence of the object holding the segment.
    pub sequence: u64,
    /// That object's epoch (an encrypted segment's associated data names it).
    pub epoch: u64,
    /// The footer record (ids, byte range, CRC).
    pub record: SegmentRecord,
}

/// What the catalog keeps of each chain object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogObject {
    /// The object's epoch.
    pub epoch: u64,
    /// The object's link.
    pub link: Link,
    /// The object's floor.
    pub floor: u64,
    /// The object's length in bytes.
    pub length: u64,
    /// Number of segments.
    pub segments: u32,
    /// Number of entries.
    pub entries: u64,
    /// The object's id offset: its entries' ids count from `sequence + id_offset`.
    pub id_offset: u64,
    /// Whether it is a closed opening object (FORMAT.md "Version 4"): the chain ends
    /// at it for good.
    pub closed: bool,
}

/// A region's segments on the live chain, ascending. Dropping the ones below the floor
/// advances `start`; the vector is compacted once half of it is dropped, so each drop
/// costs O(1) amortized however long the region's live part is.
#[derive(Debug, Clone, Default)]
struct RegionSegments {
    segments: Vec<SegmentLocation>,
    start: usize,
}

impl RegionSegments {
    fn live(&self) -> &[SegmentLocation] {
        self.segments.get(self.start..).unwrap_or_default()
    }

    /// Drops the segments in objects below `floor`.
    fn drop_below(&mut self, floor: u64) {
        self.start += self.live().partition_point(|s| s.sequence < floor);
        if self.start * 2 >= self.segments.len() {
            self.segments.drain(..self.start);
            self.start = 0;
            if self.segments.capacity() > 4 * self.segments.len().max(4) {
                self.segments.shrink_to(2 * self.segments.len());
            }
        }
    }
}

/// The index of the live part of the chain: the objects at or above its floor.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    objects: BTreeMap<u64, CatalogObject>,
    regions: RegionMap<RegionSegments>,
    /// `(sequence of the first live segment, region)` for every region: which regions a
    /// rising floor reaches, without visiting the others.
    firsts: std::collections::BTreeSet<(u64, u64)>,
    last_entry_id: Option<u64>,
    floor: u64,
    /// The regions whose segments are kept (`None`: every region): a read-only
    /// follower keeps only what it follows, not every region of every object it reads.
    only: Option<Arc<RegionSet>>,
}

/// A set of regions.
type RegionSet = std::collections::HashSet<u64, BuildHasherDefault<RegionHasher>>;

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps the segments of `regions` (and of the control region, which records who
    /// holds what) and drops every other region's, now and in every object inserted
    /// later; objects, ids and the floor are kept as for every region. A follower of a
    /// few regions of a log with many then holds memory for its few.
    pub fn keep_only(&mut self, regions: impl IntoIterator<Item = u64>) {
        let mut only: RegionSet = regions.into_iter().collect();
        only.insert(CONTROL_REGION);
        self.regions.retain(|region, _| only.contains(region));
        self.firsts.retain(|(_, region)| only.contains(region));
        self.only = Some(Arc::new(only));
    }

    /// The cipher byte of the newest encrypted segment on the chain (the highest
    /// sequence among each region's last segment), if any: the cipher a WAL was last
    /// written with.
    pub fn newest_cipher(&self) -> Option<u8> {
        self.regions
            .values()
            .filter_map(|r| r.live().iter().rev().find(|s| s.record.cipher != 0))
            .max_by_key(|s| s.sequence)
            .map(|s| s.record.cipher)
    }

    /// The segments held, of every region kept.
    pub fn segment_count(&self) -> usize {
        self.regions.values().map(|r| r.live().len()).sum()
    }

    /// Whether `region`'s segments are kept ([`keep_only`](Self::keep_only)).
    pub fn keeps(&self, region: u64) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(&region))
    }

    /// Adds the next chain object from its header, footer records and length, then drops
    /// what lies below its floor.
    pub fn insert(
        &mut self,
        header: &Header,
        records: &[SegmentRecord],
        length: u64,
    ) -> Result<(), Error> {
        let sequence = header.sequence;
        if let Some((last, tip)) = self.tip() {
            if sequence <= last {
                return Err(Error::InconsistentChain {
                    sequence,
                    reason: format!("sequence {sequence} does not follow {last}"),
                });
            }
            // Ids never run backwards along a chain (DESIGN.md "Regions moving between
            // nodes"): a writer never lowers its id offset.
            if header.id_offset < tip.id_offset {
                return Err(Error::InconsistentChain {
                    sequence,
                    reason: format!(
                        "id offset {} below the {} of object {last} it follows",
                        header.id_offset, tip.id_offset
                    ),
                });
            }
        }
        for r in records {
            if let Some(last) = self.last_entry_id(r.region) {
                if r.first_entry_id <= last {
                    return Err(Error::InconsistentChain {
                        sequence,
                        reason: format!(
                            "region {} id {} does not follow {}",
                            r.region, r.first_entry_id, last
                        ),
                    });
                }
            }
        }
        let mut entries = 0u64;
        for r in records {
            entries += r.entry_count();
            self.last_entry_id = self.last_entry_id.max(Some(r.last_entry_id));
            if !self.keeps(r.region) {
                continue;
            }
            let segments = self.regions.entry(r.region).or_default();
            if segments.live().is_empty() {
                self.firsts.insert((sequence, r.region));
            }
            segments.segments.push(SegmentLocation {
                sequence,
                epoch: header.epoch,
                record: *r,
            });
        }
        self.objects.insert(
            sequence,
            CatalogObject {
                epoch: header.epoch,
                link: header.link,
                floor: header.floor,
                length,
                segments: records.len() as u32,
                entries,
                id_offset: header.id_offset,
                closed: header.closed,
            },
        );
        // A header's floor never exceeds its sequence (a decoded one is checked): the
        // object just inserted always stays.
        self.drop_below(header.floor.min(sequence));
        Ok(())
    }

    /// Drops the objects below `floor`, their segments, and the regions left with none.
    fn drop_below(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        while self
            .objects
            .first_key_value()
            .is_some_and(|(s, _)| *s < floor)
        {
            self.objects.pop_first();
        }
        while let Some(&(first, region)) = self.firsts.first() {
            if first >= floor {
                break;
            }
            self.firsts.pop_first();
            let Some(segments) = self.regions.get_mut(&region) else {
                continue;
            };
            segments.drop_below(floor);
            match segments.live().first() {
                Some(s) => {
                    self.firsts.insert((s.sequence, region));
                }
                None => {
                    self.regions.remove(&region);
                }
            }
        }
    }

    /// Adds an object this instance created and found durable: it extends the chain
    /// its writer keeps, so a refusal means a bug, and the object's appends must fail
    /// (they may be durable) rather than be acknowledged.
    pub fn commit(&mut self, object: &EncodedObject) -> Result<(), Error> {
        self.insert(object.header(), object.records(), object.len())
            .map_err(|e| Error::CommitRefused {
                sequence: object.header().sequence,
                reason: e.to_string(),
                durability: Durability::MayBeDurable,
            })
    }

    /// The segments of `region` that hold ids `>= from`, in ascending order.
    pub fn segments_from(&self, region: u64, from: u64) -> &[SegmentLocation] {
        let Some(segments) = self.regions.get(&region).map(RegionSegments::live) else {
            return &[];
        };
        let start = segments.partition_point(|s| s.record.last_entry_id < from);
        segments.get(start..).unwrap_or_default()
    }

    /// The last entry id of `region`, if it has any entry on the live chain (none once
    /// its entries all fell below the floor).
    pub fn last_entry_id(&self, region: u64) -> Option<u64> {
        self.regions
            .get(&region)
            .and_then(|s| s.live().last())
            .map(|s| s.record.last_entry_id)
    }

    /// The first entry id of `region` on the live chain.
    pub fn first_entry_id(&self, region: u64) -> Option<u64> {
        self.regions
            .get(&region)
            .and_then(|s| s.live().first())
            .map(|s| s.record.first_entry_id)
    }

    /// The first and last entry ids of `region` on the live chain.
    pub fn entry_ids(&self, region: u64) -> Option<(u64, u64)> {
        self.first_entry_id(region).zip(self.last_entry_id(region))
    }

    /// Forgets the watermarks (region → id) that hide nothing any more, once they could
    /// outnumber the live regions: amortized O(1) per call. `Retention` and the actor
    /// runtime's supervisor keep such maps.
    pub fn forget_stale_watermarks<S: BuildHasher>(&self, watermarks: &mut HashMap<u64, u64, S>) {
        if watermarks.len() > 2 * self.region_count() + STALE_SLACK {
            watermarks.retain(|region, w| self.holds_at_or_below(*region, *w));
        }
    }

    /// Whether `region` still has an entry with id `<= id` on the live chain: a watermark
    /// `id` that does not still hides nothing and may be forgotten (every later entry of
    /// the region has a larger id).
    pub fn holds_at_or_below(&self, region: u64, id: u64) -> bool {
        self.first_entry_id(region).is_some_and(|first| first <= id)
    }

    /// The largest entry id of any region ever inserted (it stays when its region's
    /// entries fall below the floor).
    pub fn last_entry_id_overall(&self) -> Option<u64> {
        self.last_entry_id
    }

    /// The largest sequence on the chain (its end).
    pub fn last_sequence(&self) -> Option<u64> {
        self.objects.keys().next_back().copied()
    }

    /// The chain end: its sequence and what the catalog keeps of it.
    pub fn tip(&self) -> Option<(u64, &CatalogObject)> {
        self.objects.iter().next_back().map(|(s, o)| (*s, o))
    }

    /// The object at `sequence`, if it is on the live chain.
    pub fn object(&self, sequence: u64) -> Option<&CatalogObject> {
        self.objects.get(&sequence)
    }

    /// The length in bytes of the live chain object with `sequence`.
    pub fn object_len(&self, sequence: u64) -> Option<u64> {
        self.object(sequence).map(|o| o.length)
    }

    /// Every object on the live chain, in ascending sequence.
    pub fn objects(&self) -> impl Iterator<Item = (u64, &CatalogObject)> {
        self.objects.iter().map(|(s, o)| (*s, o))
    }

    /// The live chain objects with sequence `>= from`, ascending.
    pub fn objects_from(&self, from: u64) -> impl Iterator<Item = (u64, &CatalogObject)> {
        self.objects.range(from..).map(|(s, o)| (*s, o))
    }

    /// Number of objects on the live chain.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Number of regions with entries on the live chain.
    pub fn region_count(&self) -> usize {
        self.regions.len()
    }

    /// Every region with entries on the live chain, in no particular order.
    pub fn regions(&self) -> impl Iterator<Item = u64> + '_ {
        self.regions.keys().copied()
    }

    /// The highest floor of any object inserted: everything below it was dropped.
    pub fn floor(&self) -> u64 {
        self.floor
    }
}

/// The chain that recovery replays, chosen from the headers of every present object.
///
/// An object is complete when every link on its chain names a present, non-claim object
/// with the recorded epoch, back to a link with sequence 0 or to a link below the
/// object's own floor. The chain ends at the complete non-claim object with the largest
/// `(epoch, sequence)`; it holds that object and the objects it links to, down to the
/// object at or above the end's floor. Returned in ascending sequence; empty when
/// nothing is complete (an empty prefix).
pub fn choose_chain(headers: &BTreeMap<u64, Header>) -> Vec<u64> {
    // The highest broken link met when walking down from each object (links only point
    // lower, so one ascending pass suffices).
    let mut first_broken: HashMap<u64, Option<u64>> = HashMap::with_capacity(headers.len());
    for (&sequence, header) in headers {
        let link = header.link;
        let broken = if link.is_none() {
            None
        } else {
            match headers.get(&link.sequence) {
                Some(linked) if linked.epoch == link.epoch && !linked.claim => first_broken
                    .get(&link.sequence)
                    .copied()
                    .unwrap_or(Some(link.sequence)),
                _ => Some(link.sequence),
            }
        };
        first_broken.insert(sequence, broken);
    }
    let complete = |sequence: &u64, header: &Header| {
        !header.claim
            && match first_broken.get(sequence).copied().flatten() {
                None => true,
                Some(broken) => broken < header.floor,
            }
    };
    let Some((&tip, tip_header)) = headers
        .iter()
        .filter(|(s, h)| complete(s, h))
        .max_by_key(|(s, h)| (h.epoch, **s))
    else {
        return Vec::new();
    };
    let mut chain = vec![tip];
    let mut link = tip_header.link;
    while !link.is_none() && link.sequence >= tip_header.floor {
        chain.push(link.sequence);
        link = match headers.get(&link.sequence) {
            Some(h) => h.link,
            None => break,
        };
    }
    chain.reverse();
    chain
}

/// Most claims one open writes; more holes than this mean a damaged prefix.
pub const MAX_CLAIMS: u64 = 1 << 16;

/// What an opening instance writes (DESIGN.md, "Opening an instance", steps 3 and 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpeningPlan {
    /// The new epoch, one above the opening object's sequence.
    pub epoch: u64,
    /// One claim per absent sequence between the chain end and `M`.
    pub claims: Vec<Header>,
    /// The opening object: sequence `M + 1`, linked to the chain end.
    pub opening: Header,
}

/// Plans an open: `present` is every WAL sequence listed (orphans and claims too), `end`
/// the chain end's header, if any. `M` is the largest sequence present.
pub fn plan_opening(present: &[u64], end: Option<&Header>) -> Result<OpeningPlan, Error> {
    plan_opening_above(present, end, 0, 0)
}

/// [`plan_opening`] with `M` at least `above`: an instance that reopens after its epoch
/// ended passes the highest sequence whose entry ids it handed out at admission, so
/// the new epoch writes above them even when their objects were never created. The
/// absent sequences up to `above` are claimed like any hole: a late create of the
/// ended epoch there is fenced, and those ids are never reused or replayed.
///
/// The new epoch's id offset is the chain end's, or more so that the opening object's
/// id base (sequence plus offset) is above `id_base` (the caller's: the largest id base
/// present, orphans and claims included, and the largest it handed out): ids never run
/// backwards (DESIGN.md "Regions moving between nodes"). Its claims and opening object
/// carry it.
pub fn plan_opening_above(
    present: &[u64],
    end: Option<&Header>,
    above: u64,
    id_base: u64,
) -> Result<OpeningPlan, Error> {
    let largest = present.iter().copied().max().unwrap_or(0).max(above);
    // The opening object is `largest + 1`: its id base is above `id_base` with an offset
    // of `id_base - largest`.
    let id_offset = end
        .map_or(0, |h| h.id_offset)
        .max(id_base.saturating_sub(largest));
    let sequence = largest + 1;
    let epoch = sequence + 1;
    if sequence > crate::format::MAX_SEQUENCE {
        return Err(Error::InconsistentChain {
            sequence: largest,
            reason: "no sequence left below 2^44".into(),
        });
    }
    if sequence.saturating_add(id_offset) > crate::format::MAX_SEQUENCE {
        return Err(Error::InconsistentChain {
            sequence: largest,
            reason: format!("no id left below 2^64 above the id offset {id_offset}"),
        });
    }
    let (link, floor) = match end {
        Some(h) => (
            Link {
                sequence: h.sequence,
                epoch: h.epoch,
            },
            h.floor,
        ),
        None => (Link::NONE, 0),
    };
    let from = link.sequence + 1;
    let holes = largest.saturating_sub(link.sequence);
    if holes > MAX_CLAIMS + present.len() as u64 {
        return Err(Error::InconsistentChain {
            sequence: largest,
            reason: format!(
                "{holes} sequences between the chain end {} and the largest sequence {largest}: \
                 more holes than an open claims ({MAX_CLAIMS})",
                link.sequence
            ),
        });
    }
    let present_set: std::collections::BTreeSet<u64> = present.iter().copied().collect();
    let claims = (from..=largest)
        .filter(|s| !present_set.contains(s))
        .map(|s| Header {
            sequence: s,
            epoch,
            link,
            floor,
            claim: true,
            closed: false,
            id_offset,
        })
        .collect();
    Ok(OpeningPlan {
        epoch,
        claims,
        opening: Header {
            sequence,
            epoch,
            link,
            floor,
            claim: false,
            closed: false,
            id_offset,
        },
    })
}

/// How far (in objects) the control region's last snapshot may hold the floor below
/// the chain end before the writer copies it forward: each copy costs one small entry,
/// so at most one object in this many carries one for retention's sake.
pub const CONTROL_COPY_LAG: u64 = 64;

/// Watermarks that hide nothing kept beyond twice the live regions before they are
/// forgotten (see [`Catalog::forget_stale_watermarks`]).
pub const STALE_SLACK: usize = 64;

/// The floor: the lowest chain sequence that still holds an entry some region needs
/// (DESIGN.md, "Reclaiming space"). Pure bookkeeping beside the catalog, and its one
/// owner: the obsolete watermarks reported to this process (kept across epochs), the
/// pins, the floor the next object carries and the floor acknowledged so far, which
/// is published once, when it rises ([`acknowledged`](Self::acknowledged)).
///
/// Each region pins the floor at the sequence of its first entry above its obsolete
/// watermark. A region on the chain whose watermark has not been reported since the
/// open pins it at its first entry: nothing is reclaimed on a guess. A region whose
/// entries are all obsolete pins nothing. The floor the writer uses never decreases.
///
/// Bounded like the catalog: a pin names a live segment (pins are never below the floor
/// the catalog drops at), and a watermark that hides nothing any more (its region has
/// no live entry at or below it, see [`Catalog::holds_at_or_below`]) is forgotten once
/// such watermarks could outnumber the live regions; forgetting one changes nothing,
/// since every later entry of the region has a larger id.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    watermarks: RegionMap<u64>,
    pin_of: RegionMap<u64>,
    pins: std::collections::BTreeSet<(u64, u64)>,
    floor: u64,
    /// The highest floor carried by an acknowledged object.
    acknowledged: u64,
}

impl Retention {
    /// Retention after a first open: every region on the chain pins its first entry; the
    /// floor starts at `floor` (the chain end's).
    pub fn new(catalog: &Catalog, floor: u64) -> Self {
        let mut r = Retention::default();
        r.reopen(catalog, floor);
        r
    }

    /// Retention after another open of this process: the watermarks reported so far stay
    /// true and are applied to the recovered `catalog`; every other region on the chain
    /// pins its first entry; the floor starts at `floor` (the chain end's). The floor
    /// acknowledged so far is kept.
    pub fn reopen(&mut self, catalog: &Catalog, floor: u64) {
        let watermarks = std::mem::take(&mut self.watermarks);
        self.pin_of.clear();
        self.pins.clear();
        self.floor = floor;
        for region in catalog.regions() {
            let segments = catalog.segments_from(region, 0);
            // The control region needs only its last snapshot.
            let pin = if region == CONTROL_REGION {
                segments.last()
            } else {
                segments.first()
            };
            if let Some(pin) = pin {
                self.set_pin(region, Some(pin.sequence));
            }
        }
        for (region, id) in watermarks {
            if catalog.last_entry_id(region).is_some() {
                self.obsolete(catalog, region, id);
            } else {
                // Nothing live to hide: kept as it was, until forgotten with the stale.
                self.watermarks.insert(region, id);
            }
        }
    }

    /// An object carrying `floor` was acknowledged (the opening object included):
    /// `Some(floor)` when that raised the acknowledged floor, which is then to be
    /// published (to the reclaimer, the gauge); `None` otherwise.
    pub fn acknowledged(&mut self, floor: u64) -> Option<u64> {
        (floor > self.acknowledged).then(|| {
            self.acknowledged = floor;
            floor
        })
    }

    /// The highest floor carried by an acknowledged object.
    pub fn acknowledged_floor(&self) -> u64 {
        self.acknowledged
    }

    fn set_pin(&mut self, region: u64, pin: Option<u64>) {
        if let Some(old) = self.pin_of.remove(&region) {
            self.pins.remove(&(old, region));
        }
        if let Some(p) = pin {
            self.pin_of.insert(region, p);
            self.pins.insert((p, region));
        }
    }

    /// Records that `region`'s entries with id `<= id` are obsolete (the watermark only
    /// rises) and moves its pin.
    pub fn obsolete(&mut self, catalog: &Catalog, region: u64, id: u64) {
        if region == CONTROL_REGION {
            // The log's own: its last snapshot stays pinned (the writer copies it on).
            return;
        }
        // Only ids the chain holds can be obsolete: a watermark beyond the region's last
        // committed entry would hide entries not written yet. A region with no live entry
        // has nothing to hide or pin (a watermark it had is forgotten with the stale ones).
        let Some(last) = catalog.last_entry_id(region) else {
            self.set_pin(region, None);
            return;
        };
        catalog.forget_stale_watermarks(&mut self.watermarks);
        let id = id.min(last);
        let w = self.watermarks.entry(region).or_insert(id);
        *w = (*w).max(id);
        let w = *w;
        let pin = catalog
            .segments_from(region, w.saturating_add(1))
            .first()
            .map(|s| s.sequence);
        self.set_pin(region, pin);
    }

    /// Records that every entry `region` has on the chain is obsolete (a dropped region).
    pub fn obsolete_all(&mut self, catalog: &Catalog, region: u64) {
        if let Some(last) = catalog.last_entry_id(region) {
            self.obsolete(catalog, region, last);
        }
    }

    /// The watermark of `region`, if reported since the open (and it still hides a live
    /// entry, or has not been forgotten yet).
    pub fn watermark(&self, region: u64) -> Option<u64> {
        self.watermarks.get(&region).copied()
    }

    /// Regions with a watermark kept.
    pub fn watermark_count(&self) -> usize {
        self.watermarks.len()
    }

    /// Regions pinning the floor.
    pub fn pin_count(&self) -> usize {
        self.pin_of.len()
    }

    /// Accounts for a newly committed chain object: a region with no pin is pinned there.
    pub fn committed(&mut self, sequence: u64, records: &[SegmentRecord]) {
        for r in records {
            if r.region == CONTROL_REGION {
                // A snapshot makes every earlier one obsolete: the pin moves to it.
                self.set_pin(r.region, Some(sequence));
                continue;
            }
            let hidden = self
                .watermarks
                .get(&r.region)
                .is_some_and(|w| r.last_entry_id <= *w);
            if !self.pin_of.contains_key(&r.region) && !hidden {
                self.set_pin(r.region, Some(sequence));
            }
        }
    }

    /// Whether the control region's last snapshot alone holds the floor at least
    /// [`CONTROL_COPY_LAG`] objects below `lowest_uncommitted`: every other region's pin
    /// is above it. The writer then puts a fresh copy of the snapshot in its next object
    /// (or, holding nothing, [`unpin_control`](Self::unpin_control)), so the floor moves
    /// on and the state survives any reclaiming (DESIGN.md "The record of who holds what").
    pub fn control_holds_floor(&self, lowest_uncommitted: u64) -> bool {
        self.pins.first().is_some_and(|(pin, region)| {
            *region == CONTROL_REGION && lowest_uncommitted.saturating_sub(*pin) >= CONTROL_COPY_LAG
        })
    }

    /// The control region pins nothing: its last snapshot records no holding, so no
    /// copy of it is needed.
    pub fn unpin_control(&mut self) {
        self.set_pin(CONTROL_REGION, None);
    }

    /// The floor for the next object, given the lowest sequence not yet committed (the
    /// oldest object in flight, or the one being sealed): the lowest pin, capped there,
    /// since objects in flight are not in the catalog yet; never below any floor
    /// returned before.
    pub fn floor_for(&mut self, lowest_uncommitted: u64) -> u64 {
        let needed = self.pins.first().map_or(lowest_uncommitted, |(p, _)| *p);
        self.floor = self.floor.max(needed.min(lowest_uncommitted));
        self.floor
    }
}

/// What a follower's probes of consecutive keys showed (DESIGN.md "Tailing without
/// listing"): the chain objects they extend the chain with, in order, and the first key
/// not yet passed over (where the next probe starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeWalk {
    /// Sequences of the objects that extend the chain, in order.
    pub extended: Vec<u64>,
    /// The chain end after them.
    pub last: Link,
    /// The first key that was absent, or above every probed key: the next probe's key.
    pub next_key: u64,
    /// Whether an absent key ended the walk (else every probed key held an object).
    pub met_absent: bool,
}

/// Walks the probes of consecutive keys from `first_key` (`None`: the key was absent)
/// for a follower whose chain ends at `last`: an absent key ends the walk (within an
/// epoch sequences are consecutive, and an opening object is created only after every
/// claim below it exists, so nothing above an absent key can be the next chain object
/// yet); a claim is passed over; an object whose link is not exactly the chain end is
/// an orphan and is passed over; the first other object is the next chain object.
pub fn walk_probes(last: Link, first_key: u64, probed: &[Option<&Header>]) -> ProbeWalk {
    let mut walk = ProbeWalk {
        extended: Vec::new(),
        last,
        next_key: first_key,
        met_absent: false,
    };
    for header in probed {
        let Some(header) = header else {
            walk.met_absent = true;
            break;
        };
        if !header.claim && header.link == walk.last {
            walk.extended.push(header.sequence);
            walk.last = Link {
                sequence: header.sequence,
                epoch: header.epoch,
            };
        }
        walk.next_key = header.sequence.saturating_add(1);
    }
    walk
}

/// The next object of a chain that a follower has read up to `last`: the lowest
/// non-claim object above it whose link names `last` exactly. Objects that do not link
/// to it (orphans, claims, objects whose predecessor has not landed yet) are passed
/// over, not discarded: a later poll sees them again.
pub fn next_on_chain(last: Link, candidates: &BTreeMap<u64, Header>) -> Option<u64> {
    candidates
        .range(last.sequence.saturating_add(1)..)
        .find(|(_, h)| !h.claim && h.link == last)
        .map(|(s, _)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(sequence: u64, epoch: u64, link: (u64, u64), claim: bool) -> Header {
        Header {
            sequence,
            epoch,
            link: Link {
                sequence: link.0,
                epoch: link.1,
            },
            floor: 0,
            claim,
            closed: false,
            id_offset: 0,
        }
    }

    const LAST: Link = Link {
        sequence: 4,
        epoch: 2,
    };

    #[test]
    fn an_absent_key_ends_the_walk_and_is_probed_next() {
        let five = object(5, 2, (4, 2), false);
        let walk = walk_probes(LAST, 5, &[Some(&five), None, None]);
        assert_eq!(walk.extended, vec![5]);
        assert_eq!(
            walk.last,
            Link {
                sequence: 5,
                epoch: 2
            }
        );
        assert_eq!(walk.next_key, 6);
        assert!(walk.met_absent);
        // Nothing above an absent key is taken, even an object that would link on.
        let seven = object(7, 2, (5, 2), false);
        let walk = walk_probes(LAST, 5, &[Some(&five), None, Some(&seven)]);
        assert_eq!(walk.extended, vec![5]);
        assert_eq!(walk.next_key, 6);
    }

    #[test]
    fn claims_and_orphans_are_passed_over_and_not_probed_again() {
        // An opener's claim at 5, a late object of a fenced instance at 6 (linked to an
        // object the chain does not hold), the opening object at 7 linked to 4.
        let claim = object(5, 3, (4, 2), true);
        let orphan = object(6, 2, (5, 2), false);
        let opening = object(7, 3, (4, 2), false);
        let walk = walk_probes(LAST, 5, &[Some(&claim), Some(&orphan), Some(&opening)]);
        assert_eq!(walk.extended, vec![7]);
        assert_eq!(
            walk.last,
            Link {
                sequence: 7,
                epoch: 3
            }
        );
        assert_eq!(walk.next_key, 8);
        assert!(!walk.met_absent);
        // Without the opening object yet, the next probe starts above what was passed.
        let walk = walk_probes(LAST, 5, &[Some(&claim), Some(&orphan), None]);
        assert!(walk.extended.is_empty());
        assert_eq!(walk.last, LAST);
        assert_eq!(walk.next_key, 7);
    }

    #[test]
    fn an_object_linked_to_the_right_sequence_of_another_epoch_is_an_orphan() {
        let other_epoch = object(5, 3, (4, 1), false);
        let walk = walk_probes(LAST, 5, &[Some(&other_epoch), None]);
        assert!(walk.extended.is_empty());
        assert_eq!(walk.next_key, 6);
    }

    /// A new epoch's id offset: the chain end's, raised only as far as putting its
    /// opening object's id base above the largest id base given (present or handed out).
    #[test]
    fn an_opening_counts_its_ids_from_above_every_id_base() {
        let end = |id_offset| Header {
            id_offset,
            ..object(3, 2, (2, 2), false)
        };
        // An old orphan whose ids the sequences passed long ago raises nothing.
        let plan = plan_opening_above(&[1, 2, 3], Some(&end(0)), 3, 2).expect("plan");
        assert_eq!((plan.opening.sequence, plan.opening.id_offset), (4, 0));
        // An id base of 10: the opening object (4) counts from 4 + 7 = 11.
        let plan = plan_opening_above(&[1, 2, 3], Some(&end(0)), 3, 10).expect("plan");
        assert_eq!(plan.opening.id_offset, 7);
        assert_eq!(plan.opening.id_base(), 11);
        // The chain end's offset is kept even with nothing above it.
        let plan = plan_opening_above(&[1, 2, 3, 6], Some(&end(5)), 3, 0).expect("plan");
        assert_eq!((plan.opening.sequence, plan.opening.id_offset), (7, 5));
        assert!(plan.claims.iter().all(|c| c.id_offset == 5 && c.claim));
        // No id base left below 2^44.
        assert!(
            plan_opening_above(&[1, 2, 3], Some(&end(0)), 3, crate::format::MAX_SEQUENCE).is_err()
        );
    }
}
