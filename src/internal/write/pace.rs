//! Pacing under a throttling store: the interval between object starts, widened while
//! the store answers creates with throttle replies and narrowed back to
//! `min_object_interval` once it takes them again (DESIGN.md "Throttled stores"). Pure:
//! no I/O, no clock; the write protocol feeds it the events.
//!
//! The rule is AIMD on the object rate: a throttle reply halves the rate (the interval
//! doubles, from at least [`PACE_STEP`], up to [`MAX_PACED_INTERVAL`]); each object that
//! lands without one adds [`RAMP_PER_OBJECT`] objects a second, until the interval is
//! `min_object_interval` again: an interval narrowed below [`PACE_STEP`], the least a
//! throttle reply widens to, is back at `min_object_interval` (else a minimum below it,
//! zero above all, as the sequential front end's, would only ever be approached). A throttle reply widens the interval once per
//! *generation*: only an object started after the last widening can widen it again, so
//! the objects in flight when the store starts pushing back count once, not once each.
//! Likewise only an object started under the current interval narrows it.

use std::time::Duration;

/// The longest interval between object starts that throttling leads to (unless
/// `min_object_interval` is longer). Well below `max_create_duration` (60 s by
/// default, at least a second): the objects themselves are never held that long, and
/// from it [`RAMP_PER_OBJECT`] brings the interval back to 10 ms within about 3 s.
pub const MAX_PACED_INTERVAL: Duration = Duration::from_secs(1);

/// The least interval a throttle reply widens to (a `min_object_interval` of zero
/// doubles from here).
pub const PACE_STEP: Duration = Duration::from_millis(10);

/// Objects a second added to the rate by each object that lands without a throttle
/// reply: from 25 a second back to 100 (a 10 ms interval) in under a second of objects.
pub const RAMP_PER_OBJECT: f64 = 2.0;

/// The interval between object starts (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Pacer {
    min: Duration,
    max: Duration,
    interval: Duration,
    generation: u64,
}

impl Pacer {
    /// At `min` (`min_object_interval`), which it never goes below.
    pub fn new(min: Duration) -> Self {
        Pacer {
            min,
            max: MAX_PACED_INTERVAL.max(min),
            interval: min,
            generation: 0,
        }
    }

    /// The interval between object starts now.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The generation an object started now belongs to: it changes with each widening.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the interval is wider than `min_object_interval`.
    pub fn is_paced(&self) -> bool {
        self.interval > self.min
    }

    /// A create of an object started under `started_under` met a throttle reply: the
    /// interval doubles, once per generation. Returns whether it widened.
    pub fn throttled(&mut self, started_under: u64) -> bool {
        if started_under < self.generation {
            return false;
        }
        let doubled = self.interval.saturating_mul(2).max(PACE_STEP);
        self.interval = doubled.min(self.max).max(self.min);
        self.generation += 1;
        true
    }

    /// An object started under `started_under` landed without a throttle reply: the
    /// rate rises by [`RAMP_PER_OBJECT`], the interval down to `min_object_interval`
    /// (at once from below [`PACE_STEP`]). Returns whether it narrowed.
    pub fn landed(&mut self, started_under: u64) -> bool {
        if started_under < self.generation || !self.is_paced() {
            return false;
        }
        let rate = 1.0 / self.interval.as_secs_f64().max(f64::MIN_POSITIVE);
        let faster = Duration::from_secs_f64(1.0 / (rate + RAMP_PER_OBJECT));
        self.interval = if faster < PACE_STEP { self.min } else { faster }.max(self.min);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(10);

    #[test]
    fn a_throttle_reply_doubles_the_interval_once_per_generation() {
        let mut p = Pacer::new(MIN);
        assert_eq!(p.interval(), MIN);
        assert!(!p.is_paced());
        let g = p.generation();
        // Four objects in flight, all refused: one widening.
        assert!(p.throttled(g));
        for _ in 0..3 {
            assert!(!p.throttled(g));
        }
        assert_eq!(p.interval(), 2 * MIN);
        // An object started after it widens again.
        assert!(p.throttled(p.generation()));
        assert_eq!(p.interval(), 4 * MIN);
    }

    #[test]
    fn the_interval_is_capped() {
        let mut p = Pacer::new(MIN);
        for _ in 0..20 {
            p.throttled(p.generation());
        }
        assert_eq!(p.interval(), MAX_PACED_INTERVAL);
        // From zero it starts at the step.
        let mut zero = Pacer::new(Duration::ZERO);
        zero.throttled(0);
        assert_eq!(zero.interval(), PACE_STEP);
        // A minimum above the cap is kept.
        let mut slow = Pacer::new(Duration::from_secs(3));
        slow.throttled(0);
        assert_eq!(slow.interval(), Duration::from_secs(3));
        assert!(!slow.is_paced());
    }

    #[test]
    fn clean_objects_bring_the_interval_back_to_the_minimum() {
        let mut p = Pacer::new(MIN);
        for _ in 0..20 {
            p.throttled(p.generation());
        }
        // Objects landing one interval apart (a fake clock: the sum of the intervals).
        let g = p.generation();
        let mut elapsed = Duration::ZERO;
        let mut objects = 0;
        while p.is_paced() {
            elapsed += p.interval();
            assert!(p.landed(g));
            objects += 1;
            assert!(objects < 1000, "never back");
        }
        assert_eq!(p.interval(), MIN);
        // From the cap: 1 s, 1/3 s, 1/5 s, ... down to 10 ms.
        assert_eq!(objects, 50);
        assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
        // At the minimum, landing changes nothing.
        assert!(!p.landed(g));
        assert_eq!(p.interval(), MIN);
    }

    #[test]
    fn a_minimum_below_the_step_is_reached_again() {
        for min in [Duration::ZERO, Duration::from_millis(4)] {
            let mut p = Pacer::new(min);
            assert!(p.throttled(p.generation()));
            assert_eq!(p.interval(), PACE_STEP.max(2 * min));
            // One clean object from the step: back at the minimum, not just above it.
            assert!(p.landed(p.generation()));
            assert_eq!(p.interval(), min, "{min:?}");
            assert!(!p.is_paced());
            // From the cap, through the same ramp as any minimum.
            for _ in 0..20 {
                p.throttled(p.generation());
            }
            let mut objects = 0;
            while p.is_paced() {
                assert!(p.interval() >= PACE_STEP, "{:?}", p.interval());
                p.landed(p.generation());
                objects += 1;
                assert!(objects < 1000, "never back");
            }
            assert_eq!(p.interval(), min);
            assert_eq!(objects, 50, "{min:?}");
        }
    }

    #[test]
    fn objects_started_before_a_widening_neither_widen_nor_narrow_it() {
        let mut p = Pacer::new(MIN);
        let before = p.generation();
        p.throttled(before);
        let wide = p.interval();
        assert!(!p.landed(before));
        assert_eq!(p.interval(), wide);
        assert!(p.landed(p.generation()));
        assert!(p.interval() < wide);
    }
}
