//! The benchmark: how many durable appends per second, how long an append waits, how
//! many requests per MiB, how fast recovery and replay are. One JSON line per run on
//! stdout, progress on stderr. Run it in release mode:
//!
//! ```text
//! cargo run --release --example bench -- write --store memory --min-object-interval-ms 0
//! cargo run --release --example bench -- write --put-latency-ms 50 --entry-bytes 16384 --appenders 2048
//! cargo run --release --example bench -- write --rate 2000 --seconds 5 --put-latency-ms 20 --regions 100
//! cargo run --release --example bench -- write --rate 2000 --put-latency-ms 20 --put-tail 0.01:500 --put-hang 0.001 --hedge adaptive:90:10 --request-timeout-ms 2000
//! cargo run --release --example bench -- write --rate 2000 --seconds 30 --put-latency-ms 20 --regions 100 --throttle-puts-per-s 50 --throttle-lift-after-s 15
//! cargo run --release --example bench -- limit --entry-bytes 65536
//! cargo run --release --example bench -- recover --objects 10000 --get-latency-ms 10 --recovery-concurrency 64
//! cargo run --release --example bench -- replay --seconds 5
//! cargo run --release --example bench -- replay --objects 1300 --regions 100 --get-latency-ms 10 --replay-concurrency 32 --replay-budget-mib 64
//! cargo run --release --example bench -- follow --rate 2000 --regions 100 --put-latency-ms 20 --get-latency-ms 10 --min-object-interval-ms 20 --followers 8 --remote-followers 8 --seconds 20 --idle-seconds 10
//! cargo run --release --example bench -- soak --minutes 30 --store file:/tmp/soak --regions 1000 --entry-bytes 128 --min-object-interval-ms 0 --obsolete-lag 8 --reclaim-grace-ms 2000 --max-create-duration-ms 1000
//! scripts/latency_sweep.sh && python3 scripts/plot_latency.py
//! ```
//!
//! **Stores.** `--store memory|discard|file:<dir>` picks the store (`discard` keeps
//! keys but drops the bytes of objects over 64 KiB: write runs without the memory
//! store's copying); `--put-latency-ms` /
//! `--get-latency-ms` add a latency per request (`testing::with_latency_profile`),
//! standing in for S3. `--put-tail P:MS` / `--get-tail P:MS` make a fraction P (0 to 1)
//! of PUTs / GETs take MS more; `--put-hang P` / `--get-hang P` make a fraction never
//! answer. The delay comes before the request reaches the store, so a hedged twin can
//! land first; the draws follow `--seed`. Requests are counted by the `testing` module's
//! `CountingStore`, outermost (hedged twins and hung requests included).
//!
//! **Throttled store.** `--throttle-puts-per-s N` puts `testing::ThrottleStore` beneath
//! the latency wrapper: the store takes at most N PUTs (and deletes) a second and
//! answers the rest as S3 does, `503 Slow Down` (the error `object_store`'s S3 client
//! returns), without applying them; `--throttle-gets-per-s N` does the same for GETs
//! and LISTs. `--throttle-lift-after-s S` lifts both S seconds into the run;
//! `--throttle-client-retries N` plays the S3 client's own retries (its default is
//! 10) before the WAL sees the 503; with `--replicas N`, `--throttle-replicas K` gives
//! each of the first K stores (default all) a throttle of its own (the line's counts
//! are the first store's). The line then has `throttled_puts`,
//! `admitted_puts`, `failed_by_error` (failed appends by kind, with one message each),
//! `create_retries` and `put_outcomes` (from the WAL's metrics), `epoch_first` and
//! `epoch_last`, `restarts`, `max_pending_mib`, the per-second `series_*` (objects
//! acknowledged, PUTs admitted and refused, appends answered and failed, pending MiB),
//! `phases` (throttled, and lifted: objects/s, PUTs/s, appends/s, and by arrival p50 and
//! p99) and `back_at_interval_after_s`: from the lift to the first second with 90 % of
//! the objects `min_object_interval` allows; from the writer's gauge
//! `wal_object_interval_seconds`, `interval_back_after_s` (from the lift to the first
//! sample at `min_object_interval`), `max_interval_ms`, `mean_interval_ms` (over the
//! samples) and `series_interval_ms` (at the end of each second).
//!
//! **Several stores.** `--replicas N` (odd, 3 or 5) writes one log over N memory
//! stores, each behind its own latency wrapper (`--put-latency-ms` and the other
//! latency flags apply to each, seeded apart), with the quorum rules of DESIGN.md "One
//! log over several stores". `--replica-put-latency-ms a,b,c` and
//! `--replica-get-latency-ms a,b,c` set one latency per store, `--replica-down I` makes
//! store I never answer (every request hangs), `--replica-put-tail I:P:MS` puts a tail
//! on store I. Request counts and costs are summed over the stores; `per_store` has each
//! store's. `recover` and `replay` take the same flags (their fixtures are written to
//! every store).
//!
//! **Load.** `write` runs a closed loop by default: `--appenders` callers, each appending
//! again once answered; latency is each append's own wait. With `--rate N` it runs an
//! open loop instead: N arrivals per second with exponential gaps (seeded by `--seed`),
//! each append its own task however many are pending, and latency counts from each
//! arrival's *scheduled* time, so queueing shows; the line then has `offered_rate`,
//! `issued_rate` (what the draws gave) and `rate` (acknowledged appends per second).
//! Either loop runs `--seconds` (or `--appends`), then waits up to `--drain-seconds` for
//! appends still pending; those left count as `unfinished`, with the wait they had (the
//! percentiles are then lower bounds).
//!
//! **Configuration.** `--min-object-interval-ms`, `--max-in-flight`, `--max-batch-bytes`,
//! `--max-pending-bytes`, `--hedge off|fixed:MS|adaptive[:PCT[:FLOOR_MS]]` (missing parts
//! from the default: adaptive, 90th percentile, 10 ms floor; without the flag, `Config`'s
//! default), `--request-timeout-ms`, `--recovery-concurrency`, `--replay-concurrency`,
//! `--replay-budget-mib`, `--max-create-duration-ms`, `--reclaim-grace-ms`; unset, each
//! is `Config`'s default.
//!
//! **What `write` reports.** Appends, `p50_ms` to `max_ms` (`p90`, `p99`, `p999`
//! between), `puts` (PUT requests the store saw), `objects` (acknowledged),
//! `objects_created` (keys that landed, acknowledged or not), `extra_puts_pct` =
//! (puts − objects × stores) / (objects × stores) × 100 (one store: (puts − objects) /
//! objects × 100), `puts_per_s`, and `hedged`, `hedge_wins`,
//! `timeouts` from `WalStats`.
//!
//! **Cost.** Every `write` line has `requests_per_hour` (put, get, list, delete: the
//! run's counts scaled to an hour; a LIST is billed per page of 1,000 keys) and
//! `usd_per_month` under each price table of `support/prices.rs` (S3 Standard, S3 Express
//! One Zone, GCS Standard, Azure Blob hot; dated and cited in docs/COSTS.md, "What it
//! costs"); `--idle-seconds` adds the same for the idle time (`idle_requests_per_hour`,
//! `idle_usd_per_month`).
//!
//! **Replay.** `replay --objects N` builds N data objects (encoded with the public format and created straight to the store), without
//! latency, each with `--entries-per-object` entries (default: one per region) of
//! `--entry-bytes` spread over `--regions`: `--objects 1300 --regions 100` gives about
//! 1,300 chain objects of 100 regions with 1 KiB entries. Without `--objects`, a `write`
//! run (with every `write` flag) builds the log. Then a fresh WAL replays every region
//! from its first entry: `replay_ms`, `ms_per_object`, `gets_per_object`, `peak_rss_mib`
//! (the peak since just before the replay; with `--store memory` it includes the store,
//! see `rss_before_mib`), `replay_concurrency`, `replay_budget_mib`, and `ideal_ms` =
//! objects × GET latency / `replay_concurrency` with `ratio_to_ideal`.
//!
//! **Follow.** `follow --rate N` (an open-loop `write`, every `write` flag but
//! `--replicas`) with `--followers K` follows in the process and `--remote-followers K`
//! read-only follows on store handles of their own (poll every `--poll-interval-ms`),
//! or over one shared `SourceLog` (`--remote-log shared`, or `shared-all` keeping
//! every region; `rss_mib`, `remote_kept_segments`), one region each: call-to-delivery latency (`local_e2e_*`, `remote_e2e_*`) beside
//! the appends' (`append_p50_ms`, `append_p99_ms`), each kind's GETs, HEADs and LISTs
//! per second, bytes read against the bytes of the regions followed, entries missing,
//! duplicated or out of order, then the same requests over `--idle-seconds` (default
//! 60) without appends. See `support/follow.rs`.
//!
//! **Soak.** `soak --minutes N` (fractions allowed) runs `write` (every `write` flag;
//! give `--obsolete-lag` so the log is reclaimed as it grows, and `--rate` for a steady
//! open loop instead of the closed one) and prints, every `--report-seconds` (default
//! 60), one JSON line: `minute`, `rss_mib` and `peak_rss_mib`, `appends_per_s` and the
//! latency `p50_ms`, `p99_ms`, `max_ms` of the appends answered in the interval (at a
//! steady `--rate`, a WAL that slowed down shows here first), `live_keys` (keys under
//! the prefix, listed on the base store), `catalog_objects`, `catalog_regions`, `readers`, `queued`, `watermarks`, `floor`,
//! `reclaimed_below`, and `heap_mib` (bytes allocated and not freed, counted by the
//! bench's global allocator: RSS also holds what the allocator keeps after frees),
//! `large_allocs` and `largest_alloc_kib` (blocks of 128 KiB or more since the start,
//! and the largest: glibc raises its thresholds after freeing one), `threads` and
//! `allocator` (`jemalloc`, or `system` with `BENCH_ALLOCATOR=system`: glibc's RSS
//! keeps the high-water mark of each transient backlog as its arenas keep partly used
//! pages, jemalloc's follows the heap). Then the `write` line, and a `soak-summary`
//! line comparing the last interval with the third (the first two hold the warm-up): appends/s, RSS and
//! heap, in %, and the two intervals' p50 and p99.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args as ClapArgs, Parser, Subcommand};
use futures::stream::{self, StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use object_store_wal::format::{
    encode_object, Header, Link, EMPTY_OBJECT_LEN, ENTRY_PREFIX_LEN, FOOTER_RECORD_LEN,
    MAX_SEGMENT_ENTRIES,
};
use object_store_wal::testing::{
    with_latency_profile, with_throttle, ClientRetries, CountingStore, Counts, DownHooks, Hooks,
    LatencyCounts, LatencyProfile, LatencyStore, SplitMix64, Throttle, ThrottleCounts,
    ThrottleStore, Wrapper,
};
use object_store_wal::transform::{Cipher, Compression, SegmentKey, StaticKeys};
use object_store_wal::{Config, Error, HedgeAfter, ObjectStoreLogStore, WalStores};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use serde_json::json;
use tokio::task::JoinSet;

#[path = "support/follow.rs"]
mod follow;
#[path = "support/payloads.rs"]
mod payloads;
#[path = "support/prices.rs"]
mod prices;

use payloads::Payloads;

const MIB: f64 = 1024.0 * 1024.0;

/// The process's allocator, counting the bytes allocated and not yet freed: the soak
/// reports them beside RSS, which also holds what the allocator keeps after a free.
/// The bench runs on jemalloc, as database nodes on Linux commonly do (TiKV, GreptimeDB):
/// it returns unused pages after a few seconds, so RSS follows the heap.
/// `BENCH_ALLOCATOR=system` runs the same process on the system's allocator; glibc's
/// keeps freed memory in its arenas, partly used pages and all, so its RSS keeps the
/// high-water mark of every transient backlog while the heap in use stays flat. The WAL
/// (a library) takes no side: the node chooses.
struct CountingAlloc;

/// Which allocator serves the process, chosen at its first allocation: 0 not yet,
/// 1 the system's, 2 jemalloc.
static CHOSEN_ALLOCATOR: AtomicU8 = AtomicU8::new(0);

/// Whether jemalloc serves this process (unless `BENCH_ALLOCATOR=system`).
fn on_jemalloc() -> bool {
    match CHOSEN_ALLOCATOR.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: `getenv` reads the environment without allocating, and the first
            // allocation happens before the process starts a thread or changes its
            // environment, so every allocation of the process sees the same choice.
            let value = unsafe { libc::getenv(c"BENCH_ALLOCATOR".as_ptr()) };
            let jemalloc = value.is_null()
                || unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() != b"system";
            CHOSEN_ALLOCATOR.store(if jemalloc { 2 } else { 1 }, Ordering::Relaxed);
            jemalloc
        }
    }
}

