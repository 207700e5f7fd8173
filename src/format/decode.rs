//! The decoders and checks of every part: lengths and counts are checked against the
//! object's size before they are trusted.

use bytes::Bytes;

use super::envelope::open_segment;
use super::layout::*;
use crate::transform::Opening;

/// A little-endian cursor that fails instead of panicking.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    part: &'static str,
    needed: u64,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(
        bytes: &'a [u8],
        part: &'static str,
        needed: usize,
    ) -> Result<Self, FormatError> {
        if bytes.len() < needed {
            return Err(FormatError::Truncated {
                part,
                needed: needed as u64,
                got: bytes.len() as u64,
            });
        }
        Ok(Cursor {
            bytes,
            part,
            needed: needed as u64,
        })
    }

    pub(super) fn take<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let (head, tail) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(FormatError::Truncated {
                part: self.part,
                needed: self.needed,
                got: self.bytes.len() as u64,
            })?;
        self.bytes = tail;
        Ok(*head)
    }

    /// The next `n` bytes.
    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.bytes.len() < n {
            return Err(FormatError::Truncated {
                part: self.part,
                needed: self.needed,
                got: self.bytes.len() as u64,
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    /// Whether every byte was read.
    pub(super) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(super) fn u8(&mut self) -> Result<u8, FormatError> {
        self.take::<1>().map(|[b]| b)
    }

    pub(super) fn u16(&mut self) -> Result<u16, FormatError> {
        self.take::<2>().map(u16::from_le_bytes)
    }

    pub(super) fn u32(&mut self) -> Result<u32, FormatError> {
        self.take::<4>().map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self) -> Result<u64, FormatError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

pub(super) fn check_crc(part: &'static str, stored: u32, bytes: &[u8]) -> Result<(), FormatError> {
    let computed = crc32fast::hash(bytes);
    if stored != computed {
        return Err(FormatError::CrcMismatch {
            part,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Decodes and verifies the header from the first bytes of `bytes`: 56 in versions 1
/// and 2, 64 in versions 3 and 4 (extra bytes are not looked at).
pub fn decode_header(bytes: &[u8]) -> Result<Header, FormatError> {
    decode_header_version(bytes).map(|(header, _)| header)
}

/// [`decode_header`], and the object's format version.
pub fn decode_header_version(bytes: &[u8]) -> Result<(Header, u16), FormatError> {
    let mut c = Cursor::new(bytes, "header", HEADER_LEN)?;
    let magic = c.take::<8>()?;
    if magic != HEADER_MAGIC {
        return Err(FormatError::BadMagic { part: "header" });
    }
    let version = c.u16()?;
    let len = match version {
        VERSION | VERSION_2 => HEADER_LEN,
        VERSION_3 => HEADER_LEN_V3,
        VERSION_4 => HEADER_LEN_V4,
        other => {
            // The CRC first: a damaged version field is damage, not a newer format.
            let crc = bytes.get(HEADER_LEN - 4..HEADER_LEN).unwrap_or_default();
            let stored = u32::from_le_bytes(crc.try_into().unwrap_or_default());
            check_crc(
                "header",
                stored,
                bytes.get(..HEADER_LEN - 4).unwrap_or_default(),
            )?;
            return Err(FormatError::UnsupportedVersion(other));
        }
    };
    let mut c = Cursor::new(bytes, "header", len)?;
    c.take::<10>()?;
    let flags = c.u16()?;
    let sequence = c.u64()?;
    let epoch = c.u64()?;
    let link_sequence = c.u64()?;
    let link_epoch = c.u64()?;
    let floor = c.u64()?;
    let id_offset = if len == HEADER_LEN_V3 { c.u64()? } else { 0 };
    let stored_crc = c.u32()?;
    check_crc(
        "header",
        stored_crc,
        bytes.get(..len - 4).unwrap_or_default(),
    )?;
    if version == VERSION_3 && id_offset == 0 {
        return Err(FormatError::ZeroIdOffset);
    }
    if flags & !(FLAG_CLAIM | FLAG_CLOSED) != 0 {
        return Err(FormatError::UnknownFlags(flags));
    }
    // The closed flag and version 4 go together: one byte layout names each object.
    let closed = flags & FLAG_CLOSED != 0;
    if closed && version != VERSION_4 {
        return Err(FormatError::ClosedOutsideVersion4(version));
    }
    if !closed && version == VERSION_4 {
        return Err(FormatError::Version4NotClosed);
    }
    let header = Header {
        sequence,
        epoch,
        link: Link {
            sequence: link_sequence,
            epoch: link_epoch,
        },
        floor,
        claim: flags & FLAG_CLAIM != 0,
        closed,
        id_offset,
    };
    header.validate()?;
    Ok((header, version))
}

/// Decodes the trailer from the last 32 bytes of `bytes`, and checks that it places the
/// footer inside an object of `object_len` bytes.
pub fn decode_trailer(bytes: &[u8], object_len: u64) -> Result<Trailer, FormatError> {
    let start = bytes
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or(FormatError::Truncated {
            part: "trailer",
            needed: TRAILER_LEN as u64,
            got: bytes.len() as u64,
        })?;
    let mut c = Cursor::new(
        bytes.get(start..).unwrap_or_default(),
        "trailer",
        TRAILER_LEN,
    )?;
    if c.take::<8>()? != TRAILER_MAGIC {
        return Err(FormatError::BadMagic { part: "trailer" });
    }
    let trailer = Trailer {
        footer_offset: c.u64()?,
        footer_length: c.u64()?,
        footer_crc: c.u32()?,
        object_crc: c.u32()?,
    };
    let placement = FormatError::FooterPlacement {
        offset: trailer.footer_offset,
        length: trailer.footer_length,
        object_len,
    };
    let end = trailer
        .footer_offset
        .checked_add(trailer.footer_length)
        .and_then(|e| e.checked_add(TRAILER_LEN as u64))
        .ok_or(placement.clone())?;
    if end != object_len
        || trailer.footer_offset < HEADER_LEN as u64
        || trailer.footer_length < FOOTER_FIXED_LEN as u64
    {
        return Err(placement);
    }
    if !(trailer.footer_length - FOOTER_FIXED_LEN as u64).is_multiple_of(FOOTER_RECORD_LEN as u64) {
        return Err(FormatError::FooterLength {
            length: trailer.footer_length,
            count: (trailer.footer_length - FOOTER_FIXED_LEN as u64) / FOOTER_RECORD_LEN as u64,
        });
    }
    Ok(trailer)
}

/// Decodes and verifies the footer of a version 1 object (exactly the trailer's footer
/// range) against the header and trailer: CRC, count, reserved fields, region order, id
/// ranges and the contiguous placement of the segments from the header's end to the
/// footer.
pub fn decode_footer(
    bytes: &[u8],
    header: &Header,
    trailer: &Trailer,
) -> Result<Footer, FormatError> {
    decode_footer_of_version(bytes, header, trailer, VERSION)
}

/// [`decode_footer`] for an object of format `version`: in version 1 a record's codec and
/// cipher bytes are reserved (zero); in versions 2 and 3 they name the segment's
/// transforms (a version 4 object has no records). A
/// codec or cipher this crate does not know is not an error here: only that segment's
/// reads fail.
pub fn decode_footer_of_version(
    bytes: &[u8],
    header: &Header,
    trailer: &Trailer,
    version: u16,
) -> Result<Footer, FormatError> {
    if bytes.len() as u64 != trailer.footer_length {
        return Err(FormatError::Truncated {
            part: "footer",
            needed: trailer.footer_length,
            got: bytes.len() as u64,
        });
    }
    check_crc("footer", trailer.footer_crc, bytes)?;
    let mut c = Cursor::new(bytes, "footer", FOOTER_FIXED_LEN)?;
    let count = u64::from(c.u32()?);
    if c.u32()? != 0 {
        return Err(FormatError::ReservedNotZero("footer"));
    }
    if trailer.footer_length != FOOTER_FIXED_LEN as u64 + FOOTER_RECORD_LEN as u64 * count {
        return Err(FormatError::FooterLength {
            length: trailer.footer_length,
            count,
        });
    }
    if header.claim && count != 0 {
        return Err(FormatError::ClaimWithSegments(count));
    }
    if header.closed && count != 0 {
        return Err(FormatError::ClosedWithSegments(count));
    }
    // `count` is bounded by the checked footer length, itself bounded by the object.
    let mut records = Vec::with_capacity(count as usize);
    let mut expected_offset = header.encoded_len() as u64;
    let first_id = entry_id(header.id_base(), 0);
    for _ in 0..count {
        let record = SegmentRecord {
            region: c.u64()?,
            first_entry_id: c.u64()?,
            last_entry_id: c.u64()?,
            offset: c.u64()?,
            length: c.u64()?,
            crc: c.u32()?,
            codec: c.u8()?,
            cipher: c.u8()?,
        };
        if c.u16()? != 0 || (version == VERSION && record.is_transformed()) {
            return Err(FormatError::ReservedNotZero("footer record"));
        }
        if let Some(previous) = records.last().map(|r: &SegmentRecord| r.region) {
            if previous >= record.region {
                return Err(FormatError::RegionOrder {
                    previous,
                    region: record.region,
                });
            }
        }
        if record.first_entry_id != first_id
            || record.last_entry_id < first_id
            || entry_sequence(record.last_entry_id) != header.id_base()
        {
            return Err(FormatError::EntryIdRange {
                region: record.region,
                first: record.first_entry_id,
                last: record.last_entry_id,
                sequence: header.sequence,
            });
        }
        // A stored (transformed) segment may be shorter than its entries' prefixes.
        let min_length = match record.is_transformed() {
            true => 1,
            false => record.entry_count() * ENTRY_PREFIX_LEN as u64,
        };
        if record.offset != expected_offset || record.length < min_length {
            return Err(FormatError::SegmentPlacement {
                region: record.region,
                offset: record.offset,
                length: record.length,
                expected: expected_offset,
            });
        }
        expected_offset = record
            .offset
            .checked_add(record.length)
            .filter(|end| *end <= trailer.footer_offset)
            .ok_or(FormatError::SegmentsEnd {
                end: u64::MAX,
                footer_offset: trailer.footer_offset,
            })?;
        records.push(record);
    }
    if expected_offset != trailer.footer_offset {
        return Err(FormatError::SegmentsEnd {
            end: expected_offset,
            footer_offset: trailer.footer_offset,
        });
    }
    Ok(Footer { records })
}

/// Decodes the summary of an object from its first bytes (`head`: 56, or 64 in versions
/// 3 and 4; reading 64 always suffices), a suffix of the object that holds at least the
/// footer and trailer (`tail`), and the object's length.
pub fn decode_summary(head: &[u8], tail: &[u8], length: u64) -> Result<ObjectSummary, FormatError> {
    let (header, version) = decode_header_version(head)?;
    let trailer = decode_trailer(tail, length)?;
    let tail_start = length.saturating_sub(tail.len() as u64);
    let footer_bytes = trailer
        .footer_offset
        .checked_sub(tail_start)
        .and_then(|from| {
            let from = usize::try_from(from).ok()?;
            let to = from.checked_add(usize::try_from(trailer.footer_length).ok()?)?;
            tail.get(from..to)
        })
        .ok_or(FormatError::Truncated {
            part: "footer",
            needed: trailer.footer_length + TRAILER_LEN as u64,
            got: tail.len() as u64,
        })?;
    let footer = decode_footer_of_version(footer_bytes, &header, &trailer, version)?;
    Ok(ObjectSummary {
        version,
        header,
        footer,
        trailer,
        length,
    })
}

/// Decodes the summary of a whole object and verifies its object CRC.
pub fn decode_object_summary(bytes: &[u8]) -> Result<ObjectSummary, FormatError> {
    let summary = decode_summary(bytes, bytes, bytes.len() as u64)?;
    check_object_crc(bytes, &summary.trailer)?;
    Ok(summary)
}

/// Checks the object CRC of a whole object (`bytes`) against its decoded trailer: what a
/// verification tool checks, and any reader holding every byte may (FORMAT.md, "What a
/// reader verifies"). A mismatch means damage somewhere; [`check_object`] says where.
pub fn check_object_crc(bytes: &[u8], trailer: &Trailer) -> Result<(), FormatError> {
    let covered = bytes
        .len()
        .checked_sub(4)
        .and_then(|end| bytes.get(..end))
        .ok_or(FormatError::Truncated {
            part: "object",
            needed: EMPTY_OBJECT_LEN as u64,
            got: bytes.len() as u64,
        })?;
    check_crc("object", trailer.object_crc, covered)
}

/// Damage inside one segment of an object whose header, footer and trailer verify: only
/// reads of that region fail (FORMAT.md, "What a reader verifies").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDamage {
    /// The segment's region.
    pub region: u64,
    /// What its bytes violate (its CRC, or entries that do not fill it as the footer says).
    pub error: FormatError,
}

/// A whole object checked as recovery checks one it fetched whole: its summary, and the
/// segments that fail their own checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedObject {
    /// Header, footer and trailer, verified.
    pub summary: ObjectSummary,
    /// The damaged segments, in footer order; empty when every segment verifies.
    pub damaged: Vec<SegmentDamage>,
}

/// Checks a whole object: header, footer and trailer must verify (else the error: the
/// object is unusable), then each segment is checked on its own (CRC, then its entries
/// against the footer's range) and a failing one is reported in
/// [`CheckedObject::damaged`], not as an error. The object CRC is not checked here: it
/// adds nothing to the finer CRCs for a reader that checks them all
/// ([`check_object_crc`] is for verification tools).
pub fn check_object(bytes: &[u8]) -> Result<CheckedObject, FormatError> {
    let summary = decode_summary(bytes, bytes, bytes.len() as u64)?;
    let damaged = summary
        .footer
        .records
        .iter()
        .filter_map(|record| {
            let checked = match segment_bytes(bytes, record) {
                Some(segment) => check_segment(segment, record),
                None => Err(FormatError::Truncated {
                    part: "segment",
                    needed: record.range().end,
                    got: bytes.len() as u64,
                }),
            };
            checked.err().map(|error| SegmentDamage {
                region: record.region,
                error,
            })
        })
        .collect();
    Ok(CheckedObject { summary, damaged })
}

/// The bytes of `record`'s segment within a whole object, if they lie inside it.
fn segment_bytes<'a>(object: &'a [u8], record: &SegmentRecord) -> Option<&'a [u8]> {
    let from = usize::try_from(record.offset).ok()?;
    let to = from.checked_add(usize::try_from(record.length).ok()?)?;
    object.get(from..to)
}

/// A whole object decoded and verified: its summary and every segment's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedObject {
    /// Header, footer and trailer.
    pub summary: ObjectSummary,
    /// `(region, entries)` per segment, in footer order.
    pub segments: Vec<(u64, Vec<Bytes>)>,
}

/// Decodes a whole object, verifying every CRC (object, header, footer, segments);
/// compressed segments are decompressed (up to [`crate::config::MAX_BYTES`] each), an
/// encrypted one fails for want of a key ([`decode_object_with`] has keys).
pub fn decode_object(bytes: &Bytes) -> Result<DecodedObject, FormatError> {
    decode_object_with(bytes, &Opening::without_keys(UNCONFIGURED_MAX_DECODED))
}

/// [`decode_object`], opening transformed segments with `opening`.
pub fn decode_object_with(
    bytes: &Bytes,
    opening: &Opening<'_>,
) -> Result<DecodedObject, FormatError> {
    let summary = decode_object_summary(bytes)?;
    let mut segments = Vec::with_capacity(summary.footer.records.len());
    for record in &summary.footer.records {
        let segment = segment_bytes(bytes, record).ok_or(FormatError::SegmentPlacement {
            region: record.region,
            offset: record.offset,
            length: record.length,
            expected: record.offset,
        })?;
        segments.push((
            record.region,
            decode_segment_with(
                bytes.slice_ref(segment),
                record,
                summary.header.sequence,
                summary.header.epoch,
                opening,
            )?,
        ));
    }
    Ok(DecodedObject { summary, segments })
}

/// Verifies one segment's CRC, then splits it into its entries (zero-copy slices of
/// `bytes`). The count must match the record's entry id range. A compressed segment is
/// decompressed (up to [`crate::config::MAX_BYTES`]); an encrypted one fails for want of
/// a key ([`decode_segment_with`] has keys).
pub fn decode_segment(bytes: Bytes, record: &SegmentRecord) -> Result<Vec<Bytes>, FormatError> {
    let opening = Opening::without_keys(UNCONFIGURED_MAX_DECODED);
    decode_segment_with(bytes, record, 0, 0, &opening)
}

/// Decodes one segment: its stored bytes' length and CRC first, then (versions 2 and 3)
/// its transforms undone with `opening` (`sequence` and `epoch`: the object's, part of
/// an encrypted segment's associated data), then its entries (zero-copy slices of the
/// decoded bytes), whose count must match the record's entry id range.
pub fn decode_segment_with(
    bytes: Bytes,
    record: &SegmentRecord,
    sequence: u64,
    epoch: u64,
    opening: &Opening<'_>,
) -> Result<Vec<Bytes>, FormatError> {
    check_stored(&bytes, record)?;
    let plain = open_segment(bytes, record, sequence, epoch, opening)?;
    // `walk_entries` bounds the count by the checked length before this allocates.
    let mut entries = Vec::new();
    walk_entries(&plain, record, |range| {
        if entries.capacity() == 0 {
            entries.reserve_exact(record.entry_count() as usize);
        }
        entries.push(plain.slice(range));
    })?;
    Ok(entries)
}

/// Verifies one segment without decoding it: its stored length and CRC, and for an
/// untransformed segment its entries (they fill it exactly and match the record's
/// count). A transformed segment's entries are checked when it is decoded
/// ([`decode_segment`]), which needs its key.
pub fn check_segment(bytes: &[u8], record: &SegmentRecord) -> Result<(), FormatError> {
    check_stored(bytes, record)?;
    if record.is_transformed() {
        return Ok(());
    }
    walk_entries(bytes, record, |_| {})
}

/// Checks a segment's stored length and CRC.
fn check_stored(bytes: &[u8], record: &SegmentRecord) -> Result<(), FormatError> {
    if bytes.len() as u64 != record.length {
        return Err(FormatError::Truncated {
            part: "segment",
            needed: record.length,
            got: bytes.len() as u64,
        });
    }
    check_crc("segment", record.crc, bytes)
}

/// Walks a version 1 segment's entries, handing each payload's range to `each`; fails
/// if they do not fill it exactly or their count differs from the record's id range.
/// `each` is called only once the count is known to fit the segment.
fn walk_entries(
    bytes: &[u8],
    record: &SegmentRecord,
    mut each: impl FnMut(std::ops::Range<usize>),
) -> Result<(), FormatError> {
    let count = record.entry_count();
    let body = |reason| FormatError::SegmentBody {
        region: record.region,
        reason,
    };
    if count > MAX_SEGMENT_ENTRIES || count * ENTRY_PREFIX_LEN as u64 > bytes.len() as u64 {
        return Err(body("more entries than the segment can hold"));
    }
    let mut seen = 0u64;
    let mut at = 0usize;
    while at < bytes.len() {
        let len = bytes
            .get(at..at + ENTRY_PREFIX_LEN)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(body("entry length prefix cut off"))? as usize;
        let start = at + ENTRY_PREFIX_LEN;
        let end = start
            .checked_add(len)
            .filter(|end| *end <= bytes.len())
            .ok_or(body("entry runs past the end of the segment"))?;
        if seen == count {
            return Err(body("more entries than the footer's id range"));
        }
        each(start..end);
        seen += 1;
        at = end;
    }
    if seen != count {
        return Err(body("fewer entries than the footer's id range"));
    }
    Ok(())
}
