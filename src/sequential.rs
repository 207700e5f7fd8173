//! The sequential front end: [`ObjectStoreLogStore`], for callers without actors.
//!
//! It drives the same steps as the actor runtime's writer, one object at a time: the
//! open (recovery and fencing), then [`append`](ObjectStoreLogStore::append) into the
//! open batch and [`flush`](ObjectStoreLogStore::flush) to seal, persist and commit it
//! as the next object of the epoch. A failed flush ends the epoch;
//! [`reopen`](ObjectStoreLogStore::reopen) starts a new one. Reads go through the shared
//! catalog, lazily.
//!
//! Metrics ([`crate::metrics`]): an append's latency runs from `append` to the `flush`
//! that made it durable; pending bytes, uploads in flight, failed appends, restarts and
//! reclaims are the actor runtime's.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use futures::stream::BoxStream;
use object_store::ObjectStore;
use tracing::{info_span, warn, Instrument};

use crate::batch::{Admit, AppendParts, AppendReceipt, Batch};
use crate::catalog::Catalog;
use crate::clock::{BootClock, CreateClock};
use crate::config::Config;
use crate::epoch::{Epoch, EpochState};
use crate::error::{Error, Result};
use crate::objects::WalIo;
use crate::open::{open_instance, recover, Opened, RecoveryReport};
use crate::persist::persist_within;
use crate::read::{follow_read_only, read_region, Entry};

/// The receipt of one flushed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReceipt {
    /// The object's sequence.
    pub sequence: u64,
    /// One receipt per append, in admission order.
    pub appends: Vec<AppendReceipt>,
}

/// The writing side of an instance opened as the writer.
#[derive(Debug)]
struct Writing {
    epoch: Epoch,
    batch: Batch,
    /// When each append of the open batch was admitted (its latency's start).
    admitted: Vec<Instant>,
}

impl Writing {
    fn new(opened: &Opened, config: &Config) -> Self {
        Writing {
            epoch: Epoch::new(opened.epoch, opened.opening_started, config.link_window()),
            batch: Batch::new(config.batch_limits()),
            admitted: Vec::new(),
        }
    }
}

/// A WAL on one prefix of one object store.
///
/// Open it with [`open`](Self::open) (recovery and fencing: every earlier instance is
/// fenced) or [`open_read_only`](Self::open_read_only) (recovery only: it writes nothing
/// and fences nobody).
#[derive(Debug)]
pub struct ObjectStoreLogStore {
    io: WalIo,
    config: Config,
    catalog: Arc<RwLock<Catalog>>,
    report: RecoveryReport,
    writing: Option<Writing>,
    clock: Arc<dyn CreateClock>,
}

