//! The public API of both crates, as rustdoc renders it, in the manner of
//! `cargo public-api`: every item a user can name, its declaration, its inherent methods
//! and the traits it implements, one line each. The test fails when a type the crates
//! declare but do not make public (the writer's, supervisor's, readers' and recovery's
//! state, the core's hidden `internal` module) appears in any of those lines, and when
//! the listing differs from the reviewed one in `docs/public-api.txt` (made by the same
//! rustdoc).
//!
//! It reads what `cargo doc` wrote, so it is ignored by a plain `cargo test`;
//! `scripts/public_api.sh` (and `.ci/run`) builds the docs and runs it. Set
//! `UPDATE_PUBLIC_API=1` to rewrite `docs/public-api.txt` after a deliberate change.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The two crates, by the directory rustdoc writes each to.
const CRATES: [&str; 2] = ["object_store_wal", "object_store_wal_actors"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the actor crate sits in the repository")
        .to_path_buf()
}

/// Where `cargo doc` wrote: the target directory beside this test's temporary one.
fn doc_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("doc")
}

/// Replaces the HTML entities rustdoc writes with their characters.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

/// The text of an HTML fragment: `<summary>`s dropped (rustdoc's "Show 29 fields"),
/// tags dropped, entities decoded, rustdoc's notable-traits mark (ⓘ) dropped, whitespace
/// collapsed.
fn text(html: &str) -> String {
    let mut rest = html;
    let mut out = String::new();
    while let Some(at) = rest.find("<summary") {
        out.push_str(&rest[..at]);
        match rest[at..].find("</summary>") {
            Some(end) => rest = &rest[at + end + "</summary>".len()..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    let mut plain = String::new();
    let mut in_tag = false;
    for c in out.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            'ⓘ' => {}
            c if !in_tag => plain.push(c),
            _ => {}
        }
    }
    unescape(&plain)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line of the listing: its text, and the name of the item it belongs to.
struct Line {
    text: String,
    name: String,
}

/// Every `open ... close` span of `html`, the text between.
fn spans<'a>(html: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(open) {
        let from = &rest[at + open.len()..];
        let Some(end) = from.find(close) else { break };
        found.push(&from[..end]);
        rest = &from[end + close.len()..];
    }
    found
}

/// `(page, path)` of every item `all.html` lists for `krate`.
fn items(krate: &str) -> Vec<(String, String)> {
    let all = doc_dir().join(krate).join("all.html");
    let html = std::fs::read_to_string(&all).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the docs first (scripts/public_api.sh)",
            all.display()
        )
    });
    spans(&html, "<li><a href=\"", "</a></li>")
        .into_iter()
        .filter_map(|s| {
            let (page, name) = s.split_once("\">")?;
            // The sidebar's section links (`#structs" title=...`) are not items.
            if page.starts_with('#') || page.contains('"') {
                return None;
            }
            Some((page.to_string(), format!("{krate}::{}", unescape(name))))
        })
        .collect()
}

/// The lines of one item's page: its declaration, the headers of its inherent impls and
/// their methods, and the headers of the traits it implements (not their methods, and
/// neither auto traits nor blanket impls, which rustdoc derives).
fn item_lines(krate: &str, page: &str, path: &str) -> Vec<Line> {
    let file = doc_dir().join(krate).join(page);
    let html = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let name = path.rsplit("::").next().unwrap_or(path).to_string();
    let line = |fragment: &str| Line {
        text: format!("{path}: {}", text(fragment)),
        name: name.clone(),
    };
    let mut lines = Vec::new();
    for decl in spans(
        &html,
        "<pre class=\"rust item-decl\"><code>",
        "</code></pre>",
    ) {
        lines.push(line(decl));
    }
    let end = [
        "id=\"synthetic-implementations\"",
        "id=\"blanket-implementations\"",
    ]
    .iter()
    .filter_map(|m| html.find(m))
    .min()
    .unwrap_or(html.len());
    let traits = html.find("id=\"trait-implementations\"").unwrap_or(end);
    let (inherent, implemented) = (&html[..traits], &html[traits..end.max(traits)]);
    // Inherent impl headers (a variant's or field's h3 restates the declaration).
    for header in spans(inherent, "<h3 class=\"code-header\">", "</h3>") {
        if text(header).starts_with("impl") {
            lines.push(line(header));
        }
    }
    for header in spans(inherent, "<h4 class=\"code-header\">", "</h4>") {
        lines.push(line(header));
    }
    for header in spans(implemented, "<h3 class=\"code-header\">", "</h3>") {
        lines.push(line(header));
    }
    lines
}

