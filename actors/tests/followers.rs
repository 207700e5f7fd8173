//! Followers through the actors across writer restarts: an in-process follower
//! ([`WalHandle::follow`]) sees each acknowledged entry once across a writer panic and
//! across an epoch that ended on an unknown outcome whose object landed; a read-only
//! follower on a second store handle sees each acknowledged entry once while the owner
//! writes, restarts its writer and is replaced, with one offset LIST per poll. Each
//! stream is checked against the [`Ledger`] of what the appenders were told. And a
//! damaged segment, met by `Replay`, `Follow` and `Read` only in its own region, under
//! each corrupt-segment policy.

mod support {
    pub mod harness;
    pub mod ledger;
}

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::internal::store::keys::parse_key;
use object_store_wal::internal::store::objects::HEADER_READ_BYTES;
use object_store_wal::testing::{CountingStore, CreateFault, FaultStore};
use object_store_wal::{
    AppendParts, Durability, Entry, EpochEndReason, Error, ObjectStoreLogStore,
};
use object_store_wal_actors::{EntryReceiver, WalHandle};
use support::harness::*;
use support::ledger::{acked_entries, Ledger};
use tokio::task::JoinHandle;

/// Receives from a follower until it has yielded `last`.
async fn follow_until(rx: &EntryReceiver, last: u64, got: &mut Vec<Entry>) {
    bounded("the follower to catch up", async {
        while got.last().is_none_or(|e| e.id < last) {
            let item = rx.recv_async().await.expect("the follower ended early");
            got.push(item.expect("a followed entry"));
        }
    })
    .await
}

async fn append_logged(wal: &WalHandle, ledger: &Mutex<Ledger>, parts: AppendParts) -> bool {
    let result = wal.append_many(parts.clone()).await;
    let ok = result.is_ok();
    ledger.lock().unwrap().record(parts, &result);
    ok
}

