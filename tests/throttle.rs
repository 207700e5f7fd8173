//! Throttle replies in the core (DESIGN.md "Throttled stores"): a create the store
//! refuses for its request rate (`testing::ThrottleStore`, S3's `503 SlowDown`) is an
//! unknown outcome retried with the same bytes; under `persist_paced` it does not spend
//! the retry budget and stays bounded by `max_create_duration`; plain `persist` spends
//! the budget as before; and creates are not hedged while the store throttles. Over
//! three stores, a create whose quorum only the throttle replies of two withheld is a
//! throttle reply too. The sequential front end paces as the runtime's writer does.
//!
//! Tokio's clock is paused: the throttle's bucket refills, and backoffs pass, in
//! virtual time. Counts are asserted, never durations; where pacing says a create must
//! wait, the test looks at what the stores hold at a virtual moment before its slot.

#[path = "support/objects.rs"]
mod objects;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::{CreateAttempt, WalIo};
use object_store_wal::internal::store::transport::is_throttle_reply;
use object_store_wal::internal::write::pace::PACE_STEP;
use object_store_wal::internal::write::persist::{
    persist, persist_paced, persist_within, PersistOutcome,
};
use object_store_wal::testing::{
    with_latency, with_throttle, CreateFault, FaultStore, Throttle, ThrottleStore, TokioClock,
};
use object_store_wal::{
    AppendParts, Config, Error, HedgeAfter, ObjectStoreLogStore, RetryPolicy, WalStores,
};
use objects::object;

const PREFIX: &str = "wal";
const MAX_CREATE: Duration = Duration::from_secs(5);

/// Three attempts, 10 ms doubling to 40 ms.
fn retry() -> RetryPolicy {
    RetryPolicy::new(3, Duration::from_millis(10), Duration::from_millis(40))
}

fn throttled(e: &Error) -> bool {
    matches!(e, Error::Store { source, .. } if is_throttle_reply(source))
}

/// `persist_paced` of object 2 through `io`: its outcome, the throttle replies it told
/// of, and how long it took.
async fn persist_told(io: &WalIo) -> (PersistOutcome, u64, Duration) {
    let clock = TokioClock::new();
    let told = AtomicU64::new(0);
    let on_throttle = || {
        told.fetch_add(1, Ordering::Relaxed);
    };
    let started = tokio::time::Instant::now();
    let outcome = persist_paced(
        io,
        &object(2),
        &retry(),
        MAX_CREATE,
        clock.as_ref(),
        &on_throttle,
    )
    .await;
    (outcome, told.load(Ordering::Relaxed), started.elapsed())
}

/// A store that refuses every PUT: `persist_paced` retries past the budget, tells each
/// reply, and gives up (unknown) before `max_create_duration`; plain `persist` spends
/// its three attempts.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn throttle_replies_spend_time_not_the_retry_budget() {
    let throttle = with_throttle(Arc::new(InMemory::new()), Throttle::puts_per_s(0.0));
    let io = WalIo::new(throttle.clone(), PREFIX, 1 << 20).expect("io");
    let (outcome, told, took) = persist_told(&io).await;
    match outcome {
        PersistOutcome::Unknown { last } => assert!(throttled(&last), "{last}"),
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    let refused = throttle.counts().puts_throttled;
    // 40 ms apart at most once the backoff is at its cap: many more than 3 attempts.
    assert!(refused > 3 * u64::from(retry().max_attempts), "{refused}");
    assert_eq!(told, refused, "each reply told");
    assert!(
        took < MAX_CREATE,
        "no retry starts past max_create_duration"
    );

    let before = throttle.counts().puts_throttled;
    match persist(&io, &object(2), &retry()).await {
        PersistOutcome::Unknown { last } => assert!(throttled(&last), "{last}"),
        other => panic!("expected an unknown outcome, got {other:?}"),
    }
    assert_eq!(
        throttle.counts().puts_throttled - before,
        u64::from(retry().max_attempts),
        "plain persist spends its budget on throttle replies"
    );
}

/// A store that takes one PUT every two seconds, its bucket drained: the create is
/// refused many times, then lands and is durable, with more attempts than the budget.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_throttled_create_lands_once_the_store_takes_it() {
    let throttle = with_throttle(
        Arc::new(InMemory::new()),
        Throttle::puts_per_s(0.5).burst(1.0),
    );
    let io = WalIo::new(throttle.clone(), PREFIX, 1 << 20).expect("io");
    let clock = TokioClock::new();
    // The one token goes to another key.
    assert!(matches!(
        io.create_hedged(&object(9)).await,
        CreateAttempt::Created
    ));
    match persist_within(&io, &object(2), &retry(), MAX_CREATE, clock.as_ref()).await {
        PersistOutcome::Durable { attempts } => {
            assert!(attempts > retry().max_attempts, "{attempts}")
        }
        other => panic!("expected durable, got {other:?}"),
    }
    let key = object_key(&Path::from(PREFIX), 2);
    assert!(throttle.head(&key).await.is_ok(), "the object is there");
}

