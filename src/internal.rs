//! The crate's inside: the modules the actor runtime (`object-store-wal-actors`), the
//! tools (`walctl`, the benchmark) and the tests build on. Not public API: no stability
//! promise, hidden from the docs. What a node uses is re-exported at the crate root.

pub mod batch;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod epoch;
pub mod hedge;
pub mod objects;
pub mod open;
pub mod persist;
pub mod protocol;
pub mod quorum;
pub mod read;
pub mod replicated;
pub mod sequential;
pub mod transport;
