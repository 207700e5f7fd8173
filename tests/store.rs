//! Integration tests of the core: recovery on hand-built prefixes, the open/fencing
//! protocol (claims, opening object, late creates of an earlier instance), the outcome
//! table of a create (sequential write path and `store::persist`), region reads, damage
//! that stays local (a damaged segment fails only its region in reads, replays and
//! follows; unreadable objects below the floor do not fail recovery), and configuration
//! checks.
//!
//! Every scenario is one `async fn(Arc<dyn ObjectStore>)`, run on `InMemory`, on
//! `LocalFileSystem` (with fsync) in a fresh temporary directory, and on the local servers
//! of `scripts/servers.sh` (with the features `aws` / `azure`; ignored unless run with
//! `--include-ignored`, as `.ci/run` does, which needs `WAL_TEST_S3` / `WAL_TEST_AZURE`),
//! each in a fresh key space.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use object_store_wal::format::{self, encode_object, EncodedObject, FormatError, Header, Link};
use object_store_wal::internal::open::open_instance_above;
use object_store_wal::internal::read::{follow_region, replay_regions, ReplayLimits};
use object_store_wal::internal::store::codec::SegmentCodec;
use object_store_wal::internal::store::keys::{object_key, parse_key};
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::internal::write::batch::{Batch, BatchLimits, SealedObject};
use object_store_wal::internal::write::epoch::{seal_next, WritePosition};
use object_store_wal::internal::write::persist::{persist, PersistOutcome};
use object_store_wal::testing::{CountingStore, CreateFault, FaultStore, GetRecord};
use object_store_wal::{
    entry_id, AppendParts, BootClock, Config, CorruptSegmentPolicy, DamagedSegment, Durability,
    EpochEndReason, Error, ObjectStoreLogStore, RecoveryReport, RegionIds, RetryPolicy,
};

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

#[path = "support/servers.rs"]
mod servers;

/// Runs each named scenario on every store: `<name>::memory`, `<name>::local`, and, with
/// their features, `<name>::s3` and `<name>::azure` (ignored unless `--include-ignored`,
/// which needs the servers).
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn memory() {
                    super::$name(super::memory_store()).await
                }

                #[tokio::test]
                async fn local() {
                    let dir = tempfile::tempdir().expect("temporary directory");
                    super::$name(super::local_store(&dir)).await
                }

                #[cfg(feature = "aws")]
                #[tokio::test]
                #[ignore = "needs the S3-API server: WAL_TEST_S3 (scripts/servers.sh start; .ci/run runs it)"]
                async fn s3() {
                    let test = concat!(stringify!($name), "-s3");
                    super::$name(super::servers::server_store(super::servers::S3, test)).await
                }

                #[cfg(feature = "azure")]
                #[tokio::test]
                #[ignore = "needs Azurite: WAL_TEST_AZURE (scripts/servers.sh start; .ci/run runs it)"]
                async fn azure() {
                    let test = concat!(stringify!($name), "-azure");
                    super::$name(super::servers::server_store(super::servers::AZURE, test)).await
                }
            }
        )*
    };
}

on_every_store!(
    empty_prefix,
    one_chain,
    orphans_below_and_above_the_chain_end,
    late_lower_epoch_object_at_the_top,
    link_to_a_missing_object,
    link_with_mismatched_epoch,
    gaps_in_sequences,
    leftover_claims_never_end_the_chain,
    damaged_object_names_its_key,
    a_damaged_segment_fails_only_its_region,
    unreadable_objects_below_the_floor_do_not_fail_recovery,
    sequence_mismatch_names_its_key,
    foreign_keys_are_skipped_and_kept,
    open_claims_holes_and_writes_the_opening_object,
    open_above_claims_up_to_the_sequences_handed_out,
    floor_bounds_recovery,
    two_instances_one_after_the_other,
    late_create_meets_the_claim_and_is_fenced,
    claim_loses_to_a_late_create,
    claim_loses_and_leftover_claim_stays_off_the_chain,
    identical_opening_object_is_not_success,
    create_applied_then_error_is_acknowledged_on_retry,
    higher_epoch_at_our_sequence_fences,
    same_epoch_other_bytes_poisons,
    stale_tail_ends_the_epoch,
    unknown_outcome_ends_the_epoch,
    region_read_fetches_only_its_segment,
    config_errors_name_the_field,
    invalid_prefixes_are_refused,
    ids_follow_the_id_offset_and_never_run_backwards,
);

fn memory_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

fn local_store(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    Arc::new(
        LocalFileSystem::new_with_prefix(dir.path())
            .expect("local store")
            .with_fsync(true),
    )
}

const PREFIX: &str = "wal";

fn prefix_path() -> Path {
    Path::from(PREFIX)
}

fn key(sequence: u64) -> Path {
    object_key(&prefix_path(), sequence)
}

/// The defaults, with tiny backoffs and 3 create attempts.
fn config() -> Config {
    let mut c = Config::new(PREFIX).with_create_if_missing(true);
    c.retry = RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(2));
    c
}

fn header(sequence: u64, epoch: u64, link: (u64, u64), floor: u64) -> Header {
    Header {
        sequence,
        epoch,
        link: Link {
            sequence: link.0,
            epoch: link.1,
        },
        floor,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

fn claim(sequence: u64, epoch: u64, link: (u64, u64), floor: u64) -> Header {
    Header {
        claim: true,
        ..header(sequence, epoch, link, floor)
    }
}

fn parts(p: &[(u64, &[&str])]) -> AppendParts {
    p.iter()
        .map(|(region, entries)| {
            (
                *region,
                entries
                    .iter()
                    .map(|e| Bytes::copy_from_slice(e.as_bytes()))
                    .collect(),
            )
        })
        .collect()
}

fn encode(h: Header, segments: &[(u64, &[&str])]) -> EncodedObject {
    let segments = parts(segments);
    encode_object(&h, segments.iter().map(|(r, e)| (*r, e.as_slice()))).expect("encodable")
}

/// Puts a hand-built object at its key with a plain put.
async fn put_object(
    store: &Arc<dyn ObjectStore>,
    h: Header,
    segments: &[(u64, &[&str])],
) -> EncodedObject {
    let object = encode(h, segments);
    store
        .put(&key(h.sequence), PutPayload::from(object.to_bytes()))
        .await
        .expect("put");
    object
}

async fn put_raw(store: &Arc<dyn ObjectStore>, location: &Path, bytes: impl Into<Bytes>) {
    store
        .put(location, PutPayload::from(bytes.into()))
        .await
        .expect("put");
}

async fn get_bytes(store: &Arc<dyn ObjectStore>, location: &Path) -> Bytes {
    store
        .get(location)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
}

/// Every key under the WAL prefix, sorted.
async fn keys(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    let metas: Vec<ObjectMeta> = store
        .list(Some(&prefix_path()))
        .try_collect()
        .await
        .expect("list");
    let mut keys: Vec<String> = metas.into_iter().map(|m| m.location.to_string()).collect();
    keys.sort();
    keys
}

/// Every WAL object under the prefix: its header and length, by sequence.
async fn stored(store: &Arc<dyn ObjectStore>) -> BTreeMap<u64, (Header, u64)> {
    let metas: Vec<ObjectMeta> = store
        .list(Some(&prefix_path()))
        .try_collect()
        .await
        .expect("list");
    let mut out = BTreeMap::new();
    for meta in metas {
        if let Some(sequence) = parse_key(&prefix_path(), &meta.location) {
            let bytes = get_bytes(store, &meta.location).await;
            let h = format::decode_header(&bytes).expect("stored header decodes");
            out.insert(sequence, (h, bytes.len() as u64));
        }
    }
    out
}

/// The header of the object at `sequence`, checked to be an empty (96-byte) object.
async fn stored_empty(store: &Arc<dyn ObjectStore>, sequence: u64) -> Header {
    let bytes = get_bytes(store, &key(sequence)).await;
    assert_eq!(bytes.len(), 96, "object {sequence} is an empty object");
    let decoded = format::decode_object(&bytes).expect("decodes");
    assert!(decoded.segments.is_empty());
    decoded.summary.header
}

/// Region `region` from `from`, as `(id, payload)`; checks each entry's region.
async fn replay(wal: &ObjectStoreLogStore, region: u64, from: u64) -> Vec<(u64, String)> {
    wal.read(region, from)
        .map_ok(|e| {
            assert_eq!(e.region, region);
            (e.id, String::from_utf8(e.payload.to_vec()).expect("utf8"))
        })
        .try_collect()
        .await
        .expect("read")
}

fn ids(expected: &[(u64, u64, &str)]) -> Vec<(u64, String)> {
    expected
        .iter()
        .map(|(s, p, v)| (entry_id(*s, *p), v.to_string()))
        .collect()
}

fn on_chain(report: &RecoveryReport) -> Vec<u64> {
    report
        .objects
        .iter()
        .filter(|o| o.on_chain)
        .map(|o| o.header.sequence)
        .collect()
}

fn orphans(report: &RecoveryReport) -> Vec<u64> {
    let off: Vec<u64> = report
        .objects
        .iter()
        .filter(|o| !o.on_chain)
        .map(|o| o.header.sequence)
        .collect();
    assert_eq!(
        report.orphans,
        off.len(),
        "orphan count matches the objects"
    );
    off
}

fn expect_err<T: Debug>(r: Result<T, Error>) -> Error {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e,
    }
}

async fn open(store: &Arc<dyn ObjectStore>) -> ObjectStoreLogStore {
    ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open")
}

async fn open_ro(store: &Arc<dyn ObjectStore>) -> ObjectStoreLogStore {
    ObjectStoreLogStore::open_read_only(store.clone(), config())
        .await
        .expect("open read-only")
}

fn seal(state: &mut WritePosition, p: &[(u64, &[&str])]) -> SealedObject {
    let mut batch = Batch::new(BatchLimits::of(&config()));
    batch.admit(parts(p)).expect("admitted");
    seal_next(state, &mut batch, &SegmentCodec::identity()).expect("sealed")
}

fn one_attempt() -> RetryPolicy {
    RetryPolicy::new(1, Duration::from_millis(1), Duration::from_millis(1))
}

fn as_dyn<T: ObjectStore>(s: &Arc<T>) -> Arc<dyn ObjectStore> {
    s.clone()
}

// ---------------------------------------------------------------------------------------
// Recovery on hand-built prefixes
// ---------------------------------------------------------------------------------------

async fn empty_prefix(store: Arc<dyn ObjectStore>) {
    let mut ro = open_ro(&store).await;
    assert_eq!(*ro.report(), RecoveryReport::default());
    assert!(replay(&ro, 1, 0).await.is_empty());
    assert!(ro.epoch().is_none());
    let e = expect_err(ro.append(parts(&[(1, &["x"])])));
    assert!(matches!(e, Error::ReadOnly), "{e:?}");
    assert!(
        keys(&store).await.is_empty(),
        "a read-only open writes nothing"
    );

    let wal = open(&store).await;
    let opening = stored_empty(&store, 1).await;
    assert_eq!(opening, header(1, 2, (0, 0), 0));
    let state = wal.epoch().unwrap();
    assert_eq!(
        state,
        WritePosition {
            epoch: 2,
            next_sequence: 2,
            link: Link {
                sequence: 1,
                epoch: 2
            },
            floor: 0,
            id_offset: 0,
        }
    );
    assert_eq!(keys(&store).await, vec![key(1).to_string()]);
}

async fn one_chain(store: Arc<dyn ObjectStore>) {
    put_object(
        &store,
        header(1, 2, (0, 0), 0),
        &[(1, &["a", "b"]), (2, &["x"])],
    )
    .await;
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["c"])]).await;
    put_object(&store, header(3, 2, (2, 2), 0), &[(2, &["y", "z"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(3, 2, (2, 2), 0)));
    assert_eq!(on_chain(report), vec![1, 2, 3]);
    assert!(orphans(report).is_empty());
    assert_eq!(report.max_sequence, 3);
    assert!(report.foreign.is_empty());
    let entries: Vec<u64> = report.objects.iter().map(|o| o.entries).collect();
    assert_eq!(entries, vec![3, 1, 2]);

    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (1, 1, "b"), (2, 0, "c")])
    );
    assert_eq!(
        replay(&ro, 2, 0).await,
        ids(&[(1, 0, "x"), (3, 0, "y"), (3, 1, "z")])
    );
    assert_eq!(
        replay(&ro, 1, entry_id(1, 1)).await,
        ids(&[(1, 1, "b"), (2, 0, "c")])
    );
    assert_eq!(replay(&ro, 2, entry_id(3, 1)).await, ids(&[(3, 1, "z")]));
    assert!(replay(&ro, 1, entry_id(2, 1)).await.is_empty());
    assert!(replay(&ro, 99, 0).await.is_empty());
    assert_eq!(ro.last_entry_id(1), Some(entry_id(2, 0)));
    assert_eq!(ro.last_entry_id_overall(), Some(entry_id(3, 1)));

    let mut wal = open(&store).await;
    assert_eq!(stored_empty(&store, 4).await, header(4, 5, (3, 2), 0));
    let receipt = wal
        .append_and_flush(parts(&[(1, &["d"])]))
        .await
        .expect("append");
    assert_eq!(receipt.sequence, 5);
    assert_eq!(
        receipt.parts,
        vec![RegionIds {
            region: 1,
            first_id: entry_id(5, 0),
            count: 1
        }]
    );
    // The writer's own catalog serves the new entry too.
    assert_eq!(
        replay(&wal, 1, 0).await,
        ids(&[(1, 0, "a"), (1, 1, "b"), (2, 0, "c"), (5, 0, "d")])
    );
    let ro = open_ro(&store).await;
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (1, 1, "b"), (2, 0, "c"), (5, 0, "d")])
    );
    assert_eq!(on_chain(ro.report()), vec![1, 2, 3, 4, 5]);
}

