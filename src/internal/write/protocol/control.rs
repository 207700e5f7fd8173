//! Releases, acquires and the control snapshot of one epoch's write protocol (DESIGN.md
//! "Regions moving between nodes", "The record of who holds what"): the rules that say
//! which regions the epoch admits and what a release or an acquire waits for, beside
//! the sealing and acknowledging of `protocol` itself. Pure, as the protocol is: a
//! release or an acquire changes the holdings and puts a snapshot in the open batch,
//! and is answered through a [`ControlTicket`] once the object it waits for is
//! acknowledged.

use super::*;

/// What a release or an acquire waits for (DESIGN.md "Regions moving between nodes"):
/// it is answered once the object at `sequence` is acknowledged (its snapshot, or the
/// first object above the acquired last id; every earlier one is acknowledged with it,
/// and offsets never decrease, so a raise it carries is durable then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlTicket {
    /// The object that must be acknowledged.
    pub sequence: u64,
}

impl<W, C: Chain> WriteProtocol<W, C> {
    /// The protocol with `holdings` (what the chain's last control snapshot records):
    /// its released regions are refused to appends.
    pub fn with_holdings(mut self, holdings: Holdings) -> Self {
        self.acknowledged_holdings = holdings.clone();
        self.holdings = holdings;
        self
    }

    /// The state the last acknowledged snapshot records: what a restart would read
    /// (releases and pieces still in flight are not in it).
    pub fn acknowledged_holdings(&self) -> &Holdings {
        &self.acknowledged_holdings
    }

    /// The regions released and the pieces held, as the next snapshot will record them.
    pub fn holdings(&self) -> &Holdings {
        &self.holdings
    }

    /// The largest id of `region` this epoch handed out or the chain holds: the open
    /// batch's, the objects in flight, then the chain's.
    pub fn last_id_of(&self, region: u64) -> Option<u64> {
        let next = self.epoch.position().next_sequence;
        if let Some(id) = self.batch.last_id(region, next) {
            return Some(id);
        }
        let in_flight = self.objects.values().rev();
        in_flight
            .filter_map(|f| f.sealed.last_id(region))
            .next()
            .or_else(|| self.chain.last_entry_id(region))
    }

    /// Releases `region` (DESIGN.md "Regions moving between nodes"): from now on every
    /// append of it is refused ([`Error::RegionReleased`]); a snapshot recording the
    /// release goes into the open batch, which is sealed and started now. Returns the
    /// region's last id in this log (`None`: it holds none) with
    /// the id the next owner acquires above ([`Released`]; [`id_bound`](Self::id_bound)),
    /// and what the release waits for: once that object is acknowledged, so is every
    /// earlier one, and the last id is the region's largest on the chain. A release
    /// asked again while the object recording it is in flight (a caller retrying after
    /// a timeout) waits for that same object, with the same last id: answered before,
    /// it would outrun its record, which an unknown outcome can still lose. A region
    /// this log holds nothing of (created here and moved before its first entry, or
    /// never here) is released all the same, with no last id: its late appends are
    /// refused as any released region's, which no new owner would catch up (that the
    /// region is the node's is the coordinator's to check). Refused, changing nothing,
    /// for the control region and a region whose release is recorded on the chain
    /// already.
    pub fn release(&mut self, region: u64, now: Now) -> Result<(Released, ControlTicket)> {
        self.ensure_writing()?;
        node_region(region)?;
        if let Some((last_id, ticket)) = self.release_in_flight(region) {
            let released = Released {
                last_id,
                acquire_above: self.id_bound().max(last_id.unwrap_or(0)),
                sequence: Some(ticket.sequence),
            };
            return Ok((released, ticket));
        }
        self.holdings.refuse(region, || self.id_bound())?;
        let last_id = self.last_id_of(region);
        let mut holdings = self.holdings.clone();
        holdings.release(region, last_id)?;
        let ticket = self.put_snapshot(&holdings, true, now)?;
        self.holdings = holdings;
        let released = Released {
            last_id,
            acquire_above: self.id_bound(),
            sequence: Some(ticket.sequence),
        };
        Ok((released, ticket))
    }

