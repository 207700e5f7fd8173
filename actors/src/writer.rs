//! The writer actor: the mailbox, timers and upload tasks around the core's write
//! protocol ([`object_store_wal::internal::write::protocol`]), which holds the open batch, the sequence
//! counter and every rule of writing an epoch (sealing, starting creates, acknowledging
//! in sequence order, failing, ending the epoch, publishing floors). The actor feeds it
//! events and carries out its actions:
//!
//! - **Appends** are checked, then admitted, or queued while `max_pending_bytes` of
//!   admitted payload is not yet acknowledged (at most [`MAX_QUEUED_REQUESTS`] wait; the
//!   next one gets [`Error::Backpressure`], and so does one that asked to fail fast). An
//!   append that asked for its ids at admission (`AppendRequest::admitted`) gets them
//!   now: the batch is sealed whole at the epoch's next sequence, so they are final
//!   ([`crate::admission`]).
//! - **Uploading.** Each create the protocol starts runs in a spawned task running the
//!   core's [`persist_paced`]; its outcome comes back as a message, and so does each
//!   throttle reply it meets on the way ([`WriterMsg::Throttled`]), which the protocol
//!   paces by (DESIGN.md "Throttled stores"; the interval is the gauge
//!   `wal_object_interval_seconds`). Every upload task is aborted when the writer ends,
//!   however it ends.
//! - **Timers**: a wake-up when the protocol waits for a start slot or a batch's
//!   gathering, and the keep-alive check every half link window.
//! - **Stopping.** Nothing more is admitted, sealed or started; the uploads in flight
//!   are waited for, at most `max_create_duration`: past it none of them could be
//!   acknowledged anyway (a create slower than that never is, DESIGN.md "Reclaiming
//!   space"), so a store that hangs cannot hold a stop longer. Those still unanswered
//!   then are abandoned (their tasks aborted) as unknown outcomes: their waiters, and
//!   those of every later object, get [`Error::EpochEnded`] with
//!   [`Durability::MayBeDurable`], as when the retry bound is spent.
//! - **Ending.** When the protocol ends the epoch, every waiter has its error (saying
//!   whether its entries may still become durable); the supervisor is told and decides
//!   (new epoch, or escalate when fenced).
//! - **Metrics.** Each acknowledgement records its appends' admission-to-durable and
//!   its object's seal-to-durable latencies ([`object_store_wal::metrics`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use object_store_wal::format::control::CONTROL_REGION;
use object_store_wal::internal::chain::catalog::{Catalog, Retention};
use object_store_wal::internal::chain::holdings::{Holdings, RegionHolding};
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::internal::write::batch::SealedObject;
use object_store_wal::internal::write::epoch::WritePosition;
use object_store_wal::internal::write::persist::{persist_paced, PersistOutcome};
use object_store_wal::internal::write::protocol::{
    payload_bytes, Action, Admitted, ControlTicket, Limits, Now, SharedChain, WhenFull,
    WriteProtocol,
};
use object_store_wal::{
    AppendReceipt, BackpressureLimit, Config, CreateClock, Durability, Error, Released,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, info_span, warn, Instrument};

use crate::admission::Progress;
use crate::messages::{
    AppendRequest, ControlRequest, InternalMsg, WalMsg, WriterMsg, MAX_QUEUED_REQUESTS,
};
use crate::reclaimer::ReclaimerMsg;
use crate::stats::Counters;
use crate::task::AbortOnDrop;

