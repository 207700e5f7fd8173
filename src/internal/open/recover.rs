//! Recovery (DESIGN.md "Opening an instance", steps 1 and 2; "Opening an instance over
//! N stores").
//!
//! Recovery lists the prefix, reads every object's header, footer and trailer (never a
//! segment), chooses the chain and indexes it in a [`Catalog`]. What may be damaged or
//! missing without failing it (DESIGN.md, end of "Reclaiming space"; FORMAT.md, "What a
//! reader verifies"):
//!
//! - a segment, even of an object read whole: it is reported
//!   ([`RecoveryReport::damaged_segments`], a warning, a counter) and only reads of its
//!   region meet it;
//! - any object below the chosen chain's floor that cannot be read, damaged or deleted
//!   (by a reclaimer) between the listing and the read: such an object can never change
//!   which chain is chosen, and the chain never needs it. It is reported in
//!   [`RecoveryReport::unread_below_floor`].
//!
//! Any other object that cannot be read fails recovery, naming its key: one at or above
//! the floor may be the chain's or may end a better chain.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::RangeInclusive;

use futures::stream::{self, FuturesUnordered, StreamExt};
use futures::FutureExt;
use tracing::{debug, info, warn};

use crate::config::RecoveryMode;
use crate::error::{Error, Result};
use crate::format::control::CONTROL_REGION;
use crate::format::{
    entry_id, FormatError, Header, CLOSED_OBJECT_LEN, MAX_SEGMENT_ENTRIES, MAX_SEQUENCE,
};
use crate::internal::chain::catalog::{choose_chain, Catalog, SegmentLocation};
use crate::internal::chain::holdings::Piece;
use crate::internal::store::objects::{CreateAttempt, ListedObject, Listing, SummaryRead, WalIo};
use crate::internal::store::quorum::{key_state, quorum, KeyState, Listed, ValueId};
use crate::internal::store::replicated::{gather, Gathered};

/// One object as recovery saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its header.
    pub header: Header,
    /// Number of segments.
    pub segments: usize,
    /// Number of entries.
    pub entries: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// Whether it is on the replayed chain.
    pub on_chain: bool,
}

/// A damaged segment recovery found in an object it read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedSegment {
    /// The object's key.
    pub key: String,
    /// The object's sequence.
    pub sequence: u64,
    /// The segment's region: reads of it fail there, or skip it
    /// ([`CorruptSegmentPolicy`](crate::CorruptSegmentPolicy)).
    pub region: u64,
    /// What its bytes violate.
    pub error: FormatError,
}

/// A listed object that recovery could not read (damaged, or deleted since the listing)
/// and went on without: below the chosen chain's floor
/// ([`RecoveryReport::unread_below_floor`]), or, under [`RecoveryMode::PointInTime`], at
/// or above it ([`RecoveryReport::given_up_damaged`]).
#[derive(Debug, Clone)]
pub struct UnreadObject {
    /// The object's sequence.
    pub sequence: u64,
    /// Why it could not be read.
    pub error: Error,
    /// Every entry id it may have held, as far as the readable objects tell: its ids are
    /// `entry_id(sequence + id offset, position)` (FORMAT.md, "Version 3"), and the id
    /// offset it hides is bounded by the readable objects around it, since along a chain
    /// the offset never decreases:
    ///
    /// - from below, by the offset of the highest object of the chosen chain below it
    ///   (0 when there is none): the first id is `entry_id(sequence + that offset, 0)`.
    ///   An object that continues the chain, or opens a new epoch over it, carries at
    ///   least that offset;
    /// - from above, by the offset of the readable objects that link to it (where they
    ///   disagree on its epoch, the largest of each epoch's least: only one can be
    ///   right): the last id is `entry_id(sequence + that offset, 2^20 - 1)`. When no
    ///   readable object links to it, nothing bounds the offset it hid (a raise, for a
    ///   region moving in, may have taken it anywhere) and the range runs to `u64::MAX`,
    ///   the largest id the format allows. A writer that opens point-in-time over it
    ///   counts its ids from above the readable objects' id bases only, so its own ids
    ///   fall in that range, and may repeat one the object held.
    ///
    /// When the two bounds contradict each other (the objects linking to it carry a
    /// smaller offset than the chain below it), either may be the one that does not
    /// apply, and the range covers both: from `entry_id(sequence, 0)` to `u64::MAX` (to
    /// the bound above when an offset as large as the chain's cannot fit the object). On
    /// a prefix without offsets (FORMAT.md versions 1 and 2) it is exactly the ids of
    /// `sequence` when a readable object links to it, and every id from them up
    /// otherwise: nothing tells that the object did not raise the offset.
    pub entry_ids: RangeInclusive<u64>,
    /// Whether it may be a fence's closed opening object (FORMAT.md "Version 4"):
    /// listed at a closed object's size ([`CLOSED_OBJECT_LEN`], which an empty object
    /// with an id offset has too: a keep-alive, an opening object, a claim), and no
    /// readable object proves it is not one (an opening object of a later epoch linking
    /// to it, or a complete open above it). A writer's point-in-time open refuses to go
    /// on without such an object: stepping over it could reopen a prefix fenced for
    /// good (DESIGN.md "A node's regions after it died").
    pub may_be_closed: bool,
}

/// Equal when the sequences, the entry ids and the errors' messages are ([`Error`] has no
/// equality of its own: a store's error does not).
impl PartialEq for UnreadObject {
    fn eq(&self, other: &Self) -> bool {
        self.sequence == other.sequence
            && self.entry_ids == other.entry_ids
            && self.error.to_string() == other.error.to_string()
    }
}

impl Eq for UnreadObject {}

