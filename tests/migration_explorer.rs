//! Exhaustive small-scope check of a region moving between two live nodes (DESIGN.md
//! "Regions moving between nodes": release, acquire, catch-up; FORMAT.md "Version 3"
//! and "Control entries"), with the crate's real write protocol ([`WriteProtocol`]:
//! admission, sealing, pipelined creates, in-order acknowledgement, the end of an
//! epoch, `release`, `acquire`, tickets) and chain rules ([`choose_chain`],
//! [`plan_opening_above`], the control snapshot read back as [`Holdings`]).
//!
//! A hand-written explorer (breadth first, with a visited set of states, as
//! `tests/exhaustive.rs`) enumerates every interleaving of:
//!
//! - a **frontend** that appends `K` entries of region `R`, one per append, tagged
//!   `1..=K` and issued in tag order at any point: to the source **S** until S refuses one
//!   with `RegionReleased`, then to the target **T** once the move is done (T's acquire
//!   answered). An append that fails `MayBeDurable` is never retried; one that fails
//!   `NotWritten` is issued again.
//! - In the busy-target models ([`Model::busy_target`]), the frontend also appends `B`
//!   entries of another region **B** at T (tagged `b1..`, in the same way), at any
//!   point after the release is answered and before T's acquire is answered (before
//!   and during the acquire) while T is in its first epoch: they put T's ids above the
//!   id it acquires, in objects in flight or the open batch, so that the acquire needs
//!   no raise; those objects may be answered unknown, land or not, and T may crash
//!   with them in the air. Bounded to 2 appends of B (and of R), S without epoch ends:
//!   a third append of B, or S's unknown outcomes, multiply the states by several
//!   times for nothing the acquire sees (its no-raise case needs T's open batch above
//!   the acquired id, which 2 creates in flight reach).
//! - **S** and **T**, each a prefix of its own (a map key -> object), each running one
//!   [`WriteProtocol`] per epoch (`max_in_flight` 2, no start interval, no gathering:
//!   every poll seals and starts what a free slot allows). Every create is answered at
//!   any point, in any order among those in flight: durable (it lands), or unknown and
//!   landed, or unknown and never landing (unknown outcomes only while the node has
//!   epoch ends left). When an epoch ends, the creates still in the air land or not
//!   (each an explorer choice), then the node reopens: the chain `choose_chain` picks
//!   over its store, `plan_opening_above` over every key present, the highest sequence
//!   and id base it handed out at admission (as the runtime's supervisor passes them),
//!   its claims and opening object put in the store, the last control snapshot on the
//!   recovered chain read back into [`Holdings`] (`with_holdings`).
//! - the **coordinator**: `release(R)` on S at any point; answered once its ticket is
//!   acknowledged; if S's epoch ends first it asks again on the new epoch and takes
//!   either `RegionReleased { last_id }` (the snapshot is on the recovered chain) or a
//!   fresh release as the answer. In the retried-release model ([`Model::retrying`])
//!   it may also ask once more while it waits (a retry after its call timed out, as
//!   examples/cluster.rs does), and takes whichever answer comes first. If S's log holds nothing of R (no entry on its chain, in flight or in
//!   the open batch) the release is recorded all the same, with `L` none (DESIGN.md: a
//!   release always fences its region). With the answer `L`
//!   and `acquire_above` `A` (`>= L`), `acquire(R, A)` on T, answered once its ticket
//!   is acknowledged (asked again if T's epoch ends first). A **catch-up** at any point
//!   after the release answered: T reads R's entries with id `<= L` from S's chain as
//!   it is at that moment.
//! - T may also **crash** once (a restart of the process): what it had in the air lands
//!   or not, its pending appends fail `MayBeDurable`, and it reopens from its store alone
//!   (it forgets the ids it handed out).
//! - Or, in the zombie models ([`Model::zombie`]: no crash, 2 appends), T may once turn
//!   into a **zombie** `Z` (as `tests/exhaustive.rs` models an old instance A that a new
//!   instance B fences): the supervisor takes T for dead and a newer instance of T opens
//!   on T's prefix from the store alone (listing it at that moment, claims, opening
//!   object), while the old instance lives on with its protocol: its creates in the air,
//!   its pending appends, the acquire's ticket (it may answer the acquire). Once the
//!   acquire is answered, the frontend may send R's appends to either instance. A create
//!   that finds its key taken is answered as `store::persist` resolves `AlreadyExists`:
//!   the same object is durable, a higher epoch fences, a lower one is a stale tail (each
//!   ends the epoch in the real protocol). Z never reopens; what it has in the air when
//!   its epoch ends lands (at a free key) or not.
//!
//! Properties, checked at every final state (every actor done, everything in the air
//! resolved), and where cheap at every state:
//!
//! 1. Every acknowledged entry of R (at S or at T) is in the region's history (the
//!    entries of R on S's final chain with id `<= L`, then the entries of R on T's final
//!    chain), with the id it was acknowledged with, exactly once; and no entry is in the
//!    history twice.
//! 2. Ids of R strictly increase along that history (at every state: T acknowledges no
//!    id of R at or below `L`).
//! 3. No entry of R on S's final chain has an id above `L`, `L` (when some) is on S's
//!    chain when the catch-up reads it, and the catch-up delivered exactly S's piece.
//! 4. A release is answered only when the chain recovery would choose over S's store at
//!    that moment ends with a control snapshot recording R released at that last id
//!    (under mutation (h), refused `UnknownRegion`: holds no entry of R).
//!
//! 5. An id S handed out at admission for an append that failed `MayBeDurable` and is
//!    not in the history is not the id of another entry in T's piece (a caller
//!    resolving its append by id would take T's entry for its own). The release's last
//!    id is the chain's, so ids S handed out in objects that never landed (or landed off
//!    the chain) can be above `L`: T acquires above the release's `acquire_above`, which
//!    is above every id S handed out. (This explorer found the reuse when T acquired
//!    above `L`; mutation (e) keeps that.)
//! 6. The acquire keeps its promise (at every state): T acknowledges no id of R at or
//!    below the id it was asked to acquire above (`A`, or `L` with mutation (e)), a
//!    crash and a reopen from the store alone included. Properties 2 and 5 are what
//!    breaking it costs when it reaches ids S's piece or S's failed appends hold; with
//!    2 creates in flight the small scope cannot reach them by mutation (f) (below), so
//!    the promise is checked itself.
//!
//! Mutations (flags of the model, not of the crate), each of which must be caught:
//!
//! - (a) S admits R's appends after the release: each admission of R at S goes through
//!   the real protocol with its holdings swapped out for an empty set for that one call
//!   (`with_holdings(Holdings::new())`, then the real holdings back), so the release,
//!   its snapshot and its ticket are the crate's but its refusal is gone.
//! - (b) The release answers the last *acknowledged* id of R at S (computed by the
//!   model from the acknowledgements it saw) instead of the protocol's chain-based one.
//! - (c) The acquire is answered at once, before the raise object is acknowledged.
//! - (d) T jumps its *sequence* above `acquire_above >> 20` instead of raising an id
//!   offset (DESIGN.md "Keys stay consecutive"). The crate has no such mode, so the model
//!   makes the jump: at the acquire (T is idle then) it sends an empty *jump object* at
//!   key `max(next_sequence, (acquire_above >> 20) + 1)`, T's epoch, linked to T's chain
//!   end, id offset unchanged (0); the acquire is answered once it is durable (an unknown
//!   or fenced outcome ends T's epoch and the acquire is asked again), and T's protocol
//!   goes on above it (a `WriteProtocol` at that position, the jump object on its chain).
//!   Caught only with the zombie, as DESIGN.md says: the newer instance of T lists while
//!   Z's jump object is in the air and opens just above T's chain end; the jump object
//!   lands above that without colliding with anything, Z answers the acquire and then
//!   acknowledges R's appends above it, all of epoch lower than the newer instance's, so
//!   `choose_chain` (the largest (epoch, sequence) among complete objects) ends T's chain
//!   at the newer instance's objects: acknowledged entries off the winning chain (property
//!   1, 9 steps; an append the newer instance admits, never told of the jump, gets an id
//!   at or below the acquired one: property 6, 9 steps). Without a zombie
//!   (`Model::design()` with (d), crashes of T included) nothing is caught: the jump
//!   object is durable before anything is admitted to T, and a T reopening after a crash
//!   lists it (or it never lands, and the acquire is asked again), so keys above it stay
//!   consecutive for T's only instance.
//! - (e) T acquires above the released last id `L`, not the release's `acquire_above`.
//! - (f) An acquire that needs no raise is answered at once: the bug a review found
//!   (`an_acquire_under_ids_in_flight_waits_for_them` in the protocol's tests holds the
//!   mend). The crate's acquire runs unchanged; when it raised nothing (T's id offset is
//!   the same after the call) and its ticket is not acknowledged yet, the model answers
//!   it on the spot, as the code before the mend did (its ticket was the acknowledged
//!   sequence). The object the mended acquire waits for is still sealed and started,
//!   which nothing the properties see depends on. Caught with the busy target
//!   ([`Model::busy_target`]; the unmutated design with it is the control): S releases
//!   at `L` = 2:0 with its snapshot in object 3 (`A` = 3:max), T has b1 and b2 in
//!   flight (objects 2 and 3, open batch 4), so the acquire above `A` needs no raise
//!   and is answered; T crashes, neither lands, T reopens from its store (opening
//!   object 2) and acknowledges a2 as 3:0, at or below `A` (property 6, 14 steps). It
//!   costs no more in this scope: with 2 creates in flight T's open batch is at most
//!   3 above its chain end, so the acquire needs no raise only when `A`'s base is at
//!   most 2 above it, and a reopen from the store puts T's first object at least 2
//!   above it: T's new ids are at or below `A` only in `A`'s base, S's release
//!   object's, which holds no entry of R unless S had 2 creates in flight before it
//!   (then `A`'s base is 4 or more, and T needs an object of B acknowledged and 2 more
//!   in flight, and a fourth append of R). With more creates in flight T's ids after
//!   the crash reach ids of S's piece (property 2) or of S's appends that failed
//!   `MayBeDurable` (property 5).
//!
//! - (g) A release asked again while its snapshot is in flight is refused
//!   `RegionReleased` at once from the holdings in flight (the crate before the mend of
//!   the retried release; the model refuses it through `Holdings::refuse` instead of
//!   calling `release`), instead of waiting for the same object. The unmutated model
//!   found it on the crate as it was: S's release object meets an unknown outcome and
//!   never lands, S's next epoch recovers a chain where R is not released and
//!   acknowledges R's next append, which T's piece never holds (property 1, 14 steps).
//!
//! - (h) A release of a region S holds nothing of is refused `UnknownRegion`,
//!   recording nothing, as the crate did before a release always fenced its region:
//!   the coordinator moves R anyway (`L` none, `acquire_above` the error's), but S
//!   cannot tell R from a region it owns, and the frontend, whose route to S is
//!   stale, goes on sending R's appends there: S acknowledges them, and no piece of
//!   R's history holds them (property 1).
//!
//! | mutation | model | violates (shortest trace) |
//! |---|---|---|
//! | (a) | design | property 1 (12 steps), property 3 (12 steps) |
//! | (b) | design | property 4 (5 steps), property 3 (14 steps) |
//! | (c) | design | property 6 (10 steps), property 2 (12 steps), property 5 (14 steps) |
//! | (d) | zombie | property 1 (11 steps), property 6 (10 steps), property 2 (13 steps) |
//! | (e) | design | property 5 (13 steps) |
//! | (f) | busy target | property 6 (14 steps) |
//! | (g) | retried release | property 4 (2 steps), property 3 (4 steps), property 1 (13 steps) |
//! | (h) | design | property 1 (12 steps), property 3 (12 steps) |
//!
//! `migration_design_is_safe` (about 51,000 states) is the control for (a), (b), (c),
//! (e) and (h); `migration_design_with_a_retried_release_is_safe` (the coordinator may
//! ask for the release once more while it waits, 2 appends; about 27,000 states) the
//! control for (g); `migration_design_with_zombie_is_safe` runs the zombie model
//! unmutated (no violation: Z's creates after the newer instance listed collide with
//! its claims or opening object, and Z acknowledges nothing after it; about 30,000
//! states), the control for (d); `migration_design_with_busy_target_is_safe` (about
//! 61,000 states) the control for (f): there the acquire that needs no raise waits, T crashes while
//! it waits, and T's next epoch raises. `migration_design_is_safe_wider` (ignored;
//! `--ignored`) runs four wider scopes (4 appends; 2 epoch ends per node; the zombie
//! model with 3 appends; the busy target with an epoch end of S), 110,000 to 190,000
//! states each.
//!
//! Simplified: outside the zombie models one instance per prefix, so no fencing
//! (`tests/exhaustive.rs` checks that); the creates in the air when an epoch ends are
//! resolved (landed or not) before the reopen lists (except the zombie's), and a reopen
//! lists, claims and puts its opening object in one step, so its claims always succeed
//! (the open itself never fails; `tests/exhaustive.rs` checks a create landing between
//! the listing and the claims); entries are one per append; the
//! clock never moves (no link window, no keep-alive, no start interval); nothing is
//! reclaimed (the floors are the protocol's own: every region pins its first entry, so a
//! chain reaches down to R's first entry and no further); S never crashes (its epochs end
//! by unknown outcomes only); B's appends are there for T's ids alone (no property looks
//! at B's own entries).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use object_store_wal::error::{Durability, Error};
use object_store_wal::format::control::CONTROL_REGION;
use object_store_wal::format::{entry_id, Header, Link};
use object_store_wal::internal::chain::catalog::{
    choose_chain, plan_opening_above, Catalog, Retention,
};
use object_store_wal::internal::chain::holdings::Holdings;
use object_store_wal::internal::store::codec::SegmentCodec;
use object_store_wal::internal::write::batch::{BatchLimits, SealedObject};
use object_store_wal::internal::write::epoch::WritePosition;
use object_store_wal::internal::write::persist::PersistOutcome;
use object_store_wal::internal::write::protocol::{
    Action as PAction, ControlTicket, Limits, Now, SharedChain, WhenFull, WriteProtocol,
};