/// Version 3 objects (FORMAT.md): a chain whose id offset rises mid-way replays each
/// entry with the id its object's id base gives; a read from an id inside the jump finds
/// the next entry; a new epoch counts its ids from above every id offset present, an
/// orphan's included (DESIGN.md "Regions moving between nodes"), so a region's ids
/// never run backwards; and an object that lowers the offset is refused.
async fn ids_follow_the_id_offset_and_never_run_backwards(store: Arc<dyn ObjectStore>) {
    let with_offset = |h: Header, id_offset: u64| Header { id_offset, ..h };
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(
        &store,
        with_offset(header(2, 2, (1, 2), 0), 40),
        &[(1, &["b", "c"])],
    )
    .await;
    put_object(
        &store,
        with_offset(header(3, 2, (2, 2), 0), 40),
        &[(2, &["x"])],
    )
    .await;
    // An orphan of an older epoch with a larger offset.
    put_object(
        &store,
        with_offset(header(4, 1, (1, 1), 0), 90),
        &[(3, &["o"])],
    )
    .await;

    let ro = open_ro(&store).await;
    assert_eq!(on_chain(ro.report()), vec![1, 2, 3]);
    assert_eq!(orphans(ro.report()), vec![4]);
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (42, 0, "b"), (42, 1, "c")])
    );
    assert_eq!(
        replay(&ro, 1, entry_id(2, 0)).await,
        ids(&[(42, 0, "b"), (42, 1, "c")])
    );
    assert_eq!(replay(&ro, 1, entry_id(42, 1)).await, ids(&[(42, 1, "c")]));
    assert_eq!(replay(&ro, 2, 0).await, ids(&[(43, 0, "x")]));
    assert_eq!(ro.last_entry_id(1), Some(entry_id(42, 1)));

    // The opening object (5) and the next object (6) carry the orphan's offset, 90.
    let mut wal = open(&store).await;
    let opening = get_bytes(&store, &key(5)).await;
    assert_eq!(
        format::decode_header(&opening).expect("decodes"),
        with_offset(header(5, 6, (3, 2), 0), 90)
    );
    assert_eq!(opening.len(), format::EMPTY_OBJECT_LEN_V3);
    let receipt = wal
        .append_and_flush(parts(&[(1, &["d"])]))
        .await
        .expect("append");
    assert_eq!(
        (receipt.sequence, receipt.parts[0].first_id),
        (6, entry_id(96, 0))
    );
    let ro = open_ro(&store).await;
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (42, 0, "b"), (42, 1, "c"), (96, 0, "d")])
    );

    // An object that lowers the offset along the chain: recovery refuses it, by name.
    put_object(
        &store,
        with_offset(header(7, 6, (6, 6), 0), 89),
        &[(1, &["e"])],
    )
    .await;
    let e = expect_err(ObjectStoreLogStore::open_read_only(store.clone(), config()).await);
    assert!(
        matches!(e, Error::InconsistentChain { sequence: 7, .. }),
        "{e:?}"
    );
}

async fn orphans_below_and_above_the_chain_end(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    // Below the chain end, not on it: an object the next instance did not extend.
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["orphan-below"])]).await;
    // A later instance's opening object and one object of it.
    put_object(&store, header(3, 4, (1, 2), 0), &[]).await;
    put_object(&store, header(4, 4, (3, 4), 0), &[(1, &["b"])]).await;
    // Above the chain end: its link names the absent 5.
    put_object(&store, header(6, 2, (5, 2), 0), &[(1, &["orphan-above"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(4, 4, (3, 4), 0)));
    assert_eq!(on_chain(report), vec![1, 3, 4]);
    assert_eq!(orphans(report), vec![2, 6]);
    assert_eq!(report.max_sequence, 6);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (4, 0, "b")]));

    let mut wal = open(&store).await;
    // M = 6: the hole 5 above the chain end is claimed, the opening object is 7, epoch 8.
    assert_eq!(stored_empty(&store, 5).await, claim(5, 8, (4, 4), 0));
    assert_eq!(stored_empty(&store, 7).await, header(7, 8, (4, 4), 0));
    assert_eq!(wal.epoch().unwrap().epoch, 8);
    assert_eq!(wal.epoch().unwrap().next_sequence, 8);
    // The hole 2 below the chain end is not claimed (it is taken anyway).
    assert_eq!(stored(&store).await.len(), 7);
    let r = wal
        .append_and_flush(parts(&[(1, &["c"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 8);

    let next = open(&store).await;
    let report = next.report();
    // Object 8 carries floor 1: region 1's first entry, in 1, is still live.
    assert_eq!(report.chain_end, Some(header(8, 8, (7, 8), 1)));
    assert_eq!(on_chain(report), vec![1, 3, 4, 7, 8]);
    assert_eq!(orphans(report), vec![2, 5, 6]);
    assert_eq!(
        replay(&next, 1, 0).await,
        ids(&[(1, 0, "a"), (4, 0, "b"), (8, 0, "c")])
    );
}

async fn late_lower_epoch_object_at_the_top(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["b"])]).await;
    put_object(&store, header(3, 4, (2, 2), 0), &[]).await;
    put_object(&store, header(4, 4, (3, 4), 0), &[(1, &["c"])]).await;
    // A late object of epoch 2 at the top; complete (its link is intact), but of a lower
    // epoch than the chain end.
    put_object(&store, header(5, 2, (2, 2), 0), &[(1, &["late"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(4, 4, (3, 4), 0)));
    assert_eq!(on_chain(report), vec![1, 2, 3, 4]);
    assert_eq!(orphans(report), vec![5]);
    assert_eq!(report.max_sequence, 5);
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (2, 0, "b"), (4, 0, "c")])
    );

    let wal = open(&store).await;
    assert_eq!(stored_empty(&store, 6).await, header(6, 7, (4, 4), 0));
    assert_eq!(wal.epoch().unwrap().epoch, 7);
    assert_eq!(stored(&store).await.len(), 6, "no claim: there is no hole");
}

