//! Exhaustive small-scope check of the fencing protocol (DESIGN.md: "Writing an object:
//! the outcomes", "Ending an epoch", "The chain", "Opening an instance (fencing)") and
//! of a read-only follower tailing it ("Reading": "Tailing without listing").
//!
//! A hand-written explorer enumerates every interleaving of:
//!
//! - an old instance **A** that opened earlier and has three creates to make (sequences
//!   `s`, `s+1`, `s+2` of its epoch, each linked to the previous one, the first to A's
//!   opening object). Each create is sealed and sent when A decides (an interleaving
//!   point), arrives at the store at any later point (it lands when the key is free, else
//!   it is refused) or never, and is answered at any point: `Created` / `AlreadyExists`
//!   according to what its arrival did, or an unknown error whatever happened (if the
//!   request had not arrived yet it may still land later, or never). Answers are resolved
//!   as `store::persist` does (an unknown outcome is retried with the identical bytes, a
//!   bounded number of times; `AlreadyExists` reads the key: identical bytes => durable,
//!   higher epoch => fenced, lower => stale tail, same epoch => poisoned). A acknowledges
//!   as the writer actor does: strictly in sequence order, an object only when it and
//!   every earlier object of its epoch are durable; the first other outcome at the head
//!   ends the epoch, after which A acknowledges nothing (its requests still in the air
//!   may still land).
//! - a new instance **B** running the open of DESIGN.md step by step with the crate's
//!   real pure decisions: a listing (a snapshot of the store at that step; optionally a
//!   "torn" listing that may or may not see each object created while it runs),
//!   [`choose_chain`] over the listed headers, [`plan_opening`], the claims (all sent at
//!   once and all awaited, as `store::open_instance` does, or one at a time), then the
//!   opening object; an `AlreadyExists` or unknown answer sends B back to the listing, a
//!   bounded number of times. Once open, B writes one data object with the writer's rule.
//! - late creates of an instance **Z** that A fenced (in the takeover scenario).
//! - a read-only follower **F**, modelled as B is, with the crate's real pure decision
//!   [`walk_probes`]. It lists only to start: it starts from the chain [`choose_chain`]
//!   picks over the initial store, its chain end `last` that chain's end and its next
//!   key `last.sequence + 1`. A follower step (an interleaving point, available at any
//!   time) probes that one key against the store as it is at that moment and applies
//!   `walk_probes` to that single probe: a claim or an orphan (an object whose link is
//!   not exactly `last`) is passed over, the first other object is delivered and becomes
//!   `last`. The state keeps the objects F delivered, in order. A probe of an absent key
//!   ends the walk where it started and changes nothing (`walk_probes` leaves `last` and
//!   the next key as they were, checked at setup), so it is no step of the model: a
//!   step is enabled while F's next key holds an object. Each step raises the next key,
//!   so F takes fewer than `NSEQ` steps and the state space stays finite (and acyclic)
//!   without another bound.
//! - a final recovery: once every actor is done and every request left in the air has
//!   landed or been dropped, [`choose_chain`] over the final store.
//!
//! Properties: every object A or B acknowledged (B's opening object included once B is
//! open) is on the chain that recovery chooses, at the end and at every intermediate
//! state too (a crash, a takeover or a read-only replay may recover at any moment); the
//! chain never holds a claim; no two instances write objects of one epoch, and an
//! opener's epoch is above every epoch it listed; no create ever finds other bytes of its
//! own epoch (`Poisoned`), and `plan_opening` never refuses.
//!
//! The follower's properties. At every state, what F delivered (after the chain it
//! started from, which comes first) is a prefix of the chain recovery chooses over the
//! store at that state: its first objects, in order, by identity (the writer and epoch
//! of each object, not only its key). Checked at every state rather than only at the
//! final recovery because that is exactly DESIGN.md's promise, "what a follower
//! delivers is always a prefix of the chain that a later recovery replays": a recovery
//! may run at any moment (as for acknowledged objects above), and what F has delivered
//! only grows, so "everything delivered by time t is a prefix of the chain of every
//! state after t" is the same as "at every state, everything delivered so far is a
//! prefix of that state's chain". It is not stronger than the promise, and it held: the
//! chain of an intermediate state was never shorter than, or beside, what F had
//! delivered (F delivers only an object linked exactly to its chain end, so complete,
//! and every newer chain passes through it: an opener claims every absent key up to the
//! highest it listed and sends its opening object only once every claim exists, and a
//! writer's objects of one epoch are consecutive). And at a final state, where F's
//! next key is absent (it has probed every key it can), it has delivered that whole
//! chain: nothing above an absent key is the next chain object, so ending the walk
//! there loses nothing (given that F probes that key again later).
//!
//! Then the same explorer runs with one step of the design changed at a time (flags of
//! the model, not of the crate) and must find a lost acknowledgement in each:
//! the opener does not claim holes; the opener sends its opening object with its claims;
//! a claim may end a chain like any empty object; the writer skips a sequence whose
//! outcome is unknown and goes on (the runs print how each breaks the follower's
//! properties too; that is not asserted). Two more
//! change the follower only: it delivers the non-claim object at the key it probes
//! whatever its link (5: it delivers an orphan, off every later chain; caught at the
//! final recovery, in both scenarios); it passes over an absent key when a later key
//! holds an object (6: in this scope it never delivers off the chain, since an object
//! linked to its chain end above an absent key would be an opening object, sent only
//! once every key below it exists, but it falls behind for good: the chain object that
//! later lands at the key it skipped is never delivered, and nothing after it).
//!
//! Abstracted away: entries (an object is "acknowledged" as a whole), footers and
//! segments, floors and reclamation (all floors are 0), timing bounds
//! (`max_create_duration`), damaged objects, the supervisor reopening an instance after
//! its epoch ended (a third instance), and the retries' backoff (only their number).
//! For the follower: reading its objects' entries; polling intervals; its listing
//! fallbacks (a next key absent longer than the link window, which matters only once
//! keys are reclaimed, a probe error, several stores); and probing several keys at
//! once, which is modelled as consecutive single probes. That loses nothing here: a
//! key's object never changes once it is there and nothing is deleted, so a round of
//! probes sent together, each seen at its own moment, walks the same as single probes
//! of its keys below the first one seen absent, made one after the other with no other
//! step between at any moment after the last of them was seen (an interleaving the
//! explorer covers; that F then leaves the absent key unprobed is covered too).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use object_store_wal::format::{Header, Link};
use object_store_wal::internal::chain::catalog::{choose_chain, plan_opening, walk_probes};

/// Sequences are 1..NSEQ; the scenarios stay well below.
const NSEQ: usize = 16;
/// Creates of the old instance A.
const A_OBJECTS: usize = 3;

// ---------------------------------------------------------------------------------------
// The model's configuration

/// Who wrote an object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Who {
    /// An instance A fenced before the exploration starts (takeover scenario).
    Z,
    /// The old instance.
    A,
    /// The new instance.
    B,
}

/// Where the exploration starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// A opened on an empty prefix: the store holds A's opening object at 1 (epoch 2);
    /// A creates 2, 3, 4.
    Fresh,
    /// Z opened on an empty prefix (1, epoch 2) with creates 2..5 in flight; only its 3
    /// had landed when A listed, so A claimed 2 and opened at 4 (epoch 5). Z's create of
    /// 5 is still in the air and may land at any time (a stale tail for A). A creates 5,
    /// 6, 7.
    Takeover,
}

/// How the opener sends its claims.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Claims {
    /// All at once, every answer awaited before deciding (as `store::open_instance`).
    Concurrent,
    /// One at a time, in ascending sequence, the next sent once the previous is created.
    Sequential,
}

/// One step of the design changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutation {
    /// 1. The opener does not claim holes.
    NoClaims,
    /// 2. The opener sends its opening object together with its claims.
    OpeningWithClaims,
    /// 3. Chain choice treats claims as ordinary objects (a claim may end a chain).
    ClaimEndsChain,
    /// 4. The writer skips a sequence whose outcome is unknown and goes on: it does not
    ///    end the epoch, acknowledges later objects that are durable, and links the
    ///    objects it seals afterwards past the skipped one.
    SkipUnknown,
    /// 5. The follower delivers the non-claim object at the key it probes whatever its
    ///    link: it does not pass over orphans.
    FollowerIgnoresLinks,
    /// 6. The follower passes over an absent key (when a later key holds an object)
    ///    instead of ending its walk there.
    FollowerSkipsAbsent,
}

