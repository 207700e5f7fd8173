//! The actor runtime over compressed and encrypted segments (FORMAT.md version 2): a
//! follower started before the appends, reads, replays and a restart all give back
//! every acknowledged entry with its id; no stored object holds a payload in the
//! clear; and a WAL spawned without the key recovers, then fails each region's replay
//! naming the key it lacks.

mod support {
    pub mod harness;
}

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::format::{decode_object_summary, FormatError};
use object_store_wal::transform::{
    aes_gcm_accelerated, Cipher, Compression, SegmentKey, StaticKeys,
};
use object_store_wal::{Config, Entry, Error};
use support::harness::*;

fn transformed(compression: Compression, cipher: Cipher) -> Config {
    let keys = Arc::new(StaticKeys::new(SegmentKey::new(9, [0x5c; 32])));
    config_no_reclaim()
        .with_compression(compression)
        .with_encryption_keys(keys)
        .with_cipher(cipher)
}

/// A compressible payload whose text is easy to find in stored bytes.
fn row(region: u64, i: u64) -> Bytes {
    Bytes::from(format!("secret-row region={region} i={i:04} ").repeat(8))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_entry_comes_back_through_the_actors() {
    for (compression, cipher) in [
        (Compression::ZSTD, Cipher::XChaCha20Poly1305),
        (Compression::Lz4, Cipher::Xaes256Gcm),
        (Compression::Off, Cipher::Auto),
    ] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let config = transformed(compression, cipher);
        let (wal, join) = spawn(&store, &config).await;
        let follower = wal.follow(1, 0).await.expect("follow");

        // Four regions appended from four tasks at once.
        let mut tasks = Vec::new();
        for region in 1..=4u64 {
            let wal = wal.clone();
            tasks.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..20 {
                    let receipt = wal
                        .append(region, vec![row(region, i)])
                        .await
                        .expect("append");
                    acked.push((receipt.parts[0].first_id, row(region, i)));
                }
                (region, acked)
            }));
        }
        let mut acked: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
        for task in tasks {
            let (region, entries) = task.await.expect("appender");
            acked.insert(region, entries);
        }

        let mut followed = Vec::new();
        while followed.len() < acked[&1].len() {
            let entry: Entry = bounded("the follower", follower.recv_async())
                .await
                .expect("following")
                .expect("an entry");
            followed.push((entry.id, entry.payload));
        }
        assert_eq!(followed, acked[&1], "{compression}");
        for (region, entries) in &acked {
            assert_eq!(
                &ids(&read(&wal, *region, 0).await),
                entries,
                "{compression}"
            );
        }
        stop(wal, join).await;

        // Stored bytes: every data segment encrypted, no payload in the clear.
        let (sequences, _) = listing(&store).await;
        for sequence in sequences {
            let bytes = object_at(&store, sequence).await.expect("listed");
            let summary = decode_object_summary(&bytes).expect("a valid object");
            assert!(summary
                .footer
                .records
                .iter()
                .all(|r| r.cipher == cipher.id()));
            assert!(!bytes.windows(10).any(|w| w == b"secret-row"));
        }

        // A restart with the keys replays everything; one without them recovers and
        // fails each region's replay, naming the key.
        let (wal, join) = spawn(&store, &config).await;
        let replayed = collect(
            wal.replay((1..=4).map(|r| (r, 0)).collect())
                .await
                .expect("replay"),
        )
        .await;
        for (region, entries) in &acked {
            let got: Vec<(u64, Bytes)> = replayed
                .iter()
                .filter(|e| e.region == *region)
                .map(|e| (e.id, e.payload.clone()))
                .collect();
            assert_eq!(&got, entries, "{compression}: region {region}");
        }
        stop(wal, join).await;

        let (wal, join) = spawn(&store, &config_no_reclaim()).await;
        let rx = wal
            .replay((1..=4).map(|r| (r, 0)).collect())
            .await
            .expect("replay");
        let mut failed = Vec::new();
        while let Ok(item) = bounded("the replay", rx.recv_async()).await {
            match item {
                Err(Error::CorruptSegment {
                    region,
                    source: FormatError::KeyUnavailable { key_id: 9, .. },
                    ..
                }) => failed.push(region),
                other => panic!("{compression}: expected a missing key, got {other:?}"),
            }
        }
        failed.sort_unstable();
        assert_eq!(failed, vec![1, 2, 3, 4], "{compression}");
        stop(wal, join).await;
    }
}

/// A node upgraded to `cipher = auto` keeps writing an existing WAL's cipher 1 (a node
/// not yet upgraded reads only cipher 1), through the runtime's writer too; a WAL it
/// starts anew gets cipher 2. Only a CPU with AES instructions tells the two apart (the
/// core's `transform` tests check the choice for both CPUs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_keeps_an_existing_wals_cipher_1() {
    if !aes_gcm_accelerated() {
        eprintln!(
            "skipped: without AES instructions `auto` writes cipher 1 to every WAL, so \
             keeping an existing WAL's cipher 1 cannot show"
        );
        return;
    }
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for (round, cipher) in [Cipher::XChaCha20Poly1305, Cipher::Auto]
        .into_iter()
        .enumerate()
    {
        let (wal, join) = spawn(&store, &transformed(Compression::Off, cipher)).await;
        wal.append(1, vec![row(1, round as u64)])
            .await
            .expect("append");
        stop(wal, join).await;
    }
    let fresh: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (wal, join) = spawn(&fresh, &transformed(Compression::Off, Cipher::Auto)).await;
    wal.append(1, vec![row(1, 0)]).await.expect("append");
    stop(wal, join).await;

    for (store, want) in [
        (&store, Cipher::XChaCha20Poly1305.id()),
        (&fresh, Cipher::Xaes256Gcm.id()),
    ] {
        let (sequences, _) = listing(store).await;
        let mut ciphers = Vec::new();
        for sequence in sequences {
            let bytes = object_at(store, sequence).await.expect("listed");
            let summary = decode_object_summary(&bytes).expect("a valid object");
            ciphers.extend(summary.footer.records.iter().map(|r| r.cipher));
        }
        assert!(!ciphers.is_empty());
        assert!(ciphers.iter().all(|c| *c == want), "{ciphers:?}");
    }
}
