//! The chain (DESIGN.md "The chain", "Opening an instance": the plan, "Reclaiming
//! space": the floor): which objects form the chain recovery replays, which holes an
//! opening claims, the walk of a read-only follower's probes, and the
//! [`Catalog`](catalog::Catalog) of the live chain's footers with what it retains.
//! Pure: no I/O, no async; uses only `error` and `format`.

pub mod catalog;
pub mod holdings;
