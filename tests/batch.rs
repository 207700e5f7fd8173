//! The batch that feeds the object format (`docs/FORMAT.md`): its admission rules
//! (empty appends, entry and object size limits, 2^20 entries of a region, appends
//! across regions that land whole, a full batch that returns the parts untouched) and a
//! property that full batches split into objects within their limits, each region's ids
//! increasing across them and equal to the ids told at admission. The format itself,
//! and batches that round-trip through it, are in `tests/format.rs`.

use std::collections::BTreeSet;

use bytes::Bytes;
use object_store_wal::format::{
    decode_object, entry_id, entry_sequence, FormatError, Header, Link, EMPTY_OBJECT_LEN,
};
use object_store_wal::internal::store::codec::SegmentCodec;
use object_store_wal::internal::write::batch::{
    object_len, AppendParts, AppendReceipt, Batch, BatchLimits, NotAdmitted,
};
use object_store_wal::Error;
use proptest::prelude::*;

#[path = "support/batches.rs"]
mod batches;

use batches::{append, decoded_entries, expected_from_receipts, seal, unlimited, Expected, SealAt};

// ---------------------------------------------------------------------------------------
// 1. Admission rules.
// ---------------------------------------------------------------------------------------

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

fn bs(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn limits(max_object_bytes: u64, max_entry_bytes: u64) -> BatchLimits {
    BatchLimits {
        max_object_bytes,
        max_entry_bytes,
    }
}

#[test]
fn batch_rejects_empty_appends() {
    let mut batch = Batch::new(unlimited());
    let empties: [AppendParts; 3] = [
        vec![],
        vec![(1, vec![])],
        vec![(1, vec![bs("a")]), (2, vec![])],
    ];
    for parts in empties {
        assert!(matches!(
            Batch::validate(&batch.limits(), &parts),
            Err(Error::EmptyAppend)
        ));
        assert!(matches!(
            batch.admit(parts),
            Err(NotAdmitted::Invalid(Error::EmptyAppend))
        ));
    }
    assert!(batch.is_empty());
    assert_eq!(batch.encoded_len(), EMPTY_OBJECT_LEN as u64);
    // An empty payload is an entry, not an empty append.
    assert!(matches!(batch.admit(vec![(1, vec![Bytes::new()])]), Ok(0)));
}

/// The control region (FORMAT.md "Control entries") is the log's own: an append that
/// names it is refused whole, and the batch is left as it was.
#[test]
fn batch_refuses_the_control_region() {
    let mut batch = Batch::new(unlimited());
    let parts: AppendParts = vec![(1, vec![bs("a")]), (u64::MAX, vec![bs("b")])];
    assert!(matches!(
        batch.admit(parts),
        Err(NotAdmitted::Invalid(Error::ReservedRegion {
            region: u64::MAX
        }))
    ));
    assert!(batch.is_empty());
}

#[test]
fn batch_rejects_entry_above_max_entry_bytes() {
    let mut batch = Batch::new(limits(10_000, 10));
    let at_limit = Bytes::from(vec![1u8; 10]);
    let above = Bytes::from(vec![2u8; 11]);
    assert!(matches!(batch.admit(vec![(3, vec![at_limit])]), Ok(0)));
    let err = batch.admit(vec![(4, vec![bs("ok")]), (5, vec![bs("a"), above])]);
    assert!(matches!(
        err,
        Err(NotAdmitted::Invalid(Error::EntryTooLarge {
            region: 5,
            len: 11,
            max: 10,
        }))
    ));
    assert_eq!(batch.append_count(), 1);
    assert_eq!(batch.entry_count(), 1);
}

#[test]
fn batch_rejects_append_too_large_alone() {
    // One 100-byte entry in one region: 96 + 48 + 4 + 100 = 248 bytes.
    let exact = object_len(104, 1);
    assert_eq!(exact, 248);
    let entry = Bytes::from(vec![7u8; 100]);
    let mut batch = Batch::new(limits(exact, 1000));
    assert!(matches!(batch.admit(vec![(1, vec![entry.clone()])]), Ok(0)));
    let sealed = seal(
        &mut batch,
        SealAt {
            sequence: 1,
            epoch: 1,
            link: Link::NONE,
            floor: 0,
        },
    );
    assert_eq!(sealed.encoded().expect("encoded").len(), exact);

    let mut batch = Batch::new(limits(exact - 1, 1000));
    assert!(matches!(
        batch.admit(vec![(1, vec![entry.clone()])]),
        Err(NotAdmitted::Invalid(Error::AppendTooLarge {
            bytes: 248,
            max: 247
        }))
    ));
    // Splitting it across two regions costs a footer record more.
    let mut batch = Batch::new(limits(exact, 1000));
    let split = vec![
        (1, vec![Bytes::from(vec![7u8; 50])]),
        (2, vec![Bytes::from(vec![7u8; 46])]),
    ];
    assert!(matches!(
        batch.admit(split),
        Err(NotAdmitted::Invalid(Error::AppendTooLarge {
            bytes: 296,
            max: 248
        }))
    ));
    assert!(batch.is_empty());
}

#[test]
fn batch_full_returns_the_parts_untouched() {
    // Room for two 50-byte entries of one region, exactly.
    let max = object_len(2 * 54, 1);
    let mut batch = Batch::new(limits(max, 1000));
    let entry = |v: u8| Bytes::from(vec![v; 50]);
    assert!(matches!(batch.admit(vec![(1, vec![entry(1)])]), Ok(0)));
    assert!(matches!(batch.admit(vec![(1, vec![entry(2)])]), Ok(1)));
    assert_eq!(batch.encoded_len(), max);

    let third: AppendParts = vec![(1, vec![entry(3)])];
    let Err(NotAdmitted::Full(back)) = batch.admit(third.clone()) else {
        panic!("a full batch takes no more")
    };
    assert_eq!(back, third);
    // Even a zero-byte entry of a new region needs a footer record and a length prefix.
    let small: AppendParts = vec![(2, vec![Bytes::new()])];
    let Err(NotAdmitted::Full(back_small)) = batch.admit(small.clone()) else {
        panic!("a full batch takes no more")
    };
    assert_eq!(back_small, small);
    assert_eq!(batch.append_count(), 2);
    assert_eq!(batch.encoded_len(), max);

    let sealed = seal(
        &mut batch,
        SealAt {
            sequence: 5,
            epoch: 1,
            link: Link::NONE,
            floor: 0,
        },
    );
    assert_eq!(sealed.receipts.len(), 2);
    assert_eq!(sealed.receipts[1].parts[0].first_id, entry_id(5, 1));
    // The returned parts go into the next object.
    assert!(matches!(batch.admit(back), Ok(0)));
    let next = seal(
        &mut batch,
        SealAt {
            sequence: 6,
            epoch: 1,
            link: Link {
                sequence: 5,
                epoch: 1,
            },
            floor: 0,
        },
    );
    assert_eq!(next.receipts[0].parts[0].first_id, entry_id(6, 0));
    let decoded = decode_object(&next.encoded().expect("encoded").to_bytes()).unwrap();
    assert_eq!(decoded.segments, vec![(1, vec![entry(3)])]);
}

#[test]
fn batch_region_full_at_2_pow_20_entries() {
    const N: usize = 1 << 20;
    let mut batch = Batch::new(limits(u64::MAX, 1 << 20));
    assert!(matches!(
        batch.admit(vec![(5, vec![Bytes::new(); N])]),
        Ok(0)
    ));
    assert!(batch.region_full());
    assert_eq!(batch.encoded_len(), object_len(4 * N as u64, 1));

    let one: AppendParts = vec![(5, vec![bs("z")])];
    let Err(NotAdmitted::Full(back)) = batch.admit(one.clone()) else {
        panic!("region 5 holds 2^20 entries")
    };
    assert_eq!(back, one);
    // Part of an append across regions: the whole append waits.
    let across: AppendParts = vec![(6, vec![bs("w")]), (5, vec![bs("z")])];
    let Err(NotAdmitted::Full(back_across)) = batch.admit(across.clone()) else {
        panic!("region 5 holds 2^20 entries")
    };
    assert_eq!(back_across, across);
    // Another region still fits.
    assert!(matches!(batch.admit(vec![(6, vec![bs("y")])]), Ok(1)));

    let sealed = seal(
        &mut batch,
        SealAt {
            sequence: 3,
            epoch: 1,
            link: Link::NONE,
            floor: 0,
        },
    );
    let ids = sealed.receipts[0].parts[0];
    assert_eq!(ids.region, 5);
    assert_eq!(ids.first_id, entry_id(3, 0));
    assert_eq!(ids.count as usize, N);
    assert_eq!(ids.last_id(), entry_id(3, N as u64 - 1));
    assert_eq!(entry_sequence(ids.last_id()), 3);
    let records = sealed.encoded().expect("encoded").records();
    assert_eq!(records[0].last_entry_id, entry_id(3, N as u64 - 1));
    assert_eq!(records[0].entry_count(), N as u64);

    let decoded = decode_object(&sealed.encoded().expect("encoded").to_bytes()).unwrap();
    assert_eq!(decoded.segments.len(), 2);
    assert_eq!(decoded.segments[0].0, 5);
    assert_eq!(decoded.segments[0].1.len(), N);
    assert!(decoded.segments[0].1.iter().all(Bytes::is_empty));
    assert_eq!(decoded.segments[1], (6, vec![bs("y")]));

    assert!(matches!(batch.admit(back), Ok(0)));
    assert!(!batch.region_full());
}

#[test]
fn batch_rejects_more_than_2_pow_20_entries_of_one_region() {
    const N: usize = 1 << 20;
    let mut batch = Batch::new(limits(u64::MAX, 16));
    assert!(matches!(
        batch.admit(vec![(9, vec![Bytes::new(); N + 1])]),
        Err(NotAdmitted::Invalid(Error::TooManyEntries {
            region: 9,
            count,
        })) if count == N as u64 + 1
    ));
    // Two parts of one region count together.
    assert!(matches!(
        batch.admit(vec![
            (9, vec![Bytes::new(); N]),
            (1, vec![bs("a")]),
            (9, vec![bs("b")]),
        ]),
        Err(NotAdmitted::Invalid(Error::TooManyEntries {
            region: 9,
            count,
        })) if count == N as u64 + 1
    ));
    assert!(batch.is_empty());
    // 2^20 of one region and one of another is fine.
    assert!(matches!(
        batch.admit(vec![(9, vec![Bytes::new(); N]), (1, vec![bs("a")])]),
        Ok(0)
    ));
}

#[test]
fn batch_append_across_regions_lands_whole() {
    let mut batch = Batch::new(unlimited());
    assert!(matches!(batch.admit(vec![(42, vec![bs("p0")])]), Ok(0)));
    let parts: AppendParts = vec![
        (42, vec![bs("a"), bs("b")]),
        (7, vec![bs("c")]),
        (42, vec![Bytes::new()]),
        (1, vec![bs("d"), bs("e"), bs("f")]),
    ];
    assert!(matches!(batch.admit(parts.clone()), Ok(1)));
    assert!(matches!(batch.admit(vec![(7, vec![bs("q0")])]), Ok(2)));
    let sealed = seal(
        &mut batch,
        SealAt {
            sequence: 11,
            epoch: 4,
            link: Link {
                sequence: 10,
                epoch: 3,
            },
            floor: 2,
        },
    );
    let receipt = &sealed.receipts[1];
    assert_eq!(receipt.sequence, 11);
    let got: Vec<(u64, u64, u32)> = receipt
        .parts
        .iter()
        .map(|p| (p.region, p.first_id, p.count))
        .collect();
    assert_eq!(
        got,
        vec![
            (42, entry_id(11, 1), 2),
            (7, entry_id(11, 0), 1),
            (42, entry_id(11, 3), 1),
            (1, entry_id(11, 0), 3),
        ]
    );
    let decoded = decode_object(&sealed.encoded().expect("encoded").to_bytes()).unwrap();
    assert_eq!(
        decoded.segments,
        vec![
            (1, vec![bs("d"), bs("e"), bs("f")]),
            (7, vec![bs("c"), bs("q0")]),
            (42, vec![bs("p0"), bs("a"), bs("b"), Bytes::new()]),
        ]
    );
    let all = [vec![(42, vec![bs("p0")])], parts, vec![(7, vec![bs("q0")])]];
    assert_eq!(
        decoded_entries(&decoded),
        expected_from_receipts(&all, &sealed.receipts, 11)
    );
}

#[test]
fn batch_seal_with_invalid_header_keeps_the_batch() {
    let mut batch = Batch::new(unlimited());
    assert!(matches!(batch.admit(vec![(1, vec![bs("a")])]), Ok(0)));
    assert_eq!(
        batch
            .seal(header(0), &SegmentCodec::identity())
            .unwrap_err(),
        FormatError::SequenceOutOfRange(0)
    );
    assert_eq!(batch.append_count(), 1);
    let sealed = batch.seal(header(1), &SegmentCodec::identity()).unwrap();
    assert_eq!(sealed.receipts[0].parts[0].first_id, entry_id(1, 0));
    assert_eq!(
        decode_object(&sealed.encoded().expect("encoded").to_bytes())
            .unwrap()
            .segments,
        vec![(1, vec![bs("a")])]
    );
}

// ---------------------------------------------------------------------------------------
// 2. Full batches split into objects.
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn prop_full_batches_split_into_objects(
        appends in proptest::collection::vec(append(), 1..16),
        max_object_bytes in 150u64..600,
        first in 1u64..1000,
    ) {
        let limits = BatchLimits { max_object_bytes, max_entry_bytes: 64 };
        let mut batch = Batch::new(limits);
        let mut sequence = first;
        let mut admitted: Vec<AppendParts> = Vec::new();
        // The receipts told at admission (`Batch::receipt`), for the sequence sealed next.
        let mut told: Vec<AppendReceipt> = Vec::new();
        let mut all = Expected::new();
        let mut flush = |batch: &mut Batch,
                         admitted: &mut Vec<AppendParts>,
                         told: &mut Vec<AppendReceipt>,
                         sequence: &mut u64| {
            let at = SealAt { sequence: *sequence, epoch: 2, link: Link::NONE, floor: 0 };
            let predicted = batch.encoded_len();
            let sealed = seal(batch, at);
            assert_eq!(&sealed.receipts, told, "the ids told at admission are final");
            told.clear();
            let bytes = sealed.encoded().expect("encoded").to_bytes();
            assert_eq!(bytes.len() as u64, predicted);
            assert!(predicted <= max_object_bytes);
            let decoded = decode_object(&bytes).unwrap();
            let expected = expected_from_receipts(admitted, &sealed.receipts, *sequence);
            assert_eq!(decoded_entries(&decoded), expected.clone());
            for (region, entries) in expected {
                all.entry(region).or_default().extend(entries);
            }
            admitted.clear();
            *sequence += 1;
        };
        // A model of the open batch: its regions and framed entry bytes.
        let mut model_regions: BTreeSet<u64> = BTreeSet::new();
        let mut model_bytes = 0u64;
        for parts in appends {
            let regions: BTreeSet<u64> = parts.iter().map(|(r, _)| *r).collect();
            let bytes = parts.iter().flat_map(|(_, e)| e).map(|e| 4 + e.len() as u64).sum::<u64>();
            let alone = object_len(bytes, regions.len() as u64);
            let with_batch = object_len(
                model_bytes + bytes,
                model_regions.union(&regions).count() as u64,
            );
            match batch.admit(parts.clone()) {
                Ok(i) => {
                    prop_assert!(with_batch <= max_object_bytes);
                    prop_assert_eq!(i, admitted.len());
                    admitted.push(parts);
                    told.push(batch.receipt(i, sequence).expect("the receipt of an admitted append"));
                }
                Err(NotAdmitted::Full(back)) => {
                    prop_assert!(alone <= max_object_bytes);
                    prop_assert!(with_batch > max_object_bytes);
                    prop_assert!(!admitted.is_empty());
                    prop_assert_eq!(&back, &parts);
                    flush(&mut batch, &mut admitted, &mut told, &mut sequence);
                    model_regions.clear();
                    model_bytes = 0;
                    prop_assert!(matches!(batch.admit(back), Ok(0)));
                    prop_assert!(batch.receipt(1, sequence).is_none());
                    admitted.push(parts);
                    told.push(batch.receipt(0, sequence).expect("the receipt of an admitted append"));
                }
                Err(NotAdmitted::Invalid(Error::AppendTooLarge { bytes, max })) => {
                    prop_assert_eq!(bytes, alone);
                    prop_assert_eq!(max, max_object_bytes);
                    prop_assert!(alone > max_object_bytes);
                    continue;
                }
                Err(NotAdmitted::Invalid(e)) => prop_assert!(false, "unexpected {e:?}"),
            }
            model_regions.extend(regions);
            model_bytes += bytes;
            prop_assert_eq!(batch.encoded_len(), object_len(model_bytes, model_regions.len() as u64));
            prop_assert!(batch.encoded_len() <= max_object_bytes);
        }
        if !batch.is_empty() {
            flush(&mut batch, &mut admitted, &mut told, &mut sequence);
        }
        // Across objects, each region's ids keep increasing.
        for entries in all.values() {
            prop_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }
}