#[derive(Clone, Copy, Debug)]
struct Model {
    scenario: Scenario,
    claims: Claims,
    /// A listing may miss objects created while it runs (any set between the store at
    /// its start and the store at its end).
    torn_listing: bool,
    /// B writes one data object once open.
    b_writes: bool,
    /// Create attempts per `persist` (A's objects, B's data object).
    persist_attempts: u8,
    /// Opens B attempts (listing, claims, opening object).
    open_attempts: u8,
    /// A read-only follower F tails the chain by probing keys.
    follower: bool,
    mutation: Option<Mutation>,
}

impl Model {
    fn design(scenario: Scenario) -> Self {
        Model {
            scenario,
            claims: Claims::Concurrent,
            torn_listing: false,
            b_writes: true,
            persist_attempts: 2,
            open_attempts: 2,
            follower: true,
            mutation: None,
        }
    }

    fn with(self, mutation: Mutation) -> Self {
        Model {
            mutation: Some(mutation),
            ..self
        }
    }

    fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }
}

// ---------------------------------------------------------------------------------------
// Objects, requests, state

/// An object as the model knows it: its header fields, whether it carries entries, and
/// who wrote it. Two objects have the same bytes when header and content agree.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Obj {
    seq: u64,
    epoch: u64,
    link: (u64, u64),
    claim: bool,
    /// Carries entries (a data object), as opposed to a claim or an opening object.
    data: bool,
    writer: Who,
}

impl Obj {
    fn header(&self) -> Header {
        Header {
            sequence: self.seq,
            epoch: self.epoch,
            link: Link {
                sequence: self.link.0,
                epoch: self.link.1,
            },
            floor: 0,
            claim: self.claim,
            closed: false,
            id_offset: 0,
        }
    }

    fn from_header(h: &Header, data: bool, writer: Who) -> Self {
        assert_eq!(h.floor, 0, "the model keeps every floor at 0");
        Obj {
            seq: h.sequence,
            epoch: h.epoch,
            link: (h.link.sequence, h.link.epoch),
            claim: h.claim,
            data,
            writer,
        }
    }

    /// Identical bytes: empty objects are their header; data objects also their entries
    /// (which differ between writers).
    fn same_bytes(&self, o: &Obj) -> bool {
        self.header() == o.header()
            && self.data == o.data
            && (!self.data || self.writer == o.writer)
    }
}

/// The answer a create finally got.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Out {
    // Raw create answers (the opener's claims and opening object).
    Created,
    AlreadyExists,
    // `persist` outcomes (the writers' objects).
    Durable,
    Fenced,
    StaleTail,
    Poisoned,
    // Both.
    Unknown,
}

/// Where a create stands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
enum Fl {
    /// (Unused slot.)
    #[default]
    Unsent,
    /// Sent (attempt n), not arrived at the store yet.
    Travelling(u8),
    /// Attempt n arrived: it landed, or was refused because the key was taken.
    Arrived(u8, bool),
    /// Answered for good.
    Done(Out),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
struct Flight {
    obj: u16,
    /// Resolved like `store::persist` (retries, reading the key on `AlreadyExists`);
    /// otherwise a raw create (the opener's).
    persist: bool,
    st: Fl,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    /// About to list.
    List,
    /// A torn listing started when the store held these sequences.
    Listing(u32),
    /// Claims in flight (and, under mutation 2, the opening object).
    Claims,
    /// The opening object in flight.
    Opening,
    /// Open; the data object in flight.
    Writing,
    /// Open, and its data object answered.
    Done,
    /// Out of open attempts.
    GaveUp,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct AState {
    /// Object id of each of A's objects once sealed (0: not yet).
    objs: [u16; A_OBJECTS],
    flights: [Option<Flight>; A_OBJECTS],
    sent: u8,
    /// The next object to acknowledge or fail, in sequence order.
    head: u8,
    acked: u8,
    /// Mutation 4: objects skipped after an unknown outcome.
    skipped: u8,
    terminal: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct BState {
    phase: Phase,
    /// Open attempts started.
    attempt: u8,
    flights: Fv<Flight, 6>,
    /// Claims not sent yet (sequential claims).
    todo: Fv<u16, 6>,
    /// The opening object of the current attempt.
    opening: u16,
    opened: bool,
    data_acked: bool,
}

/// The read-only follower: where its next probe is and what it delivered since it
/// started (the chain it started from is `Explorer::f_start`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FState {
    /// The key its next probe reads (`ProbeWalk::next_key`).
    next_key: u8,
    /// The objects it delivered, in the order it delivered them (ascending keys). A key
    /// never changes once it holds an object (nothing is deleted in the model), so each
    /// id is also the object at its key now.
    delivered: Fv<u16, { NSEQ - 1 }>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct State {
    /// Object id at each sequence (0: absent).
    store: [u16; NSEQ],
    /// Creates whose sender no longer waits for them (unknown answer, ended epoch) but
    /// that may still land; sorted.
    ghosts: Fv<u16, 12>,
    a: AState,
    b: BState,
    f: FState,
    /// Violations that happen on a transition (see `FLAG_*`).
    flags: u8,
}

impl Fl {
    fn code(self) -> u64 {
        match self {
            Fl::Unsent => 0,
            Fl::Travelling(t) => {
                assert!(t < 8);
                1 + 4 * u64::from(t)
            }
            Fl::Arrived(t, landed) => {
                assert!(t < 8);
                2 + 4 * u64::from(t) + 64 * u64::from(landed)
            }
            Fl::Done(o) => 3 + 4 * (o as u64),
        }
    }
}

impl Phase {
    fn code(self) -> u64 {
        match self {
            Phase::List => 0,
            Phase::Listing(mask) => 1 | u64::from(mask >> 1) << 3,
            Phase::Claims => 2,
            Phase::Opening => 3,
            Phase::Writing => 4,
            Phase::Done => 5,
            Phase::GaveUp => 6,
        }
    }
}

/// Writes fields of fixed widths into a few words.
struct Bits {
    words: [u64; 8],
    pos: u32,
}

impl Bits {
    fn put(&mut self, v: u64, width: u32) {
        assert!(v < 1 << width, "{v} does not fit {width} bits");
        let (w, b) = ((self.pos / 64) as usize, self.pos % 64);
        self.words[w] |= v << b;
        if b + width > 64 {
            self.words[w + 1] |= v >> (64 - b);
        }
        self.pos += width;
    }
}

/// A state packed exactly (an injective encoding) into a few words: the key of the
/// visited set. Hashing and comparing it is cheap, which matters because the explorer
/// runs unoptimized under `cargo test`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Packed([u64; 8]);

impl std::hash::Hash for Packed {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for w in self.0 {
            h.write_u64(w);
        }
    }
}

impl State {
    fn pack(&self) -> Packed {
        // The store: 15 bytes in the first two words.
        let key = store_key(&self.store);
        let mut b = Bits {
            words: [key as u64, (key >> 64) as u64, 0, 0, 0, 0, 0, 0],
            pos: 128,
        };
        b.put(self.ghosts.len() as u64, 4);
        for &g in self.ghosts.iter() {
            b.put(u64::from(g), 8);
        }
        let a = &self.a;
        for (&id, f) in a.objs.iter().zip(&a.flights) {
            b.put(u64::from(id), 8);
            b.put(f.map_or(0, |f| 1 + f.st.code()), 7);
        }
        b.put(u64::from(a.sent), 2);
        b.put(u64::from(a.head), 2);
        b.put(u64::from(a.acked), 3);
        b.put(u64::from(a.skipped), 3);
        b.put(u64::from(a.terminal), 1);
        let bs = &self.b;
        b.put(bs.phase.code(), 19);
        b.put(u64::from(bs.attempt), 3);
        b.put(bs.flights.len() as u64, 3);
        for f in bs.flights.iter() {
            b.put(u64::from(f.obj), 8);
            b.put(f.st.code(), 7);
            b.put(u64::from(f.persist), 1);
        }
        b.put(bs.todo.len() as u64, 3);
        for &t in bs.todo.iter() {
            b.put(u64::from(t), 8);
        }
        b.put(u64::from(bs.opening), 8);
        b.put(u64::from(bs.opened), 1);
        b.put(u64::from(bs.data_acked), 1);
        b.put(u64::from(self.flags), 3);
        // The follower: its next key, and what it delivered as a mask of keys. Exact
        // because delivered keys ascend and a key's object never changes, so the store
        // (packed above) names each delivered object.
        b.put(u64::from(self.f.next_key), 5);
        let mut delivered = 0u64;
        let mut below = 0usize;
        for &id in self.f.delivered.iter() {
            let seq = id_seq(&self.store, id);
            assert!(seq > below, "delivered keys ascend");
            below = seq;
            delivered |= 1 << seq;
        }
        b.put(delivered, NSEQ as u32);
        Packed(b.words)
    }
}

/// What depends on a store alone.
struct StoreFacts {
    /// The chain recovery chooses, ascending.
    chain: Vec<u64>,
    /// Its sequences, as a mask.
    mask: u32,
    /// The complete objects' sequences, as a mask.
    complete: u32,
    /// The store's own violations.
    violations: Vec<(Kind, String)>,
}

/// The key that holds object `id` in `store` (which must hold it).
fn id_seq(store: &[u16; NSEQ], id: u16) -> usize {
    let seq = store
        .iter()
        .position(|&x| x == id)
        .expect("a delivered object is in the store");
    assert!(seq > 0);
    seq
}

/// The sequences → objects of a store, one byte each: the key of the per-store caches.
fn store_key(store: &[u16; NSEQ]) -> u128 {
    store[1..]
        .iter()
        .fold(0u128, |k, &id| k << 8 | u128::from(id))
}

const FLAG_POISONED: u8 = 1;
const FLAG_PLAN_ERROR: u8 = 2;
const FLAG_EPOCH_NOT_ABOVE: u8 = 4;

/// A create, by owner.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum FRef {
    A(u8),
    B(u8),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Action {
    /// A seals its next object and sends its create.
    ASend,
    /// A create reaches the store.
    Arrive(FRef),
    /// A create is answered: definitely (by what its arrival did) or with an unknown error.
    Answer(FRef, bool),
    /// A create nobody waits for any more lands.
    GhostLand(u16),
    /// ... or never will (only once every actor is done).
    GhostDrop(u16),
    /// B lists (atomically).
    List,
    /// B's torn listing starts ...
    ListStart,
    /// ... and ends having seen these sequences.
    ListEnd(u32),
    /// The follower probes its next key.
    FProbe,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
enum Kind {
    /// At a final state, an acknowledged object is not on the chain recovery chooses.
    LostFinal,
    /// ... although it is complete (every link back to the chain's start names a present
    /// object with the recorded epoch): a newer chain left it out, as opposed to an
    /// object whose own chain is broken.
    LostFinalComplete,
    /// At some state, an acknowledged object is not on the chain of the store then.
    LostAnytime,
    /// A chain holds a claim.
    ClaimOnChain,
    /// Objects of one epoch written by two instances.
    EpochClash,
    /// A create found other bytes of its own epoch.
    Poisoned,
    /// `plan_opening` refused.
    PlanError,
    /// An opener planned an epoch not above every epoch it listed.
    EpochNotAbove,
    /// What the follower delivered (after the chain it started from) is not a prefix of
    /// the chain recovery chooses over the store at some state.
    FollowerOffChain,
    /// ... over the final store.
    FollowerOffChainFinal,
    /// At a final state, where the follower's next key is absent (it probed every key
    /// it could), the chain recovery chooses holds objects it has not delivered.
    FollowerBehind,
}

/// A vector of at most `N` items, stored inline (states are cloned and hashed a lot).
#[derive(Clone, Copy, Debug)]
struct Fv<T: Copy + Default, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Default for Fv<T, N> {
    fn default() -> Self {
        Fv {
            len: 0,
            items: [T::default(); N],
        }
    }
}

impl<T: Copy + Default, const N: usize> Fv<T, N> {
    fn one(x: T) -> Self {
        let mut v = Self::default();
        v.push(x);
        v
    }
    fn push(&mut self, x: T) {
        assert!(usize::from(self.len) < N, "capacity {N} exceeded");
        self.items[usize::from(self.len)] = x;
        self.len += 1;
    }
    fn clear(&mut self) {
        *self = Self::default();
    }
    fn insert(&mut self, at: usize, x: T) {
        self.push(x);
        self[at..].rotate_right(1);
    }
    fn remove(&mut self, at: usize) -> T {
        let x = self[at];
        self[at..].rotate_left(1);
        self.len -= 1;
        self.items[usize::from(self.len)] = T::default();
        x
    }
    fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        let mut v = Self::default();
        for x in self.iter().filter(|x| keep(x)) {
            v.push(*x);
        }
        *self = v;
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for Fv<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..usize::from(self.len)]
    }
}

impl<T: Copy + Default, const N: usize> std::ops::DerefMut for Fv<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..usize::from(self.len)]
    }
}

