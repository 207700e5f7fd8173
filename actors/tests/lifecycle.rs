//! What the WAL leaves running when it ends: once `stop()` or `abort()` returned,
//! nothing of the instance reaches the store. An aborted instance's open sends nothing
//! more, so it cannot fence the instance that replaced it; the reclaimer's pass, a
//! hedge's twin left running, an upload and a follower's fetch end where they wait. A
//! stop is bounded by `max_create_duration` even when uploads hang: they end as unknown
//! outcomes, told to their waiters.
//!
//! A tap over the store records every request that reaches it and holds the ones a
//! test picks; tests wait on the holds, in virtual time, never on the clock.

mod support {
    pub mod harness;
}

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};
use object_store_wal::format::decode_header;
use object_store_wal::testing::{FaultStore, Hooks, Wrapper};
use object_store_wal::{Config, Durability, EpochEndReason, Error, HedgeAfter};
use object_store_wal_actors::{spawn_wal, WalHandle};
use support::harness::{
    bounded, config, config_no_reclaim, key, listing, object_at, payload, read, restart_policy,
    spawn, stats, stop, GRACE,
};
use tokio::sync::watch;

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

// ---------------------------------------------------------------------------------------
// Nothing of a stopped or aborted instance reaches the store
// ---------------------------------------------------------------------------------------

/// A kind of request, as the [`Tap`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Get,
    List,
    Delete,
}

/// A hold on requests: each one caught waits, before it reaches the wrapped store,
/// until the hold is released; one dropped while it waits counts as abandoned.
#[derive(Debug, Clone)]
struct Hold(Arc<HoldState>);

#[derive(Debug)]
struct HoldState {
    released: watch::Sender<bool>,
    arrived: watch::Sender<u64>,
    abandoned: watch::Sender<u64>,
    passed: watch::Sender<u64>,
}

impl Hold {
    fn new() -> Self {
        Hold(Arc::new(HoldState {
            released: watch::Sender::new(false),
            arrived: watch::Sender::new(0),
            abandoned: watch::Sender::new(0),
            passed: watch::Sender::new(0),
        }))
    }

    fn release(&self) {
        self.0.released.send_replace(true);
    }

    async fn wait_arrived(&self, n: u64) {
        let _ = self.0.arrived.subscribe().wait_for(|a| *a >= n).await;
    }

    /// Waits until `n` caught requests were let through or abandoned; returns how many
    /// were abandoned.
    async fn wait_resolved(&self, n: u64) -> u64 {
        let mut abandoned = self.0.abandoned.subscribe();
        let mut passed = self.0.passed.subscribe();
        loop {
            let (a, p) = (*abandoned.borrow_and_update(), *passed.borrow_and_update());
            if a + p >= n {
                return a;
            }
            tokio::select! {
                _ = abandoned.changed() => {}
                _ = passed.changed() => {}
            }
        }
    }

    async fn pass(&self) {
        struct Waiting<'a>(&'a HoldState, bool);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                let counter = if self.1 {
                    &self.0.passed
                } else {
                    &self.0.abandoned
                };
                counter.send_modify(|n| *n += 1);
            }
        }
        self.0.arrived.send_modify(|a| *a += 1);
        let mut waiting = Waiting(&self.0, false);
        let _ = self.0.released.subscribe().wait_for(|r| *r).await;
        waiting.1 = true;
    }
}

/// Records every request that reaches the wrapped store (after any hold), in order.
#[derive(Debug, Default)]
struct TapHooks {
    state: Arc<Mutex<TapState>>,
}

#[derive(Debug, Default)]
struct TapState {
    sent: Vec<(Op, String)>,
    /// Holds by kind of request and key (`None`: any key), with how many more requests
    /// each catches.
    holds: Vec<(Op, Option<Path>, Hold, u64)>,
}

impl TapState {
    fn hold_for(&mut self, op: Op, key: &Path) -> Option<Hold> {
        let at = self
            .holds
            .iter()
            .position(|(o, k, _, n)| *o == op && *n > 0 && k.as_ref().is_none_or(|k| k == key))?;
        let (_, _, hold, n) = &mut self.holds[at];
        *n -= 1;
        Some(hold.clone())
    }
}

