//! Segment transforms, FORMAT.md's "Version 2": a segment's bytes may be compressed
//! (zstd or LZ4) and then encrypted (XChaCha20-Poly1305) before they are stored.
//!
//! Why per segment: a read fetches one region's segment with a ranged GET, so each
//! segment must decode on its own; and an object's other regions stay readable when one
//! segment is damaged or its key is missing.
//!
//! - **Compression** ([`Compression`], `Config::compression`) is chosen per WAL. A
//!   segment that does not shrink is stored plain (codec 0), so incompressible payloads
//!   cost nothing but the attempt.
//! - **Encryption** needs a [`KeyProvider`] the node implements (or [`StaticKeys`] from
//!   a file or the environment): new segments are encrypted with its current key, and
//!   each stored segment names its key by id, so keys rotate and old objects stay
//!   readable while the provider still has their key. The associated data is the
//!   segment's place (object sequence and epoch, region, first entry id): a segment moved
//!   to another object, region or position fails authentication.
//! - The stored bytes' CRC is the footer record's, so damage is found before anything is
//!   decrypted or decompressed. A segment that fails to decrypt or decompress fails only
//!   that region's reads, as [`crate::Error::CorruptSegment`] naming key and region; a
//!   missing key says which.
//! - Decoding checks a compressed segment's decoded length against its entry count and
//!   the reader's bound before it allocates: a hostile length is an error, not an
//!   allocation.
//!
//! The functions here are pure (no I/O): the nonce is an argument, drawn by the caller
//! from the operating system's generator ([`random_nonce`]), once per object: the
//! object's segments take that draw with their index XORed into its last eight bytes
//! ([`ObjectNonces`]). XChaCha20 derives its subkey from a nonce's first 16 bytes, so an
//! object's segments share one random subkey and count through distinct ChaCha20 nonces
//! under it, the construction's intended use.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use chacha20poly1305::aead::{Aead, AeadInOut, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::format::{
    entry_sequence, FormatError, SegmentRecord, CIPHER_NONE, CIPHER_XCHACHA20_POLY1305, CODEC_LZ4,
    CODEC_NONE, CODEC_ZSTD, ENTRY_PREFIX_LEN,
};

/// Bytes before an encrypted segment's ciphertext: key id (4) and nonce (24).
pub const ENVELOPE_HEAD_LEN: usize = 4 + NONCE_LEN;
/// Bytes of an encrypted segment's authentication tag, after the ciphertext.
pub const TAG_LEN: usize = 16;
/// Bytes of an XChaCha20-Poly1305 nonce.
pub const NONCE_LEN: usize = 24;
/// Bytes of a compressed segment's decoded-length prefix.
pub const DECODED_LEN_PREFIX: usize = 4;

/// The compression applied to each segment before it is stored.
///
/// In a configuration file: `"off"`, `"lz4"`, `"zstd"` (level 3) or `"zstd:N"`
/// (N from -7 to 22; higher is smaller and slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Segments are stored as they are (version 1 objects, unless encrypted).
    #[default]
    Off,
    /// One zstd frame per segment, at this level.
    Zstd {
        /// The zstd level, -7 to 22.
        level: i32,
    },
    /// One LZ4 block per segment.
    Lz4,
}

/// The zstd level of `"zstd"` without one.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

impl Compression {
    /// zstd at its default level, 3.
    pub const ZSTD: Compression = Compression::Zstd {
        level: DEFAULT_ZSTD_LEVEL,
    };

