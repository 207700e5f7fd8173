//! Retention and takeover through the actors: floors from obsolete watermarks, the
//! reclaimer, recovery after reclaiming, stalled creates of an earlier instance that land
//! on a reclaimed key, and read-only opens by a second process (followers are in
//! `tests/followers.rs`), and the case the link window closes: an idle earlier instance
//! whose next create would start after its key was reclaimed.
//!
//! The harness (`support/harness.rs`) says how the tests wait: in virtual time where the
//! reclaimer runs, in real time elsewhere, every wait with a safety bound.

mod support {
    pub mod harness;
    pub mod ledger;
}

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{decode_header, decode_object_summary, entry_sequence};
use object_store_wal::internal::store::keys::parse_key;
use object_store_wal::testing::{
    CountingStore, FaultStore, Hooks, ManualClock, TokioClock, Wrapper,
};
use object_store_wal::{
    AppendParts, Config, Durability, Entry, EpochEndReason, Error, HedgeAfter, ObjectStoreLogStore,
};
use object_store_wal_actors::{spawn_wal, spawn_wal_with, WalHandle};
use proptest::prelude::*;
use support::harness::*;
use support::ledger::acked_entries;
use tokio::task::JoinHandle;

// ---------------------------------------------------------------------------------------
// Harness (the rest is in support/harness.rs)
// ---------------------------------------------------------------------------------------

fn local_store(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    Arc::new(
        LocalFileSystem::new_with_prefix(dir.path())
            .expect("local store")
            .with_fsync(true),
    )
}

async fn read_only_region(store: &ObjectStoreLogStore, region: u64) -> Vec<Entry> {
    let mut stream = store.read(region, 0);
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item.expect("a read-only entry"));
    }
    out
}

// ---------------------------------------------------------------------------------------
// A store that audits every delete
// ---------------------------------------------------------------------------------------

/// What the callers declared safe elsewhere, and what was deleted.
#[derive(Debug, Default)]
struct Audit {
    /// Per region, the highest watermark ever reported (across restarts: the WAL forgets
    /// watermarks at a restart, the callers do not): entries with id `<=` it are safe.
    watermarks: Mutex<HashMap<u64, u64>>,
    /// Sequences of every WAL key deleted, in order.
    deleted: Mutex<Vec<u64>>,
    /// Deletes that lost an entry some region still needed, or touched a foreign key.
    violations: Mutex<Vec<String>>,
}

impl Audit {
    fn watermark(&self, region: u64) -> Option<u64> {
        self.watermarks.lock().unwrap().get(&region).copied()
    }

    fn raise(&self, region: u64, w: u64) {
        let mut m = self.watermarks.lock().unwrap();
        let e = m.entry(region).or_insert(w);
        *e = (*e).max(w);
    }

    fn deleted(&self) -> Vec<u64> {
        self.deleted.lock().unwrap().clone()
    }

    fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// Checks the object at `location` just before it is deleted: every entry in it
    /// must be at or below its region's watermark at this moment.
    async fn check(&self, inner: &Arc<dyn ObjectStore>, location: &Path) {
        let violation = |v: String| self.violations.lock().unwrap().push(v);
        let Some(sequence) = parse_key(&Path::from(PREFIX), location) else {
            return violation(format!("deleted a foreign key {location}"));
        };
        self.deleted.lock().unwrap().push(sequence);
        let bytes = match inner.get(location).await {
            Ok(r) => r.bytes().await.expect("read an object before its delete"),
            Err(object_store::Error::NotFound { .. }) => return,
            Err(e) => return violation(format!("cannot read {location}: {e}")),
        };
        let summary = match decode_object_summary(&bytes) {
            Ok(s) => s,
            Err(e) => return violation(format!("deleted a damaged object {location}: {e}")),
        };
        for r in &summary.footer.records {
            let w = self.watermark(r.region);
            if w.is_none_or(|w| r.last_entry_id > w) {
                violation(format!(
                    "deleted object {sequence} holding region {} up to id {} above its watermark {w:?}",
                    r.region, r.last_entry_id
                ));
            }
        }
    }
}

/// The hooks of a store that passes everything to the wrapped store, and has
/// [`Audit::check`] look at each object before it is deleted.
#[derive(Debug)]
struct AuditHooks {
    audit: Arc<Audit>,
}

impl Hooks for AuditHooks {
    const NAME: &'static str = "AuditedStore";

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let checked_on = inner.clone();
        let audit = self.audit.clone();
        let checked = locations
            .then(move |location| {
                let inner = checked_on.clone();
                let audit = audit.clone();
                async move {
                    if let Ok(path) = &location {
                        audit.check(&inner, path).await;
                    }
                    location
                }
            })
            .boxed();
        inner.delete_stream(checked)
    }
}

