//! The two-stage acknowledgement: `append_admitted` answers at admission with final
//! ids and a `PendingReceipt` future; `durable_through` waits until every id up to one is
//! durable. The tests hold and fail creates with the fault store to put admission,
//! durability and failure apart, and check every id against the receipts and against
//! what a fresh instance replays.
//!
//! Nothing sleeps: a test waits for a create to reach a hold, an object to appear, or
//! the writer's stats; a future that must not have resolved is polled once
//! (`futures::poll!`) at a moment when resolving would be wrong (its create is held).

mod support {
    pub mod harness;
    pub mod ledger;
}

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::format::{decode_header, entry_id, Header};
use object_store_wal::internal::write::batch::object_len;
use object_store_wal::testing::{CreateFault, FaultStore};
use object_store_wal::{
    AppendParts, AppendReceipt, Config, Durability, Entry, EpochEndReason, Error, HedgeAfter,
};
use object_store_wal_actors::{Admitted, WalHandle};

use support::harness::{
    bounded, config_no_reclaim, ids, key, object_at, spawn, stats, stats_until, stop,
};
use support::ledger::{acked_entries, Ledger};

/// Payload bytes of every entry here, so that objects fill predictably.
const ENTRY: usize = 100;

/// Real time, no reclaiming, no hedging (every create of a key is one attempt the
/// holds count), at most one upload at a time: while the create of 2 is held, later
/// appends gather in the open batch.
fn config() -> Config {
    let mut c = config_no_reclaim().with_hedge_after(HedgeAfter::Off);
    c.max_in_flight = 1;
    c.max_entry_bytes = 128;
    c
}

/// An entry of exactly [`ENTRY`] bytes that starts with `tag`.
fn entry(tag: &str) -> Bytes {
    let mut v = tag.as_bytes().to_vec();
    v.resize(ENTRY, b'.');
    Bytes::from(v)
}

fn memory() -> (Arc<FaultStore>, Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    (faults, store)
}

/// Whether `f` is still pending (polls it once).
async fn pending<F: Future + Unpin>(f: &mut F) -> bool {
    futures::poll!(f).is_pending()
}

/// Admits `parts`, which must be admitted.
async fn admit(wal: &WalHandle, parts: &AppendParts) -> Admitted {
    bounded("an admission", wal.append_many_admitted(parts.clone()))
        .await
        .expect("admitted")
}

/// Waits for an admitted append's durability.
async fn durable(admitted: Admitted) -> Result<AppendReceipt, Error> {
    bounded("an append's durability", admitted.durable).await
}

fn first_id(ids: &AppendReceipt) -> u64 {
    ids.parts[0].first_id
}

/// Spawns a fresh WAL on the prefix, replays `regions` from their start, stops it.
async fn replay_fresh(store: &Arc<dyn ObjectStore>, regions: &[u64]) -> Vec<Entry> {
    let (wal, join) = spawn(store, &config()).await;
    let rx = wal
        .replay(regions.iter().map(|r| (*r, 0)).collect())
        .await
        .expect("replay");
    let entries = support::harness::collect(rx).await;
    stop(wal, join).await;
    entries
}

async fn header_at(store: &Arc<dyn ObjectStore>, sequence: u64) -> Header {
    let bytes = object_at(store, sequence)
        .await
        .unwrap_or_else(|| panic!("an object at {sequence}"));
    decode_header(&bytes).expect("a header")
}

