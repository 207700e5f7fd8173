//! Exhaustive small-scope check of one log over three stores (DESIGN.md "One log over
//! several stores"), with the crate's own quorum rules (`quorum::write_verdict`,
//! `key_state`, `hole_settled`, `opening_won`) and chain rules (`choose_chain`,
//! `plan_opening_above`).
//!
//! The model: three stores, each a map from key to a copy (first writer wins). An old
//! writer **A** (opened at 1, epoch 2) has pipelined data objects in flight to every
//! store; each store's create lands and is answered, or its answer is lost (the create
//! may still land later, or never). A acknowledges in order at a quorum of its own
//! copies and ends its epoch at a value that can never be decided or an answer it never
//! gets (no retries: they only add liveness). Openers **B** (and **C**) run the open over
//! three stores step by step: each store listed at its own step (so listings are torn),
//! a store they cannot reach left unlisted and never written, completion of what the
//! unlisted store may decide, the chain over decided values, `M` over every copy listed,
//! claims settled by `hole_settled`, the opening object won only where *created* in a
//! quorum; a restart on anything else (bounded); once open, one data object,
//! acknowledged at a quorum.
//!
//! Properties, at every state: every object acknowledged (A's, an opener's opening
//! object once won, its data object) is on the chain a recovery over the stores would
//! choose; no two openers win one epoch. In the liveness scenarios (A done and one store
//! unreachable; a key split between two earlier values), the opener opens.
//!
//! Mutations (flags of the model) that must each be caught: acknowledging at Q - 1
//! copies; an "already exists" with identical bytes counted toward the opening object's
//! quorum; a hole taken as settled once our claim is created in one store; no completion
//! when a store is unlisted; `M` taken over decided values only. The last loses nothing
//! in these scopes (an opener whose `M` is too low puts its opening object on a key that
//! already holds copies, and a key held by an earlier claim or object in a quorum cannot
//! be won), but it costs the open: on a key split between two earlier values, neither
//! decided, the opening object can never be created in a quorum, and the opener restarts
//! onto the same key until it gives up. The split-key scenario catches it as an opener
//! that never opens.
//!
//! Abstracted away: entries, footers, floors and reclamation, timing bounds, damaged
//! copies, retries (their number only changes liveness), reads.

use std::collections::{BTreeMap, HashMap, HashSet};

use object_store_wal::format::{Header, Link};
use object_store_wal::internal::chain::catalog::{choose_chain, plan_opening_above};
use object_store_wal::internal::store::quorum::{
    decided_value, hole_settled, key_state, opening_won, quorum, write_verdict, CopyAnswer,
    KeyState, Listed, ValueId, WriteVerdict,
};

const N: usize = 3;
/// Keys 1..KEYS.
const KEYS: usize = 8;
/// Restarts an opener may make before it gives up.
const MAX_RESTARTS: u8 = 1;
/// A bound on the states one exploration may visit (memory).
const MAX_STATES: usize = 3_000_000;

/// A copy's value: what makes two copies the same bytes in this model.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct V {
    seq: u8,
    epoch: u8,
    claim: bool,
    link: (u8, u8),
}

impl V {
    fn header(&self) -> Header {
        Header {
            sequence: u64::from(self.seq),
            epoch: u64::from(self.epoch),
            link: Link {
                sequence: u64::from(self.link.0),
                epoch: u64::from(self.link.1),
            },
            floor: 0,
            claim: self.claim,
            closed: false,
            id_offset: 0,
        }
    }

    fn of(h: &Header) -> V {
        V {
            seq: h.sequence as u8,
            epoch: h.epoch as u8,
            claim: h.claim,
            link: (h.link.sequence as u8, h.link.epoch as u8),
        }
    }

    /// The crate's notion of a value: the link stands in for the object CRC.
    fn id(&self) -> ValueId {
        ValueId {
            sequence: u64::from(self.seq),
            epoch: u64::from(self.epoch),
            claim: self.claim,
            object_crc: u32::from(self.link.0) << 8 | u32::from(self.link.1),
        }
    }
}

type Store = [Option<V>; KEYS + 1];

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Ans {
    Unknown,
    Ours,
    Other(u8),
}

