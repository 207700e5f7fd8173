//! A prefix fenced for good (DESIGN.md "A node's regions after it died"; FORMAT.md
//! "Version 4"): once a closed opening object is listed, no writer opens the prefix
//! again, `create_if_missing` never starts a WAL over it, and read-only opens still
//! read the fenced chain. Over several stores one copy of a closed object refuses.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use object_store_wal::format::{decode_header, encode_object, Header, Link};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::{Config, Error, ObjectStoreLogStore, WalStores};

const PREFIX: &str = "wal";

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.min_object_interval = std::time::Duration::ZERO;
    config
}

async fn get(store: &dyn ObjectStore, sequence: u64) -> Bytes {
    let key = object_key(&Path::from(PREFIX), sequence);
    store
        .get(&key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
}

async fn put(store: &dyn ObjectStore, sequence: u64, bytes: Bytes) {
    let key = object_key(&Path::from(PREFIX), sequence);
    store.put(&key, PutPayload::from(bytes)).await.expect("put");
}

/// The closed opening object a fence writes above `end` (the chain end), as an open
/// would: the next key, epoch `sequence + 1`, linked to the end, an id offset above
/// every id base present.
fn closed_above(end: &Header) -> Bytes {
    let sequence = end.sequence + 1;
    let header = Header {
        sequence,
        epoch: sequence + 1,
        link: Link {
            sequence: end.sequence,
            epoch: end.epoch,
        },
        floor: end.floor,
        claim: false,
        id_offset: end.id_offset,
        closed: true,
    };
    encode_object(&header, std::iter::empty())
        .expect("encodes")
        .to_bytes()
}

/// Two acknowledged entries of region 1 (objects 2 and 3), the writer gone.
async fn written(store: &Arc<dyn ObjectStore>) -> Vec<u64> {
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let mut ids = Vec::new();
    for n in 0..2 {
        let receipt = wal
            .append_and_flush(vec![(1, vec![Bytes::from(format!("entry {n}"))])])
            .await
            .expect("append");
        ids.push(receipt.parts[0].first_id);
    }
    ids
}

fn is_closed(opened: Result<ObjectStoreLogStore, Error>, sequence: u64) {
    match opened {
        Err(e @ Error::PrefixClosed { sequence: s, .. }) => {
            assert_eq!(s, sequence);
            assert!(!e.is_retryable(), "terminal");
        }
        Err(e) => panic!("expected PrefixClosed at {sequence}, got {e}"),
        Ok(_) => panic!("a writer opened a closed prefix"),
    }
}

#[tokio::test]
async fn a_writer_never_opens_a_closed_prefix_and_readers_still_read_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let ids = written(&store).await;
    let end = decode_header(&get(store.as_ref(), 3).await).expect("object 3");
    put(store.as_ref(), 4, closed_above(&end)).await;

    is_closed(ObjectStoreLogStore::open(store.clone(), config()).await, 4);
    let no_create = config().with_create_if_missing(false);
    is_closed(ObjectStoreLogStore::open(store.clone(), no_create).await, 4);
    // Nothing was written: no claim, no opening object above the closed one.
    let listed: Vec<_> = store.list(None).try_collect().await.expect("list");
    assert_eq!(listed.len(), 4);

    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("a read-only open reads the fenced chain");
    assert_eq!(reader.report().closed, Some(4));
    let replayed: Vec<u64> = reader
        .replay([(1, 0)])
        .map_ok(|e| e.id)
        .try_collect()
        .await
        .expect("replay");
    assert_eq!(replayed, ids);
}

/// A retired prefix keeps only its closed object (a tombstone): a writer's open with
/// `create_if_missing` still refuses, rather than start a new WAL where a zombie's
/// reopen would find nothing.
#[tokio::test]
async fn a_tombstone_alone_refuses_a_new_wal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    written(&store).await;
    let end = decode_header(&get(store.as_ref(), 3).await).expect("object 3");
    put(store.as_ref(), 4, closed_above(&end)).await;
    for sequence in 1..=3 {
        let key = object_key(&Path::from(PREFIX), sequence);
        store.delete(&key).await.expect("delete");
    }
    is_closed(ObjectStoreLogStore::open(store.clone(), config()).await, 4);
}

/// Over three stores, one copy of a closed object (a fence whose create reached one
/// store so far) is enough to refuse a writer's open.
#[tokio::test]
async fn one_copy_of_a_closed_object_refuses_over_a_quorum() {
    let memory: Vec<Arc<dyn ObjectStore>> = (0..3)
        .map(|_| Arc::new(InMemory::new()) as Arc<dyn ObjectStore>)
        .collect();
    let stores = || WalStores::quorum(memory.iter().cloned()).expect("three stores");
    let mut wal = ObjectStoreLogStore::open(stores(), config())
        .await
        .expect("open");
    wal.append_and_flush(vec![(1, vec![Bytes::from_static(b"a")])])
        .await
        .expect("append");
    drop(wal);
    let end = decode_header(&get(memory[0].as_ref(), 2).await).expect("object 2");
    put(memory[2].as_ref(), 3, closed_above(&end)).await;
    is_closed(ObjectStoreLogStore::open(stores(), config()).await, 3);
}