impl<T: Copy + Default, const N: usize> FromIterator<T> for Fv<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = Self::default();
        for x in iter {
            v.push(x);
        }
        v
    }
}

// Items past `len` are always `T::default()`, so the derived-like comparisons over the
// whole array agree with comparisons of the slices.
impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for Fv<T, N> {
    fn eq(&self, o: &Self) -> bool {
        self.len == o.len && self.items == o.items
    }
}

impl<T: Copy + Default + Eq, const N: usize> Eq for Fv<T, N> {}

// ---------------------------------------------------------------------------------------
// A fast hasher (FxHash's multiply) for the visited set: SipHash dominates otherwise.

#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

// ---------------------------------------------------------------------------------------
// The explorer

struct Explorer {
    model: Model,
    objs: Vec<Obj>,
    ids: FxMap<Obj, u16>,
    chains: FxMap<u128, Vec<u64>>,
    /// Per store: its chain, its complete objects, its own violations.
    facts: FxMap<u128, std::rc::Rc<StoreFacts>>,
    a_epoch: u64,
    a_base: u64,
    a_first_link: (u64, u64),
    /// The chain the follower starts from (recovery's over the initial store), and its
    /// end.
    f_start: Vec<u16>,
    f_start_last: Link,
    init: State,
    /// Situations the exploration went through (a check that the model is not vacuous).
    seen: std::collections::BTreeSet<&'static str>,
}

struct Report {
    states: usize,
    transitions: usize,
    finals: usize,
    executions: u128,
    max_depth: usize,
    /// Per violated property: states violating it, and the shortest trace to one.
    violations: BTreeMap<Kind, (usize, Vec<String>)>,
    seen: std::collections::BTreeSet<&'static str>,
    secs: f64,
}

impl Explorer {
    fn new(model: Model) -> Self {
        let mut ex = Explorer {
            model,
            objs: Vec::new(),
            ids: FxMap::default(),
            chains: FxMap::default(),
            facts: FxMap::default(),
            a_epoch: 0,
            a_base: 0,
            a_first_link: (0, 0),
            f_start: Vec::new(),
            f_start_last: Link::NONE,
            seen: Default::default(),
            init: State {
                store: [0; NSEQ],
                ghosts: Fv::default(),
                a: AState {
                    objs: [0; A_OBJECTS],
                    flights: [None; A_OBJECTS],
                    sent: 0,
                    head: 0,
                    acked: 0,
                    skipped: 0,
                    terminal: false,
                },
                b: BState {
                    phase: Phase::List,
                    attempt: 1,
                    flights: Fv::default(),
                    todo: Fv::default(),
                    opening: 0,
                    opened: false,
                    data_acked: false,
                },
                f: FState {
                    next_key: 0,
                    delivered: Fv::default(),
                },
                flags: 0,
            },
        };
        ex.setup();
        ex
    }

    /// Builds the initial store with the real `plan_opening` / `choose_chain`.
    fn setup(&mut self) {
        let mut store = [0u16; NSEQ];
        match self.model.scenario {
            Scenario::Fresh => {
                let plan = plan_opening(&[], None).expect("plan on an empty prefix");
                assert!(plan.claims.is_empty());
                assert_eq!((plan.opening.sequence, plan.epoch), (1, 2));
                store[1] = self.intern(Obj::from_header(&plan.opening, false, Who::A));
                self.a_epoch = plan.epoch;
                self.a_base = plan.opening.sequence + 1;
                self.a_first_link = (plan.opening.sequence, plan.epoch);
            }
            Scenario::Takeover => {
                let z = plan_opening(&[], None).expect("plan on an empty prefix");
                let ze = z.epoch;
                let z_obj = |seq: u64| Obj {
                    seq,
                    epoch: ze,
                    link: (seq - 1, ze),
                    claim: false,
                    data: true,
                    writer: Who::Z,
                };
                store[1] = self.intern(Obj::from_header(&z.opening, false, Who::Z));
                store[3] = self.intern(z_obj(3));
                // A lists {1, 3}.
                let mut headers = BTreeMap::new();
                for s in [1u64, 3] {
                    headers.insert(s, self.objs[usize::from(store[s as usize] - 1)].header());
                }
                let chain = choose_chain(&headers);
                assert_eq!(chain, vec![1]);
                let plan = plan_opening(&[1, 3], headers.get(&1)).expect("A's plan");
                assert_eq!(plan.claims.len(), 1);
                assert_eq!((plan.claims[0].sequence, plan.opening.sequence), (2, 4));
                assert_eq!(plan.epoch, 5);
                store[2] = self.intern(Obj::from_header(&plan.claims[0], false, Who::A));
                store[4] = self.intern(Obj::from_header(&plan.opening, false, Who::A));
                // Z was fenced at 2 (acknowledged nothing after its opening); its create
                // of 5 may still land.
                let ghost = self.intern(z_obj(5));
                self.init.ghosts.push(ghost);
                self.a_epoch = plan.epoch;
                self.a_base = plan.opening.sequence + 1;
                self.a_first_link = (plan.opening.sequence, plan.epoch);
            }
        }
        self.init.store = store;
        // The follower lists only to start: it replays the chain recovery chooses over
        // the initial store, then probes the keys above its end.
        let chain = self.chain(&store, Self::keys(&store));
        self.f_start = chain.iter().map(|&s| store[s as usize]).collect();
        self.f_start_last = chain.last().map_or(Link::NONE, |&s| Link {
            sequence: s,
            epoch: self.obj(store[s as usize]).epoch,
        });
        self.init.f.next_key = u8::try_from(self.f_start_last.sequence + 1).expect("small");
        // A probe that finds the key absent ends the walk where it started: it leaves the
        // follower as it was, so it is no step of the model (see `enabled`).
        let walk = walk_probes(self.f_start_last, self.f_start_last.sequence + 1, &[None]);
        assert!(walk.extended.is_empty() && walk.met_absent);
        assert_eq!(
            (walk.last, walk.next_key),
            (self.f_start_last, self.f_start_last.sequence + 1)
        );
    }

