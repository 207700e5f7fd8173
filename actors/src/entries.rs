//! What a read, replay or follow hands its consumer: the crate's own receiver and stream
//! over a bounded channel (the channel crate is not part of the API).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use object_store_wal::{Entry, Result};

/// A read, replay or follow has delivered everything it will: its receiver is empty and
/// its sender gone (the read reached its end, failed with an item saying why, or the WAL
/// stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the read has ended")]
pub struct ReadEnded;

/// A region's entries (or a replay's, of many regions), in order, through a bounded
/// channel fed by a reader: nothing is fetched far ahead of the consumer. Dropping it
/// ends the read.
#[derive(Debug)]
pub struct EntryReceiver(flume::Receiver<Result<Entry>>, #[allow(dead_code)] Consumer);

/// Held by the consumer's end: its drop wakes the reader's task at once, even while
/// that task waits for the chain to grow (a send would find out only with the next
/// entry).
#[derive(Debug)]
pub(crate) struct Consumer {
    _alive: Option<tokio::sync::oneshot::Sender<()>>,
}

impl EntryReceiver {
    /// The consumer's end of `rx`; `dropped` resolves once it is dropped.
    pub(crate) fn new(
        rx: flume::Receiver<Result<Entry>>,
    ) -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (alive, dropped) = tokio::sync::oneshot::channel();
        (
            EntryReceiver(
                rx,
                Consumer {
                    _alive: Some(alive),
                },
            ),
            dropped,
        )
    }

    /// A receiver that has delivered everything: nothing to read.
    pub(crate) fn empty() -> Self {
        EntryReceiver(flume::bounded(0).1, Consumer { _alive: None })
    }

    /// The next entry (or the error that ended the read), waiting for it; `Err(ReadEnded)`
    /// once everything was delivered.
    pub async fn recv_async(&self) -> std::result::Result<Result<Entry>, ReadEnded> {
        self.0.recv_async().await.map_err(|_| ReadEnded)
    }

    /// The next entry if one is ready now.
    pub fn try_recv(&self) -> Option<Result<Entry>> {
        self.0.try_recv().ok()
    }

    /// The same read as a `futures::Stream`.
    pub fn into_stream(self) -> EntryStream {
        EntryStream(self.0.into_stream(), self.1)
    }
}

/// An [`EntryReceiver`] as a `futures::Stream` (from the handle's `*_stream` calls): it
/// ends when the read does; dropping it ends the read.
pub struct EntryStream(
    flume::r#async::RecvStream<'static, Result<Entry>>,
    #[allow(dead_code)] Consumer,
);

impl std::fmt::Debug for EntryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntryStream")
    }
}

impl Stream for EntryStream {
    type Item = Result<Entry>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.0).poll_next(cx)
    }
}
