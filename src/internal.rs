//! The crate's inside: the modules the actor runtime (`object-store-wal-actors`), the
//! tools (`walctl`, the benchmark) and the tests build on. Not public API: no stability
//! promise, hidden from the docs. What a node uses is re-exported at the crate root.
//!
//! One folder per concern, named after the section of `docs/DESIGN.md` it implements,
//! from the store up; each uses only the rooms listed before it (and the crate's
//! `config`, `error`, `format`, `transform` and `metrics`, which use none of these):
//!
//! - [`store`]: the store side. Requests to one store or a quorum of them ("One log
//!   over several stores"), what a WAL key and object are, the cache of verified
//!   segments. The only room that calls `object_store`.
//! - [`chain`]: "The chain": which objects form the chain, what an opening must claim,
//!   the catalog of the live chain and what it retains. Pure.
//! - [`write`]: "Writing an object": batches, an epoch's position, the write protocol
//!   as a state machine, one create resolved to an outcome, the creation clock.
//! - [`open`]: "Opening an instance (fencing)": recovery (over one store or several)
//!   and the opening object that fences earlier instances.
//! - [`read`]: "Reading": verified segment fetches, replays of many regions, follows,
//!   and the read-only follower's "Tailing without listing".
//! - [`fence`]: "A node's regions after it died": the fence that closes a dead or
//!   zombie node's prefix for good, and what it holds of each region. Uses `open` and
//!   `read`.
//! - [`sequential`]: the front end without actors, [`ObjectStoreLogStore`](crate::ObjectStoreLogStore),
//!   which drives all of the above one object at a time (the actor runtime is the other).

pub mod chain;
pub mod fence;
pub mod open;
pub mod read;
pub mod sequential;
pub mod store;
pub mod write;
