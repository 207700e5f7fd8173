//! Store wrappers for tests, examples and benchmarks (feature `testing`): counting
//! requests, injecting faults, adding latency. They wrap any `ObjectStore`, so the same
//! fault can be staged on memory, a local directory or a real server.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultStore",
        source: format!("injected fault: {what}").into(),
    }
}

/// Wraps `store` with a fixed latency per PUT (creates included) and per GET, standing
/// in for a remote store. (object_store's `ThrottledStore` does this too, but panics on
/// GETs from a `LocalFileSystem`, whose results are files.)
pub fn with_latency(
    store: Arc<dyn ObjectStore>,
    put: Duration,
    get: Duration,
) -> Arc<dyn ObjectStore> {
    Arc::new(LatencyStore {
        inner: store,
        put,
        get,
    })
}

/// Adds a fixed latency before every PUT and GET of the wrapped store.
#[derive(Debug)]
pub struct LatencyStore {
    inner: Arc<dyn ObjectStore>,
    put: Duration,
    get: Duration,
}

impl fmt::Display for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LatencyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LatencyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        tokio::time::sleep(self.put).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        tokio::time::sleep(self.get).await;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// One GET as the counting store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRecord {
    /// The key read.
    pub key: String,
    /// The range asked for; `None` for a whole object.
    pub range: Option<Range<u64>>,
}

/// Request counts.
#[derive(Debug, Default)]
pub struct Counts {
    /// PUTs (creates and overwrites).
    pub puts: AtomicU64,
    /// Bytes sent by PUTs.
    pub put_bytes: AtomicU64,
    /// GETs, ranged or whole.
    pub gets: AtomicU64,
    /// Bytes returned by GETs.
    pub get_bytes: AtomicU64,
    /// LIST calls.
    pub lists: AtomicU64,
    /// Keys returned by LIST calls.
    pub listed_keys: AtomicU64,
    /// Deletes.
    pub deletes: AtomicU64,
}

impl Counts {
    /// The sum of every request.
    pub fn requests(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
            + self.gets.load(Ordering::Relaxed)
            + self.lists.load(Ordering::Relaxed)
            + self.deletes.load(Ordering::Relaxed)
    }
}