    fn saw(&mut self, what: &'static str) {
        if !self.seen.contains(what) {
            self.seen.insert(what);
        }
    }

    fn intern(&mut self, o: Obj) -> u16 {
        assert!(
            (o.seq as usize) < NSEQ,
            "sequence {} outside the model",
            o.seq
        );
        if let Some(&id) = self.ids.get(&o) {
            return id;
        }
        self.objs.push(o);
        let id = u16::try_from(self.objs.len()).expect("few objects");
        assert!(id < 256, "object ids are packed in a byte");
        self.ids.insert(o, id);
        id
    }

    fn obj(&self, id: u16) -> &Obj {
        &self.objs[usize::from(id) - 1]
    }

    fn desc(&self, id: u16) -> String {
        let o = self.obj(id);
        let what = if o.claim {
            "claim"
        } else if o.data {
            "data"
        } else {
            "opening"
        };
        let link = if o.link.0 == 0 {
            "start".to_string()
        } else {
            format!("->{}/e{}", o.link.0, o.link.1)
        };
        format!("{:?}.{what}@{}(e{} {link})", o.writer, o.seq, o.epoch)
    }

    fn store_desc(&self, store: &[u16; NSEQ]) -> String {
        let parts: Vec<String> = (1..NSEQ)
            .filter(|&s| store[s] != 0)
            .map(|s| self.desc(store[s]))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }

    /// The chain recovery (or an opener) chooses over the objects at the sequences in
    /// `mask`; mutation 3 treats claims as ordinary objects.
    fn chain(&mut self, store: &[u16; NSEQ], mask: u32) -> Vec<u64> {
        let mut key = [0u16; NSEQ];
        for s in 1..NSEQ {
            if mask & (1 << s) != 0 {
                key[s] = store[s];
            }
        }
        let k = store_key(&key);
        if let Some(c) = self.chains.get(&k) {
            return c.clone();
        }
        let claims_ordinary = self.model.mutated(Mutation::ClaimEndsChain);
        let headers: BTreeMap<u64, Header> = (1..NSEQ)
            .filter(|&s| key[s] != 0)
            .map(|s| {
                let mut h = self.obj(key[s]).header();
                if claims_ordinary {
                    h.claim = false;
                }
                (s as u64, h)
            })
            .collect();
        let chain = choose_chain(&headers);
        self.chains.insert(k, chain.clone());
        chain
    }

    fn keys(store: &[u16; NSEQ]) -> u32 {
        (1..NSEQ)
            .filter(|&s| store[s] != 0)
            .fold(0, |m, s| m | 1 << s)
    }

    fn a_done(s: &State) -> bool {
        s.a.terminal || usize::from(s.a.head) == A_OBJECTS
    }

    fn b_done(s: &State) -> bool {
        matches!(s.b.phase, Phase::Done | Phase::GaveUp)
    }

    // ----- enabled actions

