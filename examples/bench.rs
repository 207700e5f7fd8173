//! The benchmark: how many durable appends per second, how long an append waits, how
//! many requests per MiB, how fast recovery and replay are. One JSON line per run on
//! stdout, progress on stderr. Run it in release mode:
//!
//! ```text
//! cargo run --release --example bench -- write --store memory --min-object-interval-ms 0
//! cargo run --release --example bench -- write --put-latency-ms 50 --entry-bytes 16384 --appenders 2048
//! cargo run --release --example bench -- limit --entry-bytes 65536
//! cargo run --release --example bench -- recover --objects 10000 --get-latency-ms 10 --recovery-concurrency 64
//! cargo run --release --example bench -- replay --seconds 5
//! ```
//!
//! `--store memory|file:<dir>` picks the store; `--put-latency-ms` / `--get-latency-ms`
//! add a latency per request (object_store's `ThrottledStore`), standing in for S3.
//! Requests are counted by the `testing` module's `CountingStore`, outermost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args as ClapArgs, Parser, Subcommand};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use object_store_wal::batch::Batch;
use object_store_wal::io::WalIo;
use object_store_wal::open::open_instance;
use object_store_wal::persist::{persist, PersistOutcome};
use object_store_wal::testing::{with_latency, CountingStore};
use object_store_wal::{Config, ObjectStoreLogStore};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use serde_json::json;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Parser, Debug)]
#[command(about = "object-store-wal benchmark")]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// Durable appends through the actors from concurrent callers.
    Write(Common),
    /// The same volume encoded and created directly through the core: the ceiling.
    Limit(Common),
    /// Build a prefix of `--objects` objects, then time a fresh open.
    Recover(Common),
    /// A write run, then a replay of every region from its first entry.
    Replay(Common),
}

#[derive(ClapArgs, Debug, Clone)]
struct Common {
    /// `memory` or `file:<dir>`.
    #[arg(long, default_value = "memory")]
    store: String,
    /// Latency added to every PUT, ms.
    #[arg(long, default_value_t = 0)]
    put_latency_ms: u64,
    /// Latency added to every GET, ms.
    #[arg(long, default_value_t = 0)]
    get_latency_ms: u64,
    /// Regions appended to.
    #[arg(long, default_value_t = 1000)]
    regions: u64,
    /// Bytes per entry.
    #[arg(long, default_value_t = 1024)]
    entry_bytes: usize,
    /// Entries per append.
    #[arg(long, default_value_t = 1)]
    entries_per_append: usize,
    /// Concurrent callers.
    #[arg(long, default_value_t = 256)]
    appenders: usize,
    /// Seconds to run (unless `--appends` is given).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Appends to run instead of a duration.
    #[arg(long)]
    appends: Option<u64>,
    /// `min_object_interval`, ms.
    #[arg(long)]
    min_object_interval_ms: Option<u64>,
    /// `max_in_flight`.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// `max_batch_bytes`.
    #[arg(long)]
    max_batch_bytes: Option<u64>,
    /// `max_pending_bytes`.
    #[arg(long)]
    max_pending_bytes: Option<u64>,
    /// `recovery_concurrency`.
    #[arg(long)]
    recovery_concurrency: Option<usize>,
    /// Objects built for `recover`.
    #[arg(long, default_value_t = 10_000)]
    objects: u64,
    /// After a write run, stay idle this long and count requests.
    #[arg(long, default_value_t = 0.0)]
    idle_seconds: f64,
    /// WAL prefix.
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// Regions mark their entries obsolete this many objects behind each acknowledged
    /// append (0: never); the reclaimer then deletes what no region needs.
    #[arg(long, default_value_t = 0)]
    obsolete_lag: u64,
    /// `reclaim_grace`, ms.
    #[arg(long)]
    reclaim_grace_ms: Option<u64>,
    /// `max_create_duration`, ms.
    #[arg(long)]
    max_create_duration_ms: Option<u64>,
}

struct Stores {
    /// What the WAL talks to: counting, over latency, over the base store.
    wal: Arc<dyn ObjectStore>,
    counting: Arc<CountingStore>,
    /// The base store, without latency or counting (to build fixtures fast).
    base: Arc<dyn ObjectStore>,
}