// ---------------------------------------------------------------------------------------
// 1. Property: random appends, obsoletes, restarts and reclaims
// ---------------------------------------------------------------------------------------

const REGIONS: [u64; 4] = [1, 2, 3, 4];

#[derive(Debug, Clone)]
enum Op {
    /// One append: `(region, entries)` parts, distinct regions.
    Append(Vec<(u64, u8)>),
    /// `obsolete(region, id)` with `id` one of the region's acknowledged ids (`recent`:
    /// one of its last two; `past`: one above it, an id that names no entry).
    Obsolete {
        region: u64,
        pick: prop::sample::Index,
        recent: bool,
        past: bool,
    },
    /// `obsolete_all(region)`.
    ObsoleteAll(u64),
    /// Stop, and spawn a fresh WAL on the same store (watermarks are forgotten).
    Restart,
    /// The writer panics; the supervisor opens a new epoch (watermarks are kept).
    PanicWriter,
    /// Let `reclaim_grace` pass and wait for the reclaimer to reach the floor.
    Reclaim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => proptest::collection::btree_map(1u64..=4, 1u8..=3, 1..=2)
            .prop_map(|m| Op::Append(m.into_iter().collect())),
        4 => (1u64..=4, any::<prop::sample::Index>(), any::<bool>(), any::<bool>()).prop_map(
            |(region, pick, recent, past)| Op::Obsolete { region, pick, recent, past }
        ),
        2 => (1u64..=4).prop_map(Op::ObsoleteAll),
        1 => Just(Op::Restart),
        1 => Just(Op::PanicWriter),
        2 => Just(Op::Reclaim),
    ]
}

/// The WAL under test and a model of what it must do.
struct Run {
    store: Arc<dyn ObjectStore>,
    audit: Arc<Audit>,
    config: Config,
    wal: WalHandle,
    join: JoinHandle<()>,
    /// Every acknowledged entry, per region, in id order.
    acked: BTreeMap<u64, Vec<Entry>>,
    /// Watermarks reported to the running WAL (as it clamps them).
    process: HashMap<u64, u64>,
    /// The floor the WAL must have reached: its catalog starts here (it drops what lies
    /// below the floor of its newest object, and a recovery starts at the chain end's).
    floor: u64,
    /// Deletes recorded when the running WAL was spawned.
    deleted_at_spawn: usize,
    tag: u64,
}

impl Run {
    async fn new() -> Run {
        let audit = Arc::new(Audit::default());
        let store: Arc<dyn ObjectStore> = Wrapper::wrap(
            Arc::new(InMemory::new()),
            AuditHooks {
                audit: audit.clone(),
            },
        );
        let config = config();
        let (wal, join) = spawn(&store, &config).await;
        Run {
            store,
            audit,
            config,
            wal,
            join,
            acked: BTreeMap::new(),
            process: HashMap::new(),
            floor: 0,
            deleted_at_spawn: 0,
            tag: 0,
        }
    }

