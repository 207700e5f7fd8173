//! The checker: after the run, a read-only pass over every prefix the regions'
//! histories name. Each region's pieces are read in order (ids after the piece's start
//! through its end, the open one to the chain's end), and the history read back is
//! compared with the frontends' acks file: `lost` (acknowledged, not in the history with
//! that id), `duplicated` (a payload twice), `out_of_order` (ids not increasing).
//!
//! The failover times come from two clocks of one host: the driver's record of when it
//! killed or paused a node, and the coordinator's record of when the node's last route
//! was written (detection included).

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use etcd_client::GetOptions;
use futures::StreamExt;
use hdrhistogram::Histogram;
use object_store::ObjectStoreExt;
use object_store_wal::{store_from_url, ObjectStoreLogStore};
use serde::Deserialize;

use crate::coordinator::{failover_records, takeovers};
use crate::keys::{ArchiveRecord, Keys, Piece};
use crate::{etcd_connect, wal_config, Common};

/// The checker's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// The frontends' acks file.
    #[arg(long)]
    pub acks: PathBuf,
    /// The load's summary (merged into the line).
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// The driver's events (kills, pauses), one JSON object a line.
    #[arg(long)]
    pub events: Option<PathBuf>,
}

/// One of the driver's chaos events.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct Event {
    /// `kill` (a node, kill -9), `pause` (a node, SIGSTOP), `coordinator_kill`.
    pub kind: String,
    /// The node's or coordinator's name.
    pub name: String,
    /// When (ms since the epoch).
    pub ms: u64,
}

/// What the checker found.
#[derive(Debug, Default)]
struct Verdict {
    entries: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    acked: u64,
    unreadable_pieces: u64,
}

fn parse_ack(line: &str) -> Option<(u64, u64, String)> {
    let mut parts = line.splitn(3, ' ');
    let region = parts.next()?.parse().ok()?;
    let id = parts.next()?.parse().ok()?;
    let payload = parts.next()?.to_string();
    Some((region, id, payload))
}

/// Checks the run and prints one JSON line; non-zero on any loss, duplicate, entry out
/// of order, zombie acknowledgement or failed append.
pub async fn main(args: Args) -> anyhow::Result<i32> {
    let (line, ok) = check(&args).await?;
    println!("{line}");
    Ok(if ok { 0 } else { 1 })
}