/// Everything the writer starts with.
pub struct WriterArgs {
    /// Store access.
    pub io: WalIo,
    /// Configuration.
    pub config: Config,
    /// The catalog shared with readers; the writer inserts what it acknowledges.
    pub catalog: Arc<RwLock<Catalog>>,
    /// Counters shared with the supervisor.
    pub counters: Arc<Counters>,
    /// Where the epoch starts.
    pub epoch: WritePosition,
    /// Told when the epoch ends.
    pub supervisor: ActorRef<WalMsg>,
    /// Measures create durations (`max_create_duration`).
    pub clock: Arc<dyn CreateClock>,
    /// The watermarks and floors (the supervisor's, shared): the writer takes each
    /// object's floor from it and publishes the floors acknowledged.
    pub retention: Arc<Mutex<Retention>>,
    /// Bumped with the sequence of every object acknowledged (followers wait on it).
    pub commits: tokio::sync::watch::Sender<u64>,
    /// Told every floor acknowledged.
    pub reclaimer: Option<ActorRef<ReclaimerMsg>>,
    /// When the opening object's create started, on `clock`.
    pub opening_started: Duration,
    /// Where the ids handed out at admission stand (the barrier's state, shared with
    /// the supervisor and the handles).
    pub progress: Progress,
    /// What the chain's last control snapshot records: the regions released.
    pub holdings: Holdings,
}

type ReplyPort = RpcReplyPort<Result<AppendReceipt, Error>>;

/// The writer's state.
pub struct WriterState {
    args: WriterArgs,
    protocol: WriteProtocol<ReplyPort, SharedChain>,
    /// Stop was asked by these: answered once no upload is left.
    stop_ports: Vec<RpcReplyPort<()>>,
    /// The upload tasks running, by sequence: at most `max_in_flight`. Aborted when
    /// dropped: a writer that ends (stopped, killed with its supervisor, or past its
    /// stop deadline) leaves no upload running.
    uploads: BTreeMap<u64, AbortOnDrop>,
    /// The stop deadline is armed.
    stop_deadline_armed: bool,
    /// Appends waiting for room under `max_pending_bytes`.
    waiting: VecDeque<AppendRequest>,
    /// A wake-up for the sealing decision is on its way.
    wake_armed: bool,
    /// Releases and acquires waiting for their object to be acknowledged.
    controls: Vec<(ControlTicket, ControlWaiter)>,
}

/// Who waits for a release or an acquire, and with what answer.
enum ControlWaiter {
    Acquire(RpcReplyPort<Result<(), Error>>),
    Release(Released, RpcReplyPort<Result<Released, Error>>),
}

impl ControlWaiter {
    fn answer(self, result: Result<(), Error>) {
        match self {
            ControlWaiter::Acquire(port) => reply(port, result),
            ControlWaiter::Release(released, port) => reply(port, result.map(|()| released)),
        }
    }
}

/// The writer actor.
pub struct WriterActor;

fn reply<T>(port: RpcReplyPort<T>, value: T) {
    // A caller that gave up waiting dropped its end; nothing to do.
    let _ = port.send(value);
}

impl WriterState {
    fn now(&self) -> Now {
        Now {
            at: Instant::now(),
            clock: self.args.clock.now(),
        }
    }

    fn fail_append(&self, req: AppendRequest, error: Error) {
        Counters::add(&self.args.counters.failed_appends, 1);
        reply(req.reply, Err(error));
    }

    fn on_append(&mut self, myself: &ActorRef<WriterMsg>, req: AppendRequest) {
        if let Err(e) = self.protocol.check(&req.parts) {
            return self.fail_append(req, e);
        }
        let bytes = payload_bytes(&req.parts);
        let max = self.args.config.max_pending_bytes;
        if !self.waiting.is_empty() || !self.protocol.has_room(bytes, max) {
            if req.fail_fast {
                let held = self.protocol.pending_bytes();
                let limit = BackpressureLimit::PendingBytes;
                return self.fail_append(req, Error::Backpressure { limit, held, max });
            }
            if self.waiting.len() >= MAX_QUEUED_REQUESTS {
                let (held, max) = (self.waiting.len() as u64, MAX_QUEUED_REQUESTS as u64);
                let limit = BackpressureLimit::QueuedRequests;
                return self.fail_append(req, Error::Backpressure { limit, held, max });
            }
            self.waiting.push_back(req);
            return;
        }
        self.admit(req);
        self.step(myself);
    }

