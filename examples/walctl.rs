//! `walctl`: inspect (and, for tests and demos, append to) a WAL prefix.
//!
//! Every result is one JSON object per line on stdout; errors go to stderr and the exit
//! code is non-zero: `2` for bad usage or input (arguments, URL, prefix, hex, an entry
//! the WAL refuses), `1` for a failure (store errors, damaged objects, fencing).
//!
//! ```text
//! walctl --url <URL> --prefix <P> chain
//! walctl --url <URL> --prefix <P> dump --region <R> [--from <ID>]
//! walctl --url <URL> --prefix <P> append --region <R> <HEX>...
//! walctl --url <URL> --prefix <P> verify
//! ```
//!
//! `chain`, `dump` and `verify` never write: they open the prefix read-only (no opening
//! object, no fencing), and refuse a `file://` directory that does not exist rather than
//! create it. `append` opens the prefix as its writer, which writes an opening object and
//! fences every earlier instance, so it must not be pointed at a prefix a live node owns.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store_wal::io::{store_from_url, WalIo};
use object_store_wal::{format, Config, Error, ObjectStoreLogStore};
use serde_json::{json, Value};

/// Inspect a write-ahead log kept in objects under a prefix of an object store.
#[derive(Debug, Parser)]
#[command(
    name = "walctl",
    after_help = "Output: one JSON object per line on stdout. Exit codes: 0 ok, 1 failure (store error, damaged object), 2 bad usage or input."
)]
struct Cli {
    /// Store URL: file:///absolute/dir, memory://, or s3://, gs://, az:// when the crate
    /// is built with the aws, gcp or azure feature.
    #[arg(long)]
    url: String,
    /// The WAL prefix inside the store (relative, no trailing '/').
    #[arg(long)]
    prefix: String,
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
    /// entries to one region, as one append, flushed at once.
    Append {
        /// The region.
        #[arg(long)]
        region: u64,
        /// The entries' payloads, in hex ("" is an empty entry).
        #[arg(required = true, value_name = "HEX")]
        entries: Vec<String>,
    },
    /// Read every object whole and verify every CRC and structural rule. Read-only.
    Verify,
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
        match e {
            Error::InvalidUrl { .. }
            | Error::InvalidPrefix { .. }
            | Error::Config { .. }
            | Error::EmptyAppend
            | Error::EntryTooLarge { .. }
            | Error::TooManyEntries { .. }
            | Error::AppendTooLarge { .. } => Failure::Usage(e.to_string()),
            e => Failure::Failed(e.to_string()),
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
    let writes = matches!(cli.command, Command::Append { .. });
    let store = open_store(&cli.url, writes)?;
    let config = Config::new(cli.prefix.clone());
    match cli.command {
        Command::Chain => chain(store, config).await,
        Command::Dump { region, from } => dump(store, config, region, from).await,
        Command::Append { region, entries } => append(store, config, region, &entries).await,
        Command::Verify => verify(store, config).await,
    }
}

/// The store of `url`. A read-only command refuses a `file://` directory that does not
/// exist, since building the store would create it.
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

async fn chain(store: Arc<dyn ObjectStore>, config: Config) -> Result<(), Failure> {
    let wal = ObjectStoreLogStore::open_read_only(store, config).await?;
    let report = wal.report();
    for o in &report.objects {
        emit(&[
            ("seq", json!(o.header.sequence)),
            ("epoch", json!(o.header.epoch)),
            ("link_seq", json!(o.header.link.sequence)),
            ("link_epoch", json!(o.header.link.epoch)),
            ("floor", json!(o.header.floor)),
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
    Ok(())
}

async fn dump(
    store: Arc<dyn ObjectStore>,
    config: Config,
    region: u64,
    from: u64,
) -> Result<(), Failure> {
    let wal = ObjectStoreLogStore::open_read_only(store, config).await?;
    let mut entries = wal.read(region, from);
    while let Some(entry) = entries.try_next().await? {
        emit(&[
            ("region", json!(entry.region)),
            ("id", json!(entry.id)),
            ("payload_hex", json!(hex::encode(&entry.payload))),
        ])?;
    }
    Ok(())
}

async fn append(
    store: Arc<dyn ObjectStore>,
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
    let mut wal = ObjectStoreLogStore::open(store, config).await?;
    let receipt = wal.append_and_flush(vec![(region, payloads)]).await?;
    let ids: Vec<u64> = receipt.parts.iter().flat_map(|p| p.ids()).collect();
    emit(&[
        ("region", json!(region)),
        ("ids", json!(ids)),
        ("seq", json!(receipt.sequence)),
    ])
}

async fn verify(store: Arc<dyn ObjectStore>, config: Config) -> Result<(), Failure> {
    config.validate()?;
    let io = WalIo::new(store, &config.prefix, config.whole_read_threshold)?;
    let listing = io.list().await?;
    for key in &listing.foreign {
        eprintln!("walctl: note: skipping {key}: not a WAL object");
    }
    let io = &io;
    let mut checks = futures::stream::iter(listing.objects.iter())
        .map(|listed| async move {
            let sequence = listed.sequence;
            let key = io.key(sequence).to_string();
            let result = match io.read_whole(sequence).await {
                Err(e) => Err(e),
                Ok(bytes) => match format::decode_object(&bytes) {
                    Err(source) => Err(Error::CorruptObject { key, source }),
                    Ok(o) if o.summary.header.sequence != sequence => {
                        Err(Error::SequenceMismatch {
                            key,
                            expected: sequence,
                            found: o.summary.header.sequence,
                        })
                    }
                    Ok(_) => Ok(()),
                },
            };
            (sequence, result)
        })
        .buffered(config.recovery_concurrency.clamp(1, 8));
    let mut damaged = 0usize;
    while let Some((sequence, result)) = checks.next().await {
        match result {
            Ok(()) => emit(&[("seq", json!(sequence)), ("ok", json!(true))])?,
            Err(e) => {
                damaged += 1;
                eprintln!("walctl: {e}");
                emit(&[
                    ("seq", json!(sequence)),
                    ("ok", json!(false)),
                    ("error", json!(e.to_string())),
                ])?;
            }
        }
    }
    if damaged > 0 {
        eprintln!(
            "walctl: {damaged} of {} objects failed verification",
            listing.objects.len()
        );
        return Err(Failure::Reported);
    }
    Ok(())
}
