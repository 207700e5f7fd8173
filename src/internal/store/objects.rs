//! The WAL's objects on a store: keys, listings, summaries, conditional creates; the one
//! layer that knows what a WAL key and a WAL object are.
//!
//! It reaches the store only through [`Transport`] ([`crate::internal::store::transport`]): requests,
//! timeouts, hedging and closing are the transport's, and a replication layer that
//! implements [`Transport`] over several stores slides in beneath without a change here.
//! What a create's answer means (DESIGN.md's outcome table) is [`crate::internal::write::persist`]'s, on
//! top of this module.
//!
//! - Keys: `<prefix>/<20-digit sequence>.wal`; any other key under the prefix is
//!   foreign: listed, reported, never read, never deleted.
//! - Listing order is not trusted (LocalFileSystem lists unsorted): [`WalIo::list`] sorts.
//! - Creates are conditional (`PutMode::Create`) and report one of the outcomes of
//!   DESIGN.md's table; resolving an `AlreadyExists` (identical retry, fenced, stale
//!   tail) is the caller's, with [`WalIo::read_whole`].
//! - An object's header, footer and trailer are read with one GET when its listed size
//!   is at most `whole_read_threshold`, else with two ranged GETs computed from the
//!   listed size (Azure refuses suffix ranges), plus one for a footer larger than the
//!   tail read. Segments are read with one ranged GET of exactly their bytes.
//! - Damage inside a segment never fails a summary read, even of an object read whole
//!   (FORMAT.md, "What a reader verifies"): the whole read checks each segment on its
//!   own and reports the damaged ones ([`WalIo::report_damaged_segment`]: a warning
//!   naming key and region, and [`RequestStats::damaged_segments`]).

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::config::validate_prefix;
use crate::config::{Config, HedgeAfter};
use crate::config::{DEFAULT_CACHE_BYTES, DEFAULT_CACHE_REGION_BYTES};
use crate::error::{Error, Result};
use crate::format::{
    self, EncodedObject, FormatError, ObjectSummary, SegmentDamage, SegmentRecord,
    EMPTY_OBJECT_LEN, EMPTY_OBJECT_LEN_V3, HEADER_LEN, HEADER_LEN_V3, TRAILER_LEN,
};
use crate::internal::store::cache::{Payloads, RegionWatch, SegmentCache, SegmentId, WholeObjects};
use crate::internal::store::codec::SegmentCodec;
use crate::internal::store::keys::{object_key, parse_key};
use crate::internal::store::replicated::ReplicatedTransport;
pub use crate::internal::store::transport::{
    CreateAttempt, CreateKind, RequestStats, HEDGE_MAX_BYTES,
};
use crate::internal::store::transport::{StoreTransport, Transport, Verify};
use crate::metrics::Metrics;

/// Bytes read from an object's start for its header: the longest header of any version
/// (every object is longer).
pub const HEADER_READ_BYTES: u64 = HEADER_LEN_V3 as u64;
/// Bytes read from the end of a large object to get its trailer and, usually, its footer.
pub const TAIL_READ_BYTES: u64 = 64 * 1024;

/// An object's summary as a recovery read it, with the segments found damaged when the
/// object was read whole (always empty for an object read with ranged GETs, whose
/// segments are not fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRead {
    /// Header, footer and trailer, verified.
    pub summary: ObjectSummary,
    /// The segments that failed their own checks twice (read again once).
    pub damaged: Vec<SegmentDamage>,
}

/// An object found by listing: its sequence and listed size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The sequence from its key.
    pub sequence: u64,
    /// The size the listing reported.
    pub size: u64,
    /// When the store last modified it, by the store's clock (over several stores, the
    /// latest of the copies listed).
    pub last_modified: SystemTime,
}

/// The result of listing a prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// WAL objects, in ascending sequence.
    pub objects: Vec<ListedObject>,
    /// Keys under the prefix that are not WAL objects.
    pub foreign: Vec<String>,
}

/// The most a probe of a source log reads to have an object whole while no catch-up
/// from it is under way: a small object costs one GET instead of two (its tail and
/// its header), and a larger one is not downloaded whole for nothing.
pub const IDLE_WHOLE_PROBE: u64 = 64 * 1024;