/// Counts every request and records every GET.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<Counts>,
    gets: Mutex<Vec<GetRecord>>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(CountingStore {
            inner,
            counts: Arc::new(Counts::default()),
            gets: Mutex::new(Vec::new()),
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Every GET so far, in order.
    pub fn get_log(&self) -> Vec<GetRecord> {
        lock(&self.gets).clone()
    }

    /// Forgets the GET log and zeroes the counts.
    pub fn reset(&self) {
        lock(&self.gets).clear();
        for c in [
            &self.counts.puts,
            &self.counts.put_bytes,
            &self.counts.gets,
            &self.counts.get_bytes,
            &self.counts.lists,
            &self.counts.listed_keys,
            &self.counts.deletes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

fn range_of(range: &Option<GetRange>) -> Option<Range<u64>> {
    match range {
        Some(GetRange::Bounded(r)) => Some(r.clone()),
        Some(GetRange::Offset(o)) => Some(*o..u64::MAX),
        Some(GetRange::Suffix(s)) => Some(u64::MAX - s..u64::MAX),
        None => None,
    }
}

fn count_list(
    stream: BoxStream<'static, object_store::Result<ObjectMeta>>,
    counts: Arc<Counts>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    counts.lists.fetch_add(1, Ordering::Relaxed);
    stream
        .inspect(move |r| {
            if r.is_ok() {
                counts.listed_keys.fetch_add(1, Ordering::Relaxed);
            }
        })
        .boxed()
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.counts.puts.fetch_add(1, Ordering::Relaxed);
        self.counts
            .put_bytes
            .fetch_add(payload.content_length() as u64, Ordering::Relaxed);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.counts.gets.fetch_add(1, Ordering::Relaxed);
        lock(&self.gets).push(GetRecord {
            key: location.to_string(),
            range: range_of(&options.range),
        });
        let result = self.inner.get_opts(location, options).await?;
        self.counts.get_bytes.fetch_add(
            result.range.end.saturating_sub(result.range.start),
            Ordering::Relaxed,
        );
        Ok(result)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counts = self.counts.clone();
        self.inner.delete_stream(
            locations
                .inspect(move |_| {
                    counts.deletes.fetch_add(1, Ordering::Relaxed);
                })
                .boxed(),
        )
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        count_list(self.inner.list(prefix), self.counts.clone())
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        count_list(
            self.inner.list_with_offset(prefix, offset),
            self.counts.clone(),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.counts.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A fault for one conditional create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateFault {
    /// The create is applied, then an error is reported: the outcome looks unknown.
    ApplyThenError,
    /// The create is not applied and an error is reported.
    ErrorUnapplied,
    /// An error is reported now; the create lands only after this many further
    /// operations on the store (a late object), or at [`FaultStore::land_late`].
    LandLate(u32),
}

/// A hold on the conditional creates of one key, from [`FaultStore::hold_creates_of`]:
/// each create of the key waits, before it reaches the store (and before any scripted
/// fault or late landing), until the hold is released. It stands in for a slow or
/// stalled upload whose timing the test controls. Clones share the hold.
#[derive(Debug, Clone)]
pub struct CreateHold {
    state: Arc<HoldState>,
}

#[derive(Debug)]
struct HoldState {
    released: tokio::sync::watch::Sender<bool>,
    arrived: tokio::sync::watch::Sender<u64>,
    finished: tokio::sync::watch::Sender<u64>,
}

impl CreateHold {
    fn new() -> Self {
        CreateHold {
            state: Arc::new(HoldState {
                released: tokio::sync::watch::Sender::new(false),
                arrived: tokio::sync::watch::Sender::new(0),
                finished: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// Lets every held create of the key go on, and every later one pass at once.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Whether [`release`](Self::release) was called.
    pub fn is_released(&self) -> bool {
        *self.state.released.borrow()
    }

    /// Creates of the key that reached the hold so far (waiting or let through).
    pub fn arrived(&self) -> u64 {
        *self.state.arrived.borrow()
    }

    /// Waits until `n` creates of the key have reached the hold.
    pub async fn wait_arrived(&self, n: u64) {
        let mut rx = self.state.arrived.subscribe();
        // The sender lives in `self`, so the channel cannot close while waiting.
        let _ = rx.wait_for(|a| *a >= n).await;
    }

    /// Creates of the key that went through the hold and got the store's answer.
    pub fn finished(&self) -> u64 {
        *self.state.finished.borrow()
    }

    /// Waits until `n` creates of the key went through the hold and got their answer.
    pub async fn wait_finished(&self, n: u64) {
        let mut rx = self.state.finished.subscribe();
        let _ = rx.wait_for(|f| *f >= n).await;
    }

    /// Counts a create in, waits for the release; the guard counts it out when dropped.
    async fn pass(&self) -> HoldPassage {
        self.state.arrived.send_modify(|a| *a += 1);
        let mut rx = self.state.released.subscribe();
        let _ = rx.wait_for(|released| *released).await;
        HoldPassage { hold: self.clone() }
    }
}

/// Counts a create that passed a hold as finished when its answer is returned (or its
/// future is dropped).
struct HoldPassage {
    hold: CreateHold,
}

impl Drop for HoldPassage {
    fn drop(&mut self) {
        self.hold.state.finished.send_modify(|f| *f += 1);
    }
}

#[derive(Debug)]
struct LateCreate {
    key: Path,
    payload: PutPayload,
    opts: PutOptions,
    after: u32,
}

#[derive(Debug, Default)]
struct FaultState {
    /// Faults for creates of a key, consumed in order.
    by_key: HashMap<String, VecDeque<CreateFault>>,
    /// Faults for any create, consumed in order after the key's own.
    any: VecDeque<CreateFault>,
    /// Every create fails this way from now on.
    always: Option<CreateFault>,
    late: Vec<LateCreate>,
    /// Holds on the creates of a key, with how many more creates each catches (`None`:
    /// every one).
    holds: HashMap<String, (CreateHold, Option<u64>)>,
    flip_next_get: HashMap<String, u32>,
    fail_gets: u32,
    fail_lists: u32,
    landed_late: u64,
    /// The seeded random mode ([`FaultStore::seeded`]); `None` in scripted mode.
    random: Option<RandomFaults>,
    /// Faults injected so far, scripted and random.
    counts: FaultCounts,
}

/// Injects faults into a store's requests, following an explicit script, and, when made
/// with [`FaultStore::seeded`], random faults and latencies drawn from a seeded PRNG
/// (scripted faults take precedence over random ones).
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    state: Mutex<FaultState>,
    /// The operation log, when recording ([`FaultStore::record_ops`]).
    log: Arc<OpLog>,
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl FaultStore {
    /// Wraps `inner` with no fault scripted.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(FaultStore {
            inner,
            state: Mutex::new(FaultState::default()),
            log: Arc::default(),
        })
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The next creates of `key` meet these faults, in order.
    pub fn fail_create_of(&self, key: &Path, faults: impl IntoIterator<Item = CreateFault>) {
        lock(&self.state)
            .by_key
            .entry(key.to_string())
            .or_default()
            .extend(faults);
    }

    /// The next creates of any key meet these faults, in order.
    pub fn fail_next_creates(&self, faults: impl IntoIterator<Item = CreateFault>) {
        lock(&self.state).any.extend(faults);
    }

    /// Every create meets `fault` from now on (`None`: stop).
    pub fn fail_every_create(&self, fault: Option<CreateFault>) {
        lock(&self.state).always = fault;
    }

    /// Holds every conditional create of `key` (the first and the retries) until the
    /// returned [`CreateHold`] is released; other keys are not affected. A hold placed
    /// again on the same key replaces the earlier one for creates that arrive later.
    pub fn hold_creates_of(&self, key: &Path) -> CreateHold {
        let hold = CreateHold::new();
        lock(&self.state)
            .holds
            .insert(key.to_string(), (hold.clone(), None));
        hold
    }

    /// Like [`hold_creates_of`](Self::hold_creates_of), but only the next `n` creates of
    /// `key` are caught by the hold; later ones (say, another instance's create of the
    /// same key) go through at once, even before the release.
    pub fn hold_next_creates_of(&self, key: &Path, n: u64) -> CreateHold {
        let hold = CreateHold::new();
        if n > 0 {
            lock(&self.state)
                .holds
                .insert(key.to_string(), (hold.clone(), Some(n)));
        }
        hold
    }

    /// The hold that catches this create of `key`, if any (counting it).
    fn hold_for(&self, key: &Path) -> Option<CreateHold> {
        let mut state = lock(&self.state);
        let (hold, remaining) = state.holds.get_mut(key.as_ref())?;
        let hold = hold.clone();
        if let Some(n) = remaining {
            *n -= 1;
            if *n == 0 {
                state.holds.remove(key.as_ref());
            }
        }
        Some(hold)
    }

    /// The next `n` GETs of `key` return the bytes with one bit flipped.
    pub fn flip_next_gets_of(&self, key: &Path, n: u32) {
        *lock(&self.state)
            .flip_next_get
            .entry(key.to_string())
            .or_default() += n;
    }

    /// The next `n` GETs fail.
    pub fn fail_next_gets(&self, n: u32) {
        lock(&self.state).fail_gets += n;
    }

    /// The next `n` LISTs fail.
    pub fn fail_next_lists(&self, n: u32) {
        lock(&self.state).fail_lists += n;
    }

    /// Late creates not landed yet.
    pub fn late_pending(&self) -> usize {
        lock(&self.state).late.len()
    }

    /// Late creates that landed (their create succeeded when applied).
    pub fn late_landed(&self) -> u64 {
        lock(&self.state).landed_late
    }

    /// Lands every late create now, in the order they were made; returns how many landed
    /// (a late create whose key was taken meanwhile does not land).
    pub async fn land_late(&self) -> usize {
        let late: Vec<LateCreate> = std::mem::take(&mut lock(&self.state).late);
        let mut landed = 0;
        for l in late {
            let result = self.inner.put_opts(&l.key, l.payload, l.opts).await;
            self.log.late(&l.key, &result);
            if result.is_ok() {
                landed += 1;
            }
        }
        lock(&self.state).landed_late += landed as u64;
        landed
    }

    /// Counts one operation toward the late creates and lands those that are due.
    async fn tick(&self) {
        let due: Vec<LateCreate> = {
            let mut state = lock(&self.state);
            let mut due = Vec::new();
            let mut keep = Vec::new();
            for mut l in std::mem::take(&mut state.late) {
                if l.after == 0 {
                    due.push(l);
                } else {
                    l.after -= 1;
                    keep.push(l);
                }
            }
            state.late = keep;
            due
        };
        let mut landed = 0;
        for l in due {
            let result = self.inner.put_opts(&l.key, l.payload, l.opts).await;
            self.log.late(&l.key, &result);
            if result.is_ok() {
                landed += 1;
            }
        }
        if landed > 0 {
            lock(&self.state).landed_late += landed;
        }
    }
}

/// A [`CreateClock`](crate::CreateClock) that moves only when told: a test decides
/// exactly how long a create "took" (say, a create that stalled past
/// `max_create_duration`) without waiting for it. Starts at zero.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            })
            .ok();
    }
}

impl crate::CreateClock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// A [`CreateClock`](crate::CreateClock) on tokio's clock: under a paused test
/// runtime it follows virtual time, so create durations and link windows line up with
/// the virtual `reclaim_grace` the reclaimer waits.
#[derive(Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock at zero now.
    pub fn new() -> Arc<Self> {
        Arc::new(TokioClock {
            origin: tokio::time::Instant::now(),
        })
    }
}

impl crate::CreateClock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

fn flip_one_bit(bytes: Bytes) -> Bytes {
    let mut v = bytes.to_vec();
    let middle = v.len() / 2;
    if let Some(b) = v.get_mut(middle) {
        *b ^= 0x10;
    }
    Bytes::from(v)
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let hold = matches!(opts.mode, PutMode::Create)
            .then(|| self.hold_for(location))
            .flatten();
        let _passage = match hold {
            Some(hold) => Some(hold.pass().await),
            None => None,
        };
        self.tick().await;
        let is_create = matches!(opts.mode, PutMode::Create);
        if is_create {
            self.log.sent(location, &payload);
        }
        let (before, after) = self.random_latency(Op::Put);
        pause(before).await;
        let fault = if is_create {
            let mut state = lock(&self.state);
            let own = state
                .by_key
                .get_mut(location.as_ref())
                .and_then(|q| q.pop_front());
            let fault = own
                .or_else(|| state.any.pop_front())
                .or(state.always)
                .or_else(|| state.random_create_fault());
            if let Some(f) = fault {
                state.counts.count_create(f);
            }
            fault
        } else {
            None
        };
        let result = match fault {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(CreateFault::ApplyThenError) => {
                match self.inner.put_opts(location, payload, opts).await {
                    Ok(_) => Err(injected("create applied, error reported")),
                    Err(e) => Err(e),
                }
            }
            Some(CreateFault::ErrorUnapplied) => Err(injected("create not applied")),
            Some(CreateFault::LandLate(after)) => {
                lock(&self.state).late.push(LateCreate {
                    key: location.clone(),
                    payload,
                    opts,
                    after,
                });
                Err(injected("create delayed, will land late"))
            }
        };
        if is_create {
            self.log.create(location, fault, &result);
        }
        // Latency after the store answered: the create may be visible before its
        // answer arrives.
        pause(after).await;
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.tick().await;
        let (before, after) = self.random_latency(Op::Get);
        pause(before).await;
        let (fail, flip) = {
            let mut state = lock(&self.state);
            let mut fail = state.fail_gets > 0;
            if fail {
                state.fail_gets -= 1;
            }
            let mut flip = match state.flip_next_get.get_mut(location.as_ref()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            };
            if !fail && !flip {
                (fail, flip) = state.random_get_fault(location);
            }
            if fail {
                state.counts.failed_gets += 1;
            } else if flip {
                state.counts.flipped_gets += 1;
            }
            (fail, flip)
        };
        if fail {
            self.log.push(format!("get {location}: failed (injected)"));
            pause(after).await;
            return Err(injected("get failed"));
        }
        let mut result = self.inner.get_opts(location, options).await?;
        pause(after).await;
        if flip {
            self.log
                .push(format!("get {location}: bytes flipped (injected)"));
            let payload = std::mem::replace(
                &mut result.payload,
                GetResultPayload::Stream(futures::stream::empty().boxed()),
            );
            let original = GetResult {
                payload,
                meta: result.meta.clone(),
                range: result.range.clone(),
                attributes: result.attributes.clone(),
                extensions: result.extensions.clone(),
            };
            let flipped = flip_one_bit(original.bytes().await?);
            result.payload =
                GetResultPayload::Stream(futures::stream::once(async move { Ok(flipped) }).boxed());
        }
        Ok(result)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let log = self.log.clone();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| match r {
                Ok(key) => log.push(format!("delete {key}")),
                Err(e) => log.push(format!("delete failed: {e}")),
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let fail = {
            let mut state = lock(&self.state);
            let mut fail = state.fail_lists > 0;
            if fail {
                state.fail_lists -= 1;
            }
            fail = fail || state.random_list_fault();
            if fail {
                state.counts.failed_lists += 1;
            }
            fail
        };
        if fail {
            return futures::stream::once(async { Err(injected("list failed")) }).boxed();
        }
        let latency = self.random_latency(Op::List);
        let inner = self.inner.clone();
        let prefix = prefix.cloned();
        let log = self.log.clone();
        delayed_list(latency, move || {
            log.push(format!(
                "list {}",
                prefix.as_ref().map_or("", |p| p.as_ref())
            ));
            inner.list(prefix.as_ref())
        })
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let fail = {
            let mut state = lock(&self.state);
            let fail = state.random_list_fault();
            if fail {
                state.counts.failed_lists += 1;
            }
            fail
        };
        if fail {
            return futures::stream::once(async { Err(injected("list failed")) }).boxed();
        }
        let latency = self.random_latency(Op::List);
        let inner = self.inner.clone();
        let prefix = prefix.cloned();
        let offset = offset.clone();
        delayed_list(latency, move || {
            inner.list_with_offset(prefix.as_ref(), &offset)
        })
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

// ---------------------------------------------------------------------------------------
// Seeded random mode
// ---------------------------------------------------------------------------------------

/// A small, fast, seedable PRNG (SplitMix64): the same seed gives the same sequence on
/// every platform. Not for cryptography; for reproducible fault schedules and tests.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for tests, no division.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p` (`p <= 0`: never; `p >= 1`: always).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.unit() < p)
    }

    /// A duration in `0..=max`, with nanosecond resolution.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.range_inclusive(0, nanos))
    }

    /// A generator for a sub-stream, so that drawing more from one part of a test does
    /// not shift the draws of another.
    pub fn fork(&mut self) -> SplitMix64 {
        SplitMix64::new(self.next_u64())
    }
}

/// Probabilities (each in `[0, 1]`) and bounds of the random faults of
/// [`FaultStore::seeded`]. The default injects nothing and adds no latency.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultRates {
    /// A create is applied, then answered with an error (the outcome looks unknown).
    pub apply_then_error: f64,
    /// A create is not applied and answered with an error.
    pub error_unapplied: f64,
    /// A create is answered with an error now and lands later
    /// ([`CreateFault::LandLate`]), after a random number of further operations.
    pub land_late: f64,
    /// The most operations a late create waits before it lands (drawn in
    /// `0..=late_after_max_ops`); [`FaultStore::land_late`] lands the rest at once.
    pub late_after_max_ops: u32,
    /// A GET fails.
    pub fail_get: f64,
    /// A LIST fails.
    pub fail_list: f64,
    /// A GET returns its bytes with one bit flipped. Each key is flipped at most once,
    /// so a read that retries sees the true bytes: a transient corruption in transit.
    pub flip_get: f64,
    /// Longest latency added to a PUT (drawn uniformly in `0..=put_latency`).
    pub put_latency: Duration,
    /// Longest latency added to a GET.
    pub get_latency: Duration,
    /// Longest latency added to a LIST.
    pub list_latency: Duration,
    /// A PUT is slow: `slow_latency` more.
    pub slow_put: f64,
    /// A GET is slow: `slow_latency` more.
    pub slow_get: f64,
    /// A LIST is slow: `slow_latency` more.
    pub slow_list: f64,
    /// The extra latency of a slow operation.
    pub slow_latency: Duration,
}

/// Faults a [`FaultStore`] injected so far, scripted and random
/// ([`FaultStore::fault_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Creates applied and answered with an error.
    pub apply_then_error: u64,
    /// Creates not applied and answered with an error.
    pub error_unapplied: u64,
    /// Creates answered with an error that land later (or never, if the key is taken).
    pub land_late: u64,
    /// GETs failed.
    pub failed_gets: u64,
    /// GETs that returned flipped bytes.
    pub flipped_gets: u64,
    /// LISTs failed.
    pub failed_lists: u64,
    /// Operations made slow (random mode).
    pub slow_ops: u64,
    /// Objects deleted behind the WAL's back ([`FaultStore::delete_behind`]).
    pub deleted_behind: u64,
}

impl FaultCounts {
    fn count_create(&mut self, fault: CreateFault) {
        match fault {
            CreateFault::ApplyThenError => self.apply_then_error += 1,
            CreateFault::ErrorUnapplied => self.error_unapplied += 1,
            CreateFault::LandLate(_) => self.land_late += 1,
        }
    }
}

/// The state of the seeded random mode.
#[derive(Debug)]
struct RandomFaults {
    rng: SplitMix64,
    rates: FaultRates,
    enabled: bool,
    /// Keys whose GET was flipped once already: never again.
    flipped: HashSet<String>,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Put,
    Get,
    List,
}

impl FaultState {
    fn random_mut(&mut self) -> Option<&mut RandomFaults> {
        self.random.as_mut().filter(|r| r.enabled)
    }

    /// A random fault for a create that no scripted fault caught.
    fn random_create_fault(&mut self) -> Option<CreateFault> {
        let r = self.random_mut()?;
        let rates = r.rates;
        let u = r.rng.unit();
        let mut bound = rates.apply_then_error;
        if u < bound {
            return Some(CreateFault::ApplyThenError);
        }
        bound += rates.error_unapplied;
        if u < bound {
            return Some(CreateFault::ErrorUnapplied);
        }
        bound += rates.land_late;
        if u < bound {
            let after = r
                .rng
                .range_inclusive(0, u64::from(rates.late_after_max_ops));
            return Some(CreateFault::LandLate(after as u32));
        }
        None
    }

    /// `(fail, flip)` for a GET of `key` that no scripted fault caught.
    fn random_get_fault(&mut self, key: &Path) -> (bool, bool) {
        let Some(r) = self.random_mut() else {
            return (false, false);
        };
        if r.rng.chance(r.rates.fail_get) {
            return (true, false);
        }
        let flip = r.rng.chance(r.rates.flip_get) && r.flipped.insert(key.to_string());
        (false, flip)
    }

    fn random_list_fault(&mut self) -> bool {
        self.random_mut()
            .is_some_and(|r| r.rng.chance(r.rates.fail_list))
    }
}

/// Sleeps on tokio's clock (so a paused test clock applies); nothing when zero.
async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// A listing that waits `before` the store takes its snapshot and `after` before the
/// result arrives; `make` is called at once when both are zero.
fn delayed_list(
    (before, after): (Duration, Duration),
    make: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>> + Send + 'static,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    if before.is_zero() && after.is_zero() {
        return make();
    }
    futures::stream::once(async move {
        pause(before).await;
        let listing = make();
        pause(after).await;
        listing
    })
    .flatten()
    .boxed()
}

impl FaultStore {
    /// Wraps `inner` with random faults and latencies drawn from a PRNG seeded with
    /// `seed` at the given `rates`. Scripted faults can still be added and take
    /// precedence. With the same seed and the same sequence of requests (a
    /// single-threaded runtime), the same faults are injected.
    pub fn seeded(inner: Arc<dyn ObjectStore>, seed: u64, rates: FaultRates) -> Arc<Self> {
        let store = FaultStore::new(inner);
        lock(&store.state).random = Some(RandomFaults {
            rng: SplitMix64::new(seed),
            rates,
            enabled: true,
            flipped: HashSet::new(),
        });
        store
    }

    /// Turns the random faults and latencies on or off (scripted faults are not
    /// affected; a store made with [`new`](Self::new) has none to turn on).
    pub fn set_random_faults(&self, on: bool) {
        if let Some(r) = lock(&self.state).random.as_mut() {
            r.enabled = on;
        }
    }

    /// Whether random faults are being injected now.
    pub fn random_faults_enabled(&self) -> bool {
        lock(&self.state).random.as_ref().is_some_and(|r| r.enabled)
    }

    /// The faults injected so far, scripted and random.
    pub fn fault_counts(&self) -> FaultCounts {
        lock(&self.state).counts
    }

    /// Deletes the object at `key` directly in the wrapped store, as an operator or a
    /// lifecycle rule would behind the WAL's back. Returns whether an object was there.
    pub async fn delete_behind(&self, key: &Path) -> object_store::Result<bool> {
        use object_store::ObjectStoreExt;
        match self.inner.head(key).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        self.inner.delete(key).await?;
        self.log.push(format!("delete {key} behind the WAL's back"));
        lock(&self.state).counts.deleted_behind += 1;
        Ok(true)
    }

    /// The latency of one operation, split into a wait before the store applies it and
    /// a wait before its answer arrives; zero outside random mode.
    fn random_latency(&self, op: Op) -> (Duration, Duration) {
        let mut state = lock(&self.state);
        let Some(r) = state.random_mut() else {
            return (Duration::ZERO, Duration::ZERO);
        };
        let rates = r.rates;
        let (max, slow) = match op {
            Op::Put => (rates.put_latency, rates.slow_put),
            Op::Get => (rates.get_latency, rates.slow_get),
            Op::List => (rates.list_latency, rates.slow_list),
        };
        let mut total = r.rng.duration_up_to(max);
        let is_slow = r.rng.chance(slow);
        if is_slow {
            total += rates.slow_latency;
        }
        let before = r.rng.duration_up_to(total);
        if is_slow {
            state.counts.slow_ops += 1;
        }
        (before, total - before)
    }
}

/// Runs every decoder of the object format on `data`, as the fuzz target does and the
/// corpus test replays: whole-object decoding, summary, header, trailer and each segment.
/// Panics if an accepted object does not encode back to exactly the same bytes (a
/// decoder that accepts what the encoder would not write); never panics otherwise.
pub fn exercise_decoders(data: &[u8]) {
    decode_everything(data);
    // Random bytes rarely pass a CRC: decode a copy with its CRCs repaired too, so the
    // structural rules behind them are exercised.
    if let Some(repaired) = repair_crcs(data) {
        decode_everything(&repaired);
    }
}

/// `data` with its header, footer and object CRCs recomputed where the trailer places
/// the footer inside it; `None` when too short to hold a header and a trailer.
fn repair_crcs(data: &[u8]) -> Option<Vec<u8>> {
    use crate::format::{HEADER_LEN, TRAILER_LEN};
    let mut v = data.to_vec();
    if v.len() < HEADER_LEN + TRAILER_LEN {
        return None;
    }
    let header_crc = crc32fast::hash(v.get(..HEADER_LEN - 4)?);
    v.get_mut(HEADER_LEN - 4..HEADER_LEN)?
        .copy_from_slice(&header_crc.to_le_bytes());
    let len = v.len();
    let trailer = len - TRAILER_LEN;
    let word = |v: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?))
    };
    let (offset, length) = (word(&v, trailer + 8)?, word(&v, trailer + 16)?);
    let footer = usize::try_from(offset).ok().and_then(|from| {
        let to = from.checked_add(usize::try_from(length).ok()?)?;
        (to <= trailer).then_some(from..to)
    });
    if let Some(footer) = footer {
        // Each record's segment CRC, where the record places its segment inside the data.
        let records = footer.start + 8..footer.end;
        for at in records.step_by(48) {
            let (Some(offset), Some(length)) = (word(&v, at + 24), word(&v, at + 32)) else {
                break;
            };
            let segment = usize::try_from(offset).ok().and_then(|from| {
                let to = from.checked_add(usize::try_from(length).ok()?)?;
                (to <= len).then_some(from..to)
            });
            if let Some(crc) = segment.and_then(|r| v.get(r)).map(crc32fast::hash) {
                if let Some(slot) = v.get_mut(at + 40..at + 44) {
                    slot.copy_from_slice(&crc.to_le_bytes());
                }
            }
        }
        let footer_crc = crc32fast::hash(v.get(footer)?);
        v.get_mut(trailer + 24..trailer + 28)?
            .copy_from_slice(&footer_crc.to_le_bytes());
    }
    let object_crc = crc32fast::hash(v.get(..len - 4)?);
    v.get_mut(len - 4..)?
        .copy_from_slice(&object_crc.to_le_bytes());
    Some(v)
}

