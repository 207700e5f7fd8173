//! A long seeded run of the WAL (the actors) in real time, across restarts, with the
//! fault store and retention on, checked by the oracle, its memory reported.
//!
//! Regions append continuously (closed loop, one append in flight per region, a third
//! of them to two regions at once) through whichever instance is current, over an
//! `InMemory` store wrapped in a seeded [`FaultStore`] (creates failing applied or not,
//! landing late; GETs and LISTs failing or slow; flipped bytes). The run is cut into
//! eras of a few seconds. During an era the schedule, drawn from the seed, aborts the
//! instance and spawns a new one, stops it and spawns a new one, panics its writer
//! (the supervisor opens a new epoch) or lands the late creates. At the end of an era
//! the appends settle, the instance is stopped or aborted, and a fresh instance replays
//! every region from above the last checked id (its open under faults, its replay
//! without them): the ledger of the era
//! (`actors/tests/support/ledger.rs`) checks it (every acknowledged append exactly once,
//! with its receipt's ids; failed ones whole or not at all, never the not-written ones;
//! ids increasing; acknowledged-before-issued order), and nothing else may appear.
//! Then every region reports its entries up to the checked id obsolete, to each new
//! instance, so the floor rises and the reclaimer deletes what lies below it: memory
//! and the store's keys stay bounded by the live part of the log, and each era's ledger
//! is dropped once checked.
//!
//! Once a minute (and at the end) one JSON line goes to stdout: RSS (and the heap in
//! use, glibc's count of live allocations), appends and
//! acknowledgements so far, instances, restarts, checked entries, lost and duplicated
//! entries, objects deleted, live keys, tasks alive on the runtime. A last line sums
//! the run up.
//!
//! `WAL_SOAK_SECONDS` (default 3: the CI run) sets the duration, `WAL_SOAK_SEED`
//! (default 1) the seed, `WAL_SOAK_REPORT_SECONDS` (default 60) how often a line is
//! printed (the first minute's RSS is the last one printed within it). The 10-minute run:
//!
//! ```text
//! WAL_SOAK_SECONDS=600 WAL_SOAK_SEED=7 nice cargo test --release --test soak -- --nocapture
//! ```
//!
//! The seed fixes the schedule and the faults' draws; the timing is real, so two runs of
//! a seed differ in detail (which append meets which fault). A failure names the seed.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use object_store_wal::testing::{FaultRates, FaultStore, SplitMix64};
use object_store_wal::{AppendParts, Config, Durability, Entry, Error, RetryPolicy};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use tokio::task::JoinSet;

#[path = "../actors/tests/support/ledger.rs"]
mod ledger;

use ledger::{Ledger, Outcome};

const PREFIX: &str = "soak";
const REGIONS: u64 = 8;
/// A real-time bound on every wait: only a hang reaches it.
const HANG: Duration = Duration::from_secs(120);
const INJECTED_PANIC: &str = "injected writer panic";

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The resident set of this process, in KiB (Linux; `None` elsewhere).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes the allocator holds for live allocations, in KiB (glibc; `None` elsewhere):
/// set beside RSS, it tells memory kept apart from memory merely not returned to the
/// system.
fn heap_in_use_kib() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd) as u64 / 1024)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

fn mib(kib: Option<u64>) -> serde_json::Value {
    kib.map_or(serde_json::Value::Null, |k| {
        serde_json::json!((k as f64 / 1024.0 * 10.0).round() / 10.0)
    })
}

/// The writer panics the schedule injects are expected: not printed.
fn silence_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let injected = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.contains(INJECTED_PANIC));
            if !injected {
                default(info);
            }
        }));
    });
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the run did so far; read by the reporter once a minute.
#[derive(Debug, Default)]
struct Totals {
    eras: AtomicU64,
    appends: AtomicU64,
    acked: AtomicU64,
    failed_may_be: AtomicU64,
    failed_not_written: AtomicU64,
    instances: AtomicU64,
    aborts: AtomicU64,
    stops: AtomicU64,
    writer_panics: AtomicU64,
    /// New epochs the supervisors opened by themselves (writer failures, epoch ends).
    supervisor_restarts: AtomicU64,
    checked_entries: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    deleted: AtomicU64,
    late_landed: AtomicU64,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Totals {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "eras": get(&self.eras),
            "appends": get(&self.appends),
            "acked": get(&self.acked),
            "failed_may_be_durable": get(&self.failed_may_be),
            "failed_not_written": get(&self.failed_not_written),
            "instances": get(&self.instances),
            "aborts": get(&self.aborts),
            "stops": get(&self.stops),
            "writer_panics": get(&self.writer_panics),
            "supervisor_restarts": get(&self.supervisor_restarts),
            "checked_entries": get(&self.checked_entries),
            "lost": get(&self.lost),
            "duplicated": get(&self.duplicated),
            "deleted": get(&self.deleted),
            "late_landed": get(&self.late_landed),
        })
    }
}

