//! What the WAL asks of a real object store, checked on the local servers that
//! `scripts/servers.sh start` runs: moto (S3 API, `::s3`, feature `aws`) and Azurite
//! (Azure Blob, `::azure`, feature `azure`). The variants are `#[ignore]`d with their
//! reason; `.ci/run` starts the servers and runs them (`--include-ignored`), and there a
//! server not named by its environment variable (`WAL_TEST_S3`, `WAL_TEST_AZURE`) fails
//! the test.
//!
//! - A conditional create of a taken key fails with `AlreadyExists` and leaves the first
//!   bytes, and the WAL reads that answer as the outcome table says (identical retry,
//!   stale tail).
//! - Concurrent creates of one key have exactly one winner, whose bytes the key holds.
//! - Listing order is the WAL's business: keys written in shuffled order list sorted.
//! - Large objects are recovered with bounded ranges computed from the listed size (Azure
//!   refuses suffix ranges): header and tail, and a footer longer than the tail read.

#![cfg(any(feature = "aws", feature = "azure"))]

#[path = "support/servers.rs"]
mod servers;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use object_store_wal::format::{encode_object, EncodedObject, Header, Link};
use object_store_wal::internal::read::{replay_regions, ReplayLimits};
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::internal::store::objects::{
    CreateAttempt, CreateKind, WalIo, TAIL_READ_BYTES,
};
use object_store_wal::internal::write::persist::{persist, PersistOutcome};
use object_store_wal::testing::CountingStore;
use object_store_wal::{entry_id, AppendParts, Config, ObjectStoreLogStore, RetryPolicy};

/// Runs each scenario on each server: `<name>::s3`, `<name>::azure`.
macro_rules! on_servers {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[cfg(feature = "aws")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs the S3-API server: WAL_TEST_S3 (scripts/servers.sh start; .ci/run runs it)"]
                async fn s3() {
                    let test = concat!(stringify!($name), "-s3");
                    super::$name(super::servers::server_store(super::servers::S3, test)).await
                }

                #[cfg(feature = "azure")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs Azurite: WAL_TEST_AZURE (scripts/servers.sh start; .ci/run runs it)"]
                async fn azure() {
                    let test = concat!(stringify!($name), "-azure");
                    super::$name(super::servers::server_store(super::servers::AZURE, test)).await
                }
            }
        )*
    };
}

on_servers!(
    second_create_fails_and_keeps_the_first_bytes,
    concurrent_creates_have_one_winner,
    listing_order_does_not_matter,
    large_objects_are_recovered_with_bounded_ranges,
    a_probe_reads_what_a_listing_would_without_the_size,
);

/// The same probe over the local stores (memory; a directory), which every run has.
#[tokio::test]
async fn a_probe_reads_what_a_listing_would_on_local_stores() {
    a_probe_reads_what_a_listing_would_without_the_size(Arc::new(
        object_store::memory::InMemory::new(),
    ))
    .await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let local =
        object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("a local store");
    a_probe_reads_what_a_listing_would_without_the_size(Arc::new(local)).await;
}

const PREFIX: &str = "wal";

fn io(store: &Arc<dyn ObjectStore>) -> WalIo {
    WalIo::new(store.clone(), PREFIX, 1024 * 1024).expect("valid prefix")
}

fn object(sequence: u64, epoch: u64, link: Link, region: u64, payloads: &[&[u8]]) -> EncodedObject {
    let header = Header {
        sequence,
        epoch,
        link,
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 0,
    };
    let entries: Vec<Bytes> = payloads.iter().map(|p| Bytes::copy_from_slice(p)).collect();
    encode_object(&header, [(region, entries.as_slice())]).expect("encodable")
}

async fn get(store: &Arc<dyn ObjectStore>, key: &Path) -> Bytes {
    store
        .get(key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body")
}

fn create_mode() -> PutOptions {
    PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    }
}