/// A create that landed though its answer was lost (applied, then an error), its retries
/// refused by a store with one PUT every two seconds: the retry the store takes finds
/// our own bytes, so the create is durable and counted found landed, once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_lost_answer_retried_through_throttle_replies_is_found_landed_once() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let key = object_key(&Path::from(PREFIX), 2);
    faults.fail_create_of(&key, [CreateFault::ApplyThenError]);
    // The one token goes to the first attempt, which lands.
    let throttle = with_throttle(faults, Throttle::puts_per_s(0.5).burst(1.0));
    let io = WalIo::new(throttle.clone(), PREFIX, 1 << 20).expect("io");
    let (outcome, told, _) = persist_told(&io).await;
    match outcome {
        PersistOutcome::Durable { attempts } => {
            assert!(attempts > retry().max_attempts, "{attempts}")
        }
        other => panic!("expected durable, got {other:?}"),
    }
    assert!(told > 0, "the retries met throttle replies");
    assert_eq!(
        io.request_stats().counts().creates_found_landed,
        1,
        "found landed once, not once per throttle reply"
    );
}

/// While the last create answered was a throttle reply, creates are not hedged; once
/// one is created, hedging is back.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn creates_are_not_hedged_while_the_store_throttles() {
    let throttle = with_throttle(Arc::new(InMemory::new()), Throttle::puts_per_s(0.0));
    let store = with_latency(
        throttle.clone() as Arc<dyn ObjectStore>,
        Duration::from_millis(20),
        Duration::from_millis(1),
    );
    let io = WalIo::new(store, PREFIX, 1 << 20)
        .expect("io")
        .with_requests(
            HedgeAfter::Fixed(Duration::from_millis(5)),
            Duration::from_secs(60),
        );
    let hedged = || io.request_stats().counts().hedged;
    // Not known to throttle yet: the slow create gets its twin; both are refused.
    assert!(matches!(
        io.create_hedged(&object(2)).await,
        CreateAttempt::Throttled(_)
    ));
    assert_eq!(hedged(), 1);
    assert_eq!(throttle.counts().puts_throttled, 2);
    // Throttled now: no twin, though the create is as slow.
    throttle.set_puts_per_s(None);
    assert!(matches!(
        io.create_hedged(&object(2)).await,
        CreateAttempt::Created
    ));
    assert_eq!(hedged(), 1, "no twin while throttled");
    // Created: twins again.
    assert!(matches!(
        io.create_hedged(&object(3)).await,
        CreateAttempt::Created
    ));
    assert_eq!(hedged(), 2);
}

/// Three stores for one log: the first never throttles, the other two refuse PUTs as
/// `throttle` says, each with its own bucket (the same requests reach both, so they
/// refuse together). Returns the stores and the two throttles.
fn three_stores(throttle: Throttle) -> (Vec<Arc<dyn ObjectStore>>, [Arc<ThrottleStore>; 2]) {
    let throttled = [
        with_throttle(Arc::new(InMemory::new()), throttle.clone()),
        with_throttle(Arc::new(InMemory::new()), throttle),
    ];
    let [a, b] = throttled.clone();
    let stores: Vec<Arc<dyn ObjectStore>> = vec![Arc::new(InMemory::new()), a, b];
    (stores, throttled)
}

fn quorum(stores: &[Arc<dyn ObjectStore>]) -> WalStores {
    WalStores::quorum(stores.iter().cloned()).expect("three stores")
}

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.hedge_after = HedgeAfter::Off;
    config.retry = retry();
    config.max_create_duration = MAX_CREATE;
    config
}

/// Three stores, two of them refusing every PUT for their rate: the one copy made is no
/// quorum, and only the two refusals withheld it. `persist_paced` retries that as a
/// throttle reply (past the budget, each told, unknown before `max_create_duration`),
/// and the throttling stores are not taken for down meanwhile (they get every retry).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_quorum_withheld_by_throttle_replies_is_retried_as_one() {
    let (stores, throttled) = three_stores(Throttle::puts_per_s(0.0));
    let io = quorum(&stores).into_io(&config()).expect("io");
    let (outcome, told, took) = persist_told(&io).await;
    match outcome {
        PersistOutcome::Unknown {
            last: Error::NoQuorum { throttled, .. },
        } => assert_eq!(throttled, 2),
        other => panic!("expected no quorum, withheld by throttle replies: {other:?}"),
    }
    assert!(told > 3 * u64::from(retry().max_attempts), "{told}");
    for store in &throttled {
        assert_eq!(
            store.counts().puts_throttled,
            told,
            "every retry reached it"
        );
    }
    assert!(
        took < MAX_CREATE,
        "no retry starts past max_create_duration"
    );
}