/// The WAL's view of one prefix, through a [`Transport`].
#[derive(Debug, Clone)]
pub struct WalIo {
    transport: Arc<dyn Transport>,
    prefix: Path,
    whole_read_threshold: u64,
    metrics: Arc<Metrics>,
    /// How segments read are opened (keys, the decoded-length bound).
    codec: SegmentCodec,
    /// Verified segments kept for reads, shared by every clone.
    cache: Arc<SegmentCache>,
    /// A source log's whole objects, kept for its segment reads.
    whole: Option<Arc<WholeObjects>>,
}

impl WalIo {
    /// The WAL under `prefix` of `store`. Objects up to `whole_read_threshold` bytes are
    /// read with one GET during recovery.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        whole_read_threshold: u64,
    ) -> Result<Self> {
        let metrics = Arc::new(Metrics::new(prefix));
        let transport = Arc::new(StoreTransport::new(store, metrics.clone()));
        WalIo::over(transport, prefix, whole_read_threshold, metrics)
    }

    /// The WAL under `prefix`, reached through `transport` (which counts its requests in
    /// `metrics`): how a layer over several stores is plugged in.
    pub fn over(
        transport: Arc<dyn Transport>,
        prefix: &str,
        whole_read_threshold: u64,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        Ok(WalIo {
            transport,
            prefix: validate_prefix(prefix)?,
            whole_read_threshold: whole_read_threshold.max(EMPTY_OBJECT_LEN_V3 as u64),
            metrics,
            codec: SegmentCodec::identity(),
            cache: Arc::new(SegmentCache::new(
                DEFAULT_CACHE_BYTES,
                DEFAULT_CACHE_REGION_BYTES,
            )),
            whole: None,
        })
    }

    /// The WAL under `config.prefix` of `store`, with the configuration's read threshold,
    /// request timeout and hedging.
    pub fn for_config(store: Arc<dyn ObjectStore>, config: &Config) -> Result<Self> {
        let io = WalIo::new(store, &config.prefix, config.whole_read_threshold)?;
        Ok(io
            .with_requests(config.hedge_after, config.request_timeout)
            .with_codec(SegmentCodec::of(config))
            .with_segment_cache(config))
    }

    /// The WAL under `config.prefix` over several stores (one log, a quorum of copies:
    /// [`crate::internal::store::replicated`]), each with the configuration's timeout and hedging; one
    /// store is [`for_config`](Self::for_config). Callers use [`crate::WalStores`].
    pub fn for_stores(stores: Vec<Arc<dyn ObjectStore>>, config: &Config) -> Result<Self> {
        let mut stores = stores;
        if stores.len() == 1 {
            if let Some(store) = stores.pop() {
                return WalIo::for_config(store, config);
            }
        }
        let metrics = Arc::new(Metrics::new(&config.prefix));
        let transports: Vec<Arc<dyn Transport>> = stores
            .into_iter()
            .map(|store| -> Arc<dyn Transport> {
                Arc::new(StoreTransport::new(store, metrics.clone()))
            })
            .collect();
        let transport = ReplicatedTransport::new(transports)?
            .for_in_flight(config.max_in_flight)
            .with_requests(config.hedge_after, config.request_timeout);
        Ok(WalIo::over(
            transport,
            &config.prefix,
            config.whole_read_threshold,
            metrics,
        )?
        .with_codec(SegmentCodec::of(config))
        .with_segment_cache(config))
    }

    /// The log under another `prefix` of the same store(s), for reading it (a source
    /// a region is taken from): the same transport (its requests count here, and it
    /// closes with this view), codec and request bounds, a segment cache of its own
    /// bounded as `config` says.
    pub fn at_prefix(&self, prefix: &str, config: &Config) -> Result<Self> {
        Ok(WalIo {
            prefix: validate_prefix(prefix)?,
            ..self.clone()
        }
        .with_segment_cache(config))
    }

    /// With a fresh segment cache bounded as `config` says.
    pub fn with_segment_cache(mut self, config: &Config) -> Self {
        self.cache = Arc::new(SegmentCache::new(
            config.segment_cache_bytes,
            config.segment_cache_region_bytes,
        ));
        self
    }

    /// With whole objects kept for its segment reads, at most `bytes` of them, each at
    /// most `largest` bytes ([`WholeObjects`]): a source log's view, so that catch-ups
    /// of any number of its regions fetch each object once.
    pub fn with_whole_objects(mut self, bytes: u64, largest: u64) -> Self {
        self.whole = Some(Arc::new(WholeObjects::new(bytes, largest)));
        self
    }

    /// The whole objects kept for reads, if this view keeps them.
    pub fn whole_objects(&self) -> Option<&Arc<WholeObjects>> {
        self.whole.as_ref()
    }

    /// The bytes a probe reads from a key's end to have the object whole, over a view
    /// that keeps whole objects, when objects of `last_length` (the last one found)
    /// fit: up to [`WholeObjects::largest`] while a catch-up is under way, else up to
    /// [`IDLE_WHOLE_PROBE`] (one GET for a small object is cheaper than its tail and
    /// header).
    pub fn whole_probe_len(&self, last_length: u64) -> Option<u64> {
        let whole = self.whole.as_ref()?;
        let len = if whole.wanted() {
            whole.largest()
        } else {
            whole.largest().min(IDLE_WHOLE_PROBE)
        };
        (last_length <= len).then_some(len)
    }

    /// Reads `span` of the object (`sequence`, `epoch`), `object_len` bytes long if
    /// known. Over a view that keeps whole objects: a copy of the span from the object
    /// kept, or read whole once (shared with the reads that want it meanwhile) when it is
    /// small ([`IDLE_WHOLE_PROBE`]) or more than one catch-up is under way (a lone read
    /// of one region would download the rest for nothing). Else, or if the span fails
    /// `verify` (the kept copy is dropped), or the whole read failed: one ranged read,
    /// as [`read_range_verified`](Self::read_range_verified).
    pub async fn read_span_verified(
        &self,
        sequence: u64,
        epoch: u64,
        object_len: Option<u64>,
        span: Range<u64>,
        verify: Verify<'_>,
    ) -> Result<Bytes> {
        let whole = self.whole.as_ref().zip(object_len);
        if let Some((whole, len)) = whole.filter(|(w, len)| *len <= w.largest() && span.end <= *len)
        {
            let object = match whole.get(sequence, epoch) {
                Some(object) => Some(object),
                None if len <= IDLE_WHOLE_PROBE || whole.wanted_by() > 1 => whole
                    .get_or_read(sequence, epoch, || self.read_range(sequence, 0..len))
                    .await
                    .ok(),
                None => None,
            };
            let slice = object.as_ref().and_then(|object| {
                let start = usize::try_from(span.start).ok()?;
                let end = usize::try_from(span.end).ok()?;
                object.get(start..end)
            });
            if let Some(slice) = slice {
                // A copy: a slice would keep the whole object alive as long as the
                // entries decoded from it.
                let span = Bytes::copy_from_slice(slice);
                if verify(&span) {
                    return Ok(span);
                }
            }
            if object.is_some() {
                whole.forget(sequence, epoch);
            }
        }
        self.read_range_verified(sequence, span, verify).await
    }

    /// Drops the kept copy of the object (`sequence`, `epoch`), if any: a segment of it
    /// failed its checks, and the next read must read the store again.
    pub fn forget_whole(&self, sequence: u64, epoch: u64) {
        if let Some(whole) = &self.whole {
            whole.forget(sequence, epoch);
        }
    }

    /// The verified segments kept for reads.
    pub fn segment_cache(&self) -> &Arc<SegmentCache> {
        &self.cache
    }

    /// Marks `region` as followed while the guard lives: the writer hands its segments
    /// to the cache as it acknowledges them.
    pub fn watch_region(&self, region: u64) -> RegionWatch {
        self.cache.watch(region)
    }

    /// This view with `timeout` on every request and hedging after `hedge_after`.
    pub fn with_requests(mut self, hedge_after: HedgeAfter, timeout: Duration) -> Self {
        self.transport = self.transport.with_requests(hedge_after, timeout);
        self
    }

    /// With segments opened by `codec` (the configuration's keys and bound).
    pub fn with_codec(mut self, codec: SegmentCodec) -> Self {
        self.codec = codec;
        self
    }

    /// How segments read are opened.
    pub fn codec(&self) -> &SegmentCodec {
        &self.codec
    }

    /// Decodes a segment of the object at `sequence` (written in `epoch`) read from the
    /// store: checked, its transforms undone, split into entries.
    pub fn decode_segment(
        &self,
        bytes: Bytes,
        record: &SegmentRecord,
        sequence: u64,
        epoch: u64,
    ) -> std::result::Result<Vec<Bytes>, format::FormatError> {
        format::decode_segment_with(bytes, record, sequence, epoch, &self.codec.opening())
    }

    /// What happened to the requests so far (hedges, wins, timeouts, damaged segments).
    pub fn request_stats(&self) -> &RequestStats {
        self.transport.stats()
    }

    /// The recent median create latency, once known ([`Transport::create_median`]).
    pub fn create_median(&self) -> Option<Duration> {
        self.transport.create_median()
    }

    /// Closes this view's transport, and so every clone of it, for good (see
    /// [`Transport::close`]).
    pub fn close(&self) {
        self.transport.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.transport.is_closed()
    }

    /// Waits until [`close`](Self::close) is called.
    pub async fn closed(&self) {
        self.transport.closed().await
    }

    /// The metric handles of this WAL (labelled with its prefix).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Records damage found inside the segment of `region` in the object `sequence`: a
    /// warning naming the key and region, and one more
    /// [`damaged_segments`](RequestStats::damaged_segments).
    pub fn report_damaged_segment(&self, sequence: u64, region: u64, error: &FormatError) {
        self.request_stats()
            .damaged_segments
            .fetch_add(1, Ordering::Relaxed);
        self.metrics.damaged_segments.increment(1);
        tracing::warn!(
            key = %self.key(sequence),
            region,
            error = %error,
            "damaged segment: reads of this region fail there (or skip it)"
        );
    }

    /// One view per store beneath, when this WAL spans several (an open reads each
    /// store's copies on its own); empty over one store.
    pub fn replicas(&self) -> Vec<WalIo> {
        self.transport
            .replicas()
            .into_iter()
            .map(|transport| WalIo {
                transport,
                ..self.clone()
            })
            .collect()
    }

    /// How long one request may go unanswered.
    pub fn request_timeout(&self) -> Duration {
        self.transport.request_timeout()
    }

    /// The prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The error for a store that refuses conditional creates.
    pub fn unsupported(&self) -> Error {
        Error::ConditionalCreateUnsupported {
            store: self.transport.describe(),
        }
    }

    /// Where this WAL lives, for messages: the store(s) and the prefix.
    pub fn location(&self) -> String {
        format!("{} prefix {}", self.transport.describe(), self.prefix)
    }

    /// The key of the object with `sequence`.
    pub fn key(&self, sequence: u64) -> Path {
        object_key(&self.prefix, sequence)
    }

    /// Lists every object under the prefix, sorted by sequence; other keys are foreign.
    pub async fn list(&self) -> Result<Listing> {
        self.list_from(None).await
    }

    /// Lists the objects with a sequence above `after` (a start offset, not a full
    /// listing), sorted.
    pub async fn list_after(&self, after: u64) -> Result<Listing> {
        self.list_from(Some(self.key(after))).await
    }

    async fn list_from(&self, offset: Option<Path>) -> Result<Listing> {
        // Folded as the pages arrive: a listing keeps 16 bytes per WAL object, not each
        // key's whole metadata (about 100 bytes: a few thousand keys made a block of
        // several hundred KiB on every reclaimer's listing).
        let prefix = &self.prefix;
        let mut listing = Listing::default();
        let mut visit =
            |key: &Path, size: u64, last_modified: SystemTime| match parse_key(prefix, key) {
                Some(sequence) => listing.objects.push(ListedObject {
                    sequence,
                    size,
                    last_modified,
                }),
                None => listing.foreign.push(key.to_string()),
            };
        self.transport
            .list(prefix, offset.as_ref(), &mut visit)
            .await?;
        listing.objects.sort_by_key(|o| o.sequence);
        listing.objects.dedup_by_key(|o| o.sequence);
        listing.foreign.sort();
        Ok(listing)
    }

    /// Creates a claim or the opening object only if its key is absent: one attempt,
    /// never hedged, under the request timeout.
    pub async fn create(&self, object: &EncodedObject, kind: CreateKind) -> CreateAttempt {
        let key = self.key(object.header().sequence);
        self.transport.create(&key, object.chunks(), kind).await
    }

    /// Creates a data object only if its key is absent, hedged (unless it is larger than
    /// [`HEDGE_MAX_BYTES`]): a second identical
    /// create goes out beside the first when it has not answered within the hedge delay,
    /// and the first definite answer decides. A twin's "already exists" is the outcome
    /// table's identical retry, resolved by the caller like any other.
    pub async fn create_hedged(&self, object: &EncodedObject) -> CreateAttempt {
        let key = self.key(object.header().sequence);
        self.transport
            .create(&key, object.chunks(), CreateKind::Data)
            .await
    }

    /// Creates a copy of an object from its bytes (`bytes`, read whole from another
    /// store's copy) only if its key is absent: how an open completes a value over
    /// several stores.
    pub async fn create_copy(&self, sequence: u64, bytes: Bytes) -> CreateAttempt {
        let key = self.key(sequence);
        self.transport
            .create(&key, &[bytes], CreateKind::Data)
            .await
    }

    /// One GET of `range` (or whole), hedged unless the range is larger than
    /// [`HEDGE_MAX_BYTES`], under the request timeout.
    async fn get(&self, sequence: u64, range: Option<Range<u64>>) -> Result<Bytes> {
        self.transport.get(&self.key(sequence), range).await
    }

    /// Reads a whole object.
    pub async fn read_whole(&self, sequence: u64) -> Result<Bytes> {
        self.get(sequence, None).await
    }

    /// Reads `range` of an object: one ranged GET.
    pub async fn read_range(&self, sequence: u64, range: Range<u64>) -> Result<Bytes> {
        self.read_range_verified(sequence, range, &|_| true).await
    }

    /// Reads `range` of an object, where an answer of another length, or one that
    /// fails `verify`, is no answer: over several stores another copy is read (see
    /// [`Transport::get_verified`]).
    pub async fn read_range_verified(
        &self,
        sequence: u64,
        range: Range<u64>,
        verify: Verify<'_>,
    ) -> Result<Bytes> {
        let key = self.key(sequence);
        let want = range.end - range.start;
        let check = |b: &Bytes| b.len() as u64 == want && verify(b);
        let bytes = self
            .transport
            .get_verified(&key, Some(range.clone()), &check)
            .await?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(Error::CorruptObject {
                key: key.to_string(),
                source: format::FormatError::Truncated {
                    part: "range",
                    needed: range.end - range.start,
                    got: bytes.len() as u64,
                },
            });
        }
        Ok(bytes)
    }

    /// Reads and verifies an object's header, footer and trailer. An object no larger
    /// than `whole_read_threshold` is read whole: its segments are then checked too, and
    /// a damaged one is reported ([`report_damaged_segment`](Self::report_damaged_segment))
    /// and returned in [`SummaryRead::damaged`], never an error.
    ///
    /// An object that fails verification, or has a damaged segment, is read once more,
    /// as a segment is: bytes damaged in transit must not pass for a damaged object,
    /// which fails recovery, nor be reported as damage at rest.
    pub async fn read_summary(&self, listed: &ListedObject) -> Result<SummaryRead> {
        let checked = read_again_once(|| async {
            match self.read_summary_once(listed).await {
                Err(e @ (Error::CorruptObject { .. } | Error::SequenceMismatch { .. })) => {
                    Ok(Err(Err(e)))
                }
                Ok(read) if !read.damaged.is_empty() => Ok(Err(Ok(read))),
                other => other.map(Ok),
            }
        })
        .await?;
        match checked {
            Ok(read) => Ok(read),
            Err(Ok(read)) => {
                for damage in &read.damaged {
                    self.report_damaged_segment(listed.sequence, damage.region, &damage.error);
                }
                Ok(read)
            }
            Err(Err(e)) => Err(e),
        }
    }

    async fn read_summary_once(&self, listed: &ListedObject) -> Result<SummaryRead> {
        let key = self.key(listed.sequence);
        let corrupt = |source| Error::CorruptObject {
            key: key.to_string(),
            source,
        };
        let size = listed.size;
        if size < EMPTY_OBJECT_LEN as u64 {
            return Err(corrupt(format::FormatError::Truncated {
                part: "object",
                needed: EMPTY_OBJECT_LEN as u64,
                got: size,
            }));
        }
        let mut damaged = Vec::new();
        let mut read_whole = None;
        let summary = if size <= self.whole_read_threshold {
            let bytes = self.read_whole(listed.sequence).await?;
            // Header, footer and trailer decide whether the object is usable; a damaged
            // segment fails only reads of its region (FORMAT.md, "What a reader
            // verifies"), so the object CRC, which cannot tell them apart, is not checked.
            let checked = format::check_object(&bytes).map_err(corrupt)?;
            damaged = checked.damaged;
            read_whole = Some(bytes);
            checked.summary
        } else {
            let tail_len = TAIL_READ_BYTES.min(size - HEADER_LEN as u64);
            let (head, tail) = futures::try_join!(
                self.read_range(listed.sequence, 0..HEADER_READ_BYTES),
                self.read_range(listed.sequence, size - tail_len..size),
            )?;
            self.decode_summary_of(listed.sequence, &head, tail, size)
                .await?
        };
        self.check_sequence(listed.sequence, &summary)?;
        debug_assert!(summary.length >= TRAILER_LEN as u64);
        if let Some((whole, object)) = self.whole.as_ref().zip(read_whole) {
            whole.keep(listed.sequence, summary.header.epoch, object);
        }
        Ok(SummaryRead { summary, damaged })
    }

    /// The summary from an object's header and a tail read of it; a footer longer than
    /// the tail is fetched exactly (one more ranged GET).
    async fn decode_summary_of(
        &self,
        sequence: u64,
        head: &[u8],
        tail: Bytes,
        size: u64,
    ) -> Result<ObjectSummary> {
        let corrupt = |source| Error::CorruptObject {
            key: self.key(sequence).to_string(),
            source,
        };
        match format::decode_summary(head, &tail, size) {
            Ok(s) => Ok(s),
            Err(format::FormatError::Truncated { part: "footer", .. }) => {
                let trailer = format::decode_trailer(&tail, size).map_err(corrupt)?;
                let from = trailer.footer_offset;
                let tail = self.read_range(sequence, from..size).await?;
                format::decode_summary(head, &tail, size).map_err(corrupt)
            }
            Err(e) => Err(corrupt(e)),
        }
    }

    fn check_sequence(&self, sequence: u64, summary: &ObjectSummary) -> Result<()> {
        if summary.header.sequence != sequence {
            return Err(Error::SequenceMismatch {
                key: self.key(sequence).to_string(),
                expected: sequence,
                found: summary.header.sequence,
            });
        }
        Ok(())
    }

    /// Reads the summary of the object at `sequence` without listing it (a follower's
    /// probe, DESIGN.md "Tailing without listing"): `Ok(None)` when the key is absent.
    /// Reads the last `tail_len` bytes (the trailer and, usually, the footer; a small
    /// object whole) and, unless that was the whole object, the header: at once when
    /// `header_at_once` (one round trip, two requests), else after the tail answered
    /// (one request for an absent key). Verified, and read once more if verification
    /// fails, as [`read_summary`](Self::read_summary) does. Segments are not read.
    pub async fn probe_summary(
        &self,
        sequence: u64,
        tail_len: u64,
        header_at_once: bool,
    ) -> Result<Option<ObjectSummary>> {
        let tail_len = tail_len.max(TRAILER_LEN as u64);
        let checked = read_again_once(|| async {
            match self.probe_once(sequence, tail_len, header_at_once).await {
                Err(e @ (Error::CorruptObject { .. } | Error::SequenceMismatch { .. })) => {
                    Ok(Err(e))
                }
                other => other.map(Ok),
            }
        })
        .await?;
        checked
    }

    async fn probe_once(
        &self,
        sequence: u64,
        tail_len: u64,
        header_at_once: bool,
    ) -> Result<Option<ObjectSummary>> {
        let key = self.key(sequence);
        let header = || self.read_range(sequence, 0..HEADER_READ_BYTES);
        let (tail, early_head) = if header_at_once {
            let (tail, head) = futures::join!(self.transport.get_tail(&key, tail_len), header());
            (tail, Some(head))
        } else {
            (self.transport.get_tail(&key, tail_len).await, None)
        };
        let (tail, size) = match tail {
            Err(e) if e.is_not_found() => return Ok(None),
            other => other?,
        };
        if size < EMPTY_OBJECT_LEN as u64 {
            return Err(Error::CorruptObject {
                key: key.to_string(),
                source: format::FormatError::Truncated {
                    part: "object",
                    needed: EMPTY_OBJECT_LEN as u64,
                    got: size,
                },
            });
        }
        let head = if tail.len() as u64 == size {
            tail.slice(..HEADER_LEN_V3.min(tail.len()))
        } else {
            let head = match early_head {
                Some(head) => head,
                None => header().await,
            };
            match head {
                // Deleted between the two reads: below the owner's floor.
                Err(e) if e.is_not_found() => return Ok(None),
                other => other?,
            }
        };
        let whole = (tail.len() as u64 == size).then(|| tail.clone());
        let summary = self.decode_summary_of(sequence, &head, tail, size).await?;
        self.check_sequence(sequence, &summary)?;
        if let Some(object) = whole {
            self.keep_followed_segments(&summary, &object);
            if let Some(whole) = &self.whole {
                whole.keep(sequence, summary.header.epoch, object);
            }
        }
        Ok(Some(summary))
    }

    /// A probe that read a small object whole: the segments of regions followed here
    /// go into the segment cache, verified, so their follows read them without another
    /// round trip. One that fails verification is left out (its region's fetch reads it
    /// again, and reports damage if it is).
    fn keep_followed_segments(&self, summary: &format::ObjectSummary, object: &Bytes) {
        let cache = self.segment_cache();
        let (sequence, epoch) = (summary.header.sequence, summary.header.epoch);
        for record in &summary.footer.records {
            if !cache.wants(record.region) {
                continue;
            }
            let range = record.range();
            let (Ok(start), Ok(end)) = (usize::try_from(range.start), usize::try_from(range.end))
            else {
                continue;
            };
            // A copy: a slice would keep the whole object alive as long as the segment.
            let Some(segment) = object.get(start..end).map(Bytes::copy_from_slice) else {
                continue;
            };
            if let Ok(payloads) = self.decode_segment(segment, record, sequence, epoch) {
                let id = SegmentId {
                    sequence,
                    epoch,
                    region: record.region,
                };
                cache.insert(id, Payloads::from(payloads));
            }
        }
    }

    /// Deletes the object with `sequence` (a missing object is not an error).
    pub async fn delete(&self, sequence: u64) -> Result<()> {
        self.transport.delete(&self.key(sequence)).await
    }
}

/// Runs `attempt` (a read and the checks of what it read) and, when the checks fail,
/// once more: bytes damaged in transit must not pass for damage at rest. A store error
/// ends it at once; the second check's failure is the answer. Every verified read of the
/// WAL (summaries, segments, create conflicts) goes through here.
pub async fn read_again_once<T, V, F, Fut>(mut attempt: F) -> Result<std::result::Result<T, V>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::result::Result<T, V>>>,
{
    match attempt().await? {
        Ok(checked) => Ok(Ok(checked)),
        Err(_) => attempt().await,
    }
}
