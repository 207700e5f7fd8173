//! The coordinator: two or more instances campaign through etcd's election API; the
//! leader assigns the regions, detects a dead node by its lease's expiry (its
//! `nodes/<name>` key gone), fences its prefix and takes its regions over, as
//! `examples/cluster.rs`'s `fail_over` and `take_over` do: per region, the catch-up
//! from the fenced chain beside `acquire_with_pieces` at the new owner, then the route.
//!
//! Every write is a transaction guarded by the leader's election key (its create
//! revision): once the leader's lease expired and a standby won, the old leader's
//! writes fail, and it exits. It also exits (fail-stop) when it cannot learn whether
//! a write landed, since its cached routes and histories might then be stale. A new leader reads routes and histories back from etcd
//! and carries on: a failover half done is done again (the fence answers the same when
//! asked again, acquires and catch-ups are idempotent), since its regions' routes still
//! name the dead node.
//!
//! A route is written only once the new owner's acquire answered and its catch-up read
//! the fenced chain to the fence's last id: from then on the owner accepts the region's
//! appends, and the frontends watching the route send them there.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::{fence, retire, store_from_url, Fence, ObjectStoreLogStore, Released};
use tokio::signal::unix::{signal, SignalKind};

use crate::keys::{ArchiveRecord, FailoverRecord, Keys, NodeRecord, Piece, Route};
use crate::rpc::{CallError, PieceMsg, Pool, Reply, Request};
use crate::view::View;
use crate::{etcd_connect, etcd_connect_waiting, now_ms, wal_config, Common};

/// The exit code of a coordinator that lost its lease or its leadership, or could not
/// learn whether one of its writes landed (see `Leader::guarded_txn`): the driver
/// starts it again as a standby.
pub const DEPOSED: i32 = 4;

/// A coordinator's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// This instance's id (the election's value).
    #[arg(long)]
    id: String,
    /// Nodes the first leader waits for before it assigns the regions.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Regions.
    #[arg(long, default_value_t = 300)]
    regions: u64,
    /// The coordinator's lease TTL, seconds: a dead leader's standby takes over this
    /// long after it stopped.
    #[arg(long, default_value_t = 2)]
    ttl_secs: i64,
    /// No moves for balance (a restarted node then gets no regions).
    #[arg(long)]
    no_moves: bool,
    /// Flush failed-over regions into archives and retire fenced prefixes after the
    /// grace (`--reclaim-grace-ms` plus `--max-create-ms` after the fence).
    #[arg(long)]
    retire: bool,
    /// Regions moved at once when balancing.
    #[arg(long, default_value_t = 5)]
    moves_at_once: usize,
}

/// A move under way, as `moves/<region>` records it: a new leader finishes it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct MoveIntent {
    from: String,
    to: String,
}

/// Ids or versions read back from etcd that leave no room above them (only a damaged
/// or hostile key space holds such values): the step is refused, nothing written.
#[derive(Debug, thiserror::Error)]
enum Exhausted {
    /// A piece's `after` is the last id: no entry id is left above it.
    #[error("region {region}: no entry id is left above {after}")]
    NoIdAbove {
        /// The region.
        region: u64,
        /// The id the piece starts after.
        after: u64,
    },
    /// The route's version is the last one.
    #[error("region {region}: its route's version {version} cannot be raised")]
    RouteVersion {
        /// The region.
        region: u64,
        /// The route's version.
        version: u64,
    },
}

/// The first id of a piece that holds ids above `after` (`None`: from id 0).
fn first_id_above(region: u64, after: Option<u64>) -> Result<u64, Exhausted> {
    match after {
        None => Ok(0),
        Some(after) => after
            .checked_add(1)
            .ok_or(Exhausted::NoIdAbove { region, after }),
    }
}

/// The longest wait between two attempts of a move's step.
const MOVE_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often a move that is still asking says so.
const MOVE_REPORT_EVERY: Duration = Duration::from_secs(60);

/// Waits between a move's attempts: doubling from the first wait up to
/// [`MOVE_BACKOFF_MAX`].
struct Backoff {
    next: Duration,
    reported: u64,
}

impl Backoff {
    fn new(first: Duration) -> Backoff {
        Backoff {
            next: first,
            reported: 0,
        }
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = self.next.saturating_mul(2).min(MOVE_BACKOFF_MAX);
    }

    /// Whether another [`MOVE_REPORT_EVERY`] passed since `started` (and the last
    /// report).
    fn report_due(&mut self, started: Instant) -> bool {
        let periods = started.elapsed().as_secs() / MOVE_REPORT_EVERY.as_secs().max(1);
        if periods > self.reported {
            self.reported = periods;
            true
        } else {
            false
        }
    }
}

