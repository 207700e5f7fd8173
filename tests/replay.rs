//! Replays of many regions (`read::replay_regions`): up to `replay_concurrency` objects
//! fetched at once, never more than `replay_budget_bytes` fetched and not yet handed to
//! the consumer, each chain object read with one GET, every acknowledged entry replayed
//! in order, an object larger than the budget still replayed, alone, and a damaged
//! segment failing only its region.
//!
//! A test hook, [`GateHooks`], sits in front of the store: it can hold every GET until
//! the test releases it, counts the GETs in flight, and at the start of each GET adds up
//! the bytes of the GETs started whose entries the consumer has not all received yet
//! (the consumer reports each object as soon as it has its last entry, before it asks
//! for more). Nothing waits on time: the test waits for GETs to arrive at the hook (with
//! a time limit that only turns a hang into a failure).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, ObjectStore};
use object_store_wal::format;
use object_store_wal::internal::read::{replay_regions, ReplayLimits};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::testing::{CountingStore, FaultStore, Hooks, Wrapper};
use object_store_wal::{Config, CorruptSegmentPolicy, Entry, HedgeAfter, ObjectStoreLogStore};
use tokio::sync::{watch, Semaphore};

const PREFIX: &str = "wal";

/// How long a test waits for GETs it expects before failing instead of hanging.
const HANG: std::time::Duration = std::time::Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

/// What the gate saw of the GETs since it was armed.
#[derive(Debug, Default)]
struct GateLog {
    /// Bytes asked for by the GETs started, by key (summed, should a key be read twice).
    started: HashMap<String, u64>,
    /// Keys whose entries the consumer has all received.
    consumed: Vec<String>,
    /// Bytes of GETs started whose entries have not all been received.
    outstanding: u64,
    /// For each GET, in order of start: its key, its bytes, and what was outstanding
    /// before it started.
    starts: Vec<(String, u64, u64)>,
    in_flight: usize,
    max_in_flight: usize,
}

/// A hook that holds GETs (while `hold` is set) until released, and keeps a [`GateLog`].
/// Only GETs after [`arm`](GateHooks::arm) are held and logged (recovery's are not).
#[derive(Debug)]
struct GateHooks {
    armed: AtomicBool,
    hold: AtomicBool,
    log: Mutex<GateLog>,
    permits: Semaphore,
    arrived: watch::Sender<usize>,
}

type Gate = Wrapper<GateHooks>;

fn gate(inner: Arc<dyn ObjectStore>) -> Arc<Gate> {
    Wrapper::wrap(
        inner,
        GateHooks {
            armed: AtomicBool::new(false),
            hold: AtomicBool::new(false),
            log: Mutex::new(GateLog::default()),
            permits: Semaphore::new(0),
            arrived: watch::Sender::new(0),
        },
    )
}

impl GateHooks {
    fn log(&self) -> std::sync::MutexGuard<'_, GateLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs (and, with `hold`, holds) every GET from now on.
    fn arm(&self, hold: bool) {
        self.hold.store(hold, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Lets `n` held GETs go on.
    fn release(&self, n: usize) {
        self.permits.add_permits(n);
    }

    /// Lets every held GET go on, and every later one pass at once.
    fn release_all(&self) {
        self.hold.store(false, Ordering::SeqCst);
        self.permits.add_permits(1 << 20);
    }

    /// Waits until `n` GETs have reached the gate since it was armed. The time limit
    /// only turns a replay that never starts them (a broken one) into a failure instead
    /// of a hang; nothing waits on it otherwise.
    async fn wait_arrived(&self, n: usize) {
        let mut rx = self.arrived.subscribe();
        let arrived = tokio::time::timeout(HANG, rx.wait_for(|a| *a >= n)).await;
        if arrived.is_err() {
            panic!(
                "{n} GETs never reached the gate: {} did; {:?}",
                *self.arrived.borrow(),
                self.log().starts
            );
        }
    }

    /// The consumer has every entry of the object at `key`.
    fn consumed(&self, key: &str) {
        let mut log = self.log();
        let bytes = log.started.get(key).copied().unwrap_or(0);
        log.outstanding -= bytes;
        log.consumed.push(key.to_string());
    }
}

/// Counts a GET out of flight when its answer is returned, or its future dropped.
struct InFlight<'a>(&'a GateHooks);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.log().in_flight -= 1;
    }
}