/// The ids given at admission are the receipt's and the replay's, for appends that
/// share an object, span regions, and one that overflows the batch into the next
/// object (the writer seals the full batch first, then admits it at the next sequence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_given_at_admission_are_the_receipts_and_the_replayed_ids() {
    let (faults, store) = memory();
    let mut config = config();
    // Five entries in two regions fill an object but for 50 bytes: a sixth, of a third
    // region, does not fit.
    config.max_batch_bytes = object_len(5 * (4 + ENTRY as u64), 2) + 50;
    // An empty prefix: the opening object is 1, the first data object 2.
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;

    let appends: Vec<AppendParts> = vec![
        vec![(1, vec![entry("a")])],
        vec![(1, vec![entry("b1"), entry("b2")]), (2, vec![entry("b3")])],
        vec![(2, vec![entry("c")])],
        vec![(1, vec![entry("d")])],
        vec![(3, vec![entry("e")])],
    ];
    let mut admitted = vec![admit(&wal, &appends[0]).await];
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    for parts in &appends[1..] {
        admitted.push(admit(&wal, parts).await);
    }
    // Every id is known while nothing is durable.
    let given: Vec<AppendReceipt> = admitted.iter().map(|a| a.ids.clone()).collect();
    let part = |sequence, region, position, count| object_store_wal::RegionIds {
        region,
        first_id: entry_id(sequence, position),
        count,
    };
    let expected = vec![
        AppendReceipt {
            sequence: 2,
            parts: vec![part(2, 1, 0, 1)],
        },
        AppendReceipt {
            sequence: 3,
            parts: vec![part(3, 1, 0, 2), part(3, 2, 0, 1)],
        },
        AppendReceipt {
            sequence: 3,
            parts: vec![part(3, 2, 1, 1)],
        },
        AppendReceipt {
            sequence: 3,
            parts: vec![part(3, 1, 2, 1)],
        },
        AppendReceipt {
            sequence: 4,
            parts: vec![part(4, 3, 0, 1)],
        },
    ];
    assert_eq!(given, expected);
    assert_eq!(
        stats(&wal).await.objects,
        0,
        "nothing durable while 2 is held"
    );

    hold.release();
    let mut ledger = Ledger::default();
    for (parts, a) in appends.iter().zip(admitted) {
        let ids = a.ids.clone();
        let result = durable(a).await;
        assert_eq!(result.as_ref().ok(), Some(&ids), "the receipt has the ids");
        ledger.record(parts.clone(), &result);
    }
    stop(wal, join).await;

    let mut replayed = replay_fresh(&store, &[1, 2, 3]).await;
    ledger.check(&replayed);
    let mut from_admission: Vec<Entry> = appends
        .iter()
        .zip(&given)
        .flat_map(|(parts, ids)| acked_entries(parts, ids))
        .collect();
    let order = |e: &Entry| (e.region, e.id);
    from_admission.sort_by_key(order);
    replayed.sort_by_key(order);
    assert_eq!(ids(&replayed), ids(&from_admission));
}

/// Admission answers while the object's create is held: the durability future and a
/// barrier on its id stay pending until the create is let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_answers_while_the_create_is_held() {
    let (faults, store) = memory();
    let config = config();
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;

    let parts: AppendParts = vec![(7, vec![entry("held")])];
    let mut admitted = admit(&wal, &parts).await;
    assert_eq!(admitted.ids.sequence, 2);
    assert_eq!(first_id(&admitted.ids), entry_id(2, 0));
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let mut barrier = Box::pin(wal.durable_through(first_id(&admitted.ids)));
    assert!(pending(&mut admitted.durable).await, "durable while held");
    assert!(pending(&mut barrier).await, "the barrier passed while held");

    hold.release();
    let receipt = durable(admitted).await.expect("durable once released");
    assert_eq!(receipt.sequence, 2);
    bounded("the barrier", barrier)
        .await
        .expect("the barrier passes");
    stop(wal, join).await;
    let replayed = replay_fresh(&store, &[7]).await;
    assert_eq!(ids(&replayed), vec![(entry_id(2, 0), entry("held"))]);
}

/// Ids of an earlier instance's chain were never handed out by this WAL: a barrier on
/// one passes at once, even while this WAL's own first object is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_below_this_wals_ids_passes_at_once() {
    let (faults, store) = memory();
    let config = config();
    let (wal, join) = spawn(&store, &config).await;
    let receipt = wal
        .append(1, vec![entry("earlier")])
        .await
        .expect("durable");
    assert_eq!(receipt.sequence, 2);
    stop(wal, join).await;

    // The next instance: opening object 3, first data object 4 (held).
    let hold = faults.hold_creates_of(&key(4));
    let (wal, join) = spawn(&store, &config).await;
    let mut held = admit(&wal, &vec![(1, vec![entry("held")])]).await;
    assert_eq!(held.ids.sequence, 4);
    bounded("the create of 4 to be held", hold.wait_arrived(1)).await;
    bounded(
        "the barrier on the earlier id",
        wal.durable_through(entry_id(2, 0)),
    )
    .await
    .expect("nothing of this WAL's is below it");
    assert!(pending(&mut held.durable).await, "durable while held");
    hold.release();
    assert_eq!(durable(held).await.expect("durable").sequence, 4);
    stop(wal, join).await;
}

