//! One verified fetch: a span of an object's segments read with one ranged read of
//! exactly their bytes, each segment verified (CRC) before it is decoded and read once
//! more if verification fails; the segment cache answers first and shares fetches under
//! way. Damage stays local (FORMAT.md, "What a reader verifies"): a segment that fails
//! its checks twice is reported ([`WalIo::report_damaged_segment`]) and fails only its own
//! region, as an [`Error::CorruptSegment`] naming the key and region. Under
//! [`CorruptSegmentPolicy::Fail`] that region's read ends there; under `Skip` the error
//! is yielded as the report of the hole and the region's read goes on after it
//! ([`skips`]), alike for a read, a follow and each region of a replay.

use std::sync::{Arc, RwLock};

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use tracing::{debug, warn};

use crate::config::{CorruptSegmentPolicy, RecoveryMode};
use crate::error::{Error, Result};
use crate::format::control::CONTROL_REGION;
use crate::format::{self};
use crate::internal::chain::catalog::{Catalog, SegmentLocation};
use crate::internal::chain::holdings::{Holdings, Piece};
use crate::internal::open::{GivenUpHoldings, Recovered};
use crate::internal::store::cache::{Payloads, SegmentId};
use crate::internal::store::objects::{read_again_once, WalIo};

/// One replayed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its region.
    pub region: u64,
    /// The id it was acknowledged with.
    pub id: u64,
    /// Its payload.
    pub payload: Bytes,
}

/// Whether a read, follow or replay under `policy` goes on past `error`: only past a
/// damaged segment under `Skip`. Any other error (a failed GET) ends it, since skipping
/// would lose entries that are intact at rest. The one place the policy is applied.
pub(crate) fn skips(policy: CorruptSegmentPolicy, error: &Error) -> bool {
    policy == CorruptSegmentPolicy::Skip && matches!(error, Error::CorruptSegment { .. })
}

/// The segments of `region` holding ids `>= from`, looked up one by one in the catalog
/// as the stream is polled, each with what fetching it gave, in order, at most
/// `read_ahead` ahead of the consumer. (A segment not found is the follow's to judge:
/// [`follow_region`] looks again over an up-to-date catalog.)
pub(crate) fn region_segments(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    region: u64,
    from: u64,
    read_ahead: usize,
) -> BoxStream<'static, (SegmentLocation, Result<Vec<Entry>>)> {
    let locations = stream::unfold(from, move |next| {
        let catalog = catalog.clone();
        async move {
            let catalog = catalog.read().unwrap_or_else(|p| p.into_inner());
            let location = catalog.segments_from(region, next).first().copied()?;
            let object_len = catalog.object_len(location.sequence);
            Some(((location, object_len), location.record.last_entry_id + 1))
        }
    });
    locations
        .map(move |(location, object_len)| {
            let io = io.clone();
            async move { (location, fetch_segment(&io, &location, object_len).await) }
        })
        .buffered(read_ahead.max(1))
        .boxed()
}

/// Whether `error`, met reading the object at `sequence`, says the reclaimer deleted it
/// after `catalog` dropped it below a floor (its entries obsolete): a read passes over
/// such an object, with a warning. An object not found that the catalog still holds is
/// an error.
pub(crate) fn reclaimed(catalog: &RwLock<Catalog>, sequence: u64, error: &Error) -> bool {
    let reclaimed = error.is_not_found()
        && catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .object(sequence)
            .is_none();
    if reclaimed {
        warn!(sequence, "an object was reclaimed below the floor before it was read; the read goes on above the floor");
    }
    reclaimed
}

/// Fetches one segment with a ranged read of exactly its bytes and decodes it, verified
/// (`fetch_verified`), unless the segment cache holds it or another read is fetching
/// it (then its result is this one's: one GET however many read the segment at once);
/// what it fetched and verified goes into the cache. `object_len`, the length of the
/// object holding it if known, lets a view that keeps whole objects read it whole
/// ([`WalIo::read_span_verified`]).
pub async fn fetch_segment(
    io: &WalIo,
    location: &SegmentLocation,
    object_len: Option<u64>,
) -> Result<Vec<Entry>> {
    let record = &location.record;
    let id = SegmentId {
        sequence: location.sequence,
        epoch: location.epoch,
        region: record.region,
    };
    let fetch = || async {
        match fetch_verified(io, std::slice::from_ref(location), object_len).await {
            Ok(fetched) => match fetched.into_iter().next() {
                Some(payloads) => payloads.map(Payloads::from),
                None => Ok(Payloads::from(Vec::new())),
            },
            Err(e) => Err(e),
        }
    };
    let payloads = io.segment_cache().get_or_fetch(id, fetch).await?;
    Ok(entries_of(
        record,
        payloads.iter().cloned(),
        record.first_entry_id,
    ))
}

