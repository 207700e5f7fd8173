//! Node <-> coordinator/frontend RPC: TCP with length-delimited frames
//! (`LengthDelimitedCodec`) carrying serde_json messages, requests multiplexed by id.
//!
//! Small on purpose: the protocol's safety is the WAL's and the fence's; what this layer
//! must tell honestly is whether a request may have been acted on. A request whose
//! connection broke before its answer arrived is [`CallError::Lost`] (an append then is
//! ambiguous and is resolved, never simply sent again); one never queued on a live
//! connection is [`CallError::NotSent`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// Frames larger than this are refused (a request or answer is small).
const MAX_FRAME: usize = 1 << 20;
/// Requests one connection may have in flight at the server; more wait to be read.
const SERVER_IN_FLIGHT: usize = 4096;
/// Frames queued for a connection's writer.
const QUEUE: usize = 1024;
/// How long a pool's call waits for its answer: above a node's own bound on a control
/// request (30 s) and a catch-up's.
pub const CALL_WITHIN: std::time::Duration = std::time::Duration::from_secs(90);

/// A piece for `acquire_with_pieces`: prefix, first id, last id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PieceMsg {
    /// The prefix of the log holding it.
    pub prefix: String,
    /// Its first id.
    pub first_id: u64,
    /// Its last id.
    pub last_id: u64,
}

impl From<object_store_wal::Piece> for PieceMsg {
    fn from(p: object_store_wal::Piece) -> Self {
        PieceMsg {
            prefix: p.prefix,
            first_id: p.first_id,
            last_id: p.last_id,
        }
    }
}

impl From<PieceMsg> for object_store_wal::Piece {
    fn from(p: PieceMsg) -> Self {
        object_store_wal::Piece {
            prefix: p.prefix,
            first_id: p.first_id,
            last_id: p.last_id,
        }
    }
}

/// A request to a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// Append one entry to `region`.
    Append {
        /// The region.
        region: u64,
        /// The entry.
        payload: String,
    },
    /// Release `region` (a move's source).
    Release {
        /// The region.
        region: u64,
    },
    /// Acquire `region` above `above`, recording `pieces`.
    Acquire {
        /// The region.
        region: u64,
        /// Ids go above this.
        above: u64,
        /// Earlier owners' pieces not flushed.
        pieces: Vec<PieceMsg>,
    },
    /// Catch `region` up from `source`'s log, ids `from..=through`, through the WAL (the
    /// release's object `sequence` when known); answers the last id read.
    CatchUp {
        /// The source prefix.
        source: String,
        /// The region.
        region: u64,
        /// The first id.
        from: u64,
        /// The last id.
        through: u64,
        /// The object that recorded the release, if known.
        sequence: Option<u64>,
    },
    /// `obsolete(region, id)`: the entries through `id` are safe elsewhere.
    Obsolete {
        /// The region.
        region: u64,
        /// The last id flushed.
        id: u64,
    },
    /// The region's last id on the node's chain.
    LastEntryId {
        /// The region.
        region: u64,
    },
    /// Resolve an append that failed `MayBeDurable` in epoch `epoch`: once the node's
    /// epoch is past it, whether the entry is on the chain, and its id.
    Resolve {
        /// The region.
        region: u64,
        /// The entry.
        payload: String,
        /// The epoch that ended, if the error named it.
        epoch: Option<u64>,
    },
}

/// Why a node refused or failed a request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Failure {
    /// The node released the region: its route switches (or switched) away.
    NotOwner,
    /// Never written: safe to send again (elsewhere, or here after a while).
    NotWritten {
        /// The node's error.
        message: String,
    },
    /// A create holding it was sent and its outcome is unknown: resolve it.
    MayBeDurable {
        /// The epoch that ended, if the error named it.
        epoch: Option<u64>,
        /// The node's error.
        message: String,
    },
    /// Anything else (a control request that failed).
    Other {
        /// The node's error.
        message: String,
    },
}

/// A node's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    /// Appended with this id.
    Appended {
        /// The entry's id.
        id: u64,
    },
    /// The release's answer.
    Released {
        /// The region's largest id on the chain.
        last_id: Option<u64>,
        /// The next owner acquires above this.
        acquire_above: u64,
        /// The object that recorded the release.
        sequence: Option<u64>,
    },
    /// Done (acquire, obsolete).
    Done,
    /// A catch-up's end.
    CaughtUp {
        /// The last id read.
        last: Option<u64>,
        /// Entries read.
        count: u64,
    },
    /// An id, or none (last entry id, resolve).
    Id {
        /// The id.
        id: Option<u64>,
    },
    /// Refused or failed.
    Failed(Failure),
}

