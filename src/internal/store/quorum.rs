//! The rules of one log over several stores (DESIGN.md "One log over several stores"),
//! as pure functions: no I/O, no async. The replication layer that applies them sits
//! between the WAL's objects and the per-store transports (crate docs, "The map"); it is
//! not public yet: quorum writes stay out of the API until quorum recovery and the
//! explorer over N stores check them.
//!
//! - N stores (odd: 3 or 5), quorum `Q = N / 2 + 1`. A *copy* is the object at a key in
//!   one store; two copies are *the same value* when their headers agree on sequence,
//!   epoch and the claim flag and their trailers on the object CRC ([`ValueId`]). A value
//!   is *decided* when Q stores hold a copy of it; at most one value per key can ever be.
//! - A create's N answers combine into the single-store outcome table
//!   ([`write_verdict`]): durable at Q copies that are ours, never decidable once
//!   `N - Q + 1` stores hold another value, unknown otherwise.
//! - An open classifies each listed key ([`key_state`]): decided, to be completed from a
//!   copy when a store is unlisted, or undetermined; a hole above the chain end is
//!   *settled* once no value but a claim can be decided there ([`hole_settled`]); the
//!   opening object counts only where it was *created* ([`opening_won`]).

use std::time::Duration;

use bytes::Bytes;

use crate::format::{
    check_object_crc, decode_header, decode_trailer, FormatError, ObjectSummary, HEADER_LEN_V3,
    TRAILER_LEN,
};
use crate::internal::store::transport::CreateKind;

/// The quorum of `n` stores: a majority.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What makes two copies at one key the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId {
    /// The header's sequence.
    pub sequence: u64,
    /// The header's epoch.
    pub epoch: u64,
    /// The header's claim flag.
    pub claim: bool,
    /// The trailer's CRC of the whole object.
    pub object_crc: u32,
}

impl ValueId {
    /// The value a copy's verified summary names.
    pub fn of(summary: &ObjectSummary) -> Self {
        ValueId {
            sequence: summary.header.sequence,
            epoch: summary.header.epoch,
            claim: summary.header.claim,
            object_crc: summary.trailer.object_crc,
        }
    }
}

impl ValueId {
    /// The value of a whole copy, checked: its header, its trailer and the object CRC
    /// (a copy damaged at rest or in transit must not pass for another value).
    pub fn of_copy(bytes: &[u8]) -> Result<Self, FormatError> {
        let header = decode_header(bytes)?;
        let trailer = decode_trailer(bytes, bytes.len() as u64)?;
        check_object_crc(bytes, &trailer)?;
        Ok(ValueId {
            sequence: header.sequence,
            epoch: header.epoch,
            claim: header.claim,
            object_crc: trailer.object_crc,
        })
    }

    /// The value of an object being written, from its chunks (in order); `None` when
    /// they do not hold a well-formed object.
    pub fn of_chunks(chunks: &[Bytes]) -> Option<Self> {
        let len: usize = chunks.iter().map(Bytes::len).sum();
        // The longest header of any version: every object is longer.
        let mut head = Vec::with_capacity(HEADER_LEN_V3);
        for chunk in chunks {
            let want = HEADER_LEN_V3 - head.len();
            head.extend_from_slice(chunk.get(..want.min(chunk.len()))?);
            if head.len() == HEADER_LEN_V3 {
                break;
            }
        }
        let mut tail = Vec::with_capacity(TRAILER_LEN);
        for chunk in chunks.iter().rev() {
            let want = TRAILER_LEN - tail.len();
            let from = chunk.len().saturating_sub(want);
            let mut part = chunk.get(from..)?.to_vec();
            part.extend_from_slice(&tail);
            tail = part;
            if tail.len() == TRAILER_LEN {
                break;
            }
        }
        let header = decode_header(&head).ok()?;
        let trailer = decode_trailer(&tail, len as u64).ok()?;
        Some(ValueId {
            sequence: header.sequence,
            epoch: header.epoch,
            claim: header.claim,
            object_crc: trailer.object_crc,
        })
    }
}

