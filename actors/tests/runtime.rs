//! Integration tests of the actor runtime: many regions appending at once, acknowledgement
//! order under out-of-order uploads, a writer that panics, two nodes on one prefix
//! (fencing), create outcomes that stay unknown (the epoch ends, the late object is
//! replayed whole or never), backpressure, a reader that fails, and a graceful stop with
//! uploads in flight.
//!
//! Every test checks what a fresh instance replays against a [`Ledger`] of what the
//! callers were told: acknowledged entries exactly once, in order, with their ids; failed
//! appends whole or not at all, and never when refused before any create.
//!
//! Nothing here sleeps to synchronize: tests wait for events (a create reaching a
//! [`CreateHold`], an object appearing, a reply) or poll the WAL's stats in a loop that
//! yields, always under a generous [`bounded`] timeout that only catches a hang.

#[allow(dead_code)]
mod support {
    pub mod ledger;
}
use support::ledger::Ledger;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::format::{decode_header, Header};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::write::batch::object_len;
use object_store_wal::testing::{CreateFault, CreateHold, FaultStore};
use object_store_wal::{
    AppendParts, AppendReceipt, BackpressureLimit, Config, Durability, Entry, EpochEndReason,
    Error, RetryPolicy,
};
use object_store_wal_actors::{spawn_wal, EntryReceiver, RestartPolicy, WalHandle, WalStats};
use tokio::task::{JoinHandle, JoinSet};

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

const PREFIX: &str = "wal";

/// A safety bound on every wait: only a hang reaches it.
const BOUND: Duration = Duration::from_secs(30);

/// Size of a "big" entry: one of them fills an object under [`one_per_object`].
const BIG: usize = 64;

fn memory_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

fn local_store(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    Arc::new(
        LocalFileSystem::new_with_prefix(dir.path())
            .expect("local store")
            .with_fsync(true),
    )
}

fn key(sequence: u64) -> Path {
    object_key(&Path::from(PREFIX), sequence)
}

/// Defaults with tiny create-retry backoffs.
fn config() -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.retry = RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(2));
    c
}

/// An object holds exactly one [`big`] entry: appending one fills the batch, which is
/// sealed at once, so each big append gets its own sequence, deterministically.
fn one_per_object(mut c: Config) -> Config {
    c.max_entry_bytes = BIG as u64;
    c.max_batch_bytes = object_len(4 + BIG as u64, 1);
    c
}

/// A payload of exactly [`BIG`] bytes that starts with `tag`.
fn big(tag: &str) -> Bytes {
    let mut v = tag.as_bytes().to_vec();
    assert!(v.len() <= BIG, "tag too long");
    v.resize(BIG, b'.');
    Bytes::from(v)
}

fn small(tag: &str) -> Bytes {
    Bytes::from(tag.to_string())
}

/// Fast restarts, plenty of them.
fn restart_policy() -> RestartPolicy {
    RestartPolicy::new(
        8,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(10),
    )
}

