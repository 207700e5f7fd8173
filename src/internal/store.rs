//! The store side (DESIGN.md "Writing an object: the outcomes of a create", "Hedging",
//! "One log over several stores"): everything between the WAL's objects and
//! `object_store`.
//!
//! - `transport`: requests to one store behind the narrow [`Transport`](transport::Transport)
//!   trait (create, get, list, delete, close), with timeouts, hedging, counting and the
//!   closing gate; `url` builds stores from URLs. The only files that call `object_store`.
//! - `hedge`: when a request is hedged; pure.
//! - `quorum` (pure rules) and `replicated` (a `Transport` over N stores): one log over
//!   several stores.
//! - `stores`: [`WalStores`](crate::WalStores), which stores one WAL is kept in.
//! - `keys`, `objects`: what a WAL key and a WAL object are (keys, listings, summary
//!   reads, creates) over a `Transport`, bundled with the segment `codec` and `cache` as
//!   [`WalIo`](objects::WalIo), the store access every front end shares.
//!
//! Uses the crate's `config`, `error`, `format`, `transform` and `metrics`, nothing of
//! the rooms above it (`chain`, `write`, `open`, `read`).

pub mod cache;
pub mod codec;
pub mod hedge;
pub mod keys;
pub mod objects;
pub mod quorum;
pub mod replicated;
pub mod stores;
pub mod transport;
pub mod url;
