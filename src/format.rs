//! The bytes of one WAL object, versions 1 to 4 (`docs/FORMAT.md` is normative).
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
//! segment is transformed. Version 3 adds an id offset to a 64-byte header
//! ([`Header::id_offset`]): entry ids count from the sequence plus it. Version 4 is a
//! closed opening object ([`Header::closed`]): version 3's header with the closed flag,
//! and no segments. Readers read all four.
//!
//! Integers are little-endian; CRCs are CRC32 (IEEE). This module is pure: no I/O, no
//! async. Encoding is deterministic (the identical-retry rule of the writer compares
//! bytes) and makes one pass over the payloads: segment CRCs are computed once and
//! combined into the object CRC, and payloads are handed on as [`Bytes`](bytes::Bytes) chunks, never
//! copied. Decoding never trusts a length or count before checking it against the
//! object's size: damaged input yields a [`FormatError`], never a panic or a large
//! allocation.
//!
//! Damage is told apart by part (FORMAT.md, "What a reader verifies"): a header, footer
//! or trailer that fails makes the object unusable, while a segment that fails its own
//! CRC damages only its region. [`check_object`] checks a whole object that way, as
//! recovery does for an object it reads whole: damaged segments come back as
//! [`SegmentDamage`], not as an error. [`decode_object`] and [`check_object_crc`] check
//!
//! The module's files, each one idea: `layout` (the constants, ids and parts, with
//! [`FormatError`]), `encode` (an object from its segments), `decode` (the checks and
//! decoders of every part), `envelope` (version 2's transformed segments: sealing
//! and opening one segment with the knobs and keys of [`crate::transform`]) and
//! `control` (the snapshots of what a log holds of regions that moved). Nothing
//! here imports anything of the crate but `transform`.

// Hidden until release and acquire write it: the layout may still change.
#[doc(hidden)]
pub mod control;
mod decode;
mod encode;
mod envelope;
mod layout;

pub use decode::*;
pub use encode::*;
pub use envelope::*;
pub use layout::*;

#[cfg(test)]
mod tests {
    use bytes::Bytes;

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
                closed: false,
                id_offset: 0,
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
                closed: false,
                id_offset: 0,
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
                closed: false,
                id_offset: 0,
            },
            std::iter::empty(),
        )
        .unwrap();
        assert_eq!(hex(&claim.to_bytes()), "475457414c4f424a0100010004000000000000000600000000000000020000000000000002000000000000000000000000000000680a97af0000000000000000475457414c54524c3800000000000000080000000000000069df2265bd6aad99");
    }
}
