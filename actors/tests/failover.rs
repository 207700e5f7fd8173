//! A node whose prefix another node fenced for good (DESIGN.md "A node's regions after
//! it died"): the runtime never reopens over a closed opening object. A zombie (cut off
//! from its coordinator, still reaching the store) whose epoch ends meets the closed
//! object at its reopen and ends for good with `PrefixClosed`, acknowledging nothing
//! more; what it acknowledged is on the fenced chain, which a reader still reads.

mod support {
    pub mod harness;
}

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{decode_header, encode_object, Header, Link};
use object_store_wal::testing::{CreateFault, FaultStore};
use object_store_wal::{Durability, Error, ObjectStoreLogStore};
use object_store_wal_actors::spawn_wal;
use support::harness::{bounded, config_no_reclaim, key, restart_policy, spawn};

/// The zombie's create of object 3 fails unapplied, again and again (an unknown
/// outcome each time) until its retries run out and its epoch ends, while another
/// node's fence put a closed opening object at 3 above its chain end (2). Its reopen
/// lists the prefix, finds the closed object and ends the WAL with `PrefixClosed`
/// instead of opening above it; the append in flight failed `MayBeDurable` and is on
/// no chain, so it resolves as never written. Before the closed flag, that reopen
/// opened above the fence and acknowledged appends no new owner replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_whose_epoch_ends_never_reopens_over_a_closed_prefix() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(memory.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let config = config_no_reclaim();
    let (wal, join) = spawn(&store, &config).await;
    let first = bounded("an append", wal.append(1, vec![Bytes::from_static(b"a")]))
        .await
        .expect("append");
    assert_eq!(first.sequence, 2);

    // The fence, by another node, straight to the store: sequence 3 above the chain
    // end 2, an epoch above every one present.
    let end_bytes = memory
        .get(&key(2))
        .await
        .expect("object 2")
        .bytes()
        .await
        .expect("bytes");
    let end = decode_header(&end_bytes).expect("a header");
    let closed = Header {
        sequence: 3,
        epoch: 4,
        link: Link {
            sequence: 2,
            epoch: end.epoch,
        },
        floor: end.floor,
        claim: false,
        id_offset: end.id_offset,
        closed: true,
    };
    let closed = encode_object(&closed, std::iter::empty()).expect("encodes");
    memory
        .put(&key(3), PutPayload::from(closed.to_bytes()))
        .await
        .expect("the fence");

    // The zombie goes on: its next create never reaches the store.
    faults.fail_every_create(Some(CreateFault::ErrorUnapplied));
    match bounded("the append", wal.append(1, vec![Bytes::from_static(b"b")])).await {
        Err(e) => assert_eq!(e.durability(), Durability::MayBeDurable, "{e}"),
        Ok(receipt) => panic!("the zombie acknowledged {receipt:?} after the fence"),
    }
    bounded("the WAL to end", join)
        .await
        .expect("join the supervisor");
    match wal.terminal_error() {
        Some(Error::PrefixClosed { sequence: 3, .. }) => {}
        other => panic!("expected PrefixClosed, got {other:?}"),
    }
    assert!(wal.append(1, vec![Bytes::from_static(b"c")]).await.is_err());
    faults.fail_every_create(None);

    // Spawned again, it refuses at once; a reader reads what it acknowledged.
    let (again, join) = spawn_wal(store.clone(), config.clone(), restart_policy())
        .await
        .expect("spawned: the open runs in its recovery actor");
    let ready = bounded("the open", again.ready()).await;
    assert!(
        matches!(ready, Err(Error::PrefixClosed { sequence: 3, .. })),
        "{ready:?}"
    );
    bounded("the WAL to end", join).await.expect("join");
    let reader = ObjectStoreLogStore::open_read_only(store, config)
        .await
        .expect("a reader opens the fenced prefix");
    let ids: Vec<u64> = futures::TryStreamExt::try_collect::<Vec<_>>(
        futures::TryStreamExt::map_ok(reader.replay([(1, 0)]), |e| e.id),
    )
    .await
    .expect("replay");
    assert_eq!(ids, vec![first.parts[0].first_id]);
}
