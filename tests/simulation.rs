//! Seeded fault-injection simulation of the WAL's real write path (the actors).
//!
//! Each seed runs on its own single-threaded tokio runtime with paused time, over an
//! `InMemory` store wrapped in a seeded [`FaultStore`]: creates that fail (applied or
//! not) or land late, failing and slow GETs and LISTs, GETs that return flipped bytes
//! once, random latency on every request. Several regions append through the actors
//! ([`spawn_wal_with`], create durations measured on the virtual clock) while the
//! schedule, drawn from the same seed, crashes instances ([`WalHandle::abort`], with
//! creates still in flight or landing late), spawns newer instances while older ones
//! keep appending (zombies), panics writers, stops instances and lands late creates.
//! In a quarter of the seeds `max_create_duration` and `reclaim_grace` are short, so
//! slow creates go unacknowledged, idle writers write empty objects to stay inside
//! their link window and empty objects below the floor are reclaimed (no region
//! reports obsolete entries, so no entry is). After every restart, an oracle (the
//! ledger of `actors/tests/support/ledger.rs`, shared with the actor tests) replays
//! every region from 0 through the new instance and checks what the callers were told:
//!
//! - every append acknowledged before the instance was spawned is replayed, exactly
//!   once, in order, with the ids of its receipt; one acknowledged later, if replayed,
//!   has those ids too;
//! - an append that failed is replayed whole or not at all, at most once; one that
//!   failed with [`Durability::NotWritten`] never;
//! - an entry once replayed is replayed again by every later instance, with the same
//!   id (the chain never forgets or renumbers); a region's ids increase; an append
//!   acknowledged before another was issued has smaller ids in their common regions;
//! - no two instances ever report the same epoch ([`WalHandle::stats`]);
//! - nothing panics, except the writer panics the schedule injects, and nothing hangs.
//!
//! Fenced instances are covered by the first rule: an append a zombie acknowledged is
//! checked against every later chain like any other (the report says when the
//! instance that acknowledged a missing append was fenced). At the end of a seed every
//! late create lands, the faults stop and a final instance checks everything, reads
//! each region alone, then an orphan and a chain object are deleted behind the WAL's
//! back: the orphan changes nothing; the chain object makes reads fail with a typed
//! error, and recovery afterwards replays nothing inconsistent.
//!
//! `simulation_over_three_stores` runs the same schedule over three stores (one log, a
//! quorum of copies), each with faults drawn for it, and takes one store at a time down
//! (every request hangs) for a while: writes go on at two copies, an open with a store
//! unlisted completes or waits, reads go to another copy.
//!
//! `WAL_SIM_SEEDS=N` runs seeds `0..N` (default 500), `WAL_SIM_SEED=S` runs seed `S`
//! alone, `WAL_SIM_THREADS=T` runs seeds on `T` threads (default: the cores, at most
//! 4). A failure names its seed and the command that reproduces it, with the last
//! events of its schedule merged with the store's operation log (every create with its
//! epoch and link, its outcome and injected fault, late landings, deletes, listings)
//! and the objects left in the store; `WAL_SIM_TRACE=1` prints every seed's whole trace
//! (with `-- --nocapture`). A seed is deterministic for a given version of the code:
//! one thread, paused time, one PRNG (a change to the WAL or to this file reshuffles
//! what each seed does).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant as WallInstant};

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::testing::{
    DownHooks, DownStore, FaultCounts, FaultRates, FaultStore, SplitMix64,
};
use object_store_wal::{
    AppendParts, Config, CreateClock, Durability, Entry, Error, ObjectStoreLogStore, RetryPolicy,
};
use object_store_wal_actors::{spawn_wal_io, spawn_wal_with};
use object_store_wal_actors::{RestartPolicy, WalHandle};
use tokio::task::{JoinHandle, JoinSet};

// The replay oracle the actor tests use too.
#[path = "../actors/tests/support/ledger.rs"]
mod ledger;

use ledger::{Ledger, Outcome};

const PREFIX: &str = "sim";
const DEFAULT_SEEDS: u64 = 500;
/// Seeds run by default over three stores.
const DEFAULT_SEEDS_THREE_STORES: u64 = 500;
/// Virtual time after which a wait is a hang (paused time reaches it only when nothing
/// else can run).
const HANG: Duration = Duration::from_secs(3600);
/// The message of the writer panics the schedule injects.
const INJECTED_PANIC: &str = "injected writer panic";

// ---------------------------------------------------------------------------------------
// The test: seeds, threads, reporting
// ---------------------------------------------------------------------------------------

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

thread_local! {
    /// Panics on this thread other than the injected ones, while a seed runs.
    static UNEXPECTED_PANICS: Cell<u64> = const { Cell::new(0) };
    static IN_SEED: Cell<bool> = const { Cell::new(false) };
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let in_seed = IN_SEED.with(|s| s.get());
            if in_seed && message.contains(INJECTED_PANIC) {
                return;
            }
            if in_seed {
                UNEXPECTED_PANICS.with(|c| c.set(c.get() + 1));
                if message.starts_with("simulation:") {
                    // The oracle's own failure: reported with its seed below.
                    return;
                }
            }
            default(info);
        }));
    });
}

