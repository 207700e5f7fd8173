//! The object format (`docs/FORMAT.md`, normative); the batch that feeds it is in
//! `tests/batch.rs`.
//!
//! - The three FORMAT.md test vectors, byte for byte, encoded and decoded by every decoder.
//! - Damage told apart by part, as recovery's whole read and `walctl verify` tell it
//!   (`format::check_object`): a damaged segment is reported, not an error.
//! - Every structural rule violated once, each rejected with its own [`FormatError`]
//!   variant. A violating object is a valid encoding with bytes patched and the CRCs that
//!   would otherwise catch the patch first recomputed (with the CRC repairs of
//!   `object_store_wal::testing`), so the targeted rule is reached.
//! - Versions 3 (an id offset) and 4 (a closed opening object): their FORMAT.md vectors
//!   and the rules each adds, at the end.
//! - Properties: random batches round-trip with the ids of their receipts; damaged,
//!   truncated and random bytes never panic a decoder, which answers `Ok` only for bytes
//!   that are in fact a valid object (checked against an independent reading of the spec).

use bytes::Bytes;
use object_store_wal::format::{
    check_object as check_whole, check_object_crc, decode_footer, decode_header, decode_object,
    decode_object_summary, decode_segment, decode_summary, decode_trailer, encode_object, entry_id,
    entry_position, entry_sequence, DecodedObject, Footer, FormatError, Header, Link,
    ObjectSummary, SegmentDamage, SegmentRecord, Trailer, CLOSED_OBJECT_LEN, EMPTY_OBJECT_LEN,
    EMPTY_OBJECT_LEN_V3, MAX_SEQUENCE,
};
use object_store_wal::internal::write::batch::Batch;
use object_store_wal::testing::{
    repair_footer_crc, repair_header_crc, repair_object_crc, repair_segment_crc,
};
use proptest::prelude::*;

#[path = "support/batches.rs"]
mod batches;

use batches::{
    append, decoded_entries, expected_from_receipts, payload, region, seal, unlimited, SealAt,
};

// ---------------------------------------------------------------------------------------
// The FORMAT.md test vectors.
// ---------------------------------------------------------------------------------------

const EMPTY_HEX: &str = "475457414c4f424a0100000001000000000000000100000000000000000000000000000000000000000000000000000000000000e7a465970000000000000000475457414c54524c3800000000000000080000000000000069df2265bd6aad99";
const FULL_HEX: &str = "475457414c4f424a0100000009000000000000000500000000000000070000000000000005000000000000000300000000000000b0d25259030000007878780500000068656c6c6f00000000020000000000000007000000000000000000900000000000000090000000000038000000000000000700000000000000fbf65e4f000000002a00000000000000000090000000000001009000000000003f000000000000000d00000000000000de71a94500000000475457414c54524c4c00000000000000680000000000000037026f152b282f1b";
const CLAIM_HEX: &str = "475457414c4f424a0100010004000000000000000600000000000000020000000000000002000000000000000000000000000000680a97af0000000000000000475457414c54524c3800000000000000080000000000000069df2265bd6aad99";

/// Layout of the 212-byte vector: region 7's segment at 56..63, region 42's at 63..76,
/// the footer at 76..180 (records at 84 and 132), the trailer at 180..212.
const FULL_FOOTER: usize = 76;
const FULL_REC0: usize = 84;
const FULL_REC1: usize = 132;
const FULL_TRAILER: usize = 180;

// Field offsets within the header, a footer record and the trailer.
const H_VERSION: usize = 8;
const H_FLAGS: usize = 10;
const H_SEQUENCE: usize = 12;
const H_EPOCH: usize = 20;
const H_LINK_SEQUENCE: usize = 28;
const H_LINK_EPOCH: usize = 36;
const H_FLOOR: usize = 44;
const R_REGION: usize = 0;
const R_FIRST: usize = 8;
const R_LAST: usize = 16;
const R_OFFSET: usize = 24;
const R_LENGTH: usize = 32;
const R_CRC: usize = 40;
const R_RESERVED: usize = 44;
const T_FOOTER_OFFSET: usize = 8;
const T_FOOTER_LENGTH: usize = 16;

