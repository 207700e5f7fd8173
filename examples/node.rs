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
//! ```text
//! cargo run --release --example node -- --regions 1000 --seconds 10
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use object_store_wal::{entry_id, io::store_from_url, Config, Error};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use ractor::{Actor, ActorProcessingErr, ActorRef};

#[derive(Parser, Debug)]
#[command(about = "Simulated database node: append, crash, recover, check")]
struct Args {
    /// Store URL; default: file://<cwd>/wal-data.
    #[arg(long)]
    url: Option<String>,
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
    /// once, fsynced every 100 ms), for the crash gate.
    #[arg(long)]
    ack_log: Option<std::path::PathBuf>,
    /// Append until killed: no abort, no recovery check (the crash gate's child).
    #[arg(long)]
    child: bool,
}

/// What each region acknowledged: `(id, counter)` in order, and append latencies.
#[derive(Default)]
struct RegionLog {
    acked: Vec<(u64, u64)>,
    latencies_us: Vec<u64>,
}

struct Shared {
    stop: AtomicBool,
    nonce: u64,
    ack_log: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    acked: AtomicU64,
    failed: AtomicU64,
    logs: Mutex<HashMap<u64, RegionLog>>,
}

struct RegionActor;

struct RegionState {
    region: u64,
    wal: WalHandle,
    entry_bytes: usize,
    counter: u64,
    log: RegionLog,
    shared: Arc<Shared>,
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
        match s.wal.append(s.region, vec![entry]).await {
            Ok(receipt) => {
                if let Some(part) = receipt.parts.first() {
                    if let Some(log) = &s.shared.ack_log {
                        let line = format!(
                            "{} {} {} {}\n",
                            s.region, part.first_id, s.shared.nonce, s.counter
                        );
                        let _ = log.send(line);
                    }
                    s.log.acked.push((part.first_id, s.counter));
                    s.log
                        .latencies_us
                        .push(started.elapsed().as_micros() as u64);
                    s.shared.acked.fetch_add(1, Ordering::Relaxed);
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

/// Writes acknowledged ids to `path` as they come (one write per batch, so a SIGKILL
/// loses nothing written), fsyncing every 100 ms.
fn spawn_ack_log(
    path: &std::path::Path,
) -> std::io::Result<tokio::sync::mpsc::UnboundedSender<String>> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::task::spawn_blocking(move || {
        let mut last_sync = Instant::now();
        while let Some(first) = rx.blocking_recv() {
            let mut batch = first;
            while let Ok(more) = rx.try_recv() {
                batch.push_str(&more);
            }
            if file.write_all(batch.as_bytes()).is_err() {
                return;
            }
            if last_sync.elapsed() >= Duration::from_millis(100) {
                let _ = file.sync_data();
                last_sync = Instant::now();
            }
        }
        let _ = file.sync_data();
    });
    Ok(tx)
}

fn config(args: &Args) -> Config {
    let mut c = Config::new(args.prefix.clone());
    c.min_object_interval = Duration::from_millis(args.min_object_interval_ms);
    c.max_in_flight = args.max_in_flight;
    c.max_batch_bytes = args.max_batch_bytes;
    c.max_entry_bytes = c.max_entry_bytes.min(args.max_batch_bytes / 2);
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
    let url = match &args.url {
        Some(u) => u.clone(),
        None => format!("file://{}/wal-data", std::env::current_dir()?.display()),
    };
    let store = store_from_url(&url)?;
    let (wal, _) = spawn_wal(store.clone(), config(&args), RestartPolicy::default()).await?;
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
        Some(path) => Some(spawn_ack_log(path)?),
        None => None,
    };
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        nonce,
        ack_log,
        acked: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        logs: Mutex::new(HashMap::new()),
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
    wal.abort();
    shared.stop.store(true, Ordering::Relaxed);
    for j in joins {
        j.await?;
    }
    eprintln!("node: aborted the WAL mid-write; recovering");

    let recovery_started = Instant::now();
    let (wal2, _) = spawn_wal(store, config(&args), RestartPolicy::default()).await?;
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
    let mut latencies: Vec<u64> = Vec::new();
    for (region, log) in &logs {
        acknowledged += log.acked.len() as u64;
        latencies.extend(&log.latencies_us);
        let got = replayed.get(region).map(Vec::as_slice).unwrap_or_default();
        // Ids strictly increase in a replay; a repeat or a step back is a duplicate.
        duplicated += got.windows(2).filter(|w| w[1].0 <= w[0].0).count() as u64;
        let by_id: HashMap<u64, u64> = got.iter().copied().collect();
        for (id, counter) in &log.acked {
            if by_id.get(id) != Some(counter) {
                missing += 1;
            }
        }
    }
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
            "objects": stats.objects,
            "entries_per_s": (acknowledged as f64 / elapsed).round(),
            "mb_per_s": (mb / elapsed * 100.0).round() / 100.0,
            "p50_ms": percentile(&latencies, 0.50),
            "p99_ms": percentile(&latencies, 0.99),
            "recovery_ms": (recovery_ms * 10.0).round() / 10.0,
            "replay_ms": (replay_ms * 10.0).round() / 10.0,
        })
    );
    Ok(missing == 0 && duplicated == 0 && bad_payload == 0)
}
