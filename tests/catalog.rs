//! The catalog and the floor bookkeeping stay bounded by the live part of the chain
//! (pure: no store). The catalog drops what lies below the floor of its newest object:
//! the writer's catalog, a recovered one and a follower's alike, since all of them grow
//! only through `Catalog::insert`. `Retention` forgets watermarks that hide nothing.

use object_store_wal::format::control::CONTROL_REGION;
use object_store_wal::format::{entry_id, entry_sequence, Header, Link, SegmentRecord};
use object_store_wal::internal::chain::catalog::{
    Catalog, Retention, CONTROL_COPY_LAG, STALE_SLACK,
};
use object_store_wal::Error;

fn header(sequence: u64, floor: u64) -> Header {
    Header {
        sequence,
        epoch: 2,
        link: if sequence > 1 {
            Link {
                sequence: sequence - 1,
                epoch: 2,
            }
        } else {
            Link::NONE
        },
        floor,
        claim: false,
        closed: false,
        id_offset: 0,
    }
}

/// One segment of `entries` entries per region, in region order, laid out one after
/// the other (the bytes are never read here).
fn records(sequence: u64, regions: &[u64], entries: u64) -> Vec<SegmentRecord> {
    let mut regions = regions.to_vec();
    regions.sort_unstable();
    regions.dedup();
    regions
        .iter()
        .enumerate()
        .map(|(i, &region)| SegmentRecord {
            region,
            first_entry_id: entry_id(sequence, 0),
            last_entry_id: entry_id(sequence, entries - 1),
            offset: 56 + 100 * i as u64,
            length: 100,
            crc: 0,
            codec: 0,
            cipher: 0,
        })
        .collect()
}

/// 10,000 objects, each holding a region that lives for ever (7), one of 50 that come
/// back, and one never seen again; each carries a floor 20 below itself. The catalog
/// keeps exactly the objects from the floor up, the segments in them and the regions
/// with one; reads of what is left are unchanged; the consistency checks still refuse.
#[test]
fn catalog_keeps_only_what_lies_at_or_above_the_floor() {
    const OBJECTS: u64 = 10_000;
    const KEEP: u64 = 20;
    let mut catalog = Catalog::new();
    for s in 1..=OBJECTS {
        let floor = s.saturating_sub(KEEP).max(1);
        let regions = [7, 100 + s % 50, 1_000_000 + s];
        catalog
            .insert(&header(s, floor), &records(s, &regions, 3), 1000)
            .expect("the next object");
        assert_eq!(catalog.floor(), floor);
        assert_eq!(catalog.object_count() as u64, s - floor + 1, "object {s}");
        assert_eq!(catalog.objects().next().map(|(q, _)| q), Some(floor));
        assert_eq!(catalog.last_sequence(), Some(s));
        // Region 7: one segment per live object, in order, from the floor.
        let seven: Vec<u64> = catalog
            .segments_from(7, 0)
            .iter()
            .map(|l| l.sequence)
            .collect();
        assert_eq!(seven, (floor..=s).collect::<Vec<_>>(), "object {s}");
        assert_eq!(catalog.first_entry_id(7), Some(entry_id(floor, 0)));
        assert_eq!(
            catalog.segments_from(7, entry_id(s, 1)).len(),
            1,
            "a read from an id in the newest object"
        );
        // Regions: 7, the returning ones met since the floor, the fresh ones since it.
        let live = s - floor + 1;
        assert_eq!(
            catalog.region_count() as u64,
            1 + live.min(50) + live,
            "object {s}"
        );
        if s > KEEP + 1 {
            let gone = 1_000_000 + floor - 1;
            assert_eq!(catalog.last_entry_id(gone), None, "region {gone}");
            assert!(catalog.segments_from(gone, 0).is_empty());
            assert!(!catalog.holds_at_or_below(gone, u64::MAX));
        }
        assert_eq!(catalog.last_entry_id(1_000_000 + s), Some(entry_id(s, 2)));
        assert_eq!(catalog.last_entry_id_overall(), Some(entry_id(s, 2)));
    }
    // The checks hold across what was dropped.
    match catalog.insert(&header(OBJECTS, OBJECTS), &[], 96) {
        Err(Error::InconsistentChain { sequence, .. }) => assert_eq!(sequence, OBJECTS),
        other => panic!("a sequence held twice: {other:?}"),
    }
    let mut stale = records(OBJECTS + 1, &[7], 1);
    stale[0].first_entry_id = entry_id(OBJECTS, 0);
    match catalog.insert(&header(OBJECTS + 1, OBJECTS), &stale, 200) {
        Err(Error::InconsistentChain { sequence, reason }) => {
            assert_eq!(sequence, OBJECTS + 1);
            assert!(reason.contains("region 7"), "{reason}");
        }
        other => panic!("a region's ids not increasing: {other:?}"),
    }
    // A floor never decreases: an object carrying a lower one drops nothing back in.
    catalog
        .insert(&header(OBJECTS + 1, 5), &records(OBJECTS + 1, &[7], 1), 200)
        .expect("the next object");
    assert_eq!(catalog.floor(), OBJECTS - KEEP);
    assert_eq!(catalog.object_count() as u64, KEEP + 2);
}

