//! Replays the checked-in corpus of the `decode` fuzz target (fuzz/corpus/decode) through
//! the same function the target runs, so every input the fuzzer kept, and every crash it
//! ever found (saved there once fixed), stays a regression test of the normal suite.

use object_store_wal::testing::exercise_decoders;

#[test]
fn decode_corpus_replays_without_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus directory is checked in")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "the corpus holds at least the FORMAT.md vectors"
    );
    for path in &files {
        let data = std::fs::read(path).expect("corpus file is readable");
        exercise_decoders(&data);
    }
}

#[test]
fn version_2_vectors_and_hostile_variants_are_in_the_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let opening = object_store_wal::transform::Opening {
        keys: Some(&*object_store_wal::testing::FUZZ_KEYS),
        max_decoded: object_store_wal::testing::FUZZ_MAX_DECODED,
    };
    let read = |name: &str| {
        bytes::Bytes::from(std::fs::read(dir.join(name)).expect("vector is checked in"))
    };
    for name in [
        "vector-v2-zstd",
        "vector-v2-lz4",
        "vector-v2-xchacha",
        "vector-v2-zstd-xchacha",
        "vector-v2-xaes",
        "vector-v2-zstd-xaes",
    ] {
        let decoded = object_store_wal::format::decode_object_with(&read(name), &opening);
        assert!(decoded.is_ok(), "{name}: {decoded:?}");
    }
    // Each hostile variant's summary verifies (its CRCs were made right); its segment
    // does not decode.
    for name in [
        "v2-decoded-length-bomb",
        "v2-wrong-tag",
        "v2-truncated-envelope",
    ] {
        let bytes = read(name);
        assert!(
            object_store_wal::format::decode_object_summary(&bytes).is_ok(),
            "{name}"
        );
        let decoded = object_store_wal::format::decode_object_with(&bytes, &opening);
        assert!(decoded.is_err(), "{name}: {decoded:?}");
    }
}

#[test]
fn format_vectors_are_in_the_corpus_and_decode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    for name in ["vector-empty", "vector-two-regions", "vector-claim"] {
        let data = std::fs::read(dir.join(name)).expect("vector is checked in");
        let bytes = bytes::Bytes::from(data);
        let decoded = object_store_wal::format::decode_object(&bytes);
        assert!(decoded.is_ok(), "{name}: {decoded:?}");
    }
}

/// FORMAT.md's version 4 vector (a closed opening object) is in the corpus and decodes
/// as closed, so the fuzzer starts from a version 4 header the decoder accepts.
#[test]
fn version_4_vector_is_in_the_corpus_and_decodes_closed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let data = std::fs::read(dir.join("vector-v4-closed")).expect("vector is checked in");
    let decoded = object_store_wal::format::decode_object(&bytes::Bytes::from(data))
        .expect("the vector decodes");
    assert_eq!(decoded.summary.version, object_store_wal::format::VERSION_4);
    assert!(decoded.summary.header.closed);
    assert!(decoded.segments.is_empty());
}

/// FORMAT.md's control snapshot vector is in the corpus, alone and as the control entry
/// of an object (object 2 of epoch 1, with region 7's entry `x`, from `encode_object`),
/// so the fuzzer starts from snapshots the decoder accepts on both paths.
#[test]
fn control_snapshot_vectors_are_in_the_corpus_and_decode() {
    use object_store_wal::format::control::{decode_ownership, CONTROL_REGION};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let read = |name: &str| std::fs::read(dir.join(name)).expect("vector is checked in");
    let snapshot = read("vector-control-snapshot");
    let holdings = decode_ownership(&snapshot).expect("the vector decodes");
    assert_eq!(holdings.len(), 2, "{holdings:?}");

    let object = bytes::Bytes::from(read("vector-control-object"));
    let decoded = object_store_wal::format::decode_object(&object).expect("the object decodes");
    let control: Vec<&[u8]> = decoded
        .segments
        .iter()
        .filter(|(region, _)| *region == CONTROL_REGION)
        .flat_map(|(_, entries)| entries.iter().map(|e| &e[..]))
        .collect();
    assert_eq!(control, [&snapshot[..]]);
}