/// The JSON line and whether the run passed.
pub async fn check(args: &Args) -> anyhow::Result<(serde_json::Value, bool)> {
    let keys = Keys::new(&args.common.run_id);
    let mut client = etcd_connect(&args.common.etcd).await?;
    let store = store_from_url(&args.common.store)?;
    let resp = client
        .get(keys.histories(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut histories: Vec<(u64, Vec<Piece>)> = Vec::new();
    for kv in resp.kvs() {
        let region = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(&keys.histories()))
            .and_then(|r| r.parse::<u64>().ok());
        let pieces = serde_json::from_slice::<Vec<Piece>>(kv.value()).ok();
        if let (Some(region), Some(pieces)) = (region, pieces) {
            histories.push((region, pieces));
        }
    }
    // The histories' first pieces flushed into archive objects (with `--retire`).
    let resp = client
        .get(keys.archives(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut archives: HashMap<u64, ArchiveRecord> = HashMap::new();
    for kv in resp.kvs() {
        let region = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(&keys.archives()))
            .and_then(|r| r.parse::<u64>().ok());
        let record = serde_json::from_slice::<ArchiveRecord>(kv.value()).ok();
        if let (Some(region), Some(record)) = (region, record) {
            archives.insert(region, record);
        }
    }
    let mut acked: HashMap<u64, Vec<(u64, String)>> = HashMap::new();
    let mut verdict = Verdict::default();
    for line in std::fs::read_to_string(&args.acks)?.lines() {
        match parse_ack(line) {
            Some((region, id, payload)) => {
                verdict.acked += 1;
                acked.entry(region).or_default().push((id, payload));
            }
            None => anyhow::bail!("an acks line that does not parse: {line:?}"),
        }
    }
    // Each prefix read once, every region of it in one replay (each object fetched
    // once), from the lowest id any piece on it starts at; the pieces then take their
    // ids from it. All entries are held at once: the checker's memory is the run's size.
    let mut starts: HashMap<String, HashMap<u64, u64>> = HashMap::new();
    for (region, pieces) in &histories {
        let done = archives.get(region).map_or(0, |a| a.archived);
        for piece in pieces.iter().skip(done) {
            let from = piece.after.map_or(0, |a| a.saturating_add(1));
            let lowest = starts
                .entry(piece.prefix.clone())
                .or_default()
                .entry(*region)
                .or_insert(from);
            *lowest = (*lowest).min(from);
        }
    }
    let mut read: HashMap<String, HashMap<u64, Vec<(u64, Bytes)>>> = HashMap::new();
    for (prefix, from) in starts {
        let log = match ObjectStoreLogStore::open_read_only(
            store.clone(),
            wal_config(&prefix, &args.common),
        )
        .await
        {
            Ok(log) => log,
            Err(e) => {
                eprintln!("check: opening {prefix} read-only: {e}");
                continue;
            }
        };
        let mut by_region: HashMap<u64, Vec<(u64, Bytes)>> = HashMap::new();
        let mut entries = log.replay(from);
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            by_region
                .entry(entry.region)
                .or_default()
                .push((entry.id, entry.payload));
        }
        read.insert(prefix, by_region);
    }
    // The nodes' flush objects: entries the chains may no longer hold (obsoleted, then
    // reclaimed).
    let (mut flushed, flush_conflicts) =
        crate::flush::read_all(&store, &crate::flush::root(&args.common.run_id), 0).await?;
    if flush_conflicts > 0 {
        eprintln!("check: {flush_conflicts} ids with two payloads in the flush objects");
    }
    let flushed_entries: u64 = flushed.values().map(|e| e.len() as u64).sum();
    let mut migrations = 0u64;
    let mut archived_entries = 0u64;
    for (region, pieces) in &histories {
        let mut history: Vec<(u64, Bytes)> = Vec::new();
        migrations += pieces.iter().filter(|p| p.kind == "move").count() as u64;
        let archive = archives.get(region).cloned().unwrap_or_default();
        for object in &archive.objects {
            let path = object_store::path::Path::from(object.as_str());
            let bytes = store.get(&path).await?.bytes().await?;
            let entries: Vec<(u64, String)> = serde_json::from_slice(&bytes)?;
            archived_entries += entries.len() as u64;
            history.extend(entries.into_iter().map(|(id, p)| (id, Bytes::from(p))));
        }
        for piece in pieces.iter().skip(archive.archived) {
            let from = piece.after.map_or(0, |a| a.saturating_add(1));
            if piece.through.is_some_and(|t| from > t) {
                continue;
            }
            let Some(on_prefix) = read.get(&piece.prefix) else {
                verdict.unreadable_pieces += 1;
                continue;
            };
            let entries = on_prefix.get(region).map_or(&[][..], Vec::as_slice);
            history.extend(
                entries
                    .iter()
                    .filter(|(id, _)| *id >= from && piece.through.is_none_or(|t| *id <= t))
                    .cloned(),
            );
        }
        let mut previous: Option<u64> = None;
        for (id, _) in &history {
            if previous.is_some_and(|p| *id <= p) {
                verdict.out_of_order += 1;
                eprintln!("check: region {region}: id {id} after {previous:?}");
            }
            previous = Some(*id);
        }
        // The flushed entries join what the chains still hold: the same entry (by id)
        // must carry the same payload, and each lies in one of the history's pieces:
        // after its start, through its `through`, or, for a piece closed with none of
        // its entries on the chain (its release or fence found them all flushed, and
        // recorded `through` = `after`), through the next piece's start (the next
        // owner's ids start above every id the piece's owner handed out).
        let mut by_id: std::collections::BTreeMap<u64, Bytes> = history.into_iter().collect();
        for (id, payload) in flushed.remove(region).unwrap_or_default() {
            let in_piece = pieces.iter().enumerate().any(|(k, p)| {
                let start = p.after.unwrap_or(0);
                let end = match p.through {
                    Some(t) if t > start => Some(t),
                    _ => pieces.get(k + 1).map(|n| n.after.unwrap_or(0)),
                };
                p.after.is_none_or(|a| id > a) && end.is_none_or(|e| id <= e)
            });
            if !in_piece {
                verdict.out_of_order += 1;
                eprintln!("check: region {region}: flushed id {id} is in none of its pieces");
            }
            match by_id.get(&id) {
                Some(read) if read.as_ref() != payload.as_bytes() => {
                    verdict.lost += 1;
                    eprintln!(
                        "check: region {region}: id {id} is {read:?} on the chain, {payload:?} flushed"
                    );
                }
                Some(_) => {}
                None => {
                    by_id.insert(id, Bytes::from(payload));
                }
            }
        }
        let history: Vec<(u64, Bytes)> = by_id.into_iter().collect();
        verdict.entries += history.len() as u64;
        let mut seen: HashMap<Bytes, u64> = HashMap::new();
        for (_, payload) in &history {
            *seen.entry(payload.clone()).or_default() += 1;
        }
        let duplicated = seen.values().filter(|c| **c > 1).count() as u64;
        if duplicated > 0 {
            eprintln!(
                "check: region {region}: {duplicated} payloads more than once; pieces {pieces:?}"
            );
        }
        verdict.duplicated += duplicated;
        let ids: HashMap<Bytes, u64> = history.iter().map(|(i, p)| (p.clone(), *i)).collect();
        for (id, payload) in acked.remove(region).unwrap_or_default() {
            if ids.get(payload.as_bytes()) != Some(&id) {
                verdict.lost += 1;
                eprintln!(
                    "check: region {region}: {payload} acknowledged with id {id}, read back {:?}; pieces {pieces:?}",
                    ids.get(payload.as_bytes())
                );
            }
        }
    }
    for (region, entries) in flushed {
        eprintln!(
            "check: region {region} has no history and {} flushed entries",
            entries.len()
        );
        verdict.out_of_order += entries.len() as u64;
    }
    // Acknowledged in a region with no history at all.
    for (region, entries) in acked {
        eprintln!(
            "check: region {region} has no history and {} acks",
            entries.len()
        );
        verdict.lost += entries.len() as u64;
    }

    let events: Vec<Event> = match &args.events {
        Some(path) if path.exists() => std::fs::read_to_string(path)?
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        _ => Vec::new(),
    };
    let records = failover_records(&mut client, &keys).await?;
    let mut times = Histogram::<u64>::new_with_bounds(1, 3_600_000, 3)?;
    let mut detections = Histogram::<u64>::new_with_bounds(1, 3_600_000, 3)?;
    let mut failovers = 0u64;
    let mut unfinished = 0u64;
    for record in records.values() {
        let Some(done) = record.done_ms else {
            unfinished += 1;
            continue;
        };
        failovers += 1;
        let caused = events
            .iter()
            .find(|e| e.name == record.name && (e.kind == "kill" || e.kind == "pause"));
        if let Some(event) = caused {
            let _ = times.record(done.saturating_sub(event.ms).max(1));
            let _ = detections.record(record.detected_ms.saturating_sub(event.ms).max(1));
        }
    }
    let coordinator_takeovers = takeovers(&mut client, &keys).await?;
    let ms = |h: &Histogram<u64>, q: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(q)
        }
    };
    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    let mut line = serde_json::json!({
        "run_id": args.common.run_id,
        "regions": histories.len(),
        "acked": verdict.acked,
        "entries_read_back": verdict.entries,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "out_of_order": verdict.out_of_order,
        "unreadable_pieces": verdict.unreadable_pieces,
        "node_kills": count("kill"),
        "node_pauses": count("pause"),
        "coordinator_kills": count("coordinator_kill"),
        "failovers": failovers,
        "failovers_unfinished": unfinished,
        "failover_ms_p50": ms(&times, 0.5),
        "failover_ms_p99": ms(&times, 0.99),
        "failover_ms_max": ms(&times, 1.0),
        "detection_ms_p50": ms(&detections, 0.5),
        "detection_ms_max": ms(&detections, 1.0),
        "migrations": migrations,
        "archived_entries": archived_entries,
        "flushed_entries": flushed_entries,
        "flush_conflicts": flush_conflicts,
        "retired": records.values().filter(|r| r.state == "retired").count(),
        "coordinator_takeovers": coordinator_takeovers,
    });
    let mut failed = 0;
    let mut zombie_acks = 0;
    if let Some(path) = &args.summary {
        let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
        failed = summary["failed"].as_u64().unwrap_or(0);
        zombie_acks = summary["zombie_acks_after_fence"].as_u64().unwrap_or(0);
        if let (Some(out), Some(summary)) = (line.as_object_mut(), summary.as_object()) {
            for (k, v) in summary {
                if k != "acked" {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let ok = verdict.lost == 0
        && flush_conflicts == 0
        && verdict.duplicated == 0
        && verdict.out_of_order == 0
        && verdict.unreadable_pieces == 0
        && zombie_acks == 0
        && failed == 0
        && unfinished == 0;
    Ok((line, ok))
}

#[cfg(test)]
mod tests {
    use super::parse_ack;

    #[test]
    fn acks_lines_parse_and_bad_ones_do_not() {
        assert_eq!(parse_ack("7 42 7:3"), Some((7, 42, "7:3".to_string())));
        assert_eq!(parse_ack("7 x 7:3"), None);
        assert_eq!(parse_ack("7 42"), None);
        assert_eq!(parse_ack(""), None);
    }
}