fn empty_header() -> Header {
    Header {
        sequence: 1,
        epoch: 1,
        link: Link::NONE,
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

fn full_header() -> Header {
    Header {
        sequence: 9,
        epoch: 5,
        link: Link {
            sequence: 7,
            epoch: 5,
        },
        floor: 3,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

fn claim_header() -> Header {
    Header {
        sequence: 4,
        epoch: 6,
        link: Link {
            sequence: 2,
            epoch: 2,
        },
        floor: 0,
        claim: true,
        closed: false,
        id_offset: 0,
    }
}

fn region7() -> Vec<Bytes> {
    vec![Bytes::from_static(b"xxx")]
}

fn region42() -> Vec<Bytes> {
    vec![Bytes::from_static(b"hello"), Bytes::new()]
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).expect("test vector is hex")
}

fn encode_empty() -> Vec<u8> {
    encode_object(&empty_header(), std::iter::empty())
        .unwrap()
        .to_bytes()
        .to_vec()
}

fn encode_full() -> Vec<u8> {
    let (r7, r42) = (region7(), region42());
    encode_object(&full_header(), [(7u64, &r7[..]), (42u64, &r42[..])])
        .unwrap()
        .to_bytes()
        .to_vec()
}

// ---------------------------------------------------------------------------------------
// Byte patching.
// ---------------------------------------------------------------------------------------

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn rd64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn wr16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn wr32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn wr64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes header, footer and object CRCs (in that order, each covers the previous),
/// leaving the segment CRCs as they are.
fn reseal(b: &mut [u8]) {
    repair_header_crc(b).expect("room for a header");
    repair_footer_crc(b).expect("a footer the trailer places before it");
    repair_object_crc(b).expect("room for an object CRC");
}

fn decode(b: &[u8]) -> Result<DecodedObject, FormatError> {
    decode_object(&Bytes::copy_from_slice(b))
}

/// The error recovery sees (header, trailer, footer): the same from `decode_summary`,
/// `decode_object_summary` and `decode_object`.
fn summary_err(b: &[u8]) -> FormatError {
    let from_summary = decode_summary(b, b, b.len() as u64).unwrap_err();
    let from_object_summary = decode_object_summary(b).unwrap_err();
    let from_object = decode(b).unwrap_err();
    assert_eq!(from_summary, from_object_summary);
    assert_eq!(from_summary, from_object);
    from_summary
}

/// The error only a read of the segments sees: the summary is fine.
fn segment_err(b: &[u8]) -> FormatError {
    decode_object_summary(b).expect("the summary is valid");
    decode(b).unwrap_err()
}

// ---------------------------------------------------------------------------------------
// An independent reading of the spec, used to judge what a decoder accepted.
// ---------------------------------------------------------------------------------------

fn header_rules_hold(h: &Header) -> bool {
    (1..1u64 << 44).contains(&h.sequence)
        && h.epoch >= 1
        && h.link.sequence < h.sequence
        && (h.link.sequence == 0) == (h.link.epoch == 0)
        && h.floor <= h.sequence
}

fn spec_footer(records: &[SegmentRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for r in records {
        for v in [
            r.region,
            r.first_entry_id,
            r.last_entry_id,
            r.offset,
            r.length,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&r.crc.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    out
}

fn spec_trailer(t: &Trailer) -> Vec<u8> {
    let mut out = b"GTWALTRL".to_vec();
    out.extend_from_slice(&t.footer_offset.to_le_bytes());
    out.extend_from_slice(&t.footer_length.to_le_bytes());
    out.extend_from_slice(&t.footer_crc.to_le_bytes());
    out.extend_from_slice(&t.object_crc.to_le_bytes());
    out
}

/// A trailer the decoder accepted is the last 32 bytes and places the footer legally.
fn check_trailer(bytes: &[u8], length: u64, t: &Trailer) {
    assert_eq!(&bytes[bytes.len() - 32..], &spec_trailer(t)[..]);
    assert!(t.footer_offset >= 56);
    assert!(t.footer_length >= 8 && (t.footer_length - 8).is_multiple_of(48));
    assert_eq!(
        u128::from(t.footer_offset) + u128::from(t.footer_length) + 32,
        u128::from(length)
    );
}

/// A summary the decoder accepted obeys every rule a summary can check.
fn check_summary(head: &[u8], tail: &[u8], length: u64, s: &ObjectSummary) {
    assert_eq!(s.length, length);
    assert_eq!(&head[..56], &s.header.encode()[..]);
    assert!(header_rules_hold(&s.header), "{:?}", s.header);
    check_trailer(tail, length, &s.trailer);
    let records = &s.footer.records;
    assert!(!s.header.claim || records.is_empty());
    assert_eq!(s.trailer.footer_length, 8 + 48 * records.len() as u64);
    let tail_start = length - tail.len() as u64;
    let from = (s.trailer.footer_offset - tail_start) as usize;
    let footer = &tail[from..from + s.trailer.footer_length as usize];
    assert_eq!(footer, &spec_footer(records)[..]);
    assert_eq!(crc32fast::hash(footer), s.trailer.footer_crc);
    let mut at = 56u64;
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            assert!(records[i - 1].region < r.region);
        }
        assert_eq!(r.first_entry_id, s.header.sequence << 20);
        assert!(r.last_entry_id >= r.first_entry_id);
        assert_eq!(r.last_entry_id >> 20, s.header.sequence);
        assert_eq!(r.offset, at);
        at += r.length;
    }
    assert_eq!(at, s.trailer.footer_offset);
}

fn check_object_summary(bytes: &[u8], s: &ObjectSummary) {
    check_summary(bytes, bytes, bytes.len() as u64, s);
    assert_eq!(
        crc32fast::hash(&bytes[..bytes.len() - 4]),
        s.trailer.object_crc
    );
}

/// A decoded object: its summary is valid and it re-encodes to exactly the input.
fn check_object(bytes: &[u8], d: &DecodedObject) {
    check_object_summary(bytes, &d.summary);
    let regions: Vec<u64> = d.summary.footer.records.iter().map(|r| r.region).collect();
    let decoded_regions: Vec<u64> = d.segments.iter().map(|(r, _)| *r).collect();
    assert_eq!(regions, decoded_regions);
    for (record, (_, entries)) in d.summary.footer.records.iter().zip(&d.segments) {
        assert_eq!(record.entry_count(), entries.len() as u64);
    }
    let again = encode_object(
        &d.summary.header,
        d.segments.iter().map(|(r, e)| (*r, e.as_slice())),
    )
    .expect("a decoded object encodes");
    assert_eq!(&again.to_bytes()[..], bytes);
}

/// Every decoder on `bytes`: no panic, and `Ok` only when the bytes are valid.
fn probe_all(bytes: &[u8]) {
    if let Ok(d) = decode(bytes) {
        check_object(bytes, &d);
    }
    if let Ok(s) = decode_object_summary(bytes) {
        check_object_summary(bytes, &s);
    }
    if let Ok(s) = decode_summary(bytes, bytes, bytes.len() as u64) {
        check_summary(bytes, bytes, bytes.len() as u64, &s);
    }
    if let Ok(c) = check_whole(bytes) {
        check_summary(bytes, bytes, bytes.len() as u64, &c.summary);
        // Exactly the segments that do not decode are reported damaged.
        let failing: Vec<u64> = c
            .summary
            .footer
            .records
            .iter()
            .filter(|r| {
                let segment =
                    Bytes::copy_from_slice(&bytes[r.offset as usize..][..r.length as usize]);
                decode_segment(segment, r).is_err()
            })
            .map(|r| r.region)
            .collect();
        let damaged: Vec<u64> = c.damaged.iter().map(|d| d.region).collect();
        assert_eq!(damaged, failing);
    }
    if let Ok(h) = decode_header(bytes) {
        assert_eq!(&bytes[..56], &h.encode()[..]);
        assert!(header_rules_hold(&h));
    }
    if let Ok(t) = decode_trailer(bytes, bytes.len() as u64) {
        check_trailer(bytes, bytes.len() as u64, &t);
    }
}

// ---------------------------------------------------------------------------------------
// 1. Test vectors.
// ---------------------------------------------------------------------------------------

/// FORMAT.md, "What a reader verifies": in the full vector, a byte of region 42's segment
/// damages that segment only (the object CRC fails, the summary and region 7 verify); a
/// damaged object CRC field alone damages no segment; a damaged header makes the object
/// unusable.
#[test]
fn damage_is_told_apart_by_part() {
    let full = unhex(FULL_HEX);
    let rec42 = decode_object_summary(&full).unwrap().footer.records[1];
    assert_eq!(rec42.region, 42);

    let mut b = full.clone();
    b[rec42.offset as usize + 5] ^= 0x01; // inside "hello"
    let c = check_whole(&b).expect("header, footer and trailer verify");
    let computed = crc32fast::hash(&b[rec42.offset as usize..][..rec42.length as usize]);
    assert_eq!(
        c.damaged,
        vec![SegmentDamage {
            region: 42,
            error: FormatError::CrcMismatch {
                part: "segment",
                stored: rec42.crc,
                computed,
            },
        }]
    );
    assert_eq!(c.summary, decode_object_summary(&full).unwrap());
    assert!(matches!(
        check_object_crc(&b, &c.summary.trailer),
        Err(FormatError::CrcMismatch { part: "object", .. })
    ));
    assert!(matches!(
        decode(&b),
        Err(FormatError::CrcMismatch { part: "object", .. })
    ));

    let mut b = full.clone();
    let last = b.len() - 1;
    b[last] ^= 0x01; // the object CRC itself
    let c = check_whole(&b).expect("every finer check holds");
    assert!(c.damaged.is_empty());
    assert!(matches!(
        check_object_crc(&b, &c.summary.trailer),
        Err(FormatError::CrcMismatch { part: "object", .. })
    ));

    let mut b = full;
    b[H_EPOCH] ^= 0x01;
    assert!(matches!(
        check_whole(&b),
        Err(FormatError::CrcMismatch { part: "header", .. })
    ));
}

#[test]
fn vector_entry_id() {
    assert_eq!(entry_id(7, 3), 7_340_035);
    assert_eq!(entry_id(7, 3), (7 << 20) | 3);
    assert_eq!(entry_sequence(7_340_035), 7);
    assert_eq!(entry_position(7_340_035), 3);
}

#[test]
fn vector_empty_object() {
    let expected = unhex(EMPTY_HEX);
    let encoded = encode_object(&empty_header(), std::iter::empty()).unwrap();
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), 96);
    assert_eq!(EMPTY_OBJECT_LEN, 96);
    assert_eq!(encoded.len(), 96);
    assert!(encoded.same_bytes(&expected));

    // The CRCs FORMAT.md quotes, where it says they are.
    assert_eq!(rd32(&bytes, 52), 0x9765_a4e7);
    assert_eq!(crc32fast::hash(&bytes[..52]), 0x9765_a4e7);
    assert_eq!(rd32(&bytes, 64 + 24), 0x6522_df69);
    assert_eq!(crc32fast::hash(&bytes[56..64]), 0x6522_df69);
    assert_eq!(rd32(&bytes, 92), 0x99ad_6abd);
    assert_eq!(crc32fast::hash(&bytes[..92]), 0x99ad_6abd);
    assert_eq!(&bytes[92..], &[0xbd, 0x6a, 0xad, 0x99]);
    assert_eq!(encoded.object_crc(), 0x99ad_6abd);

    let header = decode_header(&bytes).unwrap();
    assert_eq!(header, empty_header());
    let trailer = decode_trailer(&bytes, 96).unwrap();
    assert_eq!(
        trailer,
        Trailer {
            footer_offset: 56,
            footer_length: 8,
            footer_crc: 0x6522_df69,
            object_crc: 0x99ad_6abd,
        }
    );
    let footer = decode_footer(&bytes[56..64], &header, &trailer).unwrap();
    assert_eq!(footer, Footer::default());
    let summary = decode_summary(&bytes[..56], &bytes[56..], 96).unwrap();
    assert_eq!(
        summary,
        ObjectSummary {
            version: 1,
            header,
            footer,
            trailer,
            length: 96,
        }
    );
    assert_eq!(summary, encoded.summary());
    assert_eq!(decode_object_summary(&bytes).unwrap(), summary);
    let decoded = decode_object(&bytes).unwrap();
    assert_eq!(decoded.summary, summary);
    assert!(decoded.segments.is_empty());
}

#[test]
fn vector_full_object() {
    let expected = unhex(FULL_HEX);
    let (r7, r42) = (region7(), region42());
    let encoded = encode_object(&full_header(), [(7u64, &r7[..]), (42u64, &r42[..])]).unwrap();
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), 212);
    assert_eq!(encoded.len(), 212);
    assert!(encoded.same_bytes(&expected));

    let header = decode_header(&bytes).unwrap();
    assert_eq!(header, full_header());
    let trailer = decode_trailer(&bytes, 212).unwrap();
    assert_eq!(trailer.footer_offset, FULL_FOOTER as u64);
    assert_eq!(trailer.footer_length, 104);
    assert_eq!(trailer.footer_crc, crc32fast::hash(&bytes[76..180]));
    assert_eq!(trailer.object_crc, crc32fast::hash(&bytes[..208]));
    assert_eq!(trailer.object_crc, encoded.object_crc());
    assert_eq!(rd32(&bytes, 52), crc32fast::hash(&bytes[..52]));

    let footer = decode_footer(&bytes[76..180], &header, &trailer).unwrap();
    let rec7 = SegmentRecord {
        region: 7,
        first_entry_id: 9_437_184,
        last_entry_id: 9_437_184,
        offset: 56,
        length: 7,
        crc: crc32fast::hash(&bytes[56..63]),
        codec: 0,
        cipher: 0,
    };
    let rec42 = SegmentRecord {
        region: 42,
        first_entry_id: 9_437_184,
        last_entry_id: 9_437_185,
        offset: 63,
        length: 13,
        crc: crc32fast::hash(&bytes[63..76]),
        codec: 0,
        cipher: 0,
    };
    assert_eq!(rec7.crc, 0x4f5e_f6fb);
    assert_eq!(rec42.crc, 0x45a9_71de);
    assert_eq!(footer.records, vec![rec7, rec42]);
    assert_eq!(encoded.records(), &[rec7, rec42]);
    assert_eq!(entry_id(9, 0), 9_437_184);
    assert_eq!(entry_id(9, 1), 9_437_185);

    assert_eq!(decode_segment(bytes.slice(56..63), &rec7).unwrap(), r7);
    assert_eq!(decode_segment(bytes.slice(63..76), &rec42).unwrap(), r42);

    // Recovery's ranged reads: the header and a suffix holding footer and trailer.
    let summary = decode_summary(&bytes[..56], &bytes[76..], 212).unwrap();
    assert_eq!(summary.header, header);
    assert_eq!(summary.footer, footer);
    assert_eq!(summary.trailer, trailer);
    assert_eq!(summary.length, 212);
    assert_eq!(summary, encoded.summary());
    assert_eq!(
        decode_summary(&bytes[..56], &bytes[60..], 212).unwrap(),
        summary
    );
    assert_eq!(decode_summary(&bytes, &bytes, 212).unwrap(), summary);
    // A suffix that misses the footer's first byte cannot give the footer.
    assert!(matches!(
        decode_summary(&bytes[..56], &bytes[77..], 212),
        Err(FormatError::Truncated { part: "footer", .. })
    ));
    assert_eq!(decode_object_summary(&bytes).unwrap(), summary);

    let decoded = decode_object(&bytes).unwrap();
    assert_eq!(decoded.summary, summary);
    assert_eq!(decoded.segments, vec![(7, r7), (42, r42)]);
}