/// An answer's frame: the answer with its request's id.
#[derive(Debug, Serialize, Deserialize)]
struct Frame<T> {
    id: u64,
    body: T,
}

/// A request's frame: the request with its id and the name of the node it is meant
/// for. A node answers only the frames that name it: a node started again on the
/// address of one that died (an ephemeral port taken again) refuses what was meant
/// for its predecessor, which it never acquired anything for.
#[derive(Debug, Serialize, Deserialize)]
struct RequestFrame<S, T> {
    id: u64,
    to: S,
    body: T,
}

/// Where a request goes: a node's name and its address (a live node's record, a route).
pub trait Target {
    /// The node's name (`node-<slot>-<generation>`).
    fn name(&self) -> &str;
    /// Its RPC address.
    fn addr(&self) -> &str;
}

impl Target for crate::keys::NodeRecord {
    fn name(&self) -> &str {
        &self.name
    }
    fn addr(&self) -> &str {
        &self.addr
    }
}

impl Target for crate::keys::Route {
    fn name(&self) -> &str {
        &self.name
    }
    fn addr(&self) -> &str {
        &self.addr
    }
}

/// What a call can fail with besides the node's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Never handed to a live connection: the node never saw it.
    #[error("not sent: the connection is closed")]
    NotSent,
    /// The connection broke while the request was in flight: it may have been acted on.
    #[error("the connection broke with the request in flight")]
    Lost,
}

/// A handler of requests.
pub type Handler =
    Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync>;