    /// A release or an acquire (DESIGN.md "Regions moving between nodes"): the protocol
    /// decides ([`WriteProtocol::release`], [`WriteProtocol::acquire`]); the answer
    /// waits until the object carrying its effect is acknowledged.
    fn on_control(&mut self, myself: &ActorRef<WriterMsg>, req: ControlRequest) {
        let now = self.now();
        let waiting = match req {
            ControlRequest::Acquire {
                region,
                last_id,
                pieces,
                reply: port,
            } => match self.protocol.acquire_with(region, last_id, &pieces, now) {
                Ok(ticket) => (ticket, ControlWaiter::Acquire(port)),
                Err(e) => return reply(port, Err(e)),
            },
            ControlRequest::Release {
                region,
                reply: port,
            } => match self.protocol.release(region, now) {
                Ok((released, ticket)) => (ticket, ControlWaiter::Release(released, port)),
                Err(e) => return reply(port, Err(e)),
            },
            ControlRequest::Holdings { reply: port } => return reply(port, Ok(self.holdings())),
            ControlRequest::Holding {
                region,
                reply: port,
            } => return reply(port, Ok(self.holding(region))),
            ControlRequest::Flushed { region, id } => {
                if let Err(e) = self.protocol.flushed(region, id, now) {
                    warn!(region, error = %e, "cannot record a flushed piece");
                }
                return self.step(myself);
            }
        };
        self.controls.push(waiting);
        self.answer_controls();
        self.step(myself);
    }

    /// What the live log holds of each region: the catalog's pieces, the releases.
    fn holdings(&self) -> Vec<RegionHolding> {
        let catalog = self.args.catalog.read().unwrap_or_else(|p| p.into_inner());
        // What the chain records, not what is in flight: a release listed here holds
        // across a restart.
        let recorded = self.protocol.acknowledged_holdings();
        recorded.region_holdings(&catalog, self.protocol.id_bound())
    }

    /// `region`'s entry of [`holdings`](Self::holdings), without listing the others:
    /// `None` where that lists nothing of it (no entry on the chain, no release, no
    /// earlier piece; the control region).
    fn holding(&self, region: u64) -> Option<RegionHolding> {
        let catalog = self.args.catalog.read().unwrap_or_else(|p| p.into_inner());
        let holding = self.holding_in(&catalog, region);
        // The catalog holds a region only while it has an entry on the chain: listed
        // by the catalog is `ids` known.
        let on_chain = holding.ids.is_some() && region != CONTROL_REGION;
        let listed = on_chain || holding.released.is_some() || !holding.pieces.is_empty();
        listed.then_some(holding)
    }

    /// What `catalog` and the last acknowledged snapshot say of `region`.
    fn holding_in(&self, catalog: &Catalog, region: u64) -> RegionHolding {
        let recorded = self.protocol.acknowledged_holdings();
        recorded.region_holding(catalog, region, self.protocol.id_bound())
    }

    /// Answers the releases and acquires whose object is acknowledged now.
    fn answer_controls(&mut self) {
        if self.controls.is_empty() {
            return;
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.controls)
            .into_iter()
            .partition(|(ticket, _)| self.protocol.ticket_acknowledged(ticket));
        self.controls = waiting;
        for (_, waiter) in done {
            waiter.answer(Ok(()));
        }
    }

    /// Fails the releases and acquires still waiting with `error` (the epoch ended or
    /// the writer stopped): their object may have landed; asked again, an acquire
    /// raises again, and a release is answered [`Error::RegionReleased`] with its last
    /// id if its snapshot is on the chain the new epoch recovered. (Within one epoch a
    /// release asked again waits here on the same ticket: `WriteProtocol::release`.)
    fn fail_controls(&mut self, error: &Error) {
        for (_, waiter) in std::mem::take(&mut self.controls) {
            waiter.answer(Err(error.clone()));
        }
    }

    fn admit(&mut self, req: AppendRequest) {
        let AppendRequest {
            parts,
            reply: port,
            admitted: admission,
            ..
        } = req;
        let now = self.now();
        let wants_ids = admission.is_some();
        match self
            .protocol
            .admit(parts, port, wants_ids, WhenFull::Seal, now)
        {
            Ok(Admitted { ids, .. }) => {
                if let (Some(admission), Some(ids)) = (admission, ids) {
                    // Noted before the caller learns them.
                    // Every part's ids count from the object's id base.
                    let base = ids.parts.first().map_or(ids.sequence, |p| {
                        object_store_wal::format::entry_sequence(p.first_id)
                    });
                    self.args.progress.handed_out(ids.sequence, base);
                    reply(admission, ids);
                }
            }
            Err((port, e)) => {
                Counters::add(&self.args.counters.failed_appends, 1);
                reply(port, Err(e));
            }
        }
        Counters::set(
            &self.args.counters.pending_bytes,
            self.protocol.pending_bytes(),
        );
    }