fn decode_everything(data: &[u8]) {
    use crate::format;
    let len = data.len() as u64;
    let _ = format::decode_header(data);
    let _ = format::decode_trailer(data, len);
    let _ = format::decode_summary(data, data, len);
    if let Ok(summary) = format::decode_object_summary(data) {
        let bytes = Bytes::copy_from_slice(data);
        for record in &summary.footer.records {
            let range = usize::try_from(record.offset).ok().and_then(|from| {
                let to = from.checked_add(usize::try_from(record.length).ok()?)?;
                (to <= bytes.len()).then_some(from..to)
            });
            if let Some(range) = range {
                let _ = format::decode_segment(bytes.slice(range), record);
            }
        }
    }
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(decoded) = format::decode_object(&bytes) {
        let segments: Vec<(u64, &[Bytes])> = decoded
            .segments
            .iter()
            .map(|(region, entries)| (*region, entries.as_slice()))
            .collect();
        let again = format::encode_object(&decoded.summary.header, segments).map(|e| e.to_bytes());
        assert_eq!(
            again.as_ref().map(|b| &b[..]),
            Ok(data),
            "an accepted object must encode back to the same bytes"
        );
    }
}

/// One operation in a [`FaultStore`]'s log.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// When it happened, on tokio's clock (paused in simulations).
    pub at: tokio::time::Instant,
    /// What happened: creates and their outcome (with the fault injected, if any), late
    /// creates landing, deletes, listings (when the store took its snapshot), injected
    /// GET faults.
    pub what: String,
}

