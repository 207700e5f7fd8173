//! The reclaimer: deletes the objects below the acknowledged floor.
//!
//! Once an object carrying floor `F` is acknowledged, every WAL key below `F` (chain
//! objects, orphans and claims alike) may go, but only after `reclaim_grace`: a create of
//! an earlier instance that stalled could otherwise land on a reclaimed key and be
//! acknowledged (the writer refuses creates slower than `max_create_duration`, which the
//! grace exceeds). Deletes go oldest first, `MAX_DELETES_IN_FLIGHT` at a time; foreign
//! keys and anything at or above `F` are never touched. A failed delete is retried later,
//! never fatal. After a restart the reclaimer starts from the recovered chain's floor,
//! with a fresh grace. A pass runs in a task of its own, aborted when the reclaimer
//! ends (and its requests end when the WAL's store access is closed): nothing is
//! listed or deleted after the WAL stopped.
//!
//! Floors waiting out their grace are kept in order, one per [`FLOOR_BUCKETS`]th of the
//! grace: a floor acknowledged within that time of the newest waiting one replaces it
//! (with its own, later, time), whatever the rate at which the floor rises. So at most
//! about `FLOOR_BUCKETS` floors wait and one grace timer is pending (for the oldest), a
//! floor is reclaimed at most `reclaim_grace / FLOOR_BUCKETS` later than it could have
//! been (never earlier: deleting later is always safe), and a pass starts at most
//! about `FLOOR_BUCKETS` times per grace instead of once per floor rise.
//!
//! A key is its sequence, so after one pass has listed the prefix, the next passes
//! delete the keys of the sequences between the last pass's floor and the new one
//! without listing: a LIST costs as much as a PUT on S3, GCS and Azure, and a DELETE
//! nothing, so listing every pass made the reclaimer's LISTs up to half of a node's
//! request bill. A DELETE of a key that is not there succeeds. Every
//! [`LIST_EVERY`]th pass, and any pass whose range is wider than
//! [`MAX_UNLISTED_RANGE`], lists again: that catches a straggler a stalled create of an
//! earlier instance may have landed below the floor after its key was deleted (never
//! acknowledged, see above, but left behind).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store_wal::internal::store::objects::WalIo;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::stats::Counters;
use crate::task::AbortOnDrop;

/// Deletes in flight at once.
pub const MAX_DELETES_IN_FLIGHT: usize = 8;
/// Floors waiting out their grace per `reclaim_grace`, at most (see the module doc).
pub const FLOOR_BUCKETS: u32 = 16;
/// Every this many passes, a pass lists the prefix instead of deleting by sequence.
pub const LIST_EVERY: u32 = 64;
/// A pass whose sequences span more than this lists instead of deleting each one (a
/// guard against a jump in sequences, not a limit a node meets: a pass per sixteenth of
/// a 600 s grace at 1,000 objects a second spans 37,500).
pub const MAX_UNLISTED_RANGE: u64 = 65_536;
/// Wait before retrying a reclaim whose listing or deletes failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What the reclaimer accepts.
#[derive(Debug)]
pub enum ReclaimerMsg {
    /// An object carrying this floor was acknowledged now.
    Floor(u64),
    /// The grace of this floor has passed.
    Due(u64),
    /// A reclaim pass ended: everything below `floor` is gone (`Ok`), or not (`Err`).
    Done {
        /// The floor of the pass.
        floor: u64,
        /// How the pass found its keys and how many deletes succeeded, or the first
        /// failure.
        result: Result<(Pass, u64), String>,
    },
}

/// What the reclaimer starts with.
pub struct ReclaimerArgs {
    /// Store access.
    pub io: WalIo,
    /// How long after a floor's acknowledgement deletion may start.
    pub grace: Duration,
    /// Counters shared with the supervisor.
    pub counters: Arc<Counters>,
}

/// The reclaimer's state.
pub struct ReclaimerState {
    args: ReclaimerArgs,
    /// The highest floor acknowledged.
    target: u64,
    /// The highest floor whose grace has passed.
    due: u64,
    /// Everything below this is deleted.
    reclaimed_below: u64,
    /// Passes since the last one that listed; `None` before the first listing.
    since_listing: Option<u32>,
    /// The pass running, if any (aborted when the reclaimer ends).
    running: Option<AbortOnDrop>,
    /// The floor the pending grace timer is for.
    timing: Option<u64>,
    /// Floors acknowledged and not yet due, ascending.
    waiting: VecDeque<Waiting>,
}

/// A floor waiting out its grace.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    floor: u64,
    /// When the first floor this one replaced was acknowledged: floors acknowledged
    /// within a bucket of that replace it.
    opened: Instant,
    /// When `floor` was acknowledged: its grace counts from here.
    acknowledged: Instant,
}

/// The reclaimer actor.
pub struct ReclaimerActor;

impl ReclaimerState {
    /// Times the grace of the oldest waiting floor, unless a timer is pending.
    fn time(&mut self, myself: &ActorRef<ReclaimerMsg>) {
        if self.timing.is_some() {
            return;
        }
        if let Some(&w) = self.waiting.front() {
            self.timing = Some(w.floor);
            let due = w.acknowledged + self.args.grace;
            let floor = w.floor;
            myself.send_after(due.saturating_duration_since(Instant::now()), move || {
                ReclaimerMsg::Due(floor)
            });
        }
    }