/// Runs a coordinator instance: standby until elected, then the leader until it stops
/// (SIGTERM) or is deposed.
pub async fn main(args: Args) -> anyhow::Result<i32> {
    let keys = Keys::new(&args.common.run_id);
    let mut client = etcd_connect(&args.common.etcd).await?;
    let lease = client.lease_grant(args.ttl_secs, None).await?.id();
    // The lease kept alive by a task of its own: lost, the process exits (whatever it
    // was doing is guarded by the election key, which went with the lease).
    {
        let mut client = client.clone();
        let ttl = Duration::from_secs(args.ttl_secs.max(1) as u64);
        let id = args.id.clone();
        tokio::spawn(async move {
            let Ok((mut keeper, mut answers)) = client.lease_keep_alive(lease).await else {
                eprintln!("{id}: no keep-alive stream");
                std::process::exit(DEPOSED);
            };
            let mut last_kept = Instant::now();
            let mut tick = tokio::time::interval(ttl / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                if last_kept.elapsed() > ttl {
                    eprintln!("{id}: lease lost (no keep-alive answered)");
                    std::process::exit(DEPOSED);
                }
                let sent = Instant::now();
                if keeper.keep_alive().await.is_err() {
                    continue;
                }
                match tokio::time::timeout(ttl, answers.message()).await {
                    Ok(Ok(Some(a))) if a.ttl() > 0 => last_kept = sent,
                    Ok(Ok(Some(_))) => {
                        eprintln!("{id}: lease expired");
                        std::process::exit(DEPOSED);
                    }
                    _ => {}
                }
            }
        });
    }
    let view = View::start(client.clone(), keys.clone()).await?;
    let mut term = signal(SignalKind::terminate())?;
    eprintln!("{}: campaigning", args.id);
    let mut campaigner = etcd_connect_waiting(&args.common.etcd).await?;
    let elected = tokio::select! {
        _ = term.recv() => {
            let _ = client.lease_revoke(lease).await;
            return Ok(0);
        }
        elected = campaigner.campaign(keys.election(), args.id.clone(), lease) => elected?,
    };
    let Some(leader_key) = elected.leader().cloned() else {
        anyhow::bail!("the election answered no leader key");
    };
    let guard = Compare::create_revision(leader_key.key(), CompareOp::Equal, leader_key.rev());
    let at = now_ms();
    eprintln!("{}: elected at {at}", args.id);
    let leader = Arc::new(
        Leader::new(
            args.clone(),
            keys.clone(),
            client.clone(),
            guard,
            lease,
            view,
            store_from_url(&args.common.store)?,
        )
        .await?,
    );
    leader
        .put(&format!("{}{}", keys.leaders(), args.id), at.to_string())
        .await?;
    let run = leader.clone().lead();
    tokio::select! {
        _ = term.recv() => {
            let _ = client.lease_revoke(lease).await;
            Ok(0)
        }
        result = run => result.map(|()| 0),
    }
}

/// What the leader knows of one region: its route and history (only the leader writes
/// them, so its copy is the truth while its guard holds).
#[derive(Debug, Default, Clone)]
struct RegionState {
    route: Option<Route>,
    /// The `mod_revision` of `routes/<region>` as this leader last read or wrote it (0:
    /// no such key): [`Leader::switch`] writes only if the key is still at it.
    route_revision: i64,
    history: Vec<Piece>,
    /// A move of it is under way: a failover leaves it to the move until the move
    /// switched its route or gave up (its source died: the failover takes it over from
    /// the fence's `released`).
    moving: bool,
    /// The history's first pieces flushed into archive objects.
    archived: ArchiveRecord,
}