async fn link_to_a_missing_object(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["b"])]).await;
    // Higher epoch, but linked to the absent 3: incomplete.
    put_object(&store, header(4, 5, (3, 5), 0), &[(1, &["lost"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(2, 2, (1, 2), 0)));
    assert_eq!(on_chain(report), vec![1, 2]);
    assert_eq!(orphans(report), vec![4]);
    assert_eq!(report.max_sequence, 4);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (2, 0, "b")]));

    let _wal = open(&store).await;
    assert_eq!(stored_empty(&store, 3).await, claim(3, 6, (2, 2), 0));
    assert_eq!(stored_empty(&store, 5).await, header(5, 6, (2, 2), 0));

    // The claim at 3 now completes nothing: 4 links to (3, 5), the claim has epoch 6.
    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(5, 6, (2, 2), 0)));
    assert_eq!(on_chain(report), vec![1, 2, 5]);
    assert_eq!(orphans(report), vec![3, 4]);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (2, 0, "b")]));
}

async fn link_with_mismatched_epoch(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["b"])]).await;
    // Links to (2, 3) but 2 has epoch 2; 4 extends 3 correctly and is broken through it.
    put_object(&store, header(3, 3, (2, 3), 0), &[(1, &["bad"])]).await;
    put_object(&store, header(4, 3, (3, 3), 0), &[(1, &["bad2"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(2, 2, (1, 2), 0)));
    assert_eq!(on_chain(report), vec![1, 2]);
    assert_eq!(orphans(report), vec![3, 4]);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (2, 0, "b")]));

    let _wal = open(&store).await;
    assert_eq!(stored_empty(&store, 5).await, header(5, 6, (2, 2), 0));
    assert_eq!(stored(&store).await.len(), 5, "no hole, no claim");
}

async fn gaps_in_sequences(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(3, 2, (1, 2), 0), &[(1, &["b"])]).await;
    put_object(&store, header(7, 2, (3, 2), 0), &[(1, &["c"]), (2, &["d"])]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(7, 2, (3, 2), 0)));
    assert_eq!(on_chain(report), vec![1, 3, 7]);
    assert!(orphans(report).is_empty());
    assert_eq!(report.max_sequence, 7);
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(1, 0, "a"), (3, 0, "b"), (7, 0, "c")])
    );
    assert_eq!(replay(&ro, 2, 0).await, ids(&[(7, 0, "d")]));
    assert_eq!(
        replay(&ro, 1, entry_id(2, 0)).await,
        ids(&[(3, 0, "b"), (7, 0, "c")])
    );

    let _wal = open(&store).await;
    assert_eq!(stored_empty(&store, 8).await, header(8, 9, (7, 2), 0));
    let present: Vec<u64> = stored(&store).await.into_keys().collect();
    assert_eq!(
        present,
        vec![1, 3, 7, 8],
        "gaps below the chain end are not claimed"
    );
}

async fn leftover_claims_never_end_the_chain(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    // An opener that claimed 2 and 3 (M was 3) and never wrote its opening object at 4.
    put_object(&store, claim(2, 5, (1, 2), 0), &[]).await;
    put_object(&store, claim(3, 5, (1, 2), 0), &[]).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(1, 2, (0, 0), 0)));
    assert_eq!(on_chain(report), vec![1]);
    assert_eq!(orphans(report), vec![2, 3]);
    assert_eq!(report.max_sequence, 3);
    assert!(report.objects[1].header.claim && report.objects[2].header.claim);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a")]));

    let mut wal = open(&store).await;
    assert_eq!(stored_empty(&store, 4).await, header(4, 5, (1, 2), 0));
    wal.append_and_flush(parts(&[(1, &["b"])]))
        .await
        .expect("append");
    let ro = open_ro(&store).await;
    assert_eq!(on_chain(ro.report()), vec![1, 4, 5]);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (5, 0, "b")]));
}

async fn damaged_object_names_its_key(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    let good = put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["payload-b"])]).await;
    let good = good.to_bytes();

    let flip = |at: usize| {
        let mut v = good.to_vec();
        v[at] ^= 0x01;
        Bytes::from(v)
    };
    let mut version_5 = good.to_vec();
    version_5[8] = 5;
    let crc = crc32fast::hash(&version_5[..52]);
    version_5[52..56].copy_from_slice(&crc.to_le_bytes());

    let footer_at = good.len() - 32 - 8 - 48;
    // A damaged segment is not among them: it fails only reads of its region
    // (`a_damaged_segment_fails_only_its_region`).
    let damages: Vec<(&str, Bytes)> = vec![
        ("header byte", flip(20)),
        ("footer byte", flip(footer_at + 10)),
        ("trailer magic", flip(good.len() - 30)),
        ("truncated", good.slice(..60)),
        ("version 5", Bytes::from(version_5)),
    ];
    let expected_key = key(2).to_string();
    for (what, bytes) in damages {
        put_raw(&store, &key(2), bytes).await;
        let before = keys(&store).await;
        for read_only in [true, false] {
            let result = if read_only {
                ObjectStoreLogStore::open_read_only(store.clone(), config()).await
            } else {
                ObjectStoreLogStore::open(store.clone(), config()).await
            };
            let e = expect_err(result);
            match &e {
                Error::CorruptObject { key, source } => {
                    assert_eq!(key, &expected_key, "{what}");
                    match what {
                        "header byte" => assert!(
                            matches!(source, FormatError::CrcMismatch { part: "header", .. }),
                            "{what}: {source:?}"
                        ),
                        "footer byte" => assert!(
                            matches!(source, FormatError::CrcMismatch { part: "footer", .. }),
                            "{what}: {source:?}"
                        ),
                        "version 5" => assert_eq!(source, &FormatError::UnsupportedVersion(5)),
                        "truncated" => {
                            assert!(
                                matches!(source, FormatError::Truncated { .. }),
                                "{source:?}"
                            )
                        }
                        _ => {
                            assert_eq!(source, &FormatError::BadMagic { part: "trailer" }, "{what}")
                        }
                    }
                }
                other => panic!("{what}: expected CorruptObject, got {other:?}"),
            }
            assert!(e.to_string().contains(&expected_key), "{what}: {e}");
        }
        assert_eq!(
            keys(&store).await,
            before,
            "{what}: a failed open writes nothing"
        );
    }
}