/// The region that moves.
const R: u64 = 1;
/// Another region, which only T writes ([`Model::others`]).
const B: u64 = 2;
/// The tags of B's appends are `OTHER + 1..`; R's are `1..=K`.
const OTHER: u8 = 100;
/// The nodes.
const S: usize = 0;
const T: usize = 1;
/// The zombie: T's old instance, which keeps running after a newer instance of T opened
/// on the same prefix (only with [`Model::zombie`]). It writes to T's store.
const Z: usize = 2;
const NAMES: [&str; 3] = ["S", "T", "Z"];
/// Whose store a node writes to (the zombie writes to T's).
fn home(node: usize) -> usize {
    if node == Z {
        T
    } else {
        node
    }
}

/// A bound on the states one exploration may visit (memory).
const MAX_STATES: usize = 3_000_000;

// ---------------------------------------------------------------------------------------
// The model's configuration

/// One step of the design changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutation {
    /// (a) S admits R's appends after the release (its holdings are not checked).
    AdmitAfterRelease,
    /// (b) The release answers the last acknowledged id of R, not the chain's.
    LastAcknowledgedId,
    /// (c) The acquire is answered before its raise object is acknowledged.
    AcquireNotDurable,
    /// (e) T acquires above the released last id `L` instead of the release's
    /// `acquire_above` (every id S handed out for R).
    AcquireAboveLastId,
    /// (d) T's acquire jumps its sequence instead of raising an id offset: the next
    /// object T creates (empty, built by the model) is at key
    /// `max(next_sequence, (above >> 20) + 1)` with T's unchanged id offset (0), and the
    /// acquire is answered once it is durable.
    SequenceJump,
    /// (f) An acquire that needs no raise (the ids T's epoch hands out are above the
    /// acquired id already, by B's objects in flight or the open batch) is answered at
    /// once, as before the review's mend, instead of once the first object above the
    /// acquired id is acknowledged.
    NoRaiseAtOnce,
    /// (g) A release asked again while its snapshot is in flight is refused
    /// `RegionReleased` at once from the holdings in flight (as before the mend),
    /// instead of waiting for the same object.
    RetriedReleaseAnsweredEarly,
    /// (h) A release of a region S holds nothing of is refused `UnknownRegion`,
    /// recording nothing (as before the mend): S goes on admitting the region's
    /// appends, which frontends with stale routes still send.
    UnfencedUnwrittenRelease,
}

#[derive(Clone, Copy, Debug)]
struct Model {
    /// Appends of R the frontend makes.
    appends: u8,
    /// Appends of another region (B) the frontend makes at T, one per append, at any
    /// point after the release is answered and before T's acquire is answered, while T
    /// is in its first epoch (a `NotWritten` one is issued again, a `MayBeDurable` one
    /// never): they move T's ids above what it acquires, in objects in flight or the
    /// open batch.
    others: u8,
    /// Epoch ends (unknown outcomes, a crash) S and T may each have.
    ends: [u8; 2],
    /// T may crash once.
    t_crash: bool,
    /// T may turn into a zombie once (instead of crashing): a newer instance of T opens
    /// on T's prefix from the store alone, while the old one (`Z`) lives on with its
    /// protocol, its creates in the air, its appends and its acquire's ticket.
    zombie: bool,
    /// The coordinator may ask S for the release once more while it waits for the
    /// answer (a retry after its call timed out).
    retry_release: bool,
    mutation: Option<Mutation>,
}

impl Model {
    fn design() -> Self {
        Model {
            appends: 3,
            others: 0,
            ends: [1, 1],
            t_crash: true,
            zombie: false,
            retry_release: false,
            mutation: None,
        }
    }

    /// The design where the coordinator may ask for the release once more while it
    /// waits (a retry after its call timed out), 2 appends: the control for mutation
    /// (g). (A retry in every model would double the states of each.)
    fn retrying() -> Self {
        Model {
            appends: 2,
            retry_release: true,
            ..Model::design()
        }
    }

    /// The design with a zombie instance of T (and no plain crash of T), 2 appends.
    fn zombie() -> Self {
        Model {
            appends: 2,
            t_crash: false,
            zombie: true,
            ..Model::design()
        }
    }

    /// The design with a busy target: 2 appends of R, 2 appends of B at T before and
    /// during the acquire, a crash or an unknown outcome of T, no epoch end of S (which
    /// multiplies the states for nothing the acquire sees; the wider run has one).
    fn busy_target() -> Self {
        Model {
            appends: 2,
            others: 2,
            ends: [0, 1],
            ..Model::design()
        }
    }

    fn with(self, m: Mutation) -> Self {
        Model {
            mutation: Some(m),
            ..self
        }
    }

    fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }
}

// ---------------------------------------------------------------------------------------
// Objects and states

/// An object in a node's store.
#[derive(Clone, Debug)]
struct Obj {
    node: usize,
    header: Header,
    /// A data object as sealed (its footer records feed a catalog).
    sealed: Option<Arc<SealedObject>>,
    /// R's entries: (id, tag).
    r: Vec<(u64, u8)>,
    /// B's entries: (id, tag).
    b: Vec<(u64, u8)>,
    /// The control snapshot it carries.
    snapshot: Option<Holdings>,
}

/// What makes two objects the same bytes.
type ObjKey = (usize, [u64; 6], bool, Vec<(u64, Vec<Bytes>)>);

fn obj_key(node: usize, h: &Header, segments: &[(u64, Vec<Bytes>)]) -> ObjKey {
    (
        node,
        [
            h.sequence,
            h.epoch,
            h.link.sequence,
            h.link.epoch,
            h.floor,
            h.id_offset,
        ],
        h.claim,
        segments.to_vec(),
    )
}

/// Where an epoch starts: its position, the chain it recovered (with its opening
/// object) and the holdings its last snapshot records.
#[derive(Clone, Debug)]
struct OpenInfo {
    position: WritePosition,
    chain: Vec<u16>,
    holdings: Holdings,
}

/// What makes two epoch starts the same: the chain, the position, the snapshot bytes.
type OpenKey = (Vec<u16>, [u64; 6], Vec<u8>);

