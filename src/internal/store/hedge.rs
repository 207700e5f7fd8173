//! When to hedge a request: the delay after which a request that has not answered is
//! sent again beside the first (DESIGN.md, "Hedging").
//!
//! An object store's latency has a heavy tail: most PUTs answer in tens of milliseconds,
//! a few in hundreds, some never. Waiting for the tail costs every entry behind it (the
//! writer acknowledges in order); hedging only the tail costs a few extra requests. The
//! adaptive delay follows the store: a quarter above a high percentile (the 90th by
//! default) of the recent latencies of the same kind of request, so only the slow tail
//! is hedged, whatever the store's usual latency. Pure: no I/O; memory is a fixed window.
//!
//! The same window bounds a small data create's attempt
//! ([`HedgeDelay::attempt_timeout`]): eight times the recent 99th percentile, at least
//! [`ATTEMPT_FLOOR`], at most `request_timeout`. A create that hangs is given up (an
//! unknown outcome, retried with the same bytes) after about a second on a store that
//! answers in milliseconds, not after `request_timeout` (30 s by default). An attempt
//! that times out counts as a latency of the whole bound, so a store that turns slower
//! than the bound for good widens it within a few attempts instead of failing every
//! one. The slower twin of a hedged create runs to its end and is recorded, so the
//! window sees the tail. Reads keep `request_timeout`: a cancelled twin's latency is
//! never known, so the window would miss the tail a read bound must leave room for;
//! twins answer a read that hangs instead.

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
/// The shortest attempt bound that follows latencies.
pub const ATTEMPT_FLOOR: Duration = Duration::from_secs(1);
/// The attempt bound is this many times the recent 99th percentile.
pub const ATTEMPT_FACTOR: u32 = 8;

