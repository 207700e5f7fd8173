//! The `walctl` inspector run as a process on a `file://` store: append, chain, dump,
//! verify, stats, damaged segments (named, local to their region) and damaged objects,
//! usage errors, and a node failed over by hand (regions, fence, retire).
//!
//! Cargo gives integration tests no path to an example binary, so the first test to need
//! it builds it (`cargo build --example walctl`, same target directory and profile as
//! this test binary) and runs `<target>/<profile>/examples/walctl`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use bytes::Bytes;
use object_store_wal::format::{decode_object_summary, encode_object, Header, Link};
use object_store_wal::store_from_url;
use object_store_wal::{Config, ObjectStoreLogStore};
use serde_json::Value;

const PREFIX: &str = "demo";

/// Builds the example once and returns its path.
fn walctl_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // The test binary is `<target>/<profile dir>/deps/walctl-<hash>`.
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binary lives in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("profile dir has a parent");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.arg("build")
            .arg("--quiet")
            .arg("-j2")
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--package")
            .arg(env!("CARGO_PKG_NAME"))
            .arg("--example")
            .arg("walctl")
            .arg("--target-dir")
            .arg(target_dir);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.arg("--profile").arg(other);
            }
            None => panic!("unexpected target layout: {}", exe.display()),
        }
        let features: Vec<&str> = [
            ("aws", cfg!(feature = "aws")),
            ("gcp", cfg!(feature = "gcp")),
            ("azure", cfg!(feature = "azure")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if !features.is_empty() {
            cmd.arg("--features").arg(features.join(","));
        }
        let out = cmd.output().expect("run cargo build --example walctl");
        assert!(
            out.status.success(),
            "cargo build --example walctl failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = profile_dir
            .join("examples")
            .join(format!("walctl{}", std::env::consts::EXE_SUFFIX));
        assert!(bin.is_file(), "no example binary at {}", bin.display());
        bin
    })
}

/// What one run of walctl produced.
struct Run {
    code: Option<i32>,
    lines: Vec<Value>,
    stderr: String,
}