    /// The region's entries in the running WAL's catalog.
    fn catalog(&self, region: u64) -> impl Iterator<Item = &Entry> + '_ {
        let from = self.floor;
        self.acked
            .get(&region)
            .into_iter()
            .flatten()
            .filter(move |e| entry_sequence(e.id) >= from)
    }

    /// The lowest sequence a region still needs: its first entry above its watermark
    /// (its first entry when no watermark was reported since the spawn).
    fn pin(&self, region: u64) -> Option<u64> {
        let w = self.process.get(&region).copied();
        self.catalog(region)
            .find(|e| w.is_none_or(|w| e.id > w))
            .map(|e| entry_sequence(e.id))
    }

    async fn run(&mut self, op: Op) {
        match op {
            Op::Append(parts) => self.append(parts).await,
            Op::Obsolete {
                region,
                pick,
                recent,
                past,
            } => {
                let id = match self.acked.get(&region) {
                    Some(es) if !es.is_empty() => {
                        let i = if recent {
                            es.len() - 1 - pick.index(es.len().min(2))
                        } else {
                            pick.index(es.len())
                        };
                        es[i].id + u64::from(past)
                    }
                    _ => pick.index(1 << 30) as u64,
                };
                self.obsolete(region, id).await
            }
            Op::ObsoleteAll(region) => self.obsolete(region, u64::MAX).await,
            Op::Restart => self.restart().await,
            Op::PanicWriter => self.panic_writer().await,
            Op::Reclaim => self.reclaim().await,
        }
        self.check().await;
    }

    async fn append(&mut self, regions: Vec<(u64, u8)>) {
        let parts: AppendParts = regions
            .into_iter()
            .map(|(region, n)| {
                let entries = (0..n)
                    .map(|_| {
                        self.tag += 1;
                        payload(format!("r{region}-e{}", self.tag))
                    })
                    .collect();
                (region, entries)
            })
            .collect();
        let receipt = self
            .wal
            .append_many(parts.clone())
            .await
            .expect("an append on a healthy store");
        let sequence = receipt.sequence;
        // The floor sealed into the object: the lowest pin, capped at the object itself
        // (nothing else is in flight), never below an earlier floor.
        let needed = REGIONS
            .iter()
            .filter_map(|r| self.pin(*r))
            .min()
            .unwrap_or(sequence);
        self.floor = self.floor.max(needed.min(sequence));
        for e in acked_entries(&parts, &receipt) {
            let list = self.acked.entry(e.region).or_default();
            if let Some(last) = list.last() {
                assert!(e.id > last.id, "region {} ids must increase", e.region);
            }
            list.push(e);
        }
        let s = stats(&self.wal).await;
        assert_eq!(
            s.floor, self.floor,
            "floor after acknowledging object {sequence}"
        );
    }

    async fn obsolete(&mut self, region: u64, id: u64) {
        if let Some(last) = self.catalog(region).last().map(|e| e.id) {
            let w = id.min(last);
            let p = self.process.entry(region).or_insert(w);
            *p = (*p).max(w);
            // Declared safe before the WAL is told, so that any delete it causes is
            // checked against it.
            self.audit.raise(region, w);
        }
        let result = if id == u64::MAX {
            self.wal.obsolete_all(region).await
        } else {
            self.wal.obsolete(region, id).await
        };
        result.expect("obsolete");
    }

    async fn restart(&mut self) {
        let before = stats(&self.wal).await;
        let (wal, join) = (self.wal.clone(), self.join_handle());
        stop(wal, join).await;
        let (wal, join) = spawn(&self.store, &self.config).await;
        self.wal = wal;
        self.join = join;
        self.process.clear();
        self.deleted_at_spawn = self.audit.deleted().len();
        let s = stats(&self.wal).await;
        assert!(s.epoch > before.epoch, "a fresh spawn opens a new epoch");
        assert_eq!(
            s.floor, self.floor,
            "the opening carries the chain end's floor"
        );
        assert_eq!(s.reclaimed_below, 0);
    }

    async fn panic_writer(&mut self) {
        let before = stats(&self.wal).await;
        self.wal.panic_writer();
        let s = stats_until_virtual(&self.wal, "a new epoch", Duration::from_millis(1), |s| {
            s.epoch > before.epoch
        })
        .await;
        assert_eq!(s.restarts, before.restarts + 1);
        // The new epoch's catalog starts at the chain end's floor; the watermarks
        // reported to this process still apply.
        assert_eq!(s.floor, self.floor);
    }

    async fn reclaim(&mut self) {
        let target = self.floor;
        let s = stats_until_virtual(
            &self.wal,
            "the reclaimer to reach the floor",
            Duration::from_secs(1),
            |s| s.reclaimed_below >= target,
        )
        .await;
        assert_eq!(s.floor, target);
        assert_eq!(
            s.reclaimed_below, target,
            "reclaimed exactly below the floor"
        );
        let (present, _) = listing(&self.store).await;
        assert!(
            present.iter().all(|s| *s >= target),
            "keys below the floor {target} remain: {present:?}"
        );
        assert_eq!(
            s.deleted as usize,
            self.audit.deleted().len() - self.deleted_at_spawn,
            "every delete this WAL made is counted"
        );
    }

    /// Reads and replays every region, the delete audit, and what the catalog keeps.
    async fn check(&self) {
        let violations = self.audit.violations();
        assert!(violations.is_empty(), "bad deletes: {violations:?}");
        // The catalog holds the regions with an entry at or above the floor, no other.
        let live = REGIONS
            .iter()
            .filter(|r| self.catalog(**r).next().is_some())
            .count();
        assert_eq!(stats(&self.wal).await.catalog_regions, live as u64);
        let mut from = Vec::new();
        for region in REGIONS {
            let acked = self.acked.get(&region).cloned().unwrap_or_default();
            // The caller's view: everything above the highest watermark ever reported is
            // still there, exactly.
            let gw = self.audit.watermark(region);
            let start = gw.map_or(0, |w| w + 1);
            let above: Vec<Entry> = acked.iter().filter(|e| e.id >= start).cloned().collect();
            assert_eq!(
                ids(&read(&self.wal, region, start).await),
                ids(&above),
                "region {region} read from {start}"
            );
            // The WAL's view: its catalog, minus what it hides below its own watermark.
            let pw = self.process.get(&region).copied();
            let visible: Vec<Entry> = self
                .catalog(region)
                .filter(|e| pw.is_none_or(|w| e.id > w))
                .cloned()
                .collect();
            assert_eq!(
                ids(&read(&self.wal, region, 0).await),
                ids(&visible),
                "region {region} read from 0"
            );
            from.push((region, start));
        }
        let replayed = collect(self.wal.replay(from.clone()).await.expect("replay")).await;
        for (region, start) in from {
            let got: Vec<Entry> = replayed
                .iter()
                .filter(|e| e.region == region)
                .cloned()
                .collect();
            let want: Vec<Entry> = self
                .acked
                .get(&region)
                .into_iter()
                .flatten()
                .filter(|e| e.id >= start)
                .cloned()
                .collect();
            assert_eq!(
                ids(&got),
                ids(&want),
                "region {region} replayed from {start}"
            );
        }
    }

    /// Takes the running WAL's join handle (a finished placeholder is left behind).
    fn join_handle(&mut self) -> JoinHandle<()> {
        std::mem::replace(&mut self.join, tokio::spawn(async {}))
    }

    async fn finish(mut self) {
        self.restart().await;
        self.check().await;
        self.reclaim().await;
        self.check().await;
        stop(self.wal, self.join).await;
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random appends over a few regions, obsoletes (one id or all), restarts and grace
    /// periods: no delete ever loses an entry above its region's watermark, the floor is
    /// exactly the lowest needed sequence, the reclaimer removes everything below it, and
    /// every read and replay (after restarts too) gives exactly the entries above the
    /// watermarks.
    #[test]
    fn reclaiming_never_loses_an_entry_above_its_watermark(
        // Within the restart policy's budget (8 restarts a minute, and virtual time
        // hardly moves): a ninth writer panic ends the WAL for good, as it should, which
        // is not what this property is about.
        ops in proptest::collection::vec(op(), 1..60).prop_filter(
            "at most 8 writer panics",
            |ops| ops.iter().filter(|op| matches!(op, Op::PanicWriter)).count() <= 8,
        )
    ) {
        paused_runtime().block_on(async move {
            let mut run = Run::new().await;
            for op in ops {
                run.run(op).await;
            }
            run.finish().await;
        });
    }
}