async fn spawn(store: &Arc<dyn ObjectStore>, config: &Config) -> (WalHandle, JoinHandle<()>) {
    spawn_wal(store.clone(), config.clone(), restart_policy())
        .await
        .expect("spawn the WAL")
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

async fn stats(wal: &WalHandle) -> WalStats {
    wal.stats().await.expect("stats")
}

/// Polls the stats (yielding between samples) until `done` holds; every sample is first
/// checked with `invariant`.
async fn stats_until(
    wal: &WalHandle,
    what: &str,
    invariant: impl Fn(&WalStats),
    done: impl Fn(&WalStats) -> bool,
) -> WalStats {
    bounded(what, async {
        loop {
            let s = stats(wal).await;
            invariant(&s);
            if done(&s) {
                return s;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// Polls until `cond` holds, yielding between checks.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    bounded(what, async {
        while !cond() {
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// The bytes at `sequence`, if present. Read on the store given (pass a `FaultStore`'s
/// inner store, so that the read is not counted toward late creates).
async fn object_at(store: &Arc<dyn ObjectStore>, sequence: u64) -> Option<Bytes> {
    match store.get(&key(sequence)).await {
        Ok(r) => Some(r.bytes().await.expect("read an object")),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("cannot read {}: {e}", key(sequence)),
    }
}

async fn until_present(store: &Arc<dyn ObjectStore>, sequence: u64) {
    bounded(&format!("object {sequence} to land"), async {
        while object_at(store, sequence).await.is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await
}

async fn header_at(store: &Arc<dyn ObjectStore>, sequence: u64) -> Header {
    let bytes = object_at(store, sequence)
        .await
        .unwrap_or_else(|| panic!("object {sequence} is missing"));
    decode_header(&bytes).expect("a valid header")
}

/// Every object's header, by sequence.
async fn headers(store: &Arc<dyn ObjectStore>) -> BTreeMap<u64, Header> {
    let mut out = BTreeMap::new();
    let mut sequence = 1;
    // Sequences of these tests are dense from 1 (claims fill every hole).
    while let Some(bytes) = object_at(store, sequence).await {
        out.insert(sequence, decode_header(&bytes).expect("a valid header"));
        sequence += 1;
    }
    out
}

async fn collect(rx: EntryReceiver) -> Vec<Entry> {
    bounded("an entry stream to end", async {
        let mut entries = Vec::new();
        while let Ok(item) = rx.recv_async().await {
            entries.push(item.expect("a replayed entry"));
        }
        entries
    })
    .await
}

/// Spawns a fresh WAL on the prefix (it fences whatever ran there before), replays
/// `regions` from their start, and stops it.
async fn replay_fresh(
    store: &Arc<dyn ObjectStore>,
    config: &Config,
    regions: impl IntoIterator<Item = u64>,
) -> Vec<Entry> {
    let (wal, join) = spawn(store, config).await;
    let rx = wal
        .replay(regions.into_iter().map(|r| (r, 0)).collect())
        .await
        .expect("replay");
    let entries = collect(rx).await;
    wal.stop().await.expect("stop");
    bounded("the replaying WAL to end", join)
        .await
        .expect("join the supervisor");
    entries
}

/// An append sent and not yet answered. The first poll sends the message; later polls
/// only look at the reply, so a test can tell "answered" from "not answered" exactly.
struct Sent<'a> {
    parts: AppendParts,
    fut: Pin<Box<dyn Future<Output = Result<AppendReceipt, Error>> + Send + 'a>>,
    done: Option<Result<AppendReceipt, Error>>,
}

impl<'a> Sent<'a> {
    async fn new(wal: &'a WalHandle, parts: AppendParts) -> Sent<'a> {
        let mut sent = Sent {
            fut: Box::pin(wal.append_many(parts.clone())),
            parts,
            done: None,
        };
        sent.answered().await;
        sent
    }

    /// Whether the reply has come (polls once).
    async fn answered(&mut self) -> bool {
        if self.done.is_none() {
            if let Poll::Ready(r) = futures::poll!(self.fut.as_mut()) {
                self.done = Some(r);
            }
        }
        self.done.is_some()
    }

    /// Waits for the reply.
    async fn reply(mut self) -> (AppendParts, Result<AppendReceipt, Error>) {
        let result = match self.done.take() {
            Some(r) => r,
            None => bounded("an append's reply", self.fut).await,
        };
        (self.parts, result)
    }
}

fn one(region: u64, payload: Bytes) -> AppendParts {
    vec![(region, vec![payload])]
}

/// Runs each named scenario on both stores: `<name>::memory` and `<name>::local`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name(super::memory_store()).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn local() {
                    let dir = tempfile::tempdir().expect("temporary directory");
                    super::$name(super::local_store(&dir)).await
                }
            }
        )*
    };
}

on_both_stores!(
    thousand_regions_append_concurrently,
    second_node_fences_the_first,
    fencing_under_concurrent_appends,
);

// ---------------------------------------------------------------------------------------
// 1. Many regions at once
// ---------------------------------------------------------------------------------------

const REGIONS: u64 = 1000;
const APPENDS_PER_REGION: u64 = 3;

/// 1,000 region tasks append concurrently through clones of one handle; after a stop
/// and a fresh spawn on the prefix, every acknowledged entry is replayed exactly once,
/// in order, with its id and payload, and nothing else is.
async fn thousand_regions_append_concurrently(store: Arc<dyn ObjectStore>) {
    let config = config();
    let (wal, join) = spawn(&store, &config).await;
    let mut tasks = JoinSet::new();
    for region in 0..REGIONS {
        let wal = wal.clone();
        tasks.spawn(async move {
            let mut acked = Vec::new();
            for a in 0..APPENDS_PER_REGION {
                // One or two entries per append.
                let entries: Vec<Bytes> = (0..=a % 2)
                    .map(|e| small(&format!("r{region}/a{a}/e{e}")))
                    .collect();
                let receipt = wal
                    .append(region, entries.clone())
                    .await
                    .unwrap_or_else(|e| panic!("append of region {region} failed: {e}"));
                assert_eq!(receipt.parts.len(), 1);
                let ids = receipt.parts[0];
                assert_eq!(ids.region, region);
                assert_eq!(ids.count as usize, entries.len());
                for (i, payload) in entries.into_iter().enumerate() {
                    acked.push((ids.first_id + i as u64, payload));
                }
            }
            (region, acked)
        });
    }
    let mut expected: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
    let mut entries = 0u64;
    while let Some(done) = bounded("the region tasks", tasks.join_next()).await {
        let (region, acked) = done.expect("a region task panicked");
        assert!(
            acked.windows(2).all(|w| w[0].0 < w[1].0),
            "region {region}: ids do not increase in append order: {acked:?}"
        );
        entries += acked.len() as u64;
        expected.insert(region, acked);
    }
    assert_eq!(expected.len() as u64, REGIONS);
    let s = stats(&wal).await;
    assert_eq!(s.appends, REGIONS * APPENDS_PER_REGION);
    assert_eq!(s.entries, entries);
    assert_eq!(s.failed_appends, 0);
    assert_eq!(s.pending_bytes, 0);
    assert!(s.objects >= 1);
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");

    let (fresh, fresh_join) = spawn(&store, &config).await;
    let rx = fresh
        .replay((0..REGIONS).map(|r| (r, 0)).collect())
        .await
        .expect("replay");
    let replayed = collect(rx).await;
    let mut got: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
    for e in replayed {
        got.entry(e.region).or_default().push((e.id, e.payload));
    }
    assert_eq!(got, expected, "replay differs from what was acknowledged");
    // A few regions through their reader actors too, from the start and from the middle.
    for region in [0, 1, 499, 998, 999] {
        let want = &expected[&region];
        let all = collect(fresh.read(region, 0).await.expect("read")).await;
        let all: Vec<(u64, Bytes)> = all.into_iter().map(|e| (e.id, e.payload)).collect();
        assert_eq!(&all, want);
        let from = want[1].0;
        let tail = collect(fresh.read(region, from).await.expect("read")).await;
        let tail: Vec<(u64, Bytes)> = tail.into_iter().map(|e| (e.id, e.payload)).collect();
        assert_eq!(&tail[..], &want[1..]);
    }
    fresh.stop().await.expect("stop");
    bounded("the fresh WAL to end", fresh_join)
        .await
        .expect("join");
}

// ---------------------------------------------------------------------------------------
// 2. Acknowledgements in sequence order
// ---------------------------------------------------------------------------------------

/// While the create of sequence 2 is held, the objects at 3 and 4 land, but none of the
/// three appends is acknowledged; once released, all three are, in sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_stay_in_order_when_uploads_complete_out_of_order() {
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let inner = faults.inner().clone();
    let mut config = one_per_object(config());
    config.max_in_flight = 4;
    // An empty prefix: the opening object is sequence 1, the first data object 2.
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;

    let mut sent = vec![Sent::new(&wal, one(1, big("a"))).await];
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    sent.push(Sent::new(&wal, one(2, big("b"))).await);
    sent.push(Sent::new(&wal, one(1, big("c"))).await);

    // Objects 3 and 4 are durable, and the writer has handled both completions: the
    // in-flight count drops only in the writer's handler of an upload's completion.
    until_present(&inner, 3).await;
    until_present(&inner, 4).await;
    stats_until(
        &wal,
        "the writer to handle the completions of 3 and 4",
        |_| {},
        |s| s.in_flight == 1,
    )
    .await;
    // A barrier through the writer's mailbox: an invalid append, answered by the writer
    // after every message before it, the completions included.
    assert!(matches!(
        wal.append(9, vec![]).await,
        Err(Error::EmptyAppend)
    ));
    for (i, s) in sent.iter_mut().enumerate() {
        assert!(
            !s.answered().await,
            "append {i} answered while sequence 2 is held"
        );
    }
    let s = stats(&wal).await;
    assert_eq!(s.objects, 0, "nothing acknowledged while 2 is held");
    assert_eq!(s.pending_bytes, 3 * BIG as u64);
    assert!(object_at(&inner, 2).await.is_none());

    hold.release();
    // Poll later appends first: whenever one is answered, every earlier one must be
    // answered already (the writer replies in sequence order).
    bounded("the replies after the release", async {
        loop {
            for s in sent.iter_mut().rev() {
                s.answered().await;
            }
            let answered: Vec<bool> = sent.iter().map(|s| s.done.is_some()).collect();
            if let Some(first_missing) = answered.iter().position(|a| !a) {
                assert!(
                    answered[first_missing..].iter().all(|a| !a),
                    "a later append was acknowledged before an earlier one: {answered:?}"
                );
                tokio::task::yield_now().await;
            } else {
                break;
            }
        }
    })
    .await;
    let mut ledger = Ledger::default();
    let mut sequences = Vec::new();
    for s in sent {
        let (parts, result) = s.reply().await;
        let receipt = result.as_ref().expect("acknowledged after the release");
        sequences.push(receipt.sequence);
        ledger.record(parts, &result);
    }
    assert_eq!(sequences, vec![2, 3, 4]);
    let s = stats(&wal).await;
    assert_eq!(s.objects, 3);
    assert_eq!(s.pending_bytes, 0);
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");

    let replayed = replay_fresh(&store, &config, [1, 2]).await;
    assert!(ledger.check(&replayed).is_empty());
    assert_eq!(replayed.len(), 3);
}

// ---------------------------------------------------------------------------------------
// 3. A writer that panics
// ---------------------------------------------------------------------------------------

/// The writer panics with one object in flight (its create held) and two appends in the
/// open batch: every waiter gets `WriterFailed`, the supervisor opens a new epoch, what
/// was acknowledged before survives, and new appends work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_panic_opens_a_new_epoch() {
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let inner = faults.inner().clone();
    let mut config = config();
    // Appends admitted while the only upload slot is busy stay in the batch.
    config.max_in_flight = 1;
    let (wal, join) = spawn(&store, &config).await;
    let mut ledger = Ledger::default();

    let parts = one(1, small("before"));
    let result = wal.append_many(parts.clone()).await;
    assert_eq!(result.as_ref().expect("append").sequence, 2);
    ledger.record(parts, &result);
    let before = stats(&wal).await;
    assert_eq!(before.restarts, 0);

    // Only the writer's create of 3: the next epoch's opening object at 3 goes through.
    let hold = faults.hold_next_creates_of(&key(3), 1);
    let a = Sent::new(&wal, one(1, small("in-flight"))).await;
    bounded("the create of 3 to be held", hold.wait_arrived(1)).await;
    let b = Sent::new(&wal, one(2, small("batch-1"))).await;
    let c = Sent::new(&wal, one(1, small("batch-2"))).await;
    let admitted = ["in-flight", "batch-1", "batch-2"]
        .iter()
        .map(|s| s.len() as u64)
        .sum::<u64>();
    stats_until(
        &wal,
        "the batch appends to be admitted",
        |_| {},
        |s| s.pending_bytes == admitted,
    )
    .await;

    wal.panic_writer();
    for s in [a, b, c] {
        let (parts, result) = s.reply().await;
        match &result {
            Err(Error::WriterFailed { .. }) => {}
            other => panic!("a waiter of the failed writer got {other:?}"),
        }
        ledger.record(parts, &result);
    }

    let after = stats_until(&wal, "a new epoch", |_| {}, |s| s.epoch > before.epoch).await;
    assert_eq!(after.restarts, 1);
    let parts = one(2, small("after"));
    let result = wal.append_many(parts.clone()).await;
    let receipt = result.as_ref().expect("append in the new epoch");
    assert!(receipt.sequence > 3);
    ledger.record(parts, &result);

    // The new epoch opened at 3 (the held create had not landed). The failed writer's
    // upload ended with it (its task is aborted when the writer goes), so the held
    // create, let go now, was dropped where it waited and never reaches the store.
    let opening = header_at(&inner, 3).await;
    assert_eq!(opening.epoch, after.epoch);
    hold.release();
    bounded("the held create to be dropped", hold.wait_abandoned(1)).await;
    assert_eq!(hold.finished(), 0);
    assert_eq!(header_at(&inner, 3).await, opening);

    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");
    let replayed = replay_fresh(&store, &config, ledger.regions()).await;
    let outcomes = ledger.check(&replayed);
    assert_eq!(
        outcomes,
        vec![false, false, false],
        "nothing of the failed writer lands"
    );
    assert_eq!(replayed.len(), 2);
}

// ---------------------------------------------------------------------------------------
// 4. Two nodes on one prefix
// ---------------------------------------------------------------------------------------

/// Node B opens the prefix node A writes to: A's next append fails with `Fenced`, A's
/// supervisor ends for good (terminal `Fenced`, no new epoch), B goes on writing, and B's
/// chain holds everything A acknowledged.
async fn second_node_fences_the_first(store: Arc<dyn ObjectStore>) {
    let config = config();
    let (a, a_join) = spawn(&store, &config).await;
    let mut ledger = Ledger::default();
    for i in 0..4u64 {
        let parts = vec![
            (
                1,
                vec![small(&format!("a{i}-x")), small(&format!("a{i}-y"))],
            ),
            (2, vec![small(&format!("a{i}-z"))]),
        ];
        let result = a.append_many(parts.clone()).await;
        result.as_ref().expect("A's append before B");
        ledger.record(parts, &result);
    }
    let a_epoch = stats(&a).await.epoch;

    let (b, b_join) = spawn(&store, &config).await;
    // Waits for B's open (recovery, claims, opening object).
    let b_last = b.last_entry_id_overall().await.expect("B's recovery");
    assert_eq!(b_last, ledger.acked().iter().map(|e| e.id).max());
    let b_epoch = stats(&b).await.epoch;
    assert!(b_epoch > a_epoch);

    let parts = one(1, small("a-fenced"));
    let result = a.append_many(parts.clone()).await;
    match &result {
        Err(Error::Fenced {
            epoch, fenced_by, ..
        }) => {
            assert_eq!(*epoch, a_epoch);
            assert_eq!(*fenced_by, b_epoch);
        }
        other => panic!("A's append after B's open: {other:?}"),
    }
    assert!(!result.as_ref().unwrap_err().is_retryable());
    ledger.record(parts, &result);

    // A's supervisor escalates and ends; it does not open again.
    bounded("A's supervisor to end", a_join)
        .await
        .expect("join A");
    assert!(matches!(a.terminal_error(), Some(Error::Fenced { .. })));
    for i in 0..3 {
        let parts = one(2, small(&format!("a-after-{i}")));
        let result = a.append_many(parts.clone()).await;
        assert!(
            matches!(
                result,
                Err(Error::Fenced {
                    durability: Durability::NotWritten,
                    ..
                })
            ),
            "A's append after it ended: {result:?}"
        );
        ledger.record(parts, &result);
    }
    assert!(matches!(a.stats().await, Err(Error::Fenced { .. })));
    // No instance opened above B: A never started a new epoch.
    let top = headers(&store).await;
    assert_eq!(top.values().map(|h| h.epoch).max(), Some(b_epoch));

    let parts = one(2, small("b-1"));
    let result = b.append_many(parts.clone()).await;
    result.as_ref().expect("B appends after A was fenced");
    ledger.record(parts, &result);
    let s = stats(&b).await;
    assert_eq!((s.epoch, s.restarts), (b_epoch, 0));
    b.stop().await.expect("stop B");
    bounded("B to end", b_join).await.expect("join B");

    let replayed = replay_fresh(&store, &config, [1, 2]).await;
    assert!(ledger.check(&replayed).is_empty());
}

/// Appends each of node A's tasks makes at most.
const A_APPENDS_PER_TASK: usize = 40;

/// Node A's tasks keep appending while node B opens the prefix. Every append A
/// acknowledged is on B's chain; once one of A's appends fails, it fails with `Fenced`;
/// a failed one is on B's chain whole or not at all; after B's open, A is fenced.
async fn fencing_under_concurrent_appends(store: Arc<dyn ObjectStore>) {
    let mut config = config();
    config.max_in_flight = 4;
    // B's open may lose to A's creates landing at its opening sequence while A writes:
    // it starts over, so A's bounded load cannot starve it.
    let mut b_config = config.clone();
    b_config.open_attempts = 1000;
    let (a, a_join) = spawn(&store, &config).await;
    let acked = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for task in 0..8u64 {
        let a = a.clone();
        let acked = acked.clone();
        tasks.spawn(async move {
            let mut log = Vec::new();
            for i in 0..A_APPENDS_PER_TASK {
                let parts = vec![(
                    task,
                    vec![
                        small(&format!("t{task}/{i}/0")),
                        small(&format!("t{task}/{i}/1")),
                    ],
                )];
                let result = a.append_many(parts.clone()).await;
                let failed = result.is_err();
                log.push((parts, result));
                if failed {
                    break;
                }
                acked.fetch_add(1, Ordering::Relaxed);
            }
            log
        });
    }
    until("A to acknowledge some appends", || {
        acked.load(Ordering::Relaxed) >= 40
    })
    .await;
    let (b, b_join) = spawn(&store, &b_config).await;
    bounded("B's open", b.last_entry_id_overall())
        .await
        .expect("B's recovery");
    let b_epoch = stats(&b).await.epoch;

    let mut ledger = Ledger::default();
    while let Some(done) = bounded("A's tasks", tasks.join_next()).await {
        let log = done.expect("an appending task panicked");
        if let Some((_, Err(e))) = log.last() {
            match e {
                Error::Fenced { fenced_by, .. } => assert_eq!(*fenced_by, b_epoch),
                other => panic!("A's task ended with {other:?}"),
            }
        }
        for (parts, result) in log {
            ledger.record(parts, &result);
        }
    }
    // Whether or not A's tasks met the fence, A's next append does.
    let parts = one(0, small("a-after-b"));
    let result = a.append_many(parts.clone()).await;
    assert!(
        matches!(&result, Err(Error::Fenced { fenced_by, .. }) if *fenced_by == b_epoch),
        "A's append after B opened: {result:?}"
    );
    ledger.record(parts, &result);
    bounded("A's supervisor to end", a_join)
        .await
        .expect("join A");
    assert!(matches!(a.terminal_error(), Some(Error::Fenced { .. })));
    // A create A had in flight above B's opening object may have landed there after B's
    // listing (never acknowledged: the one below it met B's object). B's create at that
    // sequence then meets a lower epoch: B's epoch ends, refusing the append before any
    // create of it (retryable), and B opens again above it.
    let mut stale_tails = 0;
    loop {
        let parts = one(100, small(&format!("b-after-{stale_tails}")));
        let result = b.append_many(parts.clone()).await;
        ledger.record(parts, &result);
        match result {
            Ok(_) => break,
            Err(
                e @ Error::EpochEnded {
                    reason: EpochEndReason::StaleTail { .. },
                    durability: Durability::NotWritten,
                    ..
                },
            ) => assert!(e.is_retryable()),
            Err(other) => panic!("B's append after A was fenced: {other:?}"),
        }
        stale_tails += 1;
        assert!(stale_tails < 100, "B never writes again");
    }
    assert!(stats(&b).await.epoch >= b_epoch);
    b.stop().await.expect("stop B");
    bounded("B to end", b_join).await.expect("join B");

    let replayed = replay_fresh(&store, &config, ledger.regions()).await;
    ledger.check(&replayed);
    assert!(ledger.acked().len() >= 80);
}

// ---------------------------------------------------------------------------------------
// 5. Outcomes that stay unknown
// ---------------------------------------------------------------------------------------

/// When the create of sequence 2 (every attempt failing with an error) lands for real.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landing {
    /// Its first attempt lands during the retries: before the epoch ends.
    DuringRetries,
    /// After the new instance listed the prefix, before its claim of 2.
    AfterListing,
    /// Only after the new instance claimed 2: it never lands.
    AfterClaim,
}

/// The create of sequence 2 stays unknown through every retry while the object at 3 is
/// durable: both appends get `EpochEnded` (may be durable, retryable), the supervisor
/// opens a new epoch, writing resumes, and the late object is replayed whole (with 3) or
/// never, depending on when it lands.
async fn unknown_outcome(landing: Landing) {
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let inner = faults.inner().clone();
    let mut config = one_per_object(config());
    config.max_in_flight = 4;
    // Late copies scheduled after this many store operations never land by themselves.
    let never = CreateFault::LandLate(u32::MAX);
    let faults_of_2 = match landing {
        // Attempt 1's copy lands at the next store operation: attempt 2's create.
        Landing::DuringRetries => [CreateFault::LandLate(0), never, never],
        // Attempt 3's copy lands at the next store operation: after the epoch ended,
        // nothing touches the store before the new open lists it (a listing is not
        // counted), so it lands at the open's first read, between listing and claims.
        Landing::AfterListing => [never, never, CreateFault::LandLate(0)],
        Landing::AfterClaim => [never, never, never],
    };
    faults.fail_create_of(&key(2), faults_of_2);
    // The writer's three attempts; a later create of 2 (a claim) is not held or counted.
    let hold = faults.hold_next_creates_of(&key(2), 3);
    let (wal, join) = spawn(&store, &config).await;

    let a = Sent::new(&wal, one(1, big("late"))).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let b = Sent::new(&wal, one(2, big("after-late"))).await;
    until_present(&inner, 3).await;
    let before = stats_until(
        &wal,
        "the writer to handle the completion of 3",
        |_| {},
        |s| s.in_flight == 1,
    )
    .await;
    hold.release();

    let mut ledger = Ledger::default();
    let (parts, result) = a.reply().await;
    match &result {
        Err(
            e @ Error::EpochEnded {
                sequence: 2,
                reason: EpochEndReason::UnknownOutcome,
                durability: Durability::MayBeDurable,
                ..
            },
        ) => assert!(e.is_retryable()),
        other => panic!("the append whose create stayed unknown got {other:?}"),
    }
    ledger.record(parts, &result);
    let (parts, result) = b.reply().await;
    match &result {
        Err(
            e @ Error::EpochEnded {
                sequence: 3,
                reason: EpochEndReason::EarlierObjectFailed,
                durability: Durability::MayBeDurable,
                ..
            },
        ) => assert!(e.is_retryable()),
        other => panic!("the append after it got {other:?}"),
    }
    ledger.record(parts, &result);
    assert_eq!(hold.arrived(), 3, "every attempt was made");

    let after = stats_until(&wal, "a new epoch", |_| {}, |s| s.epoch > before.epoch).await;
    assert_eq!(after.restarts, 1);
    // Whatever is still late lands now, if it can.
    let landed_now = faults.land_late().await;
    assert_eq!(landed_now, 0, "sequence 2 is taken by now in every case");
    let at_2 = header_at(&inner, 2).await;
    match landing {
        Landing::DuringRetries | Landing::AfterListing => {
            assert_eq!(faults.late_landed(), 1);
            assert_eq!((at_2.epoch, at_2.claim), (before.epoch, false));
        }
        Landing::AfterClaim => {
            assert_eq!(faults.late_landed(), 0);
            assert_eq!((at_2.epoch, at_2.claim), (after.epoch, true));
        }
    }

    let parts = one(1, big("resumed"));
    let result = wal.append_many(parts.clone()).await;
    let receipt = result.as_ref().expect("writing resumes in the new epoch");
    assert!(receipt.sequence > 4);
    ledger.record(parts, &result);
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");

    let replayed = replay_fresh(&store, &config, [1, 2]).await;
    let outcomes = ledger.check(&replayed);
    let expected = match landing {
        Landing::DuringRetries | Landing::AfterListing => vec![true, true],
        Landing::AfterClaim => vec![false, false],
    };
    assert_eq!(outcomes, expected, "which failed appends were replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcome_landed_during_the_retries_is_replayed_whole() {
    unknown_outcome(Landing::DuringRetries).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcome_landing_after_the_listing_is_replayed_whole() {
    unknown_outcome(Landing::AfterListing).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcome_landing_after_the_claim_is_never_replayed() {
    unknown_outcome(Landing::AfterClaim).await
}

// ---------------------------------------------------------------------------------------
// 6. Backpressure
// ---------------------------------------------------------------------------------------

/// With the first object's create held, appends fill `max_pending_bytes` and the rest
/// wait: pending bytes never pass the limit, `try_append_many` fails fast, and after the
/// release every append completes and is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_bounds_pending_bytes_while_uploads_stall() {
    const ENTRY: usize = 100;
    const MAX_PENDING: u64 = 1024;
    const TASKS: u64 = 40;
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let mut config = config();
    config.max_entry_bytes = 128;
    config.max_pending_bytes = MAX_PENDING;
    config.max_in_flight = 2;
    let entry = |tag: String| {
        let mut v = tag.into_bytes();
        v.resize(ENTRY, b'.');
        Bytes::from(v)
    };
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;
    let within = |s: &WalStats| {
        assert!(
            s.pending_bytes <= MAX_PENDING,
            "pending bytes {} above the limit",
            s.pending_bytes
        );
        assert!(s.in_flight <= 2, "{} uploads in flight", s.in_flight);
    };

    let first = Sent::new(&wal, one(0, entry("first".into()))).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let sending = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let wal = wal.clone();
        let sending = sending.clone();
        let parts = one(t % 8, entry(format!("task-{t}")));
        tasks.spawn(async move {
            sending.fetch_add(1, Ordering::Relaxed);
            let result = wal.append_many(parts.clone()).await;
            (parts, result)
        });
    }
    // Every task has sent its append and the limit is reached: 10 entries of 100 bytes.
    let full = (MAX_PENDING / ENTRY as u64) * ENTRY as u64;
    stats_until(&wal, "the pending bytes to reach the limit", within, |s| {
        s.pending_bytes == full && sending.load(Ordering::Relaxed) == TASKS as usize
    })
    .await;
    // While stalled: sample repeatedly; nothing is acknowledged, nothing more admitted.
    for _ in 0..200 {
        let s = stats(&wal).await;
        within(&s);
        assert_eq!(s.pending_bytes, full);
        assert_eq!(s.objects, 0);
        tokio::task::yield_now().await;
    }
    assert!(
        tasks.try_join_next().is_none(),
        "an append finished while stalled"
    );
    match wal.try_append_many(one(9, entry("fail-fast".into()))).await {
        Err(Error::Backpressure { limit, held, max }) => {
            assert_eq!(limit, BackpressureLimit::PendingBytes);
            assert_eq!((held, max), (full, MAX_PENDING));
        }
        other => panic!("try_append_many under backpressure: {other:?}"),
    }

    // Sample while the backlog drains, from a task of its own.
    let draining = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let wal = wal.clone();
        let draining = draining.clone();
        async move {
            let mut samples = 0u64;
            while draining.load(Ordering::Relaxed) {
                let s = wal.stats().await.expect("stats");
                assert!(s.pending_bytes <= MAX_PENDING, "{s:?}");
                assert!(s.in_flight <= 2, "{s:?}");
                samples += 1;
                tokio::task::yield_now().await;
            }
            samples
        }
    });
    hold.release();
    let mut ledger = Ledger::default();
    let (parts, result) = first.reply().await;
    result.as_ref().expect("the first append");
    ledger.record(parts, &result);
    while let Some(done) = bounded("the waiting appends", tasks.join_next()).await {
        let (parts, result) = done.expect("an appending task panicked");
        result
            .as_ref()
            .expect("every append completes after the release");
        ledger.record(parts, &result);
    }
    draining.store(false, Ordering::Relaxed);
    assert!(bounded("the sampler", sampler).await.expect("sampler") > 0);
    let parts = one(9, entry("after".into()));
    let result = wal.try_append_many(parts.clone()).await;
    result.as_ref().expect("try_append_many once drained");
    ledger.record(parts, &result);
    let s = stats(&wal).await;
    assert_eq!((s.pending_bytes, s.appends), (0, TASKS + 2));

    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");
    let replayed = replay_fresh(&store, &config, ledger.regions()).await;
    assert!(ledger.check(&replayed).is_empty());
    assert_eq!(replayed.len() as u64, TASKS + 2);
}