#[derive(Debug, Default)]
struct Totals {
    seeds: AtomicU64,
    appends: AtomicU64,
    acked: AtomicU64,
    failed_may_be: AtomicU64,
    failed_not_written: AtomicU64,
    failed_replayed: AtomicU64,
    fenced_instances: AtomicU64,
    instances: AtomicU64,
    checks: AtomicU64,
    skipped_checks: AtomicU64,
    crashes: AtomicU64,
    zombies: AtomicU64,
    late_landed: AtomicU64,
    reclaimed: AtomicU64,
    faults: Mutex<FaultCounts>,
    /// Failed appends by error variant and durability.
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Totals {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

#[test]
fn simulation() {
    run_simulation(1, DEFAULT_SEEDS);
}

/// The same schedule over three stores (DESIGN.md "One log over several stores"), each
/// with faults of its own, and one store at a time taken down (every request hangs)
/// and brought back.
#[test]
fn simulation_over_three_stores() {
    run_simulation(3, DEFAULT_SEEDS_THREE_STORES);
}

fn run_simulation(replicas: usize, default_seeds: u64) {
    install_panic_hook();
    let seeds: Vec<u64> = match env_u64("WAL_SIM_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("WAL_SIM_SEEDS").unwrap_or(default_seeds)).collect(),
    };
    let threads = env_u64("WAL_SIM_THREADS")
        .map(|t| t.max(1) as usize)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4)
        })
        .min(seeds.len().max(1));
    let started = WallInstant::now();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let totals = Totals::default();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else {
                    return;
                };
                if let Err(message) = run_seed(seed, replicas, &totals) {
                    eprintln!(
                        "simulation: seed {seed} ({replicas} stores) FAILED:\n{message}\n  reproduce: WAL_SIM_SEED={seed} cargo test --test simulation\n  whole trace: WAL_SIM_SEED={seed} WAL_SIM_TRACE=1 cargo test --test simulation -- --nocapture"
                    );
                    let mut f = failures.lock().unwrap_or_else(|p| p.into_inner());
                    f.push((seed, message));
                    if f.len() >= 20 {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let faults = *totals.faults.lock().unwrap();
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    eprintln!(
        "simulation over {replicas} store(s): {} seeds in {:.1?} on {threads} threads: {} appends ({} acknowledged, {} failed may-be-durable ({} of them replayed), {} failed not-written), {} instances ({} crashed, {} left as zombies, {} fenced), {} oracle checks ({} skipped: instance gone), {} late creates landed, {} objects reclaimed; faults {:?}; failed appends by error {:?}",
        get(&totals.seeds),
        started.elapsed(),
        get(&totals.appends),
        get(&totals.acked),
        get(&totals.failed_may_be),
        get(&totals.failed_replayed),
        get(&totals.failed_not_written),
        get(&totals.instances),
        get(&totals.crashes),
        get(&totals.zombies),
        get(&totals.fenced_instances),
        get(&totals.checks),
        get(&totals.skipped_checks),
        get(&totals.late_landed),
        get(&totals.reclaimed),
        faults,
        totals.errors.lock().unwrap(),
    );
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    if !failures.is_empty() {
        let seeds: Vec<String> = failures.iter().map(|(s, _)| s.to_string()).collect();
        panic!(
            "simulation failed for seeds [{}]; reproduce one with WAL_SIM_SEED=<seed> cargo test --test simulation\nfirst failure (seed {}):\n{}",
            seeds.join(", "),
            failures[0].0,
            failures[0].1
        );
    }
}

/// Runs one seed on a fresh single-threaded runtime with paused time.
fn run_seed(seed: u64, replicas: usize, totals: &Totals) -> Result<(), String> {
    IN_SEED.with(|s| s.set(true));
    UNEXPECTED_PANICS.with(|c| c.set(0));
    let result = catch_unwind(AssertUnwindSafe(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let sim = Sim::new(seed, replicas);
            let trace = sim.trace.clone();
            let (stores, config) = (sim.stores.clone(), sim.config.clone());
            let show = std::env::var_os("WAL_SIM_TRACE").is_some();
            let shown = trace.clone();
            let _print = Defer(move || {
                if show {
                    eprintln!("{}", shown.all());
                }
            });
            match tokio::time::timeout(HANG, sim.run(totals)).await {
                Ok(()) => {}
                Err(_) => panic!(
                    "simulation: seed {seed} hung (nothing progressed for {HANG:?} of virtual time)\n{}{}",
                    trace.tail(),
                    dump_store(&stores, &config)
                ),
            }
        });
        // Dropping the runtime drops every task still parked (aborted instances' uploads).
        drop(runtime);
    }));
    IN_SEED.with(|s| s.set(false));
    let unexpected = UNEXPECTED_PANICS.with(|c| c.get());
    match result {
        Err(payload) => Err(payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())),
        Ok(()) if unexpected > 0 => Err(format!(
            "{unexpected} unexpected panic(s) inside the WAL's actors or tasks (printed above)"
        )),
        Ok(()) => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// Clock, trace, ledger
// ---------------------------------------------------------------------------------------

/// Create durations measured on tokio's (paused) clock, so `max_create_duration`
/// applies to the simulated latencies.
#[derive(Debug)]
struct VirtualClock {
    origin: tokio::time::Instant,
}