/// An event fed to a node's protocol; the protocol of an epoch is the replay of its
/// inputs (it cannot be cloned), which also makes the inputs an exact key of its state.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Input {
    /// Admit the append with this tag (one entry, of R or B by the tag).
    Admit(u8),
    /// A create answered.
    Outcome(u64, Res),
    Release,
    Acquire(u64),
}

/// How a create is answered (as `store::persist` resolves it).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Res {
    Durable,
    Unknown,
    /// The key holds another object of this higher epoch.
    Fenced(u64),
    /// The key holds another object of this lower epoch.
    StaleTail(u64),
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct NodeSt {
    /// Sequence -> object.
    store: BTreeMap<u64, u16>,
    up: bool,
    /// The current epoch's start and inputs (while up).
    open: u16,
    inputs: Vec<Input>,
    /// Creates started and not answered: (sequence, object).
    uploading: Vec<(u64, u16)>,
    /// Creates nobody waits for any more, which may still land.
    ghosts: Vec<(u64, u16)>,
    /// Epoch ends so far.
    ends: u8,
    crashes: u8,
    /// The highest sequence and id base handed out at admission (the runtime's
    /// progress, kept across epochs, lost in a crash).
    handed_out: (u64, u64),
    /// The release's or acquire's ticket waited for.
    ticket: Option<ControlTicket>,
    /// Mutation (d): the jump object's create in the air (sequence, object), made by the
    /// model outside the protocol, which answers the acquire once durable.
    jump: Option<(u64, u16)>,
}

/// Where an append stands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Ap {
    /// To be issued (again).
    Ready,
    /// Admitted at a node with this id.
    At(u8, u64),
    Acked(u8, u64),
    /// Failed `MayBeDurable` (never retried), with the id it had been given.
    Lost(u8, u64),
}

/// A release's or an acquire's progress.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Ctl {
    NotAsked,
    /// Asked; the release's last id as the protocol computed it.
    Waiting(Option<u64>),
    /// Its epoch ended before the answer: ask again.
    AskAgain,
    Answered(Option<u64>),
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    /// S, T, and the zombie Z (whose `store` is unused: it writes to T's).
    nodes: [NodeSt; 3],
    aps: Vec<Ap>,
    /// B's appends (tags `OTHER + 1..`), at T only.
    bps: Vec<Ap>,
    /// The frontend learned that R moved (S refused an append with `RegionReleased`).
    moved: bool,
    /// The release's `acquire_above` (0 until answered).
    above: u64,
    /// The id T was asked to acquire above (0 until asked).
    acquired: u64,
    release: Ctl,
    /// The coordinator asked for the release again while it waited.
    release_retried: bool,
    acquire: Ctl,
    /// What the catch-up delivered: (id, tag).
    catch_up: Option<Vec<(u64, u8)>>,
    /// Violations that happen on a transition (`FLAG_*`).
    flags: u8,
}

impl State {
    /// The append with this tag (R's or B's).
    fn ap(&mut self, tag: u8) -> &mut Ap {
        if tag > OTHER {
            &mut self.bps[usize::from(tag - OTHER) - 1]
        } else {
            &mut self.aps[usize::from(tag) - 1]
        }
    }
}

/// The region of an append by its tag.
fn region_of(tag: u8) -> u64 {
    if tag > OTHER {
        B
    } else {
        R
    }
}

/// An append's name: `a1..` for R's, `b1..` for B's.
fn tag_str(tag: u8) -> String {
    if tag > OTHER {
        format!("b{}", tag - OTHER)
    } else {
        format!("a{tag}")
    }
}

const FLAG_ANSWER_NOT_RECORDED: u8 = 1;
const FLAG_NOT_ON_CHAIN: u8 = 2;
const FLAG_ACQUIRE_REFUSED: u8 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Act {
    /// The frontend issues its next append to this node (Z: a zombie still reached).
    Issue(u8),
    /// The frontend issues its next append of B to T.
    IssueOther,
    /// A create is answered: 0 durable, 1 unknown and landed, 2 unknown and never lands.
    Answer(u8, u64, u8),
    /// A create in the air of an ended epoch lands, or never will.
    Ghost(u8, u64, bool),
    Reopen(u8),
    Release,
    Acquire,
    CatchUp,
    Crash(u8),
    /// T turns into the zombie Z; a newer instance of T opens.
    Zombie,
    /// Mutation (d): the jump object's create is answered (as `Answer`).
    Jump(u8, u8),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
enum Kind {
    /// 1: an acknowledged entry is not in the history with its id exactly once.
    Lost,
    /// 1: an entry is in the history twice.
    Duplicate,
    /// 2: ids of R do not strictly increase along the history (or T acknowledged an id
    /// at or below `L`).
    IdsNotIncreasing,
    /// 3: S's final chain holds an entry of R above the released last id.
    AboveReleased,
    /// 3: the catch-up did not deliver exactly S's piece, or `L` was not on S's chain.
    CatchUpMismatch,
    /// 4: a release answered while S's chain does not record it at that last id.
    AnswerNotRecorded,
    /// T's acquire was refused (`AcquireBelowOwnIds`).
    AcquireRefused,
    /// 5: an id S handed out for an append that failed `MayBeDurable` and is not in
    /// the history names another entry in T's piece.
    IdReused,
    /// 6: T acknowledged an id of R at or below the id it was asked to acquire above.
    BelowAcquired,
}

impl Kind {
    fn property(self) -> &'static str {
        match self {
            Kind::Lost | Kind::Duplicate => "property 1",
            Kind::IdsNotIncreasing => "property 2",
            Kind::AboveReleased | Kind::CatchUpMismatch => "property 3",
            Kind::AnswerNotRecorded => "property 4",
            Kind::AcquireRefused => "acquire refused",
            Kind::IdReused => "property 5",
            Kind::BelowAcquired => "property 6",
        }
    }
}

type Proto = WriteProtocol<u8, SharedChain>;

/// What one input did.
struct Fed {
    admitted: Option<std::result::Result<(u64, u64), Error>>,
    control: Option<std::result::Result<(Option<u64>, ControlTicket), Error>>,
    /// A release's `acquire_above`.
    above: u64,
    /// An acquire raised the id offset.
    raised: bool,
    actions: Vec<PAction<u8>>,
}

// ---------------------------------------------------------------------------------------
// The explorer

struct Explorer {
    model: Model,
    limits: Limits,
    base: Instant,
    objs: Vec<Obj>,
    obj_ids: HashMap<ObjKey, u16>,
    opens: Vec<OpenInfo>,
    open_ids: HashMap<OpenKey, u16>,
    chains: HashMap<Vec<(u64, u16)>, Vec<u64>>,
    init: State,
    /// Situations the exploration went through (a check that the model is not vacuous).
    seen: BTreeSet<&'static str>,
}

struct Report {
    states: usize,
    transitions: usize,
    finals: usize,
    max_depth: usize,
    violations: BTreeMap<Kind, (usize, Vec<String>)>,
    seen: BTreeSet<&'static str>,
    secs: f64,
}

impl Explorer {
    fn new(model: Model) -> Self {
        let fresh = NodeSt {
            store: BTreeMap::new(),
            up: false,
            open: 0,
            inputs: Vec::new(),
            uploading: Vec::new(),
            ghosts: Vec::new(),
            ends: 0,
            crashes: 0,
            handed_out: (0, 0),
            ticket: None,
            jump: None,
        };
        let mut ex = Explorer {
            model,
            limits: Limits {
                max_in_flight: 2,
                min_object_interval: Duration::ZERO,
                max_batch_bytes: 1 << 20,
                batch: BatchLimits {
                    max_object_bytes: 1 << 20,
                    max_entry_bytes: 1 << 10,
                },
                link_window: Duration::from_secs(3600),
                gather: Duration::ZERO,
                codec: SegmentCodec::identity(),
            },
            base: Instant::now(),
            objs: Vec::new(),
            obj_ids: HashMap::new(),
            opens: Vec::new(),
            open_ids: HashMap::new(),
            chains: HashMap::new(),
            init: State {
                nodes: [fresh.clone(), fresh.clone(), fresh],
                aps: vec![Ap::Ready; usize::from(model.appends)],
                bps: vec![Ap::Ready; usize::from(model.others)],
                moved: false,
                above: 0,
                acquired: 0,
                release: Ctl::NotAsked,
                release_retried: false,
                acquire: Ctl::NotAsked,
                catch_up: None,
                flags: 0,
            },
            seen: BTreeSet::new(),
        };
        let mut init = ex.init.clone();
        for node in [S, T] {
            ex.reopen(&mut init, node, &mut None);
        }
        ex.init = init;
        ex
    }

    fn now(&self) -> Now {
        Now {
            at: self.base,
            clock: Duration::ZERO,
        }
    }

    fn saw(&mut self, what: &'static str) {
        self.seen.insert(what);
    }

    fn obj(&self, id: u16) -> &Obj {
        &self.objs[usize::from(id)]
    }

    fn intern_obj(&mut self, key: ObjKey, make: impl FnOnce() -> Obj) -> u16 {
        if let Some(&id) = self.obj_ids.get(&key) {
            return id;
        }
        let id = u16::try_from(self.objs.len()).expect("few objects");
        self.objs.push(make());
        self.obj_ids.insert(key, id);
        id
    }

    /// An object without segments (a claim, an opening object).
    fn empty_obj(&mut self, node: usize, header: Header) -> u16 {
        self.intern_obj(obj_key(node, &header, &[]), || Obj {
            node,
            header,
            sealed: None,
            r: Vec::new(),
            b: Vec::new(),
            snapshot: None,
        })
    }

