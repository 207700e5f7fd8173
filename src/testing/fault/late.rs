//! Late creates ([`CreateFault::LandLate`](super::CreateFault::LandLate)): a create
//! answered with an error that lands after some further operations on the store, or at
//! [`FaultStore::land_late`].

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload};

use super::{FaultHooks, FaultStore};
use crate::testing::lock;

/// A create kept back, to be applied later.
#[derive(Debug)]
pub(super) struct LateCreate {
    pub(super) key: Path,
    pub(super) payload: PutPayload,
    pub(super) opts: PutOptions,
    /// Further operations on the store before it lands.
    pub(super) after: u32,
}

impl FaultStore {
    /// Late creates not landed yet.
    pub fn late_pending(&self) -> usize {
        lock(&self.hooks.state).late.len()
    }

    /// Late creates that landed (their create succeeded when applied).
    pub fn late_landed(&self) -> u64 {
        lock(&self.hooks.state).landed_late
    }

    /// Lands every late create now, in the order they were made; returns how many landed
    /// (a late create whose key was taken meanwhile does not land).
    pub async fn land_late(&self) -> usize {
        let late: Vec<LateCreate> = std::mem::take(&mut lock(&self.hooks.state).late);
        self.hooks.land(&self.inner, late).await
    }
}

impl FaultHooks {
    /// Counts one operation toward the late creates and lands those that are due.
    pub(super) async fn tick(&self, inner: &Arc<dyn ObjectStore>) {
        let due: Vec<LateCreate> = {
            let mut state = lock(&self.state);
            let mut due = Vec::new();
            let mut keep = Vec::new();
            for mut l in std::mem::take(&mut state.late) {
                if l.after == 0 {
                    due.push(l);
                } else {
                    l.after -= 1;
                    keep.push(l);
                }
            }
            state.late = keep;
            due
        };
        if !due.is_empty() {
            self.land(inner, due).await;
        }
    }

    /// Applies `late` in order; returns how many landed (and counts them).
    async fn land(&self, inner: &Arc<dyn ObjectStore>, late: Vec<LateCreate>) -> usize {
        let mut landed = 0;
        for l in late {
            let result = inner.put_opts(&l.key, l.payload, l.opts).await;
            self.log.late(&l.key, &result);
            if result.is_ok() {
                landed += 1;
            }
        }
        if landed > 0 {
            lock(&self.state).landed_late += landed as u64;
        }
        landed
    }
}