/// The allocator's name, for the report.
fn allocator_name() -> &'static str {
    if on_jemalloc() {
        "jemalloc"
    } else {
        "system"
    }
}

/// Bytes allocated through [`CountingAlloc`] and not yet freed.
static HEAP_BYTES: AtomicU64 = AtomicU64::new(0);

/// glibc's initial mmap threshold: a block this large, once freed, raises the threshold
/// (and the trim threshold to twice it) for the rest of the process, so every arena then
/// keeps more memory after frees.
const LARGE_ALLOC: usize = 128 * 1024;

/// Allocations (and growing reallocations) of at least [`LARGE_ALLOC`] bytes.
static LARGE_ALLOCS: AtomicU64 = AtomicU64::new(0);

/// The largest allocation so far, in bytes.
static LARGEST_ALLOC: AtomicU64 = AtomicU64::new(0);

/// Counts an allocation of `size` bytes if it is large.
fn count_large(size: usize) {
    if size >= LARGE_ALLOC {
        LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
        LARGEST_ALLOC.fetch_max(size as u64, Ordering::Relaxed);
    }
}

/// The allocator the process chose at its first allocation.
fn chosen_allocator() -> &'static dyn std::alloc::GlobalAlloc {
    if on_jemalloc() {
        &tikv_jemallocator::Jemalloc
    } else {
        &std::alloc::System
    }
}

/// Counts a block of `size` bytes that `p` now holds (nothing if the allocation failed).
fn count_allocated(p: *mut u8, size: usize) -> *mut u8 {
    if !p.is_null() {
        HEAP_BYTES.fetch_add(size as u64, Ordering::Relaxed);
        count_large(size);
    }
    p
}

// SAFETY: every call goes unchanged to the one allocator the process chose at its
// first allocation; only counters are added.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocated(unsafe { chosen_allocator().alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocated(
            unsafe { chosen_allocator().alloc_zeroed(layout) },
            layout.size(),
        )
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { chosen_allocator().dealloc(ptr, layout) };
        HEAP_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        let p = unsafe { chosen_allocator().realloc(ptr, layout, new) };
        if !p.is_null() {
            HEAP_BYTES.fetch_add(new as u64, Ordering::Relaxed);
            HEAP_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            if new > layout.size() {
                count_large(new);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// The heap in use now, in MiB (see [`CountingAlloc`]).
fn heap_mib() -> f64 {
    HEAP_BYTES.load(Ordering::Relaxed) as f64 / MIB
}

/// Threads of this process now (`Threads:` of `/proc/self/status`).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Parser, Debug)]
#[command(about = "object-store-wal benchmark")]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
    /// Most threads in the runtime's blocking pool, where the file store's calls run
    /// (tokio's default is 512). Under a steady load each thread the pool ever started
    /// stays busy enough to live on, with its stack and its allocator cache in RSS: a
    /// burst (a stalled disk) would leave the process larger for the rest of the run.
    #[arg(long, global = true, default_value_t = 16)]
    max_blocking_threads: usize,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// Durable appends through the actors: closed loop from `--appenders` callers, or
    /// open loop at `--rate` appends per second.
    Write(Common),
    /// The same volume in objects of this crate's format, created straight to the store: the ceiling.
    Limit(Common),
    /// Build a prefix of `--objects` objects, then time a fresh open.
    Recover(Common),
    /// Build a log (`--objects` objects created straight to the store, or else a write run), then
    /// replay every region from its first entry.
    Replay(Common),
    /// A long `write` run (use `--obsolete-lag` so the log is reclaimed as it grows):
    /// one JSON line per `--report-seconds` with RSS, appends/s, live keys and what
    /// the WAL holds, then a summary comparing the last interval with the third.
    Soak(SoakArgs),
    /// An open-loop write at `--rate` with followers of some regions: in the process
    /// (`--followers`) and read-only on store handles of their own
    /// (`--remote-followers`); end-to-end latency, their requests, whether each got
    /// every acknowledged entry once and in order, then their requests while idle.
    Follow(follow::FollowArgs),
}

#[derive(ClapArgs, Debug, Clone)]
struct SoakArgs {
    /// How long to run, in minutes (fractions allowed).
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seconds between two report lines.
    #[arg(long, default_value_t = 60.0)]
    report_seconds: f64,
    /// After each report's RSS sample, return free memory to the system
    /// (`malloc_trim(0)`, glibc only) and report the RSS then (`rss_trimmed_mib`): what
    /// RSS holds beyond the heap is then seen to be the allocator's, not the WAL's.
    #[arg(long)]
    trim: bool,
    #[command(flatten)]
    common: Common,
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
    /// `P:MS`: a fraction P (0 to 1) of PUTs take MS more.
    #[arg(long, value_parser = parse_tail)]
    put_tail: Option<Tail>,
    /// `P:MS`: a fraction P (0 to 1) of GETs take MS more.
    #[arg(long, value_parser = parse_tail)]
    get_tail: Option<Tail>,
    /// A fraction (0 to 1) of PUTs that never answer.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    put_hang: f64,
    /// A fraction (0 to 1) of GETs that never answer.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    get_hang: f64,
    /// Seed of the latency draws and of the open loop's arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Regions appended to.
    #[arg(long, default_value_t = 1000)]
    regions: u64,
    /// Bytes per entry.
    #[arg(long, default_value_t = 1024)]
    entry_bytes: usize,
    /// The entries' bytes: `constant` (0xa5), `random` (incompressible), `text` (seeded
    /// JSON rows of a time-series insert) or `logs` (seeded service log lines); see
    /// examples/support/payloads.rs.
    #[arg(long, default_value = "constant")]
    payload: String,
    /// Entries cut from this file's lines (packed to --entry-bytes, cycled) instead.
    #[arg(long)]
    payload_file: Option<String>,
    /// Segment compression: off, lz4, zstd, zstd:N.
    #[arg(long, default_value = "off", value_parser = parse_compression)]
    compression: Compression,
    /// Encrypt every segment (one in-memory key), with `--cipher`.
    #[arg(long)]
    encrypt: bool,
    /// The cipher of `--encrypt`: auto (XAES-256-GCM where the CPU has AES
    /// instructions, else XChaCha20-Poly1305), xaes-256-gcm, xchacha20-poly1305.
    #[arg(long, default_value = "auto", value_parser = parse_cipher)]
    cipher: Cipher,
    /// Entries per append.
    #[arg(long, default_value_t = 1)]
    entries_per_append: usize,
    /// Concurrent callers of the closed loop (without `--rate`).
    #[arg(long, default_value_t = 256)]
    appenders: usize,
    /// Open loop: appends per second, exponential gaps between arrivals, each append its
    /// own task however many are pending; latency counts from the scheduled arrival.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Seconds to run (unless `--appends` is given).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Appends to run instead of a duration.
    #[arg(long)]
    appends: Option<u64>,
    /// After the last arrival (open loop) or the end of `--seconds` (closed loop), how
    /// long appends still pending are waited for; the rest count as `unfinished`.
    #[arg(long, default_value_t = 5.0)]
    drain_seconds: f64,
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
    /// `hedge_after`: `off`, `fixed:MS` or `adaptive[:PCT[:FLOOR_MS]]` (the missing parts
    /// from the default, adaptive 90th percentile, 10 ms floor). Default: `Config`'s.
    #[arg(long, value_parser = parse_hedge)]
    hedge: Option<HedgeAfter>,
    /// `request_timeout`, ms.
    #[arg(long)]
    request_timeout_ms: Option<u64>,
    /// `recovery_concurrency`.
    #[arg(long)]
    recovery_concurrency: Option<usize>,
    /// `replay_concurrency`.
    #[arg(long)]
    replay_concurrency: Option<usize>,
    /// `replay_budget_bytes`, in MiB.
    #[arg(long)]
    replay_budget_mib: Option<u64>,
    /// Objects created straight to the store, without latency: for `recover` in all (the
    /// opening object included; default 10,000), for `replay` data objects before the
    /// replay (instead of a write run).
    #[arg(long)]
    objects: Option<u64>,
    /// Opens `recover` makes one after another over the chain it built (each writes its
    /// opening object): the first is reported as `recovery_ms`, all of them as the
    /// `open_ms_*` percentiles.
    #[arg(long, default_value_t = 1)]
    opens: u32,
    /// Entries per object built for `replay --objects` (default: one per region).
    #[arg(long)]
    entries_per_object: Option<usize>,
    /// After the run, stay idle this long and count requests (default: 0 for `write`,
    /// 60 for `follow`).
    #[arg(long)]
    idle_seconds: Option<f64>,
    /// WAL prefix.
    #[arg(long, default_value = "bench")]
    prefix: String,
    /// Regions mark their entries obsolete this many objects behind each acknowledged
    /// append (0: never); the reclaimer then deletes what no region needs.
    #[arg(long, default_value_t = 0)]
    obsolete_lag: u64,
    /// Closed loop: each caller picks every append's region at random (seeded by
    /// `--seed` and the caller), instead of walking the regions with a stride. With
    /// `--obsolete-lag`, the floor then follows the least recently appended region of a
    /// memoryless choice, so the live part of the log is stationary; with the stride it
    /// drifts over minutes with the callers' phases.
    #[arg(long)]
    uniform_regions: bool,
    /// `reclaim_grace`, ms.
    #[arg(long)]
    reclaim_grace_ms: Option<u64>,
    /// `max_create_duration`, ms.
    #[arg(long)]
    max_create_duration_ms: Option<u64>,
    /// One log over this many memory stores (odd, 3 or 5), each behind its own latency
    /// wrapper (`--put-latency-ms` and the tails apply to each, unless the per-store
    /// flags below say otherwise); 1: one store, as without the flag.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// PUT latency per store, ms, one value per store (`6,6,60`).
    #[arg(long, value_delimiter = ',')]
    replica_put_latency_ms: Vec<u64>,
    /// GET latency per store, ms, one value per store.
    #[arg(long, value_delimiter = ',')]
    replica_get_latency_ms: Vec<u64>,
    /// Store I (from 0) never answers: every request to it hangs.
    #[arg(long)]
    replica_down: Option<usize>,
    /// `I:P:MS`: on store I, a fraction P of PUTs take MS more.
    #[arg(long, value_parser = parse_replica_tail)]
    replica_put_tail: Option<(usize, Tail)>,
    /// The store takes at most N PUTs (and deletes) a second and answers the rest as S3
    /// does, `503 Slow Down`, without applying them (`testing::ThrottleStore`, beneath
    /// the latency wrapper: a refusal takes its round trip). With `--replicas`, each of
    /// the first `--throttle-replicas` stores has a throttle of its own.
    #[arg(long, value_parser = parse_rate)]
    throttle_puts_per_s: Option<f64>,
    /// With `--replicas` and a throttle: how many of the stores are throttled (the
    /// first ones; default all); the line's throttle counts are the first store's.
    #[arg(long)]
    throttle_replicas: Option<usize>,
    /// The same for GETs, HEADs and LISTs (default: no limit).
    #[arg(long, value_parser = parse_rate)]
    throttle_gets_per_s: Option<f64>,
    /// Lift the throttle this many seconds into the run (then report each phase and how
    /// long the WAL took to write at `min_object_interval` again).
    #[arg(long)]
    throttle_lift_after_s: Option<f64>,
    /// Retries of a refused request by the store's own client before the WAL sees the
    /// 503, with `object_store`'s backoff (100 ms doubling, jittered, up to 15 s; its
    /// default client makes 10). Default 0: the 503 comes back at once.
    #[arg(long, default_value_t = 0)]
    throttle_client_retries: usize,
}

fn parse_replica_tail(s: &str) -> Result<(usize, Tail), String> {
    let (store, tail) = s
        .split_once(':')
        .ok_or_else(|| format!("{s}: expected I:P:MS"))?;
    let store = store
        .parse()
        .map_err(|e| format!("{s}: store index: {e}"))?;
    Ok((store, parse_tail(tail)?))
}

/// A slow tail of `--put-tail` / `--get-tail`.
#[derive(Debug, Clone, Copy)]
struct Tail {
    fraction: f64,
    extra_ms: f64,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a fraction from 0 to 1")),
    }
}