/// Consecutive failed requests after which a store is taken for down.
pub const DOWN_AFTER_FAILURES: u32 = 3;
/// How often a store taken for down is probed with one request.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a store is worth a request: one whose recent requests all failed is skipped
/// (its answer counts as unknown) until a probe, one request every [`PROBE_INTERVAL`],
/// gets a definite answer; one with too many creates still unanswered (a store that
/// hangs rather than fails, before its timeouts tell) is skipped for new creates until
/// some answer. A dead store then costs one request a second, and a bounded number of
/// requests held, not one per object. Times are offsets on one monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct StoreHealth {
    failures: u32,
    next_probe: Duration,
    /// Creates sent and not answered yet.
    creates_outstanding: u32,
    /// Recent latency of definite answers (exponentially weighted), for choosing reads.
    latency: Option<Duration>,
}

impl StoreHealth {
    /// Whether the store is taken for down.
    pub fn is_down(&self) -> bool {
        self.failures >= DOWN_AFTER_FAILURES
    }

    /// Whether to send a request at `now`: always while up; while down, once per
    /// [`PROBE_INTERVAL`] (the probe).
    pub fn admit(&mut self, now: Duration) -> bool {
        if !self.is_down() {
            return true;
        }
        if now < self.next_probe {
            return false;
        }
        self.next_probe = now + PROBE_INTERVAL;
        true
    }

    /// Whether to send a create at `now`, with at most `max_outstanding` creates
    /// unanswered at once; counts it as outstanding when sent.
    pub fn admit_create(&mut self, now: Duration, max_outstanding: u32) -> bool {
        if self.creates_outstanding >= max_outstanding || !self.admit(now) {
            return false;
        }
        self.creates_outstanding += 1;
        true
    }

    /// Records a request's end at `now`: a definite answer (`Some(latency)`) brings the
    /// store up; a failure or timeout (`None`) counts towards taking it down.
    pub fn answered(&mut self, now: Duration, latency: Option<Duration>) {
        match latency {
            Some(took) => {
                self.failures = 0;
                self.record_latency(took);
            }
            None => {
                self.failures = self.failures.saturating_add(1);
                if self.failures == DOWN_AFTER_FAILURES {
                    self.next_probe = now + PROBE_INTERVAL;
                }
            }
        }
    }

    /// Records a create's end at `now` (see [`answered`](Self::answered)).
    pub fn create_answered(&mut self, now: Duration, latency: Option<Duration>) {
        self.creates_outstanding = self.creates_outstanding.saturating_sub(1);
        self.answered(now, latency);
    }

    /// Records a create answered with a throttle reply: not a failure (the store is up
    /// and answering; what it asks for is fewer requests, which the writer's pacing
    /// gives it), so it brings the store up like a definite answer, and records no
    /// latency (a refusal says nothing of how fast the store takes an object). A store
    /// taken for down for throttling would leave the quorum to the others, and with
    /// more than `N - Q` stores throttling, none would be reached until their probes
    /// (DESIGN.md "Throttled stores").
    pub fn create_throttled(&mut self) {
        self.creates_outstanding = self.creates_outstanding.saturating_sub(1);
        self.failures = 0;
    }

    /// Records a read that had not answered after `waited` when another store's did: it
    /// is at least that slow, so later reads go elsewhere first.
    pub fn outpaced(&mut self, waited: Duration) {
        self.record_latency(waited.saturating_mul(2));
    }

    fn record_latency(&mut self, took: Duration) {
        self.latency = Some(match self.latency {
            Some(l) => (l * 7 + took) / 8,
            None => took,
        });
    }

    /// How long a read from this store is waited for before another store is asked
    /// too: twice its recent latency, at least `floor`.
    pub fn read_patience(&self, floor: Duration) -> Duration {
        self.latency.map_or(floor, |l| (l * 2).max(floor))
    }

    /// The order to read from: stores up before stores down, then by recent latency
    /// (a store with none known yet after those with one, in index order).
    pub fn read_order(stores: &[StoreHealth]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..stores.len()).collect();
        order.sort_by_key(|&i| {
            stores
                .get(i)
                .map(|h| (h.is_down(), h.latency.is_none(), h.latency))
        });
        order
    }
}

/// Once a quorum of stores has listed, how much longer the others are waited for before
/// they are *unlisted*: half the time the quorum took, at least 10 ms, at most
/// `request_timeout`. DESIGN.md waits the whole request timeout; any wait is safe (a
/// value an unlisted store may decide is completed, a key it leaves undetermined waits),
/// and a long one makes every open with a store down as slow as a timeout and, past the
/// link window, unable to open at all. A slow store unlisted costs nothing when the
/// writes it missed reached a quorum of the others.
pub fn unlisted_after(quorum_listed_in: Duration, request_timeout: Duration) -> Duration {
    (quorum_listed_in / 2)
        .max(Duration::from_millis(10))
        .min(request_timeout)
}

