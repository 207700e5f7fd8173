//! The main job: a simulated database node.
//!
//! It spawns the WAL (on `./wal-data` by default, or any `--url`), runs `--regions`
//! region actors that append for `--seconds`, each keeping the ids it was acknowledged,
//! then aborts the WAL mid-write (no graceful stop), spawns a fresh one on the same
//! prefix, replays every region and checks that every acknowledged entry came back
//! exactly once, in order, with its id and payload. Progress goes to stderr; the result
//! is one JSON line on stdout; the exit code is non-zero if anything is missing or
//! duplicated.
//!
//! The first `--admitting-regions` regions use the two-stage acknowledgement, as a
//! database region with a memtable would: `append_admitted` gives the entry's id at
//! admission, the region applies it to memory at once and keeps appending, with up to
//! 8 appends awaiting durability; an entry counts as acknowledged (answered to its
//! client, written to the ack log) only once its `durable` future resolves. Every 32
//! entries the region flushes its memtable: it waits on `durable_through` for the last
//! id applied and only then calls `obsolete` up to it. After the crash, an entry such a
//! region flushed may be missing from the replay (it is in the region's flushed state,
//! and the floor may have risen past it); every other acknowledged entry must come
//! back. The run also fails if an id given at admission differs from its receipt's, or
//! if a durability future fails after a barrier above it passed. With `--ack-log`, the
//! watermark is written there (`flushed region id`) before `obsolete` is called, so the
//! crash gate does not count what a region flushed as lost.
//!
//! With `--metrics-addr 127.0.0.1:9464` the node installs a Prometheus exporter
//! (`metrics-exporter-prometheus`) before it spawns the WAL and serves the WAL's
//! metrics there (`curl http://127.0.0.1:9464/metrics`; docs/OPERATIONS.md lists them); both
//! WALs of the run share the prefix, so their counts add up.
//!
//! ```text
//! cargo run --release --example node -- --regions 1000 --seconds 10
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use object_store_wal::transform::{Compression, StaticKeys};
use object_store_wal::{entry_id, store_from_url, AppendReceipt, Config, Error, WalStores};
use object_store_wal_actors::{spawn_wal, PendingReceipt, RestartPolicy, WalHandle};
use ractor::{Actor, ActorProcessingErr, ActorRef};

#[derive(Parser, Debug)]
#[command(about = "Simulated database node: append, crash, recover, check")]
struct Args {
    /// Store URL; default: file://<cwd>/wal-data. Given several times (3 or 5), one log
    /// over that many stores, a quorum of copies (docs/DESIGN.md "One log over several
    /// stores").
    #[arg(long)]
    url: Vec<String>,
    /// WAL prefix.
    #[arg(long, default_value = "node")]
    prefix: String,
    /// Region actors appending concurrently.
    #[arg(long, default_value_t = 1000)]
    regions: u64,
    /// Seconds of appending before the crash.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Payload bytes per entry (at least 16).
    #[arg(long, default_value_t = 256)]
    entry_bytes: usize,
    /// `min_object_interval`, milliseconds (the PUT-rate bound; 0: none).
    #[arg(long, default_value_t = 20)]
    min_object_interval_ms: u64,
    /// Uploads in flight.
    #[arg(long, default_value_t = 4)]
    max_in_flight: usize,
    /// Largest object, bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_batch_bytes: u64,
    /// Append every acknowledged `region id nonce counter` to this file (written at
    /// once, fsynced every 100 ms), for the crash gate; and `flushed region id` once an
    /// admitting region flushed through `id`, before it calls `obsolete`.
    #[arg(long)]
    ack_log: Option<std::path::PathBuf>,
    /// Append until killed: no abort, no recovery check (the crash gate's child).
    #[arg(long)]
    child: bool,
    /// Regions (the first ones) that apply entries at admission and obsolete what they
    /// flushed once the barrier passed (see the module doc).
    #[arg(long, default_value_t = 10)]
    admitting_regions: u64,
    /// Serve the WAL's metrics for Prometheus on this address (e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Segment compression: off, lz4, zstd, zstd:N.
    #[arg(long, default_value = "off", value_parser = |s: &str| s.parse::<Compression>())]
    compression: Compression,
    /// Encrypt every segment with these keys: env:VAR or file:PATH.
    #[arg(long)]
    keys: Option<String>,
}