/// Regions that come and go, each declared obsolete a few objects after its last entry,
/// with the writer's own floors: the watermarks kept stay within twice the live regions
/// (plus the slack), pins within the live regions, and a watermark reported for a
/// region with nothing live keeps nothing. The floor is what the pins say throughout.
#[test]
fn retention_forgets_what_hides_nothing() {
    const OBJECTS: u64 = 5_000;
    const LAG: u64 = 5;
    let mut catalog = Catalog::new();
    catalog
        .insert(&header(1, 0), &[], 96)
        .expect("the opening object");
    let mut retention = Retention::new(&catalog, 0);
    let mut most_watermarks = 0;
    for s in 2..=OBJECTS {
        // Region s / 2 gets objects 2k and 2k + 1; it is declared obsolete LAG later.
        let region = s / 2;
        let floor = retention.floor_for(s);
        let recs = records(s, &[region], 2);
        catalog
            .insert(&header(s, floor), &recs, 300)
            .expect("insert");
        retention.committed(s, &recs);
        if s > LAG {
            let done = (s - LAG) / 2;
            retention.obsolete_all(&catalog, done);
            // Reported again for a region long gone: nothing is kept for it.
            retention.obsolete(&catalog, done.saturating_sub(100), u64::MAX);
            if done > 100 {
                assert_eq!(retention.watermark(done - 100), None, "object {s}");
            }
        }
        let live = catalog.region_count();
        assert!(
            retention.watermark_count() <= 2 * live + STALE_SLACK + 1,
            "object {s}: {} watermarks, {live} live regions",
            retention.watermark_count()
        );
        assert!(retention.pin_count() <= live, "object {s}");
        assert!(catalog.object_count() as u64 <= LAG + 4, "object {s}");
        most_watermarks = most_watermarks.max(retention.watermark_count());
        // The floor: the first object of the oldest region not yet declared obsolete.
        let oldest_live = catalog
            .regions()
            .filter(|r| retention.watermark(*r).is_none())
            .map(|r| catalog.first_entry_id(r).map_or(u64::MAX, entry_sequence))
            .min()
            .unwrap_or(s + 1);
        assert_eq!(
            retention.floor_for(s + 1),
            oldest_live.min(s + 1),
            "object {s}"
        );
    }
    assert!(
        most_watermarks > STALE_SLACK,
        "watermarks grew to the slack first"
    );
    assert!(
        ((OBJECTS - LAG) / 2) as usize > most_watermarks,
        "and were forgotten"
    );
}

/// One owner across epochs: watermarks reported before an open still hide and unpin after
/// it, the floor starts again at the recovered chain end's, and the acknowledged floor
/// only rises (it is published exactly when it does).
#[test]
fn retention_keeps_watermarks_across_opens_and_publishes_rising_floors() {
    let mut catalog = Catalog::new();
    catalog.insert(&header(1, 0), &[], 96).expect("opening");
    for s in 2..=4 {
        catalog
            .insert(&header(s, 0), &records(s, &[10, 20], 1), 300)
            .expect("insert");
    }
    let mut retention = Retention::new(&catalog, 0);
    assert_eq!(retention.acknowledged(0), None, "nothing above zero");
    // Region 10 is obsolete up to its entry in object 3: it now pins object 4.
    retention.obsolete(&catalog, 10, entry_id(3, 0));
    assert_eq!(retention.floor_for(5), 2, "region 20 still pins object 2");
    retention.obsolete_all(&catalog, 20);
    assert_eq!(retention.floor_for(5), 4);
    assert_eq!(retention.acknowledged(4), Some(4));
    assert_eq!(
        retention.acknowledged(3),
        None,
        "a lower floor is never published"
    );
    assert_eq!(retention.acknowledged(4), None, "nor the same one again");

    // A new epoch recovers the same chain plus its opening object at 5; the floor
    // starts at the chain end's (4) and the watermarks still hold.
    catalog
        .insert(&header(5, 4), &[], 96)
        .expect("the next opening");
    retention.reopen(&catalog, 4);
    assert_eq!(retention.watermark(10), Some(entry_id(3, 0)));
    assert_eq!(retention.watermark(20), Some(entry_id(4, 0)));
    assert_eq!(retention.floor_for(6), 4, "region 10 pins object 4 still");
    assert_eq!(retention.acknowledged_floor(), 4, "kept across the open");
    assert_eq!(retention.acknowledged(4), None);
    assert_eq!(retention.acknowledged(5), Some(5));
}

