//! The writer actor: owns the open batch and the sequence counter of one epoch.
//!
//! - **Sealing.** The batch is sealed when it would pass `max_batch_bytes` or a region
//!   reaches 2^20 entries, when `flush_interval` has passed since its first entry (a
//!   timer), and at once when no upload is in flight (a lone appender does not wait for
//!   the timer), but objects never start more often than `min_object_interval`.
//! - **Uploading.** Up to `max_in_flight` objects are created at once, each in a spawned
//!   task running the core's [`persist_within`]; completions come back as messages.
//! - **Acknowledging.** Strictly in sequence order: an object is acknowledged only when it
//!   and every earlier object of the epoch are durable (DESIGN.md).
//! - **Ending.** Any other outcome ends the epoch: the object's waiters, and every later
//!   one's, get errors saying whether their entries may still become durable; nothing
//!   more is written; the supervisor is told, and decides (new epoch, or escalate when
//!   fenced). A sequence whose outcome is unknown is never skipped.
//! - **Backpressure.** Appends wait (or fail fast) while `max_pending_bytes` of admitted
//!   payload is not yet acknowledged.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};

use object_store_wal::batch::{Admit, Batch, SealedObject};
use object_store_wal::catalog::Retention;
use object_store_wal::io::WalIo;
use object_store_wal::store::{persist_within, CreateClock, EpochState, PersistOutcome};
use object_store_wal::{AppendReceipt, Catalog, Config, Durability, EpochEndReason, Error, Result};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{debug, info_span, warn, Instrument};

use crate::messages::{AppendRequest, Counters, WalMsg, WriterMsg};
use crate::reclaimer::ReclaimerMsg;

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
    /// The floor bookkeeping, from the recovered catalog.
    pub retention: Retention,
    /// Bumped with the sequence of every object acknowledged (followers wait on it).
    pub commits: tokio::sync::watch::Sender<u64>,
    /// Told every floor acknowledged.
    pub reclaimer: Option<ActorRef<ReclaimerMsg>>,
    /// When the opening object's create started, on `clock`.
    pub opening_started: std::time::Duration,
}

type Waiter = RpcReplyPort<Result<AppendReceipt>>;

struct Flight {
    sealed: Arc<SealedObject>,
    waiters: Vec<Waiter>,
    started: bool,
    outcome: Option<PersistOutcome>,
    /// Never sent, for this reason; the epoch ends when it reaches the head.
    refused: Option<Error>,
}

/// The writer's state.
pub struct WriterState {
    args: WriterArgs,
    epoch: EpochState,
    batch: Batch,
    batch_waiters: Vec<Waiter>,
    batch_bytes: u64,
    generation: u64,
    objects: BTreeMap<u64, Flight>,
    uploading: usize,
    pending_bytes: u64,
    waiting: VecDeque<AppendRequest>,
    last_start: Option<Instant>,
    pump_armed: bool,
    terminal: Option<Error>,
    stopping: Vec<RpcReplyPort<()>>,
    /// When the last create of the epoch started, on the create clock (the opening
    /// object's at first): the next must start within `Config::link_window`.
    link_started: std::time::Duration,
    /// An object was refused: nothing more starts under this epoch.
    halted: bool,
}

/// The writer actor.
pub struct Writer;

fn payload_bytes(req: &AppendRequest) -> u64 {
    req.parts
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .map(|e| e.len() as u64)
        .sum()
}

fn reply<T>(port: RpcReplyPort<T>, value: T) {
    // A caller that gave up waiting dropped its end; nothing to do.
    let _ = port.send(value);
}

impl WriterState {
    fn fail_append(&self, req: AppendRequest, error: Error) {
        Counters::add(&self.args.counters.failed_appends, 1);
        reply(req.reply, Err(error));
    }