    fn sealed_obj(&mut self, node: usize, sealed: &Arc<SealedObject>) -> u16 {
        let header = *sealed.header();
        let key = obj_key(node, &header, sealed.segments());
        self.intern_obj(key, || {
            let mut r = Vec::new();
            let mut b = Vec::new();
            let mut snapshot = None;
            for (region, entries) in sealed.segments() {
                if *region == R || *region == B {
                    let to = if *region == R { &mut r } else { &mut b };
                    for (pos, e) in entries.iter().enumerate() {
                        to.push((entry_id(header.id_base(), pos as u64), e[0]));
                    }
                } else if *region == CONTROL_REGION {
                    let last = entries.last().expect("a control entry");
                    snapshot = Some(Holdings::from_snapshot(last).expect("a snapshot"));
                }
            }
            Obj {
                node,
                header,
                sealed: Some(sealed.clone()),
                r,
                b,
                snapshot,
            }
        })
    }

    fn desc(&self, id: u16) -> String {
        let o = self.obj(id);
        let h = &o.header;
        let what = if h.claim {
            "claim".to_string()
        } else if o.sealed.is_none() && h.epoch == h.sequence + 1 {
            "opening".to_string()
        } else if o.sealed.is_none() {
            "jump".to_string()
        } else {
            let mut parts: Vec<String> =
                o.r.iter()
                    .chain(&o.b)
                    .map(|(i, t)| format!("{}={}", tag_str(*t), id_str(*i)))
                    .collect();
            if let Some(s) = &o.snapshot {
                parts.push(format!("snapshot {}", holdings_str(s)));
            }
            if parts.is_empty() {
                "empty".to_string()
            } else {
                parts.join(" ")
            }
        };
        format!(
            "{}@{}(e{} ->{} off {}: {what})",
            NAMES[o.node], h.sequence, h.epoch, h.link.sequence, h.id_offset
        )
    }

    /// The chain recovery chooses over a store, ascending sequences.
    fn chain(&mut self, store: &BTreeMap<u64, u16>) -> Vec<u64> {
        let key: Vec<(u64, u16)> = store.iter().map(|(s, o)| (*s, *o)).collect();
        if let Some(c) = self.chains.get(&key) {
            return c.clone();
        }
        let headers: BTreeMap<u64, Header> = store
            .iter()
            .map(|(s, o)| (*s, self.obj(*o).header))
            .collect();
        let chain = choose_chain(&headers);
        self.chains.insert(key, chain.clone());
        chain
    }

    /// R's entries on the chain of a store, in chain order.
    fn chain_entries(&mut self, store: &BTreeMap<u64, u16>) -> Vec<(u64, u8)> {
        let chain = self.chain(store);
        chain
            .iter()
            .flat_map(|s| self.obj(store[s]).r.clone())
            .collect()
    }

    /// What the last control snapshot on a store's chain records (recovery's holdings).
    fn chain_holdings(&mut self, store: &BTreeMap<u64, u16>) -> Holdings {
        let chain = self.chain(store);
        chain
            .iter()
            .rev()
            .find_map(|s| self.obj(store[s]).snapshot.clone())
            .unwrap_or_default()
    }

    // ----- the protocol of a node's epoch

    /// The node's protocol now: its epoch's start, then its inputs replayed.
    fn build(&self, node: &NodeSt) -> Proto {
        assert!(node.up);
        let info = &self.opens[usize::from(node.open)];
        let mut catalog = Catalog::new();
        for &o in &info.chain {
            let obj = self.obj(o);
            match &obj.sealed {
                Some(s) => {
                    let e = s.encoded().expect("encoded");
                    catalog.insert(e.header(), e.records(), e.len())
                }
                None => catalog.insert(&obj.header, &[], 104),
            }
            .expect("the recovered chain fits a catalog");
        }
        let retention = Retention::new(&catalog, 0);
        let chain = SharedChain {
            catalog: Arc::new(RwLock::new(catalog)),
            retention: Arc::new(Mutex::new(retention)),
        };
        let mut p = WriteProtocol::new(info.position, Duration::ZERO, self.limits.clone(), chain)
            .with_holdings(info.holdings.clone());
        while p.poll_action().is_some() {}
        for &input in &node.inputs {
            p = self.feed(p, input).0;
        }
        p
    }

    /// Feeds one input, polls, and returns what it did.
    fn feed(&self, mut p: Proto, input: Input) -> (Proto, Fed) {
        let now = self.now();
        let mut fed = Fed {
            admitted: None,
            control: None,
            above: 0,
            raised: false,
            actions: Vec::new(),
        };
        match input {
            Input::Admit(tag) => {
                let parts = vec![(region_of(tag), vec![Bytes::from(vec![tag])])];
                // Mutation (a): the admission does not see the release.
                let bypass = self.model.mutated(Mutation::AdmitAfterRelease)
                    && p.holdings().released(R).is_some();
                let saved = p.holdings().clone();
                if bypass {
                    p = p.with_holdings(Holdings::new());
                }
                let r = p.admit(parts, tag, true, WhenFull::Seal, now);
                if bypass {
                    p = p.with_holdings(saved);
                }
                fed.admitted = Some(match r {
                    Ok(a) => {
                        let ids = a.ids.expect("ids at admission");
                        Ok((ids.sequence, ids.parts[0].first_id))
                    }
                    Err((_, e)) => Err(e),
                });
            }
            Input::Outcome(seq, res) => {
                let outcome = match res {
                    Res::Durable => PersistOutcome::Durable { attempts: 1 },
                    Res::Unknown => PersistOutcome::Unknown {
                        last: Error::Stopped {
                            durability: Durability::MayBeDurable,
                        },
                    },
                    Res::Fenced(fenced_by) => PersistOutcome::Fenced { fenced_by },
                    Res::StaleTail(found_epoch) => PersistOutcome::StaleTail { found_epoch },
                };
                p.handle_outcome(seq, outcome, now);
            }
            Input::Release
                if self.model.mutated(Mutation::RetriedReleaseAnsweredEarly)
                    && p.holdings().released(R).is_some() =>
            {
                // Mutation (g): refused from the holdings in flight, as before the mend.
                let refused = p.holdings().refuse(R, || p.id_bound());
                fed.control = Some(refused.map(|()| unreachable!("released")));
            }
            Input::Release
                if self.model.mutated(Mutation::UnfencedUnwrittenRelease)
                    && p.holdings().released(R).is_none()
                    && p.holdings().pieces_of(R).is_empty()
                    && p.last_id_of(R).is_none() =>
            {
                // Mutation (h): refused, recording nothing, as before the mend.
                fed.control = Some(Err(Error::UnknownRegion {
                    region: R,
                    acquire_above: p.id_bound(),
                }));
            }
            Input::Release => {
                fed.control = Some(p.release(R, now).map(|(released, ticket)| {
                    fed.above = released.acquire_above;
                    (released.last_id, ticket)
                }))
            }
            Input::Acquire(last) => {
                let before = p.position().id_offset;
                fed.control = Some(p.acquire(R, last, now).map(|t| (None, t)));
                fed.raised = p.position().id_offset > before;
            }
        }
        p.poll(now);
        while let Some(a) = p.poll_action() {
            fed.actions.push(a);
        }
        (p, fed)
    }

    /// Feeds an input to a node of `n` and carries out what it did.
    fn input(&mut self, n: &mut State, node: usize, input: Input, log: &mut Option<String>) -> Fed {
        let p = self.build(&n.nodes[node]);
        let (p, mut fed) = self.feed(p, input);
        n.nodes[node].inputs.push(input);
        if let Some(Ok((seq, id))) = &fed.admitted {
            let h = &mut n.nodes[node].handed_out;
            *h = (h.0.max(*seq), h.1.max(id >> 20));
        }
        let actions = std::mem::take(&mut fed.actions);
        for a in actions {
            match a {
                PAction::Create(sealed) => {
                    let o = self.sealed_obj(node, &sealed);
                    n.nodes[node].uploading.push((sealed.sequence(), o));
                    note(log, format!("; {} sends {}", NAMES[node], self.desc(o)));
                }
                PAction::Acknowledge {
                    sealed, waiters, ..
                } => {
                    let o = self.sealed_obj(node, &sealed);
                    note(
                        log,
                        format!("; {} ACKNOWLEDGES {}", NAMES[node], self.desc(o)),
                    );
                    for (w, receipt) in waiters.iter().zip(&sealed.receipts) {
                        let id = receipt.parts[0].first_id;
                        let tag = w.waiter;
                        let at = n.ap(tag);
                        assert_eq!(*at, Ap::At(node as u8, id));
                        *at = Ap::Acked(node as u8, id);
                        if tag > OTHER {
                            continue;
                        }
                        self.saw(
                            [
                                "S acknowledges an append",
                                "T acknowledges an append",
                                "Z acknowledges an append",
                            ][node],
                        );
                    }
                }
                PAction::Fail { waiters, error } => {
                    let maybe = error.durability() == Durability::MayBeDurable;
                    for w in waiters {
                        let tag = w.waiter;
                        let at = n.ap(tag);
                        let Ap::At(_, id) = *at else {
                            panic!("a failed append was not admitted: {at:?}")
                        };
                        *at = if maybe {
                            Ap::Lost(node as u8, id)
                        } else {
                            Ap::Ready
                        };
                        note(
                            log,
                            format!(
                                "; {} fails {}",
                                tag_str(tag),
                                if maybe { "MayBeDurable" } else { "NotWritten" }
                            ),
                        );
                        if maybe && tag <= OTHER {
                            self.saw("an append fails MayBeDurable");
                        } else if maybe {
                            self.saw("an append of B fails MayBeDurable");
                        }
                    }
                }
                PAction::EpochEnded { error, .. } => {
                    note(log, format!("; {}'s epoch ends ({error})", NAMES[node]));
                    self.saw(["S's epoch ends", "T's epoch ends", "Z's epoch ends"][node]);
                    self.end_epoch(n, node);
                }
                PAction::HandedOutFailed { .. } | PAction::PublishFloor(_) | PAction::WakeAt(_) => {
                }
            }
        }
        // A release or an acquire answered once its ticket is acknowledged.
        if n.nodes[node].up {
            if let Some(ticket) = n.nodes[node].ticket {
                if p.ticket_acknowledged(&ticket) {
                    n.nodes[node].ticket = None;
                    if node == S {
                        let Ctl::Waiting(last) = n.release else {
                            unreachable!()
                        };
                        self.answer_release(n, last, false, log);
                    } else {
                        n.acquire = Ctl::Answered(None);
                        note(log, format!("; {}'s ACQUIRE is answered", NAMES[node]));
                        self.saw("the acquire is answered on its ticket");
                    }
                }
            }
        }
        fed
    }

