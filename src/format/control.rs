//! The control region's entries (DESIGN.md "Regions moving between nodes", "The record
//! of who holds what"; FORMAT.md "Control entries"): each entry is a whole snapshot of
//! what this log holds of regions that moved, the released regions with their last ids
//! and the earlier pieces of acquired regions that other prefixes hold. The last
//! snapshot on the chain is the state, so one entry is all a recovery reads. Pure: no
//! I/O. Not written by anything yet: release and acquire, which will, come next.

use bytes::{BufMut, Bytes, BytesMut};

use super::decode::{check_crc, Cursor};
use super::layout::FormatError;

/// The reserved region whose entries are control snapshots; appends to it are refused.
pub const CONTROL_REGION: u64 = u64::MAX;
/// ASCII `GTWALCTL`, the first 8 bytes of a control snapshot.
pub const CONTROL_MAGIC: [u8; 8] = *b"GTWALCTL";
/// The control snapshot's layout version.
pub const CONTROL_VERSION: u16 = 1;
/// Bytes of a snapshot around its holdings: magic, version, reserved, count, CRC.
pub const CONTROL_FIXED_LEN: usize = 8 + 2 + 2 + 4 + 4;
/// Bytes of a holding before its prefix.
pub const HOLDING_FIXED_LEN: usize = 32;
/// The longest prefix an earlier piece names.
pub const MAX_PIECE_PREFIX_LEN: usize = 1024;

const KIND_RELEASED: u8 = 1;
const KIND_EARLIER_PIECE: u8 = 2;

/// One thing a log holds of a region that moved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holding {
    /// The region was released: its entries in this log end at `last_id`, and this log
    /// admits no more of it until it acquires it again.
    Released {
        /// The region.
        region: u64,
        /// Its largest id in this log.
        last_id: u64,
    },
    /// An earlier piece of a region this log acquired: ids `first_id..=last_id` of it are
    /// in the log under `prefix`, which a replay reads before this log's own.
    EarlierPiece {
        /// The region.
        region: u64,
        /// The prefix of the log that holds the piece.
        prefix: String,
        /// The piece's first id.
        first_id: u64,
        /// The piece's last id.
        last_id: u64,
    },
}

impl Holding {
    /// The region it is about.
    pub fn region(&self) -> u64 {
        match self {
            Holding::Released { region, .. } | Holding::EarlierPiece { region, .. } => *region,
        }
    }

    /// The order snapshots keep: by region, a release before pieces, pieces by first id.
    pub fn key(&self) -> (u64, u8, u64) {
        match self {
            Holding::Released { region, .. } => (*region, KIND_RELEASED, 0),
            Holding::EarlierPiece {
                region, first_id, ..
            } => (*region, KIND_EARLIER_PIECE, *first_id),
        }
    }
}

fn bad(reason: &'static str) -> FormatError {
    FormatError::Control { reason }
}

/// Checks the rules of one holding, and that it follows `previous`.
fn check(holding: &Holding, previous: Option<&Holding>) -> Result<(), FormatError> {
    if holding.region() == CONTROL_REGION {
        return Err(bad("a holding of the control region itself"));
    }
    if let Holding::EarlierPiece {
        prefix,
        first_id,
        last_id,
        ..
    } = holding
    {
        if prefix.is_empty() || prefix.len() > MAX_PIECE_PREFIX_LEN {
            return Err(bad("a piece's prefix is 1 to 1024 bytes"));
        }
        if first_id > last_id {
            return Err(bad("a piece's first id is above its last"));
        }
    }
    if let Some(previous) = previous {
        let overlaps = match (previous, holding) {
            (
                Holding::EarlierPiece {
                    region: r0,
                    last_id: l0,
                    ..
                },
                Holding::EarlierPiece {
                    region: r1,
                    first_id: f1,
                    ..
                },
            ) => r0 == r1 && f1 <= l0,
            _ => false,
        };
        if previous.key() >= holding.key() || overlaps {
            return Err(bad(
                "holdings ascend by region, a release before pieces, pieces by id, apart",
            ));
        }
    }
    Ok(())
}

/// Encodes a snapshot of `holdings`, which must be in snapshot order (by region, a
/// release before pieces, pieces by first id and not overlapping).
pub fn encode_ownership(holdings: &[Holding]) -> Result<Bytes, FormatError> {
    let count = u32::try_from(holdings.len()).map_err(|_| bad("more than 2^32 holdings"))?;
    let mut out = BytesMut::with_capacity(CONTROL_FIXED_LEN + holdings.len() * HOLDING_FIXED_LEN);
    out.put_slice(&CONTROL_MAGIC);
    out.put_u16_le(CONTROL_VERSION);
    out.put_u16_le(0);
    out.put_u32_le(count);
    let mut previous = None;
    for holding in holdings {
        check(holding, previous)?;
        previous = Some(holding);
        match holding {
            Holding::Released { region, last_id } => {
                out.put_u64_le(*region);
                out.put_u8(KIND_RELEASED);
                out.put_u8(0);
                out.put_u16_le(0);
                out.put_u32_le(0);
                out.put_u64_le(0);
                out.put_u64_le(*last_id);
            }
            Holding::EarlierPiece {
                region,
                prefix,
                first_id,
                last_id,
            } => {
                out.put_u64_le(*region);
                out.put_u8(KIND_EARLIER_PIECE);
                out.put_u8(0);
                // Checked above: at most 1024 bytes.
                out.put_u16_le(prefix.len() as u16);
                out.put_u32_le(0);
                out.put_u64_le(*first_id);
                out.put_u64_le(*last_id);
                out.put_slice(prefix.as_bytes());
            }
        }
    }
    let crc = crc32fast::hash(&out);
    out.put_u32_le(crc);
    Ok(out.freeze())
}

