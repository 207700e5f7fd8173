//! The driver: starts the nodes, two coordinators and the load as child processes of
//! this executable, does the chaos (kill -9 of nodes, SIGSTOP of a node past the lease
//! TTL then SIGCONT, kill -9 of the coordinator leader), restarts what it killed and
//! what exited by itself (a node that lost its lease comes back as its next
//! generation, on a new prefix), stops everything however the run ends (children are
//! killed when dropped), then runs the checker and prints its JSON line last.
//!
//! Each chaos event is written to the events file with the host's wall clock, which the
//! checker compares with the coordinator's failover records (the same clock).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::check::{self, Event};
use crate::keys::Keys;
use crate::view::View;
use crate::{etcd_connect, node, now_ms, Common};

/// The driver's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// etcd's client URL.
    #[arg(long, env = "OSW_ETCD_ENDPOINT")]
    etcd: String,
    /// The store's URL (the bucket).
    #[arg(long, env = "WAL_TEST_S3")]
    store: String,
    /// Where the children's logs, the acks and the events go (a new directory under the
    /// temporary directory by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Regions.
    #[arg(long, default_value_t = 300)]
    regions: u64,
    /// Appends per second offered.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// The nodes' and coordinators' lease TTL, seconds.
    #[arg(long, default_value_t = 2)]
    ttl_secs: i64,
    /// Nodes killed with SIGKILL over the run.
    #[arg(long, default_value_t = 0)]
    kills: u64,
    /// Nodes paused (SIGSTOP) past the TTL over the run, then resumed: zombies.
    #[arg(long, default_value_t = 0)]
    pauses: u64,
    /// How long a pause lasts, ms (more than the TTL).
    #[arg(long, default_value_t = 4000)]
    pause_ms: u64,
    /// Coordinator leaders killed with SIGKILL over the run.
    #[arg(long, default_value_t = 0)]
    coordinator_kills: u64,
    /// Seed of the load.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Flush and retire fenced prefixes: the new owners' entries of a failed-over node
    /// go to archive objects, they obsolete them, and the prefix is retired after the
    /// grace (the checker reads the archives, then the pieces).
    #[arg(long)]
    retire: bool,
    /// The WALs' `reclaim_grace`, ms (10 s unless given: the flushes' obsoleted objects
    /// are deleted this long after, so the live chains stay short).
    #[arg(long)]
    reclaim_grace_ms: Option<u64>,
    /// The WALs' `max_create_duration`, ms (5 s unless given: a create on the local
    /// S3-API server that takes longer is not acknowledged, and the epoch ends).
    #[arg(long)]
    max_create_ms: Option<u64>,
    /// The WALs' `min_object_interval`, ms (each node's group commit window: at most
    /// ten objects a second per node by default, which the one-process S3-API server
    /// keeps up with beside the failovers' reads).
    #[arg(long, default_value_t = 100)]
    min_object_interval_ms: u64,
    /// How often each node flushes, ms (0: never).
    #[arg(long, default_value_t = 1000)]
    flush_ms: u64,
}

/// A child process of the run.
struct Proc {
    name: String,
    child: Child,
    /// When it was started: one that exits at once is started again no sooner than a
    /// second later.
    started: Instant,
}

/// Restarts of one node slot or coordinator at most in a run: beyond, something is
/// wrong with every start (the run fails rather than spawning without end).
const MAX_RESTARTS: u64 = 50;

/// The children, by role.
struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    common: Vec<String>,
    args: Args,
    /// Per slot: the generation running and its process.
    nodes: Vec<(u64, Option<Proc>)>,
    /// Per coordinator instance (two): its generation and process.
    coordinators: Vec<(u64, Option<Proc>)>,
    /// The children's memory and threads, sampled during the load.
    samples: Vec<Sample>,
}

/// One child's resident memory and threads at one moment of the load.
#[derive(Debug, Clone, serde::Serialize)]
struct Sample {
    /// Seconds since the load started.
    at: f64,
    /// `node`, `coordinator` or `load`.
    role: &'static str,
    /// The child's name.
    name: String,
    /// Resident set, KiB (`VmRSS`).
    rss_kib: u64,
    /// Threads.
    threads: u64,
}

/// How often the children's memory and threads are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// `VmRSS` (KiB) and `Threads` of process `pid`, from `/proc`.
fn memory_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("Threads:")?))
}