#[async_trait]
impl Hooks for GateHooks {
    const NAME: &'static str = "GateStore";

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if !self.armed.load(Ordering::SeqCst) {
            return inner.get_opts(location, options).await;
        }
        let bytes = match &options.range {
            Some(GetRange::Bounded(r)) => r.end - r.start,
            other => panic!("a replay GET of {location} is not a bounded range: {other:?}"),
        };
        let key = location.to_string();
        {
            let mut log = self.log();
            let before = log.outstanding;
            log.outstanding += bytes;
            *log.started.entry(key.clone()).or_default() += bytes;
            log.starts.push((key, bytes, before));
            log.in_flight += 1;
            log.max_in_flight = log.max_in_flight.max(log.in_flight);
        }
        let _in_flight = InFlight(self);
        self.arrived.send_modify(|a| *a += 1);
        if self.hold.load(Ordering::SeqCst) {
            let permit = self
                .permits
                .acquire()
                .await
                .expect("the semaphore is never closed");
            permit.forget();
        }
        inner.get_opts(location, options).await
    }
}

/// One acknowledged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acked {
    sequence: u64,
    region: u64,
    id: u64,
    payload: Bytes,
}

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.min_object_interval = std::time::Duration::ZERO;
    // One GET per object is what is counted: no hedged twin.
    config.hedge_after = HedgeAfter::Off;
    config
}

fn payload(region: u64, object: usize, n: usize, size: usize) -> Bytes {
    let mut p = format!("r{region}-o{object}-e{n}-").into_bytes();
    p.resize(size.max(p.len()), b'.');
    Bytes::from(p)
}

/// Writes one object per element of `objects`, each `(region, entry sizes)` part in
/// it; returns the open WAL and every acknowledged entry in order.
async fn write_log(
    store: Arc<dyn ObjectStore>,
    objects: &[Vec<(u64, Vec<usize>)>],
) -> (ObjectStoreLogStore, Vec<Acked>) {
    let mut wal = ObjectStoreLogStore::open(store, config())
        .await
        .expect("open");
    let mut acked = Vec::new();
    for (o, parts) in objects.iter().enumerate() {
        let parts: Vec<(u64, Vec<Bytes>)> = parts
            .iter()
            .map(|(region, sizes)| {
                let payloads = sizes
                    .iter()
                    .enumerate()
                    .map(|(n, &size)| payload(*region, o, n, size))
                    .collect();
                (*region, payloads)
            })
            .collect();
        let receipt = wal.append_and_flush(parts.clone()).await.expect("append");
        for ((region, payloads), ids) in parts.into_iter().zip(&receipt.parts) {
            assert_eq!(ids.region, region);
            for (payload, id) in payloads.into_iter().zip(ids.ids()) {
                acked.push(Acked {
                    sequence: receipt.sequence,
                    region,
                    id,
                    payload,
                });
            }
        }
    }
    (wal, acked)
}

/// What a replay from `from` must yield: the acknowledged entries of the regions in
/// `from` with id at or above theirs.
fn wanted(acked: &[Acked], from: &HashMap<u64, u64>) -> Vec<Acked> {
    acked
        .iter()
        .filter(|a| from.get(&a.region).is_some_and(|f| a.id >= *f))
        .cloned()
        .collect()
}

fn key(sequence: u64) -> String {
    object_key(&Path::from(PREFIX), sequence).to_string()
}

/// Replays `from` over `wal`'s catalog with `limits`, reporting each object to `gate`
/// as soon as its last wanted entry is received (before asking for the next one).
async fn replay(
    wal: &ObjectStoreLogStore,
    from: HashMap<u64, u64>,
    limits: ReplayLimits,
    expected: &[Acked],
    gate: Arc<Gate>,
) -> Vec<Entry> {
    let stream = replay_regions(
        wal.io().clone(),
        wal.catalog(),
        from,
        limits,
        CorruptSegmentPolicy::Fail,
    );
    consume(stream, expected.to_vec(), gate).await
}

async fn consume(
    mut stream: BoxStream<'static, object_store_wal::Result<Entry>>,
    expected: Vec<Acked>,
    gate: Arc<Gate>,
) -> Vec<Entry> {
    let mut remaining: BTreeMap<u64, usize> = BTreeMap::new();
    for a in &expected {
        *remaining.entry(a.sequence).or_default() += 1;
    }
    let mut got = Vec::new();
    while let Some(item) = stream.next().await {
        let entry = item.expect("replay");
        let sequence = format::entry_sequence(entry.id);
        let left = remaining
            .get_mut(&sequence)
            .unwrap_or_else(|| panic!("entry {} of an object with nothing wanted", entry.id));
        *left = left
            .checked_sub(1)
            .unwrap_or_else(|| panic!("too many entries of object {sequence}"));
        if *left == 0 {
            gate.hooks().consumed(&key(sequence));
        }
        got.push(entry);
    }
    got
}