/// Three stores, two of them taking one PUT every two seconds with their buckets
/// drained: the create reaches no quorum many times, then lands, with more attempts
/// than the budget.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_quorum_create_throttled_in_two_stores_lands_once_they_take_it() {
    let (stores, throttled) = three_stores(Throttle::puts_per_s(0.5).burst(1.0));
    let io = quorum(&stores).into_io(&config()).expect("io");
    let clock = TokioClock::new();
    // The one token of each goes to another key.
    for store in &throttled {
        let other = Path::from("elsewhere");
        store
            .put(&other, PutPayload::from_static(b"x"))
            .await
            .expect("the token");
    }
    match persist_within(&io, &object(2), &retry(), MAX_CREATE, clock.as_ref()).await {
        PersistOutcome::Durable { attempts } => {
            assert!(attempts > retry().max_attempts, "{attempts}")
        }
        other => panic!("expected durable, got {other:?}"),
    }
    for store in &throttled {
        assert!(store.counts().puts_throttled > 0, "it pushed back");
    }
}

fn parts(n: u64) -> AppendParts {
    vec![(n % 3, vec![Bytes::from(format!("entry {n}"))])]
}

/// Flushes one append while `throttled` refuse every PUT, lifting the refusal once the
/// create was refused (after its start slot, if it waits for one): it then lands on its
/// retry.
async fn flush_refused_once(
    wal: &mut ObjectStoreLogStore,
    throttled: &[Arc<ThrottleStore>],
    n: u64,
) {
    let refused = |s: &Arc<ThrottleStore>| s.counts().puts_throttled;
    let before: Vec<u64> = throttled.iter().map(refused).collect();
    for store in throttled {
        store.set_puts_per_s(Some(0.0));
    }
    // The slot is at most an interval away (the last create was answered now).
    let slot = wal.object_interval().expect("a writer");
    wal.append(parts(n)).expect("admitted");
    let mut flush = std::pin::pin!(wal.flush());
    // The first attempt, at the slot, is refused at once; its retry waits a backoff
    // (5 ms at least) of virtual time.
    let waited = tokio::time::timeout(slot + Duration::from_millis(1), flush.as_mut()).await;
    assert!(waited.is_err(), "the flush waits to retry");
    let after: Vec<u64> = throttled.iter().map(refused).collect();
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "refused: {before:?} -> {after:?}"
    );
    for store in throttled {
        store.set_puts_per_s(None);
    }
    let receipt = flush.await.expect("flushed, not failed");
    assert!(receipt.is_some(), "an object");
}

/// The next flush's create waits for its start slot: no store gets its object before
/// it, and the flush then lands.
async fn flush_waits_for_its_slot(
    wal: &mut ObjectStoreLogStore,
    stores: &[Arc<dyn ObjectStore>],
    n: u64,
) {
    let interval = wal.object_interval().expect("a writer");
    assert!(interval > Duration::ZERO);
    let sequence = wal.epoch().expect("a writer").next_sequence;
    let key = object_key(&Path::from(PREFIX), sequence);
    wal.append(parts(n)).expect("admitted");
    let mut flush = std::pin::pin!(wal.flush());
    let waited = tokio::time::timeout(interval / 2, flush.as_mut()).await;
    assert!(waited.is_err(), "the create waits for its slot");
    for store in stores {
        assert!(store.head(&key).await.is_err(), "not sent before its slot");
    }
    let receipt = flush.await.expect("flushed").expect("an object");
    assert_eq!(receipt.sequence, sequence);
}

/// The sequential front end paces as the runtime's writer does (DESIGN.md "Throttled
/// stores"): a flush whose create met a throttle reply widens the interval between
/// object starts (from none, this front end's usual), the next flush's create waits for
/// its slot, and a create that lands without a reply brings it back to none: then,
/// once the slot set under the wider interval has passed, a flush creates at once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_sequential_front_end_paces_after_throttle_replies() {
    let throttle = with_throttle(Arc::new(InMemory::new()), Throttle::unlimited());
    let store = throttle.clone() as Arc<dyn ObjectStore>;
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let epoch = wal.epoch().map(|p| p.epoch);
    wal.append_and_flush(parts(0)).await.expect("append");
    assert_eq!(wal.object_interval(), Some(Duration::ZERO));

    flush_refused_once(&mut wal, std::slice::from_ref(&throttle), 1).await;
    assert_eq!(wal.object_interval(), Some(PACE_STEP), "paced");
    flush_waits_for_its_slot(&mut wal, std::slice::from_ref(&store), 2).await;
    // That create landed without a reply: no interval any more. (It started under the
    // wider one, which set the next slot, as in the runtime.)
    assert_eq!(wal.object_interval(), Some(Duration::ZERO), "back");
    wal.append_and_flush(parts(3)).await.expect("append");
    // No slot to wait for: done before the least paced interval could pass.
    let at_once = tokio::time::timeout(PACE_STEP / 2, wal.append_and_flush(parts(4))).await;
    at_once.expect("created at once").expect("append");

    // Refused in two flushes running: the interval doubles once per flush.
    flush_refused_once(&mut wal, std::slice::from_ref(&throttle), 5).await;
    flush_refused_once(&mut wal, std::slice::from_ref(&throttle), 6).await;
    assert_eq!(wal.object_interval(), Some(2 * PACE_STEP));
    assert_eq!(wal.epoch().map(|p| p.epoch), epoch, "no epoch ended");
}