impl Run {
    fn from(out: Output) -> Self {
        let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
        let lines = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
            .collect();
        Run {
            code: out.status.code(),
            lines,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Asserts success and returns the lines.
    fn ok(self) -> Vec<Value> {
        assert_eq!(self.code, Some(0), "walctl failed: {}", self.stderr);
        self.lines
    }
}

fn url_of(dir: &Path) -> String {
    url::Url::from_directory_path(dir)
        .expect("absolute temp dir")
        .to_string()
}

fn walctl_at(url: &str, prefix: &str, args: &[&str]) -> Run {
    let out = Command::new(walctl_bin())
        .args(["--url", url, "--prefix", prefix])
        .args(args)
        .output()
        .expect("run walctl");
    Run::from(out)
}

fn walctl(dir: &Path, args: &[&str]) -> Run {
    walctl_at(&url_of(dir), PREFIX, args)
}

fn key_file(dir: &Path, seq: u64) -> PathBuf {
    dir.join(PREFIX).join(format!("{seq:020}.wal"))
}

fn key(seq: u64) -> String {
    format!("{PREFIX}/{seq:020}.wal")
}

fn id(seq: u64, pos: u64) -> u64 {
    seq << 20 | pos
}

/// The largest sequence `chain` reports, 0 when empty.
fn max_seq(dir: &Path) -> u64 {
    walctl(dir, &["chain"])
        .ok()
        .iter()
        .filter_map(|l| l["seq"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Appends to `region` and checks the ids against the sequence of the object: one
/// above the opening object, which is one above the largest sequence present.
fn append(dir: &Path, region: u64, hex: &[&str]) -> (u64, Vec<u64>) {
    let opening = max_seq(dir) + 1;
    let mut args = vec!["append".to_string(), "--region".into(), region.to_string()];
    args.push("--create-if-missing".into());
    args.extend(hex.iter().map(|h| h.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let lines = walctl(dir, &args).ok();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    let seq = opening + 1;
    assert_eq!(line["region"], region);
    assert_eq!(line["seq"], seq);
    let ids: Vec<u64> = line["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id"))
        .collect();
    let expected: Vec<u64> = (0..hex.len() as u64).map(|p| id(seq, p)).collect();
    assert_eq!(ids, expected);
    (seq, ids)
}

/// Every file under `dir`, with its contents.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                files.push((p, bytes));
            }
        }
    }
    files.sort();
    files
}

fn chain_line(chain: &[Value], seq: u64) -> &Value {
    chain
        .iter()
        .find(|l| l["seq"] == seq)
        .unwrap_or_else(|| panic!("no object {seq} in {chain:?}"))
}

fn dumped(lines: &[Value]) -> Vec<(u64, String)> {
    lines
        .iter()
        .map(|l| {
            assert_eq!(l["region"], 7);
            (
                l["id"].as_u64().expect("id"),
                l["payload_hex"].as_str().expect("payload_hex").to_string(),
            )
        })
        .collect()
}

#[test]
fn append_chain_dump_verify_on_a_file_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();

    // An empty prefix: nothing listed, nothing replayed.
    assert!(walctl(dir, &["chain"]).ok().is_empty());
    assert!(walctl(dir, &["dump", "--region", "7"]).ok().is_empty());

    // Each append opens the prefix (opening object S = max + 1) and writes S + 1.
    let (s1, ids1) = append(dir, 7, &["68656c6c6f", ""]);
    assert_eq!(s1, 2);
    let (s2, ids2) = append(dir, 7, &["aabb"]);
    assert_eq!(s2, 4);

    // An orphan of an old epoch whose link names an absent object, and a foreign key.
    let orphan = Header {
        sequence: 10,
        epoch: 1,
        link: Link {
            sequence: 9,
            epoch: 1,
        },
        floor: 0,
        claim: false,
        closed: false,
        id_offset: 0,
    };
    let bytes = encode_object(&orphan, std::iter::empty())
        .expect("encode")
        .to_bytes();
    std::fs::write(key_file(dir, 10), &bytes).expect("write orphan");
    std::fs::write(dir.join(PREFIX).join("notes.txt"), b"not a WAL object").expect("write");

    // The third open claims the holes 5..=9, opens at 11 and writes 12.
    let (s3, ids3) = append(dir, 7, &["0102", "03"]);
    assert_eq!(s3, 12);

    let chain = walctl(dir, &["chain"]).ok();
    let objects: Vec<&Value> = chain.iter().filter(|l| l.get("seq").is_some()).collect();
    let seqs: Vec<u64> = objects.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=12).collect::<Vec<_>>(),
        "ascending, every object"
    );
    for l in &objects {
        for field in [
            "seq",
            "epoch",
            "link_seq",
            "link_epoch",
            "floor",
            "id_offset",
            "claim",
            "on_chain",
            "segments",
            "entries",
            "bytes",
        ] {
            assert!(l.get(field).is_some(), "{field} missing in {l}");
        }
    }
    let foreign: Vec<&Value> = chain
        .iter()
        .filter(|l| l.get("foreign").is_some())
        .collect();
    assert_eq!(foreign.len(), 1);
    assert_eq!(foreign[0]["foreign"], "demo/notes.txt");

    // The opening objects and the data objects form the chain, each linking to the
    // one before; epoch = opening sequence + 1. Region 7's first entry is in 2, so every
    // object from 2 on carries floor 2, and the first opening object lies below it.
    let expect_chain = [(1, 2, 0, 0), (2, 2, 1, 2), (3, 4, 2, 2), (4, 4, 3, 4)];
    for (seq, epoch, link_seq, link_epoch) in expect_chain
        .into_iter()
        .chain([(11, 12, 4, 4), (12, 12, 11, 12)])
    {
        let l = chain_line(&chain, seq);
        assert_eq!(l["on_chain"], seq >= 2, "{l}");
        assert_eq!(l["claim"], false, "{l}");
        assert_eq!(l["epoch"], epoch, "{l}");
        assert_eq!(l["link_seq"], link_seq, "{l}");
        assert_eq!(l["link_epoch"], link_epoch, "{l}");
        assert_eq!(l["floor"], if seq >= 2 { 2 } else { 0 }, "{l}");
        assert_eq!(l["id_offset"], 0, "{l}");
    }
    for (seq, entries) in [(1, 0), (2, 2), (3, 0), (4, 1), (11, 0), (12, 2)] {
        let l = chain_line(&chain, seq);
        assert_eq!(l["entries"], entries, "{l}");
        assert_eq!(l["segments"], u64::from(entries > 0), "{l}");
    }
    assert_eq!(chain_line(&chain, 1)["bytes"], 96);
    // Claims: the third open's epoch, never on the chain.
    for seq in 5..=9 {
        let l = chain_line(&chain, seq);
        assert_eq!(l["claim"], true, "{l}");
        assert_eq!(l["on_chain"], false, "{l}");
        assert_eq!(l["epoch"], 12, "{l}");
        assert_eq!(l["bytes"], 96, "{l}");
    }
    // The orphan: listed, not on the chain.
    let l = chain_line(&chain, 10);
    assert_eq!(l["on_chain"], false, "{l}");
    assert_eq!(l["claim"], false, "{l}");
    assert_eq!(l["epoch"], 1, "{l}");

    // Dump: every acknowledged entry once, in order, with its id.
    let all = dumped(&walctl(dir, &["dump", "--region", "7"]).ok());
    let expected: Vec<(u64, String)> = vec![
        (ids1[0], "68656c6c6f".into()),
        (ids1[1], String::new()),
        (ids2[0], "aabb".into()),
        (ids3[0], "0102".into()),
        (ids3[1], "03".into()),
    ];
    assert_eq!(all, expected);
    let from = ids1[1].to_string();
    let tail = dumped(&walctl(dir, &["dump", "--region", "7", "--from", &from]).ok());
    assert_eq!(tail, expected[1..]);
    let from = (ids2[0] + 1).to_string();
    let tail = dumped(&walctl(dir, &["dump", "--region", "7", "--from", &from]).ok());
    assert_eq!(tail, expected[3..]);
    assert!(walctl(dir, &["dump", "--region", "8"]).ok().is_empty());
    let empty = walctl(dir, &["dump", "--region", "8"]);
    assert!(
        empty.stderr.contains("region 8 has no entries"),
        "{}",
        empty.stderr
    );
    // --url and --prefix may also follow the subcommand.
    let after = walctl_at(&url_of(dir), PREFIX, &[]);
    assert_eq!(after.code, Some(2), "no subcommand: {}", after.stderr);
    let url = url_of(dir);
    let args = ["dump", "--region", "7", "--url", &url, "--prefix", PREFIX];
    let run = Run::from(Command::new(walctl_bin()).args(args).output().expect("run"));
    assert_eq!(dumped(&run.ok()), expected);

    // Verify: every object read whole and checked.
    let verified = walctl(dir, &["verify"]).ok();
    let seqs: Vec<u64> = verified
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
    assert!(verified.iter().all(|l| l["ok"] == true), "{verified:?}");

    // Stats of this known prefix: objects 1..=12 (chain 2-4, 11, 12 above the floor 2;
    // claims 5-9; the orphan 10 and the opening object 1 below the floor), region 7's
    // five entries in three segments, one foreign key.
    let wal_bytes: u64 = (1..=12)
        .map(|s| std::fs::metadata(key_file(dir, s)).expect("object").len())
        .sum();
    let stats = walctl(dir, &["stats", "--json"]).ok();
    assert_eq!(stats.len(), 1, "{stats:?}");
    let expected = serde_json::json!({
        "objects": 12,
        "bytes": wal_bytes,
        "chain_objects": 5,
        "chain_end": 12,
        "epoch": 12,
        "floor": 2,
        "max_sequence": 12,
        "regions": 1,
        "entries": 5,
        "claims": 5,
        "orphans": 2,
        "foreign_keys": 1,
        "segments": 3,
        "segments_checked": 3,
        "damaged_segments": 0,
        "unread_below_floor": 0,
    });
    assert_eq!(stats[0], expected);
    // The same numbers as a table, one "name value what" row each.
    let run = Command::new(walctl_bin())
        .args(["--url", &url_of(dir), "--prefix", PREFIX, "stats"])
        .output()
        .expect("run walctl");
    assert_eq!(run.status.code(), Some(0));
    let table = String::from_utf8(run.stdout).expect("UTF-8");
    let rows: Vec<(String, String)> = table
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().expect("name").to_string();
            (name, words.next().expect("value").to_string())
        })
        .collect();
    let want: Vec<(String, String)> = expected
        .as_object()
        .expect("object")
        .iter()
        .map(|(n, v)| (n.clone(), v.to_string()))
        .collect();
    let mut sorted = rows.clone();
    sorted.sort();
    assert_eq!(sorted, want, "{table}");

    // None of the read-only commands wrote anything.
    let before = snapshot(dir);
    walctl(dir, &["chain"]).ok();
    walctl(dir, &["dump", "--region", "7"]).ok();
    walctl(dir, &["verify"]).ok();
    walctl(dir, &["stats", "--json"]).ok();
    assert_eq!(snapshot(dir), before);
}