impl ObjectStoreLogStore {
    /// Opens the prefix as its writer: recovers the chain, claims holes, writes the
    /// opening object (fencing every earlier instance) and starts a new epoch.
    pub async fn open(store: Arc<dyn ObjectStore>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = WalIo::for_config(store, &config)?;
        let opened = open_instance(&io, &config).await?;
        Ok(ObjectStoreLogStore {
            writing: Some(Writing::new(&opened, &config)),
            io,
            catalog: Arc::new(RwLock::new(opened.recovery.catalog)),
            report: opened.recovery.report,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix for reading only: recovery (steps 1 and 2), no write, no fencing.
    pub async fn open_read_only(store: Arc<dyn ObjectStore>, config: Config) -> Result<Self> {
        config.validate()?;
        let io = WalIo::for_config(store, &config)?;
        let recovery = recover(&io, config.recovery_concurrency)
            .instrument(info_span!("recover", prefix = %io.prefix()))
            .await?;
        Ok(ObjectStoreLogStore {
            io,
            catalog: Arc::new(RwLock::new(recovery.catalog)),
            report: recovery.report,
            writing: None,
            config,
            clock: Arc::new(BootClock),
        })
    }

    /// Opens the prefix again after the epoch ended: a fresh recovery and a new epoch.
    /// Admitted but unflushed appends are dropped (they were never sent).
    pub async fn reopen(&mut self) -> Result<()> {
        if self.writing.is_none() {
            return Err(Error::ReadOnly);
        }
        let opened = open_instance(&self.io, &self.config).await?;
        self.writing = Some(Writing::new(&opened, &self.config));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = opened.recovery.catalog;
        self.report = opened.recovery.report;
        Ok(())
    }

    /// Measures creates on `clock` instead of [`BootClock`] (tests drive it by hand).
    pub fn with_clock(mut self, clock: Arc<dyn CreateClock>) -> Self {
        if let Some(w) = self.writing.as_mut() {
            w.epoch.restart_clock(clock.now());
        }
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store access of this WAL.
    #[doc(hidden)]
    pub fn io(&self) -> &WalIo {
        &self.io
    }

    /// What recovery found at the last open.
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The catalog, shared with reads.
    #[doc(hidden)]
    pub fn catalog(&self) -> Arc<RwLock<Catalog>> {
        self.catalog.clone()
    }

    /// The write position, `None` when read-only.
    pub fn epoch(&self) -> Option<EpochState> {
        self.writing.as_ref().map(|w| w.epoch.position())
    }

    /// Admits an append (one or more regions, atomically) into the open batch; returns its
    /// index among the batch's appends. [`Error::BatchFull`]: flush first.
    pub fn append(&mut self, parts: AppendParts) -> Result<usize> {
        let writing = self.writing.as_mut().ok_or(Error::ReadOnly)?;
        writing.epoch.ensure_open()?;
        let index = writing.batch.admit(parts).map_err(|a| match a {
            Admit::Full(_) => Error::BatchFull,
            Admit::Invalid(e) => e,
        })?;
        writing.admitted.push(Instant::now());
        Ok(index)
    }

    /// Flushes the open batch as the next object (seal, persist, commit) and returns the
    /// ids of its appends; `None` when nothing was admitted.
    ///
    /// A failure ends the epoch (or fences the instance): nothing more is written under
    /// it, and [`reopen`](Self::reopen) starts a new one.
    pub async fn flush(&mut self) -> Result<Option<FlushReceipt>> {
        let writing = self.writing.as_mut().ok_or(Error::ReadOnly)?;
        writing.epoch.ensure_open()?;
        if writing.batch.is_empty() {
            return Ok(None);
        }
        let sequence = writing.epoch.position().next_sequence;
        if let Err(error) = writing.epoch.start_create(sequence, self.clock.now()) {
            writing.epoch.end(error.clone());
            return Err(error);
        }
        let floor = writing.epoch.position().floor;
        let sealed = writing.epoch.seal(&mut writing.batch, floor)?;
        let sealed_at = Instant::now();
        let admitted = std::mem::take(&mut writing.admitted);
        let outcome = persist_within(
            &self.io,
            &sealed.encoded,
            &self.config.retry,
            self.config.max_create_duration,
            self.clock.as_ref(),
        )
        .instrument(info_span!("upload", sequence, bytes = sealed.encoded.len()))
        .await;
        if let Some(error) = outcome.error(&self.io, writing.epoch.number(), sequence) {
            warn!(sequence, error = %error, "object not acknowledged; the epoch is over");
            writing.epoch.end(error.clone());
            return Err(error);
        }
        let live_objects = {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            catalog.commit(&sealed.encoded)?;
            catalog.object_count()
        };
        let metrics = self.io.metrics();
        metrics.acknowledged(&sealed, sealed_at.elapsed(), live_objects);
        for at in admitted {
            metrics.append_to_durable.record(at.elapsed());
        }
        Ok(Some(FlushReceipt {
            sequence,
            appends: sealed.receipts,
        }))
    }

    /// Appends one append and flushes it at once, alone or with what was admitted before.
    pub async fn append_and_flush(&mut self, parts: AppendParts) -> Result<AppendReceipt> {
        let index = match self.append(parts.clone()) {
            Err(Error::BatchFull) => {
                self.flush().await?;
                self.append(parts)?
            }
            other => other?,
        };
        let receipt = self.flush().await?;
        receipt
            .and_then(|r| r.appends.into_iter().nth(index))
            .ok_or(Error::EmptyAppend)
    }

    /// The last entry id of `region` on the chain.
    pub fn last_entry_id(&self, region: u64) -> Option<u64> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last_entry_id(region)
    }

    /// The largest entry id of any region on the chain.
    pub fn last_entry_id_overall(&self) -> Option<u64> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .last_entry_id_overall()
    }

    /// Region `region`'s entries with id `>= from`, in order, fetched lazily: one ranged
    /// read of exactly each segment's bytes, verified before decoding, at most
    /// `read_ahead` segments ahead of the consumer.
    pub fn read(&self, region: u64, from: u64) -> BoxStream<'static, Result<Entry>> {
        read_region(
            self.io.clone(),
            self.catalog.clone(),
            region,
            from,
            self.config.read_ahead,
            self.config.corrupt_segment_policy,
        )
    }

    /// Follows `region` from `from` by polling the prefix every `poll_interval` (see
    /// [`follow_read_only`]); meant for a read-only open of another node's prefix.
    pub fn follow(
        &self,
        region: u64,
        from: u64,
        poll_interval: Duration,
    ) -> BoxStream<'static, Result<Entry>> {
        follow_read_only(
            self.io.clone(),
            self.config.clone(),
            region,
            from,
            poll_interval,
        )
    }
}