/// Asserts that `got` is exactly `expected`: objects in sequence order, each region's
/// entries in id order with their ids and payloads.
fn assert_replayed(got: &[Entry], expected: &[Acked]) {
    assert_eq!(got.len(), expected.len(), "entries replayed");
    let sequences: Vec<u64> = got.iter().map(|e| format::entry_sequence(e.id)).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] <= w[1]),
        "objects out of sequence order: {sequences:?}"
    );
    let by_region = |entries: Vec<(u64, u64, Bytes)>| {
        let mut m: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
        for (region, id, payload) in entries {
            m.entry(region).or_default().push((id, payload));
        }
        m
    };
    let got = by_region(
        got.iter()
            .map(|e| (e.region, e.id, e.payload.clone()))
            .collect(),
    );
    let want = by_region(
        expected
            .iter()
            .map(|a| (a.region, a.id, a.payload.clone()))
            .collect(),
    );
    assert_eq!(got, want, "each region's entries, in order, with their ids");
}

/// The span a replay of every region of the object reads: all its segments (FORMAT.md:
/// header 56, segments, footer 8 + 48 per segment, trailer 32).
fn full_spans(wal: &ObjectStoreLogStore) -> Vec<(u64, u64)> {
    let catalog = wal.catalog();
    let catalog = catalog.read().unwrap_or_else(|p| p.into_inner());
    catalog
        .objects()
        .filter(|(_, o)| o.segments > 0)
        .map(|(s, o)| {
            let overhead = format::EMPTY_OBJECT_LEN as u64
                + format::FOOTER_RECORD_LEN as u64 * u64::from(o.segments);
            (s, o.length - overhead)
        })
        .collect()
}

/// Objects of different sizes and regions: object `o` holds 1 to 4 regions, each with 1
/// to 3 entries of 1 to 9 KiB.
fn varied_objects(count: usize) -> Vec<Vec<(u64, Vec<usize>)>> {
    (0..count)
        .map(|o| {
            let regions = 1 + (o * 7) % 4;
            (0..regions)
                .map(|r| {
                    let region = ((o + r * 3) % 6) as u64 + 1;
                    let entries = 1 + (o + r) % 3;
                    let sizes = (0..entries)
                        .map(|n| 1024 * (1 + (o * 5 + r * 3 + n) % 9))
                        .collect();
                    (region, sizes)
                })
                .collect()
        })
        .collect()
}