    /// The release of `region` not yet recorded on the chain, if one is in flight: its
    /// last id and the first snapshot in flight from which every later one records it
    /// (an earlier one may record an earlier release, since taken back).
    fn release_in_flight(&self, region: u64) -> Option<(Option<u64>, ControlTicket)> {
        let last_id = self.holdings.released(region)?;
        let sequence = self.recorded_in_flight_from(|h| h.released(region) == Some(last_id))?;
        let all_in_flight = self.snapshots_in_flight.keys().next() == Some(&sequence);
        if all_in_flight && self.acknowledged_holdings.released(region) == Some(last_id) {
            // Recorded already; the snapshots in flight only copy it forward.
            return None;
        }
        Some((last_id, ControlTicket { sequence }))
    }

    /// The first snapshot in flight from which every later one records `region` as the
    /// holdings do now (its release, its pieces), when the chain does not record it so
    /// yet: what an acquire asked again waits for besides its ids. Answered before it,
    /// a repeat would outrun the first acquire's take-back or pieces, which an unknown
    /// outcome can still lose.
    fn region_record_in_flight(&self, region: u64) -> Option<u64> {
        let state = |h: &Holdings| (h.released(region), h.pieces_of(region));
        let current = state(&self.holdings);
        if state(&self.acknowledged_holdings) == current {
            return None;
        }
        self.recorded_in_flight_from(|h| state(h) == current)
            .or_else(|| self.snapshots_in_flight.keys().next_back().copied())
    }

    /// The first snapshot in flight from which every later one `records` what a
    /// release or an acquire changed (an earlier one may record an earlier state, since
    /// changed back); `None` when the newest does not.
    fn recorded_in_flight_from(&self, records: impl Fn(&Holdings) -> bool) -> Option<u64> {
        let mut first = None;
        for (sequence, holdings) in self.snapshots_in_flight.iter().rev() {
            if !records(holdings) {
                break;
            }
            first = Some(*sequence);
        }
        first
    }

    /// An id above every id this epoch handed out, and every id its instance handed out
    /// before (a new epoch opens above those): the last position of the open batch's
    /// id base. A released region's ids end below it for good, since it admits no more.
    pub fn id_bound(&self) -> u64 {
        let base = self.epoch.position().next_header().id_base();
        crate::format::entry_id(base, crate::format::MAX_SEGMENT_ENTRIES - 1)
    }

    /// Acquires `region`, whose ids on its earlier owner end at `last_id`: raises this
    /// log's ids above it ([`raise_ids_above`](Self::raise_ids_above)) and, if this log
    /// had released the region, takes it back with a new snapshot. Returns what the
    /// acquire waits for. Refused, changing nothing, for the control region and when
    /// this log released the region at an id above `last_id` (its own piece would come
    /// before the earlier owner's). A region this log holds (not released) with ids
    /// above `last_id` is not refused: those ids are the acquire's own effect, asked
    /// again after it failed `MayBeDurable` with its raise object landed (appends of
    /// the region may ride in it), and the answer waits for them to be durable as the
    /// first answer would have.
    pub fn acquire(&mut self, region: u64, last_id: u64, now: Now) -> Result<ControlTicket> {
        self.acquire_with(region, last_id, &[], now)
    }