    fn end_epoch(&mut self, n: &mut State, node: usize) {
        let st = &mut n.nodes[node];
        st.up = false;
        st.inputs.clear();
        st.open = 0;
        st.ends += 1;
        let mut ghosts = std::mem::take(&mut st.uploading);
        st.ghosts.append(&mut ghosts);
        let jumping = st.jump.take().map(|j| st.ghosts.push(j)).is_some();
        st.ghosts.sort_unstable();
        if st.ticket.take().is_some() || jumping {
            if node == S {
                n.release = Ctl::AskAgain;
                self.saw("the release is asked again");
            } else {
                n.acquire = Ctl::AskAgain;
                self.saw("the acquire is asked again");
            }
        }
    }

    /// The release is answered with (the protocol's) `last`: property 4 is checked here.
    /// `unknown`: S's log refused it `UnknownRegion` (it holds nothing of R), which
    /// records nothing; S's chain must then hold no entry of R.
    fn answer_release(
        &mut self,
        n: &mut State,
        last: Option<u64>,
        unknown: bool,
        log: &mut Option<String>,
    ) {
        let answer = if self.model.mutated(Mutation::LastAcknowledgedId) {
            n.aps
                .iter()
                .filter_map(|a| match a {
                    Ap::Acked(0, id) => Some(*id),
                    _ => None,
                })
                .max()
        } else {
            last
        };
        let store = n.nodes[S].store.clone();
        if unknown {
            let entries = self.chain_entries(&store);
            if !entries.is_empty() || answer.is_some() {
                n.flags |= FLAG_ANSWER_NOT_RECORDED;
                note(
                    log,
                    format!(" [S's chain holds R's {}]", entries_str(&entries)),
                );
            }
        } else {
            let recorded = self.chain_holdings(&store).released(R);
            if recorded != Some(answer) {
                n.flags |= FLAG_ANSWER_NOT_RECORDED;
                let recorded = match recorded {
                    Some(last) => format!("R released at {}", opt_id_str(last)),
                    None => "R not released".to_string(),
                };
                note(log, format!(" [S's chain records {recorded}]"));
            }
        }
        if answer != last {
            self.saw("mutation (b) answers another last id");
        }
        n.release = Ctl::Answered(answer);
        note(
            log,
            format!("; the RELEASE is answered: L = {}", opt_id_str(answer)),
        );
    }

    /// The start of an epoch (or of its jumped part, mutation (d)).
    fn intern_open(
        &mut self,
        position: WritePosition,
        chain: Vec<u16>,
        holdings: &Holdings,
    ) -> u16 {
        let snapshot = holdings.snapshot().expect("a snapshot").to_vec();
        let key = (
            chain.clone(),
            [
                position.epoch,
                position.next_sequence,
                position.link.sequence,
                position.link.epoch,
                position.floor,
                position.id_offset,
            ],
            snapshot,
        );
        if let Some(&id) = self.open_ids.get(&key) {
            return id;
        }
        let id = u16::try_from(self.opens.len()).expect("few opens");
        self.opens.push(OpenInfo {
            position,
            chain,
            holdings: holdings.clone(),
        });
        self.open_ids.insert(key, id);
        id
    }

    /// Opens (or reopens) a node over its store: claims and the opening object above
    /// everything present and everything it handed out.
    fn reopen(&mut self, n: &mut State, node: usize, log: &mut Option<String>) {
        let store = n.nodes[node].store.clone();
        assert!(n.nodes[node].ghosts.is_empty());
        let headers: BTreeMap<u64, Header> = store
            .iter()
            .map(|(s, o)| (*s, self.obj(*o).header))
            .collect();
        let chain = self.chain(&store);
        let present: Vec<u64> = store.keys().copied().collect();
        let end = chain.last().map(|s| headers[s]);
        let (above, handed_base) = n.nodes[node].handed_out;
        let id_base = headers
            .values()
            .map(|h| h.id_base())
            .fold(handed_base, u64::max);
        let plan = plan_opening_above(&present, end.as_ref(), above, id_base).expect("a plan");
        let mut claims = Vec::new();
        for c in &plan.claims {
            let o = self.empty_obj(node, *c);
            n.nodes[node].store.insert(c.sequence, o);
            claims.push(c.sequence);
        }
        if !claims.is_empty() {
            self.saw("a reopen claims a hole");
        }
        let opening = self.empty_obj(node, plan.opening);
        assert!(n.nodes[node]
            .store
            .insert(plan.opening.sequence, opening)
            .is_none());
        let holdings = self.chain_holdings(&store);
        let mut chain_ids: Vec<u16> = chain.iter().map(|s| store[s]).collect();
        chain_ids.push(opening);
        let position = WritePosition {
            epoch: plan.epoch,
            next_sequence: plan.opening.sequence + 1,
            link: Link {
                sequence: plan.opening.sequence,
                epoch: plan.epoch,
            },
            floor: plan.opening.floor,
            id_offset: plan.opening.id_offset,
        };
        let open = self.intern_open(position, chain_ids, &holdings);
        if holdings.released(R).is_some() {
            self.saw("a reopen reads the release back");
        }
        let st = &mut n.nodes[node];
        st.up = true;
        st.open = open;
        st.inputs.clear();
        st.uploading.clear();
        note(
            log,
            format!(
                "{} opens: chain {chain:?}, claims {claims:?}, {}, holdings {}",
                NAMES[node],
                self.desc(opening),
                holdings_str(&holdings)
            ),
        );
    }

    // ----- enabled actions

    fn next_append(s: &State) -> Option<usize> {
        s.aps.iter().position(|a| *a == Ap::Ready)
    }

    fn enabled(&self, s: &State) -> Vec<Act> {
        let mut acts = Vec::new();
        if Self::next_append(s).is_some() {
            if !s.moved {
                if s.nodes[S].up {
                    acts.push(Act::Issue(S as u8));
                }
            } else if matches!(s.acquire, Ctl::Answered(_)) {
                for node in [T, Z] {
                    if s.nodes[node].up {
                        acts.push(Act::Issue(node as u8));
                    }
                }
            }
        }
        if s.bps.contains(&Ap::Ready)
            && s.nodes[T].up
            && s.nodes[T].ends == 0
            && matches!(s.release, Ctl::Answered(_))
            && !matches!(s.acquire, Ctl::Answered(_))
        {
            acts.push(Act::IssueOther);
        }
        for node in [S, T, Z] {
            let st = &s.nodes[node];
            let store = &s.nodes[home(node)].store;
            let unknown = st.ends < self.model.ends[home(node)];
            for &(seq, _) in &st.uploading {
                acts.push(Act::Answer(node as u8, seq, 0));
                if unknown {
                    if !store.contains_key(&seq) {
                        acts.push(Act::Answer(node as u8, seq, 1));
                    }
                    acts.push(Act::Answer(node as u8, seq, 2));
                }
            }
            if let Some((seq, _)) = st.jump {
                acts.push(Act::Jump(node as u8, 0));
                if unknown {
                    if !store.contains_key(&seq) {
                        acts.push(Act::Jump(node as u8, 1));
                    }
                    acts.push(Act::Jump(node as u8, 2));
                }
            }
            for &(seq, _) in &st.ghosts {
                if !store.contains_key(&seq) {
                    acts.push(Act::Ghost(node as u8, seq, true));
                }
                acts.push(Act::Ghost(node as u8, seq, false));
            }
            if node != Z && !st.up && st.ghosts.is_empty() {
                acts.push(Act::Reopen(node as u8));
            }
        }
        let retry =
            self.model.retry_release && !s.release_retried && matches!(s.release, Ctl::Waiting(_));
        if (matches!(s.release, Ctl::NotAsked | Ctl::AskAgain) || retry) && s.nodes[S].up {
            acts.push(Act::Release);
        }
        if matches!(s.release, Ctl::Answered(_))
            && matches!(s.acquire, Ctl::NotAsked | Ctl::AskAgain)
            && s.nodes[T].up
        {
            acts.push(Act::Acquire);
        }
        if matches!(s.release, Ctl::Answered(_)) && s.catch_up.is_none() {
            acts.push(Act::CatchUp);
        }
        let t = &s.nodes[T];
        if self.model.t_crash && t.up && t.crashes == 0 && t.ends < self.model.ends[T] {
            acts.push(Act::Crash(T as u8));
        }
        if self.model.zombie && t.up && t.crashes == 0 {
            acts.push(Act::Zombie);
        }
        acts
    }

    // ----- transitions