/// An in-process follower across a writer panic in the middle of concurrent appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_sees_each_acknowledged_entry_once_across_a_writer_panic() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config_no_reclaim();
    let (wal, join) = spawn(&store, &config).await;
    let rx = wal.follow(1, 0).await.expect("follow");
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    for i in 0..10 {
        let parts = vec![
            (1, vec![payload(format!("a{i}"))]),
            (2, vec![payload(format!("noise-a{i}"))]),
        ];
        assert!(append_logged(&wal, &ledger, parts).await);
    }
    let epoch = stats(&wal).await.epoch;

    // Concurrent appenders; the writer panics once some of them were acknowledged.
    let acks = Arc::new(AtomicUsize::new(0));
    let burst: Vec<JoinHandle<()>> = (0..3)
        .map(|t| {
            let (wal, ledger, acks) = (wal.clone(), ledger.clone(), acks.clone());
            tokio::spawn(async move {
                for i in 0..12 {
                    let parts = vec![(1, vec![payload(format!("b{t}-{i}"))])];
                    if append_logged(&wal, &ledger, parts).await {
                        acks.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    bounded("some burst acknowledgements", async {
        while acks.load(Ordering::SeqCst) < 6 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    wal.panic_writer();
    for h in burst {
        bounded("the burst", h).await.expect("appender");
    }
    let s = stats_until(&wal, "a new epoch", |s| s.restarts >= 1 && s.epoch > epoch).await;
    assert_eq!(s.restarts, 1);

    for i in 0..10 {
        let parts = vec![(1, vec![payload(format!("c{i}"))])];
        assert!(
            append_logged(&wal, &ledger, parts).await,
            "appends in the new epoch succeed"
        );
    }
    let ledger = Arc::try_unwrap(ledger).unwrap().into_inner().unwrap();
    let mut got = Vec::new();
    follow_until(&rx, ledger.last_acked(1), &mut got).await;
    ledger.check_follower(1, &got);

    // The stream ends with the WAL, with nothing more; and it held exactly the chain.
    stop(wal, join).await;
    let rest = collect(rx).await;
    assert!(rest.is_empty(), "entries after the last commit: {rest:?}");
    let (fresh, fresh_join) = spawn(&store, &config).await;
    assert_eq!(ids(&read(&fresh, 1, 0).await), ids(&got));
    stop(fresh, fresh_join).await;
}

/// An epoch that ends on an unknown create outcome whose object did land: the new epoch
/// replays it, and the follower sees its entry once, between the acknowledged ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_sees_a_landed_failed_append_once_across_an_epoch_end() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faults = FaultStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = faults.clone();
    let config = config_no_reclaim();
    let (wal, join) = spawn(&store, &config).await;
    let rx = wal.follow(1, 0).await.expect("follow");
    let ledger = Mutex::new(Ledger::default());
    let mut last_sequence = 1;
    for i in 0..5 {
        let parts = vec![(1, vec![payload(format!("a{i}"))])];
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        last_sequence = receipt.sequence;
        ledger.lock().unwrap().record(parts, &Ok(receipt));
    }
    // The next object's create reports an error but lands at the next store operation;
    // the two retries report errors too: the outcome stays unknown, the epoch ends.
    let epoch = stats(&wal).await.epoch;
    faults.fail_create_of(
        &key(last_sequence + 1),
        [
            CreateFault::LandLate(0),
            CreateFault::ErrorUnapplied,
            CreateFault::ErrorUnapplied,
        ],
    );
    let failed = vec![(1, vec![payload("landed-late")])];
    let result = wal.append_many(failed.clone()).await;
    match &result {
        Err(Error::EpochEnded {
            reason: EpochEndReason::UnknownOutcome,
            durability: Durability::MayBeDurable,
            ..
        }) => {}
        other => panic!("expected an unknown outcome: {other:?}"),
    }
    ledger.lock().unwrap().record(failed, &result);
    assert!(
        object_at(&inner, last_sequence + 1).await.is_some(),
        "it landed"
    );
    // Appends sent before the supervisor took the writer's end in may be refused
    // (`NotWritten`): wait for the new epoch.
    stats_until(&wal, "a new epoch", |s| s.epoch > epoch).await;
    for i in 0..5 {
        let parts = vec![(1, vec![payload(format!("c{i}"))])];
        assert!(append_logged(&wal, &ledger, parts).await);
    }
    assert!(stats(&wal).await.epoch > epoch);
    let ledger = ledger.into_inner().unwrap();
    let mut got = Vec::new();
    follow_until(&rx, ledger.last_acked(1), &mut got).await;
    ledger.check_follower(1, &got);
    assert_eq!(
        got.iter()
            .filter(|e| e.payload == payload("landed-late"))
            .count(),
        1,
        "the landed entry is followed once"
    );
    assert_eq!(got.len(), 11);
    stop(wal, join).await;
}

/// The writer hands each acknowledged object's entries of a region being read (followed,
/// or with a segment a read left in the cache) to the readers' tail: a read, a follow
/// and a re-read of them send no request to the store. With the cache off the same
/// reads fetch each segment (what the first half relies on being counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_at_the_tail_sends_no_request_to_the_store() {
    for cache in [true, false] {
        let counting = CountingStore::new(Arc::new(InMemory::new()));
        let store: Arc<dyn ObjectStore> = counting.clone();
        let mut config = config_no_reclaim();
        if !cache {
            config.segment_cache_bytes = 0;
            config.segment_cache_region_bytes = 0;
        }
        let (wal, join) = spawn(&store, &config).await;
        let mut region1 = Vec::new();
        let mut region2 = Vec::new();
        // Region 2 is followed from the start; region 1 is read once (one GET).
        let follow = wal.follow(2, 0).await.expect("follow");
        for i in 0..20 {
            if i == 1 {
                // From now on region 1 has a reader, which holds its tail.
                assert_eq!(read(&wal, 1, 0).await, region1);
            }
            let parts = vec![
                (1, vec![payload(format!("one-{i}"))]),
                (
                    2,
                    vec![payload(format!("two-{i}")), payload(format!("two-{i}b"))],
                ),
            ];
            let receipt = wal.append_many(parts.clone()).await.expect("append");
            for entry in acked_entries(&parts, &receipt) {
                if entry.region == 1 {
                    region1.push(entry);
                } else {
                    region2.push(entry);
                }
            }
        }
        counting.reset();
        assert_eq!(read(&wal, 1, 0).await, region1);
        let mut followed = Vec::new();
        follow_until(&follow, region2.last().unwrap().id, &mut followed).await;
        assert_eq!(followed, region2);
        assert_eq!(read(&wal, 1, 0).await, region1, "re-read");
        let gets = counting.counts().gets.load(Ordering::Relaxed);
        if cache {
            assert_eq!(gets, 0, "reads at the tail sent GETs");
        } else {
            // Each region-1 segment twice (read, re-read); the follower fetched region
            // 2's before the reset, or during it.
            assert!(gets >= 40, "{gets} GETs without the cache");
        }
        drop(follow);
        stop(wal, join).await;
    }
}

/// A read-only follower on a second store handle while the owner writes, restarts its
/// writer and is replaced by a fresh instance: each acknowledged entry once, in order;
/// no LIST after its start (it probes the next keys, DESIGN.md "Tailing without
/// listing"); each new object's tail found once and each of its region's segments read
/// once; idle, one GET a second.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_follower_probes_the_next_keys_without_listing() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config_no_reclaim();
    let (mut owner, mut join) = spawn(&inner, &config).await;
    let mut acked: Vec<Entry> = Vec::new();
    let mut tag = 0;
    let mut append = async |owner: &WalHandle, region: u64| {
        tag += 1;
        let parts = vec![(region, vec![payload(format!("r{region}-{tag}"))])];
        let receipt = owner.append_many(parts.clone()).await.expect("append");
        acked_entries(&parts, &receipt)
    };
    for _ in 0..4 {
        acked.extend(append(&owner, 1).await);
        append(&owner, 2).await;
    }

    let counting = CountingStore::new(inner.clone());
    let interval = Duration::from_millis(10);
    let follower = ObjectStoreLogStore::open_read_only(counting.clone(), config.clone())
        .await
        .expect("read-only open");
    // The follow recovers by itself (its one LIST): count from here.
    counting.reset();
    let (recovered, _) = listing(&inner).await;
    let mut stream = follower.follow(1, 0, interval);
    let mut got: Vec<Entry> = Vec::new();
    let mut catch_up = async |got: &mut Vec<Entry>, last: u64| {
        // Virtual time: the follower's polls move the clock; this bound only catches a
        // follower that stopped making progress.
        tokio::time::timeout(Duration::from_secs(60), async {
            while got.last().is_none_or(|e| e.id < last) {
                let item = stream.next().await.expect("the follower ended early");
                got.push(item.expect("a followed entry"));
            }
        })
        .await
        .expect("the follower to catch up");
    };
    catch_up(&mut got, acked.last().unwrap().id).await;

    for round in 0..6 {
        match round {
            2 => {
                // A new epoch in the same process.
                let epoch = stats(&owner).await.epoch;
                owner.panic_writer();
                stats_until_virtual(&owner, "a new epoch", Duration::from_millis(1), |s| {
                    s.epoch > epoch
                })
                .await;
            }
            4 => {
                // A new process.
                let (o, j) = spawn(&inner, &config).await;
                stop(
                    std::mem::replace(&mut owner, o),
                    std::mem::replace(&mut join, j),
                )
                .await;
            }
            _ => {}
        }
        for _ in 0..3 {
            acked.extend(append(&owner, 1).await);
            append(&owner, 2).await;
        }
        catch_up(&mut got, acked.last().unwrap().id).await;
    }
    assert_eq!(
        ids(&got),
        ids(&acked),
        "each acknowledged entry once, in order"
    );

    let counts = counting.counts();
    assert_eq!(
        counts.lists.load(Ordering::Relaxed),
        1,
        "one LIST, the follower's recovery at its start"
    );
    let (keys, _) = listing(&inner).await;
    let new_keys: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|k| !recovered.contains(k))
        .collect();
    // Each new key's tail (trailer and footer; these small objects whole) found once;
    // region 1's segments come out of those reads (a probe that read an object whole
    // keeps the followed regions' segments), so no segment GET; never a whole object.
    let mut tails: BTreeMap<u64, usize> = BTreeMap::new();
    let mut segments: BTreeMap<u64, usize> = BTreeMap::new();
    for g in counting.get_log() {
        let s = parse_key(&Path::from(PREFIX), &Path::from(g.key.as_str())).expect("a WAL key");
        if recovered.contains(&s) {
            // The follow's recovery at its start.
            continue;
        }
        let range = g.range.clone().expect("no whole-object GET");
        if range.end == u64::MAX {
            if g.found {
                *tails.entry(s).or_default() += 1;
            }
        } else if range == (0..HEADER_READ_BYTES) {
            // A probe's header read, beside its tail read while objects appear.
        } else {
            assert!(g.found, "a segment read of an absent key: {g:?}");
            *segments.entry(s).or_default() += 1;
        }
    }
    assert_eq!(tails.keys().copied().collect::<Vec<_>>(), new_keys);
    assert!(tails.values().all(|n| *n == 1), "{tails:?}");
    assert!(segments.is_empty(), "segment GETs: {segments:?}");

    // Idle: the polls back off to one a second, each one GET of the next key's tail.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (l0, g0) = (
        counts.lists.load(Ordering::Relaxed),
        counts.gets.load(Ordering::Relaxed),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_gets = counts.gets.load(Ordering::Relaxed) - g0;
    assert!(
        (9..=11).contains(&idle_gets),
        "{idle_gets} GETs in 10 idle seconds"
    );
    assert_eq!(counts.lists.load(Ordering::Relaxed), l0);
    assert_eq!(counts.heads.load(Ordering::Relaxed), 0);
    assert_eq!(counts.puts.load(Ordering::Relaxed), 0);
    // Backed off, it still follows, and backs off again: from the poll that found the
    // object, the waits double from `interval` to a second (7 polls), then one a
    // second, each one GET (and one found key's tail, header and segment).
    acked.extend(append(&owner, 1).await);
    catch_up(&mut got, acked.last().unwrap().id).await;
    assert_eq!(ids(&got), ids(&acked));
    let g0 = counts.gets.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let gets = counts.gets.load(Ordering::Relaxed) - g0;
    assert!(gets <= 20, "{gets} GETs in the 10 s after one object");
    drop(stream);
    stop(owner, join).await;
}

/// One item of an entry stream as text: `region:id:payload`, or the damaged segment its
/// `CorruptSegment` names. Any other error fails the test.
fn item(i: object_store_wal::Result<Entry>) -> String {
    match i {
        Ok(e) => format!(
            "{}:{}:{}",
            e.region,
            e.id,
            String::from_utf8(e.payload.to_vec()).expect("utf8")
        ),
        Err(Error::CorruptSegment { key, region, .. }) => format!("damaged {key} region {region}"),
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

/// `n` items of a stream that does not end (a follow).
async fn take_items(rx: &EntryReceiver, n: usize) -> Vec<String> {
    bounded("the follower's items", async {
        let mut got = Vec::new();
        while got.len() < n {
            got.push(item(rx.recv_async().await.expect("the follow ended early")));
        }
        got
    })
    .await
}

/// Every item of a stream until it ends.
async fn all_items(rx: EntryReceiver) -> Vec<String> {
    bounded("the stream to end", async {
        let mut got = Vec::new();
        while let Ok(i) = rx.recv_async().await {
            got.push(item(i));
        }
        got
    })
    .await
}

/// A byte flipped inside region 2's segment of one object: the actors' recovery opens
/// and counts it, and `Replay`, `Follow` and `Read` meet it only in region 2, where
/// `Skip` reports the hole and goes on and `Fail` ends that region's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_segment_fails_only_its_region_in_replay_follow_and_read() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut skip = config_no_reclaim();
    skip.corrupt_segment_policy = object_store_wal::CorruptSegmentPolicy::Skip;
    let (wal, join) = spawn(&store, &skip).await;
    let mut seqs = Vec::new();
    for o in 0..3 {
        let parts = vec![
            (1, vec![payload(format!("a{o}"))]),
            (2, vec![payload(format!("b{o}"))]),
        ];
        seqs.push(wal.append_many(parts).await.expect("append").sequence);
    }
    stop(wal, join).await;
    let bytes = object_at(&store, seqs[1]).await.expect("object");
    let summary = object_store_wal::format::decode_object_summary(&bytes).expect("intact");
    let record = summary.footer.records[1];
    assert_eq!(record.region, 2);
    let mut damaged = bytes.to_vec();
    damaged[record.offset as usize + 4] ^= 0x01;
    store
        .put(&key(seqs[1]), damaged.into())
        .await
        .expect("put the damaged object");

    let at = |region: u64, o: usize| {
        let tag = if region == 1 { "a" } else { "b" };
        format!(
            "{region}:{}:{tag}{o}",
            object_store_wal::entry_id(seqs[o], 0)
        )
    };
    let hole = format!("damaged {} region 2", key(seqs[1]));

    // Skip: the open succeeds over the damage and counts it.
    let (wal, join) = spawn(&store, &skip).await;
    assert_eq!(stats(&wal).await.damaged_segments, 1);
    let replayed = all_items(wal.replay(vec![(1, 0), (2, 0)]).await.expect("replay")).await;
    let every = vec![
        at(1, 0),
        at(2, 0),
        at(1, 1),
        hole.clone(),
        at(1, 2),
        at(2, 2),
    ];
    assert_eq!(replayed, every);
    let follow = wal.follow(2, 0).await.expect("follow");
    assert_eq!(
        take_items(&follow, 3).await,
        vec![at(2, 0), hole.clone(), at(2, 2)]
    );
    let receipt = wal
        .append_many(vec![(2, vec![payload("b3")])])
        .await
        .expect("append");
    let next = format!("2:{}:b3", object_store_wal::entry_id(receipt.sequence, 0));
    assert_eq!(take_items(&follow, 1).await, vec![next.clone()]);
    let read = all_items(wal.read(2, 0).await.expect("read")).await;
    assert_eq!(read, vec![at(2, 0), hole.clone(), at(2, 2), next]);
    // Recovery, the replay, the follow and the read each met it once.
    assert_eq!(stats(&wal).await.damaged_segments, 4);
    drop(follow);
    stop(wal, join).await;

    // Fail: region 2 ends at the hole; region 1 replays in full.
    let fail = config_no_reclaim();
    let (wal, join) = spawn(&store, &fail).await;
    let replayed = all_items(wal.replay(vec![(1, 0), (2, 0)]).await.expect("replay")).await;
    assert_eq!(
        replayed,
        vec![at(1, 0), at(2, 0), at(1, 1), hole.clone(), at(1, 2)]
    );
    let followed = all_items(wal.follow(2, 0).await.expect("follow")).await;
    assert_eq!(followed, vec![at(2, 0), hole.clone()]);
    let read = all_items(wal.read(2, 0).await.expect("read")).await;
    assert_eq!(read, vec![at(2, 0), hole]);
    let read = all_items(wal.read(1, 0).await.expect("read")).await;
    assert_eq!(read, vec![at(1, 0), at(1, 1), at(1, 2)]);
    stop(wal, join).await;
}

/// A read-only follow's tasks (its read-ahead and the poller that probes beside it) end
/// once its stream is dropped.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_dropped_read_only_follow_leaves_no_task() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config_no_reclaim();
    let (owner, join) = spawn(&inner, &config).await;
    owner.append(1, vec![payload("e")]).await.expect("append");
    stop(owner, join).await;

    let follower = ObjectStoreLogStore::open_read_only(inner.clone(), config.clone())
        .await
        .expect("read-only open");
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    let mut stream = follower.follow(1, 0, Duration::from_millis(10));
    let first = stream.next().await.expect("an item").expect("an entry");
    assert_eq!(first.payload, payload("e"));
    assert!(tasks() > before, "the follow runs in tasks");
    drop(stream);
    tokio::time::timeout(Duration::from_secs(60), async {
        while tasks() > before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the follow's tasks end");
}

/// All followers of a region share one fetch per segment: three follows started at
/// once from the first id of a region nobody read while it was written (so nothing of it
/// is in memory) cost one GET per segment together. The GETs take 20 ms (virtual time),
/// so without shared fetches the three would each send one for the first segments.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn followers_of_a_region_share_one_fetch_per_segment() {
    let counting = CountingStore::new(object_store_wal::testing::with_latency(
        Arc::new(InMemory::new()),
        Duration::ZERO,
        Duration::from_millis(20),
    ));
    let store: Arc<dyn ObjectStore> = counting.clone();
    let (wal, join) = spawn(&store, &config_no_reclaim()).await;
    let mut region1 = Vec::new();
    for i in 0..30 {
        let parts = vec![
            (1, vec![payload(format!("one-{i}"))]),
            (2, vec![payload(format!("two-{i}"))]),
        ];
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        region1.extend(
            acked_entries(&parts, &receipt)
                .into_iter()
                .filter(|e| e.region == 1),
        );
    }
    let last = region1.last().expect("entries").id;
    counting.reset();
    let mut follows = Vec::new();
    for _ in 0..3 {
        follows.push(wal.follow(1, 0).await.expect("follow"));
    }
    let followed = futures::future::join_all(follows.iter().map(|rx| async move {
        let mut got = Vec::new();
        follow_until(rx, last, &mut got).await;
        got
    }))
    .await;
    for got in followed {
        assert_eq!(got, region1);
    }
    assert_eq!(counting.counts().gets.load(Ordering::Relaxed), 30);
    drop(follows);
    stop(wal, join).await;
}

/// A region's reader holds its tail while it lives: after one read of a region, the
/// writer hands the reader every object of it, and a re-read of the last 1,000 objects
/// (1 KiB entries, within the default 4 MiB a region keeps) sends no GET.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_re_read_of_the_last_1000_objects_sends_no_get() {
    let counting = CountingStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = counting.clone();
    let (wal, join) = spawn(&store, &config_no_reclaim()).await;
    assert_eq!(read(&wal, 1, 0).await, Vec::new());
    let mut region1 = Vec::new();
    for i in 0..1000u32 {
        let mut entry = vec![0u8; 1024];
        entry[..4].copy_from_slice(&i.to_be_bytes());
        let parts = vec![
            (1, vec![bytes::Bytes::from(entry)]),
            (2, vec![payload(format!("two-{i}"))]),
        ];
        let receipt = wal.append_many(parts.clone()).await.expect("append");
        region1.extend(
            acked_entries(&parts, &receipt)
                .into_iter()
                .filter(|e| e.region == 1),
        );
    }
    counting.reset();
    assert_eq!(read(&wal, 1, 0).await, region1);
    assert_eq!(counting.counts().gets.load(Ordering::Relaxed), 0);
    stop(wal, join).await;
}

/// Appends one entry to each of regions 1 to 40 (`entry(region)`), as one object: what
/// was acknowledged.
async fn append_40_regions(owner: &WalHandle, entry: impl Fn(u64) -> bytes::Bytes) -> Vec<Entry> {
    let parts: Vec<(u64, Vec<bytes::Bytes>)> = (1..=40).map(|r| (r, vec![entry(r)])).collect();
    let receipt = owner.append_many(parts.clone()).await.expect("append");
    acked_entries(&parts, &receipt)
}

/// A source log over `store` keeping `regions` alone, polled every 10 ms.
async fn source_log(
    store: Arc<dyn ObjectStore>,
    config: &object_store_wal::Config,
    regions: &[u64],
) -> object_store_wal::SourceLog {
    object_store_wal::SourceLog::open_stores_regions(
        store,
        config.clone(),
        Duration::from_millis(10),
        regions.iter().copied(),
    )
    .await
    .expect("open the source log")
}

/// Takes `region`'s entries from `stream` through the last acknowledged (virtual time:
/// the bound only catches a follow that stopped making progress) and checks them
/// against `acked`.
async fn follow_through(
    stream: &mut futures::stream::BoxStream<'static, object_store_wal::Result<Entry>>,
    region: u64,
    acked: &[Entry],
) {
    let want: Vec<Entry> = acked
        .iter()
        .filter(|e| e.region == region)
        .cloned()
        .collect();
    let last = want.last().expect("entries of the region").id;
    let mut got: Vec<Entry> = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while got.last().is_none_or(|e| e.id < last) {
            let item = stream.next().await.expect("the follow ended early");
            got.push(item.expect("a followed entry"));
        }
    })
    .await
    .expect("the follow to catch up");
    assert_eq!(got, want, "region {region}");
}

/// The sequence of a GET's key.
fn sequence_of(key: &str) -> u64 {
    parse_key(&Path::from(PREFIX), &Path::from(key)).expect("a WAL key")
}

/// Eight read-only followers of one prefix in one process, through one `SourceLog`
/// opened for their regions, fetch each object the owner writes while they follow once
/// between them (its probe reads it whole: footer and every followed segment), where
/// each follower's own read-only open would read each footer eight times. The log keeps
/// only their regions' segments of the 40 regions in every object, and a follow of
/// another region fails `NotKept`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_only_followers_of_one_prefix_fetch_each_object_once() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config_no_reclaim();
    let (owner, join) = spawn(&inner, &config).await;
    let followed: Vec<u64> = (0..8).map(|i| 1 + i * 5).collect();
    let mut acked: Vec<Entry> = Vec::new();
    for round in 0..3 {
        acked.extend(append_40_regions(&owner, |r| payload(format!("r{r}-{round}"))).await);
    }
    let counting = CountingStore::new(inner.clone());
    let log = source_log(counting.clone(), &config, &followed).await;
    let (recovered, _) = listing(&inner).await;
    counting.reset();
    let mut streams: Vec<_> = followed.iter().map(|r| log.follow(*r, 0)).collect();
    for round in 3..13 {
        acked.extend(append_40_regions(&owner, |r| payload(format!("r{r}-{round}"))).await);
    }
    futures::future::join_all(
        streams
            .iter_mut()
            .zip(&followed)
            .map(|(stream, region)| follow_through(stream, *region, &acked)),
    )
    .await;

    // Each object written since the open: one GET between the eight followers.
    let (keys, _) = listing(&inner).await;
    let new_keys: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|k| !recovered.contains(k))
        .collect();
    assert_eq!(new_keys.len(), 10);
    let mut found: BTreeMap<u64, usize> = BTreeMap::new();
    for g in counting.get_log().into_iter().filter(|g| g.found) {
        *found.entry(sequence_of(&g.key)).or_default() += 1;
    }
    for key in &new_keys {
        assert_eq!(found.get(key), Some(&1), "GETs of object {key}: {found:?}");
    }

    // The catalog holds the followed regions' segments alone.
    {
        let catalog = log.catalog().read().unwrap_or_else(|p| p.into_inner());
        let mut kept: Vec<u64> = catalog.regions().collect();
        kept.sort_unstable();
        assert_eq!(kept, followed);
        assert_eq!(catalog.last_sequence(), keys.last().copied());
    }
    let mut other = log.follow(2, 0);
    assert!(
        matches!(other.next().await, Some(Err(Error::NotKept { region: 2 }))),
        "a region the log does not keep"
    );
    drop(streams);
    stop(owner, join).await;
}

