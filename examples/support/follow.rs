//! `bench follow`: an open-loop write (the `write` workload's `--rate` machinery) with
//! followers of some regions, and how fast, how costly and how exact their deliveries
//! are.
//!
//! - `--followers K`: K follows in the process, `WalHandle::follow_stream` on the
//!   spawned WAL; their reads go through the WAL's own store handle.
//! - `--remote-followers K`: K read-only opens (`ObjectStoreLogStore::open_read_only`),
//!   each on a store handle of its own over the same store and latency wrapper, each
//!   following with `ObjectStoreLogStore::follow` every `--poll-interval-ms`; with
//!   `--remote-log shared`, one `SourceLog` opened for their regions that all of them
//!   follow (one poll, each object fetched once between them), and with `shared-all`
//!   one opened for every region (a follower of all of them). The line's `rss_mib` (at the end of the
//!   load) and `remote_kept_regions`/`remote_kept_segments` show what that costs.
//!
//! Each kind follows K regions spread over `--regions` (`i * regions / K`; both kinds
//! the same regions when K is the same). Every entry starts with 16 bytes: the
//! nanoseconds from a shared instant to its append's call, and the arrival's number;
//! a follower reads them back on delivery, so `e2e` is call to delivery, per entry and
//! follower. Read requests are counted by a [`CountingStore`] (GETs, HEADs, LISTs and
//! bytes read; no GET log), outermost on each handle; for local followers it is
//! the WAL's handle, which the writer shares (it reads nothing while it writes).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Args as ClapArgs;
use futures::stream::{BoxStream, StreamExt};
use hdrhistogram::Histogram;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::testing::CountingStore;
use object_store_wal::{AppendReceipt, Entry, Error, ObjectStoreLogStore, SourceLog, WalStores};
use serde_json::json;
use tokio::task::JoinSet;

use super::payloads::Payloads;
use super::{
    config, hedge_label, ms, new_histogram, open_loop, round2, secs, status_mib, stop, stores,
    Common, Recorder, Stores,
};

/// The stamp at the start of every entry: nanoseconds since [`Stamps::base`] at the
/// append's call, then the arrival's number, both little-endian.
const STAMP_BYTES: usize = 16;

#[derive(ClapArgs, Debug, Clone)]
pub(super) struct FollowArgs {
    /// Followers in the process (`WalHandle::follow_stream` on the spawned WAL), one
    /// region each.
    #[arg(long, default_value_t = 8)]
    followers: u64,
    /// Read-only followers (`ObjectStoreLogStore::follow` of a read-only open), each on
    /// a store handle of its own over the same store and latency wrapper, one region
    /// each.
    #[arg(long, default_value_t = 8)]
    remote_followers: u64,
    /// How the read-only followers read the prefix: `each` (a read-only open and
    /// `ObjectStoreLogStore::follow` each, on a handle of its own), `shared` (one
    /// `SourceLog::open_regions` for all of them, keeping their regions alone, on one
    /// handle), or `shared-all` (the same, opened for every region: what a follower of
    /// every region holds).
    #[arg(long, value_enum, default_value_t = RemoteLog::Each)]
    remote_log: RemoteLog,
    /// How often a read-only follower probes the prefix while objects appear, ms.
    #[arg(long, default_value_t = 10)]
    poll_interval_ms: u64,
    /// After the last append is answered, how long the followers may take to deliver
    /// every acknowledged entry of their regions (the run goes on as soon as they did);
    /// what is undelivered at the end counts as missing.
    #[arg(long, default_value_t = 30.0)]
    catch_up_seconds: f64,
    #[command(flatten)]
    common: Common,
}

/// How the read-only followers read the prefix (`--remote-log`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum RemoteLog {
    /// A read-only open each.
    Each,
    /// One source log keeping the followed regions.
    Shared,
    /// One source log opened for every region.
    SharedAll,
}

