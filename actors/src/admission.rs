//! The two-stage acknowledgement: entry ids at admission, durability later, and a
//! barrier over every id handed out.
//!
//! What a node relies on (ids final at admission, a failed id never given again) is on
//! [`Admitted`].
//!
//! **The barrier's state is bounded.** Every writer of the WAL (one per epoch) and the
//! supervisor share a [`Progress`]: the highest object acknowledged, the highest whose
//! ids were handed out, and two failures: the lowest failed object holding handed-out
//! ids, and the lowest such one that may still be durable. Objects are named by their
//! **id base** (sequence plus id offset, `id >> 20`), which orders them as ids do.
//! Acknowledgements come in that order within an epoch and every new epoch writes above
//! every id handed out before, so these four numbers decide every barrier: no per-id or
//! per-object record grows with history.
//!
//! [`WalHandle::append_admitted`]: crate::WalHandle::append_admitted
//! [`WalHandle::durable_through`]: crate::WalHandle::durable_through

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use object_store_wal::{AppendReceipt, Durability, Error, Result};
use tokio::sync::{oneshot, watch};

/// Where the ids this WAL handed out stand; see the module doc. Objects are named by
/// their id base.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProgressState {
    /// The id base of the last object acknowledged, or of the last opening object
    /// (durable, and above every id handed out before it): every handed-out object up
    /// to it was acknowledged or failed.
    durable: u64,
    /// The highest id base whose ids were handed out at admission.
    handed_out: u64,
    /// The highest sequence whose ids were handed out: a new epoch opens above it.
    handed_out_sequence: u64,
    /// The lowest failed id base holding handed-out ids, and its object's error.
    failed: Option<(u64, Error)>,
    /// The lowest such id base whose object may still be durable, and its error.
    failed_may_be_durable: Option<(u64, Error)>,
}

impl ProgressState {
    /// What a barrier up to id base `target` says now: `None` while some handed-out
    /// object up to it is neither acknowledged nor failed.
    fn verdict(&self, target: u64) -> Option<Result<()>> {
        for (sequence, error) in [&self.failed_may_be_durable, &self.failed]
            .into_iter()
            .flatten()
        {
            if *sequence <= target {
                return Some(Err(error.clone()));
            }
        }
        (self.durable >= target).then_some(Ok(()))
    }
}

/// The shared progress: written by the writers and the supervisor, watched by handles.
#[derive(Debug, Clone)]
pub struct Progress {
    tx: watch::Sender<ProgressState>,
}

impl Progress {
    /// A fresh progress and the receiver the handles wait on.
    pub(crate) fn new() -> (Progress, watch::Receiver<ProgressState>) {
        let (tx, rx) = watch::channel(ProgressState::default());
        (Progress { tx }, rx)
    }

    /// Ids in the object at `sequence` with `id_base` were handed out. No barrier's
    /// verdict changes (a barrier's target was fixed when it was called), so nobody is
    /// woken.
    pub(crate) fn handed_out(&self, sequence: u64, id_base: u64) {
        self.tx.send_if_modified(|p| {
            p.handed_out = p.handed_out.max(id_base);
            p.handed_out_sequence = p.handed_out_sequence.max(sequence);
            false
        });
    }

    /// The highest sequence whose ids were handed out: a new epoch writes above it.
    pub(crate) fn handed_out_through(&self) -> u64 {
        self.tx.borrow().handed_out_sequence
    }

    /// The highest id base whose ids were handed out: a new epoch's ids count from above.
    pub(crate) fn handed_out_id_base(&self) -> u64 {
        self.tx.borrow().handed_out
    }

    /// The object with `id_base` was acknowledged (every earlier one of its epoch was),
    /// or an epoch opened there.
    pub(crate) fn acknowledged(&self, id_base: u64) {
        self.tx.send_if_modified(|p| {
            let moved = id_base > p.durable;
            p.durable = p.durable.max(id_base);
            moved
        });
    }

    /// The object with `id_base`, holding handed-out ids, failed with `error`.
    pub(crate) fn failed(&self, id_base: u64, error: &Error) {
        self.tx.send_modify(|p| {
            if p.failed.as_ref().is_none_or(|(s, _)| id_base < *s) {
                p.failed = Some((id_base, error.clone()));
            }
            let may_be_durable = error.durability() == Durability::MayBeDurable;
            if may_be_durable
                && p.failed_may_be_durable
                    .as_ref()
                    .is_none_or(|(s, _)| id_base < *s)
            {
                p.failed_may_be_durable = Some((id_base, error.clone()));
            }
        });
    }

    /// A writer ended without saying which of its objects failed (it panicked): every
    /// handed-out sequence above the last acknowledged one failed with `error`.
    pub(crate) fn failed_unacknowledged(&self, error: &Error) {
        let (durable, handed_out) = {
            let p = self.tx.borrow();
            (p.durable, p.handed_out)
        };
        if handed_out > durable {
            self.failed(durable + 1, error);
        }
    }
}