fn stores(c: &Common) -> Result<Stores, Box<dyn std::error::Error>> {
    let base: Arc<dyn ObjectStore> = if c.store == "memory" {
        Arc::new(object_store::memory::InMemory::new())
    } else if let Some(dir) = c.store.strip_prefix("file:") {
        let dir = std::path::absolute(dir)?;
        std::fs::create_dir_all(&dir)?;
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&dir)?.with_fsync(true))
    } else {
        return Err(format!("--store must be memory or file:<dir>, not {}", c.store).into());
    };
    let latent = if c.put_latency_ms > 0 || c.get_latency_ms > 0 {
        with_latency(
            base.clone(),
            Duration::from_millis(c.put_latency_ms),
            Duration::from_millis(c.get_latency_ms),
        )
    } else {
        base.clone()
    };
    let counting = CountingStore::new(latent);
    Ok(Stores {
        wal: counting.clone(),
        counting,
        base,
    })
}

fn config(c: &Common) -> Config {
    let mut config = Config::new(c.prefix.clone());
    if let Some(v) = c.min_object_interval_ms {
        config.min_object_interval = Duration::from_millis(v);
    }
    if let Some(v) = c.max_in_flight {
        config.max_in_flight = v;
    }
    if let Some(v) = c.max_batch_bytes {
        config.max_batch_bytes = v;
    }
    config.max_entry_bytes = config
        .max_entry_bytes
        .max(c.entry_bytes as u64)
        .min(config.max_batch_bytes / 2);
    if let Some(v) = c.max_pending_bytes {
        config.max_pending_bytes = v;
    }
    if let Some(v) = c.recovery_concurrency {
        config.recovery_concurrency = v;
    }
    if let Some(v) = c.max_create_duration_ms {
        config.max_create_duration = Duration::from_millis(v);
    }
    if let Some(v) = c.reclaim_grace_ms {
        config.reclaim_grace = Duration::from_millis(v);
    }
    config
}

/// Peak resident set size of this process, in MiB (`VmHWM`).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    round2(h.value_at_quantile(q) as f64 / 1000.0)
}

struct WriteResult {
    line: serde_json::Value,
    mib_per_s: f64,
    wal: WalHandle,
}

