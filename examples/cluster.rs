//! Regions moving between live nodes (docs/DESIGN.md "Regions moving between nodes"):
//! three nodes in one process, each its own WAL prefix on one embedded store, serve 300
//! regions under an open-loop load, while a coordinator moves regions between them.
//!
//! - **Frontends** send each append to the region's current owner. An append refused
//!   with `RegionReleased` waits for the route to switch and goes to the new owner. An
//!   append that failed `MayBeDurable` is resolved against the chain of the node it was
//!   sent to, once that node reopened (a new epoch: its object either landed on the
//!   chain or never will): found, it counts as acknowledged with the id it has there;
//!   not found, it is sent again (to the region's owner then). If the node released the
//!   region meanwhile, the entry, if it landed, is in the node's released piece (the
//!   release's last id is the largest id on the chain the new epoch recovered), which
//!   that read covers and the checker reads back. An append that cannot be resolved
//!   (the node never reopens, its reads keep failing) counts as `failed` and is never
//!   sent again: sending it again could write it twice.
//! - **The coordinator** moves `--moves` regions every `--move-every-ms`, some of them
//!   back to an earlier owner: the source releases the region (its last id), the target
//!   acquires it above that id and catches up from the source's log through its own
//!   WAL (`WalHandle::catch_up_released`: the target's WAL opens each source prefix
//!   once and every catch-up from it shares that open), then the route switches. The **migration window** is
//!   from the release called to the route switched (the target accepts the region's
//!   appends from then on).
//! - **The checker**, once the load stopped and every WAL stopped, opens every prefix
//!   read-only on the bare store, reads each region's pieces (node, ids after the
//!   previous piece's last id, up to its own) and compares them with what the
//!   frontends were acknowledged: `lost`, `duplicated`, `out_of_order`.
//!
//! The store has a 20 ms PUT and 10 ms GET latency with a slow tail, and the fault
//! wrapper's random create faults (applied then failed, failed unapplied, landing
//! late). The writer's retries with the same bytes absorb all of those, so on top of
//! them, with `--epoch-faults N` (0 by default, so that the latency percentiles are the
//! moves'), N times a run one node's **connection to the store stalls** for
//! `--stall-ms` (1.5 s; nodes in turn, spread over the run): every request the node
//! sends meanwhile waits in the network until the stall ends (or its sender gives up),
//! and every answer the store gives it meanwhile arrives only then, as with a network
//! partition or a load balancer that stops forwarding for a while. The hedged twin of a
//! create meets the same stall, so the create's definite answer comes after the stall,
//! past `max_create_duration` (`--max-create-ms`, 500 ms here; the library's default is
//! 60 s, and a stall that long would take the run): the epoch ends (`CreateTooSlow`),
//! the node reopens by itself, and the appends of the objects in flight fail
//! `MayBeDurable` (those still in the open batch fail `NotWritten` and are simply sent
//! again). Their frontends resolve them as above: `resolved_found` counts those
//! whose object landed (on the chain after the reopen, acknowledged with the id it has
//! there), `resolved_resent` those whose object never will (sent again).
//!
//! One JSON line goes to stdout; the exit code is non-zero if anything was lost,
//! duplicated or out of order, or an append failed or could not be resolved.
//!
//! ```text
//! cargo run --release --example cluster
//! cargo run --release --example cluster -- --no-migrations
//! cargo run --release --example cluster -- --epoch-faults 3   # the resolve path
//! ```

// The result line's `json!` has more keys than the default limit expands.
#![recursion_limit = "256"]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures::stream::BoxStream;
use futures::StreamExt;
use hdrhistogram::Histogram;
use object_store::memory::InMemory;
use object_store::{
    GetOptions, GetResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};
use object_store_wal::testing::{
    with_latency_profile, CountingStore, FaultRates, FaultStore, Hooks, LatencyProfile, SplitMix64,
    Wrapper,
};
use object_store_wal::{Config, Durability, Error, FirstRetryWait, ObjectStoreLogStore};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use tokio::sync::{watch, Semaphore};

