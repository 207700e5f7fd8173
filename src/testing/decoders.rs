//! The decoder exercise the fuzz target and the corpus test share
//! ([`exercise_decoders`]: the object format's decoders and the control snapshot's),
//! and the CRC repairs that let damaged bytes reach the structural rules behind the
//! CRCs ([`repair_crcs`] and one function per CRC, which the format tests use to patch
//! a field and recompute what would catch it first).
//!
//! Every repair reads only what `data` holds: bytes too short for a CRC, or a trailer
//! or record that places its part outside `data`, leave it unchanged (`None`).

use std::ops::Range;

use bytes::Bytes;

use crate::format::control::{decode_ownership, encode_ownership, CONTROL_REGION};
use crate::format::{self, FOOTER_FIXED_LEN, FOOTER_RECORD_LEN, HEADER_LEN, TRAILER_LEN};
use crate::transform::{Opening, SegmentKey, StaticKeys};

/// Runs every decoder of the object format on `data`, as the fuzz target does and the
/// corpus test replays: whole-object decoding, summary, header, trailer and each segment;
/// and the control snapshot's decoder on `data` itself and on each entry of a control
/// region segment. Panics if an accepted object or snapshot does not encode back to
/// exactly the same bytes (a decoder that accepts what the encoder would not write);
/// never panics otherwise.
pub fn exercise_decoders(data: &[u8]) {
    decode_everything(data);
    // Random bytes rarely pass a CRC: decode a copy with its CRCs repaired too, so the
    // structural rules behind them are exercised.
    if let Some(repaired) = repair_crcs(data) {
        decode_everything(&repaired);
    }
    decode_snapshot(data);
}

/// Decodes `payload` as a control snapshot, and a copy with its CRC (the last 4 bytes,
/// as an object's) repaired.
fn decode_snapshot(payload: &[u8]) {
    snapshot_round_trip(payload);
    let mut repaired = payload.to_vec();
    if repair_object_crc(&mut repaired).is_some() {
        snapshot_round_trip(&repaired);
    }
}

/// A snapshot the decoder accepts encodes back to the same bytes.
fn snapshot_round_trip(payload: &[u8]) {
    if let Ok(holdings) = decode_ownership(payload) {
        match encode_ownership(&holdings) {
            Ok(again) => assert_eq!(
                &again[..],
                payload,
                "an accepted control snapshot must encode back to the same bytes"
            ),
            Err(e) => panic!("an accepted control snapshot does not encode: {e}"),
        }
    }
}

/// `data` with its header CRC, the segment CRC of each footer record, its footer CRC
/// and its object CRC recomputed, in that order (each covers the ones before), where
/// the trailer places the footer inside it (else only the header and object CRCs);
/// `None` when too short to hold a header and a trailer.
pub fn repair_crcs(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < HEADER_LEN + TRAILER_LEN {
        return None;
    }
    let mut v = data.to_vec();
    repair_header_crc(&mut v)?;
    if let Some(footer) = footer_range(&v) {
        let records = footer.start + FOOTER_FIXED_LEN..footer.end;
        for record in records.step_by(FOOTER_RECORD_LEN) {
            // A record that places its segment outside the data keeps its CRC.
            let _ = repair_segment_crc(&mut v, record);
        }
        // The footer where the trailer placed it before the records were repaired.
        write_footer_crc(&mut v, footer)?;
    }
    repair_object_crc(&mut v)?;
    Some(v)
}

