//! Segment transforms, FORMAT.md's "Version 2": a segment's bytes may be compressed
//! (zstd or LZ4) and then encrypted (XAES-256-GCM or XChaCha20-Poly1305) before they
//! are stored.
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
//!   readable while the provider still has their key. [`Cipher`] (`Config::cipher`)
//!   chooses the AEAD of new segments: by default, for a new WAL, XAES-256-GCM where the
//!   CPU has AES instructions ([`aes_gcm_accelerated`]), XChaCha20-Poly1305 elsewhere (an
//!   existing WAL keeps its XChaCha20-Poly1305); each segment names its cipher, so a
//!   reader opens either. The associated data is the
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
//! This module holds the knobs and the keys; the bytes they make are the format's
//! ([`crate::format::seal_segment`] and [`crate::format::open_segment`], pure: no I/O).
//! The nonce is an argument, drawn by the caller from the operating system's generator
//! ([`crate::format::random_nonce`]), once per object: the
//! object's segments take that draw with their index XORed into its last eight bytes
//! ([`ObjectNonces`]). XChaCha20 derives its subkey from a nonce's first 16 bytes, so an
//! object's segments share one random subkey and count through distinct ChaCha20 nonces
//! under it, the construction's intended use. XAES-256-GCM derives its AES-256-GCM key
//! from a nonce's first 12 bytes, so an object derives one key (once, as it is encoded)
//! and its segments count through distinct 96-bit AES-GCM nonces under it; FORMAT.md
//! ("Nonces, and why they never repeat") bounds a repeat across objects.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

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

/// The AEAD that encrypts new segments (FORMAT.md "Version 2", the cipher byte). Readers
/// need no setting: each stored segment names its cipher, so objects written under one
/// stay readable by a node configured for the other.
///
/// In a configuration file: `"auto"` (the default), `"xaes-256-gcm"` or
/// `"xchacha20-poly1305"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Cipher {
    /// For a new WAL, XAES-256-GCM where the CPU has AES and carry-less multiplication
    /// instructions (x86 AES-NI and PCLMULQDQ, ARMv8 AES and PMULL:
    /// [`aes_gcm_accelerated`]), XChaCha20-Poly1305 elsewhere; an existing WAL last
    /// written with XChaCha20-Poly1305 keeps it ([`Cipher::for_wal`]).
    #[default]
    Auto,
    /// Cipher 1, XChaCha20-Poly1305: fast in software on any CPU.
    XChaCha20Poly1305,
    /// Cipher 2, XAES-256-GCM (C2SP's extended-nonce AES-256-GCM): several times faster
    /// than cipher 1 with AES instructions, much slower without them.
    Xaes256Gcm,
}

/// Whether this CPU runs AES-GCM in hardware: AES rounds (x86 AES-NI, ARMv8 AES) and
/// the carry-less multiplication GHASH needs (x86 PCLMULQDQ, ARMv8 PMULL), detected at
/// run time (the answer is cached).
pub fn aes_gcm_accelerated() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    {
        aes::hardware_accelerated() && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    // On aarch64 the `aes` feature `aes` detects includes PMULL.
    #[cfg(target_arch = "aarch64")]
    {
        aes::hardware_accelerated()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
    {
        false
    }
}

impl Cipher {
    /// The cipher new segments get: this one, or for [`Cipher::Auto`] the faster one
    /// on this CPU.
    pub fn resolve(self) -> Cipher {
        self.resolve_on(aes_gcm_accelerated())
    }

    /// [`resolve`](Self::resolve) on a CPU that runs AES-GCM in hardware (`accelerated`)
    /// or not.
    fn resolve_on(self, accelerated: bool) -> Cipher {
        match self {
            Cipher::Auto if accelerated => Cipher::Xaes256Gcm,
            Cipher::Auto => Cipher::XChaCha20Poly1305,
            chosen => chosen,
        }
    }

    /// The cipher new segments of a WAL get, given the cipher byte of the newest
    /// encrypted segment on its chain (`None`: none, a new WAL): [`Cipher::Auto`] keeps
    /// an existing WAL's cipher 1, since a reader of a release before cipher 2 (a node
    /// not yet upgraded) cannot open cipher 2; it picks the faster cipher for new WALs.
    /// A cipher chosen by name is that cipher.
    pub fn for_wal(self, newest_on_chain: Option<u8>) -> Cipher {
        self.for_wal_on(newest_on_chain, aes_gcm_accelerated())
    }

    /// [`for_wal`](Self::for_wal) on a CPU that runs AES-GCM in hardware (`accelerated`)
    /// or not: the choice for either CPU, testable on both.
    fn for_wal_on(self, newest_on_chain: Option<u8>, accelerated: bool) -> Cipher {
        match (self, newest_on_chain) {
            (Cipher::Auto, Some(crate::format::CIPHER_XCHACHA20_POLY1305)) => {
                Cipher::XChaCha20Poly1305
            }
            (chosen, _) => chosen.resolve_on(accelerated),
        }
    }

    /// The cipher byte its segments carry (FORMAT.md "Version 2"), resolved first.
    pub fn id(self) -> u8 {
        match self.resolve() {
            Cipher::Xaes256Gcm => crate::format::CIPHER_XAES_256_GCM,
            _ => crate::format::CIPHER_XCHACHA20_POLY1305,
        }
    }
}

impl fmt::Display for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cipher::Auto => "auto",
            Cipher::XChaCha20Poly1305 => "xchacha20-poly1305",
            Cipher::Xaes256Gcm => "xaes-256-gcm",
        })
    }
}

