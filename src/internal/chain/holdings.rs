//! What this log holds of regions that moved (DESIGN.md "Regions moving between nodes"):
//! the regions it released, each with its last id here, and the earlier pieces of
//! regions it acquired. The last control snapshot on the chain is this state
//! (FORMAT.md "Control entries"); the writer keeps it in memory, refuses appends to a
//! released region, and writes a fresh snapshot whenever it changes. Pure: no I/O.
//!
//! Bounded by the regions that moved away and did not come back, not by history.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::error::{Error, Released};
use crate::format::control::{decode_ownership, encode_ownership, Holding, CONTROL_REGION};
use crate::format::FormatError;

use super::catalog::Catalog;

/// An earlier piece of a region this log acquired: ids `first_id..=last_id` of it are in
/// the log under `prefix` (the owner before), which a replay of the region reads before
/// this log's own entries, until this log's node flushed past them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The prefix of the log that holds it.
    pub prefix: String,
    /// Its first id.
    pub first_id: u64,
    /// Its last id (the release's last id there).
    pub last_id: u64,
}

/// What a live log holds of one region: its piece on the chain, and whether it released
/// the region (for a node to reconcile its log with its routes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionHolding {
    /// The region.
    pub region: u64,
    /// Its first and last ids on the live chain (`None`: no entry of it is live, all
    /// reclaimed or never written).
    pub ids: Option<(u64, u64)>,
    /// Its release, if this log released it (its next owner acquired above
    /// `acquire_above`, or will).
    pub released: Option<Released>,
    /// The earlier pieces recorded when this log acquired it, by first id: a replay
    /// reads them (from their prefixes) before this log's own entries.
    pub pieces: Vec<Piece>,
}

/// The released regions and earlier pieces this log holds (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Released regions: their last id in this log, or `None` when it held none.
    released: BTreeMap<u64, Option<u64>>,
    /// Earlier pieces of acquired regions (`Holding::EarlierPiece`), in snapshot order.
    pieces: Vec<Holding>,
}

/// Whether a node may name `region`: every region but the control region (`2^64 - 1`,
/// the log's own), which is refused with [`Error::ReservedRegion`] to appends,
/// releases, acquires and obsoletes alike.
pub fn node_region(region: u64) -> Result<(), Error> {
    if region == CONTROL_REGION {
        return Err(Error::ReservedRegion { region });
    }
    Ok(())
}

/// A released holding's last id on the page: `0` stands for "none" (no entry id is 0:
/// sequences start at 1).
const NO_ENTRY: u64 = 0;

impl Holdings {
    /// Nothing released, no piece: a log that never moved a region.
    pub fn new() -> Self {
        Holdings::default()
    }

    /// The state a snapshot's bytes record (checked: [`decode_ownership`]).
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self, FormatError> {
        let mut holdings = Holdings::new();
        for holding in decode_ownership(bytes)? {
            match holding {
                Holding::Released { region, last_id } => {
                    let last = (last_id != NO_ENTRY).then_some(last_id);
                    holdings.released.insert(region, last);
                }
                piece @ Holding::EarlierPiece { .. } => holdings.pieces.push(piece),
            }
        }
        Ok(holdings)
    }

    /// The snapshot of this state, as a control entry's payload.
    pub fn snapshot(&self) -> Result<Bytes, FormatError> {
        let mut all: Vec<Holding> = self
            .released
            .iter()
            .map(|(region, last)| Holding::Released {
                region: *region,
                last_id: last.unwrap_or(NO_ENTRY),
            })
            .chain(self.pieces.iter().cloned())
            .collect();
        // The snapshot's order (by region, a release before pieces), not the enum's.
        all.sort_by_key(Holding::key);
        encode_ownership(&all)
    }

    /// Whether `region` was released, and if so its last id here (`Some(None)`: it was
    /// released holding no entry here).
    pub fn released(&self, region: u64) -> Option<Option<u64>> {
        self.released.get(&region).copied()
    }