/// The operation log of a [`FaultStore`]; empty until recording starts.
#[derive(Debug, Default)]
struct OpLog {
    records: Mutex<Option<Vec<OpRecord>>>,
}

impl OpLog {
    fn push(&self, what: String) {
        if let Some(records) = lock(&self.records).as_mut() {
            records.push(OpRecord {
                at: tokio::time::Instant::now(),
                what,
            });
        }
    }

    fn recording(&self) -> bool {
        lock(&self.records).is_some()
    }

    fn create(
        &self,
        key: &Path,
        fault: Option<CreateFault>,
        result: &object_store::Result<PutResult>,
    ) {
        if !self.recording() {
            return;
        }
        let outcome = match result {
            Ok(_) => "created".to_string(),
            Err(object_store::Error::AlreadyExists { .. }) => "already exists".to_string(),
            Err(e) => format!("error: {e}"),
        };
        let fault = match fault {
            None => String::new(),
            Some(CreateFault::ApplyThenError) => " [fault: applied, then an error]".into(),
            Some(CreateFault::ErrorUnapplied) => " [fault: not applied]".into(),
            Some(CreateFault::LandLate(n)) => format!(" [fault: lands late, after {n} ops]"),
        };
        self.push(format!("create {key}: {outcome}{fault}"));
    }

