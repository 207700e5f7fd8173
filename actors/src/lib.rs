//! # object-store-wal-actors
//!
//! The runtime component of object-store-wal: the actors a database node spawns and
//! supervises, built on ractor over the core crate's primitives (no second copy of the
//! format, recovery or persist logic).
//!
//! - The supervisor: the root the node spawns ([`spawn_wal`],
//!   [`spawn_wal_linked`]); runs recovery, starts the writer and the region readers,
//!   replaces a failed writer with a new epoch, escalates `Fenced`.
//! - The recovery actor: the open, off the supervisor's mailbox.
//! - The writer: owns the batch and the sequence counter; seals, uploads
//!   up to `max_in_flight` objects at once, acknowledges in sequence order.
//! - A reader: one per region read or followed recently (at most
//!   `Config::max_readers`, [`MAX_READERS`] by default, the least recently used retired
//!   first); reads lazily through bounded channels. While it lives it holds its
//!   region's tail: the writer hands it the region's segment of every object it
//!   acknowledges (`Bytes` clones, no copy), kept in the WAL's segment cache within
//!   `Config::segment_cache_region_bytes` for the region (4 MiB: about 3,500 segments
//!   of one 1 KiB entry) and `Config::segment_cache_bytes` for all (64 MiB), so a read,
//!   follow or re-read of recent entries sends no request. All reads and follows of a
//!   region share each segment's fetch (one GET however many wait for it). A reader
//!   that panics is restarted; the follows it started go on (each streams from a task
//!   of its own) and other regions never notice.
//! - The reclaimer: deletes the objects below the acknowledged
//!   floor, `reclaim_grace` after it was acknowledged.
//!
//! Callers that are actors send [`WalMsg`]s with `RpcReplyPort`s; others use the
//! cloneable [`WalHandle`].
//!
//! A node that applies entries to memory as soon as their ids are fixed uses the
//! two-stage acknowledgement ([`Admitted`]): [`WalHandle::append_admitted`] answers at
//! admission with the final ids and a [`PendingReceipt`] future, and
//! [`WalHandle::durable_through`] waits until every id up to one is durable.
//!
//! Metrics go through the `metrics` facade: the node installs a recorder before it
//! spawns the WAL ([`object_store_wal::metrics`] lists them). The supervisor's
//! `Counters` feed the actor-only ones (failed appends, restarts, reclaimed objects,
//! pending bytes, uploads in flight); the writer records each append's and each
//! object's latency to durable. [`WalStats`] stays for callers that poll.
//!
//! What the WAL holds is bounded by its configuration and the live part of the log,
//! not by history (`WalStats` shows each part). The process's RSS beyond that is the
//! node's choice of allocator and runtime, on which a library takes no side: glibc's
//! allocator keeps the high-water mark of a transient backlog, jemalloc returns it; a
//! runtime's blocking pool (where a local file store's calls run) keeps every thread a
//! burst started. docs/GUIDE.md's "Memory bounded by the live part" has the numbers.
//!
//! ## What each error means for the caller
//!
//! - `Ok(receipt)`: durable; the ids are final and will be replayed.
//! - [`Error::EpochEnded`], [`Error::WriterFailed`]: the WAL opens a new epoch by itself;
//!   retry if [`Error::durability`] is `NotWritten`. If `MayBeDurable`, the entries may
//!   still be replayed (whole, at most once): retrying could duplicate them.
//! - [`Error::Backpressure`]: nothing was sent; retry later.
//! - [`Error::Fenced`]: another instance owns the prefix; this WAL has stopped for good
//!   and its supervisor failed (the node sees it).
//! - [`Error::Stopped`]: the WAL was stopped (a read in progress gets it too: once
//!   `stop()` or `abort()` returned, nothing of the instance reaches the store, and a
//!   stop waits for uploads in flight at most `max_create_duration`, failing those
//!   still unanswered as unknown outcomes, `EpochEnded` with `MayBeDurable`).
//! - [`Error::CallTimeout`] (a handle made by [`WalHandle::with_timeout`]): the caller
//!   stopped waiting, the request goes on. A timed-out append is `MayBeDurable`: it may
//!   still become durable and be replayed.
//! - Input errors (`EmptyAppend`, `EntryTooLarge`, `AppendTooLarge`, `TooManyEntries`):
//!   nothing was sent; fix the input.

#![warn(missing_docs)]

// The modules are the runtime's inside; what a node uses is re-exported below.
mod admission;
mod entries;
mod handle;
mod messages;
mod reader;
mod reclaimer;
mod recovery;
mod sources;
mod stats;
mod supervisor;
mod task;
mod writer;

pub use admission::{Admitted, PendingReceipt};
pub use entries::{EntryReceiver, EntryStream, ReadEnded};
#[doc(hidden)]
pub use handle::spawn_wal_io;
pub use handle::{spawn_wal, spawn_wal_linked, spawn_wal_with, SpawnError, WalHandle};
pub use messages::{AppendRequest, RuntimeMsg, WalMsg, MAX_QUEUED_REQUESTS};
pub use object_store_wal::{Durability, Error, Piece, RegionHolding, Released, WalStores};
pub use sources::MAX_SOURCES;
pub use stats::WalStats;
pub use supervisor::{RestartPolicy, MAX_READERS};