#[test]
fn vector_claim() {
    let expected = unhex(CLAIM_HEX);
    let encoded = encode_object(&claim_header(), std::iter::empty()).unwrap();
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), 96);
    assert_eq!(rd32(&bytes, 52), crc32fast::hash(&bytes[..52]));
    // Its object CRC equals the empty object's (FORMAT.md explains why).
    assert_eq!(encoded.object_crc(), 0x99ad_6abd);
    assert_eq!(&bytes[56..], &unhex(EMPTY_HEX)[56..]);

    let header = decode_header(&bytes).unwrap();
    assert_eq!(header, claim_header());
    assert!(header.claim);
    let trailer = decode_trailer(&bytes, 96).unwrap();
    assert_eq!(trailer.object_crc, 0x99ad_6abd);
    assert_eq!(trailer.footer_crc, 0x6522_df69);
    assert_eq!(
        decode_footer(&bytes[56..64], &header, &trailer).unwrap(),
        Footer::default()
    );
    let summary = decode_summary(&bytes[..56], &bytes[56..], 96).unwrap();
    assert_eq!(summary, encoded.summary());
    assert_eq!(decode_object_summary(&bytes).unwrap(), summary);
    let decoded = decode_object(&bytes).unwrap();
    assert_eq!(decoded.summary.header, claim_header());
    assert!(decoded.segments.is_empty());
}

// ---------------------------------------------------------------------------------------
// 2. Every rule violated once.
// ---------------------------------------------------------------------------------------

#[test]
fn reject_bad_header_magic() {
    for at in [0, 7] {
        let mut b = encode_full();
        b[at] ^= 0x20;
        reseal(&mut b);
        assert_eq!(
            decode_header(&b).unwrap_err(),
            FormatError::BadMagic { part: "header" }
        );
        assert_eq!(summary_err(&b), FormatError::BadMagic { part: "header" });
    }
}

#[test]
fn reject_bad_trailer_magic() {
    for at in [FULL_TRAILER, FULL_TRAILER + 7] {
        let mut b = encode_full();
        b[at] ^= 0x20;
        repair_object_crc(&mut b).unwrap();
        assert_eq!(
            decode_trailer(&b, 212).unwrap_err(),
            FormatError::BadMagic { part: "trailer" }
        );
        assert_eq!(summary_err(&b), FormatError::BadMagic { part: "trailer" });
    }
}

#[test]
fn reject_version_not_1_to_4() {
    for version in [0u16, 5, u16::MAX] {
        let mut b = encode_full();
        wr16(&mut b, H_VERSION, version);
        reseal(&mut b);
        assert_eq!(
            decode_header(&b).unwrap_err(),
            FormatError::UnsupportedVersion(version)
        );
        assert_eq!(summary_err(&b), FormatError::UnsupportedVersion(version));
    }
}

#[test]
fn reject_unknown_flag_bits() {
    // Bit 1 is the closed flag (version 4): `the_closed_flag_only_in_version_4`.
    for bit in 2..16 {
        for claim in [0u16, 1] {
            let flags = (1u16 << bit) | claim;
            let mut b = encode_empty();
            wr16(&mut b, H_FLAGS, flags);
            reseal(&mut b);
            assert_eq!(
                decode_header(&b).unwrap_err(),
                FormatError::UnknownFlags(flags)
            );
            assert_eq!(summary_err(&b), FormatError::UnknownFlags(flags));
        }
    }
    // The claim bit alone is legal.
    let mut b = encode_empty();
    wr16(&mut b, H_FLAGS, 1);
    reseal(&mut b);
    assert!(decode(&b).unwrap().summary.header.claim);
}

#[test]
fn reject_sequence_zero() {
    let mut b = encode_empty();
    wr64(&mut b, H_SEQUENCE, 0);
    reseal(&mut b);
    assert_eq!(
        decode_header(&b).unwrap_err(),
        FormatError::SequenceOutOfRange(0)
    );
    assert_eq!(summary_err(&b), FormatError::SequenceOutOfRange(0));
}

#[test]
fn reject_sequence_not_below_2_pow_44() {
    for sequence in [1u64 << 44, (1 << 44) + 1, u64::MAX] {
        let mut b = encode_empty();
        wr64(&mut b, H_SEQUENCE, sequence);
        reseal(&mut b);
        assert_eq!(
            decode_header(&b).unwrap_err(),
            FormatError::SequenceOutOfRange(sequence)
        );
        assert_eq!(summary_err(&b), FormatError::SequenceOutOfRange(sequence));
    }
    // 2^44 - 1 is the largest legal sequence.
    let mut b = encode_empty();
    wr64(&mut b, H_SEQUENCE, (1 << 44) - 1);
    reseal(&mut b);
    assert_eq!(decode(&b).unwrap().summary.header.sequence, MAX_SEQUENCE);
    assert_eq!(MAX_SEQUENCE, (1 << 44) - 1);
}

#[test]
fn reject_epoch_zero() {
    let mut b = encode_full();
    wr64(&mut b, H_EPOCH, 0);
    reseal(&mut b);
    assert_eq!(decode_header(&b).unwrap_err(), FormatError::ZeroEpoch);
    assert_eq!(summary_err(&b), FormatError::ZeroEpoch);
}

#[test]
fn reject_link_not_below_sequence() {
    for link in [9u64, 10, u64::MAX] {
        let mut b = encode_full();
        wr64(&mut b, H_LINK_SEQUENCE, link);
        reseal(&mut b);
        let err = FormatError::LinkNotBelow { link, sequence: 9 };
        assert_eq!(decode_header(&b).unwrap_err(), err);
        assert_eq!(summary_err(&b), err);
    }
    // A link just below the object's own sequence is legal.
    let mut b = encode_full();
    wr64(&mut b, H_LINK_SEQUENCE, 8);
    reseal(&mut b);
    assert_eq!(decode(&b).unwrap().summary.header.link.sequence, 8);
}

#[test]
fn reject_link_epoch_without_link() {
    let mut b = encode_empty();
    wr64(&mut b, H_LINK_EPOCH, 3);
    reseal(&mut b);
    let err = FormatError::LinkEpoch {
        sequence: 0,
        epoch: 3,
    };
    assert_eq!(decode_header(&b).unwrap_err(), err);
    assert_eq!(summary_err(&b), err);
}

