//! [`LatencyStore`]: a latency per PUT and per GET, with optional heavy tails and hangs.
//!
//! A request is delayed *before* it reaches the wrapped store, as if it were still in the
//! network: a second, hedged copy of a slow request can reach the store first, and the
//! first copy, if its sender still waits for it, arrives later and meets what the second
//! left (for a create, the object it made). A hung request never reaches the store: its
//! future stays pending until its sender drops it (a timeout, or the hedge that won).
//!
//! Which requests are slow or hang is drawn from a seeded [`SplitMix64`], one stream for
//! PUTs and one for GETs, with the same number of draws for every request: the same seed
//! gives the same sequence of outcomes, handed to requests in the order they arrive (so a
//! run repeats as far as its requests arrive in the same order).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore, PutOptions, PutPayload, PutResult};

use super::forward::{Hooks, Wrapper};
use super::lock;
use super::rng::SplitMix64;

/// Wraps `store` with a fixed latency per PUT (creates included) and per GET, standing
/// in for a remote store. (object_store's `ThrottledStore` does this too, but panics on
/// GETs from a `LocalFileSystem`, whose results are files.) For heavy tails and hangs,
/// see [`LatencyProfile`] and [`with_latency_profile`].
pub fn with_latency(
    store: Arc<dyn ObjectStore>,
    put: Duration,
    get: Duration,
) -> Arc<dyn ObjectStore> {
    with_latency_profile(store, LatencyProfile::new(put, get))
}

/// Wraps `store` with the latencies, tails and hangs of `profile`. The returned store
/// tells how many tails and hangs it drew ([`LatencyStore::counts`]).
pub fn with_latency_profile(
    store: Arc<dyn ObjectStore>,
    profile: LatencyProfile,
) -> Arc<LatencyStore> {
    Wrapper::wrap(store, LatencyHooks::new(profile))
}

/// A slow tail: a `fraction` of requests take `extra` more than the base latency.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyTail {
    /// The share of requests that are slow, from 0 (none) to 1 (all).
    pub fraction: f64,
    /// What a slow request adds to the base latency.
    pub extra: Duration,
}

/// What a [`LatencyStore`] does to PUTs and GETs: a base latency each, a slow tail each,
/// and a share of requests that never answer. Built with [`LatencyProfile::new`] and
/// the builder methods; every share is a fraction from 0 to 1 (values outside are
/// clamped when drawn: below 0 never, 1 and above always).
///
/// ```text
/// let profile = LatencyProfile::new(Duration::from_millis(20), Duration::from_millis(10))
///     .put_tail(0.01, Duration::from_millis(500))
///     .put_hang(0.001)
///     .seed(7);
/// let store = with_latency_profile(memory, profile);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyProfile {
    /// The latency of every PUT that does not hang.
    pub put: Duration,
    /// The latency of every GET that does not hang.
    pub get: Duration,
    /// PUTs that take longer.
    pub put_tail: LatencyTail,
    /// GETs that take longer.
    pub get_tail: LatencyTail,
    /// The share of PUTs that never answer.
    pub put_hang: f64,
    /// The share of GETs that never answer.
    pub get_hang: f64,
    /// The seed of the draws.
    pub seed: u64,
}

impl LatencyProfile {
    /// `put` per PUT and `get` per GET, no tails, no hangs, seed 0.
    pub fn new(put: Duration, get: Duration) -> Self {
        LatencyProfile {
            put,
            get,
            put_tail: LatencyTail::default(),
            get_tail: LatencyTail::default(),
            put_hang: 0.0,
            get_hang: 0.0,
            seed: 0,
        }
    }

    /// A `fraction` of PUTs take `extra` more.
    pub fn put_tail(mut self, fraction: f64, extra: Duration) -> Self {
        self.put_tail = LatencyTail { fraction, extra };
        self
    }

    /// A `fraction` of GETs take `extra` more.
    pub fn get_tail(mut self, fraction: f64, extra: Duration) -> Self {
        self.get_tail = LatencyTail { fraction, extra };
        self
    }

    /// A `fraction` of PUTs never answer.
    pub fn put_hang(mut self, fraction: f64) -> Self {
        self.put_hang = fraction;
        self
    }

    /// A `fraction` of GETs never answer.
    pub fn get_hang(mut self, fraction: f64) -> Self {
        self.get_hang = fraction;
        self
    }

