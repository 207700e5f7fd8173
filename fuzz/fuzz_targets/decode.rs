//! Feeds arbitrary bytes to every decoder of the object format and of control snapshots
//! (see `object_store_wal::testing::exercise_decoders`): no input may panic, allocate
//! without bound, or decode to something that does not encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    object_store_wal::testing::exercise_decoders(data);
});
