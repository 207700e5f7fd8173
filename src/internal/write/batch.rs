//! The open batch: admitted appends waiting to become the next object.
//!
//! An append is one or more `(region, entries)` parts. It lands in exactly one object,
//! whole (atomic, also across regions), and a region's entries keep their admission
//! order. The batch knows its exact encoded size, so it refuses an append that would
//! push the object past `max_batch_bytes` or a region past 2^20 entries ([`NotAdmitted::Full`]:
//! seal, then admit again) and an append that can never fit ([`Error::AppendTooLarge`]).
//! Sealing encodes the object at a given sequence, epoch, link and floor and returns the
//! entry ids assigned to every append; [`Batch::receipt`] tells an append's ids at
//! admission, given the sequence the batch will be sealed at. Pure: no I/O, no async.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;

use crate::error::Error;
use crate::format::control::CONTROL_REGION;
use crate::format::{
    encode_object, entry_id, EncodedObject, FormatError, Header, ENTRY_PREFIX_LEN,
    FOOTER_FIXED_LEN, FOOTER_RECORD_LEN, HEADER_LEN, MAX_SEGMENT_ENTRIES, TRAILER_LEN,
};
use crate::internal::chain::holdings::node_region;
use crate::internal::store::codec::SegmentCodec;

/// One append: the entries of one or more regions, landing together in one object.
pub type AppendParts = Vec<(u64, Vec<Bytes>)>;

/// Size limits a batch enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Largest encoded object, header to trailer.
    pub max_object_bytes: u64,
    /// Largest single entry payload.
    pub max_entry_bytes: u64,
}

impl BatchLimits {
    /// The limits a batch enforces under `config`.
    pub fn of(config: &crate::config::Config) -> Self {
        BatchLimits {
            max_object_bytes: config.max_batch_bytes,
            max_entry_bytes: config.max_entry_bytes,
        }
    }
}

/// The ids one region part of an append was given: `count` consecutive positions from
/// `first_id` within one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionIds {
    /// The region.
    pub region: u64,
    /// Id of the part's first entry.
    pub first_id: u64,
    /// Number of entries in the part.
    pub count: u32,
}

impl RegionIds {
    /// Id of the part's last entry.
    pub fn last_id(&self) -> u64 {
        self.first_id + u64::from(self.count.saturating_sub(1))
    }

    /// Every id of the part, in order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + Clone {
        self.first_id..self.first_id + u64::from(self.count)
    }
}

/// What an acknowledged append was given: its object and the ids of each part, in the
/// order of the append's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendReceipt {
    /// The sequence of the object that holds the append.
    pub sequence: u64,
    /// One entry per part of the append, in the same order.
    pub parts: Vec<RegionIds>,
}

/// Why an append was not admitted.
#[derive(Debug)]
pub enum NotAdmitted {
    /// It would not fit the batch as it is: seal, then admit it again (returned whole).
    Full(AppendParts),
    /// It is invalid, or could never fit an object.
    Invalid(Error),
}

/// One part's place in the batch.
#[derive(Debug, Clone, Copy)]
struct Slot {
    region: u64,
    start: u64,
    count: u32,
}

/// The open batch.
#[derive(Debug)]
pub struct Batch {
    limits: BatchLimits,
    /// The id offset its object carries: its ids, handed out at admission, count from
    /// the sequence plus it.
    id_offset: u64,
    regions: BTreeMap<u64, Vec<Bytes>>,
    appends: Vec<Vec<Slot>>,
    segment_bytes: u64,
    payload_bytes: u64,
    entries: u64,
    fullest_region: u64,
}

/// Entries per distinct region of an append, in first-seen order. Appends have few
/// parts, so a linear scan beats a map and allocates once.
fn region_counts(parts: &[(u64, Vec<Bytes>)]) -> Vec<(u64, u64)> {
    let mut counts: Vec<(u64, u64)> = Vec::with_capacity(parts.len());
    for (region, entries) in parts {
        match counts.iter_mut().find(|(r, _)| r == region) {
            Some((_, n)) => *n += entries.len() as u64,
            None => counts.push((*region, entries.len() as u64)),
        }
    }
    counts
}

/// The receipt of an append whose parts took `slots`, in the object at `sequence` with
/// `id_offset` (its ids are counted from `sequence + id_offset`).
fn receipt_of(slots: &[Slot], sequence: u64, id_offset: u64) -> AppendReceipt {
    let base = sequence.saturating_add(id_offset);
    AppendReceipt {
        sequence,
        parts: slots
            .iter()
            .map(|s| RegionIds {
                region: s.region,
                first_id: entry_id(base, s.start),
                count: s.count,
            })
            .collect(),
    }
}