    fn on_append(&mut self, myself: &ActorRef<WriterMsg>, req: AppendRequest) {
        if let Some(e) = &self.terminal {
            let e = e.with_durability(Durability::NotWritten);
            return self.fail_append(req, e);
        }
        if !self.stopping.is_empty() {
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
                let pending_bytes = self.pending_bytes;
                return self.fail_append(req, Error::Backpressure { pending_bytes, max });
            }
            self.waiting.push_back(req);
            return;
        }
        self.admit(myself, req, bytes);
        self.progress(myself);
    }

    fn admit(&mut self, myself: &ActorRef<WriterMsg>, req: AppendRequest, bytes: u64) {
        let AppendRequest {
            parts, reply: port, ..
        } = req;
        let parts = match self.batch.admit(parts) {
            Ok(_) => {
                self.push_waiter(myself, port, bytes);
                return;
            }
            Err(Admit::Invalid(e)) => {
                Counters::add(&self.args.counters.failed_appends, 1);
                return reply(port, Err(e));
            }
            Err(Admit::Full(parts)) => parts,
        };
        if let Err(e) = self.seal() {
            Counters::add(&self.args.counters.failed_appends, 1);
            return reply(port, Err(e));
        }
        match self.batch.admit(parts) {
            Ok(_) => self.push_waiter(myself, port, bytes),
            // Validated alone, so an empty batch takes it; anything else is a bug.
            Err(Admit::Invalid(e)) => reply(port, Err(e)),
            Err(Admit::Full(_)) => reply(port, Err(Error::BatchFull)),
        }
    }

    fn push_waiter(&mut self, myself: &ActorRef<WriterMsg>, port: Waiter, bytes: u64) {
        if self.batch_waiters.is_empty() {
            let generation = self.generation;
            myself.send_after(self.args.config.flush_interval, move || {
                WriterMsg::FlushTick { generation }
            });
        }
        self.batch_waiters.push(port);
        self.batch_bytes += bytes;
        self.pending_bytes += bytes;
        Counters::set(&self.args.counters.pending_bytes, self.pending_bytes);
        let full = self.batch.encoded_len() >= self.args.config.max_batch_bytes
            || self.batch.region_full();
        if full {
            if let Err(e) = self.seal() {
                warn!(error = %e, "cannot seal");
            }
        }
    }

    /// Seals the open batch as the next object of the epoch (not yet started).
    fn seal(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let lowest_uncommitted = self
            .objects
            .keys()
            .next()
            .copied()
            .unwrap_or(self.epoch.next_sequence);
        self.epoch.floor = self.args.retention.floor_for(lowest_uncommitted);
        let sealed = self.epoch.seal(&mut self.batch)?;
        let _span = info_span!(
            "seal",
            sequence = sealed.sequence(),
            entries = sealed.entries
        )
        .entered();
        let waiters = std::mem::take(&mut self.batch_waiters);
        self.batch_bytes = 0;
        self.generation += 1;
        self.objects.insert(
            sealed.sequence(),
            Flight {
                sealed: Arc::new(sealed),
                waiters,
                started: false,
                outcome: None,
                refused: None,
            },
        );
        Ok(())
    }

    /// Seals at once when nothing is uploading, then starts what may start.
    fn progress(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.terminal.is_some() {
            return;
        }
        // A lone appender does not wait for the timer: with nothing uploading and nothing
        // sealed, the batch goes at once. Under load, batches grow while uploads run.
        // It waits only for `min_object_interval` since the last start, still collecting.
        let idle = self.uploading == 0 && self.objects.values().all(|f| f.started);
        if idle && !self.batch.is_empty() {
            let now = Instant::now();
            let due = self
                .last_start
                .map(|last| last + self.args.config.min_object_interval);
            match due {
                Some(due) if now < due => {
                    if !self.pump_armed {
                        self.pump_armed = true;
                        myself.send_after(due - now, || WriterMsg::Pump);
                    }
                }
                _ => {
                    if let Err(e) = self.seal() {
                        warn!(error = %e, "cannot seal");
                    }
                }
            }
        }
        self.pump(myself);
    }

    fn pump(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.halted {
            return;
        }
        let interval = self.args.config.min_object_interval;
        let max_in_flight = self.args.config.max_in_flight;
        let next: Vec<u64> = self
            .objects
            .iter()
            .filter(|(_, f)| !f.started)
            .map(|(s, _)| *s)
            .collect();
        for sequence in next {
            if self.uploading >= max_in_flight {
                return;
            }
            let now = Instant::now();
            if let Some(last) = self.last_start {
                let due = last + interval;
                if now < due {
                    if !self.pump_armed {
                        self.pump_armed = true;
                        myself.send_after(due - now, || WriterMsg::Pump);
                    }
                    return;
                }
            }
            let Some(flight) = self.objects.get_mut(&sequence) else {
                return;
            };
            let link_now = self.args.clock.now();
            if link_now.saturating_sub(self.link_started) > self.args.config.link_window() {
                // Our key may have been reclaimed by a newer instance since our last
                // create: a create now could land unfenced. Never send it.
                flight.refused = Some(Error::EpochEnded {
                    epoch: self.epoch.epoch,
                    sequence,
                    reason: EpochEndReason::PredecessorTooOld,
                    durability: Durability::NotWritten,
                });
                self.halted = true;
                self.acknowledge();
                return;
            }
            self.link_started = link_now;
            flight.started = true;
            self.uploading += 1;
            self.last_start = Some(now);
            Counters::set(&self.args.counters.in_flight, self.uploading as u64);
            let sealed = flight.sealed.clone();
            let io = self.args.io.clone();
            let retry = self.args.config.retry;
            let max_duration = self.args.config.max_create_duration;
            let clock = self.args.clock.clone();
            let me = myself.clone();
            let span = info_span!("upload", sequence, bytes = sealed.encoded.len());
            tokio::spawn(
                async move {
                    let outcome =
                        persist_within(&io, &sealed.encoded, &retry, max_duration, clock.as_ref())
                            .await;
                    // A stopped writer no longer listens; its waiters were answered.
                    let _ = me.cast(WriterMsg::Uploaded { sequence, outcome });
                }
                .instrument(span),
            );
        }
    }

    fn on_uploaded(
        &mut self,
        myself: &ActorRef<WriterMsg>,
        sequence: u64,
        outcome: PersistOutcome,
    ) {
        self.uploading = self.uploading.saturating_sub(1);
        Counters::set(&self.args.counters.in_flight, self.uploading as u64);
        if let Some(f) = self.objects.get_mut(&sequence) {
            f.outcome = Some(outcome);
        }
        self.acknowledge();
        if self.terminal.is_none() {
            self.admit_waiting(myself);
            self.progress(myself);
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
                .error(&self.args.io, self.epoch.epoch, sequence)
                .unwrap_or(Error::EpochEnded {
                    epoch: self.epoch.epoch,
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
        let inserted = self
            .args
            .catalog
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(encoded.header(), encoded.records(), encoded.len());
        if let Err(e) = inserted {
            // Cannot happen: the writer extends its own chain. Fail rather than ack.
            let error = Error::Poisoned {
                reason: e.to_string(),
                durability: Durability::MayBeDurable,
            };
            for w in flight.waiters {
                reply(w, Err(error.clone()));
            }
            self.end_epoch(error);
            return;
        }
        let header = encoded.header();
        self.args
            .retention
            .committed(header.sequence, encoded.records());
        self.args.commits.send_replace(header.sequence);
        let c = &self.args.counters;
        if header.floor > Counters::get(&c.floor) {
            Counters::set(&c.floor, header.floor);
            if let Some(r) = &self.args.reclaimer {
                let _ = r.cast(ReclaimerMsg::Floor(header.floor));
            }
        }
        Counters::add(&c.objects, 1);
        Counters::add(&c.object_bytes, encoded.len());
        Counters::add(&c.entries, sealed.entries);
        Counters::add(&c.appends, sealed.receipts.len() as u64);
        Counters::add(&c.payload_bytes, sealed.payload_bytes);
        Counters::add(&c.puts, attempts);
        Counters::add(&c.retries, attempts.saturating_sub(1));
        self.pending_bytes = self.pending_bytes.saturating_sub(sealed.payload_bytes);
        Counters::set(&c.pending_bytes, self.pending_bytes);
        for (waiter, receipt) in flight.waiters.into_iter().zip(sealed.receipts.iter()) {
            reply(waiter, Ok(receipt.clone()));
        }
    }

    /// Ends the epoch: every waiter gets an error with its durability; nothing more is
    /// written; the supervisor is told.
    fn end_epoch(&mut self, error: Error) {
        if self.terminal.is_some() {
            return;
        }
        warn!(epoch = self.epoch.epoch, error = %error, "the epoch ends");
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
                        epoch: self.epoch.epoch,
                        sequence: flight.sealed.sequence(),
                        reason: EpochEndReason::EarlierObjectFailed,
                        durability: Durability::MayBeDurable,
                    },
                }
            };
            first = false;
            for w in flight.waiters {
                failed += 1;
                reply(w, Err(e.clone()));
            }
        }
        let not_written = error.with_durability(Durability::NotWritten);
        for w in std::mem::take(&mut self.batch_waiters) {
            failed += 1;
            reply(w, Err(not_written.clone()));
        }
        for req in std::mem::take(&mut self.waiting) {
            failed += 1;
            reply(req.reply, Err(not_written.clone()));
        }
        self.batch = Batch::new(self.args.config.batch_limits());
        self.pending_bytes = 0;
        Counters::set(&self.args.counters.pending_bytes, 0);
        Counters::add(&self.args.counters.failed_appends, failed);
        self.terminal = Some(error.clone());
        let _ = self.args.supervisor.cast(WalMsg::WriterEnded {
            epoch: self.epoch.epoch,
            error,
        });
    }

    fn admit_waiting(&mut self, myself: &ActorRef<WriterMsg>) {
        let max = self.args.config.max_pending_bytes;
        while let Some(req) = self.waiting.front() {
            let bytes = payload_bytes(req);
            if self.pending_bytes > 0 && self.pending_bytes + bytes > max {
                return;
            }
            if let Some(req) = self.waiting.pop_front() {
                self.admit(myself, req, bytes);
            }
        }
    }

    /// Keeps the epoch inside its link window while idle: half a window after the last
    /// create, an idle writer writes an empty object (96 bytes; the only request an idle
    /// WAL makes). Re-arms itself for what is left of the half window otherwise.
    fn keep_alive(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.terminal.is_some() || self.halted || !self.stopping.is_empty() {
            return;
        }
        let half = self.args.config.link_window() / 2;
        let since = self.args.clock.now().saturating_sub(self.link_started);
        let idle = self.batch.is_empty() && self.objects.is_empty();
        if since >= half && idle {
            let lowest_uncommitted = self.epoch.next_sequence;
            self.epoch.floor = self.args.retention.floor_for(lowest_uncommitted);
            match self.epoch.seal(&mut self.batch) {
                Ok(sealed) => {
                    debug!(
                        sequence = sealed.sequence(),
                        "idle: writing an empty object to keep the epoch's link window"
                    );
                    self.generation += 1;
                    self.objects.insert(
                        sealed.sequence(),
                        Flight {
                            sealed: Arc::new(sealed),
                            waiters: Vec::new(),
                            started: false,
                            outcome: None,
                            refused: None,
                        },
                    );
                    self.pump(myself);
                }
                Err(e) => warn!(error = %e, "cannot seal an empty object"),
            }
            myself.send_after(half, || WriterMsg::KeepAlive);
        } else {
            let wait = if since >= half { half } else { half - since };
            myself.send_after(wait.max(std::time::Duration::from_millis(1)), || {
                WriterMsg::KeepAlive
            });
        }
    }

    fn on_stop(&mut self, myself: &ActorRef<WriterMsg>, port: RpcReplyPort<()>) {
        self.stopping.push(port);
        let stopped = Error::Stopped {
            durability: Durability::NotWritten,
        };
        let mut failed = 0u64;
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
                for w in f.waiters {
                    failed += 1;
                    reply(w, Err(stopped.clone()));
                }
            }
        }
        self.batch = Batch::new(self.args.config.batch_limits());
        Counters::add(&self.args.counters.failed_appends, failed);
        self.maybe_finish_stop(myself);
    }

    fn maybe_finish_stop(&mut self, myself: &ActorRef<WriterMsg>) {
        if self.stopping.is_empty() || self.uploading > 0 {
            return;
        }
        // Every started upload came back: what was durable in order was acknowledged,
        // the rest failed in `acknowledge`.
        for port in std::mem::take(&mut self.stopping) {
            reply(port, ());
        }
        debug!(epoch = self.epoch.epoch, "writer stopped");
        myself.stop(Some("stopped".into()));
    }
}

