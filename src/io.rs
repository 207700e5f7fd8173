//! Everything the WAL asks of the object store, and the only module that calls it.
//!
//! - Keys: `<prefix>/<20-digit sequence>.wal`; any other key under the prefix is
//!   foreign: listed, reported, never read, never deleted.
//! - Listing order is not trusted (LocalFileSystem lists unsorted): [`WalIo::list`] sorts.
//! - Creates are conditional (`PutMode::Create`) and report one of the outcomes of
//!   DESIGN.md's table; resolving an `AlreadyExists` (identical retry, fenced, stale
//!   tail) is the caller's, with [`WalIo::read_whole`].
//! - An object's header, footer and trailer are read with one GET when its listed size
//!   is at most `whole_read_threshold`, else with two ranged GETs computed from the
//!   listed size (Azure refuses suffix ranges), plus one for a footer larger than the
//!   tail read. Segments are read with one ranged GET of exactly their bytes.
//! - Damage inside a segment never fails a summary read, even of an object read whole
//!   (FORMAT.md, "What a reader verifies"): the whole read checks each segment on its
//!   own and reports the damaged ones ([`WalIo::report_damaged_segment`]: a warning
//!   naming key and region, and [`RequestStats::damaged_segments`]).
//! - No request waits forever: each has `request_timeout`, past which a create's outcome
//!   is unknown and a read failed. A create of a data object and every GET that has
//!   not answered within the hedge delay ([`crate::hedge`]) is sent again beside the
//!   first; the first definite answer decides (DESIGN.md, "Hedging"). A create's slower
//!   attempt is left to finish (it may still land, which the outcome table covers); a
//!   read's is cancelled. Claims and opening objects are never hedged: their twin's
//!   "already exists" could not be told from another opener's.
//! - Every request is counted once when it ends, by op and outcome
//!   ([`Metrics::request`]): the twin of a hedged request that lost counts as `hedged`.
//! - A [`WalIo`] can be closed ([`WalIo::close`]), once its instance stopped or was
//!   aborted: from then on no request of it, or of any clone, reaches the store. A
//!   request waiting for its answer (a hung upload, a hedge's slower twin, a reclaimer's
//!   listing) ends at once with [`Error::Stopped`], and a request not yet sent is never
//!   sent. Every task the WAL spawned ends with it: what such a task awaits is a
//!   request, and no request outlives the close. Closing is the only way to make that
//!   true at the moment `stop()` or `abort()` returns: ractor stops actors
//!   asynchronously, and a writer still handling its last message could otherwise start
//!   an upload after the WAL was said to be gone.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use crate::config::{Config, HedgeAfter};
use crate::error::{Durability, Error, Result};
use crate::format::{
    self, EncodedObject, FormatError, ObjectSummary, SegmentDamage, EMPTY_OBJECT_LEN, HEADER_LEN,
    MAX_SEQUENCE, TRAILER_LEN,
};
use crate::hedge::HedgeDelay;
use crate::metrics::{Metrics, Op, Outcome};

/// Digits of the zero-padded sequence in a key.
pub const SEQUENCE_DIGITS: usize = 20;
/// Suffix of every WAL key.
pub const KEY_SUFFIX: &str = ".wal";
/// Bytes read from the end of a large object to get its trailer and, usually, its footer.
pub const TAIL_READ_BYTES: u64 = 64 * 1024;

/// An object's summary as a recovery read it, with the segments found damaged when the
/// object was read whole (always empty for an object read with ranged GETs, whose
/// segments are not fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRead {
    /// Header, footer and trailer, verified.
    pub summary: ObjectSummary,
    /// The segments that failed their own checks twice (read again once).
    pub damaged: Vec<SegmentDamage>,
}

/// An object found by listing: its sequence and listed size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The sequence from its key.
    pub sequence: u64,
    /// The size the listing reported.
    pub size: u64,
}

/// The result of listing a prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// WAL objects, in ascending sequence.
    pub objects: Vec<ListedObject>,
    /// Keys under the prefix that are not WAL objects.
    pub foreign: Vec<String>,
}