fn parse_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
        _ => Err(format!("{s:?} is not a number of milliseconds")),
    }
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    s.parse()
}

fn parse_cipher(s: &str) -> Result<Cipher, String> {
    s.parse()
}

fn parse_tail(s: &str) -> Result<Tail, String> {
    let (p, ms) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected P:MS, e.g. 0.01:500"))?;
    Ok(Tail {
        fraction: parse_fraction(p)?,
        extra_ms: parse_ms(ms)?,
    })
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{s:?} is not a rate above zero")),
    }
}

/// `seconds` as a duration: zero for a negative number or NaN, at most about a year
/// (so that it can be added to an `Instant`).
fn secs(seconds: f64) -> Duration {
    const YEAR: f64 = 365.0 * 86_400.0;
    if seconds.is_nan() || seconds <= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(seconds.min(YEAR))
}

fn millis(ms: f64) -> Duration {
    secs(ms / 1000.0)
}

fn parse_hedge(s: &str) -> Result<HedgeAfter, String> {
    let mut parts = s.split(':');
    let kind = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let (pct, floor) = match HedgeAfter::default() {
        HedgeAfter::Adaptive { percentile, floor } => (percentile, floor),
        _ => (90, Duration::from_millis(10)),
    };
    match (kind, rest.as_slice()) {
        ("off", []) => Ok(HedgeAfter::Off),
        ("fixed", [ms]) => {
            let d = millis(parse_ms(ms)?);
            if d.is_zero() {
                return Err("fixed:MS needs MS above zero".into());
            }
            Ok(HedgeAfter::Fixed(d))
        }
        ("adaptive", rest) if rest.len() <= 2 => {
            let percentile = match rest.first() {
                Some(p) => p
                    .parse::<u8>()
                    .ok()
                    .filter(|p| (1..=99).contains(p))
                    .ok_or_else(|| format!("{p:?} is not a percentile from 1 to 99"))?,
                None => pct,
            };
            let floor = match rest.get(1) {
                Some(ms) => millis(parse_ms(ms)?),
                None => floor,
            };
            Ok(HedgeAfter::Adaptive { percentile, floor })
        }
        _ => Err(format!(
            "{s:?}: expected off, fixed:MS or adaptive[:PCT[:FLOOR_MS]]"
        )),
    }
}

/// A tail as `--put-tail` / `--get-tail` spell it.
fn tail_label(t: &Option<Tail>) -> Option<String> {
    t.map(|t| format!("{}:{}", t.fraction, t.extra_ms))
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `hedge_after` as `--hedge` spells it.
fn hedge_label(h: &HedgeAfter) -> String {
    match h {
        HedgeAfter::Off => "off".to_string(),
        HedgeAfter::Fixed(d) => format!("fixed:{}", ms_of(*d)),
        HedgeAfter::Adaptive { percentile, floor } => {
            format!("adaptive:{percentile}:{}", ms_of(*floor))
        }
        other => format!("{other:?}"),
    }
}

struct Stores {
    /// What the WAL talks to (store 0 with `--replicas`): counting, over latency, over
    /// the base store.
    wal: Arc<dyn ObjectStore>,
    /// The counting wrappers of every store.
    counting: Counting,
    /// The latency wrapper, when there is one (for the tails and hangs it drew; store 0's
    /// with `--replicas`).
    latent: Option<Arc<LatencyStore>>,
    /// The base store, without latency or counting (to build fixtures fast; store 0's).
    base: Arc<dyn ObjectStore>,
    /// With `--replicas`: every store as the WAL sees it, and every base store.
    replicas: Vec<(Arc<dyn ObjectStore>, Arc<dyn ObjectStore>)>,
    /// With `--throttle-puts-per-s`: the throttle, beneath the latency wrapper.
    throttle: Option<Arc<ThrottleStore>>,
}

/// The counting wrappers of every store, summed.
struct Counting(Vec<Arc<CountingStore>>);

impl Counting {
    fn reset(&self) {
        for c in &self.0 {
            c.reset();
        }
    }

    fn counts(&self) -> Counts {
        let sum = Counts::default();
        for c in &self.0 {
            let c = c.counts();
            for (to, from) in [
                (&sum.puts, &c.puts),
                (&sum.put_bytes, &c.put_bytes),
                (&sum.gets, &c.gets),
                (&sum.heads, &c.heads),
                (&sum.get_bytes, &c.get_bytes),
                (&sum.lists, &c.lists),
                (&sum.listed_keys, &c.listed_keys),
                (&sum.deletes, &c.deletes),
            ] {
                to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        sum
    }

    /// Per store: PUTs, GETs, LISTs, deletes.
    fn per_store(&self) -> serde_json::Value {
        json!(self
            .0
            .iter()
            .map(|c| {
                let c = c.counts();
                json!({
                    "puts": c.puts.load(Ordering::Relaxed),
                    "gets": c.gets.load(Ordering::Relaxed),
                    "lists": c.lists.load(Ordering::Relaxed),
                    "deletes": c.deletes.load(Ordering::Relaxed),
                })
            })
            .collect::<Vec<_>>())
    }
}

impl Stores {
    /// The store(s) as the WAL sees them: over latency and counting.
    fn stores(&self) -> Result<WalStores, Error> {
        if self.replicas.is_empty() {
            return Ok(WalStores::one(self.wal.clone()));
        }
        WalStores::quorum(self.replicas.iter().map(|(w, _)| w.clone()))
    }

    /// The base store(s), without latency or counting, to build fixtures.
    fn fixture_stores(&self) -> Result<WalStores, Error> {
        if self.replicas.is_empty() {
            return Ok(WalStores::one(self.base.clone()));
        }
        WalStores::quorum(self.replicas.iter().map(|(_, b)| b.clone()))
    }

    /// The WAL spawned over the store(s).
    async fn spawn(&self, cfg: &Config) -> Result<WalHandle, Box<dyn std::error::Error>> {
        let (wal, _) = spawn_wal(self.stores()?, cfg.clone(), RestartPolicy::default()).await?;
        Ok(wal)
    }
}

fn profile(c: &Common) -> LatencyProfile {
    let mut p = LatencyProfile::new(
        Duration::from_millis(c.put_latency_ms),
        Duration::from_millis(c.get_latency_ms),
    )
    .put_hang(c.put_hang)
    .get_hang(c.get_hang)
    .seed(c.seed);
    if let Some(t) = c.put_tail {
        p = p.put_tail(t.fraction, millis(t.extra_ms));
    }
    if let Some(t) = c.get_tail {
        p = p.get_tail(t.fraction, millis(t.extra_ms));
    }
    p
}

/// `--store discard`: an in-memory store that keeps every key but not the bytes of
/// objects over [`DISCARD_OVER`] (it stores them empty), so a write run measures the WAL
/// without the memory store copying and holding gigabytes. Writes only: what it
/// discarded cannot be read back (a conflict on a discarded key would compare unequal).
#[derive(Debug)]
struct DiscardHooks;

/// Objects up to this size keep their bytes in `--store discard` (opening objects,
/// keep-alives and small batches stay readable).
const DISCARD_OVER: usize = 64 * 1024;

#[async_trait::async_trait]
impl Hooks for DiscardHooks {
    const NAME: &'static str = "Discard";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        let payload = if payload.content_length() > DISCARD_OVER {
            object_store::PutPayload::new()
        } else {
            payload
        };
        inner.put_opts(location, payload, opts).await
    }
}

fn stores(c: &Common) -> Result<Stores, Box<dyn std::error::Error>> {
    let throttled = c.throttle_puts_per_s.is_some() || c.throttle_gets_per_s.is_some();
    if c.replicas > 1 {
        if throttled && c.throttle_lift_after_s.is_some() {
            return Err("--throttle-lift-after-s takes one store, not --replicas".into());
        }
        return replica_stores(c);
    }
    let base: Arc<dyn ObjectStore> = if c.store == "memory" {
        Arc::new(object_store::memory::InMemory::new())
    } else if c.store == "discard" {
        Wrapper::wrap(
            Arc::new(object_store::memory::InMemory::new()),
            DiscardHooks,
        )
    } else if let Some(dir) = c.store.strip_prefix("file:") {
        let dir = std::path::absolute(dir)?;
        std::fs::create_dir_all(&dir)?;
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&dir)?.with_fsync(true))
    } else {
        return Err(format!(
            "--store must be memory, discard or file:<dir>, not {}",
            c.store
        )
        .into());
    };
    // Counting over latency over the throttle over the store: a refused request takes
    // its round trip, and the counts include it.
    let throttle = throttled.then(|| throttle_over(c, base.clone(), c.seed));
    let under: Arc<dyn ObjectStore> = match &throttle {
        Some(t) => t.clone(),
        None => base.clone(),
    };
    let p = profile(c);
    let latent = (p != LatencyProfile::new(Duration::ZERO, Duration::ZERO).seed(c.seed))
        .then(|| with_latency_profile(under.clone(), p));
    let counting = CountingStore::counts_only(match &latent {
        Some(l) => l.clone(),
        None => under,
    });
    Ok(Stores {
        wal: counting.clone(),
        counting: Counting(vec![counting]),
        latent,
        base,
        replicas: Vec::new(),
        throttle,
    })
}

