//! Per-region reader actors: where a region's read state lives.
//!
//! A region's reader is started by its first read or follow and retired when the
//! `Config::max_readers` most recently read regions (64 by default) no longer include
//! it. While it lives it holds the region's **tail**: the
//! writer hands it every acknowledged object's segment of the region (`Bytes` clones of
//! the sealed object, no copy) into the WAL's segment cache, so a read or follow whose
//! next entry is recent is answered from memory. What it holds is bounded there: at most
//! `Config::segment_cache_region_bytes` for the region (its oldest out first) and
//! `Config::segment_cache_bytes` for all regions (least recently used out first).
//! Subscribers share fetches: every read and follow of the region fetches a segment
//! through the cache's table of fetches under way, so the followers of a region cost
//! one GET per segment however many they are.
//!
//! Each read or follow streams from a task of its own (looking segments up in the shared
//! catalog one at a time, so a read that starts after an append sees it; one ranged read
//! of exactly a segment's bytes, its CRC checked, then decoded) into a bounded `flume`
//! channel, at most `read_ahead` segments ahead of the consumer: a large replay never
//! sits in memory at once. So a reader that panics is restarted without touching any
//! stream under way: its followers go on (each holds the region's tail while it lives),
//! and no other region's read notices.

use std::sync::{Arc, RwLock};

use futures::stream::{BoxStream, StreamExt};
use object_store_wal::internal::chain::catalog::Catalog;
use object_store_wal::internal::read::{follow_region, read_region};
use object_store_wal::internal::store::cache::RegionWatch;
use object_store_wal::internal::store::objects::WalIo;
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

/// What a reader holds: how to read, and the region's tail (see the module docs).
pub struct ReaderState {
    args: ReaderArgs,
    /// The writer hands the region's segments to the cache while this lives.
    _tail: RegionWatch,
}

impl Actor for ReaderActor {
    type Msg = ReaderMsg;
    type State = ReaderState;
    type Arguments = ReaderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        Ok(ReaderState {
            _tail: args.io.watch_region(args.region),
            args,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let state = &state.args;
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
            ReaderMsg::Follow {
                from,
                commits,
                reply,
            } => {
                let rx = follow(
                    state.io.clone(),
                    state.catalog.clone(),
                    commits,
                    state.region,
                    from,
                    &state.config,
                );
                let _ = reply.send(Ok(rx));
            }
            #[cfg(feature = "testing")]
            ReaderMsg::Panic => panic!("injected reader panic"),
        }
        Ok(())
    }
}

/// Streams `entries` into a bounded channel from a spawned task, which stops fetching
/// as soon as the consumer drops the receiver (even while it waits for the chain to
/// grow).
pub fn forward(
    mut entries: BoxStream<'static, Result<Entry>>,
    span: tracing::Span,
) -> EntryReceiver {
    let (tx, rx) = flume::bounded(READ_CHANNEL_ENTRIES);
    let (receiver, mut dropped) = EntryReceiver::new(rx);
    tokio::spawn(
        async move {
            loop {
                let item = tokio::select! {
                    item = entries.next() => item,
                    _ = &mut dropped => return,
                };
                let Some(item) = item else { return };
                let sent = tokio::select! {
                    sent = tx.send_async(item) => sent,
                    _ = &mut dropped => return,
                };
                if sent.is_err() {
                    return;
                }
            }
        }
        .instrument(span),
    );
    receiver
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds a sender whose drop says the stream holding it was dropped.
    struct DropSignal(Option<tokio::sync::oneshot::Sender<()>>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    /// A read waiting for the chain to grow (a stream with nothing yet) ends as soon as
    /// its consumer drops the receiver, not at the next entry: what it holds (a
    /// catch-up's claim on its source's whole objects) is let go.
    #[tokio::test]
    async fn a_waiting_read_ends_when_its_consumer_drops_the_receiver() {
        let (tx, dropped) = tokio::sync::oneshot::channel();
        let signal = DropSignal(Some(tx));
        let waiting = futures::stream::pending::<Result<Entry>>().map(move |entry| {
            let _held = &signal;
            entry
        });
        let receiver = forward(waiting.boxed(), tracing::Span::none());
        drop(receiver);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), dropped).await;
        assert!(
            matches!(ended, Ok(Ok(()))),
            "the read still runs: {ended:?}"
        );
    }
}
