//! Crash cycles: kill the node with SIGKILL at random moments and check that nothing it
//! acknowledged is lost.
//!
//! Each cycle runs the node simulation (`examples/node.rs`, built beside this binary) as
//! a child process with `--child --ack-log <file>`: it appends until killed and records
//! every acknowledged id in an appended, fsynced log. The gate kills it with SIGKILL at a
//! random moment, then starts the next cycle on the same prefix (the new child's open
//! fences and recovers what the killed one left). After the last cycle it opens the prefix
//! read-only, replays every region at once (each object fetched once) and checks that
//! every recorded id is there exactly once, with the payload that was appended. One JSON
//! line on stdout; non-zero exit on any loss.
//!
//! The child's admitting regions (two-stage acknowledgement) flush and call `obsolete`;
//! each flush is logged (`flushed region id`) before the call. An acknowledged id at or
//! below its region's highest logged watermark may be gone (the region declared it
//! safe elsewhere, the floor may have risen past it): it is counted as
//! `flushed_not_replayed`, not as missing; if it is replayed, it must still be whole and
//! exactly once.
//!
//! With `--failover`, every cycle's node writes a prefix of its own (`<prefix>-<cycle>`),
//! as a node restarted on a new prefix after a failover does, and each cycle ends in a
//! fence of that prefix (DESIGN.md "A node's regions after it died"): on odd cycles the
//! node is killed first and then fenced (a node that died), on even ones it is fenced
//! while it still runs and appends, and killed only a while after the fence answered (a
//! zombie). The check then reads each fenced prefix read-only: every id its node
//! acknowledged must be on the fenced chain (at or below the fence's last id of its
//! region), whole and exactly once. A zombie's acknowledgement that is not there is
//! counted in `zombie_acks_after_fence` (it must be 0): the fence made its next create
//! fail, so nothing it acknowledged afterwards may exist.
//!
//! ```text
//! cargo build --example node --example crash_gate
//! target/debug/examples/crash_gate --cycles 20                    # a local directory, fsync on
//! target/debug/examples/crash_gate --cycles 5 --url s3://bucket    # an S3-API server (feature aws)
//! target/debug/examples/crash_gate --cycles 6 --failover          # kills, zombies and fences
//! ```

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use object_store_wal::store_from_url;
use object_store_wal::transform::StaticKeys;
use object_store_wal::{fence, Config, ObjectStoreLogStore, WalStores};

#[derive(Parser, Debug)]
#[command(about = "SIGKILL the node at random moments; check every acknowledged id survives")]
struct Args {
    /// Crash cycles.
    #[arg(long, default_value_t = 20)]
    cycles: u32,
    /// Store URL; default: a fresh local directory under the system temp dir. Given
    /// several times (3 or 5): one log over that many stores (`--replicas 3` makes
    /// three local directories).
    #[arg(long)]
    url: Vec<String>,
    /// Without `--url`: one log over this many fresh local directories.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// WAL prefix (default: unique per run).
    #[arg(long)]
    prefix: Option<String>,
    /// Regions the child appends to.
    #[arg(long, default_value_t = 50)]
    regions: u64,
    /// Earliest kill, ms after the child starts.
    #[arg(long, default_value_t = 300)]
    min_ms: u64,
    /// Latest kill, ms after the child starts.
    #[arg(long, default_value_t = 1500)]
    max_ms: u64,
    /// Seed of the kill times (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The node's segment compression: off, lz4, zstd, zstd:N.
    #[arg(long, default_value = "off")]
    compression: String,
    /// Encrypt every segment (a key file made in the run's directory; the replay reads
    /// with it).
    #[arg(long)]
    encrypt: bool,
    /// Fail every cycle's node over: a prefix per cycle, fenced after a kill (odd
    /// cycles) or while the node still runs, a zombie killed after the fence (even).
    #[arg(long)]
    failover: bool,
    /// With `--failover`: how long a zombie goes on after the fence answered, before it
    /// is killed, ms.
    #[arg(long, default_value_t = 300)]
    zombie_ms: u64,
}

/// SplitMix64: enough randomness for kill times, reproducible from the printed seed.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ack {
    nonce: u64,
    counter: u64,
}

/// What the ack log says: every acknowledged `(region, id)`, and each region's highest
/// flushed watermark.
type AckLog = (HashMap<(u64, u64), Ack>, HashMap<u64, u64>);

fn parse_ack_log(path: &std::path::Path) -> std::io::Result<AckLog> {
    let file = std::fs::File::open(path)?;
    let mut acks = HashMap::new();
    let mut flushed: HashMap<u64, u64> = HashMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("flushed ") {
            let fields: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            if let [region, id] = fields[..] {
                let w = flushed.entry(region).or_default();
                *w = (*w).max(id);
            }
            continue;
        }
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // A line cut by the kill has fewer fields: it was never fully recorded.
        if let [region, id, nonce, counter] = fields[..] {
            acks.insert((region, id), Ack { nonce, counter });
        }
    }
    Ok((acks, flushed))
}