#[test]
fn reject_link_without_link_epoch() {
    let mut b = encode_full();
    wr64(&mut b, H_LINK_EPOCH, 0);
    reseal(&mut b);
    let err = FormatError::LinkEpoch {
        sequence: 7,
        epoch: 0,
    };
    assert_eq!(decode_header(&b).unwrap_err(), err);
    assert_eq!(summary_err(&b), err);
}

#[test]
fn reject_floor_above_sequence() {
    for floor in [10u64, u64::MAX] {
        let mut b = encode_full();
        wr64(&mut b, H_FLOOR, floor);
        reseal(&mut b);
        let err = FormatError::FloorAboveSequence { floor, sequence: 9 };
        assert_eq!(decode_header(&b).unwrap_err(), err);
        assert_eq!(summary_err(&b), err);
    }
    // floor == sequence is legal.
    let mut b = encode_full();
    wr64(&mut b, H_FLOOR, 9);
    reseal(&mut b);
    assert_eq!(decode(&b).unwrap().summary.header.floor, 9);
}

#[test]
fn reject_header_crc_mismatch() {
    // A changed field, and a changed stored CRC.
    for at in [H_EPOCH, 52] {
        let mut b = encode_full();
        b[at] ^= 0x01;
        repair_object_crc(&mut b).unwrap();
        let err = decode_header(&b).unwrap_err();
        assert_eq!(
            err,
            FormatError::CrcMismatch {
                part: "header",
                stored: rd32(&b, 52),
                computed: crc32fast::hash(&b[..52]),
            }
        );
        assert_eq!(summary_err(&b), err);
    }
}

#[test]
fn reject_footer_crc_mismatch() {
    // A changed record field (region 7 -> 8, still ascending), and a changed stored CRC.
    for at in [FULL_REC0 + R_REGION, FULL_TRAILER + 24] {
        let mut b = encode_full();
        b[at] ^= 0x0f;
        repair_object_crc(&mut b).unwrap();
        let header = decode_header(&b).unwrap();
        let trailer = decode_trailer(&b, 212).unwrap();
        let err = decode_footer(&b[FULL_FOOTER..FULL_TRAILER], &header, &trailer).unwrap_err();
        assert_eq!(
            err,
            FormatError::CrcMismatch {
                part: "footer",
                stored: rd32(&b, FULL_TRAILER + 24),
                computed: crc32fast::hash(&b[FULL_FOOTER..FULL_TRAILER]),
            }
        );
        assert_eq!(summary_err(&b), err);
    }
}

#[test]
fn reject_object_crc_mismatch() {
    // A changed payload byte and a changed length prefix (nothing but their segment CRC
    // covers them otherwise), and a changed stored object CRC.
    for at in [57usize, 64, 208, 211] {
        let mut b = encode_full();
        b[at] ^= 0x40;
        let err = decode_object_summary(&b).unwrap_err();
        assert_eq!(
            err,
            FormatError::CrcMismatch {
                part: "object",
                stored: rd32(&b, 208),
                computed: crc32fast::hash(&b[..208]),
            }
        );
        assert_eq!(decode(&b).unwrap_err(), err);
    }
}

#[test]
fn reject_segment_crc_mismatch() {
    let mut b = encode_full();
    b[57] = b'y'; // region 7's "xxx" -> "yxx"
    repair_object_crc(&mut b).unwrap();
    let err = segment_err(&b);
    let stored = rd32(&b, FULL_REC0 + R_CRC);
    let computed = crc32fast::hash(&b[56..63]);
    assert_eq!(
        err,
        FormatError::CrcMismatch {
            part: "segment",
            stored,
            computed,
        }
    );
    // The ranged read of that segment alone fails the same way; the other one is fine.
    let summary = decode_object_summary(&b).unwrap();
    let bytes = Bytes::from(b);
    let [rec7, rec42] = summary.footer.records[..] else {
        panic!("two records")
    };
    assert_eq!(decode_segment(bytes.slice(56..63), &rec7).unwrap_err(), err);
    assert_eq!(
        decode_segment(bytes.slice(63..76), &rec42).unwrap(),
        region42()
    );
}

#[test]
fn reject_footer_reserved_word() {
    let mut b = encode_full();
    wr32(&mut b, FULL_FOOTER + 4, 1);
    reseal(&mut b);
    assert_eq!(summary_err(&b), FormatError::ReservedNotZero("footer"));
}

#[test]
fn reject_record_reserved_word() {
    for rec in [FULL_REC0, FULL_REC1] {
        let mut b = encode_full();
        wr32(&mut b, rec + R_RESERVED, 0x8000_0000);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::ReservedNotZero("footer record")
        );
    }
}

#[test]
fn reject_footer_length_not_matching_count() {
    // The count in the footer disagrees with the trailer's footer length.
    for count in [0u32, 1, 3, u32::MAX] {
        let mut b = encode_full();
        wr32(&mut b, FULL_FOOTER, count);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::FooterLength {
                length: 104,
                count: u64::from(count),
            }
        );
    }
    // The trailer's footer length is not 8 + 48N for any N, but places the footer exactly.
    let mut b = encode_full();
    wr64(&mut b, FULL_TRAILER + T_FOOTER_OFFSET, 75);
    wr64(&mut b, FULL_TRAILER + T_FOOTER_LENGTH, 105);
    repair_object_crc(&mut b).unwrap();
    assert!(matches!(
        decode_trailer(&b, 212),
        Err(FormatError::FooterLength { length: 105, .. })
    ));
    assert!(matches!(
        summary_err(&b),
        FormatError::FooterLength { length: 105, .. }
    ));
}

#[test]
fn reject_footer_placement_not_matching_length() {
    let valid = encode_full();
    let placement = |offset, length, object_len| FormatError::FooterPlacement {
        offset,
        length,
        object_len,
    };
    // The right trailer, the wrong object length.
    assert_eq!(
        decode_trailer(&valid, 213).unwrap_err(),
        placement(76, 104, 213)
    );
    assert_eq!(
        decode_trailer(&valid, 211).unwrap_err(),
        placement(76, 104, 211)
    );
    assert_eq!(
        decode_summary(&valid[..56], &valid[76..], 213).unwrap_err(),
        placement(76, 104, 213)
    );
    // A footer offset or length that moves the footer's end off the trailer's start.
    for (offset, length) in [
        (77u64, 104u64),
        (75, 104),
        (76, 152),
        (76, 56),
        (u64::MAX, 104),
    ] {
        let mut b = valid.clone();
        wr64(&mut b, FULL_TRAILER + T_FOOTER_OFFSET, offset);
        wr64(&mut b, FULL_TRAILER + T_FOOTER_LENGTH, length);
        repair_object_crc(&mut b).unwrap();
        assert_eq!(
            decode_trailer(&b, 212).unwrap_err(),
            placement(offset, length, 212)
        );
        assert_eq!(summary_err(&b), placement(offset, length, 212));
    }
}

#[test]
fn reject_footer_offset_inside_header() {
    // offset + length + 32 == 96, but the footer would start inside the header.
    for (offset, length) in [(8u64, 56u64), (0, 64), (55, 9)] {
        let mut b = encode_empty();
        wr64(&mut b, 64 + T_FOOTER_OFFSET, offset);
        wr64(&mut b, 64 + T_FOOTER_LENGTH, length);
        repair_object_crc(&mut b).unwrap();
        let err = FormatError::FooterPlacement {
            offset,
            length,
            object_len: 96,
        };
        assert_eq!(decode_trailer(&b, 96).unwrap_err(), err);
        assert_eq!(summary_err(&b), err);
    }
}

#[test]
fn reject_footer_shorter_than_its_fixed_part() {
    // offset + length + 32 == 96, but the footer cannot even hold its count and reserved
    // word. The decoder reports it as a footer that does not fit (not a length it would
    // have to subtract 8 from).
    for (offset, length) in [(64u64, 0u64), (60, 4), (57, 7)] {
        let mut b = encode_empty();
        wr64(&mut b, 64 + T_FOOTER_OFFSET, offset);
        wr64(&mut b, 64 + T_FOOTER_LENGTH, length);
        repair_object_crc(&mut b).unwrap();
        let err = FormatError::FooterPlacement {
            offset,
            length,
            object_len: 96,
        };
        assert_eq!(decode_trailer(&b, 96).unwrap_err(), err);
        assert_eq!(summary_err(&b), err);
    }
}