#[derive(Parser, Debug, Clone)]
#[command(about = "Three nodes, 300 regions, regions moving between them; checks nothing is lost")]
struct Args {
    /// Nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Regions.
    #[arg(long, default_value_t = 300)]
    regions: u64,
    /// Appends per second offered (open loop, exponential gaps).
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Regions moved per round.
    #[arg(long, default_value_t = 10)]
    moves: usize,
    /// Milliseconds between rounds of moves.
    #[arg(long, default_value_t = 2000)]
    move_every_ms: u64,
    /// The same load without moves.
    #[arg(long)]
    no_migrations: bool,
    /// PUT latency, ms.
    #[arg(long, default_value_t = 20)]
    put_latency_ms: u64,
    /// GET latency, ms.
    #[arg(long, default_value_t = 10)]
    get_latency_ms: u64,
    /// `min_object_interval`, ms.
    #[arg(long, default_value_t = 20)]
    min_object_interval_ms: u64,
    /// No faults (latency only): neither the fault wrapper nor the stalls.
    #[arg(long)]
    no_faults: bool,
    /// The chance of each create fault per create (applied then failed, failed
    /// unapplied, landing late).
    #[arg(long, default_value_t = 0.001)]
    fault_rate: f64,
    /// Overrides the library's wait before a failed create's first retry, ms: fixed at
    /// this (each retry doubles it). Without it the library's default is in force, an
    /// adaptive first wait (about the store's recent median create latency, at most
    /// 50 ms). A faulted create costs this wait plus a PUT (and a GET to verify its own
    /// bytes when it had landed), and about one window in a hundred waits for one at the
    /// default fault rate (BENCHMARKS.md: fixed at 50 the window's p99 is that tail's,
    /// 72 to 126 ms across runs).
    #[arg(long)]
    retry_initial_backoff_ms: Option<u64>,
    /// Times a run one node's connection to the store stalls (nodes in turn, spread
    /// evenly over the run), long enough that its epoch ends: the appends in flight
    /// fail `MayBeDurable` and are resolved (`resolved_found`, `resolved_resent`).
    /// 0 (the default): no stalls, so that the latency percentiles are the moves' and
    /// not the stalls' (each stall holds a third of the appends for 1.5 s: the p99s
    /// become seconds); `--epoch-faults 3` is the run that shows the resolve path.
    #[arg(long, default_value_t = 0)]
    epoch_faults: u64,
    /// How long a stall lasts, ms: above `--max-create-ms` (and above the 1 s after
    /// which a hung create attempt is given up and retried).
    #[arg(long, default_value_t = 1500)]
    stall_ms: u64,
    /// The nodes' `max_create_duration`, ms: a create whose definite answer comes later
    /// is never acknowledged and ends the epoch (`CreateTooSlow`). The library's default
    /// is 60 s; a stall must outlast it to end an epoch, so the example shortens it (its
    /// creates take 20 ms, 120 ms in the tail, about 60 ms with a faulted attempt).
    #[arg(long, default_value_t = 500)]
    max_create_ms: u64,
    /// Seed of the load, the moves and the faults.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Where a region is served, and the version of that route.
#[derive(Debug, Clone, Copy)]
struct Route {
    owner: usize,
    version: u64,
    moving: bool,
}

/// A piece of a region's history: ids after `after` up to `through` in `node`'s log
/// (`None`: the current owner's piece, open).
#[derive(Debug, Clone, Copy)]
struct Piece {
    node: usize,
    after: Option<u64>,
    through: Option<u64>,
}

/// An acknowledged append: its region, its payload's number, its id.
#[derive(Debug, Clone, Copy)]
struct Acked {
    region: u64,
    n: u64,
    id: u64,
}

struct Cluster {
    nodes: Vec<WalHandle>,
    routes: Vec<Mutex<Route>>,
    pieces: Vec<Mutex<Vec<Piece>>>,
    /// Bumped at every route switch.
    switched: watch::Sender<u64>,
    acked: Mutex<Vec<Acked>>,
    /// Append latencies (µs): all, and of regions never moved.
    latency: Mutex<Histogram<u64>>,
    latency_unmoved: Mutex<Histogram<u64>>,
    windows: Mutex<Histogram<u64>>,
    /// The window's parts (µs): the release, the acquire, the catch-up of the tail.
    releases: Mutex<Histogram<u64>>,
    acquires: Mutex<Histogram<u64>>,
    tails: Mutex<Histogram<u64>>,
    /// The resolution of an append that failed `MayBeDurable` (µs): from its error to
    /// the answer (found or not), the node's reopen included.
    resolves: Mutex<Histogram<u64>>,
    moved: Vec<AtomicBool>,
    migrations: AtomicU64,
    migration_failures: AtomicU64,
    resolved_found: AtomicU64,
    resolved_resent: AtomicU64,
    /// Append attempts that failed `MayBeDurable`.
    may_be_durable: AtomicU64,
    /// Append attempts an epoch end failed `NotWritten` (never sent: sent again at once).
    ended_not_written: AtomicU64,
    /// Of those resolved, the ones whose region was moving or had moved away from the
    /// node by then (the entry, if it landed, in the node's released piece).
    resolved_after_move: AtomicU64,
    /// The epochs the appends saw end (`EpochEnded`, any durability): node and epoch.
    epochs_ended: Mutex<HashSet<(usize, u64)>>,
    failed: AtomicU64,
    next_n: Vec<AtomicU64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// Records the time since `since` in `h`, in µs.
fn record(h: &Mutex<Histogram<u64>>, since: Instant) {
    let micros = since.elapsed().as_micros() as u64;
    let _ = h.lock().expect("histogram").record(micros.max(1));
}

fn payload(region: u64, n: u64) -> Bytes {
    Bytes::from(format!("{region}:{n}"))
}

/// Node `node`'s WAL prefix.
fn prefix(node: usize) -> String {
    format!("node-{node}")
}

fn config(prefix: &str, args: &Args) -> Config {
    let mut c = Config::new(prefix).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(args.min_object_interval_ms);
    if let Some(ms) = args.retry_initial_backoff_ms {
        c.retry = c
            .retry
            .with_initial_backoff(Duration::from_millis(ms))
            .with_first_wait(FirstRetryWait::Fixed);
    }
    c.max_create_duration = Duration::from_millis(args.max_create_ms);
    c
}

/// One node's connection to the store, which can stall: while it does, a request waits
/// before it reaches the store, and an answer the store gave waits before it reaches
/// the node, until the stall ends (a request whose sender gave up meanwhile, a create
/// attempt given up after 1 s, is never delivered). Creates, GETs and LISTs alike.
#[derive(Debug, Default)]
struct Link {
    stalled: watch::Sender<bool>,
    /// Requests and answers held by a stall.
    held: AtomicU64,
}

impl Link {
    /// Waits while the link is stalled.
    async fn pass(&self) {
        if !*self.stalled.borrow() {
            return;
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        let mut rx = self.stalled.subscribe();
        // The sender lives in `self`: the channel cannot close while waiting.
        let _ = rx.wait_for(|stalled| !*stalled).await;
    }

    fn set_stalled(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

/// The hooks of a node's [`Link`] (a store wrapper of the testing module's kind).
#[derive(Debug, Clone)]
struct LinkHooks(Arc<Link>);

#[async_trait::async_trait]
impl Hooks for LinkHooks {
    const NAME: &'static str = "Link";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &object_store::path::Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.0.pass().await;
        let result = inner.put_opts(location, payload, opts).await;
        self.0.pass().await;
        result
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &object_store::path::Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.0.pass().await;
        let result = inner.get_opts(location, options).await;
        self.0.pass().await;
        result
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&object_store::path::Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (link, inner, prefix) = (self.0.clone(), inner.clone(), prefix.cloned());
        futures::stream::once(async move {
            link.pass().await;
            inner.list(prefix.as_ref())
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&object_store::path::Path>,
        offset: &object_store::path::Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (link, inner) = (self.0.clone(), inner.clone());
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        futures::stream::once(async move {
            link.pass().await;
            inner.list_with_offset(prefix.as_ref(), &offset)
        })
        .flatten()
        .boxed()
    }
}

impl Cluster {
    fn route(&self, region: u64) -> Route {
        *self.routes[region as usize].lock().expect("route")
    }

    /// Waits until `region`'s route is newer than `version`.
    async fn route_after(&self, region: u64, version: u64) {
        let mut rx = self.switched.subscribe();
        while self.route(region).version == version {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// One append, sent to the owner until it is acknowledged (see the module docs).
    async fn append(&self, region: u64) {
        let n = self.next_n[region as usize].fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let id = loop {
            let route = self.route(region);
            let wal = &self.nodes[route.owner];
            let result = wal.append(region, vec![payload(region, n)]).await;
            if let Err(e @ Error::EpochEnded { epoch, reason, .. }) = &result {
                let first = self
                    .epochs_ended
                    .lock()
                    .expect("epochs")
                    .insert((route.owner, *epoch));
                if first {
                    eprintln!(
                        "cluster: node {}'s epoch {epoch} ended ({reason}); the append that \
                         saw it first had waited {} ms",
                        route.owner,
                        started.elapsed().as_millis()
                    );
                }
                if e.durability() == Durability::NotWritten {
                    self.ended_not_written.fetch_add(1, Ordering::Relaxed);
                }
            }
            match result {
                Ok(receipt) => break receipt.parts[0].first_id,
                Err(Error::RegionReleased { .. }) => {
                    let switch = self.route_after(region, route.version);
                    if tokio::time::timeout(Duration::from_secs(60), switch)
                        .await
                        .is_err()
                    {
                        eprintln!("cluster: region {region} was released and never acquired");
                        self.failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                Err(e) if e.durability() == Durability::MayBeDurable => {
                    self.may_be_durable.fetch_add(1, Ordering::Relaxed);
                    let resolving = Instant::now();
                    let resolved = resolve(wal, region, n, &e).await;
                    record(&self.resolves, resolving);
                    // The node released the region (or began to) since the append was
                    // sent: resolved against its released piece.
                    let now = self.route(region);
                    if resolved.is_ok() && (now.version != route.version || now.moving) {
                        self.resolved_after_move.fetch_add(1, Ordering::Relaxed);
                    }
                    match resolved {
                        Ok(Some(id)) => {
                            self.resolved_found.fetch_add(1, Ordering::Relaxed);
                            break id;
                        }
                        Ok(None) => {
                            self.resolved_resent.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => {
                            eprintln!(
                                "cluster: append {n} of region {region} failed `{e}` on node {} \
                                 and could not be resolved: {why}",
                                route.owner
                            );
                            self.failed.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
                Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => {
                    eprintln!("cluster: append of region {region} failed: {e}");
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        };
        let micros = started.elapsed().as_micros() as u64;
        let _ = self.latency.lock().expect("latency").record(micros.max(1));
        if !self.moved[region as usize].load(Ordering::Relaxed) {
            let _ = self
                .latency_unmoved
                .lock()
                .expect("latency")
                .record(micros.max(1));
        }
        self.acked
            .lock()
            .expect("acked")
            .push(Acked { region, n, id });
    }

    /// Moves `region` to `to`: release, then acquire beside the catch-up, then switch.
    async fn migrate(&self, region: u64, to: usize) -> Result<(), Error> {
        let route = self.route(region);
        let from = route.owner;
        let after = self.pieces[region as usize]
            .lock()
            .expect("pieces")
            .last()
            .and_then(|p| p.after);
        // Before the release, the target reads what the source holds of the region so
        // far (the tail is all that is left to catch up after it).
        let (target, source) = (&self.nodes[to], prefix(from));
        let within = Duration::from_secs(30);
        let mut caught_up = after;
        if let Ok(Some(now)) = self.nodes[from].last_entry_id(region).await {
            let first = after.map_or(0, |a| a + 1);
            if now >= first {
                let mut ahead = target.catch_up(&source, region, first, now, within).await?;
                while let Some(entry) = ahead.next().await {
                    caught_up = Some(entry?.id);
                }
            }
        }
        let started = Instant::now();
        let released = loop {
            match self.nodes[from].release(region).await {
                Ok(released) => break released,
                // Recorded by an earlier attempt whose answer was lost.
                Err(Error::RegionReleased { released, .. }) => break released,
                Err(e) if e.is_retryable() || e.durability() == Durability::MayBeDurable => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(e),
            }
        };
        record(&self.releases, started);
        let after_release = Instant::now();
        // The target's ids go above every id the source handed out for the region (and
        // above the piece before, if this one is empty); the piece ends at its last id.
        let last = released.last_id;
        let above = released.acquire_above.max(after.unwrap_or(0));
        let acquire = async {
            loop {
                match self.nodes[to].acquire(region, above).await {
                    Ok(()) => {
                        record(&self.acquires, after_release);
                        return Ok(());
                    }
                    Err(e) if e.is_retryable() || e.durability() == Durability::MayBeDurable => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let catch_up = async {
            let Some(through) = last else {
                return Ok(0u64);
            };
            let from_id = caught_up.map_or(0, |a| a + 1);
            if from_id > through {
                return Ok(0);
            }
            let mut entries = target
                .catch_up_released(&source, region, from_id, &released, within)
                .await?;
            let mut count = 0u64;
            let mut at = caught_up;
            while let Some(entry) = entries.next().await {
                at = Some(entry?.id);
                count += 1;
            }
            if at != Some(through) {
                return Err(Error::NotOnChain {
                    region,
                    id: through,
                    found: at,
                });
            }
            record(&self.tails, after_release);
            Ok(count)
        };
        let (acquired, caught) = tokio::join!(acquire, catch_up);
        acquired?;
        caught?;
        {
            let mut pieces = self.pieces[region as usize].lock().expect("pieces");
            if let Some(current) = pieces.last_mut() {
                current.through = Some(last.or(after).unwrap_or(0));
            }
            pieces.push(Piece {
                node: to,
                after: Some(above),
                through: None,
            });
            let mut route = self.routes[region as usize].lock().expect("route");
            route.owner = to;
            route.version += 1;
            route.moving = false;
        }
        self.switched.send_modify(|v| *v += 1);
        record(&self.windows, started);
        self.migrations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Resolves an append that failed `MayBeDurable` on `wal`: once the node reopened (its
/// epoch is past the one that ended), the append's object is on the node's chain or
/// never will be (the new epoch fenced its key with a claim). Returns its id if it is
/// there, `None` if it is not (send it again), and an error if that cannot be told (the
/// node did not reopen, its reads kept failing): never `None` on a doubt, since sending
/// an entry that is on the chain again would write it twice.
///
/// The read covers the whole region on this node's chain: if the node released the
/// region meanwhile, the entry, if it landed, is at or below the released last id (the
/// largest id of the region on the chain the new epoch recovered, whichever epoch
/// answered the release), in the node's released piece, which the checker reads too.
/// The payload names the append (region and number), so a hit is this append's entry
/// and no other, wherever the region's pieces on this node lie.
async fn resolve(
    wal: &WalHandle,
    region: u64,
    n: u64,
    error: &Error,
) -> Result<Option<u64>, String> {
    const WITHIN: Duration = Duration::from_secs(120);
    let started = Instant::now();
    // The epoch that ended: the error names it. Other `MayBeDurable` errors (a writer
    // that failed, not expected here) do not: the node's epoch now is that one unless
    // the node reopened already, and then this waits for the next epoch end (bounded
    // below), which is late but never early.
    let ended = match error {
        Error::EpochEnded { epoch, .. } => *epoch,
        _ => wal.stats().await.map_err(|e| format!("stats: {e}"))?.epoch,
    };
    loop {
        match wal.stats().await {
            Ok(s) if s.epoch > ended => break,
            Ok(_) if started.elapsed() < WITHIN => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Ok(s) => return Err(format!("still in epoch {} after {WITHIN:?}", s.epoch)),
            Err(e) => return Err(format!("stats: {e}")),
        }
    }
    let want = payload(region, n);
    let mut last_error = String::new();
    while started.elapsed() < WITHIN {
        match find(wal, region, &want).await {
            Ok(found) => return Ok(found),
            Err(e) => {
                last_error = e.to_string();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Err(format!("the region's read kept failing: {last_error}"))
}

/// The id of the entry with payload `want` in `region` on `wal`'s chain, read whole.
async fn find(wal: &WalHandle, region: u64, want: &Bytes) -> Result<Option<u64>, Error> {
    let mut entries = wal.read_stream(region, 0).await?;
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        if entry.payload == *want {
            return Ok(Some(entry.id));
        }
    }
    Ok(None)
}

#[derive(Default)]
struct Verdict {
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    entries: u64,
}

/// Reads every region's pieces back from the bare store and checks them against what
/// was acknowledged.
async fn check(
    store: &Arc<dyn ObjectStore>,
    args: &Args,
    cluster: &Cluster,
) -> Result<Verdict, Error> {
    let mut logs = Vec::new();
    for node in 0..args.nodes {
        let config = config(&prefix(node), args);
        logs.push(ObjectStoreLogStore::open_read_only(store.clone(), config).await?);
    }
    let acked = cluster.acked.lock().expect("acked").clone();
    let mut by_region: HashMap<u64, Vec<Acked>> = HashMap::new();
    for a in acked {
        by_region.entry(a.region).or_default().push(a);
    }
    let mut verdict = Verdict::default();
    for region in 0..args.regions {
        let pieces = cluster.pieces[region as usize]
            .lock()
            .expect("pieces")
            .clone();
        let mut history: Vec<(u64, Bytes)> = Vec::new();
        for piece in pieces {
            let from = piece.after.map_or(0, |a| a + 1);
            let mut entries = logs[piece.node].read(region, from);
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                if piece.through.is_some_and(|t| entry.id > t) {
                    break;
                }
                history.push((entry.id, entry.payload));
            }
        }
        verdict.entries += history.len() as u64;
        let mut seen: HashMap<Bytes, u64> = HashMap::new();
        let mut previous = None;
        for (id, payload) in &history {
            if previous.is_some_and(|p| *id <= p) {
                verdict.out_of_order += 1;
            }
            previous = Some(*id);
            *seen.entry(payload.clone()).or_default() += 1;
        }
        verdict.duplicated += seen.values().filter(|c| **c > 1).count() as u64;
        let ids: HashMap<Bytes, u64> = history.iter().map(|(i, p)| (p.clone(), *i)).collect();
        for a in by_region.remove(&region).unwrap_or_default() {
            if ids.get(&payload(region, a.n)) != Some(&a.id) {
                verdict.lost += 1;
            }
        }
    }
    Ok(verdict)
}

#[tokio::main]
async fn main() {
    match run(Args::parse()).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("cluster: {e}");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let bare: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty: Arc<dyn ObjectStore> = if args.no_faults {
        bare.clone()
    } else {
        let rates = FaultRates {
            apply_then_error: args.fault_rate,
            error_unapplied: args.fault_rate,
            land_late: args.fault_rate,
            late_after_max_ops: 50,
            ..FaultRates::default()
        };
        FaultStore::seeded(bare.clone(), args.seed, rates)
    };
    let profile = LatencyProfile::new(
        Duration::from_millis(args.put_latency_ms),
        Duration::from_millis(args.get_latency_ms),
    )
    .put_tail(0.01, Duration::from_millis(100))
    .get_tail(0.01, Duration::from_millis(50))
    .seed(args.seed);
    // Counts what the nodes ask of the store (the checker reads the bare store).
    let counting = CountingStore::counts_only(with_latency_profile(faulty, profile));
    let store: Arc<dyn ObjectStore> = counting.clone();
    // Each node reaches the store through a link of its own, which can stall.
    let stalls = if args.no_faults { 0 } else { args.epoch_faults };
    let links: Vec<Arc<Link>> = (0..args.nodes).map(|_| Arc::default()).collect();
    let restarts = RestartPolicy::new(
        10_000,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(20),
    );

    let mut nodes = Vec::new();
    let mut joins = Vec::new();
    for (node, link) in links.iter().enumerate() {
        let linked: Arc<dyn ObjectStore> = Wrapper::wrap(store.clone(), LinkHooks(link.clone()));
        let (wal, join) = spawn_wal(linked, config(&prefix(node), &args), restarts).await?;
        wal.ready().await?;
        nodes.push(wal);
        joins.push(join);
    }
    let regions = args.regions as usize;
    let cluster = Arc::new(Cluster {
        nodes,
        routes: (0..regions)
            .map(|r| {
                Mutex::new(Route {
                    owner: r % args.nodes,
                    version: 0,
                    moving: false,
                })
            })
            .collect(),
        pieces: (0..regions)
            .map(|r| {
                Mutex::new(vec![Piece {
                    node: r % args.nodes,
                    after: None,
                    through: None,
                }])
            })
            .collect(),
        switched: watch::channel(0).0,
        acked: Mutex::new(Vec::new()),
        latency: Mutex::new(histogram()),
        latency_unmoved: Mutex::new(histogram()),
        windows: Mutex::new(histogram()),
        releases: Mutex::new(histogram()),
        acquires: Mutex::new(histogram()),
        tails: Mutex::new(histogram()),
        resolves: Mutex::new(histogram()),
        moved: (0..regions).map(|_| AtomicBool::new(false)).collect(),
        migrations: AtomicU64::new(0),
        migration_failures: AtomicU64::new(0),
        resolved_found: AtomicU64::new(0),
        resolved_resent: AtomicU64::new(0),
        may_be_durable: AtomicU64::new(0),
        ended_not_written: AtomicU64::new(0),
        resolved_after_move: AtomicU64::new(0),
        epochs_ended: Mutex::new(HashSet::new()),
        failed: AtomicU64::new(0),
        next_n: (0..regions).map(|_| AtomicU64::new(0)).collect(),
    });
    eprintln!(
        "cluster: {} nodes, {} regions, {} appends/s for {} s{}",
        args.nodes,
        args.regions,
        args.rate,
        args.seconds,
        if args.no_migrations {
            ", no migrations"
        } else {
            ""
        }
    );

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    // The load: arrivals with exponential gaps, each append its own task, at most this
    // many in flight (memory stays bounded if the cluster falls behind).
    let in_flight = Arc::new(Semaphore::new(8192));
    let load = {
        let cluster = cluster.clone();
        let in_flight = in_flight.clone();
        let args = args.clone();
        tokio::spawn(async move {
            let mut rng = SplitMix64::new(args.seed);
            let mut next = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            while next < deadline {
                let gap = -(1.0 - rng.unit()).ln() / args.rate;
                next += Duration::from_secs_f64(gap);
                tokio::time::sleep_until(next.into()).await;
                let region = rng.below(args.regions);
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    break;
                };
                let cluster = cluster.clone();
                tasks.spawn(async move {
                    cluster.append(region).await;
                    drop(permit);
                });
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        })
    };
    let moves = if args.no_migrations {
        None
    } else {
        let cluster = cluster.clone();
        let args = args.clone();
        Some(tokio::spawn(async move {
            let mut rng = SplitMix64::new(args.seed ^ 0x5eed);
            let mut round = tokio::time::interval(Duration::from_millis(args.move_every_ms));
            round.tick().await;
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                round.tick().await;
                if Instant::now() + Duration::from_millis(args.move_every_ms) > deadline {
                    break;
                }
                for _ in 0..args.moves {
                    let region = rng.below(args.regions);
                    let to = {
                        let mut route = cluster.routes[region as usize].lock().expect("route");
                        if route.moving {
                            continue;
                        }
                        route.moving = true;
                        let shift = 1 + rng.below(args.nodes as u64 - 1) as usize;
                        (route.owner + shift) % args.nodes
                    };
                    cluster.moved[region as usize].store(true, Ordering::Relaxed);
                    let cluster = cluster.clone();
                    tasks.spawn(async move {
                        if let Err(e) = cluster.migrate(region, to).await {
                            eprintln!("cluster: moving region {region} to node {to} failed: {e}");
                            cluster.migration_failures.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        }))
    };
    // The stalls: node `i % nodes` at the middle of the `i`-th of `stalls` equal
    // stretches of the run.
    let stalling = {
        let links = links.clone();
        let args = args.clone();
        tokio::spawn(async move {
            let mut done = 0u64;
            for i in 0..stalls {
                let at = started
                    + Duration::from_secs_f64(
                        args.seconds as f64 * (i as f64 + 0.5) / stalls as f64,
                    );
                tokio::time::sleep_until(at.into()).await;
                let link = &links[i as usize % args.nodes];
                link.set_stalled(true);
                tokio::time::sleep(Duration::from_millis(args.stall_ms)).await;
                link.set_stalled(false);
                done += 1;
            }
            done
        })
    };
    load.await?;
    if let Some(moves) = moves {
        moves.await?;
    }
    let stalled = stalling.await?;
    let mut wal_restarts = 0;
    for wal in &cluster.nodes {
        wal_restarts += wal.stats().await?.restarts;
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = counting.counts();
    let (gets, get_bytes, puts) = (
        counts.gets.load(Ordering::Relaxed),
        counts.get_bytes.load(Ordering::Relaxed),
        counts.puts.load(Ordering::Relaxed),
    );
    for wal in &cluster.nodes {
        wal.stop().await?;
    }
    for join in joins {
        join.await?;
    }

    let verdict = check(&bare, &args, &cluster).await?;
    let acked = cluster.acked.lock().expect("acked").len() as u64;
    let ms = |h: &Mutex<Histogram<u64>>, q: f64| {
        let h = h.lock().expect("histogram");
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1000.0
        }
    };
    // The first retry's wait in force: the library's adaptive default, or the override.
    let retry_first_wait = match args.retry_initial_backoff_ms {
        Some(ms) => serde_json::json!(ms),
        None => serde_json::json!("adaptive"),
    };
    let result = serde_json::json!({
        "nodes": args.nodes,
        "regions": args.regions,
        "offered_per_s": args.rate,
        "retry_first_wait": retry_first_wait,
        "seconds": (seconds * 10.0).round() / 10.0,
        "acked": acked,
        "acked_per_s": (acked as f64 / seconds).round(),
        "failed": cluster.failed.load(Ordering::Relaxed),
        "resolved_found": cluster.resolved_found.load(Ordering::Relaxed),
        "resolved_resent": cluster.resolved_resent.load(Ordering::Relaxed),
        "may_be_durable": cluster.may_be_durable.load(Ordering::Relaxed),
        "epoch_ended_not_written": cluster.ended_not_written.load(Ordering::Relaxed),
        "resolved_after_move": cluster.resolved_after_move.load(Ordering::Relaxed),
        "stalls": stalled,
        "stall_ms": if stalls > 0 { args.stall_ms } else { 0 },
        "held_by_stalls": links.iter().map(|l| l.held.load(Ordering::Relaxed)).sum::<u64>(),
        "epochs_ended": cluster.epochs_ended.lock().expect("epochs").len(),
        "wal_restarts": wal_restarts,
        "max_create_ms": args.max_create_ms,
        "entries_read_back": verdict.entries,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "out_of_order": verdict.out_of_order,
        "migrations": cluster.migrations.load(Ordering::Relaxed),
        "migration_failures": cluster.migration_failures.load(Ordering::Relaxed),
        "migration_window_ms_p50": ms(&cluster.windows, 0.5),
        "migration_window_ms_p99": ms(&cluster.windows, 0.99),
        "migration_window_ms_max": ms(&cluster.windows, 1.0),
        "release_ms_p50": ms(&cluster.releases, 0.5),
        "release_ms_p99": ms(&cluster.releases, 0.99),
        "acquire_ms_p99": ms(&cluster.acquires, 0.99),
        "catch_up_tail_ms_p99": ms(&cluster.tails, 0.99),
        "resolve_ms_p50": ms(&cluster.resolves, 0.5),
        "resolve_ms_p99": ms(&cluster.resolves, 0.99),
        "gets_per_s": (gets as f64 / seconds).round(),
        "get_mb_per_s": (get_bytes as f64 / seconds / 1e5).round() / 10.0,
        "puts_per_s": (puts as f64 / seconds).round(),
        "append_p50_ms": ms(&cluster.latency, 0.5),
        "append_p99_ms": ms(&cluster.latency, 0.99),
        "append_p99_ms_unmoved": ms(&cluster.latency_unmoved, 0.99),
        "fault_rate": if args.no_faults { 0.0 } else { args.fault_rate },
    });
    println!("{result}");
    let ok = verdict.lost == 0
        && verdict.duplicated == 0
        && verdict.out_of_order == 0
        && cluster.failed.load(Ordering::Relaxed) == 0
        && cluster.migration_failures.load(Ordering::Relaxed) == 0;
    Ok(ok)
}
