//! A WAL's segment transforms as its configuration sets them: what the writer seals
//! each segment with and what its readers open them with. Beside the store access
//! ([`WalIo`](super::objects::WalIo) carries one) because every front end, writer and
//! reader, shares it.

use bytes::Bytes;

use crate::format::{encode_object_with, random_nonce, EncodedObject, FormatError, Header};
use crate::transform::{Cipher, Compression, Keys, ObjectNonces, Opening, Sealing, NONCE_LEN};

/// A WAL's segment transforms (FORMAT.md "Version 2"), from its configuration: what
/// the writer seals each segment with, and what a reader opens them with.
#[derive(Debug, Clone)]
pub struct SegmentCodec {
    /// The compression tried on each segment.
    pub compression: Compression,
    /// The node's keys: every segment is encrypted with the current one.
    pub keys: Option<Keys>,
    /// The cipher new segments are encrypted with (resolved: never `Auto`).
    pub cipher: Cipher,
    /// The largest decoded segment a reader accepts.
    pub max_decoded: u64,
    /// Where nonces come from (the operating system's generator; tests fix them).
    pub nonces: fn() -> Result<[u8; NONCE_LEN], FormatError>,
}

/// Equal transforms (where nonces come from is not compared).
impl PartialEq for SegmentCodec {
    fn eq(&self, other: &Self) -> bool {
        self.compression == other.compression
            && self.keys == other.keys
            && self.cipher == other.cipher
            && self.max_decoded == other.max_decoded
    }
}

impl Eq for SegmentCodec {}

impl SegmentCodec {
    /// Whether this codec transforms nothing (version 1 objects).
    pub fn is_identity(&self) -> bool {
        self.compression.is_off() && self.keys.is_none()
    }

    /// The codec of `config`.
    pub fn of(config: &crate::config::Config) -> Self {
        SegmentCodec {
            compression: config.compression,
            keys: config.encryption_keys.clone(),
            cipher: config.cipher.resolve(),
            max_decoded: config.max_batch_bytes,
            nonces: random_nonce,
        }
    }

    /// No transform: version 1 objects; a reader that opens none.
    pub fn identity() -> Self {
        SegmentCodec {
            compression: Compression::Off,
            keys: None,
            cipher: Cipher::Auto.resolve(),
            max_decoded: crate::config::MAX_BYTES,
            nonces: random_nonce,
        }
    }

    /// What a reader opens segments with.
    pub fn opening(&self) -> Opening<'_> {
        Opening {
            keys: self.keys.as_ref().map(|k| &*k.0),
            max_decoded: self.max_decoded,
        }
    }

    /// Encodes an object with these transforms (the current key fetched once).
    pub fn encode<'a, I>(&self, header: &Header, segments: I) -> Result<EncodedObject, FormatError>
    where
        I: IntoIterator<Item = (u64, &'a [Bytes])>,
    {
        let key = match &self.keys {
            Some(keys) => Some(keys.0.current().map_err(|e| FormatError::NoCurrentKey {
                reason: e.to_string(),
            })?),
            None => None,
        };
        let sealing = Sealing {
            compression: self.compression,
            key: key.as_ref(),
            cipher: self.cipher,
        };
        // One draw from the generator per object, not per segment.
        let mut nonces: Option<ObjectNonces> = None;
        let mut next_nonce = || {
            let nonces = match &mut nonces {
                Some(n) => n,
                None => nonces.insert(ObjectNonces::new((self.nonces)()?)),
            };
            Ok(nonces.next_nonce())
        };
        // Without transforms this is `encode_object`'s zero-copy pass.
        encode_object_with(header, segments, &sealing, &mut next_nonce)
    }
}