#[test]
fn reject_claim_with_segments() {
    let mut b = encode_full();
    wr16(&mut b, H_FLAGS, 1);
    reseal(&mut b);
    assert!(decode_header(&b).unwrap().claim);
    assert_eq!(summary_err(&b), FormatError::ClaimWithSegments(2));
}

#[test]
fn reject_regions_not_strictly_ascending() {
    for (rec, region, previous, next) in [
        (FULL_REC1, 7u64, 7u64, 7u64), // equal
        (FULL_REC1, 6, 7, 6),          // descending
        (FULL_REC0, 42, 42, 42),       // equal
        (FULL_REC0, u64::MAX, u64::MAX, 42),
    ] {
        let mut b = encode_full();
        wr64(&mut b, rec + R_REGION, region);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::RegionOrder {
                previous,
                region: next,
            }
        );
    }
}

#[test]
fn reject_first_entry_id_not_position_0() {
    for first in [entry_id(9, 1), entry_id(8, 0), entry_id(10, 0), 0] {
        let mut b = encode_full();
        wr64(&mut b, FULL_REC1 + R_FIRST, first);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::EntryIdRange {
                region: 42,
                first,
                last: entry_id(9, 1),
                sequence: 9,
            }
        );
    }
}

#[test]
fn reject_last_entry_id_outside_object() {
    // In the next object, in an earlier one (below the first id), and far away.
    for last in [entry_id(10, 0), entry_id(10, 1), entry_id(8, 5), u64::MAX] {
        let mut b = encode_full();
        wr64(&mut b, FULL_REC0 + R_LAST, last);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::EntryIdRange {
                region: 7,
                first: entry_id(9, 0),
                last,
                sequence: 9,
            }
        );
    }
}

#[test]
fn reject_segments_not_contiguous_from_56() {
    // The first segment does not start at 56.
    for offset in [57u64, 55, 0] {
        let mut b = encode_full();
        wr64(&mut b, FULL_REC0 + R_OFFSET, offset);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::SegmentPlacement {
                region: 7,
                offset,
                length: 7,
                expected: 56,
            }
        );
    }
    // A gap, and an overlap, between the two segments.
    for (offset, length7, expected) in [(64u64, 7u64, 63u64), (63, 8, 64), (63, 6, 62)] {
        let mut b = encode_full();
        wr64(&mut b, FULL_REC0 + R_LENGTH, length7);
        wr64(&mut b, FULL_REC1 + R_OFFSET, offset);
        reseal(&mut b);
        assert_eq!(
            summary_err(&b),
            FormatError::SegmentPlacement {
                region: 42,
                offset,
                length: 13,
                expected,
            }
        );
    }
}

#[test]
fn reject_segment_shorter_than_its_length_prefixes() {
    // Region 42 holds 2 entries, so at least 8 bytes; a record saying 7 is caught from the
    // footer alone, without reading the segment.
    let mut b = encode_full();
    wr64(&mut b, FULL_REC1 + R_LENGTH, 7);
    reseal(&mut b);
    assert_eq!(
        summary_err(&b),
        FormatError::SegmentPlacement {
            region: 42,
            offset: 63,
            length: 7,
            expected: 63,
        }
    );
}

#[test]
fn reject_segments_not_ending_at_footer() {
    // The last segment ends before the footer.
    let mut b = encode_full();
    wr64(&mut b, FULL_REC1 + R_LENGTH, 12);
    reseal(&mut b);
    assert_eq!(
        summary_err(&b),
        FormatError::SegmentsEnd {
            end: 75,
            footer_offset: 76,
        }
    );
    // The last segment runs into the footer, or its end overflows.
    for length in [14u64, u64::MAX - 10] {
        let mut b = encode_full();
        wr64(&mut b, FULL_REC1 + R_LENGTH, length);
        reseal(&mut b);
        assert!(matches!(
            summary_err(&b),
            FormatError::SegmentsEnd {
                footer_offset: 76,
                ..
            }
        ));
    }
    // An object whose only segment is dropped from the footer: the segment bytes sit
    // between the header and a footer that says there are none.
    let one = [Bytes::from_static(b"abc")];
    let original = encode_object(&full_header(), [(7u64, &one[..])])
        .unwrap()
        .to_bytes();
    // Footer at 63: count 1 -> rewrite as count 0 with an 8-byte footer, moving the trailer.
    let mut b = original[..63].to_vec();
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&original[original.len() - 32..]);
    let t = b.len() - 32;
    wr64(&mut b, t + T_FOOTER_LENGTH, 8);
    reseal(&mut b);
    assert_eq!(b.len(), 103);
    assert_eq!(
        summary_err(&b),
        FormatError::SegmentsEnd {
            end: 56,
            footer_offset: 63,
        }
    );
}

#[test]
fn reject_segment_body_fewer_entries_than_ids() {
    // The footer says region 42 holds 3 entries (13 bytes >= 3 prefixes); it holds 2.
    let mut b = encode_full();
    wr64(&mut b, FULL_REC1 + R_LAST, entry_id(9, 2));
    reseal(&mut b);
    let err = segment_err(&b);
    assert!(
        matches!(err, FormatError::SegmentBody { region: 42, reason } if reason.contains("fewer")),
        "{err:?}"
    );
}

#[test]
fn reject_segment_body_more_entries_than_ids() {
    // The footer says region 42 holds 1 entry; it holds 2.
    let mut b = encode_full();
    wr64(&mut b, FULL_REC1 + R_LAST, entry_id(9, 0));
    reseal(&mut b);
    let err = segment_err(&b);
    assert!(
        matches!(err, FormatError::SegmentBody { region: 42, reason } if reason.contains("more")),
        "{err:?}"
    );
}

#[test]
fn reject_segment_record_claiming_more_entries_than_bytes() {
    // A ranged read handed a hostile record: 2^20 (or a saturated count of) entries in a
    // 4-byte segment is refused, not allocated for.
    let bytes = Bytes::from_static(&[0, 0, 0, 0]);
    for last in [entry_id(3, (1 << 20) - 1), u64::MAX] {
        let record = SegmentRecord {
            region: 5,
            first_entry_id: entry_id(3, 0),
            last_entry_id: last,
            offset: 56,
            length: 4,
            crc: crc32fast::hash(&bytes),
            codec: 0,
            cipher: 0,
        };
        let err = decode_segment(bytes.clone(), &record).unwrap_err();
        assert!(
            matches!(err, FormatError::SegmentBody { region: 5, .. }),
            "{err:?}"
        );
    }
    // The same segment with a record of one entry is one empty entry.
    let record = SegmentRecord {
        region: 5,
        first_entry_id: entry_id(3, 0),
        last_entry_id: entry_id(3, 0),
        offset: 56,
        length: 4,
        crc: crc32fast::hash(&bytes),
        codec: 0,
        cipher: 0,
    };
    assert_eq!(decode_segment(bytes, &record).unwrap(), vec![Bytes::new()]);
}

#[test]
fn reject_entry_running_past_segment() {
    // Region 7's "xxx" claims 4 bytes; "hello" claims 10 or u32::MAX; or, at 6, the empty
    // entry's length prefix is cut off by the segment's end.
    for (prefix_at, rec, region, len) in [
        (56usize, FULL_REC0, 7u64, 4u32),
        (63, FULL_REC1, 42, 10),
        (63, FULL_REC1, 42, u32::MAX),
        (63, FULL_REC1, 42, 6),
    ] {
        let mut b = encode_full();
        wr32(&mut b, prefix_at, len);
        repair_segment_crc(&mut b, rec).unwrap();
        reseal(&mut b);
        let err = segment_err(&b);
        assert!(
            matches!(err, FormatError::SegmentBody { region: r, .. } if r == region),
            "{err:?}"
        );
    }
}

#[test]
fn reject_truncated_parts() {
    let b = encode_full();
    assert_eq!(
        decode_header(&b[..55]).unwrap_err(),
        FormatError::Truncated {
            part: "header",
            needed: 56,
            got: 55,
        }
    );
    assert!(matches!(
        decode_trailer(&b[..31], 31),
        Err(FormatError::Truncated {
            part: "trailer",
            ..
        })
    ));
    let header = decode_header(&b).unwrap();
    let trailer = decode_trailer(&b, 212).unwrap();
    assert!(matches!(
        decode_footer(&b[76..179], &header, &trailer),
        Err(FormatError::Truncated { part: "footer", .. })
    ));
    // A footer slice longer than the trailer says is not the footer either.
    assert_eq!(
        decode_footer(&b[76..181], &header, &trailer).unwrap_err(),
        FormatError::Truncated {
            part: "footer",
            needed: 104,
            got: 105,
        }
    );
    let rec = decode_object_summary(&b).unwrap().footer.records[1];
    assert_eq!(
        decode_segment(Bytes::copy_from_slice(&b[63..77]), &rec).unwrap_err(),
        FormatError::Truncated {
            part: "segment",
            needed: 13,
            got: 14,
        }
    );
    assert!(matches!(
        decode_segment(Bytes::copy_from_slice(&b[63..75]), &rec),
        Err(FormatError::Truncated {
            part: "segment",
            needed: 13,
            got: 12,
        })
    ));
    // Every strict prefix of the object is rejected.
    for n in 0..b.len() {
        assert!(decode(&b[..n]).is_err(), "prefix of {n} bytes accepted");
        assert!(decode_object_summary(&b[..n]).is_err());
    }
}

