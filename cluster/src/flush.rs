//! A node's flush, as a database flushes its memtable: every `--flush-ms` the node
//! reads the entries of its regions that arrived since the last flush (its own chain's,
//! and for a region it took over, the pieces its acquire recorded in the earlier
//! owners' logs), writes them into one **flush object** on the bucket, and only once
//! that object is durable calls `obsolete` through the last id it holds. The floor then
//! rises, the reclaimer deletes what is below it after the grace, and the live chain,
//! which the fence, the catch-ups and the frontends' resolves read, stays as long as a
//! flush interval plus the grace, not as long as the node has lived.
//!
//! Flush objects live under `<run>/flushed/<node>/<ms>-<n>.json` (`ms` the node's
//! wall clock when it wrote it, `n` the flush's number): a JSON map from region to its
//! `(id, payload)` pairs. What reads a region's history reads them beside the chains:
//! the checker (every object), a frontend resolving an append on a fenced node (that
//! node's objects written since the append could have landed), and the node itself
//! resolving an append (the flushes of the last [`KEPT_FOR`], kept in memory).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use object_store_wal::Piece;
use object_store_wal_actors::WalHandle;

/// Flushes a region's pieces wait for their catch-ups at most, before its history is
/// read again.
const MAX_DEFERRED: u32 = 5;

/// How long a catch-up's entries wait for their region's acquire.
const CAUGHT_KEPT: Duration = Duration::from_secs(30);

/// Region histories a flush reads at once.
const HISTORIES_AT_ONCE: usize = 8;

/// What one catch-up read of a region.
#[derive(Debug, Clone)]
pub struct CaughtUp {
    /// The source's prefix.
    pub source: String,
    /// The first id asked for.
    pub from: u64,
    /// The last id (the catch-up ended there).
    pub through: u64,
    /// Its entries, by id.
    pub entries: Vec<(u64, String)>,
}

/// One flush object's content: region to its entries, in id order.
pub type Flushed = BTreeMap<u64, Vec<(u64, String)>>;

/// How long a node keeps its flushes in memory for its own resolves: longer than a
/// frontend waits for an append (`load::APPEND_WITHIN`, 120 s).
pub const KEPT_FOR: Duration = Duration::from_secs(150);

/// Where run `run_id`'s flush objects live.
pub fn root(run_id: &str) -> String {
    format!("{run_id}/flushed/")
}

/// Where node `node`'s flush objects live.
pub fn node_root(run_id: &str, node: &str) -> String {
    format!("{}{node}/", root(run_id))
}

/// The `ms` a flush object's name carries (`None`: not a flush object's name).
pub fn written_ms(path: &Path) -> Option<u64> {
    path.filename()?.split('-').next()?.parse().ok()
}

/// What the node flushes of one region it holds.
#[derive(Debug, Clone)]
struct Held {
    /// The next id to flush.
    from: u64,
    /// The pieces its acquire recorded in earlier owners' logs, not flushed yet:
    /// flushed from the catch-ups that read them, or else
    /// read with `read_history` (once; after the flush they are forgotten).
    pieces: Vec<Piece>,
    /// Flushes that found the pieces' catch-ups not answered yet.
    deferred: u32,
    /// Released at this last id (`Some(None)`: holding none): flushed once more, then
    /// forgotten.
    released: Option<Option<u64>>,
    /// Acquires of it so far: a region released and acquired again while a flush runs
    /// is not forgotten by that flush.
    stays: u64,
}

