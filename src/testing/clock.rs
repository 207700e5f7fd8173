//! Create clocks for tests: [`ManualClock`] moves only when told, [`TokioClock`] follows
//! tokio's (possibly paused) clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A [`CreateClock`](crate::CreateClock) that moves only when told: a test decides
/// exactly how long a create "took" (say, a create that stalled past
/// `max_create_duration`) without waiting for it. Starts at zero.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            })
            .ok();
    }
}

impl crate::CreateClock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// A [`CreateClock`](crate::CreateClock) on tokio's clock: under a paused test
/// runtime it follows virtual time, so create durations and link windows line up with
/// the virtual `reclaim_grace` the reclaimer waits.
#[derive(Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock at zero now.
    pub fn new() -> Arc<Self> {
        Arc::new(TokioClock {
            origin: tokio::time::Instant::now(),
        })
    }
}

impl crate::CreateClock for TokioClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}
