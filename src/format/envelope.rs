//! Version 2's segment envelope: one segment compressed, then encrypted, as FORMAT.md's
//! "Version 2" lays it out, and opened again. The knobs and keys are
//! [`crate::transform`]'s; the bytes are the format's.

use std::cell::RefCell;

use bytes::{BufMut, Bytes};
use chacha20poly1305::aead::{Aead, AeadInOut, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::layout::{
    FormatError, SegmentRecord, CIPHER_NONE, CIPHER_XCHACHA20_POLY1305, CODEC_LZ4, CODEC_NONE,
    CODEC_ZSTD, ENTRY_PREFIX_LEN,
};
use crate::transform::{
    Compression, Opening, Sealing, DECODED_LEN_PREFIX, ENVELOPE_HEAD_LEN, NONCE_LEN, TAG_LEN,
};

/// A fresh random nonce from the operating system's generator.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], FormatError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce)
        .map_err(|_| FormatError::Unencodable("the operating system gave no random nonce"))?;
    Ok(nonce)
}

/// The associated data of an encrypted segment: the object's sequence and epoch, the
/// region and the first entry id, as four little-endian u64.
fn associated_data(sequence: u64, epoch: u64, region: u64, first_entry_id: u64) -> [u8; 32] {
    let mut ad = [0u8; 32];
    let mut w = &mut ad[..];
    w.put_u64_le(sequence);
    w.put_u64_le(epoch);
    w.put_u64_le(region);
    w.put_u64_le(first_entry_id);
    ad
}

thread_local! {
    /// One zstd compression context per thread and level: a context costs more to build
    /// than a small segment costs to compress.
    static ZSTD_COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Compresses `plain` into `out`; `None` if it does not fit (it would not shrink).
fn zstd_compress_into(plain: &[u8], level: i32, out: &mut [u8]) -> Option<usize> {
    ZSTD_COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|(l, _)| *l != level) {
            *cell = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, compressor) = cell.as_mut()?;
        compressor.compress_to_buffer(plain, out).ok()
    })
}

/// A compressed body, written in place: `head` bytes of headroom, the decoded length,
/// then what `compress` wrote into `room` bytes (it returns how many), with capacity
/// left for `tail`. `None` when compressing does not shrink the segment.
fn compressed_body(
    head: usize,
    plain_len: usize,
    room: usize,
    tail: usize,
    compress: impl FnOnce(&mut [u8]) -> Option<usize>,
) -> Option<Vec<u8>> {
    let decoded_len = u32::try_from(plain_len).ok()?;
    let start = head + DECODED_LEN_PREFIX;
    let mut body = Vec::with_capacity(start + room + tail);
    body.resize(start + room, 0);
    let written = compress(body.get_mut(start..)?)?;
    if DECODED_LEN_PREFIX + written >= plain_len {
        return None;
    }
    body.truncate(start + written);
    body.get_mut(head..start)?
        .copy_from_slice(&decoded_len.to_le_bytes());
    Some(body)
}

fn zstd_decompress(compressed: &[u8], decoded_len: usize) -> Result<Vec<u8>, String> {
    ZSTD_DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let decompressor = cell.as_mut().ok_or("no zstd context")?;
        decompressor
            .decompress(compressed, decoded_len)
            .map_err(|e| e.to_string())
    })
}