/// The encoded size of an object without an id offset (versions 1 and 2) whose segments
/// hold `segment_bytes` in `regions` segments. Batches are sized by it: an object with an
/// id offset is `HEADER_LEN_V3 - HEADER_LEN` (8) bytes longer, and may exceed
/// `max_batch_bytes` by that much.
pub fn object_len(segment_bytes: u64, regions: u64) -> u64 {
    (HEADER_LEN + FOOTER_FIXED_LEN + TRAILER_LEN) as u64
        + segment_bytes
        + FOOTER_RECORD_LEN as u64 * regions
}

impl Batch {
    /// An empty batch with these limits, for objects without an id offset.
    pub fn new(limits: BatchLimits) -> Self {
        Batch::with_id_offset(limits, 0)
    }

    /// An empty batch with these limits, for an object carrying `id_offset`: the ids it
    /// hands out at admission count from its sequence plus `id_offset`.
    pub fn with_id_offset(limits: BatchLimits, id_offset: u64) -> Self {
        Batch {
            limits,
            id_offset,
            regions: BTreeMap::new(),
            appends: Vec::new(),
            segment_bytes: 0,
            payload_bytes: 0,
            entries: 0,
            fullest_region: 0,
        }
    }

    /// The limits this batch enforces.
    pub fn limits(&self) -> BatchLimits {
        self.limits
    }

    /// Checks an append against the limits alone, without a batch: the reserved control
    /// region, empty parts, entry sizes, and whether it fits an object by itself.
    pub fn validate(limits: &BatchLimits, parts: &[(u64, Vec<Bytes>)]) -> Result<(), Error> {
        if parts.is_empty() {
            return Err(Error::EmptyAppend);
        }
        let mut segment_bytes = 0u64;
        for (region, entries) in parts {
            node_region(*region)?;
            if entries.is_empty() {
                return Err(Error::EmptyAppend);
            }
            for e in entries {
                let len = e.len() as u64;
                if len > limits.max_entry_bytes || len > u64::from(u32::MAX) {
                    return Err(Error::EntryTooLarge {
                        region: *region,
                        len,
                        max: limits.max_entry_bytes,
                    });
                }
                segment_bytes += ENTRY_PREFIX_LEN as u64 + len;
            }
        }
        let per_region = region_counts(parts);
        if let Some((region, count)) = per_region.iter().find(|(_, n)| *n > MAX_SEGMENT_ENTRIES) {
            return Err(Error::TooManyEntries {
                region: *region,
                count: *count,
            });
        }
        let alone = object_len(segment_bytes, per_region.len() as u64);
        if alone > limits.max_object_bytes {
            return Err(Error::AppendTooLarge {
                bytes: alone,
                max: limits.max_object_bytes,
            });
        }
        Ok(())
    }

    /// Admits an append, returning its index among the batch's appends (the index of its
    /// receipt when sealed).
    pub fn admit(&mut self, parts: AppendParts) -> Result<usize, NotAdmitted> {
        Self::validate(&self.limits, &parts).map_err(NotAdmitted::Invalid)?;
        // What the append adds: its framed entries, and a footer record per new region.
        let added_bytes: u64 = parts
            .iter()
            .flat_map(|(_, entries)| entries.iter())
            .map(|e| (ENTRY_PREFIX_LEN + e.len()) as u64)
            .sum();
        let added = region_counts(&parts);
        let mut new_regions = 0u64;
        for (region, count) in &added {
            let have = self.regions.get(region).map_or(0, |v| v.len() as u64);
            if have == 0 {
                new_regions += 1;
            }
            if have + count > MAX_SEGMENT_ENTRIES {
                return Err(NotAdmitted::Full(parts));
            }
        }
        let after = object_len(
            self.segment_bytes + added_bytes,
            self.regions.len() as u64 + new_regions,
        );
        if after > self.limits.max_object_bytes {
            return Err(NotAdmitted::Full(parts));
        }

        let mut slots = Vec::with_capacity(parts.len());
        for (region, entries) in parts {
            let segment = self.regions.entry(region).or_default();
            slots.push(Slot {
                region,
                start: segment.len() as u64,
                count: entries.len() as u32,
            });
            self.entries += entries.len() as u64;
            self.payload_bytes += entries.iter().map(|e| e.len() as u64).sum::<u64>();
            segment.extend(entries);
            self.fullest_region = self.fullest_region.max(segment.len() as u64);
        }
        self.segment_bytes += added_bytes;
        self.appends.push(slots);
        Ok(self.appends.len() - 1)
    }