/// Serves `listener` as node `name` with `handler` until `stop` resolves; every
/// connection's tasks end with it. A request naming another node is refused
/// ([`Failure::NotWritten`]) without reaching `handler`.
pub async fn serve(
    listener: TcpListener,
    name: String,
    handler: Handler,
    stop: impl Future<Output = ()>,
) {
    let name: Arc<str> = Arc::from(name);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                connections.spawn(connection(stream, name.clone(), handler.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// One connection: each request in a task of its own (at most [`SERVER_IN_FLIGHT`]),
/// answers written in the order they are ready.
async fn connection(stream: TcpStream, name: Arc<str>, handler: Handler) {
    let (mut sink, mut frames) = Framed::new(stream, codec()).split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
    let writer = async move {
        while let Some(frame) = rx.recv().await {
            if sink.send(frame).await.is_err() {
                break;
            }
        }
    };
    let limit = Arc::new(Semaphore::new(SERVER_IN_FLIGHT));
    let reader = async move {
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(Ok(bytes)) = frames.next().await {
            let Ok(frame) = serde_json::from_slice::<RequestFrame<String, Request>>(&bytes) else {
                break;
            };
            if frame.to != *name {
                let body = Reply::Failed(Failure::NotWritten {
                    message: format!(
                        "this is {name}, not {}: the request was not acted on",
                        frame.to
                    ),
                });
                if let Ok(out) = serde_json::to_vec(&Frame { id: frame.id, body }) {
                    if tx.send(Bytes::from(out)).await.is_err() {
                        break;
                    }
                }
                continue;
            }
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let (handler, tx) = (handler.clone(), tx.clone());
            tasks.spawn(async move {
                let body = handler(frame.body).await;
                if let Ok(out) = serde_json::to_vec(&Frame { id: frame.id, body }) {
                    let _ = tx.send(Bytes::from(out)).await;
                }
                drop(permit);
            });
            while tasks.try_join_next().is_some() {}
        }
        // The peer is gone: the answers of the requests under way go nowhere, but the
        // requests themselves finish (an append's outcome is the WAL's either way).
        while tasks.join_next().await.is_some() {}
    };
    tokio::join!(writer, reader);
}

type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>>;

/// A client connection to one node; cheap to clone. Its tasks end when the connection
/// breaks or every clone is dropped.
#[derive(Clone)]
pub struct Conn {
    tx: mpsc::Sender<(u64, Bytes)>,
    /// `None` once the connection broke: every waiting call is then `Lost`.
    pending: Pending,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl Conn {
    /// Connects to `addr`.
    pub async fn connect(addr: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        let (mut sink, mut frames) = Framed::new(stream, codec()).split();
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let (tx, mut rx) = mpsc::channel::<(u64, Bytes)>(QUEUE);
        let broken = {
            let pending = pending.clone();
            move || {
                if let Ok(mut p) = pending.lock() {
                    // Dropping the senders fails every waiting call `Lost`.
                    *p = None;
                }
            }
        };
        let on_write_error = broken.clone();
        tokio::spawn(async move {
            while let Some((_, frame)) = rx.recv().await {
                if sink.send(frame).await.is_err() {
                    on_write_error();
                    break;
                }
            }
        });
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            while let Some(Ok(bytes)) = frames.next().await {
                let Ok(frame) = serde_json::from_slice::<Frame<Reply>>(&bytes) else {
                    break;
                };
                let waiting = reader_pending
                    .lock()
                    .ok()
                    .and_then(|mut p| p.as_mut().and_then(|p| p.remove(&frame.id)));
                if let Some(waiting) = waiting {
                    let _ = waiting.send(frame.body);
                }
            }
            broken();
        });
        Ok(Conn {
            tx,
            pending,
            next: Arc::default(),
        })
    }

    /// Whether the connection broke.
    pub fn is_broken(&self) -> bool {
        self.pending.lock().map_or(true, |p| p.is_none()) || self.tx.is_closed()
    }

    /// Sends `request` to node `to` (the node this connection's address should be)
    /// and waits for its answer. A call dropped before its answer (a timeout) takes its
    /// entry out of the connection's pending calls.
    pub async fn call(&self, to: &str, request: &Request) -> Result<Reply, CallError> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let frame = serde_json::to_vec(&RequestFrame {
            id,
            to,
            body: request,
        })
        .map_err(|_| CallError::NotSent)?;
        let (reply_tx, reply_rx) = oneshot::channel();
        {
            let mut pending = self.pending.lock().map_err(|_| CallError::NotSent)?;
            let Some(pending) = pending.as_mut() else {
                return Err(CallError::NotSent);
            };
            pending.insert(id, reply_tx);
        }
        // From here on, however the call ends (answered, failed, or dropped by a
        // caller's timeout), its entry goes (a no-op once the reader took it).
        let _entry = PendingEntry {
            pending: &self.pending,
            id,
        };
        if self.tx.send((id, Bytes::from(frame))).await.is_err() {
            // The writer ended before taking it: never on the wire.
            return Err(CallError::NotSent);
        }
        reply_rx.await.map_err(|_| CallError::Lost)
    }

    /// Calls waiting for their answers (for the tests).
    #[cfg(test)]
    fn pending_calls(&self) -> usize {
        self.pending
            .lock()
            .map_or(0, |p| p.as_ref().map_or(0, HashMap::len))
    }
}

/// A call's entry in its connection's pending calls, removed when the call ends.
struct PendingEntry<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for PendingEntry<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            if let Some(p) = p.as_mut() {
                p.remove(&self.id);
            }
        }
    }
}

/// Connections by address, made on first use and again once broken.
#[derive(Default)]
pub struct Pool {
    conns: tokio::sync::Mutex<HashMap<String, Conn>>,
}