/// Transforms one version 1 segment as `sealing` says: `buffer` holds
/// [`Sealing::headroom`] bytes (any), then the segment (`length | payload` per entry).
/// Returns `(codec, cipher, stored bytes)`. Compression is kept only when it shrinks the
/// segment; with a key, every segment is encrypted with `nonce`, in place, bound to its
/// place: the object's `sequence` and `epoch`, its `region` and first entry id.
pub fn seal_segment(
    mut buffer: Vec<u8>,
    sealing: &Sealing<'_>,
    sequence: u64,
    epoch: u64,
    region: u64,
    first_entry_id: u64,
    nonce: [u8; NONCE_LEN],
) -> Result<(u8, u8, Bytes), FormatError> {
    let head = sealing.headroom();
    let plain = buffer.get(head..).ok_or(FormatError::Unencodable(
        "a segment buffer without its headroom",
    ))?;
    if u32::try_from(plain.len()).is_err() {
        return Err(FormatError::Unencodable("a segment longer than u32::MAX"));
    }
    let tail = if sealing.key.is_some() { TAG_LEN } else { 0 };
    // Compressed straight into the stored body: zstd into no more room than would
    // shrink the segment, LZ4 into its worst case (it needs that much room to start).
    let compressed = match sealing.compression {
        Compression::Off => None,
        Compression::Zstd { level } => {
            let room = plain.len().saturating_sub(DECODED_LEN_PREFIX);
            compressed_body(head, plain.len(), room, tail, |out| {
                zstd_compress_into(plain, level, out)
            })
            .map(|body| (CODEC_ZSTD, body))
        }
        Compression::Lz4 => {
            let room = lz4_flex::block::get_maximum_output_size(plain.len());
            compressed_body(head, plain.len(), room, tail, |out| {
                lz4_flex::block::compress_into(plain, out).ok()
            })
            .map(|body| (CODEC_LZ4, body))
        }
    };
    let (codec, mut buffer) = match compressed {
        Some((codec, body)) => (codec, body),
        None => (CODEC_NONE, std::mem::take(&mut buffer)),
    };
    let Some(key) = sealing.key else {
        return Ok((codec, CIPHER_NONE, Bytes::from(buffer)));
    };
    let cipher = XChaCha20Poly1305::new_from_slice(&key.bytes)
        .map_err(|_| FormatError::Unencodable("a key is 32 bytes"))?;
    let ad = associated_data(sequence, epoch, region, first_entry_id);
    let (envelope, body) =
        buffer
            .split_at_mut_checked(ENVELOPE_HEAD_LEN)
            .ok_or(FormatError::Unencodable(
                "a segment buffer without its headroom",
            ))?;
    let tag = cipher
        .encrypt_inout_detached(&XNonce::from(nonce), &ad, body.into())
        .map_err(|_| FormatError::Unencodable("encryption failed"))?;
    let (id, nonce_at) = envelope.split_at_mut(4);
    id.copy_from_slice(&key.id.to_le_bytes());
    nonce_at.copy_from_slice(&nonce);
    buffer.extend_from_slice(tag.as_slice());
    Ok((codec, CIPHER_XCHACHA20_POLY1305, Bytes::from(buffer)))
}

