//! Bad appends through the actors get typed errors that say nothing was written, and so
//! do appends after stop; a bad configuration is refused at spawn, naming the field.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::{AppendParts, Config, Durability, Error};
use object_store_wal_actors::{spawn_wal, RestartPolicy, SpawnError, WalHandle};

async fn wal(config: Config) -> (WalHandle, Arc<dyn ObjectStore>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (wal, _) = spawn_wal(store.clone(), config, RestartPolicy::default())
        .await
        .expect("spawns");
    (wal, store)
}

fn small() -> Config {
    let mut c = Config::new("wal").with_create_if_missing(true);
    c.max_batch_bytes = 4096;
    c.max_entry_bytes = 1024;
    c.max_pending_bytes = 8192;
    c
}

#[tokio::test]
async fn malformed_appends_get_typed_errors_and_write_nothing() {
    let (wal, _store) = wal(small()).await;
    let cases: Vec<(&str, AppendParts)> = vec![
        ("no parts", vec![]),
        ("empty part", vec![(1, vec![])]),
        (
            "entry over max_entry_bytes",
            vec![(1, vec![Bytes::from(vec![0u8; 1025])])],
        ),
        (
            "append over the object limit",
            vec![(1, vec![Bytes::from(vec![0u8; 1000]); 5])],
        ),
        (
            "too many entries",
            vec![(1, vec![Bytes::new(); (1 << 20) + 1])],
        ),
        (
            "the control region",
            vec![
                (1, vec![Bytes::from_static(b"x")]),
                (u64::MAX, vec![Bytes::from_static(b"y")]),
            ],
        ),
    ];
    for (what, parts) in cases {
        let err = wal.append_many(parts).await.expect_err(what);
        let typed = match what {
            "no parts" | "empty part" => matches!(err, Error::EmptyAppend),
            "entry over max_entry_bytes" => {
                matches!(
                    err,
                    Error::EntryTooLarge {
                        region: 1,
                        len: 1025,
                        max: 1024
                    }
                )
            }
            "append over the object limit" => {
                matches!(err, Error::AppendTooLarge { max: 4096, .. })
            }
            "the control region" => matches!(err, Error::ReservedRegion { region: u64::MAX }),
            _ => matches!(err, Error::TooManyEntries { region: 1, .. }),
        };
        assert!(typed, "{what}: got {err:?}");
        assert_eq!(err.durability(), Durability::NotWritten, "{what}");
        assert!(!err.is_retryable(), "{what}");
    }
    // A valid append still works, and it is the only entry in the log.
    let receipt = wal
        .append(1, vec![Bytes::from_static(b"ok")])
        .await
        .expect("append");
    let rx = wal.read(1, 0).await.expect("read");
    let mut ids = Vec::new();
    while let Ok(e) = rx.recv_async().await {
        ids.push(e.expect("entry").id);
    }
    assert_eq!(ids, vec![receipt.parts[0].first_id]);
    wal.stop().await.expect("stop");
}

#[tokio::test]
async fn appends_after_stop_are_refused_as_not_written() {
    let (wal, _store) = wal(small()).await;
    wal.append(1, vec![Bytes::from_static(b"before")])
        .await
        .expect("append");
    wal.stop().await.expect("stop");
    wal.stop().await.expect("stop is idempotent");
    let err = wal
        .append(1, vec![Bytes::from_static(b"after")])
        .await
        .expect_err("stopped");
    assert!(matches!(err, Error::Stopped { .. }), "{err:?}");
    assert_eq!(err.durability(), Durability::NotWritten);
}

#[tokio::test]
async fn invalid_configuration_is_refused_at_spawn() {
    let mut c = Config::new("wal").with_create_if_missing(true);
    c.max_in_flight = 0;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    match spawn_wal(store, c, RestartPolicy::default()).await {
        Err(SpawnError::Invalid(Error::Config { field, .. })) => assert_eq!(field, "max_in_flight"),
        other => panic!("expected a Config error, got {:?}", other.err()),
    }
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    match spawn_wal(store, Config::new("a/../b"), RestartPolicy::default()).await {
        Err(SpawnError::Invalid(Error::InvalidPrefix { .. })) => {}
        other => panic!("expected InvalidPrefix, got {:?}", other.err()),
    }
}

/// A store that refuses the WAL access ends it with the refusal, at the open or at the
/// first append: `AccessDenied`, not retryable, `NotWritten`, sent once; no restart
/// spins on it (the supervisor escalates, as when fenced).
#[tokio::test]
async fn a_store_that_refuses_access_ends_the_wal_with_the_refusal() {
    use object_store_wal::testing::{CreateFault, FaultStore};

    let refused = |e: &Error| {
        matches!(e, Error::AccessDenied { op: "create", .. })
            && !e.is_retryable()
            && e.durability() == Durability::NotWritten
    };
    // At the open (the opening object's create is refused), and at an append (the open
    // went through, then the store's policy changed).
    for at_open in [true, false] {
        let faults = FaultStore::new(Arc::new(InMemory::new()));
        let store: Arc<dyn ObjectStore> = faults.clone();
        let deny = || faults.fail_every_create(Some(CreateFault::Denied));
        if at_open {
            deny();
        }
        let (wal, join) = spawn_wal(
            store,
            Config::new("wal").with_create_if_missing(true),
            RestartPolicy::default(),
        )
        .await
        .expect("spawns");
        if !at_open {
            wal.ready().await.expect("open");
            deny();
        }
        let e = wal
            .append(1, vec![Bytes::from_static(b"a")])
            .await
            .expect_err("refused");
        assert!(refused(&e), "{e:?}");
        join.await.expect("the WAL ended by itself");
        assert!(wal.terminal_error().as_ref().is_some_and(refused));
        let denied = faults.fault_counts().denied;
        assert_eq!(denied, 1, "no retry, no new open (at the open: {at_open})");
    }
}

/// A typo must not start an empty WAL: the runtime opening a prefix with no WAL, without
/// `create_if_missing`, ends with `WalMissing` (no retry, nothing written).
#[tokio::test]
async fn spawning_where_no_wal_is_ends_with_wal_missing() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (wal, join) = spawn_wal(store.clone(), Config::new("typo"), RestartPolicy::default())
        .await
        .expect("spawns");
    let e = wal.ready().await.expect_err("no WAL there");
    assert!(
        matches!(&e, Error::WalMissing { location } if location.contains("typo")),
        "{e:?}"
    );
    join.await.expect("the WAL ended by itself");
    let listed = futures::StreamExt::next(&mut store.list(None)).await;
    assert!(listed.is_none(), "nothing written");
}
