//! The replay oracle: what callers were told (and, where the test knows it, when),
//! checked against what an instance replays or a follower yields. Shared by the actor
//! tests (`mod support { pub mod ledger; }`) and by `tests/simulation.rs` (with
//! `#[path]`).
//!
//! Appends are recorded either once answered ([`Ledger::record`], the actor tests) or
//! when issued and again when answered ([`Ledger::issue`], [`Ledger::answer`], the
//! simulation), on a logical clock. [`Ledger::judge`] holds the rules a replay must
//! obey; [`Ledger::check`] asserts them for a replay after every answer, and
//! [`Ledger::remember`] adds, for a replay that follows earlier ones, that nothing once
//! replayed is forgotten or renumbered. [`Ledger::check_follower`] asserts what a
//! follower's stream of one region must hold.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use object_store_wal::format::entry_sequence;
use object_store_wal::{AppendParts, AppendReceipt, Durability, Entry, Error};

/// Where an entry was appended: `(append, part, position in the part)`.
pub type Pos = (usize, usize, usize);

/// What became of an append.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Not answered yet.
    Pending,
    /// Acknowledged, with this receipt.
    Acked(AppendReceipt),
    /// Failed, with this error.
    Failed(Error),
}

/// One append, as its caller saw it.
#[derive(Debug)]
pub struct AppendRecord {
    /// The instance it was sent to (the simulation's numbering; 0 when recorded with
    /// [`Ledger::record`]).
    pub instance: usize,
    /// What was appended.
    pub parts: AppendParts,
    /// Logical time it was issued; `None` when recorded only once answered.
    pub issued: Option<u64>,
    /// Logical time its answer arrived.
    pub answered: Option<u64>,
    /// Its answer.
    pub outcome: Outcome,
}

impl AppendRecord {
    /// How many entries it holds.
    pub fn entries(&self) -> usize {
        self.parts.iter().map(|(_, e)| e.len()).sum()
    }

    fn failed_with(&self, durability: Durability) -> bool {
        matches!(&self.outcome, Outcome::Failed(e) if e.durability() == durability)
    }
}

/// What a replay broke ([`Ledger::judge`]), and where each replayed entry was appended.
#[derive(Debug, Default)]
pub struct Judgement {
    /// One line per broken rule; empty when the replay obeys every rule.
    pub errors: Vec<String>,
    /// Each replayed entry that some append holds, with the id it was replayed with.
    pub present: HashMap<Pos, u64>,
}

/// What the callers were told, and when (on a logical clock), to check replays against.
#[derive(Debug, Default)]
pub struct Ledger {
    clock: u64,
    /// Every append, in the order it was issued (or recorded).
    pub appends: Vec<AppendRecord>,
    /// `(region, payload)` -> where it was appended: the oracle tells entries apart by
    /// their payload, so a payload appears at most once in a region.
    by_payload: HashMap<(u64, Bytes), Pos>,
    /// Each entry a remembered replay held -> the id it was first replayed with.
    replayed: HashMap<Pos, u64>,
}

impl Ledger {
    /// Moves the logical clock on and returns the new time.
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Records an append as it is sent to `instance`; returns its index, for
    /// [`answer`](Self::answer). The index is `appends.len()` beforehand.
    pub fn issue(&mut self, instance: usize, parts: AppendParts) -> usize {
        let issued = self.tick();
        self.push(instance, parts, Some(issued), None, Outcome::Pending)
    }

    /// Records the answer to the append at `index`.
    pub fn answer(&mut self, index: usize, result: Result<AppendReceipt, Error>) {
        let answered = self.tick();
        let record = &mut self.appends[index];
        record.answered = Some(answered);
        record.outcome = match result {
            Ok(receipt) => Outcome::Acked(receipt),
            Err(e) => Outcome::Failed(e),
        };
    }

    /// Records what the caller of `parts` was told, once answered (a receipt must
    /// describe its append).
    pub fn record(&mut self, parts: AppendParts, result: &Result<AppendReceipt, Error>) {
        let outcome = match result {
            Ok(receipt) => {
                acked_entries(&parts, receipt);
                Outcome::Acked(receipt.clone())
            }
            Err(e) => Outcome::Failed(e.clone()),
        };
        let answered = self.tick();
        self.push(0, parts, None, Some(answered), outcome);
    }

