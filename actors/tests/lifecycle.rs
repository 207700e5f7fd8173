//! What the WAL leaves running when it ends: an aborted instance's open sends nothing
//! more, so it cannot fence the instance that replaced it.

mod support {
    pub mod harness;
}

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::format::decode_header;
use object_store_wal::testing::FaultStore;
use object_store_wal_actors::spawn_wal;
use support::harness::{
    bounded, config_no_reclaim, key, listing, object_at, payload, restart_policy, spawn, stats,
    stop,
};

/// Instance A's open stalls on its opening object's create; A is aborted; B opens the
/// prefix (its opening object takes the same key). When the stalled create is let go,
/// nothing of A reaches the store: A's open does not start over above B and fence it,
/// and B keeps writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_open_never_fences_its_successor() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    let config = config_no_reclaim();

    // A's opening object is 1 (an empty prefix): its create stalls.
    let hold = faults.hold_next_creates_of(&key(1), 1);
    let (a, _a_join) = spawn_wal(store.clone(), config.clone(), restart_policy())
        .await
        .expect("spawn A");
    bounded("A's opening create to stall", hold.wait_arrived(1)).await;
    a.abort();
    // The abort ends A's open where it waits: the stalled create is dropped unsent.
    bounded("A's stalled create to be dropped", hold.wait_abandoned(1)).await;

    // B opens: its create of 1 is not held, and it writes.
    let (b, b_join) = spawn(&store, &config).await;
    let first = bounded("B's first append", b.append(1, vec![payload("b-1")]))
        .await
        .expect("B appends");

    // Letting the hold go changes nothing: A sent nothing and never will.
    hold.release();
    let second = bounded("B's next append", b.append(1, vec![payload("b-2")]))
        .await
        .expect("B is not fenced");
    assert_eq!(second.sequence, first.sequence + 1);
    assert!(b.terminal_error().is_none());
    // Every object under the prefix is B's: nothing of A's epoch landed.
    let epoch = stats(&b).await.epoch;
    let (keys, _) = listing(&store).await;
    assert_eq!(keys, vec![1, 2, 3]);
    for sequence in keys {
        let bytes = object_at(&store, sequence).await.expect("listed object");
        assert_eq!(decode_header(&bytes).expect("a header").epoch, epoch);
    }
    stop(b, b_join).await;
}
