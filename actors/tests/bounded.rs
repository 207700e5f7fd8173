//! Memory bounded by the live part of the log, through the actors: the catalog and the
//! watermarks follow the floor over a long run of obsolete appends while the reclaimer
//! deletes; region readers are capped and a retired region reads again in full; the
//! queue of requests waiting for an open, and the appends waiting for room under
//! `max_pending_bytes`, refuse with `Backpressure` at their bound, losing nothing.
//!
//! Counts are asserted, never times. The harness (`support/harness.rs`) says how the
//! tests wait.

mod support {
    pub mod harness;
    pub mod ledger;
}

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::format::entry_sequence;
use object_store_wal::internal::chain::catalog::STALE_SLACK;
use object_store_wal::testing::FaultStore;
use object_store_wal::{AppendParts, AppendReceipt, BackpressureLimit, Durability, Entry, Error};
use object_store_wal_actors::{spawn_wal, AppendRequest, WalHandle, WalMsg, WalStats};
use object_store_wal_actors::{MAX_QUEUED_REQUESTS, MAX_READERS};
use support::harness::*;
use support::ledger::{acked_entries, Ledger};
use tokio::task::JoinSet;

fn memory_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

fn one(region: u64, payload: Bytes) -> AppendParts {
    vec![(region, vec![payload])]
}

