//! Hedged requests and request timeouts in the core (DESIGN.md, "Hedging"): a create
//! that has not answered is sent again beside the first and the first definite answer
//! decides; the twin's "already exists" is our own identical retry; a request that never
//! answers ends at `request_timeout` as an unknown outcome (a create) or a failed read.
//!
//! Stalls are holds that the tests release (or never release), under tokio's paused
//! clock: time moves only when every task waits, so hedge delays and timeouts pass in
//! virtual time and nothing here depends on the machine's speed.

#[path = "support/objects.rs"]
mod objects;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore, ObjectStoreExt};
use object_store_wal::format::{encode_object, Link};
use object_store_wal::internal::store::hedge::{ATTEMPT_FLOOR, MIN_SAMPLES};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::{CreateAttempt, CreateKind, WalIo};
use object_store_wal::internal::store::transport::{
    ListVisitor, Request, RequestStats, StoreTransport, Transport,
};
use object_store_wal::internal::write::persist::{persist, PersistOutcome};
use object_store_wal::metrics::Metrics;
use object_store_wal::testing::{CountingStore, FaultStore, Hooks, Wrapper};
use object_store_wal::{Error, HedgeAfter, RetryPolicy};
use objects::object;

const PREFIX: &str = "wal";

fn key(sequence: u64) -> Path {
    object_key(&Path::from(PREFIX), sequence)
}

fn retry(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(attempts, Duration::from_millis(1), Duration::from_millis(2))
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedged_create_and_its_twin_count_once() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(
            HedgeAfter::Fixed(Duration::from_millis(30)),
            Duration::from_secs(60),
        );
    // The first create of 2 stalls in the network; its twin goes through.
    let hold = faults.hold_next_creates_of(&key(2), 1);
    let object = object(2);
    let outcome = persist(&io, &object, &retry(3)).await;
    assert!(
        matches!(outcome, PersistOutcome::Durable { attempts: 1 }),
        "{outcome:?}"
    );
    let stats = io.request_stats();
    assert_eq!(stats.hedged.load(Ordering::Relaxed), 1);
    assert_eq!(stats.hedge_wins.load(Ordering::Relaxed), 1);
    assert_eq!(hold.arrived(), 1);
    assert_eq!(
        hold.abandoned(),
        0,
        "the first attempt is still held, not cancelled"
    );

    // The stalled first attempt lands late: it meets its twin's object and changes
    // nothing; the key holds our bytes, once.
    hold.release();
    tokio::time::timeout(Duration::from_secs(60), hold.wait_finished(1))
        .await
        .expect("the stalled attempt answers once released");
    let stored = faults
        .inner()
        .get(&key(2))
        .await
        .expect("object 2")
        .bytes()
        .await
        .expect("bytes");
    assert!(object.same_bytes(&stored));
    let listed = faults.inner().list(None).collect_keys().await;
    assert_eq!(listed, vec![key(2)]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_create_that_never_answers_times_out_as_unknown_and_is_retried() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_millis(50));
    // The first create hangs for good; the retry of identical bytes goes through.
    let _hang = faults.hold_next_creates_of(&key(2), 1);
    let object = object(2);
    let outcome = persist(&io, &object, &retry(3)).await;
    assert!(
        matches!(outcome, PersistOutcome::Durable { attempts: 2 }),
        "{outcome:?}"
    );
    let stats = io.request_stats();
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 1);
    assert_eq!(stats.hedged.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_create_that_keeps_hanging_ends_unknown() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_millis(50));
    let _hang = faults.hold_creates_of(&key(2));
    let outcome = persist(&io, &object(2), &retry(2)).await;
    match outcome {
        PersistOutcome::Unknown {
            last: Error::RequestTimeout { op: "create", .. },
        } => {}
        other => panic!("expected an unknown outcome after timeouts, got {other:?}"),
    }
    assert_eq!(io.request_stats().timeouts.load(Ordering::Relaxed), 2);
}