    /// The protocol's decision (seal, start), then its actions. Every admission,
    /// completion and timer ends here.
    fn step(&mut self, myself: &ActorRef<WriterMsg>) {
        let now = self.now();
        self.protocol.poll(now);
        self.carry_out(myself);
    }

    /// Carries out what the protocol asks, in order.
    fn carry_out(&mut self, myself: &ActorRef<WriterMsg>) {
        let mut ended = None;
        while let Some(action) = self.protocol.poll_action() {
            match action {
                Action::Create(sealed) => self.start_upload(myself, sealed),
                Action::Acknowledge {
                    sealed,
                    waiters,
                    attempts,
                    sealed_at,
                    live_objects,
                } => {
                    let sequence = sealed.sequence();
                    // The readers' tail, before followers are woken: a read of these
                    // entries (of a region being read) sends no request.
                    self.args.io.segment_cache().hand_off(
                        sequence,
                        sealed.header().epoch,
                        sealed.segments().iter().map(|(r, e)| (*r, e.as_slice())),
                    );
                    self.args.commits.send_replace(sequence);
                    self.args.progress.acknowledged(sealed.header().id_base());
                    let c = &self.args.counters;
                    let attempts = u64::from(attempts);
                    Counters::add(&c.objects, 1);
                    Counters::add(&c.object_bytes, sealed.encoded_len());
                    Counters::add(&c.entries, sealed.entries);
                    Counters::add(&c.appends, sealed.receipts.len() as u64);
                    Counters::add(&c.payload_bytes, sealed.payload_bytes);
                    Counters::add(&c.puts, attempts);
                    Counters::add(&c.retries, attempts.saturating_sub(1));
                    // Before the answers: a caller answered sees its bytes released.
                    Counters::set(&c.pending_bytes, self.protocol.pending_bytes());
                    let metrics = self.args.io.metrics();
                    metrics.acknowledged(sealed.acknowledged(), sealed_at.elapsed(), live_objects);
                    for (pending, receipt) in waiters.into_iter().zip(sealed.receipts.iter()) {
                        metrics.append_to_durable.record(pending.admitted.elapsed());
                        reply(pending.waiter, Ok(receipt.clone()));
                    }
                }
                Action::PublishFloor(floor) => self.publish_floor(floor),
                Action::Fail { waiters, error } => {
                    let c = &self.args.counters;
                    Counters::add(&c.failed_appends, waiters.len() as u64);
                    Counters::set(&c.pending_bytes, self.protocol.pending_bytes());
                    for pending in waiters {
                        reply(pending.waiter, Err(error.clone()));
                    }
                }
                Action::HandedOutFailed { id_base, error } => {
                    self.args.progress.failed(id_base, &error);
                }
                Action::EpochEnded { error, conflict } => {
                    if conflict {
                        Counters::add(&self.args.counters.conflicts, 1);
                    }
                    // The supervisor is told once the waiters that follow have answers.
                    ended = Some(error);
                }
                Action::WakeAt(due) => self.wake_at(myself, due),
            }
        }
        self.answer_controls();
        if let Some(error) = ended {
            self.fail_controls(&error.with_durability(Durability::MayBeDurable));
            let not_written = error.with_durability(Durability::NotWritten);
            for req in std::mem::take(&mut self.waiting) {
                self.fail_append(req, not_written.clone());
            }
            let epoch = self.protocol.epoch();
            let _ = self
                .args
                .supervisor
                .cast(InternalMsg::WriterEnded { epoch, error }.into());
        }
        let c = &self.args.counters;
        Counters::set(&c.pending_bytes, self.protocol.pending_bytes());
        Counters::set(&c.in_flight, self.uploads.len() as u64);
    }