/// The one verified segment fetch every read path uses: reads the span of one object
/// that covers `records` (its segments, sorted by offset) with one ranged read, checks
/// each segment's CRC and decodes it, and reads the span again once if one fails. Over
/// several stores a copy whose segments do not all verify is replaced by another first.
/// Each record gets its payloads, or, failed twice, an [`Error::CorruptSegment`] naming
/// the key and region (reported as damage): only that segment's region is affected.
/// `Err` only if the span could not be read. `object_len` as for [`fetch_segment`].
pub(crate) async fn fetch_verified(
    io: &WalIo,
    records: &[SegmentLocation],
    object_len: Option<u64>,
) -> Result<Vec<Result<Vec<Bytes>>>> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Ok(Vec::new());
    };
    let sequence = first.sequence;
    let span = first.record.offset..last.record.range().end;
    let segment_of = |bytes: &Bytes, record: &format::SegmentRecord| {
        let start = usize::try_from(record.offset.checked_sub(span.start)?).ok()?;
        let end = start.checked_add(usize::try_from(record.length).ok()?)?;
        bytes
            .get(start..end)
            .map(|segment| bytes.slice_ref(segment))
    };
    let checked = read_again_once(|| async {
        let verify = |b: &Bytes| {
            records.iter().all(|loc| {
                segment_of(b, &loc.record)
                    .is_some_and(|segment| format::check_segment(&segment, &loc.record).is_ok())
            })
        };
        let bytes = io
            .read_span_verified(sequence, first.epoch, object_len, span.clone(), &verify)
            .await?;
        let decoded: Vec<_> = records
            .iter()
            .map(|loc| {
                let record = &loc.record;
                let Some(segment) = segment_of(&bytes, record) else {
                    return Err(format::FormatError::Truncated {
                        part: "segment",
                        needed: record.range().end.saturating_sub(span.start),
                        got: bytes.len() as u64,
                    });
                };
                let decoded = io.decode_segment(segment, record, loc.sequence, loc.epoch);
                if let Err(e) = &decoded {
                    debug!(sequence, region = record.region, error = %e, "segment failed verification");
                }
                decoded
            })
            .collect();
        let damaged = decoded.iter().any(|d| d.is_err());
        if damaged {
            // The second look reads the store again, not a kept copy.
            io.forget_whole(sequence, first.epoch);
        }
        Ok(if damaged { Err(decoded) } else { Ok(decoded) })
    })
    .await?;
    let decoded = checked.unwrap_or_else(|decoded| decoded);
    Ok(records
        .iter()
        .zip(decoded)
        .map(|(loc, decoded)| {
            decoded.map_err(|source| {
                io.report_damaged_segment(sequence, loc.record.region, &source);
                Error::CorruptSegment {
                    key: io.key(sequence).to_string(),
                    region: loc.record.region,
                    source,
                }
            })
        })
        .collect())
}

/// The entries of a decoded segment with ids `>= min`.
pub(crate) fn entries_of(
    record: &format::SegmentRecord,
    payloads: impl IntoIterator<Item = Bytes>,
    min: u64,
) -> Vec<Entry> {
    payloads
        .into_iter()
        .zip(record.first_entry_id..)
        .filter(|(_, id)| *id >= min)
        .map(|(payload, id)| Entry {
            region: record.region,
            id,
            payload,
        })
        .collect()
}

/// What the chain's last control snapshot records (DESIGN.md "The record of who holds
/// what"): the catalog names the control region's last segment, and that one ranged
/// read is all it takes. A log with no control segment holds nothing. A snapshot that
/// cannot be read or verified is an error, never an empty state: a released region
/// must not be taken for one this log still owns.
pub async fn read_holdings(io: &WalIo, catalog: &Catalog) -> Result<Holdings> {
    let last = catalog.segments_from(CONTROL_REGION, 0).last().copied();
    let object_len = last.and_then(|l| catalog.object_len(l.sequence));
    read_holdings_at(io, last, object_len).await
}

