//! The writer's open (DESIGN.md "Opening an instance", steps 3 and 4): after recovery,
//! claim every hole above the chain end and, only once every claim is created, create
//! the opening object above everything present, in a new epoch: that fences every
//! earlier instance. An `AlreadyExists` or an unknown outcome is never taken as success:
//! the open starts over from a fresh listing, reusing the summaries it already read.
//!
//! A writer that reopens after its epoch ended may also name a sequence to open above
//! ([`open_instance_above`]): the highest whose entry ids it handed out at admission.
//! DESIGN.md puts the opening object at `M + 1`, `M` the largest sequence present; ids
//! handed out in objects that were never created are not present, so `M` is taken at
//! least that high, and the sequences up to it are claimed like any other hole (the
//! fencing argument is the same for a larger `M`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use tracing::{debug, info, info_span, Instrument};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::format::{encode_object, EncodedObject, Link};
use crate::internal::chain::catalog::plan_opening_above;
use crate::internal::store::objects::{CreateAttempt, CreateKind, SummaryRead, WalIo};
use crate::internal::write::clock::{BootClock, CreateClock};
use crate::internal::write::epoch::create_too_slow;
use crate::internal::write::epoch::WritePosition;

use super::recover::*;

/// An instance that finished opening: its recovered catalog and its epoch.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The recovery (the catalog includes the opening object).
    pub recovery: Recovered,
    /// Where writing starts.
    pub epoch: WritePosition,
    /// When the opening object's create started, on the open's [`CreateClock`].
    pub opening_started: Duration,
}

/// The whole open (DESIGN.md "Opening an instance", steps 1 to 4): recover, claim every
/// hole above the chain end, and only once every claim is created, create the opening
/// object. An `AlreadyExists` or an unknown outcome is never taken as success: the open
/// starts over from the listing, at most `config.open_attempts` times.
pub async fn open_instance(io: &WalIo, config: &Config) -> Result<Opened> {
    open_instance_with(io, config, &BootClock).await
}

/// [`open_instance`], noting on `clock` when the opening object's create started (the
/// writer bounds the time from each create to the next: [`Config::link_window`]).
pub async fn open_instance_with(
    io: &WalIo,
    config: &Config,
    clock: &dyn CreateClock,
) -> Result<Opened> {
    open_instance_above(io, config, clock, 0, 0).await
}

/// [`open_instance_with`] for an instance that reopens after its epoch ended: the
/// opening object goes above `above` as well as above everything present, and every
/// absent sequence up to it is claimed ([`plan_opening_above`]). The actor runtime
/// passes the highest sequence whose entry ids it handed out at admission, and the
/// highest id base (sequence plus id offset) of those ids, so that ids of objects never
/// created (refused, stopped, or lost to an unknown outcome) are never given again by a
/// later epoch.
pub async fn open_instance_above(
    io: &WalIo,
    config: &Config,
    clock: &dyn CreateClock,
    above: u64,
    above_id_base: u64,
) -> Result<Opened> {
    let spec = OpenAs::Writer {
        above,
        above_id_base,
    };
    match open_as(io, config, clock, spec).await? {
        OpenedAs::Opened(opened) => Ok(opened),
        // A writer's open refuses a closed prefix before this: never reached.
        OpenedAs::Closed(recovery) => Err(Error::PrefixClosed {
            location: io.location(),
            sequence: recovery.report.closed.unwrap_or_default(),
        }),
    }
}

/// What an open writes ([`open_as`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum OpenAs {
    /// A writer's opening object (see [`open_instance_above`] for `above` and
    /// `above_id_base`).
    Writer { above: u64, above_id_base: u64 },
    /// The fence's closed opening object (DESIGN.md "A node's regions after it died"),
    /// above every sequence present and `ahead` more, each of those claimed: a busy
    /// zombie's creates in flight at the listing meet the fence's claims (and are
    /// fenced) rather than the closed object, which then lands on the next attempt.
    Fence { ahead: u64 },
}

/// What [`open_as`] ends with.
#[derive(Debug)]
pub(crate) enum OpenedAs {
    /// The opening object (closed, for a fence) is durable.
    Opened(Opened),
    /// A fence found the prefix closed already (its chain ends at the closed object,
    /// or, retired, nothing of its chain is left): nothing written.
    Closed(Recovered),
}

/// The most claims a fence writes ahead of the largest sequence present, however many
/// attempts started over: a burst of claims must not swamp a slow store.
pub const FENCE_CLAIMS_MOST: u64 = 256;

/// The keys a fence claims above the largest present at `attempt` (from 1): `ahead`,
/// doubling with each attempt, so that a zombie that took every claimed key before the
/// claims landed (it kept writing while the fence listed) is outrun by the next one;
/// at most [`FENCE_CLAIMS_MOST`] (or `ahead`, if larger). A writer claims none ahead.
fn claims_ahead(fence_ahead: Option<u64>, attempt: u32) -> u64 {
    let Some(ahead) = fence_ahead else {
        return 0;
    };
    let most = FENCE_CLAIMS_MOST.max(ahead);
    ahead
        .max(1)
        .saturating_mul(1u64 << attempt.saturating_sub(1).min(16))
        .min(most)
}