/// Asserts that `result` is the refusal of a full queue: `Backpressure` on the count
/// of queued requests, never written.
fn assert_queue_full<T: std::fmt::Debug>(result: &Result<T, Error>, what: &str) {
    match result {
        Err(e @ Error::Backpressure { limit, held, max }) => {
            assert_eq!(*limit, BackpressureLimit::QueuedRequests, "{what}");
            assert_eq!(*held, MAX_QUEUED_REQUESTS as u64, "{what}");
            assert_eq!(*max, MAX_QUEUED_REQUESTS as u64, "{what}");
            assert_eq!(e.durability(), Durability::NotWritten, "{what}");
        }
        other => panic!("{what}: expected Backpressure on the queue, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// 1. The catalog follows the floor
// ---------------------------------------------------------------------------------------

/// Appends to a new region every 4 objects; a region's entries are all declared obsolete
/// 8 appends after its last one. Over 600 objects the floor trails the chain end by a
/// few objects, and the catalog, the supervisor's watermarks and the keys in the store
/// stay bounded by that, not by the history; the live regions read in full, the dropped
/// ones read empty, have no last entry id any more, and take an obsolete harmlessly.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn catalog_and_watermarks_stay_bounded_by_the_live_part() {
    const APPENDS: u64 = 600;
    const PER_REGION: u64 = 4;
    const LAG: u64 = 8;
    let store = memory_store();
    let (wal, join) = spawn(&store, &config()).await;
    let mut acked: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    let mut most = WalStats::default();
    for i in 0..APPENDS {
        let region = i / PER_REGION;
        let parts = one(region, payload(format!("r{region}-{i}")));
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        acked
            .entry(region)
            .or_default()
            .extend(acked_entries(&parts, &receipt));
        if i >= LAG && (i - LAG) % PER_REGION == PER_REGION - 1 {
            wal.obsolete_all((i - LAG) / PER_REGION)
                .await
                .expect("obsolete_all");
        }
        let s = stats(&wal).await;
        // The live part: the floor is the first object of the oldest region not yet
        // declared obsolete, at most LAG + PER_REGION - 1 appends back; the catalog
        // holds the objects from there (and an idle keep-alive or two) and their regions.
        assert!(
            s.catalog_regions <= (LAG + PER_REGION) / PER_REGION + 1,
            "append {i}: {s:?}"
        );
        assert!(s.chain_objects <= LAG + PER_REGION + 4, "append {i}: {s:?}");
        assert!(
            s.watermarks <= 2 * s.catalog_regions + STALE_SLACK as u64 + 1,
            "append {i}: {s:?}"
        );
        most.watermarks = most.watermarks.max(s.watermarks);
    }
    let s = stats(&wal).await;
    assert!(s.objects >= APPENDS, "one object per append: {s:?}");
    let last_region = (APPENDS - 1) / PER_REGION;
    let obsoleted = (APPENDS - LAG) / PER_REGION;
    assert!(
        obsoleted > 2 * s.catalog_regions + STALE_SLACK as u64 + 1,
        "more regions were dropped than watermarks are kept: {s:?}"
    );
    assert!(most.watermarks <= 2 * (LAG / PER_REGION + 2) + STALE_SLACK as u64 + 1);
    // The reclaimer catches up: the store holds the live part only (tens of keys, not
    // the 600 objects written).
    let floor = s.floor;
    stats_until_virtual(&wal, "the reclaim", GRACE, |s| s.reclaimed_below >= floor).await;
    let (keys, _) = listing(&store).await;
    assert!(
        keys.iter().all(|k| *k >= floor) && keys.len() <= 40,
        "keys {keys:?}, floor {floor}"
    );

    let s = stats(&wal).await;
    for region in 0..=last_region {
        let got = read(&wal, region, 0).await;
        let last = wal.last_entry_id(region).await.expect("last_entry_id");
        let acked_last = acked[&region].last().map(|e| e.id);
        if region < obsoleted {
            // Declared obsolete: hidden. Below the floor: dropped from the catalog, and
            // an obsolete keeps nothing for it.
            assert!(got.is_empty(), "region {region}: {got:?}");
            let dropped = acked_last.is_some_and(|id| entry_sequence(id) < s.floor);
            assert_eq!(last, acked_last.filter(|_| !dropped), "region {region}");
            if dropped {
                let before = stats(&wal).await.watermarks;
                wal.obsolete(region, u64::MAX).await.expect("obsolete");
                assert_eq!(stats(&wal).await.watermarks, before, "region {region}");
            }
        } else {
            assert_eq!(ids(&got), ids(&acked[&region]), "region {region}");
            assert_eq!(last, acked_last, "region {region}");
        }
    }
    // A replay of every region from its first entry gives exactly the live regions.
    let from: Vec<(u64, u64)> = (0..=last_region).map(|r| (r, 0)).collect();
    let replayed = collect(wal.replay(from).await.expect("replay")).await;
    let mut by_region: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    for e in replayed {
        by_region.entry(e.region).or_default().push(e);
    }
    let live: Vec<u64> = (obsoleted..=last_region).collect();
    assert_eq!(by_region.keys().copied().collect::<Vec<_>>(), live);
    for (region, got) in &by_region {
        assert_eq!(ids(got), ids(&acked[region]), "region {region} replayed");
    }
    stop(wal, join).await;
}

// ---------------------------------------------------------------------------------------
// 2. Region readers are capped
// ---------------------------------------------------------------------------------------

/// Reads of more regions than `Config::max_readers` (8 here; [`MAX_READERS`] by default)
/// retire the least recently used readers; a read that was under way when its reader was
/// retired still yields everything, and a later read of the retired region starts a new
/// reader and yields every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_readers_are_retired_and_restart_on_demand() {
    let store = memory_store();
    assert_eq!(config_no_reclaim().max_readers, MAX_READERS);
    let config = config_no_reclaim().with_max_readers(8);
    let (wal, join) = spawn(&store, &config).await;
    let regions = 8 + 10;
    let mut acked: BTreeMap<u64, Vec<Entry>> = BTreeMap::new();
    for round in 0..3 {
        for region in 0..=regions {
            let parts = one(region, payload(format!("r{region}-{round}")));
            let receipt = wal.append_many(parts.clone()).await.expect("append");
            acked
                .entry(region)
                .or_default()
                .extend(acked_entries(&parts, &receipt));
        }
    }
    // A read of region 0 under way (not consumed yet) while its reader is retired.
    let under_way = wal.read(0, 0).await.expect("read region 0");
    for region in 1..=regions {
        assert_eq!(
            ids(&read(&wal, region, 0).await),
            ids(&acked[&region]),
            "region {region}"
        );
        let s = stats(&wal).await;
        assert!(s.readers <= 8, "{s:?}");
    }
    let s = stats(&wal).await;
    assert_eq!(s.readers, 8, "readers kept");
    assert_eq!(
        ids(&collect(under_way).await),
        ids(&acked[&0]),
        "the read under way"
    );
    // Region 0, the least recently read, was retired: read again, in full.
    assert_eq!(ids(&read(&wal, 0, 0).await), ids(&acked[&0]));
    assert_eq!(
        ids(&read(&wal, 0, acked[&0][1].id).await),
        ids(&acked[&0][1..])
    );
    let s = stats(&wal).await;
    assert_eq!(s.readers, 8, "{s:?}");
    assert_eq!(s.reads, regions + 3);
    stop(wal, join).await;
}

// ---------------------------------------------------------------------------------------
// 3. Queues refuse at their bound
// ---------------------------------------------------------------------------------------

/// While the open is held (its opening object's create does not answer), appends and
/// reads queue up to [`MAX_QUEUED_REQUESTS`]; the rest are refused with `Backpressure`
/// at once. Once the open finishes, every queued append is acknowledged, and a replay
/// holds exactly the acknowledged entries: none of the refused ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_during_an_open_are_bounded() {
    const EXTRA: usize = 50;
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let hold = faults.hold_creates_of(&key(1));
    let (wal, join) = spawn_wal(store.clone(), config_no_reclaim(), restart_policy())
        .await
        .expect("spawn");
    bounded("the opening create to be held", hold.wait_arrived(1)).await;
    let mut tasks = JoinSet::new();
    for k in 0..MAX_QUEUED_REQUESTS {
        let (wal, parts) = (wal.clone(), one((k % 16) as u64, payload(format!("q{k}"))));
        tasks.spawn(async move { (parts.clone(), wal.append_many(parts).await) });
    }
    stats_until(&wal, "the queue to fill", |s| {
        s.queued == MAX_QUEUED_REQUESTS as u64
    })
    .await;
    let mut ledger = Ledger::default();
    for k in 0..EXTRA {
        let parts = one((k % 16) as u64, payload(format!("refused{k}")));
        let result = bounded("a refusal", wal.append_many(parts.clone())).await;
        assert_queue_full(&result, "an append past the bound");
        ledger.record(parts, &result);
    }
    assert_queue_full(
        &bounded("a refusal", wal.read(3, 0)).await,
        "a read past the bound",
    );
    assert_queue_full(
        &bounded("a refusal", wal.replay(vec![(3, 0)])).await,
        "a replay past the bound",
    );
    assert_queue_full(
        &bounded("a refusal", wal.last_entry_id(3)).await,
        "a position past the bound",
    );
    assert_queue_full(
        &bounded("a refusal", wal.obsolete(3, 1)).await,
        "an obsolete past the bound",
    );
    let s = stats(&wal).await;
    assert_eq!(s.queued, MAX_QUEUED_REQUESTS as u64);
    assert_eq!(s.objects, 0);
    assert_eq!(s.failed_appends, EXTRA as u64);

    hold.release();
    while let Some(joined) = bounded("the queued appends", tasks.join_next()).await {
        let (parts, result) = joined.expect("an append task");
        assert!(result.is_ok(), "a queued append: {result:?}");
        ledger.record(parts, &result);
    }
    let s = stats(&wal).await;
    assert_eq!(s.queued, 0);
    assert_eq!(s.appends, MAX_QUEUED_REQUESTS as u64);
    let from: Vec<(u64, u64)> = (0..16).map(|r| (r, 0)).collect();
    let replayed = collect(wal.replay(from).await.expect("replay")).await;
    ledger.check(&replayed);
    assert_eq!(replayed.len(), MAX_QUEUED_REQUESTS);
    stop(wal, join).await;
}