    /// Whether nothing waits to be written: no append, no control snapshot.
    pub fn is_empty(&self) -> bool {
        self.appends.is_empty() && !self.holds_control()
    }

    /// Whether the batch carries a control snapshot ([`put_control`](Self::put_control)).
    pub fn holds_control(&self) -> bool {
        self.regions.contains_key(&CONTROL_REGION)
    }

    /// Puts `snapshot` in the batch as the control region's one entry (FORMAT.md
    /// "Control entries"), replacing one put before: a snapshot makes every earlier one
    /// obsolete. It is the log's own entry, not an append: it has no receipt and counts
    /// in no payload or entry total. Returns it back if the object would not fit.
    pub fn put_control(&mut self, snapshot: Bytes) -> Result<(), Bytes> {
        let framed = |e: &Bytes| (ENTRY_PREFIX_LEN + e.len()) as u64;
        let (old, regions) = match self.regions.get(&CONTROL_REGION) {
            Some(entries) => (entries.iter().map(framed).sum(), self.regions.len()),
            None => (0, self.regions.len() + 1),
        };
        let segment_bytes = self.segment_bytes - old + framed(&snapshot);
        if object_len(segment_bytes, regions as u64) > self.limits.max_object_bytes {
            return Err(snapshot);
        }
        self.regions.insert(CONTROL_REGION, vec![snapshot]);
        self.segment_bytes = segment_bytes;
        Ok(())
    }

    /// Number of appends admitted.
    pub fn append_count(&self) -> usize {
        self.appends.len()
    }

    /// Number of entries admitted.
    pub fn entry_count(&self) -> u64 {
        self.entries
    }

    /// Sum of the admitted payloads' lengths.
    pub fn payload_bytes(&self) -> u64 {
        self.payload_bytes
    }

    /// The exact length of the object the batch would seal into.
    pub fn encoded_len(&self) -> u64 {
        object_len(self.segment_bytes, self.regions.len() as u64)
    }

    /// Whether some region holds 2^20 entries, so nothing more of it fits.
    pub fn region_full(&self) -> bool {
        self.fullest_region >= MAX_SEGMENT_ENTRIES
    }

    /// The receipt the append at `index` (as [`admit`](Self::admit) returned it) gets
    /// when the batch is sealed at `sequence` (with the id offset it was opened under);
    /// `None` for an index not admitted. The ids are final from admission on: a batch is
    /// sealed whole, and a part's positions never move (a region's segment only grows).
    pub fn receipt(&self, index: usize, sequence: u64) -> Option<AppendReceipt> {
        self.appends
            .get(index)
            .map(|slots| receipt_of(slots, sequence, self.id_offset))
    }

    /// The largest id of `region` in the batch, when sealed at `sequence`.
    pub fn last_id(&self, region: u64, sequence: u64) -> Option<u64> {
        let count = self.regions.get(&region)?.len() as u64;
        let base = sequence.saturating_add(self.id_offset);
        count.checked_sub(1).map(|last| entry_id(base, last))
    }

    /// The id offset this batch's object carries.
    pub fn id_offset(&self) -> u64 {
        self.id_offset
    }

    /// Encodes the batch as the object `header` names (a claim is refused), its segments
    /// transformed by `codec`, leaving the batch empty. Receipts come in admission order.
    pub fn seal(
        &mut self,
        header: Header,
        codec: &SegmentCodec,
    ) -> Result<SealedObject, FormatError> {
        if header.claim {
            return Err(FormatError::Unencodable("a claim holds no segments"));
        }
        if header.id_offset != self.id_offset {
            // Its ids were handed out at admission, counted from this batch's offset.
            return Err(FormatError::Unencodable(
                "a batch is sealed at the id offset it was opened under",
            ));
        }
        let (sequence, id_offset) = (header.sequence, header.id_offset);
        // Whatever fails here leaves the batch as it was.
        let encoded = OnceLock::new();
        let deferred = if codec.is_identity() {
            // Untransformed: encoded now (zero-copy, one pass), exactly as version 1.
            let object = encode_object(
                &header,
                self.regions.iter().map(|(r, e)| (*r, e.as_slice())),
            )?;
            let _ = encoded.set(Ok(object));
            None
        } else {
            // Transformed: the entries are kept, and encoded by the first caller of
            // `encoded()`, the object's upload, off the sealer's thread.
            header.validate()?;
            Some(codec.clone())
        };
        // Each region's entries, kept for the readers' tail (moved, not copied).
        let segments = std::mem::take(&mut self.regions).into_iter().collect();
        let receipts = self
            .appends
            .drain(..)
            .map(|slots| receipt_of(&slots, sequence, id_offset))
            .collect();
        let deferred = Mutex::new(deferred);
        let sealed = SealedObject {
            header,
            segments,
            deferred,
            encoded,
            receipts,
            entries: self.entries,
            payload_bytes: self.payload_bytes,
        };
        self.regions.clear();
        self.segment_bytes = 0;
        self.payload_bytes = 0;
        self.entries = 0;
        self.fullest_region = 0;
        Ok(sealed)
    }
}

