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
fn format_vectors_are_in_the_corpus_and_decode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    for name in ["vector-empty", "vector-two-regions", "vector-claim"] {
        let data = std::fs::read(dir.join(name)).expect("vector is checked in");
        let bytes = bytes::Bytes::from(data);
        let decoded = object_store_wal::format::decode_object(&bytes);
        assert!(decoded.is_ok(), "{name}: {decoded:?}");
    }
}