impl Actor for Writer {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = WriterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        Ok(WriterState {
            epoch: args.epoch,
            batch: Batch::new(args.config.batch_limits()),
            batch_waiters: Vec::new(),
            batch_bytes: 0,
            generation: 0,
            objects: BTreeMap::new(),
            uploading: 0,
            pending_bytes: 0,
            waiting: VecDeque::new(),
            last_start: None,
            pump_armed: false,
            terminal: None,
            stopping: Vec::new(),
            link_started: args.opening_started,
            halted: false,
            args,
        })
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
            WriterMsg::FlushTick { generation } => {
                if generation == state.generation && state.terminal.is_none() {
                    if let Err(e) = state.seal() {
                        warn!(error = %e, "cannot seal");
                    }
                    state.pump(&myself);
                }
            }
            WriterMsg::KeepAlive => state.keep_alive(&myself),
            WriterMsg::Pump => {
                state.pump_armed = false;
                if state.terminal.is_none() {
                    state.progress(&myself);
                }
            }
            WriterMsg::Uploaded { sequence, outcome } => {
                state.on_uploaded(&myself, sequence, outcome)
            }
            WriterMsg::Stop { reply } => state.on_stop(&myself, reply),
            WriterMsg::Obsolete { region, id } => {
                let catalog = state.args.catalog.read().unwrap_or_else(|p| p.into_inner());
                match id {
                    Some(id) => state.args.retention.obsolete(&catalog, region, id),
                    None => state.args.retention.obsolete_all(&catalog, region),
                }
            }
            #[cfg(feature = "testing")]
            WriterMsg::Panic => panic!("injected writer panic"),
        }
        Ok(())
    }
}
