//! The writer actor: owns the open batch and the sequence counter of one epoch.
//!
//! - **Sealing.** One decision (`WriterState::seal_reason`) says when the open batch
//!   becomes the next object: when it is full (`max_batch_bytes`, or a region at 2^20
//!   entries), and as soon as it holds entries while an upload slot is free
//!   (fewer than `max_in_flight` uploading, nothing sealed waiting) and the next start
//!   slot has come (slots one `min_object_interval` apart). An admitted entry thus never
//!   waits for another object's upload while a slot is free, and the PUT rate stays at
//!   most one per `min_object_interval`. A batch that becomes sealable by its
//!   first entry, or by the end of the interval it waited for, gathers first: until it
//!   holds as many appends as the last object acknowledged (in a closed loop, the
//!   callers that object answered come back within a few milliseconds), for at most a
//!   quarter of `min_object_interval` (5 ms at most). Sealing on the first arrival would
//!   ship one entry and make the rest wait a whole interval. An idle epoch seals an empty object to
//!   stay inside its link window. Every admission, completion and timer comes back to
//!   this decision.
//! - **Admitting.** An append joins the open batch; if it asked for its ids at
//!   admission (`AppendRequest::admitted`), it gets them now: the batch is sealed whole
//!   at the epoch's next sequence, so they are final ([`crate::admission`]).
//! - **Uploading.** Up to `max_in_flight` objects are created at once, each in a spawned
//!   task running the core's [`persist_within`]; completions come back as messages.
//! - **Acknowledging.** Strictly in sequence order: an object is acknowledged only when it
//!   and every earlier object of the epoch are durable (DESIGN.md).
//! - **Stopping.** Nothing more is admitted, sealed or started; the uploads in flight
//!   are waited for, at most `max_create_duration`: past it none of them could be
//!   acknowledged anyway (a create slower than that never is, DESIGN.md "Reclaiming
//!   space"), so a store that hangs cannot hold a stop longer. Those still unanswered
//!   then are abandoned (their tasks aborted) as unknown outcomes: their waiters, and
//!   those of every later object, get [`Error::EpochEnded`] with
//!   [`Durability::MayBeDurable`], as when the retry bound is spent. Every upload task
//!   is aborted when the writer ends, however it ends.
//! - **Ending.** Any other outcome ends the epoch: the object's waiters, and every later
//!   one's, get errors saying whether their entries may still become durable; nothing
//!   more is written; the supervisor is told, and decides (new epoch, or escalate when
//!   fenced). A sequence whose outcome is unknown is never skipped.
//! - **Backpressure.** Appends wait (or fail fast) while `max_pending_bytes` of admitted
//!   payload is not yet acknowledged; at most [`MAX_QUEUED_REQUESTS`] wait, the next one
//!   gets [`Error::Backpressure`].
//! - **Metrics.** Each waiter keeps its admission instant and each flight its sealing
//!   instant; the acknowledgement records both latencies ([`object_store_wal::metrics`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use object_store_wal::batch::{Admit, Batch, SealedObject};
use object_store_wal::catalog::{Catalog, Retention};
use object_store_wal::epoch::{Epoch, EpochState};
use object_store_wal::objects::WalIo;
use object_store_wal::persist::{persist_within, PersistOutcome};
use object_store_wal::{
    AppendReceipt, BackpressureLimit, Config, CreateClock, Durability, EpochEndReason, Error,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, info_span, warn, Instrument};

use crate::admission::Progress;
use crate::messages::{AppendRequest, Counters, InternalMsg, WalMsg, WriterMsg};
use crate::reclaimer::ReclaimerMsg;
use crate::recovery::AbortOnDrop;
use crate::supervisor::{lock, MAX_QUEUED_REQUESTS};

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
    pub epoch: EpochState,
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
}

type ReplyPort = RpcReplyPort<Result<AppendReceipt, Error>>;

/// An admitted append's caller, waiting for durability.
struct Waiter {
    port: ReplyPort,
    /// When it was admitted (its `wal_append_to_durable_seconds` sample starts here).
    admitted: Instant,
}

/// Where an answer goes: a reply port, or a waiter's.
trait Answer<T> {
    fn port(self) -> RpcReplyPort<T>;
}

impl<T> Answer<T> for RpcReplyPort<T> {
    fn port(self) -> Self {
        self
    }
}