    /// [`acquire`](Self::acquire), recording `pieces`, the region's pieces in the logs
    /// of its owners before that are not flushed yet (a replay reads them, in id order,
    /// before this log's own entries), in the snapshot the raise's object carries. A
    /// piece that breaks the snapshot's rules (an empty or too long prefix, an overlap
    /// with one recorded, ids above `last_id`) is refused, changing nothing.
    pub fn acquire_with(
        &mut self,
        region: u64,
        last_id: u64,
        pieces: &[Piece],
        now: Now,
    ) -> Result<ControlTicket> {
        self.ensure_writing()?;
        node_region(region)?;
        let released_here = self.holdings.released(region).is_some();
        let own = self.last_id_of(region).filter(|own| *own > last_id);
        if let Some(own) = own.filter(|_| released_here) {
            return Err(Error::AcquireBelowOwnIds {
                region,
                last_id,
                own,
            });
        }
        let mut holdings = self.holdings.clone();
        let mut changed = holdings.take_back(region);
        for piece in pieces {
            if piece.last_id > last_id {
                return Err(Error::Config {
                    field: "piece",
                    reason: format!(
                        "a piece ending at id {} is above the acquired last id {last_id}",
                        piece.last_id
                    ),
                });
            }
            changed |= holdings
                .add_piece(region, piece)
                .map_err(|e| Error::Config {
                    field: "piece",
                    reason: e.to_string(),
                })?;
        }
        let before = self.epoch.position().id_offset;
        let raised = self.raise_ids_above(last_id, now)? > before;
        // The acquire waits for the first object whose id base is above `last_id`'s:
        // ids handed out above it are not durable until then (objects in flight may
        // never land, and a reopen counts from the chain's end), and a raise is
        // durable with its object.
        let base = crate::format::entry_sequence(last_id);
        let covered = self
            .acknowledged_sequence
            .saturating_add(self.acknowledged_id_offset)
            > base;
        let above_in_flight = self
            .objects
            .iter()
            .find(|(_, f)| f.sealed.header().id_base() > base)
            .map(|(s, _)| *s);
        // Asked again, an acquire changes nothing, but what the first one changed (a
        // take-back, its pieces) may still be in flight: it waits for that too.
        let recorded_at = self.region_record_in_flight(region).unwrap_or(0);
        let sequence = if changed {
            // The snapshot's object, the open batch: above `last_id` too.
            let sequence = self.put_snapshot(&holdings, true, now)?.sequence;
            self.holdings = holdings;
            sequence
        } else if covered {
            self.acknowledged_sequence
        } else if let Some(sequence) = above_in_flight {
            sequence
        } else {
            // The open batch, sealed and started at once: the raise's object (sealed
            // even empty), or one made non-empty by a copy of the snapshot.
            if self.batch.is_empty() && !raised {
                let current = self.holdings.clone();
                self.put_snapshot(&current, true, now)?;
            }
            self.batch_urgent = true;
            self.epoch.position().next_sequence
        }
        .max(recorded_at);
        Ok(ControlTicket { sequence })
    }

    /// Whether what `ticket` waits for is acknowledged.
    pub fn ticket_acknowledged(&self, ticket: &ControlTicket) -> bool {
        self.acknowledged_sequence >= ticket.sequence
    }

    /// `region` is flushed through `id` by this log's node: its earlier pieces at or
    /// below `id` are forgotten, with a new snapshot in the open batch (written at its
    /// usual time). Nothing to do when none is, or when the epoch no longer writes.
    pub fn flushed(&mut self, region: u64, id: u64, now: Now) -> Result<()> {
        if self.ensure_writing().is_err() {
            return Ok(());
        }
        let mut holdings = self.holdings.clone();
        if holdings.drop_pieces_through(region, id) {
            self.put_snapshot(&holdings, false, now)?;
            self.holdings = holdings;
        }
        Ok(())
    }

    /// Puts a snapshot of `holdings` in the open batch (sealing the batch first if it
    /// does not fit), to be sealed and started now if `urgent`; returns the ticket of
    /// the object it will be.
    fn put_snapshot(
        &mut self,
        holdings: &Holdings,
        urgent: bool,
        now: Now,
    ) -> Result<ControlTicket> {
        let snapshot = holdings.snapshot().map_err(|e| Error::EncodeFailed {
            what: "a control snapshot".into(),
            reason: e.to_string(),
        })?;
        if let Err(snapshot) = self.batch.put_control(snapshot) {
            self.seal(SealReason::Full, now)?;
            if self.batch.put_control(snapshot).is_err() {
                return Err(Error::EncodeFailed {
                    what: "a control snapshot".into(),
                    reason: "larger than max_batch_bytes allows an object".into(),
                });
            }
        }
        if self.batch_opened.is_none() {
            self.batch_opened = Some(now.at);
        }
        self.batch_urgent |= urgent;
        let next = self.epoch.position().next_sequence;
        self.snapshots_in_flight.insert(next, holdings.clone());
        Ok(ControlTicket {
            sequence: self.epoch.position().next_sequence,
        })
    }
}
