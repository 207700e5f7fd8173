//! A damaged object the chain may need (DESIGN.md "Opening an instance": it fails
//! recovery naming its key) and the point-in-time recovery mode an operator may choose
//! instead: what each mode opens, replays and reports.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use object_store_wal::format::control::CONTROL_REGION;
use object_store_wal::format::{
    decode_object_summary, encode_object, entry_id, Header, Link, HEADER_LEN, MAX_SEGMENT_ENTRIES,
};
use object_store_wal::internal::chain::holdings::Holdings;
use object_store_wal::internal::store::keys::object_key;
use object_store_wal::{Config, Error, ObjectStoreLogStore, RecoveryMode};

const PREFIX: &str = "wal";

fn config() -> Config {
    let mut config = Config::new(PREFIX).with_create_if_missing(true);
    config.min_object_interval = std::time::Duration::ZERO;
    config
}

/// Writes three objects of one entry each to region 1 (sequences 2, 3, 4 after the
/// opening object at 1) and damages the header of the middle one.
async fn damaged_log() -> (Arc<InMemory>, Vec<u64>) {
    let store = Arc::new(InMemory::new());
    let mut wal = ObjectStoreLogStore::open(store.clone(), config())
        .await
        .expect("open");
    let mut ids = Vec::new();
    for n in 0..3 {
        let receipt = wal
            .append_and_flush(vec![(1, vec![Bytes::from(format!("entry {n}"))])])
            .await
            .expect("append");
        assert_eq!(receipt.sequence, 2 + n);
        ids.extend(receipt.parts[0].ids());
    }
    let key = object_key(&Path::from(PREFIX), 3);
    let bytes = store
        .get(&key)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    let mut damaged = bytes.to_vec();
    damaged[HEADER_LEN / 2] ^= 0xff;
    store
        .put(&key, PutPayload::from(damaged))
        .await
        .expect("put");
    (store, ids)
}

async fn replayed(wal: &ObjectStoreLogStore) -> Vec<(u64, Bytes)> {
    wal.replay([(1, 0)])
        .map_ok(|e| (e.id, e.payload))
        .try_collect()
        .await
        .expect("replay")
}

#[tokio::test]
async fn strict_recovery_fails_naming_the_damaged_object() {
    let (store, _) = damaged_log().await;
    for writer in [false, true] {
        let opened = if writer {
            ObjectStoreLogStore::open(store.clone(), config()).await
        } else {
            ObjectStoreLogStore::open_read_only(store.clone(), config()).await
        };
        match opened {
            Err(Error::CorruptObject { key, .. }) => {
                assert_eq!(key, object_key(&Path::from(PREFIX), 3).to_string())
            }
            Err(e) => panic!("writer {writer}: {e}"),
            Ok(_) => panic!("writer {writer}: opened over a damaged chain object"),
        }
    }
}

#[tokio::test]
async fn point_in_time_recovery_replays_up_to_the_damage_and_reports_what_it_gave_up() {
    let (store, ids) = damaged_log().await;
    let config = config().with_recovery_mode(RecoveryMode::PointInTime);
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config.clone())
        .await
        .expect("point-in-time opens");
    assert_eq!(
        replayed(&reader).await,
        vec![(ids[0], Bytes::from("entry 0"))],
        "the chain ends before the damage"
    );
    let report = reader.report();
    let damaged: Vec<u64> = report.given_up_damaged.iter().map(|u| u.sequence).collect();
    assert_eq!(damaged, vec![3]);
    // Object 4 links to 3: no offset, so exactly the ids of sequence 3.
    assert_eq!(
        report.given_up_damaged[0].entry_ids,
        entry_id(3, 0)..=entry_id(3, MAX_SEGMENT_ENTRIES - 1)
    );
    assert!(report.given_up_damaged[0].entry_ids.contains(&ids[1]));
    assert_eq!(report.given_up.len(), 1);
    assert_eq!(report.given_up[0].header.sequence, 4);
    assert_eq!(report.given_up[0].regions, vec![(1, ids[2], ids[2])]);
    assert_eq!(report.chain_end.map(|h| h.sequence), Some(2));

    // A writer opens above everything present, the damaged object included, and goes on.
    let mut wal = ObjectStoreLogStore::open(store.clone(), config.clone())
        .await
        .expect("a writer opens point-in-time");
    let epoch = wal.epoch().expect("an epoch");
    assert_eq!(epoch.link.sequence, 5, "the opening object is above 4");
    let receipt = wal
        .append_and_flush(vec![(1, vec![Bytes::from("after")])])
        .await
        .expect("append");
    let after = receipt.parts[0].ids().next().expect("an id");
    assert!(after > entry_id(5, 0));
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config)
        .await
        .expect("opens again");
    assert_eq!(
        replayed(&reader).await,
        vec![
            (ids[0], Bytes::from("entry 0")),
            (after, Bytes::from("after"))
        ]
    );
    // Strict recovery still meets the damaged object above the floor: the runbook keeps
    // point-in-time until the floor passes it.
    assert!(matches!(
        ObjectStoreLogStore::open_read_only(store, self::config()).await,
        Err(Error::CorruptObject { .. })
    ));
}

