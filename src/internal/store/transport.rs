//! The transport: how the WAL's requests reach one object store, apart from what the
//! WAL's objects mean.
//!
//! [`Transport`] is the one narrow interface through which the WAL's objects
//! ([`crate::internal::store::objects`]) reach a store: a conditional create, a GET (whole or ranged), a
//! listing folded as its pages arrive, a delete, and closing. [`StoreTransport`] is its
//! implementation over one `ObjectStore`; a replication layer (one log over several
//! stores, DESIGN.md "One log over several stores") implements the same trait over N of
//! them, and nothing above it changes.
//!
//! What a [`StoreTransport`] adds to the bare store, for every request:
//! - No request waits forever: each has `request_timeout`, past which a create's outcome
//!   is unknown and a read failed; a small data create's attempt has a bound that
//!   follows the store's recent latencies ([`crate::internal::store::hedge`], about a second on a fast
//!   store), and a GET that hangs is answered by its twins.
//! - A create of a data object and every GET that has not answered within the hedge
//!   delay ([`crate::internal::store::hedge`]) is sent again beside the first (a GET once more after
//!   another delay, [`MAX_READ_ATTEMPTS`]); the first definite answer decides
//!   (DESIGN.md, "Hedging"). A create's slower attempt is left to finish (it may
//!   still land, which the outcome table covers); a read's is cancelled. Claims and
//!   opening objects are never hedged: their twin's "already exists" could not be told
//!   from another opener's.
//! - Every request is counted once when it ends, by op and outcome
//!   ([`Metrics::request`]): the twin of a hedged request that lost counts as `hedged`.
//! - A create the store refused for its request rate (S3's `503 SlowDown`, GCS's `429`,
//!   Azure's `503 ServerBusy`: [`is_throttle_reply`]) stays an unknown outcome (the
//!   client's hidden retries may still land), is counted (`wal_throttle_replies_total`),
//!   and turns create hedging off until a create is answered `Created` again: a twin
//!   would double the requests of a store that asks for fewer (DESIGN.md "Throttled
//!   stores").
//! - A transport can be closed ([`Transport::close`]), once its instance stopped or was
//!   aborted: from then on no request of it reaches the store. A request waiting for its
//!   answer (a hung upload, a hedge's slower twin, a reclaimer's listing) ends at once
//!   with [`Error::Stopped`], and a request not yet sent is never sent. Every task the
//!   WAL spawned ends with it: what such a task awaits is a request, and no request
//!   outlives the close. Closing is the only way to make that true at the moment
//!   `stop()` or `abort()` returns: ractor stops actors asynchronously, and a writer
//!   still handling its last message could otherwise start an upload after the WAL was
//!   said to be gone.
//!
//! Building a store from a URL is `url`'s ([`store_from_url`](super::url::store_from_url)).

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use crate::config::HedgeAfter;
use crate::error::{Durability, Error, Result};
use crate::internal::store::hedge::HedgeDelay;
use crate::metrics::{Metrics, Op, Outcome};

/// A boxed future of a [`Transport`] request.
pub type Request<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whether bytes a read returned are what the reader expects (length, checksums).
pub type Verify<'a> = &'a (dyn Fn(&Bytes) -> bool + Send + Sync);

/// Called with each key a listing finds, its size and when the store last modified it
/// (its own clock), as the pages arrive.
pub type ListVisitor<'a> = &'a mut (dyn FnMut(&Path, u64, SystemTime) + Send);

/// The answer of a conditional create.
#[derive(Debug, Clone)]
pub enum CreateAttempt {
    /// The object was created: durable.
    Created,
    /// An object already holds the key (ours from an earlier attempt, or another's).
    /// `found`: its bytes, when the transport has read them already (a layer over several
    /// stores does, to tell the copies apart: a read of "the key" there could be served
    /// by our own minority copy); `None`: the caller reads the key, as over one store.
    AlreadyExists {
        /// The object found at the key, if already read.
        found: Option<Bytes>,
    },
    /// The store does not do conditional creates.
    Unsupported,
    /// The store refused the create for permission or authentication
    /// ([`Error::AccessDenied`]): definite, nothing was written.
    Refused(Error),
    /// No definite answer (timeout, 5xx, connection): the object may appear later.
    Unknown(Error),
    /// No definite answer, and the store refused the create for its request rate (a
    /// throttle reply, [`is_throttle_reply`]; over several stores, a create whose quorum
    /// only throttle replies withheld): an unknown outcome that is retried paced
    /// (DESIGN.md "Throttled stores"). The verdict is carried, not read from the text
    /// again.
    Throttled(Error),
}

impl CreateAttempt {
    /// An unknown outcome, [`Throttled`](Self::Throttled) when `e` is a throttle
    /// reply ([`is_throttle_error`]).
    pub fn unknown(e: Error) -> Self {
        if is_throttle_error(&e) {
            CreateAttempt::Throttled(e)
        } else {
            CreateAttempt::Unknown(e)
        }
    }
}

/// What a create writes, which decides whether it is hedged and, over several stores, how
/// the stores' answers combine (DESIGN.md "One log over several stores").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateKind {
    /// A data object (or a keep-alive): hedged; an "already exists" with our own bytes
    /// is the outcome table's identical retry.
    Data,
    /// A claim of a hole, never hedged: over several stores it succeeds once the hole is
    /// settled ([`crate::internal::store::quorum::hole_settled`]).
    Claim,
    /// The opening object, never hedged: it succeeds only where it was *created*, never
    /// on an "already exists", whatever the bytes (two openers can write identical ones).
    Opening,
}