/// Undoes a segment's transforms: `stored` (already checked against its CRC) becomes the
/// version 1 segment. An untransformed segment comes back as it is, without a copy.
/// `sequence` and `epoch` are its object's (an encrypted segment is bound to them).
pub fn open_segment(
    stored: Bytes,
    record: &SegmentRecord,
    sequence: u64,
    epoch: u64,
    opening: &Opening<'_>,
) -> Result<Bytes, FormatError> {
    let region = record.region;
    let body = match record.cipher {
        CIPHER_NONE => stored,
        CIPHER_XCHACHA20_POLY1305 => {
            let (head, sealed) = stored
                .split_first_chunk::<ENVELOPE_HEAD_LEN>()
                .filter(|(_, rest)| rest.len() >= TAG_LEN)
                .ok_or(FormatError::SegmentBody {
                    region,
                    reason: "the encryption envelope is cut off",
                })?;
            let (id, nonce) = head
                .split_first_chunk::<4>()
                .ok_or(FormatError::SegmentBody {
                    region,
                    reason: "the encryption envelope is cut off",
                })?;
            let key_id = u32::from_le_bytes(*id);
            let keys = opening.keys.ok_or(FormatError::KeyUnavailable {
                region,
                key_id,
                reason: "the reader has no key provider".into(),
            })?;
            let key = keys.key(key_id).map_err(|e| FormatError::KeyUnavailable {
                region,
                key_id,
                reason: e.to_string(),
            })?;
            let cipher = XChaCha20Poly1305::new_from_slice(&key.bytes).map_err(|_| {
                FormatError::KeyUnavailable {
                    region,
                    key_id,
                    reason: "a key is 32 bytes".into(),
                }
            })?;
            let nonce = XNonce::try_from(nonce).map_err(|_| FormatError::SegmentBody {
                region,
                reason: "the encryption envelope is cut off",
            })?;
            let ad = associated_data(sequence, epoch, region, record.first_entry_id);
            let plain = cipher
                .decrypt(
                    &nonce,
                    Payload {
                        msg: sealed,
                        aad: &ad,
                    },
                )
                .map_err(|_| FormatError::Authentication { region, key_id })?;
            Bytes::from(plain)
        }
        cipher => {
            return Err(FormatError::UnknownTransform {
                region,
                codec: record.codec,
                cipher,
            })
        }
    };
    if record.codec == CODEC_NONE {
        return Ok(body);
    }
    let body_error = |reason| FormatError::SegmentBody { region, reason };
    let (len, compressed) = body
        .split_first_chunk::<DECODED_LEN_PREFIX>()
        .ok_or(body_error("the decoded length is cut off"))?;
    let decoded_len = u64::from(u32::from_le_bytes(*len));
    // Bounds before any allocation: at least a prefix per entry, at most the reader's.
    let least = record.entry_count().saturating_mul(ENTRY_PREFIX_LEN as u64);
    if decoded_len < least || decoded_len > opening.max_decoded {
        return Err(body_error(
            "the decoded length is out of bounds for the entry count or the reader's max_batch_bytes",
        ));
    }
    let decoded_len = decoded_len as usize;
    let decoded = match record.codec {
        CODEC_ZSTD => zstd_decompress(compressed, decoded_len),
        CODEC_LZ4 => {
            lz4_flex::block::decompress(compressed, decoded_len).map_err(|e| e.to_string())
        }
        codec => {
            return Err(FormatError::UnknownTransform {
                region,
                codec,
                cipher: record.cipher,
            })
        }
    }
    .map_err(|reason| FormatError::Decompress { region, reason })?;
    if decoded.len() != decoded_len {
        return Err(body_error(
            "the decoded bytes differ from the decoded length",
        ));
    }
    Ok(Bytes::from(decoded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::DEFAULT_ZSTD_LEVEL;

    /// Text like a metrics insert's (JSON rows, numbers varying): what a WAL mostly holds.
    fn rows(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let mut text = Vec::with_capacity(len + 200);
        while text.len() < len {
            let row = format!(
                "{{\"table\":\"cpu\",\"ts\":{},\"host\":\"host-{:04}\",\"usage_user\":{}.{}}}\n",
                1_764_944_000_000u64 + next() % 100_000,
                next() % 1000,
                next() % 60,
                next() % 10
            );
            text.extend_from_slice(row.as_bytes());
        }
        text.truncate(len);
        text
    }

    /// Incompressible bytes: a compression that does not fit its room.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    /// `plain` through this thread's reused context, as `seal_segment` calls it (into no
    /// more room than would shrink the segment).
    fn reused(plain: &[u8], level: i32) -> Option<Vec<u8>> {
        let mut out = vec![0u8; plain.len().saturating_sub(DECODED_LEN_PREFIX)];
        let written = zstd_compress_into(plain, level, &mut out)?;
        out.truncate(written);
        Some(out)
    }

    #[test]
    fn a_reused_zstd_context_writes_the_bytes_of_a_fresh_one() {
        // Sizes around a segment of one small entry, a 1 KiB entry, several, and more
        // than one 128 KiB zstd block; levels across the range, switched back and forth;
        // a failed compression (noise does not fit its room) between any two.
        let sizes = [68, 300, 1_028, 3_084, 64 << 10, 300 << 10];
        for (round, level) in [3, 1, 3, 19, -7, 9, 3].into_iter().enumerate() {
            for (i, size) in sizes.into_iter().enumerate() {
                let plain = rows(size, (round * 10 + i) as u64);
                let fresh = zstd::bulk::compress(&plain, level).expect("a fresh context");
                let mut simple = Vec::with_capacity(zstd::zstd_safe::compress_bound(size));
                zstd::zstd_safe::compress(&mut simple, &plain, level).expect("ZSTD_compress");
                assert_eq!(fresh, simple, "ZSTD_compress2 and ZSTD_compress agree");
                // What a fresh context writes, if it fits the room (it shrinks).
                let expected = (fresh.len() <= size - DECODED_LEN_PREFIX).then_some(fresh);
                assert_eq!(
                    reused(&plain, level),
                    expected,
                    "level {level}, {size} bytes"
                );
                assert_eq!(reused(&noise(size, i as u64), level), None);
                assert_eq!(
                    reused(&plain, level),
                    expected,
                    "level {level}, {size} bytes, after a failed compression"
                );
            }
        }
    }

    #[test]
    fn a_zstd_frame_records_its_content_size_and_no_checksum_or_dictionary() {
        for size in [300, 1_028, 300 << 10] {
            let plain = rows(size, 7);
            let frame = reused(&plain, DEFAULT_ZSTD_LEVEL).expect("compressible");
            let (magic, rest) = frame.split_first_chunk::<4>().expect("a frame header");
            assert_eq!(u32::from_le_bytes(*magic), 0xFD2F_B528, "a zstd frame");
            let descriptor = rest.first().copied().expect("a frame header descriptor");
            let (size_flag, single_segment) = (descriptor >> 6, (descriptor >> 5) & 1);
            assert!(size_flag != 0 || single_segment == 1, "content size");
            assert_eq!(descriptor & 0b100, 0, "no checksum");
            assert_eq!(descriptor & 0b11, 0, "no dictionary id");
            assert_eq!(
                zstd::zstd_safe::get_frame_content_size(&frame).ok(),
                Some(Some(size as u64))
            );
        }
        // FORMAT.md's vector 4: 64 bytes `a` in one entry, its frame byte for byte.
        let mut plain = 64u32.to_le_bytes().to_vec();
        plain.extend_from_slice(&[b'a'; 64]);
        let frame = reused(&plain, DEFAULT_ZSTD_LEVEL).expect("compressible");
        assert_eq!(
            frame,
            [
                0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x44, 0x5d, 0x00, 0x00, 0x28, 0x40, 0x00, 0x00, 0x00,
                0x61, 0x01, 0x00, 0x94, 0x80, 0x16
            ]
        );
    }

    #[test]
    fn a_reused_zstd_decompressor_reads_on_after_a_bad_frame() {
        let plain = rows(3_084, 1);
        let frame = reused(&plain, DEFAULT_ZSTD_LEVEL).expect("compressible");
        assert_eq!(zstd_decompress(&frame, plain.len()).as_ref(), Ok(&plain));
        // Without a checksum a flipped bit inside a block may decode to other bytes; a
        // wrong magic, a cut frame and a missing magic never do.
        let mut damaged = frame.clone();
        if let Some(byte) = damaged.first_mut() {
            *byte ^= 0xff;
        }
        let cut = frame.get(..frame.len() - 3).expect("cut");
        let headless = frame.get(4..).expect("headless");
        for bad in [&damaged[..], cut, headless] {
            assert!(zstd_decompress(bad, plain.len()).is_err_and(|e| !e.is_empty()));
            assert_eq!(zstd_decompress(&frame, plain.len()).as_ref(), Ok(&plain));
        }
        // A bound below the frame's content size is refused, then reading goes on.
        assert!(zstd_decompress(&frame, plain.len() - 1).is_err());
        assert_eq!(zstd_decompress(&frame, plain.len()).as_ref(), Ok(&plain));
    }
}
