//! The handle's own calls: `ready` waits for the first recovery or returns what ended
//! it; a per-call timeout gives up with a typed error (an append's `MayBeDurable`, and
//! it may still land); replay, follow and read as `Stream`s; `stop` returns the error
//! that ended the WAL.

mod support {
    pub mod harness;
}

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::testing::FaultStore;
use object_store_wal::{entry_id, Config, Durability, Entry, Error, HedgeAfter};
use object_store_wal_actors::{spawn_wal, WalHandle};
use support::harness::{
    bounded, config_no_reclaim, ids, key, payload, read, restart_policy, spawn, stats, stop,
};

/// The harness's config without hedging: under a paused clock a hedge would be one
/// more timer, and these tests count the creates that reach a hold.
fn unhedged() -> Config {
    config_no_reclaim().with_hedge_after(HedgeAfter::Off)
}

/// `ready` does not answer while the opening object's create is held (a `ready` with a
/// timeout gives up, `NotWritten`), and answers once it lands: the WAL is open then.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn ready_waits_for_the_first_recovery() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    let hold = faults.hold_creates_of(&key(1));
    let (wal, join) = spawn_wal(store.clone(), unhedged(), restart_policy())
        .await
        .expect("spawn");
    hold.wait_arrived(1).await;

    let after = Duration::from_secs(1);
    match wal.with_timeout(after).ready().await {
        Err(Error::CallTimeout {
            op,
            after: a,
            durability,
        }) => {
            assert_eq!(
                (op, a, durability),
                ("ready", after, Durability::NotWritten)
            );
        }
        other => panic!("ready while the open is held: {other:?}"),
    }
    assert_eq!(stats(&wal).await.epoch, 0, "no epoch before the open ends");

    hold.release();
    wal.ready()
        .await
        .expect("ready once the opening object landed");
    let s = stats(&wal).await;
    assert!(s.epoch >= 1, "{s:?}");
    assert_eq!(s.chain_objects, 1, "the opening object: {s:?}");
    // A second `ready` answers at once, and appends are served.
    wal.ready().await.expect("ready again");
    let receipt = wal.append(1, vec![payload("x")]).await.expect("append");
    assert_eq!(receipt.sequence, 2);
    stop(wal, join).await;
}

/// A first open that fails terminally (a damaged object under the prefix) is what
/// `ready` returns; the WAL ends, and `stop` returns the same error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_returns_the_error_of_a_failed_first_open() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    store
        .put(
            &key(1),
            PutPayload::from_static(b"not an object of the WAL, but long enough to have a trailer"),
        )
        .await
        .expect("put the damaged object");
    let (wal, join) = spawn_wal(store.clone(), unhedged(), restart_policy())
        .await
        .expect("spawn");
    let e = bounded("ready", wal.ready())
        .await
        .expect_err("the open fails");
    match &e {
        Error::CorruptObject { key: k, .. } => assert_eq!(k, &key(1).to_string()),
        other => panic!("expected CorruptObject, got {other:?}"),
    }
    assert!(!e.is_retryable());
    // The supervisor failed (its own supervisor sees it) and stays ended.
    bounded("the supervisor to end", join)
        .await
        .expect("join the supervisor");
    assert!(matches!(
        wal.terminal_error(),
        Some(Error::CorruptObject { .. })
    ));
    assert!(matches!(
        wal.ready().await,
        Err(Error::CorruptObject { .. })
    ));
    assert!(matches!(wal.stop().await, Err(Error::CorruptObject { .. })));
    // Nothing was written: the damaged object is alone under the prefix.
    let listed: Vec<_> = store
        .list(None)
        .map(|m| m.expect("list").location)
        .collect()
        .await;
    assert_eq!(listed, vec![key(1)]);
}

/// An append on a handle with a timeout whose object's create is held gives up with
/// `CallTimeout`, `MayBeDurable`: its create was sent. Once the create is let go the
/// entry is durable after all, and read with the id the next object's came after.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_timed_out_append_says_may_be_durable_and_may_still_land() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    let (wal, join) = spawn_wal(store, unhedged(), restart_policy())
        .await
        .expect("spawn");
    wal.ready().await.expect("ready");
    // The opening object is 1: the first append's object is 2.
    let hold = faults.hold_creates_of(&key(2));
    let timed = wal.with_timeout(Duration::from_millis(100));
    assert_eq!(timed.timeout(), Some(Duration::from_millis(100)));
    assert_eq!(wal.timeout(), None, "the original handle keeps no timeout");

    let result = timed.append(1, vec![payload("late")]).await;
    match &result {
        Err(Error::CallTimeout {
            op,
            after,
            durability,
        }) => {
            assert_eq!(
                (*op, *after, *durability),
                (
                    "append",
                    Duration::from_millis(100),
                    Durability::MayBeDurable
                )
            );
        }
        other => panic!("an append whose create is held: {other:?}"),
    }
    let e = result.unwrap_err();
    assert_eq!(e.durability(), Durability::MayBeDurable);
    assert!(e.is_retryable());
    assert_eq!(
        hold.arrived(),
        1,
        "the create was sent and waits at the hold"
    );

    hold.release();
    let next = wal
        .append(1, vec![payload("next")])
        .await
        .expect("the next append");
    assert_eq!(next.sequence, 3);
    assert_eq!(
        ids(&read(&wal, 1, 0).await),
        vec![
            (entry_id(2, 0), payload("late")),
            (entry_id(3, 0), payload("next")),
        ]
    );
    stop(wal, join).await;
}

