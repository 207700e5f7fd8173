//! One log over several stores: a [`Transport`] over N per-store transports (DESIGN.md
//! "One log over several stores"), between the WAL's objects and the stores.
//!
//! Every store holds byte-identical objects under the same keys; what the objects above
//! see is one store whose objects are the *decided* values (held by a quorum
//! `Q = N / 2 + 1`). The rules are [`crate::internal::store::quorum`]'s; this layer applies them to the
//! stores' answers:
//!
//! - A create goes to every store at once. Each store's answer is classified by the
//!   outcome table (an "already exists" is resolved against that store's copy, read
//!   whole and checked), and the answers combine by the kind of object
//!   ([`CreateTally`]): data objects are durable at Q copies that are ours
//!   ([`write_verdict`](crate::internal::store::quorum::write_verdict)); a claim
//!   succeeds once its hole is settled
//!   ([`hole_settled`](crate::internal::store::quorum::hole_settled)); the opening object
//!   only once it was *created* in Q stores
//!   ([`opening_won`](crate::internal::store::quorum::opening_won)). The slower stores'
//!   creates finish in the background (each bounded by its store's request timeout and
//!   by closing); their answers change nothing but the store's health.
//! - A store's throttle reply leaves its answer unknown and does not count towards
//!   taking it for down. A create that reached no verdict is a throttle reply when
//!   those replies alone withheld the quorum
//!   ([`CreateTally::withheld_by_throttle`], [`Error::NoQuorum`]'s `throttled`).
//! - A value that can never be decided answers "already exists" with the bytes of the
//!   highest other epoch found, which the outcome table turns into fenced, a stale tail
//!   or poisoned. No quorum either way is an unknown outcome, retried above with the
//!   identical bytes.
//! - A store whose recent requests all failed is skipped until a probe, one request a
//!   second, gets a definite answer ([`StoreHealth`]): a dead store costs neither
//!   requests nor memory per object.
//! - A read goes to the store with the lowest recent latency and falls back to the next
//!   copy on a miss, an error or a timeout; one GET per object while the stores answer.
//! - A listing is the union of what the stores list (the reclaimer deletes below the
//!   floor in every store, and catches up a store that was down from a later listing);
//!   it needs Q stores, and a store that has not answered soon after Q have
//!   ([`unlisted_after`]) is left out. An open lists and reads each store on its own
//!   ([`Transport::replicas`]), since decidedness is per copy.
//! - A delete goes to every store that is up and answers once Q have deleted.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use object_store::path::Path;
use tokio::time::Instant;

use crate::config::HedgeAfter;
use crate::error::{Durability, Error, Result};
use crate::internal::store::quorum::{
    quorum, unlisted_after, CreateDecision, CreateTally, StoreHealth, ValueId,
};
use crate::internal::store::transport::{
    CreateAttempt, CreateKind, ListVisitor, Request, RequestStats, Transport, Verify,
    DEFAULT_REQUEST_TIMEOUT,
};

/// The stores' health, shared by every view of one replicated transport.
#[derive(Debug)]
struct Health {
    origin: Instant,
    stores: Vec<Mutex<StoreHealth>>,
}

impl Health {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn with<T>(&self, store: usize, f: impl FnOnce(&mut StoreHealth, Duration) -> T) -> Option<T> {
        let now = self.now();
        let mut h = self
            .stores
            .get(store)?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Some(f(&mut h, now))
    }

    fn admit(&self, store: usize) -> bool {
        self.with(store, |h, now| h.admit(now)).unwrap_or(false)
    }

    fn admit_create(&self, store: usize, max_outstanding: u32) -> bool {
        self.with(store, |h, now| h.admit_create(now, max_outstanding))
            .unwrap_or(false)
    }

    fn answered(&self, store: usize, latency: Option<Duration>) {
        self.with(store, |h, now| h.answered(now, latency));
    }

    fn create_answered(&self, store: usize, latency: Option<Duration>) {
        self.with(store, |h, now| h.create_answered(now, latency));
    }

    fn create_throttled(&self, store: usize) {
        self.with(store, |h, _| h.create_throttled());
    }

    fn outpaced(&self, store: usize, waited: Duration) {
        self.with(store, |h, _| h.outpaced(waited));
    }

