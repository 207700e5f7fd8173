//! `walctl`: inspect (and, for tests and demos, append to) a WAL prefix.
//!
//! Every result is one JSON object per line on stdout (`stats` prints a table unless
//! `--json`); errors and progress go to stderr and the exit code is non-zero: `2` for
//! bad usage or input (arguments, URL, prefix, hex, an entry the WAL refuses), `1` for a
//! failure (store errors, damaged objects or segments, fencing).
//!
//! ```text
//! walctl --url <URL> --prefix <P> chain
//! walctl --url <URL> --prefix <P> dump --region <R> [--from <ID>]
//! walctl --url <URL> --prefix <P> append --region <R> <HEX>...
//! walctl --url <URL> --prefix <P> verify [--progress-every <N>]
//! walctl --url <URL> --prefix <P> stats [--json] [--deep]
//! walctl --url <URL> --prefix <P> regions
//! walctl --url <URL> --prefix <P> fence
//! walctl --url <URL> --prefix <P> retire --reclaim-grace-secs <S> [--live <PREFIX>]...
//! ```
//!
//! `chain`, `dump`, `verify`, `stats` and `regions` never write: they open the prefix
//! read-only (no opening object, no fencing), and refuse a `file://` directory that
//! does not exist rather than create it. `append` opens the prefix as its writer, which
//! writes an opening object and fences every earlier instance, so it must not be
//! pointed at a prefix a live node owns.
//!
//! `fence` and `retire` fail a dead or zombie node over by hand (docs/OPERATIONS.md,
//! "A node died"): `fence` closes the prefix for good (no writer opens it again) and
//! prints what it holds of each region, the new owners' acquire arguments; `retire`
//! then deletes every key but the closed object, once the nodes' `reclaim_grace` (which
//! it must be told) and a margin of `max_create_duration` passed since the fence and no live prefix still names it as a piece. The
//! live prefixes are every `--live` given, or, with none, every other prefix beside it
//! (its siblings under the same parent).
//!
//! `--url` given several times (3 or 5) names one log over that many stores (a quorum of
//! copies): `chain` adds one line per key with its copy in each
//! store and whether a quorum holds it (`decided`), and `verify` checks every copy in
//! every store, each line naming its `store`.
//!
//! Damage is reported where it is (FORMAT.md, "What a reader verifies"): an object whose
//! header, footer or trailer fails is unusable, and recovery (`chain`, `dump`, `stats`)
//! fails naming it; a damaged segment fails only reads of its region, so `chain` and
//! `stats` report it and go on, `dump` of that region fails there, and `verify` names
//! every damaged segment by key and region, goes on, and exits 1.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store_wal::inspect::{Inspector, StoreCopy, Verdict};
use object_store_wal::store_from_url;
use object_store_wal::transform::{Compression, StaticKeys};
use object_store_wal::RecoveryMode;
use object_store_wal::{
    holdings_of, Config, Error, ErrorKind, ObjectStoreLogStore, Piece, WalStores,
};
use serde_json::{json, Value};

