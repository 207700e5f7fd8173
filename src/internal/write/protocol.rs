//! The write protocol of one epoch as a pure state machine: no I/O, no async, no clock
//! of its own.
//!
//! Both writers of the crate drive a [`WriteProtocol`]: the actor runtime's writer (its
//! mailbox, timers and upload tasks) and the sequential front end
//! ([`ObjectStoreLogStore`](crate::ObjectStoreLogStore)). They feed it events (an append
//! admitted, a create answered with its outcome, the time, a stop) and carry out the
//! [`Action`]s it queues (start this create, acknowledge these appends, fail those with
//! this error, publish this floor, the epoch ended, wake me then), as `quinn` drives
//! `quinn-proto`. Every rule of DESIGN.md "Writing an object" lives here once:
//!
//! - **One sealing decision** ([`WriteProtocol::poll`]): the open batch becomes the next
//!   object when it is full (`max_batch_bytes`, a region at 2^20 entries, or an append
//!   that does not fit), and otherwise as soon as an upload slot is free and the next
//!   start slot has come (slots one `min_object_interval` apart), after a short gather:
//!   a batch that became sealable by its first entry, or by the end of the interval it
//!   waited for, waits until it holds as many appends as the last object acknowledged
//!   (in a closed loop those callers come back within milliseconds), for at most
//!   `gather`. An idle epoch seals an empty object every half link window. A sequential
//!   caller seals by asking ([`WriteProtocol::flush`]).
//! - **Starting creates** in sequence order, at most `max_in_flight` at once, no faster
//!   than `min_object_interval`; one whose create would start outside the epoch's link
//!   window is refused, never sent, and the epoch ends when it reaches the head.
//! - **Pacing** under a throttling store ([`WriteProtocol::handle_throttled`],
//!   [`Pacer`]): a throttle reply widens the interval between starts, and while an
//!   object's create is being retried after one, no other object starts (an urgent one
//!   aside) and the open batch is not sealed for a free slot: it grows. Objects that
//!   land without one narrow the interval back to `min_object_interval`. Pacing changes
//!   only when creates start, never what an outcome means.
//! - **Acknowledging** strictly in sequence order: an object is acknowledged only when it
//!   and every earlier object of the epoch are durable; its floor is published when it
//!   rose.
//! - **Failing**: the first object whose outcome is not durable ends the epoch; its
//!   appends and every later one's fail, each with the durability its object had (sent
//!   or not), and nothing after it is acknowledged. An ended epoch admits nothing more.
//! - **Stopping**: nothing more is admitted, sealed or started; what was never sent
//!   fails as `Stopped`; uploads in flight are waited for, or abandoned as unknown
//!   outcomes once their time is up ([`WriteProtocol::abandon_uploads`]).
//!
//! The catalog and retention are reached through [`Chain`]: the floor the next object
//! carries, and the commit of an acknowledged object. Releases, acquires and the
//! control snapshot live beside it (`control`), on the same state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::error::{Durability, EpochEndReason, Error, Released, Result};
use crate::internal::chain::catalog::{Catalog, Retention};
use crate::internal::chain::holdings::{node_region, Holdings, Piece};
use crate::internal::store::codec::SegmentCodec;
use crate::internal::write::batch::{
    AppendParts, AppendReceipt, Batch, BatchLimits, NotAdmitted, SealedObject,
};
use crate::internal::write::epoch::{Epoch, WritePosition};
use crate::internal::write::pace::Pacer;
use crate::internal::write::persist::PersistOutcome;

mod chain;
mod control;

pub use chain::{Chain, SharedChain};
pub use control::ControlTicket;

/// The longest a batch that could be sealed at once gathers first.
pub const MAX_GATHER: Duration = Duration::from_millis(5);

/// The granularity of tokio's timers: a timer fires up to this late.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// The moment an event happens, on both clocks the protocol reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time, for the sealing decision's intervals and gathering.
    pub at: Instant,
    /// The creation clock ([`CreateClock`](crate::CreateClock)), for the link window.
    pub clock: Duration,
}

/// The bounds the protocol applies, and how it seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Objects uploading at once.
    pub max_in_flight: usize,
    /// The least time between two create starts.
    pub min_object_interval: Duration,
    /// A batch of this many encoded bytes is sealed.
    pub max_batch_bytes: u64,
    /// The batch's own limits.
    pub batch: BatchLimits,
    /// Each create starts within this of the previous one (`Config::link_window`).
    pub link_window: Duration,
    /// How long a batch that could be sealed at once gathers at most.
    pub gather: Duration,
    /// The segment transforms objects are sealed with.
    pub codec: SegmentCodec,
}

impl Limits {
    /// The actor runtime's: the configuration's bounds, gathering a quarter of
    /// `min_object_interval` at most ([`MAX_GATHER`] at most).
    pub fn from_config(config: &Config) -> Self {
        Limits {
            max_in_flight: config.max_in_flight,
            min_object_interval: config.min_object_interval,
            max_batch_bytes: config.max_batch_bytes,
            batch: BatchLimits::of(config),
            link_window: config.link_window(),
            gather: (config.min_object_interval / 4).min(MAX_GATHER),
            codec: SegmentCodec::of(config),
        }
    }

    /// These limits for the WAL whose chain `catalog` holds: under `cipher = auto` an
    /// existing WAL written with cipher 1 keeps it ([`Cipher::for_wal`](crate::transform::Cipher::for_wal)).
    pub fn for_chain(mut self, config: &Config, catalog: &Catalog) -> Self {
        self.codec.cipher = config.cipher.for_wal(catalog.newest_cipher());
        self
    }

    /// The sequential front end's: one object at a time, sealed when the caller asks.
    pub fn sequential(config: &Config) -> Self {
        Limits {
            max_in_flight: 1,
            min_object_interval: Duration::ZERO,
            gather: Duration::ZERO,
            ..Limits::from_config(config)
        }
    }
}

/// An admitted append's caller and when it was admitted.
#[derive(Debug)]
pub struct Pending<W> {
    /// Whoever waits for the answer.
    pub waiter: W,
    /// When it was admitted (its append-to-durable latency starts here).
    pub admitted: Instant,
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Action<W> {
    /// Start the create of this object (DESIGN.md's outcome table, to a definite
    /// outcome), and report it with [`WriteProtocol::handle_outcome`].
    Create(Arc<SealedObject>),
    /// The object is durable and on the chain: answer each waiter with its receipt (in
    /// order, `sealed.receipts`).
    Acknowledge {
        /// The object.
        sealed: Arc<SealedObject>,
        /// Its appends' callers, in admission order.
        waiters: Vec<Pending<W>>,
        /// Create attempts made.
        attempts: u32,
        /// When it was sealed.
        sealed_at: Instant,
        /// Objects live on the chain now.
        live_objects: usize,
    },
    /// The floor acknowledged rose to this: publish it (the reclaimer, the gauge).
    PublishFloor(u64),
    /// Answer these appends with this error.
    Fail {
        /// The appends' callers.
        waiters: Vec<Pending<W>>,
        /// Their answer.
        error: Error,
    },
    /// Ids handed out at admission for the object `sequence` will never be
    /// acknowledged: it failed with `error`.
    HandedOutFailed {
        /// The object's id base (sequence plus id offset): its ids are
        /// `id_base << 20 | position`.
        id_base: u64,
        /// Why.
        error: Error,
    },
    /// The epoch ended: nothing more is admitted or written under it. Comes before the
    /// failures of the appends it ends.
    EpochEnded {
        /// Why.
        error: Error,
        /// The store answered with a conflict (another object held the key).
        conflict: bool,
    },
    /// Call [`WriteProtocol::poll`] again at this instant.
    WakeAt(Instant),
}

/// A successful admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The append's index among the open batch's appends.
    pub index: usize,
    /// Its ids, when asked for at admission: final, since the batch is sealed whole as
    /// the next object.
    pub ids: Option<AppendReceipt>,
}

/// What to do with an append that does not fit the open batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Seal the batch and admit the append into the next one.
    Seal,
    /// Refuse it with [`Error::BatchFull`] (the caller flushes).
    Refuse,
}

/// Why the open batch is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealReason {
    /// It reached `max_batch_bytes` or a region its 2^20 entries, or the next append
    /// does not fit.
    Full,
    /// An upload slot is free, the start slot came and the batch has gathered.
    SlotFree,
    /// The epoch has been idle for half its link window: an empty object keeps it.
    KeepAlive,
    /// The caller asked ([`WriteProtocol::flush`]).
    Flush,
    /// The id offset was raised ([`WriteProtocol::raise_ids_above`]): the next object
    /// carries it, even empty.
    Raise,
    /// A release or an acquire put a control snapshot in the batch: it is written now,
    /// not at the next start slot.
    Control,
}