impl Ans {
    fn copy(self) -> CopyAnswer {
        match self {
            Ans::Unknown => CopyAnswer::Unknown,
            Ans::Ours => CopyAnswer::Ours,
            Ans::Other(e) => CopyAnswer::Other {
                epoch: u64::from(e),
            },
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Flight {
    Flying,
    Answered,
    /// The answer was lost; the create may still land.
    LostFlying,
    Gone,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Writer {
    objs: Vec<V>,
    flights: Vec<[Flight; N]>,
    answers: Vec<[Ans; N]>,
    acked: usize,
    ended: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    Listing,
    Completing,
    Claiming,
    Opening,
    Writing,
    Done,
    Failed,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Opener {
    reach: [bool; N],
    restarts: u8,
    phase: Phase,
    listed: [Option<Store>; N],
    /// Creates still to send in this phase: (store, value).
    todo: Vec<(u8, V)>,
    /// Per claim: the claim and what each store holds at its key after our create.
    claims: Vec<(V, [Option<V>; N])>,
    opening: Option<V>,
    created: u8,
    data: Option<V>,
    data_answers: [Ans; N],
    won: bool,
    acked_data: bool,
}

impl Opener {
    fn new(reach: [bool; N]) -> Self {
        Opener {
            reach,
            restarts: 0,
            phase: Phase::Listing,
            listed: [None; N],
            todo: Vec::new(),
            claims: Vec::new(),
            opening: None,
            created: 0,
            data: None,
            data_answers: [Ans::Unknown; N],
            won: false,
            acked_data: false,
        }
    }

    fn restart(&mut self) {
        let (reach, restarts) = (self.reach, self.restarts + 1);
        *self = Opener::new(reach);
        self.restarts = restarts;
        if restarts > MAX_RESTARTS {
            self.phase = Phase::Failed;
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    stores: [Store; N],
    a: Writer,
    openers: Vec<Opener>,
}

#[derive(Clone, Copy, Default, Debug)]
struct Mutations {
    ack_below_quorum: bool,
    twin_counts: bool,
    settle_on_one: bool,
    no_completion: bool,
    m_over_decided: bool,
}

#[derive(Clone, Debug)]
struct Model {
    mutations: Mutations,
    /// Every opener must have opened at every terminal state.
    must_open: bool,
}

fn verdict(answers: &[Ans; N], m: &Mutations) -> WriteVerdict {
    let copies: Vec<CopyAnswer> = answers.iter().map(|a| a.copy()).collect();
    if m.ack_below_quorum && answers.iter().filter(|a| **a == Ans::Ours).count() >= quorum(N) - 1 {
        return WriteVerdict::Durable;
    }
    write_verdict(&copies)
}

/// Creates `v` at its key in store `s`: first writer wins; returns what the key holds.
fn create(stores: &mut [Store; N], s: usize, v: V) -> V {
    let slot = &mut stores[s][v.seq as usize];
    *slot.get_or_insert(v)
}

/// The decided values of `stores` (Q copies of one value), by key.
fn decided(stores: &[Store; N]) -> BTreeMap<u64, Header> {
    let mut out = BTreeMap::new();
    for key in 1..=KEYS {
        let listed: Vec<Listed> = stores
            .iter()
            .map(|s| s[key].map_or(Listed::Absent, |v| Listed::Copy(v.id())))
            .collect();
        if let KeyState::Decided(id) = key_state(&listed, false) {
            if let Some(v) = stores.iter().filter_map(|s| s[key]).find(|v| v.id() == id) {
                out.insert(key as u64, v.header());
            }
        }
    }
    out
}

impl State {
    fn initial(a_objects: u8, openers: Vec<Opener>) -> State {
        let opening = V {
            seq: 1,
            epoch: 2,
            claim: false,
            link: (0, 0),
        };
        let mut store: Store = [None; KEYS + 1];
        store[1] = Some(opening);
        let objs: Vec<V> = (0..a_objects)
            .map(|i| V {
                seq: 2 + i,
                epoch: 2,
                claim: false,
                link: (1 + i, 2),
            })
            .collect();
        State {
            stores: [store; N],
            a: Writer {
                flights: vec![[Flight::Flying; N]; objs.len()],
                answers: vec![[Ans::Unknown; N]; objs.len()],
                objs,
                acked: 0,
                ended: false,
            },
            openers,
        }
    }

    fn settle_a(&mut self, m: &Mutations) {
        while !self.a.ended && self.a.acked < self.a.objs.len() {
            let k = self.a.acked;
            match verdict(&self.a.answers[k], m) {
                WriteVerdict::Durable => self.a.acked += 1,
                WriteVerdict::Never { .. } => self.a.ended = true,
                WriteVerdict::Undecided => {
                    if !self.a.flights[k].contains(&Flight::Flying) {
                        self.a.ended = true;
                    }
                    break;
                }
            }
        }
    }

    /// Every state one step from this one.
    fn successors(&self, m: &Mutations) -> Vec<State> {
        let mut out = Vec::new();
        for k in 0..self.a.objs.len() {
            for s in 0..N {
                let v = self.a.objs[k];
                match self.a.flights[k][s] {
                    Flight::Flying => {
                        let mut next = self.clone();
                        let held = create(&mut next.stores, s, v);
                        next.a.answers[k][s] = if held == v {
                            Ans::Ours
                        } else {
                            Ans::Other(held.epoch)
                        };
                        next.a.flights[k][s] = Flight::Answered;
                        next.settle_a(m);
                        out.push(next);
                        let mut next = self.clone();
                        next.a.flights[k][s] = Flight::LostFlying;
                        next.settle_a(m);
                        out.push(next);
                    }
                    Flight::LostFlying => {
                        let mut next = self.clone();
                        create(&mut next.stores, s, v);
                        next.a.flights[k][s] = Flight::Gone;
                        out.push(next);
                        let mut next = self.clone();
                        next.a.flights[k][s] = Flight::Gone;
                        out.push(next);
                    }
                    Flight::Answered | Flight::Gone => {}
                }
            }
        }
        for o in 0..self.openers.len() {
            out.extend(self.opener_steps(o, m));
        }
        out
    }

    fn opener_steps(&self, o: usize, m: &Mutations) -> Vec<State> {
        let op = &self.openers[o];
        let mut out = Vec::new();
        match op.phase {
            Phase::Listing => {
                for s in 0..N {
                    if op.reach[s] && op.listed[s].is_none() {
                        let mut next = self.clone();
                        next.openers[o].listed[s] = Some(self.stores[s]);
                        if (0..N).all(|i| !op.reach[i] || next.openers[o].listed[i].is_some()) {
                            next.plan(o, m);
                        }
                        out.push(next);
                    }
                }
            }
            Phase::Completing | Phase::Claiming | Phase::Opening | Phase::Writing => {
                // Each create to its own store is a step of its own, in any order.
                for t in 0..op.todo.len() {
                    let mut next = self.clone();
                    let (s, v) = next.openers[o].todo.remove(t);
                    let s = s as usize;
                    let was_free = next.stores[s][v.seq as usize].is_none();
                    let held = create(&mut next.stores, s, v);
                    next.answer(o, s, v, held, was_free, m);
                    if next.openers[o].todo.is_empty() {
                        next.phase_done(o, m);
                    }
                    out.push(next);
                }
            }
            Phase::Done | Phase::Failed => {}
        }
        out
    }

    fn answer(&mut self, o: usize, s: usize, v: V, held: V, was_free: bool, m: &Mutations) {
        let op = &mut self.openers[o];
        match op.phase {
            Phase::Completing => {
                if let Some(l) = op.listed[s].as_mut() {
                    l[v.seq as usize] = Some(held);
                }
            }
            Phase::Claiming => {
                if let Some((_, copies)) = op.claims.iter_mut().find(|(c, _)| c.seq == v.seq) {
                    copies[s] = Some(held);
                }
            }
            // Created only where the key was free: an identical twin is not ours.
            Phase::Opening if was_free || (m.twin_counts && held == v) => op.created += 1,
            Phase::Writing => {
                op.data_answers[s] = if held == v {
                    Ans::Ours
                } else {
                    Ans::Other(held.epoch)
                };
            }
            _ => {}
        }
    }

    fn plan(&mut self, o: usize, m: &Mutations) {
        let op = &self.openers[o];
        let mut todo = Vec::new();
        for key in 1..=KEYS {
            let listed = listed_at(op, key);
            match key_state(&listed, false) {
                KeyState::Undetermined => return self.openers[o].restart(),
                KeyState::Complete { value, stores } if !m.no_completion => {
                    let v = op
                        .listed
                        .iter()
                        .flatten()
                        .filter_map(|l| l[key])
                        .find(|v| v.id() == value);
                    if let Some(v) = v {
                        todo.extend(stores.iter().map(|s| (*s as u8, v)));
                    }
                }
                _ => {}
            }
        }
        let op = &mut self.openers[o];
        if todo.is_empty() {
            self.plan_claims(o, m);
        } else {
            op.todo = todo;
            op.phase = Phase::Completing;
        }
    }

    fn plan_claims(&mut self, o: usize, m: &Mutations) {
        let op = &self.openers[o];
        let mut headers = BTreeMap::new();
        let mut largest = 0u64;
        for key in 1..=KEYS {
            let listed = listed_at(op, key);
            if listed.iter().any(|l| matches!(l, Listed::Copy(_))) && !m.m_over_decided {
                largest = key as u64;
            }
            match key_state(&listed, false) {
                KeyState::Decided(id) => {
                    if let Some(v) = op
                        .listed
                        .iter()
                        .flatten()
                        .filter_map(|l| l[key])
                        .find(|v| v.id() == id)
                    {
                        headers.insert(key as u64, v.header());
                        largest = largest.max(key as u64);
                    }
                }
                KeyState::Undetermined => return self.openers[o].restart(),
                // Still to complete after completing: the open starts over.
                KeyState::Complete { .. } if !m.no_completion => return self.openers[o].restart(),
                _ => {}
            }
        }
        let chain = choose_chain(&headers);
        let end = chain.last().and_then(|s| headers.get(s)).copied();
        let present: Vec<u64> = headers.keys().copied().collect();
        let Ok(plan) = plan_opening_above(&present, end.as_ref(), largest, 0) else {
            return self.openers[o].restart();
        };
        if plan.opening.sequence as usize > KEYS - 1 {
            return self.openers[o].restart();
        }
        let reach = self.openers[o].reach;
        let op = &mut self.openers[o];
        op.claims = plan.claims.iter().map(|h| (V::of(h), [None; N])).collect();
        op.opening = Some(V::of(&plan.opening));
        if op.claims.is_empty() {
            op.todo = to_reachable(reach, V::of(&plan.opening));
            op.phase = Phase::Opening;
        } else {
            op.todo = op
                .claims
                .iter()
                .flat_map(|(c, _)| to_reachable(reach, *c))
                .collect();
            op.phase = Phase::Claiming;
        }
    }

    fn phase_done(&mut self, o: usize, m: &Mutations) {
        match self.openers[o].phase {
            Phase::Completing => self.plan_claims(o, m),
            Phase::Claiming => {
                let op = &self.openers[o];
                for (claim, copies) in &op.claims {
                    let ids: Vec<Option<ValueId>> =
                        copies.iter().map(|c| c.map(|v| v.id())).collect();
                    let value_decided = decided_value(&ids).is_some_and(|v| !v.claim);
                    let settled = if m.settle_on_one {
                        copies.iter().flatten().any(|c| c == claim)
                    } else {
                        hole_settled(&ids)
                    };
                    if value_decided || !settled {
                        return self.openers[o].restart();
                    }
                }
                let op = &mut self.openers[o];
                if let Some(opening) = op.opening {
                    op.todo = to_reachable(op.reach, opening);
                    op.created = 0;
                    op.phase = Phase::Opening;
                }
            }
            Phase::Opening => {
                let op = &mut self.openers[o];
                if !opening_won(usize::from(op.created), N) {
                    return op.restart();
                }
                op.won = true;
                if let Some(opening) = op.opening {
                    let data = V {
                        seq: opening.seq + 1,
                        epoch: opening.epoch,
                        claim: false,
                        link: (opening.seq, opening.epoch),
                    };
                    op.data = Some(data);
                    op.todo = to_reachable(op.reach, data);
                    op.phase = Phase::Writing;
                }
            }
            Phase::Writing => {
                let op = &mut self.openers[o];
                op.acked_data = verdict(&op.data_answers, m) == WriteVerdict::Durable;
                op.phase = Phase::Done;
            }
            _ => {}
        }
    }

    /// What a recovery over the stores now would replay must hold every object
    /// acknowledged; no two openers may own one epoch.
    fn check(&self) -> Result<(), String> {
        let decided = decided(&self.stores);
        let chain: HashSet<(u64, u64)> = choose_chain(&decided)
            .into_iter()
            .filter_map(|s| decided.get(&s).map(|h| (s, h.epoch)))
            .collect();
        let mut acked: Vec<(String, V)> = self.a.objs[..self.a.acked]
            .iter()
            .map(|v| ("A".to_string(), *v))
            .collect();
        let mut owners: HashMap<u8, usize> = HashMap::new();
        for (i, op) in self.openers.iter().enumerate() {
            if let (true, Some(opening)) = (op.won, op.opening) {
                acked.push((format!("opener {i}'s opening"), opening));
                if let Some(other) = owners.insert(opening.epoch, i) {
                    return Err(format!(
                        "openers {other} and {i} both won epoch {}",
                        opening.epoch
                    ));
                }
            }
            if let (true, Some(data)) = (op.acked_data, op.data) {
                acked.push((format!("opener {i}'s data"), data));
            }
        }
        for (who, v) in acked {
            if !chain.contains(&(u64::from(v.seq), u64::from(v.epoch))) {
                return Err(format!("{who} {v:?} acknowledged but not on the chain"));
            }
        }
        Ok(())
    }
}

fn to_reachable(reach: [bool; N], v: V) -> Vec<(u8, V)> {
    (0..N).filter(|s| reach[*s]).map(|s| (s as u8, v)).collect()
}

fn listed_at(op: &Opener, key: usize) -> Vec<Listed> {
    op.listed
        .iter()
        .map(|l| match l {
            None => Listed::Unlisted,
            Some(store) => store[key].map_or(Listed::Absent, |v| Listed::Copy(v.id())),
        })
        .collect()
}

/// Explores every interleaving from `start`; the first violation, with its path length.
fn explore(model: &Model, start: State) -> (usize, Result<(), String>) {
    let mut seen: HashSet<State> = HashSet::new();
    let mut stack = vec![start];
    while let Some(state) = stack.pop() {
        if !seen.insert(state.clone()) {
            continue;
        }
        assert!(
            seen.len() <= MAX_STATES,
            "more than {MAX_STATES} states: the scope is too large"
        );
        if let Err(e) = state.check() {
            return (seen.len(), Err(format!("{e}\n  state: {state:?}")));
        }
        let next = state.successors(&model.mutations);
        if next.is_empty() && model.must_open {
            if let Some(i) = state.openers.iter().position(|o| !o.won) {
                return (
                    seen.len(),
                    Err(format!("opener {i} never opened\n  state: {state:?}")),
                );
            }
        }
        stack.extend(next);
    }
    (seen.len(), Ok(()))
}

const ALL: [bool; N] = [true; N];
const NOT_2: [bool; N] = [true, true, false];

/// A writes `objects` objects while B opens over every store.
fn writer_and_opener(objects: u8, m: Mutations) -> (usize, Result<(), String>) {
    let model = Model {
        mutations: m,
        must_open: false,
    };
    explore(&model, State::initial(objects, vec![Opener::new(ALL)]))
}

/// A writes two pipelined objects while B opens without store 2 (unlisted, never
/// written by B).
fn writer_and_opener_without_a_store(m: Mutations) -> (usize, Result<(), String>) {
    let model = Model {
        mutations: m,
        must_open: false,
    };
    explore(&model, State::initial(2, vec![Opener::new(NOT_2)]))
}

/// Two openers at once over every store (A opened and wrote nothing more).
fn twin_openers(m: Mutations) -> (usize, Result<(), String>) {
    let model = Model {
        mutations: m,
        must_open: false,
    };
    explore(
        &model,
        State::initial(0, vec![Opener::new(ALL), Opener::new(ALL)]),
    )
}

/// A's object 2 acknowledged with copies in stores 0 and 2 only, A done; B cannot reach
/// store 2: B must still open (completing object 2 into store 1).
fn opener_with_a_store_down(m: Mutations) -> (usize, Result<(), String>) {
    let model = Model {
        mutations: m,
        must_open: true,
    };
    let mut start = State::initial(1, vec![Opener::new(NOT_2)]);
    let v = start.a.objs[0];
    for s in [0, 2] {
        create(&mut start.stores, s, v);
        start.a.answers[0][s] = Ans::Ours;
        start.a.flights[0][s] = Flight::Answered;
    }
    start.a.flights[0][1] = Flight::Gone;
    start.settle_a(&m);
    assert_eq!(
        start.a.acked, 1,
        "the scenario starts with object 2 acknowledged"
    );
    explore(&model, start)
}

/// Key 2 split between two values, neither decided: A's object 2 landed in store 0 only
/// (its answer lost: A ended `MayBeDurable`), and an earlier opener that saw it there
/// (so opened at 3, epoch 4) got its claim of 2 into store 1 only before it stopped. A
/// new opener over every store must open, above key 2 with a claim settling it.
fn opener_above_a_split_key(m: Mutations) -> (usize, Result<(), String>) {
    let model = Model {
        mutations: m,
        must_open: true,
    };
    let mut start = State::initial(1, vec![Opener::new(ALL)]);
    let v = start.a.objs[0];
    create(&mut start.stores, 0, v);
    start.a.flights[0] = [Flight::Gone; N];
    let earlier_claim = V {
        seq: v.seq,
        epoch: v.seq + 2,
        claim: true,
        link: (1, 2),
    };
    create(&mut start.stores, 1, earlier_claim);
    start.settle_a(&m);
    assert!(
        start.a.ended && start.a.acked == 0,
        "the scenario starts with A ended, nothing acknowledged"
    );
    explore(&model, start)
}

fn safe(name: &str, (states, result): (usize, Result<(), String>), at_least: usize) {
    eprintln!("{name}: {states} states");
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    assert!(states >= at_least, "{name}: only {states} states explored");
}

fn caught(name: &str, (states, result): (usize, Result<(), String>)) -> String {
    eprintln!("{name}: {states} states, {result:?}");
    result.expect_err(&format!("{name}: the mutation lost nothing"))
}

#[test]
fn quorum_design_is_safe_with_a_writer_and_an_opener() {
    safe(
        "writer and opener",
        writer_and_opener(1, Mutations::default()),
        5_000,
    );
}

#[test]
fn quorum_design_is_safe_with_a_store_unlisted() {
    safe(
        "writer and opener without store 2",
        writer_and_opener_without_a_store(Mutations::default()),
        10_000,
    );
}

#[test]
fn quorum_design_is_safe_with_twin_openers() {
    safe("twin openers", twin_openers(Mutations::default()), 100_000);
}

#[test]
fn quorum_design_opens_with_a_store_down() {
    safe(
        "opener with a store down",
        opener_with_a_store_down(Mutations::default()),
        10,
    );
}

#[test]
fn quorum_mutation_ack_below_quorum_loses_acknowledged_objects() {
    let e = caught(
        "ack at Q - 1",
        writer_and_opener(
            1,
            Mutations {
                ack_below_quorum: true,
                ..Mutations::default()
            },
        ),
    );
    assert!(e.contains("not on the chain"), "{e}");
}

#[test]
fn quorum_mutation_identical_twin_counted_gives_an_epoch_two_owners() {
    let e = caught(
        "twin counted",
        twin_openers(Mutations {
            twin_counts: true,
            ..Mutations::default()
        }),
    );
    assert!(e.contains("both won epoch"), "{e}");
}

#[test]
fn quorum_mutation_settled_on_one_claim_loses_acknowledged_objects() {
    let e = caught(
        "settled on one claim",
        writer_and_opener_without_a_store(Mutations {
            settle_on_one: true,
            ..Mutations::default()
        }),
    );
    assert!(e.contains("not on the chain"), "{e}");
}

#[test]
fn quorum_mutation_no_completion_never_opens_with_a_store_down() {
    let e = caught(
        "no completion",
        opener_with_a_store_down(Mutations {
            no_completion: true,
            ..Mutations::default()
        }),
    );
    assert!(e.contains("never opened"), "{e}");
}

#[test]
fn quorum_design_opens_above_a_split_key() {
    safe(
        "opener above a split key",
        opener_above_a_split_key(Mutations::default()),
        5,
    );
}

#[test]
fn quorum_mutation_m_over_decided_never_opens_above_a_split_key() {
    let e = caught(
        "M over decided",
        opener_above_a_split_key(Mutations {
            m_over_decided: true,
            ..Mutations::default()
        }),
    );
    assert!(e.contains("never opened"), "{e}");
}
