//! The load generator and its frontends: an open-loop load (exponential gaps) over the
//! regions, each append sent to its region's owner as the routes in etcd say
//! (`examples/cluster.rs`'s `append`, over the network).
//!
//! - Refused because the node released the region, or not written (the node stopped
//!   serving): the append waits for the route to switch and goes to the new owner.
//! - Ambiguous (`MayBeDurable`, or the connection broke with the request in flight): it
//!   is resolved before it is sent again. On a live node, the node answers once its
//!   epoch is past the one that ended. On a node being failed over, only the **fenced**
//!   chain tells: once the failover is done (every region routed again; its reads then
//!   do not compete with the takeover's), the frontend reads the fenced chain in one
//!   pass with the node's flush objects of the last minutes (once per prefix; the last
//!   few kept), and looks for the entry from the node's tenure start, never in the
//!   region's new history. Found, it counts as acknowledged with the id it has there;
//!   not found, it is sent again. An append that cannot be resolved counts as `failed`
//!   and is never sent again (that could write it twice).
//! - An acknowledgement from a node whose prefix the frontend knows fenced is checked
//!   against the fenced chain: there with that id, it was durable before the fence
//!   (`zombie_acks_late_on_chain`); otherwise it is a `zombie_acks_after_fence`, which
//!   must be 0.
//!
//! Every acknowledged append goes to the acks file as `region id payload`, the
//! checker's input. The counters and latencies go to the summary file at the end.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use object_store_wal::testing::SplitMix64;
use object_store_wal::{store_from_url, ObjectStoreLogStore};
use tokio::sync::{mpsc, OnceCell, Semaphore};

use crate::keys::{Keys, Route};
use crate::rpc::{CallError, Failure, Pool, Reply, Request};
use crate::view::View;
use crate::{etcd_connect, wal_config, Common};

/// The load's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Regions.
    #[arg(long, default_value_t = 300)]
    regions: u64,
    /// Appends per second offered (open loop, exponential gaps).
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Appends in flight at most (memory stays bounded if the cluster falls behind).
    #[arg(long, default_value_t = 8192)]
    in_flight: usize,
    /// Where the acknowledged appends go.
    #[arg(long)]
    acks: std::path::PathBuf,
    /// Where the counters go at the end (one JSON object).
    #[arg(long)]
    summary: std::path::PathBuf,
    /// Seed of the arrivals.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// How long one append may take, resolves included, before it counts as failed.
const APPEND_WITHIN: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Counters {
    acked: AtomicU64,
    failed: AtomicU64,
    not_owner: AtomicU64,
    not_written: AtomicU64,
    may_be_durable: AtomicU64,
    connection_lost: AtomicU64,
    resolved_found: AtomicU64,
    resolved_resent: AtomicU64,
    resolved_on_fence_found: AtomicU64,
    resolved_on_fence_resent: AtomicU64,
    zombie_acks_after_fence: AtomicU64,
    zombie_acks_late_on_chain: AtomicU64,
    zombie_acks_before_fence: AtomicU64,
}

/// A fenced chain's entries by region (id, payload, in id order), read once in one
/// replay pass: the chain is final. One pass reads each object once, where a read per
/// region would read each object once per region (a killed node leaves appends of most
/// of its regions in flight).
type FencedChain = Arc<OnceCell<Arc<HashMap<u64, BTreeMap<u64, Bytes>>>>>;

/// Fenced chains kept at most: each is needed around its failover only, so the oldest
/// read is dropped first (a resolve that still needs it reads it again).
const FENCED_CHAINS_KEPT: usize = 4;

struct Frontends {
    common: Common,
    view: View,
    pool: Pool,
    store: Arc<dyn ObjectStore>,
    /// Fenced chains read, by prefix, oldest first (at most [`FENCED_CHAINS_KEPT`]):
    /// every resolve and late acknowledgement looks there rather than reading the
    /// chain again (thousands of appends in flight on a killed node would each read
    /// it).
    fenced: Mutex<std::collections::VecDeque<(String, FencedChain)>>,
    next_n: Vec<AtomicU64>,
    acks: mpsc::Sender<String>,
    c: Counters,
    latency: Mutex<Histogram<u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `record`'s failover is done: every region routed to a new owner.
fn taken_over(record: &crate::keys::FailoverRecord) -> bool {
    record.state == "done" || record.state == "retired"
}

/// How an append's resolve ended.
enum Resolved {
    /// On the chain with this id, or not there (send it again).
    Known(Option<u64>),
    /// Could not be told.
    Unknown(String),
}

impl Frontends {
    /// Waits (at most `within`) until `region`'s route is newer than `version`.
    async fn route_after(&self, region: u64, version: u64, within: Duration) -> bool {
        self.view
            .wait_for(within, |s| {
                s.routes.get(&region).is_some_and(|r| r.version > version)
            })
            .await
    }