    /// The error an append to a released `region` gets, if it was released; it names
    /// `acquire_above()`, an id above every one this log handed out (the writer's
    /// bound, asked for only then).
    pub fn refuse(&self, region: u64, acquire_above: impl FnOnce() -> u64) -> Result<(), Error> {
        match self.released(region) {
            Some(last_id) => Err(Error::RegionReleased {
                region,
                released: Released {
                    last_id,
                    acquire_above: acquire_above().max(last_id.unwrap_or(0)),
                    sequence: None,
                },
            }),
            None => Ok(()),
        }
    }

    /// Records `region` released with `last_id`; refused if it already was.
    pub fn release(&mut self, region: u64, last_id: Option<u64>) -> Result<(), Error> {
        self.refuse(region, || 0)?;
        self.released.insert(region, last_id);
        Ok(())
    }

    /// Takes `region` back (an acquire): returns whether it had been released.
    pub fn take_back(&mut self, region: u64) -> bool {
        self.released.remove(&region).is_some()
    }

    /// Records an earlier piece of `region` (an acquire from its owner before); one
    /// recorded already changes nothing. Returns whether it was added.
    pub fn add_piece(&mut self, region: u64, piece: &Piece) -> Result<bool, FormatError> {
        let holding = Holding::EarlierPiece {
            region,
            prefix: piece.prefix.clone(),
            first_id: piece.first_id,
            last_id: piece.last_id,
        };
        if self.pieces.contains(&holding) {
            return Ok(false);
        }
        let mut pieces = self.pieces.clone();
        pieces.push(holding);
        pieces.sort_by_key(Holding::key);
        // Checked as a snapshot would be (prefix length, order, no overlap).
        encode_ownership(&pieces)?;
        self.pieces = pieces;
        Ok(true)
    }

    /// Forgets `region`'s earlier pieces whose ids are all at or below `id` (its node
    /// flushed past them). Returns whether any was forgotten.
    pub fn drop_pieces_through(&mut self, region: u64, id: u64) -> bool {
        let before = self.pieces.len();
        self.pieces.retain(|h| match h {
            Holding::EarlierPiece {
                region: r, last_id, ..
            } => *r != region || *last_id > id,
            Holding::Released { .. } => true,
        });
        self.pieces.len() != before
    }

    /// `region`'s earlier pieces, by first id.
    pub fn pieces_of(&self, region: u64) -> Vec<Piece> {
        self.pieces
            .iter()
            .filter_map(|h| match h {
                Holding::EarlierPiece {
                    region: r,
                    prefix,
                    first_id,
                    last_id,
                } if *r == region => Some(Piece {
                    prefix: prefix.clone(),
                    first_id: *first_id,
                    last_id: *last_id,
                }),
                _ => None,
            })
            .collect()
    }

    /// The regions with earlier pieces, in region order, each once.
    pub fn regions_with_pieces(&self) -> Vec<u64> {
        let mut regions: Vec<u64> = self.pieces.iter().map(Holding::region).collect();
        regions.dedup();
        regions
    }