    fn apply(&mut self, s: &State, act: Act, log: &mut Option<String>) -> State {
        let mut n = s.clone();
        match act {
            Act::Issue(node) => {
                let i = Self::next_append(&n).expect("an append to issue");
                let tag = (i + 1) as u8;
                let node = usize::from(node);
                note(log, format!("a{tag} goes to {}", NAMES[node]));
                if node == Z {
                    self.saw("an append goes to Z");
                }
                let fed = self.input(&mut n, node, Input::Admit(tag), log);
                match fed.admitted.expect("an admission") {
                    Ok((_, id)) => {
                        // `input` carried out the actions after the admission; the
                        // append may only have been sent by now.
                        if n.aps[i] == Ap::Ready {
                            n.aps[i] = Ap::At(node as u8, id);
                        }
                        note(log, format!(" [admitted as {}]", id_str(id)));
                        if node == S && matches!(s.release, Ctl::Waiting(_) | Ctl::Answered(_)) {
                            self.saw("mutation (a) admits after the release");
                        }
                    }
                    Err(Error::RegionReleased { .. }) if node == S => {
                        n.moved = true;
                        note(log, " [refused: RegionReleased]".to_string());
                        self.saw("S refuses an append RegionReleased");
                    }
                    Err(e) => panic!("{} refused a{tag}: {e}", NAMES[node]),
                }
            }
            Act::IssueOther => {
                let i = n.bps.iter().position(|a| *a == Ap::Ready).expect("a B");
                let tag = OTHER + 1 + i as u8;
                note(log, format!("{} goes to T", tag_str(tag)));
                let fed = self.input(&mut n, T, Input::Admit(tag), log);
                match fed.admitted.expect("an admission") {
                    Ok((_, id)) => {
                        if n.bps[i] == Ap::Ready {
                            n.bps[i] = Ap::At(T as u8, id);
                        }
                        note(log, format!(" [admitted as {}]", id_str(id)));
                        self.saw("T admits an append of B");
                        if matches!(n.acquire, Ctl::Waiting(_)) {
                            self.saw("T admits an append of B while the acquire waits");
                        }
                    }
                    Err(e) => panic!("T refused {}: {e}", tag_str(tag)),
                }
            }
            Act::Answer(node, seq, how) => {
                let node = usize::from(node);
                let st = &mut n.nodes[node];
                let at = st
                    .uploading
                    .iter()
                    .position(|(s, _)| *s == seq)
                    .expect("in flight");
                let (_, o) = st.uploading.remove(at);
                let res = self.reach(&mut n, node, seq, o, how, log);
                self.input(&mut n, node, Input::Outcome(seq, res), log);
            }
            Act::Jump(node, how) => {
                let node = usize::from(node);
                let (seq, o) = n.nodes[node].jump.take().expect("a jump in the air");
                let res = self.reach(&mut n, node, seq, o, how, log);
                if res == Res::Durable {
                    // The acquire is answered; the protocol goes on above the jump
                    // object (its epoch, its id offset, linked to it).
                    let p = self.build(&n.nodes[node]);
                    let header = self.obj(o).header;
                    let position = WritePosition {
                        next_sequence: seq + 1,
                        link: Link {
                            sequence: seq,
                            epoch: header.epoch,
                        },
                        ..p.position()
                    };
                    let open = n.nodes[node].open;
                    let mut chain = self.opens[usize::from(open)].chain.clone();
                    chain.push(o);
                    let holdings = p.holdings().clone();
                    let st = &mut n.nodes[node];
                    st.open = self.intern_open(position, chain, &holdings);
                    st.inputs.clear();
                    n.acquire = Ctl::Answered(None);
                    note(log, format!("; {}'s ACQUIRE is answered", NAMES[node]));
                    self.saw("mutation (d): a jump object is durable");
                } else {
                    note(log, format!("; {}'s epoch ends", NAMES[node]));
                    self.end_epoch(&mut n, node);
                    n.acquire = Ctl::AskAgain;
                }
            }
            Act::Ghost(node, seq, land) => {
                let st = &mut n.nodes[usize::from(node)];
                let at = st
                    .ghosts
                    .iter()
                    .position(|(s, _)| *s == seq)
                    .expect("a ghost");
                let (_, o) = st.ghosts.remove(at);
                if land {
                    let store = &mut n.nodes[home(usize::from(node))].store;
                    assert!(store.insert(seq, o).is_none(), "a key taken twice");
                    self.saw("a create of an ended epoch lands");
                }
                note(
                    log,
                    format!(
                        "create of {} in the air {}",
                        self.desc(o),
                        if land { "lands" } else { "never lands" }
                    ),
                );
            }
            Act::Reopen(node) => self.reopen(&mut n, usize::from(node), log),
            Act::Release => {
                let retry = matches!(n.release, Ctl::Waiting(_));
                if retry {
                    // Its call timed out; the first answer is still to come.
                    note(log, "the coordinator asks S to release R again".to_string());
                    n.release_retried = true;
                } else {
                    note(log, "the coordinator asks S to release R".to_string());
                }
                let fed = self.input(&mut n, S, Input::Release, log);
                match fed.control.expect("a release") {
                    Ok((last, ticket)) => {
                        if last.is_none() {
                            self.saw("a release of an unwritten region is recorded");
                        }
                        if retry {
                            assert_eq!(n.nodes[S].ticket, Some(ticket), "the same record");
                            assert_eq!(n.release, Ctl::Waiting(last), "the same last id");
                            self.saw("a retried release waits for the same record");
                        }
                        note(log, format!(" [last id {}]", opt_id_str(last)));
                        n.release = Ctl::Waiting(last);
                        n.above = fed.above;
                        n.nodes[S].ticket = Some(ticket);
                        // (An acknowledged ticket is answered on the next input: the
                        // release's object is new, so never at once.)
                    }
                    Err(Error::RegionReleased { released, .. }) => {
                        note(log, " [RegionReleased]".to_string());
                        if retry {
                            self.saw("mutation (g) answers a retried release early");
                            n.nodes[S].ticket = None;
                        } else {
                            self.saw("a release asked again is answered RegionReleased");
                        }
                        n.above = released.acquire_above;
                        self.answer_release(&mut n, released.last_id, false, log);
                    }
                    Err(Error::UnknownRegion { acquire_above, .. }) => {
                        // Mutation (h): S's log holds nothing of R and records
                        // nothing; the coordinator moves R anyway and T acquires above
                        // `acquire_above`, while S's node cannot tell R from a region
                        // it owns: a frontend whose route is stale still reaches it.
                        note(log, " [UnknownRegion: nothing recorded]".into());
                        self.saw("mutation (h) refuses a release of an unwritten region");
                        n.above = acquire_above;
                        self.answer_release(&mut n, None, true, log);
                    }
                    Err(e) => panic!("release refused: {e}"),
                }
            }
            Act::Acquire => {
                let Ctl::Answered(l) = n.release else {
                    unreachable!()
                };
                let last = if self.model.mutated(Mutation::AcquireAboveLastId) {
                    l.unwrap_or(0)
                } else {
                    n.above.max(l.unwrap_or(0))
                };
                note(
                    log,
                    format!("the coordinator asks T to acquire R above {}", id_str(last)),
                );
                n.acquired = last;
                if self.model.mutated(Mutation::SequenceJump) {
                    self.jump(&mut n, last, log);
                    return n;
                }
                let fed = self.input(&mut n, T, Input::Acquire(last), log);
                match fed.control.expect("an acquire") {
                    Ok((_, ticket)) => {
                        if n.acquire != Ctl::Answered(None) {
                            let p = self.build(&n.nodes[T]);
                            let at_once = p.ticket_acknowledged(&ticket);
                            if !fed.raised && !at_once {
                                self.saw("an acquire that needs no raise waits for an object");
                            }
                            if self.model.mutated(Mutation::AcquireNotDurable) {
                                n.acquire = Ctl::Answered(None);
                                note(log, "; T's ACQUIRE is answered at once".to_string());
                            } else if self.model.mutated(Mutation::NoRaiseAtOnce)
                                && !fed.raised
                                && !at_once
                            {
                                // Mutation (f): as before the review's mend, an acquire
                                // that raised nothing is answered on the spot.
                                n.acquire = Ctl::Answered(None);
                                note(
                                    log,
                                    "; T's ACQUIRE needs no raise and is answered at once"
                                        .to_string(),
                                );
                                self.saw("mutation (f) answers an acquire with no raise");
                            } else if at_once {
                                n.acquire = Ctl::Answered(None);
                                note(log, "; T's ACQUIRE is answered at once".to_string());
                                self.saw("the acquire needs no raise");
                            } else {
                                n.acquire = Ctl::Waiting(None);
                                n.nodes[T].ticket = Some(ticket);
                            }
                        }
                    }
                    Err(e) => {
                        note(log, format!(" [REFUSED: {e}]"));
                        n.flags |= FLAG_ACQUIRE_REFUSED;
                        n.acquire = Ctl::Answered(None);
                    }
                }
            }
            Act::CatchUp => {
                let Ctl::Answered(l) = n.release else {
                    unreachable!()
                };
                let store = n.nodes[S].store.clone();
                let entries = self.chain_entries(&store);
                if let Some(l) = l {
                    if !entries.iter().any(|(id, _)| *id == l) {
                        n.flags |= FLAG_NOT_ON_CHAIN;
                    }
                }
                let delivered: Vec<(u64, u8)> = entries
                    .into_iter()
                    .filter(|(id, _)| l.is_some_and(|l| *id <= l))
                    .collect();
                note(
                    log,
                    format!("T catches up from S's chain: {}", entries_str(&delivered)),
                );
                n.catch_up = Some(delivered);
            }
            Act::Crash(node) => {
                let node = usize::from(node);
                note(log, format!("{} CRASHES", NAMES[node]));
                self.saw("T crashes");
                if matches!(n.acquire, Ctl::Waiting(_)) {
                    let p = self.build(&n.nodes[node]);
                    let opened = self.opens[usize::from(n.nodes[node].open)].position;
                    if p.position().id_offset == opened.id_offset && !n.bps.is_empty() {
                        self.saw("T crashes while an acquire that needed no raise waits");
                    }
                }
                for a in n.aps.iter_mut().chain(n.bps.iter_mut()) {
                    if let Ap::At(x, id) = *a {
                        if usize::from(x) == node {
                            *a = Ap::Lost(x, id);
                        }
                    }
                }
                n.nodes[node].crashes += 1;
                n.nodes[node].handed_out = (0, 0);
                self.end_epoch(&mut n, node);
            }
            Act::Zombie => {
                note(
                    log,
                    "T is taken for dead and lives on as the ZOMBIE Z; ".to_string(),
                );
                self.saw("T turns into a zombie");
                // Z is T's instance as it was: its epoch, inputs, creates in the air,
                // appends, the acquire's ticket or jump.
                let mut z = n.nodes[T].clone();
                z.store = BTreeMap::new();
                z.crashes = 0;
                n.nodes[Z] = z;
                for a in n.aps.iter_mut().chain(n.bps.iter_mut()) {
                    if let Ap::At(x, id) = *a {
                        if usize::from(x) == T {
                            *a = Ap::At(Z as u8, id);
                        }
                    }
                }
                // A newer instance of T opens from the store alone.
                let t = &mut n.nodes[T];
                assert!(t.ghosts.is_empty());
                t.crashes += 1;
                t.handed_out = (0, 0);
                t.uploading.clear();
                t.ticket = None;
                t.jump = None;
                t.up = false;
                self.reopen(&mut n, T, log);
            }
        }
        n
    }

