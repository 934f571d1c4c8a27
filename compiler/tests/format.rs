//! `fwc fmt` loses nothing: every example, every golden input repository and the comment corpus
//! (tests/format/repo, a comment in every place KDL allows one) are formatted already; with
//! their whitespace scrambled they format back to exactly themselves (comments, slashdashes,
//! blank lines and quoting included), and the scrambled and formatted repositories compile to
//! the same artifacts for every host.

use std::path::{Path, PathBuf};

use fwc_compiler::format::format_kdl;
use fwc_compiler::read::source::{SourceMap, SourceTree};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every rule repository shipped: examples/*, golden/* (and their before/), the corpus.
fn repositories() -> Vec<PathBuf> {
    let mut repos = Vec::new();
    for under in ["examples", "golden"] {
        for entry in std::fs::read_dir(root().join(under)).unwrap() {
            let dir = entry.unwrap().path();
            for candidate in [dir.clone(), dir.join("before")] {
                if candidate.join("fwc.kdl").is_file() {
                    repos.push(candidate);
                }
            }
        }
    }
    repos.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/format/repo"));
    repos.sort();
    repos
}

/// This fixture is the old side of a plan whose point is that only comments and formatting
/// changed: it stays unformatted on purpose (and formatting it must not change its plan).
const DELIBERATELY_UNFORMATTED: &str = "golden/19-plan-unchanged/before/fwc.kdl";

fn kdl_files(tree: &SourceTree) -> impl Iterator<Item = (&String, &String)> {
    tree.files.iter().chain(&tree.tests).filter(|(p, _)| !p.ends_with(".j2"))
}

fn label(repo: &Path, file: &str) -> String {
    let rel = repo.strip_prefix(root()).unwrap_or(repo);
    format!("{}/{file}", rel.display()).replace("../", "").trim_start_matches("compiler/").to_string()
}

#[test]
fn every_shipped_rule_file_is_formatted() {
    let mut unformatted = Vec::new();
    let mut seen = 0;
    for repo in repositories() {
        let tree = SourceTree::from_dir(&repo).unwrap_or_else(|d| panic!("{}: {d}", repo.display()));
        for (path, text) in kdl_files(&tree) {
            seen += 1;
            let name = label(&repo, path);
            let out = format_kdl(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(format_kdl(&out).as_ref(), Ok(&out), "{name}: formatting is not idempotent");
            if out != *text && !name.ends_with(DELIBERATELY_UNFORMATTED) {
                unformatted.push(name);
            }
        }
    }
    assert!(seen >= 45, "examples, golden cases and the corpus: only {seen} files found");
    assert!(unformatted.is_empty(), "not formatted (run `fwc fmt` on them): {unformatted:#?}");
}

#[test]
fn the_deliberately_unformatted_fixture_still_is_and_formatting_it_keeps_its_plan() {
    let repo = root().join("golden/19-plan-unchanged/before");
    let tree = SourceTree::from_dir(&repo).unwrap();
    let formatted = format_tree(&tree);
    assert_ne!(formatted, tree, "{DELIBERATELY_UNFORMATTED} must stay unformatted: golden case 19 is about formatting-only changes");
    assert_eq!(artifacts(&formatted), artifacts(&tree));
}

/// Scramble the whitespace of every line a formatter may re-indent (not those inside a
/// multi-line string or block comment): other indentation, trailing blanks, doubled blank lines.
fn scramble(text: &str) -> String {
    let mut out = String::new();
    let (mut in_string, mut comment_depth) = (false, 0usize);
    for (i, line) in text.lines().enumerate() {
        let verbatim = in_string || comment_depth > 0;
        if verbatim {
            out.push_str(line);
        } else if line.trim().is_empty() {
            out.push_str("  \n\t");
        } else {
            out.push_str(["", "\t", "   ", " \t  ", "          "][i % 5]);
            out.push_str(line.trim_start());
            if !line.contains("\"\"\"") {
                // (a multi-line string's opening quotes must end their line)
                out.push_str(["", "  ", "\t", " "][i % 4]);
            }
        }
        // CRLF line ends, except inside a multi-line string (its text, kept as written).
        out.push_str(if i % 3 == 0 && !in_string && !line.contains("\"\"\"") { "\r\n" } else { "\n" });
        in_string ^= line.matches("\"\"\"").count() % 2 == 1;
        comment_depth = (comment_depth + line.matches("/*").count()).saturating_sub(line.matches("*/").count());
    }
    out
}