/// A barrier on an id of a later object waits for every earlier object, even when its
/// own object is already durable (acknowledgements go in sequence order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_on_a_later_object_waits_for_every_earlier_one() {
    let (faults, store) = memory();
    let mut config = config();
    config.max_in_flight = 4;
    let inner = faults.inner().clone();
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;

    let mut first = admit(&wal, &vec![(1, vec![entry("first")])]).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let mut second = admit(&wal, &vec![(2, vec![entry("second")])]).await;
    assert_eq!((first.ids.sequence, second.ids.sequence), (2, 3));
    // Object 3 is durable, and the writer handled its completion.
    bounded("object 3 to land", async {
        while object_at(&inner, 3).await.is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    stats_until(&wal, "the completion of 3 to be handled", |s| {
        s.in_flight == 1
    })
    .await;

    let mut on_second = Box::pin(wal.durable_through(first_id(&second.ids)));
    let mut on_everything = Box::pin(wal.durable_through(u64::MAX));
    assert!(pending(&mut on_second).await, "passed with 2 held");
    assert!(pending(&mut on_everything).await, "passed with 2 held");
    assert!(
        pending(&mut second.durable).await,
        "3 acknowledged before 2"
    );
    assert!(pending(&mut first.durable).await);

    hold.release();
    bounded("the barrier on 3", on_second)
        .await
        .expect("passes once 2 is durable");
    bounded("the barrier on everything", on_everything)
        .await
        .expect("passes once 2 is durable");
    assert_eq!(durable(first).await.expect("durable").sequence, 2);
    assert_eq!(durable(second).await.expect("durable").sequence, 3);
    stop(wal, join).await;
}

/// The create of 2 is held, then fails on every attempt without landing (the outcome
/// stays unknown): the epoch ends. The admitted append in 2 fails `MayBeDurable`, the
/// one admitted into the open batch (3) `NotWritten`; barriers on both fail
/// `MayBeDurable`. The next epoch writes above 3 (the absent 2 and 3 are claimed), so
/// none of those ids is given again, and neither append is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_create_fails_its_ids_which_are_never_reused_or_replayed() {
    let (faults, store) = memory();
    let config = config();
    let inner = faults.inner().clone();
    faults.fail_create_of(&key(2), [CreateFault::ErrorUnapplied; 3]);
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;
    let before = stats(&wal).await;

    let lost_parts: AppendParts = vec![(1, vec![entry("lost")])];
    let lost = admit(&wal, &lost_parts).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let unsent_parts: AppendParts = vec![(1, vec![entry("unsent")]), (2, vec![entry("u2")])];
    let unsent = admit(&wal, &unsent_parts).await;
    // A plain append in the same open batch: its ids are never handed out.
    let plain_parts: AppendParts = vec![(2, vec![entry("plain")])];
    let plain_wal = wal.clone();
    let plain = tokio::spawn({
        let parts = plain_parts.clone();
        async move { plain_wal.append_many(parts).await }
    });
    assert_eq!((lost.ids.sequence, unsent.ids.sequence), (2, 3));
    // Admitted too: four entries pending.
    stats_until(&wal, "the plain append's admission", |s| {
        s.pending_bytes == 4 * ENTRY as u64
    })
    .await;
    let mut barrier_lost = Box::pin(wal.durable_through(first_id(&lost.ids)));
    assert!(pending(&mut barrier_lost).await, "passed with 2 held");

    hold.release();
    let mut ledger = Ledger::default();
    let result = durable(lost).await;
    match &result {
        Err(Error::EpochEnded {
            sequence: 2,
            reason: EpochEndReason::UnknownOutcome,
            durability: Durability::MayBeDurable,
            ..
        }) => {}
        other => panic!("the append whose create failed got {other:?}"),
    }
    ledger.record(lost_parts, &result);
    let unsent_ids = unsent.ids.clone();
    let result = durable(unsent).await;
    match &result {
        Err(e @ Error::EpochEnded { .. }) => assert_eq!(e.durability(), Durability::NotWritten),
        other => panic!("the append in the open batch got {other:?}"),
    }
    ledger.record(unsent_parts, &result);
    let result = bounded("the plain append", plain).await.expect("join");
    assert_eq!(
        result.as_ref().err().map(Error::durability),
        Some(Durability::NotWritten)
    );
    ledger.record(plain_parts, &result);

    for (what, barrier) in [
        ("2", bounded("the barrier on 2", barrier_lost).await),
        (
            "3",
            bounded(
                "the barrier on 3",
                wal.durable_through(first_id(&unsent_ids)),
            )
            .await,
        ),
    ] {
        match barrier {
            Err(Error::EpochEnded {
                sequence: 2,
                durability: Durability::MayBeDurable,
                ..
            }) => {}
            other => panic!("the barrier on {what} got {other:?}"),
        }
    }

    // The next epoch: claims at 2 and 3, the opening object at 4, the first data at 5.
    let after = stats_until(&wal, "a new epoch", |s| s.epoch > before.epoch).await;
    let next_parts: AppendParts = vec![(1, vec![entry("next")]), (2, vec![entry("n2")])];
    let next = admit(&wal, &next_parts).await;
    assert_eq!(next.ids.sequence, 5, "written above every id handed out");
    let result = durable(next).await;
    assert_eq!(result.as_ref().map(|r| r.sequence).ok(), Some(5));
    ledger.record(next_parts, &result);
    for sequence in [2, 3] {
        let h = header_at(&inner, sequence).await;
        assert!(h.claim, "{sequence} is a claim");
        assert_eq!(h.epoch, after.epoch);
    }
    let opening = header_at(&inner, 4).await;
    assert_eq!((opening.claim, opening.epoch), (false, after.epoch));
    // A failure is permanent: the barrier on a later id still reports it.
    match wal.durable_through(entry_id(5, 0)).await {
        Err(e) => assert_eq!(e.durability(), Durability::MayBeDurable),
        Ok(()) => panic!("the barrier above a failed id passed"),
    }
    stop(wal, join).await;

    let replayed = replay_fresh(&store, &[1, 2]).await;
    assert_eq!(
        ledger.check(&replayed),
        vec![false],
        "the lost append never landed"
    );
    let mut got = ids(&replayed);
    got.sort();
    assert_eq!(
        got,
        vec![
            (entry_id(5, 0), entry("n2")),
            (entry_id(5, 0), entry("next"))
        ]
    );
}

