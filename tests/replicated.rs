//! One log over three stores (DESIGN.md "One log over several stores"): what users rely
//! on, checked on in-memory stores that can be taken down (every request hangs).
//!
//! - An append is acknowledged once a quorum holds its object, and never before: a
//!   store that never answers does not hold it; with two of three down, nothing is.
//! - A store taken for down gets no request per object, only a probe a second; a store
//!   that never answers holds neither an open nor a stop.
//! - A damaged copy is read past: the reader gets the entries from another copy.
//! - A read-only follower delivers only decided objects: a writer's copy in one store,
//!   never acknowledged, is passed over for what the next writer acknowledges. It finds
//!   them by probing the next key in the stores, without listing.
//! - An open with a store unlisted completes what may be decided through it, and a
//!   replay then returns every acknowledged entry.
//! - The quorum rules at the seam: an opening object that meets an identical twin is not
//!   taken; a claim settles a hole once no other value can be decided there; a value
//!   other stores decided answers the outcome table's row.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{self, encode_object, entry_sequence, EncodedObject, Header, Link};
use object_store_wal::internal::read::Entry;
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::{CreateAttempt, CreateKind, WalIo};
use object_store_wal::internal::store::quorum::{DOWN_AFTER_FAILURES, PROBE_INTERVAL};
use object_store_wal::internal::store::replicated::ReplicatedTransport;
use object_store_wal::internal::store::transport::{StoreTransport, Transport};
use object_store_wal::metrics::Metrics;
use object_store_wal::testing::{CountingStore, Counts, DownHooks, DownStore};
use object_store_wal::{
    Config, Error, ErrorKind, HedgeAfter, ObjectStoreLogStore, RetryPolicy, WalStores,
};

const PREFIX: &str = "wal";
const TIMEOUT: Duration = Duration::from_millis(200);

struct Stores {
    memory: Vec<Arc<InMemory>>,
    down: Vec<Arc<DownStore>>,
}

impl Stores {
    fn new() -> Self {
        let memory: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
        let down = memory
            .iter()
            .map(|m| DownHooks::wrap(m.clone() as Arc<dyn ObjectStore>))
            .collect();
        Stores { memory, down }
    }

    fn set_down(&self, store: usize, down: bool) {
        self.down[store].hooks().set_down(down);
    }

    fn io(&self, config: &Config) -> WalIo {
        let stores = self
            .down
            .iter()
            .map(|d| d.clone() as Arc<dyn ObjectStore>)
            .collect();
        WalIo::for_stores(stores, config).expect("three stores")
    }

    /// The WAL over the three stores, as its writer, with [`config`].
    async fn open(&self) -> object_store_wal::Result<ObjectStoreLogStore> {
        ObjectStoreLogStore::open_io(self.io(&config()), config()).await
    }

    /// The WAL over the three stores, read-only, with [`config`].
    async fn open_read_only(&self) -> object_store_wal::Result<ObjectStoreLogStore> {
        ObjectStoreLogStore::open_read_only_io(self.io(&config()), config()).await
    }

    /// Which stores hold a copy at `sequence`.
    async fn holders(&self, sequence: u64) -> Vec<usize> {
        let key = object_key(&Path::from(PREFIX), sequence);
        let mut holders = Vec::new();
        for (i, m) in self.memory.iter().enumerate() {
            if m.head(&key).await.is_ok() {
                holders.push(i);
            }
        }
        holders
    }
}

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.min_object_interval = Duration::ZERO;
    config.hedge_after = HedgeAfter::Off;
    config.request_timeout = TIMEOUT;
    config.retry = RetryPolicy::default()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(10))
        .with_max_backoff(Duration::from_millis(20));
    config
}

fn parts(n: usize) -> Vec<(u64, Vec<Bytes>)> {
    vec![(n as u64 % 3, vec![Bytes::from(format!("entry {n}"))])]
}

async fn replay_all(wal: &ObjectStoreLogStore) -> Vec<Entry> {
    wal.replay((0..3).map(|r| (r, 0)))
        .try_collect()
        .await
        .expect("replay")
}

fn sorted(mut entries: Vec<(u64, u64, Bytes)>) -> Vec<(u64, u64, Bytes)> {
    entries.sort();
    entries
}