/// The elected coordinator.
struct Leader {
    args: Args,
    keys: Keys,
    client: etcd_client::Client,
    guard: Compare,
    /// The lease the election key is bound to (revoked on a fail-stop exit, so that
    /// the standby is elected at once rather than after the TTL).
    lease: i64,
    view: View,
    pool: Pool,
    store: Arc<dyn ObjectStore>,
    regions: Vec<Mutex<RegionState>>,
    /// Nodes whose failover is under way.
    failing: Mutex<HashSet<String>>,
    /// One archive at a time.
    archiving: tokio::sync::Mutex<()>,
    /// Moves a former leader began and did not finish (read back at election).
    intents: Mutex<HashMap<u64, MoveIntent>>,
    /// The longest acquire and catch-up of the takeovers since the last failover's
    /// report (for the log).
    timings: Mutex<(Duration, Duration)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Leader {
    /// The leader's state, read back from etcd.
    async fn new(
        args: Args,
        keys: Keys,
        mut client: etcd_client::Client,
        guard: Compare,
        lease: i64,
        view: View,
        store: Arc<dyn ObjectStore>,
    ) -> anyhow::Result<Leader> {
        let mut regions: Vec<RegionState> =
            (0..args.regions).map(|_| RegionState::default()).collect();
        let routes = client
            .get(keys.routes(), Some(GetOptions::new().with_prefix()))
            .await?;
        for kv in routes.kvs() {
            let region = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&keys.routes()))
                .and_then(|r| r.parse::<usize>().ok());
            let route = serde_json::from_slice::<Route>(kv.value()).ok();
            if let Some(state) = region.and_then(|r| regions.get_mut(r)) {
                // The key's revision even if its value does not parse: a switch then
                // replaces that value, and only that one.
                state.route_revision = kv.mod_revision();
                if let Some(route) = route {
                    state.route = Some(route);
                }
            }
        }
        let histories = client
            .get(keys.histories(), Some(GetOptions::new().with_prefix()))
            .await?;
        for kv in histories.kvs() {
            let region = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&keys.histories()))
                .and_then(|r| r.parse::<usize>().ok());
            let history = serde_json::from_slice::<Vec<Piece>>(kv.value()).ok();
            if let (Some(state), Some(history)) = (region.and_then(|r| regions.get_mut(r)), history)
            {
                state.history = history;
            }
        }
        let archives = client
            .get(keys.archives(), Some(GetOptions::new().with_prefix()))
            .await?;
        for kv in archives.kvs() {
            let region = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&keys.archives()))
                .and_then(|r| r.parse::<usize>().ok());
            let record = serde_json::from_slice::<ArchiveRecord>(kv.value()).ok();
            if let (Some(state), Some(record)) = (region.and_then(|r| regions.get_mut(r)), record) {
                state.archived = record;
            }
        }
        let mut intents = HashMap::new();
        let moves = client
            .get(keys.moves(), Some(GetOptions::new().with_prefix()))
            .await?;
        for kv in moves.kvs() {
            let region = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&keys.moves()))
                .and_then(|r| r.parse::<u64>().ok());
            let intent = serde_json::from_slice::<MoveIntent>(kv.value()).ok();
            if let (Some(region), Some(intent)) = (region, intent) {
                intents.insert(region, intent);
            }
        }
        Ok(Leader {
            archiving: tokio::sync::Mutex::new(()),
            intents: Mutex::new(intents),
            args,
            keys,
            client,
            guard,
            lease,
            view,
            pool: Pool::default(),
            store,
            regions: regions.into_iter().map(Mutex::new).collect(),
            failing: Mutex::default(),
            timings: Mutex::default(),
        })
    }

    /// A guarded transaction of `puts`; a refused one means this instance was deposed,
    /// and the process exits.
    async fn write(&self, puts: Vec<(String, Vec<u8>)>) -> anyhow::Result<()> {
        self.write_and_delete(puts, Vec::new()).await
    }

    /// [`write`](Self::write), deleting `deletes` in the same transaction.
    async fn write_and_delete(
        &self,
        puts: Vec<(String, Vec<u8>)>,
        deletes: Vec<String>,
    ) -> anyhow::Result<()> {
        self.guarded_txn(puts, deletes, Vec::new(), "a guarded write")
            .await;
        Ok(())
    }

    /// The one way the leader writes: `puts` and `deletes` in a transaction guarded by
    /// its election key and by `compares`; answers the revision it landed at.
    ///
    /// **Fail-stop.** The leader's cached routes and histories are the truth only while
    /// every one of its writes is known to have landed or not. A transaction can land
    /// at etcd while the client gets an error (the answer was lost), so an error is
    /// retried with the same transaction (its puts are idempotent; a switch's
    /// `mod_revision` compare refuses it if the first attempt landed), and if the
    /// outcome is still unknown when the retries are spent, the process exits with
    /// [`DEPOSED`] rather than go on from a cache that may be stale (a switch that
    /// landed but is not in the cache would be overwritten by the next switch of that
    /// region, which would drop a piece of its history). The lease is revoked on the
    /// way out, so that the standby is elected at once; it reads the routes and
    /// histories back from etcd, and the driver starts this instance again as a
    /// standby. A refused transaction (a compare failed) exits the same way: either
    /// the election key is gone (a standby won) or a key is not at the revision this
    /// leader cached, and either way its cache is not the truth.
    async fn guarded_txn(
        &self,
        puts: Vec<(String, Vec<u8>)>,
        deletes: Vec<String>,
        compares: Vec<Compare>,
        what: &str,
    ) -> i64 {
        let ops: Vec<TxnOp> = puts
            .into_iter()
            .map(|(k, v)| TxnOp::put(k, v, None::<PutOptions>))
            .chain(deletes.into_iter().map(|k| TxnOp::delete(k, None)))
            .collect();
        let mut when = vec![self.guard.clone()];
        when.extend(compares);
        let txn = Txn::new().when(when).and_then(ops);
        let mut client = self.client.clone();
        let mut attempts = 0;
        let resp = loop {
            match client.txn(txn.clone()).await {
                Ok(resp) => break resp,
                Err(e) if attempts < 20 => {
                    attempts += 1;
                    eprintln!("{}: etcd txn failed ({e}), again", self.args.id);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    self.fail_stop(&format!(
                        "{what}: etcd txn failed {} times, the last with {e}; its outcome \
                         is unknown",
                        attempts + 1
                    ))
                    .await
                }
            }
        };
        if !resp.succeeded() {
            self.fail_stop(&format!(
                "deposed: {what} was refused (the election key is gone, or a key is not \
                 at the revision this leader cached)"
            ))
            .await
        }
        match resp.header() {
            Some(header) => header.revision(),
            None => {
                self.fail_stop(&format!(
                    "{what} landed, but etcd's answer names no revision"
                ))
                .await
            }
        }
    }

    /// Ends the process with [`DEPOSED`] (see [`guarded_txn`](Self::guarded_txn)),
    /// revoking the lease first if etcd answers within a second.
    async fn fail_stop(&self, why: &str) -> ! {
        eprintln!("{}: {why}; exiting (deposed)", self.args.id);
        let mut client = self.client.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(self.lease)).await;
        std::process::exit(DEPOSED)
    }

    async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> anyhow::Result<()> {
        self.write(vec![(key.to_string(), value.into())]).await
    }

    /// The leader's work: the regions assigned, then failovers as nodes die.
    async fn lead(self: Arc<Self>) -> anyhow::Result<()> {
        self.assign().await?;
        // Moves a former leader left half done: their source may have released the
        // region, which its route still names; finished before anything else moves.
        let intents: Vec<(u64, MoveIntent)> = std::mem::take(&mut *lock(&self.intents))
            .into_iter()
            .collect();
        let mut moves = tokio::task::JoinSet::new();
        for (region, intent) in intents {
            let named = self.route_name(region);
            if named.as_deref() != Some(intent.from.as_str()) {
                continue;
            }
            if let Some(state) = self.regions.get(region as usize) {
                lock(state).moving = true;
            }
            eprintln!(
                "{}: finishing the move of {region} from {}",
                self.args.id, intent.from
            );
            let leader = self.clone();
            moves.spawn(async move { leader.migrate(region, &intent.from, &intent.to).await });
        }
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut failovers = tokio::task::JoinSet::new();
        let mut retirements = tokio::task::JoinSet::new();
        let mut retiring: HashSet<String> = HashSet::new();
        let mut balance_at = Instant::now() + Duration::from_secs(1);
        loop {
            tick.tick().await;
            while let Some(done) = failovers.try_join_next() {
                if let Ok(Err(e)) = done {
                    eprintln!("{}: a failover failed: {e}", self.args.id);
                }
            }
            // Every failover done and not retired (this leader's, or a former one's) is
            // retired after its grace.
            if self.args.retire {
                for record in self.view.failovers() {
                    let (Some(fenced_ms), true) = (record.fenced_ms, record.state == "done") else {
                        continue;
                    };
                    if !retiring.insert(record.name.clone()) {
                        continue;
                    }
                    let leader = self.clone();
                    retirements.spawn(async move {
                        let name = record.name.clone();
                        let result = leader
                            .retire_prefix(record.name, record.prefix, fenced_ms)
                            .await;
                        (name, result)
                    });
                }
                while let Some(done) = retirements.try_join_next() {
                    if let Ok((name, Err(e))) = done {
                        // Asked again at the next tick.
                        eprintln!("{}: a retirement failed: {e}", self.args.id);
                        retiring.remove(&name);
                    }
                }
            }
            while let Some(done) = moves.try_join_next() {
                if let Ok(Err(e)) = done {
                    eprintln!("{}: a move failed: {e}", self.args.id);
                }
            }
            // Balance: a round of moves at a time, while no failover runs.
            if !self.args.no_moves
                && moves.is_empty()
                && lock(&self.failing).is_empty()
                && Instant::now() >= balance_at
            {
                for (region, from, to) in self.balance_round() {
                    let leader = self.clone();
                    moves.spawn(async move { leader.migrate(region, &from, &to).await });
                }
                balance_at = Instant::now() + Duration::from_millis(200);
            }
            let live = self.view.nodes();
            let mut dead = HashSet::new();
            for state in &self.regions {
                if let Some(route) = &lock(state).route {
                    if !live.contains_key(&route.name) {
                        dead.insert((route.name.clone(), route.prefix.clone()));
                    }
                }
            }
            for (name, prefix) in dead {
                if !lock(&self.failing).insert(name.clone()) {
                    continue;
                }
                let leader = self.clone();
                failovers.spawn(async move {
                    let result = leader.fail_over(&name, &prefix).await;
                    lock(&leader.failing).remove(&name);
                    result
                });
            }
        }
    }

    /// Calls `request` on `node`, given up (as [`CallError::Lost`]: it may have been
    /// acted on) as soon as `node` or one of `also` is no longer live: a call to a
    /// paused node would otherwise hold a move, and the failover waiting for it, for
    /// the whole of `CALL_WITHIN`.
    async fn call_while_live(
        &self,
        node: &NodeRecord,
        request: &Request,
        also: &[&str],
    ) -> Result<Reply, CallError> {
        let gone = self.view.wait_for(crate::rpc::CALL_WITHIN, |s| {
            !s.nodes.contains_key(&node.name) || also.iter().any(|n| !s.nodes.contains_key(*n))
        });
        tokio::select! {
            reply = self.pool.call(node, request) => reply,
            true = gone => Err(CallError::Lost),
        }
    }

    /// The name region `region`'s route names.
    fn route_name(&self, region: u64) -> Option<String> {
        self.regions
            .get(region as usize)
            .and_then(|s| lock(s).route.as_ref().map(|r| r.name.clone()))
    }

    /// The next round of moves for balance: from the live node owning the most regions
    /// to the one owning the fewest, while they differ by more than one, at most
    /// `--moves-at-once`. Marks the regions moving.
    fn balance_round(&self) -> Vec<(u64, String, String)> {
        let live = self.view.nodes();
        if live.len() < 2 {
            return Vec::new();
        }
        let mut owned: HashMap<String, Vec<u64>> =
            live.keys().map(|n| (n.clone(), Vec::new())).collect();
        for (region, state) in self.regions.iter().enumerate() {
            let state = lock(state);
            if state.moving {
                // A move or a failover under way: no round now.
                return Vec::new();
            }
            match &state.route {
                Some(route) => match owned.get_mut(&route.name) {
                    Some(regions) => regions.push(region as u64),
                    // A route on a node that is not live: its failover comes first.
                    None => return Vec::new(),
                },
                None => return Vec::new(),
            }
        }
        let most = owned.iter().max_by_key(|(n, r)| (r.len(), (*n).clone()));
        let fewest = owned.iter().min_by_key(|(n, r)| (r.len(), (*n).clone()));
        let (Some((from, from_regions)), Some((to, to_regions))) = (most, fewest) else {
            return Vec::new();
        };
        let surplus = from_regions.len().saturating_sub(to_regions.len()) / 2;
        if from_regions.len() <= to_regions.len() + 1 {
            return Vec::new();
        }
        let count = surplus.clamp(1, self.args.moves_at_once.max(1));
        let mut round = Vec::new();
        for &region in from_regions.iter().rev().take(count) {
            if let Some(state) = self.regions.get(region as usize) {
                lock(state).moving = true;
                round.push((region, from.clone(), to.clone()));
            }
        }
        round
    }

    /// Moves `region` from node `from` to node `to` (`examples/cluster.rs`'s
    /// `migrate`): the intent recorded, the source's release, then the acquire at the
    /// target above the release's ids beside the catch-up of the released piece, then
    /// the route (which clears the intent). A target that dies is replaced by another
    /// live node; a source that dies leaves the region to its failover (from the
    /// fence's `released`, if the release landed). While the source is live the move
    /// never gives up (each step is asked again with a bounded backoff): a release that
    /// landed must end in this move's switch. The region is marked moving by the caller
    /// and no longer when this ends.
    async fn migrate(&self, region: u64, from: &str, to: &str) -> anyhow::Result<()> {
        let result = self.migrate_inner(region, from, to).await;
        if let Some(state) = self.regions.get(region as usize) {
            lock(state).moving = false;
        }
        result
    }

    async fn migrate_inner(&self, region: u64, from: &str, to: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        let nodes = self.view.nodes();
        let Some(source) = nodes.get(from).cloned() else {
            anyhow::bail!("{from} is not live");
        };
        let after = self
            .regions
            .get(region as usize)
            .and_then(|s| lock(s).history.last().and_then(|p| p.after));
        // Before the intent and the release: a refusal here leaves the region where it
        // is.
        let from_id = first_id_above(region, after)?;
        let intent = MoveIntent {
            from: from.to_string(),
            to: to.to_string(),
        };
        self.put(&self.keys.move_intent(region), serde_json::to_vec(&intent)?)
            .await?;
        // No giving up while the source is live: once the release may have landed the
        // region is released at its source but still routed there, and only its
        // failover (the source's death) or this move's switch routes it again. The
        // release, the acquire and the catch-up are idempotent, so they are asked
        // again, further and further apart (up to `MOVE_BACKOFF_MAX`).
        let mut backoff = Backoff::new(Duration::from_millis(50));
        let released = loop {
            if !self.view.nodes().contains_key(from) {
                anyhow::bail!("{from} died before its release of {region} answered");
            }
            if backoff.report_due(started) {
                eprintln!(
                    "{}: release of {region} at {from}: still asking after {} s",
                    self.args.id,
                    started.elapsed().as_secs()
                );
            }
            match self
                .call_while_live(&source, &Request::Release { region }, &[])
                .await
            {
                Ok(Reply::Released {
                    last_id,
                    acquire_above,
                    sequence,
                }) => {
                    break Released {
                        last_id,
                        acquire_above,
                        sequence,
                    }
                }
                other => {
                    eprintln!("{}: release of {region} at {from}: {other:?}", self.args.id);
                    backoff.wait().await;
                }
            }
        };
        let released_at = Instant::now();
        let last = released.last_id;
        let above = released.acquire_above.max(after.unwrap_or(0));
        let through = last.filter(|l| *l >= from_id);
        let mut target = to.to_string();
        let mut backoff = Backoff::new(Duration::from_millis(100));
        loop {
            let live = self.view.nodes();
            if !live.contains_key(from) {
                anyhow::bail!("{from} died during the move of {region}: its failover takes it");
            }
            if backoff.report_due(started) {
                eprintln!(
                    "{}: region {region} released by {from}, not acquired yet after {} s",
                    self.args.id,
                    started.elapsed().as_secs()
                );
            }
            let Some(node) = live.get(&target).cloned() else {
                // Another live node than the source; none yet: wait for one.
                match live.values().find(|n| n.name != from) {
                    Some(other) => target = other.name.clone(),
                    None => backoff.wait().await,
                }
                continue;
            };
            let acquire_request = Request::Acquire {
                region,
                above,
                pieces: Vec::new(),
            };
            let source_live = [from];
            let acquire = self.call_while_live(&node, &acquire_request, &source_live);
            let catch_up = async {
                let Some(through) = through else {
                    return Ok(());
                };
                let request = Request::CatchUp {
                    source: source.prefix.clone(),
                    region,
                    from: from_id,
                    through,
                    sequence: released.sequence,
                };
                match self.call_while_live(&node, &request, &source_live).await {
                    Ok(Reply::CaughtUp { last: Some(at), .. }) if at == through => Ok(()),
                    other => Err(format!("catch-up through {through}: {other:?}")),
                }
            };
            let (acquired, caught) = tokio::join!(acquire, catch_up);
            match (acquired, caught) {
                (Ok(Reply::Done), Ok(())) => {
                    self.switch(
                        region,
                        &node,
                        Some(last.or(after).unwrap_or(0)),
                        Some(above),
                        "move",
                    )
                    .await?;
                    eprintln!(
                        "{}: moved {region} from {from} to {} (window {} ms, release {} ms)",
                        self.args.id,
                        node.name,
                        started.elapsed().as_millis(),
                        released_at.duration_since(started).as_millis()
                    );
                    return Ok(());
                }
                (acquired, caught) => {
                    eprintln!(
                        "{}: moving {region} to {}: acquire {acquired:?}, catch-up {caught:?}",
                        self.args.id, node.name
                    );
                    backoff.wait().await;
                    if !self.view.nodes().contains_key(&target) {
                        target = String::new();
                    }
                }
            }
        }
    }

    /// Assigns every region without a route to the live nodes in turn (once
    /// `--nodes` are live): acquire, then route.
    async fn assign(&self) -> anyhow::Result<()> {
        let missing: Vec<u64> = (0..self.args.regions)
            .filter(|r| {
                self.regions
                    .get(*r as usize)
                    .is_some_and(|s| lock(s).route.is_none())
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let wanted = self.args.nodes;
        if !self
            .view
            .wait_for(Duration::from_secs(120), |s| s.nodes.len() >= wanted)
            .await
        {
            anyhow::bail!("fewer than {wanted} nodes came up");
        }
        let mut nodes: Vec<NodeRecord> = self.view.nodes().into_values().collect();
        nodes.sort_by(|a, b| a.slot.cmp(&b.slot).then(a.name.cmp(&b.name)));
        let count = nodes.len();
        if count == 0 {
            anyhow::bail!("no live node to assign the regions to");
        }
        let started = Instant::now();
        let results: Vec<anyhow::Result<()>> =
            futures::stream::iter(missing.iter().map(|&region| {
                let node = nodes.get(region as usize % count).cloned();
                async move {
                    let Some(node) = node else {
                        anyhow::bail!("no node for region {region}");
                    };
                    match self
                        .pool
                        .call(
                            &node,
                            &Request::Acquire {
                                region,
                                above: 0,
                                pieces: Vec::new(),
                            },
                        )
                        .await
                    {
                        Ok(Reply::Done) => self.switch(region, &node, None, None, "initial").await,
                        other => anyhow::bail!("acquiring {region} at {}: {other:?}", node.name),
                    }
                }
            }))
            .buffer_unordered(64)
            .collect()
            .await;
        for r in results {
            r?;
        }
        eprintln!(
            "{}: {} regions assigned to {} nodes in {} ms",
            self.args.id,
            missing.len(),
            nodes.len(),
            started.elapsed().as_millis()
        );
        Ok(())
    }

    /// Switches `region`'s route to `to`: the current piece ends at `through`, the new
    /// owner's holds ids above `above`. Route and history in one guarded transaction.
    async fn switch(
        &self,
        region: u64,
        to: &NodeRecord,
        through: Option<u64>,
        above: Option<u64>,
        kind: &str,
    ) -> anyhow::Result<()> {
        let Some(slot) = self.regions.get(region as usize) else {
            anyhow::bail!("no region {region}");
        };
        let (route, history, revision) = {
            let state = lock(slot);
            let mut history = state.history.clone();
            if let Some(current) = history.last_mut() {
                current.through = Some(through.unwrap_or(0));
            }
            history.push(Piece {
                prefix: to.prefix.clone(),
                after: above,
                through: None,
                kind: kind.to_string(),
            });
            let version = match &state.route {
                Some(r) => r.version.checked_add(1).ok_or(Exhausted::RouteVersion {
                    region,
                    version: r.version,
                })?,
                None => 1,
            };
            let route = Route {
                name: to.name.clone(),
                prefix: to.prefix.clone(),
                addr: to.addr.clone(),
                after: above,
                version,
            };
            (route, history, state.route_revision)
        };
        // The move's intent, if any, goes with the switch (a takeover of a region whose
        // move never finished ends it too). Written only if the route is still the one
        // this leader cached: a stale cache never overwrites a newer route (it exits).
        let route_key = self.keys.route(region);
        let revision = self
            .guarded_txn(
                vec![
                    (route_key.clone(), serde_json::to_vec(&route)?),
                    (self.keys.history(region), serde_json::to_vec(&history)?),
                ],
                vec![self.keys.move_intent(region)],
                vec![Compare::mod_revision(route_key, CompareOp::Equal, revision)],
                &format!("the switch of region {region}"),
            )
            .await;
        let mut state = lock(slot);
        state.route = Some(route);
        state.history = history;
        state.route_revision = revision;
        Ok(())
    }

    /// Fails node `name` (prefix `prefix`) over: the record, the fence, every region
    /// taken over by the live nodes in turn, the record done.
    async fn fail_over(&self, name: &str, prefix: &str) -> anyhow::Result<()> {
        let mut record = self.view.failover(name).unwrap_or(FailoverRecord {
            name: name.to_string(),
            prefix: prefix.to_string(),
            state: "fencing".into(),
            detected_ms: now_ms(),
            fenced_ms: None,
            done_ms: None,
            regions: 0,
        });
        eprintln!("{}: {name} is gone: fencing {prefix}", self.args.id);
        self.put(&self.keys.failover(name), serde_json::to_vec(&record)?)
            .await?;
        let config = wal_config(prefix, &self.args.common);
        let started = Instant::now();
        let fenced: Fence = loop {
            match fence(self.store.clone(), &config).await {
                Ok(f) => break f,
                Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(120) => {
                    eprintln!("{}: fencing {prefix}: {e}, again", self.args.id);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => anyhow::bail!("fencing {prefix}: {e}"),
            }
        };
        record.state = "fenced".into();
        record.fenced_ms = Some(now_ms());
        self.put(&self.keys.failover(name), serde_json::to_vec(&record)?)
            .await?;
        let fenced = Arc::new(fenced);
        let mut taken = 0u64;
        let mut flushes: Vec<(u64, NodeRecord, Option<u64>)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let mut regions = Vec::new();
            let mut moving = 0usize;
            for (region, state) in self.regions.iter().enumerate() {
                let state = lock(state);
                if state.route.as_ref().is_some_and(|route| route.name == name) {
                    // A move of it ends first: switched, or left to this failover.
                    if state.moving {
                        moving += 1;
                    } else {
                        regions.push(region as u64);
                    }
                }
            }
            if regions.is_empty() && moving == 0 {
                break;
            }
            if regions.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            if Instant::now() > deadline {
                anyhow::bail!("{} regions of {name} never taken over", regions.len());
            }
            let failing = lock(&self.failing).clone();
            let mut targets: Vec<NodeRecord> = self
                .view
                .nodes()
                .into_values()
                .filter(|n| n.name != name && !failing.contains(&n.name))
                .collect();
            targets.sort_by(|a, b| a.name.cmp(&b.name));
            if targets.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // Collected before awaiting: a future built by a closure that borrows is not
            // `Send` for every lifetime (the failover runs in a task).
            let assigned: Vec<(u64, NodeRecord)> = regions
                .iter()
                .enumerate()
                .filter_map(|(k, &region)| Some((region, targets.get(k % targets.len())?.clone())))
                .collect();
            let mut takeovers = Vec::new();
            for (region, to) in assigned {
                let fenced = fenced.clone();
                takeovers.push(Box::pin(async move {
                    let result = self.take_over(region, &fenced, &to).await;
                    (region, to, result)
                }));
            }
            let results = futures::future::join_all(takeovers).await;
            for (region, to, result) in results {
                match result {
                    Ok(flush) => {
                        taken += 1;
                        flushes.push((region, to, flush));
                    }
                    Err(e) => {
                        eprintln!("{}: taking region {region} over failed: {e}", self.args.id);
                    }
                }
            }
        }
        record.state = "done".into();
        record.done_ms = Some(now_ms());
        record.regions += taken;
        self.put(&self.keys.failover(name), serde_json::to_vec(&record)?)
            .await?;
        let (acquire, catch_up) = std::mem::take(&mut *lock(&self.timings));
        eprintln!(
            "{}: {name}: {taken} regions taken over, {} ms from detection ({} ms fence, \
             {} objects on the fenced chain; slowest acquire {} ms, catch-up {} ms)",
            self.args.id,
            record
                .done_ms
                .unwrap_or(0)
                .saturating_sub(record.detected_ms),
            record
                .fenced_ms
                .unwrap_or(0)
                .saturating_sub(record.detected_ms),
            fenced.report.objects.len(),
            acquire.as_millis(),
            catch_up.as_millis(),
        );
        if self.args.retire {
            self.flush(&flushes).await?;
        }
        Ok(())
    }

    /// The flush after a takeover (as a database flushes a memtable): the regions'
    /// closed pieces into archive objects, then each new owner obsoletes the pieces it
    /// recorded, so that no live log names the fenced prefix any more.
    async fn flush(&self, flushes: &[(u64, NodeRecord, Option<u64>)]) -> anyhow::Result<()> {
        let regions: Vec<u64> = flushes.iter().map(|(r, _, _)| *r).collect();
        self.archive(&regions).await?;
        for (region, owner, through) in flushes {
            let Some(through) = through else { continue };
            let request = Request::Obsolete {
                region: *region,
                id: *through,
            };
            match self.pool.call(owner, &request).await {
                Ok(Reply::Done) => {}
                other => eprintln!(
                    "{}: obsolete of {region} through {through} at {}: {other:?}",
                    self.args.id, owner.name
                ),
            }
        }
        Ok(())
    }

    /// Writes the closed pieces of `regions` not archived yet into archive objects on
    /// the bucket (each prefix read once, as the checker reads it) and records them in
    /// `archives/<region>`. One archive at a time.
    async fn archive(&self, regions: &[u64]) -> anyhow::Result<()> {
        let _one = self.archiving.lock().await;
        let mut plan = Vec::new();
        let mut starts: HashMap<String, HashMap<u64, u64>> = HashMap::new();
        for &region in regions {
            let Some(slot) = self.regions.get(region as usize) else {
                continue;
            };
            let (done, closed): (usize, Vec<Piece>) = {
                let state = lock(slot);
                let closed = state
                    .history
                    .iter()
                    .skip(state.archived.archived)
                    .take_while(|p| p.through.is_some())
                    .cloned()
                    .collect();
                (state.archived.archived, closed)
            };
            if closed.is_empty() {
                continue;
            }
            for piece in &closed {
                let from = piece.after.map_or(0, |a| a.saturating_add(1));
                let lowest = starts
                    .entry(piece.prefix.clone())
                    .or_default()
                    .entry(region)
                    .or_insert(from);
                *lowest = (*lowest).min(from);
            }
            plan.push((region, done, closed));
        }
        let mut read: HashMap<String, HashMap<u64, Vec<(u64, String)>>> = HashMap::new();
        for (prefix, from) in starts {
            let config = wal_config(&prefix, &self.args.common);
            let log = ObjectStoreLogStore::open_read_only(self.store.clone(), config)
                .await
                .map_err(|e| anyhow::anyhow!("opening {prefix} to archive: {e}"))?;
            let mut by_region: HashMap<u64, Vec<(u64, String)>> = HashMap::new();
            let mut entries = log.replay(from);
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                by_region.entry(entry.region).or_default().push((
                    entry.id,
                    String::from_utf8_lossy(&entry.payload).into_owned(),
                ));
            }
            read.insert(prefix, by_region);
        }
        for (region, done, closed) in plan {
            let mut entries: Vec<(u64, String)> = Vec::new();
            for piece in &closed {
                let from = piece.after.map_or(0, |a| a.saturating_add(1));
                let on_prefix = read
                    .get(&piece.prefix)
                    .and_then(|r| r.get(&region))
                    .map_or(&[][..], Vec::as_slice);
                entries.extend(
                    on_prefix
                        .iter()
                        .filter(|(id, _)| *id >= from && piece.through.is_none_or(|t| *id <= t))
                        .cloned(),
                );
            }
            let end = done + closed.len();
            let object = format!(
                "{}/archives/{region:06}-{end:04}.json",
                self.args.common.run_id
            );
            self.store
                .put(
                    &object_store::path::Path::from(object.as_str()),
                    serde_json::to_vec(&entries)?.into(),
                )
                .await?;
            let Some(slot) = self.regions.get(region as usize) else {
                continue;
            };
            let mut record = lock(slot).archived.clone();
            record.archived = end;
            record.objects.push(object);
            self.put(&self.keys.archive(region), serde_json::to_vec(&record)?)
                .await?;
            lock(slot).archived = record;
        }
        Ok(())
    }

    /// Retires node `name`'s fenced prefix once the grace passed since its fence: every
    /// closed piece still on it archived first, then `retire` (retried while a live log
    /// still names it or the store's clock says too early), then the record.
    async fn retire_prefix(
        &self,
        name: String,
        prefix: String,
        fenced_ms: u64,
    ) -> anyhow::Result<()> {
        let common = &self.args.common;
        let at = fenced_ms
            .saturating_add(common.reclaim_grace_ms)
            .saturating_add(common.max_create_ms)
            .saturating_add(1_000);
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
        let on_it: Vec<u64> = (0..self.args.regions)
            .filter(|r| {
                self.regions
                    .get(*r as usize)
                    .is_some_and(|s| lock(s).history.iter().any(|p| p.prefix == prefix))
            })
            .collect();
        self.archive(&on_it).await?;
        // Every live node that held one of those regions after the fenced prefix (it may
        // have recorded a piece naming it) obsoletes what the archives now hold: ids
        // through the last archived piece. Its own later ids are above them.
        let live = self.view.nodes();
        for &region in &on_it {
            let Some(slot) = self.regions.get(region as usize) else {
                continue;
            };
            let (through, holders): (Option<u64>, Vec<String>) = {
                let state = lock(slot);
                // Only what the archives hold: a move may have closed another piece
                // since the archive, whose entries are not archived yet.
                let through = state
                    .history
                    .iter()
                    .take(state.archived.archived)
                    .filter_map(|p| p.through)
                    .max();
                let position = state.history.iter().position(|p| p.prefix == prefix);
                let holders = state
                    .history
                    .iter()
                    .skip(position.map_or(0, |p| p + 1))
                    .map(|p| p.prefix.clone())
                    .collect();
                (through, holders)
            };
            let Some(through) = through else { continue };
            for node in live.values().filter(|n| holders.contains(&n.prefix)) {
                let request = Request::Obsolete {
                    region,
                    id: through,
                };
                let answer = self.pool.call(node, &request).await;
                if !matches!(answer, Ok(Reply::Done)) {
                    eprintln!(
                        "{}: obsolete of {region} through {through} at {}: {answer:?}",
                        self.args.id, node.name
                    );
                }
            }
        }
        let mut others: Vec<String> = self
            .view
            .nodes()
            .values()
            .map(|n| n.prefix.clone())
            .collect();
        others.extend(
            self.view
                .failovers()
                .into_iter()
                .filter(|r| r.state != "retired" && r.prefix != prefix)
                .map(|r| r.prefix),
        );
        let config = wal_config(&prefix, common);
        let started = Instant::now();
        let mut refused = 0u64;
        loop {
            match retire(self.store.clone(), &config, &others).await {
                Ok(retired) => {
                    eprintln!(
                        "{}: {prefix} retired ({} keys deleted, {refused} refusals first)",
                        self.args.id, retired.deleted
                    );
                    break;
                }
                Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(60) => {
                    if refused == 0 {
                        eprintln!("{}: retiring {prefix}: {e}; again", self.args.id);
                        if let object_store_wal::Error::PieceStillNeeded { region, .. } = &e {
                            if let Some(state) = self.regions.get(*region as usize) {
                                let state = lock(state);
                                eprintln!(
                                    "{}: region {region}: archived {}, history {:?}",
                                    self.args.id, state.archived.archived, state.history
                                );
                            }
                        }
                    }
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => anyhow::bail!("retiring {prefix}: {e}"),
            }
        }
        if let Some(mut record) = self.view.failover(&name) {
            record.state = "retired".into();
            self.put(&self.keys.failover(&name), serde_json::to_vec(&record)?)
                .await?;
        }
        Ok(())
    }

    /// One region of a fenced prefix to `to` (`examples/cluster.rs`'s `take_over`): the
    /// catch-up from the fenced chain beside the acquire with its pieces, then the
    /// route.
    async fn take_over(
        &self,
        region: u64,
        fenced: &Fence,
        to: &NodeRecord,
    ) -> anyhow::Result<Option<u64>> {
        // The node's tenure started above `after` (its acquire); the region may have
        // entries below it on the fenced chain, of an earlier tenure there.
        let after = self
            .regions
            .get(region as usize)
            .and_then(|s| lock(s).history.last().and_then(|p| p.after));
        let start = first_id_above(region, after)?;
        // A region the prefix released (a move whose answer never came back) is taken
        // over from its release like the others.
        let held = fenced
            .regions
            .iter()
            .chain(fenced.released.iter())
            .find(|r| r.region == region);
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
        let mut pieces = held
            .map(|r| r.pieces_with(&fenced.prefix))
            .unwrap_or_default();
        // The fenced prefix's own piece starts at the node's tenure start (an earlier
        // tenure's ids lie in another owner's piece in between).
        if let Some(own) = pieces.last_mut().filter(|p| p.prefix == fenced.prefix) {
            own.first_id = own.first_id.max(start);
        }
        pieces.retain(|p| p.first_id <= p.last_id);
        // The new owner's flush forgets the pieces through their last id.
        let flush = pieces.iter().map(|p| p.last_id).max();
        let pieces: Vec<PieceMsg> = pieces.into_iter().map(PieceMsg::from).collect();
        let began = Instant::now();
        let acquire = async {
            let request = Request::Acquire {
                region,
                above,
                pieces,
            };
            let result = match self.call_while_live(to, &request, &[]).await {
                Ok(Reply::Done) => Ok(()),
                other => Err(anyhow::anyhow!("acquire at {}: {other:?}", to.name)),
            };
            (result, began.elapsed())
        };
        let catch_up = async {
            let Some(through) = last else {
                return (Ok(()), began.elapsed());
            };
            let request = Request::CatchUp {
                source: fenced.prefix.clone(),
                region,
                from: start,
                through,
                sequence: released.sequence,
            };
            let result = match self.call_while_live(to, &request, &[]).await {
                Ok(Reply::CaughtUp { last: Some(at), .. }) if at == through => Ok(()),
                other => Err(anyhow::anyhow!(
                    "catch-up at {} through {through}: {other:?}",
                    to.name
                )),
            };
            (result, began.elapsed())
        };
        let ((acquired, acquire_took), (caught, catch_up_took)) = tokio::join!(acquire, catch_up);
        acquired?;
        caught?;
        if let Ok(mut t) = self.timings.lock() {
            t.0 = t.0.max(acquire_took);
            t.1 = t.1.max(catch_up_took);
        }
        self.switch(
            region,
            to,
            Some(last.or(after).unwrap_or(0)),
            Some(above),
            "takeover",
        )
        .await?;
        Ok(flush)
    }
}

/// Coordinator takeovers of a run: leaders elected after the first.
pub async fn takeovers(client: &mut etcd_client::Client, keys: &Keys) -> anyhow::Result<u64> {
    let leaders = client
        .get(
            keys.leaders(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    Ok((leaders.count() as u64).saturating_sub(1))
}

/// The failover records of a run, by node name.
pub async fn failover_records(
    client: &mut etcd_client::Client,
    keys: &Keys,
) -> anyhow::Result<HashMap<String, FailoverRecord>> {
    let resp = client
        .get(keys.failovers(), Some(GetOptions::new().with_prefix()))
        .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice::<FailoverRecord>(kv.value()).ok())
        .map(|r| (r.name.clone(), r))
        .collect())
}
