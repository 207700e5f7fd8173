//! The bytes of one WAL object, versions 1 and 2 (`docs/FORMAT.md` is normative).
//!
//! ```text
//! header (56) | segment (region 1) | ... | segment (region N) | footer | trailer (32)
//! ```
//!
//! - The header names the object (sequence, epoch), the object it extends (the link),
//!   the floor below which the chain may have been reclaimed, and whether it is a claim.
//! - A segment holds one region's entries, each `length (u32) | payload`. Entry ids are
//!   not stored: the entry at position `p` of the object with sequence `s` has the id
//!   [`entry_id`]`(s, p)`.
//! - The footer has one 48-byte record per segment (region, id range, offset, length,
//!   CRC), so recovery learns everything it needs without reading a segment.
//! - The trailer locates the footer and carries the footer CRC and the object CRC.
//!
//! Version 2 adds transformed segments (compressed, then encrypted: [`crate::transform`]):
//! the footer record's bytes 44..48 name the segment's codec and cipher, and its offset,
//! length and CRC describe the stored bytes. A writer without transforms writes version
//! 1 byte for byte ([`encode_object`]); [`encode_object_with`] writes version 2 when any
//! segment is transformed. Readers read both.
//!
//! Integers are little-endian; CRCs are CRC32 (IEEE). This module is pure: no I/O, no
//! async. Encoding is deterministic (the identical-retry rule of the writer compares
//! bytes) and makes one pass over the payloads: segment CRCs are computed once and
//! combined into the object CRC, and payloads are handed on as [`Bytes`] chunks, never
//! copied. Decoding never trusts a length or count before checking it against the
//! object's size: damaged input yields a [`FormatError`], never a panic or a large
//! allocation.
//!
//! Damage is told apart by part (FORMAT.md, "What a reader verifies"): a header, footer
//! or trailer that fails makes the object unusable, while a segment that fails its own
//! CRC damages only its region. [`check_object`] checks a whole object that way, as
//! recovery does for an object it reads whole: damaged segments come back as
//! [`SegmentDamage`], not as an error. [`decode_object`] and [`check_object_crc`] check
//! everything, the object CRC too, for tools.

use bytes::{BufMut, Bytes, BytesMut};
use crc32fast::Hasher;

use crate::transform::{
    open_segment, seal_segment, Compression, Opening, Sealing, NONCE_LEN, TAG_LEN,
};

/// ASCII `GTWALOBJ`, the first 8 bytes of every object.
pub const HEADER_MAGIC: [u8; 8] = *b"GTWALOBJ";
/// ASCII `GTWALTRL`, the first 8 bytes of the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"GTWALTRL";
/// The format version this module writes and reads.
pub const VERSION: u16 = 1;
/// The format version of an object with at least one transformed segment.
pub const VERSION_2: u16 = 2;
/// Codec 0: the segment is not compressed.
pub const CODEC_NONE: u8 = 0;
/// Codec 1: one zstd frame.
pub const CODEC_ZSTD: u8 = 1;
/// Codec 2: one LZ4 block.
pub const CODEC_LZ4: u8 = 2;
/// Cipher 0: the segment is not encrypted.
pub const CIPHER_NONE: u8 = 0;
/// Cipher 1: XChaCha20-Poly1305.
pub const CIPHER_XCHACHA20_POLY1305: u8 = 1;
/// Header flag bit 0: the object is a claim.
pub const FLAG_CLAIM: u16 = 1;
/// Length of the header.
pub const HEADER_LEN: usize = 56;
/// Length of the trailer.
pub const TRAILER_LEN: usize = 32;
/// Length of the fixed part of the footer (segment count and a reserved word).
pub const FOOTER_FIXED_LEN: usize = 8;
/// Length of one footer record.
pub const FOOTER_RECORD_LEN: usize = 48;
/// Length of an object without segments (every opening object and claim).
pub const EMPTY_OBJECT_LEN: usize = HEADER_LEN + FOOTER_FIXED_LEN + TRAILER_LEN;
/// Sequences are below `2^44`, so that entry ids fit in 64 bits.
pub const MAX_SEQUENCE: u64 = (1 << 44) - 1;
/// Bits of an entry id that hold the position within the object.
pub const POSITION_BITS: u32 = 20;
/// A segment holds at most `2^20` entries.
pub const MAX_SEGMENT_ENTRIES: u64 = 1 << POSITION_BITS;
/// Bytes of the length prefix of each entry.
pub const ENTRY_PREFIX_LEN: usize = 4;