/// Waits until every id up to the object of `id` (its id base) handed out before the
/// call is durable, or one failed. `closed` is the answer when the WAL ended with the verdict
/// still open.
pub(crate) async fn wait_durable_through(
    mut rx: watch::Receiver<ProgressState>,
    id: u64,
    closed: impl FnOnce() -> Error,
) -> Result<()> {
    // Ids handed out after the call are not waited for (under steady load the batch
    // is never empty, and `u64::MAX` would never be reached).
    let target = {
        let p = rx.borrow_and_update();
        object_store_wal::format::entry_sequence(id).min(p.handed_out)
    };
    let mut verdict = None;
    // Fails only once every sender is gone and the last state still had no verdict.
    let _ = rx
        .wait_for(|p| {
            verdict = p.verdict(target);
            verdict.is_some()
        })
        .await;
    verdict.unwrap_or_else(|| Err(closed()))
}

/// An append admitted into the open batch ([`WalHandle::append_admitted`]): the
/// two-stage acknowledgement.
///
/// Many nodes apply an entry to memory as soon as its id is fixed and need it durable
/// only before they answer a client or flush. [`WalHandle::append_admitted`] answers
/// once the append is admitted into the open batch, with its ids and a [`PendingReceipt`]
/// future for the receipt; [`WalHandle::durable_through`] waits until every id up to a
/// given one is durable.
///
/// **Why ids are final at admission.** The writer admits into one open batch, which
/// is sealed whole as the epoch's next sequence: nothing else is sealed in between (a
/// full batch is sealed *before* the append that did not fit is admitted into a fresh
/// one, and a keep-alive seals only an empty batch), and a part's positions in its
/// region's segment never move. So `(sequence + id offset) << 20 | position` is the id
/// the object will carry (the batch keeps the id offset it was opened under).
///
/// **Why a failed id is never given again.** Objects of an epoch that ended without
/// being created (refused, dropped by a stop, or an unknown outcome that never landed)
/// leave no trace in the store, so an open that went only above what it lists could
/// write new entries at those sequences. The supervisor therefore reopens above the
/// highest sequence whose ids it handed out, claiming the absent ones like any hole
/// (`open::open_instance_above`): a late create there is fenced, and those ids are
/// never reused and never replayed unless their object landed, which it can only have
/// done when its error said [`Durability::MayBeDurable`]. This holds for one spawned
/// WAL, across its epochs; after a stop, a new WAL does not know what the old one
/// handed out (a node drops what failed before it stops).
///
///
/// [`WalHandle::append_admitted`]: crate::WalHandle::append_admitted
/// [`WalHandle::durable_through`]: crate::WalHandle::durable_through
#[derive(Debug)]
pub struct Admitted {
    /// The ids the append was given: final, the same receipt [`durable`](Self::durable)
    /// resolves with, and the ids it is replayed with.
    pub ids: AppendReceipt,
    /// Resolves with the receipt once the append is durable, or with the error that
    /// failed it (mind its [`Error::durability`]).
    pub durable: PendingReceipt,
}

/// Resolves once an admitted append is durable ([`Admitted::durable`]): `Ok` with its
/// receipt, or the error that failed it, as [`WalHandle::append`] would have returned.
/// Dropping it withdraws nothing: the append goes on. It is not bounded by a handle's
/// per-call timeout; wrap it in `tokio::time::timeout` to give up.
///
/// [`WalHandle::append`]: crate::WalHandle::append
#[derive(Debug)]
pub struct PendingReceipt {
    state: DurableState,
    /// Where the WAL left the error that ended it, to say why a reply never came.
    terminal: Arc<Mutex<Option<Error>>>,
}

#[derive(Debug)]
enum DurableState {
    Waiting(oneshot::Receiver<Result<AppendReceipt>>),
    Done(Option<Result<AppendReceipt>>),
}

impl PendingReceipt {
    pub(crate) fn new(
        rx: oneshot::Receiver<Result<AppendReceipt>>,
        terminal: Arc<Mutex<Option<Error>>>,
    ) -> Self {
        PendingReceipt {
            state: DurableState::Waiting(rx),
            terminal,
        }
    }

    /// A future that resolves with `result` at once.
    pub(crate) fn resolved(
        result: Result<AppendReceipt>,
        terminal: Arc<Mutex<Option<Error>>>,
    ) -> Self {
        PendingReceipt {
            state: DurableState::Done(Some(result)),
            terminal,
        }
    }

    /// The error of a reply port dropped unanswered: the writer failed holding the
    /// append, or the WAL ended (then: why, conservatively).
    fn dropped(&self) -> Error {
        let terminal = self
            .terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match terminal {
            Some(e) => e.with_durability(Durability::MayBeDurable),
            None => Error::WriterFailed {
                durability: Durability::MayBeDurable,
            },
        }
    }
}

