//! # object-store-wal
//!
//! A write-ahead log for a database node that keeps nothing on local disk: the entries of
//! all the node's regions are batched into immutable objects on an object store (S3, GCS,
//! Azure Blob, a local directory, memory), one object per flush, each written once with
//! a conditional create and never changed.
//!
//! ## Quick start: which front end
//!
//! - **In a database node**, use the actor runtime, `object-store-wal-actors`: its
//!   `spawn_wal` starts a supervised WAL that batches every region's appends into one
//!   object per flush, pipelines uploads, reopens after an ended epoch, serves reads and
//!   followers and reclaims space; a cloneable `WalHandle` (or `WalMsg`s from your own
//!   actors) talks to it.
//! - **Without actors** (a tool, a test, a single-threaded caller),
//!   [`ObjectStoreLogStore`]: one object at a time, appended and flushed by the caller,
//!   with the same format, recovery and write protocol (its docs have an example).
//!
//! Either way, a new WAL is started only when asked ([`Config::create_if_missing`]), so a
//! typo in a URL does not start an empty one.
//!
//! ## The format in brief
//!
//! An object is `header (56) | segments | footer | trailer (32)` under the key
//! `<prefix>/<20-digit sequence>.wal` ([`format`](mod@format) restates `FORMAT.md`, which is
//! normative; version 3 adds an id offset to a 64-byte header). Each header links to the
//! object it extends by `(sequence, epoch)`; the objects form chains. Entry ids are
//! object-major: [`entry_id`]`(seq + id offset, pos) = (seq + id offset) << 20 | pos`
//! (the id offset is 0 until a region moves in), so a region's ids increase strictly but
//! are not contiguous.
//!
//! ## The protocol in brief
//!
//! - **Recovery** replays exactly the chain that ends at the complete object with the
//!   largest `(epoch, sequence)`; every other object is an orphan, never replayed.
//! - **Opening** ([`ObjectStoreLogStore::open`]) claims every hole above the chain end,
//!   then writes an empty opening object above everything present, in a new epoch. That
//!   fences every earlier instance: its next create collides with a higher epoch.
//! - **Writing**: an object is acknowledged only when it and every earlier object of its
//!   epoch are durable. An unknown create outcome is retried with identical bytes; if it
//!   stays unknown, or a late object of an earlier instance holds the sequence, the epoch
//!   ends and the instance opens again before writing ([`Error::EpochEnded`]).
//!
//! ## Guarantees
//!
//! Every acknowledged entry is replayed after any restart, crash or takeover, exactly
//! once, in order, with the id it was acknowledged with. A failed append is replayed
//! whole or not at all; its error's [`Durability`] says whether it may still be.
//! These rest on the store's conditional create (`PutMode::Create`) being atomic; a
//! store without it is refused. A local directory is durable across power loss only
//! with fsync, which [`store_from_url`] turns on for `file://`.
//!
//! ## Choices this crate makes where the design leaves them open
//!
//! - An append with several parts for the same region keeps them in order, each part
//!   getting its own consecutive ids.
//! - A damaged segment fails only its region, as [`Error::CorruptSegment`] naming key and
//!   region. Under [`CorruptSegmentPolicy::Skip`] a read, a follow, or a region of a
//!   replay yields that error as an item (the report of the hole) and goes on; under
//!   `Fail` (the default) that region's read ends there: a replay of many regions goes on
//!   with the others and sends nothing more of that region. Only damage is skipped: any
//!   other error (a failed GET) ends the read under either policy, since skipping would
//!   lose entries that are intact at rest.
//! - The sequential write path ([`ObjectStoreLogStore::append`] /
//!   [`flush`](ObjectStoreLogStore::flush)) answers [`Error::BatchFull`] instead of
//!   flushing by itself, so the caller always knows which object holds its append. Its
//!   floor rises as the actor runtime's does (the same write protocol): past objects that
//!   hold no entry some region needs, with [`ObjectStoreLogStore::obsolete`] for what a
//!   region no longer needs; it deletes nothing itself.
//! - `futures` (already part of `object_store`) is used for bounded-concurrency streams,
//!   `libc` for `CLOCK_BOOTTIME` ([`BootClock`]), and the `metrics` facade (no
//!   exporter: the node installs its own) for [`metrics`](mod@metrics); requests are
//!   counted in the transport, where they end, so every caller's are.
//! - **Link window** (added to DESIGN.md's two timing bounds): each create of an epoch
//!   starts within `reclaim_grace - max_create_duration` of the previous one
//!   ([`Config::link_window`]), else the epoch ends unsent; an idle writer writes an
//!   empty object every half window. Without it, an instance idle while a newer one
//!   opened, wrote and reclaimed could create its next key afresh after deletion and
//!   acknowledge it.
//! - `min_object_interval` defaults to 20 ms (at most 50 PUTs per second when callers
//!   append one at a time); under load batches grow instead.
//! - Obsolete watermarks live in memory: after a restart every region pins the floor at
//!   its first entry until it reports its watermark again.
//! - A summary, a segment or a create conflict that fails verification is read once more
//!   before it counts as damage. When recovery reads a small object whole it checks each
//!   segment's own CRC instead of the object CRC: a damaged segment is reported (a
//!   `warn!` naming key and region, [`RecoveryReport::damaged_segments`], and the
//!   `damaged_segments` counter of the request stats, which the actor runtime's
//!   `WalStats` shows) and recovery goes on. Every finding counts, a segment found by
//!   recovery and again by a read counts twice: the counter says how often damage was
//!   met, the report and `walctl verify` say where.
//! - [`Config`], [`RetryPolicy`], [`Error`] and [`EpochEndReason`] are `#[non_exhaustive]`:
//!   start from [`Config::new`] (or [`RetryPolicy::new`]) and set fields, and match errors
//!   with a fallback arm, so new knobs and variants are not breaking changes.
//! - A URL naming the store and the prefix in one ([`split_store_url`]) splits at its
//!   last path component: `s3://bucket/path/prefix` is the store `s3://bucket/path` and
//!   the prefix `prefix` (the keys are the same whichever way a path is cut; this way a
//!   `file://` store is rooted at the WAL's parent directory).
//! - Under the `serde` feature a configuration file's `[wal]` section is read by
//!   [`Config`]'s or `WalSection`'s `Deserialize`, validated once read; its field names
//!   are `Config`'s (there is no `flush_interval`), durations humantime strings, sizes
//!   bytes or IEC/SI strings (`config` module docs).
//! - Recovery reads every listed object's summary, including objects below the tip's
//!   floor that the reclaimer has not deleted yet (within `reclaim_grace`); one of those
//!   that cannot be read (damaged, or deleted since the listing) is reported in
//!   [`RecoveryReport::unread_below_floor`] and does not fail recovery (DESIGN.md allows
//!   not reading them at all). A listed object at or above the floor that cannot be read
//!   still fails recovery, naming its key (a vanished one makes a writer's open start
//!   over from a fresh listing).
//! - Segment transforms (FORMAT.md version 2, [`transform`]): compression is off by
//!   default (`Config::compression`), encryption needs the node's
//!   [`transform::KeyProvider`] (`Config::encryption_keys`). A WAL with neither writes
//!   version 1 byte for byte. Recovery never needs a key. A segment that cannot be opened
//!   (no key, a wrong key, failed authentication, a bad compressed body) is a damaged
//!   segment of its region, as [`Error::CorruptSegment`] naming key, region and why.
//!   Recovery's whole-object check and [`format::check_segment`] check a transformed
//!   segment's stored CRC only (its contents need its key and a decompression); a read
//!   checks the rest, and `walctl verify --keys` checks everything.
//! - A read, a replay or a follow whose next object was deleted (not found) after its
//!   catalog dropped it below a floor passes over it with a warning: its entries are
//!   obsolete, and the read goes on above the floor. A read-only follower first brings
//!   its catalog up to date; one the owner's floor has passed (it lagged longer than the
//!   owner's `reclaim_grace`) goes on from the chain above the floor, as a fresh
//!   read-only open would. An object not found that the catalog still holds is an error.