/// The requests the WAL's objects make of a store: the seam a replication layer
/// implements over several stores (see the module docs).
pub trait Transport: fmt::Debug + Send + Sync {
    /// Creates `key` with `body` (its chunks, in order) only if the key is absent. A
    /// [`CreateKind::Data`] create that has not answered within the hedge delay is sent
    /// again beside the first (see the module docs).
    fn create<'a>(
        &'a self,
        key: &'a Path,
        body: &'a [Bytes],
        kind: CreateKind,
    ) -> Request<'a, CreateAttempt>;

    /// Reads `key`, whole or `range` of it.
    fn get<'a>(&'a self, key: &'a Path, range: Option<Range<u64>>) -> Request<'a, Result<Bytes>>;

    /// [`get`](Self::get), where an answer that fails `verify` (damaged, or another
    /// value's copy) is no answer: over several stores another copy is read instead,
    /// and the damage is counted and logged; the bytes of the last copy tried come back
    /// if none verifies. Over one store, the same as `get`: the caller checks.
    fn get_verified<'a>(
        &'a self,
        key: &'a Path,
        range: Option<Range<u64>>,
        verify: Verify<'a>,
    ) -> Request<'a, Result<Bytes>> {
        let _ = verify;
        self.get(key, range)
    }

    /// Reads the last `len` bytes of `key` (all of it, if it is shorter) and the
    /// object's size, without knowing the size first: what a follower probing the next
    /// key reads. Over one store one GET with a suffix range (a store that takes no
    /// suffix range, Azure: a HEAD, then a ranged GET). A transport that does not
    /// provide it answers an error other than not-found; the follower then lists.
    fn get_tail<'a>(&'a self, key: &'a Path, len: u64) -> Request<'a, Result<(Bytes, u64)>> {
        let _ = len;
        Box::pin(async move {
            Err(Error::store(
                "get",
                key,
                object_store::Error::NotImplemented {
                    operation: "a read of a key's tail over several stores".into(),
                    implementer: self.describe(),
                },
            ))
        })
    }

    /// Lists the keys under `prefix` (above `offset`, when given), calling `visit` with
    /// each key and its size as the pages arrive, in no particular order.
    fn list<'a>(
        &'a self,
        prefix: &'a Path,
        offset: Option<&'a Path>,
        visit: ListVisitor<'a>,
    ) -> Request<'a, Result<()>>;

    /// Deletes `key`; a missing key is not an error.
    fn delete<'a>(&'a self, key: &'a Path) -> Request<'a, Result<()>>;

    /// The same stores with `timeout` on every request and hedging after `hedge_after`
    /// (new delay windows and stats; the closing state is shared).
    fn with_requests(&self, hedge_after: HedgeAfter, timeout: Duration) -> Arc<dyn Transport> {
        self.with_requests_counted(hedge_after, timeout, Arc::default())
    }

    /// [`with_requests`](Self::with_requests), counting into `stats` (shared with the
    /// layer above: a transport over several stores reports its stores' hedges and
    /// timeouts as its own).
    fn with_requests_counted(
        &self,
        hedge_after: HedgeAfter,
        timeout: Duration,
        stats: Arc<RequestStats>,
    ) -> Arc<dyn Transport>;

    /// Closes this transport for good: once this returns, no request reaches a store (a
    /// request in flight is dropped where it waits, one not yet sent is never sent) and
    /// every later one fails at once with [`Error::Stopped`] (a create: an unknown
    /// outcome, [`Durability::MayBeDurable`]). Idempotent.
    fn close(&self);

    /// Whether [`close`](Self::close) was called.
    fn is_closed(&self) -> bool;

    /// Waits until [`close`](Self::close) is called.
    fn closed(&self) -> Request<'_, ()>;

    /// The recent median latency of the creates that answered, once enough are known
    /// (over several stores, that of the store a quorum waits for): what a failed
    /// create's first retry waits under [`FirstRetryWait::Adaptive`](crate::FirstRetryWait).
    fn create_median(&self) -> Option<Duration> {
        None
    }

    /// What happened to the requests so far.
    fn stats(&self) -> &RequestStats;

    /// The store(s), for messages (a store that refuses conditional creates).
    fn describe(&self) -> String;

    /// How long one request may go unanswered.
    fn request_timeout(&self) -> Duration {
        DEFAULT_REQUEST_TIMEOUT
    }

    /// The transports of the stores beneath, one per store, when this one spans several
    /// (an open lists and reads each store's copies on its own); empty over one store.
    fn replicas(&self) -> Vec<Arc<dyn Transport>> {
        Vec::new()
    }
}

/// What happened to the requests of one transport (and every view sharing it).
#[derive(Debug, Default)]
pub struct RequestStats {
    /// Requests sent again beside a first attempt that had not answered in time.
    pub hedged: AtomicU64,
    /// Hedged requests whose second attempt answered first.
    pub hedge_wins: AtomicU64,
    /// Request attempts that had not answered within the request timeout.
    pub timeouts: AtomicU64,
    /// Creates whose answer was lost (an unknown outcome, or a hedge's twin that landed
    /// first) and whose retry found our own bytes at the key: durable all the same.
    pub creates_found_landed: AtomicU64,
    /// Damaged segments found: by a recovery that read their object whole, or by a read
    /// of their region (after its one read again). Each finding counts, so a segment
    /// found by a recovery and then by two reads counts three times.
    pub damaged_segments: AtomicU64,
    /// Over several stores: copies read that failed their checks (damaged, or another
    /// value's copy at the key) and were replaced by another store's.
    pub damaged_copies: AtomicU64,
}