/// The node's flusher: which regions it holds, and its recent flushes.
pub struct Flusher {
    wal: WalHandle,
    store: Arc<dyn ObjectStore>,
    root: String,
    run_id: String,
    held: Mutex<HashMap<u64, Held>>,
    /// What catch-ups read, by region, with when, until a flush takes it (or
    /// [`CAUGHT_KEPT`] passed: a catch-up whose acquire never came).
    caught: Mutex<HashMap<u64, Vec<(Instant, CaughtUp)>>>,
    recent: Mutex<VecDeque<(Instant, Arc<Flushed>)>>,
    count: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Flusher {
    /// The flusher of node `node` of run `run_id`, writing on `wal`.
    pub fn new(wal: WalHandle, store: Arc<dyn ObjectStore>, run_id: &str, node: &str) -> Self {
        Flusher {
            wal,
            store,
            root: node_root(run_id, node),
            run_id: run_id.to_string(),
            held: Mutex::default(),
            caught: Mutex::default(),
            recent: Mutex::default(),
            count: AtomicU64::new(0),
        }
    }

    /// The node's WAL.
    pub fn wal(&self) -> &WalHandle {
        &self.wal
    }

    /// `region` acquired above `above`, with `pieces` recorded.
    pub fn acquired(&self, region: u64, above: u64, pieces: Vec<Piece>) {
        let from = above.saturating_add(1);
        let mut held = lock(&self.held);
        match held.get_mut(&region) {
            // Back before its release was flushed: the earlier stay's entries are
            // flushed with this one's (its lower `from` kept), not obsoleted unread.
            Some(h) => {
                h.from = h.from.min(from);
                h.pieces.extend(pieces);
                h.deferred = 0;
                h.released = None;
                h.stays = h.stays.saturating_add(1);
            }
            None => {
                held.insert(
                    region,
                    Held {
                        from,
                        pieces,
                        deferred: 0,
                        released: None,
                        stays: 0,
                    },
                );
            }
        }
    }

    /// A catch-up of `region` from `source` read `entries` (ids `from` through
    /// `through`): the next flush writes them if they are pieces the region's acquire
    /// recorded (a move's released piece is flushed by its source).
    pub fn caught_up(&self, region: u64, caught: CaughtUp) {
        lock(&self.caught)
            .entry(region)
            .or_default()
            .push((Instant::now(), caught));
    }

    /// What node `source`'s flush objects of the last [`KEPT_FOR`] hold of `region`,
    /// ids `from` through `through`, if they hold `through`: a released piece whose
    /// objects the source reclaimed once it flushed them (a move's catch-up that came
    /// late) is read there.
    pub async fn flushed_by(
        &self,
        source: &str,
        region: u64,
        from: u64,
        through: u64,
    ) -> anyhow::Result<Option<Vec<(u64, String)>>> {
        let name = source.rsplit('/').next().unwrap_or(source);
        let since = crate::now_ms().saturating_sub(KEPT_FOR.as_millis() as u64);
        let (mut all, conflicts) =
            read_all(&self.store, &node_root(&self.run_id, name), since).await?;
        if conflicts > 0 {
            anyhow::bail!("{source}'s flush objects give {conflicts} ids two payloads");
        }
        let entries = all.remove(&region).unwrap_or_default();
        if !entries.contains_key(&through) {
            return Ok(None);
        }
        Ok(Some(
            entries
                .range(from..=through)
                .map(|(id, p)| (*id, p.clone()))
                .collect(),
        ))
    }

    /// `region` released at `last_id`.
    pub fn released(&self, region: u64, last_id: Option<u64>) {
        if let Some(held) = lock(&self.held).get_mut(&region) {
            held.released = Some(last_id);
        }
    }

    /// One flush: the regions' new entries into a flush object, then `obsolete` through
    /// them. Nothing is obsoleted unless the object is durable.
    pub async fn flush(&self) -> anyhow::Result<u64> {
        let held: Vec<(u64, Held)> = lock(&self.held)
            .iter()
            .map(|(r, h)| (*r, h.clone()))
            .collect();
        if held.is_empty() {
            return Ok(0);
        }
        let mut flushed: Flushed = BTreeMap::new();
        // Regions with pieces one by one (their pieces are read from other logs), the
        // others in one replay (each object fetched once).
        let mut plain = Vec::new();
        let mut skipped = Vec::new();
        let mut deferred = Vec::new();
        let mut histories = Vec::new();
        let mut caught = std::mem::take(&mut *lock(&self.caught));
        for (region, h) in &held {
            if h.pieces.is_empty() {
                plain.push((*region, h.from));
                continue;
            }
            // The pieces as the catch-ups read them (each piece within one catch-up of
            // its prefix), then the region's own entries; else, once the catch-ups
            // are late, its history read again. A region whose pieces cannot be read
            // now is flushed at the next flush (its entries stay on the chains).
            let reads: Vec<CaughtUp> = caught
                .remove(region)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, c)| c)
                .collect();
            let covered = h.pieces.iter().all(|p| {
                reads
                    .iter()
                    .any(|c| c.source == p.prefix && c.from <= p.first_id && c.through >= p.last_id)
            });
            if covered {
                let entries = flushed.entry(*region).or_default();
                for c in reads {
                    entries.extend(c.entries);
                }
                entries.sort_by_key(|(id, _)| *id);
                entries.dedup_by_key(|(id, _)| *id);
                plain.push((*region, h.from));
            } else if h.deferred < MAX_DEFERRED {
                let now = Instant::now();
                caught.insert(*region, reads.into_iter().map(|c| (now, c)).collect());
                deferred.push(*region);
                skipped.push(*region);
            } else {
                histories.push(*region);
            }
        }
        let mut reads = futures::stream::iter(
            histories
                .into_iter()
                .map(|region| async move { (region, self.history(region, 0).await) }),
        )
        .buffer_unordered(HISTORIES_AT_ONCE);
        while let Some((region, read)) = reads.next().await {
            match read {
                Ok(entries) if !entries.is_empty() => {
                    flushed.insert(region, entries);
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("flush: region {region}'s history: {e}");
                    skipped.push(region);
                }
            }
        }
        drop(reads);
        // Catch-ups of regions with no pieces to flush are dropped (a move's: its
        // source flushes them); those of deferred regions wait for the next flush, and
        // those of regions not acquired yet (a catch-up answers before its acquire) for
        // a while.
        caught.retain(|region, reads| {
            reads.retain(|(at, _)| at.elapsed() < CAUGHT_KEPT);
            deferred.contains(region)
                || (!held.iter().any(|(r, _)| r == region) && !reads.is_empty())
        });
        if !caught.is_empty() {
            let mut now = lock(&self.caught);
            for (region, reads) in caught {
                now.entry(region).or_default().extend(reads);
            }
        }
        if !plain.is_empty() {
            let mut entries = self.wal.replay_stream(plain).await?;
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                flushed
                    .entry(entry.region)
                    .or_default()
                    .push((entry.id, payload(&entry.payload)));
            }
        }
        // A region's entries in id order, once each (its pieces' and its own).
        for entries in flushed.values_mut() {
            entries.sort_by_key(|(id, _)| *id);
            entries.dedup_by_key(|(id, _)| *id);
        }
        let count: u64 = flushed.values().map(|e| e.len() as u64).sum();
        if count > 0 {
            let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
            let path = Path::from(format!("{}{:013}-{n:06}.json", self.root, crate::now_ms()));
            self.store
                .put(&path, serde_json::to_vec(&flushed)?.into())
                .await?;
        }
        // Durable: kept for the node's resolves first (a resolve that finds an entry
        // hidden by the obsolete finds it here), then obsolete through what it holds,
        // and through a release's last id.
        let flushed = Arc::new(flushed);
        {
            let mut recent = lock(&self.recent);
            recent.push_back((Instant::now(), flushed.clone()));
            while recent
                .front()
                .is_some_and(|(at, _)| at.elapsed() > KEPT_FOR)
            {
                recent.pop_front();
            }
        }
        for (region, h) in held.iter().filter(|(r, _)| !skipped.contains(r)) {
            let last = flushed
                .get(region)
                .and_then(|e| e.last().map(|(id, _)| *id));
            // Through a release's last id, and through the pieces flushed now (their
            // records go even when they held nothing).
            let pieces = h.pieces.iter().map(|p| p.last_id).max();
            let through = last.max(h.released.flatten()).max(pieces);
            if let Some(through) = through {
                if let Err(e) = self.wal.obsolete(*region, through).await {
                    // Asked again at the next flush (nothing here moves on).
                    eprintln!("flush: obsolete of region {region} through {through}: {e}");
                    continue;
                }
            }
            let mut all = lock(&self.held);
            match (h.released, all.get_mut(region)) {
                // Released when this flush began, and not acquired since: forgotten.
                (Some(_), Some(now)) if now.released.is_some() && now.stays == h.stays => {
                    all.remove(region);
                }
                (_, Some(now)) => {
                    if let Some(through) = through {
                        now.from = now.from.max(through.saturating_add(1));
                    }
                    if now.pieces == h.pieces {
                        now.pieces.clear();
                    }
                }
                (_, None) => {}
            }
        }
        let mut all = lock(&self.held);
        for region in &deferred {
            if let Some(h) = all.get_mut(region) {
                h.deferred = h.deferred.saturating_add(1);
            }
        }
        Ok(count)
    }

    /// `region`'s history from `from`: its pieces in earlier owners' logs, then this
    /// log's own entries.
    async fn history(&self, region: u64, from: u64) -> anyhow::Result<Vec<(u64, String)>> {
        let mut entries = self
            .wal
            .read_history(region, from, Duration::from_secs(30))
            .await?;
        let mut read = Vec::new();
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            read.push((entry.id, payload(&entry.payload)));
        }
        Ok(read)
    }

    /// The id entry `want` of `region` has in a flush of the last [`KEPT_FOR`], from id
    /// `from`.
    pub fn find(&self, region: u64, from: u64, want: &[u8]) -> Option<u64> {
        let recent: Vec<Arc<Flushed>> = lock(&self.recent).iter().map(|(_, f)| f.clone()).collect();
        recent.iter().find_map(|f| {
            f.get(&region)?
                .iter()
                .find(|(id, p)| *id >= from && p.as_bytes() == want)
                .map(|(id, _)| *id)
        })
    }
}

