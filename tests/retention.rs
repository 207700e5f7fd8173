//! Retention and takeover in the core: the `reclaim_grace` rule of the configuration,
//! creates measured on a [`CreateClock`] and never acknowledged past
//! `max_create_duration` (`persist_within`, and the sequential write path), the
//! read-only follower through claims and orphans of an owner that opened again, and
//! reads, replays and followers that the owner's floor and reclaimer passed: objects
//! deleted under them are passed over, above the floor they go on.
//!
//! The creates' clock is a [`ManualClock`] and stalled creates are [`CreateHold`]s or late
//! landings of a [`FaultStore`], so each test decides exactly how long a create "took".
//! Tests with timers run with tokio's clock paused; every wait has a safety bound.
//!
//! [`CreateClock`]: object_store_wal::CreateClock
//! [`CreateHold`]: object_store_wal::testing::CreateHold

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use object_store_wal::format::{decode_header, encode_object, EncodedObject, Header, Link};
use object_store_wal::internal::chain::catalog::Catalog;
use object_store_wal::internal::read::{replay_regions, ReplayLimits};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::internal::write::persist::{persist_within, PersistOutcome};
use object_store_wal::testing::{CreateFault, FaultStore, Hooks, ManualClock, Wrapper};
use object_store_wal::{
    Config, Durability, Entry, EpochEndReason, Error, ObjectStoreLogStore, RetryPolicy,
};

const PREFIX: &str = "wal";
const MAX_CREATE: Duration = Duration::from_secs(5);

fn key(sequence: u64) -> Path {
    object_key(&Path::from(PREFIX), sequence)
}

fn config() -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.max_create_duration = MAX_CREATE;
    c.reclaim_grace = MAX_CREATE * 2;
    c.retry = RetryPolicy::new(3, Duration::from_secs(1), Duration::from_secs(1));
    c
}

fn payload(tag: &str) -> Bytes {
    Bytes::from(tag.to_string())
}

/// The header of an object of epoch 3 at `sequence`, linked to the one below (the
/// first to none), with `floor`.
fn header(sequence: u64, floor: u64) -> Header {
    Header {
        sequence,
        epoch: 3,
        link: match sequence {
            1 => Link::NONE,
            _ => Link {
                sequence: sequence - 1,
                epoch: 3,
            },
        },
        floor,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

/// An object of epoch 3 at `sequence` holding one entry of region 1.
fn object(sequence: u64) -> EncodedObject {
    let entries = [payload("stalled")];
    encode_object(&header(sequence, 0), [(1u64, &entries[..])]).expect("encode")
}

async fn bytes_at(store: &Arc<dyn ObjectStore>, sequence: u64) -> Option<Bytes> {
    match store.get(&key(sequence)).await {
        Ok(r) => Some(r.bytes().await.expect("read an object")),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("cannot read {}: {e}", key(sequence)),
    }
}

/// A virtual-time safety bound (under a paused clock only a hang reaches it).
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(600), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn reclaim_grace_must_be_at_least_twice_max_create_duration() {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.max_create_duration = Duration::from_secs(30);
    for grace in [
        Duration::ZERO,
        Duration::from_secs(30),
        Duration::from_secs(60) - Duration::from_nanos(1),
    ] {
        c.reclaim_grace = grace;
        match c.validate() {
            Err(Error::Config { field, reason }) => {
                assert_eq!(field, "reclaim_grace", "grace {grace:?}");
                assert!(reason.contains("max_create_duration"), "{reason}");
            }
            other => panic!("grace {grace:?} accepted: {other:?}"),
        }
    }
    c.reclaim_grace = Duration::from_secs(60);
    c.validate().expect("exactly twice is enough");

    // The stores refuse it before touching the store.
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    c.reclaim_grace = Duration::from_secs(59);
    for result in [
        ObjectStoreLogStore::open(store.clone(), c.clone()).await,
        ObjectStoreLogStore::open_read_only(store.clone(), c.clone()).await,
    ] {
        match result {
            Err(Error::Config { field, .. }) => assert_eq!(field, "reclaim_grace"),
            other => panic!("opened with a bad grace: {:?}", other.map(|_| ())),
        }
    }
    let listed: Vec<_> = store.list(None).collect().await;
    assert!(listed.is_empty(), "nothing written");
}

// ---------------------------------------------------------------------------------------
// persist_within: the create-duration bound
// ---------------------------------------------------------------------------------------

/// A create held while the clock moves `took`, then released onto a free key: it lands;
/// whether it counts as durable depends only on `took`.
async fn held_create(took: Duration) -> (PersistOutcome, Arc<dyn ObjectStore>) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20).expect("io");
    let clock = ManualClock::new();
    let hold = faults.hold_creates_of(&key(7));
    let obj = object(7);
    let task = {
        let (io, obj, clock) = (io.clone(), obj.clone(), clock.clone());
        tokio::spawn(async move {
            persist_within(&io, &obj, &config().retry, MAX_CREATE, clock.as_ref()).await
        })
    };
    hold.wait_arrived(1).await;
    clock.advance(took);
    hold.release();
    let outcome = task.await.expect("persist task");
    let landed = bytes_at(&inner, 7).await.expect("the create landed");
    assert!(obj.same_bytes(&landed));
    (outcome, inner)
}

