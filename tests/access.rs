//! A store that refuses access (a missing permission, bad credentials, a directory the
//! process may not write): a definite refusal, named with its operation and key, sent
//! once, never retried, never retryable, and nothing written. (Which `object_store`
//! errors count as a refusal: `error.rs`'s unit tests.)

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::testing::{CreateFault, FaultStore};
use object_store_wal::{Config, Durability, Error, ObjectStoreLogStore};

fn assert_denied(e: &Error, key_suffix: &str) {
    match e {
        Error::AccessDenied { op, key, .. } => {
            assert_eq!(*op, "create");
            assert!(key.ends_with(key_suffix), "{key}");
        }
        other => panic!("expected AccessDenied, got {other:?}"),
    }
    assert!(!e.is_retryable(), "{e:?}");
    assert_eq!(e.durability(), Durability::NotWritten);
    assert!(e.to_string().contains("refused"), "{e}");
}

fn faults() -> (Arc<FaultStore>, Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(Arc::new(InMemory::new()));
    let store: Arc<dyn ObjectStore> = faults.clone();
    (faults, store)
}

#[tokio::test]
async fn an_open_refused_access_fails_at_once_naming_the_create() {
    let (faults, store) = faults();
    faults.fail_every_create(Some(CreateFault::Denied));
    let e = ObjectStoreLogStore::open(store, Config::new("wal").with_create_if_missing(true))
        .await
        .expect_err("refused");
    assert_denied(&e, "wal/00000000000000000001.wal");
    // One create: not retried, not reopened (before: a minute of retries and opens,
    // then `OpenContended`, marked retryable).
    assert_eq!(faults.fault_counts().denied, 1);
    assert!(
        faults.inner().list(None).next().await.is_none(),
        "nothing written"
    );
}

#[tokio::test]
async fn a_flush_refused_access_fails_not_written_without_a_retry() {
    let (faults, store) = faults();
    let mut wal = ObjectStoreLogStore::open(store, Config::new("wal").with_create_if_missing(true))
        .await
        .expect("open");
    faults.fail_every_create(Some(CreateFault::Denied));
    wal.append(vec![(1, vec![Bytes::from_static(b"a")])])
        .expect("admitted");
    let e = wal.flush().await.expect_err("refused");
    assert_denied(&e, "wal/00000000000000000002.wal");
    assert_eq!(faults.fault_counts().denied, 1, "sent once");
    // The epoch is over; what comes next is refused unsent.
    let e = wal
        .append(vec![(1, vec![Bytes::from_static(b"b")])])
        .expect_err("ended");
    assert_eq!(e.durability(), Durability::NotWritten);
}

/// A typo must not start an empty WAL: an open as the writer where no WAL object is
/// fails naming the location and writes nothing, unless `create_if_missing`.
#[tokio::test]
async fn an_open_where_no_wal_is_fails_unless_create_if_missing() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = Config::new("walx");
    assert!(!config.create_if_missing, "the safe default");
    let e = ObjectStoreLogStore::open(store.clone(), config.clone())
        .await
        .expect_err("no WAL there");
    match &e {
        Error::WalMissing { location } => assert!(location.contains("walx"), "{location}"),
        other => panic!("expected WalMissing, got {other:?}"),
    }
    assert!(!e.is_retryable());
    assert!(store.list(None).next().await.is_none(), "nothing written");
    // A read-only open is not a writer: it finds an empty WAL.
    let ro = ObjectStoreLogStore::open_read_only(store.clone(), config.clone())
        .await
        .expect("read-only");
    assert_eq!(ro.report().max_sequence, 0);
    // Said explicitly, the WAL starts; from then on the prefix holds one.
    let mut wal =
        ObjectStoreLogStore::open(store.clone(), config.clone().with_create_if_missing(true))
            .await
            .expect("created");
    wal.append_and_flush(vec![(1, vec![Bytes::from_static(b"a")])])
        .await
        .expect("append");
    drop(wal);
    ObjectStoreLogStore::open(store, config)
        .await
        .expect("an existing WAL opens without the switch");
}