/// A sealed object, from sealing to its acknowledgement.
#[derive(Debug)]
struct Flight<W> {
    sealed: Arc<SealedObject>,
    waiters: Vec<Pending<W>>,
    started: bool,
    outcome: Option<PersistOutcome>,
    /// Never sent, for this reason; the epoch ends when it reaches the head.
    refused: Option<Error>,
    handed_out: bool,
    sealed_at: Instant,
    /// Started without waiting for its start slot (it carries a control snapshot or a
    /// raise that a caller waits for).
    urgent: bool,
    /// The pacer's generation when it started.
    started_under: u64,
    /// Its create met a throttle reply (and, while uploading, is being retried).
    throttled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Writing,
    /// An object was refused before it was sent: nothing more starts.
    Refusing,
    /// Nothing more is admitted, sealed or started.
    Stopping,
}

/// The write protocol of one epoch (see the module docs).
#[derive(Debug)]
pub struct WriteProtocol<W, C> {
    limits: Limits,
    chain: C,
    epoch: Epoch,
    lifecycle: Lifecycle,
    batch: Batch,
    batch_waiters: Vec<Pending<W>>,
    batch_handed_out: bool,
    batch_opened: Option<Instant>,
    objects: BTreeMap<u64, Flight<W>>,
    /// Started and not yet answered (nor abandoned).
    uploading: BTreeSet<u64>,
    pending_bytes: u64,
    /// The earliest the next create may start: slots one `min_object_interval` apart.
    next_slot: Option<Instant>,
    /// Appends of the last object acknowledged with any.
    expected_burst: usize,
    last_ack: Option<Instant>,
    /// The id offset of the last object sealed (the opening object's at first): below
    /// the epoch's, a raise waits for an object to carry it.
    sealed_id_offset: u64,
    /// The id offset of the last object acknowledged (the opening object's at first).
    acknowledged_id_offset: u64,
    /// The sequence of the last object acknowledged (the opening object's at first).
    acknowledged_sequence: u64,
    /// The regions released and the pieces held: the control snapshot's state, with
    /// what is in flight (appends of a region released are refused from the release on).
    holdings: Holdings,
    /// The state the last acknowledged snapshot records (what a restart would read).
    acknowledged_holdings: Holdings,
    /// Snapshots sealed or in the open batch, not yet acknowledged, by sequence.
    snapshots_in_flight: BTreeMap<u64, Holdings>,
    /// The open batch is to be sealed and started now (a release's or an acquire's).
    batch_urgent: bool,
    /// The interval between object starts: `min_object_interval`, wider while throttled.
    pacer: Pacer,
    actions: VecDeque<Action<W>>,
}

impl<W, C: Chain> WriteProtocol<W, C> {
    /// The epoch opened at `position`, its opening object's create started at
    /// `opening_started` on the creation clock. The opening object is acknowledged: its
    /// floor is published if it rose.
    pub fn new(
        position: WritePosition,
        opening_started: Duration,
        limits: Limits,
        mut chain: C,
    ) -> Self {
        let mut actions = VecDeque::new();
        let pacer = Pacer::new(limits.min_object_interval);
        if let Some(floor) = chain.acknowledge_floor(position.floor) {
            actions.push_back(Action::PublishFloor(floor));
        }
        WriteProtocol {
            epoch: Epoch::new(
                position,
                opening_started,
                limits.link_window,
                limits.codec.clone(),
            ),
            batch: Batch::with_id_offset(limits.batch, position.id_offset),
            limits,
            chain,
            lifecycle: Lifecycle::Writing,
            batch_waiters: Vec::new(),
            batch_handed_out: false,
            batch_opened: None,
            objects: BTreeMap::new(),
            uploading: BTreeSet::new(),
            pending_bytes: 0,
            next_slot: None,
            expected_burst: 1,
            last_ack: None,
            sealed_id_offset: position.id_offset,
            acknowledged_id_offset: position.id_offset,
            acknowledged_sequence: position.link.sequence,
            holdings: Holdings::new(),
            acknowledged_holdings: Holdings::new(),
            snapshots_in_flight: BTreeMap::new(),
            batch_urgent: false,
            pacer,
            actions,
        }
    }

    /// The next action to carry out, in order.
    pub fn poll_action(&mut self) -> Option<Action<W>> {
        self.actions.pop_front()
    }

    /// The write position.
    pub fn position(&self) -> WritePosition {
        self.epoch.position()
    }

    /// This epoch's number.
    pub fn epoch(&self) -> u64 {
        self.epoch.number()
    }

    /// Why the epoch ended, if it did.
    pub fn ended(&self) -> Option<&Error> {
        self.epoch.ended()
    }

    /// Payload bytes admitted and not yet acknowledged or failed.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    /// Creates started and not yet answered.
    pub fn uploading(&self) -> usize {
        self.uploading.len()
    }

    /// Whether `bytes` more may be admitted under `max_pending_bytes` (always, when
    /// nothing is pending: an append is never refused for its own size).
    pub fn has_room(&self, bytes: u64, max_pending_bytes: u64) -> bool {
        self.pending_bytes == 0 || self.pending_bytes + bytes <= max_pending_bytes
    }

    /// Whether a stop asked for has finished: nothing uploading any more.
    pub fn stopped(&self) -> bool {
        self.lifecycle == Lifecycle::Stopping && self.uploading.is_empty()
    }

    /// Whether objects are still sealed and started: not stopping, and no object was
    /// refused.
    pub fn is_writing(&self) -> bool {
        self.lifecycle == Lifecycle::Writing
    }

    /// Whether an append would be refused now, and why: the epoch ended, a stop, or an
    /// invalid append. [`admit`](Self::admit) checks the same first.
    pub fn check(&self, parts: &AppendParts) -> Result<()> {
        self.epoch.ensure_open()?;
        if self.lifecycle == Lifecycle::Stopping {
            return Err(Error::Stopped {
                durability: Durability::NotWritten,
            });
        }
        Batch::validate(&self.limits.batch, parts)?;
        for (region, _) in parts {
            self.holdings.refuse(*region, || self.id_bound())?;
        }
        Ok(())
    }

    /// The creation clock's time since the last create started (the opening object's at
    /// first).
    pub fn since_last_create(&self, clock: Duration) -> Duration {
        self.epoch.since_last_create(clock)
    }

    /// Restarts the link window's clock from `clock` (a driver that measures creates on
    /// another clock than the open did).
    pub fn restart_clock(&mut self, clock: Duration) {
        self.epoch.restart_clock(clock);
    }

    /// How long after `clock` the keep-alive decision should be looked at again: half a
    /// link window after the last create (or a whole half, if that has passed).
    pub fn keep_alive_in(&self, clock: Duration) -> Duration {
        let half = self.limits.link_window / 2;
        let since = self.epoch.since_last_create(clock);
        let wait = if since >= half { half } else { half - since };
        wait.max(TIMER_TICK)
    }

    /// Admits an append into the open batch. An append that does not fit is handled as
    /// `when_full` says. With `want_ids`, its ids are returned now (and the batch is
    /// marked as having handed ids out). Refused appends come back with their error.
    /// Call [`poll`](Self::poll) after admitting.
    pub fn admit(
        &mut self,
        parts: AppendParts,
        waiter: W,
        want_ids: bool,
        when_full: WhenFull,
        now: Now,
    ) -> std::result::Result<Admitted, (W, Error)> {
        if let Err(e) = self.check(&parts) {
            return Err((waiter, e));
        }
        let bytes = payload_bytes(&parts);
        let index = match self.batch.admit(parts) {
            Ok(index) => index,
            Err(NotAdmitted::Invalid(e)) => return Err((waiter, e)),
            Err(NotAdmitted::Full(_)) if when_full == WhenFull::Refuse => {
                return Err((waiter, Error::BatchFull))
            }
            Err(NotAdmitted::Full(parts)) => {
                if let Err(e) = self.seal(SealReason::Full, now) {
                    return Err((waiter, e));
                }
                match self.batch.admit(parts) {
                    Ok(index) => index,
                    Err(NotAdmitted::Invalid(e)) => return Err((waiter, e)),
                    // Validated alone, so an empty batch takes it.
                    Err(NotAdmitted::Full(_)) => return Err((waiter, Error::BatchFull)),
                }
            }
        };
        if self.batch_opened.is_none() {
            self.batch_opened = Some(now.at);
        }
        let mut ids = None;
        if want_ids {
            // The open batch becomes the next sequence, whole: the ids are final.
            ids = self
                .batch
                .receipt(index, self.epoch.position().next_sequence);
            self.batch_handed_out |= ids.is_some();
        }
        self.batch_waiters.push(Pending {
            waiter,
            admitted: now.at,
        });
        self.pending_bytes += bytes;
        Ok(Admitted { index, ids })
    }

