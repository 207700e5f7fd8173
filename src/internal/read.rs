//! Reading (DESIGN.md "Reading", "Tailing without listing"): `fetch` (one verified
//! ranged read of a span of segments, the corrupt-segment policy), `replay` (many
//! regions at once, each object read once), `follow` (a region's entries in order as
//! the chain grows; a read is a follow that ends at the chain's end) and `tail` (a
//! read-only follower that finds new objects by probing keys instead of listing).
//!
//! Uses `store`, `chain` and `open` (a read-only follower recovers its start); nothing of
//! `write` or the front ends.

mod fetch;
mod follow;
mod replay;
mod source;
mod tail;

pub use fetch::*;
pub use follow::*;
pub use replay::*;
pub use source::*;
pub use tail::*;