/// The names of the types and traits declared at the top level of the Rust files under
/// `dir`, whatever their visibility.
fn declared(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            names.extend(declared(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            names.extend(declared_in(&source));
        }
    }
    names
}

/// [`declared`] for one file's source: lines that start a `struct`, `enum`, `trait` or
/// `type` at column 0 (associated types and test modules are indented).
fn declared_in(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in source.lines().filter(|l| !l.starts_with([' ', '/', '#'])) {
        let mut words = line.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        while let Some(word) = words.next() {
            if matches!(word, "struct" | "enum" | "trait" | "type") {
                if let Some(name) = words.by_ref().find(|w| !w.is_empty()) {
                    if name.chars().next().is_some_and(char::is_uppercase) {
                        names.insert(name.to_string());
                    }
                }
                break;
            }
        }
    }
    names
}

/// `line` without its string literals (a constant's value is not a type).
fn without_strings(line: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    for c in line.chars() {
        match c {
            '"' => in_string = !in_string,
            c if !in_string => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether `line` holds `name` as a whole word in a type's place, not as an enum
/// variant of the same name: one followed by `(` or ` {`, or one between `{ ` or `, `
/// and `,` or ` }`.
fn holds_type(line: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(name).any(|(at, _)| {
        let before = &line[..at];
        let after = &line[at + name.len()..];
        let variant = after.starts_with('(')
            || after.starts_with(" {")
            || ((before.ends_with("{ ") || before.ends_with(", "))
                && (after.starts_with(',') || after.starts_with(" }")));
        !before.chars().next_back().is_some_and(word)
            && !after.chars().next().is_some_and(word)
            && !variant
    })
}

/// Whether the listing must match the reviewed one whatever made the docs (CI and
/// scripts/public_api.sh set it).
fn strict() -> bool {
    std::env::var_os("PUBLIC_API_STRICT").is_some()
}

/// The newest modification time of the Rust files under `dir`.
fn newest_source(dir: &Path) -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let modified = if path.is_dir() {
            newest_source(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
        } else {
            continue;
        };
        newest = newest.max(modified);
    }
    newest
}

#[test]
#[ignore = "reads the docs `cargo doc` writes: run scripts/public_api.sh (or .ci/run)"]
fn the_public_api_holds_no_runtime_internal() {
    // Docs older than their crate's sources would check an earlier API.
    for (krate, sources) in [(CRATES[0], "src"), (CRATES[1], "actors/src")] {
        let newest = newest_source(&repo().join(sources));
        let all = doc_dir().join(krate).join("all.html");
        let built = std::fs::metadata(&all)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/public_api.sh", all.display()));
        assert!(
            built >= newest,
            "{} is older than {sources}/: run scripts/public_api.sh",
            all.display()
        );
    }
    let mut lines = Vec::new();
    for krate in CRATES {
        for (page, path) in items(krate) {
            lines.extend(item_lines(krate, &page, &path));
        }
    }
    // The listing's shape: a declaration, an inherent method, a trait implementation.
    for expected in [
        "object_store_wal_actors::WalMsg: #[non_exhaustive]pub enum WalMsg {",
        "object_store_wal_actors::WalHandle: impl Clone for WalHandle",
        "object_store_wal::ObjectStoreLogStore: pub async fn open(",
    ] {
        assert!(
            lines.iter().any(|l| l.text.starts_with(expected)),
            "the listing lost {expected:?}: rustdoc's layout changed"
        );
    }

    // Every type either crate declares (the writer's, supervisor's and readers' state,
    // the core's hidden steps), less the names of public items. (rustdoc's links would
    // tell a hidden type from a public one of the same name, but it links a re-export
    // of a hidden module's item to that module's page, or not at all, depending on the
    // order it documents the crates in: names it is.)
    let public_names: BTreeSet<String> = lines.iter().map(|l| l.name.clone()).collect();
    let mut names = declared(&repo().join("src"));
    names.extend(declared(&repo().join("actors/src")));
    let names: BTreeSet<String> = names.difference(&public_names).cloned().collect();
    assert!(
        names.contains("WriterActor") && names.len() > 20,
        "the declared names were not found: {names:?}"
    );
    let leaks: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let text = without_strings(&l.text);
            let names: Vec<&str> = std::iter::once("internal")
                .chain(names.iter().map(|n| n.as_str()))
                .filter(|n| holds_type(&text, n))
                .collect();
            (!names.is_empty()).then(|| format!("{names:?} in {}", l.text))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "types that are not public in the public API:\n{}",
        leaks.join("\n")
    );

    // The reviewed listing, when made by the same rustdoc (its layout changes between
    // versions), or always under PUBLIC_API_STRICT.
    let version = rustdoc_version();
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    let listing = format!("# {version}\n{}\n", texts.join("\n"));
    println!("{listing}");
    let reviewed_path = repo().join("docs/public-api.txt");
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&reviewed_path, &listing).expect("write docs/public-api.txt");
        return;
    }
    let reviewed = std::fs::read_to_string(&reviewed_path).unwrap_or_default();
    if reviewed.lines().next() != listing.lines().next() {
        assert!(
            !strict(),
            "docs/public-api.txt was made by {:?}, these docs by {version}: rewrite it \
             with UPDATE_PUBLIC_API=1 scripts/public_api.sh and review the difference",
            reviewed.lines().next()
        );
        eprintln!(
            "note: docs/public-api.txt was made by another rustdoc ({:?}); not compared",
            reviewed.lines().next()
        );
        return;
    }
    let (old, new): (BTreeSet<&str>, BTreeSet<&str>) =
        (reviewed.lines().collect(), listing.lines().collect());
    let gone: Vec<&&str> = old.difference(&new).collect();
    let added: Vec<&&str> = new.difference(&old).collect();
    assert!(
        gone.is_empty() && added.is_empty(),
        "the public API changed; review it and run scripts/public_api.sh with \
         UPDATE_PUBLIC_API=1\ngone:\n{gone:#?}\nadded:\n{added:#?}"
    );
}

/// The rustdoc that wrote the docs, from the `data-rustdoc-version` of a page.
fn rustdoc_version() -> String {
    let page = doc_dir().join(CRATES[0]).join("all.html");
    let html = std::fs::read_to_string(page).unwrap_or_default();
    spans(&html, "data-rustdoc-version=\"", "\"")
        .first()
        .map(|v| format!("rustdoc {v}"))
        .unwrap_or_else(|| "rustdoc unknown".to_string())
}

/// The examples are what a user copies: they reach the crates through the public API
/// alone (the hidden `internal` module and `_io` constructors are for tests).
#[test]
fn the_examples_use_only_the_public_api() {
    let dir = repo().join("examples");
    let mut checked = 0;
    let mut stack = vec![dir];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("examples/") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("an example");
            for hidden in ["internal::", "_io(", ".io()", ".catalog()"] {
                assert!(
                    !source.contains(hidden),
                    "{} uses {hidden:?}, which is not public API",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "the examples were not found");
}