#![warn(missing_docs)]

//!
//! ## The public API and the internals
//!
//! What a node uses is re-exported here at the root: [`ObjectStoreLogStore`] (the
//! sequential front end; the actor runtime in `object-store-wal-actors` is the other),
//! [`Config`], [`WalStores`], [`Error`] with its [`Durability`], [`Entry`], the
//! receipts, [`ChainSummary`], [`RequestCounts`], and [`store_from_url`]; and for a
//! coordinator failing a dead or zombie node over (DESIGN.md "A node's regions after it
//! died"), [`fence`], [`holdings_of`] and [`retire`]. [`format`](mod@format) restates
//! the normative byte layout; [`inspect`] looks at a prefix's objects store by store for
//! tools (`walctl` is built on it and the rest of this public API alone). The steps
//! both front ends are built from live in one hidden module, `internal`: public only so
//! the actor crate and the tests can reach them, with no stability promise.
//!
//! The map, from the store up (one folder per section of DESIGN.md; each uses only the
//! ones before it, and all of them use [`config`], [`error`], [`format`](mod@format),
//! [`transform`] and [`metrics`](mod@metrics), which use none of them):
//!
//! - **`internal::store`**: requests to a store, with timeouts, hedging, counting and
//!   the closing gate, behind one narrow trait, `Transport` (create, get, list, delete,
//!   close), the only code that calls `object_store`; one log over several stores as a
//!   `Transport` over N of them (`quorum` holds its rules, `replicated` applies them);
//!   what a WAL key and object are, reached only through `Transport`. A caller chooses
//!   one store or several with [`WalStores`].
//! - **`internal::chain`**: which objects form the chain, what an opening claims, the
//!   catalog of the live chain; pure.
//! - **`internal::write`**: batches sealed into objects, an epoch's position, one
//!   create resolved by DESIGN.md's outcome table, and the write protocol: one epoch's
//!   rules as a state machine without I/O (events in: admitted, create answered, time,
//!   stop; actions out: start a create, acknowledge, fail, publish a floor, the epoch
//!   ended), as quinn-proto is under quinn.
//! - **`internal::open`**: recovery (over one store or N) and the opening object that
//!   fences earlier instances.
//! - **`internal::read`**: verified fetches, replays of many regions, follows, and the
//!   read-only follower's tailing without listing.
//! - **Front ends** drive these: `internal::sequential` ([`ObjectStoreLogStore`]) one
//!   object at a time here, and the actor runtime's writer in `object-store-wal-actors`
//!   (mailbox, timers, upload tasks).