/// `--throttle-*`'s throttle over `base`.
fn throttle_over(c: &Common, base: Arc<dyn ObjectStore>, seed: u64) -> Arc<ThrottleStore> {
    let mut t = Throttle::unlimited()
        .gets_per_s(c.throttle_gets_per_s)
        .seed(seed);
    t.puts_per_s = c.throttle_puts_per_s;
    if c.throttle_client_retries > 0 {
        t = t.client_retries(
            ClientRetries::object_store_default().with_max_retries(c.throttle_client_retries),
        );
    }
    with_throttle(base, t)
}

/// `--replicas N`: N memory stores, each counting, over down (`--replica-down`), over
/// its own latency wrapper, over its own memory store.
fn replica_stores(c: &Common) -> Result<Stores, Box<dyn std::error::Error>> {
    let n = c.replicas;
    for (flag, values) in [
        ("--replica-put-latency-ms", &c.replica_put_latency_ms),
        ("--replica-get-latency-ms", &c.replica_get_latency_ms),
    ] {
        if !values.is_empty() && values.len() != n {
            return Err(format!("{flag} takes one value per store ({n})").into());
        }
    }
    let mut replicas = Vec::new();
    let mut counting = Vec::new();
    let mut latents = Vec::new();
    let mut throttles = Vec::new();
    let throttled = c.throttle_puts_per_s.is_some() || c.throttle_gets_per_s.is_some();
    for i in 0..n {
        let base: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let under: Arc<dyn ObjectStore> = if throttled && i < c.throttle_replicas.unwrap_or(n) {
            let t = throttle_over(c, base.clone(), c.seed.wrapping_add(i as u64));
            throttles.push(t.clone());
            t
        } else {
            base.clone()
        };
        let mut p = profile(c).seed(c.seed.wrapping_add(i as u64));
        if let Some(ms) = c.replica_put_latency_ms.get(i) {
            p.put = Duration::from_millis(*ms);
        }
        if let Some(ms) = c.replica_get_latency_ms.get(i) {
            p.get = Duration::from_millis(*ms);
        }
        if let Some((store, tail)) = c.replica_put_tail {
            if store == i {
                p = p.put_tail(tail.fraction, millis(tail.extra_ms));
            }
        }
        let latent = with_latency_profile(under, p);
        let down = DownHooks::wrap(latent.clone());
        down.hooks().set_down(c.replica_down == Some(i));
        let counted = CountingStore::counts_only(down);
        replicas.push((counted.clone() as Arc<dyn ObjectStore>, base));
        counting.push(counted);
        latents.push(latent);
    }
    let (wal, base) = replicas
        .first()
        .cloned()
        .ok_or("--replicas needs at least one store")?;
    Ok(Stores {
        wal,
        counting: Counting(counting),
        latent: latents.into_iter().next(),
        base,
        replicas,
        throttle: throttles.into_iter().next(),
    })
}

impl Stores {
    fn latency_counts(&self) -> LatencyCounts {
        self.latent.as_ref().map(|l| l.counts()).unwrap_or_default()
    }
}

fn config(c: &Common) -> Config {
    // Every run writes into a store of its own, empty at first.
    let mut config = Config::new(c.prefix.clone()).with_create_if_missing(true);
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
    if let Some(h) = c.hedge {
        config.hedge_after = h;
    }
    if let Some(v) = c.request_timeout_ms {
        config.request_timeout = Duration::from_millis(v);
    }
    if let Some(v) = c.replay_concurrency {
        config.replay_concurrency = v;
    }
    if let Some(v) = c.replay_budget_mib {
        config.replay_budget_bytes = v.saturating_mul(1024 * 1024);
    }
    config.compression = c.compression;
    config.cipher = c.cipher;
    if c.encrypt {
        let mut key = [0u8; 32];
        let mut rng = SplitMix64::new(c.seed ^ 0x006b_6579);
        for chunk in key.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        config = config.with_encryption_keys(Arc::new(StaticKeys::new(SegmentKey::new(1, key))));
    }
    config
}

/// A line of `/proc/self/status`, in MiB (`VmHWM`: peak resident set; `VmRSS`: now).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Peak resident set size of this process, in MiB (`VmHWM`).
fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    round2(h.value_at_quantile(q) as f64 / 1000.0)
}

fn new_histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)
}

/// What the appends of a write run came to. Latencies go to a few shared histograms:
/// one per task would cost more memory than the WAL itself at thousands of appenders.
struct Recorder {
    shards: Vec<Mutex<Histogram<u64>>>,
    issued: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    unfinished: AtomicU64,
    /// Failed appends by kind of error ([`error_label`]): how many, and the first one's
    /// message.
    errors: Mutex<HashMap<String, (u64, String)>>,
    /// With `--throttle-lift-after-s`: when the throttle is lifted. Appends that arrived
    /// before it are the throttled phase, the rest the lifted one.
    split: OnceLock<Instant>,
    /// Per phase (throttled, lifted): latencies, appends answered and appends failed.
    phases: [Mutex<Histogram<u64>>; 2],
    phase_ok: [AtomicU64; 2],
    phase_failed: [AtomicU64; 2],
}

impl Recorder {
    fn new() -> Result<Arc<Self>, hdrhistogram::CreationError> {
        Ok(Arc::new(Recorder {
            shards: (0..16)
                .map(|_| new_histogram().map(Mutex::new))
                .collect::<Result<_, _>>()?,
            issued: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            unfinished: AtomicU64::new(0),
            errors: Mutex::new(HashMap::new()),
            split: OnceLock::new(),
            phases: [Mutex::new(new_histogram()?), Mutex::new(new_histogram()?)],
            phase_ok: [AtomicU64::new(0), AtomicU64::new(0)],
            phase_failed: [AtomicU64::new(0), AtomicU64::new(0)],
        }))
    }

    fn record(&self, k: u64, since: Instant) {
        let us = since.elapsed().as_micros().max(1) as u64;
        if let Some(h) = self.shards.get(k as usize % self.shards.len()) {
            let _ = h.lock().unwrap_or_else(|p| p.into_inner()).record(us);
        }
        if let Some(phase) = self.phase(since) {
            let _ = self.phases[phase]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(us);
        }
    }

    /// The phase of an append that arrived at `since` (0 throttled, 1 lifted), when the
    /// run has phases.
    fn phase(&self, since: Instant) -> Option<usize> {
        self.split.get().map(|split| usize::from(since >= *split))
    }