type Tap = Wrapper<TapHooks>;

fn tap_state(tap: &Tap) -> std::sync::MutexGuard<'_, TapState> {
    tap.hooks().state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Holds the next `n` requests of kind `op` (of `key`, or of any key).
fn hold(tap: &Tap, op: Op, key: Option<Path>, n: u64) -> Hold {
    let hold = Hold::new();
    tap_state(tap).holds.push((op, key, hold.clone(), n));
    hold
}

/// How many requests reached the store so far.
fn sent_count(tap: &Tap) -> usize {
    tap_state(tap).sent.len()
}

/// The requests that reached the store after the first `from`.
fn sent_since(tap: &Tap, from: usize) -> Vec<(Op, String)> {
    tap_state(tap).sent.get(from..).unwrap_or_default().to_vec()
}

/// Waits at `op`'s hold, if one catches it, then records it as sent.
async fn pass_tap(state: &Arc<Mutex<TapState>>, op: Op, key: &Path) {
    let hold = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .hold_for(op, key);
    if let Some(hold) = hold {
        hold.pass().await;
    }
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .sent
        .push((op, key.to_string()));
}

#[async_trait]
impl Hooks for TapHooks {
    const NAME: &'static str = "Tap";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        pass_tap(&self.state, Op::Create, location).await;
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        pass_tap(&self.state, Op::Get, location).await;
        inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let state = self.state.clone();
        let tapped = locations
            .then(move |location| {
                let state = state.clone();
                async move {
                    if let Ok(key) = &location {
                        pass_tap(&state, Op::Delete, key).await;
                    }
                    location
                }
            })
            .boxed();
        inner.delete_stream(tapped)
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (state, inner, prefix) = (self.state.clone(), inner.clone(), prefix.cloned());
        futures::stream::once(async move {
            pass_tap(&state, Op::List, &prefix.clone().unwrap_or_default()).await;
            inner.list(prefix.as_ref())
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (state, inner) = (self.state.clone(), inner.clone());
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        futures::stream::once(async move {
            pass_tap(&state, Op::List, &prefix.clone().unwrap_or_default()).await;
            inner.list_with_offset(prefix.as_ref(), &offset)
        })
        .flatten()
        .boxed()
    }
}

/// Virtual time after which a wait is a hang (under a paused clock it passes only when
/// nothing else can run).
const HANG: Duration = Duration::from_secs(3600);

/// `f`, bounded by [`HANG`] of virtual time.
async fn within_hang<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, f).await {
        Ok(v) => v,
        Err(_) => panic!("hung waiting for {what}"),
    }
}

/// How the instance under test ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Stop,
    Abort,
}

async fn end(wal: &WalHandle, how: End) {
    match how {
        End::Stop => within_hang("stop", wal.stop()).await.expect("stop"),
        End::Abort => wal.abort(),
    }
}

/// A tapped store over memory, and the WAL on it, recovered.
async fn tapped(config: &Config) -> (Arc<Tap>, Arc<dyn ObjectStore>, WalHandle) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let tap = Tap::wrap(inner.clone(), TapHooks::default());
    let store: Arc<dyn ObjectStore> = tap.clone();
    let (wal, _join) = spawn_wal(store, config.clone(), restart_policy())
        .await
        .expect("spawn");
    within_hang("recovery", wal.last_entry_id_overall())
        .await
        .expect("recovered");
    (tap, inner, wal)
}