/// One store's answer to a create, classified by the outcome table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyAnswer {
    /// Created, or already there with our value.
    Ours,
    /// Another value holds the key in this store, with this epoch.
    Other {
        /// The epoch of the value found.
        epoch: u64,
    },
    /// No definite answer yet (an error, a timeout, not asked yet).
    Unknown,
}

/// What the N answers to a create say together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerdict {
    /// Q stores hold our value: it is decided and durable.
    Durable,
    /// `N - Q + 1` stores hold other values: ours can never be decided. The highest
    /// epoch among them gives the outcome table's row (higher: fenced; lower: a stale
    /// tail ends the epoch; equal: poisoned).
    Never {
        /// The highest epoch among the other values.
        highest_other_epoch: u64,
    },
    /// Neither yet: retry the stores whose answer is unknown.
    Undecided,
}

/// Combines one answer per store (`answers.len()` is N) into the verdict on our value.
pub fn write_verdict(answers: &[CopyAnswer]) -> WriteVerdict {
    let n = answers.len();
    let q = quorum(n);
    let ours = answers.iter().filter(|a| **a == CopyAnswer::Ours).count();
    if ours >= q {
        return WriteVerdict::Durable;
    }
    let others = answers.iter().filter_map(|a| match a {
        CopyAnswer::Other { epoch } => Some(*epoch),
        _ => None,
    });
    let (count, highest) = others.fold((0, 0), |(c, h), e| (c + 1, h.max(e)));
    if count > n - q {
        return WriteVerdict::Never {
            highest_other_epoch: highest,
        };
    }
    WriteVerdict::Undecided
}

/// What one store shows at a key, at an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// The store did not answer its listing in time: its copy is not known.
    Unlisted,
    /// Listed, with no copy at the key.
    Absent,
    /// Listed, with a copy of this value.
    Copy(ValueId),
}

/// What an open makes of one key from what each store listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// No listed copy.
    Empty,
    /// Q stores hold this value.
    Decided(ValueId),
    /// Not decided by the listed copies alone, and it cannot be (every store listed, or
    /// too few copies even with the unlisted stores): it is not present.
    NotDecided,
    /// This value may be decided through copies in the unlisted stores: create its bytes
    /// (fetched whole from a listed copy) in these listed stores, which have no copy at
    /// the key; with them it has Q copies and is decided.
    Complete {
        /// The value.
        value: ValueId,
        /// The listed stores without a copy, by index.
        stores: Vec<usize>,
    },
    /// A listed store holds another value where one may be decided through the unlisted
    /// stores: the key cannot be settled without them (the open waits for them).
    Undetermined,
}

/// Classifies a key from one entry per store (`stores.len()` is N). With every store
/// listed a value is decided exactly as its copies say. With some unlisted, a value
/// with fewer than Q listed copies that could still reach Q through them is to be
/// completed, or the key is undetermined if a listed store holds another value there.
/// `below_floor`: the key lies below the floor of the best complete object found, where
/// nothing is ever completed (it can no longer change the chain).
pub fn key_state(stores: &[Listed], below_floor: bool) -> KeyState {
    let n = stores.len();
    let q = quorum(n);
    let unlisted = stores.iter().filter(|s| **s == Listed::Unlisted).count();
    let mut counts: Vec<(ValueId, usize)> = Vec::new();
    for s in stores {
        if let Listed::Copy(v) = s {
            match counts.iter_mut().find(|(id, _)| id == v) {
                Some((_, c)) => *c += 1,
                None => counts.push((*v, 1)),
            }
        }
    }
    if counts.is_empty() {
        return KeyState::Empty;
    }
    if let Some((v, _)) = counts.iter().find(|(_, c)| *c >= q) {
        return KeyState::Decided(*v);
    }
    if unlisted == 0 || below_floor {
        return KeyState::NotDecided;
    }
    // Values that the unlisted stores could lift to Q.
    let possible: Vec<ValueId> = counts
        .iter()
        .filter(|(_, c)| c + unlisted >= q)
        .map(|(v, _)| *v)
        .collect();
    match possible.as_slice() {
        [] => KeyState::NotDecided,
        [value] => {
            let other_listed = stores
                .iter()
                .any(|s| matches!(s, Listed::Copy(v) if v != value));
            if other_listed {
                return KeyState::Undetermined;
            }
            let stores = stores
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == Listed::Absent)
                .map(|(i, _)| i)
                .collect();
            KeyState::Complete {
                value: *value,
                stores,
            }
        }
        _ => KeyState::Undetermined,
    }
}

