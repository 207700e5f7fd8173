//! An open epoch: its write position and the rules every one of its creates follows.
//!
//! Both writers of the crate, the sequential front end ([`ObjectStoreLogStore`]) and the
//! actor runtime's writer, hold an [`Epoch`] and go through it for each object: the
//! terminal check (an epoch that ended writes nothing more), sealing at the next
//! sequence with the link of the previous object, and the link window (each create
//! starts within `reclaim_grace - max_create_duration` of the previous one, DESIGN.md
//! "Reclaiming space"). Pure: no I/O.
//!
//! [`ObjectStoreLogStore`]: crate::ObjectStoreLogStore

use std::time::Duration;

use crate::error::{Durability, EpochEndReason, Error, Result};
use crate::format::{Header, Link};
use crate::internal::store::codec::SegmentCodec;
use crate::internal::write::batch::{Batch, SealedObject};

/// The rule for every create: one that took longer than `max_create_duration`, from its
/// first attempt to its definite answer, is never acknowledged (DESIGN.md "Reclaiming
/// space"): it may have landed on a key a newer instance reclaimed meanwhile. Returns
/// how long it took when past the bound.
pub fn create_too_slow(started: Duration, now: Duration, max: Duration) -> Option<Duration> {
    let took = now.saturating_sub(started);
    (took > max).then_some(took)
}

/// Where an epoch writes next: its number, the next sequence, the link the next object
/// carries (the last object sealed, so every object links back through its epoch to the
/// opening object even while several are in flight), and the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePosition {
    /// This instance's epoch.
    pub epoch: u64,
    /// Sequence of the next object.
    pub next_sequence: u64,
    /// The link of the next object: the last object sealed in this epoch.
    pub link: Link,
    /// The floor the next object carries.
    pub floor: u64,
    /// The id offset the next object carries (its ids count from `next_sequence +
    /// id_offset`): never decreasing along the chain (DESIGN.md "Regions moving between
    /// nodes").
    pub id_offset: u64,
}

impl WritePosition {
    /// The header of the next object.
    pub fn next_header(&self) -> Header {
        Header {
            sequence: self.next_sequence,
            epoch: self.epoch,
            link: self.link,
            floor: self.floor,
            claim: false,
            closed: false,
            id_offset: self.id_offset,
        }
    }
}

/// Seals `batch` as the next object at `position` (its segments transformed by
/// `codec`), and moves `position` past it.
pub fn seal_next(
    position: &mut WritePosition,
    batch: &mut Batch,
    codec: &SegmentCodec,
) -> Result<SealedObject> {
    let sequence = position.next_sequence;
    let sealed = batch
        .seal(position.next_header(), codec)
        .map_err(|e| Error::EncodeFailed {
            what: format!("object {sequence}"),
            reason: e.to_string(),
        })?;
    position.link = Link {
        sequence,
        epoch: position.epoch,
    };
    position.next_sequence = sequence + 1;
    Ok(sealed)
}

/// An open epoch: where it writes next, when its last create started and, once it
/// ended, why.
#[derive(Debug, Clone)]
pub struct Epoch {
    position: WritePosition,
    codec: SegmentCodec,
    link_window: Duration,
    /// When the last create of the epoch (the opening object's, at first) started, on
    /// the creation clock.
    last_create_started: Duration,
    ended: Option<Error>,
}

impl Epoch {
    /// An epoch that starts at `position`, whose opening object's create started at
    /// `opening_started`; each create must start within `link_window` of the previous.
    pub fn new(
        position: WritePosition,
        opening_started: Duration,
        link_window: Duration,
        codec: SegmentCodec,
    ) -> Self {
        Epoch {
            position,
            codec,
            link_window,
            last_create_started: opening_started,
            ended: None,
        }
    }

    /// The write position.
    pub fn position(&self) -> WritePosition {
        self.position
    }

    /// This epoch's number.
    pub fn number(&self) -> u64 {
        self.position.epoch
    }

    /// `Ok` while the epoch is open; once it ended, its error as the refusal of an
    /// append that was never sent.
    pub fn ensure_open(&self) -> Result<()> {
        match &self.ended {
            None => Ok(()),
            Some(e) => Err(e.with_durability(Durability::NotWritten)),
        }
    }

    /// Why the epoch ended, if it did.
    pub fn ended(&self) -> Option<&Error> {
        self.ended.as_ref()
    }

    /// Ends the epoch with `error`; `false` if it had already ended.
    pub fn end(&mut self, error: Error) -> bool {
        if self.ended.is_some() {
            return false;
        }
        self.ended = Some(error);
        true
    }

    /// Seals `batch` as the next object, carrying `floor`.
    pub fn seal(&mut self, batch: &mut Batch, floor: u64) -> Result<SealedObject> {
        self.position.floor = floor;
        seal_next(&mut self.position, batch, &self.codec)
    }

    /// Whether the next object's ids (and so every later one's) are above `above_id`.
    pub fn ids_above(&self, above_id: u64) -> bool {
        self.position.next_header().id_base() > crate::format::entry_sequence(above_id)
    }

    /// Raises the id offset so that the next object's ids are above `above_id` (never
    /// lowers it); returns the offset. The caller seals the open batch first: its ids
    /// were handed out under the offset it was opened with.
    pub fn raise_ids_above(&mut self, above_id: u64) -> Result<u64> {
        if self.ids_above(above_id) {
            return Ok(self.position.id_offset);
        }
        let next = self.position.next_sequence;
        let base = crate::format::entry_sequence(above_id).saturating_add(1);
        let id_offset = base.saturating_sub(next);
        if next.saturating_add(id_offset) > crate::format::MAX_SEQUENCE {
            return Err(Error::IdsExhausted { above: above_id });
        }
        self.position.id_offset = id_offset;
        Ok(id_offset)
    }

    /// Restarts the clock from `now` (a caller that measures creates on another clock
    /// than the open did).
    pub fn restart_clock(&mut self, now: Duration) {
        self.last_create_started = now;
    }

    /// How long ago, at `now`, the last create started.
    pub fn since_last_create(&self, now: Duration) -> Duration {
        now.saturating_sub(self.last_create_started)
    }

    /// The link window: the create of `sequence` may start at `now` only within it of
    /// the previous create; past it, our next key may have been reclaimed by a newer
    /// instance and a create could land unfenced, so it is never sent and the epoch must
    /// end with the returned error (`NotWritten`). Within it, `now` becomes the last
    /// create's start.
    pub fn start_create(&mut self, sequence: u64, now: Duration) -> Result<()> {
        if self.since_last_create(now) > self.link_window {
            return Err(Error::EpochEnded {
                epoch: self.position.epoch,
                sequence,
                reason: EpochEndReason::PredecessorTooOld,
                durability: Durability::NotWritten,
            });
        }
        self.last_create_started = now;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::create_too_slow;

    /// The stop's bound: a create slower than `max_create_duration` is never
    /// acknowledged, one at the bound is.
    #[test]
    fn a_create_past_the_bound_is_too_slow() {
        let max = Duration::from_secs(60);
        let start = Duration::from_secs(5);
        assert_eq!(create_too_slow(start, start + max, max), None);
        let past = max + Duration::from_millis(1);
        assert_eq!(create_too_slow(start, start + past, max), Some(past));
    }
}