/// The recent latencies of one kind of request and the hedge delay they imply.
#[derive(Debug, Clone)]
pub struct HedgeDelay {
    policy: HedgeAfter,
    /// The last [`WINDOW`] latencies, in microseconds, as a ring.
    window: Vec<u32>,
    recorded: u64,
    current: Option<Duration>,
    /// The recent 99th percentile, once [`MIN_SAMPLES`] latencies are known.
    p99: Option<Duration>,
    /// The recent median, once [`MIN_SAMPLES`] latencies are known.
    p50: Option<Duration>,
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
            p99: None,
            p50: None,
        }
    }

    /// After how long a request that has not answered is hedged; `None`: never.
    pub fn delay(&self) -> Option<Duration> {
        self.current
    }

    /// Records the latency of a request that answered.
    pub fn record(&mut self, latency: Duration) {
        self.push(latency);
        if self.window.len() >= MIN_SAMPLES && self.recorded.is_multiple_of(RECOMPUTE_EVERY) {
            self.recompute();
        }
    }

    /// Records an attempt that timed out after `bound`: a latency of at least that much.
    /// Recomputed at once (timeouts are rare, and a store slower than the bound must
    /// widen it before the next attempt, not sixteen later).
    pub fn timed_out(&mut self, bound: Duration) {
        self.push(bound);
        if self.window.len() >= MIN_SAMPLES {
            self.recompute();
        }
    }

    /// The recent median latency, once [`MIN_SAMPLES`] latencies are known: what a
    /// failed create's first retry waits under
    /// [`FirstRetryWait::Adaptive`](crate::FirstRetryWait::Adaptive).
    pub fn median(&self) -> Option<Duration> {
        self.p50
    }

    /// How long one attempt of a small request may take before it counts as unanswered:
    /// [`ATTEMPT_FACTOR`] times the recent 99th percentile, at least [`ATTEMPT_FLOOR`],
    /// at most `ceiling` (`request_timeout`), which is also the bound until
    /// [`MIN_SAMPLES`] latencies are known.
    pub fn attempt_timeout(&self, ceiling: Duration) -> Duration {
        match self.p99 {
            None => ceiling,
            Some(p99) => p99
                .saturating_mul(ATTEMPT_FACTOR)
                .max(ATTEMPT_FLOOR)
                .min(ceiling),
        }
    }

    fn push(&mut self, latency: Duration) {
        let micros = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        let slot = (self.recorded % WINDOW as u64) as usize;
        match self.window.get_mut(slot) {
            Some(old) => *old = micros,
            None => self.window.push(micros),
        }
        self.recorded += 1;
    }

    fn recompute(&mut self) {
        let mut sorted = self.window.clone();
        let at = |sorted: &mut Vec<u32>, percentile: u8| {
            let rank = (sorted.len() - 1) * usize::from(percentile.min(99)) / 100;
            let (_, at, _) = sorted.select_nth_unstable(rank);
            Duration::from_micros(u64::from(*at))
        };
        if let HedgeAfter::Adaptive { percentile, floor } = self.policy {
            let p = at(&mut sorted, percentile);
            self.current = Some(floor.max(p.saturating_mul(5) / 4));
        }
        self.p99 = Some(at(&mut sorted, 99));
        self.p50 = Some(at(&mut sorted, 50));
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

    /// The median a failed create's first retry waits: unknown until [`MIN_SAMPLES`]
    /// latencies, then the body of the distribution, not its tail; kept whatever the
    /// hedging policy.
    #[test]
    fn the_median_follows_the_body_of_the_latencies() {
        for policy in [HedgeAfter::Off, HedgeAfter::Fixed(Duration::from_millis(7))] {
            let mut d = HedgeDelay::new(policy);
            for _ in 0..MIN_SAMPLES - 1 {
                d.record(Duration::from_millis(20));
            }
            assert_eq!(d.median(), None);
            for i in 0..WINDOW {
                let ms = if i % 10 == 0 { 900 } else { 20 };
                d.record(Duration::from_millis(ms));
            }
            assert_eq!(d.median(), Some(Duration::from_millis(20)));
        }
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

    #[test]
    fn an_attempt_is_bounded_by_recent_latencies_and_widens_when_it_times_out() {
        let ceiling = Duration::from_secs(30);
        let mut d = adaptive();
        assert_eq!(d.attempt_timeout(ceiling), ceiling, "cold: the ceiling");
        for _ in 0..WINDOW {
            d.record(Duration::from_millis(20));
        }
        assert_eq!(d.attempt_timeout(ceiling), ATTEMPT_FLOOR, "20 ms x 8 < 1 s");
        // A store slower than the bound for good: after a few timeouts the bound is
        // eight times the old one, and grows to the ceiling.
        let mut bound = d.attempt_timeout(ceiling);
        let mut timeouts = 0;
        while bound < Duration::from_secs(3) {
            d.timed_out(bound);
            timeouts += 1;
            bound = d.attempt_timeout(ceiling);
        }
        assert_eq!(bound, Duration::from_secs(8));
        assert_eq!(
            timeouts, 4,
            "the 99th percentile of 256 moves at the fourth"
        );
        for _ in 0..4 {
            d.timed_out(d.attempt_timeout(ceiling));
        }
        assert_eq!(d.attempt_timeout(ceiling), ceiling);
        // A heavy tail is not cut: 5 % at 1 s bounds an attempt at 8 s.
        let mut tail = adaptive();
        for i in 0..WINDOW {
            let ms = if i % 20 == 0 { 1000 } else { 10 };
            tail.record(Duration::from_millis(ms));
        }
        assert_eq!(tail.attempt_timeout(ceiling), Duration::from_secs(8));
        // Fixed and off hedging still bound attempts by the latencies.
        let mut off = HedgeDelay::new(HedgeAfter::Off);
        for _ in 0..WINDOW {
            off.record(Duration::from_millis(200));
        }
        assert_eq!(off.attempt_timeout(ceiling), Duration::from_millis(1600));
        assert_eq!(off.delay(), None);
    }
}