    fn sent(&self, key: &Path, payload: &PutPayload) {
        if !self.recording() {
            return;
        }
        let head: Vec<u8> = payload
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .take(crate::format::HEADER_LEN)
            .collect();
        let what = match crate::format::decode_header(&head) {
            Ok(h) => format!(
                "epoch {}, link ({}, {}), floor {}{}",
                h.epoch,
                h.link.sequence,
                h.link.epoch,
                h.floor,
                if h.claim { ", claim" } else { "" }
            ),
            Err(_) => "not a WAL object".into(),
        };
        self.push(format!("create {key} sent ({what})"));
    }

    fn late(&self, key: &Path, result: &object_store::Result<PutResult>) {
        if self.recording() {
            let outcome = match result {
                Ok(_) => "landed".to_string(),
                Err(object_store::Error::AlreadyExists { .. }) => "key taken, dropped".into(),
                Err(e) => format!("error: {e}"),
            };
            self.push(format!("late create {key}: {outcome}"));
        }
    }
}

impl FaultStore {
    /// Starts (`true`) or stops and forgets (`false`) recording an operation log:
    /// creates and their outcome, late creates landing, deletes, listings and injected
    /// GET faults, each with its time on tokio's clock ([`op_log`](Self::op_log)).
    pub fn record_ops(&self, on: bool) {
        *lock(&self.log.records) = on.then(Vec::new);
    }

    /// The operations recorded so far, in order.
    pub fn op_log(&self) -> Vec<OpRecord> {
        lock(&self.log.records).clone().unwrap_or_default()
    }
}