/// Histogram buckets of the WAL's latencies and durations, in seconds.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the Prometheus exporter on `addr`, inside the running tokio runtime. It must
/// come before the WAL is spawned: the WAL registers its metrics when it opens.
fn serve_metrics(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(SECONDS_BUCKETS)?
        .install()?;
    Ok(())
}

/// Appends an admitting region keeps awaiting durability before it waits for the oldest.
const PIPELINE: usize = 8;
/// Entries an admitting region applies between two flushes.
const FLUSH_EVERY: usize = 32;

/// What each region acknowledged: `(id, counter)` in order, and append latencies; for
/// an admitting region, the watermark it obsoleted (its entries up to there are in its
/// flushed state).
#[derive(Default)]
struct RegionLog {
    acked: Vec<(u64, u64)>,
    latencies_us: Vec<u64>,
    flushed_through: Option<u64>,
}

struct Shared {
    stop: AtomicBool,
    nonce: u64,
    ack_log: Option<AckLog>,
    acked: AtomicU64,
    failed: AtomicU64,
    logs: Mutex<HashMap<u64, RegionLog>>,
    /// Admitting regions: flushes done, barriers that failed, receipts whose ids differ
    /// from the admission's, durability futures that failed below a barrier that passed.
    flushes: AtomicU64,
    barrier_failures: AtomicU64,
    id_mismatches: AtomicU64,
    inconsistent: AtomicU64,
}

struct RegionActor;

struct RegionState {
    region: u64,
    wal: WalHandle,
    entry_bytes: usize,
    counter: u64,
    log: RegionLog,
    shared: Arc<Shared>,
    /// `Some` for a region that applies entries at admission.
    admitting: Option<Admitting>,
}

/// An admitting region's memory: entries applied since the last flush, and appends
/// admitted whose durability it has not seen yet (oldest first).
#[derive(Default)]
struct Admitting {
    memtable: Vec<(u64, u64)>,
    pending: VecDeque<Pending>,
    /// A barrier failed: the region stops flushing (a real node would rebuild the region
    /// from a replay; the failed appends' own futures said which entries).
    flushing_stopped: bool,
}

/// An admitted append awaiting durability.
struct Pending {
    counter: u64,
    started: Instant,
    ids: AppendReceipt,
    durable: PendingReceipt,
}

enum RegionMsg {
    Next,
}

/// Payloads say who wrote them: region, the run's nonce, and a counter.
fn payload(region: u64, nonce: u64, counter: u64, len: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(len.max(24));
    b.put_u64_le(region);
    b.put_u64_le(nonce);
    b.put_u64_le(counter);
    b.resize(len.max(24), (counter % 251) as u8);
    b.freeze()
}

fn counter_of(payload: &[u8]) -> Option<(u64, u64, u64)> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            payload.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    Some((word(0)?, word(8)?, word(16)?))
}