/// Puts an object of epoch 2 at `sequence` under [`PREFIX`], with one entry of region 1
/// unless it is the first, and returns its bytes.
async fn put_object(store: &InMemory, sequence: u64, id_offset: u64) -> Vec<u8> {
    let header = Header {
        sequence,
        epoch: 2,
        link: if sequence == 1 {
            Link::NONE
        } else {
            Link {
                sequence: sequence - 1,
                epoch: 2,
            }
        },
        floor: 1,
        claim: false,
        closed: false,
        id_offset,
    };
    let entries = [Bytes::from(format!("entry at {sequence}"))];
    let segments: Vec<(u64, &[Bytes])> = if sequence == 1 {
        Vec::new()
    } else {
        vec![(1, &entries[..])]
    };
    let bytes = encode_object(&header, segments)
        .expect("encode")
        .to_bytes()
        .to_vec();
    store
        .put(
            &object_key(&Path::from(PREFIX), sequence),
            PutPayload::from(bytes.clone()),
        )
        .await
        .expect("put");
    bytes
}

/// An unreadable object hides its id offset: the ids reported given up count from the
/// offset of the chain below it up to that of the object linking to it, or to the last
/// id there is when nothing does.
#[tokio::test]
async fn the_ids_given_up_with_an_unreadable_object_follow_the_id_offsets_around_it() {
    let store = Arc::new(InMemory::new());
    put_object(&store, 1, 100).await;
    put_object(&store, 2, 100).await;
    // Object 3 raised the offset to 300 (a region moved in), then its header was damaged.
    let mut damaged = put_object(&store, 3, 300).await;
    damaged[HEADER_LEN / 2] ^= 0xff;
    store
        .put(
            &object_key(&Path::from(PREFIX), 3),
            PutPayload::from(damaged),
        )
        .await
        .expect("put");
    let held = entry_id(3 + 300, 0);
    let config = config().with_recovery_mode(RecoveryMode::PointInTime);

    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config.clone())
        .await
        .expect("point-in-time opens");
    assert_eq!(
        replayed(&reader).await,
        vec![(entry_id(2 + 100, 0), Bytes::from("entry at 2"))]
    );
    let report = reader.report();
    assert_eq!(report.given_up_damaged.len(), 1);
    let given_up = &report.given_up_damaged[0];
    assert_eq!(given_up.sequence, 3);
    // Nothing links to it: its offset may be anything from the chain's 100 up.
    assert_eq!(given_up.entry_ids, entry_id(3 + 100, 0)..=u64::MAX);
    assert!(given_up.entry_ids.contains(&held));

    // Object 4 links to it with offset 300: the offset it hid is at most that.
    put_object(&store, 4, 300).await;
    let reader = ObjectStoreLogStore::open_read_only(store.clone(), config)
        .await
        .expect("point-in-time opens");
    let report = reader.report();
    assert_eq!(report.given_up_damaged.len(), 1);
    let given_up = &report.given_up_damaged[0];
    assert_eq!(
        given_up.entry_ids,
        entry_id(3 + 100, 0)..=entry_id(3 + 300, MAX_SEGMENT_ENTRIES - 1)
    );
    assert!(given_up.entry_ids.contains(&held));
    assert_eq!(
        report.given_up[0].regions,
        vec![(1, entry_id(4 + 300, 0), entry_id(4 + 300, 0))]
    );
}