// ---------------------------------------------------------------------------------------
// 2. Recovery after reclaiming reads only the live objects
// ---------------------------------------------------------------------------------------

/// After the first pass has listed the prefix, a pass deletes the keys of the
/// sequences between the last floor and the new one without listing (a LIST is billed
/// like a PUT, a DELETE not at all), and leaves exactly the live keys.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn later_reclaim_passes_delete_by_sequence_without_listing() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let counting = CountingStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = counting.clone();
    let config = config();
    let (wal, join) = spawn(&store, &config).await;

    // Objects 2..=4 hold region 1 (the opening object is 1); region 1 is dropped and
    // object 5 (region 2) carries floor 5.
    for _ in 0..3 {
        wal.append(1, vec![payload("one")]).await.expect("append");
    }
    wal.obsolete_all(1).await.expect("obsolete_all");
    let r = wal.append(2, vec![payload("two")]).await.expect("append");
    assert_eq!(r.sequence, 5);
    let first = stats(&wal).await.floor;
    assert_eq!(first, 5);
    stats_until_virtual(&wal, "the first reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= first
    })
    .await;
    assert_eq!(listing(&inner).await.0, vec![5]);

    // Objects 6..=8 hold region 3; region 2 and 3 are dropped; object 9 (region 4)
    // carries floor 9. The pass deletes 5..=8 by key: no LIST.
    counting.reset();
    for _ in 0..3 {
        wal.append(3, vec![payload("three")]).await.expect("append");
    }
    wal.obsolete_all(2).await.expect("obsolete_all");
    wal.obsolete_all(3).await.expect("obsolete_all");
    let r = wal.append(4, vec![payload("four")]).await.expect("append");
    assert_eq!(r.sequence, 9);
    let second = stats(&wal).await.floor;
    assert_eq!(second, 9);
    let s = stats_until_virtual(&wal, "the second reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= second
    })
    .await;
    let counts = counting.counts();
    assert_eq!(
        counts.lists.load(Ordering::Relaxed),
        0,
        "no LIST after the first pass"
    );
    assert_eq!(
        counts.deletes.load(Ordering::Relaxed),
        4,
        "keys 5..=8, one DELETE each"
    );
    assert_eq!(s.reclaimed_below, second);
    assert_eq!(listing(&inner).await.0, vec![9]);
    stop(wal, join).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fresh_open_after_reclaiming_reads_only_live_objects() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let foreign = Path::from(format!("{PREFIX}/notes.txt"));
    inner
        .put(&foreign, PutPayload::from_static(b"not a WAL object"))
        .await
        .expect("put a foreign key");
    let counting = CountingStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = counting.clone();
    let config = config();
    let (wal, join) = spawn(&store, &config).await;

    // Objects 2..=5 hold region 1, 6..=9 region 2, 10..=13 region 3 (one per append;
    // the opening object is 1).
    let mut acked: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    for (i, region) in [1u64, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
        .into_iter()
        .enumerate()
    {
        let parts = vec![(region, vec![payload(format!("e{i}"))])];
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        assert_eq!(receipt.sequence, i as u64 + 2);
        acked
            .entry(region)
            .or_default()
            .extend(acked_entries(&parts, &receipt));
    }
    // Regions 1 and 2 are dropped; region 3 is safe up to its entry in object 11.
    wal.obsolete_all(1).await.expect("obsolete_all");
    wal.obsolete_all(2).await.expect("obsolete_all");
    let w3 = acked[&3][1].id;
    assert_eq!(entry_sequence(w3), 11);
    wal.obsolete(3, w3).await.expect("obsolete");
    assert_eq!(
        stats(&wal).await.floor,
        2,
        "region 1 pinned object 2; not raised before the next object"
    );
    let r4 = wal
        .append(4, vec![payload("r4")])
        .await
        .expect("append region 4");
    assert_eq!(r4.sequence, 14);
    let floor = 12;
    assert_eq!(stats(&wal).await.floor, floor, "region 3 pins object 12");
    let (before, _) = listing(&inner).await;
    assert_eq!(before, (1..=14).collect::<Vec<_>>());

    let s = stats_until_virtual(&wal, "the reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= floor
    })
    .await;
    assert_eq!(s.reclaimed_below, floor);
    assert_eq!(s.deleted, 11, "keys 1..=11 deleted");
    let (live, foreign_keys) = listing(&inner).await;
    assert_eq!(live, vec![12, 13, 14]);
    assert_eq!(
        foreign_keys,
        vec![foreign.to_string()],
        "foreign key untouched"
    );
    stop(wal, join).await;

    // A fresh open: one LIST that returns the live objects and the foreign key, one GET
    // per live object (whole: they are small), none below the floor.
    counting.reset();
    let fresh = ObjectStoreLogStore::open(store.clone(), config.clone())
        .await
        .expect("fresh open");
    let counts = counting.counts();
    assert_eq!(counts.lists.load(Ordering::Relaxed), 1);
    assert_eq!(
        counts.listed_keys.load(Ordering::Relaxed),
        live.len() as u64 + 1,
        "listed keys: the live objects and the foreign key"
    );
    let gets = counting.get_log();
    assert_eq!(gets.len(), live.len(), "one GET per live object: {gets:?}");
    for g in &gets {
        let sequence = parse_key(&Path::from(PREFIX), &Path::from(g.key.as_str()))
            .unwrap_or_else(|| panic!("a GET of a key that is not a WAL object: {g:?}"));
        assert!(sequence >= floor, "GET below the floor: {g:?}");
        assert_eq!(g.range, None, "a small object is read whole");
    }
    let report = fresh.report();
    assert!(report.objects.iter().all(|o| o.header.sequence >= floor));
    assert_eq!(report.foreign, vec![foreign.to_string()]);
    assert_eq!(report.orphans, 0);
    assert!(
        report.objects.len() < before.len(),
        "recovery work follows the live objects, not the history"
    );
    // What is replayed: region 3 from its first live entry, region 4; regions 1 and 2
    // were dropped and reclaimed.
    let first_on_chain = fresh
        .catalog()
        .read()
        .unwrap()
        .objects()
        .next()
        .map(|(s, _)| s);
    assert_eq!(first_on_chain, Some(floor));
    let mut by_region = BTreeMap::new();
    for region in [1u64, 2, 3, 4] {
        let mut stream = fresh.read(region, 0);
        let mut got = Vec::new();
        while let Some(e) = stream.next().await {
            got.push(e.expect("entry"));
        }
        by_region.insert(region, got);
    }
    assert!(by_region[&1].is_empty());
    assert!(by_region[&2].is_empty());
    assert_eq!(ids(&by_region[&3]), ids(&acked[&3][2..]));
    assert_eq!(
        ids(&by_region[&4]),
        vec![(r4.parts[0].first_id, payload("r4"))]
    );
}