    fn read_patience(&self, store: usize) -> Duration {
        self.with(store, |h, _| h.read_patience(READ_PATIENCE_FLOOR))
            .unwrap_or(READ_PATIENCE_FLOOR)
    }

    fn read_order(&self) -> Vec<usize> {
        let snapshot: Vec<StoreHealth> = self
            .stores
            .iter()
            .map(|h| h.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect();
        StoreHealth::read_order(&snapshot)
    }
}

/// A read from one store is waited for at least this long before another store is
/// asked too.
const READ_PATIENCE_FLOOR: Duration = Duration::from_millis(20);

/// Creates one store may hold unanswered, per object the writer may have in flight, before
/// it is skipped for new creates (a store that hangs, before its timeouts tell).
const OUTSTANDING_CREATES_PER_IN_FLIGHT: u32 = 4;

/// The answers of N stores to one request, gathered as they come.
pub struct Gathered<T> {
    /// Per store: its answer, or `None` (it failed, or was left out).
    pub answers: Vec<Option<T>>,
    /// The stores that answered, in the order they did.
    pub order: Vec<usize>,
    /// The last error a store gave, or why none answered.
    pub last: String,
}

/// Gathers `pending` (one request per store, by index, out of `n`) until every store
/// answered or, once `quorum(n)` have answered, [`unlisted_after`] more has passed:
/// a store left out then is *unlisted* (DESIGN.md "One log over several stores", step 1).
pub async fn gather<T>(
    mut pending: FuturesUnordered<BoxFuture<'_, (usize, Result<T>)>>,
    n: usize,
    request_timeout: Duration,
) -> Gathered<T> {
    let q = quorum(n);
    let mut answers: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut order = Vec::with_capacity(n);
    let mut last = String::from("no store answered");
    let mut deadline: Option<Instant> = None;
    let started = Instant::now();
    loop {
        let next = match deadline {
            None => pending.next().await,
            Some(at) => match tokio::time::timeout_at(at, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some((i, answer)) = next else { break };
        match answer {
            Ok(answer) => {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = Some(answer);
                    order.push(i);
                }
                if order.len() == q && deadline.is_none() {
                    let wait = unlisted_after(started.elapsed(), request_timeout);
                    deadline = Some(Instant::now() + wait);
                }
            }
            Err(e) => last = format!("store {i}: {e}"),
        }
    }
    Gathered {
        answers,
        order,
        last,
    }
}

/// One store's listing: its index and its keys with their sizes and modification times.
type StoreListing = (usize, Result<Vec<(Path, u64, SystemTime)>>);

/// [`Transport`] over N stores (N odd, at least 3): see the module docs.
#[derive(Debug, Clone)]
pub struct ReplicatedTransport {
    stores: Vec<Arc<dyn Transport>>,
    health: Arc<Health>,
    stats: Arc<RequestStats>,
    timeout: Duration,
    /// Creates one store may hold unanswered before new ones skip it.
    max_outstanding_creates: u32,
}

/// One store's answer to a create, with its copy resolved.
enum Answer {
    Created,
    /// The store holds this value at the key (its bytes read and checked).
    Holds(ValueId, Bytes),
    Unsupported,
    Refused(Error),
    /// Unknown, and the store refused the request for its rate
    /// ([`CreateAttempt::Throttled`]).
    Throttled(Error),
    Unknown(Error),
}

impl ReplicatedTransport {
    /// The transport over `stores` (each with its own requests: timeouts, hedging,
    /// closing). N must be odd and at least 3: one store needs no replication, and an
    /// even N tolerates no more loss than N - 1.
    pub fn new(stores: Vec<Arc<dyn Transport>>) -> Result<Self> {
        let n = stores.len();
        if n < 3 || n.is_multiple_of(2) {
            return Err(Error::Config {
                field: "urls",
                reason: format!("{n} stores: a quorum needs an odd number, at least 3"),
            });
        }
        Ok(ReplicatedTransport {
            health: Arc::new(Health {
                origin: Instant::now(),
                stores: (0..n).map(|_| Mutex::default()).collect(),
            }),
            stores,
            stats: Arc::new(RequestStats::default()),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            max_outstanding_creates: 16,
        })
    }

    /// This transport for a writer with up to `max_in_flight` objects in flight: a
    /// store is skipped for new creates while it holds more than a few times that many
    /// unanswered.
    pub fn for_in_flight(mut self, max_in_flight: usize) -> Self {
        let in_flight = u32::try_from(max_in_flight).unwrap_or(u32::MAX).max(1);
        self.max_outstanding_creates = in_flight.saturating_mul(OUTSTANDING_CREATES_PER_IN_FLIGHT);
        self
    }

    /// The quorum.
    pub fn quorum(&self) -> usize {
        quorum(self.stores.len())
    }

    fn no_quorum(&self, op: &'static str, key: &Path, answered: usize, last: String) -> Error {
        self.no_quorum_throttled(op, key, answered, 0, last)
    }

    /// [`no_quorum`](Self::no_quorum) of a create that the throttle replies of
    /// `throttled` stores alone kept from its quorum
    /// ([`CreateTally::withheld_by_throttle`]).
    fn no_quorum_throttled(
        &self,
        op: &'static str,
        key: &Path,
        answered: usize,
        throttled: usize,
        last: String,
    ) -> Error {
        Error::NoQuorum {
            op,
            key: key.to_string(),
            answered,
            stores: self.stores.len(),
            quorum: self.quorum(),
            throttled,
            last,
        }
    }

    /// One store's create of `key`, with an "already exists" resolved against its copy.
    fn create_in(
        &self,
        i: usize,
        key: &Path,
        body: &[Bytes],
        kind: CreateKind,
    ) -> BoxFuture<'static, (usize, Answer)> {
        let store = self.stores.get(i).cloned();
        let health = self.health.clone();
        let (key, body) = (key.clone(), body.to_vec());
        async move {
            let Some(store) = store else {
                return (
                    i,
                    Answer::Unknown(Error::Stopped {
                        durability: Durability::NotWritten,
                    }),
                );
            };
            let started = Instant::now();
            let answer = match store.create(&key, &body, kind).await {
                CreateAttempt::Created => Answer::Created,
                CreateAttempt::AlreadyExists { found } => {
                    match read_copy(&store, &key, found).await {
                        Ok((value, bytes)) => Answer::Holds(value, bytes),
                        // The store holds a copy, maybe another value's: a throttled
                        // read of it is no throttled create (had it been ours, the
                        // create would not have been withheld by a refusal).
                        Err(e) => Answer::Unknown(e),
                    }
                }
                CreateAttempt::Unsupported => Answer::Unsupported,
                CreateAttempt::Refused(e) => Answer::Refused(e),
                CreateAttempt::Unknown(e) => Answer::Unknown(e),
                CreateAttempt::Throttled(e) => Answer::Throttled(e),
            };
            match answer {
                // Up, and asking for fewer requests: not taken for down.
                Answer::Throttled(_) => health.create_throttled(i),
                Answer::Unknown(_) => health.create_answered(i, None),
                _ => health.create_answered(i, Some(started.elapsed())),
            }
            (i, answer)
        }
        .boxed()
    }

    async fn create_all(&self, key: &Path, body: &[Bytes], kind: CreateKind) -> CreateAttempt {
        let n = self.stores.len();
        let ours = ValueId::of_chunks(body);
        let mut pending: FuturesUnordered<_> = FuturesUnordered::new();
        let mut last = String::from("no store answered");
        for i in 0..n {
            if self.health.admit_create(i, self.max_outstanding_creates) {
                pending.push(self.create_in(i, key, body, kind));
            } else {
                last = format!("store {i} is down or lagging (skipped)");
            }
        }
        let mut tally = CreateTally::new(n, ours);
        // The copy of another value with the highest epoch: the outcome table's row.
        let mut highest: Option<(u64, Bytes)> = None;
        let verdict = loop {
            let Some((i, answer)) = pending.next().await else {
                // Every store asked answered, and no decision: unknown, and a throttle
                // reply when those alone withheld the quorum.
                let throttled = tally.withheld_by_throttle(kind);
                let answered = tally.answered();
                let no_quorum = self.no_quorum_throttled("create", key, answered, throttled, last);
                break if throttled > 0 {
                    CreateAttempt::Throttled(no_quorum)
                } else {
                    CreateAttempt::Unknown(no_quorum)
                };
            };
            if i >= n {
                continue;
            }
            match answer {
                Answer::Created => tally.created(i),
                Answer::Holds(value, bytes) => {
                    if tally.holds(i, value) {
                        self.stats
                            .creates_found_landed
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else if highest.as_ref().is_none_or(|(e, _)| value.epoch > *e) {
                        highest = Some((value.epoch, bytes));
                    }
                }
                Answer::Unsupported => break CreateAttempt::Unsupported,
                Answer::Refused(e) => break CreateAttempt::Refused(e),
                Answer::Throttled(e) => {
                    tally.throttled(i);
                    last = format!("store {i}: {e}");
                }
                Answer::Unknown(e) => last = format!("store {i}: {e}"),
            }
            match tally.decision(kind) {
                CreateDecision::Created => break CreateAttempt::Created,
                CreateDecision::Lost => {
                    break CreateAttempt::AlreadyExists {
                        found: highest.as_ref().map(|(_, b)| b.clone()),
                    }
                }
                CreateDecision::Undecided => {}
            }
        };
        finish_in_background(pending);
        verdict
    }

    /// Reads from the store with the lowest recent latency; a store that has not
    /// answered within its patience ([`StoreHealth::read_patience`]) gets the next store
    /// asked beside it, and an error or a miss moves on at once. The first copy read
    /// wins; the others are dropped, and those it outpaced are noted as slow.
    async fn get_any(
        &self,
        key: &Path,
        range: Option<Range<u64>>,
        verify: Option<Verify<'_>>,
    ) -> Result<Bytes> {
        // Every copy failing its checks may be reads damaged in transit: once more.
        match self.get_round(key, range.clone(), verify).await {
            Ok((bytes, false)) => Ok(bytes),
            Ok((_, true)) => self.get_round(key, range, verify).await.map(|(b, _)| b),
            Err(e) => Err(e),
        }
    }

    /// One round of [`get_any`](Self::get_any): the bytes, and whether every copy read
    /// failed `verify` (then the last of them).
    async fn get_round(
        &self,
        key: &Path,
        range: Option<Range<u64>>,
        verify: Option<Verify<'_>>,
    ) -> Result<(Bytes, bool)> {
        let order: Vec<usize> = self
            .health
            .read_order()
            .into_iter()
            .filter(|i| self.health.admit(*i))
            .collect();
        let total = order.len();
        let mut next = order.into_iter().peekable();
        let mut running: FuturesUnordered<BoxFuture<'_, (usize, Duration, Result<Bytes>)>> =
            FuturesUnordered::new();
        // Stores asked and not answered yet, with when they were asked.
        let mut waiting: Vec<(usize, Instant)> = Vec::new();
        let mut patience = READ_PATIENCE_FLOOR;
        let mut last: Option<Error> = None;
        let mut not_found = 0;
        // The last copy read that failed `verify`: the answer if no copy passes.
        let mut damaged: Option<Bytes> = None;
        loop {
            if running.is_empty() || (waiting.is_empty() && next.peek().is_some()) {
                let Some(i) = next.next() else { break };
                waiting.push((i, Instant::now()));
                patience = self.health.read_patience(i);
                running.push(self.get_from(i, key, range.clone()));
            }
            // With no store left to ask, the request timeout bounds the wait.
            let wait = if next.peek().is_some() {
                patience
            } else {
                self.timeout.saturating_mul(2)
            };
            let (i, took, answer) = match tokio::time::timeout(wait, running.next()).await {
                Ok(Some(answer)) => answer,
                Ok(None) => continue,
                Err(_) => {
                    // Slow: ask the next store too, keeping this one.
                    if let Some(i) = next.next() {
                        waiting.push((i, Instant::now()));
                        patience = self.health.read_patience(i);
                        running.push(self.get_from(i, key, range.clone()));
                    }
                    continue;
                }
            };
            waiting.retain(|(w, _)| *w != i);
            match answer {
                Ok(bytes) if verify.is_some_and(|v| !v(&bytes)) => {
                    self.health.answered(i, Some(took));
                    self.stats
                        .damaged_copies
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(store = i, key = %key,
                        "a copy failed its checks; reading another store's copy");
                    damaged = Some(bytes);
                }
                Ok(bytes) => {
                    self.health.answered(i, Some(took));
                    for (slow, since) in &waiting {
                        self.health.outpaced(*slow, since.elapsed());
                    }
                    return Ok((bytes, false));
                }
                Err(e) => {
                    // A missing copy is a definite answer: its store missed the create,
                    // or the key was reclaimed.
                    let missing = e.is_not_found();
                    self.health.answered(i, missing.then_some(took));
                    if missing {
                        not_found += 1;
                        last.get_or_insert(e);
                    } else {
                        last = Some(e);
                    }
                }
            }
        }
        if let Some(bytes) = damaged {
            // Every copy read failed its checks: the caller's checks report it.
            return Ok((bytes, true));
        }
        // "Not found" only when every store asked said so.
        match last {
            Some(e) if !e.is_not_found() || not_found == total => Err(e),
            Some(e) => Err(self.no_quorum("get", key, total - not_found, e.to_string())),
            None => Err(self.no_quorum("get", key, 0, "every store is down".into())),
        }
    }

    fn get_from(
        &self,
        i: usize,
        key: &Path,
        range: Option<Range<u64>>,
    ) -> BoxFuture<'_, (usize, Duration, Result<Bytes>)> {
        let key = key.clone();
        async move {
            let started = Instant::now();
            let answer = match self.stores.get(i) {
                Some(store) => store.get(&key, range).await,
                None => Err(Error::Stopped {
                    durability: Durability::NotWritten,
                }),
            };
            (i, started.elapsed(), answer)
        }
        .boxed()
    }

    async fn list_all(
        &self,
        prefix: &Path,
        offset: Option<&Path>,
        visit: ListVisitor<'_>,
    ) -> Result<()> {
        let q = self.quorum();
        let pending: FuturesUnordered<BoxFuture<'static, StoreListing>> = FuturesUnordered::new();
        // Why a store was not asked, unless a store's own error says more.
        let mut last = String::new();
        for (i, store) in self.stores.iter().enumerate() {
            if !self.health.admit(i) {
                last = format!("store {i} is down");
                continue;
            }
            let (store, prefix, offset) = (store.clone(), prefix.clone(), offset.cloned());
            let health = self.health.clone();
            pending.push(
                async move {
                    let started = Instant::now();
                    let mut keys = Vec::new();
                    let mut push = |k: &Path, size: u64, modified: SystemTime| {
                        keys.push((k.clone(), size, modified))
                    };
                    let listed = store.list(&prefix, offset.as_ref(), &mut push).await;
                    health.answered(i, listed.is_ok().then(|| started.elapsed()));
                    (i, listed.map(|()| keys))
                }
                .boxed(),
            );
        }
        let gathered = gather(pending, self.stores.len(), self.timeout).await;
        let listed = gathered.order.len();
        if !gathered.order.is_empty() || last.is_empty() {
            last = gathered.last;
        }
        // Each key's largest size and latest modification among the stores listed.
        let mut union: BTreeMap<Path, (u64, SystemTime)> = BTreeMap::new();
        for keys in gathered.answers.into_iter().flatten() {
            for (key, size, modified) in keys {
                let known = union.entry(key).or_insert((size, modified));
                *known = (known.0.max(size), known.1.max(modified));
            }
        }
        if listed < q {
            return Err(self.no_quorum("list", prefix, listed, last));
        }
        for (key, (size, modified)) in &union {
            visit(key, *size, *modified);
        }
        Ok(())
    }

    /// Deletes in every store that is up (a store down is not probed with deletes), and
    /// answers once a quorum has: the rest finish in the background, bounded like the
    /// slower creates. A store that missed a delete keeps its copy until a later
    /// listing finds it below the floor.
    async fn delete_all(&self, key: &Path) -> Result<()> {
        let q = self.quorum();
        let mut deletes: FuturesUnordered<BoxFuture<'static, Result<()>>> = FuturesUnordered::new();
        for (i, store) in self.stores.iter().enumerate() {
            let up = self.health.with(i, |h, _| !h.is_down()).unwrap_or(false);
            if !up || !self.health.admit_create(i, self.max_outstanding_creates) {
                continue;
            }
            let (store, key, health) = (store.clone(), key.clone(), self.health.clone());
            deletes.push(
                async move {
                    let started = Instant::now();
                    let done = store.delete(&key).await;
                    health.create_answered(i, done.is_ok().then(|| started.elapsed()));
                    done
                }
                .boxed(),
            );
        }
        let mut deleted = 0;
        let mut first_error = None;
        while deleted < q {
            match deletes.next().await {
                Some(Ok(())) => deleted += 1,
                Some(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                None => break,
            }
        }
        finish_in_background(deletes);
        match first_error {
            Some(e) if deleted < q => Err(e),
            _ if deleted < q => Err(self.no_quorum("delete", key, deleted, "stores down".into())),
            _ => Ok(()),
        }
    }
}

/// Lets the slower stores' requests go on after the answer: each ends at its store's
/// request timeout or when the transport closes; only their stores' health hears them.
fn finish_in_background<T: Send + 'static>(mut pending: FuturesUnordered<BoxFuture<'static, T>>) {
    if !pending.is_empty() {
        tokio::spawn(async move { while pending.next().await.is_some() {} });
    }
}

/// Reads the copy at `key` in one store (or takes `found`, already read) and checks it;
/// a copy that fails its checks is read once more (damage in transit must not pass for
/// another value), then is an error naming the key.
async fn read_copy(
    store: &Arc<dyn Transport>,
    key: &Path,
    found: Option<Bytes>,
) -> Result<(ValueId, Bytes)> {
    let bytes = match found {
        Some(bytes) => bytes,
        None => store.get(key, None).await?,
    };
    if let Ok(value) = ValueId::of_copy(&bytes) {
        return Ok((value, bytes));
    }
    let bytes = store.get(key, None).await?;
    match ValueId::of_copy(&bytes) {
        Ok(value) => Ok((value, bytes)),
        Err(source) => Err(Error::CorruptObject {
            key: key.to_string(),
            source,
        }),
    }
}

impl Transport for ReplicatedTransport {
    fn create<'a>(
        &'a self,
        key: &'a Path,
        body: &'a [Bytes],
        kind: CreateKind,
    ) -> Request<'a, CreateAttempt> {
        Box::pin(self.create_all(key, body, kind))
    }

    fn get<'a>(&'a self, key: &'a Path, range: Option<Range<u64>>) -> Request<'a, Result<Bytes>> {
        Box::pin(self.get_any(key, range, None))
    }

    fn get_verified<'a>(
        &'a self,
        key: &'a Path,
        range: Option<Range<u64>>,
        verify: Verify<'a>,
    ) -> Request<'a, Result<Bytes>> {
        Box::pin(self.get_any(key, range, Some(verify)))
    }

    fn list<'a>(
        &'a self,
        prefix: &'a Path,
        offset: Option<&'a Path>,
        visit: ListVisitor<'a>,
    ) -> Request<'a, Result<()>> {
        Box::pin(self.list_all(prefix, offset, visit))
    }

    fn delete<'a>(&'a self, key: &'a Path) -> Request<'a, Result<()>> {
        Box::pin(self.delete_all(key))
    }

    fn with_requests_counted(
        &self,
        hedge_after: HedgeAfter,
        timeout: Duration,
        stats: Arc<RequestStats>,
    ) -> Arc<dyn Transport> {
        Arc::new(ReplicatedTransport {
            // The stores' hedges and timeouts count as this transport's.
            stores: self
                .stores
                .iter()
                .map(|s| s.with_requests_counted(hedge_after, timeout, stats.clone()))
                .collect(),
            health: self.health.clone(),
            stats,
            timeout,
            max_outstanding_creates: self.max_outstanding_creates,
        })
    }

    fn close(&self) {
        for store in &self.stores {
            store.close();
        }
    }

    fn is_closed(&self) -> bool {
        self.stores.iter().all(|s| s.is_closed())
    }

    fn closed(&self) -> Request<'_, ()> {
        Box::pin(async move {
            futures::future::join_all(self.stores.iter().map(|s| s.closed())).await;
        })
    }

    fn stats(&self) -> &RequestStats {
        &self.stats
    }

    fn create_median(&self) -> Option<Duration> {
        // A quorum's create answers with its Q-th fastest store.
        let mut medians: Vec<Duration> = self
            .stores
            .iter()
            .filter_map(|s| s.create_median())
            .collect();
        medians.sort_unstable();
        medians
            .get(quorum(self.stores.len()).saturating_sub(1))
            .copied()
    }

    fn describe(&self) -> String {
        let stores: Vec<String> = self.stores.iter().map(|s| s.describe()).collect();
        format!("{} stores [{}]", stores.len(), stores.join(", "))
    }

    fn request_timeout(&self) -> Duration {
        self.timeout
    }

    fn replicas(&self) -> Vec<Arc<dyn Transport>> {
        self.stores.clone()
    }
}
