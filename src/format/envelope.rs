//! Version 2's segment envelope: one segment compressed, then encrypted, as FORMAT.md's
//! "Version 2" lays it out, and opened again. The knobs and keys are
//! [`crate::transform`]'s; the bytes are the format's.

use std::cell::RefCell;

use aes::cipher::BlockCipherEncrypt;
use aes::Aes256;
use bytes::{BufMut, Bytes};
use chacha20poly1305::aead::{Aead, AeadInOut, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::layout::{
    FormatError, SegmentRecord, CIPHER_NONE, CIPHER_XAES_256_GCM, CIPHER_XCHACHA20_POLY1305,
    CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, ENTRY_PREFIX_LEN,
};
use crate::transform::{
    Cipher, Compression, Opening, Sealing, DECODED_LEN_PREFIX, ENVELOPE_HEAD_LEN, NONCE_LEN,
    TAG_LEN,
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

/// Bytes of an XAES-256-GCM nonce that derive its AES-256-GCM key; the other 12 are the
/// AES-GCM nonce.
const XAES_KEY_NONCE_LEN: usize = 12;

/// XAES-256-GCM's key derivation (C2SP's XAES-256-GCM, steps 1 to 5): the AES-256-GCM
/// key of `key` and the nonce's first 12 bytes, `n1`. A CMAC-like KDF over AES-256
/// with `key`: `L = AES(key, 0^128)`, `K1 = L << 1` (xor `0x87` when L's top bit is
/// set), then `AES(key, M1 ^ K1) || AES(key, M2 ^ K1)` for `M1 = 00 01 'X' 00 || n1`
/// and `M2 = 00 02 'X' 00 || n1`. AES is a permutation, so distinct `n1` always give
/// distinct derived keys.
fn xaes_derive(key: &[u8; 32], n1: &[u8; XAES_KEY_NONCE_LEN]) -> Result<Gcm, ()> {
    Gcm::new(&xaes_key(key, n1))
}

/// AES-256-GCM under one key: ring's, assembly that interleaves AES rounds (AES-NI or
/// VAES) with GHASH's carry-less multiplications, chosen at run time.
struct Gcm(ring::aead::LessSafeKey);

impl Gcm {
    /// The key `key`; an error only for a key ring refuses (never 32 bytes).
    fn new(key: &[u8; 32]) -> Result<Gcm, ()> {
        let key = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key).map_err(|_| ())?;
        Ok(Gcm(ring::aead::LessSafeKey::new(key)))
    }

    /// Encrypts `body` in place under the 96-bit `nonce` with `ad`; the tag.
    fn seal(&self, nonce: [u8; 12], ad: &[u8], body: &mut [u8]) -> Result<[u8; TAG_LEN], ()> {
        let tag = self
            .0
            .seal_in_place_separate_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(ad),
                body,
            )
            .map_err(|_| ())?;
        <[u8; TAG_LEN]>::try_from(tag.as_ref()).map_err(|_| ())
    }

    /// Decrypts `sealed` (ciphertext, then tag) under `nonce` with `ad`: the plaintext,
    /// or an error when it fails authentication.
    fn open(&self, nonce: [u8; 12], ad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, ()> {
        let mut buffer = sealed.to_vec();
        let len = self
            .0
            .open_in_place(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(ad),
                &mut buffer,
            )
            .map_err(|_| ())?
            .len();
        buffer.truncate(len);
        Ok(buffer)
    }
}

/// The key [`xaes_derive`] derives.
fn xaes_key(key: &[u8; 32], n1: &[u8; XAES_KEY_NONCE_LEN]) -> [u8; 32] {
    let aes = Aes256::new(&(*key).into());
    let mut l = aes::Block::default();
    aes.encrypt_block(&mut l);
    let l = u128::from_be_bytes(l.into());
    let k1 = (l << 1) ^ if l >> 127 == 1 { 0x87 } else { 0 };
    let half = |counter: u8| {
        let mut m = [0u8; 16];
        let (prefix, rest) = m.split_at_mut(4);
        prefix.copy_from_slice(&[0, counter, b'X', 0]);
        rest.copy_from_slice(n1);
        let mut block = aes::Block::from((u128::from_be_bytes(m) ^ k1).to_be_bytes());
        aes.encrypt_block(&mut block);
        <[u8; 16]>::from(block)
    };
    let mut derived = [0u8; 32];
    let (km, kn) = derived.split_at_mut(16);
    km.copy_from_slice(&half(1));
    kn.copy_from_slice(&half(2));
    derived
}

/// An XAES-256-GCM nonce split: the 12 bytes that derive the key, the 12-byte AES-GCM
/// nonce.
fn xaes_split(nonce: &[u8; NONCE_LEN]) -> ([u8; XAES_KEY_NONCE_LEN], [u8; 12]) {
    let mut n1 = [0u8; XAES_KEY_NONCE_LEN];
    let mut n2 = [0u8; NONCE_LEN - XAES_KEY_NONCE_LEN];
    let (a, b) = nonce.split_at(XAES_KEY_NONCE_LEN);
    n1.copy_from_slice(a);
    n2.copy_from_slice(b);
    (n1, n2)
}

/// The XAES-256-GCM key derived last while one object is sealed: its segments share the
/// nonce's first 12 bytes ([`crate::transform::ObjectNonces`]), so the object pays for
/// one derivation, not one per segment. Keyed by those 12 bytes alone: one cache serves
/// one object, sealed under one key.
#[derive(Default)]
pub(crate) struct DerivedKey(Option<([u8; XAES_KEY_NONCE_LEN], Gcm)>);

impl DerivedKey {
    /// The AES-256-GCM key of `key` and `n1`, derived once per distinct `n1`.
    fn get(&mut self, key: &[u8; 32], n1: &[u8; XAES_KEY_NONCE_LEN]) -> Result<&Gcm, ()> {
        let cached = match self.0.take().filter(|(at, _)| at == n1) {
            Some(cached) => cached,
            None => (*n1, xaes_derive(key, n1)?),
        };
        let (_, gcm) = self.0.insert(cached);
        Ok(gcm)
    }
}

/// A derived AES-256-GCM key on the read path: the key it came from, the nonce prefix
/// it was derived with, and the key.
type OpenKey = ([u8; 32], [u8; XAES_KEY_NONCE_LEN], Gcm);

thread_local! {
    /// The XAES-256-GCM key derived last while segments are opened on this thread, by
    /// the key and the nonce's first 12 bytes: the segments of one object share those
    /// ([`crate::transform::ObjectNonces`]), so a reader opening several segments of an
    /// object (a whole-object read, a replay of many regions) pays one derivation, as
    /// the writer does. Keyed by the key's bytes too, since one thread opens segments
    /// of many logs.
    static OPEN_KEY: RefCell<Option<OpenKey>> = const { RefCell::new(None) };
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
    buffer: Vec<u8>,
    sealing: &Sealing<'_>,
    sequence: u64,
    epoch: u64,
    region: u64,
    first_entry_id: u64,
    nonce: [u8; NONCE_LEN],
) -> Result<(u8, u8, Bytes), FormatError> {
    seal_segment_with(
        &mut DerivedKey::default(),
        buffer,
        sealing,
        [sequence, epoch, region, first_entry_id],
        nonce,
    )
}

/// [`seal_segment`] reusing `derived`, the XAES-256-GCM key of the object's earlier
/// segments (`place` is the segment's sequence, epoch, region and first entry id).
pub(crate) fn seal_segment_with(
    derived: &mut DerivedKey,
    mut buffer: Vec<u8>,
    sealing: &Sealing<'_>,
    place: [u64; 4],
    nonce: [u8; NONCE_LEN],
) -> Result<(u8, u8, Bytes), FormatError> {
    let [sequence, epoch, region, first_entry_id] = place;
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
    let ad = associated_data(sequence, epoch, region, first_entry_id);
    let (envelope, body) =
        buffer
            .split_at_mut_checked(ENVELOPE_HEAD_LEN)
            .ok_or(FormatError::Unencodable(
                "a segment buffer without its headroom",
            ))?;
    let failed = |_| FormatError::Unencodable("encryption failed");
    let (cipher_id, tag): (u8, [u8; TAG_LEN]) = match sealing.cipher.resolve() {
        Cipher::Xaes256Gcm => {
            let (n1, n2) = xaes_split(&nonce);
            let tag = derived
                .get(&key.bytes, &n1)
                .and_then(|gcm| gcm.seal(n2, &ad, body))
                .map_err(failed)?;
            (CIPHER_XAES_256_GCM, tag)
        }
        _ => {
            let cipher = XChaCha20Poly1305::new(&key.bytes.into());
            let tag = cipher
                .encrypt_inout_detached(&XNonce::from(nonce), &ad, body.into())
                .map_err(|_| FormatError::Unencodable("encryption failed"))?;
            (CIPHER_XCHACHA20_POLY1305, tag.into())
        }
    };
    let (id, nonce_at) = envelope.split_at_mut(4);
    id.copy_from_slice(&key.id.to_le_bytes());
    nonce_at.copy_from_slice(&nonce);
    buffer.extend_from_slice(tag.as_slice());
    Ok((codec, cipher_id, Bytes::from(buffer)))
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
        cipher_id @ (CIPHER_XCHACHA20_POLY1305 | CIPHER_XAES_256_GCM) => {
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
            let nonce =
                <[u8; NONCE_LEN]>::try_from(nonce).map_err(|_| FormatError::SegmentBody {
                    region,
                    reason: "the encryption envelope is cut off",
                })?;
            let ad = associated_data(sequence, epoch, region, record.first_entry_id);
            let plain = if cipher_id == CIPHER_XAES_256_GCM {
                let (n1, n2) = xaes_split(&nonce);
                OPEN_KEY.with(|cache| {
                    let mut cache = cache.borrow_mut();
                    let cached = match cache
                        .take()
                        .filter(|(k, at, _)| *k == key.bytes && *at == n1)
                    {
                        Some(cached) => cached,
                        None => (key.bytes, n1, xaes_derive(&key.bytes, &n1)?),
                    };
                    let (_, _, gcm) = cache.insert(cached);
                    gcm.open(n2, &ad, sealed)
                })
            } else {
                let payload = Payload {
                    msg: sealed,
                    aad: &ad,
                };
                XChaCha20Poly1305::new(&key.bytes.into())
                    .decrypt(&XNonce::from(nonce), payload)
                    .map_err(|_| ())
            }
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

    /// XAES-256-GCM through `xaes_derive` and AES-256-GCM, as `seal_segment` runs it.
    fn xaes_seal(key: &[u8; 32], nonce: &[u8; NONCE_LEN], plain: &[u8], ad: &[u8]) -> Vec<u8> {
        let (n1, n2) = xaes_split(nonce);
        let mut sealed = plain.to_vec();
        let tag = xaes_derive(key, &n1)
            .and_then(|gcm| gcm.seal(n2, ad, &mut sealed))
            .expect("encrypts");
        sealed.extend_from_slice(&tag);
        let opened = xaes_derive(key, &n1)
            .and_then(|gcm| gcm.open(n2, ad, &sealed))
            .expect("opens");
        assert_eq!(opened, plain);
        sealed
    }

    #[test]
    fn xaes_matches_c2sp_vectors() {
        // C2SP XAES-256-GCM.md, the two vectors (ciphertext then tag).
        let nonce = *b"ABCDEFGHIJKLMNOPQRSTUVWX";
        let sealed = xaes_seal(&[0x01; 32], &nonce, b"XAES-256-GCM", b"");
        assert_eq!(
            hex::encode(sealed),
            "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"
        );
        let sealed = xaes_seal(
            &[0x03; 32],
            &nonce,
            b"XAES-256-GCM",
            b"c2sp.org/XAES-256-GCM",
        );
        assert_eq!(
            hex::encode(sealed),
            "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"
        );
    }

    #[test]
    fn xaes_derives_format_mds_key() {
        // FORMAT.md, vectors 8 and 9: the key 0x42 × 32 and the nonce's first 12 bytes.
        assert_eq!(
            hex::encode(xaes_key(&[0x42; 32], &[0x24; XAES_KEY_NONCE_LEN])),
            "43865a172e677680764ab089cfb76d129d3f65131372663b8b6d0049350a4761"
        );
    }

    #[test]
    fn xaes_matches_rustcryptos_xaes_crate() {
        use xaes_256_gcm::Xaes256Gcm;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        };
        for len in [0, 1, 15, 16, 17, 1_028, 4_099] {
            let key: [u8; 32] = std::array::from_fn(|_| next());
            let nonce: [u8; NONCE_LEN] = std::array::from_fn(|_| next());
            let plain: Vec<u8> = (0..len).map(|_| next()).collect();
            let ad: [u8; 32] = std::array::from_fn(|_| next());
            let theirs = Xaes256Gcm::new(&key.into())
                .encrypt(
                    &nonce.into(),
                    Payload {
                        msg: &plain,
                        aad: &ad,
                    },
                )
                .expect("encrypts");
            assert_eq!(xaes_seal(&key, &nonce, &plain, &ad), theirs, "{len} bytes");
        }
    }

    #[test]
    fn an_objects_derived_key_is_reused_only_for_its_nonce_prefix() {
        let key = crate::transform::SegmentKey::new(1, [0x42; 32]);
        let sealing = Sealing {
            compression: Compression::Off,
            key: Some(&key),
            cipher: Cipher::Xaes256Gcm,
        };
        let segment = |nonce| {
            let mut buffer = vec![0u8; ENVELOPE_HEAD_LEN];
            buffer.extend_from_slice(b"\x03\x00\x00\x00xxx");
            (buffer, nonce)
        };
        let mut nonces = crate::transform::ObjectNonces::new([0x24; NONCE_LEN]);
        let mut other = [0x24; NONCE_LEN];
        other[0] = 0x25;
        let sequence = [
            segment(nonces.next_nonce()),
            segment(nonces.next_nonce()),
            segment(other),
            segment(nonces.next_nonce()),
        ];
        let mut derived = DerivedKey::default();
        for (buffer, nonce) in sequence {
            let place = [9, 5, 7, 9 << 20];
            let cached = seal_segment_with(&mut derived, buffer.clone(), &sealing, place, nonce)
                .expect("seals");
            let fresh = seal_segment(buffer, &sealing, 9, 5, 7, 9 << 20, nonce).expect("seals");
            assert_eq!(cached, fresh);
            assert_eq!(cached.1, CIPHER_XAES_256_GCM);
        }
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