/// Hooks that delay every create by `delay_ms` (0: none).
#[derive(Debug, Default)]
struct SlowCreates {
    delay_ms: AtomicU64,
}

#[async_trait]
impl Hooks for SlowCreates {
    const NAME: &'static str = "SlowCreates";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        let ms = self.delay_ms.load(Ordering::Relaxed);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        inner.put_opts(location, payload, opts).await
    }
}

/// Creates `n` objects from `first` on, each answered: latencies the bound follows.
async fn warm_up(io: &WalIo, first: u64, n: u64) {
    for sequence in first..first + n {
        let created = io.create(&object(sequence), CreateKind::Data).await;
        assert!(matches!(created, CreateAttempt::Created), "{created:?}");
    }
}

/// On a store that answers in milliseconds, a data create that hangs is given up after
/// the attempt bound (about a second), not after `request_timeout`; a claim, whose
/// unknown outcome restarts an open, keeps `request_timeout`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hanging_create_is_given_up_after_the_attempt_bound_not_the_request_timeout() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let io = WalIo::new(faults.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_secs(60));
    warm_up(&io, 2, MIN_SAMPLES as u64).await;
    let _hang = faults.hold_next_creates_of(&key(100), 1);
    match io.create(&object(100), CreateKind::Data).await {
        CreateAttempt::Unknown(Error::RequestTimeout {
            op: "create",
            after,
            ..
        }) => assert_eq!(after, ATTEMPT_FLOOR),
        other => panic!("expected a create given up at the attempt bound, got {other:?}"),
    }
    let _hang = faults.hold_next_creates_of(&key(101), 1);
    match io.create(&object(101), CreateKind::Claim).await {
        CreateAttempt::Unknown(Error::RequestTimeout {
            op: "create",
            after,
            ..
        }) => assert_eq!(after, Duration::from_secs(60)),
        other => panic!("expected a claim given up at the request timeout, got {other:?}"),
    }
}

/// A store that turns slower than the bound for good is not failed for good: each
/// attempt that times out widens the bound, and after a few the creates answer.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_store_that_turns_slow_widens_the_bound_until_creates_answer() {
    let base: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let slow = Wrapper::wrap(base, SlowCreates::default());
    let io = WalIo::new(slow.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_secs(60));
    warm_up(&io, 2, 256).await;
    slow.hooks().delay_ms.store(3_000, Ordering::Relaxed);
    let mut timed_out = Vec::new();
    let mut answered = None;
    for sequence in 1_000..1_010 {
        match io.create(&object(sequence), CreateKind::Data).await {
            CreateAttempt::Created => {
                answered = Some(sequence);
                break;
            }
            CreateAttempt::Unknown(Error::RequestTimeout { after, .. }) => timed_out.push(after),
            other => panic!("{other:?}"),
        }
    }
    // The 99th percentile of the last 256 latencies moves at the fourth timeout: then
    // an attempt may take 8 s, and the 3 s store answers.
    assert_eq!(timed_out, vec![ATTEMPT_FLOOR; 4]);
    assert_eq!(answered, Some(1_004));
}

/// Hooks whose first GET never answers; later GETs go through.
#[derive(Debug, Default)]
struct FirstGetHangs {
    gets: AtomicU64,
    /// GETs that hang, counting from the first (0 is read as 1).
    hanging: u64,
}

#[async_trait]
impl Hooks for FirstGetHangs {
    const NAME: &'static str = "FirstGetHangs";

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if self.gets.fetch_add(1, Ordering::Relaxed) < self.hanging.max(1) {
            std::future::pending::<()>().await;
        }
        inner.get_opts(location, options).await
    }
}

