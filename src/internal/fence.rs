//! The fence (DESIGN.md "A node's regions after it died"): a node that is not a
//! prefix's owner closes it for good, so that its owner, dead or a zombie, can never
//! acknowledge anything more there, and learns what the prefix holds of each region,
//! for the regions' new owners to take over.
//!
//! The fence is an open (the writer's steps, `open::open_as`) whose opening object is
//! **closed** (FORMAT.md "Version 4"): it lists the prefix and reads every summary (no
//! replay), claims every hole above the chain end and `ahead` keys more, and only then
//! creates the closed object above them, in an epoch above every one present. Every
//! rule of an open holds for it (an `AlreadyExists` or an unknown outcome starts over
//! from a fresh listing; the listing's age and the create's duration are bounded). Once
//! the closed object is durable, every writer open of the prefix fails
//! [`Error::PrefixClosed`], so nothing lands on the fenced chain after it: the chain it
//! ends is final.
//!
//! Retirement ([`retire`]) frees a fenced prefix once its regions' new owners no longer
//! need it: every key but the closed object, which stays as a tombstone (a zombie's
//! reopen still finds it), no earlier than `reclaim_grace` after the fence landed.
//! [`holdings_of`] is what a prefix holds of each region, read-only (`walctl regions`,
//! and retirement's check that no other prefix still names it as a piece).
//!
//! Uses `store`, `chain`, `open` (the open's steps) and `read` (the control snapshot):
//! the one module above both.

use std::time::{Duration, SystemTime};

use futures::stream::{self, StreamExt};

use crate::config::Config;
use crate::error::{Error, Released, Result};
use crate::format::control::CONTROL_REGION;
use crate::format::{entry_id, Header, MAX_SEGMENT_ENTRIES};
use crate::internal::chain::holdings::{Piece, RegionHolding};
use crate::internal::open::{open_as, recover_in, OpenAs, OpenedAs, RecoveryReport};
use crate::internal::read::{read_holdings, read_open_holdings};
use crate::internal::store::objects::WalIo;
use crate::internal::store::stores::WalStores;
use crate::internal::write::clock::BootClock;

/// What a fence answers ([`fence`]): the closed object, and what the fenced chain holds
/// of each region the prefix owned.
#[derive(Debug, Clone)]
pub struct Fence {
    /// The fenced prefix (a [`Piece::prefix`] of its regions).
    pub prefix: String,
    /// The closed opening object's header: the fenced chain ends at it.
    pub closed: Header,
    /// Whether this call wrote the closed object (`false`: the prefix was fenced
    /// already, and this is the same answer again).
    pub wrote: bool,
    /// Whether the prefix was retired: nothing of its chain is left but the closed
    /// object, so no region is listed (the new owners took them over and flushed them).
    pub retired: bool,
    /// An id above every id base present on the prefix (orphans and claims included):
    /// the new owners acquire above it. The same for every region.
    pub acquire_above: u64,
    /// The regions the prefix owned, in region order: those with entries on the fenced
    /// chain or earlier pieces recorded, not those it had released.
    pub regions: Vec<FencedRegion>,
    /// The regions the prefix had released, in region order, each with the last id
    /// its release recorded: their next owner acquired them, or will. A coordinator
    /// that never learned of such a release (the node died before its answer arrived)
    /// takes the region over like the others, from these ids.
    pub released: Vec<FencedRegion>,
    /// The recovery the answer rests on (what was read, what is orphaned or damaged).
    pub report: RecoveryReport,
}

/// What a fenced prefix holds of one region it owned ([`Fence::regions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedRegion {
    /// The region.
    pub region: u64,
    /// Its ids on the fenced chain in the prefix's current tenure of it, first and last
    /// (`None`: no entry of it is live there): above its earlier pieces' ids (a region
    /// released and taken back has an earlier tenure's ids below them). A catch-up from
    /// the fenced prefix ends at the last.
    pub ids: Option<(u64, u64)>,
    /// Its pieces in earlier owners' logs that the prefix recorded, by first id.
    pub pieces: Vec<Piece>,
    /// What a release would have answered: its last id on the fenced chain, the
    /// fence's `acquire_above`, and the closed object's sequence (for
    /// `catch_up_released`).
    pub released: Released,
}