#[test]
fn encode_refuses_what_decode_rejects() {
    let one = [Bytes::from_static(b"a")];
    let none: [Bytes; 0] = [];
    let with = |f: fn(&mut Header)| {
        let mut h = full_header();
        f(&mut h);
        encode_object(&h, [(1u64, &one[..])]).unwrap_err()
    };
    assert_eq!(with(|h| h.sequence = 0), FormatError::SequenceOutOfRange(0));
    assert_eq!(
        with(|h| h.sequence = 1 << 44),
        FormatError::SequenceOutOfRange(1 << 44)
    );
    assert_eq!(with(|h| h.epoch = 0), FormatError::ZeroEpoch);
    assert_eq!(
        with(|h| h.link.sequence = 9),
        FormatError::LinkNotBelow {
            link: 9,
            sequence: 9,
        }
    );
    assert_eq!(
        with(|h| h.link.epoch = 0),
        FormatError::LinkEpoch {
            sequence: 7,
            epoch: 0,
        }
    );
    assert_eq!(
        with(|h| h.floor = 10),
        FormatError::FloorAboveSequence {
            floor: 10,
            sequence: 9,
        }
    );
    assert!(matches!(
        encode_object(&claim_header(), [(1u64, &one[..])]),
        Err(FormatError::Unencodable(_))
    ));
    assert_eq!(
        encode_object(&full_header(), [(2u64, &one[..]), (2u64, &one[..])]).unwrap_err(),
        FormatError::RegionOrder {
            previous: 2,
            region: 2,
        }
    );
    assert_eq!(
        encode_object(&full_header(), [(3u64, &one[..]), (2u64, &one[..])]).unwrap_err(),
        FormatError::RegionOrder {
            previous: 3,
            region: 2,
        }
    );
    assert!(matches!(
        encode_object(&full_header(), [(1u64, &none[..])]),
        Err(FormatError::Unencodable(_))
    ));
    let too_many = vec![Bytes::new(); (1 << 20) + 1];
    assert!(matches!(
        encode_object(&full_header(), [(1u64, &too_many[..])]),
        Err(FormatError::Unencodable(_))
    ));
}

// ---------------------------------------------------------------------------------------
// 3. Properties.
// ---------------------------------------------------------------------------------------

fn seal_at() -> impl Strategy<Value = SealAt> {
    prop_oneof![1u64..50, Just(MAX_SEQUENCE), 1..=MAX_SEQUENCE]
        .prop_flat_map(|sequence| {
            let link = if sequence == 1 {
                Just(Link::NONE).boxed()
            } else {
                prop_oneof![
                    Just(Link::NONE),
                    (1..sequence, 1..=u64::MAX)
                        .prop_map(|(sequence, epoch)| Link { sequence, epoch }),
                ]
                .boxed()
            };
            (
                Just(sequence),
                prop_oneof![Just(1u64), 1..=u64::MAX],
                link,
                prop_oneof![Just(0u64), Just(sequence), 0..=sequence],
            )
        })
        .prop_map(|(sequence, epoch, link, floor)| SealAt {
            sequence,
            epoch,
            link,
            floor,
        })
}

/// A valid object (claims included), encoded directly.
fn valid_object() -> impl Strategy<Value = Vec<u8>> {
    (
        seal_at(),
        proptest::collection::btree_map(region(), proptest::collection::vec(payload(), 1..5), 0..4),
        any::<bool>(),
    )
        .prop_map(|(at, segments, claim)| {
            let header = Header {
                sequence: at.sequence,
                epoch: at.epoch,
                link: at.link,
                floor: at.floor,
                claim: claim && segments.is_empty(),
                closed: false,
                id_offset: 0,
            };
            encode_object(&header, segments.iter().map(|(r, e)| (*r, e.as_slice())))
                .unwrap()
                .to_bytes()
                .to_vec()
        })
}

