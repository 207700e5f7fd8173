//! The read-only follower (DESIGN.md "Tailing without listing"): it finds the objects
//! after its chain's end by probing their keys (the trailer and footer with one suffix
//! read), walks the answers with the pure `walk_probes`, and lists only to start and
//! when a key stays absent longer than the link window. Over several stores each key's
//! object is the value a quorum holds.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use tracing::{info_span, warn, Instrument};

use super::fetch::*;
use super::follow::*;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::format::{self, Header, Link, ObjectSummary, TRAILER_LEN};
use crate::internal::chain::catalog::{choose_chain, next_on_chain, walk_probes, Catalog};
use crate::internal::open::{list_replicas, recover};
use crate::internal::store::objects::{ListedObject, WalIo, TAIL_READ_BYTES};
use crate::internal::store::quorum::{decided_value, quorum, ValueId};

/// The longest a read-only follower waits between two polls of an idle prefix.
pub const IDLE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Keys a read-only follower probes at once, at most (while it catches up).
pub const MAX_PROBES: usize = 8;

/// Keys probed at once at most to reach an object whose sequence is known (a
/// release's, a catch-up's refresh), where one round's reads fit in
/// [`KNOWN_ROUND_BYTES`]; a poll's rounds stay at [`MAX_PROBES`].
pub const MAX_KNOWN_PROBES: usize = 32;

/// The bytes one round of probes toward a known object reads at most (each probe
/// reads a tail, or a small object whole): the size of a source's cache of whole
/// objects (`SOURCE_OBJECT_BYTES`), so one round is what the cache holds.
pub const KNOWN_ROUND_BYTES: u64 = 8 * 1024 * 1024;

/// Refreshes asked of one polling task that wait at most while one runs (each follow
/// or catch-up over the source asks for one at a time); more wait to be queued.
const REFRESHES_QUEUED: usize = 64;

/// The least a probe reads from the end of a key: an empty object whole, and the
/// footer of a few dozen segments.
const MIN_PROBE_TAIL: u64 = 2048;

/// Growth of another node's prefix opened read-only, found by polling (DESIGN.md
/// "Tailing without listing"): each poll probes the keys after the chain end in order
/// ([`WalIo::probe_summary`]: a key's trailer and footer, and its header) and walks
/// them with [`walk_probes`]; no LIST. Several keys are probed at once while every one
/// holds an object (a follower that fell behind catches up at several objects per round
/// trip), one while the next key is absent. Polls come every `poll_interval` while
/// objects appear and back off, doubling, to [`IDLE_POLL_INTERVAL`] while none does, so
/// an idle follower costs one GET a second.
///
/// Over several stores a key's object is its decided value
/// ([`probe_decided`](Self::probe_decided)). It lists (as [`extend`](Self::extend) does:
/// one LIST after the chain end) when the next key stays absent longer than the owner is
/// ever idle (`link_window`: the owner's floor may have passed this follower and its
/// next key been reclaimed), and when a probe meets an error other than not-found.
pub(super) struct PolledGrowth {
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    poll_interval: Duration,
    last: Link,
    pending: BTreeMap<u64, ObjectSummary>,
    /// The wait before the next poll.
    wait: Duration,
    /// Keys probed at once.
    probes: usize,
    /// The first key not yet passed over (claims and orphans above the chain end are
    /// not probed again).
    next_key: u64,
    /// Bytes a probe reads from a key's end: the last footer and trailer, with slack.
    tail_len: u64,
    /// The length of the longest object the last round found.
    last_length: u64,
    /// Since when `next_key` has been absent.
    absent_since: Option<tokio::time::Instant>,
    /// How long the next key may stay absent before the follower lists.
    list_after_absent: Duration,
    /// Over several stores, idle polls so far: each probes the next store in turn.
    idle_polls: usize,
}

