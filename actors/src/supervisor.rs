//! The supervisor: the actor a node spawns (optionally linked under its own supervisor).
//!
//! It runs recovery in the recovery actor, starts the writer with the recovered catalog
//! and epoch, and a reader per region on first use. A failed reader is restarted. A
//! writer whose epoch ended, that panicked or was poisoned, is replaced by a fresh
//! recovery and a new epoch; its waiters get errors, never a silent loss. `Fenced`,
//! damaged data and exhausted restarts are escalated: the supervisor fails, which its
//! own supervisor (the node) sees, instead of looping. Restarts back off exponentially
//! and are bounded per window.
//!
//! While an open runs (or a backoff before it), appends and reads wait in the
//! supervisor's queue, at most [`MAX_QUEUED_REQUESTS`] of them: the next request is
//! refused with [`Error::Backpressure`] (`NotWritten`), never queued.
//!
//! Nothing here grows with the log's history. Region readers are kept for the
//! `Config::max_readers` regions read most recently ([`MAX_READERS`] by default); a
//! reader past that is retired (its mailbox drained first) and a later read of its
//! region starts a new one. A reader holds its region's tail (bounded by the segment
//! cache, see [`crate::reader`]); each read and follow streams from a task of its own,
//! so retiring one changes nothing a caller sees but where the region's next read finds
//! its entries. Obsolete watermarks that hide nothing any more (their
//! region has no live entry at or below them in the catalog, which drops what lies below
//! the floor) are forgotten once they could outnumber the live regions; every later entry
//! of such a region has a larger id, so forgetting one changes no read.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use object_store_wal::internal::chain::catalog::{Catalog, Retention};
use object_store_wal::internal::chain::holdings::Holdings;
use object_store_wal::internal::open::Opened;
use object_store_wal::internal::read::{replay_regions, ReplayLimits};
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::{BackpressureLimit, Config, CreateClock, Durability, Error};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::time::Instant;
use tracing::{error, info, info_span, warn};

use crate::admission::Progress;
use crate::messages::{
    stopped, AppendRequest, ControlRequest, EntryReceiver, InternalMsg, ReaderMsg, RuntimeMsg,
    WalMsg, WriterMsg, MAX_QUEUED_REQUESTS,
};
use crate::reader::{forward, ReaderActor, ReaderArgs};
use crate::reclaimer::{ReclaimerActor, ReclaimerArgs, ReclaimerMsg};
use crate::recovery::{RecoveryActor, RecoveryArgs};
use crate::sources::{CatchUp, Sources};
use crate::stats::{Counters, WalStats};
use crate::writer::{WriterActor, WriterArgs};

/// Region readers kept at most by default (`Config::max_readers`): the regions read
/// most recently. A count, not an idle time, so that what is kept does not depend on
/// timing; readers are cheap to start.
pub const MAX_READERS: usize = 64;

/// How the supervisor restarts what fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestartPolicy {
    /// Restarts allowed within `window` before the supervisor escalates.
    pub max_restarts: u32,
    /// The window restarts are counted in.
    pub window: Duration,
    /// Wait before the first restart; doubles with each restart in the window.
    pub initial_backoff: Duration,
    /// Longest wait before a restart.
    pub max_backoff: Duration,
}