    /// Mutation (d): T's acquire above `last` jumps its sequence. T is idle (nothing is
    /// admitted to it before the acquire is answered): the model sends an empty object
    /// at `max(next_sequence, (last >> 20) + 1)`, linked to T's chain end, with T's id
    /// offset, which answers the acquire once durable ([`Act::Jump`]).
    fn jump(&mut self, n: &mut State, last: u64, log: &mut Option<String>) {
        let p = self.build(&n.nodes[T]);
        assert!(
            p.uploading() == 0 && p.batch_is_empty(),
            "T is idle at the acquire"
        );
        let position = p.position();
        let header = Header {
            sequence: position.next_sequence.max((last >> 20) + 1),
            ..position.next_header()
        };
        let o = self.empty_obj(T, header);
        if header.sequence > position.next_sequence {
            self.saw("mutation (d) jumps over keys");
        }
        note(log, format!("; T JUMPS: it sends {}", self.desc(o)));
        n.nodes[T].jump = Some((header.sequence, o));
        n.acquire = Ctl::Waiting(None);
    }

    /// A create of `node` reaches T's or S's store or not (`how` as in [`Act::Answer`])
    /// and how it is answered: a key another object holds answers by that object's
    /// epoch, as `store::persist` resolves `AlreadyExists`.
    fn reach(
        &mut self,
        n: &mut State,
        node: usize,
        seq: u64,
        o: u16,
        how: u8,
        log: &mut Option<String>,
    ) -> Res {
        let store = &mut n.nodes[home(node)].store;
        let (res, what) = match (how, store.get(&seq).copied()) {
            (0, None) => (Res::Durable, "is durable".to_string()),
            (1, None) => (Res::Unknown, "is UNKNOWN and landed".to_string()),
            (2, _) => (Res::Unknown, "is UNKNOWN and never lands".to_string()),
            (0, Some(found)) => {
                let (mine, theirs) = (self.obj(o).header.epoch, self.obj(found).header.epoch);
                let res = if found == o {
                    Res::Durable
                } else if theirs > mine {
                    Res::Fenced(theirs)
                } else if theirs < mine {
                    Res::StaleTail(theirs)
                } else {
                    panic!("two objects of epoch {mine} at {seq}")
                };
                self.saw("a create finds its key taken");
                (res, format!("finds {} there: {res:?}", self.desc(found)))
            }
            _ => unreachable!("an unknown create lands only at a free key"),
        };
        if how < 2 && !store.contains_key(&seq) {
            store.insert(seq, o);
            if node == Z {
                self.saw("a create of Z lands");
            }
        }
        if how == 1 {
            self.saw("an unknown create lands");
        }
        note(log, format!("create of {} {what}", self.desc(o)));
        res
    }

    // ----- properties

    fn check(&mut self, s: &State, fin: bool) -> Vec<(Kind, String)> {
        let mut v = Vec::new();
        if s.flags & FLAG_ANSWER_NOT_RECORDED != 0 {
            v.push((
                Kind::AnswerNotRecorded,
                "the release was answered while S's chain did not record it".to_string(),
            ));
        }
        if s.flags & FLAG_NOT_ON_CHAIN != 0 {
            v.push((
                Kind::CatchUpMismatch,
                "the released last id was not on S's chain at the catch-up".to_string(),
            ));
        }
        if s.flags & FLAG_ACQUIRE_REFUSED != 0 {
            v.push((Kind::AcquireRefused, "T refused the acquire".to_string()));
        }
        let released = match s.release {
            Ctl::Answered(l) => Some(l),
            _ => None,
        };
        // At every state: T acknowledges no id of R at or below the id it acquired above.
        if s.acquired > 0 {
            for a in &s.aps {
                if let Ap::Acked(1 | 2, id) = a {
                    if *id <= s.acquired {
                        v.push((
                            Kind::BelowAcquired,
                            format!(
                                "T acknowledged {} at or below the id it acquired above, {}",
                                id_str(*id),
                                id_str(s.acquired)
                            ),
                        ));
                    }
                }
            }
        }
        // At every state: T acknowledges no id of R at or below L.
        if let Some(l) = released {
            for a in &s.aps {
                if let (Ap::Acked(1 | 2, id), Some(l)) = (a, l) {
                    if *id <= l {
                        v.push((
                            Kind::IdsNotIncreasing,
                            format!(
                                "T acknowledged {} at or below L = {}",
                                id_str(*id),
                                id_str(l)
                            ),
                        ));
                    }
                }
            }
        }
        if !fin {
            return v;
        }
        let l = released.expect("a final state has the release answered");
        let s_store = s.nodes[S].store.clone();
        let t_store = s.nodes[T].store.clone();
        let s_entries = self.chain_entries(&s_store);
        let t_entries = self.chain_entries(&t_store);
        let below = |id: u64| l.is_some_and(|l| id <= l);
        let s_piece: Vec<(u64, u8)> = s_entries.iter().copied().filter(|e| below(e.0)).collect();
        let history: Vec<(u64, u8)> = s_piece.iter().chain(&t_entries).copied().collect();
        let hist = entries_str(&history);
        for e in s_entries.iter().filter(|e| !below(e.0)) {
            v.push((
                Kind::AboveReleased,
                format!(
                    "S's final chain holds a{}={} above L = {}",
                    e.1,
                    id_str(e.0),
                    opt_id_str(l)
                ),
            ));
        }
        if s.catch_up.as_ref() != Some(&s_piece) {
            v.push((
                Kind::CatchUpMismatch,
                format!(
                    "the catch-up delivered {} but S's piece is {}",
                    entries_str(s.catch_up.as_deref().unwrap_or_default()),
                    entries_str(&s_piece)
                ),
            ));
        }
        for w in history.windows(2) {
            if w[1].0 <= w[0].0 {
                v.push((
                    Kind::IdsNotIncreasing,
                    format!("history {hist} (L = {})", opt_id_str(l)),
                ));
                break;
            }
        }
        for (i, a) in s.aps.iter().enumerate() {
            let tag = (i + 1) as u8;
            let times = history.iter().filter(|e| e.1 == tag).count();
            if times > 1 {
                v.push((
                    Kind::Duplicate,
                    format!("a{tag} is in the history {hist} twice"),
                ));
            }
            match *a {
                Ap::Acked(node, id) => {
                    let n = history.iter().filter(|e| **e == (id, tag)).count();
                    if n != 1 {
                        v.push((
                            Kind::Lost,
                            format!(
                                "a{tag}, acknowledged by {} as {}, is {n} times in the \
                                 history {hist} (L = {})",
                                NAMES[usize::from(node)],
                                id_str(id),
                                opt_id_str(l)
                            ),
                        ));
                    }
                }
                Ap::Lost(0, id) if times == 0 => {
                    if let Some(other) = t_entries.iter().find(|e| e.0 == id) {
                        v.push((
                            Kind::IdReused,
                            format!(
                                "a{tag} failed MayBeDurable at S with {} and is not in the \
                                 history {hist}, but T's a{} has that id",
                                id_str(id),
                                other.1
                            ),
                        ));
                    }
                }
                Ap::Lost(..) => {}
                Ap::Ready | Ap::At(..) => panic!("a{tag} unresolved at a final state: {a:?}"),
            }
        }
        v
    }

    // ----- the search

    fn explore(&mut self) -> Report {
        let started = std::time::Instant::now();
        let init = self.init.clone();
        let mut index: HashMap<State, u32> = HashMap::new();
        let mut parent: Vec<(u32, Act)> = vec![(u32::MAX, Act::Issue(0))];
        let mut depth: Vec<u16> = vec![0];
        let mut first: BTreeMap<Kind, (u32, String, usize)> = BTreeMap::new();
        index.insert(init.clone(), 0);
        let mut queue: VecDeque<(u32, State)> = VecDeque::from([(0, init)]);
        let mut transitions = 0usize;
        let mut finals = 0usize;
        while let Some((id, s)) = queue.pop_front() {
            let acts = self.enabled(&s);
            let fin = acts.is_empty();
            if fin {
                finals += 1;
                assert!(s.nodes.iter().enumerate().all(|(i, n)| (n.up || i == Z)
                    && n.uploading.is_empty()
                    && n.ghosts.is_empty()
                    && n.jump.is_none()));
                assert!(matches!(s.acquire, Ctl::Answered(_)) && s.catch_up.is_some());
                assert!(!s.bps.iter().any(|a| matches!(a, Ap::At(..))));
                if s.aps.iter().any(|a| matches!(a, Ap::Acked(0, _)))
                    && s.aps.iter().any(|a| matches!(a, Ap::Acked(1 | 2, _)))
                {
                    self.saw("final: both S and T acknowledged appends");
                }
            }
            for (kind, why) in self.check(&s, fin) {
                first
                    .entry(kind)
                    .and_modify(|e| e.2 += 1)
                    .or_insert((id, why, 1));
            }
            for a in acts {
                transitions += 1;
                let t = self.apply(&s, a, &mut None);
                if !index.contains_key(&t) {
                    let tid = u32::try_from(parent.len()).expect("states fit u32");
                    assert!(parent.len() < MAX_STATES, "the state space is too large");
                    index.insert(t.clone(), tid);
                    parent.push((id, a));
                    depth.push(depth[id as usize] + 1);
                    queue.push_back((tid, t));
                }
            }
        }
        let mut violations = BTreeMap::new();
        for (kind, (id, why, count)) in first {
            let mut trace = self.trace(&parent, id);
            trace.push(format!("=> {why}"));
            violations.insert(kind, (count, trace));
        }
        Report {
            states: parent.len(),
            transitions,
            finals,
            max_depth: usize::from(depth.iter().copied().max().unwrap_or(0)),
            violations,
            seen: self.seen.clone(),
            secs: started.elapsed().as_secs_f64(),
        }
    }