#[tokio::test]
async fn persist_within_refuses_a_create_slower_than_max_create_duration() {
    let took = MAX_CREATE + Duration::from_millis(1);
    match held_create(took).await.0 {
        PersistOutcome::TooSlow {
            attempts: 1,
            took: t,
        } => assert_eq!(t, took),
        other => panic!("a slow create was not refused: {other:?}"),
    }
    // At the bound it is still durable: only longer is too slow.
    match held_create(MAX_CREATE).await.0 {
        PersistOutcome::Durable { attempts: 1 } => {}
        other => panic!("a create at the bound was refused: {other:?}"),
    }
    // The error a writer gives its appends: the epoch ends, the entries may be durable.
    let e = PersistOutcome::TooSlow {
        attempts: 1,
        took: MAX_CREATE * 2,
    }
    .error(3, 7)
    .expect("an error");
    assert!(matches!(
        e,
        Error::EpochEnded {
            epoch: 3,
            sequence: 7,
            reason: EpochEndReason::CreateTooSlow,
            durability: Durability::MayBeDurable,
        }
    ));
    assert!(e.is_retryable());
}

/// The first create reports an error and lands late; the retry finds the identical bytes
/// (durable by the outcome table), but the whole create, retries included, took longer
/// than the bound: not acknowledged. The same landing within the bound is durable.
async fn late_landing_then_retry(advance: Duration) -> PersistOutcome {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20).expect("io");
    let clock = ManualClock::new();
    faults.fail_create_of(&key(7), [CreateFault::LandLate(u32::MAX)]);
    // Counts the first attempt through, held by nothing.
    let first = faults.hold_next_creates_of(&key(7), 1);
    first.release();
    let obj = object(7);
    let task = {
        let (io, obj, clock) = (io.clone(), obj.clone(), clock.clone());
        tokio::spawn(async move {
            persist_within(&io, &obj, &config().retry, MAX_CREATE, clock.as_ref()).await
        })
    };
    // The first attempt was answered with an error, its object to land late; the retry
    // waits for its backoff, caught by the hold placed before this task waits again.
    bounded("the first attempt", first.wait_finished(1)).await;
    assert_eq!(faults.late_pending(), 1);
    let hold = faults.hold_creates_of(&key(7));
    bounded("the retry", hold.wait_arrived(1)).await;
    assert!(bytes_at(&inner, 7).await.is_none(), "not landed yet");
    clock.advance(advance);
    assert_eq!(faults.land_late().await, 1);
    hold.release();
    task.await.expect("persist task")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn persist_within_counts_retries_and_late_landings() {
    match late_landing_then_retry(MAX_CREATE + Duration::from_secs(1)).await {
        PersistOutcome::TooSlow { attempts: 2, took } => {
            assert_eq!(took, MAX_CREATE + Duration::from_secs(1))
        }
        other => panic!("expected too slow after 2 attempts: {other:?}"),
    }
    match late_landing_then_retry(Duration::from_secs(1)).await {
        PersistOutcome::Durable { attempts: 2 } => {}
        other => panic!("expected durable after 2 attempts: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The sequential write path
// ---------------------------------------------------------------------------------------

/// A flush whose create took longer than `max_create_duration` fails with
/// `EpochEnded(CreateTooSlow, MayBeDurable)`; the instance writes nothing more in the
/// epoch; the object did land, so a later open replays its entry, once.
#[tokio::test]
async fn slow_flush_is_not_acknowledged_and_ends_the_epoch() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let clock = ManualClock::new();
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open")
        .with_clock(clock.clone());
    let first = wal
        .append_and_flush(vec![(1, vec![payload("fast")])])
        .await
        .expect("a fast flush");
    assert_eq!(first.sequence, 2);

    let hold = faults.hold_creates_of(&key(3));
    wal.append(vec![(1, vec![payload("slow")])])
        .expect("admitted");
    let flush = tokio::spawn(async move {
        let result = wal.flush().await;
        (wal, result)
    });
    hold.wait_arrived(1).await;
    clock.advance(MAX_CREATE + Duration::from_secs(1));
    hold.release();
    let (mut wal, result) = flush.await.expect("flush task");
    match result {
        Err(Error::EpochEnded {
            sequence: 3,
            reason: EpochEndReason::CreateTooSlow,
            durability: Durability::MayBeDurable,
            ..
        }) => {}
        other => panic!("a slow flush was acknowledged or failed otherwise: {other:?}"),
    }
    assert!(
        bytes_at(&inner, 3).await.is_some(),
        "the slow create landed"
    );
    assert_eq!(wal.last_entry_id(1), Some(first.parts[0].first_id));
    match wal.append(vec![(1, vec![payload("after")])]) {
        Err(Error::EpochEnded {
            durability: Durability::NotWritten,
            ..
        }) => {}
        other => panic!("the ended epoch took an append: {other:?}"),
    }

    // A new epoch replays both entries, each once: the slow one may be durable, and is.
    wal.reopen().await.expect("reopen");
    let mut replayed = Vec::new();
    let mut stream = wal.read(1, 0);
    while let Some(e) = stream.next().await {
        replayed.push(e.expect("entry"));
    }
    let payloads: Vec<Bytes> = replayed.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(payloads, vec![payload("fast"), payload("slow")]);
}

// ---------------------------------------------------------------------------------------
// The read-only follower
// ---------------------------------------------------------------------------------------

/// An owner's pipelined create that landed out of order leaves an orphan above a hole;
/// the owner opens again (a claim fills the hole, the opening object links to the chain
/// end). A read-only follower goes from the chain end to the opening object, past the
/// claim and the orphan, and sees each acknowledged entry once, in order, never the
/// orphan's.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_follower_passes_claims_and_orphans() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut owner = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let mut acked: Vec<Entry> = Vec::new();
    let append = async |owner: &mut ObjectStoreLogStore, tag: &str| {
        let r = owner
            .append_and_flush(vec![(1, vec![payload(tag)]), (2, vec![payload(tag)])])
            .await
            .expect("append");
        Entry {
            region: 1,
            id: r.parts[0].first_id,
            payload: payload(tag),
        }
    };
    for tag in ["a", "b", "c"] {
        acked.push(append(&mut owner, tag).await);
    }
    let epoch = owner.epoch().expect("writer").epoch;
    assert_eq!(owner.epoch().unwrap().next_sequence, 5);

    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("read-only open");
    let mut stream = reader.follow(1, 0, Duration::from_millis(10));
    let mut got: Vec<Entry> = Vec::new();
    let mut catch_up = async |got: &mut Vec<Entry>, last: u64| {
        bounded("the follower", async {
            while got.last().is_none_or(|e| e.id < last) {
                let item = stream.next().await.expect("the follower ended early");
                got.push(item.expect("a followed entry"));
            }
        })
        .await
    };
    catch_up(&mut got, acked.last().unwrap().id).await;

    // Sequence 6 of the owner's epoch landed, 5 never did.
    let orphan = encode_object(
        &Header {
            sequence: 6,
            epoch,
            link: Link { sequence: 5, epoch },
            floor: 0,
            claim: false,
            closed: false,
            id_offset: 0,
        },
        [(1u64, &[payload("orphan")][..])],
    )
    .expect("encode");
    create(&store, 6, orphan.to_bytes()).await;
    owner.reopen().await.expect("reopen");
    let claim = decode_header(&bytes_at(&store, 5).await.expect("a claim")).unwrap();
    assert!(claim.claim);
    let opening = decode_header(&bytes_at(&store, 7).await.expect("the opening")).unwrap();
    assert_eq!(opening.link, Link { sequence: 4, epoch });
    for tag in ["d", "e"] {
        acked.push(append(&mut owner, tag).await);
    }
    catch_up(&mut got, acked.last().unwrap().id).await;
    assert_eq!(
        got, acked,
        "each acknowledged entry once, in order, no orphan"
    );

    // Nothing more comes while the owner is idle.
    let idle = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    assert!(idle.is_err(), "the follower yielded more: {idle:?}");
}

// ---------------------------------------------------------------------------------------
// A follower the owner's floor has passed
// ---------------------------------------------------------------------------------------

/// The bytes of [`header`]`(sequence, floor)`'s object, holding one entry of region 1
/// whose payload names the sequence.
fn floored(sequence: u64, floor: u64) -> Bytes {
    let entries = [payload(&format!("e{sequence}"))];
    encode_object(&header(sequence, floor), [(1u64, &entries[..])])
        .expect("encode")
        .to_bytes()
}

async fn create(store: &Arc<dyn ObjectStore>, sequence: u64, bytes: Bytes) {
    store
        .put_opts(
            &key(sequence),
            PutPayload::from(bytes),
            PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            },
        )
        .await
        .expect("create");
}

