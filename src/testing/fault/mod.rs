//! [`FaultStore`]: faults injected into a store's requests, by script and, in the seeded
//! random mode, by chance. The scripted faults and the hooks that apply them are here;
//! holds on creates, late creates, the random mode and the operation log each have a
//! file of their own.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode,
    PutOptions, PutPayload, PutResult,
};

use super::forward::{Hooks, Wrapper};
use super::lock;

mod hold;
mod late;
mod oplog;
mod random;

pub use hold::CreateHold;
pub use oplog::OpRecord;
pub use random::FaultRates;

use late::LateCreate;
use oplog::OpLog;
use random::{delayed_list, pause, Op, RandomFaults};

/// A fault for one conditional create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateFault {
    /// The create is applied, then an error is reported: the outcome looks unknown.
    ApplyThenError,
    /// The create is not applied and an error is reported.
    ErrorUnapplied,
    /// An error is reported now; the create lands only after this many further
    /// operations on the store (a late object), or at [`FaultStore::land_late`].
    LandLate(u32),
    /// The store refuses the create for permission (S3's 403, `PermissionDenied`): not
    /// applied, and definite.
    Denied,
}

/// Injects faults into a store's requests, following an explicit script, and, when made
/// with [`FaultStore::seeded`], random faults and latencies drawn from a seeded PRNG
/// (scripted faults take precedence over random ones).
pub type FaultStore = Wrapper<FaultHooks>;

/// The behaviour of a [`FaultStore`]: the faults scripted, the random mode's state and
/// the operation log.
#[derive(Debug)]
pub struct FaultHooks {
    state: Mutex<FaultState>,
    /// The operation log, when recording ([`FaultStore::record_ops`]).
    log: Arc<OpLog>,
}

#[derive(Debug, Default)]
/// What a [`FaultStore`] was told to do, and what it did.
struct FaultState {
    /// Faults for creates of a key, consumed in order.
    by_key: HashMap<String, VecDeque<CreateFault>>,
    /// Faults for any create, consumed in order after the key's own.
    any: VecDeque<CreateFault>,
    /// Every create fails this way from now on.
    always: Option<CreateFault>,
    late: Vec<LateCreate>,
    /// Holds on the creates of a key, with how many more creates each catches (`None`:
    /// every one).
    holds: HashMap<String, (CreateHold, Option<u64>)>,
    flip_next_get: HashMap<String, u32>,
    /// Keys deleted behind the WAL's back just before their next GET.
    delete_before_get: HashSet<String>,
    fail_gets: u32,
    fail_lists: u32,
    landed_late: u64,
    /// The seeded random mode ([`FaultStore::seeded`]); `None` in scripted mode.
    random: Option<RandomFaults>,
    /// Faults injected so far, scripted and random.
    counts: FaultCounts,
}

impl FaultStore {
    /// Wraps `inner` with no fault scripted.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Wrapper::wrap(
            inner,
            FaultHooks {
                state: Mutex::new(FaultState::default()),
                log: Arc::default(),
            },
        )
    }

    /// The next creates of `key` meet these faults, in order.
    pub fn fail_create_of(&self, key: &Path, faults: impl IntoIterator<Item = CreateFault>) {
        lock(&self.hooks.state)
            .by_key
            .entry(key.to_string())
            .or_default()
            .extend(faults);
    }

    /// The next creates of any key meet these faults, in order.
    pub fn fail_next_creates(&self, faults: impl IntoIterator<Item = CreateFault>) {
        lock(&self.hooks.state).any.extend(faults);
    }

    /// Every create meets `fault` from now on (`None`: stop).
    pub fn fail_every_create(&self, fault: Option<CreateFault>) {
        lock(&self.hooks.state).always = fault;
    }

    /// The next `n` GETs of `key` return the bytes with one bit flipped.
    pub fn flip_next_gets_of(&self, key: &Path, n: u32) {
        *lock(&self.hooks.state)
            .flip_next_get
            .entry(key.to_string())
            .or_default() += n;
    }

    /// The next GET of `key` finds it gone: just before that GET reaches the store, the
    /// object is deleted behind the WAL's back (as by [`delete_behind`](Self::delete_behind)),
    /// as a reclaimer does between a listing that showed the object and its read.
    pub fn delete_before_next_get_of(&self, key: &Path) {
        lock(&self.hooks.state)
            .delete_before_get
            .insert(key.to_string());
    }

    /// The next `n` GETs fail.
    pub fn fail_next_gets(&self, n: u32) {
        lock(&self.hooks.state).fail_gets += n;
    }

    /// The next `n` LISTs fail.
    pub fn fail_next_lists(&self, n: u32) {
        lock(&self.hooks.state).fail_lists += n;
    }

    /// The faults injected so far, scripted and random.
    pub fn fault_counts(&self) -> FaultCounts {
        lock(&self.hooks.state).counts
    }

    /// Deletes the object at `key` directly in the wrapped store, as an operator or a
    /// lifecycle rule would behind the WAL's back. Returns whether an object was there.
    pub async fn delete_behind(&self, key: &Path) -> object_store::Result<bool> {
        match self.inner.head(key).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        self.inner.delete(key).await?;
        self.hooks
            .log
            .push(format!("delete {key} behind the WAL's back"));
        lock(&self.hooks.state).counts.deleted_behind += 1;
        Ok(true)
    }
}