/// The control region pins the floor only at its last snapshot (each makes the earlier
/// ones obsolete), after a commit and after a reopen alike; once that pin alone holds
/// the floor `CONTROL_COPY_LAG` objects below the chain end, the writer is told to copy
/// it forward, and a control region with nothing to keep can be unpinned.
#[test]
fn the_control_region_pins_only_its_last_snapshot() {
    let mut catalog = Catalog::new();
    catalog.insert(&header(1, 0), &[], 96).expect("opening");
    let mut retention = Retention::new(&catalog, 0);
    for s in 2..=4 {
        let recs = records(s, &[10, CONTROL_REGION], 1);
        catalog.insert(&header(s, 0), &recs, 300).expect("insert");
        retention.committed(s, &recs);
    }
    retention.obsolete_all(&catalog, 10);
    // The control region's own entries are never obsolete: its pin stays.
    retention.obsolete_all(&catalog, CONTROL_REGION);
    assert_eq!(
        retention.floor_for(5),
        4,
        "the last snapshot, not the first"
    );
    assert!(!retention.control_holds_floor(5));
    let lag_end = 4 + CONTROL_COPY_LAG;
    assert!(retention.control_holds_floor(lag_end));
    assert!(!retention.control_holds_floor(lag_end - 1));

    // A new open pins the last snapshot too.
    catalog.insert(&header(5, 4), &[], 96).expect("opening");
    let mut reopened = Retention::new(&catalog, 4);
    reopened.obsolete_all(&catalog, 10);
    assert_eq!(reopened.floor_for(6), 4);

    // Another region's lower pin holds the floor: no copy is asked for.
    let recs = records(6, &[11], 1);
    catalog.insert(&header(6, 4), &recs, 300).expect("insert");
    let mut lower = Retention::new(&catalog, 0);
    lower.committed(6, &recs);
    assert_eq!(lower.floor_for(7), 4);
    let mut other = Retention::new(&catalog, 0);
    other.obsolete_all(&catalog, 10);
    assert!(other.control_holds_floor(lag_end));
    other.unpin_control();
    assert!(!other.control_holds_floor(lag_end));
    assert_eq!(other.floor_for(lag_end), 6, "region 11 pins object 6 now");
}

/// A follower's catalog that keeps only the regions it follows (and the control
/// region) holds their segments alone, before and after `keep_only`, over 1,000
/// regions an object: what it holds does not grow with the regions it does not follow,
/// and what it reads of its own is unchanged.
#[test]
fn a_catalog_kept_to_a_few_regions_holds_only_their_segments() {
    let all: Vec<u64> = (1..=1000).chain([CONTROL_REGION]).collect();
    let mut full = Catalog::new();
    let mut few = Catalog::new();
    for s in 1..=5 {
        let records = records(s, &all, 2);
        full.insert(&header(s, 1), &records, 100_000).expect("full");
        few.insert(&header(s, 1), &records, 100_000).expect("few");
        if s == 2 {
            few.keep_only([3, 500]);
        }
    }
    assert_eq!(full.region_count(), 1001);
    let mut kept: Vec<u64> = few.regions().collect();
    kept.sort_unstable();
    assert_eq!(kept, vec![3, 500, CONTROL_REGION]);
    for region in [3, 500, CONTROL_REGION] {
        assert_eq!(few.segments_from(region, 0), full.segments_from(region, 0));
    }
    assert!(few.segments_from(4, 0).is_empty());
    assert!(!few.keeps(4) && few.keeps(500) && few.keeps(CONTROL_REGION));
    // Objects and the chain's ids are every region's, as in the full catalog.
    assert_eq!(few.object_count(), full.object_count());
    assert_eq!(few.last_sequence(), full.last_sequence());
}