/// The answer of a conditional create.
#[derive(Debug, Clone)]
pub enum CreateAttempt {
    /// The object was created: durable.
    Created,
    /// An object already holds the key (ours from an earlier attempt, or another's).
    AlreadyExists,
    /// The store does not do conditional creates.
    Unsupported,
    /// No definite answer (timeout, 5xx, connection): the object may appear later.
    Unknown(Error),
}

/// Checks a WAL prefix: non-empty, relative, no trailing `/`, no empty, `.` or `..`
/// component.
pub fn validate_prefix(prefix: &str) -> Result<Path> {
    let bad = |reason| Error::InvalidPrefix {
        prefix: prefix.to_string(),
        reason,
    };
    if prefix.is_empty() {
        return Err(bad("it is empty"));
    }
    if prefix.starts_with('/') {
        return Err(bad("it starts with '/'; prefixes are relative"));
    }
    if prefix.ends_with('/') {
        return Err(bad("it ends with '/'"));
    }
    for part in prefix.split('/') {
        match part {
            "" => return Err(bad("it has an empty component")),
            "." | ".." => return Err(bad("it has a '.' or '..' component")),
            _ => {}
        }
    }
    Path::parse(prefix).map_err(|_| bad("it is not a valid object store path"))
}

/// The key of the object with `sequence` under `prefix`.
pub fn object_key(prefix: &Path, sequence: u64) -> Path {
    Path::from(format!("{prefix}/{sequence:020}{KEY_SUFFIX}"))
}

/// The sequence named by `key`, if it is a WAL key directly under `prefix`.
pub fn parse_key(prefix: &Path, key: &Path) -> Option<u64> {
    let name = key
        .as_ref()
        .strip_prefix(prefix.as_ref())?
        .strip_prefix('/')?;
    let digits = name.strip_suffix(KEY_SUFFIX)?;
    if digits.len() != SEQUENCE_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sequence: u64 = digits.parse().ok()?;
    (1..=MAX_SEQUENCE).contains(&sequence).then_some(sequence)
}

/// What happened to the requests of one [`WalIo`] (and its clones).
#[derive(Debug, Default)]
pub struct RequestStats {
    /// Requests sent again beside a first attempt that had not answered in time.
    pub hedged: AtomicU64,
    /// Hedged requests whose second attempt answered first.
    pub hedge_wins: AtomicU64,
    /// Request attempts that had not answered within the request timeout.
    pub timeouts: AtomicU64,
    /// Damaged segments found: by a recovery that read their object whole, or by a read
    /// of their region (after its one read again). Each finding counts, so a segment
    /// found by a recovery and then by two reads counts three times.
    pub damaged_segments: AtomicU64,
}

/// The kinds of request whose latencies are tracked apart for hedging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    Get,
}

impl Kind {
    fn op(self) -> Op {
        match self {
            Kind::Create => Op::Put,
            Kind::Get => Op::Get,
        }
    }
}

/// How requests are bounded and hedged, shared by the clones of a [`WalIo`].
#[derive(Debug)]
struct Requests {
    timeout: Duration,
    creates: Mutex<HedgeDelay>,
    gets: Mutex<HedgeDelay>,
    stats: RequestStats,
}