/// An object of epoch 1 at `sequence` linked to the one before it, with one entry of
/// region 1 and, if some, a control snapshot recording `released` (region, last id).
fn control_object(sequence: u64, released: &[(u64, Option<u64>)]) -> Vec<u8> {
    let header = Header {
        sequence,
        epoch: 1,
        link: Link {
            sequence: sequence - 1,
            epoch: if sequence == 1 { 0 } else { 1 },
        },
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 0,
    };
    let entry = [Bytes::from(format!("entry {sequence}"))];
    let mut holdings = Holdings::new();
    for (region, last) in released {
        holdings.release(*region, *last).expect("a release");
    }
    let snapshot = [holdings.snapshot().expect("a snapshot")];
    let mut segments: Vec<(u64, &[Bytes])> = Vec::new();
    if sequence > 1 {
        segments.push((1, &entry));
    }
    if !released.is_empty() {
        segments.push((CONTROL_REGION, &snapshot));
    }
    encode_object(&header, segments)
        .expect("encodes")
        .to_bytes()
        .to_vec()
}

async fn put_bytes(store: &InMemory, sequence: u64, bytes: Vec<u8>) {
    let key = object_key(&Path::from(PREFIX), sequence);
    store.put(&key, PutPayload::from(bytes)).await.expect("put");
}

/// The record of who holds what under point-in-time recovery (DESIGN.md "The record of
/// who holds what"). Object 2 records region 5 released; 3 (its header damaged) and 4
/// record 7 released too, and 4 also 9. Going on without 3 and 4 gives up the releases
/// of 7 and 9: the open reports them (and warns), and the writer admits their appends
/// again, while 5 stays refused.
#[tokio::test]
async fn point_in_time_recovery_reports_the_releases_it_gives_up() {
    let store = Arc::new(InMemory::new());
    put_bytes(&store, 1, control_object(1, &[])).await;
    put_bytes(&store, 2, control_object(2, &[(5, None)])).await;
    let mut three = control_object(3, &[(5, None), (7, Some(entry_id(3, 0)))]);
    three[HEADER_LEN / 2] ^= 0xff;
    put_bytes(&store, 3, three).await;
    let four = [(5, None), (7, Some(entry_id(3, 0))), (9, None)];
    put_bytes(&store, 4, control_object(4, &four)).await;

    let config = config().with_recovery_mode(RecoveryMode::PointInTime);
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("a writer opens point-in-time");
    let given_up = wal
        .report()
        .given_up_holdings
        .clone()
        .expect("object 4's snapshot is compared");
    assert_eq!(given_up.sequence, 4);
    assert!(!given_up.unreadable);
    assert_eq!(
        given_up.released,
        vec![(7, Some(entry_id(3, 0))), (9, None)]
    );
    assert!(given_up.taken_back.is_empty() && given_up.pieces.is_empty());
    assert!(wal.report().damaged_control.is_empty());

    let refused = wal
        .append_and_flush(vec![(5, vec![Bytes::from("late")])])
        .await;
    assert!(
        matches!(refused, Err(Error::RegionReleased { region: 5, .. })),
        "{refused:?}"
    );
    for region in [7, 9] {
        wal.append_and_flush(vec![(region, vec![Bytes::from("admitted again")])])
            .await
            .expect("a release given up no longer refuses the region");
    }
}

/// A control snapshot on the chain whose segment is damaged fails a strict open (a
/// released region must not be taken for one this log owns), and point-in-time
/// recovery passes over it for the one before, naming it.
#[tokio::test]
async fn point_in_time_recovery_passes_over_a_damaged_control_snapshot() {
    let store = Arc::new(InMemory::new());
    put_bytes(&store, 1, control_object(1, &[])).await;
    put_bytes(&store, 2, control_object(2, &[(5, None)])).await;
    let mut three = control_object(3, &[(5, None), (7, None)]);
    let summary = decode_object_summary(&three).expect("a valid object");
    let control = summary
        .footer
        .records
        .iter()
        .find(|r| r.region == CONTROL_REGION)
        .copied()
        .expect("a control segment");
    three[control.offset as usize] ^= 0x01;
    put_bytes(&store, 3, three).await;

    let strict = ObjectStoreLogStore::open(store.clone(), config()).await;
    assert!(
        matches!(
            strict,
            Err(Error::CorruptSegment {
                region: CONTROL_REGION,
                ..
            })
        ),
        "{:?}",
        strict.err()
    );

    let config = config().with_recovery_mode(RecoveryMode::PointInTime);
    let mut wal = ObjectStoreLogStore::open(store.clone(), config)
        .await
        .expect("a writer opens point-in-time");
    assert_eq!(wal.report().damaged_control, vec![3]);
    let refused = wal
        .append_and_flush(vec![(5, vec![Bytes::from("late")])])
        .await;
    assert!(matches!(
        refused,
        Err(Error::RegionReleased { region: 5, .. })
    ));
    wal.append_and_flush(vec![(7, vec![Bytes::from("admitted")])])
        .await
        .expect("object 3's release is not in force");
}
