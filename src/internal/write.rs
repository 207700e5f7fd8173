//! Writing objects (DESIGN.md "Writing an object", "Ending an epoch"): the open batch
//! (`batch`), an epoch's write position and link window (`epoch`), the write protocol of
//! one epoch as a state machine without I/O (`protocol`), the interval between object
//! starts under a throttling store (`pace`, pure), one create resolved to a definite
//! outcome by the outcome table (`persist`), and the creation clock (`clock`).
//!
//! Uses `store` (creates go through [`WalIo`](super::store::objects::WalIo)) and `chain`
//! (the catalog the protocol updates); nothing of `open`, `read` or the front ends.

pub mod batch;
pub mod clock;
pub mod epoch;
pub mod pace;
pub mod persist;
pub mod protocol;