/// Reads an object whose first `hanging` GETs never answer, with a hedge delay of 20 ms
/// and a 60 s request timeout: a twin answers, each hedge delay one more, with no
/// timeout.
async fn read_past_hanging_gets(hanging: u64) {
    let base: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let hooks = FirstGetHangs {
        hanging,
        ..FirstGetHangs::default()
    };
    let store = Wrapper::wrap(base.clone(), hooks);
    let io = WalIo::new(store.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(
            HedgeAfter::Fixed(Duration::from_millis(20)),
            Duration::from_secs(60),
        );
    let object = object(2);
    let created = persist(&io, &object, &retry(1)).await;
    assert!(matches!(created, PersistOutcome::Durable { .. }));
    let read = io.read_whole(2).await.expect("a twin answers");
    assert!(object.same_bytes(&read));
    let stats = io.request_stats();
    assert_eq!(stats.hedged.load(Ordering::Relaxed), hanging);
    assert_eq!(stats.hedge_wins.load(Ordering::Relaxed), 1);
    assert_eq!(store.hooks().gets.load(Ordering::Relaxed), hanging + 1);
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedged_read_answers_while_the_first_hangs() {
    read_past_hanging_gets(1).await;
}

/// A read whose twin hangs too is sent a third time: with one twin, a read whose twin
/// drew the tail waited the whole tail (and an open of thousands of reads met one).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_read_whose_twin_hangs_too_is_sent_again() {
    read_past_hanging_gets(2).await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_read_that_never_answers_fails_at_its_timeout() {
    let base: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let hanging = Wrapper::wrap(base.clone(), FirstGetHangs::default());
    let io = WalIo::new(hanging, PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_millis(40));
    let object = object(2);
    assert!(matches!(
        persist(&io, &object, &retry(1)).await,
        PersistOutcome::Durable { .. }
    ));
    match io.read_whole(2).await {
        Err(Error::RequestTimeout { op: "get", .. }) => {}
        other => panic!("expected a timed-out read, got {other:?}"),
    }
    // The next read is not held: it answers.
    let read = io.read_whole(2).await.expect("read");
    assert!(object.same_bytes(&read));
}

/// A recovery reads again a summary whose read timed out: one failed read among
/// thousands would otherwise fail the open.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_recovery_reads_again_a_summary_whose_read_timed_out() {
    let base: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let hanging = Wrapper::wrap(base.clone(), FirstGetHangs::default());
    let io = WalIo::new(hanging.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_millis(40));
    let object = object(2);
    assert!(matches!(
        persist(&io, &object, &retry(1)).await,
        PersistOutcome::Durable { .. }
    ));
    let recovered = object_store_wal::internal::open::recover(&io, 4)
        .await
        .expect("the second read answers");
    assert_eq!(recovered.report.objects.len(), 1);
    assert_eq!(hanging.hooks().gets.load(Ordering::Relaxed), 2);
    assert_eq!(io.request_stats().timeouts.load(Ordering::Relaxed), 1);
}

/// Collects the keys a listing yields.
trait CollectKeys {
    async fn collect_keys(self) -> Vec<Path>;
}

impl CollectKeys
    for futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
{
    async fn collect_keys(self) -> Vec<Path> {
        use futures::StreamExt;
        let mut keys: Vec<Path> = self.map(|m| m.expect("listed").location).collect().await;
        keys.sort();
        keys
    }
}

/// Closing a view (its WAL stopped or was aborted) ends a create where it hangs, with an
/// unknown outcome and no retry, and refuses every later request before it reaches the
/// store.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_closed_view_sends_nothing() {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let counting = CountingStore::new(faults.clone());
    let io = WalIo::new(counting.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(HedgeAfter::Off, Duration::from_secs(3600));
    let hold = faults.hold_creates_of(&key(2));
    let pending = tokio::spawn({
        let io = io.clone();
        async move { persist(&io, &object(2), &retry(5)).await }
    });
    hold.wait_arrived(1).await;

    io.close();
    assert!(io.is_closed());
    let outcome = pending.await.expect("the persist task");
    assert!(
        matches!(
            outcome,
            PersistOutcome::Unknown {
                last: Error::Stopped { .. }
            }
        ),
        "{outcome:?}"
    );
    hold.wait_abandoned(1).await;
    hold.release();
    let sent = counting.counts().requests();
    assert!(matches!(io.list().await, Err(Error::Stopped { .. })));
    assert!(matches!(io.list_after(1).await, Err(Error::Stopped { .. })));
    assert!(matches!(io.read_whole(2).await, Err(Error::Stopped { .. })));
    assert!(matches!(
        io.read_range(2, 0..8).await,
        Err(Error::Stopped { .. })
    ));
    assert!(matches!(io.delete(2).await, Err(Error::Stopped { .. })));
    assert!(matches!(
        io.create(&object(3), CreateKind::Claim).await,
        CreateAttempt::Unknown(Error::Stopped { .. })
    ));
    io.closed().await;
    assert_eq!(
        counting.counts().requests(),
        sent,
        "nothing reached the store"
    );
    assert_eq!(hold.arrived(), 1, "the create was never retried");
    assert_eq!(hold.finished(), 0, "nor let through");
    assert_eq!(faults.inner().head(&key(2)).await.ok(), None);
}

/// Lists the wrapped store's keys one by one, each after `per_key`, and then, if
/// `stall`, never ends; if `first_hangs`, the first listing never gives a key.
#[derive(Debug, Default)]
struct SlowListing {
    per_key: Duration,
    stall: bool,
    first_hangs: bool,
    lists: AtomicU64,
}

#[async_trait]
impl Hooks for SlowListing {
    const NAME: &'static str = "SlowListing";

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        use futures::StreamExt;
        if self.lists.fetch_add(1, Ordering::Relaxed) == 0 && self.first_hangs {
            return futures::stream::pending().boxed();
        }
        let per_key = self.per_key;
        let keys = inner.list(prefix).then(move |meta| async move {
            tokio::time::sleep(per_key).await;
            meta
        });
        if self.stall {
            keys.chain(futures::stream::pending()).boxed()
        } else {
            keys.boxed()
        }
    }
}

