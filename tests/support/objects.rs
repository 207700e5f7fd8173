//! The small chain object the store-level tests create (`tests/hedging.rs`,
//! `tests/metrics.rs`, `tests/throttle.rs`, each including this file with `#[path]`).

use object_store_wal::format::{encode_object, EncodedObject, Header, Link};

/// Object `sequence` of epoch 3, linking to the one before it, with one entry `entry`
/// of region 7.
pub fn object(sequence: u64) -> EncodedObject {
    let header = Header {
        sequence,
        epoch: 3,
        link: Link {
            sequence: sequence - 1,
            epoch: 3,
        },
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 0,
    };
    let payloads = [bytes::Bytes::from_static(b"entry")];
    let segments = [(7u64, &payloads[..])];
    encode_object(&header, segments.iter().map(|(r, p)| (*r, *p))).expect("encodes")
}