#[test]
fn soak() {
    silence_injected_panics();
    let seconds = env_u64("WAL_SOAK_SECONDS", 3);
    let seed = env_u64("WAL_SOAK_SEED", 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(seed, Duration::from_secs(seconds)));
}

async fn run(seed: u64, duration: Duration) {
    let started = Instant::now();
    let totals = Arc::new(Totals::default());
    let mut soak = Soak::new(seed, totals.clone());
    let inner = soak.store.inner().clone();
    let rss_first = Arc::new(Mutex::new(None));
    let reporter = tokio::spawn(report_every_minute(
        inner.clone(),
        totals.clone(),
        started,
        rss_first.clone(),
    ));
    soak.current = Some(soak.spawn_instance().await);
    let deadline = started + duration;
    while Instant::now() < deadline {
        soak.era(deadline).await;
    }
    let handle = soak.current.take().expect("an instance");
    soak.end_instance(&handle, End::Stop).await;
    reporter.abort();

    let rss_last = rss_kib();
    println!(
        "{}",
        minute_line(&inner, &totals, started, rss_last, "end").await
    );
    let first = *lock(&rss_first);
    let mut summary = totals.json();
    let extra = serde_json::json!({
        "summary": true,
        "seed": seed,
        "seconds": started.elapsed().as_secs(),
        "rss_first_minute_mib": mib(first),
        "rss_last_mib": mib(rss_last),
        "faults": format!("{:?}", soak.store.fault_counts()),
    });
    if let (Some(s), Some(e)) = (summary.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    println!("{summary}");
    assert_eq!(
        get(&totals.lost),
        0,
        "seed {seed}: acknowledged entries lost"
    );
    assert_eq!(
        get(&totals.duplicated),
        0,
        "seed {seed}: entries duplicated"
    );
    assert!(
        get(&totals.acked) > 0,
        "seed {seed}: nothing was acknowledged"
    );
    if duration >= Duration::from_secs(60) {
        assert!(
            get(&totals.deleted) > 0,
            "seed {seed}: retention reclaimed nothing in {duration:?}"
        );
    }
}

async fn minute_line(
    inner: &Arc<dyn ObjectStore>,
    totals: &Totals,
    started: Instant,
    rss: Option<u64>,
    at: &str,
) -> serde_json::Value {
    let prefix = Path::from(PREFIX);
    let live_keys = inner.list(Some(&prefix)).count().await;
    let mut line = totals.json();
    let extra = serde_json::json!({
        "at": at,
        "elapsed_s": started.elapsed().as_secs(),
        "rss_mib": mib(rss),
        "heap_in_use_mib": mib(heap_in_use_kib()),
        "live_keys": live_keys,
        // Tasks alive on the runtime: bounded if every task the WAL spawns ends with it.
        "tasks": tokio::runtime::Handle::current().metrics().num_alive_tasks(),
    });
    if let (Some(l), Some(e)) = (line.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    line
}

async fn report_every_minute(
    inner: Arc<dyn ObjectStore>,
    totals: Arc<Totals>,
    started: Instant,
    rss_first: Arc<Mutex<Option<u64>>>,
) {
    let every = env_u64("WAL_SOAK_REPORT_SECONDS", 60).max(1);
    let mut n = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(every)).await;
        n += 1;
        let rss = rss_kib();
        if n * every <= 60 {
            *lock(&rss_first) = rss;
        }
        let at = if every == 60 {
            format!("minute {n}")
        } else {
            format!("{}s", n * every)
        };
        let line = minute_line(&inner, &totals, started, rss, &at).await;
        println!("{line}");
    }
}