    /// The regions released, with their last ids here, in region order.
    pub fn released_regions(&self) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
        self.released.iter().map(|(r, l)| (*r, *l))
    }

    /// Whether nothing is held: no release, no piece.
    pub fn is_empty(&self) -> bool {
        self.released.is_empty() && self.pieces.is_empty()
    }

    /// What `catalog` (the live chain) and these holdings say of `region`: its ids on
    /// the chain, its release (whose next owner acquires above `acquire_above`, or
    /// its last id if higher), its earlier pieces.
    pub fn region_holding(
        &self,
        catalog: &Catalog,
        region: u64,
        acquire_above: u64,
    ) -> RegionHolding {
        RegionHolding {
            region,
            ids: catalog.entry_ids(region),
            released: self.released(region).map(|last_id| Released {
                last_id,
                acquire_above: acquire_above.max(last_id.unwrap_or(0)),
                sequence: None,
            }),
            pieces: self.pieces_of(region),
        }
    }

    /// [`region_holding`](Self::region_holding) of every region the chain holds
    /// entries of, released or with earlier pieces, in region order (the control
    /// region left out).
    pub fn region_holdings(&self, catalog: &Catalog, acquire_above: u64) -> Vec<RegionHolding> {
        let mut regions: BTreeSet<u64> =
            catalog.regions().filter(|r| *r != CONTROL_REGION).collect();
        regions.extend(self.released_regions().map(|(r, _)| r));
        regions.extend(self.regions_with_pieces());
        regions
            .into_iter()
            .map(|region| self.region_holding(catalog, region, acquire_above))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_brings_back_the_releases_it_recorded() {
        let mut h = Holdings::new();
        h.release(9, Some(5 << 20)).unwrap();
        h.release(3, None).unwrap();
        let bytes = h.snapshot().unwrap();
        let back = Holdings::from_snapshot(&bytes).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.released(9), Some(Some(5 << 20)));
        assert_eq!(back.released(3), Some(None));
        assert_eq!(back.released(4), None);
        assert_eq!(
            back.released_regions().collect::<Vec<_>>(),
            vec![(3, None), (9, Some(5 << 20))]
        );
    }

    /// A snapshot holding releases and earlier pieces of several regions is in the
    /// snapshot's order (by region, a release before pieces), and reads back whole.
    #[test]
    fn releases_and_pieces_of_several_regions_make_one_snapshot() {
        let mut h = Holdings::new();
        h.release(9, Some(5 << 20)).unwrap();
        h.pieces.push(Holding::EarlierPiece {
            region: 3,
            prefix: "node-a".into(),
            first_id: 1 << 20,
            last_id: 2 << 20,
        });
        let bytes = h.snapshot().expect("in order");
        assert_eq!(Holdings::from_snapshot(&bytes).unwrap(), h);
    }

    /// Pieces are recorded once, listed by region, refused when they break the
    /// snapshot's rules (an overlap), and forgotten once flushed past.
    #[test]
    fn earlier_pieces_are_recorded_once_and_forgotten_when_flushed_past() {
        let mut h = Holdings::new();
        let piece = |first: u64, last: u64| Piece {
            prefix: "node-a".into(),
            first_id: first << 20,
            last_id: last << 20,
        };
        assert!(h.add_piece(3, &piece(1, 2)).unwrap());
        assert!(!h.add_piece(3, &piece(1, 2)).unwrap(), "once");
        assert!(h.add_piece(3, &piece(5, 6)).unwrap());
        assert!(h.add_piece(3, &piece(2, 4)).is_err(), "an overlap");
        assert!(h.add_piece(1, &piece(1, 1)).unwrap());
        assert_eq!(h.pieces_of(3), vec![piece(1, 2), piece(5, 6)]);
        assert_eq!(h.regions_with_pieces(), vec![1, 3]);
        let back = Holdings::from_snapshot(&h.snapshot().unwrap()).unwrap();
        assert_eq!(back, h);
        assert!(
            !h.drop_pieces_through(3, (2 << 20) - 1),
            "not past its last id"
        );
        assert!(h.drop_pieces_through(3, 2 << 20));
        assert_eq!(h.pieces_of(3), vec![piece(5, 6)]);
        assert_eq!(h.pieces_of(1), vec![piece(1, 1)]);
    }

    #[test]
    fn a_second_release_is_refused_and_changes_nothing() {
        let mut h = Holdings::new();
        h.release(9, Some(7)).unwrap();
        let err = h.release(9, Some(8)).unwrap_err();
        assert!(matches!(
            err,
            Error::RegionReleased {
                region: 9,
                released: Released {
                    last_id: Some(7),
                    acquire_above: 7,
                    sequence: None,
                }
            }
        ));
        assert_eq!(h.released(9), Some(Some(7)));
    }

    #[test]
    fn taking_a_region_back_ends_its_release() {
        let mut h = Holdings::new();
        h.release(9, Some(7)).unwrap();
        assert!(h.take_back(9));
        assert!(!h.take_back(9));
        assert!(h.refuse(9, || 100).is_ok());
        assert!(h.is_empty());
        let empty = Holdings::from_snapshot(&h.snapshot().unwrap()).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn a_damaged_snapshot_is_an_error() {
        let mut h = Holdings::new();
        h.release(9, Some(7)).unwrap();
        let mut bytes = h.snapshot().unwrap().to_vec();
        bytes[20] ^= 1;
        assert!(Holdings::from_snapshot(&bytes).is_err());
    }
}
