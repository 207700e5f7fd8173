//! A node: one WAL on its own prefix of the bucket, served over TCP ([`crate::rpc`]),
//! alive in etcd as `nodes/<name>` bound to a lease it keeps alive.
//!
//! The node's name and prefix carry a generation (`node-<slot>-<generation>`): a node
//! that lost its lease (killed and restarted, or paused past the TTL) was or is being
//! fenced, and its prefix is final; it never writes there again but comes back as a new
//! generation on a new prefix. So when the node finds its lease lost (a keep-alive
//! answered with TTL 0, or none answered for a TTL) or its WAL fenced, it stops taking
//! requests, lets those under way end (a zombie resumes with appends in flight: each
//! either landed before the fence, on the fenced chain, or fails), and exits with
//! [`LOST`]; the driver starts the next generation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use etcd_client::PutOptions;
use futures::StreamExt;
use object_store_wal::{store_from_url, Durability, Error, Piece, Released};
use object_store_wal_actors::{spawn_wal, RestartPolicy, WalHandle};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::flush::{CaughtUp, Flusher};
use crate::keys::{Keys, NodeRecord};
use crate::rpc::{serve, Failure, Handler, Reply, Request};
use crate::{etcd_connect, now_ms, wal_config, Common};

/// The exit code of a node that lost its lease or found its prefix fenced.
pub const LOST: i32 = 3;

/// A node's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The node's slot (its process, across generations).
    #[arg(long)]
    slot: u64,
    /// The generation: a new prefix each time the slot starts again.
    #[arg(long, default_value_t = 1)]
    generation: u64,
    /// The lease's TTL, seconds: the node is detected dead this long after it stopped
    /// keeping it alive.
    #[arg(long, default_value_t = 2)]
    ttl_secs: i64,
}

/// How long a control request (release, acquire, obsolete, resolve) retries at most.
const CONTROL_WITHIN: Duration = Duration::from_secs(30);

/// The node's name for `slot` and `generation`.
pub fn name(slot: u64, generation: u64) -> String {
    format!("node-{slot}-{generation}")
}

/// Runs a node until it is told to stop (SIGTERM: exit 0) or loses its lease ([`LOST`]).
pub async fn main(args: Args) -> anyhow::Result<i32> {
    let keys = Keys::new(&args.common.run_id);
    let name = name(args.slot, args.generation);
    let prefix = format!("{}/{name}", args.common.run_id);
    let store = store_from_url(&args.common.store)?;
    let bucket = store.clone();
    let restarts = RestartPolicy::new(
        10_000,
        Duration::from_secs(60),
        Duration::from_millis(1),
        Duration::from_millis(20),
    );
    let (wal, join) = spawn_wal(store, wal_config(&prefix, &args.common), restarts).await?;
    wal.ready().await?;
    let flusher = Arc::new(Flusher::new(
        wal.clone(),
        bucket,
        &args.common.run_id,
        &name,
    ));
    // The flushes, every `--flush-ms`, one at a time; the task ends with the node.
    let flushing = (args.common.flush_ms > 0).then(|| {
        let flusher = flusher.clone();
        let every = Duration::from_millis(args.common.flush_ms);
        let name = name.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut flushes = 0u64;
            loop {
                tick.tick().await;
                let started = Instant::now();
                match flusher.flush().await {
                    Ok(entries) => {
                        flushes += 1;
                        // Now and then, what the flushes keep the live chain to.
                        if flushes.is_multiple_of(10) {
                            if let Ok(s) = flusher.wal().stats().await {
                                eprintln!(
                                    "{name}: flush {flushes}: {entries} entries in {} ms; \
                                     floor {}, reclaimed below {}, chain objects {}, deleted {}",
                                    started.elapsed().as_millis(),
                                    s.floor,
                                    s.reclaimed_below,
                                    s.chain_objects,
                                    s.deleted
                                );
                            }
                        }
                    }
                    Err(e) => eprintln!("{name}: a flush failed: {e}"),
                }
            }
        })
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();

    let mut client = etcd_connect(&args.common.etcd).await?;
    let lease = client.lease_grant(args.ttl_secs, None).await?.id();
    let record = NodeRecord {
        name: name.clone(),
        prefix: prefix.clone(),
        addr: addr.clone(),
        slot: args.slot,
    };
    client
        .put(
            keys.node(&name),
            serde_json::to_vec(&record)?,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await?;
    eprintln!("{name}: serving {prefix} on {addr}, lease {lease:x}");

    let serving = Arc::new(AtomicBool::new(true));
    let in_flight = Arc::new(AtomicU64::new(0));
    let handler: Handler = {
        let (wal, serving, in_flight) = (wal.clone(), serving.clone(), in_flight.clone());
        let flusher = flusher.clone();
        Arc::new(move |request| {
            let (wal, serving, in_flight) = (wal.clone(), serving.clone(), in_flight.clone());
            let flusher = flusher.clone();
            Box::pin(async move {
                if !serving.load(Ordering::SeqCst) {
                    return Reply::Failed(Failure::NotWritten {
                        message: "the node stopped serving (its lease is lost)".into(),
                    });
                }
                in_flight.fetch_add(1, Ordering::SeqCst);
                let reply = handle(&wal, &flusher, request).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                reply
            })
        })
    };

    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve(listener, name.clone(), handler, async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    }));

    // The lease kept alive every third of the TTL; lost when answered with TTL 0 or
    // unanswered for a whole TTL.
    let ttl = Duration::from_secs(args.ttl_secs.max(1) as u64);
    let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_kept = Instant::now();
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let lost = loop {
        tokio::select! {
            _ = term.recv() => break false,
            _ = interrupt.recv() => break false,
            _ = tick.tick() => {
                if last_kept.elapsed() > ttl {
                    eprintln!("{name}: no keep-alive answered for {} ms", last_kept.elapsed().as_millis());
                    break true;
                }
                if let Some(e) = wal.terminal_error() {
                    eprintln!("{name}: the WAL ended: {e}");
                    break true;
                }
                let sent = Instant::now();
                if keeper.keep_alive().await.is_err() {
                    continue;
                }
                match tokio::time::timeout(ttl, answers.message()).await {
                    Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                        // The lease runs from when the keep-alive was sent.
                        last_kept = sent;
                    }
                    Ok(Ok(Some(_))) => {
                        eprintln!("{name}: the lease expired (a keep-alive answered TTL 0)");
                        break true;
                    }
                    _ => {}
                }
            }
        }
    };
    if lost {
        serving.store(false, Ordering::SeqCst);
        // The requests under way end (each answered: acknowledged, or failed).
        let waiting = Instant::now();
        while in_flight.load(Ordering::SeqCst) > 0 && waiting.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Answers reach the frontends before the connections close.
        tokio::time::sleep(Duration::from_millis(100)).await;
        eprintln!(
            "{name}: {} ms after the loss, stopping",
            waiting.elapsed().as_millis()
        );
    } else {
        serving.store(false, Ordering::SeqCst);
        let _ = client.lease_revoke(lease).await;
    }
    if let Some(flushing) = flushing {
        flushing.abort();
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    let _ = tokio::time::timeout(Duration::from_secs(10), wal.stop()).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), join).await;
    eprintln!("{name}: stopped at {}", now_ms());
    Ok(if lost { LOST } else { 0 })
}