proptest! {
    #[test]
    fn prop_batch_round_trips(
        appends in proptest::collection::vec(append(), 1..10),
        at in seal_at(),
    ) {
        let mut batch = Batch::new(unlimited());
        for (i, parts) in appends.iter().enumerate() {
            let admitted = batch.admit(parts.clone());
            prop_assert!(matches!(admitted, Ok(n) if n == i), "{admitted:?}");
        }
        let entries: usize = appends.iter().flatten().map(|(_, e)| e.len()).sum();
        let payload: usize = appends.iter().flatten().flat_map(|(_, e)| e).map(Bytes::len).sum();
        prop_assert_eq!(batch.entry_count(), entries as u64);
        prop_assert_eq!(batch.payload_bytes(), payload as u64);
        let predicted = batch.encoded_len();
        let sealed = seal(&mut batch, at);
        prop_assert!(batch.is_empty());
        prop_assert_eq!(batch.encoded_len(), EMPTY_OBJECT_LEN as u64);
        prop_assert_eq!(sealed.entries, entries as u64);
        prop_assert_eq!(sealed.payload_bytes, payload as u64);
        prop_assert_eq!(sealed.sequence(), at.sequence);

        let bytes = sealed.encoded().expect("encoded").to_bytes();
        prop_assert_eq!(bytes.len() as u64, predicted);
        prop_assert_eq!(sealed.encoded().expect("encoded").len(), predicted);
        let n = bytes.len();
        let object_crc = crc32fast::hash(&bytes[..n - 4]);
        prop_assert_eq!(rd32(&bytes, n - 4), object_crc);
        prop_assert_eq!(sealed.encoded().expect("encoded").object_crc(), object_crc);
        prop_assert_eq!(rd32(&bytes, 52), crc32fast::hash(&bytes[..52]));

        let decoded = decode_object(&bytes).expect("a sealed batch decodes");
        check_object(&bytes, &decoded);
        prop_assert_eq!(&decoded.summary, &sealed.encoded().expect("encoded").summary());
        prop_assert_eq!(
            decoded.summary.header,
            Header {
                sequence: at.sequence,
                epoch: at.epoch,
                link: at.link,
                floor: at.floor,
                claim: false,
                closed: false,
                id_offset: 0,
            }
        );
        prop_assert_eq!(
            decoded.summary.footer.records.as_slice(),
            sealed.encoded().expect("encoded").records()
        );
        let expected = expected_from_receipts(&appends, &sealed.receipts, at.sequence);
        prop_assert_eq!(decoded_entries(&decoded), expected);

        // Determinism: the same appends sealed the same way give the same bytes.
        let mut again = Batch::new(unlimited());
        for parts in &appends {
            prop_assert!(again.admit(parts.clone()).is_ok());
        }
        let resealed = seal(&mut again, at);
        prop_assert_eq!(resealed.encoded().expect("encoded").to_bytes(), bytes.clone());
        prop_assert!(resealed.encoded().expect("encoded").same_bytes(&bytes));
        prop_assert_eq!(resealed.receipts, sealed.receipts);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_truncated_prefixes_rejected(bytes in valid_object(), cut in any::<prop::sample::Index>()) {
        let n = cut.index(bytes.len());
        let prefix = &bytes[..n];
        prop_assert!(decode(prefix).is_err());
        prop_assert!(decode_object_summary(prefix).is_err());
        probe_all(prefix);
        // A suffix too short for the footer and trailer.
        let len = bytes.len() as u64;
        let tail = &bytes[bytes.len() - n.min(bytes.len() - 1).min(31)..];
        prop_assert!(decode_summary(&bytes[..56], tail, len).is_err());
    }

    #[test]
    fn prop_single_bit_flips(bytes in valid_object(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let n = bytes.len();
        let at = at.index(n);
        let mut b = bytes.clone();
        b[at] ^= 1 << bit;
        // The object CRC (and, under it, the others) catches every single-bit change.
        prop_assert!(decode(&b).is_err());
        prop_assert!(decode_object_summary(&b).is_err());
        // The header decodes only when the flip is outside it.
        prop_assert_eq!(decode_header(&b).is_ok(), at >= 56);
        // The trailer check covers its magic and placement, not its two CRCs.
        prop_assert_eq!(decode_trailer(&b, n as u64).is_ok(), at < n - 32 || at >= n - 8);
        // The summary reads no segment and does not check the object CRC.
        let footer_offset = rd64(&bytes, n - 32 + T_FOOTER_OFFSET) as usize;
        let unread = (56..footer_offset).contains(&at) || at >= n - 4;
        prop_assert_eq!(decode_summary(&b, &b, n as u64).is_ok(), unread);
        probe_all(&b);
    }

    #[test]
    fn prop_random_damage_never_panics(
        bytes in valid_object(),
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut b = bytes.clone();
        for (at, v) in &damage {
            let i = at.index(b.len());
            b[i] = *v;
        }
        probe_all(&b);
        if b != bytes {
            prop_assert!(decode(&b).is_err());
        }
    }

    #[test]
    fn prop_mutated_fields_with_fixed_crcs(
        bytes in valid_object(),
        at in any::<prop::sample::Index>(),
        value in prop_oneof![any::<u64>(), 0u64..300, Just(u64::MAX)],
        width in prop_oneof![Just(2usize), Just(4), Just(8)],
        fix_segments in any::<bool>(),
    ) {
        // Overwrite a field-sized window anywhere, then repair every CRC the original layout
        // has, so the structural rules are what decides.
        let n = bytes.len();
        let mut b = bytes.clone();
        let i = at.index(n - width + 1);
        b[i..i + width].copy_from_slice(&value.to_le_bytes()[..width]);
        let t = n - 32;
        let footer_offset = rd64(&bytes, t + T_FOOTER_OFFSET) as usize;
        let records = rd32(&bytes, footer_offset) as usize;
        repair_header_crc(&mut b).unwrap();
        if fix_segments {
            for k in 0..records {
                let rec = footer_offset + 8 + 48 * k;
                let from = rd64(&bytes, rec + R_OFFSET) as usize;
                let len = rd64(&bytes, rec + R_LENGTH) as usize;
                let crc = crc32fast::hash(&b[from..from + len]);
                wr32(&mut b, rec + R_CRC, crc);
            }
        }
        let footer_crc = crc32fast::hash(&b[footer_offset..t]);
        wr32(&mut b, t + 24, footer_crc);
        repair_object_crc(&mut b).unwrap();
        probe_all(&b);
    }

    #[test]
    fn prop_random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        length in prop_oneof![Just(None), any::<u64>().prop_map(Some)],
        split in any::<prop::sample::Index>(),
    ) {
        probe_all(&bytes);
        // Random magics at the right places, so the decoders get past them.
        if bytes.len() >= 96 {
            let mut b = bytes.clone();
            b[..8].copy_from_slice(b"GTWALOBJ");
            let t = b.len() - 32;
            b[t..t + 8].copy_from_slice(b"GTWALTRL");
            probe_all(&b);
            repair_header_crc(&mut b).unwrap();
            repair_object_crc(&mut b).unwrap();
            probe_all(&b);
        }
        // Arbitrary head, tail and length for the ranged-read decoders.
        let len = length.unwrap_or(bytes.len() as u64);
        let cut = split.index(bytes.len() + 1);
        let (head, tail) = bytes.split_at(cut);
        if let Ok(t) = decode_trailer(tail, len) {
            check_trailer(tail, len, &t);
        }
        if let Ok(s) = decode_summary(head, tail, len) {
            if len >= tail.len() as u64 {
                check_summary(head, tail, len, &s);
            }
        }
        let record = SegmentRecord {
            region: 1,
            first_entry_id: 0,
            last_entry_id: len % 64,
            offset: 0,
            length: tail.len() as u64,
            crc: crc32fast::hash(tail),
            codec: 0,
            cipher: 0,
        };
        if let Ok(entries) = decode_segment(Bytes::copy_from_slice(tail), &record) {
            prop_assert_eq!(entries.len() as u64, record.entry_count());
            let mut again = Vec::new();
            for e in &entries {
                again.extend_from_slice(&(e.len() as u32).to_le_bytes());
                again.extend_from_slice(e);
            }
            prop_assert_eq!(&again[..], tail);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Version 3: an id offset in a 64-byte header (FORMAT.md "Version 3").
// ---------------------------------------------------------------------------------------

/// FORMAT.md's version 3 vectors, computed from the page alone (Python's `struct` and
/// `zlib.crc32`): an opening object with id offset 100, and the full vector's segments
/// in object 9 with id offset 1000 (ids from `1009 << 20`).
const V3_EMPTY_HEX: &str = "475457414c4f424a0300000005000000000000000600000000000000040000000000000003000000000000000200000000000000640000000000000098e13a410000000000000000475457414c54524c4000000000000000080000000000000069df226537e7b4cb";
const V3_FULL_HEX: &str = "475457414c4f424a0300000009000000000000000500000000000000070000000000000005000000000000000300000000000000e803000000000000b7c38949030000007878780500000068656c6c6f00000000020000000000000007000000000000000000103f000000000000103f0000000040000000000000000700000000000000fbf65e4f000000002a000000000000000000103f000000000100103f0000000047000000000000000d00000000000000de71a94500000000475457414c54524c5400000000000000680000000000000040c21c4580c03fe6";

fn v3_empty_header() -> Header {
    Header {
        sequence: 5,
        epoch: 6,
        link: Link {
            sequence: 4,
            epoch: 3,
        },
        floor: 2,
        claim: false,
        closed: false,
        id_offset: 100,
    }
}

fn v3_full_header() -> Header {
    Header {
        id_offset: 1000,
        ..full_header()
    }
}

#[test]
fn vector_v3_empty_object() {
    let expected = unhex(V3_EMPTY_HEX);
    let encoded = encode_object(&v3_empty_header(), std::iter::empty()).unwrap();
    assert_eq!(encoded.version(), 3);
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), EMPTY_OBJECT_LEN_V3);
    assert_eq!(EMPTY_OBJECT_LEN_V3, 104);
    // The id offset at 52..60, the header CRC of 0..60 at 60..64.
    assert_eq!(rd64(&bytes, 52), 100);
    assert_eq!(rd32(&bytes, 60), crc32fast::hash(&bytes[..60]));
    assert_eq!(decode_header(&bytes).unwrap(), v3_empty_header());
    let summary = decode_object_summary(&bytes).unwrap();
    assert_eq!(summary.header, v3_empty_header());
    assert_eq!(summary.trailer.footer_offset, 64);
    check_object_crc(&bytes, &summary.trailer).unwrap();
}

#[test]
fn vector_v3_full_object() {
    let expected = unhex(V3_FULL_HEX);
    let (r7, r42) = (region7(), region42());
    let encoded = encode_object(&v3_full_header(), [(7u64, &r7[..]), (42u64, &r42[..])]).unwrap();
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    let decoded = decode(&bytes).unwrap();
    assert_eq!(decoded.summary.header, v3_full_header());
    assert_eq!(v3_full_header().id_base(), 1009);
    let records = &decoded.summary.footer.records;
    assert_eq!(records[0].offset, 64);
    assert_eq!(records[0].first_entry_id, entry_id(1009, 0));
    assert_eq!(records[1].first_entry_id, 1_058_013_184);
    assert_eq!(records[1].last_entry_id, entry_id(1009, 1));
    assert_eq!(decoded.segments[0].1, r7);
    assert_eq!(decoded.segments[1].1, r42);
    // A segment decodes alone, by its record.
    let r = records[1];
    let stored = Bytes::copy_from_slice(&bytes[r.offset as usize..][..r.length as usize]);
    assert_eq!(decode_segment(stored, &r).unwrap(), r42);
}

/// One byte layout names each object: an id offset of 0 is written as version 1 or 2,
/// and a version 3 header that carries 0 is refused.
#[test]
fn a_version_3_header_carries_a_nonzero_id_offset() {
    assert_eq!(
        encode_object(&empty_header(), std::iter::empty())
            .unwrap()
            .version(),
        1
    );
    let mut b = unhex(V3_EMPTY_HEX);
    wr64(&mut b, 52, 0);
    repair_header_crc(&mut b).unwrap();
    assert_eq!(decode_header(&b), Err(FormatError::ZeroIdOffset));
}

#[test]
fn an_id_base_past_2_pow_44_is_refused() {
    let header = Header {
        id_offset: MAX_SEQUENCE - 4,
        ..v3_empty_header()
    };
    let refused = FormatError::IdOffsetOutOfRange {
        sequence: 5,
        id_offset: MAX_SEQUENCE - 4,
    };
    assert_eq!(
        encode_object(&header, std::iter::empty()).unwrap_err(),
        refused
    );
    let mut b = unhex(V3_EMPTY_HEX);
    wr64(&mut b, 52, MAX_SEQUENCE - 4);
    repair_header_crc(&mut b).unwrap();
    assert_eq!(decode_header(&b), Err(refused));
    // One below: the largest id base.
    let largest = Header {
        id_offset: MAX_SEQUENCE - 5,
        ..v3_empty_header()
    };
    let bytes = encode_object(&largest, std::iter::empty())
        .unwrap()
        .to_bytes();
    assert_eq!(decode_header(&bytes).unwrap().id_base(), MAX_SEQUENCE);
}

/// A version 3 footer's ids count from the id base, and its segments from byte 64.
#[test]
fn a_version_3_footer_follows_the_id_offset() {
    let full = unhex(V3_FULL_HEX);
    let rec0 = 64 + 7 + 13 + 8;
    let mut b = full.clone();
    wr64(&mut b, rec0 + R_FIRST, entry_id(9, 0));
    wr64(&mut b, rec0 + R_LAST, entry_id(9, 0));
    reseal(&mut b);
    assert!(matches!(
        summary_err(&b),
        FormatError::EntryIdRange { region: 7, .. }
    ));
    let mut b = full;
    wr64(&mut b, rec0 + R_OFFSET, 56);
    reseal(&mut b);
    assert!(matches!(
        summary_err(&b),
        FormatError::SegmentPlacement { .. }
    ));
}

#[test]
fn a_version_above_4_is_unsupported() {
    let mut b = unhex(V3_EMPTY_HEX);
    wr16(&mut b, H_VERSION, 5);
    repair_header_crc(&mut b).unwrap();
    assert_eq!(decode_header(&b), Err(FormatError::UnsupportedVersion(5)));
}

// ---------------------------------------------------------------------------------------
// Version 4: a closed opening object (FORMAT.md "Version 4").
// ---------------------------------------------------------------------------------------

/// FORMAT.md's version 4 vector, computed from the page alone (Python's `struct` and
/// `zlib.crc32`): object 9 of epoch 10, link `(8, 5)`, floor 3, id offset 1000, closed.
const V4_CLOSED_HEX: &str = "475457414c4f424a0400020009000000000000000a00000000000000080000000000000005000000000000000300000000000000e8030000000000001f5042870000000000000000475457414c54524c4000000000000000080000000000000069df226537e7b4cb";

fn v4_closed_header() -> Header {
    Header {
        sequence: 9,
        epoch: 10,
        link: Link {
            sequence: 8,
            epoch: 5,
        },
        floor: 3,
        claim: false,
        closed: true,
        id_offset: 1000,
    }
}

#[test]
fn vector_v4_closed_object() {
    let expected = unhex(V4_CLOSED_HEX);
    let encoded = encode_object(&v4_closed_header(), std::iter::empty()).unwrap();
    assert_eq!(encoded.version(), 4);
    let bytes = encoded.to_bytes();
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), CLOSED_OBJECT_LEN);
    assert_eq!(CLOSED_OBJECT_LEN, 104);
    // Version 4 and the closed flag (bit 1); the id offset at 52..60, the header CRC of
    // 0..60 at 60..64.
    assert_eq!(&bytes[8..12], &[4, 0, 2, 0]);
    assert_eq!(rd64(&bytes, 52), 1000);
    assert_eq!(rd32(&bytes, 60), 0x8742_501f);
    assert_eq!(rd32(&bytes, 60), crc32fast::hash(&bytes[..60]));
    // Every byte after the header is version 3's empty vector's (same length, no
    // segments), the object CRC included (FORMAT.md's vector 3 says why).
    assert_eq!(&bytes[64..], &unhex(V3_EMPTY_HEX)[64..]);

    assert_eq!(decode_header(&bytes).unwrap(), v4_closed_header());
    let summary = decode_object_summary(&bytes).unwrap();
    assert_eq!(summary, encoded.summary());
    assert_eq!(summary.version, 4);
    assert_eq!(summary.header, v4_closed_header());
    assert!(summary.footer.records.is_empty());
    assert_eq!(summary.trailer.footer_offset, 64);
    let decoded = decode(&bytes).unwrap();
    assert_eq!(decoded.summary, summary);
    assert!(decoded.segments.is_empty());
    assert!(check_whole(&bytes).unwrap().damaged.is_empty());
}