/// Inspect a write-ahead log kept in objects under a prefix of an object store.
#[derive(Debug, Parser)]
#[command(
    name = "walctl",
    after_help = "Output: one JSON object per line on stdout. Exit codes: 0 ok, 1 failure (store error, damaged object), 2 bad usage or input."
)]
struct Cli {
    /// Store URL: file:///absolute/dir, memory://, or s3://, gs://, az:// when the crate
    /// is built with the aws, gcp or azure feature. Before or after the subcommand.
    /// Given several times (3 or 5): one log over that many stores; `chain` then shows
    /// every key's copy in each store, and `verify` checks every copy.
    #[arg(long, global = true)]
    url: Vec<String>,
    /// The WAL prefix inside the store (relative, no trailing '/'). Before or after the
    /// subcommand.
    #[arg(long, global = true)]
    prefix: Option<String>,
    /// Recovery mode: `strict` (the default: an unreadable object the chain may need
    /// fails the command, naming it) or `point-in-time` (go on without it and report
    /// what that gives up; with `append`, the writer opens that way, for good).
    #[arg(long, global = true, value_parser = parse_mode)]
    recovery_mode: Option<RecoveryMode>,
    /// The keys of an encrypted WAL: `env:VAR` or `file:PATH`, one `<id>:<64 hex>` per
    /// line (or comma-separated), the last the current key. `dump` and `verify` need them
    /// to read encrypted segments; `append` encrypts with the current one.
    #[arg(long, global = true, value_name = "SOURCE")]
    keys: Option<String>,
    /// With `append`: the compression of the appended segment (`off`, `lz4`, `zstd`,
    /// `zstd:N`).
    #[arg(long, global = true, value_parser = parse_compression)]
    compression: Option<Compression>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every object under the prefix, ascending, and every foreign key. Read-only.
    Chain,
    /// Print a region's replayed entries from an entry id on. Read-only.
    Dump {
        /// The region.
        #[arg(long)]
        region: u64,
        /// The first entry id to print (entries with an id at or above it).
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// Open the prefix as its writer (fencing every earlier instance) and append the
    /// entries to one region, as one append, flushed at once. A prefix with no WAL is an
    /// error unless `--create-if-missing`.
    Append {
        /// The region.
        #[arg(long)]
        region: u64,
        /// Start a new WAL if the prefix holds none (a typo otherwise fails naming it).
        #[arg(long)]
        create_if_missing: bool,
        /// The entries' payloads, in hex ("" is an empty entry).
        #[arg(required = true, value_name = "HEX")]
        entries: Vec<String>,
    },
    /// Read every object whole and verify every CRC and structural rule, naming every
    /// damaged segment by key and region; exit 1 if anything is damaged. Read-only.
    Verify {
        /// Print "verified X/Y objects" on stderr every this many objects (and at least
        /// every second); 0: only the time bound.
        #[arg(long, default_value_t = 1000)]
        progress_every: u64,
    },
    /// What the prefix holds of each region: its ids on the live chain, its release
    /// (and the id its next owner acquires above), its pieces in earlier owners' logs;
    /// one line per region, then one line with the prefix and its closed object, if
    /// fenced. Read-only.
    Regions,
    /// Fence the prefix for good (a node that died or is a zombie: no writer opens it
    /// again, and its next create fails), then print what the fenced chain holds of
    /// each region it owned: one line per region with its ids, its `acquire_above` and
    /// the pieces its new owner acquires with, then one line for the closed object.
    /// Asked again, it prints the same, writing nothing.
    Fence,
    /// Retire a fenced prefix: delete every key but the closed object (the tombstone).
    /// Refused before `reclaim_grace` and `max_create_duration` passed since the fence, and while a live prefix
    /// still names it as a piece of a region (saying which prefix and region).
    Retire {
        /// A live node's prefix to check for pieces naming this one (repeatable); none:
        /// every other prefix beside it, under the same parent.
        #[arg(long = "live", value_name = "PREFIX")]
        live: Vec<String>,
        /// The nodes' `reclaim_grace` in seconds (required: a grace shorter than theirs
        /// could free a key an idle zombie still creates on).
        #[arg(long, value_name = "SECONDS")]
        reclaim_grace_secs: u64,
        /// The nodes' `max_create_duration` in seconds (default: 60, or half the grace
        /// if that is shorter): the margin retirement adds to the grace.
        #[arg(long, value_name = "SECONDS")]
        max_create_secs: Option<u64>,
    },
    /// Count what the prefix holds: objects, bytes, regions, epoch, floor, claims,
    /// orphans, foreign keys, damaged segments. Read-only; damaged segments are counted
    /// (and named on stderr), not a failure: `verify` is the check.
    Stats {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Read every object whole, so that every segment is checked (by default only
        /// objects up to the recovery's whole-read threshold, 1 MiB, are).
        #[arg(long)]
        deep: bool,
    },
}

/// Why the command failed, and with which exit code.
#[derive(Debug)]
enum Failure {
    /// Bad usage or input: exit code 2.
    Usage(String),
    /// The command ran and failed: exit code 1.
    Failed(String),
    /// The command reported its problems already (on stdout and stderr): exit code 1.
    Reported,
    /// stdout was closed (a pipe into `head`): stop quietly.
    Closed,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e.kind() {
            ErrorKind::FixInput => Failure::Usage(e.to_string()),
            _ => Failure::Failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::Closed
        } else {
            Failure::Failed(format!("cannot write to stdout: {e}"))
        }
    }
}

/// Writes one JSON object to stdout as one line, its fields in the order given (for
/// humans; scripts should not depend on the order).
fn emit(fields: &[(&str, Value)]) -> Result<(), Failure> {
    let mut line = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push_str(&Value::from(*name).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push('}');
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("walctl: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) | Err(Failure::Closed) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("walctl: error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(message)) => {
            eprintln!("walctl: error: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Reported) => ExitCode::from(1),
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let writes = matches!(
        cli.command,
        Command::Append { .. } | Command::Fence | Command::Retire { .. }
    );
    let missing = |what: &str| Failure::Usage(format!("--{what} is required"));
    if cli.url.is_empty() {
        return Err(missing("url"));
    }
    let prefix = cli.prefix.ok_or_else(|| missing("prefix"))?;
    let store = cli
        .url
        .iter()
        .map(|url| open_store(url, writes))
        .collect::<Result<Vec<_>, _>>()?;
    let mut config = Config::new(prefix);
    if let Some(mode) = cli.recovery_mode {
        config = config.with_recovery_mode(mode);
    }
    if let Some(source) = &cli.keys {
        let keys = StaticKeys::from_source(source)
            .map_err(|e| Failure::Usage(format!("--keys {source}: {e}")))?;
        config = config.with_encryption_keys(Arc::new(keys));
    }
    if let Some(compression) = cli.compression {
        config = config.with_compression(compression);
    }
    match cli.command {
        Command::Chain => chain(store, config).await,
        Command::Dump { region, from } => dump(store, config, region, from).await,
        Command::Append {
            region,
            entries,
            create_if_missing,
        } => {
            let config = config.with_create_if_missing(create_if_missing);
            append(store, config, region, &entries).await
        }
        Command::Verify { progress_every } => verify(store, config, progress_every).await,
        Command::Stats { json, deep } => stats(store, config, json, deep).await,
        Command::Regions => regions(store, config).await,
        Command::Fence => fence(store, config).await,
        Command::Retire {
            live,
            reclaim_grace_secs,
            max_create_secs,
        } => {
            let grace = std::time::Duration::from_secs(reclaim_grace_secs);
            let create = match max_create_secs {
                Some(secs) => std::time::Duration::from_secs(secs),
                None => config.max_create_duration.min(grace / 2),
            };
            let config = config
                .with_reclaim_grace(grace)
                .with_max_create_duration(create);
            retire(store, config, live).await
        }
    }
}

/// A piece as JSON.
fn piece_json(p: &Piece) -> Value {
    json!({"prefix": p.prefix, "first_id": p.first_id, "last_id": p.last_id})
}

async fn regions(store: Vec<Arc<dyn ObjectStore>>, config: Config) -> Result<(), Failure> {
    let held = holdings_of(WalStores::quorum(store)?, &config).await?;
    for h in &held.regions {
        let released = h
            .released
            .map(|r| json!({"last_id": r.last_id, "acquire_above": r.acquire_above}));
        emit(&[
            ("region", json!(h.region)),
            ("first_id", json!(h.ids.map(|(first, _)| first))),
            ("last_id", json!(h.ids.map(|(_, last)| last))),
            ("released", json!(released)),
            (
                "pieces",
                Value::from(h.pieces.iter().map(piece_json).collect::<Vec<_>>()),
            ),
        ])?;
    }
    emit(&[
        ("prefix", json!(held.prefix)),
        ("closed", json!(held.closed)),
        ("regions", json!(held.regions.len())),
    ])
}

async fn fence(store: Vec<Arc<dyn ObjectStore>>, config: Config) -> Result<(), Failure> {
    let fenced = object_store_wal::fence(WalStores::quorum(store)?, &config).await?;
    let owned = fenced.regions.iter().map(|r| (r, false));
    for (r, released) in owned.chain(fenced.released.iter().map(|r| (r, true))) {
        let acquire_pieces: Vec<Value> = r
            .pieces_with(&fenced.prefix)
            .iter()
            .map(piece_json)
            .collect();
        emit(&[
            ("region", json!(r.region)),
            ("first_id", json!(r.ids.map(|(first, _)| first))),
            ("last_id", json!(r.released.last_id)),
            ("acquire_above", json!(r.released.acquire_above)),
            ("acquire_pieces", Value::from(acquire_pieces)),
            ("released", json!(released)),
        ])?;
    }
    emit(&[
        ("prefix", json!(fenced.prefix)),
        ("closed", json!(fenced.closed.sequence)),
        ("epoch", json!(fenced.closed.epoch)),
        ("wrote", json!(fenced.wrote)),
        ("retired", json!(fenced.retired)),
        ("acquire_above", json!(fenced.acquire_above)),
        ("regions", json!(fenced.regions.len())),
    ])
}

async fn retire(
    store: Vec<Arc<dyn ObjectStore>>,
    config: Config,
    live: Vec<String>,
) -> Result<(), Failure> {
    let live = if live.is_empty() {
        siblings(&store, &config.prefix).await?
    } else {
        live
    };
    let retired = object_store_wal::retire(WalStores::quorum(store)?, &config, &live).await?;
    emit(&[
        ("prefix", json!(config.prefix)),
        ("closed", json!(retired.closed)),
        ("deleted", json!(retired.deleted)),
        ("checked", json!(live)),
    ])
}

/// The other prefixes under `prefix`'s parent that hold WAL objects, in every store
/// (each listed once).
async fn siblings(store: &[Arc<dyn ObjectStore>], prefix: &str) -> Result<Vec<String>, Failure> {
    let path = object_store::path::Path::from(prefix);
    let parent: Option<object_store::path::Path> = prefix
        .rsplit_once('/')
        .map(|(parent, _)| object_store::path::Path::from(parent));
    let mut found = std::collections::BTreeSet::new();
    for s in store {
        let listed = s.list_with_delimiter(parent.as_ref()).await.map_err(|e| {
            Failure::Failed(format!("cannot list the prefixes beside {prefix}: {e}"))
        })?;
        for p in listed.common_prefixes {
            if p == path || found.contains(p.as_ref()) {
                continue;
            }
            // A sibling with no WAL object directly under it is no node's log.
            let keys = s
                .list_with_delimiter(Some(&p))
                .await
                .map_err(|e| Failure::Failed(format!("cannot list {p} beside {prefix}: {e}")))?;
            let holds_wal = keys
                .objects
                .iter()
                .any(|o| o.location.filename().is_some_and(|f| f.ends_with(".wal")));
            if holds_wal {
                found.insert(p.to_string());
            }
        }
    }
    Ok(found.into_iter().collect())
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    s.parse()
}

fn parse_mode(s: &str) -> Result<RecoveryMode, String> {
    match s {
        "strict" => Ok(RecoveryMode::Strict),
        "point-in-time" => Ok(RecoveryMode::PointInTime),
        other => Err(format!("{other}: strict or point-in-time")),
    }
}

/// Opens read-only for inspection. Under strict recovery an unreadable object the chain
/// may need blocks it: the prefix is then opened point-in-time to show everything that
/// can be read, the blocking object is named, and the command ends with exit code 1
/// once it has printed (the returned error).
async fn open_inspect(
    store: Vec<Arc<dyn ObjectStore>>,
    config: Config,
) -> Result<(ObjectStoreLogStore, Option<Error>), Failure> {
    let stores = WalStores::quorum(store)?;
    match ObjectStoreLogStore::open_read_only(stores.clone(), config.clone()).await {
        Ok(wal) => Ok((wal, None)),
        Err(e @ (Error::CorruptObject { .. } | Error::SequenceMismatch { .. }))
            if config.recovery_mode == RecoveryMode::Strict =>
        {
            eprintln!(
                "walctl: recovery is blocked: {e}; showing what point-in-time recovery would \
                 keep (see docs/OPERATIONS.md, runbook for a damaged object)"
            );
            let inspect = config.with_recovery_mode(RecoveryMode::PointInTime);
            let wal = ObjectStoreLogStore::open_read_only(stores, inspect).await?;
            Ok((wal, Some(e)))
        }
        Err(e) => Err(e.into()),
    }
}

/// The store of `url`. A read-only command refuses a `file://` directory that does not
/// exist, naming it.
fn open_store(url: &str, writes: bool) -> Result<Arc<dyn ObjectStore>, Failure> {
    if !writes {
        if let Ok(parsed) = url::Url::parse(url) {
            if parsed.scheme() == "file" {
                if let Ok(dir) = parsed.to_file_path() {
                    if !dir.is_dir() {
                        return Err(Failure::Failed(format!(
                            "{} is not a directory (read-only commands never create it)",
                            dir.display()
                        )));
                    }
                }
            }
        }
    }
    Ok(store_from_url(url)?)
}

async fn chain(store: Vec<Arc<dyn ObjectStore>>, config: Config) -> Result<(), Failure> {
    let inspector = Inspector::new(WalStores::quorum(store.clone())?, &config)?;
    let (wal, blocked) = open_inspect(store, config).await?;
    let report = wal.report();
    for o in &report.objects {
        emit(&[
            ("seq", json!(o.header.sequence)),
            ("epoch", json!(o.header.epoch)),
            ("link_seq", json!(o.header.link.sequence)),
            ("link_epoch", json!(o.header.link.epoch)),
            ("floor", json!(o.header.floor)),
            ("id_offset", json!(o.header.id_offset)),
            ("claim", json!(o.header.claim)),
            ("on_chain", json!(o.on_chain)),
            ("segments", json!(o.segments)),
            ("entries", json!(o.entries)),
            ("bytes", json!(o.bytes)),
        ])?;
    }
    for key in &report.foreign {
        emit(&[("foreign", json!(key))])?;
    }
    report_damage(report)?;
    copies(&inspector).await?;
    blocked_by(blocked)
}

/// Ends an inspection that strict recovery could not do: exit code 1.
fn blocked_by(blocked: Option<Error>) -> Result<(), Failure> {
    match blocked {
        Some(e) => {
            eprintln!("walctl: recovery is blocked by: {e}");
            Err(Failure::Reported)
        }
        None => Ok(()),
    }
}

/// Over several stores: one line per key with its copy in each store (`null`: no copy;
/// a string: unreadable) and whether a quorum holds one value (`decided`).
async fn copies(inspector: &Inspector) -> Result<(), Failure> {
    if inspector.stores().len() < 2 {
        return Ok(());
    }
    let mut keys = inspector.copies().await?;
    while let Some(key) = keys.next().await {
        let copies = key
            .copies
            .iter()
            .map(|copy| match copy {
                StoreCopy::Held {
                    epoch,
                    claim,
                    object_crc,
                    ..
                } => json!({
                    "epoch": epoch,
                    "claim": claim,
                    "object_crc": format!("{object_crc:08x}"),
                }),
                StoreCopy::Unreadable(e) => json!(e.to_string()),
                StoreCopy::Missing => Value::Null,
                other => json!(format!("{other:?}")),
            })
            .collect();
        emit(&[
            ("seq", json!(key.sequence)),
            ("copies", Value::Array(copies)),
            ("decided", json!(key.decided)),
        ])?;
    }
    Ok(())
}

/// One line (and a note on stderr) per damaged segment recovery found and per object
/// below the floor it could not read: neither failed it.
fn report_damage(report: &object_store_wal::RecoveryReport) -> Result<(), Failure> {
    for d in &report.damaged_segments {
        eprintln!(
            "walctl: damaged segment of region {} in {}: {}",
            d.region, d.key, d.error
        );
        emit(&[
            ("damaged", json!(d.key)),
            ("region", json!(d.region)),
            ("error", json!(d.error.to_string())),
        ])?;
    }
    for u in &report.given_up_damaged {
        eprintln!(
            "walctl: object {} cannot be read; point-in-time recovery goes on without it: {}",
            u.sequence, u.error
        );
        emit(&[
            ("damaged_object", json!(u.sequence)),
            ("blocks_strict_recovery", json!(true)),
            ("error", json!(u.error.to_string())),
            (
                "entry_ids_given_up",
                json!([u.entry_ids.start(), u.entry_ids.end()]),
            ),
        ])?;
    }
    for g in &report.given_up {
        let regions: Vec<Value> = g
            .regions
            .iter()
            .map(|(region, first, last)| json!({"region": region, "first_id": first, "last_id": last}))
            .collect();
        emit(&[
            ("given_up", json!(g.header.sequence)),
            ("epoch", json!(g.header.epoch)),
            ("regions", Value::Array(regions)),
        ])?;
    }
    for u in &report.unread_below_floor {
        eprintln!(
            "walctl: note: object {} below the floor cannot be read: {}",
            u.sequence, u.error
        );
        emit(&[
            ("unread_below_floor", json!(u.sequence)),
            ("error", json!(u.error.to_string())),
        ])?;
    }
    Ok(())
}

async fn dump(
    store: Vec<Arc<dyn ObjectStore>>,
    config: Config,
    region: u64,
    from: u64,
) -> Result<(), Failure> {
    let (wal, blocked) = open_inspect(store, config).await?;
    let mut entries = wal.read(region, from);
    let mut printed = 0u64;
    while let Some(entry) = entries.try_next().await? {
        emit(&[
            ("region", json!(entry.region)),
            ("id", json!(entry.id)),
            ("payload_hex", json!(hex::encode(&entry.payload))),
        ])?;
        printed += 1;
    }
    if printed == 0 {
        // Nothing on stdout is also what a closed pipe gives: say it on stderr.
        eprintln!("walctl: region {region} has no entries with an id at or above {from}");
    }
    blocked_by(blocked)
}

async fn append(
    store: Vec<Arc<dyn ObjectStore>>,
    config: Config,
    region: u64,
    entries: &[String],
) -> Result<(), Failure> {
    let payloads = entries
        .iter()
        .enumerate()
        .map(|(i, h)| {
            hex::decode(h.trim())
                .map(Bytes::from)
                .map_err(|e| Failure::Usage(format!("entry {} ({h:?}) is not hex: {e}", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut wal = ObjectStoreLogStore::open(WalStores::quorum(store)?, config).await?;
    let receipt = wal.append_and_flush(vec![(region, payloads)]).await?;
    let ids: Vec<u64> = receipt.parts.iter().flat_map(|p| p.ids()).collect();
    emit(&[
        ("region", json!(region)),
        ("ids", json!(ids)),
        ("seq", json!(receipt.sequence)),
    ])
}

/// Progress on stderr for long runs: every `every` objects, and at least once a second.
struct Progress {
    every: u64,
    total: usize,
    last: std::time::Instant,
    printed: bool,
}

impl Progress {
    fn tick(&mut self, done: usize) {
        let on_count = self.every > 0 && (done as u64).is_multiple_of(self.every);
        let on_time = self.last.elapsed() >= std::time::Duration::from_secs(1);
        let last_one = done == self.total && self.printed;
        if on_count || on_time || last_one {
            eprintln!("walctl: verified {done}/{} objects", self.total);
            self.last = std::time::Instant::now();
            self.printed = true;
        }
    }
}

async fn verify(
    store: Vec<Arc<dyn ObjectStore>>,
    config: Config,
    progress_every: u64,
) -> Result<(), Failure> {
    let inspector = Inspector::new(WalStores::quorum(store)?, &config)?;
    let replicas = inspector.stores();
    if replicas.len() < 2 {
        return verify_store(&inspector, &config, progress_every, None).await;
    }
    // Every copy in every store.
    let mut failed = false;
    for (i, replica) in replicas.iter().enumerate() {
        match verify_store(replica, &config, progress_every, Some(i)).await {
            Ok(()) => {}
            Err(Failure::Reported) => failed = true,
            Err(e) => return Err(e),
        }
    }
    if failed {
        return Err(Failure::Reported);
    }
    Ok(())
}

/// `verify` of one store's objects; `store`: its index, over several stores.
async fn verify_store(
    inspector: &Inspector,
    config: &Config,
    progress_every: u64,
    store: Option<usize>,
) -> Result<(), Failure> {
    let emit = |fields: &[(&str, Value)]| {
        let mut fields = fields.to_vec();
        if let Some(i) = store {
            fields.insert(0, ("store", json!(i)));
        }
        emit(&fields)
    };
    // An object that failed verification: named on stderr, one line on stdout.
    let emit_failure = |sequence: u64, e: &Error| {
        eprintln!("walctl: {e}");
        emit(&[
            ("seq", json!(sequence)),
            ("ok", json!(false)),
            ("error", json!(e.to_string())),
        ])
    };
    let listing = inspector.list().await?;
    for key in &listing.foreign {
        eprintln!("walctl: note: skipping {key}: not a WAL object");
    }
    let mut checks = futures::stream::iter(listing.sequences.iter().copied())
        .map(|sequence| async move { (sequence, inspector.verify(sequence).await) })
        .buffered(config.recovery_concurrency.clamp(1, 8));
    let mut progress = Progress {
        every: progress_every,
        total: listing.sequences.len(),
        last: std::time::Instant::now(),
        printed: false,
    };
    let (mut done, mut unusable, mut crc_only) = (0, 0, 0);
    let (mut unread, mut keys_missing) = (0, 0);
    let (mut damaged_objects, mut damaged_segments) = (0, 0);
    while let Some((sequence, verdict)) = checks.next().await {
        let key = inspector.key(sequence);
        match verdict {
            Verdict::Ok => emit(&[("seq", json!(sequence)), ("ok", json!(true))])?,
            Verdict::Vanished => {
                eprintln!("walctl: note: {key} was deleted since the listing");
                emit(&[("seq", json!(sequence)), ("vanished", json!(true))])?;
            }
            Verdict::Unusable(e) => {
                unusable += 1;
                emit_failure(sequence, &e)?;
            }
            Verdict::ReadFailed(e) => {
                unread += 1;
                emit_failure(sequence, &e)?;
            }
            Verdict::KeysMissing(errors) => {
                keys_missing += errors.len();
                let error: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                for e in &error {
                    eprintln!("walctl: {e}");
                }
                emit(&[
                    ("seq", json!(sequence)),
                    ("ok", json!(false)),
                    ("keys_missing", json!(true)),
                    ("error", json!(error.join("; "))),
                ])?;
            }
            Verdict::ObjectCrc(e) => {
                crc_only += 1;
                emit_failure(sequence, &e)?;
            }
            Verdict::Segments(errors) => {
                damaged_objects += 1;
                damaged_segments += errors.len();
                let mut segments = Vec::with_capacity(errors.len());
                for e in &errors {
                    eprintln!("walctl: {e}");
                    if let Error::CorruptSegment { region, source, .. } = e {
                        segments.push(json!({
                            "key": key,
                            "region": region,
                            "error": source.to_string(),
                        }));
                    }
                }
                let error: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                emit(&[
                    ("seq", json!(sequence)),
                    ("ok", json!(false)),
                    ("error", json!(error.join("; "))),
                    ("damaged_segments", Value::Array(segments)),
                ])?;
            }
            other => {
                // A verdict this walctl does not know (a newer crate): not a pass.
                unusable += 1;
                eprintln!("walctl: {key}: {other:?}");
                emit(&[
                    ("seq", json!(sequence)),
                    ("ok", json!(false)),
                    ("error", json!(format!("{other:?}"))),
                ])?;
            }
        }
        done += 1;
        progress.tick(done);
    }
    if unusable + crc_only + damaged_segments > 0 {
        let crc_only = match crc_only {
            0 => String::new(),
            n => format!(", {n} objects whose only damage is their object CRC"),
        };
        eprintln!(
            "walctl: {damaged_segments} damaged segments in {damaged_objects} objects, \
             {unusable} unusable objects{crc_only}, of {} objects",
            listing.sequences.len()
        );
    }
    if unread > 0 {
        eprintln!("walctl: {unread} objects could not be read (run verify again)");
    }
    if keys_missing > 0 {
        eprintln!(
            "walctl: {keys_missing} encrypted segments need a key this run does not have \
             (--keys): not checked"
        );
    }
    if unusable + crc_only + damaged_segments + unread + keys_missing > 0 {
        return Err(Failure::Reported);
    }
    Ok(())
}

async fn stats(
    store: Vec<Arc<dyn ObjectStore>>,
    mut config: Config,
    as_json: bool,
    deep: bool,
) -> Result<(), Failure> {
    if deep {
        // Every object is read whole, so recovery checks every segment.
        config.whole_read_threshold = object_store_wal::config::MAX_BYTES;
    }
    let threshold = config.whole_read_threshold;
    let (wal, blocked) = open_inspect(store, config).await?;
    let report = wal.report();
    let chain = wal.chain_summary();
    let (regions, chain_entries) = (chain.regions, chain.entries);
    let objects = &report.objects;
    let claims = objects.iter().filter(|o| o.header.claim).count();
    let orphans = objects
        .iter()
        .filter(|o| !o.on_chain && !o.header.claim)
        .count();
    let segments: usize = objects.iter().map(|o| o.segments).sum();
    let segments_checked: usize = objects
        .iter()
        .filter(|o| o.bytes <= threshold)
        .map(|o| o.segments)
        .sum();
    let end = report.chain_end;
    let fields: Vec<(&str, Value, &str)> = vec![
        ("objects", json!(objects.len()), "WAL objects read"),
        (
            "bytes",
            json!(objects.iter().map(|o| o.bytes).sum::<u64>()),
            "their bytes",
        ),
        (
            "chain_objects",
            json!(objects.iter().filter(|o| o.on_chain).count()),
            "objects on the chain",
        ),
        (
            "chain_end",
            json!(end.map_or(0, |h| h.sequence)),
            "the chain's last sequence",
        ),
        (
            "epoch",
            json!(end.map_or(0, |h| h.epoch)),
            "the chain end's epoch",
        ),
        (
            "floor",
            json!(end.map_or(0, |h| h.floor)),
            "the chain end's floor",
        ),
        (
            "max_sequence",
            json!(report.max_sequence),
            "largest sequence listed",
        ),
        (
            "regions",
            json!(regions),
            "regions with entries on the chain",
        ),
        ("entries", json!(chain_entries), "entries on the chain"),
        ("claims", json!(claims), "claim objects"),
        (
            "orphans",
            json!(orphans),
            "objects off the chain, claims aside",
        ),
        (
            "foreign_keys",
            json!(report.foreign.len()),
            "keys that are not WAL objects",
        ),
        ("segments", json!(segments), "segments in all objects"),
        (
            "segments_checked",
            json!(segments_checked),
            "segments whose bytes were checked",
        ),
        (
            "damaged_segments",
            json!(report.damaged_segments.len()),
            "segments that failed their checks",
        ),
        (
            "unread_below_floor",
            json!(report.unread_below_floor.len()),
            "objects below the floor that cannot be read",
        ),
    ];
    for d in &report.damaged_segments {
        eprintln!(
            "walctl: damaged segment of region {} in {}: {}",
            d.region, d.key, d.error
        );
    }
    if as_json {
        let line: Vec<(&str, Value)> = fields.iter().map(|(n, v, _)| (*n, v.clone())).collect();
        emit(&line)?;
    } else {
        let mut out = std::io::stdout().lock();
        for (name, value, what) in &fields {
            writeln!(out, "{name:<20} {:>14}  {what}", value.to_string())?;
        }
        out.flush()?;
    }
    blocked_by(blocked)
}
