//! The actor runtime on the local object-store servers that `scripts/servers.sh start`
//! runs: moto (S3 API, `::s3`, feature `aws`) and Azurite (Azure Blob, `::azure`, feature
//! `azure`). The variants are `#[ignore]`d with their reason; `.ci/run` starts the
//! servers and runs them (`--include-ignored`), and there a server not named by its
//! environment variable (`WAL_TEST_S3`, `WAL_TEST_AZURE`) fails the test. Each test has a fresh key
//! space on the server.
//!
//! - Many regions append at once, the WAL stops, a fresh one replays exactly what was
//!   acknowledged, with the acknowledged ids, in order.
//! - The WAL is aborted (a crash) while appends are in flight: a fresh one replays every
//!   acknowledged entry once, each failed append whole or not at all.
//! - Two nodes on one prefix: the newer one fences the older, whose next append fails
//!   with `Fenced` and whose supervisor ends; the newer node's chain holds both nodes'
//!   acknowledged entries and nothing of the fenced append.
//!
//! Nothing sleeps to synchronize: tests wait for replies, counters (a watch channel) or
//! the supervisor's end, under a bound that only catches a hang.

#![cfg(any(feature = "aws", feature = "azure"))]

#[path = "../../tests/support/servers.rs"]
mod servers;
#[allow(dead_code)]
mod support {
    pub mod ledger;
}
use support::ledger::Ledger;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store_wal::format::entry_sequence;
use object_store_wal::{AppendParts, Config, Entry, Error, RetryPolicy};
use object_store_wal_actors::{spawn_wal, EntryReceiver, RestartPolicy, WalHandle};
use tokio::task::JoinHandle;

/// Runs each scenario on each server: `<name>::s3`, `<name>::azure`.
macro_rules! on_servers {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[cfg(feature = "aws")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs the S3-API server: WAL_TEST_S3 (scripts/servers.sh start; .ci/run runs it)"]
                async fn s3() {
                    let test = concat!("actors-", stringify!($name), "-s3");
                    super::$name(super::servers::server_store(super::servers::S3, test)).await
                }

                #[cfg(feature = "azure")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs Azurite: WAL_TEST_AZURE (scripts/servers.sh start; .ci/run runs it)"]
                async fn azure() {
                    let test = concat!("actors-", stringify!($name), "-azure");
                    super::$name(super::servers::server_store(super::servers::AZURE, test)).await
                }
            }
        )*
    };
}

on_servers!(
    many_regions_stop_and_replay,
    abort_while_appending_then_replay,
    older_node_is_fenced,
);

/// A safety bound on every wait: only a hang reaches it.
const BOUND: Duration = Duration::from_secs(60);

fn config() -> Config {
    let mut c = Config::new("wal").with_create_if_missing(true);
    c.retry = RetryPolicy::new(3, Duration::from_millis(5), Duration::from_millis(20));
    c
}

fn restart_policy() -> RestartPolicy {
    RestartPolicy::new(
        8,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(10),
    )
}

async fn spawn(store: &Arc<dyn ObjectStore>) -> (WalHandle, JoinHandle<()>) {
    spawn_wal(store.clone(), config(), restart_policy())
        .await
        .expect("spawn the WAL")
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

async fn collect(rx: EntryReceiver) -> Vec<Entry> {
    bounded("an entry stream to end", async {
        let mut entries = Vec::new();
        while let Ok(item) = rx.recv_async().await {
            entries.push(item.expect("a replayed entry"));
        }
        entries
    })
    .await
}

/// Spawns a fresh WAL on the prefix, replays `regions` from their start, and stops it.
async fn replay_fresh(store: &Arc<dyn ObjectStore>, regions: &[u64]) -> Vec<Entry> {
    let (wal, join) = spawn(store).await;
    let rx = wal
        .replay(regions.iter().map(|r| (*r, 0)).collect())
        .await
        .expect("replay");
    let entries = collect(rx).await;
    wal.stop().await.expect("stop");
    bounded("the replaying WAL to end", join)
        .await
        .expect("join");
    entries
}

fn payload(node: &str, region: u64, n: u64) -> Bytes {
    Bytes::from(format!("{node}/r{region}/{n}"))
}

fn of_region(entries: &[Entry], region: u64) -> Vec<(u64, Bytes)> {
    entries
        .iter()
        .filter(|e| e.region == region)
        .map(|e| (e.id, e.payload.clone()))
        .collect()
}

async fn many_regions_stop_and_replay(store: Arc<dyn ObjectStore>) {
    const REGIONS: u64 = 48;
    const APPENDS: u64 = 8;
    let (wal, join) = spawn(&store).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut tasks = Vec::new();
    for region in 1..=REGIONS {
        let wal = wal.clone();
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..APPENDS {
                // Every fourth append also writes to the next region: atomically, one object.
                let mut parts: AppendParts = vec![(
                    region,
                    vec![payload("a", region, 2 * n), payload("a", region, 2 * n + 1)],
                )];
                if n % 4 == 3 {
                    let other = region % REGIONS + 1;
                    parts.push((other, vec![payload(&format!("from{region}"), other, n)]));
                }
                let result = wal.append_many(parts.clone()).await;
                let receipt = result.as_ref().expect("append");
                if parts.len() == 2 {
                    assert_eq!(entry_sequence(receipt.parts[1].first_id), receipt.sequence);
                }
                ledger.lock().unwrap().record(parts, &result);
            }
        }));
    }
    for task in tasks {
        bounded("a region's appends", task).await.expect("task");
    }
    let stats = wal.stats().await.expect("stats");
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");

    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let appended = REGIONS * (2 * APPENDS + APPENDS / 4);
    assert_eq!(ledger.acked().len() as u64, appended);
    assert_eq!(stats.entries, appended);
    assert!(ledger.maybe().is_empty() && ledger.never().is_empty());

    let regions: Vec<u64> = (1..=REGIONS).collect();
    let replayed = replay_fresh(&store, &regions).await;
    assert_eq!(replayed.len() as u64, appended);
    ledger.check(&replayed);
    for region in [1, REGIONS / 2, REGIONS] {
        assert_eq!(of_region(&replayed, region), ledger.region(region));
    }

    // A region read on yet another fresh WAL gives the same, in order.
    let (wal, join) = spawn(&store).await;
    let read = collect(wal.read(7, 0).await.expect("read")).await;
    assert_eq!(of_region(&read, 7), ledger.region(7));
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join).await.expect("join");
}

