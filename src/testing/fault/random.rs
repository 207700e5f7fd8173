//! The seeded random mode of a [`FaultStore`] ([`FaultStore::seeded`]): faults and
//! latencies drawn from a [`SplitMix64`] at given [`FaultRates`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};

use super::{CreateFault, FaultHooks, FaultState, FaultStore};
use crate::testing::{lock, SplitMix64};

/// Probabilities (each in `[0, 1]`) and bounds of the random faults of
/// [`FaultStore::seeded`]. The default injects nothing and adds no latency.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultRates {
    /// A create is applied, then answered with an error (the outcome looks unknown).
    pub apply_then_error: f64,
    /// A create is not applied and answered with an error.
    pub error_unapplied: f64,
    /// A create is answered with an error now and lands later
    /// ([`CreateFault::LandLate`]), after a random number of further operations.
    pub land_late: f64,
    /// The most operations a late create waits before it lands (drawn in
    /// `0..=late_after_max_ops`); [`FaultStore::land_late`] lands the rest at once.
    pub late_after_max_ops: u32,
    /// A GET fails.
    pub fail_get: f64,
    /// A LIST fails.
    pub fail_list: f64,
    /// A GET returns its bytes with one bit flipped. Each key is flipped at most once,
    /// so a read that retries sees the true bytes: a transient corruption in transit.
    pub flip_get: f64,
    /// Longest latency added to a PUT (drawn uniformly in `0..=put_latency`).
    pub put_latency: Duration,
    /// Longest latency added to a GET.
    pub get_latency: Duration,
    /// Longest latency added to a LIST.
    pub list_latency: Duration,
    /// A PUT is slow: `slow_latency` more.
    pub slow_put: f64,
    /// A GET is slow: `slow_latency` more.
    pub slow_get: f64,
    /// A LIST is slow: `slow_latency` more.
    pub slow_list: f64,
    /// The extra latency of a slow operation.
    pub slow_latency: Duration,
}

/// The state of the seeded random mode.
#[derive(Debug)]
pub(super) struct RandomFaults {
    rng: SplitMix64,
    rates: FaultRates,
    enabled: bool,
    /// Keys whose GET was flipped once already: never again.
    flipped: HashSet<String>,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    Put,
    Get,
    List,
}

impl FaultState {
    fn random_mut(&mut self) -> Option<&mut RandomFaults> {
        self.random.as_mut().filter(|r| r.enabled)
    }

    /// A random fault for a create that no scripted fault caught.
    pub(super) fn random_create_fault(&mut self) -> Option<CreateFault> {
        let r = self.random_mut()?;
        let rates = r.rates;
        let u = r.rng.unit();
        let mut bound = rates.apply_then_error;
        if u < bound {
            return Some(CreateFault::ApplyThenError);
        }
        bound += rates.error_unapplied;
        if u < bound {
            return Some(CreateFault::ErrorUnapplied);
        }
        bound += rates.land_late;
        if u < bound {
            let after = r
                .rng
                .range_inclusive(0, u64::from(rates.late_after_max_ops));
            return Some(CreateFault::LandLate(after as u32));
        }
        None
    }

    /// `(fail, flip)` for a GET of `key` that no scripted fault caught.
    pub(super) fn random_get_fault(&mut self, key: &Path) -> (bool, bool) {
        let Some(r) = self.random_mut() else {
            return (false, false);
        };
        if r.rng.chance(r.rates.fail_get) {
            return (true, false);
        }
        let flip = r.rng.chance(r.rates.flip_get) && r.flipped.insert(key.to_string());
        (false, flip)
    }

    pub(super) fn random_list_fault(&mut self) -> bool {
        self.random_mut()
            .is_some_and(|r| r.rng.chance(r.rates.fail_list))
    }
}

/// Sleeps on tokio's clock (so a paused test clock applies); nothing when zero.
pub(super) async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// A listing that waits `before` the store takes its snapshot and `after` before the
/// result arrives; `make` is called at once when both are zero.
pub(super) fn delayed_list(
    (before, after): (Duration, Duration),
    make: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>> + Send + 'static,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    if before.is_zero() && after.is_zero() {
        return make();
    }
    futures::stream::once(async move {
        pause(before).await;
        let listing = make();
        pause(after).await;
        listing
    })
    .flatten()
    .boxed()
}

impl FaultStore {
    /// Wraps `inner` with random faults and latencies drawn from a PRNG seeded with
    /// `seed` at the given `rates`. Scripted faults can still be added and take
    /// precedence. With the same seed and the same sequence of requests (a
    /// single-threaded runtime), the same faults are injected.
    pub fn seeded(inner: Arc<dyn ObjectStore>, seed: u64, rates: FaultRates) -> Arc<Self> {
        let store = FaultStore::new(inner);
        lock(&store.hooks.state).random = Some(RandomFaults {
            rng: SplitMix64::new(seed),
            rates,
            enabled: true,
            flipped: HashSet::new(),
        });
        store
    }

    /// Turns the random faults and latencies on or off (scripted faults are not
    /// affected; a store made with [`new`](Self::new) has none to turn on).
    pub fn set_random_faults(&self, on: bool) {
        if let Some(r) = lock(&self.hooks.state).random.as_mut() {
            r.enabled = on;
        }
    }

    /// Whether random faults are being injected now.
    pub fn random_faults_enabled(&self) -> bool {
        lock(&self.hooks.state)
            .random
            .as_ref()
            .is_some_and(|r| r.enabled)
    }
}

impl FaultHooks {
    /// The latency of one operation, split into a wait before the store applies it and
    /// a wait before its answer arrives; zero outside random mode.
    pub(super) fn random_latency(&self, op: Op) -> (Duration, Duration) {
        let mut state = lock(&self.state);
        let Some(r) = state.random_mut() else {
            return (Duration::ZERO, Duration::ZERO);
        };
        let rates = r.rates;
        let (max, slow) = match op {
            Op::Put => (rates.put_latency, rates.slow_put),
            Op::Get => (rates.get_latency, rates.slow_get),
            Op::List => (rates.list_latency, rates.slow_list),
        };
        let mut total = r.rng.duration_up_to(max);
        let is_slow = r.rng.chance(slow);
        if is_slow {
            total += rates.slow_latency;
        }
        let before = r.rng.duration_up_to(total);
        if is_slow {
            state.counts.slow_ops += 1;
        }
        (before, total - before)
    }
}