impl RegionState {
    /// The entry is acknowledged: the ack log, the region's log, the counters.
    fn acknowledged(&mut self, id: u64, counter: u64, started: Instant) {
        if let Some(log) = &self.shared.ack_log {
            log.ack(format!(
                "{} {} {} {}\n",
                self.region, id, self.shared.nonce, counter
            ));
        }
        self.log.acked.push((id, counter));
        self.log
            .latencies_us
            .push(started.elapsed().as_micros() as u64);
        self.shared.acked.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the way a region with a memtable does; `false` once fenced.
    async fn append_admitting(&mut self, entry: Bytes, started: Instant) -> bool {
        let admitted = match self.wal.append_admitted(self.region, vec![entry]).await {
            Ok(admitted) => admitted,
            Err(Error::Fenced { .. }) => return false,
            Err(_) => {
                self.shared.failed.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        let Some(a) = self.admitting.as_mut() else {
            return true;
        };
        if let Some(part) = admitted.ids.parts.first() {
            // The id is final: apply the entry to memory now.
            a.memtable.push((part.first_id, self.counter));
        }
        a.pending.push_back(Pending {
            counter: self.counter,
            started,
            ids: admitted.ids,
            durable: admitted.durable,
        });
        while self
            .admitting
            .as_ref()
            .is_some_and(|a| a.pending.len() >= PIPELINE)
        {
            if !self.settle_oldest(false).await {
                return false;
            }
        }
        match self.admitting.as_mut() {
            Some(a) if a.memtable.len() >= FLUSH_EVERY && !a.flushing_stopped => self.flush().await,
            // Nothing is flushed any more: memory stays bounded all the same.
            Some(a) if a.memtable.len() >= FLUSH_EVERY => {
                a.memtable.clear();
                true
            }
            _ => true,
        }
    }

    /// Waits for the oldest admitted append's durability; `after_barrier`: a barrier
    /// above it passed, so it must be durable. `false` once fenced.
    async fn settle_oldest(&mut self, after_barrier: bool) -> bool {
        let Some(p) = self.admitting.as_mut().and_then(|a| a.pending.pop_front()) else {
            return true;
        };
        match p.durable.await {
            Ok(receipt) => {
                if receipt != p.ids {
                    self.shared.id_mismatches.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(part) = receipt.parts.first() {
                    self.acknowledged(part.first_id, p.counter, p.started);
                }
                true
            }
            Err(e) => {
                if after_barrier {
                    self.shared.inconsistent.fetch_add(1, Ordering::Relaxed);
                }
                self.shared.failed.fetch_add(1, Ordering::Relaxed);
                !matches!(e, Error::Fenced { .. })
            }
        }
    }

    /// Flushes the memtable: waits until every id up to the last applied is durable,
    /// then marks them obsolete (they are safe in the region's flushed state).
    async fn flush(&mut self) -> bool {
        let Some(&(last, _)) = self.admitting.as_ref().and_then(|a| a.memtable.last()) else {
            return true;
        };
        match self.wal.durable_through(last).await {
            Ok(()) => {
                // Every append still awaited holds an id up to `last`: all durable.
                while self
                    .admitting
                    .as_ref()
                    .is_some_and(|a| !a.pending.is_empty())
                {
                    if !self.settle_oldest(true).await {
                        return false;
                    }
                }
                // The crash gate learns the watermark before the WAL may drop anything.
                if let Some(log) = &self.shared.ack_log {
                    log.flushed(self.region, last).await;
                }
                if self.wal.obsolete(self.region, last).await.is_ok() {
                    self.log.flushed_through = Some(last);
                    self.shared.flushes.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(Error::Fenced { .. }) => return false,
            Err(_) => {
                // After the simulated crash, every call fails: not the barrier's doing.
                if !self.shared.stop.load(Ordering::Relaxed) {
                    self.shared.barrier_failures.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(a) = self.admitting.as_mut() {
                    a.flushing_stopped = true;
                }
            }
        }
        if let Some(a) = self.admitting.as_mut() {
            a.memtable.clear();
        }
        true
    }
}

impl Actor for RegionActor {
    type Msg = RegionMsg;
    type State = RegionState;
    type Arguments = RegionState;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(RegionMsg::Next)?;
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        _msg: Self::Msg,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if s.shared.stop.load(Ordering::Relaxed) {
            myself.stop(None);
            return Ok(());
        }
        let started = Instant::now();
        let entry = payload(s.region, s.shared.nonce, s.counter, s.entry_bytes);
        if s.admitting.is_some() {
            if !s.append_admitting(entry, started).await {
                myself.stop(None);
                return Ok(());
            }
        } else {
            match s.wal.append(s.region, vec![entry]).await {
                Ok(receipt) => {
                    if let Some(part) = receipt.parts.first() {
                        s.acknowledged(part.first_id, s.counter, started);
                    }
                }
                Err(Error::Fenced { .. }) => {
                    myself.stop(None);
                    return Ok(());
                }
                Err(_) => {
                    s.shared.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        s.counter += 1;
        myself.cast(RegionMsg::Next)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        s: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let log = std::mem::take(&mut s.log);
        s.shared
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.region, log);
        Ok(())
    }
}

/// The ack log: acknowledged ids and flush watermarks, appended to a file by a blocking
/// task, one write per batch of lines (a SIGKILL loses nothing written), fsynced every
/// 100 ms.
#[derive(Clone)]
struct AckLog {
    tx: tokio::sync::mpsc::UnboundedSender<(String, Option<tokio::sync::oneshot::Sender<()>>)>,
}

impl AckLog {
    fn spawn(path: &std::path::Path) -> std::io::Result<AckLog> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(
            String,
            Option<tokio::sync::oneshot::Sender<()>>,
        )>();
        tokio::task::spawn_blocking(move || {
            let mut last_sync = Instant::now();
            while let Some(first) = rx.blocking_recv() {
                let mut batch = String::new();
                let mut written = Vec::new();
                let mut next = Some(first);
                while let Some((line, done)) = next {
                    batch.push_str(&line);
                    written.extend(done);
                    next = rx.try_recv().ok();
                }
                if file.write_all(batch.as_bytes()).is_err() {
                    return;
                }
                for done in written {
                    let _ = done.send(());
                }
                if last_sync.elapsed() >= Duration::from_millis(100) {
                    let _ = file.sync_data();
                    last_sync = Instant::now();
                }
            }
            let _ = file.sync_data();
        });
        Ok(AckLog { tx })
    }

    /// Logs an acknowledged entry's line.
    fn ack(&self, line: String) {
        let _ = self.tx.send((line, None));
    }

    /// Logs that `region` flushed every entry up to `id`; returns once it is written.
    async fn flushed(&self, region: u64, id: u64) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self
            .tx
            .send((format!("flushed {region} {id}\n"), Some(done)))
            .is_ok()
        {
            let _ = written.await;
        }
    }
}

fn config(args: &Args) -> Config {
    // The node starts its own WAL on first run: a new prefix is expected here.
    let mut c = Config::new(args.prefix.clone()).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(args.min_object_interval_ms);
    c.max_in_flight = args.max_in_flight;
    c.max_batch_bytes = args.max_batch_bytes;
    c.max_entry_bytes = c.max_entry_bytes.min(args.max_batch_bytes / 2);
    c = c.with_compression(args.compression);
    if let Some(source) = &args.keys {
        match StaticKeys::from_source(source) {
            Ok(keys) => c = c.with_encryption_keys(Arc::new(keys)),
            Err(e) => {
                eprintln!("node: --keys {source}: {e}");
                std::process::exit(2);
            }
        }
    }
    c
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default() as f64 / 1000.0
}

#[tokio::main]
async fn main() {
    match run(Args::parse()).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("node: {e}");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let urls = match args.url.as_slice() {
        [] => vec![format!(
            "file://{}/wal-data",
            std::env::current_dir()?.display()
        )],
        urls => urls.to_vec(),
    };
    let url = urls.join(" ");
    let stores = WalStores::quorum(
        urls.iter()
            .map(|u| store_from_url(u))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    if let Some(addr) = args.metrics_addr {
        serve_metrics(addr)?;
        eprintln!("node: metrics on http://{addr}/metrics");
    }
    let (wal, _) = spawn_wal(stores.clone(), config(&args), RestartPolicy::default()).await?;
    // Wait for recovery; this run's entries all follow its opening object.
    wal.ready().await?;
    let first_epoch = wal.stats().await?.epoch;
    let run_start_id = entry_id(first_epoch.saturating_sub(1), 0);
    eprintln!(
        "node: WAL open at {url} prefix {} (epoch {first_epoch})",
        args.prefix
    );

    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let ack_log = match &args.ack_log {
        Some(path) => Some(AckLog::spawn(path)?),
        None => None,
    };
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        nonce,
        ack_log,
        acked: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        logs: Mutex::new(HashMap::new()),
        flushes: AtomicU64::new(0),
        barrier_failures: AtomicU64::new(0),
        id_mismatches: AtomicU64::new(0),
        inconsistent: AtomicU64::new(0),
    });
    let started = Instant::now();
    let mut joins = Vec::new();
    for region in 1..=args.regions {
        let state = RegionState {
            region,
            wal: wal.clone(),
            entry_bytes: args.entry_bytes,
            counter: 0,
            log: RegionLog::default(),
            shared: shared.clone(),
            admitting: (region <= args.admitting_regions).then(Admitting::default),
        };
        let (_, join) = Actor::spawn(None, RegionActor, state).await?;
        joins.push(join);
    }
    if args.child {
        // Append until killed.
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            eprintln!(
                "node: {:.1}s acknowledged {} failed {}",
                started.elapsed().as_secs_f64(),
                shared.acked.load(Ordering::Relaxed),
                shared.failed.load(Ordering::Relaxed)
            );
        }
    }
    let deadline = started + Duration::from_secs_f64(args.seconds);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1).min(deadline - Instant::now())).await;
        eprintln!(
            "node: {:.1}s acknowledged {} failed {}",
            started.elapsed().as_secs_f64(),
            shared.acked.load(Ordering::Relaxed),
            shared.failed.load(Ordering::Relaxed)
        );
    }
    let stats = wal.stats().await?;
    let elapsed = started.elapsed().as_secs_f64();
    // The crash: no graceful stop, uploads in flight may still land.
    shared.stop.store(true, Ordering::Relaxed);
    wal.abort();
    for j in joins {
        j.await?;
    }
    eprintln!("node: aborted the WAL mid-write; recovering");

    let recovery_started = Instant::now();
    let (wal2, _) = spawn_wal(stores.clone(), config(&args), RestartPolicy::default()).await?;
    wal2.ready().await?;
    let recovery_ms = recovery_started.elapsed().as_secs_f64() * 1000.0;

    let logs = std::mem::take(&mut *shared.logs.lock().unwrap_or_else(|p| p.into_inner()));
    let regions: Vec<(u64, u64)> = (1..=args.regions).map(|r| (r, run_start_id)).collect();
    // Replay: every region from the run's first id, after recovery, until the last entry.
    let replay_started = Instant::now();
    let replay = wal2.replay(regions).await?;
    let mut replayed: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    let mut replayed_total = 0u64;
    let mut bad_payload = 0u64;
    while let Ok(item) = replay.recv_async().await {
        let entry = item?;
        replayed_total += 1;
        match counter_of(&entry.payload) {
            Some((region, n, counter)) if region == entry.region && n == nonce => replayed
                .entry(entry.region)
                .or_default()
                .push((entry.id, counter)),
            // Entries of earlier runs on the same prefix.
            Some((region, _, _)) if region == entry.region => {}
            _ => bad_payload += 1,
        }
    }
    let replay_ms = replay_started.elapsed().as_secs_f64() * 1000.0;
    wal2.stop().await?;

    let (mut acknowledged, mut missing, mut duplicated) = (0u64, 0u64, 0u64);
    let mut flushed_not_replayed = 0u64;
    let mut latencies: Vec<u64> = Vec::new();
    for (region, log) in &logs {
        acknowledged += log.acked.len() as u64;
        latencies.extend(&log.latencies_us);
        let got = replayed.get(region).map(Vec::as_slice).unwrap_or_default();
        // Ids strictly increase in a replay; a repeat or a step back is a duplicate.
        duplicated += got.windows(2).filter(|w| w[1].0 <= w[0].0).count() as u64;
        let by_id: HashMap<u64, u64> = got.iter().copied().collect();
        for (id, counter) in &log.acked {
            match by_id.get(id) {
                Some(c) if c == counter => {}
                // Flushed by its region, then obsoleted: it may be gone from the log.
                None if log.flushed_through.is_some_and(|f| *id <= f) => flushed_not_replayed += 1,
                _ => missing += 1,
            }
        }
    }
    let id_mismatches = shared.id_mismatches.load(Ordering::Relaxed);
    let inconsistent = shared.inconsistent.load(Ordering::Relaxed);
    latencies.sort_unstable();
    let mb = (acknowledged * args.entry_bytes as u64) as f64 / (1024.0 * 1024.0);
    println!(
        "{}",
        serde_json::json!({
            "acknowledged": acknowledged,
            "replayed": replayed_total,
            "missing": missing,
            "duplicated": duplicated,
            "bad_payload": bad_payload,
            "admitting_regions": args.admitting_regions.min(args.regions),
            "flushes": shared.flushes.load(Ordering::Relaxed),
            "flushed_not_replayed": flushed_not_replayed,
            "barrier_failures": shared.barrier_failures.load(Ordering::Relaxed),
            "id_mismatches": id_mismatches,
            "inconsistent": inconsistent,
            "objects": stats.objects,
            "entries_per_s": (acknowledged as f64 / elapsed).round(),
            "mb_per_s": (mb / elapsed * 100.0).round() / 100.0,
            "p50_ms": percentile(&latencies, 0.50),
            "p99_ms": percentile(&latencies, 0.99),
            "recovery_ms": (recovery_ms * 10.0).round() / 10.0,
            "replay_ms": (replay_ms * 10.0).round() / 10.0,
        })
    );
    Ok(missing == 0
        && duplicated == 0
        && bad_payload == 0
        && id_mismatches == 0
        && inconsistent == 0)
}