    /// The actions from the initial state to state `id`, replayed with descriptions.
    fn trace(&mut self, parent: &[(u32, Act)], id: u32) -> Vec<String> {
        let mut acts = Vec::new();
        let mut at = id;
        while at != 0 {
            let (p, a) = parent[at as usize];
            acts.push(a);
            at = p;
        }
        acts.reverse();
        let mut s = self.init.clone();
        let mut out = vec![format!(
            "start: S and T open on empty prefixes ({} and {})",
            self.desc(s.nodes[S].store[&1]),
            self.desc(s.nodes[T].store[&1])
        )];
        for (k, a) in acts.into_iter().enumerate() {
            let mut log = Some(String::new());
            s = self.apply(&s, a, &mut log);
            out.push(format!("{:>2}. {}", k + 1, log.unwrap_or_default()));
        }
        for node in [S, T] {
            let store = s.nodes[node].store.clone();
            let chain = self.chain(&store);
            let objs: Vec<String> = store.values().map(|&o| self.desc(o)).collect();
            out.push(format!(
                "{}'s store {{{}}}; its chain {chain:?}",
                NAMES[node],
                objs.join(", ")
            ));
        }
        out
    }
}

fn note(log: &mut Option<String>, what: String) {
    if let Some(l) = log {
        let _ = write!(l, "{what}");
    }
}

/// An id as `base:position`.
fn id_str(id: u64) -> String {
    format!("{}:{}", id >> 20, id & ((1 << 20) - 1))
}

fn opt_id_str(id: Option<u64>) -> String {
    id.map_or("none".to_string(), id_str)
}

fn entries_str(entries: &[(u64, u8)]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|(id, t)| format!("a{t}={}", id_str(*id)))
        .collect();
    format!("[{}]", parts.join(", "))
}

fn holdings_str(h: &Holdings) -> String {
    let parts: Vec<String> = h
        .released_regions()
        .map(|(r, l)| format!("R{r} released at {}", opt_id_str(l)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

// ---------------------------------------------------------------------------------------
// The tests

fn run(name: &str, model: Model) -> Report {
    let mut ex = Explorer::new(model);
    let r = ex.explore();
    println!(
        "[{name}] {model:?}\n  {} states, {} transitions, {} final states, longest {} steps, \
         {:.2}s",
        r.states, r.transitions, r.finals, r.max_depth, r.secs
    );
    for (kind, (count, trace)) in &r.violations {
        println!(
            "  VIOLATION {kind:?} ({}) in {count} states; shortest trace ({} steps):",
            kind.property(),
            trace.len() - 4
        );
        for line in trace {
            println!("    {line}");
        }
    }
    if r.violations.is_empty() {
        println!("  no violation");
    }
    r
}

/// What every run of the unmodified design must go through, so that "no violation" is
/// not vacuous.
const COVERAGE: &[&str] = &[
    "S acknowledges an append",
    "T acknowledges an append",
    "an append fails MayBeDurable",
    "an unknown create lands",
    "a create of an ended epoch lands",
    "S's epoch ends",
    "T's epoch ends",
    "T crashes",
    "a reopen claims a hole",
    "a reopen reads the release back",
    "the release is asked again",
    "a release asked again is answered RegionReleased",
    "a release of an unwritten region is recorded",
    "the acquire is asked again",
    "the acquire is answered on its ticket",
    "S refuses an append RegionReleased",
    "final: both S and T acknowledged appends",
];

fn assert_explored(name: &str, r: &Report, min_states: usize) {
    assert!(
        r.states >= min_states && r.finals >= 100,
        "{name}: only {} states, {} final states explored",
        r.states,
        r.finals
    );
}

/// The unmutated design under `model` explores at least 10,000 states, sees every
/// step of `coverage`, and violates nothing; returns the report.
fn assert_safe(name: &str, model: Model, coverage: &[&str]) -> Report {
    let r = run(name, model);
    assert_explored(name, &r, 10_000);
    for what in coverage {
        assert!(r.seen.contains(what), "{name}: never saw \"{what}\"");
    }
    let asserted: Vec<&Kind> = r.violations.keys().collect();
    assert!(
        asserted.is_empty(),
        "{name}: the unmodified design has counterexamples: {asserted:?}"
    );
    r
}

/// A mutated design must violate `kind` (at least); returns the report.
fn assert_catches(name: &str, model: Model, kind: Kind, marker: &str) -> Report {
    let r = run(name, model);
    assert_explored(name, &r, 1_000);
    let (_, trace) = r.violations.get(&kind).unwrap_or_else(|| {
        panic!(
            "{name}: the mutation went unnoticed (no {kind:?}); violations: {:?}",
            r.violations.keys().collect::<Vec<_>>()
        )
    });
    assert!(trace.len() > 4, "a trace of the counterexample");
    assert!(
        trace.iter().any(|l| l.contains(marker)),
        "{name}: the trace never says {marker:?}"
    );
    r
}

#[test]
fn migration_design_is_safe() {
    assert_safe("design", Model::design(), COVERAGE);
}

/// The design with a retried release: the control for mutation (g).
#[test]
fn migration_design_with_a_retried_release_is_safe() {
    assert_safe(
        "design with a retried release",
        Model::retrying(),
        &[
            "a retried release waits for the same record",
            "the release is asked again",
            "S acknowledges an append",
            "T acknowledges an append",
            "final: both S and T acknowledged appends",
        ],
    );
}

/// A wider scope, for information (run with `--ignored`).
#[test]
#[ignore]
fn migration_design_is_safe_wider() {
    for model in [
        Model {
            appends: 4,
            ..Model::design()
        },
        Model {
            ends: [2, 2],
            ..Model::design()
        },
        Model {
            appends: 3,
            ..Model::zombie()
        },
        Model {
            ends: [1, 1],
            ..Model::busy_target()
        },
    ] {
        let r = run("design, wider", model);
        let asserted: Vec<&Kind> = r.violations.keys().collect();
        assert!(asserted.is_empty(), "counterexamples: {asserted:?}");
    }
}

#[test]
fn mutation_admit_after_release_is_caught() {
    let r = assert_catches(
        "mutation (a): S admits after the release",
        Model::design().with(Mutation::AdmitAfterRelease),
        Kind::AboveReleased,
        "RELEASE is answered",
    );
    assert!(r.seen.contains("mutation (a) admits after the release"));
    assert!(r.violations.contains_key(&Kind::Lost));
}

#[test]
fn mutation_last_acknowledged_id_is_caught() {
    let r = assert_catches(
        "mutation (b): the release answers the last acknowledged id",
        Model::design().with(Mutation::LastAcknowledgedId),
        Kind::AboveReleased,
        "MayBeDurable",
    );
    assert!(r.seen.contains("mutation (b) answers another last id"));
}

#[test]
fn mutation_acquire_not_durable_is_caught() {
    assert_catches(
        "mutation (c): the acquire is answered before its raise is durable",
        Model::design().with(Mutation::AcquireNotDurable),
        Kind::IdsNotIncreasing,
        "answered at once",
    );
}

#[test]
fn mutation_acquire_above_last_id_is_caught() {
    assert_catches(
        "mutation (e): T acquires above the last id, not acquire_above",
        Model::design().with(Mutation::AcquireAboveLastId),
        Kind::IdReused,
        "MayBeDurable",
    );
}

/// The design with a zombie instance of T: its late creates collide with the newer
/// instance's claims and opening object (fencing), so nothing it acknowledges is lost.
/// The zombie model's control for mutation (d).
#[test]
fn migration_design_with_zombie_is_safe() {
    let r = assert_safe(
        "design with a zombie",
        Model::zombie(),
        &[
            "T turns into a zombie",
            "an append goes to Z",
            "a create of Z lands",
            "Z's epoch ends",
            "a create finds its key taken",
            "T acknowledges an append",
            "final: both S and T acknowledged appends",
        ],
    );
    // Fencing: whatever Z sends after the newer instance listed is never acknowledged.
    assert!(!r.seen.contains("Z acknowledges an append"));
}

/// The design with a busy target: B's appends at T before and during the acquire, so
/// that the acquire may need no raise (T's ids are above the acquired id already, in
/// objects in flight or the open batch) and waits for the first object above it; those
/// objects may fail and T may crash. The control for mutation (f).
#[test]
fn migration_design_with_busy_target_is_safe() {
    assert_safe(
        "design with a busy target",
        Model::busy_target(),
        &[
            "T admits an append of B",
            "T admits an append of B while the acquire waits",
            "an append of B fails MayBeDurable",
            "an acquire that needs no raise waits for an object",
            "T crashes while an acquire that needed no raise waits",
            "the acquire is asked again",
            "the acquire is answered on its ticket",
            "T acknowledges an append",
            "final: both S and T acknowledged appends",
        ],
    );
}

#[test]
fn mutation_no_raise_at_once_is_caught() {
    let r = assert_catches(
        "mutation (f): an acquire that needs no raise is answered at once",
        Model::busy_target().with(Mutation::NoRaiseAtOnce),
        Kind::BelowAcquired,
        "CRASHES",
    );
    assert!(r
        .seen
        .contains("mutation (f) answers an acquire with no raise"));
}

#[test]
fn mutation_sequence_jump_is_caught() {
    let r = assert_catches(
        "mutation (d): T jumps its sequence instead of raising an id offset",
        Model::zombie().with(Mutation::SequenceJump),
        Kind::Lost,
        "ZOMBIE",
    );
    assert!(r.seen.contains("mutation (d) jumps over keys"));
    assert!(r.seen.contains("Z acknowledges an append"));
}

#[test]
fn mutation_retried_release_answered_early_is_caught() {
    let r = assert_catches(
        "mutation (g): a retried release is answered from the holdings in flight",
        Model::retrying().with(Mutation::RetriedReleaseAnsweredEarly),
        Kind::AnswerNotRecorded,
        "again",
    );
    assert!(r
        .seen
        .contains("mutation (g) answers a retried release early"));
    assert!(
        r.violations.contains_key(&Kind::Lost),
        "the early answer loses acknowledged entries: {:?}",
        r.violations.keys().collect::<Vec<_>>()
    );
}

#[test]
fn mutation_unfenced_unwritten_release_is_caught() {
    let r = assert_catches(
        "mutation (h): a release of an unwritten region records nothing",
        Model::design().with(Mutation::UnfencedUnwrittenRelease),
        Kind::Lost,
        "UnknownRegion",
    );
    assert!(r
        .seen
        .contains("mutation (h) refuses a release of an unwritten region"));
}