/// What recovery found under the prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Every WAL object, ascending.
    pub objects: Vec<ObjectInfo>,
    /// Keys under the prefix that are not WAL objects (skipped).
    pub foreign: Vec<String>,
    /// The chain end, if any.
    pub chain_end: Option<Header>,
    /// The largest sequence present (orphans and claims included), 0 when empty.
    pub max_sequence: u64,
    /// The largest id base (sequence plus id offset) of any object read, orphans and
    /// claims included, and over several stores of any copy read, decided or not (a
    /// copy on fewer than a quorum may carry ids handed out at admission); 0 when
    /// empty. A new epoch hands out ids above it.
    pub max_id_base: u64,
    /// The sequence of the highest closed opening object read (FORMAT.md "Version 4"),
    /// over several stores of any copy read, decided or not: the prefix was fenced for
    /// good, and a writer's open fails [`Error::PrefixClosed`].
    pub closed: Option<u64>,
    /// Objects not on the chain: never replayed, never reused.
    pub orphans: usize,
    /// Damaged segments found in objects read whole (objects read with ranged GETs have
    /// their segments checked only when a region is read), ascending by sequence.
    pub damaged_segments: Vec<DamagedSegment>,
    /// Listed objects below the chain's floor that could not be read; not in `objects`.
    pub unread_below_floor: Vec<UnreadObject>,
    /// Under [`RecoveryMode::PointInTime`] only: objects at or above the floor that
    /// could not be read and that recovery went on without (under the default mode they
    /// fail it). The entries they held are given up: their ids are among
    /// [`UnreadObject::entry_ids`].
    pub given_up_damaged: Vec<UnreadObject>,
    /// Under [`RecoveryMode::PointInTime`] only: readable objects left off the chain
    /// because their links run through an object in
    /// [`given_up_damaged`](Self::given_up_damaged), with the entries they held.
    pub given_up: Vec<GivenUp>,
    /// Under [`RecoveryMode::PointInTime`] only: objects on the chain whose control
    /// segment (the record of releases and earlier pieces) could not be read; the open
    /// went on with the last one before them that could be, or with none.
    pub damaged_control: Vec<u64>,
    /// Under [`RecoveryMode::PointInTime`] only: what the record of who holds what in
    /// the objects given up says that the chain's record does not (a release or an
    /// acquire given up changes which regions this log admits).
    pub given_up_holdings: Option<GivenUpHoldings>,
}

/// What point-in-time recovery gave up of the record of who holds what (DESIGN.md
/// "The record of who holds what"): the newest control snapshot among the objects
/// given up ([`RecoveryReport::given_up`]), against the one the open went on with.
/// Unreadable objects given up ([`RecoveryReport::given_up_damaged`]) may have recorded
/// more; nothing can tell what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenUpHoldings {
    /// The object given up whose snapshot is compared.
    pub sequence: u64,
    /// Its control segment could not be read (damaged, or the store failed the read):
    /// what it recorded is unknown.
    pub unreadable: bool,
    /// Regions it records released (with their last id) and the chain does not: this
    /// log admits their appends again, though another node may own them now.
    pub released: Vec<(u64, Option<u64>)>,
    /// Regions the chain records released and it does not (an acquire given up): this
    /// log refuses their appends again.
    pub taken_back: Vec<u64>,
    /// Earlier pieces it records and the chain does not, by region: a replay of the
    /// region through this log no longer reads them.
    pub pieces: Vec<(u64, Piece)>,
}

/// A readable object that point-in-time recovery left off the chain because its links
/// run through an unreadable object: the entries it held are not replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenUp {
    /// Its header.
    pub header: Header,
    /// Per region, the first and last entry id it held.
    pub regions: Vec<(u64, u64, u64)>,
}

impl GivenUp {
    /// Every entry id an unreadable object at `sequence` may have held, if it carried no
    /// id offset (FORMAT.md versions 1 and 2). An unreadable object hides its id offset:
    /// on a prefix whose objects carry one, its ids count from `sequence + offset`, and
    /// this range misses them. [`UnreadObject::entry_ids`] bounds that offset.
    #[deprecated(
        since = "0.1.0",
        note = "ignores id offsets: use `UnreadObject::entry_ids` of `RecoveryReport::given_up_damaged`"
    )]
    pub fn entry_ids(sequence: u64) -> std::ops::Range<u64> {
        crate::format::entry_id(sequence, 0)..crate::format::entry_id(sequence + 1, 0)
    }
}

/// What the readable objects tell of the id offsets that unreadable objects hide (see
/// [`UnreadObject::entry_ids`]).
struct HiddenOffsets {
    /// The chosen chain's objects, ascending: sequence and id offset.
    chain: Vec<(u64, u64)>,
    /// Per unreadable sequence, per epoch the readable objects linking to it say it has,
    /// the least id offset among them.
    linked: BTreeMap<u64, BTreeMap<u64, u64>>,
}

impl HiddenOffsets {
    /// Over the readable objects' `headers`, the `chain` chosen among them (ascending),
    /// for the `unread` sequences.
    fn new(
        headers: &BTreeMap<u64, Header>,
        chain: &[u64],
        unread: impl IntoIterator<Item = u64>,
    ) -> Self {
        let mut linked: BTreeMap<u64, BTreeMap<u64, u64>> =
            unread.into_iter().map(|s| (s, BTreeMap::new())).collect();
        for header in headers.values() {
            if header.link.is_none() {
                continue;
            }
            if let Some(epochs) = linked.get_mut(&header.link.sequence) {
                let least = epochs.entry(header.link.epoch).or_insert(header.id_offset);
                *least = (*least).min(header.id_offset);
            }
        }
        let chain = chain
            .iter()
            .filter_map(|s| Some((*s, headers.get(s)?.id_offset)))
            .collect();
        HiddenOffsets { chain, linked }
    }

