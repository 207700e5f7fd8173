//! Regions moving between live nodes (docs/DESIGN.md "Regions moving between nodes"),
//! and a dead or zombie node's regions taken over (DESIGN.md "A node's regions after it
//! died"): three nodes in one process, each its own WAL prefix on one embedded store,
//! serve 300 regions under an open-loop load, while a coordinator moves regions between
//! them, and now and then kills a node or leaves it running as a zombie and fails its
//! regions over.
//!
//! - **Frontends** send each append to the region's current owner. An append refused
//!   with `RegionReleased` waits for the route to switch and goes to the new owner. An
//!   append that failed `MayBeDurable` is resolved against the chain of the node it was
//!   sent to, once that node reopened (a new epoch: its object either landed on the
//!   chain or never will): found, it counts as acknowledged with the id it has there;
//!   not found, it is sent again (to the region's owner then). If the node released the
//!   region meanwhile, the entry, if it landed, is in the node's released piece (the
//!   release's last id is the largest id on the chain the new epoch recovered), which
//!   that read covers and the checker reads back. If the node was killed or became a
//!   zombie meanwhile, the append is resolved against the node's **fenced** chain
//!   instead, once the fence completed (on it, or never: DESIGN.md), never against the
//!   region's new history. An append that cannot be resolved (the node never reopens,
//!   its reads keep failing) counts as `failed` and is never sent again: sending it
//!   again could write it twice.
//! - **The coordinator** moves `--moves` regions every `--move-every-ms`, some of them
//!   back to an earlier owner: the source releases the region (its last id), the target
//!   acquires it above that id and catches up from the source's log through its own
//!   WAL (`WalHandle::catch_up_released`: the target's WAL opens each source prefix
//!   once and every catch-up from it shares that open), then the route switches. The **migration window** is
//!   from the release called to the route switched (the target accepts the region's
//!   appends from then on).
//! - **Failovers** (`--kills`, `--zombies`, spread over the run, a kill first, then a
//!   zombie, in turn; node `i % nodes` the `i`-th time). The coordinator first lets the
//!   moves touching the node end and starts none more (a kill in the middle of a move
//!   is `examples/migration_gate.rs`'s), then, at the **kill**:
//!   - a *killed* node's WAL is aborted (`WalHandle::abort`, its supervisor's join
//!     handle aborted, its handle and so its store handle dropped): its appends in
//!     flight fail `MayBeDurable` and wait for the fence;
//!   - a *zombie* keeps running and reaching the store, but the coordinator never
//!     speaks to it again, and for `--stale-ms` after the kill the frontends of even
//!     numbered appends still have the old route and send the zombie's regions'
//!     appends to it (`zombie_sends`), before and after the fence: the zombie admits
//!     them, and acknowledges those whose object landed before the fence's claims;
//!     the rest fail (`Fenced`, then `PrefixClosed` at its reopen) and are resolved
//!     against the fenced chain. The frontends that know of the failover hold the
//!     region's appends until its route switches.
//!
//!   Then the **fence** (`object_store_wal::fence`, by the coordinator, over the same
//!   store), and per region, all in parallel, the **takeover**: the new owner (the
//!   other live nodes in turn) catches the region up from the fenced chain
//!   (`catch_up_released` with the fence's `Released`, from the node's tenure start)
//!   beside `acquire_with_pieces(region, max(acquire_above, tenure start), pieces)`,
//!   then the route switches. `failover_ms` runs from the kill to the last of the
//!   node's regions switched (accepting appends at its new owner), detection not
//!   counted (the coordinator acts at once). The pieces passed are the fence's
//!   `pieces_with(prefix)`, with the fenced prefix's own piece starting at the node's
//!   tenure start: the fence's first id of a region is its first live id on the whole
//!   chain, which for a region the node had released and taken back is an earlier
//!   tenure's, and that piece would overlap the other owner's tenure in between.
//! - **Flushes and retirement.** The example has no database, so a *flush* of a region
//!   through id `x` is the checker's stand-in for the database's tables: the coordinator
//!   reads the region's closed pieces through `x` back from the bare store, read-only,
//!   as the checker would at the end, and keeps those entries (`archived_entries`); then
//!   the new owner calls `obsolete(region, x)` with `x` the last id of the pieces it
//!   recorded, which forgets them. Every takeover is flushed right after the last
//!   region switched. Once `--reclaim-grace-ms` passed since the fence (the nodes'
//!   `reclaim_grace`, shortened from 10 minutes; at least twice `max_create_duration`),
//!   the stale routes expired, a zombie was stopped and every append sent to the node
//!   was answered and resolved, the coordinator archives the node's other pieces (the
//!   regions it released to others before it died, whose owners recorded no piece: the
//!   example's moves pass none) and **retires** the prefix (`object_store_wal::retire`,
//!   naming every prefix not retired as the others, retried while it answers
//!   `RetireTooEarly` or `PieceStillNeeded`). Then the checker's history of each region
//!   starts with its archived entries and goes on with the pieces not archived: what it
//!   checks of a retired prefix's entries is what the bare store held after the fence,
//!   with the chain final, read the same way as at the end. (That a new owner replays
//!   them is the takeover's catch-up, which must end exactly at the fence's last id, and
//!   `read_history` in `actors/tests/failover.rs`; the checker checks what was
//!   acknowledged is in the region's pieces, as for the moves.) The node **restarts** on a
//!   new prefix (`node-0-2`, ...) right after the flush, and the coordinator moves
//!   regions to it until it holds its share (`--rebalance-moves` at a time; migrations
//!   like the others).
//! - **Zombie acknowledgements.** The coordinator records the instant each fence call
//!   returned. Every acknowledgement a fenced node's WAL gave that a frontend received
//!   after that instant is checked against the fenced chain (read-only): if the entry
//!   is there, with that id, it was durable before the fence (the fence's claims come
//!   after it; only its answer was late) and counts as `zombie_acks_late_on_chain`,
//!   which the takeover caught up; otherwise it counts as `zombie_acks_after_fence`,
//!   which must be 0 (an entry the zombie acknowledged that no new owner caught up).
//!   An acknowledgement received before the instant must be on the fenced chain too:
//!   the checker's piece of the node ends at the fence's last id, so one off it shows
//!   as lost. The fence's instant is when `fence` returned to the coordinator, a little
//!   after the closed object became durable, so the count errs towards checking more.
//! - **The checker**, once the load stopped and every WAL stopped, opens every prefix not
//!   retired read-only on the bare store, reads each region's pieces not archived (node,
//!   ids above the owner's acquire, up to the piece's last id) after the archived ones and
//!   compares them with what the frontends were acknowledged: `lost`, `duplicated`,
//!   `out_of_order`.
//!
//! The store has a 20 ms PUT and 10 ms GET latency with a slow tail, and the fault
//! wrapper's random create faults (applied then failed, failed unapplied, landing
//! late). The writer's retries with the same bytes absorb all of those, so on top of
//! them, with `--epoch-faults N` (0 by default, so that the latency percentiles are the
//! moves'), N times a run one node's **connection to the store stalls** for
//! `--stall-ms` (1.5 s; nodes in turn, spread over the run): every request the node
//! sends meanwhile waits in the network until the stall ends (or its sender gives up),
//! and every answer the store gives it meanwhile arrives only then, as with a network
//! partition or a load balancer that stops forwarding for a while. The hedged twin of a
//! create meets the same stall, so the create's definite answer comes after the stall,
//! past `max_create_duration` (`--max-create-ms`, 500 ms here; the library's default is
//! 60 s, and a stall that long would take the run): the epoch ends (`CreateTooSlow`),
//! the node reopens by itself, and the appends of the objects in flight fail
//! `MayBeDurable` (those still in the open batch fail `NotWritten` and are simply sent
//! again). Their frontends resolve them as above: `resolved_found` counts those
//! whose object landed (on the chain after the reopen, acknowledged with the id it has
//! there), `resolved_resent` those whose object never will (sent again);
//! `resolved_on_fence_found` and `resolved_on_fence_resent` count the same against a
//! fenced chain.
//!
//! **`--failover-bench`** is issue 44's failover target: no random moves, node 0 killed
//! `--bench-failovers` times (12), each time once its live log holds at least
//! `--live-objects` (250) objects (`chain_objects`) and it owns its 100 regions again
//! (moved back to it after each restart); the load runs until the last failover's
//! retirement. `failover_ms_p99` is the figure (target: 1 s at 20 ms PUT / 10 ms GET).
//!
//! One JSON line goes to stdout; the exit code is non-zero if anything was lost,
//! duplicated or out of order, a zombie acknowledged an entry off its fenced chain, an
//! append failed or could not be resolved, or a move or a failover failed.
//! `migration_window_ms_p50`/`_p99`/`_max` cover every move; `*_apart` the random
//! moves that ran while no failover was under way, `*_beside_failover` those that did,
//! and `*_rebalance` the moves to a restarted node (`--rebalance-moves` at a time, from
//! the node that owns the most). Compare
//! `*_apart` with a run without failovers (`--kills 0 --zombies 0`) for the migration
//! window targets. `zombie_acks_before_fence` counts acknowledgements a killed or zombie
//! node gave after its kill and before its fence returned (fine: on the fenced chain,
//! or the checker counts them lost). A move whose window passes 100 ms is named on
//! stderr with its parts (release, acquire, tail catch-up) and what was under way
//! then (failovers, archive reads, retirements, restarts): where a tail comes from.
//!
//! ```text
//! cargo run --release --example cluster
//! cargo run --release --example cluster -- --kills 0 --zombies 0   # moves only
//! cargo run --release --example cluster -- --no-migrations --kills 0 --zombies 0
//! cargo run --release --example cluster -- --epoch-faults 3   # the resolve path
//! cargo run --release --example cluster -- --failover-bench
//! ```