/// One item of a read, replay or follow as text: `region:id:payload`, or the damaged
/// segment an error names. Any other error fails the test.
fn item(i: Result<object_store_wal::Entry, Error>) -> String {
    match i {
        Ok(e) => format!(
            "{}:{}:{}",
            e.region,
            e.id,
            String::from_utf8(e.payload.to_vec()).expect("utf8")
        ),
        Err(Error::CorruptSegment {
            key,
            region,
            source: FormatError::CrcMismatch {
                part: "segment", ..
            },
        }) => format!("damaged {key} region {region}"),
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

/// `region:id:payload` of the entry at `(sequence, position)`.
fn at(region: u64, sequence: u64, position: u64, payload: &str) -> String {
    format!("{region}:{}:{payload}", entry_id(sequence, position))
}

fn damaged_counter(wal: &ObjectStoreLogStore) -> u64 {
    wal.io()
        .request_stats()
        .damaged_segments
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// A byte flipped inside region 2's segment of object 2 of a three-region prefix: the
/// open (which reads these small objects whole) succeeds and reports it; regions 1 and 3
/// read every entry; region 2 meets a `CorruptSegment` naming key and region in a read,
/// a replay and a follow, which ends there under `Fail` and goes on past it under `Skip`.
async fn a_damaged_segment_fails_only_its_region(store: Arc<dyn ObjectStore>) {
    put_object(
        &store,
        header(1, 2, (0, 0), 0),
        &[(1, &["1a", "1b"]), (2, &["2a", "2b"]), (3, &["3a"])],
    )
    .await;
    let object = put_object(
        &store,
        header(2, 2, (1, 2), 0),
        &[(1, &["1c"]), (2, &["2c", "2d"]), (3, &["3b", "3c"])],
    )
    .await;
    put_object(
        &store,
        header(3, 2, (2, 2), 0),
        &[(1, &["1d"]), (2, &["2e"]), (3, &["3d"])],
    )
    .await;
    let record = *object.records().iter().find(|r| r.region == 2).unwrap();
    let mut bytes = object.to_bytes().to_vec();
    // The first payload byte of "2c" (after its 4-byte length).
    bytes[record.offset as usize + 4] ^= 0x01;
    let damaged_crc = crc32fast::hash(&bytes[record.offset as usize..][..record.length as usize]);
    put_raw(&store, &key(2), bytes).await;
    let damaged = format!("damaged {} region 2", key(2));

    // Recovery reads each object whole (they are under `whole_read_threshold`), finds the
    // damage, reports it, and goes on.
    let ro = open_ro(&store).await;
    assert_eq!(
        ro.report().damaged_segments,
        vec![DamagedSegment {
            key: key(2).to_string(),
            sequence: 2,
            region: 2,
            error: FormatError::CrcMismatch {
                part: "segment",
                stored: record.crc,
                computed: damaged_crc,
            },
        }]
    );
    assert_eq!(damaged_counter(&ro), 1);
    assert_eq!(on_chain(ro.report()), vec![1, 2, 3]);
    assert!(ro.report().unread_below_floor.is_empty());

    // The other regions read every entry, those of object 2 included.
    let region_1 = vec![
        at(1, 1, 0, "1a"),
        at(1, 1, 1, "1b"),
        at(1, 2, 0, "1c"),
        at(1, 3, 0, "1d"),
    ];
    let region_3 = vec![
        at(3, 1, 0, "3a"),
        at(3, 2, 0, "3b"),
        at(3, 2, 1, "3c"),
        at(3, 3, 0, "3d"),
    ];
    for (region, expected) in [(1, &region_1), (3, &region_3)] {
        let got: Vec<String> = ro.read(region, 0).map(item).collect().await;
        assert_eq!(&got, expected, "region {region}");
    }
    assert_eq!(damaged_counter(&ro), 1, "no other read met damage");

    // Region 2 under `Fail`: the entries before the hole, the error, the end.
    let before_hole = vec![at(2, 1, 0, "2a"), at(2, 1, 1, "2b"), damaged.clone()];
    let got: Vec<String> = ro.read(2, 0).map(item).collect().await;
    assert_eq!(got, before_hole);
    assert_eq!(damaged_counter(&ro), 2, "the read's finding counts");

    // Under `Skip`, through a writer's open (which writes its opening object, 4): the
    // report of the hole, then the entries after it.
    let mut skip = config();
    skip.corrupt_segment_policy = CorruptSegmentPolicy::Skip;
    let mut wal = ObjectStoreLogStore::open(store.clone(), skip.clone())
        .await
        .expect("a writer opens over a damaged segment");
    assert_eq!(wal.report().damaged_segments, ro.report().damaged_segments);
    let past_hole: Vec<String> = before_hole
        .iter()
        .cloned()
        .chain([at(2, 3, 0, "2e")])
        .collect();
    let got: Vec<String> = wal.read(2, 0).map(item).collect().await;
    assert_eq!(got, past_hole);

    // A replay of the three regions: one error in the segment's place; under `Fail`
    // nothing more of region 2, under `Skip` region 2 goes on.
    let from: std::collections::HashMap<u64, u64> = [(1, 0), (2, 0), (3, 0)].into();
    let replay_of = |policy| {
        replay_regions(
            wal.io().clone(),
            wal.catalog(),
            from.clone(),
            ReplayLimits::of(&config()),
            policy,
        )
        .map(item)
        .collect::<Vec<String>>()
    };
    let object_1 = [at(1, 1, 0, "1a"), at(1, 1, 1, "1b"), at(2, 1, 0, "2a")];
    let object_1 = object_1
        .into_iter()
        .chain([at(2, 1, 1, "2b"), at(3, 1, 0, "3a")]);
    let object_2 = [
        at(1, 2, 0, "1c"),
        damaged.clone(),
        at(3, 2, 0, "3b"),
        at(3, 2, 1, "3c"),
    ];
    let expected: Vec<String> = object_1
        .clone()
        .chain(object_2.clone())
        .chain([at(1, 3, 0, "1d"), at(3, 3, 0, "3d")])
        .collect();
    assert_eq!(replay_of(CorruptSegmentPolicy::Fail).await, expected);
    let expected: Vec<String> = object_1
        .chain(object_2)
        .chain([at(1, 3, 0, "1d"), at(2, 3, 0, "2e"), at(3, 3, 0, "3d")])
        .collect();
    assert_eq!(replay_of(CorruptSegmentPolicy::Skip).await, expected);

    // Follow under `Fail`: the entries before the hole, the error, the end (the growth
    // sender is still alive, so the end comes from the error).
    let (_grows, growth) = tokio::sync::watch::channel(0u64);
    let got: Vec<String> = follow_region(ro.io().clone(), ro.catalog(), 2, 0, ro.config(), growth)
        .map(item)
        .collect()
        .await;
    assert_eq!(got, before_hole);

    // Follow under `Skip`: past the hole, then what the writer appends next, once.
    let (grows, growth) = tokio::sync::watch::channel(0u64);
    let mut follow = follow_region(wal.io().clone(), wal.catalog(), 2, 0, &skip, growth);
    let mut got = Vec::new();
    for _ in 0..past_hole.len() {
        got.push(item(follow.next().await.expect("an item")));
    }
    assert_eq!(got, past_hole);
    let receipt = wal
        .append_and_flush(parts(&[(2, &["2f"])]))
        .await
        .expect("append");
    grows.send_replace(receipt.sequence);
    let next = follow.next().await.map(item);
    assert_eq!(next, Some(at(2, receipt.sequence, 0, "2f")));
    drop(grows);
    assert!(
        follow.next().await.is_none(),
        "the follow ends with its growth"
    );
    // The writer's recovery, its read, its two replays and its follow: five findings.
    assert_eq!(damaged_counter(&wal), 5);
}

/// Objects below the chosen chain's floor that cannot be read, one damaged and one
/// deleted between the listing and its read, do not fail recovery; an object at or above
/// the floor that cannot be read still does, naming its key.
async fn unreadable_objects_below_the_floor_do_not_fail_recovery(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let wrapped = as_dyn(&faults);
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["b"])]).await;
    // Floor 3: objects 1 and 2 may have been reclaimed; the chain is 3, 4.
    let three = put_object(&store, header(3, 2, (2, 2), 3), &[(1, &["c"])]).await;
    put_object(&store, header(4, 2, (3, 2), 3), &[(1, &["d"])]).await;
    let mut one = get_bytes(&store, &key(1)).await.to_vec();
    one[20] ^= 0x01;
    put_raw(&store, &key(1), one).await;
    // Listed, then deleted just before recovery reads it, as by a reclaimer.
    faults.delete_before_next_get_of(&key(2));

    let ro = ObjectStoreLogStore::open_read_only(wrapped.clone(), config())
        .await
        .expect("what lies below the floor does not fail recovery");
    let report = ro.report();
    assert_eq!(on_chain(report), vec![3, 4]);
    assert_eq!(
        report
            .objects
            .iter()
            .map(|o| o.header.sequence)
            .collect::<Vec<_>>(),
        vec![3, 4],
        "the unread objects are not among the objects"
    );
    let unread: Vec<u64> = report
        .unread_below_floor
        .iter()
        .map(|u| u.sequence)
        .collect();
    assert_eq!(unread, vec![1, 2]);
    match &report.unread_below_floor[0].error {
        Error::CorruptObject { key: k, source } => {
            assert_eq!(k, &key(1).to_string());
            assert!(
                matches!(source, FormatError::CrcMismatch { part: "header", .. }),
                "{source:?}"
            );
        }
        other => panic!("expected CorruptObject for object 1, got {other:?}"),
    }
    match &report.unread_below_floor[1].error {
        Error::Store {
            op: "get",
            key: k,
            source,
        } => {
            assert_eq!(k, &key(2).to_string());
            assert!(
                matches!(**source, object_store::Error::NotFound { .. }),
                "{source:?}"
            );
        }
        other => panic!("expected a GET that found nothing for object 2, got {other:?}"),
    }
    assert_eq!(faults.fault_counts().deleted_behind, 1);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(3, 0, "c"), (4, 0, "d")]));

    // A writer opens too, above everything, keeping the chain's floor.
    let wal = ObjectStoreLogStore::open(wrapped.clone(), config())
        .await
        .expect("a writer opens");
    assert_eq!(wal.report().unread_below_floor.len(), 1, "object 1 only");
    let opening = stored_empty(&store, 5).await;
    assert_eq!(
        (opening.link, opening.floor),
        (
            Link {
                sequence: 4,
                epoch: 2
            },
            3
        )
    );
    assert_eq!(replay(&wal, 1, 0).await, ids(&[(3, 0, "c"), (4, 0, "d")]));

    // At the floor, a damaged object fails recovery, named.
    let mut damaged = three.to_bytes().to_vec();
    damaged[20] ^= 0x01;
    put_raw(&store, &key(3), damaged).await;
    let e = expect_err(ObjectStoreLogStore::open_read_only(wrapped.clone(), config()).await);
    assert!(
        matches!(&e, Error::CorruptObject { key: k, .. } if k == &key(3).to_string()),
        "{e:?}"
    );
    // Above it, an object deleted between the listing and its read fails a read-only
    // recovery, named (a writer's open would start over from a fresh listing).
    put_raw(&store, &key(3), three.to_bytes()).await;
    faults.delete_before_next_get_of(&key(4));
    let e = expect_err(ObjectStoreLogStore::open_read_only(wrapped, config()).await);
    match &e {
        Error::Store { key: k, source, .. } => {
            assert_eq!(k, &key(4).to_string());
            assert!(
                matches!(**source, object_store::Error::NotFound { .. }),
                "{source:?}"
            );
        }
        other => panic!("expected the missing object 4 named, got {other:?}"),
    }
}

async fn sequence_mismatch_names_its_key(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    let wrong = encode(header(5, 2, (1, 2), 0), &[(1, &["b"])]);
    put_raw(&store, &key(3), wrong.to_bytes()).await;

    for read_only in [true, false] {
        let result = if read_only {
            ObjectStoreLogStore::open_read_only(store.clone(), config()).await
        } else {
            ObjectStoreLogStore::open(store.clone(), config()).await
        };
        let e = expect_err(result);
        match &e {
            Error::SequenceMismatch {
                key: k,
                expected,
                found,
            } => {
                assert_eq!(k, &key(3).to_string());
                assert_eq!((*expected, *found), (3, 5));
            }
            other => panic!("expected SequenceMismatch, got {other:?}"),
        }
        assert!(e.to_string().contains(&key(3).to_string()), "{e}");
    }
    assert_eq!(
        keys(&store).await,
        vec![key(1).to_string(), key(3).to_string()]
    );
}