/// A source log opened for a few regions' followers reads an object larger than 64 KiB
/// by its tail and the followed segments (ranged GETs), not whole: its followers of 2
/// regions of 40 (4 KiB entries, 160 KiB objects) read a small part of each object.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn followers_of_few_regions_read_large_objects_by_their_segments() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = config_no_reclaim();
    let (owner, join) = spawn(&inner, &config).await;
    let entry = |round: u8| move |r: u64| bytes::Bytes::from(vec![r as u8 ^ round; 4096]);
    let mut acked = append_40_regions(&owner, entry(0)).await;
    let counting = CountingStore::new(inner.clone());
    let log = source_log(counting.clone(), &config, &[1, 2]).await;
    let (recovered, _) = listing(&inner).await;
    counting.reset();
    let mut streams = [log.follow(1, 0), log.follow(2, 0)];
    for round in 1..6 {
        acked.extend(append_40_regions(&owner, entry(round)).await);
    }
    for (stream, region) in streams.iter_mut().zip([1, 2]) {
        follow_through(stream, region, &acked).await;
    }

    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    let mut listed = inner.list(Some(&Path::from(PREFIX)));
    while let Some(meta) = listed.next().await {
        let meta = meta.expect("list");
        sizes.insert(sequence_of(meta.location.as_ref()), meta.size);
    }
    let mut read: BTreeMap<u64, u64> = BTreeMap::new();
    for g in counting.get_log().into_iter().filter(|g| g.found) {
        let range = g.range.expect("no whole-object GET");
        *read.entry(sequence_of(&g.key)).or_default() += range.end - range.start;
    }
    let new: Vec<(u64, u64)> = sizes
        .into_iter()
        .filter(|(k, _)| !recovered.contains(k))
        .collect();
    assert_eq!(new.len(), 5);
    for (key, size) in new {
        let bytes = read.get(&key).copied().unwrap_or(0);
        assert!(size > 160_000, "object {key}: {size} bytes");
        assert!(
            bytes > 0 && bytes < size / 4,
            "object {key}: {bytes} of its {size} bytes read"
        );
    }
    drop(streams);
    stop(owner, join).await;
}