impl Pool {
    /// A live connection to `addr`.
    pub async fn get(&self, addr: &str) -> std::io::Result<Conn> {
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(addr) {
            if !conn.is_broken() {
                return Ok(conn.clone());
            }
        }
        let conn = tokio::time::timeout(std::time::Duration::from_secs(2), Conn::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        conns.insert(addr.to_string(), conn.clone());
        Ok(conn)
    }

    /// Calls `request` on node `to` at its address: a connection that cannot be made
    /// is `NotSent`; an answer that does not come within [`CALL_WITHIN`] is `Lost` (a
    /// node paused for good, say). A node that is not `to` answers
    /// [`Failure::NotWritten`].
    pub async fn call<T: Target + ?Sized>(
        &self,
        to: &T,
        request: &Request,
    ) -> Result<Reply, CallError> {
        let conn = self.get(to.addr()).await.map_err(|_| CallError::NotSent)?;
        tokio::time::timeout(CALL_WITHIN, conn.call(to.name(), request))
            .await
            .unwrap_or(Err(CallError::Lost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name the test servers serve as.
    const NODE: &str = "node-0-1";

    /// A server on a loopback port with `handler`, as node [`NODE`], stopped when the
    /// sender is dropped or sent to.
    async fn server(
        handler: Handler,
    ) -> (String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, NODE.to_string(), handler, async move {
            let _ = stopped.await;
        }));
        (addr, stop, task)
    }

    #[tokio::test]
    async fn answers_come_back_to_their_callers() {
        let handler: Handler = Arc::new(|request| {
            Box::pin(async move {
                match request {
                    Request::Append { region, .. } => Reply::Appended { id: region * 10 },
                    _ => Reply::Done,
                }
            })
        });
        let (addr, _stop, _task) = server(handler).await;
        let conn = Conn::connect(&addr).await.expect("connect");
        let calls = (0..50u64).map(|region| {
            let conn = conn.clone();
            async move {
                let request = Request::Append {
                    region,
                    payload: format!("{region}:0"),
                };
                (region, conn.call(NODE, &request).await)
            }
        });
        for (region, reply) in futures::future::join_all(calls).await {
            match reply {
                Ok(Reply::Appended { id }) => assert_eq!(id, region * 10),
                other => panic!("region {region}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_request_in_flight_when_the_connection_breaks_is_lost_and_later_ones_not_sent() {
        // The handler tells the test it holds the request, then never answers.
        let (held_tx, held_rx) = mpsc::channel::<()>(1);
        let handler: Handler = Arc::new(move |_| {
            let held = held_tx.clone();
            Box::pin(async move {
                let _ = held.send(()).await;
                futures::future::pending::<Reply>().await
            })
        });
        let (addr, stop, task) = server(handler).await;
        let conn = Conn::connect(&addr).await.expect("connect");
        let request = Request::LastEntryId { region: 1 };
        let call = tokio::spawn({
            let conn = conn.clone();
            let request = request.clone();
            async move { conn.call(NODE, &request).await }
        });
        let mut held_rx = held_rx;
        held_rx.recv().await.expect("the server holds the request");
        let _ = stop.send(());
        task.await.expect("the server stopped");
        assert_eq!(
            call.await.expect("the call ended").err(),
            Some(CallError::Lost)
        );
        assert!(conn.is_broken());
        assert_eq!(
            conn.call(NODE, &request).await.err(),
            Some(CallError::NotSent)
        );
    }

    #[tokio::test]
    async fn a_pool_calls_nothing_it_cannot_reach() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let pool = Pool::default();
        let to = crate::keys::NodeRecord {
            name: NODE.into(),
            prefix: "run/node-0-1".into(),
            addr,
            slot: 0,
        };
        let reply = pool.call(&to, &Request::LastEntryId { region: 1 }).await;
        assert_eq!(reply.err(), Some(CallError::NotSent));
    }

    #[tokio::test]
    async fn a_request_for_another_node_is_refused_not_written_and_never_handled() {
        let handled = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handler: Handler = {
            let handled = handled.clone();
            Arc::new(move |_| {
                handled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async { Reply::Appended { id: 1 } })
            })
        };
        let (addr, _stop, _task) = server(handler).await;
        let conn = Conn::connect(&addr).await.expect("connect");
        let request = Request::Append {
            region: 1,
            payload: "1:0".into(),
        };
        // The node that was on this address before (an earlier generation).
        match conn.call("node-0-0", &request).await {
            Ok(Reply::Failed(Failure::NotWritten { message })) => {
                assert!(message.contains(NODE), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(handled.load(std::sync::atomic::Ordering::SeqCst), 0);
        // The connection goes on serving the requests meant for it.
        assert!(matches!(
            conn.call(NODE, &request).await,
            Ok(Reply::Appended { id: 1 })
        ));
        assert_eq!(handled.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_call_that_times_out_leaves_no_pending_entry() {
        let handler: Handler = Arc::new(|_| Box::pin(futures::future::pending::<Reply>()));
        let (addr, _stop, _task) = server(handler).await;
        let conn = Conn::connect(&addr).await.expect("connect");
        let request = Request::LastEntryId { region: 1 };
        for _ in 0..3 {
            let call = tokio::time::timeout(
                std::time::Duration::from_millis(50),
                conn.call(NODE, &request),
            );
            assert!(call.await.is_err(), "the handler never answers");
        }
        assert_eq!(conn.pending_calls(), 0);
        assert!(!conn.is_broken());
    }
}