/// Runs the replay in a task while this one lets held GETs through one at a time, each
/// as soon as it has arrived, until the replay ends.
async fn replay_releasing_one_by_one(
    wal: ObjectStoreLogStore,
    from: HashMap<u64, u64>,
    limits: ReplayLimits,
    expected: Vec<Acked>,
    gate: Arc<Gate>,
    first_wave: usize,
    check_first_wave: impl FnOnce(&GateLog),
) -> Vec<Entry> {
    let consumer = {
        let gate = gate.clone();
        tokio::spawn(async move { replay(&wal, from, limits, &expected, gate).await })
    };
    gate.hooks().wait_arrived(first_wave).await;
    check_first_wave(&gate.hooks().log());
    let mut consumer = consumer;
    let mut released = 0;
    loop {
        tokio::select! {
            done = &mut consumer => break done.expect("the replay task"),
            _ = gate.hooks().wait_arrived(released + 1) => {
                gate.hooks().release(1);
                released += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// (a) The budget
// ---------------------------------------------------------------------------------------

/// With every GET held until released, the bytes of GETs started and not yet consumed
/// never exceed `replay_budget_bytes`: the first wave is exactly the objects that fit,
/// while the rest wait, and each later GET starts only once enough was consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_holds_more_than_its_budget() {
    let gate = gate(Arc::new(InMemory::new()));
    let (wal, acked) = write_log(gate.clone(), &varied_objects(16)).await;
    let spans = full_spans(&wal);
    assert_eq!(spans.len(), 16);
    let mut config = config();
    config.replay_budget_bytes = 100 * 1024;
    let limits = ReplayLimits::of(&config);
    assert!(
        spans.iter().all(|(_, b)| *b <= limits.budget_bytes),
        "every object fits the budget alone: {spans:?}"
    );
    // The objects that fit the budget together, from the first.
    let mut first_wave = 0;
    let mut sum = 0;
    for (_, bytes) in &spans {
        if sum + bytes > limits.budget_bytes {
            break;
        }
        sum += bytes;
        first_wave += 1;
    }
    assert!(
        first_wave >= 2 && first_wave < spans.len() && first_wave < limits.concurrency,
        "the budget, not the concurrency, bounds the first wave: {first_wave} of {spans:?}"
    );
    let next = spans[first_wave].1;

    let from: HashMap<u64, u64> = (1..=6).map(|r| (r, 0)).collect();
    let expected = wanted(&acked, &from);
    gate.hooks().arm(true);
    let got = replay_releasing_one_by_one(
        wal,
        from,
        limits,
        expected.clone(),
        gate.clone(),
        first_wave,
        |log| {
            assert_eq!(
                log.starts.len(),
                first_wave,
                "GETs started: {:?}",
                log.starts
            );
            assert_eq!(log.in_flight, first_wave);
            assert_eq!(log.outstanding, sum);
            assert!(
                log.outstanding + next > limits.budget_bytes,
                "the next object ({next} bytes) waits because it would not fit"
            );
        },
    )
    .await;

    assert_replayed(&got, &expected);
    let log = gate.hooks().log();
    assert_eq!(log.starts.len(), spans.len(), "one GET per object");
    for (key, bytes, before) in &log.starts {
        assert!(
            before + bytes <= limits.budget_bytes,
            "GET of {key} ({bytes} bytes) started with {before} bytes outstanding, budget {}: {:?}",
            limits.budget_bytes,
            log.starts
        );
    }
    assert!(
        log.max_in_flight >= 2,
        "the budget allowed GETs at once: {}",
        log.max_in_flight
    );
    assert_eq!(log.outstanding, 0);
}

// ---------------------------------------------------------------------------------------
// (b) The concurrency
// ---------------------------------------------------------------------------------------

/// With a budget that allows it, exactly `replay_concurrency` GETs are in flight at once
/// (all held), and never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_up_to_replay_concurrency_gets_in_flight() {
    let gate = gate(Arc::new(InMemory::new()));
    let config = config();
    let limits = ReplayLimits::of(&config);
    assert_eq!(limits.concurrency, 32, "the default");
    let objects: Vec<Vec<(u64, Vec<usize>)>> = (0..2 * limits.concurrency + 5)
        .map(|o| vec![(o as u64 % 5 + 1, vec![100 + o])])
        .collect();
    let (wal, acked) = write_log(gate.clone(), &objects).await;
    let from: HashMap<u64, u64> = (1..=5).map(|r| (r, 0)).collect();
    let expected = wanted(&acked, &from);

    gate.hooks().arm(true);
    let consumer = {
        let gate = gate.clone();
        let expected = expected.clone();
        tokio::spawn(async move { replay(&wal, from, limits, &expected, gate).await })
    };
    gate.hooks().wait_arrived(limits.concurrency).await;
    {
        let log = gate.hooks().log();
        assert_eq!(log.in_flight, limits.concurrency, "GETs held at the gate");
        assert_eq!(log.starts.len(), limits.concurrency);
    }
    gate.hooks().release_all();
    let got = consumer.await.expect("the replay task");

    assert_replayed(&got, &expected);
    let log = gate.hooks().log();
    assert_eq!(log.starts.len(), objects.len(), "one GET per object");
    assert_eq!(
        log.max_in_flight, limits.concurrency,
        "GETs in flight at once reach replay_concurrency and never exceed it"
    );
}

// ---------------------------------------------------------------------------------------
// (c) One GET per object, every acknowledged entry in order
// ---------------------------------------------------------------------------------------

/// Objects of different sizes and regions, some regions replayed from a later id and one
/// left out: one bounded GET per object holding a wanted entry (none of the others),
/// and exactly the wanted acknowledged entries, in order. Under a tight budget and under
/// the defaults, on memory and on a local directory.
async fn one_get_per_object_every_entry_in_order(store: Arc<dyn ObjectStore>) {
    let counting = CountingStore::new(store);
    let gate = gate(counting.clone());
    let mut objects = varied_objects(24);
    // An object that holds only region 9, which is not replayed.
    objects.insert(10, vec![(9, vec![5000, 7000])]);
    let (wal, acked) = write_log(gate.clone(), &objects).await;
    // Region 2 from its 4th entry, region 5 from just above its middle entry (an id no
    // entry has), the others from 0; region 9 not at all.
    let ids_of = |region: u64| -> Vec<u64> {
        acked
            .iter()
            .filter(|a| a.region == region)
            .map(|a| a.id)
            .collect()
    };
    let mut from: HashMap<u64, u64> = [1, 3, 4, 6].into_iter().map(|r| (r, 0)).collect();
    from.insert(2, ids_of(2)[3]);
    let five = ids_of(5);
    from.insert(5, five[five.len() / 2] + 1);
    let expected = wanted(&acked, &from);
    let with_wanted: std::collections::BTreeSet<u64> =
        expected.iter().map(|a| a.sequence).collect();
    let all: std::collections::BTreeSet<u64> = acked.iter().map(|a| a.sequence).collect();
    assert!(
        with_wanted.len() < all.len(),
        "some objects hold nothing wanted"
    );

    let mut tight = config();
    tight.replay_budget_bytes = 24 * 1024;
    tight.replay_concurrency = 3;
    for limits in [ReplayLimits::of(&tight), ReplayLimits::of(&config())] {
        counting.reset();
        let got = replay(&wal, from.clone(), limits, &expected, gate.clone()).await;
        assert_replayed(&got, &expected);
        let log = counting.get_log();
        let keys: Vec<String> = log.iter().map(|g| g.key.clone()).collect();
        let want: Vec<String> = with_wanted.iter().map(|s| key(*s)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(
            sorted, want,
            "one GET per object holding a wanted entry ({limits:?})"
        );
        for g in &log {
            let range = g.range.clone().expect("a ranged read");
            assert!(range.start < range.end, "{g:?}");
        }
    }
}

#[tokio::test]
async fn c_one_get_per_object_every_entry_in_order_memory() {
    one_get_per_object_every_entry_in_order(Arc::new(InMemory::new())).await;
}

#[tokio::test]
async fn c_one_get_per_object_every_entry_in_order_local() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = LocalFileSystem::new_with_prefix(dir.path())
        .expect("local store")
        .with_fsync(true);
    one_get_per_object_every_entry_in_order(Arc::new(store)).await;
}

// ---------------------------------------------------------------------------------------
// (d) An object larger than the budget
// ---------------------------------------------------------------------------------------

/// An object larger than the budget is replayed, with one GET, started when nothing else
/// was outstanding; the others, the ones after it too, start only while it is not
/// outstanding and keep to the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_an_object_larger_than_the_budget_is_replayed_alone() {
    let gate = gate(Arc::new(InMemory::new()));
    let small = |region: u64| vec![(region, vec![3000, 2000]), (region + 1, vec![4000])];
    let objects = vec![
        small(1),
        small(2),
        small(1),
        vec![
            (1, vec![60_000, 60_000]),
            (2, vec![50_000]),
            (3, vec![20_000]),
        ],
        small(2),
        small(1),
    ];
    let (wal, acked) = write_log(gate.clone(), &objects).await;
    let spans = full_spans(&wal);
    let mut config = config();
    config.replay_budget_bytes = 32 * 1024;
    let limits = ReplayLimits::of(&config);
    let big: Vec<u64> = spans
        .iter()
        .filter(|(_, b)| *b > limits.budget_bytes)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(big.len(), 1, "one object above the budget: {spans:?}");
    let big = big[0];
    assert!(
        spans
            .iter()
            .filter(|(s, _)| *s < big)
            .map(|(_, b)| b)
            .sum::<u64>()
            <= limits.budget_bytes,
        "the objects before it fit the budget together, so it waits for them"
    );

    let from: HashMap<u64, u64> = (1..=4).map(|r| (r, 0)).collect();
    let expected = wanted(&acked, &from);
    gate.hooks().arm(false);
    let got = replay(&wal, from, limits, &expected, gate.clone()).await;

    assert_replayed(&got, &expected);
    let log = gate.hooks().log();
    assert_eq!(
        log.starts.len(),
        spans.len(),
        "one GET per object: {:?}",
        log.starts
    );
    for (key, bytes, before) in &log.starts {
        if *key == self::key(big) {
            assert!(*bytes > limits.budget_bytes);
            assert_eq!(*before, 0, "the big object started alone: {:?}", log.starts);
        } else {
            // The big object's bytes alone exceed the budget: none of these started
            // while it was outstanding, before or after it.
            assert!(
                before + bytes <= limits.budget_bytes,
                "GET of {key} started with {before} bytes outstanding: {:?}",
                log.starts
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// (e) A damaged segment, under each policy
// ---------------------------------------------------------------------------------------

/// A segment that fails verification twice fails only its region: the replay yields its
/// `CorruptSegment` (naming key and region) in the segment's place, and every entry of
/// the other regions, the damaged object's included. Under `Fail` nothing more of that
/// region comes; under `Skip` it goes on after the hole.
#[tokio::test]
async fn e_a_damaged_segment_ends_its_region_or_is_skipped_by_policy() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let objects: Vec<Vec<(u64, Vec<usize>)>> = (0..6)
        .map(|o| vec![(1, vec![500 + o]), (2, vec![700, 300 + o])])
        .collect();
    let (wal, acked) = write_log(faults.clone(), &objects).await;
    let from: HashMap<u64, u64> = [(1, 0), (2, 0)].into_iter().collect();
    let expected = wanted(&acked, &from);
    let sequences: Vec<u64> = full_spans(&wal).iter().map(|(s, _)| *s).collect();
    let damaged = sequences[2];
    for policy in [CorruptSegmentPolicy::Fail, CorruptSegmentPolicy::Skip] {
        // The GET and the one read again both see a flipped bit, in the middle of the
        // span (regions 1 and 2): inside region 2's segment.
        faults.flip_next_gets_of(&Path::from(key(damaged)), 2);
        let mut stream = replay_regions(
            wal.io().clone(),
            wal.catalog(),
            from.clone(),
            ReplayLimits::of(&config()),
            policy,
        );
        let mut items = Vec::new();
        while let Some(item) = stream.next().await {
            items.push(item);
        }
        let errors: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, i)| i.is_err())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(errors.len(), 1, "{policy:?}: one error: {items:?}");
        let error = errors[0];
        match &items[error] {
            Err(object_store_wal::Error::CorruptSegment { key: k, region, .. }) => {
                assert_eq!((k.as_str(), *region), (key(damaged).as_str(), 2));
            }
            other => panic!("{policy:?}: {other:?}"),
        }
        let entries: Vec<Entry> = items.into_iter().filter_map(|i| i.ok()).collect();
        let before = expected
            .iter()
            .filter(|a| a.sequence < damaged || (a.sequence == damaged && a.region < 2))
            .count();
        assert_eq!(
            error, before,
            "{policy:?}: the error comes in the segment's place"
        );
        let want: Vec<Acked> = expected
            .iter()
            .filter(|a| match policy {
                CorruptSegmentPolicy::Fail => a.region != 2 || a.sequence < damaged,
                _ => a.region != 2 || a.sequence != damaged,
            })
            .cloned()
            .collect();
        assert_replayed(&entries, &want);
    }
    assert_eq!(
        wal.io()
            .request_stats()
            .damaged_segments
            .load(Ordering::Relaxed),
        2,
        "each replay's finding counts"
    );
}

/// The sequential front end's replay: every entry of the regions asked, each object
/// fetched once, a region's entries in order, ids at or below a region's obsolete
/// watermark hidden (as a read hides them).
#[tokio::test]
async fn the_sequential_front_end_replays_many_regions_in_one_pass() {
    let counting = CountingStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = counting.clone();
    let mut wal = ObjectStoreLogStore::open(store, config())
        .await
        .expect("open");
    let mut ids: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for object in 0..3usize {
        let parts = (1..=2u64)
            .map(|r| (r, vec![payload(r, object, 0, 16)]))
            .collect();
        let receipt = wal.append_and_flush(parts).await.expect("append");
        for part in &receipt.parts {
            ids.entry(part.region).or_default().extend(part.ids());
        }
    }
    // Region 1's first entry is safe elsewhere.
    wal.obsolete(1, ids[&1][0]).expect("obsolete");
    let gets_before = counting.counts().gets.load(Ordering::Relaxed);
    let replayed: Vec<Entry> = wal
        .replay([(1, 0), (2, 0)])
        .map(|e| e.expect("an entry"))
        .collect()
        .await;
    let mut got: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in &replayed {
        got.entry(e.region).or_default().push(e.id);
    }
    assert_eq!(
        got[&1],
        ids[&1][1..].to_vec(),
        "region 1 above its watermark"
    );
    assert_eq!(got[&2], ids[&2]);
    let gets = counting.counts().gets.load(Ordering::Relaxed) - gets_before;
    assert_eq!(gets, 3, "one GET per object, not per region");
}