/// A node's refusal of `e`: whether it may have been written decides what the frontend
/// does.
fn failure(e: &Error) -> Failure {
    let message = e.to_string();
    if matches!(e, Error::RegionReleased { .. }) {
        Failure::NotOwner
    } else if e.durability() == Durability::MayBeDurable {
        let epoch = match e {
            Error::EpochEnded { epoch, .. } => Some(*epoch),
            _ => None,
        };
        Failure::MayBeDurable { epoch, message }
    } else {
        Failure::NotWritten { message }
    }
}

/// Runs `op` again while it fails retryable or may be durable (the control requests are
/// idempotent), for at most [`CONTROL_WITHIN`].
async fn again<T, F, Fut>(what: &str, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let started = Instant::now();
    let mut retries = 0u64;
    loop {
        match op().await {
            Ok(v) => {
                if retries > 0 {
                    eprintln!(
                        "{what}: answered after {retries} retries, {} ms",
                        started.elapsed().as_millis()
                    );
                }
                return Ok(v);
            }
            Err(e)
                if (e.is_retryable() || e.durability() == Durability::MayBeDurable)
                    && started.elapsed() < CONTROL_WITHIN =>
            {
                if retries == 0 {
                    eprintln!("{what}: {e}; asking again");
                }
                retries += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn other(e: &Error) -> Reply {
    Reply::Failed(Failure::Other {
        message: e.to_string(),
    })
}

/// Serves one request on the node's WAL.
async fn handle(wal: &WalHandle, flusher: &Flusher, request: Request) -> Reply {
    match request {
        Request::Append { region, payload } => {
            match wal.append(region, vec![Bytes::from(payload)]).await {
                Ok(receipt) => match receipt.parts.first() {
                    Some(part) => Reply::Appended { id: part.first_id },
                    None => Reply::Failed(Failure::Other {
                        message: "a receipt without parts".into(),
                    }),
                },
                Err(e) => Reply::Failed(failure(&e)),
            }
        }
        Request::Release { region } => {
            let released = again("release", || async {
                match wal.release(region).await {
                    Ok(released) => Ok(released),
                    // Recorded by an earlier attempt whose answer was lost.
                    Err(Error::RegionReleased { released, .. }) => Ok(released),
                    Err(e) => Err(e),
                }
            })
            .await;
            match released {
                Ok(r) => {
                    flusher.released(region, r.last_id);
                    Reply::Released {
                        last_id: r.last_id,
                        acquire_above: r.acquire_above,
                        sequence: r.sequence,
                    }
                }
                Err(e) => other(&e),
            }
        }
        Request::Acquire {
            region,
            above,
            pieces,
        } => {
            let pieces: Vec<Piece> = pieces.into_iter().map(Piece::from).collect();
            let started = Instant::now();
            let acquired = again("acquire", || {
                wal.acquire_with_pieces(region, above, pieces.clone())
            })
            .await;
            if started.elapsed() > Duration::from_secs(1) {
                eprintln!(
                    "acquire of {region}: {} ms (asked at {})",
                    started.elapsed().as_millis(),
                    now_ms().saturating_sub(started.elapsed().as_millis() as u64)
                );
            }
            match acquired {
                Ok(()) => {
                    flusher.acquired(region, above, pieces);
                    Reply::Done
                }
                Err(e) => other(&e),
            }
        }
        Request::CatchUp {
            source,
            region,
            from,
            through,
            sequence,
        } => {
            let within = CONTROL_WITHIN;
            let entries = match sequence {
                Some(sequence) => {
                    let released = Released {
                        last_id: Some(through),
                        acquire_above: through,
                        sequence: Some(sequence),
                    };
                    wal.catch_up_released(&source, region, from, &released, within)
                        .await
                }
                None => wal.catch_up(&source, region, from, through, within).await,
            };
            let read = match drain(entries).await {
                Ok(read) => read,
                // The source flushed the piece and reclaimed its objects (a move's
                // catch-up that came late): its flush objects hold it.
                Err(e) => match flusher.flushed_by(&source, region, from, through).await {
                    Ok(Some(read)) => {
                        eprintln!(
                            "catch-up of {region} from {source} through {through}: \
                             from its flush objects ({e})"
                        );
                        read
                    }
                    Ok(None) => return other(&e),
                    Err(flushed) => {
                        eprintln!("catch-up of {region}: {source}'s flush objects: {flushed}");
                        return other(&e);
                    }
                },
            };
            let (last, count) = (read.last().map(|(id, _)| *id), read.len() as u64);
            // The region's catch-up, for its flush (a database replays it into its
            // memtable).
            flusher.caught_up(
                region,
                CaughtUp {
                    source,
                    from,
                    through,
                    entries: read,
                },
            );
            Reply::CaughtUp { last, count }
        }
        Request::Obsolete { region, id } => {
            match again("obsolete", || wal.obsolete(region, id)).await {
                Ok(()) => Reply::Done,
                Err(e) => other(&e),
            }
        }
        Request::LastEntryId { region } => match wal.last_entry_id(region).await {
            Ok(id) => Reply::Id { id },
            Err(e) => other(&e),
        },
        Request::Resolve {
            region,
            payload,
            epoch,
        } => resolve(wal, flusher, region, Bytes::from(payload), epoch).await,
    }
}

/// A catch-up's entries, read to its end.
async fn drain(
    entries: Result<object_store_wal_actors::EntryStream, Error>,
) -> Result<Vec<(u64, String)>, Error> {
    let mut entries = entries?;
    let mut read = Vec::new();
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        read.push((
            entry.id,
            String::from_utf8_lossy(&entry.payload).into_owned(),
        ));
    }
    Ok(read)
}

/// The live half of `examples/cluster.rs`'s resolve: once the node's epoch is past the
/// one that ended, the append's object is on the chain or never will be (the new
/// epoch claimed its key). An error named no epoch: the node's epoch now is taken as
/// the one that ended, and the answer waits for the next (late, never early).
async fn resolve(
    wal: &WalHandle,
    flusher: &Flusher,
    region: u64,
    want: Bytes,
    epoch: Option<u64>,
) -> Reply {
    let started = Instant::now();
    let mut ended = epoch;
    let mut last_error = String::new();
    while started.elapsed() < CONTROL_WITHIN * 2 {
        match wal.stats().await {
            Ok(s) => match ended {
                None => ended = Some(s.epoch),
                Some(ended) if s.epoch > ended => match find(wal, flusher, region, &want).await {
                    Ok(id) => return Reply::Id { id },
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
    Reply::Failed(Failure::Other {
        message: format!("not resolved: {last_error}"),
    })
}

/// The id of the entry `want` of `region` on `wal`'s chain, read whole, or in the
/// node's recent flushes: an entry flushed is hidden on the chain, and the flush that
/// hid it is among the recent ones before the entry is hidden.
async fn find(
    wal: &WalHandle,
    flusher: &Flusher,
    region: u64,
    want: &Bytes,
) -> Result<Option<u64>, Error> {
    let mut entries = wal.read_stream(region, 0).await?;
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        if entry.payload == *want {
            return Ok(Some(entry.id));
        }
    }
    Ok(flusher.find(region, 0, want))
}