// The result line's `json!` has more keys than the default limit expands.
#![recursion_limit = "512"]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures::stream::BoxStream;
use futures::StreamExt;
use hdrhistogram::Histogram;
use object_store::memory::InMemory;
use object_store::{
    GetOptions, GetResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};
use object_store_wal::testing::{
    with_latency_profile, CountingStore, FaultRates, FaultStore, Hooks, LatencyProfile, SplitMix64,
    Wrapper,
};
use object_store_wal::{
    fence, retire, Config, Durability, Error, Fence, FirstRetryWait, ObjectStoreLogStore,
    Piece as WalPiece, Released,
};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use tokio::sync::{watch, Semaphore};

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Three nodes, 300 regions, regions moving between them, nodes killed or left as zombies; checks nothing is lost"
)]
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
    /// Seconds of load (with `--failover-bench`: at most; the load ends after the last
    /// failover's retirement).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Regions moved per round.
    #[arg(long, default_value_t = 10)]
    moves: usize,
    /// Milliseconds between rounds of moves.
    #[arg(long, default_value_t = 2000)]
    move_every_ms: u64,
    /// The same load without moves (failovers, and the moves back to a restarted node,
    /// still run: add `--kills 0 --zombies 0`).
    #[arg(long)]
    no_migrations: bool,
    /// Nodes killed outright over the run (their regions failed over).
    #[arg(long, default_value_t = 3)]
    kills: u64,
    /// Nodes left running as zombies over the run (their regions failed over).
    #[arg(long, default_value_t = 2)]
    zombies: u64,
    /// How long after a zombie's kill the frontends of even numbered appends still send
    /// its regions' appends to it, ms.
    #[arg(long, default_value_t = 2000)]
    stale_ms: u64,
    /// The nodes' `reclaim_grace`, ms: a fenced prefix is retired no earlier than this
    /// after its fence (at least twice `--max-create-ms`).
    #[arg(long, default_value_t = 3000)]
    reclaim_grace_ms: u64,
    /// Moves to a restarted node at once (until it owns its share). More at once queue
    /// at the new node's catch-ups from the same source, and the random moves to it wait
    /// behind them (10 at once: window p99 about 250 ms).
    #[arg(long, default_value_t = 3)]
    rebalance_moves: usize,
    /// Issue 44's failover target: no random moves; node 0 killed `--bench-failovers`
    /// times, each time once its live log holds `--live-objects` objects and it owns
    /// its share of the regions.
    #[arg(long)]
    failover_bench: bool,
    /// Failovers of `--failover-bench`.
    #[arg(long, default_value_t = 12)]
    bench_failovers: u64,
    /// Objects the victim's live log holds at least when `--failover-bench` kills it.
    #[arg(long, default_value_t = 250)]
    live_objects: u64,
    /// PUT latency, ms.
    #[arg(long, default_value_t = 20)]
    put_latency_ms: u64,
    /// GET latency, ms.
    #[arg(long, default_value_t = 10)]
    get_latency_ms: u64,
    /// `min_object_interval`, ms.
    #[arg(long, default_value_t = 20)]
    min_object_interval_ms: u64,
    /// No faults (latency only): neither the fault wrapper nor the stalls.
    #[arg(long)]
    no_faults: bool,
    /// The chance of each create fault per create (applied then failed, failed
    /// unapplied, landing late).
    #[arg(long, default_value_t = 0.001)]
    fault_rate: f64,
    /// Overrides the library's wait before a failed create's first retry, ms: fixed at
    /// this (each retry doubles it). Without it the library's default is in force, an
    /// adaptive first wait (about the store's recent median create latency, at most
    /// 50 ms). A faulted create costs this wait plus a PUT (and a GET to verify its own
    /// bytes when it had landed), and about one window in a hundred waits for one at the
    /// default fault rate (BENCHMARKS.md: fixed at 50 the window's p99 is that tail's,
    /// 72 to 126 ms across runs).
    #[arg(long)]
    retry_initial_backoff_ms: Option<u64>,
    /// Times a run one node's connection to the store stalls (nodes in turn, spread
    /// evenly over the run), long enough that its epoch ends: the appends in flight
    /// fail `MayBeDurable` and are resolved (`resolved_found`, `resolved_resent`).
    /// 0 (the default): no stalls, so that the latency percentiles are the moves' and
    /// not the stalls' (each stall holds a third of the appends for 1.5 s: the p99s
    /// become seconds); `--epoch-faults 3` is the run that shows the resolve path.
    #[arg(long, default_value_t = 0)]
    epoch_faults: u64,
    /// How long a stall lasts, ms: above `--max-create-ms` (and above the 1 s after
    /// which a hung create attempt is given up and retried).
    #[arg(long, default_value_t = 1500)]
    stall_ms: u64,
    /// The nodes' `max_create_duration`, ms: a create whose definite answer comes later
    /// is never acknowledged and ends the epoch (`CreateTooSlow`). The library's default
    /// is 60 s; a stall must outlast it to end an epoch, so the example shortens it (its
    /// creates take 20 ms, 120 ms in the tail, about 60 ms with a faulted attempt).
    #[arg(long, default_value_t = 500)]
    max_create_ms: u64,
    /// Seed of the load, the moves and the faults.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Where a region is served (an instance of a node), and the version of that route.
#[derive(Debug, Clone, Copy)]
struct Route {
    owner: usize,
    version: u64,
    /// A move, a takeover or its flush is under way: no other move starts.
    moving: bool,
    /// Its owner was killed or left as a zombie and the takeover has not switched the
    /// route yet: frontends that know hold the region's appends.
    failing: bool,
    /// The zombie instance the frontends of even numbered appends still send to, and
    /// until when.
    stale: Option<(usize, Instant)>,
}

/// A piece of a region's history: ids after `after` up to `through` in instance
/// `node`'s log (`None`: the current owner's piece, open).
#[derive(Debug, Clone, Copy)]
struct Piece {
    node: usize,
    after: Option<u64>,
    through: Option<u64>,
}

/// What the coordinator read back of a region's closed pieces at a flush, before the
/// owner's `obsolete` or the prefix's retirement: the entries of its first `pieces`
/// pieces. (Counted in pieces, not ids: a piece's last id can be below its first, when
/// the node released the region again before writing to it, and its last id is then an
/// earlier tenure's.)
#[derive(Debug, Default)]
struct Archived {
    pieces: usize,
    /// Id, payload, the instance read.
    entries: Vec<(u64, Bytes, usize)>,
}

/// An acknowledged append: its region, its payload's number, its id.
#[derive(Debug, Clone, Copy)]
struct Acked {
    region: u64,
    n: u64,
    id: u64,
}

const ALIVE: u8 = 0;
const ZOMBIE: u8 = 1;
const DEAD: u8 = 2;
const RETIRED: u8 = 3;

/// One run of a node: its WAL on its own prefix. A node restarted after a failover is a
/// new instance on a new prefix.
struct Instance {
    slot: usize,
    prefix: String,
    /// `None` once killed or stopped: nobody uses it again.
    wal: Mutex<Option<WalHandle>>,
    join: Mutex<Option<tokio::task::JoinHandle<()>>>,
    life: AtomicU8,
    /// Moves may start to or from it.
    eligible: AtomicBool,
    /// Moves (and flushes) under way that use it.
    busy: AtomicU64,
    /// Appends sent to it whose outcome is not settled yet (resolves included).
    sent: AtomicU64,
    /// When the fence of its prefix returned.
    fence_at: Mutex<Option<Instant>>,
    /// Its fenced chain, read-only, once fenced (for resolves and zombie acks).
    fenced: watch::Sender<Option<Arc<ObjectStoreLogStore>>>,
}

impl Instance {
    fn new(slot: usize, prefix: String, wal: WalHandle, join: tokio::task::JoinHandle<()>) -> Self {
        Instance {
            slot,
            prefix,
            wal: Mutex::new(Some(wal)),
            join: Mutex::new(Some(join)),
            life: AtomicU8::new(ALIVE),
            eligible: AtomicBool::new(true),
            busy: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            fence_at: Mutex::new(None),
            fenced: watch::channel(None).0,
        }
    }

    fn wal(&self) -> Option<WalHandle> {
        self.wal.lock().expect("wal").clone()
    }

    fn life(&self) -> u8 {
        self.life.load(Ordering::SeqCst)
    }

    /// Counts a move or a flush on it, unless moves to and from it stopped.
    fn reserve(&self) -> bool {
        self.busy.fetch_add(1, Ordering::SeqCst);
        if self.eligible.load(Ordering::SeqCst) && self.life() == ALIVE {
            true
        } else {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            false
        }
    }

    /// Its fenced chain, waiting for it at most `within`.
    async fn fenced_log(&self, within: Duration) -> Option<Arc<ObjectStoreLogStore>> {
        let mut rx = self.fenced.subscribe();
        let log = match tokio::time::timeout(within, rx.wait_for(|f| f.is_some())).await {
            Ok(Ok(log)) => log.clone(),
            _ => None,
        };
        log
    }
}

/// A task aborted when dropped.
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Decrements a counter when dropped.
struct Count<'a>(&'a AtomicU64);

impl<'a> Count<'a> {
    fn up(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Count(counter)
    }
}