/// What the owner did while a follower lagged: objects 5 to 8 created, the last with
/// `floor`, and the reclaimer deleted `deleted` (below the floor; in any order).
async fn owner_passes_the_follower(store: &Arc<dyn ObjectStore>, floor: u64, deleted: &[u64]) {
    for sequence in 5..=8 {
        let floor = if sequence == 8 { floor } else { 0 };
        create(store, sequence, floored(sequence, floor)).await;
    }
    for sequence in deleted {
        store.delete(&key(*sequence)).await.expect("delete");
    }
}

/// The payloads a follow of region 1 yielded, until `until` is seen (every item must be
/// an entry, not an error).
async fn followed_until(
    stream: &mut futures::stream::BoxStream<'static, object_store_wal::Result<Entry>>,
    until: &str,
) -> Vec<String> {
    bounded("the follower", async {
        let mut got = Vec::new();
        while got.last().is_none_or(|p| p != until) {
            let item = stream.next().await.expect("the follower ended early");
            let entry = item.expect("a followed entry, not an error");
            got.push(String::from_utf8_lossy(&entry.payload).into_owned());
        }
        got
    })
    .await
}

/// A read-only follower idle while the owner's floor passed it and the reclaimer deleted
/// the object its chain end links on to: it goes on from the chain above the floor (as
/// a fresh read-only open would), without an error; the entries below the floor, which
/// the owner declared obsolete, are not yielded.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_follower_passed_by_the_floor_goes_on_above_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for sequence in 1..=4 {
        create(&store, sequence, floored(sequence, 0)).await;
    }
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("read-only open");
    let mut stream = reader.follow(1, 0, Duration::from_millis(10));
    assert_eq!(
        followed_until(&mut stream, "e4").await,
        ["e1", "e2", "e3", "e4"]
    );

    owner_passes_the_follower(&store, 6, &[1, 2, 3, 4, 5]).await;
    assert_eq!(followed_until(&mut stream, "e8").await, ["e6", "e7", "e8"]);

    // And it follows on from there.
    create(&store, 9, floored(9, 6)).await;
    assert_eq!(followed_until(&mut stream, "e9").await, ["e9"]);
}