/// Sends an append straight to the supervisor (in the caller's order) and returns where
/// its answer will come.
fn send(
    wal: &WalHandle,
    parts: AppendParts,
) -> ractor::concurrency::OneshotReceiver<Result<AppendReceipt, Error>> {
    let (tx, rx) = ractor::concurrency::oneshot();
    let request = AppendRequest::new(parts, tx.into());
    wal.actor()
        .cast(WalMsg::Append(request))
        .expect("the WAL takes messages");
    rx
}

/// With an upload held and `max_pending_bytes` reached, appends wait for room up to
/// [`MAX_QUEUED_REQUESTS`]; the next are refused with `Backpressure` (never written),
/// and once the upload is released every waiting append is acknowledged and replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_waiting_for_room_are_bounded() {
    const EXTRA: usize = 20;
    const ENTRY: usize = 64;
    let entry = |tag: String| {
        let mut v = tag.into_bytes();
        v.resize(ENTRY, b'.');
        Bytes::from(v)
    };
    let faults = FaultStore::new(memory_store());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let mut config = config_no_reclaim();
    config.max_entry_bytes = ENTRY as u64;
    config.max_pending_bytes = ENTRY as u64;
    let (wal, join) = spawn(&store, &config).await;
    let hold = faults.hold_creates_of(&key(2));
    let mut ledger = Ledger::default();
    // The first append fills max_pending_bytes; its object's create is held.
    let first = one(0, entry("first".into()));
    let first_answer = send(&wal, first.clone());
    bounded("the first create to be held", hold.wait_arrived(1)).await;
    // These wait for room, in order; the writer sees them before the ones below.
    let waiting: Vec<_> = (0..MAX_QUEUED_REQUESTS)
        .map(|k| {
            let parts = one((k % 16) as u64, entry(format!("w{k}")));
            (parts.clone(), send(&wal, parts))
        })
        .collect();
    let refused: Vec<_> = (0..EXTRA)
        .map(|k| {
            let parts = one(1, entry(format!("refused{k}")));
            (parts.clone(), send(&wal, parts))
        })
        .collect();
    for (parts, answer) in refused {
        let result = bounded("a refusal", answer).await.expect("an answer");
        assert_queue_full(&result, "an append past the bound of waiting appends");
        ledger.record(parts, &result);
    }
    assert_eq!(
        stats(&wal).await.objects,
        0,
        "nothing acknowledged while held"
    );
    hold.release();
    let result = bounded("the first append", first_answer)
        .await
        .expect("an answer");
    assert!(result.is_ok(), "{result:?}");
    ledger.record(first, &result);
    for (parts, answer) in waiting {
        let result = bounded("a waiting append", answer)
            .await
            .expect("an answer");
        assert!(result.is_ok(), "a waiting append: {result:?}");
        ledger.record(parts, &result);
    }
    let from: Vec<(u64, u64)> = (0..16).map(|r| (r, 0)).collect();
    let replayed = collect(wal.replay(from).await.expect("replay")).await;
    ledger.check(&replayed);
    assert_eq!(replayed.len(), MAX_QUEUED_REQUESTS + 1);
    stop(wal, join).await;
}