impl Cluster {
    /// Samples every child now running.
    fn sample(&mut self, at: f64, load: &Proc) {
        let nodes = self
            .nodes
            .iter()
            .filter_map(|(_, p)| p.as_ref())
            .map(|p| ("node", p));
        let coordinators = self
            .coordinators
            .iter()
            .filter_map(|(_, p)| p.as_ref())
            .map(|p| ("coordinator", p));
        let mut taken = Vec::new();
        for (role, p) in nodes.chain(coordinators).chain([("load", load)]) {
            if let Some((rss_kib, threads)) = p.child.id().and_then(memory_of) {
                taken.push(Sample {
                    at,
                    role,
                    name: p.name.clone(),
                    rss_kib,
                    threads,
                });
            }
        }
        self.samples.extend(taken);
    }

    /// Per role, the largest resident set (MiB) and thread count among the samples of
    /// the load's first, middle and last fifth: flat over the run, or growing.
    fn memory_summary(&self, seconds: f64) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for role in ["node", "coordinator", "load"] {
            let mut rss = Vec::new();
            let mut threads = Vec::new();
            for (from, to) in [(0.0, 0.2), (0.4, 0.6), (0.8, 1.01)] {
                let window = self
                    .samples
                    .iter()
                    .filter(|s| s.role == role && s.at >= from * seconds && s.at < to * seconds);
                let (r, t) = window.fold((0u64, 0u64), |(r, t), s| {
                    (r.max(s.rss_kib), t.max(s.threads))
                });
                rss.push(((r as f64 / 1024.0) * 10.0).round() / 10.0);
                threads.push(t);
            }
            out.insert(
                format!("{role}_rss_mib_start_mid_end"),
                serde_json::json!(rss),
            );
            out.insert(
                format!("{role}_threads_start_mid_end"),
                serde_json::json!(threads),
            );
        }
        serde_json::Value::Object(out)
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with our own child's pid and a valid signal number.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

impl Cluster {
    fn spawn(&self, name: &str, role: &str, extra: &[String]) -> anyhow::Result<Proc> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.log")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg(role)
            .args(&self.common)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        // A child outlives no driver: killed with it, however the driver ends (a kill
        // -9 of the driver, a ^C) where `kill_on_drop` cannot run.
        // SAFETY: prctl(2) between fork and exec touches only the child's own state.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Proc {
            name: name.to_string(),
            child,
            started: Instant::now(),
        })
    }

    fn start_node(&mut self, slot: usize) -> anyhow::Result<()> {
        let generation = self.nodes.get(slot).map_or(1, |(g, _)| g + 1);
        let name = node::name(slot as u64, generation);
        let extra = vec![
            "--slot".to_string(),
            slot.to_string(),
            "--generation".into(),
            generation.to_string(),
            "--ttl-secs".into(),
            self.args.ttl_secs.to_string(),
        ];
        let proc = self.spawn(&name, "node", &extra)?;
        if let Some(entry) = self.nodes.get_mut(slot) {
            *entry = (generation, Some(proc));
        }
        Ok(())
    }

    fn start_coordinator(&mut self, k: usize) -> anyhow::Result<()> {
        let generation = self.coordinators.get(k).map_or(1, |(g, _)| g + 1);
        let name = format!("coordinator-{k}-{generation}");
        let extra = vec![
            "--id".to_string(),
            name.clone(),
            "--nodes".into(),
            self.args.nodes.to_string(),
            "--regions".into(),
            self.args.regions.to_string(),
            "--ttl-secs".into(),
            self.args.ttl_secs.to_string(),
        ];
        let mut extra = extra;
        if self.args.retire {
            extra.push("--retire".into());
        }
        let proc = self.spawn(&name, "coordinator", &extra)?;
        if let Some(entry) = self.coordinators.get_mut(k) {
            *entry = (generation, Some(proc));
        }
        Ok(())
    }

    /// Restarts every node that exited (one that lost its lease) as its next
    /// generation.
    fn restart_exited_nodes(&mut self) -> anyhow::Result<()> {
        let soon = Duration::from_secs(1);
        for slot in 0..self.nodes.len() {
            let exited = match self.nodes.get_mut(slot).and_then(|(_, p)| p.as_mut()) {
                Some(p) if p.started.elapsed() >= soon => {
                    p.child.try_wait()?.map(|status| (p.name.clone(), status))
                }
                _ => None,
            };
            if let Some((name, status)) = exited {
                if self.nodes.get(slot).is_some_and(|(g, _)| *g > MAX_RESTARTS) {
                    anyhow::bail!("node slot {slot} was started {MAX_RESTARTS} times");
                }
                eprintln!("run: {name} exited ({status}); starting its next generation");
                self.start_node(slot)?;
            }
        }
        Ok(())
    }

    /// Restarts every coordinator that exited, whatever its exit code, as a killed one
    /// is: a deposed one ([`crate::coordinator::DEPOSED`]: its lease lost, its guarded
    /// write refused, or a write whose outcome it could not learn) comes back as a
    /// standby. Called at every tick of the run, pauses and the wait for the failovers
    /// to settle included: with two instances, one that exited and stayed down would
    /// leave the run one exit away from having no leader.
    fn restart_exited_coordinators(&mut self) -> anyhow::Result<()> {
        let soon = Duration::from_secs(1);
        for k in 0..self.coordinators.len() {
            let exited = match self.coordinators.get_mut(k).and_then(|(_, p)| p.as_mut()) {
                Some(p) if p.started.elapsed() >= soon => {
                    p.child.try_wait()?.map(|status| (p.name.clone(), status))
                }
                _ => None,
            };
            if let Some((name, status)) = exited {
                if self
                    .coordinators
                    .get(k)
                    .is_some_and(|(g, _)| *g > MAX_RESTARTS)
                {
                    anyhow::bail!("coordinator {k} was started {MAX_RESTARTS} times");
                }
                let why = if status.code() == Some(crate::coordinator::DEPOSED) {
                    " (deposed)"
                } else {
                    ""
                };
                eprintln!("run: {name} exited ({status}){why}; starting it again");
                self.start_coordinator(k)?;
            }
        }
        Ok(())
    }

    /// Stops every child: SIGTERM, then SIGKILL after `within`.
    async fn stop_all(procs: Vec<Proc>, within: Duration) {
        for p in &procs {
            signal(&p.child, libc::SIGCONT);
            signal(&p.child, libc::SIGTERM);
        }
        for mut p in procs {
            if tokio::time::timeout(within, p.child.wait()).await.is_err() {
                eprintln!("run: {} did not stop; killing it", p.name);
                let _ = p.child.kill().await;
            }
        }
    }
}