    /// Whether this compresses at all.
    pub fn is_off(&self) -> bool {
        matches!(self, Compression::Off)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::Off => f.write_str("off"),
            Compression::Zstd { level } => write!(f, "zstd:{level}"),
            Compression::Lz4 => f.write_str("lz4"),
        }
    }
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "none" => Ok(Compression::Off),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::ZSTD),
            other => {
                let level = other
                    .strip_prefix("zstd:")
                    .and_then(|l| l.parse::<i32>().ok())
                    .filter(|l| (-7..=22).contains(l))
                    .ok_or_else(|| {
                        format!("{other:?}: expected \"off\", \"lz4\", \"zstd\" or \"zstd:N\" with N from -7 to 22")
                    })?;
                Ok(Compression::Zstd { level })
            }
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Compression {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A 256-bit segment key and the id stored with every segment it encrypts.
#[derive(Clone, PartialEq, Eq)]
pub struct SegmentKey {
    id: u32,
    bytes: [u8; 32],
}

impl SegmentKey {
    /// The key `bytes`, named `id`.
    pub fn new(id: u32, bytes: [u8; 32]) -> Self {
        SegmentKey { id, bytes }
    }

    /// The key's id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for SegmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key's bytes.
        f.debug_struct("SegmentKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Why a key could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The provider has no key with this id (a segment written under a key since
    /// retired, or by another node's provider).
    #[error("no key with id {0}")]
    Unknown(u32),
    /// The provider failed (a key service down, a file unreadable).
    #[error("the key provider failed: {0}")]
    Provider(String),
}

/// The node's keys: the current one, which encrypts new segments, and any by id, which
/// decrypt old ones. Called once per sealed object and once per segment read, so an
/// implementation over a key service caches.
pub trait KeyProvider: Send + Sync + fmt::Debug {
    /// The key new segments are encrypted with.
    fn current(&self) -> Result<SegmentKey, KeyError>;
    /// The key with `id`.
    fn key(&self, id: u32) -> Result<SegmentKey, KeyError>;
}

/// Keys held in memory: one current key and any number of older ones.
///
/// Text form, for a file or an environment variable: one key per line (or separated by
/// commas), each `<id>:<64 hex digits>`; the last one is the current key. Blank lines
/// and lines starting with `#` are skipped.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKeys {
    current: u32,
    keys: BTreeMap<u32, [u8; 32]>,
}

impl fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticKeys")
            .field("current", &self.current)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl StaticKeys {
    /// Only `current`.
    pub fn new(current: SegmentKey) -> Self {
        StaticKeys {
            current: current.id,
            keys: BTreeMap::from([(current.id, current.bytes)]),
        }
    }

    /// Adds an older key (kept for reading); the current key stays.
    pub fn with_key(mut self, key: SegmentKey) -> Self {
        self.keys.insert(key.id, key.bytes);
        self
    }

    /// Parses the text form (see the type's docs).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut keys = BTreeMap::new();
        let mut current = None;
        for item in text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let bad = |why: &str| KeyError::Provider(format!("key {item:?}: {why}"));
            let (id, hex) = item
                .split_once(':')
                .ok_or_else(|| bad("expected <id>:<hex>"))?;
            let id: u32 = id.trim().parse().map_err(|_| bad("the id is not a u32"))?;
            let hex = hex.trim();
            if hex.len() != 64 {
                return Err(bad("a key is 64 hex digits"));
            }
            let mut bytes = [0u8; 32];
            for (i, byte) in bytes.iter_mut().enumerate() {
                let pair = hex.get(2 * i..2 * i + 2).ok_or_else(|| bad("not hex"))?;
                *byte = u8::from_str_radix(pair, 16).map_err(|_| bad("not hex"))?;
            }
            keys.insert(id, bytes);
            current = Some(id);
        }
        let current = current.ok_or_else(|| KeyError::Provider("no key given".into()))?;
        Ok(StaticKeys { current, keys })
    }

    /// The keys in the environment variable `var` (text form).
    pub fn from_env(var: &str) -> Result<Self, KeyError> {
        let text = std::env::var(var)
            .map_err(|e| KeyError::Provider(format!("environment variable {var}: {e}")))?;
        Self::parse(&text)
    }

    /// The keys a source names: `"env:VAR"` (the environment variable `VAR`) or
    /// `"file:PATH"`, in the text form (how configuration files and `walctl --keys`
    /// name them).
    pub fn from_source(source: &str) -> Result<Self, KeyError> {
        match source.split_once(':') {
            Some(("env", var)) => Self::from_env(var),
            Some(("file", path)) => Self::from_file(path),
            _ => Err(KeyError::Provider(format!(
                "{source:?}: expected \"env:VAR\" or \"file:PATH\""
            ))),
        }
    }

    /// The keys in the file at `path` (text form).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| KeyError::Provider(format!("{}: {e}", path.display())))?;
        Self::parse(&text)
    }
}

impl KeyProvider for StaticKeys {
    fn current(&self) -> Result<SegmentKey, KeyError> {
        self.key(self.current)
    }

    fn key(&self, id: u32) -> Result<SegmentKey, KeyError> {
        self.keys
            .get(&id)
            .map(|bytes| SegmentKey::new(id, *bytes))
            .ok_or(KeyError::Unknown(id))
    }
}

/// A key provider shared by a configuration: compared by identity, never printed.
#[derive(Clone)]
pub struct Keys(pub Arc<dyn KeyProvider>);

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys({:?})", self.0)
    }
}

impl PartialEq for Keys {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Keys {}

/// A fresh random nonce from the operating system's generator.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], FormatError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce)
        .map_err(|_| FormatError::Unencodable("the operating system gave no random nonce"))?;
    Ok(nonce)
}

/// The nonces of one object's encrypted segments: one draw of [`random_nonce`] per
/// object, its last eight bytes XORed with the segment's index in the object. Distinct
/// within the object by the index, and across objects by the 128 random bits before it:
/// one system call per object instead of one per segment.
#[derive(Debug, Clone, Copy)]
pub struct ObjectNonces {
    base: [u8; NONCE_LEN],
    next: u64,
}

impl ObjectNonces {
    /// The nonces that start from `base` (a fresh random nonce).
    pub fn new(base: [u8; NONCE_LEN]) -> Self {
        ObjectNonces { base, next: 0 }
    }

    /// The next segment's nonce.
    pub fn next_nonce(&mut self) -> [u8; NONCE_LEN] {
        let mut nonce = self.base;
        let (_, tail) = nonce.split_at_mut(NONCE_LEN - 8);
        for (byte, index) in tail.iter_mut().zip(self.next.to_le_bytes()) {
            *byte ^= index;
        }
        self.next = self.next.wrapping_add(1);
        nonce
    }
}