    /// Adds a floor acknowledged `now` to those waiting out their grace: it replaces the
    /// newest one if that opened less than a bucket ago and is not the one being timed.
    fn wait(&mut self, floor: u64, now: Instant) {
        let bucket = self.args.grace / FLOOR_BUCKETS;
        let timed = self.timing.is_some() && self.waiting.len() == 1;
        match self.waiting.back_mut() {
            Some(w) if !timed && now.saturating_duration_since(w.opened) < bucket => {
                w.floor = floor;
                w.acknowledged = now;
            }
            _ => self.waiting.push_back(Waiting {
                floor,
                opened: now,
                acknowledged: now,
            }),
        }
    }

    fn start(&mut self, myself: &ActorRef<ReclaimerMsg>) {
        if self.running.is_some() || self.due <= self.reclaimed_below {
            return;
        }
        let floor = self.due;
        let from = self.reclaimed_below;
        let unlisted = self.since_listing.is_some_and(|n| n < LIST_EVERY)
            && floor - from <= MAX_UNLISTED_RANGE;
        let pass = if unlisted {
            Pass::Range { from }
        } else {
            Pass::Listed
        };
        let io = self.args.io.clone();
        let me = myself.clone();
        self.running = Some(AbortOnDrop(tokio::spawn(async move {
            let result = reclaim_below(&io, pass, floor).await;
            let _ = me.cast(ReclaimerMsg::Done { floor, result });
        })));
    }
}

/// How a pass finds the keys it deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// List the prefix: every WAL key below the floor.
    Listed,
    /// The keys of the sequences from `from` up to the floor, unlisted.
    Range {
        /// The floor of the last pass that succeeded.
        from: u64,
    },
}

/// Deletes every WAL object below `floor` that `pass` finds, oldest first; returns the
/// deletes that succeeded (an unlisted key that was not there counts too).
async fn reclaim_below(io: &WalIo, pass: Pass, floor: u64) -> Result<(Pass, u64), String> {
    // An unlisted range is walked, not collected: it may span tens of thousands.
    let (listed, range): (Vec<u64>, Range<u64>) = match pass {
        Pass::Range { from } => (Vec::new(), from..floor),
        Pass::Listed => {
            let listing = io.list().await.map_err(|e| e.to_string())?;
            let below = listing.objects.iter().map(|o| o.sequence);
            (below.filter(|s| *s < floor).collect(), 0..0)
        }
    };
    let (deleted, first_error) = futures::stream::iter(listed.into_iter().chain(range))
        .map(|sequence| {
            let io = io.clone();
            async move { io.delete(sequence).await.map_err(|e| e.to_string()) }
        })
        .buffered(MAX_DELETES_IN_FLIGHT)
        .fold((0u64, None), |(deleted, first_error), result| async move {
            match result {
                Ok(()) => (deleted + 1, first_error),
                Err(e) => (deleted, first_error.or(Some(e))),
            }
        })
        .await;
    match first_error {
        Some(e) => Err(e),
        None => Ok((pass, deleted)),
    }
}

impl Actor for ReclaimerActor {
    type Msg = ReclaimerMsg;
    type State = ReclaimerState;
    type Arguments = ReclaimerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ReclaimerState {
            args,
            target: 0,
            due: 0,
            reclaimed_below: 0,
            since_listing: None,
            running: None,
            timing: None,
            waiting: VecDeque::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ReclaimerMsg::Floor(floor) => {
                if floor > state.target {
                    state.target = floor;
                    state.wait(floor, Instant::now());
                    state.time(&myself);
                }
            }
            ReclaimerMsg::Due(floor) => {
                state.due = state.due.max(floor);
                // The pending timer fired (not a retry): time the next waiting floor.
                if state.timing == Some(floor) {
                    state.timing = None;
                    state.waiting.pop_front();
                    state.time(&myself);
                }
                state.start(&myself);
            }
            ReclaimerMsg::Done { floor, result } => {
                // The task sent this as its last act; dropping the handle aborts nothing.
                state.running = None;
                match result {
                    Ok((pass, deleted)) => {
                        state.since_listing = match pass {
                            Pass::Listed => Some(0),
                            Pass::Range { .. } => state.since_listing.map(|n| n + 1),
                        };
                        state.reclaimed_below = state.reclaimed_below.max(floor);
                        Counters::add(&state.args.counters.deleted, deleted);
                        Counters::set(&state.args.counters.reclaimed_below, state.reclaimed_below);
                        if deleted > 0 {
                            info!(floor, deleted, "reclaimed objects below the floor");
                        } else {
                            debug!(floor, "nothing to reclaim");
                        }
                        state.start(&myself);
                    }
                    Err(e) => {
                        warn!(floor, error = %e, "reclaim failed; retrying later");
                        myself.send_after(RETRY_AFTER, move || ReclaimerMsg::Due(floor));
                    }
                }
            }
        }
        Ok(())
    }
}