impl RequestStats {
    /// The counts as they are now, each read on its own (not one atomic snapshot: a
    /// count may be a request ahead of another, `hedge_wins` of `hedged`).
    pub fn counts(&self) -> RequestCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            hedged: get(&self.hedged),
            hedge_wins: get(&self.hedge_wins),
            timeouts: get(&self.timeouts),
            creates_found_landed: get(&self.creates_found_landed),
            damaged_segments: get(&self.damaged_segments),
            damaged_copies: get(&self.damaged_copies),
        }
    }
}

/// What happened to a WAL's requests since it was opened: the counts a node reads to see
/// a slow or damaging store ([`ObjectStoreLogStore::request_counts`](crate::ObjectStoreLogStore::request_counts)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCounts {
    /// Requests sent again beside a first attempt that had not answered in time.
    pub hedged: u64,
    /// Hedged requests whose second attempt answered first.
    pub hedge_wins: u64,
    /// Request attempts that had not answered within the request timeout.
    pub timeouts: u64,
    /// Creates whose answer was lost and whose retry found the WAL's own bytes at the
    /// key: durable all the same.
    pub creates_found_landed: u64,
    /// Damaged segments found (each finding counts).
    pub damaged_segments: u64,
    /// Over several stores: copies that failed their checks and were replaced by another
    /// store's.
    pub damaged_copies: u64,
}

/// The kinds of request whose latencies are tracked apart for hedging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    Get,
}

/// How one request is sent: its kind, whether it may be hedged, and how long each of
/// its attempts may take.
#[derive(Debug, Clone, Copy)]
struct Shape {
    kind: Kind,
    hedgeable: bool,
    bound: Duration,
}

impl Kind {
    fn op(self) -> Op {
        match self {
            Kind::Create => Op::Put,
            Kind::Get => Op::Get,
        }
    }
}

/// How requests are bounded and hedged, shared by the clones of a [`StoreTransport`].
#[derive(Debug)]
struct Requests {
    timeout: Duration,
    creates: Mutex<HedgeDelay>,
    gets: Mutex<HedgeDelay>,
    stats: Arc<RequestStats>,
    /// The last create answered was a throttle reply: creates are not hedged until one
    /// is created again.
    throttled: AtomicBool,
}

impl Requests {
    fn new(hedge_after: HedgeAfter, timeout: Duration) -> Self {
        Requests {
            timeout,
            creates: Mutex::new(HedgeDelay::new(hedge_after)),
            gets: Mutex::new(HedgeDelay::new(hedge_after)),
            stats: Arc::default(),
            throttled: AtomicBool::new(false),
        }
    }

    fn delays(&self, kind: Kind) -> &Mutex<HedgeDelay> {
        match kind {
            Kind::Create => &self.creates,
            Kind::Get => &self.gets,
        }
    }

    fn delay(&self, kind: Kind) -> Option<Duration> {
        self.delays(kind)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .delay()
    }

    fn record(&self, kind: Kind, latency: Duration) {
        self.delays(kind)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(latency);
    }

    /// How long one attempt of a small request of `kind` may take
    /// ([`HedgeDelay::attempt_timeout`], at most the request timeout).
    fn attempt_timeout(&self, kind: Kind) -> Duration {
        self.delays(kind)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .attempt_timeout(self.timeout)
    }

    /// An attempt of `kind` timed out after `bound`: counted, and a latency of `bound`.
    fn timed_out(&self, kind: Kind, bound: Duration) {
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        self.delays(kind)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .timed_out(bound);
    }
}

/// Requests that move more bytes than this are never hedged: their latency is mostly
/// transfer, which a twin would double, and under load a hedged large upload slows every
/// other one (measured: 8 MiB objects at 50 ms PUT latency, p99 from 105 ms to 690 ms).
pub const HEDGE_MAX_BYTES: u64 = 1024 * 1024;

/// The default request timeout of a transport built without a [`Config`](crate::Config).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type Attempt<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
/// An attempt of a hedged request, with its place in the order they were sent.
type Tagged<T> = Attempt<(usize, (T, Outcome))>;

/// Attempts of one read at most: the first, and a twin each hedge delay while none has
/// answered.
pub const MAX_READ_ATTEMPTS: usize = 3;

/// Whether the instance owning a transport has ended, shared by every clone.
#[derive(Debug)]
struct Closing {
    /// `true` once closed. A request's future is polled only under a read lock on it
    /// and [`Transport::close`] takes the write lock, so once `close` returned no request
    /// future is polled again: none is sent, none goes on.
    gate: RwLock<bool>,
    /// Wakes the requests waiting for an answer when the gate closes.
    closed: tokio::sync::watch::Sender<bool>,
}

impl Closing {
    fn new() -> Self {
        Closing {
            gate: RwLock::new(false),
            closed: tokio::sync::watch::Sender::new(false),
        }
    }

