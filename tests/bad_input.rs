//! Bad configuration and bad prefixes are refused with errors that name what is wrong;
//! nothing is written to the store.

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::{Config, Error, HedgeAfter, ObjectStoreLogStore};

/// Every constrained field, made invalid alone, and the field the error must name.
fn invalid_configs() -> Vec<(&'static str, Config)> {
    let base = Config::new("wal").with_create_if_missing(true);
    let mut cases: Vec<(&'static str, Config)> = Vec::new();
    let mut push = |field: &'static str, f: &dyn Fn(&mut Config)| {
        let mut c = base.clone();
        f(&mut c);
        cases.push((field, c));
    };
    push("max_batch_bytes", &|c| c.max_batch_bytes = 100);
    push("max_batch_bytes", &|c| c.max_batch_bytes = 5 << 30);
    push("max_entry_bytes", &|c| c.max_entry_bytes = 0);
    push("max_entry_bytes", &|c| {
        c.max_entry_bytes = c.max_batch_bytes
    });
    push("max_in_flight", &|c| c.max_in_flight = 0);
    push("max_pending_bytes", &|c| {
        c.max_pending_bytes = c.max_entry_bytes - 1
    });
    push("recovery_concurrency", &|c| c.recovery_concurrency = 0);
    push("read_ahead", &|c| c.read_ahead = 0);
    push("retry.max_attempts", &|c| c.retry.max_attempts = 0);
    push("retry.initial_backoff", &|c| {
        c.retry.initial_backoff = c.retry.max_backoff + Duration::from_millis(1)
    });
    push("open_attempts", &|c| c.open_attempts = 0);
    push("max_create_duration", &|c| {
        c.max_create_duration = Duration::ZERO
    });
    push("reclaim_grace", &|c| {
        c.reclaim_grace = c.max_create_duration * 2 - Duration::from_millis(1)
    });
    push("replay_concurrency", &|c| c.replay_concurrency = 0);
    push("max_readers", &|c| c.max_readers = 0);
    push("source_idle_close", &|c| {
        c.source_idle_close = Duration::ZERO
    });
    push("source_idle_close", &|c| {
        c.source_idle_close = Duration::from_millis(999)
    });
    push("segment_cache_region_bytes", &|c| {
        c.segment_cache_region_bytes = c.segment_cache_bytes + 1
    });
    push("replay_budget_bytes", &|c| {
        c.replay_budget_bytes = c.max_batch_bytes - 1
    });
    push("request_timeout", &|c| c.request_timeout = Duration::ZERO);
    // Upper bounds: values that would overflow a deadline or a sum.
    let huge = Duration::from_secs(u64::MAX / 4);
    push("min_object_interval", &|c| c.min_object_interval = huge);
    push("request_timeout", &|c| c.request_timeout = huge);
    push("source_idle_close", &|c| c.source_idle_close = huge);
    push("max_create_duration", &|c| {
        c.max_create_duration = huge;
        c.reclaim_grace = huge.saturating_mul(2);
    });
    push("retry.initial_backoff", &|c| {
        c.retry.max_backoff = huge;
        c.retry.initial_backoff = huge;
    });
    push("hedge_after", &|c| c.hedge_after = HedgeAfter::Fixed(huge));
    push("max_in_flight", &|c| c.max_in_flight = usize::MAX);
    push("replay_concurrency", &|c| c.replay_concurrency = 1 << 20);
    push("max_readers", &|c| c.max_readers = usize::MAX);
    push("open_attempts", &|c| c.open_attempts = u32::MAX);
    push("max_pending_bytes", &|c| c.max_pending_bytes = u64::MAX);
    push("replay_budget_bytes", &|c| c.replay_budget_bytes = u64::MAX);
    push("hedge_after", &|c| {
        c.hedge_after = HedgeAfter::Fixed(Duration::ZERO)
    });
    push("hedge_after", &|c| {
        c.hedge_after = HedgeAfter::Adaptive {
            percentile: 100,
            floor: Duration::from_millis(1),
        }
    });
    cases
}

#[test]
fn the_defaults_are_valid() {
    assert!(Config::new("wal").validate().is_ok());
}

#[tokio::test]
async fn each_invalid_field_is_named_and_nothing_is_written() {
    for (field, config) in invalid_configs() {
        match config.validate() {
            Err(Error::Config { field: named, .. }) => assert_eq!(named, field),
            other => panic!("{field}: expected a Config error naming it, got {other:?}"),
        }
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let opened = ObjectStoreLogStore::open(store.clone(), config.clone()).await;
        assert!(
            matches!(&opened, Err(Error::Config { field: f, .. }) if *f == field),
            "{field}: open must refuse"
        );
        let read_only = ObjectStoreLogStore::open_read_only(store.clone(), config).await;
        assert!(
            matches!(&read_only, Err(Error::Config { field: f, .. }) if *f == field),
            "{field}: read-only open must refuse"
        );
        let listed = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .expect("memory lists");
        assert!(
            listed.is_empty(),
            "{field}: a refused open wrote {listed:?}"
        );
    }
}

#[tokio::test]
async fn bad_prefixes_are_refused_before_any_request() {
    for prefix in ["", "/wal", "wal/", "a//b", "a/../b", "../a", "a/.", "./a"] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let opened = ObjectStoreLogStore::open(
            store.clone(),
            Config::new(prefix).with_create_if_missing(true),
        )
        .await;
        match opened {
            Err(Error::InvalidPrefix { prefix: p, .. }) => assert_eq!(p, prefix),
            other => panic!("{prefix:?}: expected InvalidPrefix, got {other:?}"),
        }
        let listed = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .expect("memory lists");
        assert!(listed.is_empty());
    }
}

#[test]
fn bad_urls_are_refused_with_the_reason() {
    for url in ["not a url", "ftp://host/x", "file://relative/dir"] {
        assert!(
            matches!(
                object_store_wal::store_from_url(url),
                Err(Error::InvalidUrl { .. })
            ),
            "{url}"
        );
    }
}