// ---------------------------------------------------------------------------------------
// 3. A stalled create of an earlier instance lands on a reclaimed key
// ---------------------------------------------------------------------------------------

/// Instance A's create of sequence 2 stalls; B opens (its opening object takes 2), writes,
/// its floor rises to 3 and the reclaimer deletes 1 and 2. Only then does A's create land,
/// on the reclaimed key, after longer than `max_create_duration` on A's clock: A must not
/// acknowledge it, and B's chain must not include it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stalled_create_landing_on_a_reclaimed_key_is_never_acknowledged() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let config = config();
    // A's create stalls unhedged and without a timeout cutting it short: the case the
    // two bounds are for (a hedge would meet B's objects and fence A at once).
    let mut config_a = config.clone();
    config_a.hedge_after = HedgeAfter::Off;
    config_a.request_timeout = Duration::from_secs(3600);
    let mut no_restarts = restart_policy();
    no_restarts.max_restarts = 0;
    let clock_a = ManualClock::new();
    let (a, a_join) = spawn_wal_with(store.clone(), config_a, no_restarts, clock_a.clone(), None)
        .await
        .expect("spawn A");
    a.last_entry_id_overall().await.expect("A recovered");
    assert_eq!(stats(&a).await.epoch, 2, "A's opening object is 1");

    // A's first object is sequence 2: hold its create (only A's: B's create of the same
    // key goes through).
    let hold = faults.hold_next_creates_of(&key(2), 1);
    let a2 = a.clone();
    let stalled = tokio::spawn(async move { a2.append(7, vec![payload("stalled")]).await });
    hold.wait_arrived(1).await;

    let clock_b = ManualClock::new();
    let (b, b_join) = spawn_wal_with(
        store.clone(),
        config.clone(),
        restart_policy(),
        clock_b,
        None,
    )
    .await
    .expect("spawn B");
    b.last_entry_id_overall().await.expect("B recovered");
    assert_eq!(
        stats(&b).await.epoch,
        3,
        "B's opening object took sequence 2"
    );
    assert_eq!(
        decode_header(&object_at(&inner, 2).await.unwrap())
            .unwrap()
            .epoch,
        3
    );
    let b1 = b.append(1, vec![payload("b-1")]).await.expect("B appends");
    assert_eq!(b1.sequence, 3);
    assert_eq!(stats(&b).await.floor, 3);

    // The grace passes; B's reclaimer deletes 1 and 2.
    let s = stats_until_virtual(&b, "B's reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= 3
    })
    .await;
    assert_eq!((s.reclaimed_below, s.deleted), (3, 2));
    assert!(object_at(&inner, 1).await.is_none());
    assert!(object_at(&inner, 2).await.is_none());
    assert!(!stalled.is_finished(), "A's create is still held");

    // A's create took longer than max_create_duration, then lands on the free key.
    clock_a.advance(MAX_CREATE + Duration::from_secs(1));
    hold.release();
    let result = stalled.await.expect("A's append task");
    match &result {
        Err(Error::EpochEnded {
            epoch: 2,
            sequence: 2,
            reason: EpochEndReason::CreateTooSlow,
            durability: Durability::MayBeDurable,
        }) => {}
        other => panic!("A acknowledged or failed otherwise: {other:?}"),
    }
    let landed = decode_header(&object_at(&inner, 2).await.expect("A's object landed")).unwrap();
    assert_eq!(
        (landed.epoch, landed.link.sequence),
        (2, 1),
        "A's late object"
    );
    // A cannot restart (no restarts allowed): it ends with that error.
    bounded("A to end", a_join).await.expect("join A");
    assert!(matches!(
        a.terminal_error(),
        Some(Error::EpochEnded {
            reason: EpochEndReason::CreateTooSlow,
            ..
        })
    ));

    // B goes on in its epoch; a fresh instance replays B's entries, never A's.
    let b2 = b.append(1, vec![payload("b-2")]).await.expect("B appends");
    assert_eq!(stats(&b).await.epoch, 3);
    stop(b, b_join).await;
    let (fresh, fresh_join) = spawn(&store, &config).await;
    let mut want = Vec::new();
    for (receipt, p) in [(&b1, "b-1"), (&b2, "b-2")] {
        want.push((receipt.parts[0].first_id, payload(p)));
    }
    assert_eq!(ids(&read(&fresh, 1, 0).await), want);
    assert!(
        read(&fresh, 7, 0).await.is_empty(),
        "A's entry is never replayed"
    );
    assert_eq!(
        stats(&fresh).await.orphans,
        1,
        "A's late object is an orphan"
    );
    stop(fresh, fresh_join).await;
}