async fn second_create_fails_and_keeps_the_first_bytes(store: Arc<dyn ObjectStore>) {
    // The store's own answer.
    let key = Path::from("plain/key");
    store
        .put_opts(&key, PutPayload::from_static(b"first"), create_mode())
        .await
        .expect("the first create of a key succeeds");
    match store
        .put_opts(&key, PutPayload::from_static(b"second"), create_mode())
        .await
    {
        Err(object_store::Error::AlreadyExists { .. }) => {}
        other => panic!("a second create must fail with AlreadyExists, got {other:?}"),
    }
    assert_eq!(get(&store, &key).await, Bytes::from_static(b"first"));

    // The WAL's reading of it.
    let io = io(&store);
    let ours = object(1, 2, Link::NONE, 7, &[b"ours"]);
    let later = object(1, 3, Link::NONE, 7, &[b"a later instance's"]);
    assert!(matches!(
        io.create(&ours, CreateKind::Claim).await,
        CreateAttempt::Created
    ));
    let attempt = io.create(&later, CreateKind::Claim).await;
    assert!(
        matches!(attempt, CreateAttempt::AlreadyExists { found: None }),
        "{attempt:?}"
    );
    let attempt = io.create(&ours, CreateKind::Claim).await;
    assert!(
        matches!(attempt, CreateAttempt::AlreadyExists { found: None }),
        "an identical retry meets AlreadyExists too: {attempt:?}"
    );
    assert_eq!(io.read_whole(1).await.expect("read"), ours.to_bytes());

    let retry = RetryPolicy::default();
    // Our own bytes found: durable (an earlier attempt landed).
    let outcome = persist(&io, &ours, &retry).await;
    assert!(
        matches!(outcome, PersistOutcome::Durable { attempts: 1 }),
        "{outcome:?}"
    );
    // Epoch 3 finds epoch 2 at its sequence: a stale tail, nothing overwritten.
    let outcome = persist(&io, &later, &retry).await;
    assert!(
        matches!(outcome, PersistOutcome::StaleTail { found_epoch: 2 }),
        "{outcome:?}"
    );
    // Epoch 1 finds epoch 2: fenced.
    let earlier = object(1, 1, Link::NONE, 7, &[b"an earlier instance's"]);
    let outcome = persist(&io, &earlier, &retry).await;
    assert!(
        matches!(outcome, PersistOutcome::Fenced { fenced_by: 2 }),
        "{outcome:?}"
    );
    assert_eq!(io.read_whole(1).await.expect("read"), ours.to_bytes());
    let listing = io.list().await.expect("list");
    assert_eq!(listing.objects.len(), 1);
    assert_eq!(listing.objects[0].size, ours.len());
}