/// The value a quorum of `copies` (one entry per store: the value it holds, if known)
/// agrees on, if any: the decided value at the key.
pub fn decided_value(copies: &[Option<ValueId>]) -> Option<ValueId> {
    let q = quorum(copies.len());
    copies
        .iter()
        .flatten()
        .find(|v| copies.iter().flatten().filter(|c| c == v).count() >= q)
        .copied()
}

/// Whether a hole above the chain end is settled: no value other than a claim can be
/// decided there any more. For each non-claim value V at the key, at least `N - Q + 1`
/// stores hold a copy that is not V (claims of any epoch count). `copies` has one entry
/// per store: the value it holds at the key, `None` when its copy is not known (no copy yet, or no answer).
/// Deliberately weaker than "our claim is decided": a key where two earlier writers and
/// our claim each hold one copy can never be decided by anyone, and fences as well.
///
/// A store whose copy is unknown may hold, or still get, any value, one never seen
/// included; so at least `N - Q + 1` copies must be known in any case (our claim created
/// in one store of three settles nothing: a late create can still land in the other two).
pub fn hole_settled(copies: &[Option<ValueId>]) -> bool {
    let n = copies.len();
    let blocking = n - quorum(n) + 1;
    let known = copies.iter().flatten().count();
    known >= blocking
        && copies
            .iter()
            .flatten()
            .filter(|v| !v.claim)
            .all(|v| copies.iter().flatten().filter(|c| *c != v).count() >= blocking)
}

/// Whether the opening object won its epoch: it was *created* (not "already exists",
/// whatever the bytes: two openers can write identical ones) in at least Q of `n`
/// stores. At most one opener can win Q first-writer creates at one key.
pub fn opening_won(created: usize, n: usize) -> bool {
    created >= quorum(n)
}

/// What one create's answers so far decide, by the kind of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateDecision {
    /// A data object held by Q stores as ours ([`write_verdict`]), a claim's hole
    /// settled ([`hole_settled`]), the opening object created in Q stores
    /// ([`opening_won`]).
    Created,
    /// Ours can never be: a data object other values hold in `N - Q + 1` stores, an
    /// opening object that can no longer be created in Q, a claim's key where another
    /// value was decided. The outcome table's "already exists".
    Lost,
    /// Neither yet: the stores whose answer is unknown decide it.
    Undecided,
}

/// One create's answers over N stores, tallied as they come, and what they decide
/// ([`decision`](Self::decision)): DESIGN.md "Writing an object", and the claims and
/// the opening object of "Opening an instance over N stores".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTally {
    ours: Option<ValueId>,
    /// Per store: its answer, classified.
    answers: Vec<CopyAnswer>,
    /// Per store: the value its copy holds, when known.
    copies: Vec<Option<ValueId>>,
    /// Stores that answered `Created`.
    created: usize,
    /// Stores that answered "already exists" (whatever the value).
    lost: usize,
    /// Per store: whether it answered with a throttle reply.
    throttled: Vec<bool>,
}

impl CreateTally {
    /// No answer yet from any of `n` stores, for the create of `ours` (`None` when the
    /// bytes sent are not an object: no copy can then be ours).
    pub fn new(n: usize, ours: Option<ValueId>) -> Self {
        CreateTally {
            ours,
            answers: vec![CopyAnswer::Unknown; n],
            copies: vec![None; n],
            created: 0,
            lost: 0,
            throttled: vec![false; n],
        }
    }

    /// `store` created the object. (A store out of range is ignored, as are the
    /// recording methods below for one.)
    pub fn created(&mut self, store: usize) {
        if let (Some(answer), Some(copy)) =
            (self.answers.get_mut(store), self.copies.get_mut(store))
        {
            *answer = CopyAnswer::Ours;
            *copy = self.ours;
            self.created += 1;
        }
    }

    /// `store` answered "already exists" and holds `value`: returns whether it is ours.
    pub fn holds(&mut self, store: usize, value: ValueId) -> bool {
        let ours = Some(value) == self.ours;
        if let (Some(answer), Some(copy)) =
            (self.answers.get_mut(store), self.copies.get_mut(store))
        {
            *copy = Some(value);
            *answer = if ours {
                CopyAnswer::Ours
            } else {
                CopyAnswer::Other { epoch: value.epoch }
            };
            self.lost += 1;
        }
        ours
    }