    /// An append that arrived at `since` was acknowledged.
    fn acknowledged(&self, since: Instant) {
        self.ok.fetch_add(1, Ordering::Relaxed);
        if let Some(phase) = self.phase(since) {
            self.phase_ok[phase].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An append that arrived at `since` failed with `e`.
    fn failed_with(&self, since: Instant, e: &Error) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Some(phase) = self.phase(since) {
            self.phase_failed[phase].fetch_add(1, Ordering::Relaxed);
        }
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors
            .entry(error_label(e))
            .or_insert_with(|| (0, e.to_string()))
            .0 += 1;
    }

    /// Failed appends by kind: `{label: {count, example}}`.
    fn errors_json(&self) -> serde_json::Value {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let mut labels: Vec<_> = errors.iter().collect();
        labels.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        let mut out = serde_json::Map::new();
        for (label, (count, example)) in labels {
            out.insert(label.clone(), json!({ "count": count, "example": example }));
        }
        serde_json::Value::Object(out)
    }

    fn merged(&self) -> Result<Histogram<u64>, Box<dyn std::error::Error>> {
        let mut hist = new_histogram()?;
        for h in &self.shards {
            hist.add(&*h.lock().unwrap_or_else(|p| p.into_inner()))?;
        }
        Ok(hist)
    }

    fn pending(&self) -> u64 {
        let done = self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        self.issued.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// One append, from its arrival (scheduled, for the open loop) to its answer. An
/// append dropped unanswered (its task aborted when the drain ends) counts as
/// unfinished, with the time it had waited: its latency is a lower bound.
struct Arrival {
    since: Instant,
    k: u64,
    recorder: Arc<Recorder>,
    settled: bool,
}

impl Arrival {
    fn new(recorder: &Arc<Recorder>, k: u64, since: Instant) -> Self {
        recorder.issued.fetch_add(1, Ordering::Relaxed);
        Arrival {
            since,
            k,
            recorder: recorder.clone(),
            settled: false,
        }
    }

    /// Appends one entry set to `region`; on success marks entries `lag` objects
    /// behind obsolete (not timed). With `stamps` (`follow`), each entry starts with
    /// the instant of the call, and the acknowledged ids are kept.
    async fn append(
        mut self,
        wal: &WalHandle,
        region: u64,
        entries: Vec<Bytes>,
        lag: u64,
        stamps: Option<&follow::Stamps>,
    ) {
        let (entries, called) = match stamps {
            Some(stamps) => stamps.stamp(entries, self.k),
            None => (entries, Instant::now()),
        };
        let result = wal.append(region, entries).await;
        self.settled = true;
        match result {
            Ok(receipt) => {
                self.recorder.acknowledged(self.since);
                self.recorder.record(self.k, self.since);
                if let Some(stamps) = stamps {
                    stamps.acknowledged(&receipt, self.k, called);
                }
                let sequence = receipt.sequence;
                if lag > 0 && sequence > lag {
                    let behind = object_store_wal::entry_id(sequence - lag, 0) - 1;
                    let _ = wal.obsolete(region, behind).await;
                }
            }
            Err(e) => {
                self.recorder.failed_with(self.since, &e);
            }
        }
    }
}

/// A failed append's kind of error, for the counts by kind: the variant, with the
/// reason an epoch ended or the bound that refused, and the durability.
fn error_label(e: &Error) -> String {
    let what = match e {
        Error::EpochEnded { reason, .. } => format!("EpochEnded({reason:?})"),
        Error::Backpressure { limit, .. } => format!("Backpressure({limit:?})"),
        other => {
            let debug = format!("{other:?}");
            debug
                .split([' ', '{', '('])
                .next()
                .unwrap_or_default()
                .to_string()
        }
    };
    format!("{what}/{:?}", e.durability())
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if !self.settled {
            self.recorder.unfinished.fetch_add(1, Ordering::Relaxed);
            self.recorder.record(self.k, self.since);
        }
    }
}

/// The region of the open loop's `k`-th append: a stride that visits every region.
fn region_of(k: u64, regions: u64) -> u64 {
    k.wrapping_mul(7919) % regions.max(1)
}

/// Closed loop: `--appenders` callers, each appending again as soon as it is answered,
/// until `--seconds` or `--appends`. Returns when every caller stopped (or was aborted
/// `--drain-seconds` after the deadline).
async fn closed_loop(
    c: &Common,
    wal: &WalHandle,
    recorder: &Arc<Recorder>,
    payloads: &Arc<Payloads>,
    started: Instant,
) {
    let budget = Arc::new(AtomicU64::new(c.appends.unwrap_or(u64::MAX)));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    for a in 0..c.appenders {
        let (wal, payloads, budget, stop) =
            (wal.clone(), payloads.clone(), budget.clone(), stop.clone());
        let recorder = recorder.clone();
        let (regions, per, lag) = (c.regions, c.entries_per_append.max(1), c.obsolete_lag);
        let mut uniform = c
            .uniform_regions
            .then(|| SplitMix64::new(c.seed ^ (a as u64).wrapping_mul(0x9E37_79B9)));
        tasks.spawn(async move {
            let mut k = a as u64;
            while !stop.load(Ordering::Relaxed)
                && budget
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                    .is_ok()
            {
                let region = match uniform.as_mut() {
                    Some(rng) => rng.below(regions.max(1)),
                    None => k % regions.max(1),
                };
                k += 7919;
                let arrival = Arrival::new(&recorder, a as u64, Instant::now());
                let entries = (0..per as u64)
                    .map(|j| payloads.entry(k * 31 + j))
                    .collect();
                arrival.append(&wal, region, entries, lag, None).await;
            }
        });
    }
    if c.appends.is_none() {
        let deadline = started + secs(c.seconds);
        let _ = tokio::time::timeout_at(deadline.into(), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        drain(&mut tasks, c.drain_seconds).await;
    } else {
        while tasks.join_next().await.is_some() {}
    }
}

/// Waits up to `seconds` for the tasks left, then aborts the rest (their appends count
/// as unfinished).
async fn drain(tasks: &mut JoinSet<()>, seconds: f64) {
    let until = tokio::time::Instant::now() + secs(seconds);
    while let Ok(Some(_)) = tokio::time::timeout_at(until, tasks.join_next()).await {}
    tasks.shutdown().await;
}

/// Open loop: arrivals at `rate` per second with exponential gaps (seeded), each append
/// its own task, for `--seconds` (or `--appends` arrivals). Latency counts from each
/// arrival's scheduled time, so time spent queueing behind a slow WAL (or a late timer)
/// shows. Returns the seconds over which arrivals were offered. With `stamps`
/// (`follow`), each entry carries the instant its append was called.
async fn open_loop(
    c: &Common,
    rate: f64,
    wal: &WalHandle,
    recorder: &Arc<Recorder>,
    payloads: &Arc<Payloads>,
    started: Instant,
    stamps: Option<&Arc<follow::Stamps>>,
) -> f64 {
    // The arrivals are timed by an OS thread: tokio's timers fire on millisecond ticks,
    // which would start each append up to a millisecond after its scheduled time and
    // charge that to the WAL (latency counts from the schedule).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let (seed, appends, seconds) = (c.seed, c.appends, c.seconds);
    let dispatcher = std::thread::spawn(move || {
        let mut rng = SplitMix64::new(seed).fork();
        let mut at = 0.0f64;
        let mut issued = 0u64;
        loop {
            if appends.is_some_and(|n| issued >= n) {
                break;
            }
            let gap = -(1.0 - rng.unit()).ln() / rate;
            if appends.is_none() && at + gap >= seconds {
                at = seconds;
                break;
            }
            at += gap;
            let scheduled = started + secs(at);
            let now = Instant::now();
            if scheduled > now {
                std::thread::sleep(scheduled - now);
            }
            if tx.send((issued, scheduled)).is_err() {
                break;
            }
            issued += 1;
        }
        at
    });
    let mut tasks = JoinSet::new();
    let (per, lag) = (c.entries_per_append.max(1), c.obsolete_lag);
    while let Some((k, scheduled)) = rx.recv().await {
        let arrival = Arrival::new(recorder, k, scheduled);
        let entries = (0..per as u64)
            .map(|j| payloads.entry(k * per as u64 + j))
            .collect();
        let wal = wal.clone();
        let region = region_of(k, c.regions);
        let stamps = stamps.cloned();
        tasks.spawn(async move {
            arrival
                .append(&wal, region, entries, lag, stamps.as_deref())
                .await
        });
        while tasks.try_join_next().is_some() {}
    }
    let at = dispatcher.join().unwrap_or(seconds);
    drain(&mut tasks, c.drain_seconds).await;
    at
}

struct WriteResult {
    line: serde_json::Value,
    mib_per_s: f64,
    wal: WalHandle,
}

/// One soak report: what the interval that just ended came to.
#[derive(Debug, Clone, Copy)]
struct SoakSample {
    appends_per_s: f64,
    rss_mib: f64,
    heap_mib: f64,
    /// The interval's append latency (p50, p99), in milliseconds.
    p50_ms: f64,
    p99_ms: f64,
}

/// Prints, every `period`, one JSON line of the soak: the interval's appends/s and
/// latency percentiles, RSS (now and peak), the keys under the prefix and what the WAL
/// holds; each interval's appends/s, latency and RSS also go to `samples`, for the
/// summary. Runs until aborted.
async fn soak_reporter(
    wal: WalHandle,
    base: Arc<dyn ObjectStore>,
    prefix: String,
    recorder: Arc<Recorder>,
    started: Instant,
    (period, samples, trim): (Duration, Arc<Mutex<Vec<SoakSample>>>, bool),
) {
    let mut ticker = tokio::time::interval_at((started + period).into(), period);
    // What was recorded up to the last report.
    let Ok(mut before) = new_histogram() else {
        return;
    };
    let mut last_appends = 0u64;
    let mut last_at = started;
    let mut n = 0u64;
    loop {
        ticker.tick().await;
        let Ok(st) = wal.stats().await else {
            return;
        };
        let now = Instant::now();
        let dt = now.duration_since(last_at).as_secs_f64().max(1e-9);
        let rate = (st.appends - last_appends) as f64 / dt;
        last_appends = st.appends;
        last_at = now;
        n += 1;
        let live_keys = count_prefix(&base, &prefix).await.unwrap_or(0);
        // The interval's latencies: everything recorded so far less what was before.
        let (p50_ms, p99_ms, max_ms) = recorder.merged().map_or_else(
            |_| Default::default(),
            |now| {
                let mut interval = now.clone();
                let quantiles = interval.subtract(&before).map(|()| {
                    let ms = |q: f64| interval.value_at_quantile(q) as f64 / 1000.0;
                    (ms(0.5), ms(0.99), ms(1.0))
                });
                before = now;
                quantiles.unwrap_or_default()
            },
        );
        let sample = SoakSample {
            appends_per_s: rate,
            rss_mib: status_mib("VmRSS:"),
            heap_mib: heap_mib(),
            p50_ms,
            p99_ms,
        };
        samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sample);
        let trimmed = trim.then(|| {
            malloc_trim();
            round2(status_mib("VmRSS:"))
        });
        println!(
            "{}",
            json!({
                "rss_trimmed_mib": trimmed,
                "workload": "soak",
                "allocator": allocator_name(),
                "report": n,
                "minute": round2(now.duration_since(started).as_secs_f64() / 60.0),
                "rss_mib": round2(sample.rss_mib),
                "peak_rss_mib": round2(peak_rss_mib()),
                "heap_mib": round2(sample.heap_mib),
                "large_allocs": LARGE_ALLOCS.load(Ordering::Relaxed),
                "largest_alloc_kib": LARGEST_ALLOC.load(Ordering::Relaxed) / 1024,
                "threads": threads(),
                "appends_per_s": rate.round(),
                "p50_ms": round2(p50_ms),
                "p99_ms": round2(p99_ms),
                "max_ms": round2(max_ms),
                "appends": st.appends,
                "failed_appends": st.failed_appends,
                "live_keys": live_keys,
                "catalog_objects": st.chain_objects,
                "catalog_regions": st.catalog_regions,
                "readers": st.readers,
                "queued": st.queued,
                "watermarks": st.watermarks,
                "floor": st.floor,
                "reclaimed_below": st.reclaimed_below,
                "pending_bytes": st.pending_bytes,
            })
        );
    }
}

/// Returns the allocator's free memory to the system, where it can (glibc).
fn malloc_trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keys under `prefix` in `store` (the soak's live keys).
async fn count_prefix(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
) -> Result<u64, object_store::Error> {
    let prefix = object_store::path::Path::from(prefix);
    let mut keys = 0u64;
    let mut listing = store.list(Some(&prefix));
    while let Some(meta) = listing.next().await {
        meta?;
        keys += 1;
    }
    Ok(keys)
}

/// The soak: a write run of `--minutes` with a report line every `--report-seconds`,
/// then the write's own line and a summary: the last interval against the third (the
/// first two hold the warm-up), appends/s, latency and RSS.
async fn soak(a: &SoakArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = a.common.clone();
    c.seconds = a.minutes * 60.0;
    let s = stores(&c)?;
    let samples = Arc::new(Mutex::new(Vec::new()));
    let report = Some((secs(a.report_seconds.max(1.0)), samples.clone(), a.trim));
    let r = write_reporting(&c, &s, report).await?;
    stop(&r.wal).await?;
    println!("{}", r.line);
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let third = samples.get(2).or(samples.first()).copied();
    let last = samples.last().copied();
    let pct = |a: f64, b: f64| round2((b - a) / a.max(1e-9) * 100.0);
    if let (Some(third), Some(last)) = (third, last) {
        println!(
            "{}",
            json!({
                "workload": "soak-summary",
                "reports": samples.len(),
                "third_appends_per_s": third.appends_per_s.round(),
                "last_appends_per_s": last.appends_per_s.round(),
                "appends_per_s_change_pct": pct(third.appends_per_s, last.appends_per_s),
                "third_rss_mib": round2(third.rss_mib),
                "last_rss_mib": round2(last.rss_mib),
                "rss_change_pct": pct(third.rss_mib, last.rss_mib),
                "third_heap_mib": round2(third.heap_mib),
                "last_heap_mib": round2(last.heap_mib),
                "heap_change_pct": pct(third.heap_mib, last.heap_mib),
                "third_p50_ms": round2(third.p50_ms),
                "last_p50_ms": round2(last.p50_ms),
                "third_p99_ms": round2(third.p99_ms),
                "last_p99_ms": round2(last.p99_ms),
                "peak_rss_mib": round2(peak_rss_mib()),
            })
        );
    }
    Ok(())
}

async fn write(c: &Common, s: &Stores) -> Result<WriteResult, Box<dyn std::error::Error>> {
    write_reporting(c, s, None).await
}

/// The process's metrics recorder, installed by the first throttled run before its WAL
/// opens (a WAL registers its metrics when it opens): the create retries and the PUTs
/// by outcome are only counted there.
fn metrics_recorder() -> Option<&'static metrics_exporter_prometheus::PrometheusHandle> {
    static RECORDER: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        OnceLock::new();
    RECORDER
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .ok()
        })
        .as_ref()
}

