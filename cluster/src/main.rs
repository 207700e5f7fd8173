//! `osw-cluster`: the cluster of `examples/cluster.rs` as separate OS processes
//! coordinated through etcd (issue 45).
//!
//! One binary, one subcommand per role, so that the driver (`run`) spawns the others as
//! child processes of the same executable:
//!
//! - `node`: one WAL on its own prefix of the bucket (`<run>/node-<slot>-<generation>`),
//!   served over TCP ([`rpc`]), alive in etcd as long as its lease is kept alive
//!   ([`node`]);
//! - `coordinator`: campaigns through etcd's election API; the leader assigns regions,
//!   detects dead nodes by their lease's expiry, fences their prefixes and takes their
//!   regions over ([`coordinator`]);
//! - `load`: the frontends, an open-loop load over the regions' routes as etcd holds
//!   them, resolving ambiguous appends against fenced chains ([`load`]);
//! - `check`: reads every region's pieces back from the bucket and compares them with
//!   what the frontends were acknowledged ([`check`]);
//! - `run`: the driver, which starts everything, does the chaos (kill -9, SIGSTOP past
//!   the lease TTL, the coordinator leader killed), restarts what it killed, stops
//!   everything however it ends and prints the checker's JSON line last ([`run`]).
//!
//! The key space is described in [`keys`].

mod check;
mod coordinator;
mod flush;
mod keys;
mod load;
mod node;
mod rpc;
mod run;
mod view;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use object_store_wal::Config;

/// The processes of the cluster.
#[derive(Parser, Debug)]
#[command(about = "object-store-wal nodes, a coordinator and frontends on etcd (issue 45)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One subcommand per process role.
#[derive(Subcommand, Debug)]
enum Command {
    /// One node: a WAL on its own prefix, served over TCP, alive by its etcd lease.
    Node(node::Args),
    /// A coordinator instance (leader by etcd election, or standby).
    Coordinator(coordinator::Args),
    /// The load generator and its frontends.
    Load(load::Args),
    /// The checker: every region's pieces read back from the bucket.
    Check(check::Args),
    /// The driver: everything above as child processes, with chaos.
    Run(run::Args),
}

/// What every process needs to reach etcd and the bucket, and which run it belongs to.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// etcd's client URL.
    #[arg(long, env = "OSW_ETCD_ENDPOINT")]
    pub etcd: String,
    /// The store's URL (the bucket); the AWS_* environment names the server.
    #[arg(long, env = "WAL_TEST_S3")]
    pub store: String,
    /// The run's id: the key space's prefix in etcd and the prefixes' parent in the
    /// bucket.
    #[arg(long)]
    pub run_id: String,
    /// The WALs' `reclaim_grace`, ms: a fenced prefix is retired no earlier than this
    /// plus `--max-create-ms` after its fence (the library's default: 10 minutes).
    #[arg(long, default_value_t = 600_000)]
    pub reclaim_grace_ms: u64,
    /// The WALs' `max_create_duration`, ms (the library's default: 60 s).
    #[arg(long, default_value_t = 60_000)]
    pub max_create_ms: u64,
    /// The WALs' `min_object_interval`, ms: the shortest time between two objects of a
    /// node (its group commit window), so a node writes at most 1000 / this objects a
    /// second whatever its load.
    #[arg(long, default_value_t = 100)]
    pub min_object_interval_ms: u64,
    /// How often a node flushes its regions' new entries into a flush object and
    /// obsoletes them (`flush`), ms; 0: never (the live chains grow with the run).
    #[arg(long, default_value_t = 1000)]
    pub flush_ms: u64,
}

/// Milliseconds since the Unix epoch on this host (the processes of a run share one
/// host, so their clocks are one).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The WAL configuration of prefix `prefix`, the same in the node that writes it, the
/// coordinator that fences it and the readers (frontends, checker).
pub fn wal_config(prefix: &str, common: &Common) -> Config {
    let mut config = Config::new(prefix).with_create_if_missing(true);
    config.reclaim_grace = Duration::from_millis(common.reclaim_grace_ms);
    config.max_create_duration = Duration::from_millis(common.max_create_ms);
    config.min_object_interval = Duration::from_millis(common.min_object_interval_ms);
    config
}

/// Connects to etcd with bounded request and connect times.
pub async fn etcd_connect(endpoint: &str) -> anyhow::Result<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(2));
    Ok(etcd_client::Client::connect([endpoint], Some(options)).await?)
}

/// Connects to etcd with no bound on a request's time: for a standby's campaign, which
/// answers only once it is elected.
pub async fn etcd_connect_waiting(endpoint: &str) -> anyhow::Result<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
    Ok(etcd_client::Client::connect([endpoint], Some(options)).await?)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let code = runtime.block_on(async {
        match cli.command {
            Command::Node(args) => node::main(args).await,
            Command::Coordinator(args) => coordinator::main(args).await,
            Command::Load(args) => load::main(args).await,
            Command::Check(args) => check::main(args).await,
            Command::Run(args) => run::main(args).await,
        }
    })?;
    // Tasks still running (a watch, a keep-alive) end with the runtime.
    runtime.shutdown_timeout(Duration::from_millis(200));
    std::process::exit(code)
}