fn record(path: &Path, event: &Event) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{}", serde_json::to_string(event)?)?;
    Ok(())
}

/// Runs the cluster, the chaos and the checker; answers the checker's exit code.
pub async fn main(args: Args) -> anyhow::Result<i32> {
    let run_id = format!("run-{}", now_ms());
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("osw-cluster-{run_id}")),
    };
    std::fs::create_dir_all(&dir)?;
    let exe = std::env::current_exe()?;
    let grace = args.reclaim_grace_ms.unwrap_or(10_000);
    let max_create = args.max_create_ms.unwrap_or(5_000);
    let common = vec![
        "--etcd".to_string(),
        args.etcd.clone(),
        "--store".into(),
        args.store.clone(),
        "--run-id".into(),
        run_id.clone(),
        "--reclaim-grace-ms".into(),
        grace.to_string(),
        "--max-create-ms".into(),
        max_create.to_string(),
        "--min-object-interval-ms".into(),
        args.min_object_interval_ms.to_string(),
        "--flush-ms".into(),
        args.flush_ms.to_string(),
    ];
    eprintln!("run: {run_id}, logs in {}", dir.display());
    let mut cluster = Cluster {
        exe,
        dir: dir.clone(),
        common: common.clone(),
        args: args.clone(),
        nodes: (0..args.nodes).map(|_| (0, None)).collect(),
        coordinators: (0..2).map(|_| (0, None)).collect(),
        samples: Vec::new(),
    };
    let acks = dir.join("acks.txt");
    let summary = dir.join("load.json");
    let events = dir.join("events.jsonl");
    let result = drive(&mut cluster, &acks, &summary, &events, &run_id).await;
    let stopping = Instant::now();
    // Everything stops however the run ended: coordinators first (no failover of a
    // node stopped on purpose), then the nodes.
    let coordinators: Vec<Proc> = cluster
        .coordinators
        .iter_mut()
        .filter_map(|(_, p)| p.take())
        .collect();
    Cluster::stop_all(coordinators, Duration::from_secs(10)).await;
    let nodes: Vec<Proc> = cluster
        .nodes
        .iter_mut()
        .filter_map(|(_, p)| p.take())
        .collect();
    Cluster::stop_all(nodes, Duration::from_secs(30)).await;
    eprintln!(
        "run: stopped in {} ms; checking",
        stopping.elapsed().as_millis()
    );
    result?;
    let check_args = check::Args {
        common: Common {
            etcd: args.etcd.clone(),
            store: args.store.clone(),
            run_id,
            reclaim_grace_ms: grace,
            max_create_ms: max_create,
            min_object_interval_ms: args.min_object_interval_ms,
            flush_ms: args.flush_ms,
        },
        acks,
        summary: Some(summary),
        events: Some(events),
    };
    let checking = Instant::now();
    let (mut line, ok) = check::check(&check_args).await?;
    let samples = dir.join("memory.jsonl");
    let mut written = String::new();
    for sample in &cluster.samples {
        written.push_str(&serde_json::to_string(sample)?);
        written.push('\n');
    }
    std::fs::write(&samples, written)?;
    if let (Some(out), serde_json::Value::Object(memory)) = (
        line.as_object_mut(),
        cluster.memory_summary(args.seconds as f64),
    ) {
        out.extend(memory);
    }
    if let Some(out) = line.as_object_mut() {
        out.insert(
            "check_seconds".into(),
            serde_json::json!((checking.elapsed().as_secs_f64() * 10.0).round() / 10.0),
        );
    }
    println!("{line}");
    Ok(if ok { 0 } else { 1 })
}