pub mod config;
pub mod error;
pub mod format;
pub mod inspect;
#[doc(hidden)]
pub mod internal;
pub mod metrics;
#[cfg(feature = "serde")]
mod section;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transform;

pub use config::{
    Config, CorruptSegmentPolicy, FirstRetryWait, HedgeAfter, RecoveryMode, RetryPolicy,
    ADAPTIVE_FIRST_WAIT_MIN,
};
pub use error::{
    BackpressureLimit, Durability, EpochEndReason, Error, ErrorKind, Released, Result,
};
pub use format::{entry_id, FormatError, Header, Link};
pub use internal::chain::holdings::{Piece, RegionHolding};
#[doc(inline)]
pub use internal::fence::{
    fence, holdings_of, retire, retire_after, Fence, FencedRegion, PrefixHoldings, Retired,
};
pub use internal::open::{
    DamagedSegment, GivenUp, GivenUpHoldings, ObjectInfo, RecoveryReport, UnreadObject,
};
pub use internal::read::Entry;
/// Another node's log opened read-only, the source of regions this node takes over
/// (catch-up). Hidden until region moves are public.
#[doc(hidden)]
pub use internal::read::SourceLog;
pub use internal::sequential::{ChainSummary, FlushReceipt, ObjectStoreLogStore};
#[doc(inline)]
pub use internal::store::stores::WalStores;
pub use internal::store::transport::RequestCounts;
pub use internal::store::url::{split_store_url, store_and_prefix_from_url, store_from_url};
pub use internal::write::batch::{AppendParts, AppendReceipt, RegionIds};
pub use internal::write::clock::{BootClock, CreateClock};
pub use internal::write::epoch::WritePosition;
#[cfg(feature = "serde")]
pub use section::WalSection;

/// The README's Rust blocks, compiled (and the ones that need no store, run) by
/// `cargo test --doc`, so a snippet that no longer compiles fails the tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// docs/GUIDE.md's Rust blocks, compiled (and the ones that need no store, run) by
/// `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/GUIDE.md")]
pub struct GuideDoctests;

/// docs/OPERATIONS.md's Rust blocks, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/OPERATIONS.md")]
pub struct OperationsDoctests;