    /// Whether node `name` is being failed over (its route will switch).
    fn failing(&self, name: &str) -> bool {
        self.view.failover(name).is_some()
    }

    /// One append, sent until it is acknowledged (see the module docs).
    async fn append(&self, region: u64) {
        let Some(next) = self.next_n.get(region as usize) else {
            return;
        };
        let n = next.fetch_add(1, Ordering::Relaxed);
        let payload = format!("{region}:{n}");
        let started = Instant::now();
        let id = loop {
            if started.elapsed() > APPEND_WITHIN {
                eprintln!("load: append {payload} not acknowledged within {APPEND_WITHIN:?}");
                self.c.failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let Some(route) = self.view.route(region) else {
                self.route_after(region, 0, Duration::from_secs(1)).await;
                continue;
            };
            // Frontends that know of the failover hold the region's appends until its
            // route switches.
            if self.failing(&route.name) {
                self.route_after(region, route.version, Duration::from_secs(1))
                    .await;
                continue;
            }
            let tenure = route.tenure_start();
            let request = Request::Append {
                region,
                payload: payload.clone(),
            };
            let answer = self.pool.call(&route, &request).await;
            let epoch = match answer {
                Ok(Reply::Appended { id }) => {
                    self.check_late_ack(&route, region, &payload, id, tenure)
                        .await;
                    break id;
                }
                Ok(Reply::Failed(Failure::NotOwner)) => {
                    self.c.not_owner.fetch_add(1, Ordering::Relaxed);
                    self.route_after(region, route.version, Duration::from_secs(1))
                        .await;
                    continue;
                }
                Ok(Reply::Failed(Failure::NotWritten { .. })) | Err(CallError::NotSent) => {
                    self.c.not_written.fetch_add(1, Ordering::Relaxed);
                    self.route_after(region, route.version, Duration::from_millis(200))
                        .await;
                    continue;
                }
                Ok(Reply::Failed(Failure::MayBeDurable { epoch, .. })) => {
                    self.c.may_be_durable.fetch_add(1, Ordering::Relaxed);
                    Some(epoch)
                }
                Err(CallError::Lost) => {
                    self.c.connection_lost.fetch_add(1, Ordering::Relaxed);
                    None
                }
                // Not expected of an append: resolved, since it may have been written.
                Ok(other) => {
                    eprintln!("load: append {payload} answered {other:?}");
                    self.c.may_be_durable.fetch_add(1, Ordering::Relaxed);
                    Some(None)
                }
            };
            match self.resolve(&route, region, &payload, tenure, epoch).await {
                Resolved::Known(Some(id)) => break id,
                Resolved::Known(None) => continue,
                Resolved::Unknown(why) => {
                    eprintln!(
                        "load: append {payload} sent to {} could not be resolved: {why}",
                        route.name
                    );
                    self.c.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        };
        let micros = started.elapsed().as_micros() as u64;
        let _ = lock(&self.latency).record(micros.max(1));
        self.c.acked.fetch_add(1, Ordering::Relaxed);
        // Bounded: a slow disk slows the load rather than growing a queue.
        let _ = self.acks.send(format!("{region} {id} {payload}\n")).await;
    }

    /// Node `route.name`'s fenced chain, read once per prefix; `None` until its
    /// failover is done. The chain is final from the fence on, but read then it would
    /// slow the takeover (the new owners read it too, on the same store): the appends
    /// being resolved wait a little longer instead.
    async fn fenced_chain(
        &self,
        route: &Route,
    ) -> Option<Result<Arc<HashMap<u64, BTreeMap<u64, Bytes>>>, String>> {
        if !self
            .view
            .failover(&route.name)
            .is_some_and(|r| taken_over(&r))
        {
            return None;
        }
        let cell = {
            let mut fenced = lock(&self.fenced);
            match fenced.iter().find(|(prefix, _)| *prefix == route.prefix) {
                Some((_, cell)) => cell.clone(),
                None => {
                    let cell = FencedChain::default();
                    fenced.push_back((route.prefix.clone(), cell.clone()));
                    while fenced.len() > FENCED_CHAINS_KEPT {
                        fenced.pop_front();
                    }
                    cell
                }
            }
        };
        let read = cell
            .get_or_try_init(|| async {
                let log = ObjectStoreLogStore::open_read_only(
                    self.store.clone(),
                    wal_config(&route.prefix, &self.common),
                )
                .await
                .map_err(|e| format!("opening {} read-only: {e}", route.prefix))?;
                let mut by_region: HashMap<u64, BTreeMap<u64, Bytes>> = HashMap::new();
                let regions = (0..self.next_n.len() as u64).map(|region| (region, 0));
                let mut entries = log.replay(regions);
                while let Some(entry) = entries.next().await {
                    let entry = entry
                        .map_err(|e| format!("reading the fenced chain {}: {e}", route.prefix))?;
                    by_region
                        .entry(entry.region)
                        .or_default()
                        .insert(entry.id, entry.payload);
                }
                // What the node flushed (and may have obsoleted) since any append still
                // in flight when it failed was sent: its flush objects from a little
                // more than an append's wait before the failover's detection.
                let detected = self
                    .view
                    .failover(&route.name)
                    .map_or_else(crate::now_ms, |r| r.detected_ms);
                let since = detected.saturating_sub(crate::flush::KEPT_FOR.as_millis() as u64);
                let root = crate::flush::node_root(&self.common.run_id, &route.name);
                let (flushed, conflicts) = crate::flush::read_all(&self.store, &root, since)
                    .await
                    .map_err(|e| format!("reading {root}: {e}"))?;
                if conflicts > 0 {
                    return Err(format!("{root}: {conflicts} ids with two payloads"));
                }
                for (region, entries) in flushed {
                    let on_chain = by_region.entry(region).or_default();
                    for (id, payload) in entries {
                        on_chain.entry(id).or_insert_with(|| Bytes::from(payload));
                    }
                }
                Ok::<_, String>(Arc::new(by_region))
            })
            .await;
        Some(read.cloned())
    }

    /// The id of entry `want` of `region` on `route`'s fenced chain, from id `from`:
    /// `None` until the failover record says the prefix is fenced, then the answer
    /// (or why the chain could not be read).
    async fn find_fenced(
        &self,
        route: &Route,
        region: u64,
        from: u64,
        want: &Bytes,
    ) -> Option<Result<Option<u64>, String>> {
        Some(self.fenced_chain(route).await?.map(|chain| {
            chain
                .get(&region)
                .and_then(|entries| entries.range(from..).find(|(_, payload)| *payload == want))
                .map(|(id, _)| *id)
        }))
    }

    /// Resolves an ambiguous append sent on `route` (see the module docs). `epoch`:
    /// `Some` for a `MayBeDurable` answer (with the epoch that ended, if named), `None`
    /// for a connection that broke with it in flight (only the fence can tell then).
    async fn resolve(
        &self,
        route: &Route,
        region: u64,
        payload: &str,
        tenure: u64,
        epoch: Option<Option<u64>>,
    ) -> Resolved {
        let started = Instant::now();
        let want = Bytes::from(payload.to_string());
        let mut asked_node = false;
        let mut last_error = String::new();
        while started.elapsed() < APPEND_WITHIN {
            match self.find_fenced(route, region, tenure, &want).await {
                Some(Ok(found)) => {
                    let counter = match found {
                        Some(_) => &self.c.resolved_on_fence_found,
                        None => &self.c.resolved_on_fence_resent,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Resolved::Known(found);
                }
                Some(Err(e)) => last_error = e,
                None => {}
            }
            if let (Some(epoch), false) = (epoch, asked_node) {
                // A live node answers once its epoch is past the one that ended.
                asked_node = true;
                let request = Request::Resolve {
                    region,
                    payload: payload.to_string(),
                    epoch,
                };
                match self.pool.call(route, &request).await {
                    Ok(Reply::Id { id }) => {
                        let counter = match id {
                            Some(_) => &self.c.resolved_found,
                            None => &self.c.resolved_resent,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        return Resolved::Known(id);
                    }
                    other => last_error = format!("the node's resolve answered {other:?}"),
                }
            }
            let name = route.name.clone();
            self.view
                .wait_for(Duration::from_millis(500), |s| {
                    s.failovers.get(&name).is_some_and(taken_over)
                })
                .await;
        }
        Resolved::Unknown(last_error)
    }

    /// An acknowledgement from a node the frontend knows fenced: fine only if the entry
    /// is on the fenced chain with that id.
    async fn check_late_ack(&self, route: &Route, region: u64, payload: &str, id: u64, from: u64) {
        let Some(record) = self.view.failover(&route.name) else {
            return;
        };
        if !record.fenced() {
            self.c
                .zombie_acks_before_fence
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let want = Bytes::from(payload.to_string());
        let name = route.name.clone();
        self.view
            .wait_for(APPEND_WITHIN, |s| {
                s.failovers.get(&name).is_some_and(taken_over)
            })
            .await;
        let found = match self.find_fenced(route, region, from, &want).await {
            Some(Ok(found)) => found,
            _ => None,
        };
        if found == Some(id) {
            self.c
                .zombie_acks_late_on_chain
                .fetch_add(1, Ordering::Relaxed);
        } else {
            eprintln!(
                "load: {} acknowledged {payload} (id {id}) after its fence; the fenced chain has {found:?}",
                route.name
            );
            self.c
                .zombie_acks_after_fence
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs the load for `--seconds`, then waits for every append to end.
pub async fn main(args: Args) -> anyhow::Result<i32> {
    let keys = Keys::new(&args.common.run_id);
    let client = etcd_connect(&args.common.etcd).await?;
    let view = View::start(client, keys).await?;
    let regions = args.regions;
    if !view
        .wait_for(Duration::from_secs(180), |s| {
            s.routes.len() as u64 >= regions
        })
        .await
    {
        anyhow::bail!("the regions were never all routed");
    }
    let file = std::fs::File::create(&args.acks)?;
    let (acks, mut lines) = mpsc::channel::<String>(4096);
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(file);
        while let Some(line) = lines.blocking_recv() {
            out.write_all(line.as_bytes())?;
        }
        out.flush()
    });
    let frontends = Arc::new(Frontends {
        common: args.common.clone(),
        view,
        pool: Pool::default(),
        store: store_from_url(&args.common.store)?,
        fenced: Mutex::default(),
        next_n: (0..regions).map(|_| AtomicU64::new(0)).collect(),
        acks,
        c: Counters::default(),
        latency: Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3)?),
    });
    eprintln!(
        "load: {} appends/s over {regions} regions for {} s",
        args.rate, args.seconds
    );
    let started = Instant::now();
    let Some(deadline) = started.checked_add(Duration::from_secs(args.seconds)) else {
        anyhow::bail!("--seconds {} is too large", args.seconds);
    };
    let in_flight = Arc::new(Semaphore::new(args.in_flight.max(1)));
    let mut rng = SplitMix64::new(args.seed);
    let mut next = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let rate = args.rate.max(0.001);
    while next < deadline {
        let gap = -(1.0 - rng.unit()).ln() / rate;
        // A gap past what an instant can hold (a tiny `--rate`) ends the load.
        let Some(at) = Duration::try_from_secs_f64(gap)
            .ok()
            .and_then(|gap| next.checked_add(gap))
        else {
            break;
        };
        next = at;
        tokio::time::sleep_until(next.into()).await;
        let region = rng.below(regions);
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let frontends = frontends.clone();
        tasks.spawn(async move {
            frontends.append(region).await;
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let seconds = started.elapsed().as_secs_f64();
    let Ok(frontends) = Arc::try_unwrap(frontends) else {
        anyhow::bail!("an append outlived the load");
    };
    let Frontends {
        c, latency, acks, ..
    } = frontends;
    drop(acks);
    writer.await??;
    let latency = latency.into_inner().unwrap_or_else(|p| p.into_inner());
    let ms = |q: f64| {
        if latency.is_empty() {
            0.0
        } else {
            latency.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let get = |v: &AtomicU64| v.load(Ordering::Relaxed);
    let summary = serde_json::json!({
        "load_seconds": (seconds * 10.0).round() / 10.0,
        "acked": get(&c.acked),
        "failed": get(&c.failed),
        "not_owner": get(&c.not_owner),
        "not_written": get(&c.not_written),
        "may_be_durable": get(&c.may_be_durable),
        "connection_lost": get(&c.connection_lost),
        "resolved_found": get(&c.resolved_found),
        "resolved_resent": get(&c.resolved_resent),
        "resolved_on_fence_found": get(&c.resolved_on_fence_found),
        "resolved_on_fence_resent": get(&c.resolved_on_fence_resent),
        "zombie_acks_after_fence": get(&c.zombie_acks_after_fence),
        "zombie_acks_late_on_chain": get(&c.zombie_acks_late_on_chain),
        "zombie_acks_before_fence": get(&c.zombie_acks_before_fence),
        "append_p50_ms": ms(0.5),
        "append_p99_ms": ms(0.99),
        "append_max_ms": ms(1.0),
    });
    std::fs::write(&args.summary, serde_json::to_vec(&summary)?)?;
    eprintln!("load: {summary}");
    Ok(0)
}
