//! Configuration as a node writes it: chained setters, the store and prefix in one URL,
//! and (feature `serde`) a `[wal]` TOML section with human durations and sizes, unknown
//! fields refused by name and values validated as `Config::validate` does.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;
use object_store_wal::transform::{Cipher, Compression};
use object_store_wal::{
    split_store_url, store_and_prefix_from_url, Config, CorruptSegmentPolicy, Error,
    FirstRetryWait, HedgeAfter, ObjectStoreLogStore, RetryPolicy,
};

/// A config unlike the defaults in every field, built field by field.
fn every_field_changed() -> Config {
    let mut c = Config::new("nodes/node-7/wal");
    c.min_object_interval = Duration::from_millis(10);
    c.max_batch_bytes = 16 << 20;
    c.max_entry_bytes = 2 << 20;
    c.max_in_flight = 6;
    c.max_pending_bytes = 128 << 20;
    c.recovery_concurrency = 16;
    c.whole_read_threshold = 512 << 10;
    c.read_ahead = 3;
    c.retry = RetryPolicy::new(5, Duration::from_millis(20), Duration::from_secs(1));
    c.open_attempts = 4;
    c.max_create_duration = Duration::from_secs(30);
    c.reclaim_grace = Duration::from_secs(15 * 60);
    c.corrupt_segment_policy = CorruptSegmentPolicy::Skip;
    c.hedge_after = HedgeAfter::Fixed(Duration::from_millis(25));
    c.request_timeout = Duration::from_secs(10);
    c.replay_concurrency = 8;
    c.replay_budget_bytes = 256 << 20;
    c.create_if_missing = true;
    c.compression = Compression::Zstd { level: 5 };
    c.cipher = Cipher::XChaCha20Poly1305;
    c.segment_cache_bytes = 32 << 20;
    c.segment_cache_region_bytes = 1 << 20;
    c.max_readers = 16;
    c.source_idle_close = Duration::from_secs(120);
    c
}

#[test]
fn chained_setters_set_every_field() {
    let expected = every_field_changed();
    assert_ne!(expected, Config::new("nodes/node-7/wal"));
    let chained = Config::new("elsewhere")
        .with_prefix("nodes/node-7/wal")
        .with_min_object_interval(Duration::from_millis(10))
        .with_max_batch_bytes(16 << 20)
        .with_max_entry_bytes(2 << 20)
        .with_max_in_flight(6)
        .with_max_pending_bytes(128 << 20)
        .with_recovery_concurrency(16)
        .with_whole_read_threshold(512 << 10)
        .with_read_ahead(3)
        .with_retry(
            RetryPolicy::default()
                .with_max_attempts(5)
                .with_initial_backoff(Duration::from_millis(20))
                .with_max_backoff(Duration::from_secs(1)),
        )
        .with_open_attempts(4)
        .with_max_create_duration(Duration::from_secs(30))
        .with_reclaim_grace(Duration::from_secs(15 * 60))
        .with_corrupt_segment_policy(CorruptSegmentPolicy::Skip)
        .with_hedge_after(HedgeAfter::Fixed(Duration::from_millis(25)))
        .with_request_timeout(Duration::from_secs(10))
        .with_replay_concurrency(8)
        .with_replay_budget_bytes(256 << 20)
        .with_create_if_missing(true)
        .with_compression(Compression::Zstd { level: 5 })
        .with_cipher(Cipher::XChaCha20Poly1305)
        .with_segment_cache_bytes(32 << 20)
        .with_segment_cache_region_bytes(1 << 20)
        .with_max_readers(16)
        .with_source_idle_close(Duration::from_secs(120));
    assert_eq!(chained, expected);
    chained.validate().expect("a valid config");
}

#[test]
fn setters_check_nothing_and_validate_names_the_field() {
    let c = Config::new("wal").with_max_in_flight(0);
    match c.validate() {
        Err(Error::Config { field, .. }) => assert_eq!(field, "max_in_flight"),
        other => panic!("expected a Config error, got {other:?}"),
    }
}