impl CreateClock for VirtualClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// What happened, for the failure report: the schedule's events and the store's
/// operations, merged by virtual time.
#[derive(Debug, Clone)]
struct Trace {
    lines: Arc<Mutex<Vec<(Duration, String)>>>,
    origin: tokio::time::Instant,
    store: Arc<FaultStore>,
}

impl Trace {
    fn new(origin: tokio::time::Instant, store: Arc<FaultStore>) -> Self {
        Trace {
            lines: Arc::default(),
            origin,
            store,
        }
    }

    fn push(&self, line: String) {
        let at = tokio::time::Instant::now().saturating_duration_since(self.origin);
        lock(&self.lines).push((at, line));
    }

    fn merged(&self) -> Vec<String> {
        let events = lock(&self.lines).clone();
        let ops: Vec<(Duration, String)> = self
            .store
            .op_log()
            .into_iter()
            .map(|r| {
                let at = r.at.saturating_duration_since(self.origin);
                (at, format!("  store: {}", r.what))
            })
            .collect();
        let mut all = Vec::with_capacity(events.len() + ops.len());
        let (mut e, mut o) = (events.into_iter().peekable(), ops.into_iter().peekable());
        loop {
            let next = match (e.peek(), o.peek()) {
                (Some(a), Some(b)) if b.0 < a.0 => o.next(),
                (Some(_), _) => e.next(),
                (None, Some(_)) => o.next(),
                (None, None) => break,
            };
            if let Some((at, what)) = next {
                all.push(format!("t={:>9.3}ms {what}", at.as_secs_f64() * 1e3));
            }
        }
        all
    }

    fn all(&self) -> String {
        self.merged().join("\n")
    }

