//! The source logs a node takes regions from (DESIGN.md "Regions moving between
//! nodes", catch-up).
//!
//! A source prefix is opened read-only on the first catch-up from it (recovery, then
//! probing as a read-only follower does), and every later catch-up from it reads over
//! that one catalog, segment cache and cache of whole objects: the node fetches each
//! source object once, however many of its regions it takes (DESIGN.md "Catch-up"
//! says when an object costs more). Opens run in tasks of their own, off
//! the supervisor's mailbox; catch-ups asked for meanwhile wait for theirs.
//!
//! Bounded: at most [`MAX_SOURCES`] sources are kept, the most recently used, and as
//! many opened at once (a catch-up of yet another is refused with
//! [`Error::Backpressure`]); one dropped ends once its last catch-up does. A source no
//! catch-up has read over for `Config::source_idle_close` (30 s by default) is dropped
//! too: kept, it would poll its owner and read each new object for nothing. A node sets
//! it above the time between its rounds of moves, or it reopens each source every round.
//! The supervisor sweeps for idle sources every `min(5 s, source_idle_close / 2)` while
//! one is open ([`sweep_every`]): a source is dropped between `source_idle_close` after
//! its last catch-up ended and two sweeps later, so at most twice the bound below 10 s,
//! and at most 10 s late above it; and no timer runs while none is open. A source
//! whose polling failed (a store error ends it for good) is opened again by the next
//! catch-up from it. Each reads through the WAL's store access (its requests count in
//! the WAL's metrics) and closes with it, so every task of a source ends when the WAL
//! stops or is aborted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::{Config, Error, Result, SourceLog};
use ractor::{ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info_span, warn};

use crate::messages::{stopped, EntryReceiver, InternalMsg, WalMsg};
use crate::reader::forward;

/// Source logs kept open at most (the most recently used): a node takes regions from a
/// few others at a time, and each keeps a catalog, a segment cache and up to
/// `SOURCE_OBJECT_BYTES` (8 MiB) of whole objects.
pub const MAX_SOURCES: usize = 8;

/// The longest interval between two sweeps for idle sources.
const SOURCE_SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How often the supervisor looks for idle sources while any is open, for sources
/// dropped once idle for `idle_close`: every 5 s, or at half the bound when it is below
/// 10 s, so that a source is never kept more than twice as long as the bound says
/// (`Config::validate` keeps the bound at 1 s or more, so this is at least 500 ms).
pub(crate) fn sweep_every(idle_close: Duration) -> Duration {
    SOURCE_SWEEP_EVERY.min(idle_close / 2)
}

/// Catch-ups waiting for their source's open at most; the next is refused with
/// [`Error::Backpressure`].
const MAX_WAITING: usize = 1024;

/// The shortest interval between two probes of a source for new objects.
const POLL_FLOOR: Duration = Duration::from_millis(10);

/// A catch-up of a region from a source log, as the supervisor received it.
#[derive(Debug)]
pub(crate) struct CatchUp {
    /// The source log's prefix.
    pub source: String,
    /// The region.
    pub region: u64,
    /// The first id wanted.
    pub from: u64,
    /// The last id wanted: the source's release's last id.
    pub through: u64,
    /// The object that recorded the release, if known: probed for at once.
    pub released_in: Option<u64>,
    /// When the whole catch-up (the source's open included) must be done.
    pub deadline: Instant,
    /// Gets the entries.
    pub reply: RpcReplyPort<Result<EntryReceiver>>,
}

impl CatchUp {
    /// Refuses it with [`Error::Backpressure`]: `held` of `max` are taken.
    fn refuse_busy(self, held: usize, max: usize) {
        let _ = self.reply.send(Err(Error::Backpressure {
            limit: object_store_wal::BackpressureLimit::QueuedRequests,
            held: held as u64,
            max: max as u64,
        }));
    }

    /// Starts the catch-up over `source` and answers with its entries.
    fn start(self, source: &SourceLog) {
        if self.reply.is_closed() {
            // Its caller gave up waiting: nothing to read for.
            return;
        }
        let within = self.deadline.saturating_duration_since(Instant::now());
        let entries = source.catch_up_to(
            self.region,
            self.from,
            self.through,
            self.released_in,
            within,
        );
        let span = info_span!("catch_up", source = %self.source, region = self.region);
        let _ = self.reply.send(Ok(forward(entries, span)));
    }
}

/// The open source logs, the opens in flight and the catch-ups waiting for them.
pub(crate) struct Sources {
    open: HashMap<String, Kept>,
    opening: HashMap<String, Opening>,
    /// Counts uses: a source's `last_used` orders the sources by recency.
    uses: u64,
    /// The sweep scheduled (one at a time), aborted at the stop.
    sweep: Option<JoinHandle<()>>,
    /// A source idle this long is dropped (`Config::source_idle_close`).
    idle_close: Duration,
}

struct Kept {
    log: Arc<SourceLog>,
    last_used: u64,
    /// Since when no catch-up has read over it (seen by a sweep).
    idle_since: Option<Instant>,
}

struct Opening {
    task: JoinHandle<()>,
    waiting: Vec<CatchUp>,
}

impl Drop for Sources {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Sources {
    /// No source yet; one no catch-up has read over for `idle_close` will be dropped
    /// (`Config::source_idle_close`).
    pub(crate) fn new(idle_close: Duration) -> Self {
        Sources {
            open: HashMap::new(),
            opening: HashMap::new(),
            uses: 0,
            sweep: None,
            idle_close,
        }
    }