impl Requests {
    fn new(hedge_after: HedgeAfter, timeout: Duration) -> Self {
        Requests {
            timeout,
            creates: Mutex::new(HedgeDelay::new(hedge_after)),
            gets: Mutex::new(HedgeDelay::new(hedge_after)),
            stats: RequestStats::default(),
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
}

/// Requests that move more bytes than this are never hedged: their latency is mostly
/// transfer, which a twin would double, and under load a hedged large upload slows every
/// other one (measured: 8 MiB objects at 50 ms PUT latency, p99 from 105 ms to 690 ms).
pub const HEDGE_MAX_BYTES: u64 = 1024 * 1024;

/// The default request timeout of a [`WalIo`] built without a [`Config`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type Attempt<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Whether the instance owning a [`WalIo`] has ended, shared by every clone.
#[derive(Debug)]
struct Closing {
    /// `true` once closed. A request's future is polled only under a read lock on it
    /// and [`WalIo::close`] takes the write lock, so once `close` returned no request
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

/// How a request under [`WalIo::within_timeout`] ended.
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
        CreateAttempt::AlreadyExists => Outcome::Conflict,
        CreateAttempt::Unsupported | CreateAttempt::Unknown(_) => Outcome::Error,
    }
}

fn get_outcome(answer: &Result<Bytes>) -> Outcome {
    match answer {
        Ok(_) => Outcome::Ok,
        Err(_) => Outcome::Error,
    }
}

/// The WAL's view of one prefix of one store.
#[derive(Debug, Clone)]
pub struct WalIo {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    whole_read_threshold: u64,
    requests: Arc<Requests>,
    metrics: Arc<Metrics>,
    closing: Arc<Closing>,
}

impl WalIo {
    /// The WAL under `prefix` of `store`. Objects up to `whole_read_threshold` bytes are
    /// read with one GET during recovery.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        whole_read_threshold: u64,
    ) -> Result<Self> {
        Ok(WalIo {
            store,
            prefix: validate_prefix(prefix)?,
            whole_read_threshold: whole_read_threshold.max(EMPTY_OBJECT_LEN as u64),
            requests: Arc::new(Requests::new(HedgeAfter::Off, DEFAULT_REQUEST_TIMEOUT)),
            metrics: Arc::new(Metrics::new(prefix)),
            closing: Arc::new(Closing::new()),
        })
    }

    /// The WAL under `config.prefix` of `store`, with the configuration's read threshold,
    /// request timeout and hedging.
    pub fn for_config(store: Arc<dyn ObjectStore>, config: &Config) -> Result<Self> {
        let io = WalIo::new(store, &config.prefix, config.whole_read_threshold)?;
        Ok(io.with_requests(config.hedge_after, config.request_timeout))
    }

    /// This view with `timeout` on every request and hedging after `hedge_after`.
    pub fn with_requests(mut self, hedge_after: HedgeAfter, timeout: Duration) -> Self {
        self.requests = Arc::new(Requests::new(hedge_after, timeout));
        self
    }

    /// What happened to the requests so far (hedges, wins, timeouts, damaged segments).
    pub fn request_stats(&self) -> &RequestStats {
        &self.requests.stats
    }

    /// The metric handles of this WAL (labelled with its prefix).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Records damage found inside the segment of `region` in the object `sequence`: a
    /// warning naming the key and region, and one more
    /// [`damaged_segments`](RequestStats::damaged_segments).
    pub fn report_damaged_segment(&self, sequence: u64, region: u64, error: &FormatError) {
        self.requests
            .stats
            .damaged_segments
            .fetch_add(1, Ordering::Relaxed);
        self.metrics.damaged_segments.increment(1);
        tracing::warn!(
            key = %self.key(sequence),
            region,
            error = %error,
            "damaged segment: reads of this region fail there (or skip it)"
        );
    }

    /// Closes this view and every clone of it, for good: once this returns, no request
    /// reaches the store (a request in flight is dropped where it waits, one not yet sent
    /// is never sent) and every later one fails at once with [`Error::Stopped`] (a
    /// create: an unknown outcome, [`Durability::MayBeDurable`]).
    /// Idempotent.
    pub fn close(&self) {
        let mut gate = self.closing.gate.write().unwrap_or_else(|p| p.into_inner());
        *gate = true;
        drop(gate);
        self.closing.closed.send_replace(true);
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closing.is_closed()
    }

    /// Waits until [`close`](Self::close) is called.
    pub async fn closed(&self) {
        let mut closed = self.closing.closed.subscribe();
        // The sender lives in `self.closing`: the channel cannot close while waiting.
        let _ = closed.wait_for(|c| *c).await;
    }

    /// The error of a request refused or dropped because the view is closed.
    fn stopped(durability: Durability) -> Error {
        Error::Stopped { durability }
    }