/// The case the two create bounds alone do not cover: instance A is idle (no create in
/// flight, so nothing to measure) while B takes over, writes, raises its floor and
/// reclaims A's next key. Without the link window A's next append would create that key
/// afresh, quickly, and nothing would collide; with it, A never acknowledges it, and
/// every acknowledged entry is replayed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn idle_earlier_instance_never_acknowledges_onto_a_reclaimed_key() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config();
    // A measures its link window on virtual time, the time B's reclaimer waits on.
    let (a, a_join) = spawn_wal_with(
        store.clone(),
        config.clone(),
        restart_policy(),
        TokioClock::new(),
        None,
    )
    .await
    .expect("spawn A");
    a.last_entry_id_overall().await.expect("A recovered");
    let (b, b_join) = spawn(&store, &config).await;
    let b1 = b.append(1, vec![payload("b-1")]).await.expect("B appends");
    assert_eq!((b1.sequence, stats(&b).await.floor), (3, 3));
    stats_until_virtual(&b, "B's reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= 3
    })
    .await;
    assert!(
        object_at(&store, 2).await.is_none(),
        "A's next key was reclaimed"
    );
    // A never appended since B opened. Idle past half its link window, it wrote an empty
    // object, met B's opening object and learned it is fenced; even without that, its
    // next create would be refused as too far from its last.
    let a1 = a.append(7, vec![payload("a-1")]).await;
    match &a1 {
        Err(Error::Fenced { .. }) => {}
        Err(e @ Error::EpochEnded { .. }) => {
            assert_eq!(e.durability(), Durability::NotWritten, "{e:?}")
        }
        other => panic!("A must not acknowledge onto a reclaimed key: {other:?}"),
    }
    stop(b, b_join).await;
    let (fresh, fresh_join) = spawn(&store, &config).await;
    let replayed = read(&fresh, 7, 0).await;
    stop(fresh, fresh_join).await;
    assert!(
        replayed.is_empty(),
        "nothing of A's refused append is replayed"
    );
    a.abort();
    let _ = a_join.await;
}