impl Answer<Result<AppendReceipt, Error>> for Waiter {
    fn port(self) -> ReplyPort {
        self.port
    }
}

/// A sealed object, from sealing to its acknowledgement.
struct Flight {
    sealed: Arc<SealedObject>,
    waiters: Vec<Waiter>,
    started: bool,
    outcome: Option<PersistOutcome>,
    /// Never sent, for this reason; the epoch ends when it reaches the head.
    refused: Option<Error>,
    /// Some of its ids were handed out at admission.
    handed_out: bool,
    /// When it was sealed (its `wal_seal_to_durable_seconds` sample starts here).
    sealed_at: Instant,
}

/// What the writer is doing. Whether the epoch ended is the [`Epoch`]'s to say: a
/// writer may be stopping with its epoch ended or not.
enum Lifecycle {
    /// Sealing and starting uploads.
    Writing,
    /// An object was refused before it was sent (the link window): nothing more
    /// starts, and the epoch ends once the refused object reaches the head.
    Refusing,
    /// Stop was asked: nothing more is admitted, sealed or started; the ports are
    /// answered once every started upload came back, or was abandoned at the stop
    /// deadline (`max_create_duration` after the stop).
    Stopping(Vec<RpcReplyPort<()>>),
}

/// Why the open batch is sealed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SealReason {
    /// It reached `max_batch_bytes`, or a region its 2^20 entries, or the next append
    /// does not fit.
    Full,
    /// An upload slot is free, `min_object_interval` passed since the last start and
    /// the batch has gathered.
    SlotFree,
    /// The epoch has been idle for half its link window: an empty object keeps it.
    KeepAlive,
}

/// The longest a batch that could be sealed at once gathers first (see the module doc).
const MAX_GATHER: Duration = Duration::from_millis(5);

/// The granularity of tokio's timers: a timer fires up to this late.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// The writer's state.
pub struct WriterState {
    args: WriterArgs,
    epoch: Epoch,
    lifecycle: Lifecycle,
    batch: Batch,
    batch_waiters: Vec<Waiter>,
    /// Some ids of the open batch were handed out at admission.
    batch_handed_out: bool,
    /// When the open batch took its first entry.
    batch_opened: Option<Instant>,
    objects: BTreeMap<u64, Flight>,
    /// The upload tasks running, by sequence: at most `max_in_flight`. Aborted when
    /// dropped: a writer that ends (stopped, killed with its supervisor, or past its
    /// stop deadline) leaves no upload running.
    uploads: BTreeMap<u64, AbortOnDrop>,
    /// The stop deadline is armed.
    stop_deadline_armed: bool,
    pending_bytes: u64,
    waiting: VecDeque<AppendRequest>,
    /// The earliest the next upload may start (the PUT-rate bound): slots one
    /// `min_object_interval` apart, so a start that a timer tick delayed does not delay
    /// every later one.
    next_slot: Option<Instant>,
    /// A wake-up for the sealing decision is on its way.
    wake_armed: bool,
    /// How long a batch that could be sealed at once gathers at most.
    gather: Duration,
    /// The appends of the last object acknowledged: in a closed loop, the callers that
    /// come back at once, so a batch holding as many has gathered its burst.
    expected_burst: usize,
    /// When the last object with appends was acknowledged.
    last_ack: Option<Instant>,
}

/// The writer actor.
pub struct WriterActor;

fn payload_bytes(req: &AppendRequest) -> u64 {
    req.parts
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .map(|e| e.len() as u64)
        .sum()
}

fn reply<T>(to: impl Answer<T>, value: T) {
    // A caller that gave up waiting dropped its end; nothing to do.
    let _ = to.port().send(value);
}

impl WriterState {
    fn fail_append(&self, req: AppendRequest, error: Error) {
        Counters::add(&self.args.counters.failed_appends, 1);
        reply(req.reply, Err(error));
    }