/// How one object's segments are transformed as they are encoded.
#[derive(Debug, Clone, Copy)]
pub struct Sealing<'a> {
    /// The compression to try on each segment.
    pub compression: Compression,
    /// The key to encrypt every segment with, if any.
    pub key: Option<&'a SegmentKey>,
}

impl Sealing<'_> {
    /// Whether any segment would be transformed.
    pub fn is_identity(&self) -> bool {
        self.compression.is_off() && self.key.is_none()
    }
}

/// The associated data of an encrypted segment: the object's sequence and epoch, the
/// region and the first entry id, as four little-endian u64.
fn associated_data(epoch: u64, region: u64, first_entry_id: u64) -> [u8; 32] {
    let mut ad = [0u8; 32];
    let mut w = &mut ad[..];
    w.put_u64_le(entry_sequence(first_entry_id));
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

impl Sealing<'_> {
    /// The bytes to leave free before the version 1 segment given to [`seal_segment`]:
    /// room for an encrypted segment's key id and nonce, so it is encrypted in place.
    pub fn headroom(&self) -> usize {
        if self.key.is_some() {
            ENVELOPE_HEAD_LEN
        } else {
            0
        }
    }
}

/// Transforms one version 1 segment as `sealing` says: `buffer` holds
/// [`Sealing::headroom`] bytes (any), then the segment (`length | payload` per entry).
/// Returns `(codec, cipher, stored bytes)`. Compression is kept only when it shrinks the
/// segment; with a key, every segment is encrypted with `nonce`, in place.
pub fn seal_segment(
    mut buffer: Vec<u8>,
    sealing: &Sealing<'_>,
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
    let ad = associated_data(epoch, region, first_entry_id);
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

/// What a reader needs to open transformed segments: the keys, and its bound on a
/// segment's decoded length.
#[derive(Debug, Clone, Copy)]
pub struct Opening<'a> {
    /// The key provider, if the reader has one.
    pub keys: Option<&'a dyn KeyProvider>,
    /// The largest decoded segment this reader accepts (its `max_batch_bytes`).
    pub max_decoded: u64,
}

impl Opening<'_> {
    /// A reader without keys, bounded by `max_decoded`.
    pub fn without_keys(max_decoded: u64) -> Self {
        Opening {
            keys: None,
            max_decoded,
        }
    }
}

/// Undoes a segment's transforms: `stored` (already checked against its CRC) becomes the
/// version 1 segment. An untransformed segment comes back as it is, without a copy.
pub fn open_segment(
    stored: Bytes,
    record: &SegmentRecord,
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
            let ad = associated_data(epoch, region, record.first_entry_id);
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

    #[test]
    fn an_objects_nonces_share_their_first_16_bytes_and_never_repeat() {
        let base: [u8; NONCE_LEN] = std::array::from_fn(|i| (i as u8).wrapping_mul(37));
        let mut nonces = ObjectNonces::new(base);
        let drawn: Vec<_> = (0..1000).map(|_| nonces.next_nonce()).collect();
        assert_eq!(
            drawn.first(),
            Some(&base),
            "the first segment takes the draw"
        );
        assert!(drawn.iter().all(|n| n[..16] == base[..16]));
        let distinct: std::collections::BTreeSet<_> = drawn.iter().collect();
        assert_eq!(distinct.len(), drawn.len());
        let mut second = base;
        second[16] ^= 1;
        assert_eq!(drawn.get(1), Some(&second));
    }

    #[test]
    fn compression_parses_and_prints() {
        for (text, parsed) in [
            ("off", Compression::Off),
            ("lz4", Compression::Lz4),
            ("zstd", Compression::ZSTD),
            ("zstd:19", Compression::Zstd { level: 19 }),
            ("zstd:-3", Compression::Zstd { level: -3 }),
        ] {
            assert_eq!(text.parse::<Compression>(), Ok(parsed));
        }
        assert_eq!(Compression::Zstd { level: 3 }.to_string(), "zstd:3");
        for bad in ["zstd:23", "zstd:x", "gzip", ""] {
            assert!(bad.parse::<Compression>().is_err(), "{bad}");
        }
    }

    #[test]
    fn static_keys_parse_rotate_and_hide_their_bytes() {
        let text = "# keys\n1:0000000000000000000000000000000000000000000000000000000000000001\n\n\
                    2:00000000000000000000000000000000000000000000000000000000000000ff";
        let keys = StaticKeys::parse(text).expect("parsed");
        assert_eq!(keys.current().expect("current").id(), 2);
        assert_eq!(keys.key(1).expect("old key").id(), 1);
        assert_eq!(keys.key(3), Err(KeyError::Unknown(3)));
        assert!(!format!("{keys:?}{:?}", keys.key(2)).contains("ff"));
        for bad in [
            "",
            "1:00",
            "x:00",
            "1:zz00000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert!(StaticKeys::parse(bad).is_err(), "{bad:?}");
        }
    }
}