async fn write(c: &Common, s: &Stores) -> Result<WriteResult, Box<dyn std::error::Error>> {
    let cfg = config(c);
    let (wal, _) = spawn_wal(s.wal.clone(), cfg.clone(), RestartPolicy::default()).await?;
    wal.last_entry_id_overall().await?;
    s.counting.reset();
    let payload = Bytes::from(vec![0xa5u8; c.entry_bytes]);
    let budget = Arc::new(AtomicU64::new(c.appends.unwrap_or(u64::MAX)));
    let stop = Arc::new(AtomicBool::new(false));
    // Latencies go to a few shared histograms: one per task would cost more memory than
    // the WAL itself at thousands of appenders.
    let shards: Arc<Vec<std::sync::Mutex<Histogram<u64>>>> = Arc::new(
        (0..16)
            .map(|_| {
                Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).map(std::sync::Mutex::new)
            })
            .collect::<Result<_, _>>()?,
    );
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(c.appenders);
    for a in 0..c.appenders {
        let wal = wal.clone();
        let payload = payload.clone();
        let budget = budget.clone();
        let stop = stop.clone();
        let shards = shards.clone();
        let (regions, per) = (c.regions.max(1), c.entries_per_append.max(1));
        let lag = c.obsolete_lag;
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut k = a as u64;
            while !stop.load(Ordering::Relaxed)
                && budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                    .is_ok()
            {
                let region = k % regions;
                k += 7919;
                let t = Instant::now();
                match wal.append(region, vec![payload.clone(); per]).await {
                    Ok(receipt) => {
                        ok += 1;
                        let sequence = receipt.sequence;
                        if lag > 0 && sequence > lag {
                            let behind = object_store_wal::entry_id(sequence - lag, 0) - 1;
                            let _ = wal.obsolete(region, behind).await;
                        }
                        if let Some(h) = shards.get(a % shards.len()) {
                            let us = t.elapsed().as_micros().max(1) as u64;
                            let _ = h.lock().unwrap_or_else(|p| p.into_inner()).record(us);
                        }
                    }
                    Err(_) => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    let deadline = (c.appends.is_none()).then(|| started + Duration::from_secs_f64(c.seconds));
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::select! {
            _ = ticker.tick() => {
                if let Ok(st) = wal.stats().await {
                    eprintln!("bench write: {:.0}s appends {} objects {}", started.elapsed().as_secs_f64(), st.appends, st.objects);
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop.store(true, Ordering::Relaxed);
        }
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let (mut ok, mut failed) = (0u64, 0u64);
    for t in tasks {
        let (o, f) = t.await?;
        ok += o;
        failed += f;
    }
    for h in shards.iter() {
        hist.add(&*h.lock().unwrap_or_else(|p| p.into_inner()))?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = wal.stats().await?;
    let counts = s.counting.counts();
    let puts = counts.puts.load(Ordering::Relaxed);
    let put_bytes = counts.put_bytes.load(Ordering::Relaxed);
    let mib = (ok * c.entries_per_append as u64 * c.entry_bytes as u64) as f64 / MIB;
    let mut line = json!({
        "workload": "write",
        "store": c.store,
        "put_latency_ms": c.put_latency_ms,
        "regions": c.regions,
        "entry_bytes": c.entry_bytes,
        "entries_per_append": c.entries_per_append,
        "appenders": c.appenders,
        "min_object_interval_ms": cfg.min_object_interval.as_millis() as u64,
        "max_in_flight": cfg.max_in_flight,
        "max_batch_bytes": cfg.max_batch_bytes,
        "max_pending_bytes": cfg.max_pending_bytes,
        "seconds": round2(elapsed),
        "appends": ok,
        "failed": failed,
        "appends_per_s": (ok as f64 / elapsed).round(),
        "mib_per_s": round2(mib / elapsed),
        "p50_ms": ms(&hist, 0.5),
        "p99_ms": ms(&hist, 0.99),
        "p999_ms": ms(&hist, 0.999),
        "max_ms": round2(hist.max() as f64 / 1000.0),
        "objects": stats.objects,
        "puts": puts,
        "put_bytes": put_bytes,
        "puts_per_mib": if put_bytes > 0 { (puts as f64 / (put_bytes as f64 / MIB) * 1000.0).round() / 1000.0 } else { 0.0 },
        "objects_per_s": round2(stats.objects as f64 / elapsed),
        "peak_rss_mib": round2(peak_rss_mib()),
        "rss_bound_mib": round2((cfg.max_pending_bytes + cfg.max_in_flight as u64 * cfg.max_batch_bytes) as f64 / MIB + 64.0),
    });
    if c.obsolete_lag > 0 {
        // Let the reclaimer catch up with the last floor, then time a fresh open.
        let floor = stats.floor;
        let settle = Instant::now();
        while wal.stats().await?.reclaimed_below < floor
            && settle.elapsed() < cfg.reclaim_grace + Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after = wal.stats().await?;
        s.counting.reset();
        let t = Instant::now();
        let ro = ObjectStoreLogStore::open_read_only(s.wal.clone(), cfg.clone()).await?;
        line["obsolete_lag"] = json!(c.obsolete_lag);
        line["floor"] = json!(after.floor);
        line["reclaimed_below"] = json!(after.reclaimed_below);
        line["deleted"] = json!(after.deleted);
        line["listed_keys_after"] = json!(s.counting.counts().listed_keys.load(Ordering::Relaxed));
        line["live_objects_after"] = json!(ro.report().objects.len());
        line["recovery_ms_after"] = json!(round2(t.elapsed().as_secs_f64() * 1000.0));
        line["recovery_gets_after"] = json!(s.counting.counts().gets.load(Ordering::Relaxed));
    }
    if c.idle_seconds > 0.0 {
        s.counting.reset();
        tokio::time::sleep(Duration::from_secs_f64(c.idle_seconds)).await;
        line["idle_seconds"] = json!(c.idle_seconds);
        line["idle_requests"] = json!(s.counting.counts().requests());
    }
    Ok(WriteResult {
        line,
        mib_per_s: mib / elapsed,
        wal,
    })
}

/// The ceiling: the same volume sealed and created through the core, `max_in_flight` at
/// once, with no actors and no waiting callers.
async fn limit(
    c: &Common,
    s: &Stores,
) -> Result<(serde_json::Value, f64), Box<dyn std::error::Error>> {
    let cfg = config(c);
    let io = WalIo::new(
        s.wal.clone(),
        &format!("{}-limit", c.prefix),
        cfg.whole_read_threshold,
    )?;
    let opened = open_instance(&io, &cfg).await?;
    let mut epoch = opened.epoch;
    s.counting.reset();
    let payload = Bytes::from(vec![0xa5u8; c.entry_bytes]);
    let per = c.entries_per_append.max(1);
    let total = c.appends;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(c.seconds);
    let mut appended = 0u64;
    let mut sealed = Vec::new();
    let mut batch = Batch::new(cfg.batch_limits());
    let mut k = 0u64;
    let mut mib = 0.0;
    let mut objects = 0u64;
    loop {
        let done = match total {
            Some(t) => appended >= t,
            None => Instant::now() >= deadline,
        };
        if done {
            break;
        }
        // Seal `max_in_flight` objects, then create them at once.
        while sealed.len() < cfg.max_in_flight && total.is_none_or(|t| appended < t) {
            let region = k % c.regions.max(1);
            k += 7919;
            match batch.admit(vec![(region, vec![payload.clone(); per])]) {
                Ok(_) => appended += 1,
                Err(_) => sealed.push(epoch.seal(&mut batch)?),
            }
        }
        if sealed.len() < cfg.max_in_flight && !batch.is_empty() {
            sealed.push(epoch.seal(&mut batch)?);
        }
        let round: Vec<_> = std::mem::take(&mut sealed);
        let outcomes: Vec<PersistOutcome> = stream::iter(round.iter())
            .map(|o| persist(&io, &o.encoded, &cfg.retry))
            .buffered(cfg.max_in_flight)
            .collect()
            .await;
        for (o, outcome) in round.iter().zip(outcomes) {
            if !matches!(outcome, PersistOutcome::Durable { .. }) {
                return Err(
                    format!("limit: object {} not durable: {outcome:?}", o.sequence()).into(),
                );
            }
            mib += o.payload_bytes as f64 / MIB;
            objects += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let counts = s.counting.counts();
    let line = json!({
        "workload": "limit",
        "store": c.store,
        "put_latency_ms": c.put_latency_ms,
        "entry_bytes": c.entry_bytes,
        "entries_per_append": per,
        "max_in_flight": cfg.max_in_flight,
        "max_batch_bytes": cfg.max_batch_bytes,
        "seconds": round2(elapsed),
        "appends": appended,
        "appends_per_s": (appended as f64 / elapsed).round(),
        "mib_per_s": round2(mib / elapsed),
        "objects": objects,
        "puts": counts.puts.load(Ordering::Relaxed),
        "peak_rss_mib": round2(peak_rss_mib()),
    });
    Ok((line, mib / elapsed))
}

async fn recover(c: &Common, s: &Stores) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let cfg = config(c);
    // Build the prefix on the base store, without latency: one small object per sequence.
    let io = WalIo::new(s.base.clone(), &cfg.prefix, cfg.whole_read_threshold)?;
    let opened = open_instance(&io, &cfg).await?;
    let mut epoch = opened.epoch;
    let payload = Bytes::from(vec![0x5au8; c.entry_bytes.min(4096)]);
    let build_started = Instant::now();
    let mut sealed = Vec::new();
    for i in 0..c.objects.saturating_sub(1) {
        let mut batch = Batch::new(cfg.batch_limits());
        for r in 0..4u64 {
            let _ = batch.admit(vec![(
                (i * 4 + r) % c.regions.max(1),
                vec![payload.clone()],
            )]);
        }
        sealed.push(epoch.seal(&mut batch)?);
    }
    let outcomes: Vec<PersistOutcome> = stream::iter(sealed.iter())
        .map(|o| persist(&io, &o.encoded, &cfg.retry))
        .buffer_unordered(64)
        .collect()
        .await;
    if let Some(bad) = outcomes
        .iter()
        .find(|o| !matches!(o, PersistOutcome::Durable { .. }))
    {
        return Err(format!("recover: building the prefix failed: {bad:?}").into());
    }
    eprintln!(
        "bench recover: built {} objects in {:.1}s",
        c.objects,
        build_started.elapsed().as_secs_f64()
    );
    s.counting.reset();
    let started = Instant::now();
    let wal = ObjectStoreLogStore::open(s.wal.clone(), cfg.clone()).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let counts = s.counting.counts();
    let gets = counts.gets.load(Ordering::Relaxed);
    let listed = wal.report().objects.len() as u64;
    let ideal = listed as f64 * c.get_latency_ms as f64 / cfg.recovery_concurrency as f64;
    Ok(json!({
        "workload": "recover",
        "store": c.store,
        "get_latency_ms": c.get_latency_ms,
        "recovery_concurrency": cfg.recovery_concurrency,
        "objects": listed,
        "recovery_ms": round2(elapsed * 1000.0),
        "ms_per_object": round2(elapsed * 1000.0 / listed.max(1) as f64),
        "ideal_ms": round2(ideal),
        "ratio_to_ideal": if ideal > 0.0 { round2(elapsed * 1000.0 / ideal) } else { 0.0 },
        "gets": gets,
        "gets_per_object": round2(gets as f64 / listed.max(1) as f64),
        "lists": counts.lists.load(Ordering::Relaxed),
        "puts": counts.puts.load(Ordering::Relaxed),
    }))
}

async fn replay(c: &Common, s: &Stores) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let written = write(c, s).await?;
    written.wal.stop().await?;
    eprintln!("bench replay: {}", written.line);
    let (wal, _) = spawn_wal(s.wal.clone(), config(c), RestartPolicy::default()).await?;
    wal.last_entry_id_overall().await?;
    let stats = wal.stats().await?;
    s.counting.reset();
    let started = Instant::now();
    let regions: Vec<(u64, u64)> = (0..c.regions.max(1)).map(|r| (r, 0)).collect();
    let rx = wal.replay(regions).await?;
    let mut entries = 0u64;
    let mut per_region: HashMap<u64, u64> = HashMap::new();
    while let Ok(item) = rx.recv_async().await {
        let e = item?;
        entries += 1;
        let last = per_region.entry(e.region).or_default();
        if e.id <= *last && *last != 0 {
            return Err(format!("replay out of order in region {}", e.region).into());
        }
        *last = e.id;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let counts = s.counting.counts();
    let gets = counts.gets.load(Ordering::Relaxed);
    let data_objects = stats.chain_objects.saturating_sub(2).max(1);
    wal.stop().await?;
    Ok(json!({
        "workload": "replay",
        "store": c.store,
        "get_latency_ms": c.get_latency_ms,
        "regions": c.regions,
        "entries": entries,
        "chain_objects": stats.chain_objects,
        "replay_ms": round2(elapsed * 1000.0),
        "gets": gets,
        "gets_per_object": round2(gets as f64 / data_objects as f64),
        "bytes_read": counts.get_bytes.load(Ordering::Relaxed),
        "entries_per_s": (entries as f64 / elapsed).round(),
    }))
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let result = async {
        match &cli.workload {
            Workload::Write(c) => {
                let s = stores(c)?;
                let r = write(c, &s).await?;
                r.wal.stop().await?;
                println!("{}", r.line);
            }
            Workload::Limit(c) => {
                // Each run on a fresh store, the other's dropped first: a memory store
                // holds everything written, and its size slows the next run.
                let (line, limit_mib) = {
                    let s = stores(c)?;
                    limit(c, &s).await?
                };
                println!("{line}");
                let mut r = {
                    let s = stores(c)?;
                    let r = write(c, &s).await?;
                    r.wal.stop().await?;
                    r
                };
                r.line["ratio_to_limit"] = json!(round2(r.mib_per_s / limit_mib.max(1e-9)));
                println!("{}", r.line);
            }
            Workload::Recover(c) => {
                let s = stores(c)?;
                println!("{}", recover(c, &s).await?);
            }
            Workload::Replay(c) => {
                let s = stores(c)?;
                println!("{}", replay(c, &s).await?);
            }
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    if let Err(e) = result {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}