/// From the recorder's text: `wal_create_retries_total` and `wal_requests_total` of
/// `op="put"` by outcome, summed over prefixes.
fn scrape_put_metrics(text: &str) -> (u64, HashMap<String, u64>) {
    let value = |line: &str| -> u64 {
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    let mut retries = 0;
    let mut outcomes = HashMap::new();
    for line in text.lines() {
        if line.starts_with("wal_create_retries_total") {
            retries += value(line);
        } else if line.starts_with("wal_requests_total") && line.contains("op=\"put\"") {
            let outcome = line
                .split("outcome=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?");
            *outcomes.entry(outcome.to_string()).or_insert(0) += value(line);
        }
    }
    (retries, outcomes)
}

/// From the recorder's text: `wal_object_interval_seconds`, the largest over prefixes.
fn scrape_interval(text: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with("wal_object_interval_seconds"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

/// One sample of a throttled run, every [`SAMPLE_EVERY`].
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Seconds since the run started.
    t: f64,
    objects: u64,
    /// Appends answered so far, and failed (the bench's counts).
    acked: u64,
    failed: u64,
    throttle: ThrottleCounts,
    epoch: u64,
    restarts: u64,
    pending_bytes: u64,
    queued: u64,
    in_flight: u64,
    /// The writer's interval between object starts (`wal_object_interval_seconds`),
    /// when the recorder has it.
    interval_s: Option<f64>,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// A run over a throttled store (`--throttle-puts-per-s`): the sampler, the lift, and
/// what they saw.
struct ThrottleRun {
    throttle: Arc<ThrottleStore>,
    before: ThrottleCounts,
    metrics_before: (u64, HashMap<String, u64>),
    samples: Arc<Mutex<Vec<Sample>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ThrottleRun {
    /// Starts sampling `wal` and, with `--throttle-lift-after-s`, the lift.
    fn start(
        c: &Common,
        throttle: &Arc<ThrottleStore>,
        wal: &WalHandle,
        recorder: &Arc<Recorder>,
        started: Instant,
    ) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let (wal, rec, t, out) = (
            wal.clone(),
            recorder.clone(),
            throttle.clone(),
            samples.clone(),
        );
        let before = throttle.counts();
        tasks.push(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(SAMPLE_EVERY);
            loop {
                ticker.tick().await;
                if let Some(sample) = Self::sample(&wal, &rec, &t, &before, started).await {
                    out.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
                }
            }
        }));
        if let Some(lift) = c.throttle_lift_after_s {
            let at = started + secs(lift);
            let _ = recorder.split.set(at);
            let t = throttle.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                t.set_puts_per_s(None);
                t.set_gets_per_s(None);
                eprintln!("bench write: throttle lifted at {lift:.1}s");
            }));
        }
        let metrics_before = metrics_recorder()
            .map(|h| scrape_put_metrics(&h.render()))
            .unwrap_or_default();
        ThrottleRun {
            throttle: throttle.clone(),
            before,
            metrics_before,
            samples,
            tasks,
        }
    }

    /// The WAL's counts and the throttle's now.
    async fn sample(
        wal: &WalHandle,
        recorder: &Recorder,
        throttle: &ThrottleStore,
        before: &ThrottleCounts,
        started: Instant,
    ) -> Option<Sample> {
        let st = wal.stats().await.ok()?;
        Some(Sample {
            t: started.elapsed().as_secs_f64(),
            objects: st.objects,
            acked: recorder.ok.load(Ordering::Relaxed),
            failed: recorder.failed.load(Ordering::Relaxed),
            throttle: throttle.counts().since(before),
            epoch: st.epoch,
            restarts: st.restarts,
            pending_bytes: st.pending_bytes,
            queued: st.queued,
            in_flight: st.in_flight,
            interval_s: metrics_recorder().and_then(|h| scrape_interval(&h.render())),
        })
    }

    /// Stops sampling (and the lift, if still to come), with one last sample.
    async fn stop(&self, wal: &WalHandle, recorder: &Recorder, started: Instant) {
        for t in &self.tasks {
            t.abort();
        }
        let last = Self::sample(wal, recorder, &self.throttle, &self.before, started).await;
        if let Some(sample) = last {
            self.samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(sample);
        }
    }

    /// The throttle's fields of the write line: what it refused, what the WAL made of
    /// it, the per-second series, each phase, and how long after the lift the WAL wrote
    /// at `min_object_interval` again.
    fn fields(
        &self,
        c: &Common,
        cfg: &Config,
        recorder: &Recorder,
        offered: f64,
        line: &mut serde_json::Value,
    ) {
        let counts = self.throttle.counts().since(&self.before);
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        line["throttle_puts_per_s"] = json!(c.throttle_puts_per_s);
        line["throttle_gets_per_s"] = json!(c.throttle_gets_per_s);
        line["throttle_lift_after_s"] = json!(c.throttle_lift_after_s);
        line["throttle_client_retries"] = json!(c.throttle_client_retries);
        line["throttled_puts"] = json!(counts.puts_throttled);
        line["admitted_puts"] = json!(counts.puts_admitted);
        line["throttled_gets"] = json!(counts.gets_throttled);
        line["throttle_errors"] = json!(counts.errors);
        line["client_retries"] = json!(counts.client_retries);
        line["failed_by_error"] = recorder.errors_json();
        if let Some(h) = metrics_recorder() {
            let (retries, outcomes) = scrape_put_metrics(&h.render());
            let (retries0, outcomes0) = &self.metrics_before;
            line["create_retries"] = json!(retries.saturating_sub(*retries0));
            let mut delta = serde_json::Map::new();
            for (k, v) in outcomes {
                let v = v.saturating_sub(outcomes0.get(&k).copied().unwrap_or(0));
                delta.insert(k, json!(v));
            }
            line["put_outcomes"] = serde_json::Value::Object(delta);
        }
        let (Some(first), Some(last)) = (samples.first().copied(), samples.last().copied()) else {
            return;
        };
        line["epoch_first"] = json!(first.epoch);
        line["epoch_last"] = json!(last.epoch);
        line["restarts"] = json!(last.restarts.saturating_sub(first.restarts));
        let max = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
        line["max_pending_mib"] = json!(round2(max(|s| s.pending_bytes) as f64 / MIB));
        line["max_queued"] = json!(max(|s| s.queued));
        line["max_in_flight"] = json!(max(|s| s.in_flight));
        // The last sample at or before `t` (the first one before it).
        let at = |t: f64| -> Sample {
            let i = samples.partition_point(|s| s.t <= t);
            samples[i.saturating_sub(1)]
        };
        let seconds = last.t.ceil() as usize;
        let series = |f: fn(&Sample) -> u64| -> Vec<u64> {
            (0..seconds)
                .map(|i| f(&at(i as f64 + 1.0)).saturating_sub(f(&at(i as f64))))
                .collect()
        };
        line["series_objects"] = json!(series(|s| s.objects));
        line["series_admitted_puts"] = json!(series(|s| s.throttle.puts_admitted));
        line["series_throttled_puts"] = json!(series(|s| s.throttle.puts_throttled));
        line["series_acked_appends"] = json!(series(|s| s.acked));
        line["series_failed_appends"] = json!(series(|s| s.failed));
        line["series_pending_mib"] = json!((0..seconds)
            .map(|i| round2(at(i as f64 + 1.0).pending_bytes as f64 / MIB))
            .collect::<Vec<_>>());
        // The phases: throttled until the lift (or the end of the arrivals), lifted after.
        let lift = c.throttle_lift_after_s.filter(|l| *l < offered);
        let bounds = match lift {
            Some(l) => vec![("throttled", 0.0, l), ("lifted", l, offered)],
            None => vec![("throttled", 0.0, offered)],
        };
        let mut phases = serde_json::Map::new();
        for (i, (name, from, to)) in bounds.into_iter().enumerate() {
            let (a, b) = (at(from), at(to));
            let dt = (b.t - a.t).max(1e-9);
            let rate = |f: fn(&Sample) -> u64| round2(f(&b).saturating_sub(f(&a)) as f64 / dt);
            let mut phase = json!({
                "from_s": round2(from),
                "to_s": round2(to),
                "objects_per_s": rate(|s| s.objects),
                "admitted_puts_per_s": rate(|s| s.throttle.puts_admitted),
                "throttled_puts_per_s": rate(|s| s.throttle.puts_throttled),
                "acked_appends_per_s": rate(|s| s.acked),
                "failed_appends_per_s": rate(|s| s.failed),
            });
            // By arrival: the appends that arrived in the phase, however late answered.
            if recorder.split.get().is_some() {
                let h = recorder.phases[i].lock().unwrap_or_else(|p| p.into_inner());
                phase["arrived_acked"] = json!(recorder.phase_ok[i].load(Ordering::Relaxed));
                phase["arrived_failed"] = json!(recorder.phase_failed[i].load(Ordering::Relaxed));
                phase["p50_ms"] = json!(ms(&h, 0.5));
                phase["p99_ms"] = json!(ms(&h, 0.99));
                phase["max_ms"] = json!(round2(h.max() as f64 / 1000.0));
            }
            phases.insert(name.to_string(), phase);
        }
        line["phases"] = serde_json::Value::Object(phases);
        // Back at the interval: the first one-second window from the lift on with at
        // least 90 % of the objects `min_object_interval` allows.
        let interval = cfg.min_object_interval.as_secs_f64();
        if let (Some(l), true) = (lift, interval > 0.0) {
            let target = 0.9 / interval;
            line["objects_per_s_target"] = json!(round2(target));
            let back = samples
                .iter()
                .filter(|s| s.t >= l && s.t + 1.0 <= last.t)
                .find(|s| at(s.t + 1.0).objects.saturating_sub(s.objects) as f64 >= target)
                .map(|s| round2(s.t - l));
            line["back_at_interval_after_s"] = json!(back);
            // The writer's own interval back at `min_object_interval` (the gauge, to
            // the microsecond), from the lift on.
            let back = samples
                .iter()
                .filter(|s| s.t >= l)
                .find(|s| s.interval_s.is_some_and(|i| i <= interval + 1e-6))
                .map(|s| round2(s.t - l));
            line["interval_back_after_s"] = json!(back);
        }
        let intervals: Vec<f64> = samples.iter().filter_map(|s| s.interval_s).collect();
        if !intervals.is_empty() {
            let most = intervals.iter().copied().fold(0.0, f64::max);
            let mean = intervals.iter().sum::<f64>() / intervals.len() as f64;
            line["max_interval_ms"] = json!(round2(most * 1000.0));
            line["mean_interval_ms"] = json!(round2(mean * 1000.0));
            line["series_interval_ms"] = json!((0..seconds)
                .map(|i| at(i as f64 + 1.0).interval_s.map(|v| round2(v * 1000.0)))
                .collect::<Vec<_>>());
        }
    }
}

/// A soak's reporting: its period, where its samples go, and whether to trim.
type SoakReport = Option<(Duration, Arc<Mutex<Vec<SoakSample>>>, bool)>;