    /// The entry ids the unreadable object at `sequence` may have held.
    fn entry_ids(&self, sequence: u64) -> RangeInclusive<u64> {
        let below = self.chain.partition_point(|(s, _)| *s < sequence);
        let below = below
            .checked_sub(1)
            .and_then(|i| self.chain.get(i))
            .map_or(0, |(_, offset)| *offset);
        // Only the objects right about its epoch bound it (one epoch of them at most,
        // which cannot be told): the largest of each epoch's least offset.
        let above = self
            .linked
            .get(&sequence)
            .and_then(|epochs| epochs.values().max().copied());
        hidden_entry_ids(sequence, below, above)
    }
}

/// The entry ids an unreadable object at `sequence` may have held, when the id offset it
/// hides is at least `below` (the chain object's below it) and at most `above` (the
/// objects' linking to it, if any): see [`UnreadObject::entry_ids`].
fn hidden_entry_ids(sequence: u64, below: u64, above: Option<u64>) -> RangeInclusive<u64> {
    // Id bases: a valid header keeps `sequence + id offset` within MAX_SEQUENCE.
    let lower = sequence
        .checked_add(below)
        .filter(|base| *base <= MAX_SEQUENCE);
    let upper = above.map(|offset| sequence.saturating_add(offset).min(MAX_SEQUENCE));
    let (first, last) = match (lower, upper) {
        (Some(lower), Some(upper)) if lower <= upper => (lower, Some(upper)),
        (Some(lower), None) => (lower, None),
        // Contradicting bounds: either may be the wrong one.
        (Some(_), Some(_)) => (sequence, None),
        // No offset at least `below` fits the object: the bound from below cannot apply.
        (None, upper) => (sequence, upper),
    };
    entry_id(first.min(MAX_SEQUENCE), 0)
        ..=last.map_or(u64::MAX, |last| entry_id(last, MAX_SEGMENT_ENTRIES - 1))
}

/// Recovery's result: the catalog of the chain and the report.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The catalog of the chain.
    pub catalog: Catalog,
    /// What was found.
    pub report: RecoveryReport,
    /// Under point-in-time recovery: where the newest control segment among the
    /// objects given up is, with that object's length.
    pub given_up_control: Option<(SegmentLocation, u64)>,
}

/// Steps 1 and 2 of the open: list, read every object's header, footer and trailer
/// (bounded concurrency, never a segment), choose the chain and index it.
pub async fn recover(io: &WalIo, concurrency: usize) -> Result<Recovered> {
    recover_in(io, concurrency, RecoveryMode::Strict).await
}

/// [`recover`] under `mode` ([`RecoveryMode`]).
pub async fn recover_in(io: &WalIo, concurrency: usize, mode: RecoveryMode) -> Result<Recovered> {
    if !io.replicas().is_empty() {
        return recover_replicas(io, concurrency, &mut Vec::new(), false, mode).await;
    }
    recover_cached(io, concurrency, &mut BTreeMap::new(), mode).await
}

/// [`recover`], reusing the summaries in `cache` of objects listed again with the same
/// size (objects are immutable), and leaving there the summaries of this listing. An
/// open that starts over reads only what appeared since, which keeps its window short
/// while an earlier instance is still writing.
pub async fn recover_cached(
    io: &WalIo,
    concurrency: usize,
    cache: &mut BTreeMap<u64, SummaryRead>,
    mode: RecoveryMode,
) -> Result<Recovered> {
    let listing = io.list().await?;
    for key in &listing.foreign {
        warn!(key = %key, "skipping a key under the WAL prefix that is not a WAL object");
    }
    let mut by_sequence: BTreeMap<u64, SummaryRead> = BTreeMap::new();
    let mut to_read: Vec<ListedObject> = Vec::new();
    for listed in &listing.objects {
        match cache.remove(&listed.sequence) {
            Some(known) if known.summary.length == listed.size => {
                by_sequence.insert(listed.sequence, known);
            }
            _ => to_read.push(listed.clone()),
        }
    }
    let summaries: Vec<(u64, Result<SummaryRead>)> = stream::iter(to_read)
        .map(|listed: ListedObject| {
            let io = io.clone();
            async move { (listed.sequence, read_summary_retried(&io, &listed).await) }
        })
        // Unordered: with `buffered`, one slow read held back every answer behind it and
        // so the whole window (measured: a 5 % GET tail of 1 s made a 10,000-object
        // recovery 8 times slower, hedged or not).
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    // Objects that could not be read, ascending: whether that fails recovery depends on
    // the floor of the chain chosen without them.
    let mut failed: BTreeMap<u64, Error> = BTreeMap::new();
    for (sequence, summary) in summaries {
        match summary {
            Ok(read) => {
                by_sequence.insert(sequence, read);
            }
            Err(e) => {
                failed.insert(sequence, e);
            }
        }
    }
    let max_sequence = listing.objects.last().map_or(0, |o| o.sequence);
    let closed_sized = closed_sized(&listing.objects, &failed);
    match assemble(
        io,
        &by_sequence,
        failed,
        Copies {
            max_sequence,
            ..Copies::default()
        },
        listing.foreign,
        mode,
        &closed_sized,
    ) {
        Ok(recovered) => {
            // What this listing showed, for an open that starts over.
            *cache = by_sequence;
            Ok(recovered)
        }
        Err(e) => {
            // What was read stays known: an open that starts over reads only the rest.
            cache.extend(by_sequence);
            Err(e)
        }
    }
}