/// Appends `parts` (several regions in one object) in-process through the library, as
/// `walctl append` would for one region; returns the object's sequence.
fn append_parts(dir: &Path, parts: &[(u64, &[&str])]) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = store_from_url(&url_of(dir)).expect("store");
        let mut wal =
            ObjectStoreLogStore::open(store, Config::new(PREFIX).with_create_if_missing(true))
                .await
                .expect("open");
        let parts = parts
            .iter()
            .map(|(region, entries)| {
                let entries = entries.iter().map(|e| Bytes::from(e.to_string())).collect();
                (*region, entries)
            })
            .collect();
        wal.append_and_flush(parts).await.expect("append").sequence
    })
}

/// Flips a bit of the first payload byte of `region`'s segment in object `seq`.
fn damage_segment(dir: &Path, seq: u64, region: u64) {
    let path = key_file(dir, seq);
    let mut bytes = std::fs::read(&path).expect("read object");
    let summary = decode_object_summary(&bytes).expect("intact before");
    let record = summary
        .footer
        .records
        .iter()
        .find(|r| r.region == region)
        .expect("the region has a segment");
    bytes[record.offset as usize + 4] ^= 0x20;
    std::fs::write(&path, &bytes).expect("write object");
}

fn payloads(lines: &[Value], region: u64) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            assert_eq!(l["region"], region, "{l}");
            let hex = l["payload_hex"].as_str().expect("payload_hex");
            String::from_utf8(hex::decode(hex).expect("hex")).expect("UTF-8")
        })
        .collect()
}

