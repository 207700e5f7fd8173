//! `WalHandle`: async methods over the supervisor's messages, for callers that are not
//! actors, and the functions that spawn the WAL.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::Stream;
use object_store::ObjectStore;
use object_store_wal::io::WalIo;
use object_store_wal::{
    AppendParts, AppendReceipt, BootClock, Config, CreateClock, Durability, Entry, Error, Result,
};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;

use crate::messages::{AppendRequest, EntryReceiver, WalMsg, WalStats};
use crate::supervisor::{RestartPolicy, Supervisor, SupervisorArgs};

/// Why the WAL could not be spawned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The configuration is invalid.
    #[error(transparent)]
    Invalid(#[from] Error),
    /// The actor system refused the spawn.
    #[error("cannot spawn the WAL supervisor: {0}")]
    Spawn(#[from] ractor::SpawnErr),
}

/// Spawns the WAL (its supervisor, which starts recovery, the writer and readers).
/// Returns at once; appends and reads wait until recovery is done.
pub async fn spawn_wal(
    store: Arc<dyn ObjectStore>,
    config: Config,
    restarts: RestartPolicy,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    spawn_wal_with(store, config, restarts, Arc::new(BootClock), None).await
}

/// Spawns the WAL linked under `parent`, which sees it fail when it escalates (fenced,
/// damaged data, restarts exhausted).
pub async fn spawn_wal_linked(
    store: Arc<dyn ObjectStore>,
    config: Config,
    restarts: RestartPolicy,
    parent: ActorCell,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    spawn_wal_with(store, config, restarts, Arc::new(BootClock), Some(parent)).await
}

/// Spawns the WAL with every option: the clock creates are measured on (`BootClock` by
/// default; tests drive one by hand) and an optional parent supervisor.
pub async fn spawn_wal_with(
    store: Arc<dyn ObjectStore>,
    config: Config,
    restarts: RestartPolicy,
    clock: Arc<dyn CreateClock>,
    parent: Option<ActorCell>,
) -> std::result::Result<(WalHandle, JoinHandle<()>), SpawnError> {
    config.validate()?;
    let io = WalIo::for_config(store, &config)?;
    let terminal = Arc::new(Mutex::new(None));
    let args = SupervisorArgs {
        io: io.clone(),
        config,
        restarts,
        terminal: terminal.clone(),
        clock,
    };
    let (actor, join) = match parent {
        Some(p) => Actor::spawn_linked(None, Supervisor, args, p).await?,
        None => Actor::spawn(None, Supervisor, args).await?,
    };
    Ok((
        WalHandle {
            actor,
            terminal,
            io,
        },
        join,
    ))
}

/// A cloneable handle on a running WAL.
#[derive(Debug, Clone)]
pub struct WalHandle {
    actor: ActorRef<WalMsg>,
    terminal: Arc<Mutex<Option<Error>>>,
    /// The instance's store access, closed by `abort` (and `stop`) before they return.
    io: WalIo,
}

impl WalHandle {
    /// The supervisor, for actors that send [`WalMsg`]s themselves.
    pub fn actor(&self) -> &ActorRef<WalMsg> {
        &self.actor
    }

    /// The error that ended the WAL, if it ended by failing (e.g. [`Error::Fenced`]).
    pub fn terminal_error(&self) -> Option<Error> {
        self.terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn gone(&self) -> Error {
        self.terminal_error()
            .map(|e| e.with_durability(Durability::NotWritten))
            .unwrap_or(Error::Stopped {
                durability: Durability::NotWritten,
            })
    }

    async fn call<T: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<T>) -> WalMsg,
        dropped: impl FnOnce() -> Error,
    ) -> Result<T> {
        match self.actor.call(build, None).await {
            Ok(CallResult::Success(v)) => Ok(v),
            Ok(CallResult::SenderError) | Ok(CallResult::Timeout) => Err(dropped()),
            Err(_) => Err(self.gone()),
        }
    }

    /// Appends `entries` to `region`; returns once they are durable, with their ids.
    pub async fn append(&self, region: u64, entries: Vec<Bytes>) -> Result<AppendReceipt> {
        self.append_many(vec![(region, entries)]).await
    }

    /// Appends to several regions at once, atomically (one object); waits for room
    /// under backpressure.
    pub async fn append_many(&self, parts: AppendParts) -> Result<AppendReceipt> {
        self.append_inner(parts, false).await
    }

    /// Like [`append_many`](Self::append_many), but fails at once with
    /// [`Error::Backpressure`] when `max_pending_bytes` are held.
    pub async fn try_append_many(&self, parts: AppendParts) -> Result<AppendReceipt> {
        self.append_inner(parts, true).await
    }

    async fn append_inner(&self, parts: AppendParts, fail_fast: bool) -> Result<AppendReceipt> {
        // A reply port dropped unanswered means the writer failed holding the append.
        // If the WAL ended by failing (e.g. fenced), the reply port may instead have been
        // dropped with the supervisor's mailbox: say why it ended, conservatively.
        let dropped = || match self.terminal_error() {
            Some(e) => e.with_durability(Durability::MayBeDurable),
            None => Error::WriterFailed {
                durability: Durability::MayBeDurable,
            },
        };
        self.call(
            |reply| {
                WalMsg::Append(AppendRequest {
                    parts,
                    fail_fast,
                    reply,
                })
            },
            dropped,
        )
        .await?
    }

    /// The entries of `region` with id `>= from` (and above its obsolete watermark), in
    /// order, through a bounded channel.
    pub async fn read(&self, region: u64, from: u64) -> Result<EntryReceiver> {
        // A read that reached a reader just as it failed is dropped unanswered; reads
        // are idempotent, so it is sent again (to the restarted reader), a few times.
        for _ in 0..3 {
            match self
                .actor
                .call(
                    |reply| WalMsg::Read {
                        region,
                        from,
                        reply,
                    },
                    None,
                )
                .await
            {
                Ok(CallResult::Success(result)) => return result,
                Ok(_) => continue,
                Err(_) => return Err(self.gone()),
            }
        }
        Err(Error::Stopped {
            durability: Durability::NotWritten,
        })
    }

    /// Replays many regions at once, each from its own id: every object is fetched
    /// once, up to `replay_concurrency` objects at once, with at most
    /// `replay_budget_bytes` fetched and not yet handed to the channel. Each region's
    /// entries come in order; regions are interleaved.
    pub async fn replay(&self, regions: Vec<(u64, u64)>) -> Result<EntryReceiver> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(|reply| WalMsg::Replay { regions, reply }, gone)
            .await?
    }

    /// Follows `region`: its entries with id `>= from`, then every new one as it is
    /// acknowledged, in order, exactly once, across writer restarts, until the WAL stops.
    pub async fn follow(&self, region: u64, from: u64) -> Result<EntryReceiver> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(
            |reply| WalMsg::Follow {
                region,
                from,
                reply,
            },
            gone,
        )
        .await?
    }

    /// Records that every entry `region` has now is safe elsewhere (a dropped region).
    pub async fn obsolete_all(&self, region: u64) -> Result<()> {
        self.obsolete(region, u64::MAX).await
    }

    /// [`read`](Self::read) as a `Stream`.
    pub async fn read_stream(
        &self,
        region: u64,
        from: u64,
    ) -> Result<impl Stream<Item = Result<Entry>> + Send + 'static> {
        Ok(self.read(region, from).await?.into_stream())
    }

    /// Records that `region`'s entries with id `<= id` are safe elsewhere: reads hide them.
    pub async fn obsolete(&self, region: u64, id: u64) -> Result<()> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(|reply| WalMsg::Obsolete { region, id, reply }, gone)
            .await?
    }

    /// The last entry id of `region`.
    pub async fn last_entry_id(&self, region: u64) -> Result<Option<u64>> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(
            |reply| WalMsg::LastEntryId {
                region: Some(region),
                reply,
            },
            gone,
        )
        .await
    }

    /// The last entry id of the whole log.
    pub async fn last_entry_id_overall(&self) -> Result<Option<u64>> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(
            |reply| WalMsg::LastEntryId {
                region: None,
                reply,
            },
            gone,
        )
        .await
    }

    /// Counters and positions.
    pub async fn stats(&self) -> Result<WalStats> {
        let gone = || Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.call(|reply| WalMsg::Stats { reply }, gone).await
    }

    /// Stops gracefully: uploads in flight finish and are acknowledged or failed, within
    /// `max_create_duration` (those still unanswered then fail as unknown outcomes,
    /// [`Durability::MayBeDurable`]); appends not sent get [`Error::Stopped`].
    /// Idempotent: stopping a stopped WAL succeeds. Once it returns, nothing of this
    /// instance reaches the store: no request is sent, none in flight goes on, every
    /// task the WAL spawned ends (a read's after its consumer took the `Stopped` error).
    pub async fn stop(&self) -> Result<()> {
        let _ = self.actor.call(|reply| WalMsg::Stop { reply }, None).await;
        // Already closed by the supervisor, unless it had ended before.
        self.io.close();
        Ok(())
    }

    /// Ends the WAL at once, as a crash would: no upload is waited for, nothing more is
    /// answered. Uploads already sent may still land (the next open deals with them),
    /// but once this returns nothing more of this instance reaches the store: requests
    /// waiting for an answer are dropped, none is sent again, and the actors and tasks
    /// end.
    pub fn abort(&self) {
        // First: the actors below end asynchronously, and one still handling a message
        // could otherwise start a request after this returned.
        self.io.close();
        self.actor.stop_children(None);
        self.actor.kill();
    }

    /// Fault injection (feature `testing`): the writer panics.
    #[cfg(feature = "testing")]
    pub fn panic_writer(&self) {
        let _ = self.actor.cast(WalMsg::PanicWriter);
    }

    /// Fault injection (feature `testing`): the region's reader panics.
    #[cfg(feature = "testing")]
    pub fn panic_reader(&self, region: u64) {
        let _ = self.actor.cast(WalMsg::PanicReader { region });
    }
}
