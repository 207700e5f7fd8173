//! The coordinator: two or more instances campaign through etcd's election API; the
//! leader assigns the regions, detects a dead node by its lease's expiry (its
//! `nodes/<name>` key gone), fences its prefix and takes its regions over, as
//! `examples/cluster.rs`'s `fail_over` and `take_over` do: per region, the catch-up
//! from the fenced chain beside `acquire_with_pieces` at the new owner, then the route.
//!
//! Every write is a transaction guarded by the leader's election key (its create
//! revision): once the leader's lease expired and a standby won, the old leader's
//! writes fail, and it exits. A new leader reads routes and histories back from etcd
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
use object_store::ObjectStore;
use object_store_wal::{fence, store_from_url, Fence, Released};
use tokio::signal::unix::{signal, SignalKind};

use crate::keys::{FailoverRecord, Keys, NodeRecord, Piece, Route};
use crate::rpc::{PieceMsg, Pool, Reply, Request};
use crate::view::View;
use crate::{etcd_connect, etcd_connect_waiting, now_ms, wal_config, Common};

/// The exit code of a coordinator that lost its lease or its leadership.
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
    history: Vec<Piece>,
}

/// The elected coordinator.
struct Leader {
    args: Args,
    keys: Keys,
    client: etcd_client::Client,
    guard: Compare,
    view: View,
    pool: Pool,
    store: Arc<dyn ObjectStore>,
    regions: Vec<Mutex<RegionState>>,
    /// Nodes whose failover is under way.
    failing: Mutex<HashSet<String>>,
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
            if let (Some(state), Some(route)) = (region.and_then(|r| regions.get_mut(r)), route) {
                state.route = Some(route);
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
        Ok(Leader {
            args,
            keys,
            client,
            guard,
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
        let ops: Vec<TxnOp> = puts
            .into_iter()
            .map(|(k, v)| TxnOp::put(k, v, None::<PutOptions>))
            .collect();
        let txn = Txn::new().when([self.guard.clone()]).and_then(ops);
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
                Err(e) => return Err(e.into()),
            }
        };
        if !resp.succeeded() {
            eprintln!("{}: deposed (the guarded write was refused)", self.args.id);
            std::process::exit(DEPOSED);
        }
        Ok(())
    }

    async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> anyhow::Result<()> {
        self.write(vec![(key.to_string(), value.into())]).await
    }

    /// The leader's work: the regions assigned, then failovers as nodes die.
    async fn lead(self: Arc<Self>) -> anyhow::Result<()> {
        self.assign().await?;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut failovers = tokio::task::JoinSet::new();
        loop {
            tick.tick().await;
            while let Some(done) = failovers.try_join_next() {
                if let Ok(Err(e)) = done {
                    eprintln!("{}: a failover failed: {e}", self.args.id);
                }
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
                            &node.addr,
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
        let (route, history) = {
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
            let route = Route {
                name: to.name.clone(),
                prefix: to.prefix.clone(),
                addr: to.addr.clone(),
                after: above,
                version: state.route.as_ref().map_or(1, |r| r.version + 1),
            };
            (route, history)
        };
        self.write(vec![
            (self.keys.route(region), serde_json::to_vec(&route)?),
            (self.keys.history(region), serde_json::to_vec(&history)?),
        ])
        .await?;
        let mut state = lock(slot);
        state.route = Some(route);
        state.history = history;
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
        let config = wal_config(prefix);
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
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let regions: Vec<u64> = (0..self.args.regions)
                .filter(|r| {
                    self.regions.get(*r as usize).is_some_and(|s| {
                        lock(s)
                            .route
                            .as_ref()
                            .is_some_and(|route| route.name == name)
                    })
                })
                .collect();
            if regions.is_empty() {
                break;
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
                    (region, self.take_over(region, &fenced, &to).await)
                }));
            }
            let results = futures::future::join_all(takeovers).await;
            for (region, result) in results {
                match result {
                    Ok(()) => taken += 1,
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
        Ok(())
    }

    /// One region of a fenced prefix to `to` (`examples/cluster.rs`'s `take_over`): the
    /// catch-up from the fenced chain beside the acquire with its pieces, then the
    /// route.
    async fn take_over(&self, region: u64, fenced: &Fence, to: &NodeRecord) -> anyhow::Result<()> {
        // The node's tenure started above `after` (its acquire); the region may have
        // entries below it on the fenced chain, of an earlier tenure there.
        let after = self
            .regions
            .get(region as usize)
            .and_then(|s| lock(s).history.last().and_then(|p| p.after));
        let start = after.map_or(0, |a| a + 1);
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
        let pieces: Vec<PieceMsg> = pieces
            .into_iter()
            .map(|p| PieceMsg {
                prefix: p.prefix,
                first_id: p.first_id,
                last_id: p.last_id,
            })
            .collect();
        let began = Instant::now();
        let acquire = async {
            let result = match self
                .pool
                .call(
                    &to.addr,
                    &Request::Acquire {
                        region,
                        above,
                        pieces,
                    },
                )
                .await
            {
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
            let result = match self.pool.call(&to.addr, &request).await {
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
        .await
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
