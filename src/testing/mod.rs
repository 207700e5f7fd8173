//! Store wrappers for tests, examples and benchmarks (feature `testing`): counting
//! requests, injecting faults, adding latency. They wrap any `ObjectStore`, so the same
//! fault can be staged on memory, a local directory or a real server.
//!
//! ## Why they exist
//!
//! The WAL's guarantees rest on what the store answers, and the cases that matter are
//! the ones a healthy store rarely shows: a create applied whose answer is lost, a
//! create that lands long after its error, a stalled upload, a GET that fails or
//! returns damaged bytes, a LIST that fails. [`FaultStore`] stages each of these on
//! demand (or draws them from a seed, for the simulation); [`CountingStore`] shows how
//! many requests, and which reads, a path costs; [`LatencyStore`] stands in for a
//! remote store in examples and benchmarks; [`ThrottleStore`] answers past a request
//! rate as S3 does (`503 Slow Down`), the limit changed or lifted at run time.
//!
//! ## How they compose
//!
//! Each wrapper is a [`Wrapper`] around an `Arc<dyn ObjectStore>` with its own
//! [`Hooks`]: `Wrapper` implements the whole `ObjectStore` trait once, in
//! `forward.rs`, by calling the hooks, and every hook forwards to the wrapped store
//! unless the wrapper overrides it. A wrapper is itself an `ObjectStore`, so they stack
//! like `object_store`'s `ThrottledStore` and `LimitStore`: latency over counting over
//! memory is
//!
//! ```text
//! let counting = CountingStore::new(Arc::new(InMemory::new()));
//! let store = with_latency(counting.clone(), put, get);
//! ```
//!
//! and the counts then see every request that passed the latency. A new wrapper is a
//! type that implements [`Hooks`] for the requests it changes, wrapped with
//! [`Wrapper::wrap`].
//!
//! Besides the wrappers: create clocks for tests ([`ManualClock`], [`TokioClock`]), the
//! seeded PRNG of the random mode ([`SplitMix64`]), and the decoder exercise of the fuzz
//! target with the CRC repairs it and the format tests use ([`exercise_decoders`],
//! [`repair_crcs`]).

use std::sync::{Mutex, MutexGuard};

mod clock;
mod counting;
mod decoders;
mod down;
mod fault;
mod forward;
mod latency;
mod rng;
mod throttle;

pub use clock::{ManualClock, TokioClock};
pub use counting::{CountingHooks, CountingStore, Counts, GetRecord};
pub use decoders::{
    exercise_decoders, repair_crcs, repair_footer_crc, repair_header_crc, repair_object_crc,
    repair_segment_crc, FUZZ_KEYS, FUZZ_MAX_DECODED,
};
pub use down::{DownHooks, DownStore};
pub use fault::{
    CreateFault, CreateHold, FaultCounts, FaultHooks, FaultRates, FaultStore, OpRecord,
};
pub use forward::{Hooks, Wrapper};
pub use latency::{
    with_latency, with_latency_profile, LatencyCounts, LatencyHooks, LatencyProfile, LatencyStore,
    LatencyTail,
};
pub use rng::SplitMix64;
pub use throttle::{
    with_throttle, ClientRetries, Throttle, ThrottleCounts, ThrottleHooks, ThrottleReply,
    ThrottleStore, Throttled,
};

/// Locks `m`, taking the data of a lock poisoned by a panic elsewhere (a test that
/// failed) as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