impl PolledGrowth {
    pub(super) fn new(
        io: WalIo,
        catalog: Arc<RwLock<Catalog>>,
        config: &Config,
        poll_interval: Duration,
        last: Link,
        last_length: u64,
    ) -> Self {
        PolledGrowth {
            io,
            catalog,
            poll_interval,
            last,
            pending: BTreeMap::new(),
            wait: poll_interval,
            probes: 1,
            next_key: last.sequence.saturating_add(1),
            tail_len: MIN_PROBE_TAIL,
            last_length,
            absent_since: None,
            list_after_absent: config.link_window(),
            idle_polls: 0,
        }
    }

    async fn poll(&mut self) -> Result<bool> {
        tokio::time::sleep(self.wait).await;
        let before = self.last;
        let more = self.probe().await?;
        self.wait = if more {
            // Every probed key held an object: poll again as soon as these are read.
            Duration::ZERO
        } else if self.last != before {
            self.poll_interval
        } else {
            // From zero (after a round that found every key full) too.
            self.wait
                .saturating_mul(2)
                .max(self.poll_interval)
                .min(IDLE_POLL_INTERVAL.max(self.poll_interval))
        };
        Ok(true)
    }

    /// Probes now, round after round while every probed key holds an object, until
    /// `known` is on the chain ([`Refresh::Probe`]); nothing when it already is (an
    /// earlier catch-up's probe found it).
    async fn probe_through(&mut self, known: Option<u64>) -> Result<()> {
        if let Some(known) = known {
            if self.last != Link::NONE && known <= self.last.sequence {
                return Ok(());
            }
        }
        // Active: each probe reads the header beside the tail, or the object whole (one
        // round trip), however idle the source was.
        self.wait = self.wait.min(self.poll_interval);
        if let Some(known) = known {
            // Every key up to it in one round (a region's catch-up starts where its
            // last entry was, often dozens of objects behind the release), as many as
            // one round's reads fit in `KNOWN_ROUND_BYTES`.
            let wanted = known.saturating_sub(self.next_key).saturating_add(1);
            let wanted = usize::try_from(wanted).unwrap_or(MAX_KNOWN_PROBES);
            let read = self
                .io
                .whole_probe_len(self.last_length)
                .map_or(self.tail_len, |largest| largest.max(self.tail_len))
                .max(1);
            let fit = usize::try_from(KNOWN_ROUND_BYTES / read).unwrap_or(MAX_KNOWN_PROBES);
            let most = fit.clamp(MAX_PROBES, MAX_KNOWN_PROBES);
            self.probes = self.probes.max(wanted.min(most));
        }
        let through = known.unwrap_or(u64::MAX);
        loop {
            match self.probe().await {
                // Up to the object asked for: another round would only meet the absent
                // key after the chain end.
                Ok(true) if self.last.sequence < through => continue,
                Ok(_) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// One round of probes after the chain end; extends the catalog by what links on.
    /// `Ok(true)` when every probed key held an object (more may follow at once).
    async fn probe(&mut self) -> Result<bool> {
        let first = self.next_key;
        // Idle, a probe is one request (the header only once the key holds an
        // object); active, the header is read beside the tail (one round trip).
        // A source log reads objects whole (up to a bound, larger while a catch-up is
        // under way): the one GET of an object is its summary and every segment of it.
        let whole = self.io.whole_probe_len(self.last_length);
        let tail_len = whole.map_or(self.tail_len, |largest| largest.max(self.tail_len));
        let active = self.wait <= self.poll_interval;
        let header_at_once = whole.is_none() && active;
        let replicas = self.io.replicas();
        let probed = if replicas.is_empty() {
            futures::future::join_all((0..self.probes as u64).map(|i| {
                self.io
                    .probe_summary(first.saturating_add(i), tail_len, header_at_once)
            }))
            .await
        } else {
            // Idle, one store is probed, each poll the next one (see `probe_decided`).
            let idle = (!active).then_some(self.idle_polls);
            self.idle_polls = self.idle_polls.wrapping_add(usize::from(idle.is_some()));
            futures::future::join_all((0..self.probes as u64).map(|i| {
                let key = first.saturating_add(i);
                self.probe_decided(&replicas, key, tail_len, header_at_once, idle)
            }))
            .await
        };
        let mut summaries = Vec::with_capacity(probed.len());
        for result in probed {
            match result {
                Ok(summary) => summaries.push(summary),
                Err(e) => {
                    warn!(error = %e, "a probe failed; the follower lists instead");
                    return self.extend().await.map(|()| false);
                }
            }
        }
        let headers: Vec<Option<&Header>> = summaries
            .iter()
            .map(|s| s.as_ref().map(|s| &s.header))
            .collect();
        let walk = walk_probes(self.last, first, &headers);
        if let Some(tail) = summaries
            .iter()
            .flatten()
            .map(|s| (TRAILER_LEN + format::Footer::encoded_len(s.footer.records.len())) as u64)
            .max()
        {
            // The next footer is likely as long as these: read it in the probe.
            self.tail_len = (tail + tail / 4 + 256).clamp(MIN_PROBE_TAIL, TAIL_READ_BYTES);
        }
        if let Some(longest) = summaries.iter().flatten().map(|s| s.length).max() {
            self.last_length = longest;
        }
        if !walk.extended.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            for summary in summaries.iter().flatten() {
                if walk.extended.contains(&summary.header.sequence) {
                    catalog.insert(&summary.header, &summary.footer.records, summary.length)?;
                }
            }
            self.last = walk.last;
            self.pending = self.pending.split_off(&(self.last.sequence + 1));
        }
        let moved = walk.next_key != self.next_key;
        self.next_key = walk.next_key;
        if walk.met_absent {
            // Probe as many keys next time as held objects this time.
            let held = usize::try_from(walk.next_key - first).unwrap_or(MAX_PROBES);
            self.probes = held.clamp(1, MAX_PROBES);
            if moved {
                self.absent_since = None;
                return Ok(false);
            }
            let now = tokio::time::Instant::now();
            let since = *self.absent_since.get_or_insert(now);
            if now.duration_since(since) > self.list_after_absent {
                self.absent_since = None;
                self.extend().await?;
            }
            return Ok(false);
        }
        self.absent_since = None;
        self.probes = (self.probes * 2).min(MAX_PROBES);
        Ok(true)
    }

    /// One LIST after the chain end; extends the catalog by what links on from it, or,
    /// when the owner's floor has passed this follower, by the chain a fresh read-only
    /// open would choose now.
    async fn extend(&mut self) -> Result<()> {
        let replicas = self.io.replicas();
        if replicas.is_empty() {
            let listing = self.io.list_after(self.last.sequence).await?;
            for listed in listing.objects {
                if let std::collections::btree_map::Entry::Vacant(slot) =
                    self.pending.entry(listed.sequence)
                {
                    match self.io.read_summary(&listed).await {
                        Ok(read) => {
                            slot.insert(read.summary);
                        }
                        // Deleted since the listing: below the owner's floor.
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        } else {
            self.take_decided(&replicas).await?;
        }
        let headers: BTreeMap<u64, Header> =
            self.pending.iter().map(|(s, o)| (*s, o.header)).collect();
        let mut at = self.last;
        let mut extended = Vec::new();
        while let Some(sequence) = next_on_chain(at, &headers) {
            let epoch = headers.get(&sequence).map_or(0, |h| h.epoch);
            extended.push(sequence);
            at = Link { sequence, epoch };
        }
        // Where nothing links on (the whole way, or part of it: the owner's deletes run
        // concurrently and out of order), what is listed above holds a complete chain
        // that needs nothing at or below the end reached only if its floor is above that
        // end: the owner let go of it, and may have deleted the next link.
        let above = headers
            .range(at.sequence.saturating_add(1)..)
            .next()
            .is_some();
        let chain = if above {
            choose_chain(&headers)
        } else {
            Vec::new()
        };
        let tip = chain.last().and_then(|s| headers.get(s));
        if let Some(tip) =
            tip.filter(|t| t.floor > at.sequence && (t.epoch, t.sequence) > (at.epoch, at.sequence))
        {
            warn!(
                chain_end = at.sequence,
                floor = tip.floor,
                "the owner's floor passed this follower; it goes on from the chain above the floor"
            );
            at = Link {
                sequence: tip.sequence,
                epoch: tip.epoch,
            };
            // Every object of that chain lies at or above its floor, above the end.
            extended.extend(chain);
        }
        if !extended.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            for sequence in &extended {
                if let Some(o) = self.pending.get(sequence) {
                    catalog.insert(&o.header, &o.footer.records, o.length)?;
                }
            }
            self.last = at;
        }
        // What lies at or below the chain end can never extend it.
        self.pending = self.pending.split_off(&(self.last.sequence + 1));
        self.next_key = self.next_key.max(self.last.sequence.saturating_add(1));
        Ok(())
    }
}

impl PolledGrowth {
    /// Over several stores, a probe of `sequence` finds its decided value (DESIGN.md:
    /// "over several stores, object means decided value"): every store's copy is probed
    /// and the value Q of them hold is the key's object; a key with no decided value yet
    /// is absent (it ends the poll; a copy in fewer than Q stores may be a create that
    /// was never acknowledged and that a later open claims over). A store whose probe
    /// fails counts as holding no copy, unless every store's fails (then the error, and
    /// the follower lists). Idle (`idle`: the count of idle polls), only one store is
    /// probed, the next one each poll, and the others only if it holds a copy: a value
    /// decided in Q of N stores is found within N - Q + 1 idle polls, at one GET a poll.
    async fn probe_decided(
        &self,
        replicas: &[WalIo],
        sequence: u64,
        tail_len: u64,
        header_at_once: bool,
        idle: Option<usize>,
    ) -> Result<Option<ObjectSummary>> {
        let n = replicas.len();
        let probe = |store: usize| async move {
            match replicas.get(store) {
                Some(replica) => {
                    replica
                        .probe_summary(sequence, tail_len, header_at_once)
                        .await
                }
                None => Ok(None),
            }
        };
        let q = quorum(n);
        let mut copies = ProbedCopies {
            ids: vec![None; n],
            summaries: Vec::new(),
            failure: None,
            failed: 0,
        };
        let mut first_store = None;
        if let Some(polls) = idle.filter(|_| n > 0) {
            let store = polls % n;
            let first = probe(store).await;
            if matches!(first, Ok(None)) {
                return Ok(None);
            }
            copies.record(store, first);
            first_store = Some(store);
        }
        let mut pending: futures::stream::FuturesUnordered<_> = (0..n)
            .filter(|store| Some(*store) != first_store)
            .map(|store| async move { (store, probe(store).await) })
            .collect();
        // Answers are taken as they come: a slow or down store holds the probe up only
        // while the others leave the key's value open.
        loop {
            if let Some(value) = decided_value(&copies.ids) {
                let summary = copies
                    .summaries
                    .into_iter()
                    .find(|s| ValueId::of(s) == value);
                return Ok(summary);
            }
            if copies.most_of_one_value() + pending.len() < q {
                break;
            }
            match pending.next().await {
                Some((store, result)) => copies.record(store, result),
                None => break,
            }
        }
        match copies.failure {
            Some(e) if copies.failed == n => Err(e),
            _ => Ok(None),
        }
    }

    /// Over several stores, only decided objects may be delivered (a copy in fewer than
    /// Q stores may be a writer's create that was never acknowledged and that a later
    /// open claims over): each store is listed (a store that has not answered soon after
    /// a quorum did is left out, as at an open), and a key listed in Q stores is kept
    /// once Q of its copies' summaries are the same value. Costs one summary read per
    /// listed copy (N per object instead of one, read at once); a key with fewer copies
    /// is looked at again at the next poll.
    async fn take_decided(&mut self, replicas: &[WalIo]) -> Result<()> {
        let q = quorum(replicas.len());
        let after = self.last.sequence;
        let (listings, _) = list_replicas(&self.io, replicas, Some(after)).await?;
        let mut copies: BTreeMap<u64, Vec<(usize, ListedObject)>> = BTreeMap::new();
        for (store, listing) in listings.into_iter().enumerate() {
            for listed in listing.into_iter().flat_map(|l| l.objects) {
                if !self.pending.contains_key(&listed.sequence) {
                    copies
                        .entry(listed.sequence)
                        .or_default()
                        .push((store, listed));
                }
            }
        }
        for (sequence, listed) in copies.into_iter().filter(|(_, c)| c.len() >= q) {
            let reads = futures::future::join_all(listed.iter().map(|(store, listed)| {
                let replica = replicas.get(*store);
                async move {
                    match replica {
                        Some(replica) => replica.read_summary(listed).await.map(Some),
                        None => Ok(None),
                    }
                }
            }))
            .await;
            // One entry per store, as the quorum rules take them.
            let mut ids: Vec<Option<ValueId>> = vec![None; replicas.len()];
            let mut summaries = Vec::new();
            for ((store, _), read) in listed.iter().zip(reads) {
                match read {
                    Ok(Some(read)) => {
                        if let Some(slot) = ids.get_mut(*store) {
                            *slot = Some(ValueId::of(&read.summary));
                        }
                        summaries.push(read.summary);
                    }
                    Ok(None) => {}
                    // Deleted since the listing: below the owner's floor.
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            if let Some(value) = decided_value(&ids) {
                if let Some(summary) = summaries.into_iter().find(|s| ValueId::of(s) == value) {
                    self.pending.insert(sequence, summary);
                }
            }
        }
        Ok(())
    }
}

/// What the probes of one key in several stores found so far.
struct ProbedCopies {
    /// Per store, the value of its copy, if it answered with one.
    ids: Vec<Option<ValueId>>,
    summaries: Vec<ObjectSummary>,
    failure: Option<Error>,
    failed: usize,
}

impl ProbedCopies {
    fn record(&mut self, store: usize, result: Result<Option<ObjectSummary>>) {
        match result {
            Ok(Some(summary)) => {
                if let Some(slot) = self.ids.get_mut(store) {
                    *slot = Some(ValueId::of(&summary));
                }
                self.summaries.push(summary);
            }
            Ok(None) => {}
            Err(e) => {
                self.failed += 1;
                self.failure = Some(e);
            }
        }
    }

    /// The most copies any one value has.
    fn most_of_one_value(&self) -> usize {
        self.ids
            .iter()
            .flatten()
            .map(|v| self.ids.iter().filter(|w| **w == Some(*v)).count())
            .max()
            .unwrap_or(0)
    }
}

/// A request to bring the catalog up to date now (by a listing, or by probing the keys
/// after the chain end until one is absent), with where to answer.
type RefreshRequest = (Refresh, tokio::sync::oneshot::Sender<Result<()>>);

/// How a [`RefreshRequest`] brings the catalog up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refresh {
    /// One LIST after the chain end ([`PolledGrowth::extend`]).
    List,
    /// Probes now, round after round while every probed key holds an object; given a
    /// sequence, the first round probes every key up to it at once (capped at
    /// [`MAX_PROBES`]) and the rounds end once it is on the chain: one round trip to
    /// reach an object whose sequence is known (a release's).
    Probe(Option<u64>),
}

impl PolledGrowth {
    /// Polls in a task of its own, beside the follow that reads what it finds: the next
    /// keys are probed while the last round's segments are fetched. Each extension of
    /// the catalog bumps `grown`; a failed poll is left in `failed` and ends the task.
    /// Ends when the follow drops its end (every receiver of `grown`), or the store
    /// access closes.
    async fn run(
        mut self,
        grown: tokio::sync::watch::Sender<u64>,
        failed: Arc<std::sync::Mutex<Option<Error>>>,
        mut refreshes: tokio::sync::mpsc::Receiver<RefreshRequest>,
    ) {
        enum Next {
            Closed,
            Refresh(RefreshRequest),
            Polled(Result<bool>),
        }
        // A view derived from a WAL's store access closes with it: the task ends then.
        let io = self.io.clone();
        loop {
            let before = self.last;
            let next = tokio::select! {
                _ = grown.closed() => Next::Closed,
                _ = io.closed() => Next::Closed,
                request = refreshes.recv() => match request {
                    Some(reply) => Next::Refresh(reply),
                    None => Next::Closed,
                },
                polled = self.poll() => Next::Polled(polled),
            };
            match next {
                Next::Closed => return,
                Next::Refresh((Refresh::List, reply)) => {
                    let _ = reply.send(self.extend().await);
                }
                Next::Refresh((Refresh::Probe(known), reply)) => {
                    // The probes asked for meanwhile (catch-ups of regions moved
                    // together) share this one: one round trip for all, not one each
                    // in turn. The listings asked for wait for it.
                    let mut replies = vec![reply];
                    let mut lists = Vec::new();
                    let mut known = known;
                    while let Ok((how, reply)) = refreshes.try_recv() {
                        match how {
                            Refresh::Probe(also) => {
                                known = known.zip(also).map(|(a, b)| a.max(b));
                                replies.push(reply);
                            }
                            Refresh::List => lists.push(reply),
                        }
                    }
                    let probed = self.probe_through(known).await;
                    for reply in replies {
                        let _ = reply.send(probed.clone());
                    }
                    // One listing answers every listing asked for meanwhile.
                    if !lists.is_empty() {
                        let listed = self.extend().await;
                        for reply in lists {
                            let _ = reply.send(listed.clone());
                        }
                    }
                }
                Next::Polled(Ok(_)) => {}
                Next::Polled(Err(e)) => {
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    grown.send_modify(|n| *n += 1);
                    return;
                }
            }
            if self.last != before {
                grown.send_modify(|n| *n += 1);
            }
        }
    }
}

/// A read-only follow's view of its [`PolledGrowth`] task; clones share the task (it
/// ends when the last clone is dropped).
#[derive(Clone)]
pub(super) struct TailedGrowth {
    grown: tokio::sync::watch::Receiver<u64>,
    failed: Arc<std::sync::Mutex<Option<Error>>>,
    refreshes: tokio::sync::mpsc::Sender<RefreshRequest>,
}

impl TailedGrowth {
    /// Starts `growth`'s task and returns the follow's end of it.
    pub(super) fn spawn(growth: PolledGrowth, span: tracing::Span) -> Self {
        let (grown_tx, grown) = tokio::sync::watch::channel(0);
        let failed = Arc::new(std::sync::Mutex::new(None));
        // Bounded: a catch-up or follow asks for one refresh at a time; those asked for
        // while one runs are answered together.
        let (refreshes, refresh_rx) = tokio::sync::mpsc::channel(REFRESHES_QUEUED);
        tokio::spawn(
            growth
                .run(grown_tx, failed.clone(), refresh_rx)
                .instrument(span),
        );
        TailedGrowth {
            grown,
            failed,
            refreshes,
        }
    }

    pub(super) fn failure(&self) -> Option<Error> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ChainGrowth for TailedGrowth {
    fn mark(&mut self) {
        self.grown.borrow_and_update();
    }

    fn grown(&mut self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            let alive = self.grown.changed().await.is_ok();
            match self.failure() {
                Some(e) => Err(e),
                None => Ok(alive),
            }
        })
    }

    fn refresh(&mut self) -> BoxFuture<'_, Result<()>> {
        self.ask(Refresh::List)
    }
}

impl TailedGrowth {
    /// Probes the keys after the chain end now, without waiting for the next poll; the
    /// first round reaches `through` if it is near (a release's object).
    pub(super) fn probe_now(&mut self, through: Option<u64>) -> BoxFuture<'_, Result<()>> {
        self.ask(Refresh::Probe(through))
    }

    fn ask(&mut self, how: Refresh) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            if self.refreshes.send((how, reply)).await.is_err() {
                return Err(self.failure().unwrap_or(Error::Stopped {
                    durability: crate::error::Durability::NotWritten,
                }));
            }
            match answer.await {
                Ok(result) => result,
                Err(_) => Err(self.failure().unwrap_or(Error::Stopped {
                    durability: crate::error::Durability::NotWritten,
                })),
            }
        })
    }
}