/// [`write`], with a soak's report lines instead of the per-second progress when
/// `report` is given.
async fn write_reporting(
    c: &Common,
    s: &Stores,
    report: SoakReport,
) -> Result<WriteResult, Box<dyn std::error::Error>> {
    let cfg = config(c);
    if s.throttle.is_some() {
        // Before the WAL opens: it registers its metrics then.
        metrics_recorder();
    }
    let wal = s.spawn(&cfg).await?;
    wal.ready().await?;
    s.counting.reset();
    let drawn_before = s.latency_counts();
    let keys_before = count_keys(s, &cfg.prefix).await?;
    let payloads = Arc::new(Payloads::new(
        &c.payload,
        c.payload_file.as_deref(),
        c.entry_bytes,
        c.seed,
    )?);
    let recorder = Recorder::new()?;
    let started = Instant::now();
    let throttled = s
        .throttle
        .as_ref()
        .map(|t| ThrottleRun::start(c, t, &wal, &recorder, started));
    let progress = if let Some(report) = report {
        let (wal, base, prefix) = (wal.clone(), s.base.clone(), cfg.prefix.clone());
        tokio::spawn(soak_reporter(
            wal,
            base,
            prefix,
            recorder.clone(),
            started,
            report,
        ))
    } else {
        let (wal, recorder) = (wal.clone(), recorder.clone());
        let throttle = s.throttle.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            ticker.tick().await;
            loop {
                ticker.tick().await;
                if let Ok(st) = wal.stats().await {
                    let throttled = throttle.as_ref().map_or(String::new(), |t| {
                        let n = t.counts();
                        format!(
                            " epoch {} failed {} throttled {}/{} puts",
                            st.epoch,
                            recorder.failed.load(Ordering::Relaxed),
                            n.puts_throttled,
                            n.puts_throttled + n.puts_admitted
                        )
                    });
                    eprintln!(
                        "bench write: {:.0}s appends {} objects {} pending {} tasks {} rss_mib {:.1}{throttled}",
                        started.elapsed().as_secs_f64(),
                        st.appends,
                        st.objects,
                        recorder.pending(),
                        tokio::runtime::Handle::current().metrics().num_alive_tasks(),
                        status_mib("VmRSS:")
                    );
                }
            }
        })
    };
    let offered_seconds = match c.rate {
        Some(rate) => Some(open_loop(c, rate, &wal, &recorder, &payloads, started, None).await),
        None => {
            closed_loop(c, &wal, &recorder, &payloads, started).await;
            None
        }
    };
    progress.abort();
    if let Some(t) = &throttled {
        t.stop(&wal, &recorder, started).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let hist = recorder.merged()?;
    let ok = recorder.ok.load(Ordering::Relaxed);
    let failed = recorder.failed.load(Ordering::Relaxed);
    let unfinished = recorder.unfinished.load(Ordering::Relaxed);
    let issued = recorder.issued.load(Ordering::Relaxed);
    let stats = wal.stats().await?;
    let drawn = s.latency_counts().since(&drawn_before);
    let created = count_keys(s, &cfg.prefix)
        .await?
        .saturating_sub(keys_before);
    let counts = s.counting.counts();
    let puts = counts.puts.load(Ordering::Relaxed);
    // One PUT per object in each store.
    let copies = stats.objects * s.counting.0.len() as u64;
    let put_bytes = counts.put_bytes.load(Ordering::Relaxed);
    let mib = (ok * c.entries_per_append as u64 * c.entry_bytes as u64) as f64 / MIB;
    let mut line = json!({
        "workload": "write",
        "store": c.store,
        "put_latency_ms": c.put_latency_ms,
        "get_latency_ms": c.get_latency_ms,
        "regions": c.regions,
        "entry_bytes": c.entry_bytes,
        "entries_per_append": c.entries_per_append,
        "min_object_interval_ms": cfg.min_object_interval.as_millis() as u64,
        "max_in_flight": cfg.max_in_flight,
        "max_batch_bytes": cfg.max_batch_bytes,
        "max_pending_bytes": cfg.max_pending_bytes,
        "hedge": hedge_label(&cfg.hedge_after),
        "request_timeout_ms": round2(ms_of(cfg.request_timeout)),
        "seconds": round2(elapsed),
        "appends": ok,
        "failed": failed,
        "unfinished": unfinished,
        "appends_per_s": (ok as f64 / elapsed).round(),
        "mib_per_s": round2(mib / elapsed),
        "p50_ms": ms(&hist, 0.5),
        "p90_ms": ms(&hist, 0.9),
        "p99_ms": ms(&hist, 0.99),
        "p999_ms": ms(&hist, 0.999),
        "max_ms": round2(hist.max() as f64 / 1000.0),
        "objects": stats.objects,
        "objects_created": created,
        "puts": puts,
        "extra_puts_pct": if stats.objects > 0 { round2((puts as f64 - copies as f64) / copies as f64 * 100.0) } else { 0.0 },
        "puts_per_s": round2(puts as f64 / elapsed),
        "hedged": stats.hedged,
        "hedge_wins": stats.hedge_wins,
        "timeouts": stats.timeouts,
        "retries": stats.retries,
        "put_bytes": put_bytes,
        "puts_per_mib": if put_bytes > 0 { (puts as f64 / (put_bytes as f64 / MIB) * 1000.0).round() / 1000.0 } else { 0.0 },
        "objects_per_s": round2(stats.objects as f64 / elapsed),
        "peak_rss_mib": round2(peak_rss_mib()),
        "allocator": allocator_name(),
        "rss_bound_mib": round2((cfg.max_pending_bytes + cfg.max_in_flight as u64 * cfg.max_batch_bytes) as f64 / MIB + 64.0),
    });
    line["payload"] = json!(c
        .payload_file
        .as_deref()
        .map_or(c.payload.clone(), |f| format!("file:{f}")));
    line["compression"] = json!(c.compression.to_string());
    line["encrypt"] = json!(c.encrypt);
    if c.encrypt {
        line["cipher"] = json!(c.cipher.resolve().to_string());
    }
    // Every byte PUT (each copy, over several stores) per payload byte acknowledged.
    line["stored_bytes"] = json!(put_bytes);
    line["stored_per_payload_byte"] = json!(if mib > 0.0 {
        (put_bytes as f64 / (mib * MIB) * 10000.0).round() / 10000.0
    } else {
        0.0
    });
    match (c.rate, offered_seconds) {
        (Some(rate), Some(window)) => {
            line["mode"] = json!("open");
            line["offered_rate"] = json!(rate);
            line["issued"] = json!(issued);
            line["issued_rate"] = json!(round2(issued as f64 / window.max(1e-9)));
            line["rate"] = json!(round2(ok as f64 / elapsed));
            line["seed"] = json!(c.seed);
        }
        _ => {
            line["mode"] = json!("closed");
            line["appenders"] = json!(c.appenders);
        }
    }
    latency_fields(c, &drawn, &mut line);
    replica_fields(c, s, &mut line);
    if let Some(t) = &throttled {
        let offered = offered_seconds.unwrap_or(c.seconds.min(elapsed));
        t.fields(c, &cfg, &recorder, offered, &mut line);
    } else if failed > 0 {
        line["failed_by_error"] = recorder.errors_json();
    }
    cost_fields(&counts, elapsed, "", &mut line);
    line["catalog_objects"] = json!(stats.chain_objects);
    line["catalog_regions"] = json!(stats.catalog_regions);
    line["readers"] = json!(stats.readers);
    line["watermarks"] = json!(stats.watermarks);
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
        let ro = ObjectStoreLogStore::open_read_only(s.stores()?, cfg.clone()).await?;
        line["obsolete_lag"] = json!(c.obsolete_lag);
        line["uniform_regions"] = json!(c.uniform_regions);
        line["floor"] = json!(after.floor);
        line["reclaimed_below"] = json!(after.reclaimed_below);
        line["deleted"] = json!(after.deleted);
        line["listed_keys_after"] = json!(s.counting.counts().listed_keys.load(Ordering::Relaxed));
        line["live_objects_after"] = json!(ro.report().objects.len());
        line["recovery_ms_after"] = json!(round2(t.elapsed().as_secs_f64() * 1000.0));
        line["recovery_gets_after"] = json!(s.counting.counts().gets.load(Ordering::Relaxed));
    }
    let idle_seconds = c.idle_seconds.unwrap_or(0.0);
    if idle_seconds > 0.0 {
        s.counting.reset();
        tokio::time::sleep(secs(idle_seconds)).await;
        line["idle_seconds"] = json!(idle_seconds);
        line["idle_requests"] = json!(s.counting.counts().requests());
        cost_fields(&s.counting.counts(), idle_seconds, "idle_", &mut line);
    }
    Ok(WriteResult {
        line,
        mib_per_s: mib / elapsed,
        wal,
    })
}

/// `requests_per_hour` and `usd_per_month` (by price table, `support/prices.rs`) of a
/// run's counts over `seconds`, under `prefix`-ed names.
fn cost_fields(counts: &Counts, seconds: f64, prefix: &str, line: &mut serde_json::Value) {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let run = prices::RunCounts {
        puts: load(&counts.puts),
        gets: load(&counts.gets),
        lists: load(&counts.lists),
        listed_keys: load(&counts.listed_keys),
        deletes: load(&counts.deletes),
        put_bytes: load(&counts.put_bytes),
        get_bytes: load(&counts.get_bytes),
    };
    let (requests, usd) = prices::HourlyRequests::from_run(run, seconds).fields();
    line[format!("{prefix}requests_per_hour")] = requests;
    line[format!("{prefix}usd_per_month")] = usd;
}

/// Keys under the WAL prefix in the base store (no latency, not counted): after a run,
/// less before it, the objects that landed, acknowledged or not.
async fn count_keys(s: &Stores, prefix: &str) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(count_prefix(&s.base, prefix).await?)
}

/// The tails and hangs asked for, and how many were drawn, when any were.
/// With `--replicas`: the stores and each one's requests, beside the totals.
fn replica_fields(c: &Common, s: &Stores, line: &mut serde_json::Value) {
    if s.replicas.is_empty() {
        return;
    }
    line["replicas"] = json!(c.replicas);
    line["replica_put_latency_ms"] = json!(c.replica_put_latency_ms);
    line["replica_down"] = json!(c.replica_down);
    line["per_store"] = s.counting.per_store();
}

fn latency_fields(c: &Common, drawn: &LatencyCounts, line: &mut serde_json::Value) {
    if let Some(t) = tail_label(&c.put_tail) {
        line["put_tail"] = json!(t);
        line["put_tails_drawn"] = json!(drawn.put_tails);
    }
    if let Some(t) = tail_label(&c.get_tail) {
        line["get_tail"] = json!(t);
        line["get_tails_drawn"] = json!(drawn.get_tails);
    }
    if c.put_hang > 0.0 {
        line["put_hang"] = json!(c.put_hang);
        line["put_hangs_drawn"] = json!(drawn.put_hangs);
    }
    if c.get_hang > 0.0 {
        line["get_hang"] = json!(c.get_hang);
        line["get_hangs_drawn"] = json!(drawn.get_hangs);
    }
}

/// Stops `wal`, waiting at most 5 s (a hung request the WAL still waits for would
/// otherwise keep the benchmark from ending).
async fn stop(wal: &WalHandle) -> Result<(), Box<dyn std::error::Error>> {
    match wal.with_timeout(Duration::from_secs(5)).stop().await {
        Err(Error::CallTimeout { .. }) => {
            eprintln!("bench: the WAL did not stop within 5 s; leaving it");
            Ok(())
        }
        r => Ok(r?),
    }
}