impl FencedRegion {
    /// The pieces a new owner records when it acquires the region
    /// (`acquire_with_pieces`): the earlier pieces, then the fenced prefix's own
    /// (`prefix`: [`Fence::prefix`]), if it holds any of the region's entries.
    pub fn pieces_with(&self, prefix: &str) -> Vec<Piece> {
        let own = self.ids.map(|(first_id, last_id)| Piece {
            prefix: prefix.to_string(),
            first_id,
            last_id,
        });
        self.pieces.iter().cloned().chain(own).collect()
    }
}

/// Claims a fence writes above the largest sequence present at its first attempt, at
/// least: a zombie's creates in flight when the fence lists land on a claim, which
/// fences the zombie, rather than on the closed object's key, which would make the
/// fence start over. Four times the config's `max_in_flight` is used when larger (the
/// zombie's, as a rule: its creates in flight, and those it starts while the fence
/// lists and reads); each attempt that starts over doubles it (a zombie that kept
/// writing while the fence listed may have taken every key claimed), up to
/// [`FENCE_CLAIMS_MOST`].
pub const FENCE_CLAIMS_AHEAD: u64 = 16;

pub use crate::internal::open::FENCE_CLAIMS_MOST;

/// Fences the prefix `config.prefix` on `stores` for good, for a node that is not its
/// owner (see the module docs), and answers what it holds of each region
/// ([`Fence`]). Answers only once the closed object is durable (over several stores,
/// on a quorum). A prefix fenced already is answered again from its chain, writing
/// nothing. Fails [`Error::WalMissing`] for a prefix that holds no WAL (writing
/// nothing), and as an open does: [`Error::OpenContended`] when every attempt lost a
/// race (its owner is still writing: ask again), a store's error, or damage.
pub async fn fence(stores: impl Into<WalStores>, config: &Config) -> Result<Fence> {
    config.validate()?;
    let io = stores.into().into_io(config)?;
    fence_io(&io, config).await
}

/// The keys a fence claims ahead of the largest one present on its first attempt
/// (doubled on each restart): [`FENCE_CLAIMS_AHEAD`], or 4 × `max_in_flight`.
pub fn claims_ahead(config: &Config) -> u64 {
    FENCE_CLAIMS_AHEAD.max(4 * config.max_in_flight as u64)
}

/// [`fence`] over a store access.
pub async fn fence_io(io: &WalIo, config: &Config) -> Result<Fence> {
    let ahead = claims_ahead(config);
    let (mut recovery, wrote) =
        match open_as(io, config, &BootClock, OpenAs::Fence { ahead }).await? {
            OpenedAs::Opened(opened) => (opened.recovery, true),
            OpenedAs::Closed(recovery) => (recovery, false),
        };
    let closed_sequence = recovery.report.closed.unwrap_or_default();
    let closed = recovery
        .report
        .objects
        .iter()
        .map(|o| o.header)
        .chain(recovery.report.chain_end)
        .find(|h| h.closed && h.sequence == closed_sequence)
        .ok_or_else(|| Error::InconsistentChain {
            sequence: closed_sequence,
            reason: "the fence's closed object is not among the objects read".into(),
        })?;
    // The answer is the chain that ends at the closed object. Nothing of it left below
    // the closed object: retired. Something left, but no chain to the closed object (a
    // retirement under way, or point-in-time recovery stopping at damage below it): no
    // answer can be given from it.
    let ends_at_closed = recovery.report.chain_end == Some(closed);
    let below = recovery
        .report
        .objects
        .iter()
        .any(|o| o.header.sequence < closed.sequence)
        || !recovery.report.given_up_damaged.is_empty();
    if !ends_at_closed && below {
        return Err(Error::InconsistentChain {
            sequence: closed.sequence,
            reason: "the fenced chain, which ends at the closed object, cannot be recovered \
                     whole (a retirement under way: retire again; or damage below it)"
                .into(),
        });
    }
    let retired = !ends_at_closed;
    let acquire_above = entry_id(closed.id_base(), MAX_SEGMENT_ENTRIES - 1);
    let prefix = io.prefix().to_string();
    let mut regions = Vec::new();
    let mut released = Vec::new();
    if !retired {
        let holdings = read_open_holdings(io, config.recovery_mode, &mut recovery).await?;
        let catalog = &recovery.catalog;
        let mut owned: Vec<u64> = catalog
            .regions()
            .chain(holdings.regions_with_pieces())
            .filter(|r| *r != CONTROL_REGION && holdings.released(*r).is_none())
            .collect();
        owned.sort_unstable();
        owned.dedup();
        for region in owned {
            let pieces = holdings.pieces_of(region);
            // The prefix's own piece is its current tenure: the region's ids above its
            // earlier pieces (a region it had released and took back holds an earlier
            // tenure's ids below them, which one of those pieces names).
            let from = pieces
                .iter()
                .map(|p| p.last_id.saturating_add(1))
                .max()
                .unwrap_or(0);
            let first = catalog
                .segments_from(region, from)
                .first()
                .map(|s| s.record.first_entry_id.max(from));
            let ids = first.zip(catalog.last_entry_id(region));
            regions.push(FencedRegion {
                region,
                ids,
                pieces,
                released: Released {
                    last_id: ids.map(|(_, last)| last),
                    acquire_above,
                    sequence: Some(closed.sequence),
                },
            });
        }
        for (region, last_id) in holdings.released_regions() {
            released.push(FencedRegion {
                region,
                ids: catalog.entry_ids(region),
                pieces: Vec::new(),
                released: Released {
                    last_id,
                    acquire_above,
                    sequence: Some(closed.sequence),
                },
            });
        }
    }
    tracing::info!(prefix = %prefix, sequence = closed.sequence, wrote, retired,
        regions = regions.len(), "fenced");
    Ok(Fence {
        prefix,
        closed,
        wrote,
        retired,
        acquire_above,
        regions,
        released,
        report: recovery.report,
    })
}