// ---------------------------------------------------------------------------------------
// 7. A reader that fails
// ---------------------------------------------------------------------------------------

fn child_ids(wal: &WalHandle) -> HashSet<ractor::ActorId> {
    wal.actor()
        .get_children()
        .iter()
        .map(|c| c.get_id())
        .collect()
}

/// A region's reader panics; the supervisor starts a new one, and reads of the region
/// (from the start and from an id) return its entries; a follow of the region goes on
/// across the panics, each entry once; other regions and the writer are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reader_is_restarted() {
    let store = memory_store();
    let config = config();
    let (wal, join) = spawn(&store, &config).await;
    let mut ledger = Ledger::default();
    for i in 0..5 {
        for region in [7u64, 8] {
            let parts = vec![(
                region,
                vec![
                    small(&format!("{region}/{i}/0")),
                    small(&format!("{region}/{i}/1")),
                ],
            )];
            let result = wal.append_many(parts.clone()).await;
            result.as_ref().expect("append");
            ledger.record(parts, &result);
        }
    }
    let expected = |ledger: &Ledger, region: u64| -> Vec<Entry> {
        ledger
            .acked()
            .into_iter()
            .filter(|e| e.region == region)
            .collect()
    };
    assert_eq!(
        collect(wal.read(7, 0).await.expect("read")).await,
        expected(&ledger, 7)
    );
    let epoch = stats(&wal).await.epoch;
    // A follow of the region, started by its reader, outlives the reader's panics.
    let follow = wal.follow(7, 0).await.expect("follow");

    for round in 0..3 {
        let before = child_ids(&wal);
        wal.panic_reader(7);
        // A new child is linked: the supervisor spawns one only as the replacement of
        // the failed reader (the writer is not replaced, checked below).
        until("the reader to be replaced", || {
            child_ids(&wal).difference(&before).count() > 0
        })
        .await;
        let got = collect(wal.read(7, 0).await.expect("read after the restart")).await;
        assert_eq!(got, expected(&ledger, 7), "round {round}");
        let want = expected(&ledger, 7);
        let from = want[3].id;
        let got = collect(wal.read(7, from).await.expect("read from an id")).await;
        assert_eq!(got, want[3..].to_vec(), "round {round}");
    }
    assert_eq!(
        collect(wal.read(8, 0).await.expect("read")).await,
        expected(&ledger, 8)
    );
    let parts = one(7, small("after-restarts"));
    let result = wal.append_many(parts.clone()).await;
    result.as_ref().expect("append after reader restarts");
    ledger.record(parts, &result);
    let got = collect(wal.read(7, 0).await.expect("read")).await;
    assert_eq!(got, expected(&ledger, 7));
    let followed = bounded("the follow to deliver the last append", async {
        let mut followed = Vec::new();
        while followed.len() < got.len() {
            let item = follow.recv_async().await.expect("the follow ended early");
            followed.push(item.expect("a followed entry"));
        }
        followed
    })
    .await;
    assert_eq!(followed, got, "the follow across its reader's panics");
    drop(follow);
    let s = stats(&wal).await;
    assert_eq!(
        (s.epoch, s.restarts),
        (epoch, 0),
        "a reader failure keeps the writer"
    );

    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");
    let replayed = replay_fresh(&store, &config, [7, 8]).await;
    assert!(ledger.check(&replayed).is_empty());
}

