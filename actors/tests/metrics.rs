//! The actor runtime's metrics as a node serves them: a Prometheus exporter
//! (`metrics-exporter-prometheus`, as the node example runs it on `--metrics-addr`)
//! listens on 127.0.0.1, a WAL on a [`CountingStore`] appends, reads, replays,
//! reclaims and stops, and one scrape over HTTP must agree with the store's own counts
//! and with what the WAL acknowledged.
//!
//! The recorder is process-global, so this binary holds this one test. The exporter
//! runs on its own thread (installed outside any runtime); the WAL runs on a
//! current-thread runtime with tokio's clock paused, so `reclaim_grace` passes in
//! virtual time (the harness's way). The WAL is stopped before the scrape: every count
//! is final, and the store's counts are read after it.

mod support {
    pub mod harness;
    pub mod ledger;
    pub mod scrape;
}

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use object_store_wal::format::EMPTY_OBJECT_LEN;
use object_store_wal::testing::CountingStore;
use object_store_wal::Entry;
use support::harness::*;
use support::ledger::acked_entries;
use support::scrape::Scrape;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The histograms' buckets, in seconds.
const BUCKETS: &[f64] = &[0.001, 0.01, 0.1, 1.0, 10.0];

/// A port nobody listens on now (the exporter cannot report the port it bound to 0).
fn free_port() -> u16 {
    let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a probe");
    probe.local_addr().expect("the probe's address").port()
}

/// One GET of the exporter's page, over a plain TCP connection: the body.
async fn scrape(addr: SocketAddr) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the exporter");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("send the request");
    let mut response = Vec::new();
    conn.read_to_end(&mut response)
        .await
        .expect("read the response");
    let response = String::from_utf8(response).expect("a text response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "expected a body with a length: {head}"
    );
    body.to_string()
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

#[test]
fn a_scrape_agrees_with_the_stores_counts_and_the_acknowledgements() {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(BUCKETS)
        .expect("buckets")
        .install()
        .expect("install the exporter");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
        .block_on(drive_and_scrape(addr));
}

async fn drive_and_scrape(addr: SocketAddr) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let counting = CountingStore::new(inner.clone());
    let store: Arc<dyn ObjectStore> = counting.clone();
    let (wal, join) = spawn(&store, &config()).await;

    // Regions 1 and 2 one append at a time (an object each), region 3 four at once.
    let mut acked: Vec<Entry> = Vec::new();
    let mut appends = 0u64;
    for i in 0..4 {
        for region in [1u64, 2] {
            let parts = vec![(region, vec![payload(format!("r{region}-{i}"))])];
            let receipt = wal.append_many(parts.clone()).await.expect("append");
            acked.extend(acked_entries(&parts, &receipt));
            appends += 1;
        }
    }
    let concurrent = (0..4).map(|i| {
        let wal = wal.clone();
        async move {
            let parts = vec![(
                3,
                vec![payload(format!("r3-{i}a")), payload(format!("r3-{i}b"))],
            )];
            let receipt = wal.append_many(parts.clone()).await.expect("append");
            acked_entries(&parts, &receipt)
        }
    });
    for entries in futures::future::join_all(concurrent).await {
        acked.extend(entries);
        appends += 1;
    }
    let of = |acked: &[Entry], region: u64| -> Vec<Entry> {
        acked
            .iter()
            .filter(|e| e.region == region)
            .cloned()
            .collect()
    };

    // A read and a replay, checked entry by entry.
    assert_eq!(ids(&read(&wal, 1, 0).await), ids(&of(&acked, 1)));
    let mut replayed = collect(
        wal.replay(vec![(1, 0), (2, 0), (3, 0)])
            .await
            .expect("replay"),
    )
    .await;
    replayed.sort_by_key(|e| e.id);
    let mut all = acked.clone();
    all.sort_by_key(|e| e.id);
    assert_eq!(ids(&replayed), ids(&all));

    // Regions 1 and 2 are dropped; region 3's next object carries the raised floor,
    // and after the grace the reclaimer deletes everything below it.
    wal.obsolete_all(1).await.expect("obsolete_all");
    wal.obsolete_all(2).await.expect("obsolete_all");
    let parts = vec![(3, vec![payload("r3-last")])];
    let receipt = wal.append_many(parts.clone()).await.expect("append");
    acked.extend(acked_entries(&parts, &receipt));
    appends += 1;
    let first_of_3 = of(&acked, 3)
        .iter()
        .map(|e| e.id >> 20)
        .min()
        .expect("region 3");
    let floor = stats(&wal).await.floor;
    assert_eq!(floor, first_of_3, "region 3 pins its first object");
    let s = stats_until_virtual(&wal, "the reclaim", Duration::from_secs(1), |s| {
        s.reclaimed_below >= floor
    })
    .await;
    stop(wal, join).await;

    let text = scrape(addr).await;
    let scrape = Scrape::of(&text, PREFIX);
    let counts = counting.counts();
    for (op, n) in [
        ("put", load(&counts.puts)),
        ("get", load(&counts.gets)),
        ("list", load(&counts.lists)),
        ("delete", load(&counts.deletes)),
    ] {
        assert_eq!(
            scrape.requests_of(op),
            n,
            "{op}s: scraped and seen by the store"
        );
        assert_eq!(scrape.requests(op, "ok"), n, "every {op} succeeded");
    }

    // What was created: every PUT but the opening object's (no claims on a fresh prefix,
    // no retries), and what the WAL acknowledged.
    let objects = load(&counts.puts) - 1;
    assert_eq!(scrape.count("wal_objects_created_total"), objects);
    assert_eq!(s.objects, objects);
    let bytes = load(&counts.put_bytes) - EMPTY_OBJECT_LEN as u64;
    assert_eq!(scrape.count("wal_objects_created_bytes_total"), bytes);
    assert_eq!(s.object_bytes, bytes);
    assert_eq!(scrape.count("wal_appends_acknowledged_total"), appends);
    assert_eq!(s.appends, appends);
    assert_eq!(
        scrape.count("wal_entries_acknowledged_total"),
        acked.len() as u64
    );

    // One sample per append, per object, per open, per replay.
    assert_eq!(scrape.samples_of("wal_append_to_durable_seconds"), appends);
    assert_eq!(scrape.samples_of("wal_seal_to_durable_seconds"), objects);
    assert_eq!(scrape.samples_of("wal_recovery_duration_seconds"), 1);
    assert_eq!(scrape.samples_of("wal_replay_duration_seconds"), 1);

    // The reclaim: every key below the floor, once.
    let (live, _) = listing(&inner).await;
    let last = live.last().copied().expect("objects left");
    assert_eq!(live, (floor..=last).collect::<Vec<_>>());
    assert_eq!(load(&counts.deletes), floor - 1, "keys 1 to the floor's");
    assert_eq!(scrape.count("wal_reclaimed_objects_total"), floor - 1);
    assert_eq!(s.deleted, floor - 1);

    // Positions, as the last stats saw them; nothing pending after the stop.
    assert_eq!(scrape.count("wal_epoch"), s.epoch);
    assert_eq!(scrape.count("wal_floor_sequence"), s.floor);
    assert_eq!(scrape.count("wal_live_objects"), s.chain_objects);
    assert_eq!(scrape.count("wal_pending_bytes"), 0);
    assert_eq!(scrape.count("wal_uploads_in_flight"), 0);
    for none in [
        "wal_appends_failed_total",
        "wal_writer_restarts_total",
        "wal_create_retries_total",
        "wal_damaged_segments_total",
    ] {
        assert_eq!(scrape.count(none), 0, "{none}");
    }
}