/// The id of the entry at `position` of a region's segment in object `sequence`:
/// `sequence << 20 | position`.
///
/// Ids are object-sequence-major: `id >> 20` names the object. The caller keeps
/// `sequence <= MAX_SEQUENCE` and `position < 2^20`; other bits are masked off.
pub const fn entry_id(sequence: u64, position: u64) -> u64 {
    (sequence << POSITION_BITS) | (position & (MAX_SEGMENT_ENTRIES - 1))
}

/// The object sequence an entry id belongs to.
pub const fn entry_sequence(id: u64) -> u64 {
    id >> POSITION_BITS
}

/// The position within its object's segment of an entry id.
pub const fn entry_position(id: u64) -> u64 {
    id & (MAX_SEGMENT_ENTRIES - 1)
}

/// What a damaged or malformed object violates. Each variant names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Fewer bytes than the part needs.
    #[error("{part} needs {needed} bytes, got {got}")]
    Truncated {
        /// Which part was being read.
        part: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes there were.
        got: u64,
    },
    /// A magic number is not the expected ASCII.
    #[error("bad {part} magic")]
    BadMagic {
        /// `header` or `trailer`.
        part: &'static str,
    },
    /// A version other than 1 or 2.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u16),
    /// A segment's codec or cipher is not one this reader knows (only that region's
    /// reads fail).
    #[error("segment of region {region}: unknown codec {codec} or cipher {cipher}")]
    UnknownTransform {
        /// The segment's region.
        region: u64,
        /// Its codec.
        codec: u8,
        /// Its cipher.
        cipher: u8,
    },
    /// An encrypted segment's key cannot be had (no provider, or the provider has no
    /// key with that id).
    #[error("segment of region {region}: key {key_id} is not available: {reason}")]
    KeyUnavailable {
        /// The segment's region.
        region: u64,
        /// The key id the segment names.
        key_id: u32,
        /// Why.
        reason: String,
    },
    /// An encrypted segment fails authentication: a wrong key, or the segment was
    /// altered or moved to another object, region or position.
    #[error("segment of region {region} fails authentication under key {key_id}: a wrong key, or a segment altered or moved")]
    Authentication {
        /// The segment's region.
        region: u64,
        /// The key id the segment names.
        key_id: u32,
    },
    /// An object could not be encrypted: the key provider has no current key.
    #[error("no current key to encrypt with: {reason}")]
    NoCurrentKey {
        /// The provider's error.
        reason: String,
    },
    /// A compressed segment does not decompress.
    #[error("segment of region {region} does not decompress: {reason}")]
    Decompress {
        /// The segment's region.
        region: u64,
        /// The codec's complaint.
        reason: String,
    },
    /// A flag bit other than the claim bit is set.
    #[error("unknown header flags {0:#06x}")]
    UnknownFlags(u16),
    /// The sequence is 0 or not below `2^44`.
    #[error("sequence {0} out of range 1..2^44")]
    SequenceOutOfRange(u64),
    /// The epoch is 0.
    #[error("epoch is 0")]
    ZeroEpoch,
    /// The link does not name a lower sequence.
    #[error("link sequence {link} is not below the object's sequence {sequence}")]
    LinkNotBelow {
        /// The link sequence.
        link: u64,
        /// The object's own sequence.
        sequence: u64,
    },
    /// A link epoch that is non-zero without a link, or zero with one.
    #[error("link epoch {epoch} does not fit link sequence {sequence}")]
    LinkEpoch {
        /// The link sequence.
        sequence: u64,
        /// The link epoch.
        epoch: u64,
    },
    /// The floor is above the object's sequence.
    #[error("floor {floor} above sequence {sequence}")]
    FloorAboveSequence {
        /// The floor.
        floor: u64,
        /// The object's sequence.
        sequence: u64,
    },
    /// A CRC does not match the bytes it covers.
    #[error("{part} CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// `header`, `footer`, `object` or `segment`.
        part: &'static str,
        /// The CRC the object carries.
        stored: u32,
        /// The CRC of the bytes read.
        computed: u32,
    },
    /// A reserved field is not zero.
    #[error("reserved field {0} is not zero")]
    ReservedNotZero(&'static str),
    /// The trailer's footer offset, footer length and the object length disagree.
    #[error("footer at {offset} of length {length} does not fit an object of {object_len} bytes")]
    FooterPlacement {
        /// Footer offset from the trailer.
        offset: u64,
        /// Footer length from the trailer.
        length: u64,
        /// Length of the object.
        object_len: u64,
    },
    /// The footer length is not `8 + 48 × N` for its segment count `N`.
    #[error("footer length {length} does not match segment count {count}")]
    FooterLength {
        /// Footer length from the trailer.
        length: u64,
        /// Segment count from the footer.
        count: u64,
    },
    /// A claim holds segments.
    #[error("a claim holds {0} segments")]
    ClaimWithSegments(u64),
    /// Region ids are not strictly ascending.
    #[error("region {region} does not follow region {previous} in ascending order")]
    RegionOrder {
        /// The previous record's region.
        previous: u64,
        /// This record's region.
        region: u64,
    },
    /// A record's entry id range does not belong to the object, or is empty or too long.
    #[error("region {region}: entry ids {first}..={last} do not fit object {sequence}")]
    EntryIdRange {
        /// The record's region.
        region: u64,
        /// First entry id.
        first: u64,
        /// Last entry id.
        last: u64,
        /// The object's sequence.
        sequence: u64,
    },
    /// Segments are not contiguous from offset 56 to the footer.
    #[error("region {region}: segment at {offset} (length {length}) should start at {expected}")]
    SegmentPlacement {
        /// The record's region.
        region: u64,
        /// Offset from the record.
        offset: u64,
        /// Length from the record.
        length: u64,
        /// Where it should start.
        expected: u64,
    },
    /// The segments do not end where the footer starts.
    #[error("segments end at {end}, footer starts at {footer_offset}")]
    SegmentsEnd {
        /// Where the last segment ends.
        end: u64,
        /// The footer offset.
        footer_offset: u64,
    },
    /// A segment's entries do not fill it exactly, or their count differs from the footer's.
    #[error("segment of region {region}: {reason}")]
    SegmentBody {
        /// The segment's region.
        region: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// An encode request that the format cannot represent.
    #[error("cannot encode: {0}")]
    Unencodable(&'static str),
}

/// A reference to the object an object extends: its sequence and the epoch it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Link {
    /// Sequence of the linked object; 0 when the object starts the chain.
    pub sequence: u64,
    /// Epoch recorded in the linked object; 0 when `sequence` is 0.
    pub epoch: u64,
}

impl Link {
    /// The link of an object that starts a chain.
    pub const NONE: Link = Link {
        sequence: 0,
        epoch: 0,
    };

    /// Whether this object starts a chain.
    pub fn is_none(&self) -> bool {
        self.sequence == 0
    }
}

/// The 56-byte header of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The object's sequence, equal to the one in its key.
    pub sequence: u64,
    /// Epoch of the instance that wrote the object.
    pub epoch: u64,
    /// The object this one extends.
    pub link: Link,
    /// Objects of this chain below the floor may have been reclaimed.
    pub floor: u64,
    /// A claim holds a sequence for an opening instance and is never on a chain.
    pub claim: bool,
}

