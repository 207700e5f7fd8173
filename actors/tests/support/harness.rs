//! The harness the retention and follower tests share (`tests/retention.rs`,
//! `tests/followers.rs`): the prefix and timing bounds, a config, spawning and stopping
//! the WAL, waits with a safety bound, reads and listings.
//!
//! Tests that need the reclaimer run on a current-thread runtime with tokio's clock
//! paused: `reclaim_grace` passes in virtual time, and waits poll a condition while
//! letting virtual time move (timers fire only when every task is idle). Real-time tests
//! poll with `yield_now`. Every wait has a safety bound that only a hang reaches.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use object_store_wal::internal::store::keys::{object_key, parse_key};
use object_store_wal::{Config, Entry, Piece, RetryPolicy};
use object_store_wal_actors::{spawn_wal, EntryReceiver, RestartPolicy, WalHandle, WalStats};
use tokio::task::JoinHandle;

/// The prefix every test's WAL lives under.
pub const PREFIX: &str = "wal";

/// A real-time safety bound on every wait: only a hang reaches it.
pub const BOUND: Duration = Duration::from_secs(30);

/// `max_create_duration` of the tests that reclaim (virtual time).
pub const MAX_CREATE: Duration = Duration::from_secs(5);
/// `reclaim_grace` of the tests that reclaim (virtual time): twice `MAX_CREATE`.
pub const GRACE: Duration = Duration::from_secs(10);

/// The key of the object at `sequence` under [`PREFIX`].
pub fn key(sequence: u64) -> Path {
    object_key(&Path::from(PREFIX), sequence)
}

/// No PUT-rate bound, tiny create-retry backoffs, a short grace.
pub fn config() -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.min_object_interval = Duration::ZERO;
    c.max_create_duration = MAX_CREATE;
    c.reclaim_grace = GRACE;
    c.retry = RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(2));
    c
}

/// [`config`] with the default (long) grace: nothing is reclaimed during a real-time test.
pub fn config_no_reclaim() -> Config {
    let mut c = config();
    c.max_create_duration = Duration::from_secs(60);
    c.reclaim_grace = Duration::from_secs(600);
    c
}

/// Up to 8 restarts a minute, with short backoffs.
pub fn restart_policy() -> RestartPolicy {
    RestartPolicy::new(
        8,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(10),
    )
}

/// Spawns the WAL on `store` and waits until it has recovered.
pub async fn spawn(store: &Arc<dyn ObjectStore>, config: &Config) -> (WalHandle, JoinHandle<()>) {
    let (wal, join) = spawn_wal(store.clone(), config.clone(), restart_policy())
        .await
        .expect("spawn the WAL");
    // Queued until the first recovery is done: the WAL is open when this returns.
    wal.ready().await.expect("recovered");
    (wal, join)
}

/// Stops the WAL and waits for its supervisor to end.
pub async fn stop(wal: WalHandle, join: JoinHandle<()>) {
    wal.stop().await.expect("stop");
    bounded("the WAL to end", join)
        .await
        .expect("join the supervisor");
}

/// A payload that reads as `tag`.
pub fn payload(tag: impl fmt::Display) -> Bytes {
    Bytes::from(tag.to_string())
}

/// A real-time bound on `f` (use only where tokio's clock is not paused).
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// The WAL's stats now.
pub async fn stats(wal: &WalHandle) -> WalStats {
    wal.stats().await.expect("stats")
}

/// Polls the stats until `done` holds, letting `step` of tokio time pass between
/// samples: under a paused clock that is virtual time (timers such as the reclaimer's
/// grace fire), so this waits on the condition, not on the clock. A real-time deadline
/// catches a hang.
pub async fn stats_until_virtual(
    wal: &WalHandle,
    what: &str,
    step: Duration,
    done: impl Fn(&WalStats) -> bool,
) -> WalStats {
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let s = stats(wal).await;
        if done(&s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(step).await;
    }
}