/// Claims created at once: `recovery_concurrency`; over several stores at most twice
/// `max_in_flight`, so that a burst of claims (a fence's, many) stays below the
/// unanswered creates a store may hold before it is skipped as lagging (four times
/// `max_in_flight`: a store's stragglers finish in the background).
fn claim_concurrency(io: &WalIo, config: &Config) -> usize {
    let most = config.recovery_concurrency.max(1);
    if io.replicas().is_empty() {
        most
    } else {
        config.max_in_flight.saturating_mul(2).clamp(1, most)
    }
}

/// The open's steps for a writer or a fence ([`OpenAs`]).
pub(crate) async fn open_as(
    io: &WalIo,
    config: &Config,
    clock: &dyn CreateClock,
    spec: OpenAs,
) -> Result<OpenedAs> {
    let (above, above_id_base, fence_ahead) = match spec {
        OpenAs::Writer {
            above,
            above_id_base,
        } => (above, above_id_base, None),
        OpenAs::Fence { ahead } => (0, 0, Some(ahead)),
    };
    let started = tokio::time::Instant::now();
    let mut last = String::new();
    let mut cache: BTreeMap<u64, SummaryRead> = BTreeMap::new();
    let mut replica_cache: ReplicaCache = Vec::new();
    let replicated = !io.replicas().is_empty();
    // The store error that ended the last attempt, returned if it was the last one.
    let mut store_error: Option<Error> = None;
    for attempt in 1..=config.open_attempts {
        if attempt > 1 {
            tokio::time::sleep(config.retry.backoff(attempt - 1)).await;
        }
        store_error = None;
        let failed_read = &mut store_error;
        let span = info_span!("open", prefix = %io.prefix(), attempt);
        let step = async {
            // The plan rests on this listing: see the age check before the opening.
            let listed_at = clock.now();
            let mode = config.recovery_mode;
            let recovered = if replicated {
                recover_replicas(
                    io,
                    config.recovery_concurrency,
                    &mut replica_cache,
                    true,
                    mode,
                )
                .await
            } else {
                recover_cached(io, config.recovery_concurrency, &mut cache, mode).await
            };
            let mut recovery = match recovered {
                Ok(recovery) => recovery,
                // A listing or a read that failed, or a key no quorum settles yet:
                // start over, keeping the summaries read (a large prefix under
                // occasional read errors still opens).
                Err(
                    e @ (Error::Store { .. }
                    | Error::NoQuorum { .. }
                    | Error::RequestTimeout { .. }),
                ) => {
                    let why = format!("recovery failed: {e}");
                    *failed_read = Some(e);
                    return Ok(Err(why));
                }
                Err(e) => return Err(e),
            };
            // Unreadable objects that point-in-time recovery went on without still hold
            // their keys: never claimed, never reused.
            let present: Vec<u64> = recovery
                .report
                .objects
                .iter()
                .map(|o| o.header.sequence)
                .chain(recovery.report.given_up_damaged.iter().map(|u| u.sequence))
                .collect();
            // Point-in-time recovery never steps over what may be a fence: an unreadable
            // object of a closed object's size that nothing links to.
            if let Some(u) = recovery
                .report
                .given_up_damaged
                .iter()
                .find(|u| u.may_be_closed)
            {
                return Err(Error::InconsistentChain {
                    sequence: u.sequence,
                    reason: format!(
                        "{} cannot be read ({}) and may be a closed opening object (a \
                         fence): a writer's point-in-time open does not go on without it; \
                         restore it, or delete it if it is known not to be one",
                        io.key(u.sequence),
                        u.error
                    ),
                });
            }
            // Fenced for good (a closed opening object, FORMAT.md "Version 4"): another
            // node took this prefix's regions over. No writer opens it again, and
            // `create_if_missing` never starts a WAL over it.
            if let Some(sequence) = recovery.report.closed {
                if fence_ahead.is_none() {
                    return Err(Error::PrefixClosed {
                        location: io.location(),
                        sequence,
                    });
                }
                // A fence asked again: answered from the chain that ends at the closed
                // object; or, retired, from what is left. A closed copy no quorum
                // holds (a fence that crashed or timed out with its create on one
                // store, or one under way) is an undecided key like any other: this
                // fence plans past it, claiming it where it is absent, and puts its
                // own closed object above (writers stay refused by the lone copy).
                let decided = recovery
                    .report
                    .objects
                    .iter()
                    .any(|o| o.header.sequence == sequence && o.header.closed);
                if decided {
                    return Ok(Ok(OpenedAs::Closed(recovery)));
                }
            }
            // Nothing to recover: a new WAL only when the caller said so, and never
            // for a fence (there is nothing to fence).
            let missing_allowed = config.create_if_missing && fence_ahead.is_none();
            if recovery.report.max_sequence == 0 && !missing_allowed {
                return Err(Error::WalMissing {
                    location: io.location(),
                });
            }
            // Over several stores `M` counts every copy listed, decided or not, and the
            // sequences without a decided value up to it are claimed; over one store it
            // is the largest present.
            let largest = above.max(
                recovery
                    .report
                    .max_sequence
                    .saturating_add(claims_ahead(fence_ahead, attempt)),
            );
            // The new epoch's ids count from above every id base present, orphans and
            // claims included (over several stores, every copy read, decided or not),
            // and every one this instance handed out.
            let id_base = recovery.report.max_id_base.max(above_id_base);
            let mut plan = plan_opening_above(
                &present,
                recovery.report.chain_end.as_ref(),
                largest,
                id_base,
            )?;
            plan.opening.closed = fence_ahead.is_some();
            let claims: Vec<EncodedObject> = plan
                .claims
                .iter()
                .map(|h| encode_object(h, std::iter::empty()))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::EncodeFailed {
                    what: "a claim".into(),
                    reason: e.to_string(),
                })?;
            let outcomes: Vec<CreateAttempt> = stream::iter(claims)
                .map(|c| {
                    let io = io.clone();
                    async move { io.create(&c, CreateKind::Claim).await }
                })
                .buffer_unordered(claim_concurrency(io, config))
                .collect()
                .await;
            for outcome in outcomes {
                match outcome {
                    CreateAttempt::Created => {}
                    CreateAttempt::Unsupported => return Err(io.unsupported()),
                    CreateAttempt::Refused(e) => return Err(e),
                    CreateAttempt::AlreadyExists { .. } => {
                        return Ok(Err("a claim found its sequence taken".to_string()))
                    }
                    CreateAttempt::Unknown(e) | CreateAttempt::Throttled(e) => {
                        return Ok(Err(format!("a claim's outcome is unknown: {e}")))
                    }
                }
            }
            let opening = encode_object(&plan.opening, std::iter::empty()).map_err(|e| {
                Error::EncodeFailed {
                    what: "the opening object".into(),
                    reason: e.to_string(),
                }
            })?;
            let opening_started = clock.now();
            // The same bound as between two creates of an epoch (`Config::link_window`):
            // a newer instance that opened after the listing may have reclaimed keys
            // since, and an opening object planned on an older listing could land on one
            // of them unfenced, above objects that instance acknowledged.
            let age = opening_started.saturating_sub(listed_at);
            if age > config.link_window() {
                return Ok(Err(format!(
                    "the listing is {age:?} old, past the link window, before the opening object"
                )));
            }
            match io.create(&opening, CreateKind::Opening).await {
                CreateAttempt::Created => {
                    // Like any create (`max_create_duration`): one that stalled may have
                    // landed on a key reclaimed meanwhile.
                    let now = clock.now();
                    let too_slow =
                        create_too_slow(opening_started, now, config.max_create_duration);
                    if let Some(took) = too_slow {
                        return Ok(Err(format!(
                            "the opening object's create took {took:?}, past max_create_duration"
                        )));
                    }
                }
                CreateAttempt::Unsupported => return Err(io.unsupported()),
                CreateAttempt::Refused(e) => return Err(e),
                CreateAttempt::AlreadyExists { .. } => {
                    return Ok(Err("the opening object's sequence was taken".to_string()))
                }
                CreateAttempt::Unknown(e) | CreateAttempt::Throttled(e) => {
                    return Ok(Err(format!("the opening object's outcome is unknown: {e}")))
                }
            }
            recovery.catalog.insert(&plan.opening, &[], opening.len())?;
            if plan.opening.closed {
                recovery.report.closed = Some(plan.opening.sequence);
                recovery.report.chain_end = Some(plan.opening);
            }
            info!(
                closed = plan.opening.closed,
                epoch = plan.epoch,
                sequence = plan.opening.sequence,
                claims = plan.claims.len(),
                orphans = recovery.report.orphans,
                damaged_segments = recovery.report.damaged_segments.len(),
                unread_below_floor = recovery.report.unread_below_floor.len(),
                "opened"
            );
            Ok(Ok(OpenedAs::Opened(Opened {
                opening_started,
                recovery,
                epoch: WritePosition {
                    epoch: plan.epoch,
                    next_sequence: plan.opening.sequence + 1,
                    link: Link {
                        sequence: plan.opening.sequence,
                        epoch: plan.epoch,
                    },
                    floor: plan.opening.floor,
                    id_offset: plan.opening.id_offset,
                },
            })))
        };
        match step.instrument(span).await? {
            Ok(OpenedAs::Opened(opened)) => {
                if fence_ahead.is_none() {
                    io.metrics().opened(
                        opened.epoch.epoch,
                        opened.epoch.floor,
                        opened.recovery.catalog.object_count(),
                        started.elapsed(),
                    );
                }
                return Ok(OpenedAs::Opened(opened));
            }
            Ok(closed @ OpenedAs::Closed(_)) => return Ok(closed),
            Err(why) => {
                debug!(attempt, why = %why, "open starts over");
                last = why;
            }
        }
    }
    if let Some(e) = store_error {
        return Err(e);
    }
    Err(Error::OpenContended {
        attempts: config.open_attempts,
        last,
    })
}