    /// Publishes a floor acknowledged above every earlier one: the gauge and the
    /// reclaimer. The only place a floor is published.
    fn publish_floor(&self, floor: u64) {
        Counters::set(&self.args.counters.floor, floor);
        if let Some(r) = &self.args.reclaimer {
            let _ = r.cast(ReclaimerMsg::Floor(floor));
        }
    }

    /// Arms a wake-up for the sealing decision, once: dues only move later (the last
    /// start only advances, a new batch opens after the old one), so the armed one is
    /// never late, and the step it triggers arms the next.
    fn wake_at(&mut self, myself: &ActorRef<WriterMsg>, due: Instant) {
        if !self.wake_armed {
            self.wake_armed = true;
            let wait = due.saturating_duration_since(Instant::now());
            myself.send_after(wait, || WriterMsg::Wake);
        }
    }

    /// Runs the create the protocol started in a task of its own.
    fn start_upload(&mut self, myself: &ActorRef<WriterMsg>, sealed: Arc<SealedObject>) {
        let sequence = sealed.sequence();
        let io = self.args.io.clone();
        let retry = self.args.config.retry;
        let max_duration = self.args.config.max_create_duration;
        let clock = self.args.clock.clone();
        let me = myself.clone();
        let span = info_span!("upload", sequence, payload_bytes = sealed.payload_bytes);
        let task = tokio::spawn(
            async move {
                // A transformed object is compressed and encrypted here, in its own task,
                // beside the writer (an untransformed one was encoded when sealed).
                let throttled = {
                    let me = me.clone();
                    // A stopped writer no longer listens.
                    move || {
                        let _ = me.cast(WriterMsg::Throttled { sequence });
                    }
                };
                let outcome = match sealed.encoded() {
                    Ok(object) => {
                        let clock = clock.as_ref();
                        persist_paced(&io, object, &retry, max_duration, clock, &throttled).await
                    }
                    Err(e) => PersistOutcome::not_encoded(sequence, &e),
                };
                // A stopped writer no longer listens; its waiters were answered.
                let _ = me.cast(WriterMsg::Uploaded { sequence, outcome });
            }
            .instrument(span),
        );
        self.uploads.insert(sequence, AbortOnDrop(task));
        Counters::set(&self.args.counters.in_flight, self.uploads.len() as u64);
    }

    fn on_uploaded(
        &mut self,
        myself: &ActorRef<WriterMsg>,
        sequence: u64,
        outcome: PersistOutcome,
    ) {
        // An upload abandoned at the stop deadline has its outcome already.
        if self.uploads.remove(&sequence).is_none() {
            return;
        }
        Counters::set(&self.args.counters.in_flight, self.uploads.len() as u64);
        let now = self.now();
        self.protocol.handle_outcome(sequence, outcome, now);
        self.publish_interval();
        self.carry_out(myself);
        if self.protocol.ended().is_none() {
            self.admit_waiting();
            self.step(myself);
        }
        self.maybe_finish_stop(myself);
    }

    /// A create in flight met a throttle reply: the protocol spaces the objects.
    fn on_throttled(&mut self, myself: &ActorRef<WriterMsg>, sequence: u64) {
        let now = self.now();
        self.protocol.handle_throttled(sequence, now);
        self.publish_interval();
        self.step(myself);
    }

    /// The interval between object starts, as the gauge `wal_object_interval_seconds`.
    fn publish_interval(&self) {
        let interval = self.protocol.object_interval();
        self.args
            .io
            .metrics()
            .object_interval
            .set(interval.as_secs_f64());
    }

    fn admit_waiting(&mut self) {
        let max = self.args.config.max_pending_bytes;
        while let Some(req) = self.waiting.front() {
            if !self.protocol.has_room(payload_bytes(&req.parts), max) {
                return;
            }
            if let Some(req) = self.waiting.pop_front() {
                self.admit(req);
            }
        }
    }