async fn foreign_keys_are_skipped_and_kept(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    let foreign = [
        "wal/00000000000000000000.wal",
        "wal/00000000000000000002.wal.bak",
        "wal/1.wal",
        "wal/README",
        "wal/sub/00000000000000000003.wal",
    ];
    for k in foreign {
        put_raw(
            &store,
            &Path::from(k),
            Bytes::from_static(b"not a WAL object"),
        )
        .await;
    }
    // A sibling prefix is neither a WAL object nor foreign.
    let sibling = Path::from("wal2/00000000000000000009.wal");
    put_raw(&store, &sibling, Bytes::from_static(b"elsewhere")).await;

    let ro = open_ro(&store).await;
    let report = ro.report();
    assert_eq!(report.foreign, foreign.to_vec());
    assert_eq!(report.objects.len(), 1);
    assert_eq!(report.max_sequence, 1);
    assert_eq!(report.chain_end, Some(header(1, 2, (0, 0), 0)));
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a")]));

    let mut wal = open(&store).await;
    assert_eq!(wal.report().foreign, foreign.to_vec());
    // Foreign keys do not count toward M: the opening object is 2.
    assert_eq!(stored_empty(&store, 2).await, header(2, 3, (1, 2), 0));
    wal.append_and_flush(parts(&[(1, &["b"])]))
        .await
        .expect("append");
    let mut wal = open(&store).await;
    wal.append_and_flush(parts(&[(1, &["c"])]))
        .await
        .expect("append");
    assert_eq!(
        replay(&wal, 1, 0).await,
        ids(&[(1, 0, "a"), (3, 0, "b"), (5, 0, "c")])
    );
    for k in foreign {
        assert_eq!(
            get_bytes(&store, &Path::from(k)).await,
            Bytes::from_static(b"not a WAL object"),
            "{k} is never deleted or changed"
        );
    }
    assert_eq!(
        get_bytes(&store, &sibling).await,
        Bytes::from_static(b"elsewhere")
    );
}

async fn open_claims_holes_and_writes_the_opening_object(store: Arc<dyn ObjectStore>) {
    // Chain 2 -> 3 with floor 2 at its end; holes 4 and 5; a late lower-epoch orphan at 6.
    put_object(&store, header(2, 3, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(3, 3, (2, 3), 2), &[(1, &["b"])]).await;
    put_object(&store, header(6, 1, (5, 1), 0), &[(1, &["late"])]).await;

    let wal = open(&store).await;
    assert_eq!(wal.report().chain_end, Some(header(3, 3, (2, 3), 2)));
    assert_eq!(wal.report().max_sequence, 6);
    // M = 6: opening object 7, epoch 8, linked to the chain end, carrying its floor.
    let opening = stored_empty(&store, 7).await;
    assert_eq!(opening, header(7, 8, (3, 3), 2));
    for hole in [4, 5] {
        let c = stored_empty(&store, hole).await;
        assert!(c.claim, "hole {hole} is claimed");
        assert_eq!(
            (c.epoch, c.link, c.floor),
            (opening.epoch, opening.link, opening.floor)
        );
        assert_eq!(c.sequence, hole);
    }
    assert_eq!(
        wal.epoch().unwrap(),
        WritePosition {
            epoch: 8,
            next_sequence: 8,
            link: Link {
                sequence: 7,
                epoch: 8
            },
            floor: 2,
            id_offset: 0,
        }
    );
    let present: Vec<u64> = stored(&store).await.into_keys().collect();
    assert_eq!(present, vec![2, 3, 4, 5, 6, 7]);

    // The next open: the claims are never on the chain, the chain ends at the opening.
    let next = open(&store).await;
    let report = next.report();
    assert_eq!(report.chain_end, Some(opening));
    assert_eq!(on_chain(report), vec![2, 3, 7]);
    assert_eq!(orphans(report), vec![4, 5, 6]);
    assert_eq!(stored_empty(&store, 8).await, header(8, 9, (7, 8), 2));
    assert_eq!(replay(&next, 1, 0).await, ids(&[(2, 0, "a"), (3, 0, "b")]));
}

/// An instance that reopens after handing out ids at sequences it never created (the
/// actor runtime's two-stage acknowledgement) opens above them: the absent sequences up
/// to `above` are claimed like any hole, and the next object is above them all.
async fn open_above_claims_up_to_the_sequences_handed_out(store: Arc<dyn ObjectStore>) {
    // Chain 2 -> 3; the ended epoch had handed out ids at 4 and 5, never created.
    put_object(&store, header(2, 3, (0, 0), 0), &[(1, &["a"])]).await;
    put_object(&store, header(3, 3, (2, 3), 0), &[(1, &["b"])]).await;
    let io = WalIo::for_config(store.clone(), &config()).expect("io");

    let opened = open_instance_above(&io, &config(), &BootClock, 5, 0)
        .await
        .expect("open");
    assert_eq!(opened.recovery.report.max_sequence, 3);
    // M = max(3, 5): claims 4 and 5, opening object 6 in epoch 7, writing from 7.
    let opening = stored_empty(&store, 6).await;
    assert_eq!(opening, header(6, 7, (3, 3), 0));
    for hole in [4, 5] {
        let c = stored_empty(&store, hole).await;
        assert_eq!(c, claim(hole, 7, (3, 3), 0));
    }
    assert_eq!(opened.epoch.next_sequence, 7);

    // Below what is present, `above` changes nothing: M = 6, opening object 7.
    let opened = open_instance_above(&io, &config(), &BootClock, 2, 0)
        .await
        .expect("open");
    assert_eq!(opened.epoch.next_sequence, 8);
    assert_eq!(stored_empty(&store, 7).await, header(7, 8, (6, 7), 0));
    let present: Vec<u64> = stored(&store).await.into_keys().collect();
    assert_eq!(present, vec![2, 3, 4, 5, 6, 7]);
    let next = open(&store).await;
    assert_eq!(replay(&next, 1, 0).await, ids(&[(2, 0, "a"), (3, 0, "b")]));
}

async fn floor_bounds_recovery(store: Arc<dyn ObjectStore>) {
    // The chain was 1..=6; 1..=3 are reclaimed (absent); the tip 6 carries floor 4.
    put_object(&store, header(4, 2, (3, 2), 0), &[(1, &["d"])]).await;
    put_object(&store, header(5, 2, (4, 2), 2), &[(1, &["e"])]).await;
    put_object(&store, header(6, 2, (5, 2), 4), &[(1, &["f"]), (2, &["g"])]).await;
    // An orphan above the chain end (its link 7 is absent).
    put_object(&store, header(8, 2, (7, 2), 4), &[(1, &["late"])]).await;

    let counting = CountingStore::new(store.clone());
    let counted = as_dyn(&counting);
    let below_floor = |log: &[GetRecord]| {
        log.iter()
            .filter_map(|g| parse_key(&prefix_path(), &Path::from(g.key.as_str())))
            .filter(|s| *s < 4)
            .collect::<Vec<u64>>()
    };

    let ro = open_ro(&counted).await;
    let report = ro.report();
    assert_eq!(report.chain_end, Some(header(6, 2, (5, 2), 4)));
    assert_eq!(on_chain(report), vec![4, 5, 6]);
    assert_eq!(orphans(report), vec![8]);
    assert_eq!(report.max_sequence, 8);
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(4, 0, "d"), (5, 0, "e"), (6, 0, "f")])
    );
    assert_eq!(replay(&ro, 2, 0).await, ids(&[(6, 0, "g")]));
    let log = counting.get_log();
    assert!(!log.is_empty());
    assert!(
        below_floor(&log).is_empty(),
        "GETs below the floor: {log:?}"
    );
    assert!(log.iter().all(|g| g.key.starts_with("wal/")), "{log:?}");

    counting.reset();
    let mut wal = open(&counted).await;
    assert!(below_floor(&counting.get_log()).is_empty());
    assert_eq!(stored_empty(&store, 7).await, claim(7, 10, (6, 2), 4));
    assert_eq!(stored_empty(&store, 9).await, header(9, 10, (6, 2), 4));
    let r = wal
        .append_and_flush(parts(&[(1, &["h"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 10);
    let written = stored(&store).await;
    assert_eq!(written[&10].0, header(10, 10, (9, 10), 4));

    counting.reset();
    let ro = open_ro(&counted).await;
    assert_eq!(on_chain(ro.report()), vec![4, 5, 6, 9, 10]);
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(4, 0, "d"), (5, 0, "e"), (6, 0, "f"), (10, 0, "h")])
    );
    assert!(below_floor(&counting.get_log()).is_empty());
}

// ---------------------------------------------------------------------------------------
// Fencing
// ---------------------------------------------------------------------------------------

