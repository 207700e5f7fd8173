//! Regions moving between live nodes (docs/DESIGN.md "Regions moving between nodes"):
//! three nodes in one process, each its own WAL prefix on one embedded store, serve 300
//! regions under an open-loop load, while a coordinator moves regions between them.
//!
//! - **Frontends** send each append to the region's current owner. An append refused
//!   with `RegionReleased` waits for the route to switch and goes to the new owner. An
//!   append that failed `MayBeDurable` is resolved against the node's chain once the
//!   node reopened (its object either landed on the chain or never will): found, it
//!   counts as acknowledged with the id it has there; not found, it is sent again.
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
//! late). One JSON line goes to stdout; the exit code is non-zero if anything was lost,
//! duplicated or out of order.
//!
//! ```text
//! cargo run --release --example cluster
//! cargo run --release --example cluster -- --no-migrations
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use hdrhistogram::Histogram;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::testing::{
    with_latency_profile, FaultRates, FaultStore, LatencyProfile, SplitMix64,
};
use object_store_wal::{Config, Durability, Error, ObjectStoreLogStore};
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
    /// No fault wrapper (latency only).
    #[arg(long)]
    no_faults: bool,
    /// The chance of each create fault per create (applied then failed, failed
    /// unapplied, landing late).
    #[arg(long, default_value_t = 0.001)]
    fault_rate: f64,
    /// The wait before a failed create's first retry, ms (the library's default is 50;
    /// each retry doubles it). A faulted create costs this plus a PUT (and a GET to
    /// verify its own bytes when it had landed), and about one window in a hundred
    /// waits for one at the default fault rate (BENCHMARKS.md: with 50 the window's
    /// p99 is that tail's, 72 to 126 ms across runs).
    #[arg(long, default_value_t = 10)]
    retry_initial_backoff_ms: u64,
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
    moved: Vec<AtomicBool>,
    migrations: AtomicU64,
    migration_failures: AtomicU64,
    resolved_found: AtomicU64,
    resolved_resent: AtomicU64,
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
    c.retry = c
        .retry
        .with_initial_backoff(Duration::from_millis(args.retry_initial_backoff_ms));
    c
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
            match wal.append(region, vec![payload(region, n)]).await {
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
                    match resolve(wal, region, n, &e).await {
                        Some(id) => {
                            self.resolved_found.fetch_add(1, Ordering::Relaxed);
                            break id;
                        }
                        None => {
                            self.resolved_resent.fetch_add(1, Ordering::Relaxed);
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
/// epoch is past the one that ended), the append's object is on the chain or never will
/// be; returns its id if it is.
async fn resolve(wal: &WalHandle, region: u64, n: u64, error: &Error) -> Option<u64> {
    let ended = match error {
        Error::EpochEnded { epoch, .. } => *epoch,
        _ => wal.stats().await.map_or(0, |s| s.epoch),
    };
    loop {
        match wal.stats().await {
            Ok(s) if s.epoch > ended => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(_) => return None,
        }
    }
    let want = payload(region, n);
    let mut entries = wal.read_stream(region, 0).await.ok()?;
    while let Some(entry) = entries.next().await {
        match entry {
            Ok(e) if e.payload == want => return Some(e.id),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
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
    let store: Arc<dyn ObjectStore> = with_latency_profile(faulty, profile);
    let restarts = RestartPolicy::new(
        10_000,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(20),
    );

    let mut nodes = Vec::new();
    let mut joins = Vec::new();
    for node in 0..args.nodes {
        let (wal, join) = spawn_wal(store.clone(), config(&prefix(node), &args), restarts).await?;
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
        moved: (0..regions).map(|_| AtomicBool::new(false)).collect(),
        migrations: AtomicU64::new(0),
        migration_failures: AtomicU64::new(0),
        resolved_found: AtomicU64::new(0),
        resolved_resent: AtomicU64::new(0),
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
    load.await?;
    if let Some(moves) = moves {
        moves.await?;
    }
    let seconds = started.elapsed().as_secs_f64();
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
    let result = serde_json::json!({
        "nodes": args.nodes,
        "regions": args.regions,
        "offered_per_s": args.rate,
        "seconds": (seconds * 10.0).round() / 10.0,
        "acked": acked,
        "acked_per_s": (acked as f64 / seconds).round(),
        "failed": cluster.failed.load(Ordering::Relaxed),
        "resolved_found": cluster.resolved_found.load(Ordering::Relaxed),
        "resolved_resent": cluster.resolved_resent.load(Ordering::Relaxed),
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