/// `source_idle_close` is 30 s by default and takes 1 s to a year, both ends included.
#[test]
fn source_idle_close_takes_a_second_to_a_year() {
    assert_eq!(
        Config::new("wal").source_idle_close,
        Duration::from_secs(30)
    );
    let year = object_store_wal::config::MAX_DURATION;
    for (value, valid) in [
        (Duration::from_millis(999), false),
        (Duration::from_secs(1), true),
        (year, true),
        (year + Duration::from_secs(1), false),
    ] {
        match Config::new("wal").with_source_idle_close(value).validate() {
            Ok(()) => assert!(valid, "{value:?} accepted"),
            Err(Error::Config { field, .. }) => {
                assert!(!valid, "{value:?} refused");
                assert_eq!(field, "source_idle_close");
            }
            Err(other) => panic!("{value:?}: {other:?}"),
        }
    }
}

/// The largest entry size does not overflow the check that it fits an object.
#[test]
fn a_huge_max_entry_bytes_is_refused_not_overflowed() {
    let c = Config::new("wal").with_max_entry_bytes(u64::MAX);
    match c.validate() {
        Err(Error::Config { field, .. }) => assert_eq!(field, "max_entry_bytes"),
        other => panic!("expected a Config error, got {other:?}"),
    }
}

#[test]
fn a_url_splits_at_its_last_path_component() {
    let cases = [
        ("s3://bucket/path/prefix", "s3://bucket/path", "prefix"),
        ("s3://bucket/prefix", "s3://bucket/", "prefix"),
        ("gs://bucket/a/b/wal-1", "gs://bucket/a/b", "wal-1"),
        ("file:///var/lib/node/wal", "file:///var/lib/node", "wal"),
        ("file:///wal", "file:///", "wal"),
        ("memory:///prefix", "memory:///", "prefix"),
    ];
    for (url, store, prefix) in cases {
        let (s, p) = split_store_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!((s.as_str(), p.as_str()), (store, prefix), "{url}");
    }
}

#[test]
fn a_url_without_a_usable_prefix_is_refused_with_the_reason() {
    let cases = [
        ("s3://bucket", "no path"),
        ("s3://bucket/", "ends with '/'"),
        ("memory://prefix", "no path"),
        ("file:///dir/wal/", "ends with '/'"),
        ("s3://bucket/wal?versionId=3", "no query"),
        ("s3://bucket/my%20wal", "percent-encoded"),
        ("not a url", "relative URL"),
    ];
    for (url, reason) in cases {
        match split_store_url(url) {
            Err(Error::InvalidUrl { url: u, reason: r }) => {
                assert_eq!(u, url);
                assert!(r.contains(reason), "{url}: {r:?} does not say {reason:?}");
            }
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }
}

/// The split store and prefix put the WAL's objects where the URL says: under the
/// URL's whole path.
#[tokio::test]
async fn a_file_url_puts_the_objects_under_its_path() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = format!("file://{}/node-7/wal", dir.path().display());
    let (store, prefix) = store_and_prefix_from_url(&url).expect("a local store");
    assert_eq!(prefix, "wal");
    let mut wal = ObjectStoreLogStore::open(
        store.clone(),
        Config::new(prefix).with_create_if_missing(true),
    )
    .await
    .expect("open");
    let receipt = wal
        .append_and_flush(vec![(1, vec![Bytes::from_static(b"x")])])
        .await
        .expect("append");
    let file = dir
        .path()
        .join("node-7/wal")
        .join(format!("{:020}.wal", receipt.sequence));
    assert!(file.is_file(), "{} is missing", file.display());
    // The store is rooted at the URL's parent: the key is the prefix and the name.
    let listed: Vec<Path> = store
        .list(Some(&Path::from("wal")))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .expect("list");
    assert!(listed.contains(&Path::from(format!("wal/{:020}.wal", receipt.sequence))));
}