#[test]
fn damaged_segments_are_named_and_stay_local() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let s1 = append_parts(dir, &[(7, &["a1", "a2"]), (8, &["b1"])]);
    let s2 = append_parts(dir, &[(7, &["a3"]), (8, &["b2", "b3"])]);
    let s3 = append_parts(dir, &[(7, &["a4"]), (8, &["b4"])]);
    assert_eq!((s1, s2, s3), (2, 4, 6));
    damage_segment(dir, s1, 8);
    damage_segment(dir, s2, 7);
    let named =
        |seq: u64, region: u64| format!("damaged segment of region {region} in {}", key(seq));

    // Verify names both, goes on to the end, and fails; progress every 2 objects.
    let run = walctl(dir, &["verify", "--progress-every", "2"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let seqs: Vec<u64> = run
        .lines
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>(), "every object, in order");
    for l in &run.lines {
        let seq = l["seq"].as_u64().unwrap();
        let region = match seq {
            2 => 8,
            4 => 7,
            _ => {
                assert_eq!(l["ok"], true, "{l}");
                continue;
            }
        };
        assert_eq!(l["ok"], false, "{l}");
        let segments = l["damaged_segments"].as_array().expect("damaged_segments");
        assert_eq!(segments.len(), 1, "{l}");
        assert_eq!(segments[0]["key"], key(seq), "{l}");
        assert_eq!(segments[0]["region"], region, "{l}");
        let error = segments[0]["error"].as_str().expect("error");
        assert!(error.starts_with("segment CRC mismatch"), "{error}");
        assert!(
            l["error"].as_str().unwrap().contains(&named(seq, region)),
            "{l}"
        );
    }
    for expected in [
        named(s1, 8),
        named(s2, 7),
        "walctl: verified 2/6 objects".to_string(),
        "walctl: verified 4/6 objects".to_string(),
        "walctl: verified 6/6 objects".to_string(),
        "walctl: 2 damaged segments in 2 objects, 0 unusable objects, of 6 objects".to_string(),
    ] {
        assert!(
            run.stderr.contains(&expected),
            "{expected:?} in {}",
            run.stderr
        );
    }

    // Recovery (chain, stats) goes on and reports both.
    let chain = walctl(dir, &["chain"]).ok();
    let damaged: Vec<(String, u64)> = chain
        .iter()
        .filter(|l| l.get("damaged").is_some())
        .map(|l| {
            (
                l["damaged"].as_str().unwrap().to_string(),
                l["region"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(damaged, vec![(key(s1), 8), (key(s2), 7)]);
    let stats = walctl(dir, &["stats", "--json"]).ok();
    assert_eq!(stats[0]["damaged_segments"], 2, "{stats:?}");
    assert_eq!(stats[0]["regions"], 2, "{stats:?}");

    // Only the damaged region's reads fail, at the hole, naming it.
    let run = walctl(dir, &["dump", "--region", "7"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains(&named(s2, 7)), "{}", run.stderr);
    assert_eq!(payloads(&run.lines, 7), ["a1", "a2"]);
    let run = walctl(dir, &["dump", "--region", "8"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains(&named(s1, 8)), "{}", run.stderr);
    assert!(run.lines.is_empty(), "{:?}", run.lines);
    // An object's intact segments read in full: region 8 of object 4 and on, from there.
    let from = id(s2, 0).to_string();
    let run = walctl(dir, &["dump", "--region", "8", "--from", &from]);
    assert_eq!(payloads(&run.ok(), 8), ["b2", "b3", "b4"]);

    // Only the object CRC of object 5 (an opening object) damaged: recovery, which does
    // not check it, is unaffected; verify names it.
    let path = key_file(dir, 5);
    let mut bytes = std::fs::read(&path).expect("read object");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write object");
    walctl(dir, &["chain"]).ok();
    let run = walctl(dir, &["verify"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let line = run.lines.iter().find(|l| l["seq"] == 5).expect("object 5");
    assert_eq!(line["ok"], false);
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains(&key(5)) && error.contains("object CRC mismatch"),
        "{error}"
    );
    assert!(
        run.stderr.contains(
            "2 damaged segments in 2 objects, 0 unusable objects, \
             1 objects whose only damage is their object CRC, of 6 objects"
        ),
        "{}",
        run.stderr
    );

    // A damaged header makes the object unusable: strict recovery fails naming it, and
    // inspection shows what it can read, names it and exits 1.
    let path = key_file(dir, s3);
    let mut bytes = std::fs::read(&path).expect("read object");
    bytes[3] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write object");
    let tip = key(s3);
    for args in [
        &["chain"][..],
        &["stats", "--json"][..],
        &["dump", "--region", "8"][..],
    ] {
        let run = walctl(dir, args);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(&tip), "{args:?}: {}", run.stderr);
    }
    let run = walctl(dir, &["verify"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let line = run.lines.iter().find(|l| l["seq"] == s3).expect("object 6");
    assert_eq!(line["ok"], false);
    assert!(line["error"].as_str().unwrap().contains(&tip), "{line}");
    assert!(
        run.stderr.contains(
            "2 damaged segments in 2 objects, 1 unusable objects, \
             1 objects whose only damage is their object CRC, of 6 objects"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_usage_and_input_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let url = url_of(dir);

    let cases: [(&str, &str, &[&str]); 6] = [
        (&url, PREFIX, &["append", "--region", "1", "zz"]),
        (&url, PREFIX, &["append", "--region", "1"]),
        (&url, PREFIX, &["dump"]),
        (&url, PREFIX, &["frobnicate"]),
        (&url, "/abs", &["chain"]),
        ("ftp://example.com/x", PREFIX, &["chain"]),
    ];
    for (url, prefix, args) in cases {
        let run = walctl_at(url, prefix, args);
        assert_eq!(run.code, Some(2), "{url} {prefix} {args:?}: {}", run.stderr);
        assert!(!run.stderr.is_empty());
        assert!(run.lines.is_empty());
    }
    assert!(snapshot(dir).is_empty(), "nothing written");

    // A read-only command on a directory that does not exist fails and does not create it.
    let missing = dir.join("missing");
    let run = walctl_at(&url_of(&missing), PREFIX, &["chain"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(!missing.exists());

    // A typo must not start an empty WAL: `append` where no WAL is fails naming the
    // location, and creates nothing; with `--create-if-missing` it starts one.
    let append = ["append", "--region", "1", "00"];
    let run = walctl_at(&url_of(&missing), PREFIX, &append);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no WAL at"), "{}", run.stderr);
    assert!(run.stderr.contains(PREFIX), "{}", run.stderr);
    assert!(!missing.exists(), "nothing created");
    let run = walctl_at(
        &url_of(&missing),
        PREFIX,
        &[&append[..], &["--create-if-missing"]].concat(),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(missing.join(PREFIX).is_dir());
}

/// Over three stores: `chain` shows each key's copy in each store and whether a quorum
/// holds it; `verify` checks every copy and names a damaged one by store.
#[test]
fn over_three_stores_chain_shows_copies_and_verify_checks_each() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dirs: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).expect("dir");
    }
    let run = |args: &[&str]| {
        let mut cmd = Command::new(walctl_bin());
        for d in &dirs {
            cmd.args(["--url", &url_of(d)]);
        }
        Run::from(
            cmd.args(["--prefix", "p"])
                .args(args)
                .output()
                .expect("run walctl"),
        )
    };
    run(&["append", "--create-if-missing", "--region", "1", "aabb"]).ok();
    let appended = run(&["append", "--region", "2", "ccdd"]).ok();
    let seq = appended[0]["seq"].as_u64().expect("seq");
    // One store misses the object: a quorum still holds it.
    std::fs::remove_file(dirs[2].join("p").join(format!("{seq:020}.wal"))).expect("remove");
    let lines = run(&["chain"]).ok();
    let copies = lines
        .iter()
        .find(|l| l["seq"] == seq && l.get("copies").is_some())
        .expect("a copies line for the object");
    assert_eq!(copies["decided"], true);
    let c = copies["copies"].as_array().expect("copies");
    assert_eq!(c.len(), 3);
    assert_eq!(c[0], c[1]);
    assert!(c[2].is_null(), "{copies}");
    assert!(run(&["verify"]).ok().iter().all(|l| l["ok"] == true));

    // A damaged copy is named with its store; verify exits 1.
    let key = dirs[1].join("p").join(format!("{seq:020}.wal"));
    let mut bytes = std::fs::read(&key).expect("read");
    let last = bytes.len() - 40;
    bytes[last] ^= 0xff;
    std::fs::write(&key, bytes).expect("write");
    let verified = run(&["verify"]);
    assert_eq!(verified.code, Some(1), "{}", verified.stderr);
    assert!(verified
        .lines
        .iter()
        .any(|l| l["store"] == 1 && l["seq"] == seq && l["ok"] == false));
}

/// A damaged object the chain needs: inspection shows what it can read, names the
/// blocking object and what point-in-time recovery would give up, and exits 1; with
/// `--recovery-mode point-in-time` a dump reads up to the damage and exits 0.
#[test]
fn inspection_names_the_object_that_blocks_recovery() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = url_of(dir.path());
    for hex in ["aa", "bb", "cc"] {
        walctl_at(
            &url,
            "p",
            &["append", "--create-if-missing", "--region", "1", hex],
        )
        .ok();
    }
    // Each append opened an epoch: 1 opening, 2 "aa", 3 opening, 4 "bb", 5 opening, 6 "cc".
    let key = dir.path().join("p").join(format!("{:020}.wal", 4));
    let mut bytes = std::fs::read(&key).expect("read");
    bytes[20] ^= 0xff;
    std::fs::write(&key, bytes).expect("write");

    let chain = walctl_at(&url, "p", &["chain"]);
    assert_eq!(chain.code, Some(1), "{}", chain.stderr);
    assert!(
        chain.stderr.contains("recovery is blocked by"),
        "{}",
        chain.stderr
    );
    let blocking: Vec<&Value> = chain
        .lines
        .iter()
        .filter(|l| l.get("damaged_object").is_some())
        .collect();
    assert_eq!(blocking.len(), 1);
    assert_eq!(blocking[0]["damaged_object"], 4);
    assert_eq!(blocking[0]["blocks_strict_recovery"], true);
    // No id offset, and 5 (the next epoch's opening object) links to 4: its ids.
    assert_eq!(
        blocking[0]["entry_ids_given_up"],
        serde_json::json!([4u64 << 20, (5u64 << 20) - 1])
    );
    let given_up: Vec<u64> = chain
        .lines
        .iter()
        .filter_map(|l| l.get("given_up").and_then(Value::as_u64))
        .collect();
    assert_eq!(given_up, vec![5, 6]);
    // Everything readable is still listed.
    let listed: Vec<u64> = chain
        .lines
        .iter()
        .filter(|l| l.get("epoch").is_some() && l.get("given_up").is_none())
        .filter_map(|l| l["seq"].as_u64())
        .collect();
    assert_eq!(listed, vec![1, 2, 3, 5, 6]);

    let strict = walctl_at(&url, "p", &["dump", "--region", "1"]);
    assert_eq!(strict.code, Some(1), "{}", strict.stderr);
    let dumped = walctl_at(
        &url,
        "p",
        &["--recovery-mode", "point-in-time", "dump", "--region", "1"],
    )
    .ok();
    let payloads: Vec<&str> = dumped
        .iter()
        .filter_map(|l| l["payload_hex"].as_str())
        .collect();
    assert_eq!(payloads, vec!["aa"]);
}

#[test]
fn an_encrypted_wal_is_read_and_verified_with_its_keys() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let keys = dir.join("wal.keys");
    std::fs::write(
        &keys,
        "# id:key\n1:4242424242424242424242424242424242424242424242424242424242424242\n",
    )
    .expect("write keys");
    let keys_arg = format!("file:{}", keys.display());
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("data dir");
    // 200 bytes of a repeated text: compressible, and findable if stored in the clear.
    let payload = hex::encode("walctl-secret-row ".repeat(12));
    let lines = walctl(
        &data,
        &[
            "append",
            "--keys",
            &keys_arg,
            "--compression",
            "zstd",
            "--create-if-missing",
            "--region",
            "5",
            &payload,
        ],
    )
    .ok();
    let seq = lines[0]["seq"].as_u64().expect("seq");
    let stored = std::fs::read(key_file(&data, seq)).expect("the object");
    assert!(!stored
        .windows(b"walctl-secret-row".len())
        .any(|w| w == b"walctl-secret-row"));

    // With the keys: the entry, and every object verifies.
    let dumped = walctl(&data, &["dump", "--region", "5", "--keys", &keys_arg]).ok();
    assert_eq!(dumped[0]["payload_hex"], payload);
    walctl(&data, &["verify", "--keys", &keys_arg]).ok();

    // Without them: recovery still works (chain), the read and the check fail naming
    // the key id.
    walctl(&data, &["chain"]).ok();
    let run = walctl(&data, &["dump", "--region", "5"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("key 1 is not available"),
        "{}",
        run.stderr
    );
    let run = walctl(&data, &["verify"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("key 1 is not available"),
        "{}",
        run.stderr
    );

    // A source that is neither env: nor file: is bad usage.
    let run = walctl(&data, &["chain", "--keys", "vault:x"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
}

/// Writes, under `prefix`, a log whose control snapshot records a piece of `region` in
/// `piece_of` (ids `first..=last`): what a node that acquired the region from it and
/// has not flushed past it holds. Objects 1 (opening) and 2 (the snapshot), by hand.
fn log_naming_a_piece(dir: &Path, prefix: &str, region: u64, piece_of: &str, ids: (u64, u64)) {
    use object_store_wal::format::control::{encode_ownership, Holding, CONTROL_REGION};
    let snapshot = encode_ownership(&[Holding::EarlierPiece {
        region,
        prefix: piece_of.to_string(),
        first_id: ids.0,
        last_id: ids.1,
    }])
    .expect("a snapshot");
    let opening = Header {
        sequence: 1,
        epoch: 2,
        link: Link::NONE,
        floor: 0,
        claim: false,
        closed: false,
        id_offset: ids.1 >> 20,
    };
    let with_snapshot = Header {
        sequence: 2,
        link: Link {
            sequence: 1,
            epoch: 2,
        },
        ..opening
    };
    let snapshots = [snapshot];
    let objects = [
        encode_object(&opening, std::iter::empty()).expect("encodes"),
        encode_object(&with_snapshot, [(CONTROL_REGION, &snapshots[..])]).expect("encodes"),
    ];
    let at = dir.join(prefix);
    std::fs::create_dir_all(&at).expect("mkdir");
    for (i, object) in objects.iter().enumerate() {
        let file = at.join(format!("{:020}.wal", i + 1));
        std::fs::write(file, object.to_bytes()).expect("write");
    }
}

/// A node failed over by hand: `regions` lists what the prefix holds; `fence` closes it
/// and prints each region's last id, `acquire_above` and the pieces to acquire with,
/// the same when asked again; a writer's `append` is then refused for good; `retire`
/// is refused before the grace, while a live prefix names it as a piece (saying which
/// prefix and region) and when a live prefix named holds no WAL, deleting nothing; then
/// it keeps only the closed object.
#[test]
fn a_node_is_failed_over_by_hand() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (_, first) = append(dir, 1, &["01", "02"]);
    let (_, second) = append(dir, 2, &["03"]);

    let regions = walctl(dir, &["regions"]).ok();
    assert_eq!(regions.len(), 3, "{regions:?}");
    assert_eq!(regions[0]["region"], 1);
    assert_eq!(regions[0]["first_id"], first[0]);
    assert_eq!(regions[0]["last_id"], first[1]);
    assert_eq!(regions[1]["region"], 2);
    assert!(regions[0]["released"].is_null());
    assert!(regions[2]["closed"].is_null());

    let fenced = walctl(dir, &["fence"]).ok();
    assert_eq!(fenced.len(), 3, "{fenced:?}");
    let closed_line = &fenced[2];
    assert_eq!(closed_line["wrote"], true);
    let closed = closed_line["closed"].as_u64().expect("closed");
    let acquire_above = closed_line["acquire_above"].as_u64().expect("above");
    assert_eq!(fenced[0]["region"], 1);
    assert_eq!(fenced[0]["last_id"], first[1]);
    assert_eq!(fenced[0]["acquire_above"], acquire_above);
    assert!(acquire_above > second[0]);
    let pieces = fenced[0]["acquire_pieces"].as_array().expect("pieces");
    assert_eq!(pieces.len(), 1);
    assert_eq!(pieces[0]["prefix"], PREFIX);
    assert_eq!(pieces[0]["first_id"], first[0]);
    assert_eq!(pieces[0]["last_id"], first[1]);
    let again = walctl(dir, &["fence"]).ok();
    assert_eq!(again[..2], fenced[..2]);
    assert_eq!(again[2]["wrote"], false);
    assert_eq!(again[2]["closed"], closed);

    let refused = walctl(dir, &["append", "--region", "1", "04"]);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("fenced for good"),
        "{}",
        refused.stderr
    );

    let before = snapshot(dir);
    let early = walctl(dir, &["retire", "--reclaim-grace-secs", "600"]);
    assert_eq!(early.code, Some(1), "{}", early.stderr);
    assert!(early.stderr.contains("reclaim_grace"), "{}", early.stderr);
    assert_eq!(snapshot(dir), before);

    // The fence landed an hour ago (by the store's clock: the file's time).
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(key_file(dir, closed))
        .and_then(|f| f.set_modified(hour_ago))
        .expect("set the closed object's time");
    log_naming_a_piece(dir, "node-b", 1, PREFIX, (first[0], first[1]));
    let before = snapshot(dir);
    let needed = walctl(dir, &["retire", "--reclaim-grace-secs", "600"]);
    assert_eq!(needed.code, Some(1), "{}", needed.stderr);
    assert!(
        needed.stderr.contains("region 1 that node-b still needs"),
        "{}",
        needed.stderr
    );
    assert_eq!(snapshot(dir), before);
    // A live prefix that holds no WAL (a typo) checks nothing: refused.
    let typo = walctl(
        dir,
        &["retire", "--reclaim-grace-secs", "600", "--live", "node-c"],
    );
    assert_eq!(typo.code, Some(2), "{}", typo.stderr);
    assert_eq!(snapshot(dir), before);

    // node-b flushed past the piece: its log names it no more (here, it is gone).
    std::fs::remove_dir_all(dir.join("node-b")).expect("remove node-b");
    let retired = walctl(dir, &["retire", "--reclaim-grace-secs", "600"]).ok();
    assert_eq!(retired.len(), 1);
    assert_eq!(retired[0]["closed"], closed);
    assert_eq!(retired[0]["deleted"], closed - 1);
    let left: Vec<_> = std::fs::read_dir(dir.join(PREFIX))
        .expect("the prefix")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from(format!("{closed:020}.wal"))]
    );
    let refused = walctl(
        dir,
        &["append", "--create-if-missing", "--region", "1", "04"],
    );
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
}
