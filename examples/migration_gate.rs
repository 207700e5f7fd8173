//! The crash gate's migration run (docs/DESIGN.md "Regions moving between nodes"): two
//! nodes in one child process, each its own WAL prefix in one local directory, append
//! to their regions while a coordinator moves regions between them back and forth; the
//! gate kills the child with SIGKILL at random moments (some of them between a release
//! and the route's switch: the JSON line counts the moves resumed), and starts it again
//! on the same directory. After the last cycle it reads every
//! region's pieces back and checks that every acknowledged entry is there exactly once,
//! with its payload, and that ids only rise along each region's history.
//!
//! The child records, in an ack log written line by line (a SIGKILL loses no line the
//! child wrote): `ack region id nonce n` for each acknowledged append, and `move region
//! from to through above` for each completed move (`through`: the source's last id of
//! the region, `0` for none; `above`: what the target acquired above), written before
//! the route switches. A restarted child takes its routes from those lines and first
//! completes every move a kill cut short: a region its owner released (the owner's
//! `holdings`) is acquired by the other node above the release's `acquire_above`.
//!
//! ```text
//! cargo build --example migration_gate
//! target/debug/examples/migration_gate --cycles 10
//! ```

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use object_store::ObjectStore;
use object_store_wal::testing::{with_latency, SplitMix64};
use object_store_wal::{store_from_url, Config, Durability, Error, ObjectStoreLogStore, Released};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};

#[derive(Parser, Debug)]
#[command(
    about = "SIGKILL two nodes moving regions between them; check nothing acknowledged is lost"
)]
struct Args {
    /// Crash cycles.
    #[arg(long, default_value_t = 10)]
    cycles: u32,
    /// Regions.
    #[arg(long, default_value_t = 20)]
    regions: u64,
    /// Milliseconds between moves.
    #[arg(long, default_value_t = 5)]
    move_every_ms: u64,
    /// The child's store latency per PUT, ms (a move then spans its creates, so kills
    /// land mid-migration).
    #[arg(long, default_value_t = 10)]
    put_latency_ms: u64,
    /// Earliest kill, ms after the child starts.
    #[arg(long, default_value_t = 400)]
    min_ms: u64,
    /// Latest kill, ms after the child starts.
    #[arg(long, default_value_t = 1500)]
    max_ms: u64,
    /// Seed of the kill times and the moves (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Run as the child (the gate passes it).
    #[arg(long)]
    child: bool,
    /// The store directory (the child's; the gate makes one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The ack log (the child's).
    #[arg(long)]
    ack_log: Option<PathBuf>,
}

const NODES: usize = 2;

fn config(node: usize) -> Config {
    let mut c = Config::new(format!("node-{node}")).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(10);
    c
}

fn store(dir: &Path) -> Result<Arc<dyn ObjectStore>, Error> {
    store_from_url(&format!("file://{}", dir.display()))
}

/// One move as the ack log records it.
#[derive(Debug, Clone, Copy)]
struct Move {
    region: u64,
    to: usize,
    through: Option<u64>,
    above: u64,
}

/// What the ack log says: the acknowledged appends `(region, id) -> (nonce, n)`, the
/// completed moves in order, and how many moves a kill cut short were resumed.
type Parsed = (HashMap<(u64, u64), (u64, u64)>, Vec<Move>, u64);

fn parse(path: &Path) -> std::io::Result<Parsed> {
    let mut acks = HashMap::new();
    let mut moves = Vec::new();
    let mut resumed = 0;
    let Ok(file) = std::fs::File::open(path) else {
        return Ok((acks, moves, resumed));
    };
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let kind = words.next();
        let fields: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
        // A line cut by the kill has fewer fields: it was never fully recorded.
        match (kind, fields.as_slice()) {
            (Some("ack"), &[region, id, nonce, n]) => {
                acks.insert((region, id), (nonce, n));
            }
            (Some("move"), &[region, _from, to, through, above]) => moves.push(Move {
                region,
                to: to as usize,
                through: (through != 0).then_some(through),
                above,
            }),
            (Some("resumed"), _) => resumed += 1,
            _ => {}
        }
    }
    Ok((acks, moves, resumed))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let result = if args.child {
        child(args).await.map(|()| true)
    } else {
        gate(args).await
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("migration_gate: {e}");
            std::process::exit(2);
        }
    }
}