fn payload(bytes: &Bytes) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Reads the flush objects under `root` whose name says they were written at or after
/// `since_ms`, merged: region to its entries by id, and how many ids two objects give
/// different payloads (0 unless something wrote a wrong flush).
pub async fn read_all(
    store: &Arc<dyn ObjectStore>,
    root: &str,
    since_ms: u64,
) -> anyhow::Result<(HashMap<u64, BTreeMap<u64, String>>, u64)> {
    // Names start with the time written, zero-padded: the listing starts at `since_ms`
    // rather than at the node's first flush.
    let prefix = Path::from(root);
    let offset = Path::from(format!("{root}{since_ms:013}"));
    let mut listed = store.list_with_offset(Some(&prefix), &offset);
    let mut paths = Vec::new();
    while let Some(meta) = listed.next().await {
        let meta = meta?;
        if written_ms(&meta.location).is_some_and(|ms| ms >= since_ms) {
            paths.push(meta.location);
        }
    }
    let mut reads = futures::stream::iter(paths.into_iter().map(|path| {
        let store = store.clone();
        async move {
            let bytes = store.get(&path).await?.bytes().await?;
            let flushed: Flushed = serde_json::from_slice(&bytes)?;
            Ok::<_, anyhow::Error>(flushed)
        }
    }))
    .buffer_unordered(16);
    let mut merged: HashMap<u64, BTreeMap<u64, String>> = HashMap::new();
    let mut conflicts = 0u64;
    while let Some(flushed) = reads.next().await {
        for (region, entries) in flushed? {
            let into = merged.entry(region).or_default();
            for (id, payload) in entries {
                match into.get(&id) {
                    Some(known) if *known != payload => conflicts += 1,
                    Some(_) => {}
                    None => {
                        into.insert(id, payload);
                    }
                }
            }
        }
    }
    Ok((merged, conflicts))
}