#[tokio::test]
async fn spawn_refuses_a_grace_below_twice_max_create_duration() {
    let mut c = config();
    c.max_create_duration = Duration::from_secs(30);
    c.reclaim_grace = Duration::from_secs(60) - Duration::from_millis(1);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    match spawn_wal(store.clone(), c.clone(), restart_policy()).await {
        Err(object_store_wal_actors::SpawnError::Invalid(Error::Config { field, reason })) => {
            assert_eq!(field, "reclaim_grace");
            assert!(reason.contains("max_create_duration"), "{reason}");
        }
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("a grace below 2 x max_create_duration was accepted"),
    }
    let (listed, _) = listing(&store).await;
    assert!(listed.is_empty(), "nothing written by a refused spawn");
    c.reclaim_grace = Duration::from_secs(60);
    let (wal, join) = spawn(&store, &c).await;
    stop(wal, join).await;
}

// ---------------------------------------------------------------------------------------
// Watermarks reported while the WAL recovers
// ---------------------------------------------------------------------------------------

/// An `obsolete` that arrives while the first recovery runs is answered `Ok`: it must
/// not be lost (reads hide the entries, the floor moves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obsolete_sent_during_recovery_is_not_lost() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let config = config_no_reclaim();
    let (first, join) = spawn(&store, &config).await;
    let mut entries = Vec::new();
    for i in 0..3 {
        let parts = vec![(1, vec![payload(format!("e{i}"))])];
        let receipt = first.append_many(parts.clone()).await.expect("append");
        entries.extend(acked_entries(&parts, &receipt));
    }
    stop(first, join).await;
    // Objects 1..=4 are present: the next opening object is 5. Hold it, so the second
    // WAL's recovery cannot finish yet.
    let hold = faults.hold_creates_of(&key(5));
    let (wal, join) = spawn_wal(store.clone(), config.clone(), restart_policy())
        .await
        .expect("spawn");
    hold.wait_arrived(1).await;
    let w = entries[1].id;
    let early_wal = wal.clone();
    let mut obsolete = Box::pin(async move { early_wal.obsolete(1, w).await });
    // The first poll sends the message; the stats call behind it is answered only after
    // the supervisor handled it.
    let early = futures::poll!(obsolete.as_mut());
    stats(&wal).await;
    assert_eq!(stats(&wal).await.epoch, 0, "still recovering");
    hold.release();
    match early {
        std::task::Poll::Ready(r) => r.expect("obsolete"),
        std::task::Poll::Pending => bounded("obsolete", obsolete).await.expect("obsolete"),
    }
    assert_eq!(
        ids(&read(&wal, 1, 0).await),
        ids(&entries[2..]),
        "entries at or below the watermark are hidden"
    );
    let r = wal.append(2, vec![payload("x")]).await.expect("append");
    assert_eq!(r.sequence, 6);
    assert_eq!(
        stats(&wal).await.floor,
        entry_sequence(entries[2].id),
        "the floor follows the watermark"
    );
    stop(wal, join).await;
}