#[tokio::test]
async fn an_append_is_acknowledged_at_the_quorum_and_a_down_store_holds_none_of_it() {
    let stores = Stores::new();
    stores.set_down(2, true);
    let mut wal = stores.open().await.expect("opens with two of three stores");
    let mut acked = Vec::new();
    for n in 0..5 {
        let receipt = wal.append_and_flush(parts(n)).await.expect("append");
        assert_eq!(stores.holders(receipt.sequence).await, vec![0, 1]);
        for ids in &receipt.parts {
            for id in ids.ids() {
                acked.push((ids.region, id, Bytes::from(format!("entry {n}"))));
            }
        }
    }
    // All three up: a reader sees exactly what was acknowledged.
    stores.set_down(2, false);
    let reader = stores.open_read_only().await.expect("read-only open");
    let replayed = replay_all(&reader).await;
    let replayed = replayed
        .into_iter()
        .map(|e| (e.region, e.id, e.payload))
        .collect();
    assert_eq!(sorted(replayed), sorted(acked));
}

#[tokio::test]
async fn nothing_is_acknowledged_below_the_quorum() {
    let stores = Stores::new();
    let mut wal = stores.open().await.expect("open");
    stores.set_down(1, true);
    stores.set_down(2, true);
    let err = wal
        .append_and_flush(parts(0))
        .await
        .expect_err("one copy of three is not durable");
    assert_eq!(err.kind(), ErrorKind::Reopen, "{err}");
    // The opening object is 1; the object that failed, 2, is only in the one store that
    // answered.
    assert_eq!(stores.holders(2).await, vec![0]);
}

#[tokio::test(start_paused = true)]
async fn a_store_taken_for_down_gets_a_probe_a_second_not_a_request_per_object() {
    let stores = Stores::new();
    stores.set_down(2, true);
    let mut wal = stores.open().await.expect("open");
    for n in 0..DOWN_AFTER_FAILURES as usize {
        wal.append_and_flush(parts(n)).await.expect("append");
    }
    // Past the request timeout, every request to the dead store has failed.
    tokio::time::sleep(TIMEOUT * 2).await;
    let hung = stores.down[2].hooks().hung();
    for n in 0..50 {
        wal.append_and_flush(parts(n)).await.expect("append");
    }
    assert_eq!(stores.down[2].hooks().hung(), hung, "no request per object");
    tokio::time::sleep(PROBE_INTERVAL).await;
    for n in 0..5 {
        wal.append_and_flush(parts(n)).await.expect("append");
    }
    // Time is paused: a sleep returns once every task is idle, so the creates left to
    // the background (the probe among them) have been sent.
    tokio::time::sleep(TIMEOUT * 2).await;
    assert_eq!(stores.down[2].hooks().hung(), hung + 1, "one probe");
    // Back up: the next probe's answer brings it back, and it holds copies again.
    stores.set_down(2, false);
    tokio::time::sleep(PROBE_INTERVAL).await;
    let probe = wal.append_and_flush(parts(0)).await.expect("append");
    tokio::time::sleep(TIMEOUT).await;
    assert_eq!(
        stores.holders(probe.sequence).await,
        vec![0, 1, 2],
        "the probe"
    );
    let receipt = wal.append_and_flush(parts(1)).await.expect("append");
    tokio::time::sleep(TIMEOUT).await;
    assert_eq!(stores.holders(receipt.sequence).await, vec![0, 1, 2]);
}

