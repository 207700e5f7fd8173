//! Metrics of the core, rendered by a Prometheus recorder (`crate::metrics`): every
//! request is counted once, by op and outcome, and the counts equal what the store
//! received; the sequential front end's acknowledgements, latencies and positions.
//!
//! The recorder is process-global, so this binary installs one for all its tests; each
//! test has its own prefix, which every metric carries as a label. The actor runtime's
//! metrics, scraped over HTTP, are in `actors/tests/metrics.rs`.

#[path = "../actors/tests/support/scrape.rs"]
mod scrape;

#[path = "support/objects.rs"]
mod objects;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store_wal::format::EMPTY_OBJECT_LEN;
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::{CreateAttempt, CreateKind, WalIo};
use object_store_wal::internal::write::persist::{persist, PersistOutcome};
use object_store_wal::testing::{CountingStore, CreateFault, FaultStore};
use object_store_wal::{Config, Error, HedgeAfter, ObjectStoreLogStore, RetryPolicy};
use objects::object;
use scrape::Scrape;

/// The histograms' buckets, in seconds.
const BUCKETS: &[f64] = &[0.001, 0.01, 0.1, 1.0, 10.0];

/// The recorder of this binary, installed before any test opens a WAL (a WAL registers
/// its metrics when it opens).
fn recorder() -> &'static PrometheusHandle {
    static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();
    RECORDER.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("buckets")
            .install_recorder()
            .expect("the only recorder of this binary")
    })
}

/// Every outcome of `wal_requests_total`, driven one by one through a [`WalIo`] over a
/// fault store, counted by a [`CountingStore`] that sees what the WAL sends.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn every_request_is_counted_once_by_op_and_outcome() {
    const PREFIX: &str = "outcomes";
    let recorder = recorder();
    let key = |s| object_key(&Path::from(PREFIX), s);
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let counting = CountingStore::new(faults.clone());
    let io = WalIo::new(counting.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(
            HedgeAfter::Fixed(Duration::from_millis(30)),
            Duration::from_secs(1),
        );

    // put: ok, then conflict on the same key.
    assert!(matches!(
        io.create(&object(2), CreateKind::Claim).await,
        CreateAttempt::Created
    ));
    assert!(matches!(
        io.create(&object(2), CreateKind::Claim).await,
        CreateAttempt::AlreadyExists { found: None }
    ));
    // put: the first create of 3 stalls, its twin creates it (ok); the first, released,
    // finds the twin's object and counts as hedged.
    let hold = faults.hold_next_creates_of(&key(3), 1);
    assert!(matches!(
        io.create_hedged(&object(3)).await,
        CreateAttempt::Created
    ));
    hold.release();
    hold.wait_finished(1).await;
    // put: a create of 4 that never answers times out.
    let _hang = faults.hold_next_creates_of(&key(4), 1);
    match io.create(&object(4), CreateKind::Claim).await {
        CreateAttempt::Unknown(Error::RequestTimeout { op: "create", .. }) => {}
        other => panic!("expected a timed-out create, got {other:?}"),
    }
    // put: an error, retried with identical bytes (ok).
    faults.fail_next_creates([CreateFault::ErrorUnapplied]);
    let retry = RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(2));
    let outcome = persist(&io, &object(5), &retry).await;
    assert!(
        matches!(outcome, PersistOutcome::Durable { attempts: 2 }),
        "{outcome:?}"
    );
    // get, list: ok, then error.
    io.read_whole(2).await.expect("object 2");
    faults.fail_next_gets(1);
    assert!(io.read_whole(2).await.is_err(), "the GET fails");
    assert_eq!(io.list().await.expect("list").objects.len(), 3);
    faults.fail_next_lists(1);
    assert!(io.list().await.is_err(), "the LIST fails");
    // delete: ok.
    io.delete(2).await.expect("delete");

    // The hedged create's loser counted in its own task, in the poll that got its answer
    // (the one `hold.wait_finished` above waited for).
    let scrape = Scrape::of(&recorder.render(), PREFIX);
    let expected = [
        (
            "put",
            [
                ("ok", 3),
                ("conflict", 1),
                ("error", 1),
                ("hedged", 1),
                ("timed_out", 1),
            ],
        ),
        (
            "get",
            [
                ("ok", 1),
                ("conflict", 0),
                ("error", 1),
                ("hedged", 0),
                ("timed_out", 0),
            ],
        ),
        (
            "list",
            [
                ("ok", 1),
                ("conflict", 0),
                ("error", 1),
                ("hedged", 0),
                ("timed_out", 0),
            ],
        ),
        (
            "delete",
            [
                ("ok", 1),
                ("conflict", 0),
                ("error", 0),
                ("hedged", 0),
                ("timed_out", 0),
            ],
        ),
    ];
    for (op, outcomes) in expected {
        for (outcome, n) in outcomes {
            assert_eq!(scrape.requests(op, outcome), n, "{op} {outcome}");
        }
    }
    let counts = counting.counts();
    let store_saw = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(scrape.requests_of("put"), store_saw(&counts.puts));
    assert_eq!(scrape.requests_of("get"), store_saw(&counts.gets));
    assert_eq!(scrape.requests_of("list"), store_saw(&counts.lists));
    assert_eq!(scrape.requests_of("delete"), store_saw(&counts.deletes));
    assert_eq!(scrape.count("wal_create_retries_total"), 1);
}