// ---------------------------------------------------------------------------------------
// 8. A graceful stop with uploads in flight
// ---------------------------------------------------------------------------------------

/// Stop with two creates held in flight, a sealed object not yet sent and an append in
/// the open batch: the unsent ones fail at once with `Stopped` (not written), the stop
/// waits for the uploads, whose appends are acknowledged once released; stopping again
/// succeeds, and appends after the stop get `Stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_acknowledges_what_is_durable_and_fails_the_rest() {
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let mut config = one_per_object(config());
    config.max_in_flight = 2;
    // A small append stays in the open batch while both upload slots are busy.
    let hold_2 = faults.hold_creates_of(&key(2));
    let hold_3 = faults.hold_creates_of(&key(3));
    let (wal, join) = spawn(&store, &config).await;

    let a = Sent::new(&wal, one(1, big("in-flight-2"))).await;
    bounded("the create of 2 to be held", hold_2.wait_arrived(1)).await;
    let b = Sent::new(&wal, one(2, big("in-flight-3"))).await;
    bounded("the create of 3 to be held", hold_3.wait_arrived(1)).await;
    // Sealed as 4, not started: two uploads are in flight already.
    let c = Sent::new(&wal, one(1, big("sealed-4"))).await;
    let d = Sent::new(&wal, one(2, small("in-batch"))).await;
    let admitted = 3 * BIG as u64 + "in-batch".len() as u64;
    stats_until(
        &wal,
        "every append to be admitted",
        |s| assert!(s.in_flight <= 2),
        |s| s.pending_bytes == admitted && s.in_flight == 2,
    )
    .await;

    let stopper = tokio::spawn({
        let wal = wal.clone();
        async move { wal.stop().await }
    });
    let mut ledger = Ledger::default();
    // What was never sent fails at once; its replies prove the writer took the stop.
    for s in [c, d] {
        let (parts, result) = s.reply().await;
        assert!(
            matches!(
                result,
                Err(Error::Stopped {
                    durability: Durability::NotWritten
                })
            ),
            "an unsent append at stop: {result:?}"
        );
        ledger.record(parts, &result);
    }
    assert!(!hold_2.is_released() && !hold_3.is_released());
    assert!(
        !stopper.is_finished(),
        "the stop returned with uploads in flight"
    );
    // The supervisor waits for the writer's stop: an append sent now waits in its
    // mailbox, and is refused with `Stopped` once the stop is done (not dropped, which
    // would read as a failed writer whose append may be durable).
    let during = Sent::new(&wal, one(1, small("during-stop"))).await;
    hold_3.release();
    hold_2.release();
    for (s, sequence) in [(a, 2), (b, 3)] {
        let (parts, result) = s.reply().await;
        assert_eq!(
            result
                .as_ref()
                .expect("an in-flight append at stop")
                .sequence,
            sequence
        );
        ledger.record(parts, &result);
    }
    bounded("the stop", stopper)
        .await
        .expect("the stopping task")
        .expect("stop");
    let (parts, result) = during.reply().await;
    assert!(
        matches!(
            result,
            Err(Error::Stopped {
                durability: Durability::NotWritten
            })
        ),
        "an append sent during the stop: {result:?}"
    );
    ledger.record(parts, &result);
    // Right after the stop returned: appends fail with `Stopped`, nothing written.
    for (i, parts) in [one(1, small("after-1")), one(2, small("after-2"))]
        .into_iter()
        .enumerate()
    {
        let result = if i == 0 {
            wal.append_many(parts.clone()).await
        } else {
            wal.try_append_many(parts.clone()).await
        };
        assert!(
            matches!(
                result,
                Err(Error::Stopped {
                    durability: Durability::NotWritten
                })
            ),
            "an append after the stop: {result:?}"
        );
        ledger.record(parts, &result);
    }
    wal.stop().await.expect("a second stop succeeds");
    bounded("the WAL to end", join).await.expect("join");
    assert!(
        wal.terminal_error().is_none(),
        "a graceful stop is no failure"
    );
    assert!(matches!(wal.read(1, 0).await, Err(Error::Stopped { .. })));
    assert!(
        object_at(faults.inner(), 4).await.is_none(),
        "4 was never sent"
    );

    let replayed = replay_fresh(&store, &config, [1, 2]).await;
    assert!(ledger.check(&replayed).is_empty());
    assert_eq!(replayed.len(), 2);
}

/// Keeps the `CreateHold` import honest: holds are shared by clones.
#[tokio::test]
async fn create_hold_clones_share_the_hold() {
    let faults = FaultStore::new(memory_store());
    let hold: CreateHold = faults.hold_creates_of(&key(1));
    let clone = hold.clone();
    assert!(!clone.is_released());
    hold.release();
    assert!(clone.is_released());
    let store: Arc<dyn ObjectStore> = faults.clone();
    store
        .put_opts(
            &key(1),
            Bytes::from_static(b"x").into(),
            object_store::PutOptions {
                mode: object_store::PutMode::Create,
                ..Default::default()
            },
        )
        .await
        .expect("a released hold lets creates through");
    assert_eq!((clone.arrived(), clone.finished()), (1, 1));
}