impl Header {
    /// Checks the header's field rules (everything but magic, version and CRC).
    pub fn validate(&self) -> Result<(), FormatError> {
        if self.sequence == 0 || self.sequence > MAX_SEQUENCE {
            return Err(FormatError::SequenceOutOfRange(self.sequence));
        }
        if self.epoch == 0 {
            return Err(FormatError::ZeroEpoch);
        }
        if self.link.sequence >= self.sequence {
            return Err(FormatError::LinkNotBelow {
                link: self.link.sequence,
                sequence: self.sequence,
            });
        }
        if (self.link.sequence == 0) != (self.link.epoch == 0) {
            return Err(FormatError::LinkEpoch {
                sequence: self.link.sequence,
                epoch: self.link.epoch,
            });
        }
        if self.floor > self.sequence {
            return Err(FormatError::FloorAboveSequence {
                floor: self.floor,
                sequence: self.sequence,
            });
        }
        Ok(())
    }

    /// The 56 header bytes of a version 1 object, CRC included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        self.encode_version(VERSION)
    }

    /// The 56 header bytes with `version`, CRC included.
    pub fn encode_version(&self, version: u16) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let mut w = &mut out[..];
        w.put_slice(&HEADER_MAGIC);
        w.put_u16_le(version);
        w.put_u16_le(if self.claim { FLAG_CLAIM } else { 0 });
        w.put_u64_le(self.sequence);
        w.put_u64_le(self.epoch);
        w.put_u64_le(self.link.sequence);
        w.put_u64_le(self.link.epoch);
        w.put_u64_le(self.floor);
        let crc = crc32fast::hash(&out[..HEADER_LEN - 4]);
        out[HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        out
    }
}