/// Faults a [`FaultStore`] injected so far, scripted and random
/// ([`FaultStore::fault_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Creates applied and answered with an error.
    pub apply_then_error: u64,
    /// Creates not applied and answered with an error.
    pub error_unapplied: u64,
    /// Creates refused for permission ([`CreateFault::Denied`]).
    pub denied: u64,
    /// Creates answered with an error that land later (or never, if the key is taken).
    pub land_late: u64,
    /// GETs failed.
    pub failed_gets: u64,
    /// GETs that returned flipped bytes.
    pub flipped_gets: u64,
    /// LISTs failed.
    pub failed_lists: u64,
    /// Operations made slow (random mode).
    pub slow_ops: u64,
    /// Objects deleted behind the WAL's back ([`FaultStore::delete_behind`],
    /// [`FaultStore::delete_before_next_get_of`]).
    pub deleted_behind: u64,
}

impl FaultCounts {
    fn count_create(&mut self, fault: CreateFault) {
        match fault {
            CreateFault::ApplyThenError => self.apply_then_error += 1,
            CreateFault::ErrorUnapplied => self.error_unapplied += 1,
            CreateFault::LandLate(_) => self.land_late += 1,
            CreateFault::Denied => self.denied += 1,
        }
    }
}

/// The listing of a LIST that failed.
fn failed_list() -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    futures::stream::once(async { Err(injected("list failed")) }).boxed()
}

/// The error an injected fault answers with.
fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultStore",
        source: format!("injected fault: {what}").into(),
    }
}

fn flip_one_bit(bytes: Bytes) -> Bytes {
    let mut v = bytes.to_vec();
    let middle = v.len() / 2;
    if let Some(b) = v.get_mut(middle) {
        *b ^= 0x10;
    }
    Bytes::from(v)
}

impl FaultHooks {
    /// Whether this LIST fails, by script (`scripted`: plain LISTs only, which consume
    /// [`FaultStore::fail_next_lists`]) or else by chance; counts it.
    fn list_fails(&self, scripted: bool) -> bool {
        let mut state = lock(&self.state);
        let mut fail = scripted && state.fail_lists > 0;
        if fail {
            state.fail_lists -= 1;
        }
        fail = fail || state.random_list_fault();
        if fail {
            state.counts.failed_lists += 1;
        }
        fail
    }

    /// The listing `make` takes on `inner`, with this LIST's random latency around the
    /// moment the store takes its snapshot.
    fn listing_with_latency(
        &self,
        inner: &Arc<dyn ObjectStore>,
        make: impl FnOnce(&Arc<dyn ObjectStore>) -> BoxStream<'static, object_store::Result<ObjectMeta>>
            + Send
            + 'static,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = inner.clone();
        delayed_list(self.random_latency(Op::List), move || make(&inner))
    }
}

