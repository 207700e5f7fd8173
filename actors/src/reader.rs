//! Per-region reader actors: serve reads of one region lazily.
//!
//! A read looks the region's segments up in the shared catalog one at a time (so a read
//! that starts after an append sees it), fetches each with one ranged read of exactly its
//! bytes, checks its CRC, decodes it, and sends the entries into a bounded `flume`
//! channel: a large replay never sits in memory at once, and nothing is fetched beyond
//! `read_ahead` segments ahead of the consumer.

use std::sync::{Arc, RwLock};

use futures::stream::{BoxStream, StreamExt};
use object_store_wal::internal::catalog::Catalog;
use object_store_wal::internal::objects::WalIo;
use object_store_wal::internal::read::{follow_region, read_region};
use object_store_wal::{Config, Entry, Result};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info_span, Instrument};

use crate::messages::{EntryReceiver, ReaderMsg};

/// Entries buffered in a read's channel.
pub const READ_CHANNEL_ENTRIES: usize = 1024;

/// Everything a reader starts with.
pub struct ReaderArgs {
    /// The region.
    pub region: u64,
    /// Store access.
    pub io: WalIo,
    /// Configuration (read-ahead, corrupt-segment policy).
    pub config: Config,
    /// The catalog shared with the writer.
    pub catalog: Arc<RwLock<Catalog>>,
}

/// A region's reader actor.
pub struct ReaderActor;

impl Actor for ReaderActor {
    type Msg = ReaderMsg;
    type State = ReaderArgs;
    type Arguments = ReaderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            ReaderMsg::Read { from, reply } => {
                let entries = read_region(
                    state.io.clone(),
                    state.catalog.clone(),
                    state.region,
                    from,
                    &state.config,
                );
                let rx = forward(entries, info_span!("read", region = state.region, from));
                let _ = reply.send(Ok(rx));
            }
            #[cfg(feature = "testing")]
            ReaderMsg::Panic => panic!("injected reader panic"),
        }
        Ok(())
    }
}

/// Streams `entries` into a bounded channel from a spawned task, which stops fetching
/// as soon as the consumer drops the receiver.
pub fn forward(
    mut entries: BoxStream<'static, Result<Entry>>,
    span: tracing::Span,
) -> EntryReceiver {
    let (tx, rx) = flume::bounded(READ_CHANNEL_ENTRIES);
    tokio::spawn(
        async move {
            while let Some(item) = entries.next().await {
                if tx.send_async(item).await.is_err() {
                    return;
                }
            }
        }
        .instrument(span),
    );
    EntryReceiver::new(rx)
}

/// Follows `region` from `from`: what the catalog holds, then each object as it is
/// acknowledged (`commits` is bumped with every acknowledged sequence, and after each
/// recovery), through a bounded channel. Ends when the WAL stops or the consumer drops
/// the receiver.
pub fn follow(
    io: WalIo,
    catalog: Arc<RwLock<Catalog>>,
    commits: tokio::sync::watch::Receiver<u64>,
    region: u64,
    from: u64,
    config: &Config,
) -> EntryReceiver {
    let entries = follow_region(io, catalog, region, from, config, commits);
    forward(entries, info_span!("follow", region, from))
}