/// What the listing and the copies read outside the decided values show (over one
/// store, only the largest sequence listed).
#[derive(Debug, Default, Clone, Copy)]
struct Copies {
    /// The largest sequence listed.
    max_sequence: u64,
    /// The largest id base of a copy read.
    id_base: u64,
    /// The highest closed opening object among the copies read.
    closed: Option<u64>,
}

/// The sequences a listing showed at a closed object's size, of those in `failed`:
/// which unreadable objects may be a fence's closed opening object.
fn closed_sized<'a>(
    listed: impl IntoIterator<Item = &'a ListedObject>,
    failed: &BTreeMap<u64, Error>,
) -> BTreeSet<u64> {
    listed
        .into_iter()
        .filter(|o| o.size == CLOSED_OBJECT_LEN as u64 && failed.contains_key(&o.sequence))
        .map(|o| o.sequence)
        .collect()
}

/// Whether the readable `headers` prove that the object at `sequence` is no closed
/// opening object: an opening object of a later epoch links to it (an open read it as
/// its chain end, and an open refuses a closed one; a data object's link to its own
/// epoch's predecessor proves nothing: a zombie's orphan links to its own failed
/// create at the fence's key), or a complete open above it (a non-claim object of an
/// epoch above `sequence + 1`, a closed object's own epoch) claimed that key first.
fn not_closed(headers: &BTreeMap<u64, Header>, sequence: u64) -> bool {
    headers.values().any(|h| {
        let opened_on_it = h.link.sequence == sequence && h.link.epoch != h.epoch;
        let opened_above = !h.claim && h.epoch > sequence.saturating_add(1);
        opened_on_it || opened_above
    })
}

/// Whether a failed read is definite damage (the bytes at rest fail their checks),
/// which point-in-time recovery may give up, rather than a read that failed for a
/// while (a throttle, a timeout, a store's error, an object deleted since the
/// listing), which it never does: an open starts over instead.
fn is_damage(error: &Error) -> bool {
    matches!(
        error,
        Error::CorruptObject { .. } | Error::SequenceMismatch { .. }
    )
}

/// Chooses the chain among the objects read (`by_sequence`) and indexes it; fails with
/// the highest object that could not be read (`failed`) at or above the chain's floor.
/// `copies`: the largest sequence listed, and what the copies read that are not in
/// `by_sequence` show (over several stores).
fn assemble(
    io: &WalIo,
    by_sequence: &BTreeMap<u64, SummaryRead>,
    mut failed: BTreeMap<u64, Error>,
    copies: Copies,
    foreign: Vec<String>,
    mode: RecoveryMode,
    closed_sized: &BTreeSet<u64>,
) -> Result<Recovered> {
    let headers: BTreeMap<u64, Header> = by_sequence
        .iter()
        .map(|(s, o)| (*s, o.summary.header))
        .collect();
    let chain = choose_chain(&headers);
    let chain_end = chain.last().and_then(|s| headers.get(s)).copied();
    // Below the chosen chain's floor nothing can change the choice, and the chain needs
    // nothing there (DESIGN.md, end of "Reclaiming space"); at or above it, an object
    // that cannot be read may be on the chain or end a better one.
    let floor = chain_end.map_or(0, |h| h.floor);
    let hidden = HiddenOffsets::new(&headers, &chain, failed.keys().copied());
    let mut needed = failed.split_off(&floor);
    let mut given_up_damaged = Vec::new();
    let mut given_up = Vec::new();
    let mut given_up_control = None;
    // Point-in-time gives up only damage: a read that failed for a while fails recovery
    // as under strict (the highest named), and a writer's open starts over.
    let transient = mode == RecoveryMode::PointInTime && needed.values().any(|e| !is_damage(e));
    if mode == RecoveryMode::PointInTime && !needed.is_empty() && !transient {
        // Going on without them: report exactly what that gives up.
        given_up = given_up_through(by_sequence, &needed, &chain);
        given_up_control = given_up
            .iter()
            .rev()
            .filter_map(|g| by_sequence.get(&g.header.sequence))
            .find_map(|read| {
                let summary = &read.summary;
                let record = summary
                    .footer
                    .records
                    .iter()
                    .rev()
                    .find(|r| r.region == CONTROL_REGION)?;
                let location = SegmentLocation {
                    sequence: summary.header.sequence,
                    epoch: summary.header.epoch,
                    record: *record,
                };
                Some((location, summary.length))
            });
        for (sequence, error) in std::mem::take(&mut needed) {
            warn!(key = %io.key(sequence), error = %error,
                "point-in-time recovery goes on without an object it cannot read");
            given_up_damaged.push(UnreadObject {
                sequence,
                error,
                entry_ids: hidden.entry_ids(sequence),
                may_be_closed: closed_sized.contains(&sequence) && !not_closed(&headers, sequence),
            });
        }
    }
    // The highest is named: a chain is followed down from its end, so that is where
    // following it stops (a damaged chain object also makes the objects above it
    // incomplete, lowering the floor below older unreadable objects).
    if let Some((_, e)) = needed.pop_last() {
        for (other, error) in &needed {
            warn!(key = %io.key(*other), error = %error, "another object recovery needs cannot be read");
        }
        return Err(e);
    }
    let unread_below_floor: Vec<UnreadObject> = failed
        .into_iter()
        .map(|(sequence, error)| {
            warn!(key = %io.key(sequence), floor, error = %error,
                "an object below the chain's floor cannot be read; recovery goes on without it");
            UnreadObject {
                sequence,
                error,
                entry_ids: hidden.entry_ids(sequence),
                may_be_closed: false,
            }
        })
        .collect();
    let mut catalog = Catalog::new();
    for sequence in &chain {
        if let Some(o) = by_sequence.get(sequence) {
            catalog.insert(
                &o.summary.header,
                &o.summary.footer.records,
                o.summary.length,
            )?;
        }
    }
    let on_chain: HashSet<u64> = chain.iter().copied().collect();
    let objects: Vec<ObjectInfo> = by_sequence
        .values()
        .map(|o| ObjectInfo {
            header: o.summary.header,
            segments: o.summary.footer.records.len(),
            entries: o
                .summary
                .footer
                .records
                .iter()
                .map(|r| r.entry_count())
                .sum(),
            bytes: o.summary.length,
            on_chain: on_chain.contains(&o.summary.header.sequence),
        })
        .collect();
    let damaged_segments: Vec<DamagedSegment> = by_sequence
        .iter()
        .flat_map(|(sequence, o)| {
            o.damaged.iter().map(|d| DamagedSegment {
                key: io.key(*sequence).to_string(),
                sequence: *sequence,
                region: d.region,
                error: d.error.clone(),
            })
        })
        .collect();
    let max_id_base = by_sequence
        .values()
        .map(|o| o.summary.header.id_base())
        .fold(copies.id_base, u64::max);
    let closed = by_sequence
        .values()
        .filter(|o| o.summary.header.closed)
        .map(|o| o.summary.header.sequence)
        .chain(copies.closed)
        .max();
    let max_sequence = copies.max_sequence;
    let report = RecoveryReport {
        orphans: objects.iter().filter(|o| !o.on_chain).count(),
        chain_end,
        max_sequence,
        max_id_base,
        closed,
        foreign,
        objects,
        damaged_segments,
        unread_below_floor,
        given_up_damaged,
        given_up,
        damaged_control: Vec::new(),
        given_up_holdings: None,
    };
    Ok(Recovered {
        catalog,
        report,
        given_up_control,
    })
}