    /// Keeps the epoch inside its link window while idle: half a window after the last
    /// create, the sealing decision writes an empty object (96 bytes, 104 with an id offset; the only request
    /// an idle WAL makes). Re-arms itself for what is left of the half window.
    fn keep_alive(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.protocol.ended().is_some() || !self.protocol.is_writing() {
            return;
        }
        self.step(myself);
        let wait = self.protocol.keep_alive_in(self.args.clock.now());
        myself.send_after(wait, || WriterMsg::KeepAlive);
    }

    fn on_stop(&mut self, myself: &ActorRef<WriterMsg>, port: RpcReplyPort<()>) {
        self.stop_ports.push(port);
        let uploading = self.protocol.stop();
        let stopped = Error::Stopped {
            durability: Durability::NotWritten,
        };
        for req in std::mem::take(&mut self.waiting) {
            self.fail_append(req, stopped.clone());
        }
        self.carry_out(myself);
        if uploading && !self.stop_deadline_armed {
            self.stop_deadline_armed = true;
            let bound = self.args.config.max_create_duration;
            myself.send_after(bound, || WriterMsg::StopDeadline);
        }
        self.maybe_finish_stop(myself);
    }

    /// `max_create_duration` after a stop: the uploads still in flight could no longer
    /// be acknowledged. They are abandoned (their tasks aborted) as unknown outcomes,
    /// which ends the epoch: their waiters, and every later object's, get an error with
    /// [`Durability::MayBeDurable`].
    fn on_stop_deadline(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.stop_ports.is_empty() || self.uploads.is_empty() {
            return;
        }
        warn!(
            epoch = self.protocol.epoch(),
            uploads = self.uploads.len(),
            "stopping: uploads unanswered after max_create_duration are abandoned"
        );
        self.uploads.clear();
        let now = self.now();
        self.protocol.abandon_uploads(now);
        self.carry_out(myself);
        self.maybe_finish_stop(myself);
    }

    fn maybe_finish_stop(&mut self, myself: &ActorRef<WriterMsg>) {
        if !self.uploads.is_empty() || self.stop_ports.is_empty() {
            return;
        }
        // Every started upload came back: what was durable in order was acknowledged,
        // the rest failed.
        self.answer_controls();
        self.fail_controls(&Error::Stopped {
            durability: Durability::MayBeDurable,
        });
        for port in std::mem::take(&mut self.stop_ports) {
            reply(port, ());
        }
        debug!(epoch = self.protocol.epoch(), "writer stopped");
        myself.stop(Some("stopped".into()));
    }
}

impl Actor for WriterActor {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = WriterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        let chain = SharedChain {
            catalog: args.catalog.clone(),
            retention: args.retention.clone(),
        };
        let limits = {
            let catalog = args.catalog.read().unwrap_or_else(|p| p.into_inner());
            Limits::from_config(&args.config).for_chain(&args.config, &catalog)
        };
        let protocol = WriteProtocol::new(args.epoch, args.opening_started, limits, chain)
            .with_holdings(args.holdings.clone());
        let mut state = WriterState {
            args,
            protocol,
            stop_ports: Vec::new(),
            uploads: BTreeMap::new(),
            stop_deadline_armed: false,
            waiting: VecDeque::new(),
            wake_armed: false,
            controls: Vec::new(),
        };
        // The opening object's floor, published before anything is admitted.
        state.carry_out(&myself);
        state.publish_interval();
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        state.keep_alive(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            WriterMsg::Append(req) => state.on_append(&myself, req),
            WriterMsg::Wake => {
                state.wake_armed = false;
                state.step(&myself);
            }
            WriterMsg::KeepAlive => state.keep_alive(&myself),
            WriterMsg::Uploaded { sequence, outcome } => {
                state.on_uploaded(&myself, sequence, outcome)
            }
            WriterMsg::Throttled { sequence } => state.on_throttled(&myself, sequence),
            WriterMsg::Stop { reply } => state.on_stop(&myself, reply),
            WriterMsg::Control(req) => state.on_control(&myself, req),
            WriterMsg::StopDeadline => state.on_stop_deadline(&myself),
            #[cfg(feature = "testing")]
            WriterMsg::Panic => panic!("injected writer panic"),
        }
        Ok(())
    }
}
