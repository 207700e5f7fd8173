//! The replay oracle the actor tests share: what callers were told, checked against
//! what a fresh instance replays or a follower yields.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use object_store_wal::format::entry_sequence;
use object_store_wal::{AppendParts, AppendReceipt, Durability, Entry, Error};

/// What the callers were told, to check a replay against.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Entries of acknowledged appends, with the ids they were acknowledged with.
    pub acked: Vec<Entry>,
    /// Failed appends whose entries may still have become durable.
    pub maybe: Vec<AppendParts>,
    /// Failed appends refused before any create: never replayed.
    pub never: Vec<AppendParts>,
}

impl Ledger {
    /// Records what the caller of `parts` was told.
    pub fn record(&mut self, parts: AppendParts, result: &Result<AppendReceipt, Error>) {
        match result {
            Ok(receipt) => self.acked.extend(acked_entries(&parts, receipt)),
            Err(e) => match e.durability() {
                Durability::MayBeDurable => self.maybe.push(parts),
                Durability::NotWritten => self.never.push(parts),
            },
        }
    }

    /// Checks a replay: each acknowledged entry exactly once with its id; each region's
    /// entries in increasing id order; each failed append whole (in one object) or not
    /// at all, and not at all when it was never written; nothing else. Returns, for each
    /// `maybe` append in order, whether it was replayed.
    pub fn check(&self, replayed: &[Entry]) -> Vec<bool> {
        let mut by_payload: HashMap<(u64, Bytes), &Entry> = HashMap::new();
        let mut last: HashMap<u64, u64> = HashMap::new();
        for e in replayed {
            assert!(
                by_payload
                    .insert((e.region, e.payload.clone()), e)
                    .is_none(),
                "replayed twice: {e:?}"
            );
            if let Some(prev) = last.insert(e.region, e.id) {
                assert!(e.id > prev, "region {} out of order at {e:?}", e.region);
            }
        }
        let mut accounted: HashSet<(u64, Bytes)> = HashSet::new();
        for a in &self.acked {
            let k = (a.region, a.payload.clone());
            let got = by_payload
                .get(&k)
                .unwrap_or_else(|| panic!("acknowledged entry not replayed: {a:?}"));
            assert_eq!(got.id, a.id, "replayed with another id than acknowledged");
            accounted.insert(k);
        }
        let keys = |parts: &AppendParts| -> Vec<(u64, Bytes)> {
            parts
                .iter()
                .flat_map(|(r, es)| es.iter().map(move |e| (*r, e.clone())))
                .collect()
        };
        let mut outcomes = Vec::new();
        for parts in &self.maybe {
            let ks = keys(parts);
            let found: Vec<&Entry> = ks
                .iter()
                .filter_map(|k| by_payload.get(k).copied())
                .collect();
            assert!(
                found.is_empty() || found.len() == ks.len(),
                "a failed append was replayed in part: {parts:?}"
            );
            let objects: HashSet<u64> = found.iter().map(|e| entry_sequence(e.id)).collect();
            assert!(
                objects.len() <= 1,
                "a failed append spans objects: {found:?}"
            );
            outcomes.push(!found.is_empty());
            accounted.extend(ks);
        }
        for parts in &self.never {
            for k in keys(parts) {
                assert!(
                    !by_payload.contains_key(&k),
                    "an append refused before any create was replayed: {parts:?}"
                );
            }
        }
        for e in replayed {
            assert!(
                accounted.contains(&(e.region, e.payload.clone())),
                "replayed an entry no caller was told about: {e:?}"
            );
        }
        outcomes
    }

    /// Every region an append was made to.
    pub fn regions(&self) -> HashSet<u64> {
        let mut r: HashSet<u64> = self.acked.iter().map(|e| e.region).collect();
        for parts in self.maybe.iter().chain(&self.never) {
            r.extend(parts.iter().map(|(region, _)| *region));
        }
        r
    }

    /// The acknowledged entries of `region`, as `(id, payload)`, in id order.
    pub fn region(&self, region: u64) -> Vec<(u64, Bytes)> {
        let mut v: Vec<(u64, Bytes)> = self
            .acked
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
        for a in self.acked.iter().filter(|e| e.region == region) {
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
        let maybe: HashSet<Bytes> = self.maybe.iter().flat_map(part_payloads).collect();
        let never: HashSet<Bytes> = self.never.iter().flat_map(part_payloads).collect();
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
        self.acked
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