/// A sealed batch: the object (its bytes, or the entries they are made from) and the
/// receipts it will acknowledge.
///
/// An untransformed object is encoded when sealed. A transformed one (compressed or
/// encrypted, [`SegmentCodec`]) is encoded by the first call of
/// [`encoded`](Self::encoded): the actor runtime makes it in the object's upload task,
/// so compression and encryption run beside the writer, not in it. Its identity (header,
/// receipts, ids) is fixed at the seal either way.
#[derive(Debug)]
pub struct SealedObject {
    header: Header,
    /// Each region's entries, in region order: what a transformed object is encoded
    /// from, and what the writer hands to the readers' tail when it acknowledges.
    segments: Vec<(u64, Vec<Bytes>)>,
    /// A transformed object's transforms until it is encoded.
    deferred: Mutex<Option<SegmentCodec>>,
    encoded: OnceLock<std::result::Result<EncodedObject, FormatError>>,
    /// One receipt per admitted append, in admission order.
    pub receipts: Vec<AppendReceipt>,
    /// Number of entries in the object.
    pub entries: u64,
    /// Sum of the entries' payload lengths.
    pub payload_bytes: u64,
}

impl SealedObject {
    /// What the metrics count of this object once it is acknowledged.
    pub fn acknowledged(&self) -> crate::metrics::Acknowledged {
        crate::metrics::Acknowledged {
            bytes: self.encoded_len(),
            entries: self.entries,
            appends: self.receipts.len() as u64,
            floor: self.header().floor,
        }
    }

    /// The object's sequence.
    pub fn sequence(&self) -> u64 {
        self.header.sequence
    }