/// The sequential front end: acknowledged objects, appends and entries, the latency
/// histograms' samples, the open, and the positions, against what the store received.
#[tokio::test]
async fn the_sequential_front_end_reports_what_it_acknowledged() {
    const PREFIX: &str = "sequential";
    let recorder = recorder();
    let counting = CountingStore::new(Arc::new(InMemory::new()));
    let mut wal = ObjectStoreLogStore::open(
        counting.clone(),
        Config::new(PREFIX).with_create_if_missing(true),
    )
    .await
    .expect("open");
    let entry = |s: &str| Bytes::from(s.to_string());
    wal.append(vec![(1, vec![entry("a"), entry("b")])])
        .expect("append");
    wal.append(vec![(2, vec![entry("c")])]).expect("append");
    wal.append(vec![(1, vec![entry("d")])]).expect("append");
    let first = wal.flush().await.expect("flush").expect("an object");
    wal.append(vec![(1, vec![entry("e")]), (2, vec![entry("f")])])
        .expect("append");
    wal.append(vec![(3, vec![entry("g")])]).expect("append");
    let second = wal.flush().await.expect("flush").expect("an object");
    assert_eq!((first.appends.len(), second.appends.len()), (3, 2));
    let read: Vec<Bytes> = wal
        .read(1, 0)
        .map(|e| e.expect("an entry").payload)
        .collect()
        .await;
    assert_eq!(read, vec![entry("a"), entry("b"), entry("d"), entry("e")]);

    let scrape = Scrape::of(&recorder.render(), PREFIX);
    let counts = counting.counts();
    let store_saw = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    for (op, n) in [
        ("put", store_saw(&counts.puts)),
        ("get", store_saw(&counts.gets)),
        ("list", store_saw(&counts.lists)),
        ("delete", store_saw(&counts.deletes)),
    ] {
        assert_eq!(scrape.requests_of(op), n, "{op}");
        assert_eq!(scrape.requests(op, "ok"), n, "every {op} succeeded");
    }
    // The opening object and the two flushed objects.
    assert_eq!(store_saw(&counts.puts), 3);
    assert_eq!(scrape.count("wal_objects_created_total"), 2);
    assert_eq!(
        scrape.count("wal_objects_created_bytes_total"),
        store_saw(&counts.put_bytes) - EMPTY_OBJECT_LEN as u64,
        "every byte sent but the opening object's"
    );
    assert_eq!(scrape.count("wal_appends_acknowledged_total"), 5);
    assert_eq!(scrape.count("wal_entries_acknowledged_total"), 7);
    assert_eq!(scrape.samples_of("wal_append_to_durable_seconds"), 5);
    assert_eq!(scrape.samples_of("wal_seal_to_durable_seconds"), 2);
    assert_eq!(scrape.samples_of("wal_recovery_duration_seconds"), 1);
    let position = wal.epoch().expect("a writer");
    assert_eq!(scrape.count("wal_epoch"), position.epoch);
    assert_eq!(scrape.count("wal_floor_sequence"), position.floor);
    // The floor rises as the actor runtime's does: the first flushed object carries
    // floor 2, above the opening object, which holds no entry.
    assert_eq!(position.floor, first.sequence);
    assert_eq!(
        scrape.count("wal_live_objects"),
        2,
        "the two flushed objects"
    );
    assert_eq!(scrape.count("wal_create_retries_total"), 0);
    assert_eq!(scrape.count("wal_damaged_segments_total"), 0);
}
