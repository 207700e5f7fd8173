//! Stores on the local object-store servers that `scripts/servers.sh start` runs, for the
//! test variants that use them (`::s3`, `::azure`). Shared by `tests/store.rs`,
//! `tests/servers.rs` and `actors/tests/servers.rs` (included with `#[path]`).
//!
//! A server is named by an environment variable holding its store URL (`WAL_TEST_S3`,
//! `WAL_TEST_AZURE`); the store is built by `object_store_wal::store_from_url`, which
//! reads the rest (endpoint, keys, emulator) from the `AWS_*` / `AZURE_*` variables the
//! script exports. Each call gets a key space of its own on the server.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;

/// The S3-API server (moto).
pub const S3: &str = "WAL_TEST_S3";
/// Azure Blob (Azurite).
pub const AZURE: &str = "WAL_TEST_AZURE";

/// The server named by the variable `var`, under a fresh key space for `test`. The
/// server variants are `#[ignore]`d (reported as ignored, with the reason, by a plain
/// `cargo test`); run with `--include-ignored` they need their server, and fail saying
/// so when `var` is not set: a test that did not run never counts as passed.
pub fn server_store(var: &str, test: &str) -> Arc<dyn ObjectStore> {
    let url = match std::env::var(var) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("{test}: {var} is not set: start the servers (eval \"$(scripts/servers.sh start)\") or leave out --include-ignored"),
    };
    let store = object_store_wal::store_from_url(&url)
        .unwrap_or_else(|e| panic!("{var}={url} does not give a store: {e}"));
    Arc::new(PrefixStore::new(store, key_space(test)))
}

/// A key space no other test or run uses: the test's name, this process, a counter and
/// the time (a server may outlive many runs).
pub fn key_space(test: &str) -> Path {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Path::from_iter([
        "tests".to_string(),
        format!("{test}-{}-{n}-{nanos}", std::process::id()),
    ])
}