    fn is_closed(&self) -> bool {
        *self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `request` while open: `None` when the gate is (or becomes) closed, at once.
    async fn run<T>(self: &Arc<Self>, request: impl Future<Output = T>) -> Option<T> {
        let mut closed = self.closed.subscribe();
        let gated = Gated {
            closing: self.clone(),
            request: Box::pin(request),
        };
        tokio::select! {
            biased;
            // The sender lives in `self`: the wait ends only when the gate closed.
            _ = closed.wait_for(|c| *c) => None,
            answer = gated => answer,
        }
    }
}

/// A request's future, polled only while its gate is open.
struct Gated<F> {
    closing: Arc<Closing>,
    request: Pin<Box<F>>,
}

impl<F: Future> Future for Gated<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let closed = this.closing.gate.read().unwrap_or_else(|p| p.into_inner());
        if *closed {
            return Poll::Ready(None);
        }
        // Polled holding the read lock: `close` waits for this poll to end.
        let answer = this.request.as_mut().poll(cx).map(Some);
        drop(closed);
        answer
    }
}

/// How a request under [`StoreTransport::within_timeout`] ended.
fn outcome_of<T, E>(answer: &Result<std::result::Result<T, E>>) -> Outcome {
    match answer {
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err(_)) | Err(Error::Stopped { .. }) => Outcome::Error,
        Err(_) => Outcome::TimedOut,
    }
}

fn create_outcome(answer: &CreateAttempt) -> Outcome {
    match answer {
        CreateAttempt::Created => Outcome::Ok,
        CreateAttempt::AlreadyExists { .. } => Outcome::Conflict,
        CreateAttempt::Unsupported
        | CreateAttempt::Refused(_)
        | CreateAttempt::Unknown(_)
        | CreateAttempt::Throttled(_) => Outcome::Error,
    }
}

/// Whether `e` is a store's refusal for its request rate, a *throttle reply*: a `429
/// Too Many Requests` (GCS, and any HTTP store), or a `503` whose body names the
/// service's throttling code (S3's `SlowDown`, Azure's `ServerBusy`). Not proof that
/// nothing was written (`object_store`'s client retries a 5xx or 429 itself, and an
/// earlier attempt of its may still land): only a hint to retry later and less often
/// (DESIGN.md "Throttled stores").
///
/// `object_store` returns these as [`object_store::Error::Generic`] around its client's
/// `RetryError`, which cannot be named or downcast outside `object_store`, so the
/// status and the code are read from the error's text and that of its sources
/// (`... Server returned non-2xx status code: 503 Service Unavailable: <body>`). A `503`
/// without a throttling code (a service unavailable for another reason) is not one.
pub fn is_throttle_reply(e: &object_store::Error) -> bool {
    std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .any(|e| throttle_text(&e.to_string()))
}

/// Whether a create attempt's error is a throttle reply: one store's
/// ([`is_throttle_reply`]), or, over several stores, a create whose quorum only the
/// throttle replies of some stores withheld ([`Error::NoQuorum`] with `throttled` above
/// zero, [`CreateTally::withheld_by_throttle`](crate::internal::store::quorum::CreateTally::withheld_by_throttle)).
/// Either is retried as a throttle reply (DESIGN.md "Throttled stores").
pub fn is_throttle_error(e: &Error) -> bool {
    match e {
        Error::Store { source, .. } => is_throttle_reply(source),
        Error::NoQuorum { throttled, .. } => *throttled > 0,
        _ => false,
    }
}

/// Whether one error text is a throttle reply's (see [`is_throttle_reply`]).
fn throttle_text(text: &str) -> bool {
    const STATUS: &str = "non-2xx status code: ";
    let Some((_, rest)) = text.split_once(STATUS) else {
        return false;
    };
    if rest.starts_with("429") {
        return true;
    }
    rest.starts_with("503")
        && ["<Code>SlowDown</Code>", "<Code>ServerBusy</Code>"]
            .iter()
            .any(|code| rest.contains(code))
}

fn get_outcome(answer: &Result<Bytes>) -> Outcome {
    match answer {
        Ok(_) => Outcome::Ok,
        Err(_) => Outcome::Error,
    }
}

fn timeout_error(op: &'static str, key: &Path, after: Duration) -> Error {
    Error::RequestTimeout {
        op,
        key: key.to_string(),
        after,
    }
}

/// [`Transport`] over one `ObjectStore`: timeouts, hedging, counting and closing around
/// each request.
#[derive(Debug, Clone)]
pub struct StoreTransport {
    store: Arc<dyn ObjectStore>,
    requests: Arc<Requests>,
    metrics: Arc<Metrics>,
    closing: Arc<Closing>,
}

