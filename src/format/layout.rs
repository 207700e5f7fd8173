//! The format's constants, entry ids and parts (header, footer records, trailer), and
//! [`FormatError`]: what the encoder, the decoders and the segment envelope share.

use bytes::BufMut;

/// The bound on a decoded segment for a decoder without a reader's configuration (tools,
/// tests): `config::MAX_BYTES`, the largest `max_batch_bytes` a configuration takes
/// (config checks that the two agree).
pub(crate) const UNCONFIGURED_MAX_DECODED: u64 = 64 << 30;

/// ASCII `GTWALOBJ`, the first 8 bytes of every object.
pub const HEADER_MAGIC: [u8; 8] = *b"GTWALOBJ";
/// ASCII `GTWALTRL`, the first 8 bytes of the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"GTWALTRL";
/// The format version this module writes and reads.
pub const VERSION: u16 = 1;
/// The format version of an object with at least one transformed segment.
pub const VERSION_2: u16 = 2;
/// The format version of an object whose header carries an id offset (its segments may
/// be transformed as in version 2).
pub const VERSION_3: u16 = 3;
/// The format version of a closed opening object ([`FLAG_CLOSED`]), and of nothing
/// else: version 3's 64-byte header, id offset included, and no segments.
pub const VERSION_4: u16 = 4;
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
/// Cipher 2: XAES-256-GCM (C2SP's extended-nonce AES-256-GCM).
pub const CIPHER_XAES_256_GCM: u8 = 2;
/// Header flag bit 0: the object is a claim.
pub const FLAG_CLAIM: u16 = 1;
/// Header flag bit 1: the object is a closed opening object (version 4 only).
pub const FLAG_CLOSED: u16 = 2;
/// Length of the header (versions 1 and 2).
pub const HEADER_LEN: usize = 56;
/// Length of a version 3 header: a version 2 header with the id offset before its CRC.
pub const HEADER_LEN_V3: usize = 64;
/// Length of a version 4 header: a version 3 header (the closed flag is in its flags).
pub const HEADER_LEN_V4: usize = HEADER_LEN_V3;
/// Length of the trailer.
pub const TRAILER_LEN: usize = 32;
/// Length of the fixed part of the footer (segment count and a reserved word).
pub const FOOTER_FIXED_LEN: usize = 8;
/// Length of one footer record.
pub const FOOTER_RECORD_LEN: usize = 48;
/// Length of an object without segments (every opening object and claim).
pub const EMPTY_OBJECT_LEN: usize = HEADER_LEN + FOOTER_FIXED_LEN + TRAILER_LEN;
/// Length of an object of version 3 without segments.
pub const EMPTY_OBJECT_LEN_V3: usize = HEADER_LEN_V3 + FOOTER_FIXED_LEN + TRAILER_LEN;
/// Length of every version 4 object: a closed object holds no segments.
pub const CLOSED_OBJECT_LEN: usize = HEADER_LEN_V4 + FOOTER_FIXED_LEN + TRAILER_LEN;
/// Sequences are below `2^44`, so that entry ids fit in 64 bits; so is a sequence plus
/// its object's id offset.
pub const MAX_SEQUENCE: u64 = (1 << 44) - 1;
/// Bits of an entry id that hold the position within the object.
pub const POSITION_BITS: u32 = 20;
/// A segment holds at most `2^20` entries.
pub const MAX_SEGMENT_ENTRIES: u64 = 1 << POSITION_BITS;
/// Bytes of the length prefix of each entry.
pub const ENTRY_PREFIX_LEN: usize = 4;

/// The id of the entry at `position` of a region's segment in the object whose id base
/// ([`Header::id_base`]: its sequence plus its id offset) is `base`:
/// `base << 20 | position`.
///
/// Ids are object-major: `id >> 20` names the object, its sequence itself in every
/// object without an id offset (versions 1 and 2). The caller keeps `base <=
/// MAX_SEQUENCE` and `position < 2^20`; other bits are masked off.
pub const fn entry_id(base: u64, position: u64) -> u64 {
    (base << POSITION_BITS) | (position & (MAX_SEGMENT_ENTRIES - 1))
}