fn format_tree(tree: &SourceTree) -> SourceTree {
    let mut out = tree.clone();
    for (path, text) in out.files.iter_mut().chain(out.tests.iter_mut()).filter(|(p, _)| !p.ends_with(".j2")) {
        *text = format_kdl(text).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    out
}

/// Every host's artifacts, as JSON (without the rules' source positions), and the policy tests as parsed (names and expectations).
fn artifacts(tree: &SourceTree) -> Vec<String> {
    let mut map = SourceMap::default();
    let rs = fwc_compiler::read::syntax::parse_plain(tree, &mut map).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let mut out = Vec::new();
    for host in fwc_compiler::host_names(&rs) {
        let (mut art, _) = fwc_compiler::compile(tree, Some(&host), None).unwrap_or_else(|d| panic!("{host}: {}", d.render(false)));
        // Where each rule is written (file:line:column) moves with the whitespace; what it compiles to must not.
        for r in &mut art.manifest.rules {
            r.source = None;
        }
        out.push(format!(
            "{host}\n{}\n{}\n{}\n{}",
            fwc_compiler::artifacts::to_pretty(&art.nftables),
            fwc_compiler::artifacts::to_pretty(&art.qos),
            fwc_compiler::artifacts::to_pretty(&art.forward),
            fwc_compiler::artifacts::to_pretty(&without_positions(serde_json::to_value(&art.manifest).unwrap())),
        ));
    }
    let mut map = SourceMap::default();
    let tests = fwc_compiler::policytest::parse(tree, &mut map).unwrap_or_else(|d| panic!("{}", d.render(false)));
    out.push(tests.iter().map(|t| format!("{}|{:?}|{:?}|{:?}|{:?}", t.name, t.host, t.flow, t.expect, t.rule)).collect::<Vec<_>>().join("\n"));
    out
}

/// The manifest names each rule's `source` file:line:column; scrambled indentation moves it.
fn without_positions(mut v: serde_json::Value) -> serde_json::Value {
    match &mut v {
        serde_json::Value::Object(map) => {
            map.remove("source");
            for x in map.values_mut() {
                *x = without_positions(x.take());
            }
        }
        serde_json::Value::Array(items) => {
            for x in items {
                *x = without_positions(x.take());
            }
        }
        _ => {}
    }
    v
}

#[test]
fn scrambled_whitespace_formats_back_to_the_original_and_means_the_same() {
    for repo in repositories() {
        let tree = SourceTree::from_dir(&repo).unwrap();
        let mut scrambled = tree.clone();
        for (_, text) in scrambled.files.iter_mut().chain(scrambled.tests.iter_mut()).filter(|(p, _)| !p.ends_with(".j2")) {
            *text = scramble(text);
        }
        let formatted = format_tree(&scrambled);
        for (path, text) in kdl_files(&tree) {
            let name = label(&repo, path);
            if name.ends_with(DELIBERATELY_UNFORMATTED) {
                continue;
            }
            let got = formatted.files.get(path).or_else(|| formatted.tests.get(path)).unwrap();
            assert_eq!(got, text, "{name}: scrambled and formatted again, it must be the original (comments, blank lines, quoting)");
        }
        assert_eq!(artifacts(&formatted), artifacts(&scrambled), "{}: formatting changed what the rules compile to", repo.display());
        assert_eq!(artifacts(&formatted), artifacts(&tree), "{}", repo.display());
    }
}

#[test]
fn the_corpus_has_a_comment_in_every_position() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/format/repo/fwc.kdl")).unwrap();
    for (what, needle) in [
        ("block comment before the first node", "/* A block comment before"),
        ("end-of-line comment after an argument", "fwc 1 // "),
        ("multi-line block comment", "over several lines,"),
        ("comment after an opening brace", "{ // after an opening brace"),
        ("comment before the first child", "    // before the first child"),
        ("comment between entries", "/* between entries */"),
        ("slashdashed child node", "    /- vars old=1"),
        ("comment after the last child", "    // after the last child"),
        ("comment after a closing brace", "} // after a closing brace"),
        ("slashdashed node with children", "/-host \"retired\" {"),
        ("slashdashed argument", "/- \"198.51.100.0/24\""),
        ("slashdashed set element", "/- - \"198.51.100.8\""),
        ("slashdashed children block", "/-{"),
        ("slashdashed property", "/-log=#false"),
        ("comment after a line continuation", "\\ // a comment after a line continuation"),
        ("raw string with quotes", "#\"raw \"quoted\" string\"#"),
        ("blank line inside a block", "\n\n    // a blank line above this group"),
        ("two nodes on a line", "; allow \"ping\""),
        ("comment as the last line", "// The last line of the file is a comment.\n"),
    ] {
        assert!(text.contains(needle), "the corpus lacks a {what} ({needle:?})");
    }
    let strings = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/format/repo/rules/10-strings.kdl")).unwrap();
    assert!(strings.contains("comment=\"\"\"") && strings.contains("comment=#\"\"\""), "multi-line strings, plain and raw");
}