    fn on_append(&mut self, myself: &ActorRef<WriterMsg>, req: AppendRequest) {
        if let Err(e) = self.epoch.ensure_open() {
            return self.fail_append(req, e);
        }
        if let Lifecycle::Stopping(_) = self.lifecycle {
            return self.fail_append(
                req,
                Error::Stopped {
                    durability: Durability::NotWritten,
                },
            );
        }
        if let Err(e) = Batch::validate(&self.args.config.batch_limits(), &req.parts) {
            return self.fail_append(req, e);
        }
        let bytes = payload_bytes(&req);
        let max = self.args.config.max_pending_bytes;
        if !self.waiting.is_empty() || (self.pending_bytes > 0 && self.pending_bytes + bytes > max)
        {
            if req.fail_fast {
                let held = self.pending_bytes;
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
        self.admit(req, bytes);
        self.step(myself);
    }

    fn admit(&mut self, req: AppendRequest, bytes: u64) {
        let AppendRequest {
            parts,
            reply: port,
            admitted: admission,
            ..
        } = req;
        let parts = match self.batch.admit(parts) {
            Ok(index) => return self.admitted(port, admission, index, bytes),
            Err(Admit::Invalid(e)) => {
                Counters::add(&self.args.counters.failed_appends, 1);
                return reply(port, Err(e));
            }
            Err(Admit::Full(parts)) => parts,
        };
        if let Err(e) = self.seal(SealReason::Full) {
            Counters::add(&self.args.counters.failed_appends, 1);
            return reply(port, Err(e));
        }
        match self.batch.admit(parts) {
            Ok(index) => self.admitted(port, admission, index, bytes),
            // Validated alone, so an empty batch takes it; anything else is a bug.
            Err(Admit::Invalid(e)) => reply(port, Err(e)),
            Err(Admit::Full(_)) => reply(port, Err(Error::BatchFull)),
        }
    }

    fn admitted(
        &mut self,
        port: ReplyPort,
        admission: Option<RpcReplyPort<AppendReceipt>>,
        index: usize,
        bytes: u64,
    ) {
        let now = Instant::now();
        if self.batch_opened.is_none() {
            self.batch_opened = Some(now);
        }
        if let Some(admission) = admission {
            // The open batch becomes the next sequence, whole (crate::admission): the
            // ids are final. Noted before the caller learns them.
            let sequence = self.epoch.position().next_sequence;
            if let Some(ids) = self.batch.receipt(index, sequence) {
                self.args.progress.handed_out(sequence);
                self.batch_handed_out = true;
                reply(admission, ids);
            }
        }
        self.batch_waiters.push(Waiter {
            port,
            admitted: now,
        });
        self.pending_bytes += bytes;
        Counters::set(&self.args.counters.pending_bytes, self.pending_bytes);
        if self.batch_full() {
            self.seal_logged(SealReason::Full);
        }
    }

    /// The one sealing decision: whether the open batch (or, for a keep-alive, an empty
    /// one) becomes the next object now, and why.
    fn seal_reason(&self, now: Instant) -> Option<SealReason> {
        if !matches!(self.lifecycle, Lifecycle::Writing) || self.epoch.ended().is_some() {
            return None;
        }
        if self.batch.is_empty() {
            let half = self.args.config.link_window() / 2;
            let idle = self.objects.is_empty();
            let since = self.epoch.since_last_create(self.args.clock.now());
            return (idle && since >= half).then_some(SealReason::KeepAlive);
        }
        if self.batch_full() {
            return Some(SealReason::Full);
        }
        (self.slot_free() && self.seal_due(now).is_none()).then_some(SealReason::SlotFree)
    }

    /// Whether the open batch reached `max_batch_bytes` or a region its 2^20 entries.
    fn batch_full(&self) -> bool {
        self.batch.encoded_len() >= self.args.config.max_batch_bytes || self.batch.region_full()
    }

    /// Whether an object sealed now could start uploading: fewer than `max_in_flight`
    /// uploading and no sealed object waiting to start. While every slot is busy the
    /// batch keeps growing.
    fn slot_free(&self) -> bool {
        self.uploads.len() < self.args.config.max_in_flight
            && self.objects.values().all(|f| f.started)
    }

    /// When the open batch may be sealed for a free slot: once its start slot came and
    /// the batch gathered; `None`: now.
    fn seal_due(&self, now: Instant) -> Option<Instant> {
        if let Some(due) = self.next_start_due(now) {
            return Some(due);
        }
        // Gathering counts from when the batch could first have been sealed: its first
        // entry, or the end of the interval it waited for.
        let opened = self.batch_opened?;
        let sealable_since = self.next_slot.map_or(opened, |slot| slot.max(opened));
        let gathered_until = sealable_since + self.gather;
        // A batch whose first entry came after the last acknowledgement may be its
        // callers coming back (a closed loop): it gathers as many appends as that object
        // had. Under open-loop load the batch opened before the acknowledgement, and its
        // arrivals owe nothing to it: waiting would only add latency.
        let returning = self.last_ack.is_some_and(|ack| opened >= ack);
        let gathered =
            !returning || self.batch.append_count() >= self.expected_burst || now >= gathered_until;
        (!gathered).then_some(gathered_until)
    }

    /// When the next upload may start under `min_object_interval`; `None`: now.
    fn next_start_due(&self, now: Instant) -> Option<Instant> {
        self.next_slot.filter(|slot| now < *slot)
    }

    /// Seals the open batch as the next object of the epoch (not yet started).
    fn seal(&mut self, reason: SealReason) -> Result<(), Error> {
        if self.batch.is_empty() && reason != SealReason::KeepAlive {
            return Ok(());
        }
        let lowest_uncommitted = self
            .objects
            .keys()
            .next()
            .copied()
            .unwrap_or(self.epoch.position().next_sequence);
        let floor = lock(&self.args.retention).floor_for(lowest_uncommitted);
        let sealed = self.epoch.seal(&mut self.batch, floor)?;
        let _span = info_span!(
            "seal",
            sequence = sealed.sequence(),
            entries = sealed.entries,
            reason = ?reason
        )
        .entered();
        if reason == SealReason::KeepAlive {
            debug!("idle: writing an empty object to keep the epoch's link window");
        }
        self.batch_opened = None;
        self.objects.insert(
            sealed.sequence(),
            Flight {
                sealed: Arc::new(sealed),
                waiters: std::mem::take(&mut self.batch_waiters),
                started: false,
                outcome: None,
                refused: None,
                handed_out: std::mem::take(&mut self.batch_handed_out),
                sealed_at: Instant::now(),
            },
        );
        Ok(())
    }

    fn seal_logged(&mut self, reason: SealReason) {
        if let Err(e) = self.seal(reason) {
            warn!(error = %e, ?reason, "cannot seal");
        }
    }

    /// Seals if the decision says so, then starts what may start. Every admission,
    /// completion and timer ends here.
    fn step(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.epoch.ended().is_some() {
            return;
        }
        let now = Instant::now();
        match self.seal_reason(now) {
            Some(reason) => self.seal_logged(reason),
            None if !self.batch.is_empty() && self.slot_free() => {
                if let Some(due) = self.seal_due(now) {
                    self.wake_at(myself, now, due);
                }
            }
            None => {}
        }
        self.start_uploads(myself);
    }

    /// Arms a wake-up for the sealing decision, once: dues only move later (the last
    /// start only advances, a new batch opens after the old one), so the armed one is
    /// never late, and the step it triggers arms the next.
    fn wake_at(&mut self, myself: &ActorRef<WriterMsg>, now: Instant, due: Instant) {
        if !self.wake_armed {
            self.wake_armed = true;
            myself.send_after(due - now, || WriterMsg::Wake);
        }
    }

    /// Starts the sealed objects, in sequence order, up to `max_in_flight` uploading and
    /// no faster than `min_object_interval`; refuses one whose create would start outside
    /// the epoch's link window.
    fn start_uploads(&mut self, myself: &ActorRef<WriterMsg>) {
        if !matches!(self.lifecycle, Lifecycle::Writing) {
            return;
        }
        if self.objects.values().all(|f| f.started) {
            return;
        }
        let max_in_flight = self.args.config.max_in_flight;
        let next: Vec<u64> = self
            .objects
            .iter()
            .filter(|(_, f)| !f.started)
            .map(|(s, _)| *s)
            .collect();
        for sequence in next {
            if self.uploads.len() >= max_in_flight {
                return;
            }
            let now = Instant::now();
            if let Some(due) = self.next_start_due(now) {
                return self.wake_at(myself, now, due);
            }
            let Some(flight) = self.objects.get_mut(&sequence) else {
                return;
            };
            if let Err(refusal) = self.epoch.start_create(sequence, self.args.clock.now()) {
                flight.refused = Some(refusal);
                self.lifecycle = Lifecycle::Refusing;
                self.acknowledge();
                return;
            }
            flight.started = true;
            // The next slot is an interval after this one, or after this start if it
            // came more than a timer tick late (idle): starts are never closer than an
            // interval less a tick, and never more than one per interval on average.
            let interval = self.args.config.min_object_interval;
            let slack = interval.min(TIMER_TICK);
            let on_grid = self.next_slot.map(|slot| slot + interval);
            let from_now = now + interval - slack;
            self.next_slot = Some(on_grid.map_or(now + interval, |g| g.max(from_now)));
            let sealed = flight.sealed.clone();
            let io = self.args.io.clone();
            let retry = self.args.config.retry;
            let max_duration = self.args.config.max_create_duration;
            let clock = self.args.clock.clone();
            let me = myself.clone();
            let span = info_span!("upload", sequence, bytes = sealed.encoded.len());
            let task = tokio::spawn(
                async move {
                    let outcome =
                        persist_within(&io, &sealed.encoded, &retry, max_duration, clock.as_ref())
                            .await;
                    // A stopped writer no longer listens; its waiters were answered.
                    let _ = me.cast(WriterMsg::Uploaded { sequence, outcome });
                }
                .instrument(span),
            );
            self.uploads.insert(sequence, AbortOnDrop(task));
            Counters::set(&self.args.counters.in_flight, self.uploads.len() as u64);
        }
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
        if let Some(f) = self.objects.get_mut(&sequence) {
            f.outcome = Some(outcome);
        }
        self.acknowledge();
        if self.epoch.ended().is_none() {
            self.admit_waiting();
            self.step(myself);
        }
        self.maybe_finish_stop(myself);
    }

    /// Acknowledges durable objects in sequence order; ends the epoch at the first other
    /// outcome.
    fn acknowledge(&mut self) {
        while let Some(entry) = self.objects.first_entry() {
            if let Some(error) = entry.get().refused.clone() {
                self.end_epoch(error);
                return;
            }
            let Some(outcome) = &entry.get().outcome else {
                return;
            };
            let sequence = *entry.key();
            if let PersistOutcome::Durable { attempts } = outcome {
                let attempts = u64::from(*attempts);
                let flight = entry.remove();
                self.commit(flight, attempts);
                continue;
            }
            let error = outcome
                .error(&self.args.io, self.epoch.number(), sequence)
                .unwrap_or(Error::EpochEnded {
                    epoch: self.epoch.number(),
                    sequence,
                    reason: EpochEndReason::UnknownOutcome,
                    durability: Durability::MayBeDurable,
                });
            if !matches!(outcome, PersistOutcome::Unknown { .. }) {
                Counters::add(&self.args.counters.conflicts, 1);
            }
            self.end_epoch(error);
            return;
        }
    }

    fn commit(&mut self, flight: Flight, attempts: u64) {
        let sealed = &flight.sealed;
        let encoded = &sealed.encoded;
        // One guard: commit, and the objects it now holds (`wal_live_objects`).
        let committed = {
            let mut catalog = self.args.catalog.write().unwrap_or_else(|p| p.into_inner());
            catalog.commit(encoded).map(|()| catalog.object_count())
        };
        let live_objects = match committed {
            Ok(live_objects) => live_objects,
            Err(error) => {
                if flight.handed_out {
                    self.args.progress.failed(sealed.sequence(), &error);
                }
                for w in flight.waiters {
                    reply(w, Err(error.clone()));
                }
                self.end_epoch(error);
                return;
            }
        };
        let header = encoded.header();
        let risen = {
            let mut retention = lock(&self.args.retention);
            retention.committed(header.sequence, encoded.records());
            retention.acknowledged(header.floor)
        };
        self.args.commits.send_replace(header.sequence);
        self.args.progress.acknowledged(header.sequence);
        if let Some(floor) = risen {
            self.publish_floor(floor);
        }
        let c = &self.args.counters;
        Counters::add(&c.objects, 1);
        Counters::add(&c.object_bytes, encoded.len());
        Counters::add(&c.entries, sealed.entries);
        Counters::add(&c.appends, sealed.receipts.len() as u64);
        Counters::add(&c.payload_bytes, sealed.payload_bytes);
        Counters::add(&c.puts, attempts);
        Counters::add(&c.retries, attempts.saturating_sub(1));
        self.pending_bytes = self.pending_bytes.saturating_sub(sealed.payload_bytes);
        Counters::set(&c.pending_bytes, self.pending_bytes);
        if !sealed.receipts.is_empty() {
            self.expected_burst = sealed.receipts.len();
            self.last_ack = Some(Instant::now());
        }
        let metrics = self.args.io.metrics();
        metrics.acknowledged(sealed, flight.sealed_at.elapsed(), live_objects);
        for (waiter, receipt) in flight.waiters.into_iter().zip(sealed.receipts.iter()) {
            metrics.append_to_durable.record(waiter.admitted.elapsed());
            reply(waiter, Ok(receipt.clone()));
        }
    }

    /// Publishes a floor acknowledged above every earlier one: the gauge and the
    /// reclaimer. The only place a floor is published.
    fn publish_floor(&self, floor: u64) {
        Counters::set(&self.args.counters.floor, floor);
        if let Some(r) = &self.args.reclaimer {
            let _ = r.cast(ReclaimerMsg::Floor(floor));
        }
    }

    /// Ends the epoch: every waiter gets an error with its durability; nothing more is
    /// written; the supervisor is told.
    fn end_epoch(&mut self, error: Error) {
        if !self.epoch.end(error.clone()) {
            return;
        }
        let epoch = self.epoch.number();
        warn!(epoch, error = %error, "the epoch ends");
        let mut failed = 0u64;
        let mut first = true;
        for (_, flight) in std::mem::take(&mut self.objects) {
            let e = if first {
                error.clone()
            } else if !flight.started {
                error.with_durability(Durability::NotWritten)
            } else {
                match &error {
                    Error::Fenced { .. } | Error::Poisoned { .. } => {
                        error.with_durability(Durability::MayBeDurable)
                    }
                    _ => Error::EpochEnded {
                        epoch,
                        sequence: flight.sealed.sequence(),
                        reason: EpochEndReason::EarlierObjectFailed,
                        durability: Durability::MayBeDurable,
                    },
                }
            };
            first = false;
            if flight.handed_out {
                self.args.progress.failed(flight.sealed.sequence(), &e);
            }
            for w in flight.waiters {
                failed += 1;
                reply(w, Err(e.clone()));
            }
        }
        let not_written = error.with_durability(Durability::NotWritten);
        self.batch_ids_failed(&not_written);
        for w in std::mem::take(&mut self.batch_waiters) {
            failed += 1;
            reply(w, Err(not_written.clone()));
        }
        for req in std::mem::take(&mut self.waiting) {
            failed += 1;
            reply(req.reply, Err(not_written.clone()));
        }
        self.batch = Batch::new(self.args.config.batch_limits());
        self.batch_opened = None;
        self.pending_bytes = 0;
        Counters::set(&self.args.counters.pending_bytes, 0);
        Counters::add(&self.args.counters.failed_appends, failed);
        let _ = self
            .args
            .supervisor
            .cast(InternalMsg::WriterEnded { epoch, error }.into());
    }

    /// The open batch fails with `error` (it is dropped unsent): if ids of it were
    /// handed out, the barrier learns that its sequence failed.
    fn batch_ids_failed(&mut self, error: &Error) {
        if std::mem::take(&mut self.batch_handed_out) {
            let sequence = self.epoch.position().next_sequence;
            self.args.progress.failed(sequence, error);
        }
    }

    fn admit_waiting(&mut self) {
        let max = self.args.config.max_pending_bytes;
        while let Some(req) = self.waiting.front() {
            let bytes = payload_bytes(req);
            if self.pending_bytes > 0 && self.pending_bytes + bytes > max {
                return;
            }
            if let Some(req) = self.waiting.pop_front() {
                self.admit(req, bytes);
            }
        }
    }

    /// Keeps the epoch inside its link window while idle: half a window after the last
    /// create, the sealing decision writes an empty object (96 bytes; the only request
    /// an idle WAL makes). Re-arms itself for what is left of the half window.
    fn keep_alive(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.epoch.ended().is_some() || !matches!(self.lifecycle, Lifecycle::Writing) {
            return;
        }
        let half = self.args.config.link_window() / 2;
        let sealing = self.seal_reason(Instant::now()) == Some(SealReason::KeepAlive);
        let since = self.epoch.since_last_create(self.args.clock.now());
        self.step(myself);
        let wait = if sealing || since >= half {
            half
        } else {
            half - since
        };
        myself.send_after(wait.max(Duration::from_millis(1)), || WriterMsg::KeepAlive);
    }

    fn on_stop(&mut self, myself: &ActorRef<WriterMsg>, port: RpcReplyPort<()>) {
        match &mut self.lifecycle {
            Lifecycle::Stopping(ports) => ports.push(port),
            _ => self.lifecycle = Lifecycle::Stopping(vec![port]),
        }
        let stopped = Error::Stopped {
            durability: Durability::NotWritten,
        };
        let mut failed = 0u64;
        self.batch_ids_failed(&stopped);
        for w in std::mem::take(&mut self.batch_waiters) {
            failed += 1;
            reply(w, Err(stopped.clone()));
        }
        for req in std::mem::take(&mut self.waiting) {
            failed += 1;
            reply(req.reply, Err(stopped.clone()));
        }
        // Sealed objects never sent are dropped: they follow every started one.
        let unsent: Vec<u64> = self
            .objects
            .iter()
            .filter(|(_, f)| !f.started)
            .map(|(s, _)| *s)
            .collect();
        for s in unsent {
            if let Some(f) = self.objects.remove(&s) {
                self.pending_bytes = self.pending_bytes.saturating_sub(f.sealed.payload_bytes);
                if f.handed_out {
                    self.args.progress.failed(s, &stopped);
                }
                for w in f.waiters {
                    failed += 1;
                    reply(w, Err(stopped.clone()));
                }
            }
        }
        self.batch = Batch::new(self.args.config.batch_limits());
        self.batch_opened = None;
        Counters::add(&self.args.counters.failed_appends, failed);
        if !self.uploads.is_empty() && !self.stop_deadline_armed {
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
        if !matches!(self.lifecycle, Lifecycle::Stopping(_)) || self.uploads.is_empty() {
            return;
        }
        warn!(
            epoch = self.epoch.number(),
            uploads = self.uploads.len(),
            "stopping: uploads unanswered after max_create_duration are abandoned"
        );
        for (sequence, task) in std::mem::take(&mut self.uploads) {
            drop(task);
            if let Some(f) = self.objects.get_mut(&sequence) {
                f.outcome = Some(PersistOutcome::Unknown {
                    last: Error::Stopped {
                        durability: Durability::MayBeDurable,
                    },
                });
            }
        }
        Counters::set(&self.args.counters.in_flight, 0);
        self.acknowledge();
        self.maybe_finish_stop(myself);
    }

    fn maybe_finish_stop(&mut self, myself: &ActorRef<WriterMsg>) {
        if !self.uploads.is_empty() {
            return;
        }
        let Lifecycle::Stopping(ports) = &mut self.lifecycle else {
            return;
        };
        if ports.is_empty() {
            return;
        }
        // Every started upload came back: what was durable in order was acknowledged,
        // the rest failed in `acknowledge`.
        for port in std::mem::take(ports) {
            reply(port, ());
        }
        debug!(epoch = self.epoch.number(), "writer stopped");
        myself.stop(Some("stopped".into()));
    }
}

impl Actor for WriterActor {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = WriterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        // The opening object, just created, carries the chain end's floor.
        let opening_floor = lock(&args.retention).acknowledged(args.epoch.floor);
        let state = WriterState {
            epoch: Epoch::new(args.epoch, args.opening_started, args.config.link_window()),
            lifecycle: Lifecycle::Writing,
            batch: Batch::new(args.config.batch_limits()),
            batch_waiters: Vec::new(),
            batch_handed_out: false,
            batch_opened: None,
            objects: BTreeMap::new(),
            uploads: BTreeMap::new(),
            stop_deadline_armed: false,
            pending_bytes: 0,
            waiting: VecDeque::new(),
            next_slot: None,
            wake_armed: false,
            expected_burst: 1,
            last_ack: None,
            gather: (args.config.min_object_interval / 4).min(MAX_GATHER),
            args,
        };
        if let Some(floor) = opening_floor {
            state.publish_floor(floor);
        }
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
            WriterMsg::Stop { reply } => state.on_stop(&myself, reply),
            WriterMsg::StopDeadline => state.on_stop_deadline(&myself),
            #[cfg(feature = "testing")]
            WriterMsg::Panic => panic!("injected writer panic"),
        }
        Ok(())
    }
}