/// What a writer's open reads of the record of who holds what, and reports into
/// `recovered`'s report. Under the default recovery mode it is [`read_holdings`]: a
/// damaged snapshot fails the open. Under [`RecoveryMode::PointInTime`], which is there
/// to get past damage, a control segment on the chain that cannot be read is passed
/// over for the one before it (or none), each named in
/// [`RecoveryReport::damaged_control`](crate::RecoveryReport::damaged_control); and the
/// newest snapshot among the objects given up is compared with the one gone on with
/// ([`GivenUpHoldings`]). Both come with a warning: a release given up makes this log
/// admit a region another node may own.
pub async fn read_open_holdings(
    io: &WalIo,
    mode: RecoveryMode,
    recovered: &mut Recovered,
) -> Result<Holdings> {
    if mode != RecoveryMode::PointInTime {
        return read_holdings(io, &recovered.catalog).await;
    }
    let controls: Vec<(SegmentLocation, Option<u64>)> = recovered
        .catalog
        .segments_from(CONTROL_REGION, 0)
        .iter()
        .rev()
        .map(|l| (*l, recovered.catalog.object_len(l.sequence)))
        .collect();
    let mut holdings = Holdings::new();
    for (location, object_len) in controls {
        match read_holdings_at(io, Some(location), object_len).await {
            Ok(read) => {
                holdings = read;
                break;
            }
            Err(e @ Error::CorruptSegment { .. }) => {
                warn!(key = %io.key(location.sequence), error = %e,
                    "point-in-time recovery passes over a control snapshot it cannot read: \
                     releases and pieces it recorded are not in force");
                recovered.report.damaged_control.push(location.sequence);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some((location, object_len)) = recovered.given_up_control {
        let given_up = match read_holdings_at(io, Some(location), Some(object_len)).await {
            Ok(lost) => compare_holdings(location.sequence, &lost, &holdings),
            // Only a report: a read that fails (damage, or the store's error) says so
            // rather than fail an open whose opening object is written already.
            Err(e) => {
                warn!(key = %io.key(location.sequence), error = %e,
                    "cannot read the control snapshot point-in-time recovery gave up");
                GivenUpHoldings {
                    sequence: location.sequence,
                    unreadable: true,
                    released: Vec::new(),
                    taken_back: Vec::new(),
                    pieces: Vec::new(),
                }
            }
        };
        let changed = given_up.unreadable
            || !given_up.released.is_empty()
            || !given_up.taken_back.is_empty()
            || !given_up.pieces.is_empty();
        if changed {
            warn!(key = %io.key(location.sequence), released = ?given_up.released,
                taken_back = ?given_up.taken_back, pieces = given_up.pieces.len(),
                unreadable = given_up.unreadable,
                "point-in-time recovery gives up releases or acquires: check which node \
                 owns these regions before routing appends here");
        }
        recovered.report.given_up_holdings = Some(given_up);
    }
    Ok(holdings)
}

/// What `lost` (the snapshot of the object at `sequence`, given up) records that
/// `kept` does not.
fn compare_holdings(sequence: u64, lost: &Holdings, kept: &Holdings) -> GivenUpHoldings {
    let released = lost
        .released_regions()
        .filter(|(region, last)| kept.released(*region) != Some(*last))
        .collect();
    let taken_back = kept
        .released_regions()
        .filter(|(region, _)| lost.released(*region).is_none())
        .map(|(region, _)| region)
        .collect();
    let kept_pieces: Vec<(u64, Piece)> = kept
        .regions_with_pieces()
        .into_iter()
        .flat_map(|r| kept.pieces_of(r).into_iter().map(move |p| (r, p)))
        .collect();
    let pieces = lost
        .regions_with_pieces()
        .into_iter()
        .flat_map(|r| lost.pieces_of(r).into_iter().map(move |p| (r, p)))
        .filter(|p| !kept_pieces.contains(p))
        .collect();
    GivenUpHoldings {
        sequence,
        unreadable: false,
        released,
        taken_back,
        pieces,
    }
}

/// [`read_holdings`] from the control segment at `location` (the last one on the
/// chain; `None`: there is none, and nothing is held), in an object `object_len` bytes
/// long if known ([`fetch_segment`]).
pub async fn read_holdings_at(
    io: &WalIo,
    location: Option<SegmentLocation>,
    object_len: Option<u64>,
) -> Result<Holdings> {
    let Some(location) = location else {
        return Ok(Holdings::new());
    };
    let payloads = fetch_verified(io, std::slice::from_ref(&location), object_len)
        .await?
        .into_iter()
        .next()
        .unwrap_or_else(|| Ok(Vec::new()))?;
    let key = || io.key(location.sequence).to_string();
    let damaged = |source| Error::CorruptSegment {
        key: key(),
        region: CONTROL_REGION,
        source,
    };
    let snapshot = payloads.last().ok_or_else(|| {
        damaged(format::FormatError::Control {
            reason: "a control segment with no snapshot",
        })
    })?;
    Holdings::from_snapshot(snapshot).map_err(damaged)
}