/// Polls the stats, yielding between samples (real-time tests).
pub async fn stats_until(
    wal: &WalHandle,
    what: &str,
    done: impl Fn(&WalStats) -> bool,
) -> WalStats {
    bounded(what, async {
        loop {
            let s = stats(wal).await;
            if done(&s) {
                return s;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// Everything a receiver yields until it ends; every item must be an entry.
pub async fn collect(rx: EntryReceiver) -> Vec<Entry> {
    let deadline = std::time::Instant::now() + BOUND;
    let mut entries = Vec::new();
    while let Ok(item) = rx.recv_async().await {
        assert!(std::time::Instant::now() < deadline, "a read did not end");
        entries.push(item.expect("a read entry"));
    }
    entries
}

/// Every entry of `region` from `from` on, as the WAL reads it.
pub async fn read(wal: &WalHandle, region: u64, from: u64) -> Vec<Entry> {
    collect(wal.read(region, from).await.expect("read")).await
}

/// The bytes at `sequence`, if present (read on the store given, not counted).
pub async fn object_at(store: &Arc<dyn ObjectStore>, sequence: u64) -> Option<Bytes> {
    match store.get(&key(sequence)).await {
        Ok(r) => Some(r.bytes().await.expect("read an object")),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("cannot read {}: {e}", key(sequence)),
    }
}

/// Every WAL sequence present, ascending, and every foreign key under the prefix.
pub async fn listing(store: &Arc<dyn ObjectStore>) -> (Vec<u64>, Vec<String>) {
    let prefix = Path::from(PREFIX);
    let metas: Vec<ObjectMeta> = store
        .list(Some(&prefix))
        .map(|m| m.expect("list"))
        .collect()
        .await;
    let mut wal = Vec::new();
    let mut foreign = Vec::new();
    for m in metas {
        match parse_key(&prefix, &m.location) {
            Some(s) => wal.push(s),
            None => foreign.push(m.location.to_string()),
        }
    }
    wal.sort_unstable();
    foreign.sort();
    (wal, foreign)
}

/// `(id, payload)` of each entry, for comparisons that print well.
pub fn ids(entries: &[Entry]) -> Vec<(u64, Bytes)> {
    entries.iter().map(|e| (e.id, e.payload.clone())).collect()
}

/// The first id of one append (`payload(tag)`) to `region` at `wal`.
pub async fn first_id_of(wal: &WalHandle, region: u64, tag: impl fmt::Display) -> u64 {
    bounded("an append", wal.append(region, vec![payload(tag)]))
        .await
        .expect("append")
        .parts[0]
        .first_id
}

/// `region` moves from node A (prefix `node-a`) to B (`node-b`) and back to A, one
/// entry written at each stop (tags 0 and 1): A releases it, B acquires it with A's
/// piece, writes, releases it, and A takes it back with both pieces. The pieces (A's
/// first tenure, then B's), in id order.
pub async fn back_at_the_first_owner(a: &WalHandle, b: &WalHandle, region: u64) -> [Piece; 2] {
    let first = first_id_of(a, region, 0).await;
    let from_a = bounded("the release", a.release(region))
        .await
        .expect("released");
    let piece_a = Piece {
        prefix: "node-a".into(),
        first_id: first,
        last_id: first,
    };
    bounded(
        "the acquire",
        b.acquire_with_pieces(region, from_a.acquire_above, vec![piece_a.clone()]),
    )
    .await
    .expect("acquired");
    let second = first_id_of(b, region, 1).await;
    let from_b = bounded("the release", b.release(region))
        .await
        .expect("released");
    let piece_b = Piece {
        prefix: "node-b".into(),
        first_id: second,
        last_id: second,
    };
    let pieces = vec![piece_a.clone(), piece_b.clone()];
    bounded(
        "the take-back",
        a.acquire_with_pieces(region, from_b.acquire_above, pieces),
    )
    .await
    .expect("taken back");
    [piece_a, piece_b]
}
