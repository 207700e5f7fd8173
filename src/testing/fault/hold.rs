//! Holds on the conditional creates of a key: a slow or stalled upload whose timing the
//! test controls ([`FaultStore::hold_creates_of`]).

use std::sync::Arc;

use object_store::path::Path;

use super::{FaultHooks, FaultStore};
use crate::testing::lock;

/// A hold on the conditional creates of one key, from [`FaultStore::hold_creates_of`]:
/// each create of the key waits, before it reaches the store (and before any scripted
/// fault or late landing), until the hold is released. It stands in for a slow or
/// stalled upload whose timing the test controls. Clones share the hold.
#[derive(Debug, Clone)]
pub struct CreateHold {
    state: Arc<HoldState>,
}

#[derive(Debug)]
struct HoldState {
    released: tokio::sync::watch::Sender<bool>,
    arrived: tokio::sync::watch::Sender<u64>,
    finished: tokio::sync::watch::Sender<u64>,
    abandoned: tokio::sync::watch::Sender<u64>,
}

impl CreateHold {
    fn new() -> Self {
        CreateHold {
            state: Arc::new(HoldState {
                released: tokio::sync::watch::Sender::new(false),
                arrived: tokio::sync::watch::Sender::new(0),
                finished: tokio::sync::watch::Sender::new(0),
                abandoned: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// Lets every held create of the key go on, and every later one pass at once.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Whether [`release`](Self::release) was called.
    pub fn is_released(&self) -> bool {
        *self.state.released.borrow()
    }

    /// Creates of the key that reached the hold so far (waiting or let through).
    pub fn arrived(&self) -> u64 {
        *self.state.arrived.borrow()
    }

    /// Waits until `n` creates of the key have reached the hold.
    pub async fn wait_arrived(&self, n: u64) {
        let mut rx = self.state.arrived.subscribe();
        // The sender lives in `self`, so the channel cannot close while waiting.
        let _ = rx.wait_for(|a| *a >= n).await;
    }

    /// Creates of the key that went through the hold and got the store's answer.
    pub fn finished(&self) -> u64 {
        *self.state.finished.borrow()
    }

    /// Waits until `n` creates of the key went through the hold and got their answer.
    pub async fn wait_finished(&self, n: u64) {
        let mut rx = self.state.finished.subscribe();
        let _ = rx.wait_for(|f| *f >= n).await;
    }

    /// Creates of the key whose caller gave up while they waited at the hold (their
    /// future was dropped, say by an abort): they never reached the store.
    pub fn abandoned(&self) -> u64 {
        *self.state.abandoned.borrow()
    }

    /// Waits until `n` creates of the key were abandoned at the hold.
    pub async fn wait_abandoned(&self, n: u64) {
        let mut rx = self.state.abandoned.subscribe();
        let _ = rx.wait_for(|a| *a >= n).await;
    }

    /// Counts a create in, waits for the release; the guard counts it out when dropped.
    pub(super) async fn pass(&self) -> HoldPassage {
        self.state.arrived.send_modify(|a| *a += 1);
        let mut waiting = Waiting {
            hold: self.clone(),
            passed: false,
        };
        let mut rx = self.state.released.subscribe();
        let _ = rx.wait_for(|released| *released).await;
        waiting.passed = true;
        HoldPassage { hold: self.clone() }
    }
}

/// Counts a create dropped while it waited at the hold as abandoned.
struct Waiting {
    hold: CreateHold,
    passed: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.passed {
            self.hold.state.abandoned.send_modify(|a| *a += 1);
        }
    }
}

/// Counts a create that passed a hold as finished when its answer is returned (or its
/// future is dropped).
pub(super) struct HoldPassage {
    hold: CreateHold,
}

impl Drop for HoldPassage {
    fn drop(&mut self) {
        self.hold.state.finished.send_modify(|f| *f += 1);
    }
}

impl FaultStore {
    /// Holds every conditional create of `key` (the first and the retries) until the
    /// returned [`CreateHold`] is released; other keys are not affected. A hold placed
    /// again on the same key replaces the earlier one for creates that arrive later.
    pub fn hold_creates_of(&self, key: &Path) -> CreateHold {
        let hold = CreateHold::new();
        lock(&self.hooks.state)
            .holds
            .insert(key.to_string(), (hold.clone(), None));
        hold
    }

    /// Like [`hold_creates_of`](Self::hold_creates_of), but only the next `n` creates of
    /// `key` are caught by the hold; later ones (say, another instance's create of the
    /// same key) go through at once, even before the release.
    pub fn hold_next_creates_of(&self, key: &Path, n: u64) -> CreateHold {
        let hold = CreateHold::new();
        if n > 0 {
            lock(&self.hooks.state)
                .holds
                .insert(key.to_string(), (hold.clone(), Some(n)));
        }
        hold
    }
}

impl FaultHooks {
    /// The hold that catches this create of `key`, if any (counting it).
    pub(super) fn hold_for(&self, key: &Path) -> Option<CreateHold> {
        let mut state = lock(&self.state);
        let (hold, remaining) = state.holds.get_mut(key.as_ref())?;
        let hold = hold.clone();
        if let Some(n) = remaining {
            *n -= 1;
            if *n == 0 {
                state.holds.remove(key.as_ref());
            }
        }
        Some(hold)
    }
}