    fn tail(&self) -> String {
        let lines = self.merged();
        let schedule: Vec<&String> = lines.iter().filter(|l| !l.contains("  store: ")).collect();
        let mut out = String::new();
        let from = schedule.len().saturating_sub(40);
        out.push_str(&format!(
            "  schedule (last {} of {} events):\n",
            schedule.len() - from,
            schedule.len()
        ));
        for l in &schedule[from..] {
            out.push_str("    ");
            out.push_str(l);
            out.push('\n');
        }
        let from = lines.len().saturating_sub(120);
        out.push_str(&format!(
            "  trace with the store's operations (last {} of {}; all with WAL_SIM_TRACE=1):\n",
            lines.len() - from,
            lines.len()
        ));
        for l in &lines[from..] {
            out.push_str("    ");
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}

/// The objects in the store as a fresh recovery sees them (no faults), for reports.
fn dump_store(stores: &[Arc<FaultStore>], config: &Config) -> String {
    // InMemory answers at once: no runtime needed.
    let opened = futures::executor::block_on(open_plain(stores, config));
    let report = match opened {
        Ok(wal) => wal.report().clone(),
        Err(e) => return format!("  store: cannot recover: {e}\n"),
    };
    let mut out =
        String::from("  store (sequence: epoch, link, floor, segments/entries, chain):\n");
    for o in &report.objects {
        let h = &o.header;
        out.push_str(&format!(
            "    {:>4}: epoch {:>4}{} link ({}, {}) floor {} {}/{} {}\n",
            h.sequence,
            h.epoch,
            if h.claim { " CLAIM" } else { "" },
            h.link.sequence,
            h.link.epoch,
            h.floor,
            o.segments,
            o.entries,
            if o.on_chain { "on chain" } else { "orphan" }
        ));
    }
    out
}

/// The stores without faults (or down switches), read-only.
async fn open_plain(
    stores: &[Arc<FaultStore>],
    config: &Config,
) -> object_store_wal::Result<ObjectStoreLogStore> {
    if let [store] = stores {
        return ObjectStoreLogStore::open_read_only(store.inner().clone(), config.clone()).await;
    }
    let inner = stores.iter().map(|s| s.inner().clone()).collect();
    ObjectStoreLogStore::open_read_only_io(WalIo::for_stores(inner, config)?, config.clone()).await
}

/// Runs a closure when dropped.
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------
// The simulation of one seed
// ---------------------------------------------------------------------------------------

struct Instance {
    handle: WalHandle,
    _join: JoinHandle<()>,
    /// Not aborted or stopped by the schedule (it may have ended by itself).
    alive: bool,
    /// Logical time of its spawn.
    spawned: u64,
    epochs: Vec<u64>,
    /// Objects its reclaimer deleted, as last seen.
    reclaimed: u64,
}

struct Sim {
    seed: u64,
    rng: SplitMix64,
    dyn_store: Arc<dyn ObjectStore>,
    /// Every store: one, or three.
    stores: Vec<Arc<FaultStore>>,
    /// Over three stores: each store as the WAL sees it, which can be taken down.
    downs: Vec<Arc<DownStore>>,
    config: Config,
    restarts: RestartPolicy,
    clock: Arc<VirtualClock>,
    regions: Vec<u64>,
    instances: Vec<Instance>,
    current: usize,
    ledger: Arc<Mutex<Ledger>>,
    tasks: JoinSet<()>,
    epoch_owner: HashMap<u64, usize>,
    trace: Trace,
    checks: u64,
    skipped_checks: u64,
    crashes: u64,
    zombies: u64,
}

/// Fault rates for one seed: calm, moderate or stormy.
fn draw_rates(rng: &mut SplitMix64) -> FaultRates {
    let storm = match rng.below(4) {
        0 => 0.2,
        1 | 2 => 1.0,
        _ => 2.5,
    };
    let p = |rng: &mut SplitMix64, max: f64| rng.unit() * max * storm;
    FaultRates {
        apply_then_error: p(rng, 0.04),
        error_unapplied: p(rng, 0.04),
        land_late: p(rng, 0.04),
        late_after_max_ops: rng.below(60) as u32,
        fail_get: p(rng, 0.02),
        fail_list: p(rng, 0.05),
        flip_get: p(rng, 0.02),
        put_latency: Duration::from_micros(rng.below(40_000)),
        get_latency: Duration::from_micros(rng.below(10_000)),
        list_latency: Duration::from_micros(rng.below(10_000)),
        slow_put: p(rng, 0.06),
        slow_get: p(rng, 0.02),
        slow_list: p(rng, 0.05),
        slow_latency: Duration::from_millis(rng.range_inclusive(20, 500)),
    }
}

fn draw_config(rng: &mut SplitMix64) -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(rng.below(6));
    c.max_entry_bytes = 128;
    // Small objects: appends spread over many objects, several in flight.
    c.max_batch_bytes = rng.range_inclusive(400, 2_000);
    c.max_in_flight = rng.range_inclusive(1, 4) as usize;
    c.max_pending_bytes = rng.range_inclusive(128, 4_096);
    c.recovery_concurrency = rng.range_inclusive(1, 4) as usize;
    c.read_ahead = rng.range_inclusive(1, 3) as usize;
    c.retry = RetryPolicy::new(
        rng.range_inclusive(1, 4) as u32,
        Duration::from_millis(1),
        Duration::from_millis(4),
    );
    c.open_attempts = rng.range_inclusive(3, 8) as u32;
    // Measured on the virtual clock. In some seeds the bounds are short: a slow create
    // is refused its ack, an epoch whose next create would start past its link window
    // ends, idle writers write empty objects to stay inside it, and empty objects below
    // the floor (openings and claims before the first entry) are reclaimed. Elsewhere
    // they are far above a seed's virtual duration. No region reports obsolete entries,
    // so no entry is ever reclaimed.
    if rng.chance(0.25) {
        c.max_create_duration = Duration::from_millis(rng.range_inclusive(100, 1_000));
        c.reclaim_grace = c.max_create_duration * rng.range_inclusive(2, 8) as u32;
    } else {
        c.max_create_duration = Duration::from_secs(3_600);
        c.reclaim_grace = Duration::from_secs(30 * 24 * 3600);
    }
    c
}

impl Sim {
    fn new(seed: u64, replicas: usize) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x5EED_0F0B_1EC7);
        let mut store_rng = rng.fork();
        let rates = draw_rates(&mut rng);
        let store = FaultStore::seeded(Arc::new(InMemory::new()), store_rng.next_u64(), rates);
        let dyn_store: Arc<dyn ObjectStore> = store.clone();
        let config = draw_config(&mut rng);
        let region_count = rng.range_inclusive(1, 4);
        let regions = (0..region_count)
            .map(|i| {
                if rng.chance(0.5) {
                    i + 1
                } else {
                    rng.next_u64() >> 1
                }
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let origin = tokio::time::Instant::now();
        store.record_ops(true);
        let trace = Trace::new(origin, store.clone());
        trace.push(format!("seed {seed}: rates {rates:?}"));
        trace.push(format!("config {config:?}"));
        // More stores draw from a stream of their own: one store's seeds stay as they are.
        let mut stores = vec![store.clone()];
        let mut replica_rng = if replicas > 1 {
            rng.fork()
        } else {
            SplitMix64::new(0)
        };
        for i in 1..replicas {
            let rates = draw_rates(&mut replica_rng);
            let other =
                FaultStore::seeded(Arc::new(InMemory::new()), replica_rng.next_u64(), rates);
            trace.push(format!("store {i}: rates {rates:?}"));
            stores.push(other);
        }
        let downs = if replicas > 1 {
            stores
                .iter()
                .map(|s| DownHooks::wrap(s.clone() as Arc<dyn ObjectStore>))
                .collect()
        } else {
            Vec::new()
        };
        Sim {
            seed,
            rng,
            dyn_store,
            stores,
            downs,
            config,
            restarts: RestartPolicy::new(
                50,
                Duration::from_secs(60),
                Duration::from_millis(1),
                Duration::from_millis(20),
            ),
            clock: Arc::new(VirtualClock { origin }),
            regions,
            instances: Vec::new(),
            current: 0,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            tasks: JoinSet::new(),
            epoch_owner: HashMap::new(),
            trace,
            checks: 0,
            skipped_checks: 0,
            crashes: 0,
            zombies: 0,
        }
    }

    fn note(&self, what: impl AsRef<str>) {
        self.trace.push(what.as_ref().to_string());
    }

    fn fail(&self, what: impl AsRef<str>) -> ! {
        panic!(
            "simulation: seed {}: {}\n{}{}",
            self.seed,
            what.as_ref(),
            self.trace.tail(),
            self.dump_store()
        );
    }

    fn dump_store(&self) -> String {
        dump_store(&self.stores, &self.config)
    }

    /// Deletes `key` in every store behind the WAL's back; whether any held it.
    async fn delete_behind(&self, key: &object_store::path::Path) -> bool {
        let mut gone = false;
        for s in &self.stores {
            gone |= s.delete_behind(key).await.unwrap_or(false);
        }
        gone
    }

    /// Every late create lands, in every store.
    async fn land_late(&self) -> usize {
        let mut landed = 0;
        for s in &self.stores {
            landed += s.land_late().await;
        }
        landed
    }

    /// Over three stores: one store at a time goes down (every request hangs), and
    /// comes back.
    fn toggle_down(&mut self) {
        if let Some(i) = self.downs.iter().position(|d| d.hooks().is_down()) {
            self.downs[i].hooks().set_down(false);
            self.note(format!("store {i} back up"));
            return;
        }
        let i = self.rng.below(self.downs.len() as u64) as usize;
        let back_after = Duration::from_millis(self.rng.range_inclusive(5, 400));
        self.downs[i].hooks().set_down(true);
        self.note(format!("store {i} down for {back_after:?}"));
        // Down for a while: an open with a key only the down store can settle waits.
        let down = self.downs[i].clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(back_after).await;
            down.hooks().set_down(false);
        });
    }

    fn all_up(&self) {
        for d in &self.downs {
            d.hooks().set_down(false);
        }
    }

    async fn run(mut self, totals: &Totals) {
        self.note(format!("regions {:?}", self.regions));
        let rounds = self.rng.range_inclusive(2, 3);
        self.spawn_instance().await;
        for round in 0..rounds {
            self.note(format!("round {round}"));
            let ops = self.rng.range_inclusive(6, 14);
            for _ in 0..ops {
                self.step().await;
                self.poll_epochs().await;
            }
            // The round ends with the current instance crashed, left running (a zombie
            // once the checker opens) or stopped; then everything settles and a fresh
            // instance checks the whole log.
            match self.rng.below(3) {
                0 => self.crash(self.current),
                1 => {}
                _ => {
                    let c = self.current;
                    self.note(format!("stop #{c}"));
                    let _ = self.instances[c].handle.stop().await;
                    self.instances[c].alive = false;
                }
            }
            self.settle().await;
            self.checked_restart("end of round").await;
        }
        self.finish().await;
        self.report(totals).await;
    }

    /// One random step of the schedule.
    async fn step(&mut self) {
        if !self.downs.is_empty() && self.rng.chance(0.1) {
            self.toggle_down();
        }
        let zombies: Vec<usize> = (0..self.instances.len())
            .filter(|&i| i != self.current && self.instances[i].alive)
            .collect();
        match self.rng.below(100) {
            0..=34 => self.issue_append(self.current),
            35..=42 if !zombies.is_empty() => {
                let z = zombies[self.rng.below(zombies.len() as u64) as usize];
                for _ in 0..self.rng.range_inclusive(1, 3) {
                    self.issue_append(z);
                }
            }
            35..=54 => {
                // Mostly short waits, so that crashes and takeovers find creates in flight.
                let max = if self.rng.chance(0.5) { 5_000 } else { 40_000 };
                let d = Duration::from_micros(self.rng.below(max));
                tokio::time::sleep(d).await;
            }
            55..=59 => {
                for _ in 0..self.rng.range_inclusive(1, 20) {
                    tokio::task::yield_now().await;
                }
            }
            60..=71 => {
                // A burst: several appends at once, to fill batches, pipeline uploads
                // and meet backpressure.
                for _ in 0..self.rng.range_inclusive(2, 8) {
                    self.issue_append(self.current);
                }
            }
            72..=78 => {
                // A crash with appends in flight, and a restart at once.
                self.burst_then_wait().await;
                self.crash(self.current);
                self.restart_and_check("restart after a crash").await;
            }
            79..=88 => {
                // A takeover: the current instance keeps running (a zombie) with its
                // uploads in flight.
                self.burst_then_wait().await;
                self.zombies += 1;
                let old = self.current;
                self.note(format!("takeover: #{old} keeps running as a zombie"));
                self.restart_and_check("takeover").await;
                // Keep at most two zombies.
                let mut alive: Vec<usize> = (0..self.instances.len())
                    .filter(|&i| i != self.current && self.instances[i].alive)
                    .collect();
                while alive.len() > 2 {
                    let z = alive.remove(0);
                    self.crash(z);
                }
            }
            89..=91 if !zombies.is_empty() => {
                let z = zombies[self.rng.below(zombies.len() as u64) as usize];
                self.crash(z);
            }
            89..=94 => {
                let landed = self.land_late().await;
                self.note(format!("land late creates now: {landed} landed"));
            }
            _ => {
                let c = self.current;
                self.note(format!("panic the writer of #{c}"));
                self.instances[c].handle.panic_writer();
            }
        }
    }

    /// Sometimes a few appends and a short wait, so that what follows finds uploads in
    /// flight.
    async fn burst_then_wait(&mut self) {
        if self.rng.chance(0.6) {
            for _ in 0..self.rng.range_inclusive(1, 6) {
                self.issue_append(self.current);
            }
            let d = Duration::from_micros(self.rng.below(8_000));
            tokio::time::sleep(d).await;
        }
    }

    async fn spawn_instance(&mut self) -> usize {
        let spawned = if self.downs.is_empty() {
            spawn_wal_with(
                self.dyn_store.clone(),
                self.config.clone(),
                self.restarts,
                self.clock.clone(),
                None,
            )
            .await
        } else {
            let stores = self
                .downs
                .iter()
                .map(|d| d.clone() as Arc<dyn ObjectStore>)
                .collect();
            match WalIo::for_stores(stores, &self.config) {
                Ok(io) => {
                    spawn_wal_io(
                        io,
                        self.config.clone(),
                        self.restarts,
                        self.clock.clone(),
                        None,
                    )
                    .await
                }
                Err(e) => Err(e.into()),
            }
        };
        let (handle, join) = spawned.unwrap_or_else(|e| self.fail(format!("cannot spawn: {e}")));
        let spawned = lock(&self.ledger).tick();
        let index = self.instances.len();
        self.instances.push(Instance {
            handle,
            _join: join,
            alive: true,
            spawned,
            epochs: Vec::new(),
            reclaimed: 0,
        });
        self.current = index;
        self.note(format!("spawn #{index} (logical time {spawned})"));
        index
    }

    fn crash(&mut self, i: usize) {
        if !self.instances[i].alive {
            return;
        }
        self.crashes += 1;
        self.note(format!("crash #{i} (abort)"));
        self.instances[i].handle.abort();
        self.instances[i].alive = false;
    }

    fn issue_append(&mut self, target: usize) {
        let part_count = if self.rng.chance(0.3) { 2 } else { 1 };
        let mut ledger = lock(&self.ledger);
        let index = ledger.appends.len();
        let mut parts: AppendParts = Vec::new();
        for p in 0..part_count {
            let region = self.regions[self.rng.below(self.regions.len() as u64) as usize];
            let count = self.rng.range_inclusive(1, 3) as usize;
            let mut entries = Vec::new();
            for k in 0..count {
                let pad = self.rng.below(60) as usize;
                let payload = format!("s{}a{index}p{p}e{k}:{}", self.seed, "x".repeat(pad));
                entries.push(Bytes::from(payload));
            }
            parts.push((region, entries));
        }
        ledger.issue(target, parts.clone());
        drop(ledger);
        self.note(format!(
            "append a{index} -> #{target}: {:?}",
            parts.iter().map(|(r, e)| (*r, e.len())).collect::<Vec<_>>()
        ));
        let handle = self.instances[target].handle.clone();
        let ledger = self.ledger.clone();
        let trace = self.trace.clone();
        self.tasks.spawn(async move {
            let result = handle.append_many(parts).await;
            let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
            trace.push(format!(
                "a{index} answered: {}",
                match &result {
                    Ok(r) => format!("ok seq {} {:?}", r.sequence, r.parts),
                    Err(e) => format!("{:?}: {e}", e.durability()),
                }
            ));
            ledger.answer(index, result);
        });
    }

    /// Waits for every append issued so far to be answered.
    async fn settle(&mut self) {
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                self.fail(format!("an append task failed: {e}"));
            }
        }
    }

    /// Records the epochs the live instances report; no epoch may belong to two.
    async fn poll_epochs(&mut self) {
        for i in 0..self.instances.len() {
            if !self.instances[i].alive {
                continue;
            }
            let Ok(stats) = self.instances[i].handle.stats().await else {
                continue;
            };
            self.instances[i].reclaimed = stats.deleted;
            if stats.epoch == 0 {
                continue;
            }
            match self.epoch_owner.get(&stats.epoch) {
                Some(&owner) if owner != i => self.fail(format!(
                    "epoch {} reported by instance #{i} and by instance #{owner}",
                    stats.epoch
                )),
                Some(_) => {}
                None => {
                    self.epoch_owner.insert(stats.epoch, i);
                    self.instances[i].epochs.push(stats.epoch);
                    self.note(format!("#{i} runs epoch {}", stats.epoch));
                }
            }
        }
    }

    /// A restart with appends possibly in flight: the new instance replays everything,
    /// and whatever was acknowledged before it was spawned must be there.
    async fn restart_and_check(&mut self, why: &str) {
        let i = self.spawn_instance().await;
        self.note(format!("{why}: check through #{i}"));
        match self.replay_all(i).await {
            Ok(entries) => {
                let required = self.instances[i].spawned;
                self.verify(&entries, required, &format!("{why}, via #{i}"));
                self.checks += 1;
            }
            Err(e) => {
                // Gone before it served the replay (fenced by a zombie that opened
                // again, or out of restarts under faults): the next check covers it.
                self.expect_benign(&e, i);
                self.note(format!("check skipped: #{i} could not replay: {e}"));
                self.skipped_checks += 1;
            }
        }
        self.poll_epochs().await;
    }

    /// A restart once everything settled: a fresh instance must replay everything that
    /// was acknowledged. Under heavy faults an instance may run out of restarts; another
    /// one is spawned, a bounded number of times.
    async fn checked_restart(&mut self, why: &str) {
        for attempt in 0..6 {
            let i = self.spawn_instance().await;
            self.note(format!("{why}: check through #{i} (attempt {attempt})"));
            match self.replay_all(i).await {
                Ok(entries) => {
                    let required = self.instances[i].spawned;
                    self.verify(&entries, required, &format!("{why}, via #{i}"));
                    self.checks += 1;
                    self.poll_epochs().await;
                    return;
                }
                Err(e) => {
                    self.expect_benign(&e, i);
                    self.note(format!("#{i} could not replay: {e}"));
                    self.crash(i);
                }
            }
        }
        self.fail(format!(
            "{why}: six instances in a row could not open and replay"
        ));
    }

    /// An instance may end without serving a replay only for reasons the faults explain:
    /// store errors, contention, restarts spent on them, fencing by a newer instance.
    /// Damaged data or a poisoned store means a transient fault was taken for damage.
    fn expect_benign(&self, e: &Error, i: usize) {
        let benign = matches!(
            e,
            Error::Store { .. }
                | Error::NoQuorum { .. }
                | Error::OpenContended { .. }
                | Error::EpochEnded { .. }
                | Error::WriterFailed { .. }
                | Error::Fenced { .. }
                | Error::Stopped { .. }
        );
        if !benign {
            self.fail(format!(
                "instance #{i} ended with {e:?}; only injected transient faults happened"
            ));
        }
    }

    /// Every region from 0 through instance `i`, retried while the store fails reads.
    async fn replay_all(&mut self, i: usize) -> Result<Vec<Entry>, Error> {
        let regions: Vec<(u64, u64)> = self.regions.iter().map(|&r| (r, 0)).collect();
        let handle = self.instances[i].handle.clone();
        let mut last = None;
        for _ in 0..20 {
            let rx = handle.replay(regions.clone()).await?;
            let mut entries = Vec::new();
            let mut error = None;
            while let Ok(item) = rx.recv_async().await {
                match item {
                    Ok(e) => entries.push(e),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            match error {
                None => return Ok(entries),
                Some(e @ Error::Store { .. }) => {
                    self.note(format!("replay through #{i} failed, again: {e}"));
                    last = Some(e);
                }
                // The instance ended (fenced, or out of restarts) while it served the
                // replay: nothing of it reaches the store any more, so the replay ends
                // too. As when it is gone before the replay starts.
                Some(Error::Stopped { .. }) if handle.terminal_error().is_some() => {
                    return Err(handle.terminal_error().expect("a terminal error"));
                }
                Some(e) => self.fail(format!(
                    "the replay through #{i} failed with {e:?}: only injected read failures (retried) may fail it; a flipped read is flipped once and must be read again"
                )),
            }
        }
        Err(last.expect("an error"))
    }

    /// Every region alone through instance `i`, with `read`.
    async fn read_each(&mut self, i: usize) -> Vec<Entry> {
        let handle = self.instances[i].handle.clone();
        let mut all = Vec::new();
        for &region in &self.regions.clone() {
            let rx = handle
                .read(region, 0)
                .await
                .unwrap_or_else(|e| self.fail(format!("read of region {region}: {e}")));
            while let Ok(item) = rx.recv_async().await {
                match item {
                    Ok(e) => all.push(e),
                    Err(e) => self.fail(format!("read of region {region} failed: {e:?}")),
                }
            }
        }
        all
    }

    /// The oracle. `required`: appends answered `Ok` before this logical time must be
    /// replayed.
    fn verify(&self, entries: &[Entry], required: u64, via: &str) {
        let errors = self.verify_inner(entries, Some(required), true);
        if !errors.is_empty() {
            self.fail(format!("oracle ({via}):\n  {}", errors.join("\n  ")));
        }
    }

    /// The checks; `required` None skips completeness, `stable` false skips the
    /// comparison with earlier replays (a chain damaged behind the WAL's back).
    fn verify_inner(&self, entries: &[Entry], required: Option<u64>, stable: bool) -> Vec<String> {
        let instance_note = |i: usize| -> String {
            let inst = &self.instances[i];
            match inst.handle.terminal_error() {
                Some(e @ Error::Fenced { .. }) => {
                    format!(
                        "instance #{i} (epochs {:?}, later fenced: {e})",
                        inst.epochs
                    )
                }
                Some(e) => format!("instance #{i} (epochs {:?}, ended: {e})", inst.epochs),
                None => format!("instance #{i} (epochs {:?})", inst.epochs),
            }
        };
        let mut ledger = lock(&self.ledger);
        let mut judged = ledger.judge(entries, required, &instance_note);
        let mut errors = std::mem::take(&mut judged.errors);
        if stable {
            errors.extend(ledger.remember(&judged));
        }
        errors
    }

    /// The end of a seed: every late create lands, the faults stop, a final instance
    /// checks everything (replay and per-region reads); then objects are deleted behind
    /// the WAL's back.
    async fn finish(&mut self) {
        let landed = self.land_late().await;
        for s in &self.stores {
            s.set_random_faults(false);
        }
        self.all_up();
        self.note(format!(
            "finish: {landed} late creates landed; faults off; every store up"
        ));
        self.settle().await;
        for i in 0..self.instances.len() {
            self.crash(i);
        }
        self.checked_restart("final").await;
        let last = self.current;
        let alone = self.read_each(last).await;
        let required = self.instances[last].spawned;
        self.verify(&alone, required, "final, per-region reads");

        // An orphan deleted behind the WAL's back changes nothing.
        let report = open_plain(&self.stores, &self.config)
            .await
            .unwrap_or_else(|e| self.fail(format!("read-only open: {e}")))
            .report()
            .clone();
        let orphans: Vec<u64> = report
            .objects
            .iter()
            .filter(|o| !o.on_chain)
            .map(|o| o.header.sequence)
            .collect();
        if !orphans.is_empty() {
            let s = orphans[self.rng.below(orphans.len() as u64) as usize];
            let key = object_key(&object_store::path::Path::from(PREFIX), s);
            let gone = self.delete_behind(&key).await;
            self.note(format!("deleted orphan {s} behind the WAL's back ({gone})"));
            self.crash(last);
            self.checked_restart("after deleting an orphan").await;
        }

        // A chain object deleted behind the WAL's back: reads through the running
        // instance fail with a typed error; recovery afterwards is consistent.
        let with_data: Vec<u64> = report
            .objects
            .iter()
            .filter(|o| o.on_chain && o.segments > 0)
            .map(|o| o.header.sequence)
            .collect();
        if with_data.is_empty() {
            return;
        }
        let s = with_data[self.rng.below(with_data.len() as u64) as usize];
        let key = object_key(&object_store::path::Path::from(PREFIX), s);
        let running = self.current;
        let gone = self.delete_behind(&key).await;
        self.note(format!(
            "deleted chain object {s} behind the WAL's back ({gone})"
        ));
        let handle = self.instances[running].handle.clone();
        let regions: Vec<(u64, u64)> = self.regions.iter().map(|&r| (r, 0)).collect();
        let rx = handle
            .replay(regions)
            .await
            .unwrap_or_else(|e| self.fail(format!("replay after a deletion: {e}")));
        let mut seen = Vec::new();
        let mut failed = None;
        while let Ok(item) = rx.recv_async().await {
            match item {
                Ok(e) => seen.push(e),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            Some(Error::Store { .. }) => {}
            other => self.fail(format!(
                "replaying over object {s}, deleted behind the WAL's back, gave {other:?}, not a store error"
            )),
        }
        let errors = self.verify_inner(&seen, None, false);
        if !errors.is_empty() {
            self.fail(format!(
                "entries before the deleted object:\n  {}",
                errors.join("\n  ")
            ));
        }
        self.crash(running);
        let i = self.spawn_instance().await;
        match self.replay_all(i).await {
            Ok(entries) => {
                let errors = self.verify_inner(&entries, None, false);
                if !errors.is_empty() {
                    self.fail(format!(
                        "recovery over a chain missing object {s}:\n  {}",
                        errors.join("\n  ")
                    ));
                }
                self.note(format!(
                    "after deleting chain object {s}: {} entries replayed",
                    entries.len()
                ));
            }
            Err(e) => self.note(format!("after deleting chain object {s}: no replay: {e}")),
        }
        self.poll_epochs().await;
    }

    async fn report(&mut self, totals: &Totals) {
        for i in 0..self.instances.len() {
            self.instances[i].handle.abort();
        }
        let ledger = lock(&self.ledger);
        Totals::add(&totals.seeds, 1);
        Totals::add(&totals.appends, ledger.appends.len() as u64);
        for (a, r) in ledger.appends.iter().enumerate() {
            if let Outcome::Failed(e) = &r.outcome {
                let kind = match e {
                    Error::EpochEnded { reason, .. } => {
                        let reason = format!("{reason:?}");
                        format!("EpochEnded({})", reason.split(' ').next().unwrap_or("?"))
                    }
                    e => {
                        let kind = format!("{e:?}");
                        kind.split([' ', '{', '('])
                            .next()
                            .unwrap_or("?")
                            .to_string()
                    }
                };
                *lock(&totals.errors)
                    .entry(format!("{kind}/{:?}", e.durability()))
                    .or_default() += 1;
            }
            match &r.outcome {
                Outcome::Acked(_) => Totals::add(&totals.acked, 1),
                Outcome::Failed(e) if e.durability() == Durability::NotWritten => {
                    Totals::add(&totals.failed_not_written, 1)
                }
                Outcome::Failed(_) => {
                    Totals::add(&totals.failed_may_be, 1);
                    if ledger.ever_replayed(a) {
                        Totals::add(&totals.failed_replayed, 1);
                    }
                }
                Outcome::Pending => {}
            }
        }
        Totals::add(&totals.instances, self.instances.len() as u64);
        Totals::add(
            &totals.fenced_instances,
            self.instances
                .iter()
                .filter(|i| matches!(i.handle.terminal_error(), Some(Error::Fenced { .. })))
                .count() as u64,
        );
        Totals::add(&totals.checks, self.checks);
        Totals::add(&totals.skipped_checks, self.skipped_checks);
        Totals::add(&totals.crashes, self.crashes);
        Totals::add(&totals.zombies, self.zombies);
        for s in &self.stores {
            Totals::add(&totals.late_landed, s.late_landed());
        }
        Totals::add(
            &totals.reclaimed,
            self.instances.iter().map(|i| i.reclaimed).sum(),
        );
        let mut t = lock(&totals.faults);
        for c in self.stores.iter().map(|s| s.fault_counts()) {
            t.apply_then_error += c.apply_then_error;
            t.error_unapplied += c.error_unapplied;
            t.land_late += c.land_late;
            t.failed_gets += c.failed_gets;
            t.flipped_gets += c.flipped_gets;
            t.failed_lists += c.failed_lists;
            t.slow_ops += c.slow_ops;
            t.deleted_behind += c.deleted_behind;
        }
    }
}