/// A GET that finds nothing: what a store answers for a deleted object.
fn not_found(location: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: location.to_string(),
        source: "deleted".into(),
    }
}

/// On the first ranged GET of `trigger` (a segment read), the owner passes the follower
/// (see [`owner_passes_the_follower`], with `floor` and `deleted`) and the GET finds
/// nothing: the segment's object was reclaimed between the follower's poll and its
/// read. Whole GETs of `gone` find nothing either, though `gone` is still listed:
/// deleted between a listing and a read; ranged GETs of `segment_gone` always find
/// nothing.
#[derive(Debug)]
struct ReclaimedUnderTheReader {
    trigger: Path,
    floor: u64,
    deleted: Vec<u64>,
    gone: Path,
    segment_gone: Path,
    fired: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Hooks for ReclaimedUnderTheReader {
    const NAME: &'static str = "ReclaimedUnderTheReader";

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let ordering = std::sync::atomic::Ordering::SeqCst;
        if *location == self.trigger && options.range.is_some() && !self.fired.swap(true, ordering)
        {
            owner_passes_the_follower(inner, self.floor, &self.deleted).await;
            return Err(not_found(location));
        }
        let gone = match options.range {
            None => &self.gone,
            Some(_) => &self.segment_gone,
        };
        if location == gone {
            return Err(not_found(location));
        }
        inner.get_opts(location, options).await
    }
}