    /// `store` answered with a throttle reply: its answer stays unknown.
    pub fn throttled(&mut self, store: usize) {
        if let Some(t) = self.throttled.get_mut(store) {
            *t = true;
        }
    }

    /// Stores that answered definitely (created, or "already exists").
    pub fn answered(&self) -> usize {
        self.created + self.lost
    }

    /// What the answers so far decide for an object of `kind`.
    pub fn decision(&self, kind: CreateKind) -> CreateDecision {
        let n = self.answers.len();
        match kind {
            CreateKind::Data => match write_verdict(&self.answers) {
                WriteVerdict::Durable => CreateDecision::Created,
                WriteVerdict::Never { .. } => CreateDecision::Lost,
                WriteVerdict::Undecided => CreateDecision::Undecided,
            },
            CreateKind::Opening => {
                if opening_won(self.created, n) {
                    CreateDecision::Created
                } else if n.saturating_sub(self.lost) < quorum(n) {
                    CreateDecision::Lost
                } else {
                    CreateDecision::Undecided
                }
            }
            CreateKind::Claim => {
                // A late create made another value decided: the open starts over.
                if decided_value(&self.copies).is_some_and(|v| !v.claim) {
                    CreateDecision::Lost
                } else if hole_settled(&self.copies) {
                    CreateDecision::Created
                } else {
                    CreateDecision::Undecided
                }
            }
        }
    }