    /// Whether the open batch holds no append.
    pub fn batch_is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Raises the id offset so that every id this epoch hands out from now on is above
    /// `above_id` (DESIGN.md "Regions moving between nodes"): the open batch is sealed at
    /// the offset its ids were handed out under, and the next object, empty if nothing
    /// else comes, carries the new one ([`poll`](Self::poll) seals it). Returns the id
    /// offset: the raise is durable once an object carrying at least it is acknowledged
    /// ([`acknowledged_id_offset`](Self::acknowledged_id_offset)). The offset never
    /// decreases; a raise it already covers changes nothing.
    pub fn raise_ids_above(&mut self, above_id: u64, now: Now) -> Result<u64> {
        self.ensure_writing()?;
        if self.epoch.ids_above(above_id) {
            // The open batch's ids, and every later one, are above already.
            return Ok(self.epoch.position().id_offset);
        }
        if !self.batch.is_empty() {
            // Ahead of the raise, which waits for it: neither waits for a start slot.
            self.batch_urgent = true;
            self.seal(SealReason::Flush, now)?;
        }
        let raised = self.epoch.raise_ids_above(above_id)?;
        self.batch = Batch::with_id_offset(self.limits.batch, raised);
        Ok(raised)
    }

    fn ensure_writing(&self) -> Result<()> {
        self.epoch.ensure_open()?;
        if self.lifecycle != Lifecycle::Writing {
            return Err(Error::Stopped {
                durability: Durability::NotWritten,
            });
        }
        Ok(())
    }

    /// The id offset of the last object acknowledged: a raise to an offset at most this
    /// is durable.
    pub fn acknowledged_id_offset(&self) -> u64 {
        self.acknowledged_id_offset
    }

    /// The sequential caller's seal: the open batch (if it holds anything) becomes the
    /// next object now; [`poll`](Self::poll) then starts it.
    pub fn flush(&mut self, now: Now) -> Result<()> {
        self.epoch.ensure_open()?;
        if self.batch.is_empty() || self.lifecycle != Lifecycle::Writing {
            return Ok(());
        }
        self.seal(SealReason::Flush, now)
    }

    /// The one sealing decision, then the starts: seals if the decision says so, starts
    /// what may start, and asks for a wake-up when a seal or start waits for time.
    /// Every admission, answer and timer ends here.
    pub fn poll(&mut self, now: Now) {
        if self.epoch.ended().is_some() {
            return;
        }
        match self.seal_reason(now) {
            Some(reason) => {
                // An object that cannot be encoded fails nothing yet: its appends stay
                // in the batch (the error is a bug, and `seal` ended nothing).
                if let Err(e) = self.seal(reason, now) {
                    tracing::warn!(error = %e, ?reason, "cannot seal");
                }
            }
            None if !self.batch.is_empty() && self.slot_free() => {
                if let Some(due) = self.seal_due(now.at) {
                    self.actions.push_back(Action::WakeAt(due));
                }
            }
            None => {}
        }
        self.start_creates(now);
    }

    /// A create answered with its definite outcome: acknowledges what is durable in
    /// order, and ends the epoch at the first other outcome. An answer for a create
    /// abandoned before is ignored.
    pub fn handle_outcome(&mut self, sequence: u64, outcome: PersistOutcome, now: Now) {
        if !self.uploading.remove(&sequence) {
            return;
        }
        if let Some(f) = self.objects.get_mut(&sequence) {
            if matches!(outcome, PersistOutcome::Durable { .. }) && !f.throttled {
                self.pacer.landed(f.started_under);
            }
            f.outcome = Some(outcome);
        }
        self.acknowledge(now);
    }

    /// The create of `sequence`, still uploading, met a throttle reply and is being
    /// retried (DESIGN.md "Throttled stores"): the interval between starts widens (once
    /// for the objects started under the same interval), the next start slot moves to
    /// at least one new interval from now, and nothing else starts until that create
    /// is answered. Changes nothing of what its outcome will mean.
    pub fn handle_throttled(&mut self, sequence: u64, now: Now) {
        if !self.uploading.contains(&sequence) {
            return;
        }
        let Some(f) = self.objects.get_mut(&sequence) else {
            return;
        };
        f.throttled = true;
        if self.pacer.throttled(f.started_under) {
            let slot = now.at + self.pacer.interval();
            self.next_slot = Some(self.next_slot.map_or(slot, |s| s.max(slot)));
            tracing::debug!(
                sequence,
                interval_ms = self.pacer.interval().as_millis() as u64,
                "throttled: objects start further apart"
            );
        }
    }

    /// The interval between object starts now: `min_object_interval`, or wider while
    /// the store throttles creates.
    pub fn object_interval(&self) -> Duration {
        self.pacer.interval()
    }

    /// Whether a create met a throttle reply and is still being retried: no other
    /// object starts meanwhile (an urgent one aside).
    fn retrying_throttled(&self) -> bool {
        self.uploading
            .iter()
            .any(|s| self.objects.get(s).is_some_and(|f| f.throttled))
    }

    /// Stop: nothing more is admitted, sealed or started. The open batch and the objects
    /// never sent fail with [`Error::Stopped`] (`NotWritten`); uploads in flight go on
    /// until answered or abandoned. Returns whether any is still uploading.
    pub fn stop(&mut self) -> bool {
        self.lifecycle = Lifecycle::Stopping;
        let stopped = Error::Stopped {
            durability: Durability::NotWritten,
        };
        self.fail_batch(&stopped);
        for sequence in self.unstarted() {
            if let Some(f) = self.objects.remove(&sequence) {
                self.pending_bytes = self.pending_bytes.saturating_sub(f.sealed.payload_bytes);
                self.fail_flight(f, stopped.clone());
            }
        }
        !self.uploading.is_empty()
    }

    /// The uploads still in flight are abandoned as unknown outcomes (their time is up:
    /// none could be acknowledged any more); which ends the epoch. Returns the sequences
    /// abandoned.
    pub fn abandon_uploads(&mut self, now: Now) -> Vec<u64> {
        let abandoned: Vec<u64> = std::mem::take(&mut self.uploading).into_iter().collect();
        for sequence in &abandoned {
            if let Some(f) = self.objects.get_mut(sequence) {
                f.outcome = Some(PersistOutcome::Unknown {
                    last: Error::Stopped {
                        durability: Durability::MayBeDurable,
                    },
                });
            }
        }
        self.acknowledge(now);
        abandoned
    }

    fn seal_reason(&self, now: Now) -> Option<SealReason> {
        if self.lifecycle != Lifecycle::Writing || self.epoch.ended().is_some() {
            return None;
        }
        if self.epoch.position().id_offset > self.sealed_id_offset {
            return Some(SealReason::Raise);
        }
        if self.batch_urgent && !self.batch.is_empty() {
            return Some(SealReason::Control);
        }
        if self.batch.is_empty() {
            let half = self.limits.link_window / 2;
            let idle = self.objects.is_empty();
            let since = self.epoch.since_last_create(now.clock);
            return (idle && since >= half).then_some(SealReason::KeepAlive);
        }
        if self.batch_full() {
            return Some(SealReason::Full);
        }
        (self.slot_free() && self.seal_due(now.at).is_none()).then_some(SealReason::SlotFree)
    }

    fn batch_full(&self) -> bool {
        self.batch.encoded_len() >= self.limits.max_batch_bytes || self.batch.region_full()
    }

    /// Whether an object sealed now could start: fewer than `max_in_flight` uploading,
    /// no sealed object waiting to start, and no create being retried after a throttle
    /// reply. While every slot is busy (or the store throttles) the batch grows.
    fn slot_free(&self) -> bool {
        self.uploading.len() < self.limits.max_in_flight
            && self.objects.values().all(|f| f.started)
            && !self.retrying_throttled()
    }