fn payload_fields(payload: &[u8]) -> Option<(u64, u64, u64)> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            payload.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    Some((word(0)?, word(8)?, word(16)?))
}

#[tokio::main]
async fn main() {
    match run(Args::parse()).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("crash_gate: {e}");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let node = std::env::current_exe()?
        .parent()
        .ok_or("no directory beside this binary")?
        .join("node");
    if !node.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --example node`",
            node.display()
        )
        .into());
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let work = std::env::temp_dir().join(format!("osw-crash-gate-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let urls: Vec<String> = match args.url.as_slice() {
        [] if args.replicas > 1 => (0..args.replicas)
            .map(|i| format!("file://{}", work.join(format!("store-{i}")).display()))
            .collect(),
        [] => vec![format!("file://{}", work.join("store").display())],
        urls => urls.to_vec(),
    };
    let url = urls.join(" ");
    let prefix = args
        .prefix
        .clone()
        .unwrap_or_else(|| format!("gate-{stamp}"));
    // One ack log per prefix: with `--failover`, one per cycle.
    let prefix_of = |cycle: u32| {
        if args.failover {
            format!("{prefix}-{cycle}")
        } else {
            prefix.clone()
        }
    };
    let ack_log_of = |cycle: u32| {
        if args.failover {
            work.join(format!("acks-{cycle}.log"))
        } else {
            work.join("acks.log")
        }
    };
    let keys = work.join("wal.keys");
    if args.encrypt {
        let key: String = (0..32)
            .map(|i| format!("{:02x}", (stamp >> (i % 8 * 8)) as u8 ^ i as u8))
            .collect();
        std::fs::write(&keys, format!("1:{key}\n"))?;
    }
    let keys_source = format!("file:{}", keys.display());
    let mut seed = args.seed.unwrap_or(stamp);
    eprintln!("crash_gate: url {url} prefix {prefix} seed {seed}");
    let stores = WalStores::quorum(
        urls.iter()
            .map(|u| store_from_url(u))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    let config_of = |prefix: &str| -> Result<Config, Box<dyn std::error::Error>> {
        let mut config = Config::new(prefix.to_string());
        if args.encrypt {
            config = config
                .with_encryption_keys(std::sync::Arc::new(StaticKeys::from_source(&keys_source)?));
        }
        Ok(config)
    };
    let started = Instant::now();
    let span = args.max_ms.saturating_sub(args.min_ms).max(1);
    // Each fenced prefix's last id per region, by cycle.
    let mut fenced: HashMap<u32, HashMap<u64, u64>> = HashMap::new();
    let mut zombies = 0u32;
    for cycle in 1..=args.cycles {
        let prefix = prefix_of(cycle);
        let ack_log = ack_log_of(cycle);
        let kill_after = Duration::from_millis(args.min_ms + next_random(&mut seed) % span);
        let mut child = Command::new(&node)
            .args(urls.iter().flat_map(|u| ["--url", u.as_str()]))
            .args(["--prefix", &prefix, "--child"])
            .args([
                "--regions",
                &args.regions.to_string(),
                "--entry-bytes",
                "64",
            ])
            .args(["--min-object-interval-ms", "20"])
            .args(["--compression", &args.compression])
            .args(if args.encrypt {
                vec!["--keys", keys_source.as_str()]
            } else {
                Vec::new()
            })
            .arg("--ack-log")
            .arg(&ack_log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        tokio::time::sleep(kill_after).await;
        if let Some(status) = child.try_wait()? {
            return Err(format!("cycle {cycle}: the child exited by itself ({status})").into());
        }
        let zombie = args.failover && cycle % 2 == 0;
        let fence_now = || async {
            let answer = fence(stores.clone(), &config_of(&prefix)?).await?;
            let last_ids: HashMap<u64, u64> = answer
                .regions
                .iter()
                .filter_map(|r| Some((r.region, r.released.last_id?)))
                .collect();
            eprintln!(
                "crash_gate: cycle {cycle} fenced {prefix} at {} ({} regions)",
                answer.closed.sequence,
                last_ids.len()
            );
            Ok::<_, Box<dyn std::error::Error>>(last_ids)
        };
        if zombie {
            // Fenced while it runs: it goes on appending until its next create meets
            // the fence, and acknowledges nothing after. A fence that fails ends the
            // run, and the child with it (never left running).
            let answer = match fence_now().await {
                Ok(answer) => answer,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            };
            fenced.insert(cycle, answer);
            zombies += 1;
            tokio::time::sleep(Duration::from_millis(args.zombie_ms)).await;
        }
        // SIGKILL: no destructor, no flush, no graceful stop. (A zombie may have ended
        // by itself, fenced: killing an exited child changes nothing.)
        child.kill()?;
        child.wait()?;
        eprintln!(
            "crash_gate: cycle {cycle} killed after {} ms{}",
            kill_after.as_millis(),
            if zombie {
                " (a zombie, fenced first)"
            } else {
                ""
            }
        );
        if args.failover && !zombie {
            fenced.insert(cycle, fence_now().await?);
        }
    }

    let mut counts = Counts::default();
    let mut checked = Vec::new();
    if args.failover {
        checked.extend((1..=args.cycles).map(|c| (prefix_of(c), ack_log_of(c), Some(c))));
    } else {
        checked.push((prefix.clone(), ack_log_of(1), None));
    }
    for (prefix, ack_log, cycle) in checked {
        let fenced_ids = cycle.and_then(|c| fenced.get(&c));
        let zombie = cycle.is_some_and(|c| c % 2 == 0);
        check(
            &stores,
            config_of(&prefix)?,
            &ack_log,
            args.regions,
            fenced_ids,
            zombie,
            &mut counts,
        )
        .await?;
    }
    let Counts {
        acknowledged,
        replayed,
        missing,
        flushed_not_replayed,
        duplicated,
        wrong_payload,
        objects,
        orphans,
        zombie_acks_after_fence,
    } = counts;
    let ok = missing == 0
        && duplicated == 0
        && wrong_payload == 0
        && zombie_acks_after_fence == 0
        && acknowledged > 0;
    println!(
        "{}",
        serde_json::json!({
            "cycles": args.cycles,
            "url": url,
            "acknowledged": acknowledged,
            "replayed": replayed,
            "missing": missing,
            "flushed_not_replayed": flushed_not_replayed,
            "duplicated": duplicated,
            "wrong_payload": wrong_payload,
            "objects": objects,
            "orphans": orphans,
            "failovers": fenced.len(),
            "zombies": zombies,
            "zombie_acks_after_fence": zombie_acks_after_fence,
            "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        })
    );
    if ok && args.url.is_empty() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(ok)
}

/// What the check found, over every prefix it read.
#[derive(Debug, Default)]
struct Counts {
    acknowledged: usize,
    replayed: u64,
    missing: u64,
    flushed_not_replayed: u64,
    duplicated: u64,
    wrong_payload: u64,
    objects: usize,
    orphans: usize,
    zombie_acks_after_fence: u64,
}

/// Reads `config.prefix` read-only and checks the ids its ack log records: each there
/// exactly once with its payload (or below a flushed watermark). With `fenced` (the
/// fence's last id per region), each must be at or below its region's last id too; a
/// `zombie`'s acknowledgement off the fenced chain is counted as a zombie ack.
async fn check(
    stores: &WalStores,
    config: Config,
    ack_log: &std::path::Path,
    regions: u64,
    fenced: Option<&HashMap<u64, u64>>,
    zombie: bool,
    counts: &mut Counts,
) -> Result<(), Box<dyn std::error::Error>> {
    let (acks, flushed) = parse_ack_log(ack_log)?;
    // The check's own open: a read-only open does one recovery, and over several
    // stores one store that fails its listing for a moment (Azurite under load) leaves
    // a key the last kill split undetermined (`NoQuorum`, retryable). Asked again, as a
    // node would, a few times.
    let mut attempt = 1;
    let wal = loop {
        match ObjectStoreLogStore::open_read_only(stores.clone(), config.clone()).await {
            Ok(wal) => break wal,
            Err(e) if e.is_retryable() && attempt < 5 => {
                eprintln!("crash_gate: the check's open failed ({e}); again");
                tokio::time::sleep(std::time::Duration::from_millis(500 * attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    };
    // One bulk replay of every region: each object is fetched once (a read per region
    // would fetch each object once per region it holds).
    let mut entries = wal.replay((1..=regions).map(|r| (r, 0)));
    let mut seen: HashMap<(u64, u64), u32> = HashMap::new();
    let mut last: HashMap<u64, u64> = HashMap::new();
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        counts.replayed += 1;
        if last.get(&entry.region).is_some_and(|l| entry.id <= *l) {
            counts.duplicated += 1;
        }
        last.insert(entry.region, entry.id);
        *seen.entry((entry.region, entry.id)).or_default() += 1;
        if let Some(ack) = acks.get(&(entry.region, entry.id)) {
            if payload_fields(&entry.payload) != Some((entry.region, ack.nonce, ack.counter)) {
                counts.wrong_payload += 1;
            }
        }
    }
    for &(r, id) in acks.keys() {
        let off_fence = fenced.is_some_and(|f| f.get(&r).is_none_or(|last| id > *last));
        match seen.get(&(r, id)) {
            None if flushed.get(&r).is_some_and(|w| id <= *w) => counts.flushed_not_replayed += 1,
            None => {
                eprintln!(
                    "crash_gate: {} region {r} id {id} acknowledged but not replayed",
                    config.prefix
                );
                counts.missing += 1;
                if zombie {
                    counts.zombie_acks_after_fence += 1;
                }
            }
            Some(_) if off_fence => {
                eprintln!(
                    "crash_gate: {} region {r} id {id} acknowledged above the fence's last id",
                    config.prefix
                );
                counts.zombie_acks_after_fence += 1;
            }
            Some(n) if *n > 1 => counts.duplicated += 1,
            _ => {}
        }
    }
    counts.acknowledged += acks.len();
    counts.objects += wal.report().objects.len();
    counts.orphans += wal.report().orphans;
    Ok(())
}