/// What a prefix holds of each region, read-only ([`holdings_of`]).
#[derive(Debug, Clone)]
pub struct PrefixHoldings {
    /// The prefix.
    pub prefix: String,
    /// The closed opening object's sequence, if the prefix was fenced.
    pub closed: Option<u64>,
    /// Whether the prefix holds a WAL (any WAL object listed).
    pub has_wal: bool,
    /// Each region's ids on the live chain, release and earlier pieces, in region
    /// order (as a live WAL's `holdings` lists them). A release's `acquire_above` is
    /// above every id base present.
    pub regions: Vec<RegionHolding>,
}

/// What the prefix `config.prefix` on `stores` holds of each region, read-only (a
/// recovery and one read of the last control snapshot; nothing written, nothing
/// fenced). A prefix that holds nothing lists nothing.
pub async fn holdings_of(stores: impl Into<WalStores>, config: &Config) -> Result<PrefixHoldings> {
    config.validate()?;
    let io = stores.into().into_io(config)?;
    holdings_io(&io, config).await
}

/// [`holdings_of`] over a store access.
pub async fn holdings_io(io: &WalIo, config: &Config) -> Result<PrefixHoldings> {
    let recovered = recover_in(io, config.recovery_concurrency, config.recovery_mode).await?;
    let holdings = read_holdings(io, &recovered.catalog).await?;
    let above = recovered
        .report
        .max_id_base
        .saturating_add(1)
        .min(crate::format::MAX_SEQUENCE);
    let acquire_above = entry_id(above, MAX_SEGMENT_ENTRIES - 1);
    Ok(PrefixHoldings {
        prefix: io.prefix().to_string(),
        closed: recovered.report.closed,
        has_wal: recovered.report.max_sequence > 0,
        regions: holdings.region_holdings(&recovered.catalog, acquire_above),
    })
}

/// How long after the fence's closed object landed a retirement may delete: the
/// grace, `reclaim_grace`, plus a margin of `max_create_duration`. Without a margin
/// the bound is exact: a zombie whose last create started just before the fence may
/// start its next one a link window (`reclaim_grace - max_create_duration`) later and
/// still have it acknowledged a `max_create_duration` after that, exactly
/// `reclaim_grace` after the fence (the fence explorer's mutation "retire at exactly
/// the grace"); the margin also absorbs a retiring host's clock running ahead of the
/// store's by up to `max_create_duration`.
pub fn retire_after(config: &Config) -> Duration {
    config
        .reclaim_grace
        .saturating_add(config.max_create_duration)
}