impl RestartPolicy {
    /// At most `max_restarts` within `window`, waiting `initial_backoff` before the
    /// first and doubling up to `max_backoff`.
    pub fn new(
        max_restarts: u32,
        window: Duration,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        RestartPolicy {
            max_restarts,
            window,
            initial_backoff,
            max_backoff,
        }
    }
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 8,
            window: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What the supervisor starts with.
pub struct SupervisorArgs {
    /// Store access; closed when the WAL ends ([`WalIo::close`]), by the supervisor or
    /// by the handle's `abort`.
    pub io: WalIo,
    /// The WAL's configuration (validated by the spawner).
    pub config: Config,
    /// Restart bounds.
    pub restarts: RestartPolicy,
    /// Where the error that ended the WAL is left for its handles.
    pub terminal: Arc<Mutex<Option<Error>>>,
    /// Measures create durations (`max_create_duration`).
    pub clock: Arc<dyn CreateClock>,
    /// Where the ids handed out at admission stand, shared with the writers and the
    /// handles; each new epoch opens above the highest sequence handed out.
    pub progress: Progress,
}

/// Where the supervisor is in its cycle of opens.
enum Phase {
    /// The recovery actor runs the open.
    Recovering,
    /// Waiting out a backoff before the next open.
    BackingOff,
    /// A writer owns the epoch.
    Running {
        writer: ActorRef<WriterMsg>,
        epoch: u64,
    },
    Stopped,
}

/// The supervisor's state.
pub struct SupervisorState {
    io: WalIo,
    config: Config,
    restarts: RestartPolicy,
    terminal: Arc<Mutex<Option<Error>>>,
    catalog: Arc<RwLock<Catalog>>,
    counters: Arc<Counters>,
    phase: Phase,
    recovered_once: bool,
    recovery: Option<ActorCell>,
    queued: VecDeque<WalMsg>,
    readers: HashMap<u64, Reader>,
    /// Counts reads: a reader's `last_read` orders the readers by recency.
    reads: u64,
    /// The obsolete watermarks and the floors: one owner, shared with the writer.
    retention: Arc<Mutex<Retention>>,
    recent_restarts: VecDeque<Instant>,
    epoch: u64,
    orphans: u64,
    clock: Arc<dyn CreateClock>,
    commits: tokio::sync::watch::Sender<u64>,
    reclaimer: Option<ActorRef<ReclaimerMsg>>,
    progress: Progress,
    /// The source logs of catch-ups.
    sources: Sources,
}

/// A region's reader and when it last served a read (in reads counted by the supervisor).
struct Reader {
    actor: ActorRef<ReaderMsg>,
    last_read: u64,
}

/// The supervisor actor.
pub struct Supervisor;

impl Drop for SupervisorState {
    /// However the supervisor ends (stopped, failed, or killed with its parent, which
    /// skips `post_stop`), its children stop and nothing of its instance reaches the
    /// store afterwards.
    fn drop(&mut self) {
        self.io.close();
        self.stop_children();
    }
}

/// Locks state shared between the WAL's actors; a panic while it was held left it as
/// consistent as each of its calls does, so poisoning is passed over.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers a message that will not be served with `error`.
fn refuse(msg: WalMsg, error: &Error) {
    let e = error.with_durability(Durability::NotWritten);
    match msg {
        WalMsg::Append(req) => {
            let _ = req.reply.send(Err(e));
        }
        WalMsg::Read { reply, .. }
        | WalMsg::Replay { reply, .. }
        | WalMsg::Follow { reply, .. }
        | WalMsg::CatchUp { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Obsolete { reply, .. } | WalMsg::Ready { reply } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::LastEntryId { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Stop { reply } => {
            let _ = reply.send(());
        }
        WalMsg::Release { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Acquire { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Holdings { reply } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Holding { reply, .. } => {
            let _ = reply.send(Err(e));
        }
        WalMsg::Runtime(RuntimeMsg(InternalMsg::Control(req))) => req.refuse(e),
        _ => {}
    }
}

impl SupervisorState {
    async fn start_recovery(
        &mut self,
        myself: &ActorRef<WalMsg>,
    ) -> Result<(), ActorProcessingErr> {
        self.phase = Phase::Recovering;
        let args = RecoveryArgs {
            io: self.io.clone(),
            config: self.config.clone(),
            supervisor: myself.clone(),
            clock: self.clock.clone(),
            // Ids handed out by an epoch that ended are never given again.
            above: self.progress.handed_out_through(),
            above_id_base: self.progress.handed_out_id_base(),
        };
        let (recovery, _) =
            Actor::spawn_linked(None, RecoveryActor, args, myself.get_cell()).await?;
        self.recovery = Some(recovery.get_cell());
        Ok(())
    }

    async fn on_recovered(
        &mut self,
        myself: &ActorRef<WalMsg>,
        result: object_store_wal::Result<(Opened, Holdings)>,
    ) -> Result<(), ActorProcessingErr> {
        self.recovery = None;
        if !matches!(self.phase, Phase::Recovering) {
            return Ok(());
        }
        let (opened, holdings) = match result {
            Ok(opened) => opened,
            Err(e) if e.is_retryable() => {
                warn!(error = %e, "recovery failed; retrying");
                return self.schedule_restart(myself, e);
            }
            Err(e) => return self.escalate(e),
        };
        let epoch = opened.epoch;
        // Watermarks reported to this process stay true across a new epoch.
        lock(&self.retention).reopen(&opened.recovery.catalog, epoch.floor);
        let last_sequence = opened.recovery.catalog.last_sequence().unwrap_or(0);
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = opened.recovery.catalog;
        // Followers read on from the recovered chain.
        self.commits.send_replace(last_sequence);
        // The opening object is durable, and above every id handed out before (the open
        // went above them): a barrier below it has its verdict.
        self.progress
            .acknowledged(epoch.link.sequence.saturating_add(epoch.id_offset));
        if self.reclaimer.is_none() {
            self.spawn_reclaimer(myself).await?;
        }
        self.orphans = opened.recovery.report.orphans as u64;
        self.epoch = epoch.epoch;
        let args = WriterArgs {
            io: self.io.clone(),
            config: self.config.clone(),
            catalog: self.catalog.clone(),
            counters: self.counters.clone(),
            epoch,
            opening_started: opened.opening_started,
            supervisor: myself.clone(),
            clock: self.clock.clone(),
            retention: self.retention.clone(),
            commits: self.commits.clone(),
            reclaimer: self.reclaimer.clone(),
            progress: self.progress.clone(),
            holdings,
        };
        let (writer, _) = Actor::spawn_linked(None, WriterActor, args, myself.get_cell()).await?;
        info!(
            epoch = epoch.epoch,
            next_sequence = epoch.next_sequence,
            "writer started"
        );
        self.phase = Phase::Running {
            writer,
            epoch: epoch.epoch,
        };
        self.recovered_once = true;
        for msg in std::mem::take(&mut self.queued) {
            // Back through the mailbox, in their order.
            if let Err(e) = myself.cast(msg) {
                warn!(error = %e, "cannot requeue a message");
            }
        }
        Ok(())
    }

    async fn spawn_reclaimer(
        &mut self,
        myself: &ActorRef<WalMsg>,
    ) -> Result<ActorRef<ReclaimerMsg>, ActorProcessingErr> {
        let args = ReclaimerArgs {
            io: self.io.clone(),
            grace: self.config.reclaim_grace,
            counters: self.counters.clone(),
        };
        let (r, _) = Actor::spawn_linked(None, ReclaimerActor, args, myself.get_cell()).await?;
        self.reclaimer = Some(r.clone());
        Ok(r)
    }

    fn schedule_restart(
        &mut self,
        myself: &ActorRef<WalMsg>,
        cause: Error,
    ) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        let window = self.restarts.window;
        while self
            .recent_restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.recent_restarts.pop_front();
        }
        if self.recent_restarts.len() as u32 >= self.restarts.max_restarts {
            error!(error = %cause, "restarts exhausted");
            return self.escalate(cause);
        }
        self.recent_restarts.push_back(now);
        Counters::add(&self.counters.restarts, 1);
        let n = self.recent_restarts.len() as u32;
        let backoff = self
            .restarts
            .initial_backoff
            .saturating_mul(1 << (n - 1).min(16))
            .min(self.restarts.max_backoff);
        self.phase = Phase::BackingOff;
        myself.send_after(backoff, || InternalMsg::Restart.into());
        Ok(())
    }

    /// Ends the WAL with `error`: every waiting message is refused, the children stop,
    /// and the supervisor fails so that its own supervisor sees it.
    fn escalate(&mut self, error: Error) -> Result<(), ActorProcessingErr> {
        *self.terminal.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.clone());
        for msg in std::mem::take(&mut self.queued) {
            refuse(msg, &error);
        }
        self.stop_children();
        self.io.close();
        self.phase = Phase::Stopped;
        Err(Box::new(error))
    }

    fn stop_children(&mut self) {
        if let Phase::Running { writer, .. } = &self.phase {
            writer.stop(None);
        }
        if let Some(r) = self.recovery.take() {
            r.stop(None);
        }
        for (_, reader) in self.readers.drain() {
            reader.actor.stop(None);
        }
        if let Some(r) = self.reclaimer.take() {
            r.stop(None);
        }
        self.sources.stop();
    }

    /// The region's reader, started if it has none; the least recently used reader is
    /// retired first when `Config::max_readers` are running.
    async fn reader(
        &mut self,
        myself: &ActorRef<WalMsg>,
        region: u64,
    ) -> Result<ActorRef<ReaderMsg>, ActorProcessingErr> {
        self.reads += 1;
        if let Some(r) = self.readers.get_mut(&region) {
            r.last_read = self.reads;
            return Ok(r.actor.clone());
        }
        while self.readers.len() >= self.config.max_readers.max(1) {
            let Some(idle) = self
                .readers
                .iter()
                .min_by_key(|(_, r)| r.last_read)
                .map(|(region, _)| *region)
            else {
                break;
            };
            if let Some(r) = self.readers.remove(&idle) {
                // Reads already in its mailbox are served before it stops; its
                // supervision event then finds no region and is ignored.
                if r.actor.drain().is_err() {
                    r.actor.stop(None);
                }
            }
        }
        let args = ReaderArgs {
            region,
            io: self.io.clone(),
            config: self.config.clone(),
            catalog: self.catalog.clone(),
        };
        let (reader, _) = Actor::spawn_linked(None, ReaderActor, args, myself.get_cell()).await?;
        let entry = Reader {
            actor: reader.clone(),
            last_read: self.reads,
        };
        self.readers.insert(region, entry);
        Ok(reader)
    }

    /// Queues a request until an open finishes, or refuses it at the bound.
    fn enqueue(&mut self, msg: WalMsg) {
        if self.queued.len() >= MAX_QUEUED_REQUESTS {
            let error = Error::Backpressure {
                limit: BackpressureLimit::QueuedRequests,
                held: self.queued.len() as u64,
                max: MAX_QUEUED_REQUESTS as u64,
            };
            if matches!(msg, WalMsg::Append(_)) {
                Counters::add(&self.counters.failed_appends, 1);
            }
            refuse(msg, &error);
            return;
        }
        self.queued.push_back(msg);
    }

    /// The first id of `region` a read from `from` may see: ids at or below the region's
    /// obsolete watermark are hidden.
    fn visible_from(&self, region: u64, from: u64) -> u64 {
        match lock(&self.retention).watermark(region) {
            Some(w) => from.max(w.saturating_add(1)),
            None => from,
        }
    }

    /// An append goes to the writer, or waits for it while an open runs.
    fn on_append(&mut self, req: AppendRequest) {
        match &self.phase {
            Phase::Running { writer, .. } => {
                // The writer is gone; its supervision event restarts it.
                if let Err(ractor::MessagingErr::SendErr(WriterMsg::Append(req))) =
                    writer.cast(WriterMsg::Append(req))
                {
                    self.enqueue(WalMsg::Append(req));
                }
            }
            Phase::Recovering | Phase::BackingOff => self.enqueue(WalMsg::Append(req)),
            Phase::Stopped => refuse(WalMsg::Append(req), &stopped()),
        }
    }

    /// A catch-up reads its source log, opened on first use; refused once stopped.
    fn on_catch_up(&mut self, myself: &ActorRef<WalMsg>, catch_up: CatchUp) {
        if matches!(self.phase, Phase::Stopped) {
            let _ = catch_up.reply.send(Err(stopped()));
            return;
        }
        self.sources
            .catch_up(catch_up, &self.io, &self.config, myself);
    }

    /// While a source log is open, a sweep for idle ones comes every few seconds
    /// (`sources::sweep_every`; none once stopped: the sources are gone, and the
    /// sweep's task is aborted).
    fn schedule_source_sweep(&mut self, myself: &ActorRef<WalMsg>) {
        if matches!(self.phase, Phase::Stopped) {
            return;
        }
        let myself = myself.clone();
        self.sources.schedule_sweep(move || {
            // A supervisor that stopped meanwhile drops it.
            let _ = myself.cast(InternalMsg::SweepSources.into());
        });
    }

    /// A release, an acquire or a question of holdings goes to the writer, or waits for
    /// it while an open runs (answered then from the recovered chain).
    fn on_control(&mut self, req: ControlRequest) {
        match &self.phase {
            Phase::Running { writer, .. } => {
                // The writer is gone; its supervision event restarts it.
                if let Err(ractor::MessagingErr::SendErr(WriterMsg::Control(req))) =
                    writer.cast(WriterMsg::Control(req))
                {
                    self.enqueue(InternalMsg::Control(req).into());
                }
            }
            Phase::Recovering | Phase::BackingOff => self.enqueue(InternalMsg::Control(req).into()),
            Phase::Stopped => req.refuse(stopped()),
        }
    }

    /// Reads, watermarks and positions need the recovered catalog: they wait for the
    /// first recovery, and are refused once the WAL stopped.
    async fn on_catalog_request(
        &mut self,
        myself: &ActorRef<WalMsg>,
        message: WalMsg,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(self.phase, Phase::Stopped) {
            refuse(message, &stopped());
            return Ok(());
        }
        if !self.recovered_once {
            self.enqueue(message);
            return Ok(());
        }
        match message {
            WalMsg::Read {
                region,
                from,
                reply,
            } => self.on_read(myself, region, from, reply).await?,
            WalMsg::Replay { regions, reply } => {
                Counters::add(&self.counters.reads, 1);
                let from: HashMap<u64, u64> = regions
                    .into_iter()
                    .map(|(region, from)| (region, self.visible_from(region, from)))
                    .collect();
                let entries = replay_regions(
                    self.io.clone(),
                    self.catalog.clone(),
                    from,
                    ReplayLimits::of(&self.config),
                    self.config.corrupt_segment_policy,
                );
                let _ = reply.send(Ok(forward(entries, info_span!("replay"))));
            }
            WalMsg::Follow {
                region,
                from,
                reply,
            } => {
                let from = self.visible_from(region, from);
                Counters::add(&self.counters.reads, 1);
                let commits = self.commits.subscribe();
                let follow = ReaderMsg::Follow {
                    from,
                    commits,
                    reply,
                };
                self.hand_to_reader(myself, region, follow).await?;
            }
            WalMsg::Obsolete { region, id, reply } => {
                self.on_obsolete(region, id);
                // Earlier pieces flushed past are forgotten (by the writer, which keeps
                // them; a writer between epochs misses it, and a later obsolete drops
                // them).
                if let Phase::Running { writer, .. } = &self.phase {
                    let flushed = ControlRequest::Flushed { region, id };
                    let _ = writer.cast(WriterMsg::Control(flushed));
                }
                let _ = reply.send(Ok(()));
            }
            WalMsg::Ready { reply } => {
                let _ = reply.send(Ok(()));
            }
            WalMsg::LastEntryId { region, reply } => {
                let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
                let id = match region {
                    Some(r) => catalog.last_entry_id(r),
                    None => catalog.last_entry_id_overall(),
                };
                let _ = reply.send(Ok(id));
            }
            other => refuse(other, &stopped()),
        }
        Ok(())
    }

    /// A read goes to the region's reader, started on first use.
    async fn on_read(
        &mut self,
        myself: &ActorRef<WalMsg>,
        region: u64,
        from: u64,
        reply: RpcReplyPort<object_store_wal::Result<EntryReceiver>>,
    ) -> Result<(), ActorProcessingErr> {
        let from = self.visible_from(region, from);
        Counters::add(&self.counters.reads, 1);
        self.hand_to_reader(myself, region, ReaderMsg::Read { from, reply })
            .await
    }

    /// Hands a read or follow to the region's reader, started on first use.
    async fn hand_to_reader(
        &mut self,
        myself: &ActorRef<WalMsg>,
        region: u64,
        message: ReaderMsg,
    ) -> Result<(), ActorProcessingErr> {
        let reader = self.reader(myself, region).await?;
        if let Err(ractor::MessagingErr::SendErr(message)) = reader.cast(message) {
            // The reader died (or was retired) before its supervision event arrived:
            // start a fresh one and hand it the request.
            self.readers.remove(&region);
            let reader = self.reader(myself, region).await?;
            if let Err(ractor::MessagingErr::SendErr(message)) = reader.cast(message) {
                message.refuse(stopped());
            }
        }
        Ok(())
    }

    /// Raises the region's watermark; only ids on the chain can be obsolete
    /// (`u64::MAX` means all of them). The writer reads it at its next seal.
    fn on_obsolete(&mut self, region: u64, id: u64) {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        lock(&self.retention).obsolete(&catalog, region, id);
    }

    /// Stops gracefully: in-flight uploads finish and are acknowledged or failed (the
    /// writer waits at most `max_create_duration`, so this mailbox is never blocked
    /// longer), every waiting message is refused, the children stop, the store access
    /// closes.
    async fn on_stop(&mut self, myself: &ActorRef<WalMsg>, reply: RpcReplyPort<()>) {
        if let Phase::Running { writer, .. } = &self.phase {
            let _ = writer.call(|r| WriterMsg::Stop { reply: r }, None).await;
        }
        for msg in std::mem::take(&mut self.queued) {
            refuse(msg, &stopped());
        }
        self.stop_children();
        // The children stop asynchronously: closing the store access is what makes
        // "nothing more reaches the store" true when the reply is sent.
        self.io.close();
        self.phase = Phase::Stopped;
        let _ = reply.send(());
        // Drain rather than stop: messages already in the mailbox are answered (refused
        // with `Stopped`, not dropped, which a caller would read as a failed writer),
        // and later sends fail at once.
        let _ = myself.drain();
    }

    /// The current writer's epoch ended: a new open after a backoff, or the end of the
    /// WAL when it was fenced or the store refused it access (a new open could only
    /// meet the same refusal).
    fn on_writer_ended(
        &mut self,
        myself: &ActorRef<WalMsg>,
        epoch: u64,
        error: Error,
    ) -> Result<(), ActorProcessingErr> {
        let current = matches!(&self.phase, Phase::Running { epoch: e, .. } if *e == epoch);
        if !current {
            return Ok(());
        }
        if let Phase::Running { writer, .. } = &self.phase {
            writer.stop(None);
        }
        self.phase = Phase::BackingOff;
        match &error {
            Error::Fenced { .. } => {
                error!(error = %error, "fenced by a newer instance");
                self.escalate(error)
            }
            Error::AccessDenied { .. } => {
                error!(error = %error, "the store refused access; fix its permissions");
                self.escalate(error)
            }
            _ => self.schedule_restart(myself, error),
        }
    }

    fn stats(&self) -> WalStats {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        let requests = self.io.request_stats();
        WalStats {
            epoch: self.epoch,
            chain_objects: catalog.object_count() as u64,
            catalog_regions: catalog.region_count() as u64,
            readers: self.readers.len() as u64,
            queued: self.queued.len() as u64,
            watermarks: lock(&self.retention).watermark_count() as u64,
            orphans: self.orphans,
            last_entry_id: catalog.last_entry_id_overall(),
            hedged: requests.hedged.load(Ordering::Relaxed),
            hedge_wins: requests.hedge_wins.load(Ordering::Relaxed),
            timeouts: requests.timeouts.load(Ordering::Relaxed),
            damaged_segments: requests.damaged_segments.load(Ordering::Relaxed),
            creates_found_landed: requests.creates_found_landed.load(Ordering::Relaxed),
            ..WalStats::from_counters(&self.counters)
        }
    }
}

impl Actor for Supervisor {
    type Msg = WalMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let counters = Arc::new(Counters::new(args.io.metrics()));
        let sources = Sources::new(args.config.source_idle_close);
        let mut state = SupervisorState {
            io: args.io,
            config: args.config,
            restarts: args.restarts,
            terminal: args.terminal,
            catalog: Arc::new(RwLock::new(Catalog::new())),
            counters,
            phase: Phase::Recovering,
            recovered_once: false,
            recovery: None,
            queued: VecDeque::new(),
            readers: HashMap::new(),
            reads: 0,
            retention: Arc::new(Mutex::new(Retention::default())),
            recent_restarts: VecDeque::new(),
            epoch: 0,
            orphans: 0,
            clock: args.clock,
            commits: tokio::sync::watch::Sender::new(0),
            reclaimer: None,
            progress: args.progress,
            sources,
        };
        state.start_recovery(&myself).await?;
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.stop_children();
        let error = state
            .terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(stopped);
        for msg in std::mem::take(&mut state.queued) {
            refuse(msg, &error);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WalMsg::Append(req) => state.on_append(req),
            msg @ (WalMsg::Read { .. }
            | WalMsg::Replay { .. }
            | WalMsg::Follow { .. }
            | WalMsg::Obsolete { .. }
            | WalMsg::LastEntryId { .. }
            | WalMsg::Ready { .. }) => state.on_catalog_request(&myself, msg).await?,
            WalMsg::Stats { reply } => {
                let _ = reply.send(state.stats());
            }
            WalMsg::Stop { reply } => state.on_stop(&myself, reply).await,
            WalMsg::Release { region, reply } => {
                state.on_control(ControlRequest::Release { region, reply })
            }
            WalMsg::Acquire {
                region,
                last_id,
                pieces,
                reply,
            } => state.on_control(ControlRequest::Acquire {
                region,
                last_id,
                pieces,
                reply,
            }),
            WalMsg::Holdings { reply } => state.on_control(ControlRequest::Holdings { reply }),
            WalMsg::Holding { region, reply } => {
                state.on_control(ControlRequest::Holding { region, reply })
            }
            WalMsg::CatchUp {
                source,
                region,
                from,
                through,
                released_in,
                within,
                reply,
            } => {
                let catch_up = CatchUp {
                    source,
                    region,
                    from,
                    through,
                    released_in,
                    deadline: object_store_wal::internal::read::deadline_after(within),
                    reply,
                };
                state.on_catch_up(&myself, catch_up);
            }
            WalMsg::Runtime(RuntimeMsg(msg)) => match msg {
                InternalMsg::Recovered(result) => state.on_recovered(&myself, *result).await?,
                InternalMsg::WriterEnded { epoch, error } => {
                    state.on_writer_ended(&myself, epoch, error)?
                }
                InternalMsg::Restart => {
                    if matches!(state.phase, Phase::BackingOff) && state.recovery.is_none() {
                        state.start_recovery(&myself).await?;
                    }
                }
                InternalMsg::Control(req) => state.on_control(req),
                InternalMsg::SourceOpened { source, result } => {
                    state.sources.opened(source, result);
                    state.schedule_source_sweep(&myself);
                }
                InternalMsg::SweepSources => {
                    state.sources.sweep(Instant::now());
                    state.schedule_source_sweep(&myself);
                }
            },
            #[cfg(feature = "testing")]
            WalMsg::PanicWriter => {
                if let Phase::Running { writer, .. } = &state.phase {
                    let _ = writer.cast(WriterMsg::Panic);
                }
            }
            #[cfg(feature = "testing")]
            WalMsg::PanicReader { region } => {
                let reader = state.reader(&myself, region).await?;
                let _ = reader.cast(ReaderMsg::Panic);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorFailed(cell, e) => (cell, Some(e.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        let id = cell.get_id();
        if let Phase::Running { writer, epoch } = &state.phase {
            if writer.get_id() == id {
                let why = failure.unwrap_or_else(|| "stopped".into());
                error!(epoch, why = %why, "writer failed; opening a new epoch");
                state.phase = Phase::BackingOff;
                let cause = Error::WriterFailed {
                    durability: Durability::MayBeDurable,
                };
                // Its waiters' ports were dropped (`WriterFailed`); barriers learn it here.
                state.progress.failed_unacknowledged(&cause);
                return state.schedule_restart(&myself, cause);
            }
        }
        if state.recovery.as_ref().is_some_and(|r| r.get_id() == id) {
            state.recovery = None;
            if let Some(why) = failure {
                warn!(why = %why, "recovery failed");
                let cause = Error::OpenPanicked { reason: why };
                return state.schedule_restart(&myself, cause);
            }
            return Ok(());
        }
        if state.reclaimer.as_ref().is_some_and(|r| r.get_id() == id) {
            state.reclaimer = None;
            if failure.is_some() && !matches!(state.phase, Phase::Stopped) {
                warn!("reclaimer failed; restarting it");
                let r = state.spawn_reclaimer(&myself).await?;
                // It starts over from the last floor acknowledged, with a fresh grace.
                let floor = lock(&state.retention).acknowledged_floor();
                let _ = r.cast(ReclaimerMsg::Floor(floor));
            }
            return Ok(());
        }
        let region = state
            .readers
            .iter()
            .find(|(_, r)| r.actor.get_id() == id)
            .map(|(region, _)| *region);
        if let Some(region) = region {
            state.readers.remove(&region);
            if failure.is_some() && !matches!(state.phase, Phase::Stopped) {
                warn!(region, "reader failed; restarting it");
                state.reader(&myself, region).await?;
            }
        }
        Ok(())
    }
}