/// A stop drops the open batch unsent: its admitted append fails `NotWritten`, and so
/// does a barrier on its id (nothing below it failed), while a barrier on the held
/// object below waits for it and passes once it is durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_fails_the_open_batch_not_written() {
    let (faults, store) = memory();
    let config = config();
    let hold = faults.hold_creates_of(&key(2));
    let (wal, join) = spawn(&store, &config).await;

    let kept_parts: AppendParts = vec![(1, vec![entry("kept")])];
    let kept = admit(&wal, &kept_parts).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let dropped_parts: AppendParts = vec![(1, vec![entry("dropped")])];
    let dropped = admit(&wal, &dropped_parts).await;
    assert_eq!((kept.ids.sequence, dropped.ids.sequence), (2, 3));
    let dropped_id = first_id(&dropped.ids);
    let stopping = tokio::spawn({
        let wal = wal.clone();
        async move { wal.stop().await }
    });

    let mut ledger = Ledger::default();
    let result = durable(dropped).await;
    match &result {
        Err(e @ Error::Stopped { .. }) => assert_eq!(e.durability(), Durability::NotWritten),
        other => panic!("the append in the open batch got {other:?}"),
    }
    ledger.record(dropped_parts, &result);
    match bounded("the barrier on 3", wal.durable_through(dropped_id)).await {
        Err(e @ Error::Stopped { .. }) => assert_eq!(e.durability(), Durability::NotWritten),
        other => panic!("the barrier on 3 got {other:?}"),
    }
    let mut on_kept = pin!(wal.durable_through(first_id(&kept.ids)));
    assert!(pending(&mut on_kept).await, "passed with 2 held");

    hold.release();
    bounded("the barrier on 2", on_kept)
        .await
        .expect("2 is durable");
    let result = durable(kept).await;
    assert_eq!(result.as_ref().map(|r| r.sequence).ok(), Some(2));
    ledger.record(kept_parts, &result);
    bounded("the stop", stopping)
        .await
        .expect("join")
        .expect("stopped");
    bounded("the WAL to end", join).await.expect("join");

    let replayed = replay_fresh(&store, &[1]).await;
    ledger.check(&replayed);
    assert_eq!(ids(&replayed), vec![(entry_id(2, 0), entry("kept"))]);
}