/// A recovered catalog of a prefix opened read-only, shared, and the polling task that
/// extends it from its end (in the current span).
pub(super) fn tail_catalog(
    io: &WalIo,
    catalog: Catalog,
    config: &Config,
    poll_interval: Duration,
) -> (Arc<RwLock<Catalog>>, TailedGrowth) {
    // Probes size their first read by the recovered chain's last object.
    let (last, last_length) = catalog
        .tip()
        .map(|(sequence, o)| {
            let link = Link {
                sequence,
                epoch: o.epoch,
            };
            (link, o.length)
        })
        .unwrap_or((Link::NONE, 0));
    let catalog = Arc::new(RwLock::new(catalog));
    let growth = PolledGrowth::new(
        io.clone(),
        catalog.clone(),
        config,
        poll_interval,
        last,
        last_length,
    );
    let growth = TailedGrowth::spawn(growth, tracing::Span::current());
    (catalog, growth)
}

/// Follows `region` of a prefix opened read-only (another node's log): recovers the
/// chain, yields the entries with id `>= from` on it, then each object that extends it,
/// found by probing the keys after the chain end (DESIGN.md "Tailing without listing"). It
/// never writes and never fences the owner.
/// A spawned task polls and reads ahead into a bounded channel; it ends at the first
/// error, or as soon as the consumer drops the stream. Its catalog drops what lies below
/// the floor of the newest object it saw (as the owner's does): a follower that lags
/// behind the floor skips those entries, as a fresh read-only open would (the owner may
/// delete them any time after its grace).
pub fn follow_read_only(
    io: WalIo,
    config: Config,
    region: u64,
    from: u64,
    poll_interval: Duration,
) -> BoxStream<'static, Result<Entry>> {
    let span = info_span!("follow_read_only", prefix = %io.prefix(), region, from);
    // As many segments fetched at once as keys are probed at once: a follower that
    // fell behind catches up a round of objects per round trip, not two.
    let mut config = config;
    config.read_ahead = config.read_ahead.max(MAX_PROBES);
    let mut entries = stream::once(async move {
        let mut recovery = match recover(&io, config.recovery_concurrency).await {
            Ok(recovery) => recovery,
            Err(e) => return stream::iter([Err(e)]).boxed(),
        };
        // Only its region's segments are kept, however many regions the log holds.
        recovery.catalog.keep_only([region]);
        let (catalog, growth) = tail_catalog(&io, recovery.catalog, &config, poll_interval);
        follow_region(io, catalog, region, from, &config, growth)
    })
    .flatten()
    .boxed();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Entry>>(FOLLOW_CHANNEL_ENTRIES);
    tokio::spawn(
        async move {
            loop {
                let item = tokio::select! {
                    item = entries.next() => item,
                    _ = tx.closed() => return,
                };
                match item {
                    Some(item) => {
                        if tx.send(item).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                }
            }
        }
        .instrument(span),
    );
    stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// Entries a read-only follower reads ahead of its consumer.
pub const FOLLOW_CHANNEL_ENTRIES: usize = 1024;