/// One footer record: where a region's segment lies and which ids it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentRecord {
    /// The region whose entries the segment holds.
    pub region: u64,
    /// Id of the segment's first entry, `entry_id(sequence, 0)`.
    pub first_entry_id: u64,
    /// Id of its last entry, `entry_id(sequence, count - 1)`.
    pub last_entry_id: u64,
    /// Offset of the segment from the start of the object.
    pub offset: u64,
    /// Length of the segment in bytes.
    pub length: u64,
    /// CRC32 of the segment's stored bytes.
    pub crc: u32,
    /// How the stored bytes are compressed ([`CODEC_NONE`] in version 1).
    pub codec: u8,
    /// How the stored bytes are encrypted ([`CIPHER_NONE`] in version 1).
    pub cipher: u8,
}

impl SegmentRecord {
    /// Number of entries in the segment.
    pub fn entry_count(&self) -> u64 {
        self.last_entry_id
            .saturating_sub(self.first_entry_id)
            .saturating_add(1)
    }

    /// The byte range of the segment within its object.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset.saturating_add(self.length)
    }

    /// Whether the stored bytes are compressed or encrypted.
    pub fn is_transformed(&self) -> bool {
        self.codec != CODEC_NONE || self.cipher != CIPHER_NONE
    }
}

/// The footer: one record per segment, in ascending region order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footer {
    /// The segment records.
    pub records: Vec<SegmentRecord>,
}

impl Footer {
    /// Encoded length of a footer with `segments` records.
    pub fn encoded_len(segments: usize) -> usize {
        FOOTER_FIXED_LEN + FOOTER_RECORD_LEN * segments
    }
}

/// The 32-byte trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Offset of the footer from the start of the object.
    pub footer_offset: u64,
    /// Length of the footer, `8 + 48 × N`.
    pub footer_length: u64,
    /// CRC32 of the footer's bytes.
    pub footer_crc: u32,
    /// CRC32 of every byte of the object before this field.
    pub object_crc: u32,
}

impl Trailer {
    /// The byte range of the footer within its object.
    pub fn footer_range(&self) -> std::ops::Range<u64> {
        self.footer_offset..self.footer_offset.saturating_add(self.footer_length)
    }
}

/// What recovery knows of an object without reading a segment: header, footer, trailer
/// and length, all verified against each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    /// The format version, 1 or 2.
    pub version: u16,
    /// The header.
    pub header: Header,
    /// The footer.
    pub footer: Footer,
    /// The trailer.
    pub trailer: Trailer,
    /// Length of the whole object.
    pub length: u64,
}

/// An encoded object: its bytes as chunks that share the callers' payload buffers.
#[derive(Debug, Clone)]
pub struct EncodedObject {
    version: u16,
    header: Header,
    records: Vec<SegmentRecord>,
    chunks: Vec<Bytes>,
    length: u64,
    footer_crc: u32,
    object_crc: u32,
}

impl EncodedObject {
    /// The format version it was encoded in: 2 when a segment is transformed.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The header the object was encoded with.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The footer records, one per segment.
    pub fn records(&self) -> &[SegmentRecord] {
        &self.records
    }

    /// The object's bytes, in order, as chunks (entry payloads are not copied).
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Always false: an object has at least a header and a trailer.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The object CRC stored in its last four bytes.
    pub fn object_crc(&self) -> u32 {
        self.object_crc
    }

    /// The summary recovery would decode from these bytes.
    pub fn summary(&self) -> ObjectSummary {
        let footer_length = Footer::encoded_len(self.records.len()) as u64;
        let footer_offset = self.length - footer_length - TRAILER_LEN as u64;
        ObjectSummary {
            version: self.version,
            header: self.header,
            footer: Footer {
                records: self.records.clone(),
            },
            trailer: Trailer {
                footer_offset,
                footer_length,
                footer_crc: self.footer_crc,
                object_crc: self.object_crc,
            },
            length: self.length,
        }
    }