/// The reclaimer's pass is listing (held) when the WAL ends. Once the WAL ended the
/// listing is let go and the grace passes again: the pass was dropped where it waited,
/// and nothing (no listing, no delete) reaches the store; the objects below the floor
/// are still there.
async fn reclaimer_pass_ends_with_the_wal(how: End) {
    let config = config();
    let (tap, inner, wal) = tapped(&config).await;
    // Object 2 holds region 1; once region 1 is obsolete, object 3 carries floor 3.
    let r1 = wal.append(1, vec![payload("r1")]).await.expect("append");
    assert_eq!(r1.sequence, 2);
    wal.obsolete_all(1).await.expect("obsolete");
    let listing_held = hold(&tap, Op::List, None, 1);
    let r2 = wal.append(2, vec![payload("r2")]).await.expect("append");
    assert_eq!(r2.sequence, 3);
    assert_eq!(stats(&wal).await.floor, 3);
    // The grace passes (virtual time): the reclaimer lists, and waits at the hold.
    within_hang("the reclaimer's listing", listing_held.wait_arrived(1)).await;

    end(&wal, how).await;
    let ended_at = sent_count(&tap);
    listing_held.release();
    let abandoned = within_hang("the held listing", listing_held.wait_resolved(1)).await;
    assert_eq!(abandoned, 1, "the pass's listing was dropped, unsent");
    // Whatever timers were armed fire now: the reclaimer's retry, keep-alives.
    tokio::time::sleep(GRACE * 3).await;
    assert_eq!(sent_since(&tap, ended_at), vec![], "requests after {how:?}");
    let (keys, _) = listing(&inner).await;
    assert!(
        keys.starts_with(&[1, 2, 3]),
        "nothing below the floor was deleted: {keys:?}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stop_ends_the_reclaimers_pass() {
    reclaimer_pass_ends_with_the_wal(End::Stop).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn abort_ends_the_reclaimers_pass() {
    reclaimer_pass_ends_with_the_wal(End::Abort).await;
}

/// A create whose first attempt hangs is hedged; the twin lands and the append is
/// acknowledged, the first attempt is left running. When the WAL ends, that attempt
/// ends too: let go afterwards, it never reaches the store.
async fn hedge_twin_ends_with_the_wal(how: End) {
    let mut config = config_no_reclaim();
    config.hedge_after = HedgeAfter::Fixed(Duration::from_millis(10));
    let (tap, _inner, wal) = tapped(&config).await;
    let first_attempt = hold(&tap, Op::Create, Some(key(2)), 1);
    let receipt = within_hang("the hedged append", wal.append(1, vec![payload("e")]))
        .await
        .expect("the twin lands");
    assert_eq!(receipt.sequence, 2);
    assert_eq!(stats(&wal).await.hedge_wins, 1, "the twin answered first");
    within_hang("the first attempt", first_attempt.wait_arrived(1)).await;

    end(&wal, how).await;
    let ended_at = sent_count(&tap);
    first_attempt.release();
    let abandoned = within_hang("the first attempt", first_attempt.wait_resolved(1)).await;
    assert_eq!(abandoned, 1, "the slower attempt was dropped, unsent");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(sent_since(&tap, ended_at), vec![], "requests after {how:?}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stop_ends_a_hedge_twin_left_running() {
    hedge_twin_ends_with_the_wal(End::Stop).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn abort_ends_a_hedge_twin_left_running() {
    hedge_twin_ends_with_the_wal(End::Abort).await;
}

/// An upload waits at a hold when the WAL is aborted: let go afterwards, it never
/// reaches the store, and no retry follows.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn abort_ends_an_upload_in_flight() {
    let mut config = config_no_reclaim();
    config.hedge_after = HedgeAfter::Off;
    let (tap, inner, wal) = tapped(&config).await;
    let upload = hold(&tap, Op::Create, Some(key(2)), u64::MAX);
    let append = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(1, vec![payload("e")]).await }
    });
    within_hang("the upload", upload.wait_arrived(1)).await;

    wal.abort();
    let ended_at = sent_count(&tap);
    upload.release();
    let abandoned = within_hang("the held upload", upload.wait_resolved(1)).await;
    assert_eq!(abandoned, 1, "the upload was dropped, unsent");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        sent_since(&tap, ended_at),
        vec![],
        "requests after the abort"
    );
    assert_eq!(object_at(&inner, 2).await, None, "the object never landed");
    let answer = within_hang("the append's answer", append)
        .await
        .expect("the append task");
    assert!(
        answer.is_err(),
        "an aborted WAL acknowledges nothing: {answer:?}"
    );
}