impl StoreTransport {
    /// The transport to `store`, counting its requests in `metrics`, without hedging and
    /// with [`DEFAULT_REQUEST_TIMEOUT`].
    pub fn new(store: Arc<dyn ObjectStore>, metrics: Arc<Metrics>) -> Self {
        StoreTransport {
            store,
            requests: Arc::new(Requests::new(HedgeAfter::Off, DEFAULT_REQUEST_TIMEOUT)),
            metrics,
            closing: Arc::new(Closing::new()),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The error of a request refused or dropped because the transport is closed.
    fn stopped(durability: Durability) -> Error {
        Error::Stopped { durability }
    }

    /// Runs `attempt` under `bound` (`timed_out` is its answer past it) and,
    /// when `kind` is hedged and no answer came within the hedge delay, a second attempt
    /// beside it (a read: another each hedge delay while none has answered, up to
    /// [`MAX_READ_ATTEMPTS`]): the first `definite` answer decides; if none is
    /// definite, the last answer is returned. A create's slower attempt is left to run to its end (its
    /// timeout bounds it, and so does [`close`](Self::close)); a read's is cancelled.
    /// Once the view is closed, every attempt answers `stopped`. Each attempt is counted
    /// when it ends, as `outcome` says, or as hedged if it lost.
    async fn race<T>(
        &self,
        Shape {
            kind,
            hedgeable,
            bound,
        }: Shape,
        [timed_out, stopped]: [T; 2],
        definite: fn(&T) -> bool,
        outcome: fn(&T) -> Outcome,
        attempt: impl Fn() -> Attempt<T>,
    ) -> T
    where
        T: Clone + Send + 'static,
    {
        let timed = || -> Attempt<(T, Outcome)> {
            let fut = attempt();
            let requests = self.requests.clone();
            let closing = self.closing.clone();
            let (timed_out, stopped) = (timed_out.clone(), stopped.clone());
            Box::pin(async move {
                // On tokio's clock, as the hedge delay's timer is: under a paused test
                // clock a latency is the virtual time the request took.
                let started = tokio::time::Instant::now();
                match closing.run(tokio::time::timeout(bound, fut)).await {
                    None => (stopped, Outcome::Error),
                    Some(Ok(answer)) => {
                        if definite(&answer) {
                            requests.record(kind, started.elapsed());
                        }
                        let how = outcome(&answer);
                        (answer, how)
                    }
                    Some(Err(_)) => {
                        requests.timed_out(kind, bound);
                        (timed_out, Outcome::TimedOut)
                    }
                }
            })
        };
        let op = kind.op();
        let count = |(answer, how): (T, Outcome)| {
            self.metrics.request(op, how);
            answer
        };
        let mut first = timed();
        let Some(delay) = self.requests.delay(kind).filter(|_| hedgeable) else {
            return count(first.await);
        };
        tokio::select! {
            answer = &mut first => return count(answer),
            _ = tokio::time::sleep(delay) => {}
        }
        // A create has one twin; a read is sent again each hedge delay while no attempt
        // has answered, up to [`MAX_READ_ATTEMPTS`]: with one twin, a read whose twin
        // drew the tail too waited the whole tail, and an open of thousands of reads
        // always met one (measured: 1.4 s instead of 0.7 s at a 5 % tail of 1 s).
        let max_attempts = match kind {
            Kind::Create => 2,
            Kind::Get => MAX_READ_ATTEMPTS,
        };
        let tagged = |i: usize, attempt: Attempt<(T, Outcome)>| -> Tagged<T> {
            Box::pin(async move { (i, attempt.await) })
        };
        let leave = |loser: Tagged<T>| {
            if kind == Kind::Create {
                // Not cancelled: it may still land, like any retry.
                let metrics = self.metrics.clone();
                tokio::spawn(async move {
                    loser.await;
                    metrics.request(op, Outcome::Hedged);
                });
            } else {
                self.metrics.request(op, Outcome::Hedged);
            }
        };
        let mut running: FuturesUnordered<Tagged<T>> = FuturesUnordered::new();
        running.push(tagged(0, first));
        let mut sent = 1;
        let mut last = None;
        // The first hedge delay has passed.
        let mut send_twin = true;
        loop {
            if send_twin {
                self.requests.stats.hedged.fetch_add(1, Ordering::Relaxed);
                running.push(tagged(sent, timed()));
                sent += 1;
            }
            // No more twins once one attempt answered, definite or not.
            let next = if sent < max_attempts && last.is_none() {
                tokio::select! {
                    next = running.next() => next,
                    _ = tokio::time::sleep(delay) => {
                        send_twin = true;
                        continue;
                    }
                }
            } else {
                running.next().await
            };
            send_twin = false;
            let Some((i, answer)) = next else { break };
            if definite(&answer.0) {
                if i > 0 {
                    self.requests
                        .stats
                        .hedge_wins
                        .fetch_add(1, Ordering::Relaxed);
                }
                for loser in running {
                    leave(loser);
                }
                return count(answer);
            }
            last = Some(count(answer));
        }
        match last {
            Some(answer) => answer,
            None => stopped,
        }
    }

    /// What a create of `object` answers past the request timeout, and once the view is
    /// closed: an unknown outcome either way (it may have been sent).
    fn create_unanswered(&self, key: &Path, bound: Duration) -> [CreateAttempt; 2] {
        [
            CreateAttempt::Unknown(timeout_error("create", key, bound)),
            CreateAttempt::Unknown(Self::stopped(Durability::MayBeDurable)),
        ]
    }

    /// One conditional create of `object`, as a future that owns what it needs.
    fn create_attempt(&self, key: &Path, body: &[Bytes]) -> impl Fn() -> Attempt<CreateAttempt> {
        let store = self.store.clone();
        let key = key.clone();
        let chunks: Vec<Bytes> = body.to_vec();
        let (requests, metrics) = (self.requests.clone(), self.metrics.clone());
        move || {
            let (store, key) = (store.clone(), key.clone());
            let (requests, metrics) = (requests.clone(), metrics.clone());
            let payload: PutPayload = chunks.iter().cloned().collect();
            Box::pin(async move {
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                };
                match store.put_opts(&key, payload, opts).await {
                    Ok(_) => {
                        requests.throttled.store(false, Ordering::Relaxed);
                        CreateAttempt::Created
                    }
                    // Pushed back for the request rate: still unknown (an earlier hidden
                    // attempt of the client may land), but no twins until one lands.
                    Err(e) if is_throttle_reply(&e) => {
                        requests.throttled.store(true, Ordering::Relaxed);
                        metrics.throttle_replies.increment(1);
                        CreateAttempt::Throttled(Error::store("create", key, e))
                    }
                    Err(object_store::Error::AlreadyExists { .. })
                    | Err(object_store::Error::Precondition { .. }) => {
                        CreateAttempt::AlreadyExists { found: None }
                    }
                    Err(object_store::Error::NotImplemented { .. })
                    | Err(object_store::Error::NotSupported { .. }) => CreateAttempt::Unsupported,
                    Err(e) => match Error::store("create", key, e) {
                        e @ Error::AccessDenied { .. } => CreateAttempt::Refused(e),
                        e => CreateAttempt::Unknown(e),
                    },
                }
            })
        }
    }

    /// `request`, unhedged, under the request timeout: past it, a
    /// [`Error::RequestTimeout`] for `op` on `key`, counted; once the view is closed,
    /// [`Error::Stopped`].
    async fn within_timeout<T>(
        &self,
        op: &'static str,
        key: &Path,
        request: impl Future<Output = T>,
    ) -> Result<T> {
        match self
            .closing
            .run(tokio::time::timeout(self.requests.timeout, request))
            .await
        {
            None => Err(Self::stopped(Durability::NotWritten)),
            Some(Ok(answer)) => Ok(answer),
            Some(Err(_)) => {
                let stats = &self.requests.stats;
                stats.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(self.timeout_error(op, key))
            }
        }
    }

    fn timeout_error(&self, op: &'static str, key: &Path) -> Error {
        timeout_error(op, key, self.requests.timeout)
    }

    /// One GET (of `range`, or whole), hedged unless the range is larger than
    /// [`HEDGE_MAX_BYTES`], under the request timeout.
    async fn get_hedged(&self, key: &Path, range: Option<Range<u64>>) -> Result<Bytes> {
        let hedgeable = range
            .as_ref()
            .is_none_or(|r| r.end.saturating_sub(r.start) <= HEDGE_MAX_BYTES);
        let key = key.clone();
        let timed_out = Err(self.timeout_error("get", &key));
        let stopped = Err(Self::stopped(Durability::NotWritten));
        let store = self.store.clone();
        let attempt = move || -> Attempt<Result<Bytes>> {
            let (store, key, range) = (store.clone(), key.clone(), range.clone());
            Box::pin(async move {
                let get = |e| Error::store("get", &key, e);
                let opts = GetOptions {
                    range: range.map(GetRange::Bounded),
                    ..Default::default()
                };
                store
                    .get_opts(&key, opts)
                    .await
                    .map_err(get)?
                    .bytes()
                    .await
                    .map_err(get)
            })
        };
        self.race(
            Shape {
                kind: Kind::Get,
                hedgeable,
                bound: self.requests.timeout,
            },
            [timed_out, stopped],
            Result::is_ok,
            get_outcome,
            attempt,
        )
        .await
    }
}

impl StoreTransport {
    /// One GET of the last `len` bytes of `key`, with the object's size, hedged like a
    /// small GET. A store that refuses suffix ranges is asked its size first (HEAD).
    async fn get_tail_hedged(&self, key: &Path, len: u64) -> Result<(Bytes, u64)> {
        let key = key.clone();
        let timed_out = Err(self.timeout_error("get", &key));
        let stopped = Err(Self::stopped(Durability::NotWritten));
        let store = self.store.clone();
        let attempt = move || -> Attempt<Result<(Bytes, u64)>> {
            let (store, key) = (store.clone(), key.clone());
            Box::pin(async move {
                let get = |e| Error::store("get", &key, e);
                let suffix = GetOptions {
                    range: Some(GetRange::Suffix(len)),
                    ..Default::default()
                };
                let result = match store.get_opts(&key, suffix).await {
                    Err(object_store::Error::NotSupported { .. }) => {
                        let size = store.head(&key).await.map_err(get)?.size;
                        let bounded = GetOptions {
                            range: Some(GetRange::Bounded(size.saturating_sub(len)..size)),
                            ..Default::default()
                        };
                        store.get_opts(&key, bounded).await
                    }
                    other => other,
                }
                .map_err(get)?;
                let size = result.meta.size;
                let bytes = result.bytes().await.map_err(get)?;
                Ok((bytes, size))
            })
        };
        self.race(
            Shape {
                kind: Kind::Get,
                hedgeable: len <= HEDGE_MAX_BYTES,
                bound: self.requests.timeout,
            },
            [timed_out, stopped],
            Result::is_ok,
            |answer| match answer {
                Ok(_) => Outcome::Ok,
                Err(_) => Outcome::Error,
            },
            attempt,
        )
        .await
    }
}

impl Transport for StoreTransport {
    fn create<'a>(
        &'a self,
        key: &'a Path,
        body: &'a [Bytes],
        kind: CreateKind,
    ) -> Request<'a, CreateAttempt> {
        let hedge = kind == CreateKind::Data;
        let len: u64 = body.iter().map(|c| c.len() as u64).sum();
        let small = len <= HEDGE_MAX_BYTES;
        let definite = |a: &CreateAttempt| {
            !matches!(a, CreateAttempt::Unknown(_) | CreateAttempt::Throttled(_))
        };
        // A small data create's attempt follows the store's latency (given up, it is an
        // unknown outcome that `persist` retries with the same bytes); a large one's time
        // is mostly transfer, and a claim's or an opening object's unknown outcome costs
        // the open a restart: they keep the request timeout.
        let bound = if small && hedge {
            self.requests.attempt_timeout(Kind::Create)
        } else {
            self.requests.timeout
        };
        // Not while the store pushes back: a twin is one more request it refuses.
        let throttled = self.requests.throttled.load(Ordering::Relaxed);
        Box::pin(self.race(
            Shape {
                kind: Kind::Create,
                hedgeable: hedge && small && !throttled,
                bound,
            },
            self.create_unanswered(key, bound),
            definite,
            create_outcome,
            self.create_attempt(key, body),
        ))
    }

    fn get<'a>(&'a self, key: &'a Path, range: Option<Range<u64>>) -> Request<'a, Result<Bytes>> {
        Box::pin(self.get_hedged(key, range))
    }

    fn get_tail<'a>(&'a self, key: &'a Path, len: u64) -> Request<'a, Result<(Bytes, u64)>> {
        Box::pin(self.get_tail_hedged(key, len))
    }

    fn list<'a>(
        &'a self,
        prefix: &'a Path,
        offset: Option<&'a Path>,
        visit: ListVisitor<'a>,
    ) -> Request<'a, Result<()>> {
        Box::pin(async move {
            // The stream is made inside the request, so a closed transport never asks
            // the store for it; folded as the pages arrive. The bound is on progress:
            // each key must come within `request_timeout` of the one before (a listing
            // of many pages is slower than any one request, and is not ended for it;
            // one that stalls is).
            let timeout = self.requests.timeout;
            let listing = async {
                let open = || match offset {
                    Some(offset) => self.store.list_with_offset(Some(prefix), offset),
                    None => self.store.list(Some(prefix)),
                };
                let mut keys = open();
                // The first page is hedged like a GET: a second listing beside the
                // first once the hedge delay passes without a key, the first to answer
                // kept. Later pages are not: some stores list in no order, so a listing
                // cannot be resumed after the last key it gave.
                let first = match self.requests.delay(Kind::Get) {
                    None => tokio::time::timeout(timeout, keys.next()).await,
                    Some(delay) => match tokio::time::timeout(delay, keys.next()).await {
                        Ok(first) => Ok(first),
                        Err(_) => {
                            self.requests.stats.hedged.fetch_add(1, Ordering::Relaxed);
                            // The one of the two not kept.
                            self.metrics.request(Op::List, Outcome::Hedged);
                            let mut twin = open();
                            let rest = timeout.saturating_sub(delay);
                            let raced = tokio::time::timeout(rest, async {
                                tokio::select! {
                                    first = keys.next() => (false, first),
                                    first = twin.next() => (true, first),
                                }
                            })
                            .await;
                            raced.map(|(twin_first, first)| {
                                if twin_first {
                                    self.requests
                                        .stats
                                        .hedge_wins
                                        .fetch_add(1, Ordering::Relaxed);
                                    keys = twin;
                                }
                                first
                            })
                        }
                    },
                };
                match first {
                    Err(stalled) => return Err(stalled),
                    Ok(None) => return Ok(Ok(())),
                    Ok(Some(Err(e))) => return Ok(Err(e)),
                    Ok(Some(Ok(meta))) => {
                        visit(&meta.location, meta.size, meta.last_modified.into())
                    }
                }
                loop {
                    match tokio::time::timeout(timeout, keys.next()).await {
                        Err(stalled) => return Err(stalled),
                        Ok(None) => return Ok(Ok(())),
                        Ok(Some(Err(e))) => return Ok(Err(e)),
                        Ok(Some(Ok(meta))) => {
                            visit(&meta.location, meta.size, meta.last_modified.into())
                        }
                    }
                }
            };
            let answer = match self.closing.run(listing).await {
                None => Err(Self::stopped(Durability::NotWritten)),
                Some(Ok(answer)) => Ok(answer),
                Some(Err(_)) => {
                    self.requests.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    Err(self.timeout_error("list", prefix))
                }
            };
            self.metrics.request(Op::List, outcome_of(&answer));
            answer?.map_err(|e| Error::store("list", prefix, e))
        })
    }

    fn delete<'a>(&'a self, key: &'a Path) -> Request<'a, Result<()>> {
        Box::pin(async move {
            let answer = self
                .within_timeout("delete", key, async { self.store.delete(key).await })
                .await
                .map(|r| match r {
                    Err(object_store::Error::NotFound { .. }) => Ok(()),
                    other => other,
                });
            self.metrics.request(Op::Delete, outcome_of(&answer));
            answer?.map_err(|e| Error::store("delete", key, e))
        })
    }

    fn with_requests_counted(
        &self,
        hedge_after: HedgeAfter,
        timeout: Duration,
        stats: Arc<RequestStats>,
    ) -> Arc<dyn Transport> {
        let mut requests = Requests::new(hedge_after, timeout);
        requests.stats = stats;
        Arc::new(StoreTransport {
            requests: Arc::new(requests),
            ..self.clone()
        })
    }

    fn close(&self) {
        let mut gate = self.closing.gate.write().unwrap_or_else(|p| p.into_inner());
        *gate = true;
        drop(gate);
        self.closing.closed.send_replace(true);
    }

    fn is_closed(&self) -> bool {
        self.closing.is_closed()
    }

    fn closed(&self) -> Request<'_, ()> {
        Box::pin(async move {
            let mut closed = self.closing.closed.subscribe();
            // The sender lives in `self.closing`: the channel cannot close while waiting.
            let _ = closed.wait_for(|c| *c).await;
        })
    }

    fn stats(&self) -> &RequestStats {
        &self.requests.stats
    }

    fn create_median(&self) -> Option<Duration> {
        self.requests
            .creates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .median()
    }

    fn describe(&self) -> String {
        self.store.to_string()
    }

    fn request_timeout(&self) -> Duration {
        self.requests.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a given text, as `object_store`'s client's `RetryError` is to a
    /// caller: only its text can be read.
    #[derive(Debug)]
    struct Text(String);

    impl fmt::Display for Text {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Text {}

    fn generic(store: &'static str, text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store,
            source: Box::new(Text(text.into())),
        }
    }

    const S3_SLOW_DOWN: &str = "Error performing PUT https://s3.us-east-1.amazonaws.com/b/wal/00000000000000000002.wal in 31.2ms, after 10 retries, max_retries: 10, retry_timeout: 180s  - Server returned non-2xx status code: 503 Service Unavailable: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>1</RequestId><HostId>2</HostId></Error>";
    const GCS_429: &str = "Error performing PUT https://storage.googleapis.com/b/wal/2.wal in 12ms - Server returned non-2xx status code: 429 Too Many Requests: <?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
    const AZURE_BUSY: &str = "Error performing PUT https://a.blob.core.windows.net/c/wal/2.wal in 9ms - Server returned non-2xx status code: 503 Service Unavailable: \u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code><Message>Operations per second is over the account limit.</Message></Error>";

    /// The throttle replies of the three services, in the text `object_store`'s client
    /// gives them (docs/OPERATIONS.md, "What each store error means"), are told from
    /// every other error, a 503 without a throttling code included.
    #[test]
    fn throttle_replies_are_told_from_other_store_errors() {
        for (store, text) in [
            ("S3", S3_SLOW_DOWN),
            ("GCS", GCS_429),
            ("MicrosoftAzure", AZURE_BUSY),
        ] {
            assert!(is_throttle_reply(&generic(store, text)), "{text}");
        }
        // A 429 with no body.
        assert!(is_throttle_reply(&generic(
            "GCS",
            "Error performing PUT u in 1ms - Server returned non-2xx status code: 429 Too Many Requests: "
        )));
        let others = [
            generic(
                "S3",
                "Error performing PUT u in 1ms - Server returned non-2xx status code: 503 Service Unavailable: ",
            ),
            generic(
                "S3",
                "Error performing PUT u in 1ms - Server returned non-2xx status code: 500 Internal Server Error: <Error><Code>InternalError</Code></Error>",
            ),
            generic(
                "S3",
                "Error performing PUT u in 1ms - Server returned non-2xx status code: 400 Bad Request: <Error><Code>SlowDown</Code></Error>",
            ),
            generic("S3", "Error performing PUT u in 30s - request timed out"),
            generic("S3", "<Code>SlowDown</Code> without a status"),
            object_store::Error::NotFound {
                path: "wal/2".into(),
                source: Box::new(Text("429".into())),
            },
            object_store::Error::Precondition {
                path: "wal/2".into(),
                source: Box::new(Text(S3_SLOW_DOWN.replace("503", "412"))),
            },
        ];
        for e in others {
            assert!(!is_throttle_reply(&e), "{e}");
        }
    }

    /// A create's error is a throttle reply when one store's is, or when over several
    /// stores the throttle replies alone withheld the quorum; the message says so.
    #[test]
    fn a_quorum_withheld_by_throttle_replies_is_a_throttle_reply() {
        assert!(is_throttle_error(&Error::store(
            "create",
            "wal/2",
            generic("S3", S3_SLOW_DOWN)
        )));
        let other = generic(
            "S3",
            "Error performing PUT u in 1ms - Server returned non-2xx status code: 500 Internal Server Error: ",
        );
        assert!(!is_throttle_error(&Error::store("create", "wal/2", other)));
        let no_quorum = |throttled| Error::NoQuorum {
            op: "create",
            key: "wal/2".into(),
            answered: 1,
            stores: 3,
            quorum: 2,
            throttled,
            last: "store 2: refused".into(),
        };
        assert!(is_throttle_error(&no_quorum(2)));
        assert!(!is_throttle_error(&no_quorum(0)));
        assert_eq!(
            no_quorum(2).to_string(),
            "store create of wal/2: 1 of 3 stores answered, a quorum is 2 \
             (2 refused it for the store's request rate); last error: store 2: refused"
        );
        assert_eq!(
            no_quorum(0).to_string(),
            "store create of wal/2: 1 of 3 stores answered, a quorum is 2; \
             last error: store 2: refused"
        );
    }
}