    /// For a create that every store asked has answered without a decision: the
    /// stores that answered with a throttle reply when those replies alone withheld
    /// the quorum, else 0. They withheld it when, had each of them created the object
    /// instead, the create would have been decided as created: no store that failed
    /// in another way (an error, a timeout, skipped while down) and no copy of
    /// another value stands between the create and its quorum. Such a create is
    /// retried as a throttle reply is over one store (DESIGN.md "Throttled stores").
    pub fn withheld_by_throttle(&self, kind: CreateKind) -> usize {
        let throttled = self.throttled.iter().filter(|t| **t).count();
        if throttled == 0 {
            return 0;
        }
        let mut had_created = self.clone();
        for (store, refused) in self.throttled.iter().enumerate() {
            if *refused && self.answers.get(store) == Some(&CopyAnswer::Unknown) {
                had_created.created(store);
            }
        }
        if had_created.decision(kind) == CreateDecision::Created {
            throttled
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value(epoch: u64, claim: bool) -> ValueId {
        ValueId {
            sequence: 7,
            epoch,
            claim,
            object_crc: epoch as u32 * 31 + u32::from(claim),
        }
    }

    #[test]
    fn a_store_is_skipped_after_failures_and_probed_once_a_second() {
        let mut h = StoreHealth::default();
        let t = Duration::from_millis;
        for _ in 0..DOWN_AFTER_FAILURES {
            assert!(h.admit(t(0)));
            h.answered(t(0), None);
        }
        assert!(h.is_down());
        assert!(!h.admit(t(10)));
        assert!(h.admit(t(1000)), "the probe");
        assert!(!h.admit(t(1001)), "one probe per interval");
        h.answered(t(1002), None);
        assert!(!h.admit(t(1500)));
        assert!(h.admit(t(2000)));
        h.answered(t(2001), Some(t(5)));
        assert!(!h.is_down());
        assert!(h.admit(t(2002)));
    }

    #[test]
    fn a_store_that_throttles_creates_is_not_taken_for_down() {
        let t = Duration::from_millis;
        let mut h = StoreHealth::default();
        for _ in 0..2 * DOWN_AFTER_FAILURES {
            assert!(h.admit_create(t(0), 1));
            h.create_throttled();
        }
        assert!(!h.is_down(), "answering, only refusing for the rate");
        assert_eq!(h.read_patience(t(20)), t(20), "no latency from a refusal");
        // A store down whose probe meets a throttle reply is up again.
        for _ in 0..DOWN_AFTER_FAILURES {
            h.answered(t(0), None);
        }
        assert!(h.is_down());
        assert!(h.admit_create(t(1000), 1), "the probe");
        h.create_throttled();
        assert!(!h.is_down());
        assert!(h.admit_create(t(1001), 1));
    }

    #[test]
    fn a_store_with_too_many_creates_unanswered_is_skipped_until_one_answers() {
        let mut h = StoreHealth::default();
        let t = Duration::from_millis;
        assert!(h.admit_create(t(0), 2));
        assert!(h.admit_create(t(0), 2));
        assert!(!h.admit_create(t(0), 2), "two outstanding");
        h.create_answered(t(1), Some(t(1)));
        assert!(h.admit_create(t(1), 2));
    }

    #[test]
    fn reads_go_to_the_fastest_store_that_is_up() {
        let t = Duration::from_millis;
        let mut stores = vec![StoreHealth::default(); 3];
        stores[0].answered(t(0), Some(t(30)));
        stores[1].answered(t(0), Some(t(5)));
        for _ in 0..DOWN_AFTER_FAILURES {
            stores[2].answered(t(0), None);
        }
        assert_eq!(StoreHealth::read_order(&stores), vec![1, 0, 2]);
    }

    #[test]
    fn a_value_is_the_same_from_chunks_and_from_the_copy() {
        use crate::format::{encode_object, Header, Link};
        let header = Header {
            sequence: 9,
            epoch: 4,
            link: Link {
                sequence: 8,
                epoch: 4,
            },
            floor: 1,
            claim: false,
            closed: false,
            id_offset: 0,
        };
        let entries = [Bytes::from_static(b"entry")];
        let object = encode_object(&header, [(3u64, &entries[..])]).expect("encodes");
        let whole = object.to_bytes();
        let from_chunks = ValueId::of_chunks(object.chunks()).expect("well formed");
        assert_eq!(ValueId::of_copy(&whole), Ok(from_chunks));
        assert_eq!(from_chunks.epoch, 4);
        let mut damaged = whole.to_vec();
        if let Some(b) = damaged.get_mut(crate::format::HEADER_LEN + 2) {
            *b ^= 1;
        }
        assert!(ValueId::of_copy(&damaged).is_err());
    }

    #[test]
    fn a_value_is_decided_where_a_quorum_holds_it() {
        let (a, b) = (Some(value(3, false)), Some(value(4, true)));
        assert_eq!(decided_value(&[a, b, a]), a);
        assert_eq!(decided_value(&[a, b, None]), None);
        assert_eq!(decided_value(&[None, b, b, None, b]), b);
        assert_eq!(decided_value(&[a, b, None, b, a]), None);
    }

    #[test]
    fn quorum_is_a_majority() {
        assert_eq!((quorum(1), quorum(3), quorum(5)), (1, 2, 3));
    }

    #[test]
    fn a_create_is_durable_at_q_copies_and_not_before() {
        use CopyAnswer::*;
        assert_eq!(
            write_verdict(&[Ours, Unknown, Unknown]),
            WriteVerdict::Undecided
        );
        assert_eq!(write_verdict(&[Ours, Unknown, Ours]), WriteVerdict::Durable);
        assert_eq!(write_verdict(&[Ours]), WriteVerdict::Durable, "one store");
        assert_eq!(
            write_verdict(&[Ours, Other { epoch: 9 }, Unknown]),
            WriteVerdict::Undecided
        );
        // Two others among three: ours can never reach two copies.
        assert_eq!(
            write_verdict(&[Other { epoch: 3 }, Ours, Other { epoch: 9 }]),
            WriteVerdict::Never {
                highest_other_epoch: 9
            }
        );
        assert_eq!(
            write_verdict(&[Ours, Ours, Other { epoch: 1 }, Unknown, Unknown]),
            WriteVerdict::Undecided,
            "five stores: two of ours are not a quorum"
        );
    }

    #[test]
    fn an_open_decides_completes_or_waits() {
        let a = value(4, false);
        let b = value(6, false);
        use Listed::*;
        assert_eq!(
            key_state(&[Copy(a), Copy(a), Absent], false),
            KeyState::Decided(a)
        );
        assert_eq!(
            key_state(&[Copy(a), Absent, Absent], false),
            KeyState::NotDecided
        );
        assert_eq!(
            key_state(&[Copy(a), Absent, Unlisted], false),
            KeyState::Complete {
                value: a,
                stores: vec![1]
            }
        );
        assert_eq!(
            key_state(&[Copy(a), Absent, Unlisted], true),
            KeyState::NotDecided,
            "never completed below the floor"
        );
        assert_eq!(
            key_state(&[Copy(a), Copy(b), Unlisted], false),
            KeyState::Undetermined
        );
        assert_eq!(
            key_state(&[Absent, Absent, Unlisted], false),
            KeyState::Empty
        );
    }

    #[test]
    fn a_hole_is_settled_when_no_data_value_can_be_decided() {
        let late = value(2, false);
        let zombie = value(3, false);
        let claim = value(9, true);
        assert!(!hole_settled(&[Some(late), Some(claim), None]));
        assert!(hole_settled(&[Some(late), Some(claim), Some(claim)]));
        assert!(
            hole_settled(&[Some(late), Some(zombie), Some(claim)]),
            "three values, one copy each: none can be decided"
        );
        assert!(
            !hole_settled(&[Some(claim), None, None]),
            "our claim in one store: a late create may land in the other two"
        );
        assert!(hole_settled(&[Some(claim), None, Some(claim)]));
        assert!(!hole_settled(&[Some(late), Some(late), Some(claim)]));
    }

    fn listed() -> impl Strategy<Value = Listed> {
        prop_oneof![
            Just(Listed::Unlisted),
            Just(Listed::Absent),
            (1..4u64, any::<bool>()).prop_map(|(e, c)| Listed::Copy(value(e, c))),
        ]
    }

    proptest! {
        /// An open lists at least Q stores. Whatever the unlisted ones hold: a value it
        /// calls decided is decided; one it completes is decided once completed; and
        /// where it finds nothing decided and nothing to complete, no value is decided.
        #[test]
        fn key_state_agrees_with_every_filling(
            stores in proptest::collection::vec(listed(), 3..=5)
                .prop_filter("Q listed", |s| {
                    s.iter().filter(|l| **l != Listed::Unlisted).count() >= quorum(s.len())
                }),
            fill in proptest::collection::vec(prop_oneof![
                Just(None),
                (1..4u64, any::<bool>()).prop_map(|(e, c)| Some(value(e, c))),
            ], 5..=5),
        ) {
            let q = quorum(stores.len());
            let actual: Vec<Option<ValueId>> = stores
                .iter()
                .zip(&fill)
                .map(|(s, f)| match s {
                    Listed::Unlisted => *f,
                    Listed::Absent => None,
                    Listed::Copy(v) => Some(*v),
                })
                .collect();
            let decided_in = |copies: &[Option<ValueId>]| {
                copies
                    .iter()
                    .flatten()
                    .find(|v| copies.iter().flatten().filter(|c| c == v).count() >= q)
                    .copied()
            };
            match key_state(&stores, false) {
                KeyState::Decided(v) => prop_assert_eq!(decided_in(&actual), Some(v)),
                KeyState::Empty | KeyState::NotDecided => {
                    prop_assert_eq!(decided_in(&actual), None);
                }
                KeyState::Complete { value, stores: to } => {
                    let mut completed = actual.clone();
                    for i in to {
                        prop_assert_eq!(completed[i], None);
                        completed[i] = Some(value);
                    }
                    prop_assert_eq!(decided_in(&completed), Some(value));
                }
                KeyState::Undetermined => {}
            }
        }

        /// A settled hole: no filling of the unknown stores' future creates decides a
        /// data value there (every store's copy is already fixed where it holds one).
        #[test]
        fn a_settled_hole_never_decides_a_data_value(
            copies in proptest::collection::vec(prop_oneof![
                Just(None),
                (1..4u64, any::<bool>()).prop_map(|(e, c)| Some(value(e, c))),
            ], 3..=5),
            fill in proptest::collection::vec((1..4u64, any::<bool>()), 5..=5),
        ) {
            if hole_settled(&copies) {
                let q = quorum(copies.len());
                // Stores without a copy may still get one (first writer wins).
                let later: Vec<ValueId> = copies
                    .iter()
                    .zip(&fill)
                    .map(|(c, (e, claim))| c.unwrap_or(value(*e, *claim)))
                    .collect();
                for v in later.iter().filter(|v| !v.claim) {
                    prop_assert!(later.iter().filter(|c| *c == v).count() < q, "{v:?}");
                }
            }
        }
    }

    /// A tally of `n` stores for our value `ours`: `created`, `holds` (store, value),
    /// `throttled` stores.
    fn tally(
        n: usize,
        ours: ValueId,
        created: &[usize],
        holds: &[(usize, ValueId)],
        throttled: &[usize],
    ) -> CreateTally {
        let mut t = CreateTally::new(n, Some(ours));
        for &i in created {
            t.created(i);
        }
        for &(i, v) in holds {
            t.holds(i, v);
        }
        for &i in throttled {
            t.throttled(i);
        }
        t
    }

    #[test]
    fn a_tally_decides_as_the_rules_of_each_kind_say() {
        let (ours, other, claim) = (value(5, false), value(4, false), value(5, true));
        // Data: Q ours (created or found) is durable; N - Q + 1 others never.
        let t = tally(3, ours, &[0], &[(1, ours)], &[]);
        assert_eq!(t.decision(CreateKind::Data), CreateDecision::Created);
        assert_eq!(t.answered(), 2);
        let t = tally(3, ours, &[0], &[(1, other), (2, other)], &[]);
        assert_eq!(t.decision(CreateKind::Data), CreateDecision::Lost);
        let t = tally(3, ours, &[0], &[(1, other)], &[]);
        assert_eq!(t.decision(CreateKind::Data), CreateDecision::Undecided);
        // Opening: only creates count; our own bytes found do not.
        let t = tally(3, ours, &[0], &[(1, ours)], &[]);
        assert_eq!(t.decision(CreateKind::Opening), CreateDecision::Undecided);
        let t = tally(3, ours, &[0], &[(1, ours), (2, ours)], &[]);
        assert_eq!(t.decision(CreateKind::Opening), CreateDecision::Lost);
        let t = tally(3, ours, &[0, 2], &[], &[]);
        assert_eq!(t.decision(CreateKind::Opening), CreateDecision::Created);
        // Claim: settled once N - Q + 1 copies are known and none other can be decided.
        let t = tally(3, claim, &[0], &[], &[]);
        assert_eq!(t.decision(CreateKind::Claim), CreateDecision::Undecided);
        let t = tally(3, claim, &[0], &[(1, value(3, true))], &[]);
        assert_eq!(t.decision(CreateKind::Claim), CreateDecision::Created);
        let t = tally(3, claim, &[0], &[(1, other)], &[]);
        assert_eq!(t.decision(CreateKind::Claim), CreateDecision::Undecided);
        let t = tally(3, claim, &[], &[(0, other), (1, other)], &[]);
        assert_eq!(t.decision(CreateKind::Claim), CreateDecision::Lost);
        // Out of range is ignored.
        let t = tally(3, ours, &[7], &[(9, ours)], &[8]);
        assert_eq!(t, CreateTally::new(3, Some(ours)));
    }

    #[test]
    fn only_throttle_replies_that_alone_withheld_the_quorum_count() {
        let (ours, other, claim) = (value(5, false), value(4, false), value(5, true));
        let data = CreateKind::Data;
        // Two of three refused for the rate, the third created: they withheld it.
        let t = tally(3, ours, &[0], &[], &[1, 2]);
        assert_eq!(t.decision(data), CreateDecision::Undecided);
        assert_eq!(t.withheld_by_throttle(data), 2);
        // One refused, one timed out: the refusal alone stood in the way.
        assert_eq!(
            tally(3, ours, &[0], &[], &[1]).withheld_by_throttle(data),
            1
        );
        // Our copy found counts as ours.
        assert_eq!(
            tally(3, ours, &[], &[(0, ours)], &[1]).withheld_by_throttle(data),
            1
        );
        // No copy yet anywhere: the refusal and a failure of another kind withheld it.
        assert_eq!(tally(3, ours, &[], &[], &[1]).withheld_by_throttle(data), 0);
        // Another value's copy stands in the way.
        assert_eq!(
            tally(3, ours, &[], &[(0, other)], &[1]).withheld_by_throttle(data),
            0
        );
        // Five stores: one ours, one refused, the rest failed or other: not enough.
        let t = tally(5, ours, &[0], &[(2, other)], &[1]);
        assert_eq!(t.withheld_by_throttle(data), 0);
        let t = tally(5, ours, &[0, 3], &[(2, other)], &[1]);
        assert_eq!(t.withheld_by_throttle(data), 1);
        // No refusal, no throttle.
        assert_eq!(tally(3, ours, &[0], &[], &[]).withheld_by_throttle(data), 0);
        // The opening object needs creates: our bytes found plus a refusal is not Q.
        let opening = CreateKind::Opening;
        assert_eq!(
            tally(3, ours, &[0], &[], &[1]).withheld_by_throttle(opening),
            1
        );
        assert_eq!(
            tally(3, ours, &[], &[(0, ours)], &[1]).withheld_by_throttle(opening),
            0
        );
        // A claim: its hole would have been settled by the refused stores' copies.
        let c = CreateKind::Claim;
        assert_eq!(tally(3, claim, &[0], &[], &[1]).withheld_by_throttle(c), 1);
        assert_eq!(tally(3, claim, &[], &[], &[1]).withheld_by_throttle(c), 0);
    }
}