    /// The seed of the draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// How many slow and hung requests a [`LatencyStore`] drew so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencyCounts {
    /// PUTs given the slow tail.
    pub put_tails: u64,
    /// PUTs that hang.
    pub put_hangs: u64,
    /// GETs given the slow tail.
    pub get_tails: u64,
    /// GETs that hang.
    pub get_hangs: u64,
}

impl LatencyCounts {
    /// What was drawn after `earlier`, a snapshot of the same store.
    pub fn since(&self, earlier: &LatencyCounts) -> LatencyCounts {
        LatencyCounts {
            put_tails: self.put_tails.saturating_sub(earlier.put_tails),
            put_hangs: self.put_hangs.saturating_sub(earlier.put_hangs),
            get_tails: self.get_tails.saturating_sub(earlier.get_tails),
            get_hangs: self.get_hangs.saturating_sub(earlier.get_hangs),
        }
    }
}

/// Adds a latency, and the tails and hangs of its [`LatencyProfile`], before every PUT
/// and GET of the wrapped store ([`with_latency`], [`with_latency_profile`]).
pub type LatencyStore = Wrapper<LatencyHooks>;

impl LatencyStore {
    /// The tails and hangs drawn so far.
    pub fn counts(&self) -> LatencyCounts {
        let (puts, gets) = (&self.hooks.puts, &self.hooks.gets);
        LatencyCounts {
            put_tails: puts.tails.load(Ordering::Relaxed),
            put_hangs: puts.hangs.load(Ordering::Relaxed),
            get_tails: gets.tails.load(Ordering::Relaxed),
            get_hangs: gets.hangs.load(Ordering::Relaxed),
        }
    }

    /// The profile the store follows.
    pub fn profile(&self) -> &LatencyProfile {
        &self.hooks.profile
    }
}

/// The behaviour of a [`LatencyStore`]: a sleep on tokio's clock before each PUT and
/// each GET is sent on, longer for the slow tail, forever for a hang.
#[derive(Debug)]
pub struct LatencyHooks {
    profile: LatencyProfile,
    /// Each kind has its own stream of draws, so that more GETs do not shift which PUTs
    /// are slow.
    puts: Kind,
    gets: Kind,
}

/// The draws and counts of one kind of request.
#[derive(Debug)]
struct Kind {
    base: Duration,
    tail: LatencyTail,
    hang: f64,
    rng: Mutex<SplitMix64>,
    tails: AtomicU64,
    hangs: AtomicU64,
}

/// What happens to one request.
enum Fate {
    Answer(Duration),
    Hang,
}

impl Kind {
    /// Two draws per request whatever comes out, so the sequence of fates depends only
    /// on the seed and the number of requests before.
    fn draw(&self) -> Fate {
        let (hang, slow) = {
            let mut rng = lock(&self.rng);
            (rng.chance(self.hang), rng.chance(self.tail.fraction))
        };
        if hang {
            self.hangs.fetch_add(1, Ordering::Relaxed);
            Fate::Hang
        } else if slow {
            self.tails.fetch_add(1, Ordering::Relaxed);
            Fate::Answer(self.base.saturating_add(self.tail.extra))
        } else {
            Fate::Answer(self.base)
        }
    }

    /// Waits as the drawn fate says; never returns for a hang.
    async fn wait(&self) {
        match self.draw() {
            Fate::Answer(d) if d.is_zero() => {}
            Fate::Answer(d) => tokio::time::sleep(d).await,
            Fate::Hang => std::future::pending::<()>().await,
        }
    }
}

impl LatencyHooks {
    /// The hooks that follow `profile`.
    pub fn new(profile: LatencyProfile) -> Self {
        let mut seeds = SplitMix64::new(profile.seed);
        let kind = |base, tail, hang, rng| Kind {
            base,
            tail,
            hang,
            rng: Mutex::new(rng),
            tails: AtomicU64::new(0),
            hangs: AtomicU64::new(0),
        };
        let puts = kind(
            profile.put,
            profile.put_tail,
            profile.put_hang,
            seeds.fork(),
        );
        let gets = kind(
            profile.get,
            profile.get_tail,
            profile.get_hang,
            seeds.fork(),
        );
        LatencyHooks {
            profile,
            puts,
            gets,
        }
    }
}

#[async_trait]
impl Hooks for LatencyHooks {
    const NAME: &'static str = "LatencyStore";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.puts.wait().await;
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gets.wait().await;
        inner.get_opts(location, options).await
    }
}