/// A follower's fetch waits at a hold when the WAL stops: let go afterwards, it never
/// reaches the store, and the follower is told the WAL stopped.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stop_ends_a_follower() {
    // Without the segment cache, so that the follower fetches the tail from the store
    // and the stop meets that fetch in flight.
    let config = config_no_reclaim()
        .with_segment_cache_bytes(0)
        .with_segment_cache_region_bytes(0);
    let (tap, _inner, wal) = tapped(&config).await;
    let fetch = hold(&tap, Op::Get, Some(key(2)), u64::MAX);
    let follower = wal.follow(1, 0).await.expect("follow");
    wal.append(1, vec![payload("e")]).await.expect("append");
    within_hang("the follower's fetch", fetch.wait_arrived(1)).await;

    within_hang("stop", wal.stop()).await.expect("stop");
    let ended_at = sent_count(&tap);
    fetch.release();
    let abandoned = within_hang("the held fetch", fetch.wait_resolved(1)).await;
    assert_eq!(abandoned, 1, "the fetch was dropped, unsent");
    let told = within_hang("the follower", follower.recv_async())
        .await
        .expect("an item before the end");
    assert!(
        matches!(told, Err(Error::Stopped { .. })),
        "the follower is told the WAL stopped: {told:?}"
    );
    assert!(
        within_hang("the follower's end", follower.recv_async())
            .await
            .is_err(),
        "the follow ends"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        sent_since(&tap, ended_at),
        vec![],
        "requests after the stop"
    );
}

// ---------------------------------------------------------------------------------------
// Stop is bounded even when uploads hang
// ---------------------------------------------------------------------------------------

/// Object 2's create hangs (a hold never let go, a request timeout of a year); object 3
/// lands. Stop returns once `max_create_duration` passed: object 2's waiter gets the
/// unknown outcome, object 3's that an earlier object failed, both may-be-durable;
/// nothing is acknowledged, and nothing more reaches the store.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stop_abandons_hung_uploads_as_unknown_outcomes() {
    let mut config = config_no_reclaim();
    config.hedge_after = HedgeAfter::Off;
    config.request_timeout = Duration::from_secs(365 * 24 * 3600);
    let (tap, inner, wal) = tapped(&config).await;
    let objects_before = stats(&wal).await.objects;
    let hung = hold(&tap, Op::Create, Some(key(2)), u64::MAX);
    let first = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(1, vec![payload("a")]).await }
    });
    within_hang("object 2's create", hung.wait_arrived(1)).await;
    let second = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(1, vec![payload("b")]).await }
    });
    within_hang("object 3 to land", async {
        while object_at(&inner, 3).await.is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;

    within_hang("stop with an upload hung", wal.stop())
        .await
        .expect("stop");
    let ended_at = sent_count(&tap);
    let first = first.await.expect("the first append's task");
    let second = second.await.expect("the second append's task");
    assert!(
        matches!(
            first,
            Err(Error::EpochEnded {
                sequence: 2,
                reason: EpochEndReason::UnknownOutcome,
                durability: Durability::MayBeDurable,
                ..
            })
        ),
        "the hung upload's waiter: {first:?}"
    );
    assert!(
        matches!(
            second,
            Err(Error::EpochEnded {
                sequence: 3,
                reason: EpochEndReason::EarlierObjectFailed,
                durability: Durability::MayBeDurable,
                ..
            })
        ),
        "the later object's waiter: {second:?}"
    );
    hung.release();
    let abandoned = within_hang("the hung create", hung.wait_resolved(1)).await;
    assert_eq!(abandoned, 1, "dropped where it hung, unsent");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        sent_since(&tap, ended_at),
        vec![],
        "requests after the stop"
    );
    assert_eq!(object_at(&inner, 2).await, None, "object 2 never landed");
    // Nothing was acknowledged: a fresh instance replays nothing (object 3 is an orphan,
    // its predecessor never landed).
    let (fresh, fresh_join) = spawn(&inner, &config).await;
    assert_eq!(stats(&fresh).await.objects, objects_before);
    assert_eq!(read(&fresh, 1, 0).await, vec![]);
    stop(fresh, fresh_join).await;
}
