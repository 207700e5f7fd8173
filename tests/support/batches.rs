//! Batches, their seals and what their receipts promise, shared by `tests/format.rs`
//! (round trips) and `tests/batch.rs` (the batch rules), each including this file with
//! `#[path]`.

use std::collections::BTreeMap;

use bytes::Bytes;
use object_store_wal::format::{entry_id, DecodedObject, Header, Link};
use object_store_wal::internal::store::codec::SegmentCodec;
use object_store_wal::internal::write::batch::{AppendParts, Batch, BatchLimits};
use proptest::prelude::*;

/// An entry: empty now and then, else up to 39 random bytes.
pub fn payload() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        1 => Just(Bytes::new()),
        4 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from),
    ]
}

/// A region: mostly one of a few small ones (so appends share regions), else any.
pub fn region() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..6, 1 => any::<u64>()]
}

/// An append of one to three parts, each of one to four entries.
pub fn append() -> impl Strategy<Value = AppendParts> {
    proptest::collection::vec((region(), proptest::collection::vec(payload(), 1..5)), 1..4)
}

/// The header fields a batch is sealed with.
#[derive(Debug, Clone, Copy)]
pub struct SealAt {
    pub sequence: u64,
    pub epoch: u64,
    pub link: Link,
    pub floor: u64,
}

/// Limits no test batch reaches.
pub fn unlimited() -> BatchLimits {
    BatchLimits {
        max_object_bytes: u64::MAX,
        max_entry_bytes: u64::from(u32::MAX),
    }
}

/// Region -> (id, payload) in admission order, as the receipts promise.
pub type Expected = BTreeMap<u64, Vec<(u64, Bytes)>>;

/// What the receipts promise for `appends` sealed at `sequence`, checking that each
/// receipt describes its append.
pub fn expected_from_receipts(
    appends: &[AppendParts],
    receipts: &[object_store_wal::AppendReceipt],
    sequence: u64,
) -> Expected {
    assert_eq!(appends.len(), receipts.len());
    let mut expected = Expected::new();
    for (parts, receipt) in appends.iter().zip(receipts) {
        assert_eq!(receipt.sequence, sequence);
        assert_eq!(receipt.parts.len(), parts.len());
        for ((region, entries), ids) in parts.iter().zip(&receipt.parts) {
            assert_eq!(ids.region, *region);
            assert_eq!(ids.count as usize, entries.len());
            assert_eq!(ids.ids().count(), entries.len());
            assert_eq!(ids.last_id(), ids.first_id + entries.len() as u64 - 1);
            let slot = expected.entry(*region).or_default();
            slot.extend(ids.ids().zip(entries.iter().cloned()));
        }
    }
    expected
}

/// A decoded object's entries by region, with the ids their positions give them.
pub fn decoded_entries(d: &DecodedObject) -> Expected {
    let sequence = d.summary.header.sequence;
    d.segments
        .iter()
        .map(|(region, entries)| {
            let with_ids = entries
                .iter()
                .enumerate()
                .map(|(p, e)| (entry_id(sequence, p as u64), e.clone()))
                .collect();
            (*region, with_ids)
        })
        .collect()
}

/// Seals `batch` at `at`, which must be a valid header.
pub fn seal(
    batch: &mut Batch,
    at: SealAt,
) -> object_store_wal::internal::write::batch::SealedObject {
    batch
        .seal(
            Header {
                sequence: at.sequence,
                epoch: at.epoch,
                link: at.link,
                floor: at.floor,
                claim: false,
                closed: false,
                id_offset: 0,
            },
            &SegmentCodec::identity(),
        )
        .expect("a valid header seals")
}