    fn enabled(&self, s: &State) -> Vec<Action> {
        let mut acts = Vec::new();
        if !s.a.terminal && usize::from(s.a.sent) < A_OBJECTS {
            acts.push(Action::ASend);
        }
        let flights =
            s.a.flights
                .iter()
                .enumerate()
                .filter_map(|(i, f)| f.map(|f| (FRef::A(i as u8), f)))
                .chain(
                    s.b.flights
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (FRef::B(i as u8), *f)),
                );
        for (r, f) in flights {
            match f.st {
                Fl::Travelling(_) => {
                    acts.push(Action::Arrive(r));
                    acts.push(Action::Answer(r, false));
                }
                Fl::Arrived(..) => {
                    acts.push(Action::Answer(r, true));
                    acts.push(Action::Answer(r, false));
                }
                Fl::Done(_) | Fl::Unsent => {}
            }
        }
        match s.b.phase {
            Phase::List if self.model.torn_listing => acts.push(Action::ListStart),
            Phase::List => acts.push(Action::List),
            Phase::Listing(start) => {
                let now = Self::keys(&s.store);
                let extra = now & !start;
                // Every set between the store at the start and the store now.
                let mut sub = extra;
                loop {
                    acts.push(Action::ListEnd(start | sub));
                    if sub == 0 {
                        break;
                    }
                    sub = (sub - 1) & extra;
                }
            }
            _ => {}
        }
        if self.model.follower {
            // Its next key holds an object (mutation 6: or a later key does). A probe
            // of an absent key changes nothing (`setup`), so it is left out.
            let k = usize::from(s.f.next_key);
            if k < NSEQ
                && (s.store[k] != 0
                    || self.model.mutated(Mutation::FollowerSkipsAbsent)
                        && s.store[k + 1..].iter().any(|&id| id != 0))
            {
                acts.push(Action::FProbe);
            }
        }
        let all_done = Self::a_done(s) && Self::b_done(s);
        for &g in s.ghosts.iter() {
            acts.push(Action::GhostLand(g));
            if all_done {
                acts.push(Action::GhostDrop(g));
            }
        }
        acts
    }

    // ----- transitions

    fn flight(s: &State, r: FRef) -> Flight {
        match r {
            FRef::A(i) => s.a.flights[usize::from(i)].expect("A's flight"),
            FRef::B(i) => s.b.flights[usize::from(i)],
        }
    }

    fn set_flight(s: &mut State, r: FRef, f: Flight) {
        match r {
            FRef::A(i) => s.a.flights[usize::from(i)] = Some(f),
            FRef::B(i) => s.b.flights[usize::from(i)] = f,
        }
    }

    fn add_ghost(s: &mut State, obj: u16) {
        if let Err(at) = s.ghosts.binary_search(&obj) {
            s.ghosts.insert(at, obj);
        }
    }

    fn apply(&mut self, s: &State, act: Action, log: &mut Option<String>) -> State {
        let mut n = *s;
        match act {
            Action::ASend => self.a_send(&mut n, log),
            Action::Arrive(r) => {
                let mut f = Self::flight(&n, r);
                let Fl::Travelling(t) = f.st else {
                    unreachable!()
                };
                let seq = self.obj(f.obj).seq as usize;
                let landed = n.store[seq] == 0;
                if landed {
                    n.store[seq] = f.obj;
                }
                if let Some(l) = log {
                    if landed {
                        let _ = write!(l, "create of {} lands", self.desc(f.obj));
                    } else {
                        let _ = write!(
                            l,
                            "create of {} is refused: {} holds the key",
                            self.desc(f.obj),
                            self.desc(n.store[seq])
                        );
                    }
                }
                f.st = Fl::Arrived(t, landed);
                Self::set_flight(&mut n, r, f);
            }
            Action::Answer(r, definite) => self.answer(&mut n, r, definite, log),
            Action::GhostLand(g) => {
                let seq = self.obj(g).seq as usize;
                assert_eq!(n.store[seq], 0);
                n.store[seq] = g;
                n.ghosts.retain(|&x| x != g);
                self.saw("a late create lands");
                if let Some(l) = log {
                    let _ = write!(l, "late create of {} lands", self.desc(g));
                }
            }
            Action::GhostDrop(g) => {
                n.ghosts.retain(|&x| x != g);
                if let Some(l) = log {
                    let _ = write!(l, "late create of {} never lands", self.desc(g));
                }
            }
            Action::List => {
                let mask = Self::keys(&n.store);
                self.b_plan(&mut n, mask, log);
            }
            Action::ListStart => {
                n.b.phase = Phase::Listing(Self::keys(&n.store));
                if let Some(l) = log {
                    let _ = write!(l, "B starts listing (attempt {})", n.b.attempt);
                }
            }
            Action::ListEnd(mask) => self.b_plan(&mut n, mask, log),
            Action::FProbe => self.f_probe(&mut n, log),
        }
        // A late create whose key is taken can never land.
        let store = n.store;
        let objs = &self.objs;
        n.ghosts
            .retain(|&g| store[objs[usize::from(g) - 1].seq as usize] == 0);
        n
    }

    fn a_send(&mut self, n: &mut State, log: &mut Option<String>) {
        let i = usize::from(n.a.sent);
        // The link: the last object sealed in this epoch (mutation 4: that was not
        // skipped), or A's opening object.
        let link = (0..i)
            .rev()
            .find(|&j| n.a.skipped & (1 << j) == 0)
            .map_or(self.a_first_link, |j| {
                (self.a_base + j as u64, self.a_epoch)
            });
        let obj = self.intern(Obj {
            seq: self.a_base + i as u64,
            epoch: self.a_epoch,
            link,
            claim: false,
            data: true,
            writer: Who::A,
        });
        n.a.objs[i] = obj;
        n.a.flights[i] = Some(Flight {
            obj,
            persist: true,
            st: Fl::Travelling(1),
        });
        n.a.sent += 1;
        if let Some(l) = log {
            let _ = write!(l, "A seals and sends {}", self.desc(obj));
        }
    }

    fn answer(&mut self, n: &mut State, r: FRef, definite: bool, log: &mut Option<String>) {
        let mut f = Self::flight(n, r);
        let me = *self.obj(f.obj);
        let attempts = self.model.persist_attempts;
        let retry_or_unknown = |t: u8| {
            if f.persist && t < attempts {
                Fl::Travelling(t + 1)
            } else {
                Fl::Done(Out::Unknown)
            }
        };
        let mut note = String::new();
        f.st = match (f.st, definite) {
            (Fl::Travelling(t), false) => {
                // Not arrived yet: it may still land, or never.
                Self::add_ghost(n, f.obj);
                note.push_str(" (the request may still land)");
                retry_or_unknown(t)
            }
            (Fl::Arrived(t, _), false) => retry_or_unknown(t),
            (Fl::Arrived(_, true), true) => Fl::Done(if f.persist {
                Out::Durable
            } else {
                Out::Created
            }),
            (Fl::Arrived(_, false), true) if !f.persist => Fl::Done(Out::AlreadyExists),
            (Fl::Arrived(_, false), true) => {
                // `persist`: read the key.
                let found = *self.obj(n.store[me.seq as usize]);
                let out = if found.same_bytes(&me) {
                    self.saw("persist: AlreadyExists on identical bytes is durable");
                    Out::Durable
                } else if found.epoch > me.epoch {
                    self.saw("persist: fenced");
                    Out::Fenced
                } else if found.epoch < me.epoch {
                    self.saw("persist: stale tail");
                    Out::StaleTail
                } else {
                    n.flags |= FLAG_POISONED;
                    Out::Poisoned
                };
                let _ = write!(
                    note,
                    " (AlreadyExists; the key holds {})",
                    self.desc(n.store[me.seq as usize])
                );
                Fl::Done(out)
            }
            (Fl::Travelling(_), true) | (Fl::Done(_) | Fl::Unsent, _) => unreachable!(),
        };
        if let Some(l) = log {
            let what = match f.st {
                Fl::Travelling(t) => format!("unknown error{note}; retried (attempt {t})"),
                Fl::Done(Out::Unknown) => format!("unknown error{note}; given up"),
                Fl::Done(o) => format!("{o:?}{note}"),
                Fl::Arrived(..) | Fl::Unsent => unreachable!(),
            };
            let _ = write!(l, "create of {} answered: {what}", self.desc(f.obj));
        }
        Self::set_flight(n, r, f);
        match r {
            FRef::A(_) => self.a_acknowledge(n, log),
            FRef::B(_) => self.b_react(n, log),
        }
    }

    /// The writer's rule: acknowledge in sequence order while the head is durable; the
    /// first other outcome at the head ends the epoch (mutation 4: an unknown outcome is
    /// skipped instead).
    fn a_acknowledge(&mut self, n: &mut State, log: &mut Option<String>) {
        if self.model.mutated(Mutation::SkipUnknown) {
            for i in 0..A_OBJECTS {
                if matches!(
                    n.a.flights[i],
                    Some(Flight {
                        st: Fl::Done(Out::Unknown),
                        ..
                    })
                ) {
                    n.a.skipped |= 1 << i;
                }
            }
        }
        while n.a.head < n.a.sent {
            let i = usize::from(n.a.head);
            let Some(f) = n.a.flights[i] else {
                unreachable!()
            };
            match f.st {
                Fl::Done(Out::Durable) => {
                    n.a.acked |= 1 << i;
                    n.a.head += 1;
                    self.saw("A acknowledges an object");
                    if usize::from(n.a.head) == A_OBJECTS {
                        self.saw("A acknowledges all its objects");
                    }
                    if let Some(l) = log {
                        let _ = write!(l, "; A ACKNOWLEDGES {}", self.desc(f.obj));
                    }
                }
                Fl::Done(Out::Unknown) if self.model.mutated(Mutation::SkipUnknown) => {
                    n.a.head += 1;
                    if let Some(l) = log {
                        let _ = write!(l, "; A skips {} and goes on", self.desc(f.obj));
                    }
                }
                Fl::Done(o) => {
                    // Nothing more is acknowledged; requests still in the air may land.
                    n.a.terminal = true;
                    self.saw(if n.a.acked == 0 {
                        "A's epoch ends with nothing acknowledged"
                    } else {
                        "A's epoch ends after acknowledging"
                    });
                    for k in 0..A_OBJECTS {
                        if let Some(Flight {
                            obj,
                            st: Fl::Travelling(_),
                            ..
                        }) = n.a.flights[k].take()
                        {
                            Self::add_ghost(n, obj);
                        }
                    }
                    if let Some(l) = log {
                        let _ = write!(l, "; A's epoch ends ({o:?})");
                    }
                    break;
                }
                _ => break,
            }
        }
    }

    /// The follower's chain end: the last object it delivered, or the end of the chain
    /// it started from.
    fn f_last(&self, s: &State) -> Link {
        s.f.delivered.last().map_or(self.f_start_last, |&id| {
            let o = self.obj(id);
            Link {
                sequence: o.seq,
                epoch: o.epoch,
            }
        })
    }

    /// The follower probes its next key and walks it with the crate's `walk_probes`.
    fn f_probe(&mut self, n: &mut State, log: &mut Option<String>) {
        let key = u64::from(n.f.next_key);
        let last = self.f_last(n);
        let id = n.store[key as usize];
        if id == 0 {
            assert!(self.model.mutated(Mutation::FollowerSkipsAbsent));
            n.f.next_key += 1;
            if let Some(l) = log {
                let _ = write!(
                    l,
                    "F probes {key}: absent [mutation: passed over, a later key holds an object]"
                );
            }
            return;
        }
        let o = *self.obj(id);
        let mut header = o.header();
        if self.model.mutated(Mutation::FollowerIgnoresLinks) && !header.claim {
            header.link = last;
        }
        let walk = walk_probes(last, key, &[Some(&header)]);
        assert!(!walk.met_absent && walk.next_key == key + 1);
        n.f.next_key = u8::try_from(walk.next_key).expect("small");
        let what = if walk.extended.is_empty() {
            assert_eq!(walk.last, last);
            if o.claim {
                self.saw("F passes over a claim");
                "a claim, passed over".to_string()
            } else {
                self.saw("F passes over an orphan");
                format!(
                    "an orphan (F's chain ends at {}/e{}), passed over",
                    last.sequence, last.epoch
                )
            }
        } else {
            assert_eq!(walk.extended, vec![key]);
            assert_eq!(
                walk.last,
                Link {
                    sequence: key,
                    epoch: o.epoch
                }
            );
            n.f.delivered.push(id);
            self.saw("F delivers an object");
            let acknowledged = match o.writer {
                Who::A => n.a.acked & 1 << (key - self.a_base) != 0,
                Who::B if o.data => n.b.data_acked,
                Who::B => n.b.opened,
                Who::Z => false,
            };
            if !acknowledged {
                self.saw("F delivers an object its writer has not acknowledged");
            }
            if o.writer == Who::B {
                self.saw("F delivers an object of B");
            }
            "F DELIVERS it".to_string()
        };
        if let Some(l) = log {
            let _ = write!(l, "F probes {key}: {}: {what}", self.desc(id));
        }
    }

    /// B lists the sequences in `mask` and plans its open with the real decisions.
    fn b_plan(&mut self, n: &mut State, mask: u32, log: &mut Option<String>) {
        let chain = self.chain(&n.store, mask);
        let present: Vec<u64> = (1..NSEQ as u64).filter(|s| mask & (1 << s) != 0).collect();
        let end = chain
            .last()
            .map(|&s| self.obj(n.store[s as usize]).header());
        let plan = match plan_opening(&present, end.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                n.flags |= FLAG_PLAN_ERROR;
                n.b.phase = Phase::GaveUp;
                if let Some(l) = log {
                    let _ = write!(l, "B lists {present:?}: plan_opening refuses: {e}");
                }
                return;
            }
        };
        // The new epoch is above every epoch listed; B's own claims of an earlier attempt
        // may carry it already (same listing, same plan).
        let above = present.iter().all(|&s| {
            let o = self.obj(n.store[s as usize]);
            o.epoch < plan.epoch || (o.writer == Who::B && o.epoch == plan.epoch)
        });
        if !above {
            n.flags |= FLAG_EPOCH_NOT_ABOVE;
        }
        let mut claims: Vec<u16> = plan
            .claims
            .iter()
            .map(|h| self.intern(Obj::from_header(h, false, Who::B)))
            .collect();
        let opening = self.intern(Obj::from_header(&plan.opening, false, Who::B));
        if !claims.is_empty() {
            self.saw("B claims holes");
        }
        if self.model.mutated(Mutation::NoClaims) {
            claims.clear();
        }
        if let Some(l) = log {
            let listed: Vec<u64> = present.clone();
            let _ = write!(
                l,
                "B lists {listed:?} (attempt {}): chain {chain:?}; plan: epoch {}, claims {:?}, opening {}",
                n.b.attempt,
                plan.epoch,
                plan.claims.iter().map(|h| h.sequence).collect::<Vec<_>>(),
                self.desc(opening)
            );
            if self.model.mutated(Mutation::NoClaims) && !plan.claims.is_empty() {
                l.push_str(" [mutation: claims not sent]");
            }
        }
        n.b.opening = opening;
        let send = |obj: u16| Flight {
            obj,
            persist: false,
            st: Fl::Travelling(1),
        };
        n.b.flights.clear();
        n.b.todo.clear();
        if self.model.mutated(Mutation::OpeningWithClaims) {
            n.b.flights = claims.iter().copied().chain([opening]).map(send).collect();
            n.b.phase = Phase::Claims;
        } else if claims.is_empty() {
            n.b.flights = Fv::one(send(opening));
            n.b.phase = Phase::Opening;
        } else {
            match self.model.claims {
                Claims::Concurrent => n.b.flights = claims.into_iter().map(send).collect(),
                Claims::Sequential => {
                    n.b.flights = Fv::one(send(claims[0]));
                    n.b.todo = claims[1..].iter().copied().collect();
                }
            }
            n.b.phase = Phase::Claims;
        }
    }

    fn b_relist(&mut self, n: &mut State, log: &mut Option<String>) {
        n.b.flights.clear();
        n.b.todo.clear();
        self.saw(if n.b.phase == Phase::Opening {
            "B starts over after its opening object"
        } else {
            "B starts over after a claim"
        });
        if n.b.attempt >= self.model.open_attempts {
            n.b.phase = Phase::GaveUp;
            self.saw("B gives up");
            if let Some(l) = log {
                l.push_str("; B gives up opening");
            }
        } else {
            n.b.attempt += 1;
            n.b.phase = Phase::List;
            if let Some(l) = log {
                l.push_str("; B starts over from the listing");
            }
        }
    }

    fn b_opened(&mut self, n: &mut State, log: &mut Option<String>) {
        n.b.opened = true;
        self.saw(if n.b.attempt == 1 {
            "B opens at its first attempt"
        } else {
            "B opens at a later attempt"
        });
        if let Some(l) = log {
            let _ = write!(l, "; B IS OPEN with {}", self.desc(n.b.opening));
        }
        if self.model.b_writes {
            let o = *self.obj(n.b.opening);
            let data = self.intern(Obj {
                seq: o.seq + 1,
                epoch: o.epoch,
                link: (o.seq, o.epoch),
                claim: false,
                data: true,
                writer: Who::B,
            });
            n.b.flights = Fv::one(Flight {
                obj: data,
                persist: true,
                st: Fl::Travelling(1),
            });
            n.b.phase = Phase::Writing;
            if let Some(l) = log {
                let _ = write!(l, "; B seals and sends {}", self.desc(data));
            }
        } else {
            n.b.flights.clear();
            n.b.phase = Phase::Done;
        }
    }

    fn b_react(&mut self, n: &mut State, log: &mut Option<String>) {
        let done = |f: &Flight| matches!(f.st, Fl::Done(_));
        let created = |f: &Flight| f.st == Fl::Done(Out::Created);
        match n.b.phase {
            Phase::Claims => match self.model.claims {
                Claims::Concurrent => {
                    if !n.b.flights.iter().all(done) {
                        return;
                    }
                    if !n.b.flights.iter().all(created) {
                        self.b_relist(n, log);
                    } else if self.model.mutated(Mutation::OpeningWithClaims) {
                        self.b_opened(n, log);
                    } else {
                        n.b.flights = Fv::one(Flight {
                            obj: n.b.opening,
                            persist: false,
                            st: Fl::Travelling(1),
                        });
                        n.b.phase = Phase::Opening;
                        if let Some(l) = log {
                            let _ = write!(
                                l,
                                "; every claim created: B sends {}",
                                self.desc(n.b.opening)
                            );
                        }
                    }
                }
                Claims::Sequential => {
                    let last = *n.b.flights.last().expect("a claim");
                    if !done(&last) {
                        return;
                    }
                    if !created(&last) {
                        self.b_relist(n, log);
                        return;
                    }
                    let next = if n.b.todo.is_empty() {
                        n.b.phase = Phase::Opening;
                        n.b.opening
                    } else {
                        n.b.todo.remove(0)
                    };
                    n.b.flights = Fv::one(Flight {
                        obj: next,
                        persist: false,
                        st: Fl::Travelling(1),
                    });
                    if let Some(l) = log {
                        let _ = write!(l, "; B sends {}", self.desc(next));
                    }
                }
            },
            Phase::Opening => {
                let f = n.b.flights[0];
                if created(&f) {
                    self.b_opened(n, log);
                } else if done(&f) {
                    self.b_relist(n, log);
                }
            }
            Phase::Writing => match n.b.flights[0].st {
                Fl::Done(Out::Durable) => {
                    let f = n.b.flights.remove(0);
                    n.b.data_acked = true;
                    self.saw("B acknowledges");
                    n.b.phase = Phase::Done;
                    if let Some(l) = log {
                        let _ = write!(l, "; B ACKNOWLEDGES {}", self.desc(f.obj));
                    }
                }
                Fl::Done(o) => {
                    n.b.flights.clear();
                    n.b.phase = Phase::Done;
                    if let Some(l) = log {
                        let _ = write!(l, "; B's epoch ends ({o:?})");
                    }
                }
                _ => {}
            },
            _ => unreachable!("B answered in {:?}", n.b.phase),
        }
    }

    // ----- properties

    /// The objects acknowledged so far: (sequence, object id, who).
    fn acknowledged(&self, s: &State) -> Vec<(u64, u16, &'static str)> {
        let mut out = Vec::new();
        for i in 0..A_OBJECTS {
            if s.a.acked & (1 << i) != 0 {
                out.push((
                    self.a_base + i as u64,
                    s.a.objs[i],
                    "A's acknowledged object",
                ));
            }
        }
        if s.b.opened {
            let o = self.obj(s.b.opening);
            out.push((o.seq, s.b.opening, "B's opening object"));
            if s.b.data_acked {
                let o = *self.obj(s.b.opening);
                let data = self.ids[&Obj {
                    seq: o.seq + 1,
                    epoch: o.epoch,
                    link: (o.seq, o.epoch),
                    claim: false,
                    data: true,
                    writer: Who::B,
                }];
                out.push((o.seq + 1, data, "B's acknowledged object"));
            }
        }
        out
    }

    /// What depends on the store alone: the chain recovery chooses (as a mask of
    /// sequences), whether it holds a claim, whether two instances share an epoch.
    fn store_facts(&mut self, store: &[u16; NSEQ]) -> std::rc::Rc<StoreFacts> {
        let key = store_key(store);
        if let Some(f) = self.facts.get(&key) {
            return f.clone();
        }
        let chain = self.chain(store, Self::keys(store));
        let mut v = Vec::new();
        for &seq in &chain {
            if self.obj(store[seq as usize]).claim {
                v.push((
                    Kind::ClaimOnChain,
                    format!("the chain {chain:?} holds the claim at {seq}"),
                ));
            }
        }
        let mut writers: BTreeMap<u64, Who> = BTreeMap::new();
        for &id in store.iter().filter(|&&id| id != 0) {
            let o = *self.obj(id);
            match writers.get(&o.epoch) {
                Some(&w) if w != o.writer => v.push((
                    Kind::EpochClash,
                    format!("epoch {} written by {w:?} and {:?}", o.epoch, o.writer),
                )),
                _ => {
                    writers.insert(o.epoch, o.writer);
                }
            }
        }
        let mask = chain.iter().fold(0u32, |m, &s| m | 1 << s);
        // Complete objects (the rule of DESIGN.md "The chain"; floors are all 0).
        let mut complete = 0u32;
        for seq in 1..NSEQ {
            if store[seq] == 0 {
                continue;
            }
            let o = *self.obj(store[seq]);
            let ok = !o.claim
                && (o.link.0 == 0 || {
                    let l = store[o.link.0 as usize];
                    l != 0
                        && self.obj(l).epoch == o.link.1
                        && !self.obj(l).claim
                        && complete & (1 << o.link.0) != 0
                });
            if ok {
                complete |= 1 << seq;
            }
        }
        let f = std::rc::Rc::new(StoreFacts {
            chain,
            mask,
            complete,
            violations: v,
        });
        self.facts.insert(key, f.clone());
        f
    }

    fn check(&mut self, s: &State, fin: bool) -> Vec<(Kind, String)> {
        let facts = self.store_facts(&s.store);
        let mut v = facts.violations.clone();
        for (seq, id, who) in self.acknowledged(s) {
            assert_eq!(
                s.store[seq as usize], id,
                "an acknowledged object is present"
            );
            if facts.mask & (1 << seq) == 0 {
                let why = format!(
                    "{who} {} is not on the chain {:?} of {}",
                    self.desc(id),
                    facts.chain,
                    self.store_desc(&s.store)
                );
                if fin {
                    v.push((Kind::LostFinal, why.clone()));
                    if facts.complete & (1 << seq) != 0 {
                        v.push((Kind::LostFinalComplete, format!("{why} (it is complete)")));
                    }
                }
                v.push((Kind::LostAnytime, why));
            }
        }
        if self.model.follower {
            // What F delivered, after the chain it started from, is a prefix of the chain
            // recovery would replay now; at a final state F has probed every key it can,
            // and has delivered that whole chain.
            let view = self.f_start.iter().chain(s.f.delivered.iter());
            let prefix = facts.chain.len() >= self.f_start.len() + s.f.delivered.len()
                && view
                    .zip(&facts.chain)
                    .all(|(&id, &seq)| s.store[seq as usize] == id);
            if !prefix || fin && facts.chain.len() > self.f_start.len() + s.f.delivered.len() {
                let why = format!(
                    "F delivered [{}] after its start chain, the chain of {} is {:?}",
                    s.f.delivered
                        .iter()
                        .map(|&id| self.desc(id))
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.store_desc(&s.store),
                    facts.chain
                );
                if !prefix {
                    if fin {
                        v.push((Kind::FollowerOffChainFinal, why.clone()));
                    }
                    v.push((Kind::FollowerOffChain, why));
                } else {
                    v.push((Kind::FollowerBehind, why));
                }
            }
        }
        if s.flags & FLAG_POISONED != 0 {
            v.push((
                Kind::Poisoned,
                "a create found other bytes of its epoch".into(),
            ));
        }
        if s.flags & FLAG_PLAN_ERROR != 0 {
            v.push((Kind::PlanError, "plan_opening refused".into()));
        }
        if s.flags & FLAG_EPOCH_NOT_ABOVE != 0 {
            v.push((
                Kind::EpochNotAbove,
                "B's epoch is not above a listed one".into(),
            ));
        }
        v
    }

    // ----- the search

    fn explore(&mut self) -> Report {
        let started = Instant::now();
        let init = self.init;
        let mut index: FxMap<Packed, u32> = FxMap::default();
        let mut parent: Vec<(u32, Action)> = vec![(u32::MAX, Action::List)];
        let mut depth: Vec<u16> = vec![0];
        let mut offsets: Vec<u32> = vec![0];
        let mut edges: Vec<u32> = Vec::new();
        let mut terminal: Vec<bool> = Vec::new();
        let mut first: BTreeMap<Kind, (u32, String, usize)> = BTreeMap::new();
        index.insert(init.pack(), 0);
        let mut queue: VecDeque<(u32, State)> = VecDeque::from([(0, init)]);
        let mut next_id: u32 = 1;
        let mut finals = 0usize;
        while let Some((id, s)) = queue.pop_front() {
            assert_eq!(id as usize, offsets.len() - 1, "BFS order");
            let acts = self.enabled(&s);
            let fin = acts.is_empty();
            if fin {
                // Nothing left: every actor is done, every late create landed or dropped.
                assert!(Self::a_done(&s) && Self::b_done(&s) && s.ghosts.is_empty());
                assert!(s
                    .a
                    .flights
                    .iter()
                    .all(|f| f.is_none_or(|f| matches!(f.st, Fl::Done(_)))));
                finals += 1;
                if s.a.acked != 0 && s.b.opened {
                    self.saw("final: A acknowledged objects and B is open");
                }
            }
            terminal.push(fin);
            for (kind, why) in self.check(&s, fin) {
                first
                    .entry(kind)
                    .and_modify(|e| e.2 += 1)
                    .or_insert((id, why, 1));
            }
            for a in acts {
                let t = self.apply(&s, a, &mut None);
                let tid = match index.entry(t.pack()) {
                    std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let tid = next_id;
                        next_id += 1;
                        e.insert(tid);
                        parent.push((id, a));
                        depth.push(depth[id as usize] + 1);
                        queue.push_back((tid, t));
                        tid
                    }
                };
                edges.push(tid);
            }
            offsets.push(edges.len() as u32);
        }
        let states = next_id as usize;
        let executions = count_paths(&offsets, &edges, &terminal);
        let mut violations = BTreeMap::new();
        for (kind, (id, why, count)) in first {
            let mut trace = self.trace(&parent, id);
            trace.push(format!("=> {why}"));
            violations.insert(kind, (count, trace));
        }
        Report {
            states,
            transitions: edges.len(),
            finals,
            executions,
            max_depth: usize::from(depth.iter().copied().max().unwrap_or(0)),
            violations,
            seen: self.seen.clone(),
            secs: started.elapsed().as_secs_f64(),
        }
    }

    /// The actions from the initial state to state `id`, replayed with descriptions.
    fn trace(&mut self, parent: &[(u32, Action)], id: u32) -> Vec<String> {
        let mut acts = Vec::new();
        let mut at = id;
        while at != 0 {
            let (p, a) = parent[at as usize];
            acts.push(a);
            at = p;
        }
        acts.reverse();
        let mut s = self.init;
        let follower = if self.model.follower {
            format!(
                "; F follows from the chain [{}] (next key {})",
                self.f_start
                    .iter()
                    .map(|&id| self.desc(id))
                    .collect::<Vec<_>>()
                    .join(", "),
                s.f.next_key
            )
        } else {
            String::new()
        };
        let mut out = vec![format!(
            "start: store {}; A (epoch {}) has sent nothing yet{follower}{}",
            self.store_desc(&s.store),
            self.a_epoch,
            if s.ghosts.is_empty() {
                String::new()
            } else {
                format!(
                    "; in the air: {}",
                    s.ghosts
                        .iter()
                        .map(|&g| self.desc(g))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )];
        for (k, a) in acts.into_iter().enumerate() {
            let mut log = Some(String::new());
            s = self.apply(&s, a, &mut log);
            out.push(format!("{:>2}. {}", k + 1, log.unwrap_or_default()));
        }
        let chain = self.chain(&s.store, Self::keys(&s.store));
        out.push(format!(
            "final store {}; recovery's chain {chain:?}",
            self.store_desc(&s.store)
        ));
        out
    }
}

/// Number of distinct executions (paths from the initial state to a final state) of the
/// state graph, which is acyclic (every action consumes progress).
fn count_paths(offsets: &[u32], edges: &[u32], terminal: &[bool]) -> u128 {
    let n = terminal.len();
    let mut paths: Vec<Option<u128>> = vec![None; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<(u32, u32)> = vec![(0, offsets[0])];
    on_stack[0] = true;
    while let Some(&mut (v, ref mut next)) = stack.last_mut() {
        let v = v as usize;
        if *next < offsets[v + 1] {
            let w = edges[*next as usize] as usize;
            *next += 1;
            assert!(!on_stack[w], "the state graph has a cycle");
            if paths[w].is_none() {
                on_stack[w] = true;
                stack.push((w as u32, offsets[w]));
            }
        } else {
            let total = if terminal[v] {
                1
            } else {
                edges[offsets[v] as usize..offsets[v + 1] as usize]
                    .iter()
                    .map(|&w| paths[w as usize].expect("successor counted"))
                    .fold(0u128, u128::saturating_add)
            };
            paths[v] = Some(total);
            on_stack[v] = false;
            stack.pop();
        }
    }
    paths[0].expect("initial state counted")
}

// ---------------------------------------------------------------------------------------
// The tests

fn run(name: &str, model: Model) -> Report {
    let mut ex = Explorer::new(model);
    let r = ex.explore();
    println!(
        "[{name}] {model:?}\n  {} states, {} transitions, {} final states, {} distinct \
         executions (interleavings, every one covered through the visited set), longest \
         {} steps, {:.2}s",
        r.states, r.transitions, r.finals, r.executions, r.max_depth, r.secs
    );
    for (kind, (count, trace)) in &r.violations {
        println!("  VIOLATION {kind:?} in {count} states; shortest trace:");
        for line in trace {
            println!("    {line}");
        }
    }
    if r.violations.is_empty() {
        println!("  no violation");
    }
    r
}

/// Sanity floors: the explorer must not silently explore nothing.
fn assert_explored(name: &str, r: &Report, min_states: usize) {
    assert!(
        r.states >= min_states,
        "{name}: only {} states explored",
        r.states
    );
    assert!(
        r.finals >= 100 && r.executions >= 1_000_000,
        "{name}: {} final states, {} executions",
        r.finals,
        r.executions
    );
}

/// What every run of the unmodified design must go through, so that "no violation" is
/// not vacuous.
const COVERAGE: &[&str] = &[
    "A acknowledges an object",
    "A acknowledges all its objects",
    "A's epoch ends with nothing acknowledged",
    "A's epoch ends after acknowledging",
    "persist: fenced",
    "a late create lands",
    "B claims holes",
    "B starts over after a claim",
    "B starts over after its opening object",
    "B gives up",
    "B opens at its first attempt",
    "B opens at a later attempt",
    "B acknowledges",
    "final: A acknowledged objects and B is open",
];

/// ... and with the follower.
const FOLLOWER_COVERAGE: &[&str] = &[
    "F delivers an object",
    "F delivers an object its writer has not acknowledged",
    "F delivers an object of B",
    "F passes over a claim",
    "F passes over an orphan",
];

fn assert_safe(name: &str, model: Model, min_states: usize, also_seen: &[&str]) -> Report {
    let r = run(name, model);
    assert_explored(name, &r, min_states);
    let follower = if model.follower {
        FOLLOWER_COVERAGE
    } else {
        &[]
    };
    for what in COVERAGE.iter().chain(follower).chain(also_seen) {
        assert!(r.seen.contains(what), "{name}: never saw \"{what}\"");
    }
    assert!(
        r.violations.is_empty(),
        "{name}: the unmodified design has counterexamples: {:#?}",
        r.violations
    );
    r
}

/// A mutated design must lose an acknowledged object that is complete (a newer chain
/// leaves it out); returns the shortest trace to such a final state.
fn assert_bites(name: &str, model: Model) -> Vec<String> {
    let r = assert_catches(name, model, Kind::LostFinalComplete, "ACKNOWLEDGES");
    r.violations[&Kind::LostFinalComplete].1.clone()
}

/// A mutated design must violate `kind`, in a trace with a step that says `marker`.
fn assert_catches(name: &str, model: Model, kind: Kind, marker: &str) -> Report {
    let r = run(name, model);
    assert_explored(name, &r, 5_000);
    let (_, trace) = r.violations.get(&kind).unwrap_or_else(|| {
        panic!(
            "{name}: the mutation went unnoticed (no {kind:?}); violations: {:?}",
            r.violations.keys().collect::<Vec<_>>()
        )
    });
    assert!(trace.len() > 3, "a trace of the counterexample");
    assert!(trace.iter().any(|l| l.contains(marker)));
    r
}

/// The mutations run with one create attempt per `persist` (retries play no part in
/// their counterexamples; it keeps the file fast).
fn mutant(m: Mutation) -> Model {
    Model {
        persist_attempts: 1,
        ..Model::design(Scenario::Fresh).with(m)
    }
}

#[test]
fn design_is_safe_fresh() {
    assert_safe(
        "design, fresh",
        Model::design(Scenario::Fresh),
        50_000,
        &["persist: AlreadyExists on identical bytes is durable"],
    );
}

#[test]
fn design_is_safe_takeover() {
    assert_safe(
        "design, takeover",
        Model::design(Scenario::Takeover),
        50_000,
        &[
            "persist: AlreadyExists on identical bytes is durable",
            "persist: stale tail",
        ],
    );
}

/// The brief's opener: claims one at a time, each awaited before the next.
#[test]
fn design_is_safe_with_sequential_claims() {
    for sc in [Scenario::Fresh, Scenario::Takeover] {
        let model = Model {
            claims: Claims::Sequential,
            persist_attempts: 1,
            ..Model::design(sc)
        };
        assert_safe("design, sequential claims", model, 10_000, &[]);
    }
}

/// A listing that may miss any object created while it runs.
#[test]
fn design_is_safe_with_torn_listings() {
    for sc in [Scenario::Fresh, Scenario::Takeover] {
        let model = Model {
            torn_listing: true,
            persist_attempts: 1,
            ..Model::design(sc)
        };
        assert_safe("design, torn listings", model, 10_000, &[]);
    }
}

#[test]
fn mutation_no_claims_loses_acknowledged_objects() {
    let trace = assert_bites("mutation 1: no claims", mutant(Mutation::NoClaims));
    assert!(trace.iter().any(|l| l.contains("claims not sent")));
}

#[test]
fn mutation_opening_with_claims_loses_acknowledged_objects() {
    assert_bites(
        "mutation 2: opening object sent with the claims",
        mutant(Mutation::OpeningWithClaims),
    );
}

#[test]
fn mutation_claim_ends_chain_loses_acknowledged_objects() {
    let trace = assert_bites(
        "mutation 3: a claim may end a chain",
        mutant(Mutation::ClaimEndsChain),
    );
    assert!(trace.iter().any(|l| l.contains("B.claim")));
    // The rule is needed because the claims are sent together (as `open_instance`
    // does): one at a time in ascending order, a claim that ends a chain puts a claim on
    // the chain but, in this scope, loses no acknowledged object.
    let sequential = run(
        "mutation 3 with sequential claims (for information)",
        Model {
            claims: Claims::Sequential,
            ..mutant(Mutation::ClaimEndsChain)
        },
    );
    assert!(sequential.violations.contains_key(&Kind::ClaimOnChain));
}

#[test]
fn mutation_skip_unknown_loses_acknowledged_objects() {
    let trace = assert_bites(
        "mutation 4: the writer skips an unknown outcome",
        mutant(Mutation::SkipUnknown),
    );
    assert!(trace.iter().any(|l| l.contains("A skips")));
}

/// Only the follower changed: it delivers an orphan (Z's late create in the takeover; in
/// the fresh scenario a late object of A whose predecessor's key B took) that no
/// recovery replays. The writers' properties still hold.
#[test]
fn mutation_follower_ignoring_links_delivers_off_chain() {
    for sc in [Scenario::Fresh, Scenario::Takeover] {
        let r = assert_catches(
            "mutation 5: the follower ignores links",
            Model {
                persist_attempts: 1,
                ..Model::design(sc).with(Mutation::FollowerIgnoresLinks)
            },
            Kind::FollowerOffChainFinal,
            "F DELIVERS",
        );
        assert!(
            r.violations.keys().all(|k| matches!(
                k,
                Kind::FollowerOffChain | Kind::FollowerOffChainFinal | Kind::FollowerBehind
            )),
            "{:?}",
            r.violations.keys().collect::<Vec<_>>()
        );
    }
}

/// A follower that passes over an absent key (as the mutated poll would when a later key
/// of the same round holds an object) never delivers an object off the chain here (an
/// object linked to its chain end above an absent key would be an opening object, sent
/// only once every key below it exists) but falls behind for good: the chain object
/// that later lands at the key it skipped, and everything linked after it, is never
/// delivered.
#[test]
fn mutation_follower_skipping_absent_keys_falls_behind() {
    for sc in [Scenario::Fresh, Scenario::Takeover] {
        let r = assert_catches(
            "mutation 6: the follower skips absent keys",
            Model {
                persist_attempts: 1,
                ..Model::design(sc).with(Mutation::FollowerSkipsAbsent)
            },
            Kind::FollowerBehind,
            "[mutation: passed over",
        );
        assert_eq!(
            r.violations.keys().collect::<Vec<_>>(),
            vec![&Kind::FollowerBehind]
        );
    }
}