/// `f`, bounded by [`HANG`].
async fn bounded<T>(seed: u64, what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, f).await {
        Ok(v) => v,
        Err(_) => panic!("soak: seed {seed}: hung waiting for {what}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Stop,
    Abort,
}

struct Soak {
    seed: u64,
    rng: SplitMix64,
    store: Arc<FaultStore>,
    config: Config,
    restarts: RestartPolicy,
    totals: Arc<Totals>,
    /// The instance appends go to; the appenders read it before each append.
    shared: Arc<RwLock<Option<WalHandle>>>,
    current: Option<WalHandle>,
    /// Instances spawned so far (the ledger's instance numbers).
    spawned: usize,
    /// Per region, the highest id a check replayed: reported obsolete, and where the
    /// next check starts.
    checked_to: BTreeMap<u64, u64>,
    /// Makes every payload unique across the run.
    next_payload: Arc<AtomicU64>,
}

fn draw_rates(rng: &mut SplitMix64) -> FaultRates {
    let p = |rng: &mut SplitMix64, max: f64| rng.unit() * max;
    FaultRates {
        apply_then_error: p(rng, 0.03),
        error_unapplied: p(rng, 0.03),
        land_late: p(rng, 0.02),
        late_after_max_ops: rng.range_inclusive(5, 60) as u32,
        fail_get: p(rng, 0.01),
        fail_list: p(rng, 0.03),
        flip_get: p(rng, 0.01),
        put_latency: Duration::from_micros(rng.below(5_000)),
        get_latency: Duration::from_micros(rng.below(2_000)),
        list_latency: Duration::from_micros(rng.below(2_000)),
        slow_put: p(rng, 0.02),
        slow_get: p(rng, 0.01),
        slow_list: p(rng, 0.03),
        slow_latency: Duration::from_millis(rng.range_inclusive(20, 300)),
    }
}

fn config() -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(2);
    c.max_batch_bytes = 16 * 1024;
    c.max_entry_bytes = 1024;
    c.max_pending_bytes = 256 * 1024;
    c.retry = RetryPolicy::new(4, Duration::from_millis(1), Duration::from_millis(8));
    c.request_timeout = Duration::from_secs(2);
    // Short retention bounds, so reclaiming happens many times a minute (and a create
    // slower than a second is not acknowledged).
    c.max_create_duration = Duration::from_secs(1);
    c.reclaim_grace = Duration::from_secs(2);
    c
}