/// A read-only follower whose next segment is reclaimed under it (its GET finds nothing)
/// looks again over a refreshed catalog and goes on above the owner's floor; an object
/// listed but deleted before its summary is read is passed over. No error is yielded.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_follower_goes_on_when_its_next_segment_was_reclaimed() {
    let (memory, mut stream) = follow_over(ReclaimedUnderTheReader {
        trigger: key(4),
        floor: 6,
        deleted: vec![1, 2, 3, 4],
        gone: key(5),
        segment_gone: key(0),
        fired: false.into(),
    })
    .await;
    assert_eq!(followed_until(&mut stream, "e3").await, ["e1", "e2", "e3"]);

    create(&memory, 4, floored(4, 0)).await;
    assert_eq!(followed_until(&mut stream, "e8").await, ["e6", "e7", "e8"]);
}

/// The owner's deletes ran out of order: when the follower's next segment (4) is
/// reclaimed under it, 5 still links on from 4 but 6 is gone, and the floor (7) is above
/// both. The refresh links on to 5, then goes on from the chain above the floor: no
/// error, and nothing below the floor is yielded.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_follower_goes_on_past_a_gap_the_reclaimer_left() {
    let (memory, mut stream) = follow_over(ReclaimedUnderTheReader {
        trigger: key(4),
        floor: 7,
        deleted: vec![1, 2, 3, 4, 6],
        gone: key(0),
        segment_gone: key(0),
        fired: false.into(),
    })
    .await;
    assert_eq!(followed_until(&mut stream, "e3").await, ["e1", "e2", "e3"]);

    create(&memory, 4, floored(4, 0)).await;
    assert_eq!(followed_until(&mut stream, "e8").await, ["e7", "e8"]);
}

/// Objects 1 to 3 in memory, and a read-only follow of region 1 over `hooks` wrapping it.
async fn follow_over(
    hooks: ReclaimedUnderTheReader,
) -> (
    Arc<dyn ObjectStore>,
    futures::stream::BoxStream<'static, object_store_wal::Result<Entry>>,
) {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store: Arc<dyn ObjectStore> = Wrapper::wrap(memory.clone(), hooks);
    for sequence in 1..=3 {
        create(&memory, sequence, floored(sequence, 0)).await;
    }
    let reader = ObjectStoreLogStore::open_read_only(store, config())
        .await
        .expect("read-only open");
    (memory, reader.follow(1, 0, Duration::from_millis(10)))
}