    /// When the open batch may be sealed for a free slot: once its start slot came and
    /// it gathered; `None`: now.
    fn seal_due(&self, now: Instant) -> Option<Instant> {
        if let Some(due) = self.next_start_due(now) {
            return Some(due);
        }
        // Gathering counts from when the batch could first have been sealed: its first
        // entry, or the end of the interval it waited for.
        let opened = self.batch_opened?;
        let sealable_since = self.next_slot.map_or(opened, |slot| slot.max(opened));
        let gathered_until = sealable_since + self.limits.gather;
        // A batch whose first entry came after the last acknowledgement may be its
        // callers coming back (a closed loop): it gathers as many appends as that object
        // had. Under open-loop load the batch opened before the acknowledgement, and its
        // arrivals owe nothing to it: waiting would only add latency.
        let returning = self.last_ack.is_some_and(|ack| opened >= ack);
        let gathered =
            !returning || self.batch.append_count() >= self.expected_burst || now >= gathered_until;
        (!gathered).then_some(gathered_until)
    }

    fn next_start_due(&self, now: Instant) -> Option<Instant> {
        self.next_slot.filter(|slot| now < *slot)
    }

    /// Seals the open batch (or, for a keep-alive, an empty one) as the next object,
    /// carrying the chain's floor; not yet started.
    fn seal(&mut self, reason: SealReason, now: Now) -> Result<()> {
        if self.batch.is_empty() && reason != SealReason::KeepAlive && reason != SealReason::Raise {
            return Ok(());
        }
        let lowest_uncommitted = self
            .objects
            .keys()
            .next()
            .copied()
            .unwrap_or(self.epoch.position().next_sequence);
        // (Not while a snapshot is on its way: the pin moves when it lands.)
        if !self.batch.holds_control()
            && self.snapshots_in_flight.is_empty()
            && self.chain.control_holds_floor(lowest_uncommitted)
        {
            // The last snapshot alone holds the floor: a copy moves it on (or, holding
            // nothing, it needs no pin). One that does not fit waits for the next object.
            if self.holdings.is_empty() {
                self.chain.unpin_control();
            } else if let Ok(snapshot) = self.holdings.snapshot() {
                if self.batch.put_control(snapshot).is_ok() {
                    let next = self.epoch.position().next_sequence;
                    self.snapshots_in_flight.insert(next, self.holdings.clone());
                }
            }
        }
        let floor = self.chain.floor_for(lowest_uncommitted);
        let sealed = self.epoch.seal(&mut self.batch, floor)?;
        self.sealed_id_offset = sealed.header().id_offset;
        tracing::debug!(
            sequence = sealed.sequence(),
            entries = sealed.entries,
            ?reason,
            "sealed"
        );
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
                sealed_at: now.at,
                urgent: std::mem::take(&mut self.batch_urgent) || reason == SealReason::Raise,
                started_under: 0,
                throttled: false,
            },
        );
        Ok(())
    }

    /// The sealed objects not started yet, in sequence order.
    fn unstarted(&self) -> Vec<u64> {
        let unstarted = self.objects.iter().filter(|(_, f)| !f.started);
        unstarted.map(|(s, _)| *s).collect()
    }

    /// Starts the sealed objects in sequence order, up to `max_in_flight` uploading and
    /// no faster than `min_object_interval`; refuses one whose create would start outside
    /// the link window.
    fn start_creates(&mut self, now: Now) {
        if self.lifecycle != Lifecycle::Writing {
            return;
        }
        for sequence in self.unstarted() {
            if self.uploading.len() >= self.limits.max_in_flight {
                return;
            }
            let urgent = self.objects.get(&sequence).is_some_and(|f| f.urgent);
            // A create retried after a throttle reply goes first: its answer polls again.
            if !urgent && self.retrying_throttled() {
                return;
            }
            if let Some(due) = self.next_start_due(now.at).filter(|_| !urgent) {
                self.actions.push_back(Action::WakeAt(due));
                return;
            }
            let refusal = self.epoch.start_create(sequence, now.clock).err();
            let Some(flight) = self.objects.get_mut(&sequence) else {
                return;
            };
            if let Some(refusal) = refusal {
                flight.refused = Some(refusal);
                self.lifecycle = Lifecycle::Refusing;
                self.acknowledge(now);
                return;
            }
            flight.started = true;
            flight.started_under = self.pacer.generation();
            // The next slot is an interval after this one, or after this start if it
            // came more than a timer tick late (idle): starts on the grid are never
            // closer than an interval less a tick, and never more than one per interval
            // on average. An urgent object (a release's or an acquire's, or the batch a
            // raise seals) starts beside the grid and leaves it as it was: the appends
            // behind it keep their slot; each adds one start to the grid's.
            if !urgent {
                let interval = self.pacer.interval();
                let slack = interval.min(TIMER_TICK);
                let on_grid = self.next_slot.map(|slot| slot + interval);
                let from_now = now.at + interval - slack;
                self.next_slot = Some(on_grid.map_or(now.at + interval, |g| g.max(from_now)));
            }
            self.uploading.insert(sequence);
            self.actions
                .push_back(Action::Create(flight.sealed.clone()));
        }
    }

    /// Acknowledges durable objects in sequence order; ends the epoch at the first other
    /// outcome.
    fn acknowledge(&mut self, now: Now) {
        while let Some(entry) = self.objects.first_entry() {
            if let Some(error) = entry.get().refused.clone() {
                self.end_epoch(error, false);
                return;
            }
            let sequence = *entry.key();
            let attempts = match &entry.get().outcome {
                None => return,
                Some(PersistOutcome::Durable { attempts }) => *attempts,
                Some(other) => {
                    let conflict = !matches!(
                        other,
                        PersistOutcome::Unknown { .. } | PersistOutcome::Refused(_)
                    );
                    let error =
                        other
                            .error(self.epoch.number(), sequence)
                            .unwrap_or(Error::EpochEnded {
                                epoch: self.epoch.number(),
                                sequence,
                                reason: EpochEndReason::UnknownOutcome,
                                durability: Durability::MayBeDurable,
                            });
                    self.end_epoch(error, conflict);
                    return;
                }
            };
            let flight = entry.remove();
            let live_objects = match self.chain.commit(&flight.sealed) {
                Ok(live) => live,
                Err(error) => {
                    self.fail_flight(flight, error.clone());
                    self.end_epoch(error, false);
                    return;
                }
            };
            let sealed = flight.sealed;
            self.acknowledged_id_offset = sealed.header().id_offset;
            self.acknowledged_sequence = sequence;
            if let Some(holdings) = self.snapshots_in_flight.remove(&sequence) {
                self.acknowledged_holdings = holdings;
            }
            self.pending_bytes = self.pending_bytes.saturating_sub(sealed.payload_bytes);
            if !sealed.receipts.is_empty() {
                self.expected_burst = sealed.receipts.len();
                self.last_ack = Some(now.at);
            }
            // The floor first: once an append is answered, the floor it raised is seen.
            if let Some(floor) = self.chain.acknowledge_floor(sealed.header().floor) {
                self.actions.push_back(Action::PublishFloor(floor));
            }
            self.actions.push_back(Action::Acknowledge {
                sealed,
                waiters: flight.waiters,
                attempts,
                sealed_at: flight.sealed_at,
                live_objects,
            });
        }
    }

    /// Fails a flight's appends (and its handed-out ids) with `error`.
    fn fail_flight(&mut self, flight: Flight<W>, error: Error) {
        if flight.handed_out {
            self.actions.push_back(Action::HandedOutFailed {
                id_base: flight.sealed.header().id_base(),
                error: error.clone(),
            });
        }
        if !flight.waiters.is_empty() {
            self.actions.push_back(Action::Fail {
                waiters: flight.waiters,
                error,
            });
        }
    }

    /// Fails the open batch's appends (dropped unsent) with `error`.
    fn fail_batch(&mut self, error: &Error) {
        if std::mem::take(&mut self.batch_handed_out) {
            self.actions.push_back(Action::HandedOutFailed {
                id_base: self.epoch.position().next_header().id_base(),
                error: error.clone(),
            });
        }
        self.pending_bytes = self
            .pending_bytes
            .saturating_sub(self.batch.payload_bytes());
        let waiters = std::mem::take(&mut self.batch_waiters);
        if !waiters.is_empty() {
            self.actions.push_back(Action::Fail {
                waiters,
                error: error.clone(),
            });
        }
        self.batch = Batch::with_id_offset(self.limits.batch, self.epoch.position().id_offset);
        self.batch_opened = None;
        self.batch_urgent = false;
    }

    /// Ends the epoch: every waiter gets an error with its durability; nothing more is
    /// admitted or written.
    fn end_epoch(&mut self, error: Error, conflict: bool) {
        if !self.epoch.end(error.clone()) {
            return;
        }
        let epoch = self.epoch.number();
        tracing::warn!(epoch, error = %error, "the epoch ends");
        self.actions.push_back(Action::EpochEnded {
            error: error.clone(),
            conflict,
        });
        let mut first = true;
        for (_, flight) in std::mem::take(&mut self.objects) {
            let e = if first {
                error.clone()
            } else if !flight.started {
                error.with_durability(Durability::NotWritten)
            } else {
                match &error {
                    Error::Fenced { .. } | Error::Poisoned { .. } | Error::CommitRefused { .. } => {
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
            self.fail_flight(flight, e);
        }
        self.fail_batch(&error.with_durability(Durability::NotWritten));
        self.pending_bytes = 0;
    }
}

/// The payload bytes of an append (what `max_pending_bytes` counts).
pub fn payload_bytes(parts: &AppendParts) -> u64 {
    parts
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .map(|e| e.len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    //! Property tests over random event orders: appends, time, create answers of every
    //! kind in any order, obsolete regions, a stop and the abandonment of uploads.

    use std::collections::{BTreeMap, BTreeSet};

    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::format::control::CONTROL_REGION;
    use crate::format::{entry_id, Header, Link};

    #[derive(Debug, Clone)]
    enum Answer {
        Durable,
        Fenced,
        StaleTail,
        Unknown,
        TooSlow,
        Poisoned,
    }

    #[derive(Debug, Clone)]
    enum Event {
        Append {
            region: u64,
            bytes: usize,
            want_ids: bool,
        },
        Advance(u64),
        Answer {
            pick: usize,
            answer: Answer,
        },
        Obsolete(u64),
        /// Raise the id offset above the id base this many objects past the next one.
        Raise(u64),
        /// A throttle reply to the create of an uploading object (picked like an answer).
        Throttle(usize),
        Stop,
        Abandon,
    }

    fn answer() -> impl Strategy<Value = Answer> {
        prop_oneof![
            8 => Just(Answer::Durable),
            1 => Just(Answer::Fenced),
            1 => Just(Answer::StaleTail),
            1 => Just(Answer::Unknown),
            1 => Just(Answer::TooSlow),
            1 => Just(Answer::Poisoned),
        ]
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            6 => (0..4u64, 0..300usize, any::<bool>())
                .prop_map(|(region, bytes, want_ids)| Event::Append { region, bytes, want_ids }),
            4 => (0..40u64).prop_map(Event::Advance),
            5 => (any::<usize>(), answer()).prop_map(|(pick, answer)| Event::Answer { pick, answer }),
            1 => (0..4u64).prop_map(Event::Obsolete),
            1 => (0..50u64).prop_map(Event::Raise),
            2 => any::<usize>().prop_map(Event::Throttle),
            1 => Just(Event::Stop),
            1 => Just(Event::Abandon),
        ]
    }

    fn outcome(answer: &Answer) -> PersistOutcome {
        match answer {
            Answer::Durable => PersistOutcome::Durable { attempts: 1 },
            Answer::Fenced => PersistOutcome::Fenced { fenced_by: 99 },
            Answer::StaleTail => PersistOutcome::StaleTail { found_epoch: 1 },
            Answer::Unknown => PersistOutcome::Unknown {
                last: Error::Stopped {
                    durability: Durability::MayBeDurable,
                },
            },
            Answer::TooSlow => PersistOutcome::TooSlow {
                attempts: 1,
                took: Duration::from_secs(61),
            },
            Answer::Poisoned => PersistOutcome::Poisoned {
                reason: "other bytes".into(),
            },
        }
    }

    /// Drives a protocol and checks every action against the rules.
    struct Harness {
        protocol: WriteProtocol<u64, SharedChain>,
        base: Instant,
        t: u64,
        next_id: u64,
        admitted: BTreeSet<u64>,
        answered: BTreeMap<u64, u32>,
        /// Sequences whose create was started and not yet answered, in order.
        uploading: Vec<u64>,
        /// Sequences answered with a durable outcome.
        durable: BTreeSet<u64>,
        /// The lowest sequence answered with anything else.
        first_failed: Option<u64>,
        last_acked: Option<u64>,
        last_published: Option<u64>,
        last_sealed_floor: u64,
        /// The largest id offset sealed so far, and the id every id handed out later must
        /// be above (the last raise's).
        last_sealed_id_offset: u64,
        raised_above: Option<u64>,
        ended: bool,
    }

    impl Harness {
        fn new() -> Self {
            let mut catalog = Catalog::new();
            let opening = Header {
                sequence: 1,
                epoch: 2,
                link: Link::NONE,
                floor: 0,
                claim: false,
                closed: false,
                id_offset: 0,
            };
            catalog
                .insert(&opening, &[], 96)
                .expect("the opening object");
            let retention = Retention::new(&catalog, 0);
            let chain = SharedChain {
                catalog: Arc::new(RwLock::new(catalog)),
                retention: Arc::new(Mutex::new(retention)),
            };
            let limits = Limits {
                max_in_flight: 3,
                min_object_interval: Duration::from_millis(10),
                max_batch_bytes: 700,
                batch: BatchLimits {
                    max_object_bytes: 700,
                    max_entry_bytes: 400,
                },
                link_window: Duration::from_millis(500),
                gather: Duration::from_millis(2),
                codec: SegmentCodec::identity(),
            };
            let position = WritePosition {
                epoch: 2,
                next_sequence: 2,
                link: Link {
                    sequence: 1,
                    epoch: 2,
                },
                floor: 0,
                id_offset: 0,
            };
            let protocol = WriteProtocol::new(position, Duration::ZERO, limits, chain);
            Harness {
                protocol,
                base: Instant::now(),
                t: 0,
                next_id: 0,
                admitted: BTreeSet::new(),
                answered: BTreeMap::new(),
                uploading: Vec::new(),
                durable: BTreeSet::new(),
                first_failed: None,
                last_acked: None,
                last_published: None,
                last_sealed_floor: 0,
                last_sealed_id_offset: 0,
                raised_above: None,
                ended: false,
            }
        }

        fn now(&self) -> Now {
            Now {
                at: self.base + Duration::from_millis(self.t),
                clock: Duration::from_millis(self.t),
            }
        }

        fn answer(&mut self, id: u64) {
            *self.answered.entry(id).or_default() += 1;
        }

        fn event(&mut self, event: &Event) {
            match event {
                Event::Append {
                    region,
                    bytes,
                    want_ids,
                } => {
                    let id = self.next_id;
                    self.next_id += 1;
                    let parts = vec![(*region, vec![Bytes::from(vec![7u8; *bytes])])];
                    let now = self.now();
                    match self
                        .protocol
                        .admit(parts, id, *want_ids, WhenFull::Seal, now)
                    {
                        Ok(admitted) => {
                            assert!(!self.ended, "admitted after the epoch ended");
                            assert_eq!(admitted.ids.is_some(), *want_ids);
                            if let (Some(ids), Some(above)) = (&admitted.ids, self.raised_above) {
                                assert!(
                                    ids.parts.iter().all(|p| p.first_id > above),
                                    "an id at or below {above} after a raise: {ids:?}"
                                );
                            }
                            self.admitted.insert(id);
                        }
                        Err((back, _)) => assert_eq!(back, id),
                    }
                }
                Event::Advance(ms) => self.t += ms,
                Event::Answer { pick, answer } => {
                    if self.uploading.is_empty() {
                        return;
                    }
                    let sequence = self.uploading.remove(pick % self.uploading.len());
                    if matches!(answer, Answer::Durable) {
                        self.durable.insert(sequence);
                    } else {
                        let lowest = self.first_failed.map_or(sequence, |f| f.min(sequence));
                        self.first_failed = Some(lowest);
                    }
                    let now = self.now();
                    self.protocol.handle_outcome(sequence, outcome(answer), now);
                }
                Event::Obsolete(region) => {
                    let chain = &self.protocol.chain;
                    let catalog = chain.catalog.read().expect("catalog");
                    chain.retention().obsolete_all(&catalog, *region);
                }
                Event::Raise(ahead) => {
                    let now = self.now();
                    let next = self.protocol.position().next_header().id_base();
                    let above = entry_id(next + ahead, 5);
                    match self.protocol.raise_ids_above(above, now) {
                        Ok(offset) => {
                            assert!(offset >= self.protocol.acknowledged_id_offset());
                            self.raised_above = Some(above);
                        }
                        Err(e) => assert!(
                            self.ended || !self.protocol.is_writing(),
                            "a raise refused while writing: {e:?}"
                        ),
                    }
                }
                Event::Throttle(pick) => {
                    if self.uploading.is_empty() {
                        return;
                    }
                    let sequence = self.uploading[pick % self.uploading.len()];
                    let now = self.now();
                    self.protocol.handle_throttled(sequence, now);
                }
                Event::Stop => {
                    self.protocol.stop();
                }
                Event::Abandon => {
                    if !self.protocol.stopped_waiting() {
                        return;
                    }
                    let now = self.now();
                    for sequence in self.protocol.abandon_uploads(now) {
                        self.uploading.retain(|s| *s != sequence);
                        let lowest = self.first_failed.map_or(sequence, |f| f.min(sequence));
                        self.first_failed = Some(lowest);
                    }
                }
            }
            let now = self.now();
            self.protocol.poll(now);
            self.drain();
        }

        /// Carries out the actions, checking each.
        fn drain(&mut self) {
            while let Some(action) = self.protocol.poll_action() {
                match action {
                    Action::Create(sealed) => {
                        assert!(!self.ended, "a create started after the epoch ended");
                        let floor = sealed.header().floor;
                        assert!(floor >= self.last_sealed_floor, "a floor decreased");
                        self.last_sealed_floor = floor;
                        let id_offset = sealed.header().id_offset;
                        assert!(
                            id_offset >= self.last_sealed_id_offset,
                            "an id offset decreased"
                        );
                        self.last_sealed_id_offset = id_offset;
                        self.uploading.push(sealed.sequence());
                    }
                    Action::Acknowledge {
                        sealed, waiters, ..
                    } => {
                        let sequence = sealed.sequence();
                        assert!(!self.ended, "acknowledged after the epoch ended");
                        assert!(
                            self.durable.contains(&sequence),
                            "{sequence} was not durable"
                        );
                        assert!(
                            self.last_acked.is_none_or(|last| sequence > last),
                            "acknowledged out of order"
                        );
                        assert!(
                            self.first_failed.is_none_or(|f| sequence < f),
                            "acknowledged {sequence} after a failed object"
                        );
                        assert_eq!(waiters.len(), sealed.receipts.len());
                        self.last_acked = Some(sequence);
                        for w in waiters {
                            self.answer(w.waiter);
                        }
                    }
                    Action::PublishFloor(floor) => {
                        assert!(
                            self.last_published.is_none_or(|last| floor > last),
                            "a floor was published again or lower"
                        );
                        self.last_published = Some(floor);
                    }
                    Action::Fail { waiters, .. } => {
                        for w in waiters {
                            self.answer(w.waiter);
                        }
                    }
                    Action::HandedOutFailed { .. } | Action::WakeAt(_) => {}
                    Action::EpochEnded { .. } => {
                        assert!(!self.ended, "the epoch ended twice");
                        self.ended = true;
                    }
                }
            }
            if self.ended {
                // An ended epoch answered every append it had admitted.
                let unanswered: Vec<&u64> = self
                    .admitted
                    .iter()
                    .filter(|id| !self.answered.contains_key(id))
                    .collect();
                assert!(
                    unanswered.is_empty(),
                    "unanswered after the end: {unanswered:?}"
                );
            }
        }

        /// Stops, answers or abandons what is uploading, and checks that every admitted
        /// append was answered exactly once.
        fn finish(&mut self) {
            self.protocol.stop();
            self.drain();
            while let Some(sequence) = self.uploading.pop() {
                self.durable.insert(sequence);
                let now = self.now();
                self.protocol.handle_outcome(
                    sequence,
                    PersistOutcome::Durable { attempts: 1 },
                    now,
                );
                self.drain();
            }
            assert!(self.protocol.stopped());
            for id in &self.admitted {
                assert_eq!(self.answered.get(id), Some(&1), "append {id}");
            }
            assert_eq!(self.protocol.pending_bytes(), 0);
        }
    }

    impl WriteProtocol<u64, SharedChain> {
        /// Stopping with uploads still out (when a driver's stop deadline may fire).
        fn stopped_waiting(&self) -> bool {
            self.lifecycle == Lifecycle::Stopping && !self.uploading.is_empty()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn every_event_order_keeps_the_write_rules(
            events in proptest::collection::vec(event(), 1..120)
        ) {
            let mut h = Harness::new();
            h.drain();
            for e in &events {
                h.event(e);
            }
            h.finish();
        }
    }

    /// Drains the actions: the objects whose create started, in order.
    fn creates(h: &mut Harness) -> Vec<Arc<SealedObject>> {
        let mut created = Vec::new();
        while let Some(action) = h.protocol.poll_action() {
            if let Action::Create(sealed) = action {
                created.push(sealed);
            }
        }
        created
    }

    /// A raise (DESIGN.md "Regions moving between nodes"): the open batch is sealed at
    /// the offset its ids were handed out under; the next object, empty, carries the new
    /// offset and the raise is durable once it is acknowledged; appends after the raise
    /// get ids above the raised-above id; a raise already covered changes nothing.
    #[test]
    fn a_raise_seals_the_open_batch_then_an_object_carries_the_new_offset() {
        let mut h = Harness::new();
        let now = h.now();
        let admitted = h
            .protocol
            .admit(
                vec![(1, vec![Bytes::from_static(b"a")])],
                0,
                true,
                WhenFull::Seal,
                now,
            )
            .expect("admitted");
        let before = admitted.ids.expect("ids at admission");
        assert_eq!(before.parts[0].first_id, entry_id(2, 0));

        let above = entry_id(500, 7);
        let raised = h.protocol.raise_ids_above(above, now).expect("raised");
        // Object 3 is the raise: its id base 3 + 498 = 501 is above 500.
        assert_eq!(raised, 498);
        assert_eq!(h.protocol.acknowledged_id_offset(), 0);
        h.protocol.poll(now);
        // Both are sealed at once; the raise, which a caller waits for, starts with no
        // wait for its start slot.
        assert_eq!(h.protocol.position().next_sequence, 4);
        let mut created = creates(&mut h);
        h.t += 10;
        let now = h.now();
        h.protocol.poll(now);
        created.extend(creates(&mut h));
        let headers: Vec<Header> = created.iter().map(|s| *s.header()).collect();
        assert_eq!(
            headers
                .iter()
                .map(|h| (h.sequence, h.id_offset))
                .collect::<Vec<_>>(),
            vec![(2, 0), (3, 498)]
        );
        assert_eq!(created[0].receipts, vec![before]);
        assert!(created[1].receipts.is_empty(), "the raise object is empty");

        // Acknowledged in order: the raise is durable with object 3.
        h.protocol
            .handle_outcome(2, PersistOutcome::Durable { attempts: 1 }, now);
        assert_eq!(h.protocol.acknowledged_id_offset(), 0);
        h.protocol
            .handle_outcome(3, PersistOutcome::Durable { attempts: 1 }, now);
        assert_eq!(h.protocol.acknowledged_id_offset(), 498);

        // Later appends count from the raised offset; a raise below it changes nothing.
        let later = h
            .protocol
            .admit(
                vec![(1, vec![Bytes::from_static(b"b")])],
                1,
                true,
                WhenFull::Seal,
                now,
            )
            .expect("admitted")
            .ids
            .expect("ids");
        assert_eq!(later.parts[0].first_id, entry_id(502, 0));
        assert!(later.parts[0].first_id > above);
        assert_eq!(
            h.protocol.raise_ids_above(above, now).expect("covered"),
            498
        );
        assert_eq!(h.protocol.position().next_sequence, 4, "nothing sealed");
        // Ids past 2^64 cannot be had.
        assert!(matches!(
            h.protocol.raise_ids_above(u64::MAX, now),
            Err(Error::IdsExhausted { above: u64::MAX })
        ));
    }

    fn admit(h: &mut Harness, waiter: u64, region: u64) -> Result<u64> {
        let now = h.now();
        let parts = vec![(region, vec![Bytes::from_static(b"e")])];
        let admitted = h
            .protocol
            .admit(parts, waiter, true, WhenFull::Seal, now)
            .map_err(|(_, e)| e)?;
        Ok(admitted.ids.expect("ids at admission").parts[0].first_id)
    }

    fn durable(h: &mut Harness, sequence: u64) {
        let now = h.now();
        h.protocol
            .handle_outcome(sequence, PersistOutcome::Durable { attempts: 1 }, now);
    }

    /// A release (DESIGN.md "Regions moving between nodes"): its last id is the region's
    /// largest handed out, in flight or in the open batch; from then on every append of
    /// the region is refused with that id, and so is a second release; the snapshot
    /// rides in the open batch, sealed and started at once, and the release waits for
    /// it. The control region is refused; a region this log never held is released
    /// with no last id.
    #[test]
    fn a_release_refuses_the_region_and_waits_for_its_snapshot() {
        let mut h = Harness::new();
        admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 2 starts");
        let last = admit(&mut h, 1, 1).expect("admitted into the open batch");
        assert_eq!(last, entry_id(3, 0));

        let (released, ticket) = h.protocol.release(1, now).expect("released");
        assert_eq!(released.last_id, Some(last));
        // Above every id handed out: the open batch's, object 3's, all positions.
        assert_eq!(released.acquire_above, entry_id(3, (1 << 20) - 1));
        assert_eq!(ticket, ControlTicket { sequence: 3 });
        // Refusals name the release's answer, without the object that recorded it.
        let refused = Error::RegionReleased {
            region: 1,
            released: Released {
                sequence: None,
                ..released
            },
        };
        assert_eq!(
            admit(&mut h, 2, 1).unwrap_err().to_string(),
            refused.to_string()
        );
        assert!(matches!(
            h.protocol.release(CONTROL_REGION, now),
            Err(Error::ReservedRegion { .. })
        ));
        admit(&mut h, 3, 2).expect("another region is admitted");

        // Within the start interval of object 2: the release's object starts anyway.
        h.protocol.poll(now);
        let created = creates(&mut h);
        assert_eq!(created.len(), 1);
        let regions: Vec<u64> = created[0].segments().iter().map(|(r, _)| *r).collect();
        assert_eq!(regions, vec![1, 2, CONTROL_REGION]);
        let snapshot = &created[0].segments()[2].1[0];
        let recorded = Holdings::from_snapshot(snapshot).expect("a snapshot");
        assert_eq!(recorded.released(1), Some(Some(last)));

        durable(&mut h, 2);
        assert!(!h.protocol.ticket_acknowledged(&ticket));
        assert_eq!(
            h.protocol.acknowledged_holdings().released(1),
            None,
            "not recorded on the chain yet"
        );
        durable(&mut h, 3);
        assert!(h.protocol.ticket_acknowledged(&ticket));
        assert_eq!(
            h.protocol.acknowledged_holdings().released(1),
            Some(Some(last))
        );

        // A region this log never held is released all the same, with no last id:
        // its late appends are refused (DESIGN.md: a release always fences its region).
        let (never, _) = h.protocol.release(9, now).expect("released");
        assert_eq!(never.last_id, None);
        assert_eq!(never.acquire_above, entry_id(4, (1 << 20) - 1));
        assert!(matches!(
            admit(&mut h, 4, 9),
            Err(Error::RegionReleased {
                region: 9,
                released: Released { last_id: None, .. }
            })
        ));
    }

    /// A release asked again while its snapshot is in flight (a coordinator retrying
    /// after a timeout) waits for the same object and answers the same last id; once
    /// that object is acknowledged, a repeat is refused `RegionReleased` at once. Before
    /// the mend the repeat was refused at once from the holdings in flight: if that
    /// object then met an unknown outcome, the next epoch recovered a chain where the
    /// region was not released and admitted its appends, which no new owner replays.
    #[test]
    fn a_retried_release_waits_for_the_same_record() {
        let mut h = Harness::new();
        let last = admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        let (released, ticket) = h.protocol.release(1, now).expect("released");
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "the release's object starts");
        // Another snapshot after it (a flushed piece) records the release too.
        admit(&mut h, 1, 2).expect("another region is admitted");

        let (again, again_ticket) = h.protocol.release(1, now).expect("waits, not refused");
        assert_eq!(again_ticket, ticket, "the same record");
        assert_eq!(again.last_id, Some(last));
        assert!(again.acquire_above >= released.acquire_above);
        assert_eq!(again.sequence, Some(ticket.sequence));
        assert!(!h.protocol.ticket_acknowledged(&again_ticket));

        durable(&mut h, ticket.sequence);
        assert!(h.protocol.ticket_acknowledged(&again_ticket));
        assert!(matches!(
            h.protocol.release(1, now),
            Err(Error::RegionReleased { region: 1, released: Released { last_id, sequence: None, .. } })
                if last_id == Some(last)
        ));
    }

    /// A release taken back by an acquire in flight and released again waits for the
    /// second release's snapshot, not the first's (which records it too).
    #[test]
    fn a_release_repeated_after_a_take_back_waits_for_its_own_record() {
        let mut h = Harness::new();
        let last = admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        let (_, first) = h.protocol.release(1, now).expect("released");
        h.protocol.poll(now);
        durable(&mut h, first.sequence);
        h.protocol
            .acquire(1, last, now)
            .expect("taken back in flight");
        h.protocol.poll(now);
        let (_, second) = h.protocol.release(1, now).expect("released again");
        assert!(second.sequence > first.sequence);
        let (_, again) = h.protocol.release(1, now).expect("waits");
        assert_eq!(again, second);
    }

    /// An acquire asked again after the first failed `MayBeDurable` and its raise
    /// object landed, with appends of the region riding in it, is answered as the
    /// first would have been (an acquire is idempotent): the region's ids above the
    /// acquired last id are the acquire's own effect. Before, it was refused
    /// `AcquireBelowOwnIds`. While those ids are in flight it waits for them.
    #[test]
    fn an_acquire_asked_again_after_its_appends_landed_is_answered() {
        let mut h = Harness::new();
        let elsewhere = entry_id(40, 3);
        let now = h.now();
        let first = h.protocol.acquire(5, elsewhere, now).expect("acquired");
        let id = admit(&mut h, 0, 5).expect("admitted above the raise");
        assert!(id > elsewhere);
        h.protocol.poll(now);
        assert!(!creates(&mut h).is_empty());

        // Asked again (the caller's call timed out): it waits for the same ids.
        let again = h.protocol.acquire(5, elsewhere, now).expect("not refused");
        assert!(!h.protocol.ticket_acknowledged(&again));
        durable(&mut h, first.sequence);
        assert!(h.protocol.ticket_acknowledged(&again));
        let later = h.protocol.acquire(5, elsewhere, now).expect("not refused");
        assert!(h.protocol.ticket_acknowledged(&later), "durable: at once");
    }

    /// An acquire asked again while the first one's take-back is in flight waits for
    /// it, though its ids are durable already (a review found the repeat answered at
    /// once: if that snapshot then never landed, the next epoch recovered the region
    /// released, or without its pieces).
    #[test]
    fn an_acquire_asked_again_waits_for_the_first_ones_take_back() {
        let mut h = Harness::new();
        let own = admit(&mut h, 0, 5).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        creates(&mut h);
        durable(&mut h, 2);
        let (_, released) = h.protocol.release(5, now).expect("released");
        h.protocol.poll(now);
        creates(&mut h);
        durable(&mut h, released.sequence);

        let first = h.protocol.acquire(5, own, now).expect("taken back");
        h.protocol.poll(now);
        creates(&mut h);
        let again = h.protocol.acquire(5, own, now).expect("asked again");
        assert!(
            !h.protocol.ticket_acknowledged(&again),
            "the take-back's snapshot is in flight"
        );
        assert_eq!(again, first);
        durable(&mut h, first.sequence);
        assert!(h.protocol.ticket_acknowledged(&again));
    }

    /// Pacing under a throttling store (DESIGN.md "Throttled stores"), on the harness's
    /// clock: a throttle reply widens the interval and moves the next slot; while the
    /// throttled create is retried nothing else starts and the open batch is not sealed
    /// (it grows); once it is answered the grown batch starts; objects that land
    /// without a throttle reply bring the interval back to `min_object_interval`, and
    /// the starts are never closer than the interval of their time.
    #[test]
    fn a_throttled_create_goes_first_and_spaces_the_objects_until_they_land_again() {
        let min = Duration::from_millis(10);
        let mut h = Harness::new();
        assert_eq!(h.protocol.object_interval(), min);
        admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 2 starts at 0 ms");

        h.t = 5;
        admit(&mut h, 1, 1).expect("admitted");
        h.t = 8;
        let now = h.now();
        h.protocol.handle_throttled(2, now);
        assert_eq!(h.protocol.object_interval(), 2 * min);
        // A second reply of the same create widens nothing more.
        h.protocol.handle_throttled(2, now);
        assert_eq!(h.protocol.object_interval(), 2 * min);

        // Past every slot, nothing starts or is sealed while object 2 is retried.
        for t in [10, 28, 40, 200] {
            h.t = t;
            admit(&mut h, t, 2).expect("admitted");
            let now = h.now();
            h.protocol.poll(now);
            assert!(creates(&mut h).is_empty(), "nothing starts at {t} ms");
            assert_eq!(h.protocol.position().next_sequence, 3, "nothing sealed");
        }
        // Object 2 lands (after its throttle reply: it narrows nothing); the grown
        // batch starts at once.
        durable(&mut h, 2);
        assert_eq!(h.protocol.object_interval(), 2 * min);
        let now = h.now();
        h.protocol.poll(now);
        let grown = creates(&mut h);
        assert_eq!(grown.len(), 1);
        assert_eq!(grown[0].sequence(), 3);
        assert_eq!(grown[0].receipts.len(), 5, "every append since");

        // Objects that land without a reply narrow the interval back to the minimum;
        // starts keep at least the interval of their time apart (less a timer tick).
        let mut last_start = h.t;
        let mut interval_then = h.protocol.object_interval();
        let mut next_waiter = 1000;
        durable(&mut h, 3);
        assert!(h.protocol.object_interval() < 2 * min, "narrowed");
        while h.protocol.object_interval() > min {
            assert!(h.t < 2_000, "never back at the minimum");
            h.t += 1;
            admit(&mut h, next_waiter, 3).expect("admitted");
            next_waiter += 1;
            let now = h.now();
            h.protocol.poll(now);
            for sealed in creates(&mut h) {
                let gap = Duration::from_millis(h.t - last_start);
                assert!(
                    gap + TIMER_TICK >= interval_then,
                    "{gap:?} < {interval_then:?}"
                );
                last_start = h.t;
                interval_then = h.protocol.object_interval();
                durable(&mut h, sealed.sequence());
            }
        }
        assert_eq!(h.protocol.object_interval(), min);
    }

    /// A release's object starts at once, beside the start grid, and leaves the grid as
    /// it was: the appends sealed behind it start at the slot they had, not an interval
    /// after the release's object.
    #[test]
    fn a_release_object_leaves_the_start_grid_as_it_was() {
        let mut h = Harness::new();
        admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 2 starts at 0 ms");

        h.t = 3;
        admit(&mut h, 1, 1).expect("admitted");
        let now = h.now();
        h.protocol.release(1, now).expect("released");
        h.protocol.poll(now);
        let release = creates(&mut h);
        assert_eq!(release.len(), 1, "the release's object starts at 3 ms");
        assert_eq!(release[0].sequence(), 3);

        admit(&mut h, 2, 2).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert!(creates(&mut h).is_empty(), "object 4 waits for its slot");
        h.t = 10;
        let now = h.now();
        h.protocol.poll(now);
        let next = creates(&mut h);
        assert_eq!(next.len(), 1, "object 4 starts at its slot, 10 ms");
        assert_eq!(next[0].sequence(), 4);
    }

    /// An acquire is refused while this log released the region at an id above the
    /// acquired last id (its ids handed out in flight or in the open batch as well as
    /// on the chain count); an acquire of a region this log released takes it back with
    /// a new snapshot, and waits for it as well as for the raise.
    #[test]
    fn an_acquire_takes_a_released_region_back_above_its_last_id() {
        let mut h = Harness::new();
        let own = admit(&mut h, 0, 5).expect("admitted");
        let now = h.now();
        let (released, _) = h.protocol.release(5, now).expect("released");
        assert_eq!(released.last_id, Some(own));
        assert!(matches!(
            h.protocol.acquire(5, own - 1, now),
            Err(Error::AcquireBelowOwnIds { region: 5, .. })
        ));
        h.protocol.poll(now);
        creates(&mut h);
        durable(&mut h, 2);

        let elsewhere = entry_id(40, 3);
        let ticket = h.protocol.acquire(5, elsewhere, now).expect("acquired");
        assert!(h.protocol.holdings().released(5).is_none());
        h.protocol.poll(now);
        let created = creates(&mut h);
        assert_eq!(created.len(), 1, "one create: the raise with the snapshot");
        assert_eq!(ticket.sequence, created[0].sequence());
        assert!(created[0].header().id_offset > 0, "it carries the raise");
        let snapshot = created[0]
            .segments()
            .iter()
            .find(|(r, _)| *r == CONTROL_REGION)
            .map(|(_, e)| e[0].clone())
            .expect("a snapshot");
        assert!(Holdings::from_snapshot(&snapshot)
            .expect("a snapshot")
            .is_empty());
        let first = admit(&mut h, 1, 5).expect("admitted again");
        assert!(first > elsewhere);
        assert!(!h.protocol.ticket_acknowledged(&ticket));
        durable(&mut h, created[0].sequence());
        assert!(h.protocol.ticket_acknowledged(&ticket));
    }

    /// The control region pins the floor at its last snapshot; once that pin alone holds
    /// the floor `CONTROL_COPY_LAG` objects below, the next object carries a copy of the
    /// snapshot, and the floor then moves past the old one. Exactly one copy is made.
    #[test]
    fn the_last_snapshot_is_copied_forward_when_it_alone_holds_the_floor() {
        use crate::internal::chain::catalog::CONTROL_COPY_LAG;
        let mut h = Harness::new();
        let now = h.now();
        // Known here by its earlier piece only: no entry of it pins the floor.
        let piece = Piece {
            prefix: "node-a".into(),
            first_id: 1,
            last_id: 5,
        };
        h.protocol
            .acquire_with(9, 5, &[piece], now)
            .expect("acquired");
        h.protocol.release(9, now).expect("released");
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1);
        durable(&mut h, 2);
        let mut copies = Vec::new();
        let mut floors = Vec::new();
        for _ in 0..CONTROL_COPY_LAG + 3 {
            h.t += 20;
            admit(&mut h, 0, 2).expect("admitted");
            let now = h.now();
            h.protocol.poll(now);
            for sealed in creates(&mut h) {
                if sealed.segments().iter().any(|(r, _)| *r == CONTROL_REGION) {
                    copies.push(sealed.sequence());
                }
                floors.push(sealed.header().floor);
                durable(&mut h, sealed.sequence());
            }
            // Region 2's entries are all obsolete: only the snapshot holds the floor.
            let chain = &h.protocol.chain;
            let catalog = chain.catalog.read().expect("catalog");
            chain.retention().obsolete_all(&catalog, 2);
        }
        let copy = 2 + CONTROL_COPY_LAG;
        assert_eq!(copies, vec![copy]);
        assert_eq!(
            floors.iter().max(),
            Some(&copy),
            "the floor moved to the copy"
        );
    }

    /// An acquire whose last id is below the ids this epoch handed out needs no raise,
    /// but is answered only once an object above it is acknowledged: the objects in
    /// flight may never land, and a reopen would count from the chain's end. (A review
    /// found it answered at once.)
    #[test]
    fn an_acquire_under_ids_in_flight_waits_for_them() {
        let mut h = Harness::new();
        admit(&mut h, 0, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 2 in flight");
        h.t += 20;
        admit(&mut h, 1, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 3 in flight");
        // Region 9's last id elsewhere is at base 2: the open batch (4) is above it.
        let ticket = h
            .protocol
            .acquire(9, entry_id(2, 5), now)
            .expect("acquired");
        assert_eq!(ticket.sequence, 3, "the first object above it");
        assert!(!h.protocol.ticket_acknowledged(&ticket));
        durable(&mut h, 2);
        assert!(!h.protocol.ticket_acknowledged(&ticket));
        durable(&mut h, 3);
        assert!(h.protocol.ticket_acknowledged(&ticket));
        // Once acknowledged above it, an acquire is answered at once.
        let at_once = h
            .protocol
            .acquire(9, entry_id(2, 6), now)
            .expect("acquired");
        assert!(h.protocol.ticket_acknowledged(&at_once));
        // Above what is in flight (4) but below the open batch (5): the open batch is
        // sealed and started at once, and the acquire waits for it.
        h.t += 20;
        admit(&mut h, 2, 1).expect("admitted");
        let now = h.now();
        h.protocol.poll(now);
        assert_eq!(creates(&mut h).len(), 1, "object 4 in flight");
        admit(&mut h, 3, 1).expect("admitted into the open batch, 5");
        let sealed = h
            .protocol
            .acquire(9, entry_id(4, 3), now)
            .expect("acquired");
        assert_eq!(sealed, ControlTicket { sequence: 5 });
        h.protocol.poll(now);
        let started: Vec<u64> = creates(&mut h).iter().map(|s| s.sequence()).collect();
        assert_eq!(started, vec![5], "within the start interval, at once");
        durable(&mut h, 4);
        assert!(!h.protocol.ticket_acknowledged(&sealed));
        durable(&mut h, 5);
        assert!(h.protocol.ticket_acknowledged(&sealed));
    }
}