async fn two_instances_one_after_the_other(store: Arc<dyn ObjectStore>) {
    let mut a = open(&store).await;
    let mut b = open(&store).await;
    let (ea, eb) = (a.epoch().unwrap().epoch, b.epoch().unwrap().epoch);
    assert_eq!((ea, eb), (2, 3));
    assert_eq!(stored_empty(&store, 1).await, header(1, 2, (0, 0), 0));
    // B's opening object links to A's.
    assert_eq!(stored_empty(&store, 2).await, header(2, 3, (1, 2), 0));

    a.append(parts(&[(1, &["from-a"])])).expect("admitted");
    let e = expect_err(a.flush().await);
    match e {
        Error::Fenced {
            epoch,
            sequence,
            fenced_by,
            durability,
        } => {
            assert_eq!((epoch, sequence, fenced_by), (2, 2, 3));
            assert_eq!(durability, Durability::NotWritten);
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    let e = expect_err(a.append(parts(&[(1, &["again"])])));
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert_eq!(e.durability(), Durability::NotWritten);
    let e = expect_err(a.flush().await);
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");
    let e = expect_err(a.append_and_flush(parts(&[(1, &["again"])])).await);
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");

    let r = b
        .append_and_flush(parts(&[(1, &["from-b"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 3);

    let c = open(&store).await;
    // B's object carries floor 3: it holds the only live entry (the floor rises past the
    // opening objects, which hold none).
    assert_eq!(c.report().chain_end, Some(header(3, 3, (2, 3), 3)));
    assert_eq!(stored_empty(&store, 4).await, header(4, 5, (3, 3), 3));
    assert_eq!(replay(&c, 1, 0).await, ids(&[(3, 0, "from-b")]));
    // Nothing of epoch 2 beyond A's opening object.
    let objects = stored(&store).await;
    let of_a: Vec<u64> = objects
        .iter()
        .filter(|(_, (h, _))| h.epoch == 2)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(of_a, vec![1]);

    // B is fenced by C in turn.
    let e = expect_err(b.append_and_flush(parts(&[(1, &["late-b"])])).await);
    assert!(
        matches!(
            e,
            Error::Fenced {
                epoch: 3,
                sequence: 4,
                fenced_by: 5,
                ..
            }
        ),
        "{e:?}"
    );
    let ro = open_ro(&store).await;
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(3, 0, "from-b")]));
}

/// Instance A opens (1, epoch 2) and seals objects 2 and 3; 3 lands, 2's create reports
/// an error and is held back. B's open claims the hole 2; A's late create then fails
/// against the claim and A's retry of 2 is fenced.
async fn late_create_meets_the_claim_and_is_fenced(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let faulty = as_dyn(&faults);
    let a = open(&faulty).await;
    let mut state = a.epoch().unwrap();
    let s2 = seal(&mut state, &[(1, &["a2"])]);
    let s3 = seal(&mut state, &[(1, &["a3"])]);
    assert!(matches!(
        persist(a.io(), s3.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Durable { attempts: 1 }
    ));
    faults.fail_create_of(&key(2), [CreateFault::LandLate(1_000_000)]);
    let outcome = persist(a.io(), s2.encoded().expect("encoded"), &one_attempt()).await;
    assert!(
        matches!(outcome, PersistOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert_eq!(faults.late_pending(), 1);

    let mut b = open(&faulty).await;
    let report = b.report();
    assert_eq!(report.chain_end, Some(header(1, 2, (0, 0), 0)));
    assert_eq!(orphans(report), vec![3]);
    assert_eq!(stored_empty(&store, 2).await, claim(2, 5, (1, 2), 0));
    assert_eq!(stored_empty(&store, 4).await, header(4, 5, (1, 2), 0));

    assert_eq!(faults.land_late().await, 0, "the claim holds the key");
    assert_eq!(stored_empty(&store, 2).await, claim(2, 5, (1, 2), 0));

    let retry = persist(a.io(), s2.encoded().expect("encoded"), &config().retry).await;
    assert!(
        matches!(retry, PersistOutcome::Fenced { fenced_by: 5 }),
        "{retry:?}"
    );
    let e = retry.error(2, 2).expect("an error");
    assert!(
        matches!(
            e,
            Error::Fenced {
                epoch: 2,
                sequence: 2,
                fenced_by: 5,
                ..
            }
        ),
        "{e:?}"
    );

    b.append_and_flush(parts(&[(1, &["b"])]))
        .await
        .expect("append");
    let ro = open_ro(&store).await;
    assert_eq!(ro.report().chain_end, Some(header(5, 5, (4, 5), 5)));
    assert_eq!(on_chain(ro.report()), vec![5], "the floor is past 1 and 4");
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(5, 0, "b")]));
}

/// As above, but A's late create of 2 lands after B listed and before B claims 2: the
/// claim meets `AlreadyExists`, B lists again and opens above A's objects, which are now
/// on the chain; A's retry of 2 finds its own bytes (durable) and A's next object is
/// fenced by B's opening object.
async fn claim_loses_to_a_late_create(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let faulty = as_dyn(&faults);
    let a = open(&faulty).await;
    let mut state = a.epoch().unwrap();
    let s2 = seal(&mut state, &[(1, &["a2"])]);
    let s3 = seal(&mut state, &[(1, &["a3"])]);
    let s4 = seal(&mut state, &[(1, &["a4"])]);
    assert!(matches!(
        persist(a.io(), s3.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Durable { .. }
    ));
    // Lands at the second store operation after this one: B's recovery reads objects 1
    // and 3 with one GET each (after its listing), so it lands during the second.
    faults.fail_create_of(&key(2), [CreateFault::LandLate(1)]);
    assert!(matches!(
        persist(a.io(), s2.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Unknown { .. }
    ));
    assert_eq!(keys(&store).await.len(), 2, "2 has not landed yet");

    let counting = CountingStore::new(faulty.clone());
    let b = ObjectStoreLogStore::open(as_dyn(&counting), config())
        .await
        .expect("open succeeds after starting over");
    assert_eq!(faults.late_landed(), 1);
    assert_eq!(
        counting
            .counts()
            .lists
            .load(std::sync::atomic::Ordering::Relaxed),
        2,
        "the claim lost, the opener listed again"
    );
    // Key 2 holds A's object, not a claim; B opened above A's chain.
    let objects = stored(&store).await;
    assert_eq!(objects[&2].0, header(2, 2, (1, 2), 0));
    assert_eq!(b.report().chain_end, Some(header(3, 2, (2, 2), 0)));
    assert_eq!(on_chain(b.report()), vec![1, 2, 3]);
    assert_eq!(stored_empty(&store, 4).await, header(4, 5, (3, 2), 0));
    assert_eq!(b.epoch().unwrap().epoch, 5);

    // A's retry of 2 is acknowledged (identical bytes); its next object is fenced.
    assert!(matches!(
        persist(a.io(), s2.encoded().expect("encoded"), &config().retry).await,
        PersistOutcome::Durable { attempts: 1 }
    ));
    let fenced = persist(a.io(), s4.encoded().expect("encoded"), &config().retry).await;
    assert!(
        matches!(fenced, PersistOutcome::Fenced { fenced_by: 5 }),
        "{fenced:?}"
    );

    let ro = open_ro(&store).await;
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(2, 0, "a2"), (3, 0, "a3")]));
}

/// Two holes: B's claim of 2 succeeds, its claim of 3 loses to A's late create. B lists
/// again: its own leftover claim (the highest epoch present) must not end the chain.
async fn claim_loses_and_leftover_claim_stays_off_the_chain(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let faulty = as_dyn(&faults);
    let a = open(&faulty).await;
    let mut state = a.epoch().unwrap();
    let s2 = seal(&mut state, &[(1, &["a2"])]);
    let s3 = seal(&mut state, &[(1, &["a3"])]);
    let s4 = seal(&mut state, &[(1, &["a4"])]);
    assert!(matches!(
        persist(a.io(), s4.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Durable { .. }
    ));
    faults.fail_create_of(&key(2), [CreateFault::LandLate(1_000_000)]);
    assert!(matches!(
        persist(a.io(), s2.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Unknown { .. }
    ));
    // Lands during B's recovery GETs (objects 1 and 4), after its listing.
    faults.fail_create_of(&key(3), [CreateFault::LandLate(1)]);
    assert!(matches!(
        persist(a.io(), s3.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Unknown { .. }
    ));

    let counting = CountingStore::new(faulty.clone());
    let mut b = ObjectStoreLogStore::open(as_dyn(&counting), config())
        .await
        .expect("open succeeds after starting over");
    assert_eq!(faults.late_landed(), 1);
    assert_eq!(faults.late_pending(), 1, "2 is still held back");
    assert_eq!(
        counting
            .counts()
            .lists
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let report = b.report();
    // The leftover claim 2 (epoch 6, the highest present, linked to A's opening object)
    // does not end the chain; A's 3 and 4 link through it and are orphans.
    assert_eq!(report.chain_end, Some(header(1, 2, (0, 0), 0)));
    assert_eq!(report.objects[1].header, claim(2, 6, (1, 2), 0));
    assert_eq!(on_chain(report), vec![1]);
    assert_eq!(orphans(report), vec![2, 3, 4]);
    assert_eq!(stored_empty(&store, 5).await, header(5, 6, (1, 2), 0));
    assert_eq!(b.epoch().unwrap().epoch, 6);

    assert_eq!(faults.land_late().await, 0);
    let retry = persist(a.io(), s2.encoded().expect("encoded"), &config().retry).await;
    assert!(
        matches!(retry, PersistOutcome::Fenced { fenced_by: 6 }),
        "{retry:?}"
    );

    b.append_and_flush(parts(&[(1, &["b"])]))
        .await
        .expect("append");
    let ro = open_ro(&store).await;
    // 6 links to the opening object 5, not to a claim, and carries floor 6 (it holds
    // the only live entry), so only 6 is read above the floor.
    assert_eq!(ro.report().chain_end, Some(header(6, 6, (5, 6), 6)));
    assert_eq!(on_chain(ro.report()), vec![6]);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(6, 0, "b")]));
}

/// Another opener that listed the same prefix creates the identical opening object
/// after our listing: our create meets `AlreadyExists` with our own bytes, which is never
/// taken as success; we list again and open above it.
async fn identical_opening_object_is_not_success(store: Arc<dyn ObjectStore>) {
    put_object(&store, header(1, 2, (0, 0), 0), &[(1, &["a"])]).await;
    let faults = FaultStore::new(store.clone());
    let faulty = as_dyn(&faults);
    // The other opener's create of (2, epoch 3, link (1, 2)), landing at the next store
    // operation: our recovery's GET of object 1, after our listing.
    let theirs = encode(header(2, 3, (1, 2), 0), &[]);
    faults.fail_create_of(&key(2), [CreateFault::LandLate(0)]);
    let create = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    assert!(faulty
        .put_opts(&key(2), PutPayload::from(theirs.to_bytes()), create)
        .await
        .is_err());
    assert_eq!(faults.late_pending(), 1);

    let counting = CountingStore::new(faulty.clone());
    let mut wal = ObjectStoreLogStore::open(as_dyn(&counting), config())
        .await
        .expect("open");
    assert_eq!(faults.late_landed(), 1);
    assert_eq!(
        counting
            .counts()
            .lists
            .load(std::sync::atomic::Ordering::Relaxed),
        2,
        "the identical opening object sent the opener back to listing"
    );
    assert_eq!(wal.report().chain_end, Some(header(2, 3, (1, 2), 0)));
    assert_eq!(wal.epoch().unwrap().epoch, 4);
    assert_eq!(stored_empty(&store, 3).await, header(3, 4, (2, 3), 0));
    wal.append_and_flush(parts(&[(1, &["b"])]))
        .await
        .expect("append");
    let ro = open_ro(&store).await;
    assert_eq!(on_chain(ro.report()), vec![1, 2, 3, 4]);
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(1, 0, "a"), (4, 0, "b")]));
}

