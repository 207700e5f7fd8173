//! A prefix fenced for good (DESIGN.md "A node's regions after it died"; FORMAT.md
//! "Version 4"): once a closed opening object is listed, no writer opens the prefix
//! again, `create_if_missing` never starts a WAL over it, and read-only opens still
//! read the fenced chain. Over several stores one copy of a closed object refuses.
//! `fence` writes that object over a prefix a writer may still be using, and answers
//! what the fenced chain holds of each region, the same when asked again. `retire`
//! deletes every key but the closed object (the tombstone), only of a fenced prefix and
//! no earlier than `reclaim_grace` after the fence.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{decode_header, encode_object, Header, Link};
use object_store_wal::format::{entry_id, MAX_SEGMENT_ENTRIES};
use object_store_wal::internal::fence::{claims_ahead, retire_after, retire_at};
use object_store_wal::internal::open::SUMMARY_READ_ATTEMPTS;
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::testing::FaultStore;
use object_store_wal::{
    fence, holdings_of, retire, Config, Error, FencedRegion, ObjectStoreLogStore, RecoveryMode,
    Retired, WalStores,
};

const PREFIX: &str = "wal";

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.min_object_interval = std::time::Duration::ZERO;
    config
}

async fn get(store: &dyn ObjectStore, sequence: u64) -> Bytes {
    let key = object_key(&Path::from(PREFIX), sequence);
    store
        .get(&key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
}

async fn put(store: &dyn ObjectStore, sequence: u64, bytes: Bytes) {
    let key = object_key(&Path::from(PREFIX), sequence);
    store.put(&key, PutPayload::from(bytes)).await.expect("put");
}

/// One entry of `region` appended and flushed by a writer opened on `stores` (which
/// then goes away): its id.
async fn one_entry(stores: WalStores, region: u64) -> u64 {
    let mut wal = ObjectStoreLogStore::open(stores, config())
        .await
        .expect("open");
    let receipt = wal
        .append_and_flush(vec![(region, vec![Bytes::from_static(b"a")])])
        .await
        .expect("append");
    receipt.parts[0].first_id
}

/// Three empty memory stores, for one log over three.
fn three_stores() -> Vec<Arc<dyn ObjectStore>> {
    (0..3)
        .map(|_| Arc::new(InMemory::new()) as Arc<dyn ObjectStore>)
        .collect()
}

/// The closed opening object a fence writes above `end` (the chain end), as an open
/// would: the next key, epoch `sequence + 1`, linked to the end, an id offset above
/// every id base present.
fn closed_above(end: &Header) -> Bytes {
    let sequence = end.sequence + 1;
    let header = Header {
        sequence,
        epoch: sequence + 1,
        link: Link {
            sequence: end.sequence,
            epoch: end.epoch,
        },
        floor: end.floor,
        claim: false,
        id_offset: end.id_offset,
        closed: true,
    };
    encode_object(&header, std::iter::empty())
        .expect("encodes")
        .to_bytes()
}

/// Two acknowledged entries of region 1 (objects 2 and 3), the writer gone.
async fn written(store: &Arc<dyn ObjectStore>) -> Vec<u64> {
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let mut ids = Vec::new();
    for n in 0..2 {
        let receipt = wal
            .append_and_flush(vec![(1, vec![Bytes::from(format!("entry {n}"))])])
            .await
            .expect("append");
        ids.push(receipt.parts[0].first_id);
    }
    ids
}

fn is_closed(opened: Result<ObjectStoreLogStore, Error>, sequence: u64) {
    match opened {
        Err(e @ Error::PrefixClosed { sequence: s, .. }) => {
            assert_eq!(s, sequence);
            assert!(!e.is_retryable(), "terminal");
        }
        Err(e) => panic!("expected PrefixClosed at {sequence}, got {e}"),
        Ok(_) => panic!("a writer opened a closed prefix"),
    }
}

#[tokio::test]
async fn a_writer_never_opens_a_closed_prefix_and_readers_still_read_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let ids = written(&store).await;
    let end = decode_header(&get(store.as_ref(), 3).await).expect("object 3");
    put(store.as_ref(), 4, closed_above(&end)).await;

    is_closed(ObjectStoreLogStore::open(store.clone(), config()).await, 4);
    let no_create = config().with_create_if_missing(false);
    is_closed(ObjectStoreLogStore::open(store.clone(), no_create).await, 4);
    // Nothing was written: no claim, no opening object above the closed one.
    let listed: Vec<_> = store.list(None).try_collect().await.expect("list");
    assert_eq!(listed.len(), 4);

    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("a read-only open reads the fenced chain");
    assert_eq!(reader.report().closed, Some(4));
    let replayed: Vec<u64> = reader
        .replay([(1, 0)])
        .map_ok(|e| e.id)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(replayed, ids);
}