/// The readable objects off `chain` whose links run, through readable objects, to one
/// of the `damaged` sequences: what going on without those gives up.
fn given_up_through(
    by_sequence: &BTreeMap<u64, SummaryRead>,
    damaged: &BTreeMap<u64, Error>,
    chain: &[u64],
) -> Vec<GivenUp> {
    let on_chain: HashSet<u64> = chain.iter().copied().collect();
    // Ascending: an object's link target is lower, so it is decided first.
    let mut through: HashSet<u64> = HashSet::new();
    let mut given_up = Vec::new();
    for (sequence, read) in by_sequence {
        let header = &read.summary.header;
        let link = header.link.sequence;
        let runs_through = !header.link.is_none()
            && (damaged.contains_key(&link)
                || (through.contains(&link)
                    && by_sequence
                        .get(&link)
                        .is_some_and(|l| l.summary.header.epoch == header.link.epoch)));
        if !runs_through || on_chain.contains(sequence) {
            continue;
        }
        through.insert(*sequence);
        if header.claim {
            continue;
        }
        given_up.push(GivenUp {
            header: *header,
            regions: read
                .summary
                .footer
                .records
                .iter()
                .map(|r| (r.region, r.first_entry_id, r.last_entry_id))
                .collect(),
        });
    }
    given_up
}

/// Reads of one summary in a recovery, when a read fails with an error worth retrying (a
/// timeout, a store's transient error): one failed read among thousands would fail the
/// open (measured: 10,000 reads at a 5 % tail of 1 s and a 300 ms request timeout, where
/// a read's three hedged attempts all time out about once per open).
pub const SUMMARY_READ_ATTEMPTS: usize = 3;