impl Soak {
    fn new(seed: u64, totals: Arc<Totals>) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x50A6_50A6);
        let rates = draw_rates(&mut rng);
        let store = FaultStore::seeded(Arc::new(InMemory::new()), rng.next_u64(), rates);
        Soak {
            seed,
            rng,
            store,
            config: config(),
            restarts: RestartPolicy::new(
                100,
                Duration::from_secs(10),
                Duration::from_millis(1),
                Duration::from_millis(50),
            ),
            totals,
            shared: Arc::new(RwLock::new(None)),
            current: None,
            spawned: 0,
            checked_to: (1..=REGIONS).map(|r| (r, 0)).collect(),
            next_payload: Arc::new(AtomicU64::new(0)),
        }
    }

    fn fail(&self, what: impl AsRef<str>) -> ! {
        panic!(
            "soak: seed {}: {}\n  reproduce: WAL_SOAK_SEED={} cargo test --test soak -- --nocapture",
            self.seed,
            what.as_ref(),
            self.seed
        )
    }

    /// Spawns an instance, waits for its recovery and reports every region's checked
    /// watermark to it (a new instance knows none, and a region whose watermark is
    /// unknown pins the floor). Under faults an open may fail for good (restarts spent);
    /// another instance is spawned then, a bounded number of times.
    async fn spawn_instance(&mut self) -> WalHandle {
        let store: Arc<dyn ObjectStore> = self.store.clone();
        for _ in 0..20 {
            let (handle, _join) = spawn_wal(store.clone(), self.config.clone(), self.restarts)
                .await
                .unwrap_or_else(|e| self.fail(format!("cannot spawn: {e}")));
            self.spawned += 1;
            add(&self.totals.instances, 1);
            let seed = self.seed;
            let opened = bounded(seed, "recovery", handle.last_entry_id_overall()).await;
            let mut reported = opened.map(|_| ());
            for (&region, &id) in &self.checked_to {
                if reported.is_ok() && id > 0 {
                    reported = bounded(seed, "obsolete", handle.obsolete(region, id)).await;
                }
            }
            match reported {
                Ok(()) => {
                    *self.shared.write().unwrap_or_else(|p| p.into_inner()) = Some(handle.clone());
                    return handle;
                }
                Err(e) => {
                    self.expect_benign(&e);
                    self.end_instance(&handle, End::Abort).await;
                }
            }
        }
        self.fail("twenty instances in a row could not open")
    }

    /// Ends an instance, counting what it did.
    async fn end_instance(&self, handle: &WalHandle, how: End) {
        if let Ok(Ok(stats)) = tokio::time::timeout(HANG, handle.stats()).await {
            add(&self.totals.supervisor_restarts, stats.restarts);
            add(&self.totals.deleted, stats.deleted);
        }
        match how {
            End::Stop => {
                add(&self.totals.stops, 1);
                let _ = bounded(self.seed, "stop", handle.stop()).await;
            }
            End::Abort => {
                add(&self.totals.aborts, 1);
                handle.abort();
            }
        }
    }

    /// An instance may fail to serve only for reasons the faults explain.
    fn expect_benign(&self, e: &Error) {
        let benign = matches!(
            e,
            Error::Store { .. }
                | Error::RequestTimeout { .. }
                | Error::OpenContended { .. }
                | Error::EpochEnded { .. }
                | Error::WriterFailed { .. }
                | Error::Stopped { .. }
        );
        if !benign {
            self.fail(format!(
                "an instance ended with {e:?}; only transient faults happened"
            ));
        }
    }

    /// Replaces the current instance (ended as `how`) with a fresh one.
    async fn replace(&mut self, how: End) {
        if let Some(old) = self.current.take() {
            self.end_instance(&old, how).await;
        }
        self.current = Some(self.spawn_instance().await);
    }

    /// One era (ending by `deadline` at the latest): appends under a schedule of
    /// restarts, then a check of everything the era's callers were told.
    async fn era(&mut self, deadline: Instant) {
        add(&self.totals.eras, 1);
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut appenders = JoinSet::new();
        for region in 1..=REGIONS {
            appenders.spawn(append_loop(Appender {
                region,
                rng: self.rng.fork(),
                shared: self.shared.clone(),
                ledger: ledger.clone(),
                next_payload: self.next_payload.clone(),
                stop: stop_rx.clone(),
                seed: self.seed,
            }));
        }
        let era_len = Duration::from_millis(self.rng.range_inclusive(3_000, 8_000));
        let era_end = (Instant::now() + era_len).min(deadline);
        while Instant::now() < era_end {
            let pause = Duration::from_millis(self.rng.range_inclusive(500, 2_000));
            tokio::time::sleep(pause.min(era_end.saturating_duration_since(Instant::now()))).await;
            let gone = self
                .current
                .as_ref()
                .is_some_and(|c| c.terminal_error().is_some());
            if gone {
                // Out of restarts under faults: the node spawns a new instance.
                self.replace(End::Abort).await;
                continue;
            }
            // Instances mostly outlive `reclaim_grace`, so their reclaimers delete (a
            // new instance's reclaimer starts with a fresh grace).
            match self.rng.below(100) {
                0..=54 => {}
                55..=64 => self.replace(End::Abort).await,
                65..=71 => self.replace(End::Stop).await,
                72..=86 => {
                    add(&self.totals.writer_panics, 1);
                    if let Some(c) = &self.current {
                        c.panic_writer();
                    }
                }
                _ => {
                    let landed = self.store.land_late().await;
                    add(&self.totals.late_landed, landed as u64);
                }
            }
        }
        stop_tx.send_replace(true);
        while let Some(joined) = bounded(self.seed, "the appenders", appenders.join_next()).await {
            if let Err(e) = joined {
                self.fail(format!("an appender failed: {e}"));
            }
        }
        let how = if self.rng.chance(0.5) {
            End::Stop
        } else {
            End::Abort
        };
        self.replace(how).await;
        let ledger = std::mem::take(&mut *lock(&ledger));
        self.check(&ledger).await;
    }

    /// Replays every region from above its checked id through the current instance
    /// and judges it by the era's ledger, every append answered.
    async fn check(&mut self, ledger: &Ledger) {
        // The checker opened under faults; its replay (an era's thousands of GETs, which
        // at these rates would almost never all succeed) runs without them.
        self.store.set_random_faults(false);
        let entries = self.replay().await;
        self.store.set_random_faults(true);
        let judged = ledger.judge(&entries, Some(u64::MAX), &|i| format!("instance #{i}"));
        let mut lost = 0;
        for (a, record) in ledger.appends.iter().enumerate() {
            match &record.outcome {
                Outcome::Acked(_) => {
                    add(&self.totals.acked, 1);
                    if !judged.present.contains_key(&(a, 0, 0)) {
                        lost += 1;
                    }
                }
                Outcome::Failed(e) if e.durability() == Durability::NotWritten => {
                    add(&self.totals.failed_not_written, 1)
                }
                Outcome::Failed(_) => add(&self.totals.failed_may_be, 1),
                Outcome::Pending => self.fail(format!("a{a} was never answered")),
            }
        }
        add(&self.totals.appends, ledger.appends.len() as u64);
        let distinct: HashSet<(u64, &Bytes)> =
            entries.iter().map(|e| (e.region, &e.payload)).collect();
        let duplicated = (entries.len() - distinct.len()) as u64;
        add(&self.totals.lost, lost);
        add(&self.totals.duplicated, duplicated);
        add(&self.totals.checked_entries, entries.len() as u64);
        if !judged.errors.is_empty() {
            self.fail(format!(
                "the oracle, era {}:\n  {}",
                get(&self.totals.eras),
                judged.errors.join("\n  ")
            ));
        }
        for e in &entries {
            let to = self.checked_to.entry(e.region).or_default();
            *to = (*to).max(e.id);
        }
        // The checked entries are safe: the floor may rise above them.
        let handle = self.current.clone().expect("an instance");
        for (&region, &id) in &self.checked_to {
            if id > 0 {
                if let Ok(Err(e)) = tokio::time::timeout(HANG, handle.obsolete(region, id)).await {
                    self.expect_benign(&e);
                }
            }
        }
    }

    /// Every region from above its checked id, through the current instance (retried
    /// on read errors; through a new instance when this one cannot serve).
    async fn replay(&mut self) -> Vec<Entry> {
        let mut last = None;
        for _ in 0..20 {
            let regions: Vec<(u64, u64)> = self
                .checked_to
                .iter()
                .map(|(&r, &id)| (r, id.saturating_add(1)))
                .collect();
            let handle = self.current.clone().expect("an instance");
            let rx = match bounded(self.seed, "a replay", handle.replay(regions)).await {
                Ok(rx) => rx,
                Err(e) => {
                    self.expect_benign(&e);
                    self.replace(End::Abort).await;
                    continue;
                }
            };
            let mut entries = Vec::new();
            let mut failed = None;
            while let Ok(item) = bounded(self.seed, "a replayed entry", rx.recv_async()).await {
                match item {
                    Ok(e) => entries.push(e),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => return entries,
                Some(e @ (Error::Store { .. } | Error::RequestTimeout { .. })) => {
                    last = Some(e);
                }
                // The instance ended (out of restarts) while it served the replay.
                Some(Error::Stopped { .. }) if handle.terminal_error().is_some() => {
                    if let Some(e) = handle.terminal_error() {
                        self.expect_benign(&e);
                    }
                    self.replace(End::Abort).await;
                }
                Some(e) => self.fail(format!(
                    "a replay failed with {e:?}: only read faults (retried) may fail it"
                )),
            }
        }
        self.fail(format!(
            "twenty replays in a row failed, the last with {last:?}"
        ))
    }
}

