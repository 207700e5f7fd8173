//! The bench's entry payloads: a pool of distinct entries of `--entry-bytes`, cycled.
//!
//! - `constant`: every byte `0xa5` (the earlier runs' payload; compresses to nothing).
//! - `random`: seeded random bytes (incompressible: compression's worst case).
//! - `text`: seeded JSON rows of a time-series insert, as a metrics database's WAL
//!   holds them: a table, a millisecond timestamp advancing by up to 20 ms, one of 1,000
//!   hosts with its region and zone, and four CPU gauges with one or two decimals
//!   (about 170 bytes a row), packed whole into each entry (the last row cut at the
//!   entry's end).
//! - `logs`: seeded service log lines (an RFC 3339 timestamp, a level, a module, a
//!   message from five templates with uniformly drawn numbers, and a random 64-bit trace
//!   id on every line): the less compressible kind of text.
//! - `--payload-file PATH`: the file's lines, packed into entries the same way, cycled.

use bytes::Bytes;
use object_store_wal::testing::SplitMix64;

/// Distinct entries in the pool.
const POOL: usize = 4096;

/// A pool of entries, handed out by index.
pub struct Payloads {
    pool: Vec<Bytes>,
}

impl Payloads {
    /// `kind` (`constant`, `random`, `text`) or the lines of `file`.
    pub fn new(
        kind: &str,
        file: Option<&str>,
        entry_bytes: usize,
        seed: u64,
    ) -> Result<Self, String> {
        let pool = match (kind, file) {
            (_, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
                let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
                if lines.is_empty() {
                    return Err(format!("{path}: no lines"));
                }
                let mut at = 0;
                pack(entry_bytes, || {
                    let line = lines.get(at % lines.len()).copied().unwrap_or_default();
                    at += 1;
                    line.to_string()
                })
            }
            ("constant", None) => vec![Bytes::from(vec![0xa5u8; entry_bytes])],
            ("random", None) => {
                let mut rng = SplitMix64::new(seed);
                (0..POOL)
                    .map(|_| {
                        let mut entry = Vec::with_capacity(entry_bytes + 8);
                        while entry.len() < entry_bytes {
                            entry.extend_from_slice(&rng.next_u64().to_le_bytes());
                        }
                        entry.truncate(entry_bytes);
                        Bytes::from(entry)
                    })
                    .collect()
            }
            ("text", None) => {
                let mut rng = SplitMix64::new(seed);
                let mut millis = 1_764_944_000_000u64;
                pack(entry_bytes, || metrics_row(&mut rng, &mut millis))
            }
            ("logs", None) => {
                let mut rng = SplitMix64::new(seed);
                let mut millis = 1_764_944_000_000u64;
                pack(entry_bytes, || log_line(&mut rng, &mut millis))
            }
            (other, None) => return Err(format!("{other}: constant, random, text or logs")),
        };
        Ok(Payloads { pool })
    }

    /// The `k`-th entry (the pool cycled).
    pub fn entry(&self, k: u64) -> Bytes {
        let at = (k % self.pool.len().max(1) as u64) as usize;
        self.pool.get(at).cloned().unwrap_or_default()
    }
}

/// `POOL` entries of `entry_bytes`, each packed with whole lines from `next` (the last
/// one cut at the entry's end).
fn pack(entry_bytes: usize, mut next: impl FnMut() -> String) -> Vec<Bytes> {
    (0..POOL)
        .map(|_| {
            let mut entry = Vec::with_capacity(entry_bytes + 256);
            while entry.len() < entry_bytes {
                entry.extend_from_slice(next().as_bytes());
                entry.push(b'\n');
            }
            entry.truncate(entry_bytes);
            Bytes::from(entry)
        })
        .collect()
}

const LEVELS: [&str; 4] = ["INFO", "INFO", "DEBUG", "WARN"];
const MODULES: [&str; 6] = [
    "storage::compaction",
    "region::raft",
    "wal::writer",
    "query::exec",
    "grpc::server",
    "storage::flush",
];
const TABLES: [&str; 4] = ["metrics", "events", "orders", "sessions"];

const REGIONS: [&str; 4] = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-1"];
const ZONES: [&str; 3] = ["a", "b", "c"];

/// One JSON row of a CPU metrics insert.
fn metrics_row(rng: &mut SplitMix64, millis: &mut u64) -> String {
    *millis += rng.below(20);
    let host = rng.below(1000);
    let region = REGIONS
        .get((host % REGIONS.len() as u64) as usize)
        .copied()
        .unwrap_or_default();
    let zone = ZONES
        .get((host % ZONES.len() as u64) as usize)
        .copied()
        .unwrap_or_default();
    let user = rng.unit() * 60.0;
    let system = rng.unit() * 15.0;
    format!(
        "{{\"table\":\"cpu\",\"ts\":{},\"host\":\"host-{host:04}\",\"region\":\"{region}\",\"az\":\"{region}{zone}\",\"usage_user\":{user:.1},\"usage_system\":{system:.1},\"usage_idle\":{:.1},\"usage_iowait\":{:.2}}}",
        *millis,
        100.0 - user - system,
        rng.unit() * 3.0
    )
}

/// One of `items`, drawn.
fn pick(items: &[&'static str], rng: &mut SplitMix64) -> &'static str {
    items
        .get(rng.below(items.len() as u64) as usize)
        .copied()
        .unwrap_or_default()
}

/// One log line.
fn log_line(rng: &mut SplitMix64, millis: &mut u64) -> String {
    *millis += rng.below(40);
    let (secs, ms) = (*millis / 1000, *millis % 1000);
    let (day_secs, day) = (secs % 86_400, secs / 86_400);
    let level = pick(&LEVELS, rng);
    let module = pick(&MODULES, rng);
    let region = rng.below(1000);
    let trace = rng.next_u64();
    let message = match rng.below(5) {
        0 => format!(
            "flushed memtable region_id={region} rows={} bytes={} elapsed_ms={}",
            rng.below(100_000),
            rng.below(64 << 20),
            rng.below(900)
        ),
        1 => format!(
            "appended entries region_id={region} term={} index={} count={}",
            rng.below(50),
            rng.below(10_000_000),
            1 + rng.below(64)
        ),
        2 => format!(
            "INSERT INTO {} region_id={region} rows={} took={}us",
            pick(&TABLES, rng),
            1 + rng.below(500),
            rng.below(20_000)
        ),
        3 => format!(
            "request finished method=POST path=/v1/write status=200 region_id={region} latency_ms={}.{:03}",
            rng.below(200),
            rng.below(1000)
        ),
        _ => format!(
            "compaction picked region_id={region} level={} inputs={} output_bytes={}",
            rng.below(4),
            1 + rng.below(12),
            rng.below(256 << 20)
        ),
    };
    format!(
        "2025-12-{:02}T{:02}:{:02}:{:02}.{ms:03}Z {level:<5} {module}: {message} trace_id={trace:016x}",
        1 + day % 28,
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}