/// Decodes and verifies a snapshot (one control entry's payload, exactly): its CRC
/// first, then every rule; never trusts a count or length before checking it against
/// the bytes.
pub fn decode_ownership(bytes: &[u8]) -> Result<Vec<Holding>, FormatError> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .filter(|n| *n + 4 >= CONTROL_FIXED_LEN)
        .ok_or(FormatError::Truncated {
            part: "control snapshot",
            needed: CONTROL_FIXED_LEN as u64,
            got: bytes.len() as u64,
        })?;
    let (body, crc) = bytes.split_at(body_len);
    let stored = crc
        .first_chunk::<4>()
        .map(|c| u32::from_le_bytes(*c))
        .unwrap_or_default();
    check_crc("control snapshot", stored, body)?;
    let mut c = Cursor::new(body, "control snapshot", CONTROL_FIXED_LEN - 4)?;
    if c.take::<8>()? != CONTROL_MAGIC {
        return Err(FormatError::BadMagic {
            part: "control snapshot",
        });
    }
    if c.u16()? != CONTROL_VERSION {
        return Err(bad("an unknown control snapshot version"));
    }
    if c.u16()? != 0 {
        return Err(FormatError::ReservedNotZero("control snapshot"));
    }
    let count = c.u32()? as usize;
    // Each holding takes at least its fixed part: a count the bytes cannot hold is
    // refused before anything is allocated for it.
    if count > body.len() / HOLDING_FIXED_LEN {
        return Err(bad("more holdings than the snapshot has bytes for"));
    }
    let mut holdings: Vec<Holding> = Vec::with_capacity(count);
    for _ in 0..count {
        let region = c.u64()?;
        let kind = c.u8()?;
        let reserved = c.u8()?;
        let prefix_len = usize::from(c.u16()?);
        if reserved != 0 || c.u32()? != 0 {
            return Err(FormatError::ReservedNotZero("control holding"));
        }
        let first_id = c.u64()?;
        let last_id = c.u64()?;
        let holding = match kind {
            KIND_RELEASED if prefix_len == 0 && first_id == 0 => {
                Holding::Released { region, last_id }
            }
            KIND_RELEASED => return Err(bad("a release names no prefix and no first id")),
            KIND_EARLIER_PIECE => {
                if prefix_len > MAX_PIECE_PREFIX_LEN {
                    return Err(bad("a piece's prefix is 1 to 1024 bytes"));
                }
                let prefix = std::str::from_utf8(c.bytes(prefix_len)?)
                    .map_err(|_| bad("a piece's prefix is not UTF-8"))?
                    .to_string();
                Holding::EarlierPiece {
                    region,
                    prefix,
                    first_id,
                    last_id,
                }
            }
            _ => return Err(bad("an unknown holding kind")),
        };
        check(&holding, holdings.last())?;
        holdings.push(holding);
    }
    if !c.is_empty() {
        return Err(bad("bytes after the last holding"));
    }
    Ok(holdings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(region: u64, prefix: &str, first_id: u64, last_id: u64) -> Holding {
        Holding::EarlierPiece {
            region,
            prefix: prefix.into(),
            first_id,
            last_id,
        }
    }

    /// FORMAT.md's control snapshot vector, computed from the page alone (Python's
    /// `struct` and `zlib.crc32`).
    const VECTOR: &str = "475457414c43544c0100000002000000070000000000000001000000000000000000000000000000ffff0f0000000000090000000000000002000600000000000000a000000000000500b000000000006e6f64652d61fdd7e841";

    #[test]
    fn the_vector_encodes_and_decodes() {
        let holdings = vec![
            Holding::Released {
                region: 7,
                last_id: (1 << 20) - 1,
            },
            piece(9, "node-a", 10 << 20, (11 << 20) + 5),
        ];
        let bytes = encode_ownership(&holdings).expect("encodes");
        assert_eq!(hex(&bytes), VECTOR);
        assert_eq!(decode_ownership(&bytes).expect("decodes"), holdings);
        assert_eq!(
            decode_ownership(&encode_ownership(&[]).expect("empty")).expect("decodes"),
            vec![]
        );
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn holdings_out_of_order_or_overlapping_are_refused() {
        let released = |region| Holding::Released { region, last_id: 1 };
        for holdings in [
            vec![released(9), released(7)],
            vec![released(7), released(7)],
            vec![piece(7, "a", 0, 9), released(7)],
            vec![piece(7, "a", 5, 9), piece(7, "b", 9, 12)],
            vec![piece(7, "a", 9, 5)],
            vec![piece(7, "", 0, 5)],
            vec![released(CONTROL_REGION)],
        ] {
            assert!(
                matches!(
                    encode_ownership(&holdings),
                    Err(FormatError::Control { .. })
                ),
                "{holdings:?}"
            );
        }
    }

    /// Every cut and every flipped bit of the vector is refused, never a panic.
    #[test]
    fn damage_is_refused() {
        let bytes = encode_ownership(&[piece(9, "node-a", 3, 4)]).expect("encodes");
        for len in 0..bytes.len() {
            assert!(decode_ownership(&bytes[..len]).is_err(), "cut at {len}");
        }
        for at in 0..bytes.len() * 8 {
            let mut b = bytes.to_vec();
            b[at / 8] ^= 1 << (at % 8);
            assert!(decode_ownership(&b).is_err(), "bit {at}");
        }
    }

    /// A count the bytes cannot hold is refused before anything is allocated.
    #[test]
    fn a_huge_count_is_refused() {
        let mut b = encode_ownership(&[]).expect("encodes").to_vec();
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let len = b.len() - 4;
        let crc = crc32fast::hash(&b[..len]);
        b[len..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode_ownership(&b),
            Err(FormatError::Control { .. })
        ));
    }
}
