//! A node whose prefix another node fenced for good (DESIGN.md "A node's regions after
//! it died"): the runtime never reopens over a closed opening object. A zombie (cut off
//! from its coordinator, still reaching the store) whose epoch ends meets the closed
//! object at its reopen and ends for good with `PrefixClosed`, acknowledging nothing
//! more; what it acknowledged is on the fenced chain, which a reader still reads.
//! After a fence the prefix's regions are taken over: each new owner acquires above
//! the fence's answer with its pieces, catches up from the fenced chain (never
//! waiting for it to grow) and replays the region's whole history.

mod support {
    pub mod harness;
}

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{decode_header, encode_object, Header, Link};
use object_store_wal::internal::fence::{retire_after, retire_at};
use object_store_wal::testing::{CreateFault, FaultStore};
use object_store_wal::{fence, holdings_of, Durability, Error, ObjectStoreLogStore, Piece};
use object_store_wal_actors::{spawn_wal, WalHandle};
use support::harness::{
    back_at_the_first_owner, bounded, config_no_reclaim, first_id_of, key, payload, restart_policy,
    spawn, stop,
};

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

/// The configuration of node `name` (its prefix), reclaiming nothing.
fn node(name: &str) -> object_store_wal::Config {
    let mut config = config_no_reclaim();
    config.prefix = name.into();
    config
}

/// The ids of what a stream of entries delivered, or its error.
async fn ids_of(
    stream: object_store_wal_actors::EntryStream,
) -> Result<Vec<u64>, object_store_wal::Error> {
    bounded("the entries", stream.collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|e| e.map(|e| e.id))
        .collect()
}

/// Node A holds regions 1 and 2, region 3 it released to B, and region 5 it acquired
/// from X with X's piece. While A still runs (a zombie), C fences A's prefix: the
/// answer lists regions 1, 2 and 5 (not the released 3) with their ids on the fenced
/// chain and region 5's earlier piece. B takes them over: it acquires each above the
/// answer with the pieces, catches each up from the fenced chain exactly (through an
/// id that is not there it fails `NotOnChain` at once, though its deadline is an
/// hour), and replays each region's whole history, X's piece, A's, then its own. A
/// acknowledges nothing after the fence. A's prefix is retired only once B flushed
/// past A's pieces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_nodes_regions_are_taken_over_with_every_entry() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let within = Duration::from_secs(3600);
    let (x, join_x) = spawn(&store, &node("node-x")).await;
    let on_x = bounded("an append", x.append(5, vec![payload("x5")]))
        .await
        .expect("append");
    let released_x = bounded("a release", x.release(5)).await.expect("released");
    stop(x, join_x).await;
    let piece_x = Piece {
        prefix: "node-x".into(),
        first_id: on_x.parts[0].first_id,
        last_id: released_x.last_id.expect("a last id"),
    };

    let (a, join_a) = spawn(&store, &node("node-a")).await;
    bounded(
        "the acquire",
        a.acquire_with_pieces(5, released_x.acquire_above, vec![piece_x.clone()]),
    )
    .await
    .expect("acquired");
    let mut on_a: Vec<Vec<u64>> = vec![Vec::new(); 6];
    for round in 0..2 {
        for region in [1u64, 2, 3, 5] {
            let receipt = bounded(
                "an append",
                a.append(region, vec![payload(format!("a{region}:{round}"))]),
            )
            .await
            .expect("append");
            on_a[region as usize].push(receipt.parts[0].first_id);
        }
    }
    bounded("a release", a.release(3)).await.expect("released");

    let fenced = bounded("the fence", fence(store.clone(), &node("node-a")))
        .await
        .expect("fenced");
    assert!(fenced.wrote);
    let listed: Vec<u64> = fenced.regions.iter().map(|r| r.region).collect();
    assert_eq!(listed, vec![1, 2, 5], "region 3 was released, not owned");
    let released: Vec<(u64, Option<u64>)> = fenced
        .released
        .iter()
        .map(|r| (r.region, r.released.last_id))
        .collect();
    assert_eq!(released, vec![(3, Some(on_a[3][1]))], "listed apart");
    for r in &fenced.regions {
        let ids = &on_a[r.region as usize];
        assert_eq!(r.ids, Some((ids[0], ids[1])), "region {}", r.region);
        assert_eq!(r.released.last_id, Some(ids[1]));
        assert!(r.released.acquire_above > ids[1]);
    }
    assert_eq!(fenced.regions[2].pieces, vec![piece_x.clone()]);

    // The zombie acknowledges nothing more.
    match bounded("a late append", a.append(1, vec![payload("late")])).await {
        Err(Error::Fenced { .. }) => {}
        Err(e) => panic!("expected Fenced (its create met the fence's claim), got {e}"),
        Ok(receipt) => panic!("the zombie acknowledged {receipt:?} after the fence"),
    }

    let (b, join_b) = spawn(&store, &node("node-b")).await;
    for r in &fenced.regions {
        let caught = bounded(
            "a catch-up",
            b.catch_up_released(&fenced.prefix, r.region, 0, &r.released, within),
        )
        .await
        .expect("a catch-up");
        let caught = ids_of(caught).await.expect("caught up");
        assert_eq!(caught, on_a[r.region as usize]);
        bounded(
            "the acquire",
            b.acquire_with_pieces(
                r.region,
                r.released.acquire_above,
                r.pieces_with(&fenced.prefix),
            ),
        )
        .await
        .expect("acquired");
    }
    // An id the fenced chain does not hold: `NotOnChain` at once, no wait.
    let past = on_a[1][1] + 1;
    let caught = bounded(
        "a catch-up past the fence",
        b.catch_up(&fenced.prefix, 1, 0, past, within),
    )
    .await
    .expect("a catch-up");
    match ids_of(caught).await {
        Err(Error::NotOnChain {
            region: 1,
            id,
            found,
        }) => {
            assert_eq!((id, found), (past, Some(on_a[1][1])));
        }
        other => panic!("expected NotOnChain, got {other:?}"),
    }

    let own = bounded("an append at B", b.append(5, vec![payload("b5")]))
        .await
        .expect("append");
    assert!(own.parts[0].first_id > fenced.acquire_above);
    let history = history_ids(&b, 5, within).await;
    let mut expected = vec![piece_x.first_id];
    expected.extend(&on_a[5]);
    expected.push(own.parts[0].first_id);
    assert_eq!(history, expected);
    for region in [1u64, 2] {
        assert_eq!(history_ids(&b, region, within).await, on_a[region as usize]);
    }

    // What A's prefix holds, read-only: the fenced regions and the released one.
    let held = bounded("the holdings", holdings_of(store.clone(), &node("node-a")))
        .await
        .expect("holdings");
    assert_eq!(held.closed, Some(fenced.closed.sequence));
    let regions: Vec<(u64, bool)> = held
        .regions
        .iter()
        .map(|h| (h.region, h.released.is_some()))
        .collect();
    assert_eq!(regions, vec![(1, false), (2, false), (3, true), (5, false)]);

    // Retirement waits for B to flush past A's pieces (the grace passed, by the clock
    // it is given), then keeps only the tombstone.
    let later = std::time::SystemTime::now() + retire_after(&node("node-a"));
    let others = ["node-b".to_string(), "node-x".to_string()];
    let config_a = node("node-a");
    let retire = || retire_at(store.clone(), &config_a, &others, later);
    match bounded("a retirement", retire()).await {
        Err(Error::PieceStillNeeded { prefix, region, .. }) => {
            assert_eq!((prefix.as_str(), region), ("node-b", 1));
        }
        other => panic!("expected PieceStillNeeded, got {other:?}"),
    }
    for r in &fenced.regions {
        let last = r.released.last_id.expect("a last id");
        bounded("a flush", b.obsolete(r.region, last))
            .await
            .expect("obsolete");
    }
    bounded("an append", b.append(9, vec![payload("b9")]))
        .await
        .expect("append");
    let retired = bounded("a retirement", retire()).await.expect("retired");
    assert_eq!(retired.closed, fenced.closed.sequence);
    stop(b, join_b).await;
    let _ = bounded("the zombie to stop", a.stop()).await;
    let _ = bounded("the zombie's supervisor", join_a).await;
}