/// A retired prefix keeps only its closed object (a tombstone): a writer's open with
/// `create_if_missing` still refuses, rather than start a new WAL where a zombie's
/// reopen would find nothing.
#[tokio::test]
async fn a_tombstone_alone_refuses_a_new_wal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    written(&store).await;
    let end = decode_header(&get(store.as_ref(), 3).await).expect("object 3");
    put(store.as_ref(), 4, closed_above(&end)).await;
    for sequence in 1..=3 {
        let key = object_key(&Path::from(PREFIX), sequence);
        store.delete(&key).await.expect("delete");
    }
    is_closed(ObjectStoreLogStore::open(store.clone(), config()).await, 4);
}

/// Over three stores, one copy of a closed object (a fence whose create reached one
/// store so far) is enough to refuse a writer's open.
#[tokio::test]
async fn one_copy_of_a_closed_object_refuses_over_a_quorum() {
    let memory = three_stores();
    let stores = || WalStores::quorum(memory.iter().cloned()).expect("three stores");
    one_entry(stores(), 1).await;
    let end = decode_header(&get(memory[0].as_ref(), 2).await).expect("object 2");
    put(memory[2].as_ref(), 3, closed_above(&end)).await;
    is_closed(ObjectStoreLogStore::open(stores(), config()).await, 3);
}

/// The keys present, by sequence.
async fn sequences(store: &dyn ObjectStore) -> Vec<u64> {
    let listed: Vec<_> = store.list(None).try_collect().await.expect("list");
    let mut sequences: Vec<u64> = listed
        .iter()
        .filter_map(|m| m.location.filename()?.strip_suffix(".wal")?.parse().ok())
        .collect();
    sequences.sort_unstable();
    sequences
}

/// A fence over a prefix whose writer is still running (a zombie): it claims ahead of
/// the largest key, writes the closed object above the claims, and answers each
/// region's ids on the fenced chain and an `acquire_above` above every id base. The
/// zombie's next create meets a claim and is fenced; its reopen is refused; a fence
/// asked again answers the same, writing nothing.
#[tokio::test]
async fn a_fence_closes_a_live_writers_prefix_and_answers_its_regions() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut zombie = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let mut ids = Vec::new();
    for (region, n) in [(1u64, 0), (2, 1), (1, 2)] {
        let receipt = zombie
            .append_and_flush(vec![(region, vec![Bytes::from(format!("entry {n}"))])])
            .await
            .expect("append");
        ids.push(receipt.parts[0].first_id);
    }
    // Objects 1 (opening) to 4; the fence claims the keys from 5 up to 4 + ahead.
    let mut fence_config = config();
    fence_config.max_in_flight = 2;
    let ahead = claims_ahead(&fence_config);
    let closed = 4 + ahead + 1;
    let fenced = fence(store.clone(), &fence_config).await.expect("fence");
    assert!(fenced.wrote);
    assert!(!fenced.retired);
    assert_eq!(fenced.prefix, PREFIX);
    assert!(fenced.closed.closed);
    assert_eq!(fenced.closed.sequence, closed);
    assert_eq!(fenced.closed.link.sequence, 4, "linked to the chain end");
    let all: Vec<u64> = (1..=closed).collect();
    assert_eq!(sequences(store.as_ref()).await, all);
    let on_chain = |region: u64, first: u64, last: u64| FencedRegion {
        region,
        ids: Some((first, last)),
        pieces: Vec::new(),
        released: object_store_wal::Released {
            last_id: Some(last),
            acquire_above: fenced.acquire_above,
            sequence: Some(closed),
        },
    };
    assert_eq!(
        fenced.regions,
        vec![on_chain(1, ids[0], ids[2]), on_chain(2, ids[1], ids[1])]
    );
    assert_eq!(
        fenced.acquire_above,
        entry_id(fenced.closed.id_base(), MAX_SEGMENT_ENTRIES - 1)
    );
    assert!(fenced.acquire_above > ids[2]);
    let pieces = fenced.regions[0].pieces_with(&fenced.prefix);
    assert_eq!(pieces.len(), 1);
    assert_eq!((pieces[0].first_id, pieces[0].last_id), (ids[0], ids[2]));

    // The zombie's next create lands on a claim of a higher epoch: fenced, nothing
    // acknowledged; its reopen is refused for good.
    match zombie
        .append_and_flush(vec![(1, vec![Bytes::from_static(b"late")])])
        .await
    {
        Err(Error::Fenced { .. }) => {}
        other => panic!("expected Fenced, got {other:?}"),
    }
    is_closed(zombie.reopen().await.map(|_| zombie), closed);

    let again = fence(store.clone(), &fence_config).await.expect("again");
    assert!(!again.wrote);
    assert_eq!(again.closed, fenced.closed);
    assert_eq!(again.acquire_above, fenced.acquire_above);
    assert_eq!(again.regions, fenced.regions);
    assert_eq!(sequences(store.as_ref()).await, all);

    // What the fenced chain holds is what a read-only open replays.
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("read-only");
    let replayed: Vec<u64> = reader
        .replay([(1, 0), (2, 0)])
        .map_ok(|e| e.id)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(replayed.len(), 3);
}

