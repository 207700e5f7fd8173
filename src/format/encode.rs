//! An object from its segments, in one pass: version 1 untransformed, version 2 when a
//! segment is sealed by a transform, version 3 when the header carries an id offset,
//! version 4 when it is closed (and then without segments).

use bytes::{BufMut, Bytes, BytesMut};
use crc32fast::Hasher;

use super::envelope::{seal_segment_with, DerivedKey};
use super::layout::*;
use crate::transform::{Cipher, Compression, Sealing, NONCE_LEN, TAG_LEN};

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
    /// The format version it was encoded in: 4 when closed, else 3 with an id offset,
    /// else 2 when a segment is transformed, else 1.
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
        cipher: Cipher::XChaCha20Poly1305,
    };
    encode_object_with(header, segments, &identity, &mut || {
        Err(FormatError::Unencodable("no nonce without a key"))
    })
}

/// [`encode_object`] with each segment transformed as `sealing` says (FORMAT.md
/// "Version 2"), a fresh nonce from `nonces` per encrypted segment. With nothing to
/// transform this is exactly [`encode_object`]; otherwise the object is version 2 when a
/// segment ends up transformed (a segment that does not compress is stored plain). A
/// header with an id offset makes it version 3 either way, and a closed one version 4
/// (a closed object holds no segments).
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
    let mut offset = header.encoded_len() as u64;
    // Length prefixes are written into one shared buffer and split off as small chunks.
    let mut prefixes = BytesMut::new();
    // The segments' CRC state, combined in order after the header's.
    let mut segments_hasher = Hasher::new();
    // The object's XAES-256-GCM key, derived at its first encrypted segment.
    let mut derived = DerivedKey::default();

    for (region, entries) in segments {
        if header.claim {
            return Err(FormatError::Unencodable("a claim holds no segments"));
        }
        if header.closed {
            return Err(FormatError::Unencodable(
                "a closed object holds no segments",
            ));
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
        let first_entry_id = entry_id(header.id_base(), 0);
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
            let (codec, cipher, stored) = seal_segment_with(
                &mut derived,
                plain,
                sealing,
                [header.sequence, header.epoch, region, first_entry_id],
                nonce,
            )?;
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
            last_entry_id: entry_id(header.id_base(), count - 1),
            offset,
            length,
            crc,
            codec,
            cipher,
        });
        offset += length;
    }

    let (version, header_bytes) = if header.closed {
        (VERSION_4, Bytes::copy_from_slice(&header.encode_v4()))
    } else if header.id_offset > 0 {
        (VERSION_3, Bytes::copy_from_slice(&header.encode_v3()))
    } else if records.iter().any(SegmentRecord::is_transformed) {
        (
            VERSION_2,
            Bytes::copy_from_slice(&header.encode_version(VERSION_2)),
        )
    } else {
        (
            VERSION,
            Bytes::copy_from_slice(&header.encode_version(VERSION)),
        )
    };
    let mut object_hasher = Hasher::new();
    object_hasher.update(&header_bytes);
    object_hasher.combine(&segments_hasher);
    if let Some(first) = chunks.first_mut() {
        *first = header_bytes;
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