/// The ids of `region`'s whole history at `wal` (its pieces, then its own entries).
async fn history_ids(wal: &WalHandle, region: u64, within: Duration) -> Vec<u64> {
    let stream = bounded("a history", wal.read_history(region, 0, within))
        .await
        .expect("a history");
    ids_of(stream).await.expect("the history")
}

/// A region that came back to node A (A, then B, then A again) when A is fenced: A's own
/// piece is its current tenure only (its first tenure's ids are below the earlier
/// pieces, which name them), so the new owner C acquires with three pieces that do not
/// overlap and replays each entry once, in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_taken_back_before_the_fence_is_taken_over_by_tenure() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let within = Duration::from_secs(3600);
    let (a, join_a) = spawn(&store, &node("node-a")).await;
    let (b, join_b) = spawn(&store, &node("node-b")).await;
    let [piece_a, piece_b] = back_at_the_first_owner(&a, &b, 1).await;
    let (first, second) = (piece_a.first_id, piece_b.first_id);
    let third = first_id_of(&a, 1, "a2").await;

    let fenced = bounded("the fence", fence(store.clone(), &node("node-a")))
        .await
        .expect("fenced");
    let region = fenced
        .regions
        .iter()
        .find(|r| r.region == 1)
        .expect("region 1");
    assert_eq!(region.ids, Some((third, third)), "the current tenure only");
    let pieces = region.pieces_with(&fenced.prefix);
    assert_eq!(pieces.len(), 3);
    assert_eq!(pieces[2].first_id, third);

    let (c, join_c) = spawn(&store, &node("node-c")).await;
    bounded(
        "the acquire",
        c.acquire_with_pieces(1, region.released.acquire_above, pieces),
    )
    .await
    .expect("the pieces do not overlap");
    let fourth = first_id_of(&c, 1, "c3").await;
    let history = history_ids(&c, 1, within).await;
    assert_eq!(history, vec![first, second, third, fourth]);
    stop(c, join_c).await;
    stop(b, join_b).await;
    let _ = bounded("the zombie to stop", a.stop()).await;
    let _ = bounded("the zombie's supervisor", join_a).await;
}