/// Every `(region, id, payload)` an append acknowledged, in the order given.
fn acked(parts: &[(u64, Vec<Bytes>)], receipt: &object_store_wal::AppendReceipt) -> Vec<Entry> {
    let mut out = Vec::new();
    for ((region, entries), ids) in parts.iter().zip(&receipt.parts) {
        assert_eq!(ids.region, *region);
        for (id, payload) in ids.ids().zip(entries) {
            out.push(Entry {
                region: *region,
                id,
                payload: payload.clone(),
            });
        }
    }
    out
}

fn of_region(entries: &[Entry], region: u64) -> Vec<(u64, Bytes)> {
    ids(&entries
        .iter()
        .filter(|e| e.region == region)
        .cloned()
        .collect::<Vec<_>>())
}

async fn drain(stream: object_store_wal_actors::EntryStream) -> Vec<Entry> {
    bounded("a stream to end", stream.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|item| item.expect("an entry"))
        .collect()
}

/// Read, replay and follow as `Stream`s yield every acknowledged entry once, each
/// region's in id order; a follow stream goes on with entries appended after it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_yield_every_entry_in_id_order() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (wal, join) = spawn(&store, &unhedged()).await;
    let mut expected = Vec::new();
    for i in 0..6u64 {
        let parts = vec![
            (
                1,
                vec![payload(format!("a{i}-0")), payload(format!("a{i}-1"))],
            ),
            (2, vec![payload(format!("b{i}"))]),
        ];
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        expected.extend(acked(&parts, &receipt));
    }
    let one = of_region(&expected, 1);
    let two = of_region(&expected, 2);
    assert_eq!(one.len(), 12);
    assert!(one.windows(2).all(|w| w[0].0 < w[1].0));

    let read = drain(wal.read_stream(1, 0).await.expect("read")).await;
    assert_eq!(ids(&read), one);
    // From an id within the region: that entry and the ones after it.
    let tail = drain(wal.read_stream(1, one[5].0).await.expect("read")).await;
    assert_eq!(ids(&tail), one[5..].to_vec());

    let replayed = drain(
        wal.replay_stream(vec![(1, 0), (2, 0)])
            .await
            .expect("replay"),
    )
    .await;
    assert_eq!(replayed.len(), expected.len());
    assert_eq!(of_region(&replayed, 1), one);
    assert_eq!(of_region(&replayed, 2), two);

    let mut follow = wal.follow_stream(2, 0).await.expect("follow");
    let mut followed = Vec::new();
    for _ in 0..two.len() {
        let item = bounded("a followed entry", follow.next()).await;
        followed.push(item.expect("the follow goes on").expect("an entry"));
    }
    assert_eq!(ids(&followed), two);
    let receipt = wal.append(2, vec![payload("after")]).await.expect("append");
    let item = bounded("the new entry", follow.next()).await;
    let entry = item.expect("the follow goes on").expect("an entry");
    assert_eq!(
        (entry.region, entry.id, entry.payload),
        (2, entry_id(receipt.sequence, 0), payload("after"))
    );
    drop(follow);
    stop(wal, join).await;
}

/// A WAL fenced by a newer instance ended with `Fenced`: its `stop` returns that error,
/// every time; the newer instance stops with `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_returns_the_error_that_ended_the_wal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = unhedged();
    let (a, a_join) = spawn(&store, &config).await;
    a.append(1, vec![payload("a")]).await.expect("A appends");
    let a_epoch = stats(&a).await.epoch;
    let (b, b_join) = spawn(&store, &config).await;
    let b_epoch = stats(&b).await.epoch;

    let fenced = a.append(1, vec![payload("a-late")]).await;
    assert!(
        matches!(fenced, Err(Error::Fenced { .. })),
        "A after B's open: {fenced:?}"
    );
    bounded("A to end", a_join).await.expect("join A");
    for attempt in 0..2 {
        match a.stop().await {
            Err(Error::Fenced {
                epoch,
                fenced_by,
                durability,
                ..
            }) => {
                assert_eq!((epoch, fenced_by), (a_epoch, b_epoch), "stop {attempt}");
                assert_eq!(durability, Durability::NotWritten);
            }
            other => panic!("stop {attempt} of a fenced WAL: {other:?}"),
        }
    }
    stop_ok(b, b_join).await;
}

async fn stop_ok(wal: WalHandle, join: tokio::task::JoinHandle<()>) {
    wal.stop().await.expect("a graceful stop");
    wal.stop()
        .await
        .expect("a second stop answers as the first");
    bounded("the WAL to end", join).await.expect("join");
}