/// What a reader from before version 4 does with the vector: for a version it does not
/// know it checks the CRC at 52..56 of bytes 0..52 (FORMAT.md "What a reader
/// verifies"), which here is the id offset's first half, so it reports header damage.
#[test]
fn a_reader_before_version_4_sees_header_damage() {
    let bytes = unhex(V4_CLOSED_HEX);
    assert_ne!(rd32(&bytes, 52), crc32fast::hash(&bytes[..52]));
}

/// The closed flag chooses version 4, not the id offset: a closed object with id offset
/// 0 is still version 4 (64-byte header, id offset 0), and decodes back as written.
#[test]
fn a_closed_object_without_id_offset_is_version_4() {
    let header = Header {
        id_offset: 0,
        ..v4_closed_header()
    };
    assert_eq!(header.encoded_len(), 64);
    let encoded = encode_object(&header, std::iter::empty()).unwrap();
    assert_eq!(encoded.version(), 4);
    let bytes = encoded.to_bytes();
    assert_eq!(bytes.len(), CLOSED_OBJECT_LEN);
    assert_eq!(rd64(&bytes, 52), 0);
    let summary = decode_object_summary(&bytes).unwrap();
    assert_eq!((summary.version, summary.header), (4, header));
}

#[test]
fn reject_closed_with_segments() {
    // Version 3's full vector made closed: a valid version 4 header over two segments.
    let mut b = unhex(V3_FULL_HEX);
    wr16(&mut b, H_VERSION, 4);
    wr16(&mut b, H_FLAGS, 2);
    reseal(&mut b);
    assert!(decode_header(&b).unwrap().closed);
    assert_eq!(summary_err(&b), FormatError::ClosedWithSegments(2));
    // And the encoder refuses to write one.
    let r7 = region7();
    assert_eq!(
        encode_object(&v4_closed_header(), [(7u64, &r7[..])]).unwrap_err(),
        FormatError::Unencodable("a closed object holds no segments")
    );
}

#[test]
fn reject_closed_and_claim() {
    let mut b = unhex(V4_CLOSED_HEX);
    wr16(&mut b, H_FLAGS, 3);
    reseal(&mut b);
    assert_eq!(decode_header(&b), Err(FormatError::ClosedClaim));
    assert_eq!(summary_err(&b), FormatError::ClosedClaim);
    // `Header::validate`, and so the encoder, refuse it too.
    let both = Header {
        claim: true,
        ..v4_closed_header()
    };
    assert_eq!(both.validate(), Err(FormatError::ClosedClaim));
    assert_eq!(
        encode_object(&both, std::iter::empty()).unwrap_err(),
        FormatError::ClosedClaim
    );
}

/// Bit 1 is legal only in version 4: in versions 1, 2 and 3 it is refused by name.
#[test]
fn the_closed_flag_only_in_version_4() {
    let mut v2 = encode_empty();
    wr16(&mut v2, H_VERSION, 2);
    for (mut b, version) in [(encode_empty(), 1u16), (v2, 2), (unhex(V3_EMPTY_HEX), 3)] {
        for claim in [0u16, 1] {
            wr16(&mut b, H_FLAGS, 2 | claim);
            reseal(&mut b);
            assert_eq!(
                decode_header(&b),
                Err(FormatError::ClosedOutsideVersion4(version)),
                "version {version}"
            );
            assert_eq!(summary_err(&b), FormatError::ClosedOutsideVersion4(version));
        }
    }
}

/// Version 4 is a closed object's layout only: without bit 1 it is refused by name.
#[test]
fn reject_version_4_without_the_closed_flag() {
    for flags in [0u16, 1] {
        let mut b = unhex(V4_CLOSED_HEX);
        wr16(&mut b, H_FLAGS, flags);
        reseal(&mut b);
        assert_eq!(decode_header(&b), Err(FormatError::Version4NotClosed));
        assert_eq!(summary_err(&b), FormatError::Version4NotClosed);
    }
}

/// Bits 2 to 15 are refused in version 4 as in every other version.
#[test]
fn reject_unknown_flag_bits_in_version_4() {
    for bit in 2..16 {
        let flags = (1u16 << bit) | 2;
        let mut b = unhex(V4_CLOSED_HEX);
        wr16(&mut b, H_FLAGS, flags);
        reseal(&mut b);
        assert_eq!(decode_header(&b), Err(FormatError::UnknownFlags(flags)));
        assert_eq!(summary_err(&b), FormatError::UnknownFlags(flags));
    }
}