impl Drop for Count<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Counters {
    migrations: AtomicU64,
    migration_failures: AtomicU64,
    resolved_found: AtomicU64,
    resolved_resent: AtomicU64,
    resolved_on_fence_found: AtomicU64,
    resolved_on_fence_resent: AtomicU64,
    /// Append attempts that failed `MayBeDurable`.
    may_be_durable: AtomicU64,
    /// Append attempts an epoch end failed `NotWritten` (never sent: sent again at once).
    ended_not_written: AtomicU64,
    /// Of those resolved, the ones whose region was moving or had moved away from the
    /// node by then (the entry, if it landed, in the node's released piece).
    resolved_after_move: AtomicU64,
    failed: AtomicU64,
    failovers: AtomicU64,
    kills: AtomicU64,
    zombies: AtomicU64,
    failover_failures: AtomicU64,
    regions_failed_over: AtomicU64,
    retired: AtomicU64,
    /// Retirements refused and asked again: a new owner had not yet recorded the flush
    /// (`PieceStillNeeded`), the store's clock was behind (`RetireTooEarly`), other.
    retire_piece_still_needed: AtomicU64,
    retire_too_early: AtomicU64,
    retire_retried: AtomicU64,
    restarted: AtomicU64,
    archived_entries: AtomicU64,
    zombie_sends: AtomicU64,
    zombie_acks_after_fence: AtomicU64,
    zombie_acks_late_on_chain: AtomicU64,
    /// Acknowledgements from a killed or zombie node received after its kill, before its
    /// fence returned.
    zombie_acks_before_fence: AtomicU64,
    /// Failovers under way, and begun: a move's window beside one or not.
    failing_over: AtomicU64,
    failovers_begun: AtomicU64,
    /// Under way now, for the slow moves' lines: archive reads, retirements (from the
    /// grace's end), node restarts with their rebalance.
    archiving: AtomicU64,
    retiring: AtomicU64,
    restarting: AtomicU64,
    victim_objects_min: AtomicU64,
    victim_regions_min: AtomicU64,
}

struct Cluster {
    args: Args,
    /// When the run began.
    started: Instant,
    /// The store the nodes and the coordinator use (latency, faults, counts), and the
    /// bare one the checker reads.
    store: Arc<dyn ObjectStore>,
    bare: Arc<dyn ObjectStore>,
    links: Vec<Arc<Link>>,
    restarts: RestartPolicy,
    instances: Mutex<Vec<Arc<Instance>>>,
    routes: Vec<Mutex<Route>>,
    pieces: Vec<Mutex<Vec<Piece>>>,
    archived: Vec<Mutex<Archived>>,
    /// One archive at a time.
    archiving: tokio::sync::Mutex<()>,
    /// Bumped at every route switch.
    switched: watch::Sender<u64>,
    acked: Mutex<Vec<Acked>>,
    /// Append latencies (µs): all, and of regions never moved.
    latency: Mutex<Histogram<u64>>,
    latency_unmoved: Mutex<Histogram<u64>>,
    windows: Mutex<Histogram<u64>>,
    windows_beside: Mutex<Histogram<u64>>,
    windows_apart: Mutex<Histogram<u64>>,
    /// The windows of the moves to a restarted node.
    windows_rebalance: Mutex<Histogram<u64>>,
    /// The window's parts (µs): the release, the acquire, the catch-up of the tail.
    releases: Mutex<Histogram<u64>>,
    acquires: Mutex<Histogram<u64>>,
    tails: Mutex<Histogram<u64>>,
    /// The resolution of an append that failed `MayBeDurable` (µs): from its error to
    /// the answer (found or not), the node's reopen (or its fence) included.
    resolves: Mutex<Histogram<u64>>,
    /// Failovers (µs): from the kill to the last region switched; the fence's part.
    failover_times: Mutex<Histogram<u64>>,
    fences: Mutex<Histogram<u64>>,
    moved: Vec<AtomicBool>,
    c: Counters,
    /// The epochs the appends saw end (`EpochEnded`, any durability): instance and epoch.
    epochs_ended: Mutex<HashSet<(usize, u64)>>,
    next_n: Vec<AtomicU64>,
    /// The appends sent again after a resolve found them nowhere, and why (what the
    /// checker prints of a duplicate): at most one a `MayBeDurable` error.
    resent: Mutex<HashMap<(u64, u64), Vec<String>>>,
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

/// Node `node`'s first WAL prefix; a restarted node's is `node-{node}-{run}`.
fn prefix(node: usize) -> String {
    format!("node-{node}")
}

fn config(prefix: &str, args: &Args) -> Config {
    let mut c = Config::new(prefix).with_create_if_missing(true);
    c.min_object_interval = Duration::from_millis(args.min_object_interval_ms);
    if let Some(ms) = args.retry_initial_backoff_ms {
        c.retry = c
            .retry
            .with_initial_backoff(Duration::from_millis(ms))
            .with_first_wait(FirstRetryWait::Fixed);
    }
    c.max_create_duration = Duration::from_millis(args.max_create_ms);
    c.reclaim_grace = Duration::from_millis(args.reclaim_grace_ms);
    c
}

/// The id of the entry with payload `want` in `region` on a read-only log, from id
/// `from`.
async fn find_in(
    log: &ObjectStoreLogStore,
    region: u64,
    from: u64,
    want: &Bytes,
) -> Result<Option<u64>, Error> {
    let mut entries = log.read(region, from);
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        if entry.payload == *want {
            return Ok(Some(entry.id));
        }
    }
    Ok(None)
}

/// One node's connection to the store, which can stall: while it does, a request waits
/// before it reaches the store, and an answer the store gave waits before it reaches
/// the node, until the stall ends (a request whose sender gave up meanwhile, a create
/// attempt given up after 1 s, is never delivered). Creates, GETs and LISTs alike.
#[derive(Debug, Default)]
struct Link {
    stalled: watch::Sender<bool>,
    /// Requests and answers held by a stall.
    held: AtomicU64,
}