/// One region's closed loop of appends.
struct Appender {
    region: u64,
    rng: SplitMix64,
    shared: Arc<RwLock<Option<WalHandle>>>,
    ledger: Arc<Mutex<Ledger>>,
    next_payload: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
    seed: u64,
}

async fn append_loop(mut a: Appender) {
    while !*a.stop.borrow() {
        let Some(handle) = a.shared.read().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        let mut parts: AppendParts = vec![(a.region, Vec::new())];
        if a.rng.chance(0.3) {
            let other = a.rng.range_inclusive(1, REGIONS);
            if other != a.region {
                parts.push((other, Vec::new()));
            }
        }
        for (region, entries) in &mut parts {
            for _ in 0..a.rng.range_inclusive(1, 3) {
                let n = a.next_payload.fetch_add(1, Ordering::Relaxed);
                let pad = "x".repeat(a.rng.below(200) as usize);
                entries.push(Bytes::from(format!("r{region}n{n}:{pad}")));
            }
        }
        let index = lock(&a.ledger).issue(0, parts.clone());
        let result = bounded(a.seed, "an append's answer", handle.append_many(parts)).await;
        let failed = result.is_err();
        lock(&a.ledger).answer(index, result);
        if failed {
            // An instance that is gone fails at once: pace the loop until the next one.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