/// The run between the start and the stop: answers once the load ended and every
/// failover finished.
async fn drive(
    cluster: &mut Cluster,
    acks: &Path,
    summary: &Path,
    events: &Path,
    run_id: &str,
) -> anyhow::Result<()> {
    let args = cluster.args.clone();
    // Refused before anything starts, rather than at the pause (an instant this far
    // ahead does not exist).
    if Instant::now()
        .checked_add(Duration::from_millis(args.pause_ms))
        .is_none()
    {
        anyhow::bail!("--pause-ms {} is too large", args.pause_ms);
    }
    for slot in 0..args.nodes as usize {
        cluster.start_node(slot)?;
    }
    for k in 0..2 {
        cluster.start_coordinator(k)?;
    }
    let keys = Keys::new(run_id);
    let mut client = etcd_connect(&args.etcd).await?;
    let view = View::start(client.clone(), keys.clone()).await?;
    let regions = args.regions;
    if !view
        .wait_for(Duration::from_secs(120), |s| {
            s.routes.len() as u64 >= regions
        })
        .await
    {
        anyhow::bail!("the regions were never all routed");
    }
    let load_args = vec![
        "--regions".to_string(),
        args.regions.to_string(),
        "--rate".into(),
        args.rate.to_string(),
        "--seconds".into(),
        args.seconds.to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--acks".into(),
        acks.display().to_string(),
        "--summary".into(),
        summary.display().to_string(),
    ];
    let mut load = cluster.spawn("load", "load", &load_args)?;
    let started = Instant::now();

    // The chaos: events spread over the load's first three quarters, in turn a node
    // kill, a pause, a coordinator kill (while each kind is left).
    let mut plan = Vec::new();
    let (mut kills, mut pauses, mut coords) = (args.kills, args.pauses, args.coordinator_kills);
    while kills + pauses + coords > 0 {
        if kills > 0 {
            plan.push("kill");
            kills -= 1;
        }
        if pauses > 0 {
            plan.push("pause");
            pauses -= 1;
        }
        if coords > 0 {
            plan.push("coordinator_kill");
            coords -= 1;
        }
    }
    let span = args.seconds as f64 * 0.75;
    let total = plan.len().max(1) as f64;
    let mut next_event = 0usize;
    let mut node_turn = 0usize;
    let mut resume: Option<(Instant, usize)> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut sample_at = started;
    loop {
        tick.tick().await;
        if sample_at.elapsed() >= SAMPLE_EVERY {
            sample_at = Instant::now();
            cluster.sample(started.elapsed().as_secs_f64(), &load);
        }
        if let Some(status) = load.child.try_wait()? {
            if !status.success() {
                anyhow::bail!("the load failed ({status})");
            }
            break;
        }
        if let Some((at, slot)) = resume {
            if Instant::now() >= at {
                if let Some(p) = cluster.nodes.get(slot).and_then(|(_, p)| p.as_ref()) {
                    signal(&p.child, libc::SIGCONT);
                    eprintln!("run: {} resumed (SIGCONT)", p.name);
                }
                resume = None;
            }
        }
        cluster.restart_exited_coordinators()?;
        if resume.is_none() {
            cluster.restart_exited_nodes()?;
        }
        let Some(kind) = plan.get(next_event) else {
            continue;
        };
        let at = Duration::try_from_secs_f64(span * (next_event as f64 + 0.5) / total)
            .unwrap_or(Duration::MAX);
        if started.elapsed() < at || resume.is_some() {
            continue;
        }
        next_event += 1;
        match *kind {
            "kill" | "pause" => {
                let slot = node_turn % cluster.nodes.len().max(1);
                node_turn += 1;
                let Some(p) = cluster.nodes.get_mut(slot).and_then(|(_, p)| p.as_mut()) else {
                    continue;
                };
                let name = p.name.clone();
                record(
                    events,
                    &Event {
                        kind: kind.to_string(),
                        name: name.clone(),
                        ms: now_ms(),
                    },
                )?;
                if *kind == "kill" {
                    eprintln!(
                        "run: {:.1} s: kill -9 {name}",
                        started.elapsed().as_secs_f64()
                    );
                    p.child.kill().await?;
                    cluster.start_node(slot)?;
                } else {
                    let Some(at) = Instant::now().checked_add(Duration::from_millis(args.pause_ms))
                    else {
                        anyhow::bail!("--pause-ms {} is too large", args.pause_ms);
                    };
                    eprintln!(
                        "run: {:.1} s: SIGSTOP {name} for {} ms",
                        started.elapsed().as_secs_f64(),
                        args.pause_ms
                    );
                    signal(&p.child, libc::SIGSTOP);
                    resume = Some((at, slot));
                }
            }
            _ => {
                let leader = client.leader(keys.election()).await?;
                let Some(id) = leader
                    .kv()
                    .and_then(|kv| kv.value_str().ok())
                    .map(str::to_string)
                else {
                    eprintln!("run: no coordinator leader to kill");
                    continue;
                };
                let k = cluster
                    .coordinators
                    .iter()
                    .position(|(_, p)| p.as_ref().is_some_and(|p| p.name == id));
                let Some(p) = k
                    .and_then(|k| cluster.coordinators.get_mut(k))
                    .and_then(|(_, p)| p.as_mut())
                else {
                    continue;
                };
                record(
                    events,
                    &Event {
                        kind: "coordinator_kill".into(),
                        name: id.clone(),
                        ms: now_ms(),
                    },
                )?;
                eprintln!(
                    "run: {:.1} s: kill -9 {id} (the leader)",
                    started.elapsed().as_secs_f64()
                );
                p.child.kill().await?;
                if let Some(k) = k {
                    cluster.start_coordinator(k)?;
                }
            }
        }
    }
    if let Some((_, slot)) = resume {
        if let Some(p) = cluster.nodes.get(slot).and_then(|(_, p)| p.as_ref()) {
            signal(&p.child, libc::SIGCONT);
        }
    }
    // Every failover finished (and its prefix retired, with `--retire`) and every route
    // on a live node before the stop; a coordinator that exits meanwhile is started
    // again (the failovers need a leader).
    let retire = args.retire;
    let settling = Instant::now();
    let mut settled = false;
    while !settled && settling.elapsed() < Duration::from_secs(120) {
        cluster.restart_exited_coordinators()?;
        settled = view
            .wait_for(Duration::from_millis(500), |s| {
                s.failovers
                    .values()
                    .all(|r| r.done_ms.is_some() && (!retire || r.state == "retired"))
                    && s.routes.values().all(|r| s.nodes.contains_key(&r.name))
            })
            .await;
    }
    if !settled {
        eprintln!("run: the failovers did not settle within 120 s");
    }
    eprintln!(
        "run: {:.1} s: the load ended and the failovers settled",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