impl FromStr for Cipher {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(Cipher::Auto),
            "xchacha20-poly1305" => Ok(Cipher::XChaCha20Poly1305),
            "xaes-256-gcm" => Ok(Cipher::Xaes256Gcm),
            other => Err(format!(
                "{other:?}: expected \"auto\", \"xaes-256-gcm\" or \"xchacha20-poly1305\""
            )),
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Cipher {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A 256-bit segment key and the id stored with every segment it encrypts.
#[derive(Clone, PartialEq, Eq)]
pub struct SegmentKey {
    pub(crate) id: u32,
    pub(crate) bytes: [u8; 32],
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

/// The nonces of one object's encrypted segments: one draw of [`random_nonce`](crate::format::random_nonce) per
/// object, its last eight bytes XORed with the segment's index in the object. Distinct
/// within the object by the index, and across objects by the 128 random bits before it:
/// one system call per object instead of one per segment. Under XAES-256-GCM the first
/// 12 bytes (random, shared by the object's segments) derive the object's key and the
/// last 12 (4 random bytes, then the index XOR 8 random bytes) are the AES-GCM nonces.
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
    /// The cipher to encrypt with, when there is a key ([`Cipher::Auto`] is resolved).
    pub cipher: Cipher,
}

impl Sealing<'_> {
    /// Whether any segment would be transformed.
    pub fn is_identity(&self) -> bool {
        self.compression.is_off() && self.key.is_none()
    }
}

impl Sealing<'_> {
    /// The bytes to leave free before the version 1 segment given to
    /// [`seal_segment`](crate::format::seal_segment):
    /// room for an encrypted segment's key id and nonce, so it is encrypted in place.
    pub fn headroom(&self) -> usize {
        if self.key.is_some() {
            ENVELOPE_HEAD_LEN
        } else {
            0
        }
    }
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

    /// XAES-256-GCM (cipher 2) splits the nonce: bytes 0..12 derive the object's key,
    /// bytes 12..24 are the AES-GCM nonce under it. Within an object the key part is
    /// shared and the AES-GCM nonces never repeat; across objects (fresh draws) no
    /// (key part, AES-GCM nonce) pair repeats, nor does a key part.
    #[test]
    fn xaes_nonces_share_their_key_part_within_an_object_and_never_repeat() {
        let mut pairs = std::collections::BTreeSet::new();
        let mut key_parts = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let base = crate::format::random_nonce().expect("a random nonce");
            let (key_part, _) = base.split_at(12);
            assert!(key_parts.insert(key_part.to_vec()), "a key part repeated");
            let mut nonces = ObjectNonces::new(base);
            for _ in 0..100 {
                let nonce = nonces.next_nonce();
                let (k, n) = nonce.split_at(12);
                assert_eq!(k, key_part, "an object's segments share one derived key");
                assert!(pairs.insert((k.to_vec(), n.to_vec())), "a nonce repeated");
            }
        }
        // The index counts through the last eight bytes, so up to 2^64 segments of one
        // object get distinct AES-GCM nonces; a footer holds at most 2^32 segments.
        let mut nonces = ObjectNonces::new([0; NONCE_LEN]);
        nonces.next = u64::from(u32::MAX);
        let last = nonces.next_nonce();
        assert_eq!(last.get(16..), Some(&u64::from(u32::MAX).to_le_bytes()[..]));
    }

    #[test]
    fn cipher_parses_prints_and_resolves() {
        for (text, parsed) in [
            ("auto", Cipher::Auto),
            ("xchacha20-poly1305", Cipher::XChaCha20Poly1305),
            ("xaes-256-gcm", Cipher::Xaes256Gcm),
        ] {
            assert_eq!(text.parse::<Cipher>(), Ok(parsed));
            assert_eq!(parsed.to_string(), text);
        }
        for bad in ["aes", "", "chacha"] {
            assert!(bad.parse::<Cipher>().is_err(), "{bad}");
        }
        assert_eq!(Cipher::default(), Cipher::Auto);
        let auto = Cipher::Auto.resolve();
        assert_eq!(auto == Cipher::Xaes256Gcm, aes_gcm_accelerated());
        assert_eq!(Cipher::Xaes256Gcm.id(), crate::format::CIPHER_XAES_256_GCM);
        assert_eq!(
            Cipher::XChaCha20Poly1305.id(),
            crate::format::CIPHER_XCHACHA20_POLY1305
        );
    }

    /// Auto keeps an existing WAL's cipher 1 and takes cipher 2 elsewhere where the CPU
    /// has AES instructions, cipher 1 everywhere where it has none; a named cipher is that
    /// cipher. Both CPUs' choices, whatever this one has; `for_wal` asks this one.
    #[test]
    fn a_wal_s_cipher_on_either_cpu() {
        use Cipher::{Auto, XChaCha20Poly1305 as One, Xaes256Gcm as Two};
        let one = Some(crate::format::CIPHER_XCHACHA20_POLY1305);
        let two = Some(crate::format::CIPHER_XAES_256_GCM);
        for (cipher, newest, with_aes, without_aes) in [
            (Auto, one, One, One),
            (Auto, two, Two, One),
            (Auto, None, Two, One),
            (Two, one, Two, Two),
            (Two, None, Two, Two),
            (One, two, One, One),
            (One, None, One, One),
        ] {
            let case = format!("{cipher} over {newest:?}");
            assert_eq!(cipher.for_wal_on(newest, true), with_aes, "{case}, AES");
            assert_eq!(
                cipher.for_wal_on(newest, false),
                without_aes,
                "{case}, no AES"
            );
            let here = cipher.for_wal_on(newest, aes_gcm_accelerated());
            assert_eq!(cipher.for_wal(newest), here, "{case}, this CPU");
        }
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