/// A listing is bounded by its progress, not its length: one whose keys keep coming,
/// each within `request_timeout`, lists them all however long it takes in total (before,
/// a long listing timed out every attempt and an open never finished); one that stalls
/// ends with `RequestTimeout`.
#[tokio::test(start_paused = true)]
async fn a_listing_is_bounded_by_its_progress_not_its_length() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // A listing reads keys only: any bytes do.
    for sequence in 1..=5 {
        let bytes = bytes::Bytes::from_static(b"listed");
        store.put(&key(sequence), bytes.into()).await.expect("put");
    }
    let timeout = Duration::from_millis(100);
    for stall in [false, true] {
        let per_key = Duration::from_millis(60); // 5 keys: 300 ms in all
        let slow = Wrapper::wrap(
            store.clone(),
            SlowListing {
                per_key,
                stall,
                ..SlowListing::default()
            },
        );
        let io = WalIo::new(slow, PREFIX, 1 << 20)
            .expect("io")
            .with_requests(HedgeAfter::Off, timeout);
        match (stall, io.list().await) {
            (false, Ok(listing)) => assert_eq!(listing.objects.len(), 5),
            (true, Err(Error::RequestTimeout { op: "list", .. })) => {}
            (stall, other) => panic!("stall {stall}: {other:?}"),
        }
    }
}

/// A listing's first page is hedged: when no key came within the hedge delay, a second
/// listing beside the first gives them (an open is not held for the request timeout by
/// one slow LIST).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_listing_whose_first_page_hangs_is_answered_by_its_twin() {
    let base: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for sequence in 1..=3 {
        let bytes = bytes::Bytes::from_static(b"listed");
        base.put(&key(sequence), bytes.into()).await.expect("put");
    }
    let hanging = Wrapper::wrap(
        base,
        SlowListing {
            first_hangs: true,
            ..SlowListing::default()
        },
    );
    let io = WalIo::new(hanging.clone(), PREFIX, 1 << 20)
        .expect("io")
        .with_requests(
            HedgeAfter::Fixed(Duration::from_millis(20)),
            Duration::from_secs(60),
        );
    let listing = io.list().await.expect("the twin lists");
    let sequences: Vec<u64> = listing.objects.iter().map(|o| o.sequence).collect();
    assert_eq!(sequences, vec![1, 2, 3]);
    assert_eq!(hanging.hooks().lists.load(Ordering::Relaxed), 2);
    let stats = io.request_stats();
    assert_eq!(stats.hedged.load(Ordering::Relaxed), 1);
    assert_eq!(stats.hedge_wins.load(Ordering::Relaxed), 1);
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 0);
}