impl RemoteLog {
    fn label(self) -> &'static str {
        match self {
            RemoteLog::Each => "each",
            RemoteLog::Shared => "shared",
            RemoteLog::SharedAll => "shared-all",
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A handle counting its requests (GETs, HEADs, LISTs, bytes read), no GET log kept.
type Counted = Arc<CountingStore>;

/// The read counts of some handles, summed, at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    gets: u64,
    heads: u64,
    lists: u64,
    get_bytes: u64,
}

impl Reads {
    fn of(handles: &[Counted]) -> Reads {
        let mut sum = Reads::default();
        for h in handles {
            let c = h.counts();
            sum.gets += c.gets.load(Ordering::Relaxed);
            sum.heads += c.heads.load(Ordering::Relaxed);
            sum.lists += c.lists.load(Ordering::Relaxed);
            sum.get_bytes += c.get_bytes.load(Ordering::Relaxed);
        }
        sum
    }

    fn since(self, earlier: Reads) -> Reads {
        Reads {
            gets: self.gets.saturating_sub(earlier.gets),
            heads: self.heads.saturating_sub(earlier.heads),
            lists: self.lists.saturating_sub(earlier.lists),
            get_bytes: self.get_bytes.saturating_sub(earlier.get_bytes),
        }
    }

    /// `gets_per_s`, `heads_per_s`, `lists_per_s` (and `get_bytes_per_s`) over
    /// `seconds`, under `prefix`-ed names.
    fn fields(&self, seconds: f64, prefix: &str, bytes: bool, line: &mut serde_json::Value) {
        let per_s = |n: u64| round2(n as f64 / seconds.max(1e-9));
        line[format!("{prefix}gets_per_s")] = json!(per_s(self.gets));
        line[format!("{prefix}heads_per_s")] = json!(per_s(self.heads));
        line[format!("{prefix}lists_per_s")] = json!(per_s(self.lists));
        if bytes {
            line[format!("{prefix}get_bytes_per_s")] = json!(per_s(self.get_bytes));
        }
    }
}

/// What the appends of a follow run share: the instant the stamps count from, the
/// latency from each append's call to its acknowledgement, and every acknowledged id.
pub(super) struct Stamps {
    base: Instant,
    calls: Arc<Recorder>,
    acked: Mutex<HashMap<u64, Vec<u64>>>,
}

impl Stamps {
    /// `entries`, each with its first [`STAMP_BYTES`] replaced by the stamp of now and
    /// `k`; and now, the instant of the call.
    pub(super) fn stamp(&self, entries: Vec<Bytes>, k: u64) -> (Vec<Bytes>, Instant) {
        let called = Instant::now();
        let nanos = called.duration_since(self.base).as_nanos() as u64;
        let entries = entries
            .into_iter()
            .map(|e| {
                let mut b = BytesMut::with_capacity(e.len().max(STAMP_BYTES));
                b.put_u64_le(nanos);
                b.put_u64_le(k);
                b.extend_from_slice(e.get(STAMP_BYTES..).unwrap_or_default());
                b.freeze()
            })
            .collect();
        (entries, called)
    }

    /// An append called at `called` was acknowledged with `receipt`.
    pub(super) fn acknowledged(&self, receipt: &AppendReceipt, k: u64, called: Instant) {
        self.calls.record(k, called);
        let mut acked = lock(&self.acked);
        for part in &receipt.parts {
            acked.entry(part.region).or_default().extend(part.ids());
        }
    }
}

/// What one follower was handed.
struct Delivered {
    ids: BTreeSet<u64>,
    /// The highest id handed over so far.
    last: Option<u64>,
    duplicated: u64,
    out_of_order: u64,
    /// Entries of another region, or too short to hold a stamp.
    foreign: u64,
    undecodable: u64,
    errors: u64,
    first_error: Option<String>,
    /// Call to delivery, µs, of each entry's first delivery.
    e2e: Histogram<u64>,
}

impl Delivered {
    fn deliver(&mut self, region: u64, e: &Entry, base: Instant, window_max: &AtomicU64) {
        let now = base.elapsed().as_nanos() as u64;
        if e.region != region {
            self.foreign += 1;
        }
        let first = self.ids.insert(e.id);
        if !first {
            self.duplicated += 1;
        } else if self.last.is_some_and(|last| e.id < last) {
            self.out_of_order += 1;
        }
        self.last = Some(self.last.map_or(e.id, |last| last.max(e.id)));
        let sent = e
            .payload
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes);
        match sent {
            Some(sent) if first => {
                let us = (now.saturating_sub(sent) / 1000).max(1);
                let _ = self.e2e.record(us);
                window_max.fetch_max(us, Ordering::Relaxed);
            }
            Some(_) => {}
            None => self.undecodable += 1,
        }
    }
}