    /// Serves `catch_up` over its source, opening the source first if it is not open
    /// (the answer of the open comes back to `myself` as [`InternalMsg::SourceOpened`]).
    pub(crate) fn catch_up(
        &mut self,
        catch_up: CatchUp,
        io: &WalIo,
        config: &Config,
        myself: &ActorRef<WalMsg>,
    ) {
        self.uses += 1;
        if let Some(kept) = self.open.get_mut(&catch_up.source) {
            if !kept.log.has_failed() {
                kept.last_used = self.uses;
                // Idle from its readers' end: a sweep may never see a short catch-up.
                kept.idle_since = None;
                return catch_up.start(&kept.log);
            }
            // Its polling failed for good (a store error): opened again below.
            self.open.remove(&catch_up.source);
        }
        if let Some(opening) = self.opening.get_mut(&catch_up.source) {
            if opening.waiting.len() >= MAX_WAITING {
                return catch_up.refuse_busy(opening.waiting.len(), MAX_WAITING);
            }
            opening.waiting.push(catch_up);
            return;
        }
        if self.opening.len() >= MAX_SOURCES {
            // Each open recovers a whole chain: a few at a time.
            return catch_up.refuse_busy(self.opening.len(), MAX_SOURCES);
        }
        let source_io = match io.at_prefix(&catch_up.source, config) {
            Ok(source_io) => source_io,
            Err(e) => {
                let _ = catch_up.reply.send(Err(e));
                return;
            }
        };
        let prefix = catch_up.source.clone();
        let (config, myself) = (config.clone(), myself.clone());
        let poll = config.min_object_interval.max(POLL_FLOOR);
        let span = info_span!("source", prefix = %prefix);
        let opened_prefix = prefix.clone();
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                let result = SourceLog::open(source_io, config, poll).await;
                let opened = InternalMsg::SourceOpened {
                    source: opened_prefix,
                    result: result.map(Arc::new),
                };
                // A supervisor that stopped meanwhile drops it: nothing waits.
                let _ = myself.cast(opened.into());
            },
            span,
        ));
        self.opening.insert(
            prefix,
            Opening {
                task,
                waiting: vec![catch_up],
            },
        );
    }

    /// The open of `source` finished: its waiting catch-ups start, or get its error.
    pub(crate) fn opened(&mut self, source: String, result: Result<Arc<SourceLog>>) {
        let Some(opening) = self.opening.remove(&source) else {
            return;
        };
        let log = match result {
            Ok(log) => log,
            Err(e) => {
                warn!(source = %source, error = %e, "cannot open a source log");
                for catch_up in opening.waiting {
                    let _ = catch_up.reply.send(Err(e.clone()));
                }
                return;
            }
        };
        for catch_up in opening.waiting {
            catch_up.start(&log);
        }
        if self.open.len() >= MAX_SOURCES {
            // Dropped here, it ends once its last catch-up does.
            let oldest = self.open.iter().min_by_key(|(_, k)| k.last_used);
            if let Some(oldest) = oldest.map(|(p, _)| p.clone()) {
                self.open.remove(&oldest);
            }
        }
        self.uses += 1;
        let last_used = self.uses;
        self.open.insert(
            source,
            Kept {
                log,
                last_used,
                idle_since: None,
            },
        );
    }

    /// Drops the sources no catch-up has read over for `idle_close`, counted from the
    /// first sweep that found each idle (their polling ends with them).
    pub(crate) fn sweep(&mut self, now: Instant) {
        self.sweep = None;
        let idle_close = self.idle_close;
        self.open.retain(|source, kept| {
            if kept.log.readers() > 0 {
                kept.idle_since = None;
                return true;
            }
            let since = *kept.idle_since.get_or_insert(now);
            let keep = now.saturating_duration_since(since) < idle_close;
            if !keep {
                tracing::debug!(source = %source, "closing an idle source log");
            }
            keep
        });
    }

    /// Schedules a sweep [`sweep_every`] from now (`send` sends its message) if a source
    /// is open and none is scheduled.
    pub(crate) fn schedule_sweep(&mut self, send: impl FnOnce() + Send + 'static) {
        if self.open.is_empty() || self.sweep.is_some() {
            return;
        }
        let after = sweep_every(self.idle_close);
        self.sweep = Some(tokio::spawn(async move {
            tokio::time::sleep(after).await;
            send();
        }));
    }

    /// Ends every open in flight (its catch-ups get [`Error::Stopped`]) and drops the
    /// open sources (their tasks end with the WAL's store access).
    pub(crate) fn stop(&mut self) {
        for (_, opening) in self.opening.drain() {
            opening.task.abort();
            for catch_up in opening.waiting {
                let _ = catch_up.reply.send(Err(stopped()));
            }
        }
        self.open.clear();
        if let Some(sweep) = self.sweep.take() {
            sweep.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the configuration's docs promise: a source idle for the bound is dropped at
    /// most two sweeps later, which is at most twice the bound below 10 s and at most
    /// 10 s late above it; and sweeps never come more than twice a second.
    #[test]
    fn sweeps_come_often_enough_for_the_bound_and_no_more() {
        let second = Duration::from_secs(1);
        for idle in [1, 2, 4, 9, 10, 11, 30, 3600, 365 * 24 * 3600].map(|s| s * second) {
            let sweep = sweep_every(idle);
            let latest = idle + 2 * sweep;
            let promised = if idle < 10 * second {
                2 * idle
            } else {
                idle + 10 * second
            };
            assert!(
                latest <= promised,
                "{idle:?}: dropped as late as {latest:?}"
            );
            assert!(sweep >= second / 2, "{idle:?}: a sweep every {sweep:?}");
        }
    }
}