// ---------------------------------------------------------------------------------------
// The outcome table
// ---------------------------------------------------------------------------------------

async fn create_applied_then_error_is_acknowledged_on_retry(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let mut wal = open(&as_dyn(&faults)).await;

    faults.fail_next_creates([CreateFault::ApplyThenError]);
    assert_eq!(wal.append(parts(&[(1, &["a", "b"])])).unwrap(), 0);
    assert_eq!(wal.append(parts(&[(2, &["c"]), (1, &["d"])])).unwrap(), 1);
    let receipt = wal.flush().await.expect("flush").expect("a receipt");
    assert_eq!(receipt.sequence, 2);
    assert_eq!(
        receipt.appends[0].parts,
        vec![RegionIds {
            region: 1,
            first_id: entry_id(2, 0),
            count: 2
        }]
    );
    assert_eq!(
        receipt.appends[1].parts,
        vec![
            RegionIds {
                region: 2,
                first_id: entry_id(2, 0),
                count: 1
            },
            RegionIds {
                region: 1,
                first_id: entry_id(2, 2),
                count: 1
            },
        ]
    );
    assert!(
        wal.flush().await.expect("flush").is_none(),
        "nothing admitted"
    );

    faults.fail_next_creates([CreateFault::ApplyThenError]);
    let r = wal
        .append_and_flush(parts(&[(1, &["e"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 3);

    // store::persist: the same outcome, reported with its attempts.
    let mut state = wal.epoch().unwrap();
    let s4 = seal(&mut state, &[(2, &["f"])]);
    faults.fail_create_of(&key(4), [CreateFault::ApplyThenError]);
    let outcome = persist(wal.io(), s4.encoded().expect("encoded"), &config().retry).await;
    assert!(
        matches!(outcome, PersistOutcome::Durable { attempts: 2 }),
        "{outcome:?}"
    );
    assert!(outcome.error(state.epoch, 4).is_none());
    // Each lost answer whose retry found our own bytes is counted, and only those.
    let found = &wal.io().request_stats().creates_found_landed;
    assert_eq!(found.load(std::sync::atomic::Ordering::Relaxed), 3);

    let objects = stored(&store).await;
    assert_eq!(
        objects.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert!(objects.values().all(|(h, _)| h.epoch == 2));
    let ro = open_ro(&store).await;
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(2, 0, "a"), (2, 1, "b"), (2, 2, "d"), (3, 0, "e")])
    );
    assert_eq!(replay(&ro, 2, 0).await, ids(&[(2, 0, "c"), (4, 0, "f")]));
}

async fn higher_epoch_at_our_sequence_fences(store: Arc<dyn ObjectStore>) {
    let mut wal = open(&store).await;
    wal.append_and_flush(parts(&[(1, &["a"])]))
        .await
        .expect("append");
    // Another instance's claim of epoch 9 holds sequence 3.
    put_object(&store, claim(3, 9, (2, 2), 0), &[]).await;

    let mut state = wal.epoch().unwrap();
    let sealed = seal(&mut state, &[(1, &["x"])]);
    let outcome = persist(
        wal.io(),
        sealed.encoded().expect("encoded"),
        &config().retry,
    )
    .await;
    assert!(
        matches!(outcome, PersistOutcome::Fenced { fenced_by: 9 }),
        "{outcome:?}"
    );

    wal.append(parts(&[(1, &["b"])])).expect("admitted");
    let e = expect_err(wal.flush().await);
    assert!(
        matches!(
            e,
            Error::Fenced {
                epoch: 2,
                sequence: 3,
                fenced_by: 9,
                durability: Durability::NotWritten
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_retryable());
    // Terminal: nothing more is accepted.
    let e = expect_err(wal.append(parts(&[(1, &["c"])])));
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");
    assert_eq!(e.durability(), Durability::NotWritten);
    let e = expect_err(wal.flush().await);
    assert!(matches!(e, Error::Fenced { .. }), "{e:?}");

    let objects = stored(&store).await;
    assert_eq!(objects.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(objects[&3].0, claim(3, 9, (2, 2), 0));
    let ro = open_ro(&store).await;
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(2, 0, "a")]));
}

async fn same_epoch_other_bytes_poisons(store: Arc<dyn ObjectStore>) {
    let mut wal = open(&store).await;
    // Impossible by construction: an object of our own epoch at our next sequence.
    put_object(&store, header(2, 2, (1, 2), 0), &[(1, &["not ours"])]).await;

    let mut state = wal.epoch().unwrap();
    let sealed = seal(&mut state, &[(1, &["x"])]);
    let outcome = persist(
        wal.io(),
        sealed.encoded().expect("encoded"),
        &config().retry,
    )
    .await;
    assert!(
        matches!(outcome, PersistOutcome::Poisoned { .. }),
        "{outcome:?}"
    );

    let e = expect_err(wal.append_and_flush(parts(&[(1, &["y"])])).await);
    match &e {
        Error::Poisoned { reason, .. } => {
            assert!(reason.contains(&key(2).to_string()), "{reason}")
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(!e.is_retryable());
    let e = expect_err(wal.append(parts(&[(1, &["z"])])));
    assert!(matches!(e, Error::Poisoned { .. }), "{e:?}");
    assert_eq!(
        stored(&store).await.into_keys().collect::<Vec<_>>(),
        vec![1, 2]
    );
}

/// An earlier instance Z (epoch 2) had object 4 in flight; A opens at 2 (epoch 3), writes
/// 3, then Z's 4 lands: A's create of 4 meets a lower epoch and A's epoch ends.
async fn stale_tail_ends_the_epoch(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let faulty = as_dyn(&faults);
    let z = open(&faulty).await;
    let mut zs = z.epoch().unwrap();
    let _z2 = seal(&mut zs, &[(1, &["z2"])]);
    let _z3 = seal(&mut zs, &[(1, &["z3"])]);
    let z4 = seal(&mut zs, &[(1, &["z4"])]);
    faults.fail_create_of(&key(4), [CreateFault::LandLate(1_000_000)]);
    assert!(matches!(
        persist(z.io(), z4.encoded().expect("encoded"), &one_attempt()).await,
        PersistOutcome::Unknown { .. }
    ));

    let mut a = open(&faulty).await;
    assert_eq!(a.epoch().unwrap().epoch, 3);
    assert_eq!(stored_empty(&store, 2).await, header(2, 3, (1, 2), 0));
    let r = a
        .append_and_flush(parts(&[(1, &["a1"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 3);
    assert_eq!(faults.land_late().await, 1, "Z's object 4 lands");

    let mut copy = a.epoch().unwrap();
    let sealed = seal(&mut copy, &[(1, &["x"])]);
    let outcome = persist(a.io(), sealed.encoded().expect("encoded"), &config().retry).await;
    assert!(
        matches!(outcome, PersistOutcome::StaleTail { found_epoch: 2 }),
        "{outcome:?}"
    );

    a.append(parts(&[(1, &["a2"])])).expect("admitted");
    let e = expect_err(a.flush().await);
    assert!(
        matches!(
            e,
            Error::EpochEnded {
                epoch: 3,
                sequence: 4,
                reason: EpochEndReason::StaleTail { found_epoch: 2 },
                durability: Durability::NotWritten
            }
        ),
        "{e:?}"
    );
    assert!(e.is_retryable());
    let e = expect_err(a.append(parts(&[(1, &["a2"])])));
    assert!(matches!(e, Error::EpochEnded { .. }), "{e:?}");
    let e = expect_err(a.flush().await);
    assert!(matches!(e, Error::EpochEnded { .. }), "{e:?}");
    let objects = stored(&store).await;
    let of_a: Vec<u64> = objects
        .iter()
        .filter(|(_, (h, _))| h.epoch == 3)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(of_a, vec![2, 3], "nothing past 3 under epoch 3");
    assert_eq!(
        objects.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );

    a.reopen().await.expect("reopen");
    // Object 3 carries floor 3: it holds the only live entry.
    assert_eq!(a.report().chain_end, Some(header(3, 3, (2, 3), 3)));
    // 1 and 2 lie below that floor: off the chain that recovery replays, like 4.
    assert_eq!(orphans(a.report()), vec![1, 2, 4]);
    assert_eq!(a.epoch().unwrap().epoch, 6);
    assert_eq!(stored_empty(&store, 5).await, header(5, 6, (3, 3), 3));
    let r = a
        .append_and_flush(parts(&[(1, &["a3"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 6);

    let ro = open_ro(&store).await;
    assert_eq!(replay(&ro, 1, 0).await, ids(&[(3, 0, "a1"), (6, 0, "a3")]));
}

async fn unknown_outcome_ends_the_epoch(store: Arc<dyn ObjectStore>) {
    let faults = FaultStore::new(store.clone());
    let mut wal = open(&as_dyn(&faults)).await;
    wal.append_and_flush(parts(&[(1, &["a"])]))
        .await
        .expect("append");

    // Every attempt (3) fails without applying: the outcome stays unknown.
    faults.fail_create_of(&key(3), [CreateFault::ErrorUnapplied; 3]);
    wal.append(parts(&[(1, &["b"])])).expect("admitted");
    let e = expect_err(wal.flush().await);
    assert!(
        matches!(
            e,
            Error::EpochEnded {
                epoch: 2,
                sequence: 3,
                reason: EpochEndReason::UnknownOutcome,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.durability(), Durability::MayBeDurable);
    assert!(e.is_retryable());
    let e = expect_err(wal.append(parts(&[(1, &["c"])])));
    assert!(matches!(e, Error::EpochEnded { .. }), "{e:?}");
    assert_eq!(e.durability(), Durability::NotWritten);
    let e = expect_err(wal.flush().await);
    assert!(matches!(e, Error::EpochEnded { .. }), "{e:?}");
    assert_eq!(
        stored(&store).await.into_keys().collect::<Vec<_>>(),
        vec![1, 2],
        "nothing at or past 3"
    );

    wal.reopen().await.expect("reopen");
    assert_eq!(wal.epoch().unwrap().epoch, 4);
    // The chain end 2 carries floor 2 (it holds the only live entry).
    assert_eq!(stored_empty(&store, 3).await, header(3, 4, (2, 2), 2));
    let r = wal
        .append_and_flush(parts(&[(1, &["c"])]))
        .await
        .expect("append");
    assert_eq!(r.sequence, 4);

    // Unknown again, but this time the last attempt lands late, before the next open:
    // the entry may be durable, and it is then replayed whole, once.
    faults.fail_create_of(
        &key(5),
        [
            CreateFault::ErrorUnapplied,
            CreateFault::ErrorUnapplied,
            CreateFault::LandLate(1_000_000),
        ],
    );
    let e = expect_err(wal.append_and_flush(parts(&[(1, &["d"])])).await);
    assert!(
        matches!(
            e,
            Error::EpochEnded {
                epoch: 4,
                sequence: 5,
                reason: EpochEndReason::UnknownOutcome,
                durability: Durability::MayBeDurable
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        stored(&store).await.into_keys().collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(faults.land_late().await, 1);
    wal.reopen().await.expect("reopen");
    assert_eq!(wal.epoch().unwrap().epoch, 7);
    // From the floor 2 up (the opening object 1 holds no entry).
    assert_eq!(on_chain(wal.report()), vec![2, 3, 4, 5]);
    wal.append_and_flush(parts(&[(1, &["e"])]))
        .await
        .expect("append");

    // store::persist reports the unknown outcome directly.
    let mut copy = wal.epoch().unwrap();
    let sealed = seal(&mut copy, &[(1, &["never"])]);
    faults.fail_create_of(&key(8), [CreateFault::ErrorUnapplied; 3]);
    let outcome = persist(
        wal.io(),
        sealed.encoded().expect("encoded"),
        &config().retry,
    )
    .await;
    assert!(
        matches!(outcome, PersistOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert!(matches!(
        outcome.error(copy.epoch, 8),
        Some(Error::EpochEnded {
            durability: Durability::MayBeDurable,
            ..
        })
    ));

    let ro = open_ro(&store).await;
    assert_eq!(
        replay(&ro, 1, 0).await,
        ids(&[(2, 0, "a"), (4, 0, "c"), (5, 0, "d"), (7, 0, "e")])
    );
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

async fn region_read_fetches_only_its_segment(store: Arc<dyn ObjectStore>) {
    let r1: &[&str] = &["r1-0", "r1-1"];
    let r2: &[&str] = &["r2-0"];
    let r3: &[&str] = &["r3-0", "r3-1", "r3-2"];
    let r4: &[&str] = &["r4-0", "r4-1"];
    let r5: &[&str] = &["r5-0"];
    let segments: &[(u64, &[&str])] = &[(1, r1), (2, r2), (3, r3), (4, r4), (5, r5)];
    let object = put_object(&store, header(1, 1, (0, 0), 0), segments).await;
    let record = *object.records().iter().find(|r| r.region == 3).unwrap();

    let counting = CountingStore::new(store.clone());
    let wal = open_ro(&as_dyn(&counting)).await;
    counting.reset();
    let stream = wal.read(3, 0);
    assert!(
        counting.get_log().is_empty(),
        "nothing fetched before polling"
    );
    let entries: Vec<_> = stream.try_collect().await.expect("read");
    let payloads: Vec<&str> = entries
        .iter()
        .map(|e| std::str::from_utf8(&e.payload).unwrap())
        .collect();
    assert_eq!(payloads, r3.to_vec());
    assert_eq!(
        entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![entry_id(1, 0), entry_id(1, 1), entry_id(1, 2)]
    );
    assert_eq!(
        counting.get_log(),
        vec![GetRecord {
            key: key(1).to_string(),
            range: Some(record.offset..record.offset + record.length),
            found: true,
        }]
    );
    assert_eq!(
        counting
            .counts()
            .get_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        record.length
    );

    // Damage one byte inside region 3's segment, fixing nothing else.
    let mut bytes = get_bytes(&store, &key(1)).await.to_vec();
    bytes[record.offset as usize + 6] ^= 0x20;
    put_raw(&store, &key(1), bytes).await;

    let expect_region_3_corrupt = |items: Vec<Result<object_store_wal::Entry, Error>>| {
        assert_eq!(items.len(), 1, "the read ends at the damaged segment");
        match &items[0] {
            Err(Error::CorruptSegment {
                key: k,
                region: 3,
                source:
                    FormatError::CrcMismatch {
                        part: "segment", ..
                    },
            }) => assert_eq!(k, &key(1).to_string()),
            other => panic!("expected CorruptSegment, got {other:?}"),
        }
    };
    // The instance opened before the damage verified region 3's segment and keeps it:
    // its re-read sends no request and gives the entries it verified.
    counting.reset();
    let again: Vec<_> = wal.read(3, 0).try_collect().await.expect("re-read");
    assert_eq!(again, entries);
    assert!(
        counting.get_log().is_empty(),
        "a re-read of a cached segment sends no GET"
    );
    // An instance without the cache finds the damage: read once, retried once.
    let mut uncached_config = config();
    uncached_config.segment_cache_bytes = 0;
    uncached_config.segment_cache_region_bytes = 0;
    let uncached = ObjectStoreLogStore::open_read_only(as_dyn(&counting), uncached_config)
        .await
        .expect("open read-only");
    counting.reset();
    expect_region_3_corrupt(uncached.read(3, 0).collect().await);
    let range = Some(record.offset..record.offset + record.length);
    let log = counting.get_log();
    assert_eq!(log.len(), 2, "read once, retried once: {log:?}");
    assert!(log.iter().all(|g| g.range == range), "{log:?}");

    // A fresh instance whose recovery reads header and footer with ranged GETs (the
    // object CRC is only checked when a whole object is read).
    let mut cfg = config();
    cfg.whole_read_threshold = 96;
    let fresh = ObjectStoreLogStore::open_read_only(store.clone(), cfg)
        .await
        .expect("recovery never reads a segment");
    expect_region_3_corrupt(fresh.read(3, 0).collect().await);
    for w in [&wal, &fresh] {
        for (region, expected) in [(1, r1), (2, r2), (4, r4), (5, r5)] {
            let got: Vec<String> = replay(w, region, 0)
                .await
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            assert_eq!(got, expected.to_vec(), "region {region}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

async fn config_errors_name_the_field(store: Arc<dyn ObjectStore>) {
    config()
        .validate()
        .expect("the test configuration is valid");
    Config::new(PREFIX)
        .with_create_if_missing(true)
        .validate()
        .expect("the defaults are valid");
    type Tweak = fn(&mut Config);
    let cases: [(&str, Tweak); 9] = [
        ("max_in_flight", |c| c.max_in_flight = 0),
        ("read_ahead", |c| c.read_ahead = 0),
        ("recovery_concurrency", |c| c.recovery_concurrency = 0),
        ("max_batch_bytes", |c| c.max_batch_bytes = 50),
        ("max_entry_bytes", |c| c.max_entry_bytes = 0),
        ("max_pending_bytes", |c| c.max_pending_bytes = 1),
        ("retry.max_attempts", |c| c.retry.max_attempts = 0),
        ("open_attempts", |c| c.open_attempts = 0),
        ("reclaim_grace", |c| c.reclaim_grace = c.max_create_duration),
    ];
    for (field, tweak) in cases {
        let mut cfg = Config::new(PREFIX).with_create_if_missing(true);
        tweak(&mut cfg);
        let e = expect_err(cfg.validate());
        match &e {
            Error::Config { field: f, .. } => assert_eq!(*f, field),
            other => panic!("{field}: expected Config, got {other:?}"),
        }
        assert!(e.to_string().contains(field), "{e}");
        let e = expect_err(ObjectStoreLogStore::open(store.clone(), cfg.clone()).await);
        assert!(
            matches!(e, Error::Config { field: f, .. } if f == field),
            "{e:?}"
        );
        let e = expect_err(ObjectStoreLogStore::open_read_only(store.clone(), cfg).await);
        assert!(
            matches!(e, Error::Config { field: f, .. } if f == field),
            "{e:?}"
        );
    }
    assert!(
        keys(&store).await.is_empty(),
        "a refused open writes nothing"
    );
}

async fn invalid_prefixes_are_refused(store: Arc<dyn ObjectStore>) {
    for prefix in ["", "/a", "a/", "a//b", "a/../b", "./a"] {
        let cfg = Config::new(prefix).with_create_if_missing(true);
        let e = expect_err(cfg.validate());
        assert!(
            matches!(&e, Error::InvalidPrefix { prefix: p, .. } if p == prefix),
            "{prefix:?}: {e:?}"
        );
        let e = expect_err(ObjectStoreLogStore::open(store.clone(), cfg.clone()).await);
        assert!(
            matches!(&e, Error::InvalidPrefix { prefix: p, .. } if p == prefix),
            "{prefix:?}: {e:?}"
        );
        let e = expect_err(ObjectStoreLogStore::open_read_only(store.clone(), cfg).await);
        assert!(
            matches!(&e, Error::InvalidPrefix { prefix: p, .. } if p == prefix),
            "{prefix:?}: {e:?}"
        );
    }
    let all: Vec<ObjectMeta> = store.list(None).try_collect().await.expect("list");
    assert!(all.is_empty(), "nothing written: {all:?}");
    // A nested relative prefix is fine.
    let wal = ObjectStoreLogStore::open(
        store.clone(),
        Config::new("a/b").with_create_if_missing(true),
    )
    .await
    .expect("open a/b");
    assert_eq!(wal.epoch().unwrap().epoch, 2);
    let all: Vec<ObjectMeta> = store.list(None).try_collect().await.expect("list");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].location.to_string(), "a/b/00000000000000000001.wal");
}