struct Follower {
    remote: bool,
    region: u64,
    delivered: Arc<Mutex<Delivered>>,
}

impl Follower {
    /// Whether every id in `acked` was delivered.
    fn caught_up(&self, acked: &HashMap<u64, Vec<u64>>) -> bool {
        let d = lock(&self.delivered);
        acked
            .get(&self.region)
            .is_none_or(|ids| ids.iter().all(|id| d.ids.contains(id)))
    }
}

/// Hands every entry of `entries` to `delivered`, until the stream ends (or the task is
/// aborted).
async fn follow_entries(
    mut entries: BoxStream<'static, Result<Entry, Error>>,
    region: u64,
    base: Instant,
    delivered: Arc<Mutex<Delivered>>,
    window_max: Arc<AtomicU64>,
) {
    while let Some(item) = entries.next().await {
        let mut d = lock(&delivered);
        match item {
            Ok(e) => d.deliver(region, &e, base, &window_max),
            Err(e) => {
                d.errors += 1;
                d.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Regions `i * regions / k` for `i` in `0..k`: `k` distinct regions, spread.
fn spread(k: u64, regions: u64) -> Vec<u64> {
    (0..k).map(|i| i * regions / k.max(1)).collect()
}

/// What a remote follower has to read of the run's objects at the least: every
/// object's footer and trailer (to find its region's segment), and its region's
/// segments.
#[derive(Debug, Default)]
struct Stored {
    footer_bytes: u64,
    segment_bytes: HashMap<u64, u64>,
}

impl Stored {
    /// Reads every object under `prefix` (on the base store, uncounted).
    async fn of(
        store: &Arc<dyn ObjectStore>,
        prefix: &str,
    ) -> Result<Stored, Box<dyn std::error::Error>> {
        let mut stored = Stored::default();
        let prefix = object_store::path::Path::from(prefix);
        let mut listing = store.list(Some(&prefix));
        while let Some(meta) = listing.next().await {
            let bytes = store.get(&meta?.location).await?.bytes().await?;
            let Ok(summary) = object_store_wal::format::decode_object_summary(&bytes) else {
                continue;
            };
            let records = &summary.footer.records;
            stored.footer_bytes += (object_store_wal::format::TRAILER_LEN
                + object_store_wal::format::Footer::encoded_len(records.len()))
                as u64;
            for r in records {
                *stored.segment_bytes.entry(r.region).or_default() += r.length;
            }
        }
        Ok(stored)
    }
}

/// The fields of one kind of follower, under `prefix`.
struct Kind<'a> {
    prefix: &'a str,
    followers: Vec<&'a Follower>,
    load: Reads,
    idle: Reads,
}

impl Kind<'_> {
    fn fields(
        &self,
        acked: &HashMap<u64, Vec<u64>>,
        stored: &Stored,
        (load_s, idle_s, entry_bytes): (f64, f64, usize),
        line: &mut serde_json::Value,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let p = self.prefix;
        line[format!("{p}followers")] = json!(self.followers.len());
        if self.followers.is_empty() {
            return Ok(());
        }
        line[format!("{p}regions")] =
            json!(self.followers.iter().map(|f| f.region).collect::<Vec<_>>());
        let mut e2e = new_histogram()?;
        let (mut delivered, mut missing, mut unacknowledged) = (0u64, 0u64, 0u64);
        let (mut duplicated, mut out_of_order, mut foreign) = (0u64, 0u64, 0u64);
        let (mut undecodable, mut errors, mut first_error) = (0u64, 0u64, None);
        let mut followed_entries = 0u64;
        for f in &self.followers {
            let d = lock(&f.delivered);
            let region_acked = acked.get(&f.region).map_or(&[][..], |v| &v[..]);
            followed_entries += region_acked.len() as u64;
            e2e.add(&d.e2e)?;
            delivered += d.ids.len() as u64;
            missing += region_acked.iter().filter(|id| !d.ids.contains(id)).count() as u64;
            let acked_set: BTreeSet<u64> = region_acked.iter().copied().collect();
            unacknowledged += d.ids.difference(&acked_set).count() as u64;
            duplicated += d.duplicated;
            out_of_order += d.out_of_order;
            foreign += d.foreign;
            undecodable += d.undecodable;
            errors += d.errors;
            if first_error.is_none() {
                first_error.clone_from(&d.first_error);
            }
        }
        line[format!("{p}delivered")] = json!(delivered);
        line[format!("{p}e2e_p50_ms")] = json!(ms(&e2e, 0.5));
        line[format!("{p}e2e_p99_ms")] = json!(ms(&e2e, 0.99));
        line[format!("{p}e2e_max_ms")] = json!(round2(e2e.max() as f64 / 1000.0));
        line[format!("{p}missing")] = json!(missing);
        line[format!("{p}duplicated")] = json!(duplicated);
        line[format!("{p}out_of_order")] = json!(out_of_order);
        line[format!("{p}foreign")] = json!(foreign);
        line[format!("{p}undecodable")] = json!(undecodable);
        line[format!("{p}unacknowledged_delivered")] = json!(unacknowledged);
        line[format!("{p}errors")] = json!(errors);
        if let Some(e) = first_error {
            line[format!("{p}first_error")] = json!(e);
        }
        self.load.fields(load_s, p, true, line);
        let followed = followed_entries as f64 * entry_bytes as f64 / load_s.max(1e-9);
        line[format!("{p}followed_bytes_per_s")] = json!(round2(followed));
        line[format!("{p}read_amplification")] = json!(if followed > 0.0 {
            round2(self.load.get_bytes as f64 / load_s.max(1e-9) / followed)
        } else {
            0.0
        });
        // The bound on a remote follower's reads: twice its region's stored
        // bytes plus every object's footer (and trailer).
        let bound = self
            .followers
            .iter()
            .map(|f| {
                stored.footer_bytes + 2 * stored.segment_bytes.get(&f.region).copied().unwrap_or(0)
            })
            .sum::<u64>() as f64;
        line[format!("{p}footer_bytes_per_s")] =
            json!(round2(stored.footer_bytes as f64 / load_s.max(1e-9)));
        line[format!("{p}get_bytes_over_bound")] = json!(if bound > 0.0 {
            round2(self.load.get_bytes as f64 / bound)
        } else {
            0.0
        });
        self.idle.fields(idle_s, &format!("{p}idle_"), false, line);
        if missing + duplicated + out_of_order + foreign + undecodable > 0 {
            eprintln!(
                "bench follow: {p}followers: {missing} missing, {duplicated} duplicated, \
                 {out_of_order} out of order, {foreign} of another region, \
                 {undecodable} undecodable"
            );
        }
        Ok(())
    }
}

/// The follow workload; its JSON line.
pub(super) async fn follow(
    a: &FollowArgs,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let c = &a.common;
    let rate = c
        .rate
        .ok_or("follow runs an open loop: give --rate (appends per second)")?;
    if c.replicas > 1 {
        return Err("follow runs over one store (no --replicas)".into());
    }
    if c.entry_bytes < STAMP_BYTES {
        return Err(format!("follow needs --entry-bytes of at least {STAMP_BYTES}").into());
    }
    let regions = c.regions.max(1);
    if a.followers.max(a.remote_followers) > regions {
        return Err(format!("at most one follower of each kind per region ({regions})").into());
    }
    let Stores {
        wal: counted,
        counting,
        latent,
        base,
        replicas,
        throttle,
    } = stores(c)?;
    // Outermost on the WAL's handle: the local followers' reads.
    let wal_reads = CountingStore::counts_only(counted);
    // Under the remote followers' handles: the same latency wrapper, or the store.
    let under: Arc<dyn ObjectStore> = match &latent {
        Some(l) => l.clone(),
        None => base.clone(),
    };
    let s = Stores {
        wal: wal_reads.clone(),
        counting,
        latent,
        base,
        replicas,
        throttle,
    };
    let cfg = config(c);
    let wal = s.spawn(&cfg).await?;
    wal.ready().await?;
    let stamps = Arc::new(Stamps {
        base: Instant::now(),
        calls: Recorder::new()?,
        acked: Mutex::new(HashMap::new()),
    });
    let stamp_base = stamps.base;
    let mut tasks = JoinSet::new();
    let window_max = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let mut followers = Vec::new();
    let mut remote_handles: Vec<Counted> = Vec::new();
    let poll = Duration::from_millis(a.poll_interval_ms);
    // The remote followers' one source log, unless each opens its own.
    let shared = match a.remote_log {
        _ if a.remote_followers == 0 => None,
        RemoteLog::Each => None,
        how => {
            let handle = CountingStore::counts_only(under.clone());
            remote_handles.push(handle.clone());
            let stores = WalStores::one(handle as Arc<dyn ObjectStore>);
            let kept = if how == RemoteLog::Shared {
                spread(a.remote_followers, regions)
            } else {
                (0..regions).collect()
            };
            Some(SourceLog::open_stores_regions(stores, cfg.clone(), poll, kept).await?)
        }
    };
    for (remote, k) in [(false, a.followers), (true, a.remote_followers)] {
        for region in spread(k, regions) {
            let entries = if let Some(log) = shared.as_ref().filter(|_| remote) {
                log.follow(region, 0)
            } else if remote {
                let handle = CountingStore::counts_only(under.clone());
                remote_handles.push(handle.clone());
                let ro = ObjectStoreLogStore::open_read_only(
                    WalStores::one(handle as Arc<dyn ObjectStore>),
                    cfg.clone(),
                )
                .await?;
                ro.follow(region, 0, poll)
            } else {
                wal.follow_stream(region, 0).await?.boxed()
            };
            let delivered = Arc::new(Mutex::new(Delivered {
                ids: BTreeSet::new(),
                last: None,
                duplicated: 0,
                out_of_order: 0,
                foreign: 0,
                undecodable: 0,
                errors: 0,
                first_error: None,
                e2e: new_histogram()?,
            }));
            let max = window_max[usize::from(remote)].clone();
            tasks.spawn(follow_entries(
                entries,
                region,
                stamp_base,
                delivered.clone(),
                max,
            ));
            followers.push(Follower {
                remote,
                region,
                delivered,
            });
        }
    }
    let local_handles = vec![wal_reads];
    s.counting.reset();
    let local_before = Reads::of(&local_handles);
    let remote_before = Reads::of(&remote_handles);
    let payloads = Arc::new(Payloads::new(
        &c.payload,
        c.payload_file.as_deref(),
        c.entry_bytes,
        c.seed,
    )?);
    let recorder = Recorder::new()?;
    let started = Instant::now();
    // Each second: progress on stderr, and each kind's largest call-to-delivery latency
    // of the entries delivered in it (a follower falling behind shows as a rising row).
    let by_second = Arc::new(Mutex::new([Vec::new(), Vec::new()]));
    let progress = {
        let (wal, recorder, by_second) = (wal.clone(), recorder.clone(), by_second.clone());
        let window_max = window_max.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let maxes = window_max
                    .each_ref()
                    .map(|m| round2(m.swap(0, Ordering::Relaxed) as f64 / 1000.0));
                {
                    let mut rows = lock(&by_second);
                    for (row, max) in rows.iter_mut().zip(maxes) {
                        row.push(max);
                    }
                }
                if let Ok(st) = wal.stats().await {
                    eprintln!(
                        "bench follow: {:.0}s appends {} objects {} pending {} e2e max ms local {} remote {} rss_mib {:.1}",
                        started.elapsed().as_secs_f64(),
                        st.appends,
                        st.objects,
                        recorder.pending(),
                        maxes[0],
                        maxes[1],
                        status_mib("VmRSS:")
                    );
                }
            }
        })
    };
    let window = open_loop(c, rate, &wal, &recorder, &payloads, started, Some(&stamps)).await;
    let answered = Instant::now();
    // Until every follower has every acknowledged entry of its region (or the time is up).
    let acked = lock(&stamps.acked).clone();
    let catch_up_until = answered + secs(a.catch_up_seconds);
    let caught_up = loop {
        if followers.iter().all(|f| f.caught_up(&acked)) {
            break Some(answered.elapsed());
        }
        if Instant::now() >= catch_up_until {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let load_end = Instant::now();
    progress.abort();
    let rss_mib = status_mib("VmRSS:");
    // What the shared source log keeps: the followed regions' segments, or every one's.
    let kept = shared.as_ref().map(|log| {
        let chain = log.chain_summary();
        (chain.regions, chain.segments)
    });
    let load_s = load_end.duration_since(started).as_secs_f64();
    let local_load = Reads::of(&local_handles).since(local_before);
    let remote_load = Reads::of(&remote_handles).since(remote_before);
    let counts = s.counting.counts();
    let stats = wal.stats().await?;
    // Idle: no appends, the followers still following.
    let idle_s = c.idle_seconds.unwrap_or(60.0);
    let local_before = Reads::of(&local_handles);
    let remote_before = Reads::of(&remote_handles);
    let idle_started = Instant::now();
    tokio::time::sleep(secs(idle_s)).await;
    let idle_elapsed = idle_started.elapsed().as_secs_f64();
    let local_idle = Reads::of(&local_handles).since(local_before);
    let remote_idle = Reads::of(&remote_handles).since(remote_before);
    stop(&wal).await?;
    tasks.shutdown().await;
    let stored = Stored::of(&s.base, &cfg.prefix).await?;

    let ok = recorder.ok.load(Ordering::Relaxed);
    let issued = recorder.issued.load(Ordering::Relaxed);
    let scheduled = recorder.merged()?;
    let calls = stamps.calls.merged()?;
    let put_bytes = counts.put_bytes.load(Ordering::Relaxed);
    let puts = counts.puts.load(Ordering::Relaxed);
    let mut line = json!({
        "workload": "follow",
        "store": c.store,
        "put_latency_ms": c.put_latency_ms,
        "get_latency_ms": c.get_latency_ms,
        "regions": regions,
        "entry_bytes": c.entry_bytes,
        "min_object_interval_ms": cfg.min_object_interval.as_millis() as u64,
        "hedge": hedge_label(&cfg.hedge_after),
        "poll_interval_ms": a.poll_interval_ms,
        "seed": c.seed,
        "offered_rate": rate,
        "issued": issued,
        "issued_rate": round2(issued as f64 / window.max(1e-9)),
        "seconds": round2(load_s),
        "appends": ok,
        "failed": recorder.failed.load(Ordering::Relaxed),
        "unfinished": recorder.unfinished.load(Ordering::Relaxed),
        "rate": round2(ok as f64 / load_s.max(1e-9)),
        "append_p50_ms": ms(&calls, 0.5),
        "append_p99_ms": ms(&calls, 0.99),
        "append_max_ms": round2(calls.max() as f64 / 1000.0),
        "append_from_schedule_p50_ms": ms(&scheduled, 0.5),
        "append_from_schedule_p99_ms": ms(&scheduled, 0.99),
        "objects": stats.objects,
        "puts_per_s": round2(puts as f64 / load_s.max(1e-9)),
        "stored_bytes_per_s": round2(put_bytes as f64 / load_s.max(1e-9)),
        "catch_up_ms": caught_up.map(|d| round2(d.as_secs_f64() * 1000.0)),
        "idle_seconds": round2(idle_elapsed),
        "rss_mib": round2(rss_mib),
        "remote_log": a.remote_log.label(),
        "remote_kept_regions": kept.map(|(regions, _)| regions),
        "remote_kept_segments": kept.map(|(_, segments)| segments),
    });
    let kinds = [("local_", false), ("remote_", true)].map(|(prefix, remote)| Kind {
        prefix,
        followers: followers.iter().filter(|f| f.remote == remote).collect(),
        load: if remote { remote_load } else { local_load },
        idle: if remote { remote_idle } else { local_idle },
    });
    for kind in &kinds {
        kind.fields(
            &acked,
            &stored,
            (load_s, idle_elapsed, c.entry_bytes),
            &mut line,
        )?;
    }
    let [local_rows, remote_rows] = lock(&by_second).clone();
    line["local_e2e_max_ms_by_second"] = json!(local_rows);
    line["remote_e2e_max_ms_by_second"] = json!(remote_rows);
    Ok(line)
}
