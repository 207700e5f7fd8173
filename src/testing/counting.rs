//! [`CountingStore`]: counts every request and records every GET.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, ListResult, ObjectMeta, ObjectStore, PutOptions, PutPayload,
    PutResult,
};

use super::forward::{Hooks, Wrapper};
use super::lock;

/// One GET as the counting store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRecord {
    /// The key read.
    pub key: String,
    /// The range asked for; `None` for a whole object. A suffix of `n` bytes is
    /// `u64::MAX - n..u64::MAX`.
    pub range: Option<Range<u64>>,
    /// Whether the key was there.
    pub found: bool,
}

/// Request counts.
#[derive(Debug, Default)]
pub struct Counts {
    /// PUTs (creates and overwrites).
    pub puts: AtomicU64,
    /// Bytes sent by PUTs.
    pub put_bytes: AtomicU64,
    /// GETs, ranged or whole (found or not).
    pub gets: AtomicU64,
    /// HEADs (metadata only).
    pub heads: AtomicU64,
    /// Bytes returned by GETs.
    pub get_bytes: AtomicU64,
    /// LIST calls.
    pub lists: AtomicU64,
    /// Keys returned by LIST calls.
    pub listed_keys: AtomicU64,
    /// Deletes.
    pub deletes: AtomicU64,
}

impl Counts {
    /// The sum of every request.
    pub fn requests(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
            + self.gets.load(Ordering::Relaxed)
            + self.heads.load(Ordering::Relaxed)
            + self.lists.load(Ordering::Relaxed)
            + self.deletes.load(Ordering::Relaxed)
    }
}

/// Counts every request and records every GET.
pub type CountingStore = Wrapper<CountingHooks>;

/// The behaviour of a [`CountingStore`]: its counts and its GET log.
#[derive(Debug)]
pub struct CountingHooks {
    counts: Arc<Counts>,
    /// The GET log; `None` when not kept (a long benchmark would grow it without bound).
    gets: Mutex<Option<Vec<GetRecord>>>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Wrapper::wrap(
            inner,
            CountingHooks {
                counts: Arc::new(Counts::default()),
                gets: Mutex::new(Some(Vec::new())),
            },
        )
    }

    /// Wraps `inner`, counting only: no GET log is kept, so memory stays flat however
    /// long it runs (benchmarks).
    pub fn counts_only(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Wrapper::wrap(
            inner,
            CountingHooks {
                counts: Arc::new(Counts::default()),
                gets: Mutex::new(None),
            },
        )
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.hooks.counts
    }

    /// Every GET so far, in order (empty for [`counts_only`](Self::counts_only)).
    pub fn get_log(&self) -> Vec<GetRecord> {
        lock(&self.hooks.gets).clone().unwrap_or_default()
    }

    /// Forgets the GET log and zeroes the counts.
    pub fn reset(&self) {
        if let Some(log) = lock(&self.hooks.gets).as_mut() {
            log.clear();
        }
        let counts = &self.hooks.counts;
        for c in [
            &counts.puts,
            &counts.put_bytes,
            &counts.gets,
            &counts.heads,
            &counts.get_bytes,
            &counts.lists,
            &counts.listed_keys,
            &counts.deletes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

fn range_of(range: &Option<GetRange>) -> Option<Range<u64>> {
    match range {
        Some(GetRange::Bounded(r)) => Some(r.clone()),
        Some(GetRange::Offset(o)) => Some(*o..u64::MAX),
        Some(GetRange::Suffix(s)) => Some(u64::MAX - s..u64::MAX),
        None => None,
    }
}

fn count_list(
    stream: BoxStream<'static, object_store::Result<ObjectMeta>>,
    counts: Arc<Counts>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    counts.lists.fetch_add(1, Ordering::Relaxed);
    stream
        .inspect(move |r| {
            if r.is_ok() {
                counts.listed_keys.fetch_add(1, Ordering::Relaxed);
            }
        })
        .boxed()
}

#[async_trait]
impl Hooks for CountingHooks {
    const NAME: &'static str = "CountingStore";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.counts.puts.fetch_add(1, Ordering::Relaxed);
        self.counts
            .put_bytes
            .fetch_add(payload.content_length() as u64, Ordering::Relaxed);
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if options.head {
            self.counts.heads.fetch_add(1, Ordering::Relaxed);
            return inner.get_opts(location, options).await;
        }
        self.counts.gets.fetch_add(1, Ordering::Relaxed);
        let range = range_of(&options.range);
        let result = inner.get_opts(location, options).await;
        if let Some(log) = lock(&self.gets).as_mut() {
            log.push(GetRecord {
                key: location.to_string(),
                range,
                found: !matches!(result, Err(object_store::Error::NotFound { .. })),
            });
        }
        let result = result?;
        self.counts.get_bytes.fetch_add(
            result.range.end.saturating_sub(result.range.start),
            Ordering::Relaxed,
        );
        Ok(result)
    }

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counts = self.counts.clone();
        inner.delete_stream(
            locations
                .inspect(move |_| {
                    counts.deletes.fetch_add(1, Ordering::Relaxed);
                })
                .boxed(),
        )
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        count_list(inner.list(prefix), self.counts.clone())
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        count_list(inner.list_with_offset(prefix, offset), self.counts.clone())
    }

    async fn list_with_delimiter(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        self.counts.lists.fetch_add(1, Ordering::Relaxed);
        inner.list_with_delimiter(prefix).await
    }
}