/// The ceiling: the same volume in objects of this crate's format, `max_in_flight`
/// conditional creates at once straight to the store, with no WAL (no actors, no
/// protocol, no waiting callers): what the store and the encoding allow.
async fn limit(
    c: &Common,
    s: &Stores,
) -> Result<(serde_json::Value, f64), Box<dyn std::error::Error>> {
    let cfg = config(c);
    let prefix = format!("{}-limit", c.prefix);
    let payload = Bytes::from(vec![0xa5u8; c.entry_bytes]);
    let per = c.entries_per_append.max(1);
    // What an append adds to an encoded object: its entries with their length prefixes,
    // and a footer record for a region not yet in it (as the WAL's batch counts).
    let append_bytes = (per * (c.entry_bytes + ENTRY_PREFIX_LEN)) as u64;
    if EMPTY_OBJECT_LEN as u64 + FOOTER_RECORD_LEN as u64 + append_bytes > cfg.max_batch_bytes {
        return Err(format!(
            "limit: an append of {append_bytes} bytes does not fit an object of --max-batch-bytes {}",
            cfg.max_batch_bytes
        )
        .into());
    }
    // A store kept from an earlier run: go on above what it holds.
    let listed: Vec<_> = s
        .wal
        .list(Some(&object_store::path::Path::from(prefix.as_str())))
        .try_collect()
        .await?;
    let above = listed
        .iter()
        .filter_map(|m| {
            m.location
                .filename()?
                .strip_suffix(".wal")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    s.counting.reset();
    let total = c.appends;
    let started = Instant::now();
    let deadline = started + secs(c.seconds);
    let mut appended = 0u64;
    let mut k = 0u64;
    let mut mib = 0.0;
    let mut objects = 0u64;
    let mut link = match above {
        0 => Link::NONE,
        sequence => Link { sequence, epoch: 1 },
    };
    let put_create = || object_store::PutOptions {
        mode: object_store::PutMode::Create,
        ..Default::default()
    };
    loop {
        let done = match total {
            Some(t) => appended >= t,
            None => Instant::now() >= deadline,
        };
        if done {
            break;
        }
        // Encode `max_in_flight` objects, then create them at once.
        let mut round = Vec::with_capacity(cfg.max_in_flight);
        while round.len() < cfg.max_in_flight && total.is_none_or(|t| appended < t) {
            let mut regions: std::collections::BTreeMap<u64, Vec<Bytes>> = Default::default();
            let mut encoded = EMPTY_OBJECT_LEN as u64;
            let mut payload_bytes = 0u64;
            while total.is_none_or(|t| appended < t) {
                let region = k % c.regions.max(1);
                let (added, entries) = match regions.get(&region) {
                    Some(e) => (append_bytes, e.len()),
                    None => (append_bytes + FOOTER_RECORD_LEN as u64, 0),
                };
                if encoded + added > cfg.max_batch_bytes
                    || entries + per > MAX_SEGMENT_ENTRIES as usize
                {
                    break;
                }
                k += 7919;
                regions
                    .entry(region)
                    .or_default()
                    .extend(std::iter::repeat_n(payload.clone(), per));
                encoded += added;
                payload_bytes += (per * c.entry_bytes) as u64;
                appended += 1;
            }
            let header = Header {
                sequence: link.sequence + 1,
                epoch: 1,
                link,
                floor: 0,
                claim: false,
                closed: false,
                id_offset: 0,
            };
            let object = encode_object(&header, regions.iter().map(|(r, e)| (*r, &e[..])))?;
            link = Link {
                sequence: header.sequence,
                epoch: 1,
            };
            round.push((header.sequence, payload_bytes, object));
        }
        let creates = round.iter().map(|(sequence, _, object)| {
            let key = object_store::path::Path::from(format!("{prefix}/{sequence:020}.wal"));
            let body = object_store::PutPayload::from_iter(object.chunks().iter().cloned());
            let wal = s.wal.clone();
            async move { wal.put_opts(&key, body, put_create()).await }
        });
        let answers: Vec<_> = stream::iter(creates)
            .buffered(cfg.max_in_flight)
            .collect()
            .await;
        for ((sequence, bytes, _), answer) in round.iter().zip(answers) {
            if let Err(e) = answer {
                return Err(format!("limit: object {sequence} not created: {e}").into());
            }
            mib += *bytes as f64 / MIB;
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

/// Builds `objects` data objects on the base store(s) (no latency, no counting): the
/// sequential front end opens the prefix (its opening object), then the objects of its
/// epoch are encoded with the public format and created straight to each store, 64 at
/// once. Each holds `entries_per_object` entries of `entry_bytes`, the `j`-th entry of
/// object `i` in region `(i * entries_per_object + j) % regions`.
async fn build_chain(
    c: &Common,
    s: &Stores,
    cfg: &Config,
    objects: u64,
    entries_per_object: usize,
    entry_bytes: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let per = entries_per_object.max(1) as u64;
    let regions = c.regions.max(1);
    let encoded_max = EMPTY_OBJECT_LEN as u64
        + per * (entry_bytes + ENTRY_PREFIX_LEN) as u64
        + per.min(regions) * FOOTER_RECORD_LEN as u64;
    if encoded_max > cfg.max_batch_bytes {
        return Err(format!(
            "{per} entries of {entry_bytes} bytes do not fit an object of --max-batch-bytes {}",
            cfg.max_batch_bytes
        )
        .into());
    }
    let mut plain = cfg.clone();
    plain.hedge_after = HedgeAfter::Off;
    let wal = ObjectStoreLogStore::open(s.fixture_stores()?, plain).await?;
    let position = wal.epoch().ok_or("the fixture's WAL opened read-only")?;
    drop(wal);
    let bases: Vec<Arc<dyn ObjectStore>> = if s.replicas.is_empty() {
        vec![s.base.clone()]
    } else {
        s.replicas.iter().map(|(_, b)| b.clone()).collect()
    };
    let payload = Bytes::from(vec![0x5au8; entry_bytes]);
    let build_started = Instant::now();
    let prefix = cfg.prefix.clone();
    let mut creates = stream::iter(0..objects)
        .map(|i| {
            let sequence = position.next_sequence + i;
            let link = match i {
                0 => position.link,
                _ => Link {
                    sequence: sequence - 1,
                    epoch: position.epoch,
                },
            };
            let header = Header {
                sequence,
                epoch: position.epoch,
                link,
                floor: position.floor,
                claim: false,
                closed: false,
                id_offset: 0,
            };
            let mut by_region: std::collections::BTreeMap<u64, Vec<Bytes>> = Default::default();
            for j in 0..per {
                by_region
                    .entry((i * per + j) % regions)
                    .or_default()
                    .push(payload.clone());
            }
            let encoded = encode_object(&header, by_region.iter().map(|(r, e)| (*r, &e[..])));
            let key = object_store::path::Path::from(format!("{prefix}/{sequence:020}.wal"));
            let bases = bases.clone();
            async move {
                let encoded = encoded?;
                for base in &bases {
                    let body =
                        object_store::PutPayload::from_iter(encoded.chunks().iter().cloned());
                    let opts = object_store::PutOptions {
                        mode: object_store::PutMode::Create,
                        ..Default::default()
                    };
                    base.put_opts(&key, body, opts).await?;
                }
                Ok::<_, Box<dyn std::error::Error>>(())
            }
        })
        .buffer_unordered(64);
    while let Some(created) = creates.next().await {
        created?;
    }
    eprintln!(
        "bench: built {objects} objects of {per} entries in {:.1}s",
        build_started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn recover(c: &Common, s: &Stores) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let cfg = config(c);
    // One small object per sequence, the opening object included.
    let objects = c.objects.unwrap_or(10_000);
    build_chain(
        c,
        s,
        &cfg,
        objects.saturating_sub(1),
        4,
        c.entry_bytes.min(4096),
    )
    .await?;
    s.counting.reset();
    let started = Instant::now();
    let wal = ObjectStoreLogStore::open(s.stores()?, cfg.clone()).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let counts = s.counting.counts();
    let mut opens = new_histogram()?;
    opens.record(((elapsed * 1e6) as u64).max(1))?;
    for _ in 1..c.opens {
        let started = Instant::now();
        ObjectStoreLogStore::open(s.stores()?, cfg.clone()).await?;
        opens.record(started.elapsed().as_micros().max(1) as u64)?;
    }
    let gets = counts.gets.load(Ordering::Relaxed);
    let listed = wal.report().objects.len() as u64;
    let ideal = listed as f64 * c.get_latency_ms as f64 / cfg.recovery_concurrency as f64;
    let mut line = json!({
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
        "hedged": wal.request_counts().hedged,
        "timeouts": wal.request_counts().timeouts,
        "opens": c.opens,
        "open_ms_p50": ms(&opens, 0.5),
        "open_ms_p99": ms(&opens, 0.99),
        "open_ms_max": round2(opens.max() as f64 / 1000.0),
        "request_timeout_ms": round2(ms_of(cfg.request_timeout)),
    });
    if let Some(t) = tail_label(&c.put_tail) {
        line["put_tail"] = json!(t);
    }
    if let Some(t) = tail_label(&c.get_tail) {
        line["get_tail"] = json!(t);
    }
    replica_fields(c, s, &mut line);
    Ok(line)
}

/// Resets the peak resident set (`VmHWM`) to the current one, so that a later
/// [`peak_rss_mib`] measures what came after (Linux 4.0 and later; ignored elsewhere).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn replay(c: &Common, s: &Stores) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let cfg = config(c);
    // The data objects the replay reads, and the entries they hold.
    let (data_objects, expected) = match c.objects {
        Some(objects) => {
            let per = c.entries_per_object.unwrap_or(c.regions.max(1) as usize);
            build_chain(c, s, &cfg, objects, per, c.entry_bytes).await?;
            (objects, Some(objects * per.max(1) as u64))
        }
        None => {
            let written = write(c, s).await?;
            stop(&written.wal).await?;
            eprintln!("bench replay: {}", written.line);
            let objects = written.line["objects"].as_u64().unwrap_or(0);
            let appends = written.line["appends"].as_u64().unwrap_or(0);
            (objects, Some(appends * c.entries_per_append.max(1) as u64))
        }
    };
    let wal = s.spawn(&cfg).await?;
    wal.ready().await?;
    let stats = wal.stats().await?;
    reset_peak_rss();
    let rss_before = status_mib("VmRSS:");
    s.counting.reset();
    let drawn_before = s.latency_counts();
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
    let peak = peak_rss_mib();
    let after = wal.stats().await?;
    let drawn = s.latency_counts().since(&drawn_before);
    let counts = s.counting.counts();
    let gets = counts.gets.load(Ordering::Relaxed);
    let objects = data_objects.max(1);
    stop(&wal).await?;
    if expected.is_some_and(|n| n != entries) {
        eprintln!("bench replay: {entries} entries replayed, {expected:?} written");
    }
    let replay_ms = elapsed * 1000.0;
    let ideal =
        data_objects as f64 * c.get_latency_ms as f64 / cfg.replay_concurrency.max(1) as f64;
    let mut line = json!({
        "workload": "replay",
        "store": c.store,
        "get_latency_ms": c.get_latency_ms,
        "regions": c.regions,
        "entry_bytes": c.entry_bytes,
        "replay_concurrency": cfg.replay_concurrency,
        "replay_budget_mib": round2(cfg.replay_budget_bytes as f64 / MIB),
        "objects": data_objects,
        "chain_objects": stats.chain_objects,
        "entries": entries,
        "entries_written": expected,
        "replay_ms": round2(replay_ms),
        "ms_per_object": round2(replay_ms / objects as f64),
        "ideal_ms": round2(ideal),
        "ratio_to_ideal": if ideal > 0.0 { round2(replay_ms / ideal) } else { 0.0 },
        "gets": gets,
        "gets_per_object": round2(gets as f64 / objects as f64),
        "bytes_read": counts.get_bytes.load(Ordering::Relaxed),
        "entries_per_s": (entries as f64 / elapsed).round(),
        "hedged": after.hedged.saturating_sub(stats.hedged),
        "hedge_wins": after.hedge_wins.saturating_sub(stats.hedge_wins),
        "timeouts": after.timeouts.saturating_sub(stats.timeouts),
        "peak_rss_mib": round2(peak),
        "rss_before_mib": round2(rss_before),
    });
    latency_fields(c, &drawn, &mut line);
    replica_fields(c, s, &mut line);
    Ok(line)
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(cli.max_blocking_threads.max(1))
        .build();
    let result = runtime
        .map_err(Into::into)
        .and_then(|runtime| runtime.block_on(run(&cli)));
    if let Err(e) = result {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// The chosen workload, on the runtime `main` built.
async fn run(cli: &Cli) -> Result<(), Box<dyn std::error::Error>> {
    match &cli.workload {
        Workload::Write(c) => {
            let s = stores(c)?;
            let r = write(c, &s).await?;
            stop(&r.wal).await?;
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
                stop(&r.wal).await?;
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
        Workload::Soak(a) => soak(a).await?,
        Workload::Follow(a) => println!("{}", follow::follow(a).await?),
    }
    Ok(())
}
