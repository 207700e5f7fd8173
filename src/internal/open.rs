//! Opening an instance (DESIGN.md "Opening an instance (fencing)", and "Opening an
//! instance over N stores"): `recover` lists the prefix, reads every object's summary
//! and chooses the chain (over several stores: each store's listing, completed and
//! decided by quorum); `opening` claims the holes above it and writes the opening
//! object that fences every earlier instance (or, for `internal::fence`, a closed one
//! that fences the prefix for good).
//!
//! Uses `store`, `chain` and `write` (an opening object is created as every object is);
//! nothing of `read` or the front ends.

mod opening;
mod recover;

pub use opening::*;
pub use recover::*;