/// A fence of a prefix that holds no WAL is refused, writing nothing.
#[tokio::test]
async fn a_fence_of_an_empty_prefix_is_refused() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    match fence(store.clone(), &config()).await {
        Err(Error::WalMissing { .. }) => {}
        other => panic!("expected WalMissing, got {other:?}"),
    }
    assert!(sequences(store.as_ref()).await.is_empty());
}

/// A retired prefix (only the closed object left) is answered as retired, with no
/// region, writing nothing.
#[tokio::test]
async fn a_fence_of_a_retired_prefix_answers_retired() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    written(&store).await;
    let fenced = fence(store.clone(), &config()).await.expect("fence");
    let closed = fenced.closed.sequence;
    for sequence in sequences(store.as_ref()).await {
        if sequence != closed {
            let key = object_key(&Path::from(PREFIX), sequence);
            store.delete(&key).await.expect("delete");
        }
    }
    let again = fence(store.clone(), &config()).await.expect("again");
    assert!(again.retired);
    assert!(!again.wrote);
    assert!(again.regions.is_empty());
    assert_eq!(again.closed, fenced.closed);
    assert_eq!(sequences(store.as_ref()).await, vec![closed]);
}

/// Over three stores the fence answers once a quorum holds the closed object, and a
/// writer's open of the prefix is then refused.
#[tokio::test]
async fn a_fence_over_three_stores_lands_on_a_quorum() {
    let memory = three_stores();
    let stores = || WalStores::quorum(memory.iter().cloned()).expect("three stores");
    let id = one_entry(stores(), 5).await;
    let fenced = fence(stores(), &config()).await.expect("fence");
    assert_eq!(fenced.regions.len(), 1);
    assert_eq!(fenced.regions[0].ids, Some((id, id)));
    let closed = fenced.closed.sequence;
    let mut holding = 0;
    for store in &memory {
        if sequences(store.as_ref()).await.contains(&closed) {
            holding += 1;
        }
    }
    assert!(holding >= 2, "a quorum holds the closed object");
    is_closed(ObjectStoreLogStore::open(stores(), config()).await, closed);
}

/// Retirement is refused, deleting nothing, for a prefix not fenced and before
/// `reclaim_grace` passed since the fence (by the store's clock); then it deletes every
/// key but the closed object, which still refuses a writer's open (`create_if_missing`
/// included), and asked again it deletes nothing more.
#[tokio::test]
async fn retirement_keeps_the_tombstone_and_waits_for_the_grace() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    written(&store).await;
    let before = sequences(store.as_ref()).await;
    match retire(store.clone(), &config(), &[]).await {
        Err(Error::NotFenced { .. }) => {}
        other => panic!("expected NotFenced, got {other:?}"),
    }
    assert_eq!(sequences(store.as_ref()).await, before);

    let fenced = fence(store.clone(), &config()).await.expect("fence");
    let closed = fenced.closed.sequence;
    let all = sequences(store.as_ref()).await;
    match retire(store.clone(), &config(), &[]).await {
        Err(e @ Error::RetireTooEarly { since, grace, .. }) => {
            assert!(since < grace, "{e}");
            assert_eq!(grace, config().reclaim_grace + config().max_create_duration);
            assert!(e.is_retryable());
        }
        other => panic!("expected RetireTooEarly, got {other:?}"),
    }
    assert_eq!(sequences(store.as_ref()).await, all);

    let later = std::time::SystemTime::now() + retire_after(&config());
    let retired = retire_at(store.clone(), &config(), &[], later)
        .await
        .expect("retired");
    assert_eq!(
        retired,
        Retired {
            closed,
            deleted: all.len() - 1
        }
    );
    assert_eq!(sequences(store.as_ref()).await, vec![closed]);
    is_closed(
        ObjectStoreLogStore::open(store.clone(), config()).await,
        closed,
    );
    let again = retire_at(store.clone(), &config(), &[], later)
        .await
        .expect("again");
    assert_eq!(again.deleted, 0);
    let held = holdings_of(store.clone(), &config())
        .await
        .expect("holdings");
    assert_eq!(held.closed, Some(closed));
    assert!(held.regions.is_empty());
}

