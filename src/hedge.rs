//! When to hedge a request: the delay after which a request that has not answered is
//! sent again beside the first (DESIGN.md, "Hedging").
//!
//! An object store's latency has a heavy tail: most PUTs answer in tens of milliseconds,
//! a few in hundreds, some never. Waiting for the tail costs every entry behind it (the
//! writer acknowledges in order); hedging only the tail costs a few extra requests. The
//! adaptive delay follows the store: a quarter above a high percentile (the 90th by
//! default) of the recent latencies of the same kind of request, so only the slow tail
//! is hedged, whatever the store's usual latency. Pure: no I/O; memory is a fixed window.

use std::time::Duration;

use crate::config::HedgeAfter;

/// Latencies remembered per kind of request.
pub const WINDOW: usize = 256;
/// Latencies needed before the adaptive delay follows them.
pub const MIN_SAMPLES: usize = 16;
/// The adaptive delay before [`MIN_SAMPLES`] latencies are known.
pub const COLD_DELAY: Duration = Duration::from_millis(500);
/// Latencies between two recomputations of the adaptive delay.
const RECOMPUTE_EVERY: u64 = 16;

/// The recent latencies of one kind of request and the hedge delay they imply.
#[derive(Debug, Clone)]
pub struct HedgeDelay {
    policy: HedgeAfter,
    /// The last [`WINDOW`] latencies, in microseconds, as a ring.
    window: Vec<u32>,
    recorded: u64,
    current: Option<Duration>,
}

impl HedgeDelay {
    /// The delay under `policy`, with no latency known yet.
    pub fn new(policy: HedgeAfter) -> Self {
        let current = match policy {
            HedgeAfter::Off => None,
            HedgeAfter::Fixed(d) => Some(d),
            HedgeAfter::Adaptive { floor, .. } => Some(COLD_DELAY.max(floor)),
        };
        HedgeDelay {
            policy,
            window: Vec::with_capacity(WINDOW),
            recorded: 0,
            current,
        }
    }

    /// After how long a request that has not answered is hedged; `None`: never.
    pub fn delay(&self) -> Option<Duration> {
        self.current
    }

    /// Records the latency of a request that answered.
    pub fn record(&mut self, latency: Duration) {
        let HedgeAfter::Adaptive { percentile, floor } = self.policy else {
            return;
        };
        let micros = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        let slot = (self.recorded % WINDOW as u64) as usize;
        match self.window.get_mut(slot) {
            Some(old) => *old = micros,
            None => self.window.push(micros),
        }
        self.recorded += 1;
        if self.window.len() >= MIN_SAMPLES && self.recorded % RECOMPUTE_EVERY == 0 {
            let mut sorted = self.window.clone();
            let rank = (sorted.len() - 1) * usize::from(percentile.min(99)) / 100;
            let (_, at, _) = sorted.select_nth_unstable(rank);
            let p = Duration::from_micros(u64::from(*at));
            self.current = Some(floor.max(p.saturating_mul(5) / 4));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive() -> HedgeDelay {
        HedgeDelay::new(HedgeAfter::Adaptive {
            percentile: 90,
            floor: Duration::from_millis(10),
        })
    }

    #[test]
    fn adaptive_follows_the_percentile_with_a_floor() {
        let mut d = adaptive();
        assert_eq!(d.delay(), Some(COLD_DELAY));
        // 98 % at 20 ms, 2 % at 520 ms: the tail is hedged, not the body.
        for i in 0..WINDOW {
            let ms = if i % 50 == 0 { 520 } else { 20 };
            d.record(Duration::from_millis(ms));
        }
        assert_eq!(d.delay(), Some(Duration::from_millis(25)));
        for _ in 0..WINDOW {
            d.record(Duration::from_micros(100));
        }
        assert_eq!(d.delay(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn off_and_fixed_ignore_latencies() {
        let mut off = HedgeDelay::new(HedgeAfter::Off);
        let mut fixed = HedgeDelay::new(HedgeAfter::Fixed(Duration::from_millis(7)));
        for _ in 0..WINDOW {
            off.record(Duration::from_millis(1));
            fixed.record(Duration::from_millis(1));
        }
        assert_eq!(off.delay(), None);
        assert_eq!(fixed.delay(), Some(Duration::from_millis(7)));
    }
}