/// The seam a layer over several stores plugs into: a [`Transport`] that reads the object
/// it finds at a taken key hands it over with its answer, and the outcome table is
/// applied to those bytes without another read through the transport (over several
/// stores, a read of "the key" could be served by our own minority copy).
#[derive(Debug)]
struct ReadsWhatItFinds {
    inner: StoreTransport,
    /// GETs asked of this transport by the objects above it.
    gets: AtomicU64,
}

impl Transport for ReadsWhatItFinds {
    fn create<'a>(
        &'a self,
        key: &'a Path,
        body: &'a [bytes::Bytes],
        kind: CreateKind,
    ) -> Request<'a, CreateAttempt> {
        Box::pin(async move {
            match self.inner.create(key, body, kind).await {
                CreateAttempt::AlreadyExists { found: None } => {
                    match self.inner.get(key, None).await {
                        Ok(found) => CreateAttempt::AlreadyExists { found: Some(found) },
                        Err(e) => CreateAttempt::Unknown(e),
                    }
                }
                other => other,
            }
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a Path,
        range: Option<std::ops::Range<u64>>,
    ) -> Request<'a, object_store_wal::Result<bytes::Bytes>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(key, range)
    }

    fn list<'a>(
        &'a self,
        prefix: &'a Path,
        offset: Option<&'a Path>,
        visit: ListVisitor<'a>,
    ) -> Request<'a, object_store_wal::Result<()>> {
        self.inner.list(prefix, offset, visit)
    }

    fn delete<'a>(&'a self, key: &'a Path) -> Request<'a, object_store_wal::Result<()>> {
        self.inner.delete(key)
    }

    fn with_requests_counted(
        &self,
        hedge_after: HedgeAfter,
        timeout: Duration,
        stats: Arc<RequestStats>,
    ) -> Arc<dyn Transport> {
        self.inner
            .with_requests_counted(hedge_after, timeout, stats)
    }

    fn close(&self) {
        self.inner.close()
    }

    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn closed(&self) -> Request<'_, ()> {
        self.inner.closed()
    }

    fn stats(&self) -> &RequestStats {
        self.inner.stats()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[tokio::test]
async fn a_conflict_is_resolved_on_the_bytes_the_transport_found() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let metrics = Arc::new(Metrics::new(PREFIX));
    let transport = Arc::new(ReadsWhatItFinds {
        inner: StoreTransport::new(store.clone(), metrics.clone()),
        gets: AtomicU64::new(0),
    });
    let io = WalIo::over(transport.clone(), PREFIX, 1 << 20, metrics).expect("io");
    // Key 2 holds an object of a higher epoch: fenced. Key 3 holds our own bytes (an
    // earlier attempt landed): durable.
    let mut newer = *object(2).header();
    newer.epoch = 9;
    newer.link = Link {
        sequence: 1,
        epoch: 9,
    };
    let newer = encode_object(&newer, std::iter::empty()).expect("encodes");
    store
        .put(&key(2), newer.to_bytes().into())
        .await
        .expect("put");
    store
        .put(&key(3), object(3).to_bytes().into())
        .await
        .expect("put");
    match persist(&io, &object(2), &retry(3)).await {
        PersistOutcome::Fenced { fenced_by: 9 } => {}
        other => panic!("expected fenced by 9, got {other:?}"),
    }
    match persist(&io, &object(3), &retry(3)).await {
        PersistOutcome::Durable { attempts: 1 } => {}
        other => panic!("expected durable, got {other:?}"),
    }
    assert_eq!(
        transport.gets.load(Ordering::SeqCst),
        0,
        "no read of the key above it"
    );
}