/// What a retirement did ([`retire`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    /// The closed object's sequence: the tombstone kept.
    pub closed: u64,
    /// The keys deleted (over several stores, each key once however many copies).
    pub deleted: usize,
}

/// Retires the fenced prefix `config.prefix` on `stores` (DESIGN.md "A node's regions
/// after it died"): deletes every WAL key under it except the closed opening object,
/// kept as a tombstone so that a zombie's reopen still finds it (and `create_if_missing`
/// never starts a WAL there). Refused, deleting nothing: a prefix not fenced
/// ([`Error::NotFenced`]); before `reclaim_grace` plus a margin of
/// `max_create_duration` ([`retire_after`]) passed since the closed object landed, by
/// the store's clock against this host's ([`Error::RetireTooEarly`]: a create of the
/// old owner stalled in the air could still land on a key it frees); and while one of
/// `others` (the prefixes of the live nodes) names it as a piece of a region, not
/// flushed yet ([`Error::PieceStillNeeded`], naming the prefix and region), or holds no
/// WAL ([`Error::WalMissing`]: a misspelt prefix checks nothing). Asked again over a
/// retired prefix it deletes nothing more; over several stores, ask again once every
/// store is up (a store that was down keeps its copies). The check sees only what the
/// live logs record: a region whose acquire is still under way, or not yet made, is the
/// coordinator's to wait for.
pub async fn retire(
    stores: impl Into<WalStores>,
    config: &Config,
    others: &[String],
) -> Result<Retired> {
    retire_at(stores, config, others, SystemTime::now()).await
}

/// [`retire`] with this host's clock reading `now` (tests: a grace passed without a
/// wait).
pub async fn retire_at(
    stores: impl Into<WalStores>,
    config: &Config,
    others: &[String],
    now: SystemTime,
) -> Result<Retired> {
    config.validate()?;
    let stores = stores.into();
    let io = stores.clone().into_io(config)?;
    let location = io.location();
    let recovered = recover_in(&io, config.recovery_concurrency, config.recovery_mode).await?;
    let closed = recovered
        .report
        .objects
        .iter()
        .filter(|o| o.header.closed)
        .map(|o| o.header.sequence)
        .max()
        .ok_or(Error::NotFenced {
            location: location.clone(),
        })?;
    // Every key present, each with the latest time a store last modified it.
    let listing = io.list().await?;
    let landed = listing
        .objects
        .iter()
        .find(|o| o.sequence == closed)
        .map(|o| o.last_modified)
        .ok_or(Error::NotFenced {
            location: location.clone(),
        })?;
    let since = now.duration_since(landed).unwrap_or(Duration::ZERO);
    let grace = retire_after(config);
    if since < grace {
        return Err(Error::RetireTooEarly {
            location,
            since,
            grace,
        });
    }
    let prefix = io.prefix().to_string();
    for other in others.iter().filter(|o| **o != prefix) {
        let mut other_config = config.clone();
        other_config.prefix = other.clone();
        let held = holdings_of(stores.clone(), &other_config).await?;
        // A live prefix that holds no WAL is a mistake (a typo), not a check passed.
        if !held.has_wal {
            return Err(Error::WalMissing {
                location: format!("{location} (live prefix {other})"),
            });
        }
        let naming = held
            .regions
            .iter()
            .find(|h| h.pieces.iter().any(|p| p.prefix == prefix));
        if let Some(holding) = naming {
            return Err(Error::PieceStillNeeded {
                location,
                prefix: other.clone(),
                region: holding.region,
            });
        }
    }
    let doomed: Vec<u64> = listing
        .objects
        .iter()
        .map(|o| o.sequence)
        .filter(|s| *s != closed)
        .collect();
    let deleted = doomed.len();
    let results: Vec<Result<()>> = stream::iter(doomed)
        .map(|sequence| {
            let io = io.clone();
            async move { io.delete(sequence).await }
        })
        .buffer_unordered(config.recovery_concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    tracing::info!(prefix = %prefix, closed, deleted, "retired");
    Ok(Retired { closed, deleted })
}