/// A fenced prefix whose closed object was damaged at rest (its size intact): a
/// writer's point-in-time open, which goes on without unreadable objects, does not go
/// on without this one (nothing links to it and it has a closed object's size: it may
/// be the fence), and writes nothing; a read-only point-in-time open reads the chain
/// below it and says so. Retired, the damaged tombstone alone refuses the same.
#[tokio::test]
async fn point_in_time_never_steps_over_a_damaged_closed_object() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    written(&store).await;
    let closed = fence(store.clone(), &config())
        .await
        .expect("fence")
        .closed
        .sequence;
    let mut bytes = get(store.as_ref(), closed).await.to_vec();
    bytes[20] ^= 0xff;
    put(store.as_ref(), closed, Bytes::from(bytes)).await;
    let before = sequences(store.as_ref()).await;
    let pitr = config().with_recovery_mode(RecoveryMode::PointInTime);
    match ObjectStoreLogStore::open(store.clone(), pitr.clone()).await {
        Err(Error::InconsistentChain { sequence, .. }) => assert_eq!(sequence, closed),
        Err(e) => panic!("expected InconsistentChain, got {e}"),
        Ok(_) => panic!("a point-in-time writer stepped over a damaged closed object"),
    }
    assert_eq!(sequences(store.as_ref()).await, before, "nothing written");
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), pitr.clone())
        .await
        .expect("a reader goes on");
    let given_up = &reader.report().given_up_damaged;
    assert_eq!(given_up.len(), 1);
    assert_eq!(given_up[0].sequence, closed);
    assert!(given_up[0].may_be_closed);

    for sequence in before.iter().filter(|s| **s != closed) {
        let key = object_key(&Path::from(PREFIX), *sequence);
        store.delete(&key).await.expect("delete");
    }
    let retired = pitr.with_create_if_missing(true);
    match ObjectStoreLogStore::open(store.clone(), retired).await {
        Err(Error::InconsistentChain { sequence, .. }) => assert_eq!(sequence, closed),
        Err(e) => panic!("expected InconsistentChain, got {e}"),
        Ok(_) => panic!("a point-in-time writer stepped over a damaged tombstone"),
    }
    assert_eq!(sequences(store.as_ref()).await, vec![closed]);
}

/// Point-in-time recovery gives up only damage: an object whose reads fail for a while
/// (the store's errors, every attempt) fails the recovery, retryable, where it used to
/// be given up.
#[tokio::test]
async fn point_in_time_does_not_give_up_an_object_it_could_not_read_for_a_while() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(memory.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    // One object: the opening object alone.
    let wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    drop(wal);
    let pitr = config().with_recovery_mode(RecoveryMode::PointInTime);
    // Every attempt to read its summary fails (one GET each).
    faults.fail_next_gets(SUMMARY_READ_ATTEMPTS as u32);
    match ObjectStoreLogStore::open_read_only(store.clone(), pitr.clone()).await {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(reader) => panic!(
            "gave up an object it could not read for a while: {:?}",
            reader.report().given_up_damaged
        ),
    }
    let reader = ObjectStoreLogStore::open_read_only(store, pitr)
        .await
        .expect("reads once the store answers");
    assert!(reader.report().given_up_damaged.is_empty());
}

/// Over three stores, a closed object on one store only (a fence that crashed with its
/// create there) is an undecided key: a later fence plans past it and lands its own
/// closed object above, where it used to start over for ever; writers stay refused.
#[tokio::test]
async fn a_fence_goes_past_a_lone_closed_copy() {
    let memory = three_stores();
    let stores = || WalStores::quorum(memory.iter().cloned()).expect("three stores");
    let id = one_entry(stores(), 1).await;
    let end = decode_header(&get(memory[0].as_ref(), 2).await).expect("object 2");
    put(memory[1].as_ref(), 3, closed_above(&end)).await;
    is_closed(ObjectStoreLogStore::open(stores(), config()).await, 3);

    let fenced = fence(stores(), &config()).await.expect("a fence lands");
    assert!(fenced.wrote);
    assert!(fenced.closed.sequence > 3);
    assert_eq!(fenced.closed.link.sequence, 2, "linked to the chain end");
    assert_eq!(fenced.regions.len(), 1);
    assert_eq!(fenced.regions[0].ids, Some((id, id)));
    is_closed(
        ObjectStoreLogStore::open(stores(), config()).await,
        fenced.closed.sequence,
    );
    let again = fence(stores(), &config()).await.expect("again");
    assert!(!again.wrote);
    assert_eq!(again.closed, fenced.closed);
}
