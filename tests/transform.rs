//! Format version 2, transformed segments (FORMAT.md "Version 2"): the test vectors, a
//! WAL that compresses and encrypts end to end, and what a reader does with a segment it
//! cannot open (a missing or wrong key, a moved segment, a decoded-length bomb, a cut
//! envelope, an unknown codec): only that region's reads fail, each naming why.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{
    decode_object, decode_object_summary, decode_object_with, encode_object_with, FormatError,
    Header, Link, CIPHER_XAES_256_GCM, CIPHER_XCHACHA20_POLY1305, CODEC_LZ4, CODEC_NONE,
    CODEC_ZSTD, VERSION, VERSION_2,
};
use object_store_wal::testing::repair_crcs;
use object_store_wal::transform::{
    Cipher, Compression, KeyProvider, Opening, Sealing, SegmentKey, StaticKeys,
};
use object_store_wal::{Config, Error, ObjectStoreLogStore};

fn unhex(s: &str) -> Bytes {
    Bytes::from(hex::decode(s).expect("hex"))
}

fn header() -> Header {
    Header {
        sequence: 9,
        epoch: 5,
        link: Link {
            sequence: 7,
            epoch: 5,
        },
        floor: 3,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

fn vector_key() -> SegmentKey {
    SegmentKey::new(1, [0x42; 32])
}

const ZSTD: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a274400000028b52ffd20445d00002840000000610100948016010000000000000007000000000000000000900000000000000090000000000038000000000000001800000000000000b8f5f73301000000475457414c54524c500000000000000038000000000000000ed32e847583b522";
const LZ4: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a27440000005f40000000610100266061616161616101000000000000000700000000000000000090000000000000009000000000003800000000000000140000000000000048b999d902000000475457414c54524c4c0000000000000038000000000000003b15e31dcc4c93b9";
const XCHACHA: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a2701000000242424242424242424242424242424242424242424242424a65ed765165c34302a147bab0a41b85a03c5351f5bc03c010000000000000007000000000000000000900000000000000090000000000038000000000000003300000000000000cfd409b500010000475457414c54524c6b0000000000000038000000000000006619d5ae1cd630f4";
const ZSTD_XCHACHA: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a2701000000242424242424242424242424242424242424242424242424e15ed7654691635b826b623a0ea04dca32f1efbb7c8bf48bb57a4b1dfc1814584a545f6d4011d4000100000000000000070000000000000000009000000000000000900000000000380000000000000044000000000000008a07136501010000475457414c54524c7c0000000000000038000000000000009abe18e48c40a21d";
const XAES: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a2701000000242424242424242424242424242424242424242424242424bf4d1e10c851a784867d55ad087e179299d13b47ffba07010000000000000007000000000000000000900000000000000090000000000038000000000000003300000000000000920f9d8f00020000475457414c54524c6b000000000000003800000000000000e5e212a61e18df72";
const ZSTD_XAES: &str = "475457414c4f424a0200000009000000000000000500000000000000070000000000000005000000000000000300000000000000169a2a2701000000242424242424242424242424242424242424242424242424f84d1e10989cf0231050f98d3616cd642b51aa318bff02f718b7db7961f1e01e289ce657840456a9010000000000000007000000000000000000900000000000000090000000000038000000000000004400000000000000874efd9601020000475457414c54524c7c000000000000003800000000000000c775128fbc384378";

/// The encrypted vectors: (name, hex, cipher byte, cipher).
const ENCRYPTED: [(&str, &str, u8, Cipher); 2] = [
    (
        "xchacha",
        XCHACHA,
        CIPHER_XCHACHA20_POLY1305,
        Cipher::XChaCha20Poly1305,
    ),
    ("xaes", XAES, CIPHER_XAES_256_GCM, Cipher::Xaes256Gcm),
];

fn keys() -> StaticKeys {
    StaticKeys::new(vector_key())
}

fn opening(keys: &StaticKeys) -> Opening<'_> {
    Opening {
        keys: Some(keys),
        max_decoded: 1 << 20,
    }
}

#[test]
fn version_2_vectors_decode() {
    let keys = keys();
    let a64 = vec![Bytes::from(vec![b'a'; 64])];
    let xxx = vec![Bytes::from_static(b"xxx")];
    for (name, hex, codec, cipher, entries) in [
        ("zstd", ZSTD, CODEC_ZSTD, 0, &a64),
        ("lz4", LZ4, CODEC_LZ4, 0, &a64),
        (
            "xchacha",
            XCHACHA,
            CODEC_NONE,
            CIPHER_XCHACHA20_POLY1305,
            &xxx,
        ),
        (
            "zstd+xchacha",
            ZSTD_XCHACHA,
            CODEC_ZSTD,
            CIPHER_XCHACHA20_POLY1305,
            &a64,
        ),
        ("xaes", XAES, CODEC_NONE, CIPHER_XAES_256_GCM, &xxx),
        (
            "zstd+xaes",
            ZSTD_XAES,
            CODEC_ZSTD,
            CIPHER_XAES_256_GCM,
            &a64,
        ),
    ] {
        let bytes = unhex(hex);
        let decoded = decode_object_with(&bytes, &opening(&keys)).expect(name);
        assert_eq!(decoded.summary.version, VERSION_2, "{name}");
        assert_eq!(decoded.summary.header, header(), "{name}");
        let record = decoded.summary.footer.records[0];
        assert_eq!((record.codec, record.cipher), (codec, cipher), "{name}");
        assert_eq!(decoded.segments, vec![(7, entries.clone())], "{name}");
    }
}

#[test]
fn encrypted_vectors_encode_byte_for_byte() {
    let key = vector_key();
    let a64 = [Bytes::from(vec![b'a'; 64])];
    let xxx = [Bytes::from_static(b"xxx")];
    for (hex, compression, cipher, entries) in [
        (XCHACHA, Compression::Off, Cipher::XChaCha20Poly1305, &xxx),
        (
            ZSTD_XCHACHA,
            Compression::ZSTD,
            Cipher::XChaCha20Poly1305,
            &a64,
        ),
        (XAES, Compression::Off, Cipher::Xaes256Gcm, &xxx),
        (ZSTD_XAES, Compression::ZSTD, Cipher::Xaes256Gcm, &a64),
    ] {
        let sealing = Sealing {
            compression,
            key: Some(&key),
            cipher,
        };
        let encoded = encode_object_with(&header(), [(7, &entries[..])], &sealing, &mut || {
            Ok([0x24; 24])
        })
        .expect("encodes");
        assert_eq!(encoded.to_bytes(), unhex(hex));
    }
}

#[test]
fn a_segment_that_does_not_shrink_is_stored_plain_as_version_1() {
    let xxx = [Bytes::from_static(b"xxx")];
    let sealing = Sealing {
        compression: Compression::ZSTD,
        key: None,
        cipher: Cipher::Auto,
    };
    let encoded = encode_object_with(&header(), [(7, &xxx[..])], &sealing, &mut || {
        panic!("no nonce without a key")
    })
    .expect("encodes");
    let plain =
        object_store_wal::format::encode_object(&header(), [(7, &xxx[..])]).expect("encodes");
    assert_eq!(encoded.version(), VERSION);
    assert_eq!(encoded.to_bytes(), plain.to_bytes());
}

/// Vector `hex` with `edit` applied and every CRC made right again, so that only the
/// transform's own checks can catch the edit.
fn edited(hex: &str, edit: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    let mut bytes = unhex(hex).to_vec();
    edit(&mut bytes);
    Bytes::from(repair_crcs(&bytes).expect("repairable"))
}

/// The one segment of an edited vector, decoded: its error.
fn segment_error(bytes: &Bytes, opening: &Opening<'_>) -> FormatError {
    decode_object_with(bytes, opening).expect_err("the segment must not decode")
}

/// An edit of an object's bytes.
type Edit = dyn Fn(&mut Vec<u8>);

#[test]
fn a_moved_segment_fails_authentication() {
    let keys = keys();
    let footer = 56 + 51;
    let record = footer + 8;
    // Another region, another epoch, another sequence (so another first entry id).
    let moves: [(&str, Box<Edit>); 3] = [
        ("region", Box::new(move |b| b[record] = 8)),
        ("epoch", Box::new(|b| b[20] = 6)),
        (
            "sequence",
            Box::new(move |b| {
                b[12] = 10;
                // The record's entry ids follow the sequence, or the footer is invalid.
                b[record + 8..record + 16].copy_from_slice(&(10u64 << 20).to_le_bytes());
                b[record + 16..record + 24].copy_from_slice(&(10u64 << 20).to_le_bytes());
            }),
        ),
    ];
    for (what, edit) in moves {
        for (name, hex, ..) in ENCRYPTED {
            let bytes = edited(hex, |b| edit(b));
            decode_object_summary(&bytes).expect("the summary still verifies");
            match segment_error(&bytes, &opening(&keys)) {
                FormatError::Authentication { key_id: 1, .. } => {}
                other => panic!("{name}, {what}: {other:?}"),
            }
        }
    }
}

/// Version 3: the associated data names the object's sequence, not its id base. An
/// encrypted segment of object 9 (id offset 1000, id base 1009) moved into object 10 of
/// the same epoch with id offset 999 (the same id base, so the same entry ids and a
/// valid footer) fails authentication; in place it decodes.
#[test]
fn a_segment_moved_to_the_same_id_base_fails_authentication() {
    let keys = keys();
    let key = vector_key();
    let xxx = [Bytes::from_static(b"xxx")];
    let sealing = Sealing {
        compression: Compression::Off,
        key: Some(&key),
        cipher: Cipher::Xaes256Gcm,
    };
    let at = |sequence, id_offset| Header {
        sequence,
        id_offset,
        ..header()
    };
    let encoded = encode_object_with(&at(9, 1000), [(7, &xxx[..])], &sealing, &mut || {
        Ok([0x24; 24])
    })
    .expect("encodes");
    assert_eq!(encoded.version(), 3);
    let bytes = encoded.to_bytes();
    let decoded = decode_object_with(&bytes, &opening(&keys)).expect("in place, it decodes");
    assert_eq!(decoded.segments, vec![(7, xxx.to_vec())]);
    let moved = edited(&hex::encode(&bytes), |b| {
        b[12..20].copy_from_slice(&10u64.to_le_bytes());
        b[52..60].copy_from_slice(&999u64.to_le_bytes());
    });
    let summary = decode_object_summary(&moved).expect("the summary still verifies");
    assert_eq!(summary.header.id_base(), 1009);
    match segment_error(&moved, &opening(&keys)) {
        FormatError::Authentication { key_id: 1, .. } => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_wrong_or_missing_key_says_so() {
    for (_, hex, ..) in ENCRYPTED {
        a_wrong_or_missing_key_says_so_in(hex);
    }
}

fn a_wrong_or_missing_key_says_so_in(hex: &str) {
    let bytes = unhex(hex);
    let wrong = StaticKeys::new(SegmentKey::new(1, [0x43; 32]));
    assert_eq!(
        segment_error(&bytes, &opening(&wrong)),
        FormatError::Authentication {
            region: 7,
            key_id: 1
        }
    );
    let other_id = StaticKeys::new(SegmentKey::new(2, [0x42; 32]));
    match segment_error(&bytes, &opening(&other_id)) {
        FormatError::KeyUnavailable {
            region: 7,
            key_id: 1,
            reason,
        } => assert!(reason.contains("no key with id 1"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match decode_object(&bytes).expect_err("no keys") {
        FormatError::KeyUnavailable {
            region: 7,
            key_id: 1,
            reason,
        } => assert!(reason.contains("no key provider"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hostile_transformed_segments_are_errors_not_allocations() {
    let keys = keys();
    // A decoded length of 4 GiB - 1: refused before anything is allocated.
    let bomb = edited(ZSTD, |b| b[56..60].copy_from_slice(&u32::MAX.to_le_bytes()));
    assert!(matches!(
        segment_error(&bomb, &opening(&keys)),
        FormatError::SegmentBody { region: 7, reason } if reason.contains("decoded length")
    ));
    // Fewer bytes than one entry's prefix.
    let short = edited(LZ4, |b| b[56..60].copy_from_slice(&3u32.to_le_bytes()));
    assert!(matches!(
        segment_error(&short, &opening(&keys)),
        FormatError::SegmentBody { region: 7, .. }
    ));
    // A decoded length that is within bounds but not what the frame holds.
    let lying = edited(LZ4, |b| b[56..60].copy_from_slice(&100u32.to_le_bytes()));
    let err = segment_error(&lying, &opening(&keys));
    assert!(
        matches!(
            err,
            FormatError::Decompress { region: 7, .. } | FormatError::SegmentBody { region: 7, .. }
        ),
        "{err:?}"
    );
    // A wrong tag, a flipped byte of the nonce or of the ciphertext, under either cipher.
    for (name, hex, ..) in ENCRYPTED {
        for at in [
            56 + 50,
            56 + 4,
            56 + 4 + 11,
            56 + 4 + 12,
            56 + 4 + 23,
            56 + 28,
        ] {
            let flipped = edited(hex, |b| b[at] ^= 0x01);
            assert_eq!(
                segment_error(&flipped, &opening(&keys)),
                FormatError::Authentication {
                    region: 7,
                    key_id: 1
                },
                "{name}, byte {at}"
            );
        }
    }
    // A cipher byte swapped for the other cipher's fails authentication; one this
    // reader does not know is named.
    let record = 56 + 51 + 8;
    for (name, hex, id, _) in ENCRYPTED {
        let swapped = edited(hex, |b| b[record + 45] = 3 - id);
        assert_eq!(
            segment_error(&swapped, &opening(&keys)),
            FormatError::Authentication {
                region: 7,
                key_id: 1
            },
            "{name}"
        );
        let unknown = edited(hex, |b| b[record + 45] = 3);
        decode_object_summary(&unknown).expect("the summary verifies");
        assert_eq!(
            segment_error(&unknown, &opening(&keys)),
            FormatError::UnknownTransform {
                region: 7,
                codec: 0,
                cipher: 3
            },
            "{name}"
        );
    }
    // An unknown codec: the summary verifies, the segment names its transform.
    let unknown = edited(LZ4, |b| b[56 + 20 + 8 + 44] = 9);
    decode_object_summary(&unknown).expect("the summary verifies");
    assert_eq!(
        segment_error(&unknown, &opening(&keys)),
        FormatError::UnknownTransform {
            region: 7,
            codec: 9,
            cipher: 0
        }
    );
    // In a version 1 object the transform bytes are reserved.
    let v1 = edited(LZ4, |b| b[8] = 1);
    assert_eq!(
        decode_object_summary(&v1).expect_err("reserved"),
        FormatError::ReservedNotZero("footer record")
    );
}

#[test]
fn a_truncated_envelope_is_named() {
    let keys = keys();
    // The segment shrunk to 20 bytes (less than key id and nonce): the footer and
    // trailer are rebuilt around it.
    let full = unhex(XCHACHA).to_vec();
    let mut cut = full[..56 + 20].to_vec();
    let mut footer = full[56 + 51..full.len() - 32].to_vec();
    footer[8 + 32..8 + 40].copy_from_slice(&20u64.to_le_bytes());
    cut.extend_from_slice(&footer);
    let mut trailer = full[full.len() - 32..].to_vec();
    trailer[8..16].copy_from_slice(&(56u64 + 20).to_le_bytes());
    cut.extend_from_slice(&trailer);
    let cut = Bytes::from(repair_crcs(&cut).expect("repairable"));
    assert!(matches!(
        segment_error(&cut, &opening(&keys)),
        FormatError::SegmentBody { region: 7, reason } if reason.contains("envelope")
    ));
}

fn config(keys: &Arc<StaticKeys>, compression: Compression) -> Config {
    Config::new("wal")
        .with_create_if_missing(true)
        .with_compression(compression)
        .with_encryption_keys(keys.clone())
}

fn config_with(keys: &Arc<StaticKeys>, compression: Compression, cipher: Cipher) -> Config {
    config(keys, compression).with_cipher(cipher)
}

async fn stored_objects(store: &InMemory) -> Vec<Bytes> {
    let listed: Vec<_> = store
        .list(Some(&Path::from("wal")))
        .try_collect()
        .await
        .expect("list");
    let mut objects = Vec::new();
    for meta in listed {
        let got = store.get(&meta.location).await.expect("get");
        objects.push(got.bytes().await.expect("bytes"));
    }
    objects
}

fn payload(region: u64, i: usize) -> Bytes {
    Bytes::from(format!(
        "region {region} row {i}: INSERT INTO metrics VALUES ('host-{region}', 'cpu', {i}, 0.{i:04}); "
    ).repeat(4))
}

#[tokio::test]
async fn an_encrypted_compressed_wal_replays_and_stores_no_plaintext() {
    for (_, _, id, cipher) in ENCRYPTED {
        an_encrypted_compressed_wal_replays_and_stores_no_plaintext_with(id, cipher).await;
    }
}

async fn an_encrypted_compressed_wal_replays_and_stores_no_plaintext_with(id: u8, cipher: Cipher) {
    let store = Arc::new(InMemory::new());
    let keys = Arc::new(keys());
    let written = config_with(&keys, Compression::ZSTD, cipher);
    let mut wal = ObjectStoreLogStore::open(store.clone(), written)
        .await
        .expect("open");
    let mut expected = Vec::new();
    for round in 0..5 {
        for region in [1u64, 2, 3] {
            let entries: Vec<Bytes> = (0..3).map(|i| payload(region, round * 3 + i)).collect();
            wal.append(vec![(region, entries.clone())])
                .expect("admitted");
            expected.extend(entries.into_iter().map(|e| (region, e)));
        }
        wal.flush().await.expect("flushed");
    }
    drop(wal);

    // No stored byte holds a payload, or even a distinctive piece of one.
    let objects = stored_objects(&store).await;
    assert!(objects.len() > 5);
    let mut version_2 = 0;
    for object in &objects {
        let summary = decode_object_summary(object).expect("a valid object");
        if !summary.footer.records.is_empty() {
            version_2 += 1;
            assert_eq!(summary.version, VERSION_2);
            assert!(summary
                .footer
                .records
                .iter()
                .all(|r| r.cipher == id && r.codec == CODEC_ZSTD));
        }
        for needle in [&b"INSERT INTO"[..], b"host-1", b"region 2 row"] {
            assert!(
                !object.windows(needle.len()).any(|w| w == needle),
                "plaintext {:?} stored",
                String::from_utf8_lossy(needle)
            );
        }
    }
    assert_eq!(version_2, 5);

    // Another instance with the keys replays everything, in order, per region.
    let wal = ObjectStoreLogStore::open(store.clone(), config(&keys, Compression::Off))
        .await
        .expect("reopen");
    for region in [1u64, 2, 3] {
        let got: Vec<Bytes> = wal
            .read(region, 0)
            .map_ok(|e| e.payload)
            .try_collect()
            .await
            .expect("read");
        let want: Vec<Bytes> = expected
            .iter()
            .filter(|(r, _)| *r == region)
            .map(|(_, e)| e.clone())
            .collect();
        assert_eq!(got, want, "region {region}");
    }
}

#[tokio::test]
async fn without_the_key_only_reads_fail_naming_it() {
    let store = Arc::new(InMemory::new());
    let keys = Arc::new(keys());
    let mut wal = ObjectStoreLogStore::open(store.clone(), config(&keys, Compression::Lz4))
        .await
        .expect("open");
    wal.append_and_flush(vec![(1, vec![payload(1, 0)]), (2, vec![payload(2, 0)])])
        .await
        .expect("appended");
    drop(wal);

    // Recovery needs no key (it reads headers, footers and trailers); reads do.
    let plain = Config::new("wal");
    let ro = ObjectStoreLogStore::open_read_only(store.clone(), plain)
        .await
        .expect("recovery without keys");
    for region in [1u64, 2] {
        let err = ro
            .read(region, 0)
            .try_collect::<Vec<_>>()
            .await
            .expect_err("no key");
        match err {
            Error::CorruptSegment {
                region: r,
                source: FormatError::KeyUnavailable { key_id: 1, .. },
                ..
            } => assert_eq!(r, region),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ro.request_counts().damaged_segments, 2);

    // A rotated provider that still holds key 1 reads; one that lost it cannot.
    let rotated = Arc::new(StaticKeys::new(SegmentKey::new(2, [7; 32])).with_key(vector_key()));
    assert_eq!(rotated.current().expect("current").id(), 2);
    let ro = ObjectStoreLogStore::open_read_only(
        store.clone(),
        Config::new("wal").with_encryption_keys(rotated),
    )
    .await
    .expect("recovery");
    let got: Vec<_> = ro.read(2, 0).try_collect().await.expect("read with key 1");
    assert_eq!(got[0].payload, payload(2, 0));
}

#[tokio::test]
async fn a_damaged_ciphertext_fails_only_its_region() {
    for (_, _, _, cipher) in ENCRYPTED {
        a_damaged_ciphertext_fails_only_its_region_with(cipher).await;
    }
}

async fn a_damaged_ciphertext_fails_only_its_region_with(cipher: Cipher) {
    let store = Arc::new(InMemory::new());
    let keys = Arc::new(keys());
    let written = config_with(&keys, Compression::Off, cipher);
    let mut wal = ObjectStoreLogStore::open(store.clone(), written)
        .await
        .expect("open");
    let receipt = wal
        .append_and_flush(vec![(1, vec![payload(1, 0)]), (2, vec![payload(2, 0)])])
        .await
        .expect("appended");
    drop(wal);
    // Region 1's ciphertext altered and its CRCs made right: only authentication sees it.
    let key = Path::from(format!("wal/{:020}.wal", receipt.sequence));
    let bytes = store
        .get(&key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    let mut altered = bytes.to_vec();
    altered[56 + 28 + 3] ^= 0x10;
    let altered = repair_crcs(&altered).expect("repairable");
    store
        .put(&key, PutPayload::from(altered))
        .await
        .expect("put");

    let ro = ObjectStoreLogStore::open_read_only(store.clone(), config(&keys, Compression::Off))
        .await
        .expect("recovery");
    let err = ro
        .read(1, 0)
        .try_collect::<Vec<_>>()
        .await
        .expect_err("altered");
    assert!(
        matches!(
            err,
            Error::CorruptSegment {
                region: 1,
                source: FormatError::Authentication { key_id: 1, .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains(&key.to_string()), "{err}");
    let got: Vec<_> = ro.read(2, 0).try_collect().await.expect("region 2 reads");
    assert_eq!(got[0].payload, payload(2, 0));
}

/// The cipher bytes of the data segments in `store`, in key order.
async fn ciphers_stored(store: &InMemory) -> Vec<u8> {
    let mut ciphers = Vec::new();
    for object in stored_objects(store).await {
        let summary = decode_object_summary(&object).expect("a valid object");
        ciphers.extend(summary.footer.records.iter().map(|r| r.cipher));
    }
    ciphers
}

/// A WAL written under one cipher is read, and written on, by a node configured for the
/// other: old objects keep their cipher byte, new ones get the node's; under `auto` a
/// WAL last written with cipher 1 keeps it.
#[tokio::test]
async fn a_wal_changes_cipher_and_stays_readable() {
    for (first, second) in [
        (Cipher::XChaCha20Poly1305, Cipher::Xaes256Gcm),
        (Cipher::Xaes256Gcm, Cipher::XChaCha20Poly1305),
    ] {
        let store = Arc::new(InMemory::new());
        let keys = Arc::new(keys());
        let mut expected = Vec::new();
        for (round, cipher) in [first, second, Cipher::Auto].into_iter().enumerate() {
            let config = config_with(&keys, Compression::Lz4, cipher);
            let mut wal = ObjectStoreLogStore::open(store.clone(), config)
                .await
                .expect("open");
            for region in [1u64, 2] {
                let got: Vec<Bytes> = wal
                    .read(region, 0)
                    .map_ok(|e| e.payload)
                    .try_collect()
                    .await
                    .expect("every earlier object reads");
                let want: Vec<Bytes> = expected
                    .iter()
                    .filter(|(r, _)| *r == region)
                    .map(|(_, e): &(u64, Bytes)| e.clone())
                    .collect();
                assert_eq!(got, want, "{first} then {second}, round {round}");
            }
            let entries: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|region| (region, vec![payload(region, round)]))
                .collect();
            wal.append_and_flush(entries.clone())
                .await
                .expect("appended");
            expected.extend(entries.into_iter().map(|(r, e)| (r, e[0].clone())));
        }
        // Under auto the WAL keeps the cipher it was last written with if that is cipher
        // 1 (readers of earlier releases open only cipher 1), else the faster one.
        let (a, b) = (first.id(), second.id());
        let auto = Cipher::Auto.for_wal(Some(b)).id();
        if second == Cipher::XChaCha20Poly1305 {
            assert_eq!(auto, b);
        }
        assert_eq!(ciphers_stored(&store).await, [a, a, b, b, auto, auto]);
    }
}

/// Under `auto` a new WAL gets the faster cipher on this CPU, and keeps it.
#[tokio::test]
async fn a_new_wal_under_auto_gets_the_faster_cipher() {
    let store = Arc::new(InMemory::new());
    let keys = Arc::new(keys());
    for round in 0..2 {
        let config = config_with(&keys, Compression::Lz4, Cipher::Auto);
        let mut wal = ObjectStoreLogStore::open(store.clone(), config)
            .await
            .expect("open");
        wal.append_and_flush(vec![(1, vec![payload(1, round)])])
            .await
            .expect("appended");
    }
    let auto = Cipher::Auto.resolve().id();
    assert_eq!(ciphers_stored(&store).await, [auto, auto]);
}

#[test]
fn a_wal_without_transforms_writes_version_1() {
    let xxx = [Bytes::from_static(b"xxx")];
    let sealing = Sealing {
        compression: Compression::Off,
        key: None,
        cipher: Cipher::Auto,
    };
    let encoded = encode_object_with(&header(), [(7, &xxx[..])], &sealing, &mut || {
        panic!("no nonce without a key")
    })
    .expect("encodes");
    assert_eq!(encoded.version(), VERSION);
    assert!(encoded.records().iter().all(|r| !r.is_transformed()));
}

/// A key provider that has lost its current key (a key service down).
#[derive(Debug)]
struct NoCurrentKey;

impl KeyProvider for NoCurrentKey {
    fn current(&self) -> Result<SegmentKey, object_store_wal::transform::KeyError> {
        Err(object_store_wal::transform::KeyError::Provider(
            "the key service is down".into(),
        ))
    }

    fn key(&self, id: u32) -> Result<SegmentKey, object_store_wal::transform::KeyError> {
        Err(object_store_wal::transform::KeyError::Unknown(id))
    }
}

#[tokio::test]
async fn an_object_that_cannot_be_encrypted_fails_its_appends_and_writes_nothing() {
    let store = Arc::new(InMemory::new());
    let config = Config::new("wal")
        .with_create_if_missing(true)
        .with_encryption_keys(Arc::new(NoCurrentKey));
    // The opening object has no segment: it needs no key.
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("open");
    let before = stored_objects(&store).await.len();
    let err = wal
        .append_and_flush(vec![(1, vec![payload(1, 0)])])
        .await
        .expect_err("no current key");
    match &err {
        Error::EncodeFailed { reason, .. } => {
            assert!(reason.contains("the key service is down"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.durability(), object_store_wal::Durability::NotWritten);
    assert_eq!(
        stored_objects(&store).await.len(),
        before,
        "nothing written"
    );
}
