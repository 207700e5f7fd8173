//! The creation clock: what create durations and the link window are measured on.
//!
//! Reclaiming is safe only if a create that stalled is never acknowledged
//! (`max_create_duration`) and the next create of an epoch starts within the link window.
//! Both are measured on a [`CreateClock`] that keeps counting while the process or the
//! machine is suspended: on a clock that stops, a create stalled across a suspension
//! would look fast.

use std::time::Duration;

/// A clock for create durations. It must keep counting while the process or the machine
/// is suspended: a create that stalled across a suspension must not look fast.
pub trait CreateClock: Send + Sync + std::fmt::Debug {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// `CLOCK_BOOTTIME` on Linux and Android (it counts suspended time); the monotonic
/// clock elsewhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct BootClock;

impl CreateClock for BootClock {
    fn now(&self) -> Duration {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime only writes the timespec we own and pass by pointer.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
            if rc == 0 {
                return Duration::new(
                    ts.tv_sec.max(0) as u64,
                    ts.tv_nsec.clamp(0, 999_999_999) as u32,
                );
            }
        }
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }
}