/// [`WalIo::read_summary`], again up to [`SUMMARY_READ_ATTEMPTS`] in all when it fails
/// with [`ErrorKind::Retry`](crate::error::ErrorKind::Retry).
async fn read_summary_retried(io: &WalIo, listed: &ListedObject) -> Result<SummaryRead> {
    let mut attempt = 1;
    loop {
        match io.read_summary(listed).await {
            Err(e)
                if attempt < SUMMARY_READ_ATTEMPTS
                    && e.kind() == crate::error::ErrorKind::Retry =>
            {
                debug!(
                    sequence = listed.sequence,
                    attempt, "summary read failed, again: {e}"
                );
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Per-store summaries kept across the attempts of an open over several stores.
pub type ReplicaCache = Vec<BTreeMap<u64, SummaryRead>>;

/// Lists every store (above `after` when given): `None` for a store that failed, or had
/// not answered soon enough once a quorum had ([`gather`]: *unlisted*). Fails when fewer
/// than a quorum listed.
pub(crate) async fn list_replicas(
    io: &WalIo,
    replicas: &[WalIo],
    after: Option<u64>,
) -> Result<(Vec<Option<Listing>>, Vec<usize>)> {
    let n = replicas.len();
    let q = quorum(n);
    let pending: FuturesUnordered<_> = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| {
            async move {
                let listing = match after {
                    Some(after) => r.list_after(after).await,
                    None => r.list().await,
                };
                (i, listing)
            }
            .boxed()
        })
        .collect();
    let Gathered {
        answers: listings,
        order,
        last,
    } = gather(pending, n, io.request_timeout()).await;
    let listed = order.len();
    for (i, l) in listings.iter().enumerate() {
        if l.is_none() {
            warn!(store = i, "a store is unlisted at this open: {last}");
        }
    }
    if listed < q {
        return Err(Error::NoQuorum {
            op: "list",
            key: io.prefix().to_string(),
            answered: listed,
            stores: n,
            quorum: q,
            throttled: 0,
            last,
        });
    }
    Ok((listings, order))
}

/// Recovery over several stores (DESIGN.md "One log over several stores", opening steps
/// 1 to 3): list every store, read each listed copy's summary, and choose the chain over
/// *decided* values (held by a quorum). With a store unlisted, a value that may be
/// decided through it is *completed* when `complete` (a writer's open: its bytes created
/// in the listed stores that lack a copy), and makes the recovery fail with a retryable
/// [`Error::NoQuorum`] otherwise, as does a key that stays undetermined. A copy that
/// cannot be read counts as unknown in its store; a key at or above the chain's floor
/// that no quorum decides and that has an unreadable copy fails recovery, naming it, as
/// over one store. `max_sequence` is the largest sequence of any copy listed.
pub async fn recover_replicas(
    io: &WalIo,
    concurrency: usize,
    cache: &mut ReplicaCache,
    complete: bool,
    mode: RecoveryMode,
) -> Result<Recovered> {
    let replicas = io.replicas();
    let n = replicas.len();
    cache.resize_with(n, BTreeMap::new);
    let (listings, order) = list_replicas(io, &replicas, None).await?;
    let q = quorum(n);
    // Which stores list each key, with the listed size.
    let mut listed_at: BTreeMap<u64, Vec<Option<ListedObject>>> = BTreeMap::new();
    let mut foreign: Vec<String> = Vec::new();
    for (i, listing) in listings.iter().enumerate() {
        let Some(listing) = listing else { continue };
        foreign.extend(listing.foreign.iter().cloned());
        for listed in &listing.objects {
            let stores = listed_at
                .entry(listed.sequence)
                .or_insert_with(|| vec![None; n]);
            if let Some(slot) = stores.get_mut(i) {
                *slot = Some(listed.clone());
            }
        }
    }
    foreign.sort();
    foreign.dedup();
    // Each store's summaries: from the cache when listed again with the same size. The Q
    // stores that listed first are read in full; another store's copy is read only where
    // those do not agree on one value (agreeing, they decide the key whatever it holds).
    let mut per_store: ReplicaCache = vec![BTreeMap::new(); n];
    let mut failed: BTreeMap<u64, Error> = BTreeMap::new();
    let mut unreadable: Vec<(usize, u64)> = Vec::new();
    let primary: Vec<usize> = order.iter().copied().take(q).collect();
    let first: Vec<(usize, ListedObject)> = listed_at
        .values()
        .flat_map(|stores| {
            primary
                .iter()
                .filter_map(|i| Some((*i, stores.get(*i)?.clone()?)))
        })
        .collect();
    // `concurrency` requests per store: each store has its own capacity.
    let per_store_concurrency = concurrency.max(1).saturating_mul(q);
    read_copies(
        io,
        &replicas,
        cache,
        &mut per_store,
        first,
        per_store_concurrency,
        &mut failed,
        &mut unreadable,
    )
    .await;
    let agreed = |sequence: &u64, per_store: &ReplicaCache| {
        let values: Vec<Option<ValueId>> = primary
            .iter()
            .map(|i| {
                per_store
                    .get(*i)
                    .and_then(|s| s.get(sequence))
                    .map(|r| ValueId::of(&r.summary))
            })
            .collect();
        values.first().copied().flatten().is_some() && values.windows(2).all(|w| w[0] == w[1])
    };
    let second: Vec<(usize, ListedObject)> = listed_at
        .iter()
        .filter(|(sequence, _)| !agreed(sequence, &per_store))
        .flat_map(|(_, stores)| {
            stores
                .iter()
                .enumerate()
                .filter(|(i, _)| !primary.contains(i))
                .filter_map(|(i, l)| Some((i, l.clone()?)))
        })
        .collect();
    read_copies(
        io,
        &replicas,
        cache,
        &mut per_store,
        second,
        per_store_concurrency,
        &mut failed,
        &mut unreadable,
    )
    .await;
    // What each store shows at each key: a copy read, absent, or unknown (unlisted, not
    // read, or unreadable).
    let mut keys: BTreeMap<u64, Vec<Listed>> = BTreeMap::new();
    for (sequence, stores) in &listed_at {
        let agreed_here = agreed(sequence, &per_store);
        let shown = (0..n)
            .map(|i| {
                let listing = listings.get(i).and_then(Option::as_ref);
                let read = per_store.get(i).and_then(|s| s.get(sequence));
                match (listing, stores.get(i).and_then(Option::as_ref), read) {
                    (None, _, _) => Listed::Unlisted,
                    (Some(_), None, _) => Listed::Absent,
                    (Some(_), Some(_), Some(read)) => Listed::Copy(ValueId::of(&read.summary)),
                    (Some(_), Some(_), None) if unreadable.contains(&(i, *sequence)) => {
                        Listed::Unlisted
                    }
                    // Listed, not read because the first stores agreed: not needed.
                    (Some(_), Some(_), None) if agreed_here => Listed::Unlisted,
                    // Reclaimed since the listing: no copy there.
                    (Some(_), Some(_), None) => Listed::Absent,
                }
            })
            .collect();
        keys.insert(*sequence, shown);
    }
    let max_sequence = keys.keys().next_back().copied().unwrap_or(0);
    let summary_of = |per_store: &ReplicaCache, sequence: u64, value: &ValueId| {
        per_store.iter().find_map(|s| {
            s.get(&sequence)
                .filter(|r| ValueId::of(&r.summary) == *value)
                .cloned()
        })
    };
    // The decided values; completion below adds to them.
    let mut by_sequence: BTreeMap<u64, SummaryRead> = BTreeMap::new();
    for (sequence, stores) in &keys {
        if let KeyState::Decided(v) = key_state(stores, false) {
            if let Some(read) = summary_of(&per_store, *sequence, &v) {
                by_sequence.insert(*sequence, read);
            }
        }
    }
    let headers: BTreeMap<u64, Header> = by_sequence
        .iter()
        .map(|(s, o)| (*s, o.summary.header))
        .collect();
    let chain = choose_chain(&headers);
    let floor = chain
        .last()
        .and_then(|s| headers.get(s))
        .map_or(0, |h| h.floor);
    // With a store unlisted: complete what may be decided through it, at or above the
    // floor of the best complete object found.
    let mut completed = 0;
    for (sequence, stores) in keys.iter_mut() {
        let undetermined = |why: &str| Error::NoQuorum {
            op: "recover",
            key: io.key(*sequence).to_string(),
            answered: listings.iter().flatten().count(),
            stores: n,
            quorum: quorum(n),
            throttled: 0,
            last: why.to_string(),
        };
        match key_state(stores, *sequence < floor) {
            KeyState::Undetermined => {
                return Err(undetermined(
                    "a listed store holds another value where one may be decided through an unlisted store",
                ))
            }
            KeyState::Complete { value, stores: to } if complete => {
                complete_value(&replicas, *sequence, &value, stores, &to).await?;
                match key_state(stores, false) {
                    KeyState::Decided(v) if v == value => completed += 1,
                    _ => return Err(undetermined("a completion did not reach a quorum")),
                }
                // The completed copies' summary is the source's.
                if let Some(read) = summary_of(&per_store, *sequence, &value) {
                    for i in &to {
                        if let Some(s) = per_store.get_mut(*i) {
                            s.insert(*sequence, read.clone());
                        }
                    }
                    by_sequence.insert(*sequence, read);
                }
            }
            KeyState::Complete { .. } => {
                return Err(undetermined(
                    "a value may be decided through an unlisted store (a read-only open does not complete it)",
                ))
            }
            _ => {}
        }
    }
    if completed > 0 {
        info!(
            completed,
            "completed values that an unlisted store may hold"
        );
    }
    failed.retain(|sequence, _| !by_sequence.contains_key(sequence));
    // Every copy read counts, decided or not, as one store counts an orphan; and one
    // copy of a closed object is enough to refuse a writer's open.
    let headers_read = || {
        per_store
            .iter()
            .flat_map(|s| s.values())
            .map(|r| r.summary.header)
    };
    let copies = Copies {
        max_sequence,
        id_base: headers_read().map(|h| h.id_base()).fold(0, u64::max),
        closed: headers_read()
            .filter(|h| h.closed)
            .map(|h| h.sequence)
            .max(),
    };
    let closed_sized = closed_sized(listed_at.values().flatten().flatten(), &failed);
    let recovered = assemble(
        io,
        &by_sequence,
        failed,
        copies,
        foreign,
        mode,
        &closed_sized,
    );
    // What each store showed, for an open that starts over.
    for (slot, summaries) in cache.iter_mut().zip(per_store) {
        *slot = summaries;
    }
    recovered
}

/// Reads the summaries of `to_read` (store, listed copy), taking those in `cache` listed
/// again with the same size, into `per_store`. A copy reclaimed since the listing is
/// left out; one that cannot be read is noted in `unreadable`, its error in `failed`.
#[allow(clippy::too_many_arguments)]
async fn read_copies(
    io: &WalIo,
    replicas: &[WalIo],
    cache: &mut ReplicaCache,
    per_store: &mut ReplicaCache,
    to_read: Vec<(usize, ListedObject)>,
    concurrency: usize,
    failed: &mut BTreeMap<u64, Error>,
    unreadable: &mut Vec<(usize, u64)>,
) {
    let mut reading = Vec::new();
    for (i, listed) in to_read {
        let known = cache.get_mut(i).and_then(|c| c.remove(&listed.sequence));
        match known {
            Some(k) if k.summary.length == listed.size => {
                if let Some(s) = per_store.get_mut(i) {
                    s.insert(listed.sequence, k);
                }
            }
            _ => reading.push((i, listed)),
        }
    }
    let reads: Vec<(usize, u64, Result<SummaryRead>)> = stream::iter(reading)
        .map(|(i, listed)| {
            let replica = replicas.get(i).cloned();
            async move {
                let read = match replica {
                    Some(r) => r.read_summary(&listed).await,
                    None => Err(Error::Stopped {
                        durability: crate::error::Durability::NotWritten,
                    }),
                };
                (i, listed.sequence, read)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for (i, sequence, read) in reads {
        match read {
            Ok(read) => {
                if let Some(s) = per_store.get_mut(i) {
                    s.insert(sequence, read);
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                warn!(store = i, key = %io.key(sequence), error = %e,
                    "a copy cannot be read; it counts as unknown");
                unreadable.push((i, sequence));
                failed.insert(sequence, e);
            }
        }
    }
}

/// Completes `value` at `sequence`: its bytes, read whole from a store holding a copy,
/// created in each store of `to` (the listed stores without a copy); `stores` is updated
/// with what each answered (a copy of `value`, another value found there, or unknown).
async fn complete_value(
    replicas: &[WalIo],
    sequence: u64,
    value: &ValueId,
    stores: &mut [Listed],
    to: &[usize],
) -> Result<()> {
    let sources: Vec<usize> = stores
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == Listed::Copy(*value))
        .map(|(i, _)| i)
        .collect();
    // Each source read at most twice (a read damaged in transit is read again).
    let mut bytes = None;
    let mut last = String::from("no copy to read");
    'sources: for i in sources {
        let Some(r) = replicas.get(i) else { continue };
        for _ in 0..2 {
            match r.read_whole(sequence).await {
                Ok(b) if ValueId::of_copy(&b).as_ref() == Ok(value) => {
                    bytes = Some(b);
                    break 'sources;
                }
                Ok(_) => last = format!("store {i}'s copy failed its checks"),
                Err(e) => {
                    last = format!("store {i}: {e}");
                    break;
                }
            }
        }
    }
    let Some(bytes) = bytes else {
        // The open starts over (and the copies are listed again).
        return Err(Error::NoQuorum {
            op: "complete",
            key: replicas
                .first()
                .map(|r| r.key(sequence).to_string())
                .unwrap_or_default(),
            answered: 0,
            stores: replicas.len(),
            quorum: quorum(replicas.len()),
            throttled: 0,
            last,
        });
    };
    let creates = to.iter().filter_map(|i| {
        let r = replicas.get(*i)?.clone();
        let bytes = bytes.clone();
        Some(async move {
            let answer = match r.create_copy(sequence, bytes).await {
                CreateAttempt::Created => Some(*value),
                CreateAttempt::AlreadyExists { found } => {
                    let found = match found {
                        Some(f) => Ok(f),
                        None => r.read_whole(sequence).await,
                    };
                    found.ok().and_then(|f| ValueId::of_copy(&f).ok())
                }
                _ => None,
            };
            (*i, answer)
        })
    });
    for (i, answer) in futures::future::join_all(creates).await {
        if let Some(slot) = stores.get_mut(i) {
            *slot = match answer {
                Some(v) => Listed::Copy(v),
                None => Listed::Unlisted,
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Link;

    const LAST: u64 = MAX_SEGMENT_ENTRIES - 1;

    fn header(sequence: u64, epoch: u64, link: (u64, u64), id_offset: u64) -> Header {
        Header {
            sequence,
            epoch,
            link: Link {
                sequence: link.0,
                epoch: link.1,
            },
            floor: 1,
            claim: false,
            closed: false,
            id_offset,
        }
    }

    #[test]
    fn an_unreadable_object_between_two_offsets_may_hold_the_ids_between_them() {
        // The chain object below carries offset 100, the object above 300: the hidden
        // offset is one of 100..=300.
        let ids = hidden_entry_ids(5, 100, Some(300));
        assert_eq!(ids, entry_id(105, 0)..=entry_id(305, LAST));
        for offset in [100, 200, 300] {
            assert!(ids.contains(&entry_id(5 + offset, 0)), "offset {offset}");
            assert!(ids.contains(&entry_id(5 + offset, LAST)), "offset {offset}");
        }
        // Not the ids the chain below holds, nor those of the object above.
        assert!(!ids.contains(&entry_id(4 + 100, LAST)));
        assert!(!ids.contains(&entry_id(6 + 300, 0)));
        // Without offsets: exactly the ids of its sequence.
        assert_eq!(
            hidden_entry_ids(5, 0, Some(0)),
            entry_id(5, 0)..=entry_id(5, LAST)
        );
    }

    #[test]
    fn nothing_bounds_the_ids_of_an_unreadable_object_nothing_links_to() {
        let ids = hidden_entry_ids(5, 100, None);
        assert_eq!(ids, entry_id(105, 0)..=u64::MAX);
        assert!(ids.contains(&entry_id(MAX_SEQUENCE, LAST)));
        assert!(!ids.contains(&entry_id(104, LAST)));
    }

    #[test]
    fn contradicting_bounds_count_from_the_sequence() {
        // Objects above with a smaller offset than the chain below: one reading is wrong.
        assert_eq!(
            hidden_entry_ids(5, 100, Some(50)),
            entry_id(5, 0)..=u64::MAX
        );
        // An offset of at least `below` cannot fit the object: only the bound above holds.
        assert_eq!(
            hidden_entry_ids(5, MAX_SEQUENCE, Some(50)),
            entry_id(5, 0)..=entry_id(55, LAST)
        );
        assert_eq!(
            hidden_entry_ids(5, MAX_SEQUENCE, None),
            entry_id(5, 0)..=u64::MAX
        );
    }

    #[test]
    fn the_readable_objects_around_an_unreadable_one_bound_its_offset() {
        // Epoch 2: 1 (offset 100) and 2 on the chain, 3 unreadable, 4 (a raise to 300)
        // links to it; 6 is unreadable too and nothing links to it.
        let headers: BTreeMap<u64, Header> = [
            header(1, 2, (0, 0), 100),
            header(2, 2, (1, 2), 100),
            header(4, 2, (3, 2), 300),
            header(5, 2, (4, 2), 300),
        ]
        .into_iter()
        .map(|h| (h.sequence, h))
        .collect();
        let chain = choose_chain(&headers);
        assert_eq!(chain, vec![1, 2]);
        let hidden = HiddenOffsets::new(&headers, &chain, [3, 6]);
        assert_eq!(hidden.entry_ids(3), entry_id(103, 0)..=entry_id(303, LAST));
        assert_eq!(hidden.entry_ids(6), entry_id(106, 0)..=u64::MAX);

        // Several objects linking to it: the least offset of those that agree on its
        // epoch bounds it (a claim carries its opening object's offset and link).
        let mut headers = headers;
        let mut claim = header(7, 9, (3, 2), 350);
        claim.claim = true;
        headers.insert(7, claim);
        headers.insert(8, header(8, 9, (3, 2), 350));
        let hidden = HiddenOffsets::new(&headers, &chain, [3]);
        assert_eq!(hidden.entry_ids(3), entry_id(103, 0)..=entry_id(303, LAST));
        // Objects that disagree on its epoch: one side is wrong about it, and it may be
        // either, so the largest of each epoch's least.
        headers.insert(9, header(9, 10, (3, 9), 50));
        let hidden = HiddenOffsets::new(&headers, &chain, [3]);
        assert_eq!(hidden.entry_ids(3), entry_id(103, 0)..=entry_id(303, LAST));
        headers.remove(&4);
        let hidden = HiddenOffsets::new(&headers, &chain, [3]);
        assert_eq!(hidden.entry_ids(3), entry_id(103, 0)..=entry_id(353, LAST));
    }
}