/// Over three stores, two of them throttling: no flush fails, and the front end paces
/// (both gaps DESIGN.md "Throttled stores" once named, closed together); every entry
/// flushed is replayed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn over_a_quorum_throttle_replies_fail_no_flush_and_pace_the_next() {
    let (stores, throttled) = three_stores(Throttle::unlimited());
    let mut wal = ObjectStoreLogStore::open(quorum(&stores), config())
        .await
        .expect("open");
    let epoch = wal.epoch().map(|p| p.epoch);
    wal.append_and_flush(parts(0)).await.expect("append");
    flush_refused_once(&mut wal, &throttled, 1).await;
    assert_eq!(wal.object_interval(), Some(PACE_STEP), "paced");
    flush_waits_for_its_slot(&mut wal, &stores, 2).await;
    assert_eq!(wal.object_interval(), Some(Duration::ZERO), "back");
    assert_eq!(wal.epoch().map(|p| p.epoch), epoch, "no epoch ended");
    let mut replayed: Vec<(u64, Bytes)> = wal
        .replay((0..3).map(|r| (r, 0)))
        .map_ok(|e| (e.region, e.payload))
        .try_collect()
        .await
        .expect("replay");
    replayed.sort();
    let want: Vec<(u64, Bytes)> = (0..3)
        .map(|n| parts(n).remove(0))
        .map(|(r, mut p)| (r, p.remove(0)))
        .collect();
    assert_eq!(replayed, want);
}

/// A flush dropped while it waits for its start slot (a caller's timeout) leaves its
/// object sealed: the next flush starts it, with no new append (before, it answered
/// `None`: nothing admitted, and the object never went out). One dropped while its
/// create is under way leaves an unknown outcome: the next flush ends the epoch,
/// `MayBeDurable`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_dropped_flush_is_finished_or_ends_the_epoch_at_the_next() {
    let throttle = with_throttle(Arc::new(InMemory::new()), Throttle::unlimited());
    let store = throttle.clone() as Arc<dyn ObjectStore>;
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    wal.append_and_flush(parts(0)).await.expect("append");
    flush_refused_once(&mut wal, std::slice::from_ref(&throttle), 1).await;
    let interval = wal.object_interval().expect("a writer");
    assert!(interval > Duration::ZERO, "paced");

    // Dropped waiting for its slot.
    let sequence = wal.epoch().expect("a writer").next_sequence;
    let key = object_key(&Path::from(PREFIX), sequence);
    wal.append(parts(2)).expect("admitted");
    let dropped = tokio::time::timeout(interval / 2, wal.flush()).await;
    assert!(dropped.is_err(), "dropped before its slot");
    assert!(store.head(&key).await.is_err(), "not sent");
    let receipt = wal
        .flush()
        .await
        .expect("flushed")
        .expect("the sealed object");
    assert_eq!(receipt.sequence, sequence);
    assert!(store.head(&key).await.is_ok(), "created");

    // Dropped with its create under way: refused, then waiting to retry.
    throttle.set_puts_per_s(Some(0.0));
    wal.append(parts(3)).expect("admitted");
    let before = throttle.counts().puts_throttled;
    {
        let mut flush = std::pin::pin!(wal.flush());
        // Its slot is at most the wider interval away (the last create started under
        // it, now); refused there at once, its retry waits a backoff past this.
        let waited =
            tokio::time::timeout(interval + Duration::from_millis(1), flush.as_mut()).await;
        assert!(waited.is_err(), "the flush waits to retry");
        assert!(throttle.counts().puts_throttled > before, "refused");
    }
    throttle.set_puts_per_s(None);
    match wal.flush().await {
        Err(e @ Error::EpochEnded { .. }) => {
            assert_eq!(e.durability(), object_store_wal::Durability::MayBeDurable);
        }
        other => panic!("expected the epoch to end, got {other:?}"),
    }
}