impl Future for PendingReceipt {
    type Output = Result<AppendReceipt>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = match &mut self.state {
            DurableState::Waiting(rx) => match Pin::new(rx).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(result)) => result,
                Poll::Ready(Err(_)) => Err(self.dropped()),
            },
            DurableState::Done(result) => result.take().unwrap_or_else(|| {
                Err(Error::Stopped {
                    durability: Durability::MayBeDurable,
                })
            }),
        };
        self.state = DurableState::Done(None);
        Poll::Ready(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store_wal::EpochEndReason;

    fn unknown(sequence: u64) -> Error {
        Error::EpochEnded {
            epoch: 3,
            sequence,
            reason: EpochEndReason::UnknownOutcome,
            durability: Durability::MayBeDurable,
        }
    }

    fn verdict(rx: &watch::Receiver<ProgressState>, target: u64) -> Option<Result<()>> {
        rx.borrow().verdict(target)
    }

    fn stopped() -> Error {
        Error::Stopped {
            durability: Durability::NotWritten,
        }
    }

    #[test]
    fn a_barrier_waits_for_acknowledgements_in_sequence_order() {
        let (progress, rx) = Progress::new();
        progress.handed_out(2, 2);
        progress.handed_out(4, 4);
        assert!(verdict(&rx, 2).is_none());
        progress.acknowledged(3);
        assert!(matches!(verdict(&rx, 2), Some(Ok(()))));
        assert!(matches!(verdict(&rx, 3), Some(Ok(()))));
        assert!(verdict(&rx, 4).is_none());
        assert_eq!(progress.handed_out_through(), 4);
    }

    #[test]
    fn a_failure_fails_every_barrier_at_or_above_it_and_none_below() {
        let (progress, rx) = Progress::new();
        progress.handed_out(6, 6);
        progress.acknowledged(3);
        // Sequence 5: never sent; 4: an unknown outcome (recorded later, lower).
        progress.failed(5, &stopped());
        progress.failed(4, &unknown(4));
        // A later epoch acknowledges above them: the failures stay.
        progress.acknowledged(9);
        assert!(matches!(verdict(&rx, 3), Some(Ok(()))));
        match verdict(&rx, 4) {
            Some(Err(Error::EpochEnded { sequence: 4, .. })) => {}
            other => panic!("barrier through 4: {other:?}"),
        }
        // 5 itself is NotWritten, but 4, below it, may still be durable.
        match verdict(&rx, 9) {
            Some(Err(e)) => assert_eq!(e.durability(), Durability::MayBeDurable),
            other => panic!("barrier through 9: {other:?}"),
        }
    }

    #[test]
    fn only_not_written_failures_below_give_not_written() {
        let (progress, rx) = Progress::new();
        progress.handed_out(5, 5);
        progress.acknowledged(4);
        progress.failed(5, &stopped());
        assert!(matches!(verdict(&rx, 4), Some(Ok(()))));
        match verdict(&rx, 5) {
            Some(Err(e @ Error::Stopped { .. })) => {
                assert_eq!(e.durability(), Durability::NotWritten)
            }
            other => panic!("barrier through 5: {other:?}"),
        }
    }

    #[test]
    fn a_panicked_writer_fails_what_it_had_not_acknowledged() {
        let (progress, rx) = Progress::new();
        progress.handed_out(7, 7);
        progress.acknowledged(5);
        let failed = Error::WriterFailed {
            durability: Durability::MayBeDurable,
        };
        progress.failed_unacknowledged(&failed);
        assert!(matches!(verdict(&rx, 5), Some(Ok(()))));
        assert!(matches!(
            verdict(&rx, 6),
            Some(Err(Error::WriterFailed { .. }))
        ));
        // Nothing handed out beyond what was acknowledged: nothing fails.
        let (progress, rx) = Progress::new();
        progress.handed_out(5, 5);
        progress.acknowledged(5);
        progress.failed_unacknowledged(&failed);
        assert!(matches!(verdict(&rx, 5), Some(Ok(()))));
    }

    /// With an id offset an object's ids count from its id base, not its sequence: a
    /// barrier waits for the object its id names, and a reopen goes above the sequence.
    #[test]
    fn barriers_name_objects_by_id_base() {
        let (progress, rx) = Progress::new();
        // Object 5 with id offset 40: its ids are 45 << 20 | position.
        progress.handed_out(5, 45);
        assert_eq!(progress.handed_out_through(), 5);
        let target = object_store_wal::format::entry_sequence(object_store_wal::entry_id(45, 3));
        assert!(verdict(&rx, target).is_none());
        // Object 4 (id base 44) acknowledged: not yet.
        progress.acknowledged(44);
        assert!(verdict(&rx, target).is_none());
        progress.acknowledged(45);
        assert!(matches!(verdict(&rx, target), Some(Ok(()))));
    }
}