/// A segment not found whose object is still in the catalog is not taken as reclaimed:
/// the follow yields the store's error and ends.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_segment_missing_above_the_floor_fails_the_follow() {
    // Object 2's segment reads find nothing, with nothing above the floor to replace it.
    let (_, mut stream) = follow_over(ReclaimedUnderTheReader {
        trigger: key(0),
        floor: 0,
        deleted: Vec::new(),
        gone: key(0),
        segment_gone: key(2),
        fired: false.into(),
    })
    .await;
    let first = bounded("the follower", stream.next()).await;
    assert_eq!(
        first
            .map(|r| r.map(|e| e.payload))
            .transpose()
            .ok()
            .flatten(),
        Some(payload("e1"))
    );
    let second = bounded("the follower", stream.next())
        .await
        .expect("an item");
    match second {
        Err(e) => assert!(e.is_not_found(), "a not-found store error: {e}"),
        Ok(entry) => panic!("object 2 is gone, yet {entry:?} was yielded"),
    }
    assert!(bounded("the end", stream.next()).await.is_none());
}

/// Drops the objects below `floor` from `catalog` by adding an empty object above its
/// end with that floor, as a writer's catalog does when an object with a new floor is
/// acknowledged.
fn raise_floor(catalog: &RwLock<Catalog>, floor: u64) {
    let mut catalog = catalog.write().expect("catalog");
    let sequence = catalog.last_sequence().expect("a chain") + 1;
    catalog
        .insert(&header(sequence, floor), &[], 0)
        .expect("insert");
}

/// The reclaimer's delete racing a read: the first ranged GET of `segment` finds
/// nothing, and by then the catalog has dropped it below `floor`.
#[derive(Debug)]
struct DeletedAfterTheFloorRose {
    segment: Path,
    floor: u64,
    catalog: std::sync::OnceLock<Arc<RwLock<Catalog>>>,
}

#[async_trait::async_trait]
impl Hooks for DeletedAfterTheFloorRose {
    const NAME: &'static str = "DeletedAfterTheFloorRose";

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        if *location == self.segment && options.range.is_some() {
            if let Some(catalog) = self.catalog.get() {
                raise_floor(catalog, self.floor);
            }
            return Err(not_found(location));
        }
        inner.get_opts(location, options).await
    }
}

/// A read-only open of objects 1 to 4 over a [`DeletedAfterTheFloorRose`] that drops
/// object 2 below floor 3 in the reader's catalog at its first segment read.
async fn reader_racing_the_reclaimer() -> ObjectStoreLogStore {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = Wrapper::wrap(
        memory.clone(),
        DeletedAfterTheFloorRose {
            segment: key(2),
            floor: 3,
            catalog: std::sync::OnceLock::new(),
        },
    );
    for sequence in 1..=4 {
        create(&memory, sequence, floored(sequence, 0)).await;
    }
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("read-only open");
    store
        .hooks()
        .catalog
        .set(reader.catalog())
        .expect("set once");
    reader
}

/// The payloads of a read's items, each of which must be an entry.
async fn payloads_of(
    what: &str,
    items: futures::stream::BoxStream<'static, object_store_wal::Result<Entry>>,
) -> Vec<String> {
    bounded(what, items.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|item| {
            let entry = item.expect("an entry, not an error");
            String::from_utf8_lossy(&entry.payload).into_owned()
        })
        .collect()
}

/// A read whose next segment was dropped from the catalog below a new floor and deleted
/// before its GET passes over it (its entries are obsolete) and goes on above the floor:
/// no error.
#[tokio::test]
async fn a_read_passes_over_a_segment_reclaimed_below_the_floor() {
    let reader = reader_racing_the_reclaimer().await;
    let read = payloads_of("the read", reader.read(1, 0)).await;
    assert_eq!(read, ["e1", "e3", "e4"]);
}

/// The same race under a replay of many regions: the object reclaimed under it is passed
/// over and the replay goes on above the floor, without an error.
#[tokio::test]
async fn a_replay_passes_over_an_object_reclaimed_below_the_floor() {
    let reader = reader_racing_the_reclaimer().await;
    let replay = replay_regions(
        reader.io().clone(),
        reader.catalog(),
        [(1u64, 0u64)].into_iter().collect(),
        ReplayLimits::of(reader.config()),
        reader.config().corrupt_segment_policy,
    );
    let replayed = payloads_of("the replay", replay).await;
    assert_eq!(replayed, ["e1", "e3", "e4"]);
}