/// The id base (an object's sequence plus its id offset) an entry id belongs to.
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
    /// A version other than 1, 2, 3 or 4.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u16),
    /// A sequence plus its id offset at or above `2^44`: its ids would not fit 64 bits.
    #[error("sequence {sequence} with id offset {id_offset} is past the largest id base")]
    IdOffsetOutOfRange {
        /// The object's sequence.
        sequence: u64,
        /// Its id offset.
        id_offset: u64,
    },
    /// A control snapshot (FORMAT.md "Control entries") breaks a rule.
    #[error("control snapshot: {reason}")]
    Control {
        /// The rule.
        reason: &'static str,
    },
    /// A version 3 header whose id offset is 0: such an object is written as version 1
    /// or 2, so one byte layout names each object.
    #[error("a version 3 header with id offset 0")]
    ZeroIdOffset,
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
    /// A flag bit other than the claim and closed bits is set.
    #[error("unknown header flags {0:#06x}")]
    UnknownFlags(u16),
    /// The closed flag in a header of another version than 4: only a closed object's
    /// layout carries it.
    #[error("the closed flag in a version {0} header (only version 4 carries it)")]
    ClosedOutsideVersion4(u16),
    /// A version 4 header without the closed flag: version 4 is a closed object's
    /// layout only.
    #[error("a version 4 header without the closed flag")]
    Version4NotClosed,
    /// A header with both the claim and the closed flag: a closed object is an opening
    /// object, never a claim.
    #[error("a header with both the claim and the closed flag")]
    ClosedClaim,
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
    /// A closed object holds segments.
    #[error("a closed object holds {0} segments")]
    ClosedWithSegments(u64),
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
    /// Segments are not contiguous from the header's end to the footer.
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

/// The header of an object: 56 bytes, 64 in versions 3 and 4 (which add the id offset).
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
    /// A closed opening object (version 4, and only it): it fences the prefix for good,
    /// so no writer opens it again (DESIGN.md gives the rules). It holds no segments
    /// and is never a claim.
    pub closed: bool,
    /// Added to the sequence to make the object's entry ids (versions 3 and 4; 0 in
    /// versions 1 and 2): never decreasing along a chain, so a region's ids never run backwards
    /// when a node takes it over from another (DESIGN.md "Regions moving between nodes").
    pub id_offset: u64,
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
        if self.claim && self.closed {
            return Err(FormatError::ClosedClaim);
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
        if self
            .sequence
            .checked_add(self.id_offset)
            .is_none_or(|base| base > MAX_SEQUENCE)
        {
            return Err(FormatError::IdOffsetOutOfRange {
                sequence: self.sequence,
                id_offset: self.id_offset,
            });
        }
        Ok(())
    }

    /// The object's id base, `sequence + id_offset`: its entries' ids are
    /// [`entry_id`]`(id_base, position)`. (Validated headers keep it within
    /// [`MAX_SEQUENCE`].)
    pub fn id_base(&self) -> u64 {
        self.sequence.saturating_add(self.id_offset)
    }

    /// The length of this header when encoded: 64 bytes when closed or with an id
    /// offset, else 56.
    pub fn encoded_len(&self) -> usize {
        if self.closed || self.id_offset > 0 {
            HEADER_LEN_V3
        } else {
            HEADER_LEN
        }
    }

    /// The 64 header bytes of a version 3 object, CRC included (a closed header is
    /// version 4: [`encode_v4`](Self::encode_v4)).
    pub fn encode_v3(&self) -> [u8; HEADER_LEN_V3] {
        self.encode_as(VERSION_3)
    }

    /// The 64 header bytes of a version 4 object (a closed one), CRC included.
    pub fn encode_v4(&self) -> [u8; HEADER_LEN_V4] {
        self.encode_as(VERSION_4)
    }

    /// The 56 header bytes of a version 1 object, CRC included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        self.encode_version(VERSION)
    }

    /// The 56 header bytes with `version` (1 or 2; the id offset is not written, see
    /// [`encode_v3`](Self::encode_v3), and a closed header is
    /// [`encode_v4`](Self::encode_v4)'s), CRC included.
    pub fn encode_version(&self, version: u16) -> [u8; HEADER_LEN] {
        self.encode_as(version)
    }

    /// The header in `N` bytes (56, or 64 with the id offset), its CRC in the last 4.
    fn encode_as<const N: usize>(&self, version: u16) -> [u8; N] {
        let mut out = [0u8; N];
        let mut w = &mut out[..];
        w.put_slice(&HEADER_MAGIC);
        w.put_u16_le(version);
        let claim = if self.claim { FLAG_CLAIM } else { 0 };
        let closed = if self.closed { FLAG_CLOSED } else { 0 };
        w.put_u16_le(claim | closed);
        w.put_u64_le(self.sequence);
        w.put_u64_le(self.epoch);
        w.put_u64_le(self.link.sequence);
        w.put_u64_le(self.link.epoch);
        w.put_u64_le(self.floor);
        if N == HEADER_LEN_V3 {
            w.put_u64_le(self.id_offset);
        }
        let crc = crc32fast::hash(&out[..N - 4]);
        out[N - 4..].copy_from_slice(&crc.to_le_bytes());
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
    /// The format version: 1, 2, 3 or 4.
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