/// Recomputes the header CRC: CRC32 of bytes `0..52`, stored at `52..56` (versions 3
/// and 4: of `0..60`, at `60..64`).
pub fn repair_header_crc(data: &mut [u8]) -> Option<()> {
    let version = u16::from_le_bytes(data.get(8..10)?.try_into().ok()?);
    let len = match version {
        format::VERSION_3 => format::HEADER_LEN_V3,
        format::VERSION_4 => format::HEADER_LEN_V4,
        _ => HEADER_LEN,
    };
    let crc = crc32fast::hash(data.get(..len - 4)?);
    data.get_mut(len - 4..len)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Recomputes the segment CRC of the footer record that starts at byte `record`: CRC32
/// of the bytes its offset and length place, stored at `record + 40`.
pub fn repair_segment_crc(data: &mut [u8], record: usize) -> Option<()> {
    let offset = word(data, record.checked_add(24)?)?;
    let length = word(data, record.checked_add(32)?)?;
    let crc = crc32fast::hash(data.get(placed(offset, length, data.len())?)?);
    let slot = record.checked_add(40)?;
    data.get_mut(slot..slot.checked_add(4)?)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Recomputes the footer CRC: CRC32 of the footer the trailer places (before the
/// trailer), stored at trailer + 24.
pub fn repair_footer_crc(data: &mut [u8]) -> Option<()> {
    let footer = footer_range(data)?;
    write_footer_crc(data, footer)
}

/// Recomputes the object CRC: CRC32 of every byte but the last 4, stored in the last 4.
pub fn repair_object_crc(data: &mut [u8]) -> Option<()> {
    let end = data.len().checked_sub(4)?;
    let crc = crc32fast::hash(data.get(..end)?);
    data.get_mut(end..)?.copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Stores the CRC32 of `footer` in the trailer's footer CRC field.
fn write_footer_crc(data: &mut [u8], footer: Range<usize>) -> Option<()> {
    let trailer = data.len().checked_sub(TRAILER_LEN)?;
    let crc = crc32fast::hash(data.get(footer)?);
    data.get_mut(trailer + 24..trailer + 28)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Where the trailer places the footer, when that is before the trailer.
fn footer_range(data: &[u8]) -> Option<Range<usize>> {
    let trailer = data.len().checked_sub(TRAILER_LEN)?;
    let (offset, length) = (word(data, trailer + 8)?, word(data, trailer + 16)?);
    placed(offset, length, trailer)
}

/// The little-endian `u64` at `at`, if `data` holds it.
fn word(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        data.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// `offset..offset + length` as indices, when it ends at or before `end`.
fn placed(offset: u64, length: u64, end: usize) -> Option<Range<usize>> {
    let from = usize::try_from(offset).ok()?;
    let to = from.checked_add(usize::try_from(length).ok()?)?;
    (to <= end).then_some(from..to)
}

/// The key the fuzz corpus's encrypted segments are sealed with (id 1, 32 bytes of
/// `0x42`), so decryption and decompression are reached too.
pub static FUZZ_KEYS: std::sync::LazyLock<StaticKeys> =
    std::sync::LazyLock::new(|| StaticKeys::new(SegmentKey::new(1, [0x42; 32])));

/// The decoded-length bound the decoders run under: 1 MiB.
pub const FUZZ_MAX_DECODED: u64 = 1 << 20;

fn decode_everything(data: &[u8]) {
    let opening = Opening {
        keys: Some(&*FUZZ_KEYS),
        max_decoded: FUZZ_MAX_DECODED,
    };
    let len = data.len() as u64;
    let _ = format::decode_header(data);
    let _ = format::decode_trailer(data, len);
    let _ = format::decode_summary(data, data, len);
    if let Ok(summary) = format::decode_object_summary(data) {
        let bytes = Bytes::copy_from_slice(data);
        for record in &summary.footer.records {
            if let Some(range) = placed(record.offset, record.length, bytes.len()) {
                let entries = format::decode_segment_with(
                    bytes.slice(range),
                    record,
                    summary.header.sequence,
                    summary.header.epoch,
                    &opening,
                );
                if let (Ok(entries), CONTROL_REGION) = (entries, record.region) {
                    entries.iter().for_each(|e| decode_snapshot(e));
                }
            }
        }
    }
    let bytes = Bytes::copy_from_slice(data);
    let decoded = format::decode_object_with(&bytes, &opening);
    // Checking each segment on its own (recovery's whole read) agrees with decoding
    // everything: an object decodes exactly when its summary, every segment and the
    // object CRC verify. A transformed segment's check stops at its stored CRC (its
    // contents need its key), so such an object may check intact and still not decode.
    let checked = format::check_object(data);
    let transformed = checked.as_ref().is_ok_and(|c| {
        c.summary
            .footer
            .records
            .iter()
            .any(format::SegmentRecord::is_transformed)
    });
    let intact = checked.is_ok_and(|c| {
        c.damaged.is_empty() && format::check_object_crc(data, &c.summary.trailer).is_ok()
    });
    if decoded.is_ok() || !transformed {
        assert_eq!(
            decoded.is_ok(),
            intact,
            "check_object and decode_object disagree: {decoded:?}"
        );
    }
    // A decoded segment never holds more than the bound allows.
    if let Ok(decoded) = &decoded {
        for (_, entries) in &decoded.segments {
            let held: u64 = entries.iter().map(|e| e.len() as u64 + 4).sum();
            assert!(held <= FUZZ_MAX_DECODED.max(data.len() as u64));
        }
    }
    // Without a transformed segment (versions 1, 3 and 4; a version 2 object may hold
    // none, and is then written as version 1) the encoder must give back every byte.
    if let Some(decoded) = decoded.ok().filter(|d| {
        d.summary.version != format::VERSION_2
            && !d
                .summary
                .footer
                .records
                .iter()
                .any(format::SegmentRecord::is_transformed)
    }) {
        let segments: Vec<(u64, &[Bytes])> = decoded
            .segments
            .iter()
            .map(|(region, entries)| (*region, entries.as_slice()))
            .collect();
        let again = format::encode_object(&decoded.summary.header, segments).map(|e| e.to_bytes());
        assert_eq!(
            again.as_ref().map(|b| &b[..]),
            Ok(data),
            "an accepted object must encode back to the same bytes"
        );
    }
}