    /// Whether `bytes` are exactly this object's bytes.
    pub fn same_bytes(&self, bytes: &[u8]) -> bool {
        if bytes.len() as u64 != self.length {
            return false;
        }
        let mut rest = bytes;
        for chunk in &self.chunks {
            match rest.split_at_checked(chunk.len()) {
                Some((head, tail)) if head == &chunk[..] => rest = tail,
                _ => return false,
            }
        }
        rest.is_empty()
    }

    /// The object's bytes in one contiguous buffer (a copy; for tests and tools).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.length as usize);
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        out.freeze()
    }
}

/// Encodes one object from its header and its segments, given as `(region, entries)` in
/// strictly ascending region order, each with 1 to 2^20 entries: version 1, no segment
/// transformed.
///
/// One pass over the payloads: each entry is hashed once into its segment's CRC, the
/// segment CRCs are combined into the object CRC, and the payloads become chunks of the
/// result without being copied.
pub fn encode_object<'a, I>(header: &Header, segments: I) -> Result<EncodedObject, FormatError>
where
    I: IntoIterator<Item = (u64, &'a [Bytes])>,
{
    let identity = Sealing {
        compression: Compression::Off,
        key: None,
    };
    encode_object_with(header, segments, &identity, &mut || {
        Err(FormatError::Unencodable("no nonce without a key"))
    })
}

/// [`encode_object`] with each segment transformed as `sealing` says (FORMAT.md
/// "Version 2"), a fresh nonce from `nonces` per encrypted segment. With nothing to
/// transform this is exactly [`encode_object`]; otherwise the object is version 2 when a
/// segment ends up transformed (a segment that does not compress is stored plain).
pub fn encode_object_with<'a, I>(
    header: &Header,
    segments: I,
    sealing: &Sealing<'_>,
    nonces: &mut dyn FnMut() -> Result<[u8; NONCE_LEN], FormatError>,
) -> Result<EncodedObject, FormatError>
where
    I: IntoIterator<Item = (u64, &'a [Bytes])>,
{
    header.validate()?;
    let transform = !sealing.is_identity();
    let segments = segments.into_iter();
    let mut chunks: Vec<Bytes> = Vec::with_capacity(2 + 2 * segments.size_hint().0);
    // The header's version is known once the segments are: its chunk is set last.
    chunks.push(Bytes::new());
    let mut records: Vec<SegmentRecord> = Vec::with_capacity(segments.size_hint().0);
    let mut offset = HEADER_LEN as u64;
    // Length prefixes are written into one shared buffer and split off as small chunks.
    let mut prefixes = BytesMut::new();
    // The segments' CRC state, combined in order after the header's.
    let mut segments_hasher = Hasher::new();

    for (region, entries) in segments {
        if header.claim {
            return Err(FormatError::Unencodable("a claim holds no segments"));
        }
        if let Some(previous) = records.last() {
            if previous.region >= region {
                return Err(FormatError::RegionOrder {
                    previous: previous.region,
                    region,
                });
            }
        }
        let count = entries.len() as u64;
        if count == 0 || count > MAX_SEGMENT_ENTRIES {
            return Err(FormatError::Unencodable(
                "a segment holds 1 to 2^20 entries",
            ));
        }
        let first_entry_id = entry_id(header.sequence, 0);
        let mut segment_hasher = Hasher::new();
        let (length, codec, cipher) = if transform {
            // The version 1 segment in one buffer (after room for the envelope's head
            // and before room for its tag), then its stored form.
            let plain_len: usize = entries.iter().map(|e| ENTRY_PREFIX_LEN + e.len()).sum();
            let head = sealing.headroom();
            let mut plain = Vec::with_capacity(head + plain_len + TAG_LEN);
            plain.resize(head, 0);
            for payload in entries {
                let len = u32::try_from(payload.len())
                    .map_err(|_| FormatError::Unencodable("an entry is longer than u32::MAX"))?;
                plain.put_u32_le(len);
                plain.extend_from_slice(payload);
            }
            let nonce = match sealing.key {
                Some(_) => nonces()?,
                None => [0u8; NONCE_LEN],
            };
            let (codec, cipher, stored) =
                seal_segment(plain, sealing, header.epoch, region, first_entry_id, nonce)?;
            segment_hasher.update(&stored);
            let length = stored.len() as u64;
            chunks.push(stored);
            (length, codec, cipher)
        } else {
            prefixes.reserve(entries.len() * ENTRY_PREFIX_LEN);
            let mut length = 0u64;
            for payload in entries {
                let len = u32::try_from(payload.len())
                    .map_err(|_| FormatError::Unencodable("an entry is longer than u32::MAX"))?;
                prefixes.put_u32_le(len);
                let prefix = prefixes.split().freeze();
                segment_hasher.update(&prefix);
                segment_hasher.update(payload);
                chunks.push(prefix);
                if !payload.is_empty() {
                    chunks.push(payload.clone());
                }
                length += (ENTRY_PREFIX_LEN + payload.len()) as u64;
            }
            (length, CODEC_NONE, CIPHER_NONE)
        };
        let crc = segment_hasher.clone().finalize();
        segments_hasher.combine(&segment_hasher);
        records.push(SegmentRecord {
            region,
            first_entry_id,
            last_entry_id: entry_id(header.sequence, count - 1),
            offset,
            length,
            crc,
            codec,
            cipher,
        });
        offset += length;
    }

    let version = if records.iter().any(SegmentRecord::is_transformed) {
        VERSION_2
    } else {
        VERSION
    };
    let header_bytes = header.encode_version(version);
    let mut object_hasher = Hasher::new();
    object_hasher.update(&header_bytes);
    object_hasher.combine(&segments_hasher);
    if let Some(first) = chunks.first_mut() {
        *first = Bytes::copy_from_slice(&header_bytes);
    }

    let footer_offset = offset;
    let footer_len = Footer::encoded_len(records.len());
    let mut tail = BytesMut::with_capacity(footer_len + TRAILER_LEN);
    tail.put_u32_le(records.len() as u32);
    tail.put_u32_le(0);
    for r in &records {
        tail.put_u64_le(r.region);
        tail.put_u64_le(r.first_entry_id);
        tail.put_u64_le(r.last_entry_id);
        tail.put_u64_le(r.offset);
        tail.put_u64_le(r.length);
        tail.put_u32_le(r.crc);
        tail.put_u8(r.codec);
        tail.put_u8(r.cipher);
        tail.put_u16_le(0);
    }
    let footer_crc = crc32fast::hash(&tail);
    object_hasher.update(&tail);
    let trailer_start = tail.len();
    tail.put_slice(&TRAILER_MAGIC);
    tail.put_u64_le(footer_offset);
    tail.put_u64_le(footer_len as u64);
    tail.put_u32_le(footer_crc);
    object_hasher.update(tail.get(trailer_start..).unwrap_or_default());
    let object_crc = object_hasher.finalize();
    tail.put_u32_le(object_crc);
    let length = footer_offset + tail.len() as u64;
    chunks.push(tail.freeze());

    Ok(EncodedObject {
        version,
        header: *header,
        records,
        chunks,
        length,
        footer_crc,
        object_crc,
    })
}

/// A little-endian cursor that fails instead of panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    part: &'static str,
    needed: u64,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], part: &'static str, needed: usize) -> Result<Self, FormatError> {
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

    fn take<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
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

    fn u8(&mut self) -> Result<u8, FormatError> {
        self.take::<1>().map(|[b]| b)
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        self.take::<2>().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        self.take::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

fn check_crc(part: &'static str, stored: u32, bytes: &[u8]) -> Result<(), FormatError> {
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

/// Decodes and verifies the header from the first 56 bytes of `bytes` (version 1 or 2).
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
    let flags = c.u16()?;
    let sequence = c.u64()?;
    let epoch = c.u64()?;
    let link_sequence = c.u64()?;
    let link_epoch = c.u64()?;
    let floor = c.u64()?;
    let stored_crc = c.u32()?;
    check_crc(
        "header",
        stored_crc,
        bytes.get(..HEADER_LEN - 4).unwrap_or_default(),
    )?;
    if version != VERSION && version != VERSION_2 {
        return Err(FormatError::UnsupportedVersion(version));
    }
    if flags & !FLAG_CLAIM != 0 {
        return Err(FormatError::UnknownFlags(flags));
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
    if (trailer.footer_length - FOOTER_FIXED_LEN as u64) % FOOTER_RECORD_LEN as u64 != 0 {
        return Err(FormatError::FooterLength {
            length: trailer.footer_length,
            count: (trailer.footer_length - FOOTER_FIXED_LEN as u64) / FOOTER_RECORD_LEN as u64,
        });
    }
    Ok(trailer)
}

/// Decodes and verifies the footer of a version 1 object (exactly the trailer's footer
/// range) against the header and trailer: CRC, count, reserved fields, region order, id
/// ranges and the contiguous placement of the segments from offset 56 to the footer.
pub fn decode_footer(
    bytes: &[u8],
    header: &Header,
    trailer: &Trailer,
) -> Result<Footer, FormatError> {
    decode_footer_of_version(bytes, header, trailer, VERSION)
}

/// [`decode_footer`] for an object of format `version`: in version 1 a record's codec and
/// cipher bytes are reserved (zero); in version 2 they name the segment's transforms. A
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
    // `count` is bounded by the checked footer length, itself bounded by the object.
    let mut records = Vec::with_capacity(count as usize);
    let mut expected_offset = HEADER_LEN as u64;
    let first_id = entry_id(header.sequence, 0);
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
            || entry_sequence(record.last_entry_id) != header.sequence
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

/// Decodes the summary of an object from its first 56 bytes (`head`), a suffix of the
/// object that holds at least the footer and trailer (`tail`), and the object's length.
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
    decode_object_with(bytes, &Opening::without_keys(crate::config::MAX_BYTES))
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
    let opening = Opening::without_keys(crate::config::MAX_BYTES);
    decode_segment_with(bytes, record, 0, &opening)
}

/// Decodes one segment: its stored bytes' length and CRC first, then (version 2) its
/// transforms undone with `opening` (`epoch`: the object's, part of an encrypted
/// segment's associated data), then its entries (zero-copy slices of the decoded bytes),
/// whose count must match the record's entry id range.
pub fn decode_segment_with(
    bytes: Bytes,
    record: &SegmentRecord,
    epoch: u64,
    opening: &Opening<'_>,
) -> Result<Vec<Bytes>, FormatError> {
    check_stored(&bytes, record)?;
    let plain = open_segment(bytes, record, epoch, opening)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_id_vector() {
        assert_eq!(entry_id(7, 3), 7340035);
        assert_eq!(entry_sequence(7340035), 7);
        assert_eq!(entry_position(7340035), 3);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn vectors_encode() {
        let empty = encode_object(
            &Header {
                sequence: 1,
                epoch: 1,
                link: Link::NONE,
                floor: 0,
                claim: false,
            },
            std::iter::empty(),
        )
        .unwrap();
        assert_eq!(hex(&empty.to_bytes()), "475457414c4f424a0100000001000000000000000100000000000000000000000000000000000000000000000000000000000000e7a465970000000000000000475457414c54524c3800000000000000080000000000000069df2265bd6aad99");
        let r7 = [Bytes::from_static(b"xxx")];
        let r42 = [Bytes::from_static(b"hello"), Bytes::new()];
        let full = encode_object(
            &Header {
                sequence: 9,
                epoch: 5,
                link: Link {
                    sequence: 7,
                    epoch: 5,
                },
                floor: 3,
                claim: false,
            },
            [(7u64, &r7[..]), (42u64, &r42[..])],
        )
        .unwrap();
        let bytes = full.to_bytes();
        assert_eq!(hex(&bytes), "475457414c4f424a0100000009000000000000000500000000000000070000000000000005000000000000000300000000000000b0d25259030000007878780500000068656c6c6f00000000020000000000000007000000000000000000900000000000000090000000000038000000000000000700000000000000fbf65e4f000000002a00000000000000000090000000000001009000000000003f000000000000000d00000000000000de71a94500000000475457414c54524c4c00000000000000680000000000000037026f152b282f1b");
        let decoded = decode_object(&bytes).unwrap();
        assert_eq!(decoded.summary, full.summary());
        assert_eq!(decoded.segments[1].1, r42.to_vec());
        let claim = encode_object(
            &Header {
                sequence: 4,
                epoch: 6,
                link: Link {
                    sequence: 2,
                    epoch: 2,
                },
                floor: 0,
                claim: true,
            },
            std::iter::empty(),
        )
        .unwrap();
        assert_eq!(hex(&claim.to_bytes()), "475457414c4f424a0100010004000000000000000600000000000000020000000000000002000000000000000000000000000000680a97af0000000000000000475457414c54524c3800000000000000080000000000000069df2265bd6aad99");
    }
}