#[async_trait]
impl Hooks for FaultHooks {
    const NAME: &'static str = "FaultStore";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let is_create = matches!(opts.mode, PutMode::Create);
        let hold = is_create.then(|| self.hold_for(location)).flatten();
        let _passage = match hold {
            Some(hold) => Some(hold.pass().await),
            None => None,
        };
        self.tick(inner).await;
        if is_create {
            self.log.sent(location, &payload);
        }
        let (before, after) = self.random_latency(Op::Put);
        pause(before).await;
        let fault = if is_create {
            let mut state = lock(&self.state);
            let own = state
                .by_key
                .get_mut(location.as_ref())
                .and_then(|q| q.pop_front());
            let fault = own
                .or_else(|| state.any.pop_front())
                .or(state.always)
                .or_else(|| state.random_create_fault());
            if let Some(f) = fault {
                state.counts.count_create(f);
            }
            fault
        } else {
            None
        };
        let result = match fault {
            None => inner.put_opts(location, payload, opts).await,
            Some(CreateFault::ApplyThenError) => {
                match inner.put_opts(location, payload, opts).await {
                    Ok(_) => Err(injected("create applied, error reported")),
                    Err(e) => Err(e),
                }
            }
            Some(CreateFault::ErrorUnapplied) => Err(injected("create not applied")),
            Some(CreateFault::Denied) => Err(object_store::Error::PermissionDenied {
                path: location.to_string(),
                source: "injected fault: access denied".into(),
            }),
            Some(CreateFault::LandLate(after)) => {
                lock(&self.state).late.push(LateCreate {
                    key: location.clone(),
                    payload,
                    opts,
                    after,
                });
                Err(injected("create delayed, will land late"))
            }
        };
        if is_create {
            self.log.create(location, fault, &result);
        }
        // Latency after the store answered: the create may be visible before its
        // answer arrives.
        pause(after).await;
        result
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.tick(inner).await;
        let vanish = lock(&self.state)
            .delete_before_get
            .remove(location.as_ref());
        if vanish {
            match inner.delete(location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            self.log.push(format!(
                "delete {location} behind the WAL's back, before its GET"
            ));
            lock(&self.state).counts.deleted_behind += 1;
        }
        let (before, after) = self.random_latency(Op::Get);
        pause(before).await;
        let (fail, flip) = {
            let mut state = lock(&self.state);
            let mut fail = state.fail_gets > 0;
            if fail {
                state.fail_gets -= 1;
            }
            let mut flip = match state.flip_next_get.get_mut(location.as_ref()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            };
            if !fail && !flip {
                (fail, flip) = state.random_get_fault(location);
            }
            if fail {
                state.counts.failed_gets += 1;
            } else if flip {
                state.counts.flipped_gets += 1;
            }
            (fail, flip)
        };
        if fail {
            self.log.push(format!("get {location}: failed (injected)"));
            pause(after).await;
            return Err(injected("get failed"));
        }
        let mut result = inner.get_opts(location, options).await?;
        pause(after).await;
        if flip {
            self.log
                .push(format!("get {location}: bytes flipped (injected)"));
            let payload = std::mem::replace(
                &mut result.payload,
                GetResultPayload::Stream(futures::stream::empty().boxed()),
            );
            let original = GetResult {
                payload,
                meta: result.meta.clone(),
                range: result.range.clone(),
                attributes: result.attributes.clone(),
                extensions: result.extensions.clone(),
            };
            let flipped = flip_one_bit(original.bytes().await?);
            result.payload =
                GetResultPayload::Stream(futures::stream::once(async move { Ok(flipped) }).boxed());
        }
        Ok(result)
    }

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let log = self.log.clone();
        inner
            .delete_stream(locations)
            .inspect(move |r| match r {
                Ok(key) => log.push(format!("delete {key}")),
                Err(e) => log.push(format!("delete failed: {e}")),
            })
            .boxed()
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.list_fails(true) {
            return failed_list();
        }
        let prefix = prefix.cloned();
        let log = self.log.clone();
        self.listing_with_latency(inner, move |inner| {
            log.push(format!(
                "list {}",
                prefix.as_ref().map_or("", |p| p.as_ref())
            ));
            inner.list(prefix.as_ref())
        })
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.list_fails(false) {
            return failed_list();
        }
        let prefix = prefix.cloned();
        let offset = offset.clone();
        self.listing_with_latency(inner, move |inner| {
            inner.list_with_offset(prefix.as_ref(), &offset)
        })
    }
}