async fn abort_while_appending_then_replay(store: Arc<dyn ObjectStore>) {
    const REGIONS: u64 = 24;
    const ACKED_BEFORE_ABORT: usize = 120;
    let (wal, join) = spawn(&store).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (acked_tx, mut acked_rx) = tokio::sync::watch::channel(0usize);
    let acked_tx = Arc::new(acked_tx);
    let mut tasks = Vec::new();
    for region in 1..=REGIONS {
        let wal = wal.clone();
        let ledger = ledger.clone();
        let acked_tx = acked_tx.clone();
        tasks.push(tokio::spawn(async move {
            // Appends until the WAL fails it; at most 1000.
            for n in 0..1000 {
                let parts: AppendParts = vec![(region, vec![payload("c", region, n)])];
                let result = wal.append_many(parts.clone()).await;
                let ok = result.is_ok();
                ledger.lock().unwrap().record(parts, &result);
                if !ok {
                    return;
                }
                acked_tx.send_modify(|n| *n += 1);
            }
            panic!("region {region}: the WAL was never aborted");
        }));
    }
    bounded(
        "appends to be acknowledged",
        acked_rx.wait_for(|n| *n >= ACKED_BEFORE_ABORT),
    )
    .await
    .expect("counter");
    wal.abort();
    for task in tasks {
        bounded("a region's appends to fail", task)
            .await
            .expect("task");
    }
    let _ = bounded("the aborted WAL to end", join).await;

    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    assert!(ledger.acked().len() >= ACKED_BEFORE_ABORT);
    assert_eq!(
        ledger.maybe().len() + ledger.never().len(),
        REGIONS as usize,
        "each region's last append failed"
    );
    let regions: Vec<u64> = (1..=REGIONS).collect();
    let replayed = replay_fresh(&store, &regions).await;
    ledger.check(&replayed);
}

async fn older_node_is_fenced(store: Arc<dyn ObjectStore>) {
    let mut ledger = Ledger::default();
    let (a, a_join) = spawn(&store).await;
    for n in 0..5 {
        let parts: AppendParts = vec![(1, vec![payload("a", 1, n)])];
        let result = a.append_many(parts.clone()).await;
        result.as_ref().expect("A's append before B opens");
        ledger.record(parts, &result);
    }

    let (b, b_join) = spawn(&store).await;
    // B's first append waits for B's open, which fences A.
    let parts: AppendParts = vec![(2, vec![payload("b", 2, 0)])];
    let result = b.append_many(parts.clone()).await;
    result.as_ref().expect("B's append");
    ledger.record(parts, &result);

    let late: AppendParts = vec![(1, vec![payload("a", 1, 99)])];
    let result = a.append_many(late.clone()).await;
    match &result {
        Err(Error::Fenced {
            epoch, fenced_by, ..
        }) => assert!(fenced_by > epoch),
        other => panic!("A's append after B opened must fail with Fenced, got {other:?}"),
    }
    ledger.record(late, &result);
    // Fenced is terminal: A's supervisor ends, and says why.
    let _ = bounded("the fenced WAL to end", a_join).await;
    assert!(
        matches!(a.terminal_error(), Some(Error::Fenced { .. })),
        "{:?}",
        a.terminal_error()
    );
    let e = a
        .append(1, vec![payload("a", 1, 100)])
        .await
        .expect_err("a fenced WAL accepts nothing");
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");
    ledger.record(vec![(1, vec![payload("a", 1, 100)])], &Err(e));

    for n in 1..4 {
        let parts: AppendParts = vec![(2, vec![payload("b", 2, n)]), (1, vec![payload("b", 1, n)])];
        let result = b.append_many(parts.clone()).await;
        result.as_ref().expect("B appends on");
        ledger.record(parts, &result);
    }
    b.stop().await.expect("stop");
    bounded("B to end", b_join).await.expect("join");

    let replayed = replay_fresh(&store, &[1, 2]).await;
    ledger.check(&replayed);
    assert_eq!(of_region(&replayed, 1), ledger.region(1));
    assert_eq!(of_region(&replayed, 2), ledger.region(2));
    assert_eq!(replayed.len(), 5 + 1 + 2 * 3);
}