#[tokio::test]
async fn a_memory_url_gives_a_store_and_its_prefix() {
    let (store, prefix) = store_and_prefix_from_url("memory:///node-7").expect("memory");
    let store: Arc<dyn ObjectStore> = store;
    let wal = ObjectStoreLogStore::open(
        store,
        Config::new(prefix.clone()).with_create_if_missing(true),
    )
    .await
    .expect("open");
    assert_eq!(prefix, "node-7");
    drop(wal);
}

#[cfg(feature = "serde")]
mod file {
    use super::*;
    use object_store_wal::WalSection;
    use serde::Deserialize;

    /// A node's configuration file: its own settings and a `[wal]` section.
    #[derive(Debug, Deserialize)]
    struct NodeFile {
        #[allow(dead_code)]
        listen: String,
        wal: Config,
    }

    #[derive(Debug, Deserialize)]
    struct NodeWithUrl {
        wal: WalSection,
    }

    fn wal(toml_text: &str) -> Result<Config, String> {
        toml::from_str::<NodeFile>(toml_text)
            .map(|n| n.wal)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_section_with_every_field_in_human_units() {
        let text = r#"
            listen = "0.0.0.0:7000"

            [wal]
            prefix = "nodes/node-7/wal"
            min_object_interval = "10ms"
            max_batch_bytes = "16MiB"
            max_entry_bytes = "2MiB"
            max_in_flight = 6
            max_pending_bytes = "128 MiB"
            recovery_concurrency = 16
            whole_read_threshold = "512KiB"
            read_ahead = 3
            retry = { max_attempts = 5, initial_backoff = "20ms", max_backoff = "1s" }
            open_attempts = 4
            max_create_duration = "30s"
            reclaim_grace = "15min"
            corrupt_segment_policy = "skip"
            hedge_after = "25ms"
            request_timeout = "10s"
            replay_concurrency = 8
            replay_budget_bytes = 268435456
            create_if_missing = true
            compression = "zstd:5"
            cipher = "xchacha20-poly1305"
            segment_cache_bytes = "32MiB"
            segment_cache_region_bytes = "1 MiB"
            max_readers = 16
            source_idle_close = "2min"
        "#;
        assert_eq!(wal(text).expect("a valid section"), every_field_changed());
    }

    #[test]
    fn compression_and_keys_are_read_and_bad_ones_named() {
        let lz4 =
            wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\ncompression = \"lz4\"\n").expect("valid");
        assert_eq!(lz4.compression, Compression::Lz4);
        let err = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\ncompression = \"gzip\"\n")
            .expect_err("unknown codec");
        assert!(err.contains("\"gzip\": expected"), "{err}");
        let xaes = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\ncipher = \"xaes-256-gcm\"\n")
            .expect("valid");
        assert_eq!(xaes.cipher, Cipher::Xaes256Gcm);
        let auto = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\n").expect("valid");
        assert_eq!(auto.cipher, Cipher::Auto);
        let err = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\ncipher = \"aes-128-cbc\"\n")
            .expect_err("unknown cipher");
        assert!(err.contains("\"aes-128-cbc\": expected"), "{err}");

        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("keys");
        std::fs::write(
            &file,
            "7:0101010101010101010101010101010101010101010101010101010101010101\n",
        )
        .expect("write");
        let text = format!(
            "listen = \"x\"\n[wal]\nprefix = \"wal\"\nencryption_keys = \"file:{}\"\n",
            file.display()
        );
        let keys = wal(&text).expect("valid").encryption_keys.expect("keys");
        assert_eq!(keys.0.current().expect("current").id(), 7);
        let missing = "listen = \"x\"\n[wal]\nprefix = \"wal\"\nencryption_keys = \"file:/nonexistent/keys\"\n";
        let err = wal(missing).expect_err("no such file");
        assert!(
            err.contains("encryption_keys") && err.contains("/nonexistent/keys"),
            "{err}"
        );
    }

    #[test]
    fn fields_left_out_take_the_defaults() {
        let c = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\n").expect("valid");
        assert_eq!(c, Config::new("wal"));
        // A partial retry table keeps the other keys' defaults.
        let c = wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\n[wal.retry]\nmax_attempts = 3\n")
            .expect("valid");
        assert_eq!(c.retry, RetryPolicy::default().with_max_attempts(3));
        assert_eq!(c.retry.first_wait, FirstRetryWait::Adaptive);
        let c =
            wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\n[wal.retry]\nfirst_wait = \"fixed\"\n")
                .expect("valid");
        assert_eq!(c.retry.first_wait, FirstRetryWait::Fixed);
        let e =
            wal("listen = \"x\"\n[wal]\nprefix = \"wal\"\n[wal.retry]\nfirst_wait = \"soon\"\n")
                .expect_err("retry.first_wait");
        assert!(e.to_string().contains("soon"), "{e}");
    }

    #[test]
    fn sizes_take_iec_and_si_units_and_plain_bytes() {
        for (written, bytes) in [
            ("\"8MiB\"", 8u64 << 20),
            ("\"8MB\"", 8_000_000),
            ("\"8 mib\"", 8 << 20),
            ("\"1.5MiB\"", 3 << 19),
            ("9000000", 9_000_000),
        ] {
            let text = format!(
                "listen = \"x\"\n[wal]\nprefix = \"wal\"\nmax_entry_bytes = \"1KiB\"\nmax_batch_bytes = {written}\n"
            );
            let c = wal(&text).unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(c.max_batch_bytes, bytes, "{written}");
            assert_eq!(c.max_entry_bytes, 1024);
        }
        let bad = "listen = \"x\"\n[wal]\nprefix = \"wal\"\nmax_batch_bytes = \"8 parsecs\"\n";
        let e = wal(bad).expect_err("not a size");
        assert!(e.contains("8 parsecs"), "{e}");
    }

    #[test]
    fn hedge_after_reads_off_adaptive_a_duration_or_a_table() {
        let cases = [
            ("\"off\"", HedgeAfter::Off),
            ("\"adaptive\"", HedgeAfter::default()),
            ("\"25ms\"", HedgeAfter::Fixed(Duration::from_millis(25))),
            (
                "{ percentile = 95, floor = \"5ms\" }",
                HedgeAfter::Adaptive {
                    percentile: 95,
                    floor: Duration::from_millis(5),
                },
            ),
            (
                "{ percentile = 99 }",
                HedgeAfter::Adaptive {
                    percentile: 99,
                    floor: Duration::from_millis(10),
                },
            ),
        ];
        for (written, expected) in cases {
            let text =
                format!("listen = \"x\"\n[wal]\nprefix = \"wal\"\nhedge_after = {written}\n");
            let c = wal(&text).unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(c.hedge_after, expected, "{written}");
        }
        for (written, says) in [
            (
                "\"sometimes\"",
                "\"sometimes\" is not \"off\", \"adaptive\" or a duration",
            ),
            (
                "{ percentile = 95, flor = \"5ms\" }",
                "unknown field `flor`",
            ),
            (
                "{ percentile = 100 }",
                "the percentile must be from 1 to 99",
            ),
            ("\"0s\"", "a fixed hedge delay must be above zero"),
        ] {
            let text =
                format!("listen = \"x\"\n[wal]\nprefix = \"wal\"\nhedge_after = {written}\n");
            let e = wal(&text).expect_err(written);
            assert!(e.contains(says), "{written}: {e}");
        }
    }

    /// A field this version does not know fails the read, named, including
    /// `flush_interval`, which sealing no longer has.
    #[test]
    fn unknown_fields_are_refused_with_their_name() {
        for (line, name) in [
            ("flush_interval = \"10ms\"", "flush_interval"),
            ("max_batch_byte = \"8MiB\"", "max_batch_byte"),
        ] {
            let text = format!("listen = \"x\"\n[wal]\nprefix = \"wal\"\n{line}\n");
            let e = wal(&text).expect_err(line);
            assert!(e.contains(&format!("unknown field `{name}`")), "{e}");
        }
        let text = "listen = \"x\"\n[wal]\nprefix = \"wal\"\n[wal.retry]\nattempts = 3\n";
        let e = wal(text).expect_err("retry.attempts");
        assert!(e.contains("unknown field `attempts`"), "{e}");
    }

    /// An invalid value fails the read with the message `validate` gives for it.
    #[test]
    fn values_are_validated_once_read() {
        let cases = [
            (
                "max_entry_bytes = \"16MiB\"",
                Config::new("wal").with_max_entry_bytes(16 << 20),
            ),
            (
                "max_in_flight = 0",
                Config::new("wal").with_max_in_flight(0),
            ),
            (
                "reclaim_grace = \"1min\"",
                Config::new("wal").with_reclaim_grace(Duration::from_secs(60)),
            ),
            (
                "source_idle_close = \"500ms\"",
                Config::new("wal").with_source_idle_close(Duration::from_millis(500)),
            ),
            (
                "request_timeout = \"2years\"",
                Config::new("wal").with_request_timeout(Duration::from_secs(2 * 31_557_600)),
            ),
        ];
        for (line, same) in cases {
            let expected = same.validate().expect_err(line);
            assert!(matches!(expected, Error::Config { .. }), "{line}");
            let text = format!("listen = \"x\"\n[wal]\nprefix = \"wal\"\n{line}\n");
            let e = wal(&text).expect_err(line);
            assert!(e.contains(&expected.to_string()), "{line}: {e}");
        }
        // The prefix too: validated as an open would.
        let e = wal("listen = \"x\"\n[wal]\nprefix = \"/abs\"\n").expect_err("abs");
        assert!(e.contains("invalid prefix \"/abs\""), "{e}");
        let e = wal("listen = \"x\"\n[wal]\nmax_in_flight = 2\n").expect_err("no prefix");
        assert!(e.contains("missing field `prefix`"), "{e}");
    }

    #[test]
    fn a_wal_section_takes_the_store_and_prefix_from_one_url() {
        let text = r#"
            [wal]
            url = "memory:///nodes/node-7"
            min_object_interval = "5ms"
            max_batch_bytes = "16MiB"
        "#;
        let section = toml::from_str::<NodeWithUrl>(text).expect("valid").wal;
        assert_eq!(section.store_url, "memory:///nodes");
        let expected = Config::new("node-7")
            .with_min_object_interval(Duration::from_millis(5))
            .with_max_batch_bytes(16 << 20);
        assert_eq!(section.config, expected);
        section.store().expect("a memory store");

        for (text, says) in [
            (
                "[wal]\nurl = \"memory:///a\"\nprefix = \"b\"\n",
                "give one, not both",
            ),
            (
                "[wal]\nmin_object_interval = \"5ms\"\n",
                "missing field `url`",
            ),
            ("[wal]\nurl = \"s3://bucket\"\n", "no path"),
            (
                "[wal]\nurl = \"memory:///a\"\nflush_interval = \"1ms\"\n",
                "unknown field `flush_interval`",
            ),
        ] {
            let e = toml::from_str::<NodeWithUrl>(text).expect_err(text);
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        // A plain Config holds no store: a url there is refused.
        let e = wal("listen = \"x\"\n[wal]\nurl = \"memory:///a\"\n").expect_err("url");
        assert!(e.contains("`url` and `urls` name stores"), "{e}");
    }

    #[test]
    fn a_wal_section_takes_several_stores_from_urls() {
        let text = r#"
            [wal]
            urls = ["s3://zone-a/nodes/wal", "s3://zone-b/wal", "file:///var/lib/node/wal"]
        "#;
        let section = toml::from_str::<NodeWithUrl>(text).expect("valid").wal;
        assert_eq!(
            section.store_urls,
            vec!["s3://zone-a/nodes", "s3://zone-b/", "file:///var/lib/node"]
        );
        assert_eq!(section.store_url, "s3://zone-a/nodes");
        assert_eq!(section.config.prefix, "wal");
        for (text, says) in [
            (
                "[wal]\nurls = [\"memory:///a\", \"memory:///b\"]\n",
                "2 stores",
            ),
            (
                "[wal]\nurls = [\"memory:///x/a\", \"memory:///y/a\", \"memory:///z/b\"]\n",
                "ends in b, not a",
            ),
            (
                "[wal]\nurl = \"memory:///a\"\nurls = [\"memory:///a\"]\n",
                "not both",
            ),
        ] {
            let e = toml::from_str::<NodeWithUrl>(text).expect_err(text);
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        // Three memory stores hold one log at a quorum of two; one url is one store.
        let text = "[wal]\nurls = [\"memory:///x/a\", \"memory:///y/a\", \"memory:///z/a\"]\n";
        let stores = toml::from_str::<NodeWithUrl>(text)
            .expect("valid")
            .wal
            .stores()
            .expect("three stores");
        assert_eq!((stores.len(), stores.quorum_size()), (3, 2));
        let one = toml::from_str::<NodeWithUrl>("[wal]\nurl = \"memory:///a\"\n")
            .expect("valid")
            .wal
            .stores()
            .expect("one store");
        assert_eq!((one.len(), one.quorum_size()), (1, 1));
    }

    /// The guide's example section (docs/GUIDE.md) reads as it says.
    #[test]
    fn the_guides_example_reads() {
        let readme = include_str!("../docs/GUIDE.md");
        let start = readme
            .find("```toml\n")
            .expect("a TOML example in the guide")
            + 8;
        let len = readme[start..].find("```").expect("its end");
        let text = &readme[start..start + len];
        #[derive(Deserialize)]
        struct NodeToml {
            #[allow(dead_code)]
            node: toml::Table,
            wal: WalSection,
        }
        let node: NodeToml = toml::from_str(text).expect("the guide's example");
        assert_eq!(node.wal.store_url, "s3://my-bucket/nodes/node-7");
        assert_eq!(node.wal.config.prefix, "wal");
        assert_eq!(
            node.wal.config.min_object_interval,
            Duration::from_millis(10)
        );
        assert_eq!(node.wal.config.max_batch_bytes, 8 << 20);
        assert_eq!(
            node.wal.config.source_idle_close,
            Duration::from_secs(2 * 60)
        );
    }
}

/// The wait before a failed create's retries (issue 43's adaptive first retry): the
/// store's recent median create latency within 1 ms and `initial_backoff` for the
/// first, `backoff`'s for every later one (the budget in time does not shrink on a
/// fast store); `initial_backoff` while no median is known and when fixed.
#[test]
fn a_create_first_retry_follows_the_store_median_within_bounds() {
    let ms = Duration::from_millis;
    let retry = RetryPolicy::new(8, ms(50), ms(2000));
    assert_eq!(retry.first_wait, FirstRetryWait::Adaptive);
    assert_eq!(retry.create_backoff(1, Some(ms(20))), ms(20));
    assert_eq!(
        retry.create_backoff(2, Some(ms(20))),
        ms(100),
        "as backoff(2)"
    );
    let budget: Duration = (1..8).map(|n| retry.create_backoff(n, Some(ms(1)))).sum();
    let fixed_budget: Duration = (1..8).map(|n| retry.backoff(n)).sum();
    assert_eq!(
        budget,
        fixed_budget - ms(50) + ms(1),
        "only the first wait shrinks"
    );
    assert_eq!(
        retry.create_backoff(9, Some(ms(20))),
        ms(2000),
        "max_backoff"
    );
    assert_eq!(
        retry.create_backoff(1, Some(ms(300))),
        ms(50),
        "initial_backoff"
    );
    assert_eq!(
        retry.create_backoff(1, Some(Duration::from_micros(80))),
        object_store_wal::ADAPTIVE_FIRST_WAIT_MIN
    );
    assert_eq!(retry.create_backoff(1, None), ms(50), "no median yet");
    let fixed = retry.with_first_wait(FirstRetryWait::Fixed);
    assert_eq!(fixed.create_backoff(1, Some(ms(20))), ms(50));
    assert_eq!(fixed.create_backoff(2, Some(ms(20))), fixed.backoff(2));
}