impl Link {
    /// Waits while the link is stalled.
    async fn pass(&self) {
        if !*self.stalled.borrow() {
            return;
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        let mut rx = self.stalled.subscribe();
        // The sender lives in `self`: the channel cannot close while waiting.
        let _ = rx.wait_for(|stalled| !*stalled).await;
    }

    fn set_stalled(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

/// The hooks of a node's [`Link`] (a store wrapper of the testing module's kind).
#[derive(Debug, Clone)]
struct LinkHooks(Arc<Link>);

#[async_trait::async_trait]
impl Hooks for LinkHooks {
    const NAME: &'static str = "Link";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &object_store::path::Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.0.pass().await;
        let result = inner.put_opts(location, payload, opts).await;
        self.0.pass().await;
        result
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &object_store::path::Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.0.pass().await;
        let result = inner.get_opts(location, options).await;
        self.0.pass().await;
        result
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&object_store::path::Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (link, inner, prefix) = (self.0.clone(), inner.clone(), prefix.cloned());
        futures::stream::once(async move {
            link.pass().await;
            inner.list(prefix.as_ref())
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&object_store::path::Path>,
        offset: &object_store::path::Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (link, inner) = (self.0.clone(), inner.clone());
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        futures::stream::once(async move {
            link.pass().await;
            inner.list_with_offset(prefix.as_ref(), &offset)
        })
        .flatten()
        .boxed()
    }
}

impl Cluster {
    fn route(&self, region: u64) -> Route {
        *self.routes[region as usize].lock().expect("route")
    }

    fn instance(&self, i: usize) -> Arc<Instance> {
        self.instances.lock().expect("instances")[i].clone()
    }

    fn all_instances(&self) -> Vec<Arc<Instance>> {
        self.instances.lock().expect("instances").clone()
    }

    /// The regions each instance owns.
    fn owned(&self) -> HashMap<usize, Vec<u64>> {
        let mut owned: HashMap<usize, Vec<u64>> = HashMap::new();
        for region in 0..self.args.regions {
            owned
                .entry(self.route(region).owner)
                .or_default()
                .push(region);
        }
        owned
    }

    /// Where `instance`'s last tenure of `region` starts: an append sent to it now
    /// lands at or above it, if anywhere (tenures are only ever added).
    fn tenure_start(&self, region: u64, instance: &Instance) -> u64 {
        let pieces = self.pieces[region as usize].lock().expect("pieces");
        pieces
            .iter()
            .rev()
            .find(|p| std::ptr::eq(self.instance(p.node).as_ref(), instance))
            .and_then(|p| p.after)
            .map_or(0, |a| a + 1)
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

    /// Waits (at most a minute) for the route to switch; `false` if it never did.
    async fn wait_switch(&self, region: u64, version: u64) -> bool {
        let switch = self.route_after(region, version);
        if tokio::time::timeout(Duration::from_secs(60), switch)
            .await
            .is_err()
        {
            eprintln!("cluster: region {region}'s route never switched");
            self.c.failed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// One append, sent to the owner until it is acknowledged (see the module docs).
    async fn append(&self, region: u64) {
        let n = self.next_n[region as usize].fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        // This append's frontend has a stale route (even numbers) until it learns.
        let mut stale_route = n.is_multiple_of(2);
        let id = loop {
            let route = self.route(region);
            let mut owner = route.owner;
            let mut via_stale = false;
            if let Some((old, until)) = route.stale {
                if stale_route && old != owner && Instant::now() < until {
                    (owner, via_stale) = (old, true);
                }
            }
            if !via_stale && route.failing {
                if !self.wait_switch(region, route.version).await {
                    return;
                }
                continue;
            }
            let instance = self.instance(owner);
            let _sent = Count::up(&instance.sent);
            let Some(wal) = instance.wal() else {
                // Killed or stopped: the route switches (or switched) away from it.
                stale_route = false;
                if !via_stale && !self.wait_switch(region, route.version).await {
                    return;
                }
                continue;
            };
            if via_stale {
                self.c.zombie_sends.fetch_add(1, Ordering::Relaxed);
            }
            // The append lands in the node's tenure of the region from now, if anywhere.
            let tenure = self.tenure_start(region, &instance);
            let result = wal.append(region, vec![payload(region, n)]).await;
            if let Err(e @ Error::EpochEnded { epoch, reason, .. }) = &result {
                let first = self
                    .epochs_ended
                    .lock()
                    .expect("epochs")
                    .insert((owner, *epoch));
                if first {
                    eprintln!(
                        "cluster: {}'s epoch {epoch} ended ({reason}); the append that \
                         saw it first had waited {} ms",
                        instance.prefix,
                        started.elapsed().as_millis()
                    );
                }
                if e.durability() == Durability::NotWritten {
                    self.c.ended_not_written.fetch_add(1, Ordering::Relaxed);
                }
            }
            match result {
                Ok(receipt) => {
                    let id = receipt.parts[0].first_id;
                    self.check_late_ack(&instance, region, n, id, tenure).await;
                    break id;
                }
                Err(Error::RegionReleased { .. }) => {
                    stale_route = false;
                    if !self.wait_switch(region, route.version).await {
                        return;
                    }
                }
                Err(e) if e.durability() == Durability::MayBeDurable => {
                    stale_route = false;
                    self.c.may_be_durable.fetch_add(1, Ordering::Relaxed);
                    let resolving = Instant::now();
                    let resolved = self.resolve(&instance, region, n, tenure, &e).await;
                    record(&self.resolves, resolving);
                    // The node released the region (or began to) since the append was
                    // sent: resolved against its released piece.
                    let now = self.route(region);
                    if resolved.is_ok() && (now.version != route.version || now.moving) {
                        self.c.resolved_after_move.fetch_add(1, Ordering::Relaxed);
                    }
                    match resolved {
                        Ok(Some(id)) => break id,
                        Ok(None) => {
                            let why = format!(
                                "{} (life {}) answered not found after `{e}`, read from {tenure}",
                                instance.prefix,
                                instance.life()
                            );
                            let mut resent = self.resent.lock().expect("resent");
                            resent.entry((region, n)).or_default().push(why);
                        }
                        Err(why) => {
                            eprintln!(
                                "cluster: append {n} of region {region} failed `{e}` on {} \
                                 and could not be resolved: {why}",
                                instance.prefix
                            );
                            self.c.failed.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
                // Refused by a killed or zombie node (never written): its regions'
                // routes switch away from it.
                Err(_) if instance.life() != ALIVE => {
                    stale_route = false;
                    if !via_stale && !self.wait_switch(region, route.version).await {
                        return;
                    }
                }
                Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => {
                    eprintln!("cluster: append of region {region} failed: {e}");
                    self.c.failed.fetch_add(1, Ordering::Relaxed);
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

    /// An acknowledgement from a node whose prefix was fenced before it arrived: fine
    /// only if the entry is on the fenced chain with that id (see the module docs).
    async fn check_late_ack(&self, instance: &Instance, region: u64, n: u64, id: u64, from: u64) {
        let arrived = Instant::now();
        let fenced_at = *instance.fence_at.lock().expect("fence_at");
        if fenced_at.is_none_or(|at| at >= arrived) {
            if instance.life() != ALIVE {
                self.c
                    .zombie_acks_before_fence
                    .fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let found = match instance.fenced_log(Duration::from_secs(60)).await {
            Some(log) => find_in(&log, region, from, &payload(region, n))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        if found == Some(id) {
            self.c
                .zombie_acks_late_on_chain
                .fetch_add(1, Ordering::Relaxed);
        } else {
            eprintln!(
                "cluster: {} acknowledged append {n} of region {region} (id {id}) after its \
                 fence, and the fenced chain has {found:?}",
                instance.prefix
            );
            self.c
                .zombie_acks_after_fence
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Resolves an append that failed `MayBeDurable` on `instance`: on a live node,
    /// once it reopened (its epoch is past the one that ended), the append's object is
    /// on the node's chain or never will be (the new epoch fenced its key with a claim);
    /// on a killed or zombie node, once its prefix is fenced, on the fenced chain or
    /// never. Returns its id if it is there, `None` if it is not (send it again), and an
    /// error if that cannot be told (the node did not reopen, its reads kept failing):
    /// never `None` on a doubt, since sending an entry that is on the chain again would
    /// write it twice.
    ///
    /// The read covers the whole region on this node's chain: if the node released the
    /// region meanwhile, the entry, if it landed, is at or below the released last id (the
    /// largest id of the region on the chain the new epoch recovered, whichever epoch
    /// answered the release), in the node's released piece, which the checker reads too.
    /// The payload names the append (region and number), so a hit is this append's entry
    /// and no other, wherever the region's pieces on this node lie. Over a fenced chain
    /// the read starts at `tenure`, where the node's tenure of the region began when the
    /// append was sent (it admitted the append in that tenure or a later one).
    async fn resolve(
        &self,
        instance: &Instance,
        region: u64,
        n: u64,
        tenure: u64,
        error: &Error,
    ) -> Result<Option<u64>, String> {
        const WITHIN: Duration = Duration::from_secs(120);
        let started = Instant::now();
        let want = payload(region, n);
        // The epoch that ended: the error names it. Other `MayBeDurable` errors (a
        // writer that failed, not expected on a live node) do not: the node's epoch now
        // is that one unless the node reopened already, and then this waits for the
        // next epoch end (bounded below), which is late but never early.
        let mut ended = match error {
            Error::EpochEnded { epoch, .. } => Some(*epoch),
            _ => None,
        };
        let mut last_error = String::new();
        while started.elapsed() < WITHIN {
            if instance.life() != ALIVE {
                // Killed or a zombie: only its fenced chain tells.
                let Some(log) = instance.fenced_log(WITHIN).await else {
                    return Err("its prefix was never fenced".into());
                };
                loop {
                    match find_in(&log, region, tenure, &want).await {
                        Ok(found) => {
                            let counter = match found {
                                Some(_) => &self.c.resolved_on_fence_found,
                                None => &self.c.resolved_on_fence_resent,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                            return Ok(found);
                        }
                        Err(e) if started.elapsed() < WITHIN => {
                            eprintln!("cluster: reading {}'s fenced chain: {e}", instance.prefix);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => return Err(format!("the fenced chain's read failed: {e}")),
                    }
                }
            }
            let Some(wal) = instance.wal() else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            match wal.stats().await {
                Ok(s) => match ended {
                    None => ended = Some(s.epoch),
                    Some(ended) if s.epoch > ended => match find(&wal, region, &want).await {
                        Ok(found) => {
                            let counter = match found {
                                Some(_) => &self.c.resolved_found,
                                None => &self.c.resolved_resent,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                            return Ok(found);
                        }
                        Err(e) => {
                            last_error = e.to_string();
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                },
                Err(e) => {
                    last_error = format!("stats: {e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        Err(format!("not resolved within {WITHIN:?}: {last_error}"))
    }

    /// Starts a move of `region` (to `to`, or to a live node other than its owner at
    /// random): marks it moving and both instances busy. `None` if it cannot move now.
    fn start_move(
        &self,
        region: u64,
        to: Option<usize>,
        rng: &mut SplitMix64,
    ) -> Option<(usize, usize)> {
        let mut route = self.routes[region as usize].lock().expect("route");
        if route.moving || route.failing {
            return None;
        }
        let from = route.owner;
        let to = match to {
            Some(to) => to,
            None => {
                let candidates: Vec<usize> = self
                    .all_instances()
                    .iter()
                    .enumerate()
                    .filter(|(i, inst)| {
                        *i != from && inst.life() == ALIVE && inst.eligible.load(Ordering::SeqCst)
                    })
                    .map(|(i, _)| i)
                    .collect();
                if candidates.is_empty() {
                    return None;
                }
                candidates[rng.below(candidates.len() as u64) as usize]
            }
        };
        if to == from {
            return None;
        }
        let (source, target) = (self.instance(from), self.instance(to));
        if !source.reserve() {
            return None;
        }
        if !target.reserve() {
            source.busy.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        route.moving = true;
        Some((from, to))
    }

    /// A move started by [`start_move`](Self::start_move), to its end (`rebalance`: to
    /// a restarted node).
    async fn run_move(&self, region: u64, from: usize, to: usize, rebalance: bool) {
        self.moved[region as usize].store(true, Ordering::Relaxed);
        let (source, target) = (self.instance(from), self.instance(to));
        let begun = self.c.failovers_begun.load(Ordering::SeqCst);
        let beside = self.c.failing_over.load(Ordering::SeqCst) > 0;
        let result = self.migrate(region, &source, &target, to).await;
        source.busy.fetch_sub(1, Ordering::SeqCst);
        target.busy.fetch_sub(1, Ordering::SeqCst);
        match result {
            Ok(window) => {
                let beside = beside
                    || self.c.failing_over.load(Ordering::SeqCst) > 0
                    || begun != self.c.failovers_begun.load(Ordering::SeqCst);
                let h = if rebalance {
                    &self.windows_rebalance
                } else if beside {
                    &self.windows_beside
                } else {
                    &self.windows_apart
                };
                let _ = h.lock().expect("histogram").record(window.max(1));
            }
            Err(e) => {
                eprintln!(
                    "cluster: moving region {region} from {} to {} failed: {e}",
                    source.prefix, target.prefix
                );
                self.c.migration_failures.fetch_add(1, Ordering::Relaxed);
                self.routes[region as usize].lock().expect("route").moving = false;
            }
        }
    }

    /// Moves `region` to `to`: release, then acquire beside the catch-up, then switch.
    /// Answers the window (µs).
    async fn migrate(
        &self,
        region: u64,
        source: &Instance,
        target: &Instance,
        to: usize,
    ) -> Result<u64, Error> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        let (from_wal, to_wal) = (
            source.wal().ok_or_else(gone)?,
            target.wal().ok_or_else(gone)?,
        );
        let after = self.pieces[region as usize]
            .lock()
            .expect("pieces")
            .last()
            .and_then(|p| p.after);
        // Before the release, the target reads what the source holds of the region so
        // far (the tail is all that is left to catch up after it).
        let source_prefix = &source.prefix;
        let within = Duration::from_secs(30);
        let mut caught_up = after;
        if let Ok(Some(now)) = from_wal.last_entry_id(region).await {
            let first = after.map_or(0, |a| a + 1);
            if now >= first {
                let mut ahead = to_wal
                    .catch_up(source_prefix, region, first, now, within)
                    .await?;
                while let Some(entry) = ahead.next().await {
                    caught_up = Some(entry?.id);
                }
            }
        }
        let started = Instant::now();
        let released = loop {
            match from_wal.release(region).await {
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
            acquire_with(&to_wal, region, above, Vec::new()).await?;
            record(&self.acquires, after_release);
            Ok::<Duration, Error>(after_release.elapsed())
        };
        let catch_up = async {
            let Some(through) = last else {
                return Ok((0u64, Duration::ZERO));
            };
            let from_id = caught_up.map_or(0, |a| a + 1);
            if from_id > through {
                return Ok((0, Duration::ZERO));
            }
            let entries = to_wal
                .catch_up_released(source_prefix, region, from_id, &released, within)
                .await?;
            let count = drain_through(entries, region, caught_up, through).await?;
            record(&self.tails, after_release);
            Ok((count, after_release.elapsed()))
        };
        let (acquired, caught) = tokio::join!(acquire, catch_up);
        let acquired = acquired?;
        let (tail, caught) = caught?;
        self.switch(region, to, last.or(after).unwrap_or(0), above, false);
        let window = started.elapsed().as_micros() as u64;
        if window > 100_000 {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let gauge = |c: &AtomicU64| c.load(Ordering::SeqCst);
            eprintln!(
                "cluster: {:.1} s: slow move of region {region} from {} to {}: {:.1} ms \
                 (release {:.1}, acquire {:.1}, tail of {tail} entries {:.1}; under way: \
                 {} failovers, {} archives, {} retirements, {} restarts)",
                self.started.elapsed().as_secs_f64(),
                source.prefix,
                target.prefix,
                window as f64 / 1e3,
                ms(after_release.duration_since(started)),
                ms(acquired),
                ms(caught),
                gauge(&self.c.failing_over),
                gauge(&self.c.archiving),
                gauge(&self.c.retiring),
                gauge(&self.c.restarting),
            );
        }
        let _ = self.windows.lock().expect("windows").record(window.max(1));
        self.c.migrations.fetch_add(1, Ordering::Relaxed);
        Ok(window)
    }

    /// Switches `region`'s route to instance `to`: the current piece ends at `through`,
    /// the new owner's starts above `above`. `keep_moving`: a flush is still to come.
    fn switch(&self, region: u64, to: usize, through: u64, above: u64, keep_moving: bool) {
        {
            let mut pieces = self.pieces[region as usize].lock().expect("pieces");
            if let Some(current) = pieces.last_mut() {
                current.through = Some(through);
            }
            pieces.push(Piece {
                node: to,
                after: Some(above),
                through: None,
            });
            let mut route = self.routes[region as usize].lock().expect("route");
            route.owner = to;
            route.version += 1;
            route.moving = keep_moving;
            route.failing = false;
        }
        self.switched.send_modify(|v| *v += 1);
    }

    /// Fails instance `victim` over (see the module docs): stops moves touching it,
    /// kills it or leaves it a zombie, fences its prefix, takes its regions over in
    /// parallel, flushes them at their new owners. Answers the fence's instant.
    async fn fail_over(&self, victim: usize, zombie: bool) -> Result<Instant, String> {
        let inst = self.instance(victim);
        inst.eligible.store(false, Ordering::SeqCst);
        let draining = Instant::now();
        while inst.busy.load(Ordering::SeqCst) > 0 {
            if draining.elapsed() > Duration::from_secs(60) {
                return Err("its moves never ended".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.c.failovers_begun.fetch_add(1, Ordering::SeqCst);
        let failing = Count::up(&self.c.failing_over);
        // The kill.
        let killed = Instant::now();
        inst.life
            .store(if zombie { ZOMBIE } else { DEAD }, Ordering::SeqCst);
        let stale_until = killed + Duration::from_millis(self.args.stale_ms);
        let mut regions = Vec::new();
        for region in 0..self.args.regions {
            let mut route = self.routes[region as usize].lock().expect("route");
            if route.owner == victim {
                self.moved[region as usize].store(true, Ordering::Relaxed);
                route.failing = true;
                route.moving = true;
                if zombie {
                    route.stale = Some((victim, stale_until));
                }
                regions.push(region);
            }
        }
        if zombie {
            self.c.zombies.fetch_add(1, Ordering::Relaxed);
        } else {
            self.c.kills.fetch_add(1, Ordering::Relaxed);
            let wal = inst.wal.lock().expect("wal").take();
            if let Some(wal) = wal {
                wal.abort();
            }
            if let Some(join) = inst.join.lock().expect("join").take() {
                join.abort();
            }
        }
        // The fence.
        let config = config(&inst.prefix, &self.args);
        let mut attempts = 0;
        let fenced: Fence = loop {
            match fence(self.store.clone(), &config).await {
                Ok(f) => break f,
                Err(e) if e.is_retryable() && attempts < 200 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(format!("the fence failed: {e}")),
            }
        };
        let fence_at = Instant::now();
        *inst.fence_at.lock().expect("fence_at") = Some(fence_at);
        record(&self.fences, killed);
        // The fenced chain, read-only, for the frontends' resolves (beside the takeover);
        // aborted if the failover fails first.
        let mut reader = Aborting({
            let (store, config, inst) = (self.store.clone(), config.clone(), inst.clone());
            tokio::spawn(async move {
                for _ in 0..100 {
                    match ObjectStoreLogStore::open_read_only(store.clone(), config.clone()).await {
                        Ok(log) => {
                            inst.fenced.send_replace(Some(Arc::new(log)));
                            return true;
                        }
                        Err(e) => {
                            eprintln!("cluster: reading {}'s fenced chain: {e}", inst.prefix);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                false
            })
        });
        // The takeover, every region at once, to the live nodes in turn.
        let targets: Vec<usize> = self
            .all_instances()
            .iter()
            .enumerate()
            .filter(|(i, t)| *i != victim && t.life() == ALIVE)
            .map(|(i, _)| i)
            .collect();
        if targets.is_empty() {
            return Err("no live node to take its regions".into());
        }
        let fenced = Arc::new(fenced);
        let mut flushes: Vec<(u64, usize, Option<u64>)> = Vec::new();
        let takeovers = regions.iter().enumerate().map(|(k, &region)| {
            let to = targets[k % targets.len()];
            let fenced = fenced.clone();
            async move {
                let flush = self.take_over(region, &fenced, to).await;
                (region, to, flush)
            }
        });
        let results: Vec<_> = futures::future::join_all(takeovers).await;
        let mut failure = None;
        for (region, to, result) in results {
            match result {
                Ok(flush) => flushes.push((region, to, flush)),
                Err(e) => failure = Some(format!("the takeover of region {region} failed: {e}")),
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        let failover = killed.elapsed();
        let _ = self
            .failover_times
            .lock()
            .expect("histogram")
            .record((failover.as_micros() as u64).max(1));
        self.c.failovers.fetch_add(1, Ordering::Relaxed);
        self.c
            .regions_failed_over
            .fetch_add(regions.len() as u64, Ordering::Relaxed);
        eprintln!(
            "cluster: {:.1} s: {} {}: {} regions failed over in {} ms (fence {} ms, {} objects \
             on the fenced chain)",
            killed.duration_since(self.started).as_secs_f64(),
            inst.prefix,
            if zombie { "left as a zombie" } else { "killed" },
            regions.len(),
            failover.as_millis(),
            fence_at.duration_since(killed).as_millis(),
            fenced.report.objects.len(),
        );
        drop(failing);
        // The flush: the checker's copy first, then the new owner forgets the pieces.
        self.archive(&regions).await?;
        for (region, to, flush) in flushes {
            if let Some(through) = flush {
                let owner = self.instance(to);
                if let Some(wal) = owner.wal() {
                    let mut attempts = 0;
                    loop {
                        match wal.obsolete(region, through).await {
                            Ok(()) => break,
                            Err(e) if e.is_retryable() && attempts < 100 => {
                                attempts += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Err(e) => return Err(format!("obsolete at {}: {e}", owner.prefix)),
                        }
                    }
                }
            }
            self.routes[region as usize].lock().expect("route").moving = false;
        }
        if !(&mut reader.0).await.unwrap_or(false) {
            return Err("its fenced chain could not be read".into());
        }
        Ok(fence_at)
    }

    /// One region of a fenced instance to instance `to`: the catch-up from the fenced
    /// chain beside the acquire with its pieces, then the route. Answers the last id of
    /// the pieces recorded (the new owner's flush obsoletes through it), if any.
    async fn take_over(
        &self,
        region: u64,
        fenced: &Fence,
        to: usize,
    ) -> Result<Option<u64>, Error> {
        let target = self.instance(to);
        let wal = target.wal().ok_or(Error::Stopped {
            durability: Durability::NotWritten,
        })?;
        // The node's tenure started above `after` (its acquire); the region may have
        // entries below it on the fenced chain, of an earlier tenure there.
        let after = self.pieces[region as usize]
            .lock()
            .expect("pieces")
            .last()
            .and_then(|p| p.after);
        let start = after.map_or(0, |a| a + 1);
        let held = fenced.regions.iter().find(|r| r.region == region);
        let released = match held {
            Some(r) => r.released,
            None => Released {
                last_id: None,
                acquire_above: fenced.acquire_above,
                sequence: Some(fenced.closed.sequence),
            },
        };
        let last = released.last_id.filter(|last| *last >= start);
        let above = fenced.acquire_above.max(after.unwrap_or(0));
        let mut pieces: Vec<WalPiece> = held
            .map(|r| r.pieces_with(&fenced.prefix))
            .unwrap_or_default();
        if let Some(own) = pieces.last_mut().filter(|p| p.prefix == fenced.prefix) {
            own.first_id = own.first_id.max(start);
        }
        pieces.retain(|p| p.first_id <= p.last_id);
        let flush = pieces.iter().map(|p| p.last_id).max();
        let within = Duration::from_secs(30);
        let catch_up = async {
            let Some(through) = last else {
                return Ok(0u64);
            };
            let entries = wal
                .catch_up_released(&fenced.prefix, region, start, &released, within)
                .await?;
            drain_through(entries, region, None, through).await
        };
        let (acquired, caught) = tokio::join!(acquire_with(&wal, region, above, pieces), catch_up);
        acquired?;
        caught?;
        self.switch(region, to, last.or(after).unwrap_or(0), above, true);
        Ok(flush)
    }

    /// Reads the closed pieces of `regions` not archived yet back from the bare store
    /// (read-only, as the checker does) and keeps their entries: a flush, or what
    /// retirement is about to delete.
    async fn archive(&self, regions: &[u64]) -> Result<(), String> {
        let _one = self.archiving.lock().await;
        let _archiving = Count::up(&self.c.archiving);
        let mut plan = Vec::new();
        let mut needed = HashSet::new();
        for &region in regions {
            let done = self.archived[region as usize]
                .lock()
                .expect("archived")
                .pieces;
            let pieces = self.pieces[region as usize].lock().expect("pieces").clone();
            let closed: Vec<Piece> = pieces
                .into_iter()
                .skip(done)
                .take_while(|p| p.through.is_some())
                .collect();
            if closed.is_empty() {
                continue;
            }
            needed.extend(closed.iter().map(|p| p.node));
            let end = done + closed.len();
            plan.push((region, closed, end));
        }
        // Opened after the pieces were read: every closed piece is on its chain.
        let mut logs = HashMap::new();
        for node in needed {
            let inst = self.instance(node);
            if inst.life() == RETIRED {
                return Err(format!(
                    "{} is retired and a piece on it was never archived",
                    inst.prefix
                ));
            }
            let log = ObjectStoreLogStore::open_read_only(
                self.bare.clone(),
                config(&inst.prefix, &self.args),
            )
            .await
            .map_err(|e| format!("opening {}: {e}", inst.prefix))?;
            logs.insert(node, log);
        }
        for (region, closed, end) in plan {
            let mut entries = Vec::new();
            for piece in closed {
                let through = piece.through.unwrap_or(0);
                let from = piece.after.map_or(0, |a| a + 1);
                if from > through {
                    continue;
                }
                let mut read = logs[&piece.node].read(region, from);
                while let Some(entry) = read.next().await {
                    let entry = entry.map_err(|e| format!("reading region {region}: {e}"))?;
                    if entry.id > through {
                        break;
                    }
                    entries.push((entry.id, entry.payload, piece.node));
                }
            }
            self.c
                .archived_entries
                .fetch_add(entries.len() as u64, Ordering::Relaxed);
            let mut archived = self.archived[region as usize].lock().expect("archived");
            archived.entries.extend(entries);
            archived.pieces = end;
        }
        Ok(())
    }

    /// Retires a failed-over instance's prefix (see the module docs), once the grace
    /// passed since `fence_at`.
    async fn retire_instance(&self, victim: usize, fence_at: Instant) -> Result<(), String> {
        let inst = self.instance(victim);
        let grace = Duration::from_millis(self.args.reclaim_grace_ms);
        let stale_end = fence_at + Duration::from_millis(self.args.stale_ms);
        tokio::time::sleep_until((fence_at + grace).max(stale_end).into()).await;
        // A zombie is stopped (it ended by itself if it wrote after the fence).
        let wal = inst.wal.lock().expect("wal").take();
        if let Some(wal) = wal {
            let _ = tokio::time::timeout(Duration::from_secs(30), wal.stop()).await;
        }
        let join = inst.join.lock().expect("join").take();
        if let Some(join) = join {
            let _ = tokio::time::timeout(Duration::from_secs(30), join).await;
        }
        let _retiring = Count::up(&self.c.retiring);
        let waiting = Instant::now();
        while inst.sent.load(Ordering::SeqCst) > 0 {
            if waiting.elapsed() > Duration::from_secs(150) {
                return Err("appends sent to it were never settled".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every region with a closed piece on it: archived before the delete.
        let on_it: Vec<u64> = (0..self.args.regions)
            .filter(|r| {
                self.pieces[*r as usize]
                    .lock()
                    .expect("pieces")
                    .iter()
                    .any(|p| p.node == victim)
            })
            .collect();
        self.archive(&on_it).await?;
        let others: Vec<String> = self
            .all_instances()
            .iter()
            .filter(|i| i.life() != RETIRED && i.prefix != inst.prefix)
            .map(|i| i.prefix.clone())
            .collect();
        let config = config(&inst.prefix, &self.args);
        let started = Instant::now();
        loop {
            match retire(self.store.clone(), &config, &others).await {
                Ok(retired) => {
                    eprintln!(
                        "cluster: {:.1} s: {} retired ({} keys deleted, tombstone {})",
                        self.started.elapsed().as_secs_f64(),
                        inst.prefix,
                        retired.deleted,
                        retired.closed
                    );
                    break;
                }
                Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(60) => {
                    let refused = match e {
                        Error::PieceStillNeeded { .. } => &self.c.retire_piece_still_needed,
                        Error::RetireTooEarly { .. } => &self.c.retire_too_early,
                        _ => &self.c.retire_retried,
                    };
                    refused.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(format!("retire: {e}")),
            }
        }
        inst.life.store(RETIRED, Ordering::SeqCst);
        inst.fenced.send_replace(None);
        self.c.retired.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Starts node `slot` again on `prefix`; answers the new instance.
    async fn start_instance(&self, slot: usize, prefix: String) -> Result<usize, String> {
        let linked: Arc<dyn ObjectStore> =
            Wrapper::wrap(self.store.clone(), LinkHooks(self.links[slot].clone()));
        let (wal, join) = spawn_wal(linked, config(&prefix, &self.args), self.restarts)
            .await
            .map_err(|e| format!("spawn {prefix}: {e}"))?;
        wal.ready()
            .await
            .map_err(|e| format!("open {prefix}: {e}"))?;
        let mut instances = self.instances.lock().expect("instances");
        instances.push(Arc::new(Instance::new(slot, prefix, wal, join)));
        Ok(instances.len() - 1)
    }

    /// Moves regions to instance `to` until it owns its share, `--rebalance-moves` at a
    /// time.
    async fn rebalance(&self, to: usize, rng: &mut SplitMix64) {
        let live = self
            .all_instances()
            .iter()
            .filter(|i| i.life() == ALIVE)
            .count()
            .max(1);
        let share = self.args.regions as usize / live;
        for _ in 0..200 {
            let owned = self.owned();
            let have = owned.get(&to).map_or(0, Vec::len);
            if have >= share {
                return;
            }
            // From the instance that owns the most.
            let Some((_, from_regions)) = owned
                .iter()
                .filter(|(i, _)| **i != to)
                .max_by_key(|(_, r)| r.len())
            else {
                return;
            };
            let mut batch = Vec::new();
            for &region in from_regions.iter() {
                if batch.len() >= self.args.rebalance_moves.max(1).min(share - have) {
                    break;
                }
                if let Some((from, to)) = self.start_move(region, Some(to), rng) {
                    batch.push((region, from, to));
                }
            }
            if batch.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let moves = batch
                .into_iter()
                .map(|(region, from, to)| self.run_move(region, from, to, true));
            futures::future::join_all(moves).await;
        }
    }

    /// The failovers of the run (see the module docs), one after the other; each
    /// prefix retired in a task of its own. Answers when the last retirement ended.
    async fn failovers(self: Arc<Self>, started: Instant, deadline: Instant) {
        let args = self.args.clone();
        let total = if args.failover_bench {
            args.bench_failovers
        } else {
            args.kills + args.zombies
        };
        // A kill first, then a zombie, in turn, while both are left.
        let mut kinds = Vec::new();
        let (mut kills, mut zombies) = if args.failover_bench {
            (total, 0)
        } else {
            (args.kills, args.zombies)
        };
        while kills + zombies > 0 {
            if kills > 0 && (kinds.len() % 2 == 0 || zombies == 0) {
                kinds.push(false);
                kills -= 1;
            } else {
                kinds.push(true);
                zombies -= 1;
            }
        }
        let mut rng = SplitMix64::new(args.seed ^ 0xfa11);
        let mut retirements = tokio::task::JoinSet::new();
        let mut generation = vec![1usize; args.nodes];
        for (i, zombie) in kinds.into_iter().enumerate() {
            let slot = if args.failover_bench {
                0
            } else {
                i % args.nodes
            };
            if !args.failover_bench {
                let at = started
                    + Duration::from_secs_f64(
                        args.seconds as f64 * (i as f64 + 0.5) / total as f64,
                    );
                tokio::time::sleep_until(at.into()).await;
                if Instant::now() + Duration::from_secs(2) > deadline {
                    break;
                }
            }
            let victim = self
                .all_instances()
                .iter()
                .rposition(|inst| inst.slot == slot && inst.life() == ALIVE);
            let Some(victim) = victim else {
                eprintln!("cluster: node {slot} has no live instance to fail over");
                self.c.failover_failures.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if args.failover_bench {
                let share = (args.regions as usize / args.nodes) as u64;
                let waiting = Instant::now();
                let wal = self.instance(victim).wal();
                loop {
                    let objects = match &wal {
                        Some(wal) => wal.stats().await.map_or(0, |s| s.chain_objects),
                        None => 0,
                    };
                    let regions = self.owned().get(&victim).map_or(0, Vec::len) as u64;
                    if (objects >= args.live_objects && regions >= share)
                        || waiting.elapsed() > Duration::from_secs(120)
                    {
                        self.c
                            .victim_objects_min
                            .fetch_min(objects, Ordering::Relaxed);
                        self.c
                            .victim_regions_min
                            .fetch_min(regions, Ordering::Relaxed);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } else {
                let regions = self.owned().get(&victim).map_or(0, Vec::len) as u64;
                self.c
                    .victim_regions_min
                    .fetch_min(regions, Ordering::Relaxed);
                if let Some(wal) = self.instance(victim).wal() {
                    let objects = wal.stats().await.map_or(0, |s| s.chain_objects);
                    self.c
                        .victim_objects_min
                        .fetch_min(objects, Ordering::Relaxed);
                }
            }
            let fence_at = match self.fail_over(victim, zombie).await {
                Ok(at) => at,
                Err(e) => {
                    eprintln!(
                        "cluster: failing {} over failed: {e}",
                        self.instance(victim).prefix
                    );
                    self.c.failover_failures.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let cluster = self.clone();
            retirements.spawn(async move {
                if let Err(e) = cluster.retire_instance(victim, fence_at).await {
                    let prefix = cluster.instance(victim).prefix.clone();
                    eprintln!("cluster: retiring {prefix} failed: {e}");
                    cluster.c.failover_failures.fetch_add(1, Ordering::Relaxed);
                }
            });
            // The node comes back on a new prefix and gets its share of the regions.
            generation[slot] += 1;
            let prefix = format!("{}-{}", prefix(slot), generation[slot]);
            let restarting = Count::up(&self.c.restarting);
            match self.start_instance(slot, prefix).await {
                Ok(new) => {
                    self.c.restarted.fetch_add(1, Ordering::Relaxed);
                    self.rebalance(new, &mut rng).await;
                    eprintln!(
                        "cluster: {:.1} s: {} started, owns {} regions",
                        self.started.elapsed().as_secs_f64(),
                        self.instance(new).prefix,
                        self.owned().get(&new).map_or(0, Vec::len)
                    );
                }
                Err(e) => {
                    eprintln!("cluster: restarting node {slot} failed: {e}");
                    self.c.failover_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(restarting);
        }
        while retirements.join_next().await.is_some() {}
    }
}

/// Acquires `region` above `above` with `pieces`, asked again while it may be durable.
async fn acquire_with(
    wal: &WalHandle,
    region: u64,
    above: u64,
    pieces: Vec<WalPiece>,
) -> Result<(), Error> {
    loop {
        match wal.acquire_with_pieces(region, above, pieces.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_retryable() || e.durability() == Durability::MayBeDurable => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads a catch-up to its end, which must be `through`; answers the entries read.
async fn drain_through(
    mut entries: object_store_wal_actors::EntryStream,
    region: u64,
    before: Option<u64>,
    through: u64,
) -> Result<u64, Error> {
    let mut count = 0u64;
    let mut at = before;
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
    Ok(count)
}

/// The id of the entry with payload `want` in `region` on `wal`'s chain, read whole.
async fn find(wal: &WalHandle, region: u64, want: &Bytes) -> Result<Option<u64>, Error> {
    let mut entries = wal.read_stream(region, 0).await?;
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        if entry.payload == *want {
            return Ok(Some(entry.id));
        }
    }
    Ok(None)
}

#[derive(Default)]
struct Verdict {
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    entries: u64,
    /// Pieces on a retired prefix that were never archived (their entries unreadable:
    /// counted lost if acknowledged).
    unreadable_pieces: u64,
}

/// Reads every region's history back, its archived entries and then its pieces from
/// the bare store, and checks it against what was acknowledged.
async fn check(cluster: &Cluster) -> Result<Verdict, Error> {
    let args = &cluster.args;
    let mut logs = HashMap::new();
    for (i, inst) in cluster.all_instances().iter().enumerate() {
        if inst.life() == RETIRED {
            continue;
        }
        let config = config(&inst.prefix, args);
        logs.insert(
            i,
            ObjectStoreLogStore::open_read_only(cluster.bare.clone(), config).await?,
        );
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
        let (done, mut history) = {
            let archived = cluster.archived[region as usize].lock().expect("archived");
            (archived.pieces, archived.entries.clone())
        };
        // Where each entry was read: archived (true) or at the end, and the instance.
        let mut sources: Vec<(bool, usize)> = history.iter().map(|e| (true, e.2)).collect();
        for piece in pieces.into_iter().skip(done) {
            let from = piece.after.map_or(0, |a| a + 1);
            if piece.through.is_some_and(|t| from > t) {
                continue;
            }
            let Some(log) = logs.get(&piece.node) else {
                verdict.unreadable_pieces += 1;
                continue;
            };
            let mut entries = log.read(region, from);
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                if piece.through.is_some_and(|t| entry.id > t) {
                    break;
                }
                history.push((entry.id, entry.payload, piece.node));
                sources.push((false, piece.node));
            }
        }
        verdict.entries += history.len() as u64;
        let mut seen: HashMap<Bytes, u64> = HashMap::new();
        let mut previous = None;
        let mut wrong = false;
        for (id, payload, _) in &history {
            if previous.is_some_and(|p| *id <= p) {
                verdict.out_of_order += 1;
                wrong = true;
            }
            previous = Some(*id);
            *seen.entry(payload.clone()).or_default() += 1;
        }
        let duplicated = seen.values().filter(|c| **c > 1).count() as u64;
        verdict.duplicated += duplicated;
        if wrong || duplicated > 0 {
            explain(cluster, region, done, &history, &sources, &seen);
        }
        let ids: HashMap<Bytes, u64> = history.iter().map(|(i, p, _)| (p.clone(), *i)).collect();
        for a in by_region.remove(&region).unwrap_or_default() {
            if ids.get(&payload(region, a.n)) != Some(&a.id) {
                verdict.lost += 1;
            }
        }
    }
    Ok(verdict)
}

/// Prints what the checker read of a region with a duplicate or an entry out of order:
/// its pieces, and each duplicated entry's copies and resends.
fn explain(
    cluster: &Cluster,
    region: u64,
    done: usize,
    history: &[(u64, Bytes, usize)],
    sources: &[(bool, usize)],
    seen: &HashMap<Bytes, u64>,
) {
    let name = |i: usize| cluster.instance(i).prefix.clone();
    let pieces: Vec<String> = cluster.pieces[region as usize]
        .lock()
        .expect("pieces")
        .iter()
        .map(|p| format!("{} ({:?}, {:?}]", name(p.node), p.after, p.through))
        .collect();
    eprintln!("cluster: region {region}: {done} pieces archived, pieces {pieces:?}");
    let resent = cluster.resent.lock().expect("resent");
    for (k, (id, payload, _)) in history.iter().enumerate() {
        let out_of_order = k > 0 && history[k - 1].0 >= *id;
        if seen.get(payload).is_some_and(|c| *c > 1) || out_of_order {
            let (archived, node) = sources[k];
            let n = std::str::from_utf8(payload)
                .ok()
                .and_then(|p| p.split(':').nth(1))
                .and_then(|n| n.parse::<u64>().ok());
            let why = n.and_then(|n| resent.get(&(region, n)));
            eprintln!(
                "cluster:   {:?} id {id} in {}{}{}; resent: {why:?}",
                String::from_utf8_lossy(payload),
                name(node),
                if archived { " (archived)" } else { "" },
                if out_of_order { ", out of order" } else { "" },
            );
        }
    }
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
    // Counts what the nodes and the coordinator ask of the store (the checker reads the
    // bare store).
    let counting = CountingStore::counts_only(with_latency_profile(faulty, profile));
    let store: Arc<dyn ObjectStore> = counting.clone();
    // Each node reaches the store through a link of its own, which can stall.
    let stalls = if args.no_faults { 0 } else { args.epoch_faults };
    let links: Vec<Arc<Link>> = (0..args.nodes).map(|_| Arc::default()).collect();
    let restarts = RestartPolicy::new(
        10_000,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(20),
    );

    let regions = args.regions as usize;
    let cluster = Arc::new(Cluster {
        args: args.clone(),
        started: Instant::now(),
        store: store.clone(),
        bare: bare.clone(),
        links: links.clone(),
        restarts,
        instances: Mutex::new(Vec::new()),
        routes: (0..regions)
            .map(|r| {
                Mutex::new(Route {
                    owner: r % args.nodes,
                    version: 0,
                    moving: false,
                    failing: false,
                    stale: None,
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
        archived: (0..regions).map(|_| Mutex::default()).collect(),
        archiving: tokio::sync::Mutex::new(()),
        switched: watch::channel(0).0,
        acked: Mutex::new(Vec::new()),
        latency: Mutex::new(histogram()),
        latency_unmoved: Mutex::new(histogram()),
        windows: Mutex::new(histogram()),
        windows_beside: Mutex::new(histogram()),
        windows_apart: Mutex::new(histogram()),
        windows_rebalance: Mutex::new(histogram()),
        releases: Mutex::new(histogram()),
        acquires: Mutex::new(histogram()),
        tails: Mutex::new(histogram()),
        resolves: Mutex::new(histogram()),
        failover_times: Mutex::new(histogram()),
        fences: Mutex::new(histogram()),
        moved: (0..regions).map(|_| AtomicBool::new(false)).collect(),
        c: Counters {
            victim_objects_min: AtomicU64::new(u64::MAX),
            victim_regions_min: AtomicU64::new(u64::MAX),
            ..Counters::default()
        },
        epochs_ended: Mutex::new(HashSet::new()),
        next_n: (0..regions).map(|_| AtomicU64::new(0)).collect(),
        resent: Mutex::new(HashMap::new()),
    });
    for node in 0..args.nodes {
        cluster.start_instance(node, prefix(node)).await?;
    }
    let failovers = if args.failover_bench {
        args.bench_failovers
    } else {
        args.kills + args.zombies
    };
    eprintln!(
        "cluster: {} nodes, {} regions, {} appends/s for {} s{}, {} failovers{}",
        args.nodes,
        args.regions,
        args.rate,
        args.seconds,
        if args.no_migrations || args.failover_bench {
            ", no migrations"
        } else {
            ""
        },
        failovers,
        if args.failover_bench {
            " (the failover bench)"
        } else {
            ""
        },
    );

    let started = Instant::now();
    // The bench's load runs until its last failover ended, an hour at most.
    let seconds = if args.failover_bench {
        3600
    } else {
        args.seconds
    };
    let deadline = started + Duration::from_secs(seconds);
    // The bench's load runs until its last failover ended (at most `seconds`).
    let stop_load = Arc::new(AtomicBool::new(false));
    // The load: arrivals with exponential gaps, each append its own task, at most this
    // many in flight (memory stays bounded if the cluster falls behind).
    let in_flight = Arc::new(Semaphore::new(8192));
    let load = {
        let cluster = cluster.clone();
        let in_flight = in_flight.clone();
        let args = args.clone();
        let stop_load = stop_load.clone();
        tokio::spawn(async move {
            let mut rng = SplitMix64::new(args.seed);
            let mut next = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            while next < deadline && !stop_load.load(Ordering::Relaxed) {
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
    let moves = if args.no_migrations || args.failover_bench {
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
                    let Some((from, to)) = cluster.start_move(region, None, &mut rng) else {
                        continue;
                    };
                    let cluster = cluster.clone();
                    tasks.spawn(async move { cluster.run_move(region, from, to, false).await });
                }
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        }))
    };
    let failing = {
        let cluster = cluster.clone();
        let stop_load = stop_load.clone();
        let bench = args.failover_bench;
        tokio::spawn(async move {
            cluster.failovers(started, deadline).await;
            if bench {
                stop_load.store(true, Ordering::Relaxed);
            }
        })
    };
    // The stalls: node `i % nodes` at the middle of the `i`-th of `stalls` equal
    // stretches of the run.
    let stalling = {
        let links = links.clone();
        let args = args.clone();
        tokio::spawn(async move {
            let mut done = 0u64;
            for i in 0..stalls {
                let at = started
                    + Duration::from_secs_f64(
                        args.seconds as f64 * (i as f64 + 0.5) / stalls as f64,
                    );
                tokio::time::sleep_until(at.into()).await;
                let link = &links[i as usize % args.nodes];
                link.set_stalled(true);
                tokio::time::sleep(Duration::from_millis(args.stall_ms)).await;
                link.set_stalled(false);
                done += 1;
            }
            done
        })
    };
    load.await?;
    if let Some(moves) = moves {
        moves.await?;
    }
    failing.await?;
    let stalled = stalling.await?;
    let mut wal_restarts = 0;
    let instances = cluster.all_instances();
    for inst in &instances {
        if let Some(wal) = inst.wal() {
            if let Ok(stats) = wal.stats().await {
                wal_restarts += stats.restarts;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = counting.counts();
    let (gets, get_bytes, puts) = (
        counts.gets.load(Ordering::Relaxed),
        counts.get_bytes.load(Ordering::Relaxed),
        counts.puts.load(Ordering::Relaxed),
    );
    let mut stop_failures = 0u64;
    for inst in &instances {
        let wal = inst.wal.lock().expect("wal").take();
        if let Some(wal) = wal {
            if let Err(e) = wal.stop().await {
                if inst.life() == ALIVE {
                    eprintln!("cluster: stopping {} failed: {e}", inst.prefix);
                    stop_failures += 1;
                }
            }
        }
        let join = inst.join.lock().expect("join").take();
        if let Some(join) = join {
            join.await?;
        }
    }

    let verdict = check(&cluster).await?;
    let acked = cluster.acked.lock().expect("acked").len() as u64;
    let ms = |h: &Mutex<Histogram<u64>>, q: f64| {
        let h = h.lock().expect("histogram");
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let c = &cluster.c;
    let at_least = |v: &AtomicU64| match v.load(Ordering::Relaxed) {
        u64::MAX => 0,
        v => v,
    };
    // The first retry's wait in force: the library's adaptive default, or the override.
    let retry_first_wait = match args.retry_initial_backoff_ms {
        Some(ms) => serde_json::json!(ms),
        None => serde_json::json!("adaptive"),
    };
    let zombie_acks = c.zombie_acks_after_fence.load(Ordering::Relaxed);
    let failed = c.failed.load(Ordering::Relaxed);
    let result = serde_json::json!({
        "nodes": args.nodes,
        "regions": args.regions,
        "offered_per_s": args.rate,
        "retry_first_wait": retry_first_wait,
        "seconds": (seconds * 10.0).round() / 10.0,
        "acked": acked,
        "acked_per_s": (acked as f64 / seconds).round(),
        "failed": failed,
        "resolved_found": c.resolved_found.load(Ordering::Relaxed),
        "resolved_resent": c.resolved_resent.load(Ordering::Relaxed),
        "resolved_on_fence_found": c.resolved_on_fence_found.load(Ordering::Relaxed),
        "resolved_on_fence_resent": c.resolved_on_fence_resent.load(Ordering::Relaxed),
        "may_be_durable": c.may_be_durable.load(Ordering::Relaxed),
        "epoch_ended_not_written": c.ended_not_written.load(Ordering::Relaxed),
        "resolved_after_move": c.resolved_after_move.load(Ordering::Relaxed),
        "stalls": stalled,
        "stall_ms": if stalls > 0 { args.stall_ms } else { 0 },
        "held_by_stalls": links.iter().map(|l| l.held.load(Ordering::Relaxed)).sum::<u64>(),
        "epochs_ended": cluster.epochs_ended.lock().expect("epochs").len(),
        "wal_restarts": wal_restarts,
        "max_create_ms": args.max_create_ms,
        "reclaim_grace_ms": args.reclaim_grace_ms,
        "entries_read_back": verdict.entries,
        "archived_entries": c.archived_entries.load(Ordering::Relaxed),
        "unreadable_pieces": verdict.unreadable_pieces,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "out_of_order": verdict.out_of_order,
        "migrations": c.migrations.load(Ordering::Relaxed),
        "migration_failures": c.migration_failures.load(Ordering::Relaxed),
        "migration_window_ms_p50": ms(&cluster.windows, 0.5),
        "migration_window_ms_p99": ms(&cluster.windows, 0.99),
        "migration_window_ms_max": ms(&cluster.windows, 1.0),
        "migration_window_ms_p50_apart": ms(&cluster.windows_apart, 0.5),
        "migration_window_ms_p99_apart": ms(&cluster.windows_apart, 0.99),
        "migrations_beside_failover": cluster.windows_beside.lock().expect("histogram").len(),
        "migration_window_ms_p50_beside_failover": ms(&cluster.windows_beside, 0.5),
        "migration_window_ms_p99_beside_failover": ms(&cluster.windows_beside, 0.99),
        "migrations_rebalance": cluster.windows_rebalance.lock().expect("histogram").len(),
        "migration_window_ms_p50_rebalance": ms(&cluster.windows_rebalance, 0.5),
        "migration_window_ms_p99_rebalance": ms(&cluster.windows_rebalance, 0.99),
        "release_ms_p50": ms(&cluster.releases, 0.5),
        "release_ms_p99": ms(&cluster.releases, 0.99),
        "acquire_ms_p99": ms(&cluster.acquires, 0.99),
        "catch_up_tail_ms_p99": ms(&cluster.tails, 0.99),
        "resolve_ms_p50": ms(&cluster.resolves, 0.5),
        "resolve_ms_p99": ms(&cluster.resolves, 0.99),
        "failovers": c.failovers.load(Ordering::Relaxed),
        "kills": c.kills.load(Ordering::Relaxed),
        "zombies": c.zombies.load(Ordering::Relaxed),
        "failover_failures": c.failover_failures.load(Ordering::Relaxed),
        "regions_failed_over": c.regions_failed_over.load(Ordering::Relaxed),
        "victim_regions_min": at_least(&c.victim_regions_min),
        "victim_live_objects_min": at_least(&c.victim_objects_min),
        "failover_ms_p50": ms(&cluster.failover_times, 0.5),
        "failover_ms_p99": ms(&cluster.failover_times, 0.99),
        "failover_ms_max": ms(&cluster.failover_times, 1.0),
        "fence_ms_p50": ms(&cluster.fences, 0.5),
        "fence_ms_p99": ms(&cluster.fences, 0.99),
        "zombie_sends": c.zombie_sends.load(Ordering::Relaxed),
        "zombie_acks_after_fence": zombie_acks,
        "zombie_acks_late_on_chain": c.zombie_acks_late_on_chain.load(Ordering::Relaxed),
        "zombie_acks_before_fence": c.zombie_acks_before_fence.load(Ordering::Relaxed),
        "retired": c.retired.load(Ordering::Relaxed),
        "retire_refused_piece_still_needed": c.retire_piece_still_needed.load(Ordering::Relaxed),
        "retire_refused_too_early": c.retire_too_early.load(Ordering::Relaxed),
        "retire_refused_other": c.retire_retried.load(Ordering::Relaxed),
        "restarted": c.restarted.load(Ordering::Relaxed),
        "gets_per_s": (gets as f64 / seconds).round(),
        "get_mb_per_s": (get_bytes as f64 / seconds / 1e5).round() / 10.0,
        "puts_per_s": (puts as f64 / seconds).round(),
        "append_p50_ms": ms(&cluster.latency, 0.5),
        "append_p99_ms": ms(&cluster.latency, 0.99),
        "append_p99_ms_unmoved": ms(&cluster.latency_unmoved, 0.99),
        "fault_rate": if args.no_faults { 0.0 } else { args.fault_rate },
    });
    println!("{result}");
    let ok = verdict.lost == 0
        && verdict.duplicated == 0
        && verdict.out_of_order == 0
        && verdict.unreadable_pieces == 0
        && zombie_acks == 0
        && failed == 0
        && stop_failures == 0
        && c.migration_failures.load(Ordering::Relaxed) == 0
        && c.failover_failures.load(Ordering::Relaxed) == 0;
    Ok(ok)
}