    /// The object's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The encoded object: encoded now if it was not yet (a transformed object, on the
    /// caller's thread; every later call gets the same bytes).
    pub fn encoded(&self) -> std::result::Result<&EncodedObject, FormatError> {
        self.encoded
            .get_or_init(|| {
                let deferred = self
                    .deferred
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                match deferred {
                    Some(codec) => codec.encode(
                        &self.header,
                        self.segments.iter().map(|(r, e)| (*r, &e[..])),
                    ),
                    None => Err(FormatError::Unencodable(
                        "a sealed object without its entries",
                    )),
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Each region's entries, in region order (the first at position 0).
    pub fn segments(&self) -> &[(u64, Vec<Bytes>)] {
        &self.segments
    }

    /// The largest id of `region` in the object.
    pub fn last_id(&self, region: u64) -> Option<u64> {
        let at = self
            .segments
            .binary_search_by_key(&region, |(r, _)| *r)
            .ok()?;
        let count = self.segments.get(at)?.1.len() as u64;
        let base = self.header.id_base();
        count.checked_sub(1).map(|last| entry_id(base, last))
    }

    /// The encoded object's length, 0 while a transformed one is not encoded yet.
    pub fn encoded_len(&self) -> u64 {
        match self.encoded.get() {
            Some(Ok(e)) => e.len(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Link;
    use crate::transform::{Compression, Keys, SegmentKey, StaticKeys};
    use std::sync::Arc;

    fn header(sequence: u64) -> Header {
        Header {
            sequence,
            epoch: 1,
            link: Link::NONE,
            floor: 0,
            claim: false,
            closed: false,
            id_offset: 0,
        }
    }

    fn limits() -> BatchLimits {
        BatchLimits {
            max_object_bytes: 1 << 20,
            max_entry_bytes: 1 << 16,
        }
    }

    fn batch() -> Batch {
        let mut batch = Batch::new(limits());
        let text = Bytes::from("a compressible entry ".repeat(20));
        batch
            .admit(vec![(1, vec![text.clone()]), (2, vec![text])])
            .expect("admitted");
        batch
    }

    #[test]
    fn an_untransformed_object_is_encoded_when_sealed() {
        let sealed = batch()
            .seal(header(1), &SegmentCodec::identity())
            .expect("sealed");
        assert!(sealed.encoded_len() > 0);
        assert_eq!(sealed.encoded().expect("encoded").version(), 1);
    }

    #[test]
    fn a_transformed_object_is_encoded_once_by_its_first_reader() {
        let mut codec = SegmentCodec::identity();
        codec.compression = Compression::ZSTD;
        codec.keys = Some(Keys(Arc::new(StaticKeys::new(SegmentKey::new(1, [7; 32])))));
        let sealed = batch().seal(header(1), &codec).expect("sealed");
        assert_eq!(sealed.sequence(), 1);
        assert_eq!(sealed.encoded_len(), 0, "not encoded at the seal");
        let first = sealed.encoded().expect("encoded").to_bytes();
        assert_eq!(sealed.encoded().expect("encoded").to_bytes(), first);
        assert_eq!(sealed.encoded_len(), first.len() as u64);
        assert!(sealed
            .encoded()
            .expect("encoded")
            .records()
            .iter()
            .all(|r| r.is_transformed()));
    }

    /// A batch opened under id offset 40 hands out ids from its sequence plus 40, its
    /// object carries that offset (version 3), and it refuses to be sealed at another:
    /// its ids were handed out already.
    #[test]
    fn a_batch_seals_at_the_id_offset_it_was_opened_under() {
        let mut batch = Batch::with_id_offset(limits(), 40);
        let index = batch
            .admit(vec![(
                3,
                vec![Bytes::from_static(b"x"), Bytes::from_static(b"y")],
            )])
            .expect("admitted");
        let receipt = batch.receipt(index, 5).expect("admitted");
        assert_eq!(receipt.parts[0].first_id, entry_id(45, 0));
        let refused = batch.seal(header(5), &SegmentCodec::identity());
        assert!(
            matches!(refused, Err(FormatError::Unencodable(_))),
            "{refused:?}"
        );
        assert_eq!(batch.append_count(), 1, "a refused seal leaves the batch");
        let at_40 = Header {
            id_offset: 40,
            ..header(5)
        };
        let sealed = batch
            .seal(at_40, &SegmentCodec::identity())
            .expect("sealed");
        assert_eq!(sealed.receipts, vec![receipt]);
        let encoded = sealed.encoded().expect("encoded");
        assert_eq!(encoded.version(), 3);
        assert_eq!(encoded.records()[0].last_entry_id, entry_id(45, 1));
    }

    /// A control snapshot rides in the batch as the control region's one entry: a second
    /// one replaces the first, it has no receipt and moves no append's ids, and the
    /// object's footer names it last (region 2^64 - 1).
    #[test]
    fn a_control_snapshot_is_the_control_regions_one_entry() {
        let mut batch = Batch::new(limits());
        assert!(batch.put_control(Bytes::from_static(b"first")).is_ok());
        assert!(
            !batch.is_empty(),
            "a batch holding only a snapshot is sealed"
        );
        let index = batch
            .admit(vec![(3, vec![Bytes::from_static(b"x")])])
            .expect("admitted");
        assert!(batch.put_control(Bytes::from_static(b"second")).is_ok());
        let receipt = batch.receipt(index, 5).expect("admitted");
        assert_eq!(batch.payload_bytes(), 1, "the snapshot is not a payload");
        let expected_len = batch.encoded_len();
        let sealed = batch
            .seal(header(5), &SegmentCodec::identity())
            .expect("sealed");
        assert_eq!(sealed.receipts, vec![receipt]);
        let encoded = sealed.encoded().expect("encoded");
        assert_eq!(encoded.len(), expected_len);
        let regions: Vec<u64> = encoded.records().iter().map(|r| r.region).collect();
        assert_eq!(regions, vec![3, CONTROL_REGION]);
        assert_eq!(
            sealed.segments().last().map(|(_, e)| e.clone()),
            Some(vec![Bytes::from_static(b"second")])
        );
    }

    #[test]
    fn a_control_snapshot_that_does_not_fit_comes_back() {
        let mut batch = Batch::new(BatchLimits {
            max_object_bytes: 200,
            max_entry_bytes: 100,
        });
        let big = Bytes::from(vec![0u8; 200]);
        assert_eq!(batch.put_control(big.clone()), Err(big));
        assert!(batch.is_empty());
    }
}