// ---------------------------------------------------------------------------------------
// 4. A read-only open by a second process
// ---------------------------------------------------------------------------------------

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &std::path::Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read a directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).expect("read a file");
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

type Acked = Arc<Mutex<BTreeMap<u64, Vec<Entry>>>>;

/// One task per region appending `range` entries one at a time; all must succeed.
fn appenders(
    wal: &WalHandle,
    acked: &Acked,
    regions: &[u64],
    range: std::ops::Range<u32>,
) -> Vec<JoinHandle<()>> {
    regions
        .iter()
        .map(|&region| {
            let wal = wal.clone();
            let acked = acked.clone();
            let range = range.clone();
            tokio::spawn(async move {
                for i in range {
                    let parts = vec![(region, vec![payload(format!("r{region}-{i}"))])];
                    let receipt = wal.append_many(parts.clone()).await.expect("append");
                    acked
                        .lock()
                        .unwrap()
                        .entry(region)
                        .or_default()
                        .extend(acked_entries(&parts, &receipt));
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_open_sees_a_prefix_of_the_acknowledged_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let owner_store = local_store(&dir);
    // The second process: its own handle on the same directory.
    let reader_store = || -> Arc<dyn ObjectStore> {
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).expect("second handle"))
    };
    let config = config_no_reclaim();
    let (owner, join) = spawn(&owner_store, &config).await;
    let regions = [1u64, 2, 3];
    let acked: Acked = Arc::default();

    // Half of the appends, all acknowledged: a read-only open sees exactly them.
    for h in appenders(&owner, &acked, &regions, 0..15) {
        bounded("appenders", h).await.expect("appender");
    }
    let half = acked.lock().unwrap().clone();
    let ro = ObjectStoreLogStore::open_read_only(reader_store(), config.clone())
        .await
        .expect("read-only open");
    for r in regions {
        assert_eq!(ids(&read_only_region(&ro, r).await), ids(&half[&r]));
    }

    // The rest, while read-only opens run again and again.
    let writers = appenders(&owner, &acked, &regions, 15..40);
    let mut observations: Vec<BTreeMap<u64, Vec<Entry>>> = Vec::new();
    bounded("the writers, observed", async {
        loop {
            let done = writers.iter().all(|h| h.is_finished());
            let ro = ObjectStoreLogStore::open_read_only(reader_store(), config.clone())
                .await
                .expect("read-only open while the owner writes");
            let mut seen = BTreeMap::new();
            for r in regions {
                seen.insert(r, read_only_region(&ro, r).await);
            }
            observations.push(seen);
            if done {
                break;
            }
        }
    })
    .await;
    for h in writers {
        h.await.expect("appender");
    }
    let acked = acked.lock().unwrap().clone();
    for (n, seen) in observations.iter().enumerate() {
        for r in regions {
            let got = &seen[&r];
            assert!(
                got.len() <= acked[&r].len() && ids(got) == ids(&acked[&r][..got.len()]),
                "open {n}: region {r} is not a prefix of what was acknowledged: {:?}",
                ids(got)
            );
            assert!(
                got.len() >= half[&r].len(),
                "open {n} lost acknowledged entries"
            );
        }
    }
    let last = observations.last().expect("an observation");
    for r in regions {
        assert_eq!(
            ids(&last[&r]),
            ids(&acked[&r]),
            "the last open sees everything"
        );
    }

    // With the owner idle, a read-only open and its reads leave the directory as it was.
    let before = snapshot(dir.path());
    let counting = CountingStore::new(reader_store());
    let mut ro = ObjectStoreLogStore::open_read_only(counting.clone(), config.clone())
        .await
        .expect("read-only open");
    for r in regions {
        assert_eq!(ids(&read_only_region(&ro, r).await), ids(&acked[&r]));
    }
    assert!(matches!(
        ro.append(vec![(1, vec![payload("no")])]),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(ro.flush().await, Err(Error::ReadOnly)));
    assert!(matches!(ro.reopen().await, Err(Error::ReadOnly)));
    let after = snapshot(dir.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    assert!(before == after, "a read-only open changed bytes");
    assert_eq!(counting.counts().puts.load(Ordering::Relaxed), 0);
    assert_eq!(counting.counts().deletes.load(Ordering::Relaxed), 0);
    assert!(counting.counts().gets.load(Ordering::Relaxed) > 0);

    // The owner was never fenced.
    let s = stats(&owner).await;
    assert_eq!((s.epoch, s.restarts), (2, 0));
    owner
        .append(1, vec![payload("after")])
        .await
        .expect("the owner still writes");
    stop(owner, join).await;
}
