//! The `walctl` inspector run as a process on a `file://` store: append, chain, dump,
//! verify, a damaged object, and usage errors.
//!
//! Cargo gives integration tests no path to an example binary, so the first test to need
//! it builds it (`cargo build --example walctl`, same target directory and profile as
//! this test binary) and runs `<target>/<profile>/examples/walctl`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use object_store_wal::format::{encode_object, Header, Link};
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

    // The opening objects and the data objects are on the chain, each linking to the
    // one before; epoch = opening sequence + 1.
    let expect_on_chain = [(1, 2, 0, 0), (2, 2, 1, 2), (3, 4, 2, 2), (4, 4, 3, 4)];
    for (seq, epoch, link_seq, link_epoch) in expect_on_chain
        .into_iter()
        .chain([(11, 12, 4, 4), (12, 12, 11, 12)])
    {
        let l = chain_line(&chain, seq);
        assert_eq!(l["on_chain"], true, "{l}");
        assert_eq!(l["claim"], false, "{l}");
        assert_eq!(l["epoch"], epoch, "{l}");
        assert_eq!(l["link_seq"], link_seq, "{l}");
        assert_eq!(l["link_epoch"], link_epoch, "{l}");
        assert_eq!(l["floor"], 0, "{l}");
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

    // Verify: every object read whole and checked.
    let verified = walctl(dir, &["verify"]).ok();
    let seqs: Vec<u64> = verified
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
    assert!(verified.iter().all(|l| l["ok"] == true), "{verified:?}");

    // None of the read-only commands wrote anything.
    let before = snapshot(dir);
    walctl(dir, &["chain"]).ok();
    walctl(dir, &["dump", "--region", "7"]).ok();
    walctl(dir, &["verify"]).ok();
    assert_eq!(snapshot(dir), before);
}

#[test]
fn a_damaged_object_fails_every_reader_and_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (seq, _) = append(dir, 7, &["68656c6c6f", "776f726c64"]);
    append(dir, 7, &["00"]);
    assert!(walctl(dir, &["verify"])
        .ok()
        .iter()
        .all(|l| l["ok"] == true));

    // Flip a byte of the first entry's payload (header 56, length prefix 4).
    let path = key_file(dir, seq);
    let mut bytes = std::fs::read(&path).expect("read object");
    bytes[56 + 4 + 1] ^= 0x20;
    std::fs::write(&path, &bytes).expect("write object");
    let damaged = key(seq);

    let run = walctl(dir, &["verify"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains(&damaged), "{}", run.stderr);
    assert_eq!(run.lines.len(), 4, "{:?}", run.lines);
    for l in &run.lines {
        if l["seq"] == seq {
            assert_eq!(l["ok"], false, "{l}");
            let error = l["error"].as_str().expect("error");
            assert!(error.contains(&damaged), "{error}");
        } else {
            assert_eq!(l["ok"], true, "{l}");
        }
    }

    for args in [&["chain"][..], &["dump", "--region", "7"][..]] {
        let run = walctl(dir, args);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(&damaged), "{args:?}: {}", run.stderr);
    }

    // A damaged header too: still named, still exit 1.
    let mut bytes = std::fs::read(&path).expect("read object");
    bytes[3] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write object");
    for args in [&["chain"][..], &["verify"][..]] {
        let run = walctl(dir, args);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(&damaged), "{args:?}: {}", run.stderr);
    }
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
}