    /// Runs `attempt` under the request timeout (`timed_out` is its answer past it) and,
    /// when `kind` is hedged and no answer came within the hedge delay, a second attempt
    /// beside it: the first `definite` answer decides; if neither is definite, the last
    /// answer is returned. A create's slower attempt is left to run to its end (its
    /// timeout bounds it, and so does [`close`](Self::close)); a read's is cancelled.
    /// Once the view is closed, every attempt answers `stopped`. Each attempt is counted
    /// when it ends, as `outcome` says, or as hedged if it lost.
    async fn race<T>(
        &self,
        kind: Kind,
        hedgeable: bool,
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
                let started = Instant::now();
                match closing
                    .run(tokio::time::timeout(requests.timeout, fut))
                    .await
                {
                    None => (stopped, Outcome::Error),
                    Some(Ok(answer)) => {
                        if definite(&answer) {
                            requests.record(kind, started.elapsed());
                        }
                        let how = outcome(&answer);
                        (answer, how)
                    }
                    Some(Err(_)) => {
                        requests.stats.timeouts.fetch_add(1, Ordering::Relaxed);
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
        self.requests.stats.hedged.fetch_add(1, Ordering::Relaxed);
        let mut second = timed();
        let leave = |loser: Attempt<(T, Outcome)>| {
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
        tokio::select! {
            // The twin first: polled once, it is sent, whichever answers first.
            biased;
            answer = &mut second => {
                if definite(&answer.0) {
                    self.requests.stats.hedge_wins.fetch_add(1, Ordering::Relaxed);
                    leave(first);
                    return count(answer);
                }
                count(answer);
                count(first.await)
            }
            answer = &mut first => {
                if definite(&answer.0) {
                    leave(second);
                    return count(answer);
                }
                count(answer);
                count(second.await)
            }
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The error for a store that refuses conditional creates.
    pub fn unsupported(&self) -> Error {
        Error::ConditionalCreateUnsupported {
            store: self.store.to_string(),
        }
    }

    /// The key of the object with `sequence`.
    pub fn key(&self, sequence: u64) -> Path {
        object_key(&self.prefix, sequence)
    }

    /// Lists every object under the prefix, sorted by sequence; other keys are foreign.
    pub async fn list(&self) -> Result<Listing> {
        self.list_stream(|store, prefix| store.list(Some(prefix)))
            .await
    }

    /// Lists the objects with a sequence above `after` (a start offset, not a full
    /// listing), sorted.
    pub async fn list_after(&self, after: u64) -> Result<Listing> {
        let offset = self.key(after);
        self.list_stream(move |store, prefix| store.list_with_offset(Some(prefix), &offset))
            .await
    }

    /// Lists with the stream `list` makes; it is made inside the request, so a closed
    /// view never asks the store for it.
    async fn list_stream(
        &self,
        list: impl FnOnce(
            &Arc<dyn ObjectStore>,
            &Path,
        ) -> futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::ObjectMeta>,
        >,
    ) -> Result<Listing> {
        // Folded as the pages arrive: a listing keeps 16 bytes per WAL object, not each
        // key's whole metadata (about 100 bytes: a few thousand keys made a block of
        // several hundred KiB on every reclaimer's listing).
        let prefix = &self.prefix;
        let listing = async {
            let keys = list(&self.store, prefix);
            keys.try_fold(Listing::default(), |mut listing, meta| async move {
                match parse_key(prefix, &meta.location) {
                    Some(sequence) => listing.objects.push(ListedObject {
                        sequence,
                        size: meta.size,
                    }),
                    None => listing.foreign.push(meta.location.to_string()),
                }
                Ok(listing)
            })
            .await
        };
        let answer = self.within_timeout("list", &self.prefix, listing).await;
        self.metrics.request(Op::List, outcome_of(&answer));
        let mut listing = answer?.map_err(|e| Error::store("list", &self.prefix, e))?;
        listing.objects.sort_by_key(|o| o.sequence);
        listing.objects.dedup_by_key(|o| o.sequence);
        listing.foreign.sort();
        Ok(listing)
    }

    /// Creates the object only if its key is absent: one attempt, never hedged (claims
    /// and opening objects), under the request timeout.
    pub async fn create(&self, object: &EncodedObject) -> CreateAttempt {
        let definite = |a: &CreateAttempt| !matches!(a, CreateAttempt::Unknown(_));
        self.race(
            Kind::Create,
            false,
            self.create_unanswered(object),
            definite,
            create_outcome,
            self.create_attempt(object),
        )
        .await
    }

    /// Creates a data object only if its key is absent, hedged (unless it is larger than
    /// [`HEDGE_MAX_BYTES`]): a second identical
    /// create goes out beside the first when it has not answered within the hedge delay,
    /// and the first definite answer decides. A twin's "already exists" is the outcome
    /// table's identical retry, resolved by the caller like any other.
    pub async fn create_hedged(&self, object: &EncodedObject) -> CreateAttempt {
        let definite = |a: &CreateAttempt| !matches!(a, CreateAttempt::Unknown(_));
        self.race(
            Kind::Create,
            object.len() <= HEDGE_MAX_BYTES,
            self.create_unanswered(object),
            definite,
            create_outcome,
            self.create_attempt(object),
        )
        .await
    }

    /// What a create of `object` answers past the request timeout, and once the view is
    /// closed: an unknown outcome either way (it may have been sent).
    fn create_unanswered(&self, object: &EncodedObject) -> [CreateAttempt; 2] {
        let key = self.key(object.header().sequence);
        [
            CreateAttempt::Unknown(self.timeout_error("create", &key)),
            CreateAttempt::Unknown(Self::stopped(Durability::MayBeDurable)),
        ]
    }

    /// One conditional create of `object`, as a future that owns what it needs.
    fn create_attempt(&self, object: &EncodedObject) -> impl Fn() -> Attempt<CreateAttempt> {
        let store = self.store.clone();
        let key = self.key(object.header().sequence);
        let chunks: Vec<Bytes> = object.chunks().to_vec();
        move || {
            let (store, key) = (store.clone(), key.clone());
            let payload: PutPayload = chunks.iter().cloned().collect();
            Box::pin(async move {
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                };
                match store.put_opts(&key, payload, opts).await {
                    Ok(_) => CreateAttempt::Created,
                    Err(object_store::Error::AlreadyExists { .. })
                    | Err(object_store::Error::Precondition { .. }) => CreateAttempt::AlreadyExists,
                    Err(object_store::Error::NotImplemented { .. })
                    | Err(object_store::Error::NotSupported { .. }) => CreateAttempt::Unsupported,
                    Err(e) => CreateAttempt::Unknown(Error::store("create", key, e)),
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
        Error::RequestTimeout {
            op,
            key: key.to_string(),
            after: self.requests.timeout,
        }
    }

    /// One GET (of `range`, or whole), hedged unless the range is larger than
    /// [`HEDGE_MAX_BYTES`], under the request timeout.
    async fn get(&self, sequence: u64, range: Option<Range<u64>>) -> Result<Bytes> {
        let hedgeable = range
            .as_ref()
            .is_none_or(|r| r.end.saturating_sub(r.start) <= HEDGE_MAX_BYTES);
        let key = self.key(sequence);
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
            Kind::Get,
            hedgeable,
            [timed_out, stopped],
            Result::is_ok,
            get_outcome,
            attempt,
        )
        .await
    }

    /// Reads a whole object.
    pub async fn read_whole(&self, sequence: u64) -> Result<Bytes> {
        self.get(sequence, None).await
    }

    /// Reads `range` of an object: one ranged GET.
    pub async fn read_range(&self, sequence: u64, range: Range<u64>) -> Result<Bytes> {
        let key = self.key(sequence);
        let bytes = self.get(sequence, Some(range.clone())).await?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(Error::CorruptObject {
                key: key.to_string(),
                source: format::FormatError::Truncated {
                    part: "range",
                    needed: range.end - range.start,
                    got: bytes.len() as u64,
                },
            });
        }
        Ok(bytes)
    }

    /// Reads and verifies an object's header, footer and trailer. An object no larger
    /// than `whole_read_threshold` is read whole: its segments are then checked too, and
    /// a damaged one is reported ([`report_damaged_segment`](Self::report_damaged_segment))
    /// and returned in [`SummaryRead::damaged`], never an error.
    ///
    /// An object that fails verification, or has a damaged segment, is read once more,
    /// as a segment is: bytes damaged in transit must not pass for a damaged object,
    /// which fails recovery, nor be reported as damage at rest.
    pub async fn read_summary(&self, listed: &ListedObject) -> Result<SummaryRead> {
        let checked = read_again_once(|| async {
            match self.read_summary_once(listed).await {
                Err(e @ (Error::CorruptObject { .. } | Error::SequenceMismatch { .. })) => {
                    Ok(Err(Err(e)))
                }
                Ok(read) if !read.damaged.is_empty() => Ok(Err(Ok(read))),
                other => other.map(Ok),
            }
        })
        .await?;
        match checked {
            Ok(read) => Ok(read),
            Err(Ok(read)) => {
                for damage in &read.damaged {
                    self.report_damaged_segment(listed.sequence, damage.region, &damage.error);
                }
                Ok(read)
            }
            Err(Err(e)) => Err(e),
        }
    }

    async fn read_summary_once(&self, listed: &ListedObject) -> Result<SummaryRead> {
        let key = self.key(listed.sequence);
        let corrupt = |source| Error::CorruptObject {
            key: key.to_string(),
            source,
        };
        let size = listed.size;
        if size < EMPTY_OBJECT_LEN as u64 {
            return Err(corrupt(format::FormatError::Truncated {
                part: "object",
                needed: EMPTY_OBJECT_LEN as u64,
                got: size,
            }));
        }
        let mut damaged = Vec::new();
        let summary = if size <= self.whole_read_threshold {
            let bytes = self.read_whole(listed.sequence).await?;
            // Header, footer and trailer decide whether the object is usable; a damaged
            // segment fails only reads of its region (FORMAT.md, "What a reader
            // verifies"), so the object CRC, which cannot tell them apart, is not checked.
            let checked = format::check_object(&bytes).map_err(corrupt)?;
            damaged = checked.damaged;
            checked.summary
        } else {
            let tail_len = TAIL_READ_BYTES.min(size - HEADER_LEN as u64);
            let (head, tail) = futures::try_join!(
                self.read_range(listed.sequence, 0..HEADER_LEN as u64),
                self.read_range(listed.sequence, size - tail_len..size),
            )?;
            match format::decode_summary(&head, &tail, size) {
                Ok(s) => s,
                Err(format::FormatError::Truncated { part: "footer", .. }) => {
                    // A footer longer than the tail read: fetch footer and trailer exactly.
                    let trailer = format::decode_trailer(&tail, size).map_err(corrupt)?;
                    let from = trailer.footer_offset;
                    let tail = self.read_range(listed.sequence, from..size).await?;
                    format::decode_summary(&head, &tail, size).map_err(corrupt)?
                }
                Err(e) => return Err(corrupt(e)),
            }
        };
        if summary.header.sequence != listed.sequence {
            return Err(Error::SequenceMismatch {
                key: key.to_string(),
                expected: listed.sequence,
                found: summary.header.sequence,
            });
        }
        debug_assert!(summary.length >= TRAILER_LEN as u64);
        Ok(SummaryRead { summary, damaged })
    }

    /// Deletes the object with `sequence` (a missing object is not an error).
    pub async fn delete(&self, sequence: u64) -> Result<()> {
        let key = self.key(sequence);
        let answer = self
            .within_timeout("delete", &key, async { self.store.delete(&key).await })
            .await
            .map(|r| match r {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            });
        self.metrics.request(Op::Delete, outcome_of(&answer));
        answer?.map_err(|e| Error::store("delete", key, e))
    }
}

/// Runs `attempt` (a read and the checks of what it read) and, when the checks fail,
/// once more: bytes damaged in transit must not pass for damage at rest. A store error
/// ends it at once; the second check's failure is the answer. Every verified read of the
/// WAL (summaries, segments, create conflicts) goes through here.
pub async fn read_again_once<T, V, F, Fut>(mut attempt: F) -> Result<std::result::Result<T, V>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::result::Result<T, V>>>,
{
    match attempt().await? {
        Ok(checked) => Ok(Ok(checked)),
        Err(_) => attempt().await,
    }
}

/// Builds a store from a URL: `file:///absolute/dir` (with fsync, created if missing),
/// `memory://`, and, when the crate's features of the same names are on, `s3://`,
/// `gs://` and `az://` (credentials from the environment, as object_store reads them).
/// A path after the bucket becomes a key prefix of the returned store.
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>> {
    let invalid = |reason: String| Error::InvalidUrl {
        url: url.to_string(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    match parsed.scheme() {
        "file" => {
            let dir = parsed
                .to_file_path()
                .map_err(|_| invalid("not an absolute local path".into()))?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| invalid(format!("cannot create {}: {e}", dir.display())))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                .map_err(|e| invalid(e.to_string()))?
                .with_fsync(true);
            Ok(Arc::new(store))
        }
        "memory" => Ok(Arc::new(object_store::memory::InMemory::new())),
        scheme => cloud_store(scheme, &parsed).map_err(invalid),
    }
}

/// Splits a URL that names a store and a WAL prefix in one into the store's URL (what
/// [`store_from_url`] takes) and the prefix: the prefix is the URL's last path component.
///
/// `s3://bucket/path/prefix` gives `s3://bucket/path` and `prefix`; `file:///dir/prefix`
/// gives `file:///dir` and `prefix`; `memory:///prefix` gives `memory:///` and `prefix`.
/// Either way the WAL's keys are `<path>/<prefix>/<sequence>.wal` from the bucket's (or
/// the filesystem's) root. A URL without a path component after the bucket, one ending
/// in `/`, one with a query or fragment, or one whose prefix is percent-encoded is
/// refused with [`Error::InvalidUrl`]. Nothing is built or contacted: the scheme is
/// checked when the store is built.
pub fn split_store_url(url: &str) -> Result<(String, String)> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let mut parsed = url::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("a store URL takes no query or fragment"));
    }
    let path = parsed.path().to_string();
    if path.ends_with('/') {
        return Err(invalid(
            "it ends with '/': the last path component is the WAL prefix",
        ));
    }
    let Some((store_path, prefix)) = path.rsplit_once('/') else {
        return Err(invalid(
            "no path: the last path component is the WAL prefix",
        ));
    };
    if prefix.contains('%') {
        return Err(invalid(
            "the WAL prefix is percent-encoded; name it plainly",
        ));
    }
    validate_prefix(prefix).map_err(|e| invalid(&e.to_string()))?;
    let prefix = prefix.to_string();
    parsed.set_path(if store_path.is_empty() {
        "/"
    } else {
        store_path
    });
    Ok((parsed.to_string(), prefix))
}

/// Builds the store a URL names and returns it with the WAL prefix: the URL is split by
/// [`split_store_url`] and the store built by [`store_from_url`].
pub fn store_and_prefix_from_url(url: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (store_url, prefix) = split_store_url(url)?;
    Ok((store_from_url(&store_url)?, prefix))
}

#[allow(unused_variables, unreachable_code, unreachable_patterns)]
fn cloud_store(scheme: &str, url: &url::Url) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    let store: Arc<dyn ObjectStore> = match scheme {
        #[cfg(feature = "aws")]
        "s3" | "s3a" => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(|e| e.to_string())?,
        ),
        #[cfg(feature = "gcp")]
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(|e| e.to_string())?,
        ),
        #[cfg(feature = "azure")]
        "az" | "azure" | "abfs" | "abfss" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss" => {
            return Err(format!(
                "scheme {scheme}:// needs the crate built with its feature (aws, gcp or azure)"
            ))
        }
        other => return Err(format!("unsupported scheme {other}://")),
    };
    let path = url.path().trim_matches('/');
    if path.is_empty() {
        Ok(store)
    } else {
        let prefix = Path::parse(path).map_err(|e| e.to_string())?;
        Ok(Arc::new(object_store::prefix::PrefixStore::new(
            store, prefix,
        )))
    }
}