struct Child {
    nodes: Vec<WalHandle>,
    routes: Vec<AtomicU64>,
    /// Each region's current piece starts after this id (its last move's `above`).
    after: Vec<AtomicU64>,
    log: Mutex<std::fs::File>,
    nonce: u64,
}

impl Child {
    fn record(&self, line: String) {
        // One write per line: a SIGKILL never leaves half of a line the child wrote
        // (and a cut line is ignored by the parser anyway).
        let mut log = self.log.lock().expect("the log");
        let _ = log.write_all(line.as_bytes());
    }

    fn owner(&self, region: u64) -> usize {
        self.routes[region as usize].load(Ordering::SeqCst) as usize
    }

    /// Appends to `region` until the child is killed.
    async fn frontend(self: Arc<Self>, region: u64) {
        let mut n = 0u64;
        loop {
            n += 1;
            let payload = Bytes::from(format!("{region} {} {n}", self.nonce));
            loop {
                let owner = self.owner(region);
                match self.nodes[owner]
                    .append(region, vec![payload.clone()])
                    .await
                {
                    Ok(receipt) => {
                        let id = receipt.parts[0].first_id;
                        self.record(format!("ack {region} {id} {} {n}\n", self.nonce));
                        break;
                    }
                    // Moving: wait for the route to switch.
                    Err(Error::RegionReleased { .. }) => {
                        while self.owner(region) == owner {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    // Never retried: it may land (and is then not counted).
                    Err(e) if e.durability() == Durability::MayBeDurable => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        }
    }

    /// Acquires `region` at `to` above what `released` says, records the move, then
    /// switches the route.
    async fn complete(&self, region: u64, from: usize, to: usize, released: Released) {
        let after = self.after[region as usize].load(Ordering::SeqCst);
        let above = released.acquire_above.max(after);
        loop {
            match self.nodes[to].acquire(region, above).await {
                Ok(()) => break,
                Err(e) if e.is_retryable() || e.durability() == Durability::MayBeDurable => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("acquire of region {region} at node {to}: {e}"),
            }
        }
        let through = released.last_id.unwrap_or(0);
        self.record(format!("move {region} {from} {to} {through} {above}\n"));
        self.after[region as usize].store(above, Ordering::SeqCst);
        self.routes[region as usize].store(to as u64, Ordering::SeqCst);
    }

    async fn migrate(&self, region: u64) {
        let from = self.owner(region);
        let released = loop {
            match self.nodes[from].release(region).await {
                Ok(released) => break released,
                Err(Error::RegionReleased { released, .. }) => break released,
                Err(e) if e.is_retryable() || e.durability() == Durability::MayBeDurable => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("release of region {region} at node {from}: {e}"),
            }
        };
        self.complete(region, from, (from + 1) % NODES, released)
            .await;
    }
}

async fn child(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let dir = args.dir.clone().ok_or("--dir")?;
    let log_path = args.ack_log.clone().ok_or("--ack-log")?;
    let (_, moves, _) = parse(&log_path)?;
    let latency = Duration::from_millis(args.put_latency_ms);
    let store = with_latency(store(&dir)?, latency, latency / 2);
    let mut nodes = Vec::new();
    for node in 0..NODES {
        let (wal, _) = spawn_wal(store.clone(), config(node), RestartPolicy::default()).await?;
        wal.ready().await?;
        nodes.push(wal);
    }
    let routes: Vec<AtomicU64> = (0..args.regions)
        .map(|r| AtomicU64::new(r % NODES as u64))
        .collect();
    let after: Vec<AtomicU64> = (0..args.regions).map(|_| AtomicU64::new(0)).collect();
    for m in &moves {
        routes[m.region as usize].store(m.to as u64, Ordering::SeqCst);
        after[m.region as usize].store(m.above, Ordering::SeqCst);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64
        ^ u64::from(std::process::id());
    let child = Arc::new(Child {
        nodes,
        routes,
        after,
        log: Mutex::new(log),
        nonce: nonce >> 1,
    });
    // Moves a kill cut short: the owner released the region, the route did not switch.
    for node in 0..NODES {
        for held in child.nodes[node].holdings().await? {
            if let Some(released) = held.released {
                if held.region < args.regions && child.owner(held.region) == node {
                    child.record(format!("resumed {}\n", held.region));
                    child
                        .complete(held.region, node, (node + 1) % NODES, released)
                        .await;
                }
            }
        }
    }
    for region in 0..args.regions {
        tokio::spawn(child.clone().frontend(region));
    }
    let mut rng = SplitMix64::new(args.seed.unwrap_or(nonce));
    loop {
        tokio::time::sleep(Duration::from_millis(args.move_every_ms)).await;
        child.migrate(rng.below(args.regions)).await;
    }
}

async fn gate(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let me = std::env::current_exe()?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let work =
        std::env::temp_dir().join(format!("osw-migration-gate-{}-{stamp}", std::process::id()));
    let dir = work.join("store");
    std::fs::create_dir_all(&dir)?;
    let ack_log = work.join("acks.log");
    let seed = args.seed.unwrap_or(stamp);
    let mut rng = SplitMix64::new(seed);
    eprintln!("migration_gate: dir {} seed {seed}", dir.display());
    let started = Instant::now();
    let span = args.max_ms.saturating_sub(args.min_ms).max(1);
    for cycle in 1..=args.cycles {
        let kill_after = Duration::from_millis(args.min_ms + rng.below(span));
        let mut child = Command::new(&me)
            .arg("--child")
            .arg("--dir")
            .arg(&dir)
            .arg("--ack-log")
            .arg(&ack_log)
            .args(["--regions", &args.regions.to_string()])
            .args(["--move-every-ms", &args.move_every_ms.to_string()])
            .args(["--put-latency-ms", &args.put_latency_ms.to_string()])
            .args(["--seed", &rng.next_u64().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        tokio::time::sleep(kill_after).await;
        if let Some(status) = child.try_wait()? {
            return Err(format!("cycle {cycle}: the child exited by itself ({status})").into());
        }
        // SIGKILL: no destructor, no flush, no graceful stop.
        child.kill()?;
        child.wait()?;
        eprintln!(
            "migration_gate: cycle {cycle} killed after {} ms",
            kill_after.as_millis()
        );
    }

    let (acks, moves, resumed) = parse(&ack_log)?;
    let store = store(&dir)?;
    let mut logs = Vec::new();
    for node in 0..NODES {
        logs.push(ObjectStoreLogStore::open_read_only(store.clone(), config(node)).await?);
    }
    // Each region's pieces: (node, ids after, ids through).
    let mut pieces: HashMap<u64, Vec<(usize, u64, Option<u64>)>> = (0..args.regions)
        .map(|r| (r, vec![((r % NODES as u64) as usize, 0, None)]))
        .collect();
    for m in &moves {
        let list = pieces.entry(m.region).or_default();
        if let Some(current) = list.last_mut() {
            current.2 = Some(m.through.unwrap_or(current.1));
        }
        list.push((m.to, m.above, None));
    }
    let (mut missing, mut duplicated, mut wrong_payload, mut out_of_order) = (0u64, 0, 0, 0);
    let mut read_back = 0u64;
    let mut seen: HashMap<(u64, u64), u32> = HashMap::new();
    for region in 0..args.regions {
        let mut previous = None;
        for &(node, after, through) in pieces.get(&region).into_iter().flatten() {
            let mut entries = logs[node].read(region, after + 1);
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                if through.is_some_and(|t| entry.id > t) {
                    break;
                }
                read_back += 1;
                if previous.is_some_and(|p| entry.id <= p) {
                    out_of_order += 1;
                }
                previous = Some(entry.id);
                *seen.entry((region, entry.id)).or_default() += 1;
                if let Some((nonce, n)) = acks.get(&(region, entry.id)) {
                    if entry.payload[..] != *format!("{region} {nonce} {n}").as_bytes() {
                        wrong_payload += 1;
                    }
                }
            }
        }
    }
    for (region, id) in acks.keys() {
        match seen.get(&(*region, *id)) {
            None => {
                eprintln!("migration_gate: region {region} id {id} acknowledged but not read back");
                missing += 1;
            }
            Some(n) if *n > 1 => duplicated += 1,
            _ => {}
        }
    }
    let ok = missing == 0
        && duplicated == 0
        && wrong_payload == 0
        && out_of_order == 0
        && !acks.is_empty()
        && !moves.is_empty();
    println!(
        "{}",
        serde_json::json!({
            "cycles": args.cycles,
            "regions": args.regions,
            "acknowledged": acks.len(),
            "moves": moves.len(),
            "moves_resumed_after_a_kill": resumed,
            "read_back": read_back,
            "missing": missing,
            "duplicated": duplicated,
            "wrong_payload": wrong_payload,
            "out_of_order": out_of_order,
            "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        })
    );
    if ok {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(ok)
}