    fn push(
        &mut self,
        instance: usize,
        parts: AppendParts,
        issued: Option<u64>,
        answered: Option<u64>,
        outcome: Outcome,
    ) -> usize {
        let a = self.appends.len();
        for (p, (region, entries)) in parts.iter().enumerate() {
            for (k, payload) in entries.iter().enumerate() {
                let earlier = self
                    .by_payload
                    .insert((*region, payload.clone()), (a, p, k));
                assert!(
                    earlier.is_none(),
                    "the oracle needs payloads unique in a region: {payload:?} in {region}"
                );
            }
        }
        self.appends.push(AppendRecord {
            instance,
            parts,
            issued,
            answered,
            outcome,
        });
        a
    }

    /// Entries of acknowledged appends, with the ids they were acknowledged with.
    pub fn acked(&self) -> Vec<Entry> {
        self.appends
            .iter()
            .filter_map(|r| match &r.outcome {
                Outcome::Acked(receipt) => Some(acked_entries(&r.parts, receipt)),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Failed appends whose entries may still have become durable.
    pub fn maybe(&self) -> Vec<&AppendParts> {
        self.failed(Durability::MayBeDurable)
    }

    /// Failed appends refused before any create: never replayed.
    pub fn never(&self) -> Vec<&AppendParts> {
        self.failed(Durability::NotWritten)
    }

    fn failed(&self, durability: Durability) -> Vec<&AppendParts> {
        self.appends
            .iter()
            .filter(|r| r.failed_with(durability))
            .map(|r| &r.parts)
            .collect()
    }

    /// The rules every replay obeys, each broken one a line of the judgement:
    ///
    /// - each replayed entry belongs to an append, in its region, at most once; each
    ///   region's ids increase;
    /// - an append is replayed whole or not at all, from one object, each part's ids
    ///   consecutive;
    /// - an acknowledged append answered before `required_before` (logical time) is
    ///   replayed; one replayed has the ids of its receipt;
    /// - an append that failed as never written is not replayed;
    /// - an append acknowledged before another was issued has smaller ids in their
    ///   common regions (where the issue time is known).
    ///
    /// `describe` names an instance (by [`AppendRecord::instance`]) in the messages.
    pub fn judge(
        &self,
        entries: &[Entry],
        required_before: Option<u64>,
        describe: &dyn Fn(usize) -> String,
    ) -> Judgement {
        let mut errors = Vec::new();
        // Where each replayed entry belongs; at most once; ids increase per region.
        let mut present: HashMap<Pos, u64> = HashMap::new();
        let mut last_id: HashMap<u64, u64> = HashMap::new();
        for e in entries {
            let at = self.by_payload.get(&(e.region, e.payload.clone())).copied();
            let name = match at {
                Some((a, p, k)) => format!("a{a} part {p} entry {k}"),
                None => format!("{e:?}"),
            };
            if let Some(prev) = last_id.insert(e.region, e.id) {
                if e.id <= prev {
                    errors.push(format!(
                        "region {}: id {:#x} replayed after {prev:#x} ({name})",
                        e.region, e.id
                    ));
                }
            }
            let Some(pos) = at else {
                errors.push(self.unknown(e));
                continue;
            };
            if present.insert(pos, e.id).is_some() {
                errors.push(format!("{name} replayed twice"));
            }
        }
        for (a, record) in self.appends.iter().enumerate() {
            let total = record.entries();
            let ids: Vec<Option<u64>> = record
                .parts
                .iter()
                .enumerate()
                .flat_map(|(p, (_, es))| (0..es.len()).map(move |k| (p, k)))
                .map(|(p, k)| present.get(&(a, p, k)).copied())
                .collect();
            let found = ids.iter().filter(|i| i.is_some()).count();
            if found > 0 && found < total {
                errors.push(format!(
                    "a{a} replayed in part: {found} of {total} entries ({:?}), outcome {:?}",
                    record.outcome, ids
                ));
            }
            if found > 0 {
                // One object; consecutive ids within each part.
                let mut seqs = HashSet::new();
                for (p, (_, es)) in record.parts.iter().enumerate() {
                    let first = present.get(&(a, p, 0)).copied();
                    for k in 0..es.len() {
                        if let (Some(first), Some(id)) = (first, present.get(&(a, p, k))) {
                            seqs.insert(entry_sequence(*id));
                            if *id != first + k as u64 {
                                errors.push(format!(
                                    "a{a} part {p}: entry {k} has id {id:#x}, the part starts at {first:#x}"
                                ));
                            }
                        }
                    }
                }
                if seqs.len() > 1 {
                    errors.push(format!("a{a} replayed from several objects {seqs:?}"));
                }
            }
            match &record.outcome {
                Outcome::Acked(receipt) => {
                    let must =
                        required_before.is_some_and(|t| record.answered.is_some_and(|x| x < t));
                    if found == 0 && must {
                        errors.push(format!(
                            "a{a} acknowledged (seq {}, {:?}) by {} is not replayed",
                            receipt.sequence,
                            receipt.parts,
                            describe(record.instance)
                        ));
                    }
                    if found > 0 {
                        for (p, (region, es)) in record.parts.iter().enumerate() {
                            let Some(r) = receipt.parts.get(p) else {
                                errors.push(format!("a{a}: receipt lacks part {p}"));
                                continue;
                            };
                            if r.region != *region || r.count as usize != es.len() {
                                errors.push(format!(
                                    "a{a}: receipt part {p} is {r:?}, the append was region {region} x{}",
                                    es.len()
                                ));
                            }
                            for k in 0..es.len() {
                                let want = r.first_id + k as u64;
                                match present.get(&(a, p, k)) {
                                    Some(&got) if got != want => errors.push(format!(
                                        "a{a} part {p} entry {k} acknowledged as {want:#x}, replayed as {got:#x} (acknowledged by {})",
                                        describe(record.instance)
                                    )),
                                    _ => {}
                                }
                            }
                        }
                    }
                }
                Outcome::Failed(e) if e.durability() == Durability::NotWritten && found > 0 => {
                    errors.push(format!(
                        "a{a} failed as not written ({e:?}) but is replayed (sent to {})",
                        describe(record.instance)
                    ));
                }
                _ => {}
            }
        }
        // Real-time order: acknowledged before another append was issued means smaller
        // ids in the regions they share.
        for (a, ra) in self.appends.iter().enumerate() {
            let (Outcome::Acked(_), Some(done)) = (&ra.outcome, ra.answered) else {
                continue;
            };
            for (b, rb) in self.appends.iter().enumerate() {
                if rb.issued.is_none_or(|issued| issued <= done) {
                    continue;
                }
                for (pa, (region_a, ea)) in ra.parts.iter().enumerate() {
                    for (pb, (region_b, _)) in rb.parts.iter().enumerate() {
                        if region_a != region_b {
                            continue;
                        }
                        let last_a = present.get(&(a, pa, ea.len() - 1));
                        let first_b = present.get(&(b, pb, 0));
                        if let (Some(x), Some(y)) = (last_a, first_b) {
                            if y <= x {
                                errors.push(format!(
                                    "region {region_a}: a{b} (issued after a{a} was acknowledged) has id {y:#x} <= a{a}'s {x:#x}"
                                ));
                            }
                        }
                    }
                }
            }
        }
        Judgement { errors, present }
    }

    /// The error for a replayed entry no append holds in its region.
    fn unknown(&self, e: &Entry) -> String {
        let elsewhere = self
            .by_payload
            .iter()
            .find(|((_, payload), _)| *payload == e.payload);
        match elsewhere {
            Some(((region, _), (a, p, k))) => format!(
                "a{a} part {p} entry {k} replayed in region {} instead of {region}",
                e.region
            ),
            None => format!("replayed an entry nobody appended: {e:?}"),
        }
    }

    /// The rule between replays, for one judged as `judged`: each entry an earlier
    /// remembered replay held is replayed again, with the same id. Remembers this one.
    pub fn remember(&mut self, judged: &Judgement) -> Vec<String> {
        let mut errors = Vec::new();
        for (&(a, p, k), &id) in &self.replayed {
            match judged.present.get(&(a, p, k)) {
                None => errors.push(format!(
                    "a{a} part {p} entry {k} was replayed before (id {id:#x}) and is not now (outcome {:?})",
                    self.appends[a].outcome
                )),
                Some(&now) if now != id => errors.push(format!(
                    "a{a} part {p} entry {k} was replayed as {id:#x} before, as {now:#x} now"
                )),
                _ => {}
            }
        }
        for (&pos, &id) in &judged.present {
            self.replayed.entry(pos).or_insert(id);
        }
        errors
    }

    /// Whether a remembered replay held the append at `index`.
    pub fn ever_replayed(&self, index: usize) -> bool {
        self.replayed.contains_key(&(index, 0, 0))
    }

    /// Checks a replay after every append was answered: each acknowledged entry exactly
    /// once with its id; each region's entries in increasing id order; each failed
    /// append whole (in one object) or not at all, and not at all when it was never
    /// written; nothing else ([`judge`](Self::judge)). Returns, for each
    /// [`maybe`](Self::maybe) append in order, whether it was replayed.
    pub fn check(&self, replayed: &[Entry]) -> Vec<bool> {
        let judged = self.judge(replayed, Some(u64::MAX), &|_| "the instance".to_string());
        assert!(
            judged.errors.is_empty(),
            "the replay breaks the oracle:\n  {}",
            judged.errors.join("\n  ")
        );
        self.appends
            .iter()
            .enumerate()
            .filter(|(_, r)| r.failed_with(Durability::MayBeDurable))
            .map(|(a, _)| judged.present.contains_key(&(a, 0, 0)))
            .collect()
    }

    /// Every region an append was made to.
    pub fn regions(&self) -> HashSet<u64> {
        self.appends
            .iter()
            .flat_map(|r| r.parts.iter().map(|(region, _)| *region))
            .collect()
    }

    /// The acknowledged entries of `region`, as `(id, payload)`, in id order.
    pub fn region(&self, region: u64) -> Vec<(u64, Bytes)> {
        let mut v: Vec<(u64, Bytes)> = self
            .acked()
            .iter()
            .filter(|e| e.region == region)
            .map(|e| (e.id, e.payload.clone()))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v
    }

    /// Checks a follower's stream of `region`: every acknowledged entry exactly once, in
    /// id order, with its id; anything else only from failed appends that may have
    /// become durable, never from appends refused before any create.
    pub fn check_follower(&self, region: u64, got: &[Entry]) {
        for pair in got.windows(2) {
            assert!(
                pair[1].id > pair[0].id,
                "not in id order, or twice: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
        let by_payload: HashMap<&Bytes, &Entry> = got.iter().map(|e| (&e.payload, e)).collect();
        assert_eq!(by_payload.len(), got.len(), "a payload came twice");
        let mut known: HashSet<&Bytes> = HashSet::new();
        let acked = self.acked();
        for a in acked.iter().filter(|e| e.region == region) {
            let e = by_payload
                .get(&a.payload)
                .unwrap_or_else(|| panic!("acknowledged entry not followed: {a:?}"));
            assert_eq!(e.id, a.id, "followed with another id");
            known.insert(&a.payload);
        }
        let part_payloads = |parts: &AppendParts| -> Vec<Bytes> {
            parts
                .iter()
                .filter(|(r, _)| *r == region)
                .flat_map(|(_, es)| es.iter().cloned())
                .collect()
        };
        let maybe: HashSet<Bytes> = self.maybe().into_iter().flat_map(part_payloads).collect();
        let never: HashSet<Bytes> = self.never().into_iter().flat_map(part_payloads).collect();
        for e in got {
            assert_eq!(e.region, region);
            assert!(
                !never.contains(&e.payload),
                "refused append followed: {e:?}"
            );
            assert!(
                known.contains(&e.payload) || maybe.contains(&e.payload),
                "followed an entry no caller was told about: {e:?}"
            );
        }
    }

    /// The id of the last acknowledged entry of `region`.
    pub fn last_acked(&self, region: u64) -> u64 {
        self.acked()
            .iter()
            .filter(|e| e.region == region)
            .map(|e| e.id)
            .max()
            .expect("an acknowledged entry")
    }
}

/// The entries an acknowledged append got, with the ids of its receipt; checks that the
/// receipt describes the append.
pub fn acked_entries(parts: &AppendParts, receipt: &AppendReceipt) -> Vec<Entry> {
    assert_eq!(
        receipt.parts.len(),
        parts.len(),
        "one receipt part per part"
    );
    let mut out = Vec::new();
    for ((region, entries), ids) in parts.iter().zip(&receipt.parts) {
        assert_eq!(ids.region, *region);
        assert_eq!(ids.count as usize, entries.len());
        assert_eq!(
            entry_sequence(ids.first_id),
            receipt.sequence,
            "ids name the object holding the append"
        );
        for (i, payload) in entries.iter().enumerate() {
            out.push(Entry {
                region: *region,
                id: ids.first_id + i as u64,
                payload: payload.clone(),
            });
        }
    }
    out
}
