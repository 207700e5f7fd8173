//! Sealing that pipelines, through the actors: an admitted entry never waits for another
//! object's upload while an upload slot is free, acknowledgements stay in sequence
//! order, and a hedged create is acknowledged once.
//!
//! Uploads are held by the fault store until the test releases them; the tests wait on
//! what the store and the stats show, with a real-time safety bound only a hang reaches.

mod support {
    pub mod harness;
    pub mod ledger;
}

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::testing::FaultStore;
use object_store_wal::HedgeAfter;
use support::harness::{
    bounded, config_no_reclaim, key, object_at, payload, spawn, stats, stats_until, stop,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_object_starts_while_the_first_uploads_and_acks_stay_in_order() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    let inner = faults.inner().clone();
    let config = config_no_reclaim();
    assert!(config.max_in_flight >= 2);
    let (wal, join) = spawn(&store, &config).await;

    // The opening object is 1: the first data object, 2, stalls in its upload.
    let hold = faults.hold_creates_of(&key(2));
    let a = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(1, vec![payload("a")]).await }
    });
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;

    // The next append does not wait for object 2: it is sealed into object 3, which is
    // created while 2 is still uploading.
    let b = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(2, vec![payload("b")]).await }
    });
    bounded("object 3 to land while 2 is held", async {
        while object_at(&inner, 3).await.is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The writer has taken 3's outcome (one upload left in flight), and still holds
    // both acknowledgements: 3 is durable, but 2, before it, is not.
    stats_until(&wal, "object 3's outcome to be taken", |s| s.in_flight == 1).await;
    assert!(object_at(&inner, 2).await.is_none());
    assert!(!a.is_finished(), "2 is not durable yet");
    assert!(!b.is_finished(), "3 is durable but must wait for 2");

    hold.release();
    let a = bounded("a's reply", a).await.expect("join").expect("a");
    let b = bounded("b's reply", b).await.expect("join").expect("b");
    assert_eq!((a.sequence, b.sequence), (2, 3));
    let s = stats(&wal).await;
    assert_eq!((s.objects, s.appends), (2, 2));
    stop(wal, join).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_create_is_acknowledged_once() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    let mut config = config_no_reclaim();
    config.hedge_after = HedgeAfter::Fixed(Duration::from_millis(5));
    let (wal, join) = spawn(&store, &config).await;

    // The first create of 2 stalls; its twin, sent after the hedge delay, lands.
    let hold = faults.hold_next_creates_of(&key(2), 1);
    let first = bounded("the hedged append", wal.append(1, vec![payload("one")]))
        .await
        .expect("acknowledged by the twin");
    assert_eq!(first.sequence, 2);
    assert_eq!(hold.arrived(), 1);
    assert_eq!(
        (hold.finished(), hold.abandoned()),
        (0, 0),
        "the first attempt is still in flight, not cancelled"
    );

    // The stalled attempt answers late ("already exists"): nothing more is acknowledged
    // or counted, and the next append takes the next sequence.
    hold.release();
    bounded("the stalled attempt to answer", hold.wait_finished(1)).await;
    let second = bounded("the next append", wal.append(1, vec![payload("two")]))
        .await
        .expect("append");
    assert_eq!(second.sequence, 3);
    let s = stats(&wal).await;
    assert_eq!((s.objects, s.appends, s.entries), (2, 2, 2));
    assert!(s.hedged >= 1 && s.hedge_wins >= 1, "{s:?}");
    stop(wal, join).await;

    // A fresh instance replays each entry once.
    let (fresh, fresh_join) = spawn(&store, &config).await;
    let replayed = support::harness::read(&fresh, 1, 0).await;
    let payloads: Vec<_> = replayed.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(payloads, vec![payload("one"), payload("two")]);
    assert_eq!(
        replayed.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![first.parts[0].first_id, second.parts[0].first_id]
    );
    stop(fresh, fresh_join).await;
}