/// A writer that panics with an object in flight and ids in the open batch: both
/// appends and the barrier fail `WriterFailed` (`MayBeDurable`), the new epoch writes
/// above their sequences, and neither is replayed (the held create meets the claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicked_writer_fails_the_barrier_and_its_ids_are_not_reused() {
    let (faults, store) = memory();
    let config = config();
    // Only the writer's create of 2 is held: the next open's claim of 2 goes through.
    let hold = faults.hold_next_creates_of(&key(2), 1);
    let (wal, join) = spawn(&store, &config).await;
    let before = stats(&wal).await;

    let in_flight_parts: AppendParts = vec![(1, vec![entry("in-flight")])];
    let in_flight = admit(&wal, &in_flight_parts).await;
    bounded("the create of 2 to be held", hold.wait_arrived(1)).await;
    let batched_parts: AppendParts = vec![(1, vec![entry("batched")])];
    let batched = admit(&wal, &batched_parts).await;
    assert_eq!((in_flight.ids.sequence, batched.ids.sequence), (2, 3));
    let batched_id = first_id(&batched.ids);
    wal.panic_writer();

    let mut ledger = Ledger::default();
    for (parts, admitted) in [(in_flight_parts, in_flight), (batched_parts, batched)] {
        let result = durable(admitted).await;
        match &result {
            Err(Error::WriterFailed {
                durability: Durability::MayBeDurable,
            }) => {}
            other => panic!("an append of the panicked writer got {other:?}"),
        }
        ledger.record(parts, &result);
    }
    match bounded("the barrier on 3", wal.durable_through(batched_id)).await {
        Err(Error::WriterFailed {
            durability: Durability::MayBeDurable,
        }) => {}
        other => panic!("the barrier on 3 got {other:?}"),
    }

    stats_until(&wal, "a new epoch", |s| s.epoch > before.epoch).await;
    let next_parts: AppendParts = vec![(1, vec![entry("next")])];
    let next = admit(&wal, &next_parts).await;
    assert_eq!(
        next.ids.sequence, 5,
        "claims 2 and 3, opening 4, data above"
    );
    let result = durable(next).await;
    ledger.record(next_parts, &result);
    // The panicked writer's upload task ended with it: the held create of 2 was
    // dropped where it waited and never reaches the store.
    bounded("the held create to be dropped", hold.wait_abandoned(1)).await;
    hold.release();
    assert_eq!(hold.finished(), 0);
    stop(wal, join).await;

    let replayed = replay_fresh(&store, &[1]).await;
    assert_eq!(ledger.check(&replayed), vec![false, false]);
    assert_eq!(ids(&replayed), vec![(entry_id(5, 0), entry("next"))]);
}

/// On a prefix whose objects carry an id offset (FORMAT.md version 3), the runtime's
/// epoch counts its ids from above it: admission, receipts and the replay agree on ids
/// `(sequence + 90) << 20 | position`, and barriers name objects by those ids: one on
/// object 3's id passes while 4 is held (`3 + 90` is far above the sequence 4), one on
/// object 4's waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_and_barriers_follow_the_id_offset() {
    let (faults, store) = memory();
    let inner = faults.inner().clone();
    let raised = Header {
        sequence: 1,
        epoch: 1,
        link: object_store_wal::format::Link::NONE,
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 90,
    };
    let object =
        object_store_wal::format::encode_object(&raised, std::iter::empty()).expect("encodes");
    inner
        .put(&key(1), object.to_bytes().into())
        .await
        .expect("put");
    // The opening object is 2; the first data object 3.
    let hold = faults.hold_creates_of(&key(4));
    let (wal, join) = spawn(&store, &config()).await;
    assert_eq!(header_at(&inner, 2).await.id_offset, 90);

    let first = admit(&wal, &vec![(1, vec![entry("first")])]).await;
    assert_eq!(first.ids.sequence, 3);
    assert_eq!(first_id(&first.ids), entry_id(93, 0));
    let first_ids = first.ids.clone();
    assert_eq!(durable(first).await.expect("durable"), first_ids);
    let mut second = admit(&wal, &vec![(1, vec![entry("second")])]).await;
    assert_eq!(second.ids.sequence, 4);
    assert_eq!(first_id(&second.ids), entry_id(94, 0));
    bounded("the create of 4 to be held", hold.wait_arrived(1)).await;

    bounded(
        "the barrier on 3",
        wal.durable_through(first_id(&first_ids)),
    )
    .await
    .expect("3 is durable");
    let mut on_second = Box::pin(wal.durable_through(first_id(&second.ids)));
    assert!(pending(&mut on_second).await, "passed with 4 held");
    assert!(pending(&mut second.durable).await);
    hold.release();
    bounded("the barrier on 4", on_second)
        .await
        .expect("passes once 4 is durable");
    assert_eq!(durable(second).await.expect("durable").sequence, 4);
    stop(wal, join).await;

    let replayed = replay_fresh(&store, &[1]).await;
    let replayed: Vec<u64> = replayed.iter().map(|e| e.id).collect();
    assert_eq!(replayed, vec![entry_id(93, 0), entry_id(94, 0)]);
}