#[tokio::test]
async fn an_open_with_a_store_unlisted_completes_what_it_may_hold() {
    let stores = Stores::new();
    let mut wal = stores.open().await.expect("open");
    // Store 1 misses these objects: their copies are in stores 0 and 2.
    stores.set_down(1, true);
    let mut written = Vec::new();
    for n in 0..3 {
        let receipt = wal.append_and_flush(parts(n)).await.expect("append");
        assert_eq!(stores.holders(receipt.sequence).await, vec![0, 2]);
        written.push(receipt.sequence);
    }
    drop(wal);
    // Now store 2 is gone: listed, only store 0 holds them.
    stores.set_down(1, false);
    stores.set_down(2, true);
    let err = stores
        .open_read_only()
        .await
        .expect_err("a read-only open does not complete");
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    assert!(err.is_retryable());
    let wal = stores.open().await.expect("a writer completes and opens");
    for s in &written {
        assert_eq!(
            stores.holders(*s).await,
            vec![0, 1, 2],
            "sequence {s} completed"
        );
    }
    let replayed: Vec<Bytes> = replay_all(&wal)
        .await
        .into_iter()
        .map(|e| e.payload)
        .collect();
    let mut want: Vec<Bytes> = (0..3).map(|n| Bytes::from(format!("entry {n}"))).collect();
    let mut got = replayed;
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

fn header(sequence: u64, epoch: u64, claim: bool) -> Header {
    Header {
        sequence,
        epoch,
        link: Link {
            sequence: sequence - 1,
            epoch: epoch.min(sequence),
        },
        floor: 0,
        claim,
        closed: false,
        id_offset: 0,
    }
}

fn object(sequence: u64, epoch: u64, claim: bool) -> EncodedObject {
    encode_object(&header(sequence, epoch, claim), std::iter::empty()).expect("encodes")
}

fn transport(memory: &[Arc<InMemory>]) -> ReplicatedTransport {
    let metrics = Arc::new(Metrics::new(PREFIX));
    let stores = memory
        .iter()
        .map(|m| -> Arc<dyn Transport> {
            Arc::new(StoreTransport::new(m.clone(), metrics.clone()))
        })
        .collect();
    ReplicatedTransport::new(stores).expect("three stores")
}

async fn put(store: &InMemory, o: &EncodedObject) {
    let key = object_key(&Path::from(PREFIX), o.header().sequence);
    store
        .put(&key, PutPayload::from(o.to_bytes()))
        .await
        .expect("put");
}

#[tokio::test]
async fn an_opening_object_that_meets_its_identical_twin_is_not_taken() {
    let memory: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
    let t = transport(&memory);
    let opening = object(5, 6, false);
    // Another opener computed the same epoch and won two stores with the same bytes.
    put(&memory[0], &opening).await;
    put(&memory[1], &opening).await;
    let key = object_key(&Path::from(PREFIX), 5);
    let answer = t.create(&key, opening.chunks(), CreateKind::Opening).await;
    assert!(
        matches!(answer, CreateAttempt::AlreadyExists { .. }),
        "{answer:?}"
    );
    // The same bytes as a data object are the outcome table's identical retry: ours.
    let answer = t.create(&key, opening.chunks(), CreateKind::Data).await;
    assert!(matches!(answer, CreateAttempt::Created), "{answer:?}");
}

#[tokio::test]
async fn a_claim_settles_a_hole_once_no_other_value_can_be_decided_there() {
    let memory: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
    let t = transport(&memory);
    let key = object_key(&Path::from(PREFIX), 7);
    // One store holds a late object of an earlier instance; our claim takes the other
    // two, so it can never be decided.
    put(&memory[0], &object(7, 3, false)).await;
    let claim = object(7, 9, true);
    let answer = t.create(&key, claim.chunks(), CreateKind::Claim).await;
    assert!(matches!(answer, CreateAttempt::Created), "{answer:?}");

    // Two stores hold it: it is decided, and the open must start over.
    let key = object_key(&Path::from(PREFIX), 8);
    put(&memory[0], &object(8, 3, false)).await;
    put(&memory[2], &object(8, 3, false)).await;
    let answer = t
        .create(&key, object(8, 9, true).chunks(), CreateKind::Claim)
        .await;
    assert!(
        matches!(answer, CreateAttempt::AlreadyExists { .. }),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_value_that_can_never_be_decided_answers_the_outcome_table() {
    let memory: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
    let t = transport(&memory);
    let io = WalIo::over(Arc::new(t), PREFIX, 1 << 20, Arc::new(Metrics::new(PREFIX))).expect("io");
    // A higher epoch holds two stores: fenced, whatever the third says.
    let higher = object(4, 9, false);
    put(&memory[1], &higher).await;
    put(&memory[2], &higher).await;
    let ours = object(4, 5, false);
    let outcome =
        object_store_wal::internal::write::persist::persist(&io, &ours, &RetryPolicy::default())
            .await;
    assert!(
        matches!(
            outcome,
            object_store_wal::internal::write::persist::PersistOutcome::Fenced { fenced_by: 9 }
        ),
        "{outcome:?}"
    );
    // Ours landed in the one free store, and nowhere else.
    let key = object_key(&Path::from(PREFIX), 4);
    let got = memory[0]
        .get(&key)
        .await
        .expect("copy")
        .bytes()
        .await
        .expect("bytes");
    assert!(ours.same_bytes(&got));
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_holds_neither_a_stop_nor_an_open() {
    let stores = Stores::new();
    stores.set_down(2, true);
    let mut config = config();
    // Far above anything the WAL may wait for here: the dead store's requests would
    // end only at this bound.
    config.request_timeout = Duration::from_secs(600);
    let started = tokio::time::Instant::now();
    let (wal, _join) = object_store_wal_actors::spawn_wal_io(
        stores.io(&config),
        config.clone(),
        object_store_wal_actors::RestartPolicy::default(),
        Arc::new(object_store_wal::BootClock),
        None,
    )
    .await
    .expect("spawn");
    wal.ready()
        .await
        .expect("opens with a store that never answers");
    let receipt = wal
        .append(1, vec![Bytes::from_static(b"entry")])
        .await
        .expect("append");
    assert_eq!(stores.holders(receipt.sequence).await, vec![0, 1]);
    wal.stop().await.expect("stop");
    // Virtual time: neither the open nor the stop waited for the dead store's timeout.
    assert!(started.elapsed() < config.request_timeout);
}

#[tokio::test(start_paused = true)]
async fn a_damaged_copy_is_read_past() {
    let stores = Stores::new();
    let mut wal = stores.open().await.expect("open");
    let receipt = wal
        .append_and_flush(vec![(7, vec![Bytes::from_static(b"payload of seven")])])
        .await
        .expect("append");
    // Time is paused: the sleep returns once the third copy, left to the background,
    // has landed.
    tokio::time::sleep(TIMEOUT).await;
    assert_eq!(stores.holders(receipt.sequence).await, vec![0, 1, 2]);
    // Each store's copy in turn has a damaged segment (the others' are whole): every
    // read returns the entry, and the store read first meets the damage once.
    let key = object_key(&Path::from(PREFIX), receipt.sequence);
    for damaged_store in 0..3 {
        let memory = &stores.memory[damaged_store];
        let copy = memory
            .get(&key)
            .await
            .expect("copy")
            .bytes()
            .await
            .expect("bytes");
        let mut damaged = copy.to_vec();
        if let Some(b) = damaged.get_mut(format::HEADER_LEN + 6) {
            *b ^= 0x55;
        }
        memory
            .put(&key, PutPayload::from(damaged))
            .await
            .expect("put");
        let entries: Vec<Entry> = wal.read(7, 0).try_collect().await.expect("read");
        let payloads: Vec<&[u8]> = entries.iter().map(|e| e.payload.as_ref()).collect();
        assert_eq!(
            payloads,
            vec![&b"payload of seven"[..]],
            "store {damaged_store} damaged"
        );
        memory.put(&key, PutPayload::from(copy)).await.expect("put");
    }
    assert!(
        wal.io()
            .request_stats()
            .damaged_copies
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_delivers_only_decided_objects() {
    let stores = Stores::new();
    let mut wal = stores.open().await.expect("open");
    let first = wal
        .append_and_flush(vec![(0, vec![Bytes::from_static(b"acknowledged")])])
        .await
        .expect("append");
    // Object `first + 1` reaches store 0 only: never acknowledged, never decided.
    stores.set_down(1, true);
    stores.set_down(2, true);
    wal.append_and_flush(vec![(0, vec![Bytes::from_static(b"never acknowledged")])])
        .await
        .expect_err("one copy of three");
    drop(wal);
    stores.set_down(1, false);
    stores.set_down(2, false);
    assert_eq!(stores.holders(first.sequence + 1).await, vec![0]);

    let reader = stores.open_read_only().await.expect("read-only open");
    let poll = Duration::from_millis(10);
    let mut follow = reader.follow(0, 0, poll);
    let entry = follow.try_next().await.expect("follow").expect("an entry");
    assert_eq!(entry.payload, Bytes::from_static(b"acknowledged"));
    // Time is paused: the follower polls several times while the undecided copy is the
    // only object above the chain, its request answered at once.
    tokio::time::sleep(poll * 5).await;

    // The next writer claims that key and opens above it; its entry is the next one.
    let mut wal = stores.open().await.expect("reopen");
    let next = wal
        .append_and_flush(vec![(0, vec![Bytes::from_static(b"after the reopen")])])
        .await
        .expect("append");
    let entry = follow.try_next().await.expect("follow").expect("an entry");
    assert_eq!(entry.payload, Bytes::from_static(b"after the reopen"));
    assert_eq!(entry.id >> 20, next.sequence);
}

/// A read-only follower over three stores finds each new object by probing the next key
/// in every store for its decided value, not by listing: after its start no LIST while
/// the writer appends; idle, one store is probed a poll (the next one each time), so 10
/// idle seconds cost about as many GETs as over one store.
#[tokio::test(start_paused = true)]
async fn a_follower_over_three_stores_probes_without_listing() {
    let stores = Stores::new();
    let mut wal = stores.open().await.expect("open");
    wal.append_and_flush(vec![(0, vec![Bytes::from_static(b"first")])])
        .await
        .expect("append");
    let counting: Vec<Arc<CountingStore>> = stores
        .down
        .iter()
        .map(|d| CountingStore::new(d.clone() as Arc<dyn ObjectStore>))
        .collect();
    let io = WalIo::for_stores(
        counting
            .iter()
            .map(|c| c.clone() as Arc<dyn ObjectStore>)
            .collect(),
        &config(),
    )
    .expect("three stores");
    let reader = ObjectStoreLogStore::open_read_only_io(io, config())
        .await
        .expect("read-only open");
    let mut follow = reader.follow(0, 0, Duration::from_millis(10));
    let entry = follow.try_next().await.expect("follow").expect("an entry");
    assert_eq!(entry.payload, Bytes::from_static(b"first"));
    let count = |of: fn(&Counts) -> &AtomicU64| -> u64 {
        counting
            .iter()
            .map(|c| of(c.counts()).load(Ordering::Relaxed))
            .sum()
    };
    let lists_at_start = count(|c| &c.lists);
    for i in 0..5 {
        let payload = Bytes::from(format!("next-{i}"));
        wal.append_and_flush(vec![(0, vec![payload.clone()])])
            .await
            .expect("append");
        let entry = follow.try_next().await.expect("follow").expect("an entry");
        assert_eq!(entry.payload, payload);
    }
    assert_eq!(count(|c| &c.lists), lists_at_start, "the follower listed");

    for c in &counting {
        c.reset();
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    // About ten polls a second apart after the backoff's climb (10 ms doubling), one GET
    // each; probing every store would be three times that.
    let gets = count(|c| &c.gets);
    assert!((9..=20).contains(&gets), "{gets} GETs in 10 idle seconds");
    assert_eq!(count(|c| &c.lists), 0);
}

/// A key split between two values, neither decided (an earlier writer's object in one
/// store, an earlier opener's claim in another), must not stop an open: `M` counts every
/// copy, so the open claims the key and opens above it. The split value is never
/// replayed.
/// Three stores holding the opening object of epoch 2 at sequence 1, and nothing else.
async fn opened_three() -> Vec<Arc<InMemory>> {
    let memory: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
    let opening = Header {
        link: Link {
            sequence: 0,
            epoch: 0,
        },
        ..header(1, 2, false)
    };
    let opening = encode_object(&opening, std::iter::empty()).expect("encodes");
    for m in &memory {
        put(m, &opening).await;
    }
    memory
}

/// One log over `memory`.
fn quorum_of(memory: &[Arc<InMemory>]) -> WalStores {
    let stores = memory.iter().map(|m| m.clone() as Arc<dyn ObjectStore>);
    WalStores::quorum(stores).expect("three")
}

#[tokio::test]
async fn an_open_claims_a_split_key_and_opens_above_it() {
    let memory = opened_three().await;
    put(&memory[0], &object(2, 2, false)).await;
    put(&memory[1], &object(2, 4, true)).await;
    let mut wal = ObjectStoreLogStore::open(quorum_of(&memory), config())
        .await
        .expect("opens above the split key");
    let position = wal.epoch().expect("a writer");
    assert_eq!((position.epoch, position.next_sequence), (4, 4));
    let receipt = wal.append_and_flush(parts(0)).await.expect("append");
    assert_eq!(receipt.sequence, 4);
    let replayed = replay_all(&wal).await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].payload, Bytes::from("entry 0"));
}

/// A raise object (DESIGN.md "Regions moving between nodes": an acquire raises the id
/// offset) that reached one store of three carried ids handed out at admission: the
/// next epoch's ids count from above its id base, as one store counts an orphan, though
/// no quorum decides it. Before, only decided values counted, and the new epoch gave
/// those ids again (sequence 4 + offset 0 is below the raise's 3 + 1,000).
#[tokio::test]
async fn a_new_epoch_counts_ids_above_a_copy_no_quorum_holds() {
    let memory = opened_three().await;
    let raise = Header {
        id_offset: 1_000,
        ..header(2, 2, false)
    };
    let raise = encode_object(&raise, std::iter::empty()).expect("encodes");
    put(&memory[2], &raise).await;
    let mut wal = ObjectStoreLogStore::open(quorum_of(&memory), config())
        .await
        .expect("opens");
    let report = wal.report();
    assert_eq!(report.max_id_base, 1_002, "the lone copy's id base counts");
    let receipt = wal.append_and_flush(parts(0)).await.expect("append");
    let id = receipt.parts[0].first_id;
    assert!(
        entry_sequence(id) > 1_002,
        "id {id} (base {}) is not above the lone copy's ids",
        entry_sequence(id)
    );
}