async fn concurrent_creates_have_one_winner(store: Arc<dyn ObjectStore>) {
    const WRITERS: u64 = 12;
    const ROUNDS: u64 = 8;
    let io = io(&store);
    for sequence in 1..=ROUNDS {
        // Distinct objects for one key, large enough that the uploads overlap.
        let contenders: Vec<EncodedObject> = (0..WRITERS)
            .map(|w| {
                let payload = vec![b'a' + w as u8; 256 * 1024];
                object(sequence, w + 1, Link::NONE, w, &[&payload])
            })
            .collect();
        let start = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
        let tasks: Vec<_> = contenders
            .iter()
            .cloned()
            .map(|o| {
                let io = io.clone();
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    io.create(&o, CreateKind::Claim).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for (w, task) in tasks.into_iter().enumerate() {
            match task.await.expect("task") {
                CreateAttempt::Created => winners.push(w),
                CreateAttempt::AlreadyExists { found: None } => {}
                other => panic!("sequence {sequence}, writer {w}: {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "sequence {sequence}: winners {winners:?}");
        let stored = io.read_whole(sequence).await.expect("read");
        assert!(
            contenders[winners[0]].same_bytes(&stored),
            "sequence {sequence}: the key holds the winner's bytes"
        );
    }
    let listed: Vec<u64> = io
        .list()
        .await
        .expect("list")
        .objects
        .iter()
        .map(|o| o.sequence)
        .collect();
    assert_eq!(listed, (1..=ROUNDS).collect::<Vec<_>>());
}

async fn listing_order_does_not_matter(store: Arc<dyn ObjectStore>) {
    const N: u64 = 40;
    let prefix = Path::from(PREFIX);
    // 17 is prime to 41: i * 17 mod 41 runs over 1..=40 in a scrambled order.
    let order: Vec<u64> = (1..=N).map(|i| i * 17 % (N + 1)).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=N).collect::<Vec<_>>());
    assert_ne!(order, sorted);
    // Sizes differ per object, so a size attached to the wrong key shows.
    let size = |sequence: u64| 100 + (sequence * 37) % 1000;
    for &sequence in &order {
        let bytes = vec![b'x'; size(sequence) as usize];
        store
            .put(&object_key(&prefix, sequence), PutPayload::from(bytes))
            .await
            .expect("put");
    }
    let foreign = ["wal/zzz", "wal/00000000000000000000.wal", "wal/a/b.wal"];
    for key in foreign.iter().rev() {
        store
            .put(&Path::from(*key), PutPayload::from_static(b"foreign"))
            .await
            .expect("put");
    }

    let io = io(&store);
    let listing = io.list().await.expect("list");
    let got: Vec<(u64, u64)> = listing
        .objects
        .iter()
        .map(|o| (o.sequence, o.size))
        .collect();
    let want: Vec<(u64, u64)> = (1..=N).map(|s| (s, size(s))).collect();
    assert_eq!(got, want);
    let mut foreign_sorted = foreign.map(String::from).to_vec();
    foreign_sorted.sort();
    assert_eq!(listing.foreign, foreign_sorted);

    let after = io.list_after(25).await.expect("list after");
    let got: Vec<u64> = after.objects.iter().map(|o| o.sequence).collect();
    assert_eq!(got, (26..=N).collect::<Vec<_>>());
}

/// Region `region`'s payload in the many-regions object.
fn small_payload(region: u64) -> Bytes {
    Bytes::from(format!("region-{region}"))
}

async fn large_objects_are_recovered_with_bounded_ranges(store: Arc<dyn ObjectStore>) {
    const REGIONS: u64 = 2000;
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.whole_read_threshold = 1024;
    let big: Vec<Bytes> = (0..3u8)
        .map(|i| Bytes::from(vec![b'0' + i; 100 * 1024]))
        .collect();
    let many: AppendParts = (1..=REGIONS).map(|r| (r, vec![small_payload(r)])).collect();

    let mut wal = ObjectStoreLogStore::open(store.clone(), config.clone())
        .await
        .expect("open");
    // One region, 300 KiB: header and a 64 KiB tail hold everything recovery needs.
    let big_seq = wal
        .append_and_flush(vec![(0, big.clone())])
        .await
        .expect("append")
        .sequence;
    // 2000 regions: a footer of 96 000 bytes, longer than the tail read.
    let many_seq = wal.append_and_flush(many).await.expect("append").sequence;
    drop(wal);

    let listing = io(&store).list().await.expect("list");
    let sizes: HashMap<u64, u64> = listing
        .objects
        .iter()
        .map(|o| (o.sequence, o.size))
        .collect();
    assert!(sizes[&big_seq] > TAIL_READ_BYTES + 1024, "{sizes:?}");
    assert!(
        sizes[&many_seq] > TAIL_READ_BYTES + 1024 && REGIONS * 48 > TAIL_READ_BYTES,
        "{sizes:?}"
    );

    let counting = CountingStore::new(store.clone());
    let counted: Arc<dyn ObjectStore> = counting.clone();
    let ro = ObjectStoreLogStore::open_read_only(counted, config.clone())
        .await
        .expect("read-only open of large objects");
    assert_eq!(ro.report().objects.len(), 3);
    let log = counting.get_log();
    for (sequence, reads) in [(big_seq, 2), (many_seq, 3)] {
        let key = object_key(&Path::from(PREFIX), sequence).to_string();
        let ranges: Vec<_> = log
            .iter()
            .filter(|g| g.key == key)
            .map(|g| g.range.clone())
            .collect();
        assert_eq!(ranges.len(), reads, "object {sequence}: {log:?}");
        for range in ranges {
            let range = range.unwrap_or_else(|| panic!("object {sequence} read whole: {log:?}"));
            assert!(
                range.start < range.end && range.end <= sizes[&sequence],
                "object {sequence}: {range:?} is not a bounded range within its size"
            );
        }
    }

    // Replay from the read-only open: exactly what was appended, with its ids.
    let entries: Vec<_> = ro.read(0, 0).try_collect().await.expect("read");
    let payloads: Vec<Bytes> = entries.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(payloads, big);
    let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
    assert_eq!(
        ids,
        (0..3).map(|p| entry_id(big_seq, p)).collect::<Vec<_>>()
    );
    let from: HashMap<u64, u64> = (1..=REGIONS).map(|r| (r, 0)).collect();
    let all: Vec<_> = replay_regions(
        ro.io().clone(),
        ro.catalog(),
        from,
        ReplayLimits::of(ro.config()),
        ro.config().corrupt_segment_policy,
    )
    .try_collect()
    .await
    .expect("replay");
    assert_eq!(all.len() as u64, REGIONS);
    for entry in &all {
        assert_eq!(entry.payload, small_payload(entry.region));
        assert_eq!(entry.id >> 20, many_seq);
    }
    let mut regions: Vec<u64> = all.iter().map(|e| e.region).collect();
    regions.sort_unstable();
    assert_eq!(regions, (1..=REGIONS).collect::<Vec<_>>());

    // A writer recovers the same chain and extends it.
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("reopen");
    let next = wal
        .append_and_flush(vec![(0, vec![Bytes::from_static(b"after")])])
        .await
        .expect("append after reopen");
    let entries: Vec<_> = wal.read(0, 0).try_collect().await.expect("read");
    let payloads: Vec<Bytes> = entries.into_iter().map(|e| e.payload).collect();
    let mut want = big;
    want.push(Bytes::from_static(b"after"));
    assert_eq!(payloads, want);
    assert_eq!(wal.last_entry_id(0), Some(entry_id(next.sequence, 0)));
}

/// What a recording proxy saw of one request: its method, path, headers and body.
#[cfg(feature = "aws")]
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// An HTTP/1.1 proxy on 127.0.0.1 that forwards every byte to `upstream` and records
/// each request the client sends (bodies by `Content-Length`). Its tasks end with the
/// test's runtime.
#[cfg(feature = "aws")]
async fn recording_proxy(
    upstream: std::net::SocketAddr,
) -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<Seen>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let addr = listener.local_addr().expect("its address");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            let record = record.clone();
            let (mut client_rx, mut client_tx) = client.into_split();
            let (mut server_rx, mut server_tx) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
            });
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    let n = match client_rx.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if server_tx.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    // Every complete request in `buf`.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let mut lines = head.lines();
                        let mut first = lines.next().unwrap_or_default().split(' ');
                        let (method, path) = (
                            first.next().unwrap_or_default().to_string(),
                            first.next().unwrap_or_default().to_string(),
                        );
                        let headers: HashMap<String, String> = lines
                            .filter_map(|l| l.split_once(':'))
                            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                            .collect();
                        let length: usize = headers
                            .get("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + length {
                            break;
                        }
                        let body = buf[end + 4..end + 4 + length].to_vec();
                        buf.drain(..end + 4 + length);
                        record.lock().expect("the record").push(Seen {
                            method,
                            path,
                            headers,
                            body,
                        });
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// CRC-64/NVME (the checksum S3 calls CRC64NVME): reflected polynomial
/// 0x9a6c9329ac4bc9b5, initial and final XOR all ones. Written out here so the test does
/// not check object_store against itself.
#[cfg(feature = "aws")]
fn crc64nvme(bytes: &[u8]) -> u64 {
    let mut crc = !0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x9a6c_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(feature = "aws")]
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every create the WAL sends S3 (through `store_from_url`'s builder) carries a
/// CRC64NVME checksum of exactly the bytes sent, which S3 checks before it stores
/// anything: a body damaged between this process and the store is refused (and the WAL
/// retries it with the identical bytes) instead of stored. moto, the S3 server CI runs,
/// stores what it is sent without checking any checksum (a wrong
/// `x-amz-checksum-crc64nvme`, `x-amz-checksum-sha256` or `Content-MD5` is accepted), so
/// the refusal itself cannot be shown here: this checks what S3 is given to check.
#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the S3-API server: WAL_TEST_S3 (scripts/servers.sh start; .ci/run runs it)"]
async fn s3_creates_carry_a_checksum_of_their_bytes() {
    assert_eq!(
        crc64nvme(b"123456789"),
        0xae8b_1486_0a79_9888,
        "the check value"
    );
    assert_eq!(base64(b"hello"), "aGVsbG8=");
    let url = std::env::var(servers::S3).expect("WAL_TEST_S3 (scripts/servers.sh start)");
    let endpoint = std::env::var("AWS_ENDPOINT").expect("AWS_ENDPOINT");
    let upstream: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address");
    let (proxy, seen) = recording_proxy(upstream).await;
    let parsed = url::Url::parse(&url).expect("a URL");
    let s3 = object_store_wal::internal::store::url::s3_builder(&parsed)
        .with_endpoint(format!("http://{proxy}"))
        .build()
        .expect("an S3 store");
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::prefix::PrefixStore::new(
        s3,
        servers::key_space("checksum"),
    ));
    let config = Config::new("wal").with_create_if_missing(true);
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("open");
    wal.append_and_flush(vec![(1, vec![Bytes::from_static(b"checked in transit")])])
        .await
        .expect("append");

    let creates: Vec<Seen> = seen
        .lock()
        .expect("the record")
        .iter()
        .filter(|s| s.method == "PUT" && s.path.ends_with(".wal"))
        .cloned()
        .collect();
    assert!(
        creates.len() >= 2,
        "the opening object and the append: {creates:?}"
    );
    for create in &creates {
        let sent = create
            .headers
            .get("x-amz-checksum-crc64nvme")
            .unwrap_or_else(|| panic!("{} has no checksum: {:?}", create.path, create.headers));
        let expected = base64(&crc64nvme(&create.body).to_be_bytes());
        assert_eq!(sent, &expected, "{}", create.path);
        assert_eq!(
            create.headers.get("if-none-match").map(String::as_str),
            Some("*")
        );
    }
}

/// A follower's probe (DESIGN.md "Tailing without listing") reads a key's summary from
/// its tail without knowing its size (a suffix GET; Azure, which takes none: a HEAD and
/// a ranged GET): for a small object, one larger than the tail read, and one whose
/// footer is longer than the tail read, exactly the summary a listing's read gives; an
/// absent key is `None`.
async fn a_probe_reads_what_a_listing_would_without_the_size(store: Arc<dyn ObjectStore>) {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.whole_read_threshold = 1024;
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("open");
    let small = wal
        .append_and_flush(vec![(1, vec![small_payload(1)])])
        .await
        .expect("append")
        .sequence;
    let big = wal
        .append_and_flush(vec![(2, vec![Bytes::from(vec![b'b'; 300 * 1024])])])
        .await
        .expect("append")
        .sequence;
    let many: AppendParts = (1..=200).map(|r| (r, vec![small_payload(r)])).collect();
    let many = wal.append_and_flush(many).await.expect("append").sequence;
    drop(wal);

    let io = io(&store);
    let listing = io.list().await.expect("list");
    for sequence in [small, big, many] {
        let listed = listing
            .objects
            .iter()
            .find(|o| o.sequence == sequence)
            .expect("listed");
        let read = io.read_summary(listed).await.expect("summary").summary;
        for header_at_once in [false, true] {
            let probed = io
                .probe_summary(sequence, 2048, header_at_once)
                .await
                .expect("probe");
            assert_eq!(probed.as_ref(), Some(&read), "object {sequence}");
        }
    }
    assert_eq!(
        io.probe_summary(many + 1, 2048, true).await.expect("probe"),
        None
    );
    assert_eq!(
        io.probe_summary(many + 1, 2048, false)
            .await
            .expect("probe"),
        None
    );
}
