//! Regions moving between nodes (DESIGN.md "Regions moving between nodes"), the parts
//! built so far: an acquire raises the ids this WAL gives a region above the last id an
//! earlier owner gave it, answers only once the raise is durable, and the raise holds
//! across a restart; an acquire below this log's own ids, or of the control region, is
//! refused and changes nothing.
//!
//! Nothing sleeps: a test waits for a create to reach a hold, and polls a future once
//! (`futures::poll!`) at a moment when resolving would be wrong.

mod support {
    pub mod harness;
}

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::format::{decode_header, entry_id};
use object_store_wal::testing::FaultStore;
use object_store_wal::Error;

use support::harness::{bounded, config_no_reclaim, key, object_at, read, spawn, stop};

fn memory() -> (Arc<FaultStore>, Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    (faults, store)
}

/// The acquire of region 2 with last id `(500 << 20) | 3` seals nothing of the empty
/// batch but the raise: object 3, empty, with id offset 498 (id base 501). The acquire
/// is not answered while 3 is held; once it lands, region 2's next entry gets an id
/// above the last id, and so does its next after a restart; region 1 keeps counting
/// from the raised offset too, above its own earlier ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_raises_ids_above_the_last_id_durably() {
    let (faults, store) = memory();
    let config = config_no_reclaim();
    let (wal, join) = spawn(&store, &config).await;
    let first = bounded("an append", wal.append(1, vec![Bytes::from_static(b"a")]))
        .await
        .expect("append");
    assert_eq!(first.sequence, 2);

    let last_id = entry_id(500, 3);
    let hold = faults.hold_creates_of(&key(3));
    let mut acquire = Box::pin(wal.acquire(2, last_id));
    // The first poll sends it.
    assert!(futures::poll!(&mut acquire).is_pending());
    bounded("the raise to be held", hold.wait_arrived(1)).await;
    assert!(
        futures::poll!(&mut acquire).is_pending(),
        "answered before the raise is durable"
    );
    hold.release();
    bounded("the acquire", acquire).await.expect("acquired");
    let raise = object_at(faults.inner(), 3)
        .await
        .expect("the raise object");
    let header = decode_header(&raise).expect("a header");
    assert_eq!((header.id_offset, header.id_base()), (498, 501));

    let moved = bounded("an append", wal.append(2, vec![Bytes::from_static(b"b")]))
        .await
        .expect("append");
    assert!(moved.parts[0].first_id > last_id);
    assert_eq!(moved.parts[0].first_id, entry_id(502, 0));
    stop(wal, join).await;

    // A restart opens above the raised offset: ids go on rising.
    let (wal, join) = spawn(&store, &config).await;
    let again = bounded("an append", wal.append(2, vec![Bytes::from_static(b"c")]))
        .await
        .expect("append");
    assert!(again.parts[0].first_id > moved.parts[0].first_id);
    let region2: Vec<u64> = read(&wal, 2, 0).await.iter().map(|e| e.id).collect();
    assert_eq!(
        region2,
        vec![moved.parts[0].first_id, again.parts[0].first_id]
    );
    let region1: Vec<u64> = read(&wal, 1, 0).await.iter().map(|e| e.id).collect();
    assert_eq!(region1, vec![first.parts[0].first_id]);
    stop(wal, join).await;
}

/// Bad acquires get typed errors and change nothing: below an id this log already holds
/// of the region, and of the control region.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_acquires_are_refused_and_change_nothing() {
    let (_faults, store) = memory();
    let (wal, join) = spawn(&store, &config_no_reclaim()).await;
    let own = bounded("an append", wal.append(1, vec![Bytes::from_static(b"a")]))
        .await
        .expect("append");
    let own_id = own.parts[0].first_id;
    match bounded("an acquire", wal.acquire(1, own_id - 1)).await {
        Err(Error::AcquireBelowOwnIds {
            region: 1,
            last_id,
            own,
        }) => assert_eq!((last_id, own), (own_id - 1, own_id)),
        other => panic!("{other:?}"),
    }
    match bounded("an acquire", wal.acquire(u64::MAX, 0)).await {
        Err(e @ Error::ReservedRegion { region: u64::MAX }) => assert!(!e.is_retryable()),
        other => panic!("{other:?}"),
    }
    // Nothing was raised: the next object counts from its own sequence.
    let next = bounded("an append", wal.append(1, vec![Bytes::from_static(b"b")]))
        .await
        .expect("append");
    assert_eq!(next.parts[0].first_id, entry_id(next.sequence, 0));
    // An acquire at its own last id is fine, and needs no raise.
    bounded("an acquire", wal.acquire(1, next.parts[0].first_id))
        .await
        .expect("acquired");
    stop(wal, join).await;
}
