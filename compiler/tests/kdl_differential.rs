//! fwc's KDL reader against the `kdl` crate over every KDL file the project ships (golden/,
//! examples/, the fuzz corpus, bad-input, format and policy cases): the same accept/refuse
//! decision, and for accepted files the same nodes, names, arguments, properties, type
//! annotations and spans.

use std::path::{Path, PathBuf};

mod kdl_compare;

use fwc_compiler::read::kdl_reader;
use kdl::KdlDocument;
use kdl_compare::compare;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "kdl") || p.parent().is_some_and(|d| d.ends_with("fuzz-corpus")) {
            out.push(p);
        }
    }
}

#[test]
fn reader_agrees_with_the_kdl_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths = Vec::new();
    for dir in ["golden", "examples", "compiler/tests/fuzz-corpus", "compiler/tests/bad", "compiler/tests/format", "compiler/tests/policy"] {
        files(&root.join(dir), &mut paths);
    }
    assert!(paths.len() > 150, "expected the project's KDL files, found {}", paths.len());
    let (mut read, mut refused, mut skipped) = (0, 0, 0);
    let mut diffs = Vec::new();
    for p in &paths {
        let name = p.strip_prefix(&root).unwrap().display().to_string();
        let Ok(text) = String::from_utf8(std::fs::read(p).unwrap()) else {
            skipped += 1;
            continue;
        };
        if fwc_compiler::read::limits::check_kdl_text(&text).is_err() {
            skipped += 1;
            continue;
        }
        let (k, r) = fwc_compiler::read::limits::on_big_stack(|| (KdlDocument::parse_v2(&text), kdl_reader::read(&text)));
        match (k, r) {
            (Ok(k), Ok(r)) => {
                read += 1;
                compare(&k, &r, &name, &mut diffs);
            }
            (Err(_), Err(_)) => refused += 1,
            (Ok(_), Err(e)) => diffs.push(format!("{name}: kdl accepts, fwc refuses: {e}")),
            (Err(e), Ok(_)) => diffs.push(format!("{name}: kdl refuses ({:?}), fwc accepts", e.diagnostics.first().and_then(|d| d.message.clone()))),
        }
    }
    println!("{} files: {read} read alike, {refused} refused by both, {skipped} not KDL text or past a limit", paths.len());
    assert!(diffs.is_empty(), "{} differences:\n{}", diffs.len(), diffs.join("\n"));
}

/// Small edits of every corpus file (a character removed, or a KDL-significant token inserted)
/// read by both: where both accept, the documents and spans are the same; where they decide
/// differently, the case is listed (the kdl crate and the KDL v2 specification disagree on a
/// few inputs; see docs/performance.md, "fwc's KDL reader").
#[test]
fn edited_corpus_files_read_alike() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths = Vec::new();
    for dir in ["golden", "examples", "compiler/tests/bad", "compiler/tests/policy"] {
        files(&root.join(dir), &mut paths);
    }
    const TOKENS: &[&str] = &["\"", "{", "}", ";", "/-", "\\", "=", "#", "(t)", " ", "\n", "/*", "*/", "//", "#true", "0x1F", "-", ".", "1.5e3", "#\"", "\"\"\"\n", "\t"];
    let mut rng = fastrand::Rng::with_seed(13);
    let (mut alike, mut refused) = (0, 0);
    let mut decisions = Vec::new();
    let mut diffs = Vec::new();
    for p in &paths {
        let Ok(text) = std::fs::read_to_string(p) else { continue };
        if text.is_empty() {
            continue;
        }
        for _ in 0..20 {
            let mut at = rng.usize(..text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let mut m = text.clone();
            if rng.bool() {
                let n = m[at..].chars().next().map_or(0, char::len_utf8);
                m.replace_range(at..at + n, "");
            } else {
                m.insert_str(at, TOKENS[rng.usize(..TOKENS.len())]);
            }
            if fwc_compiler::read::limits::check_kdl_text(&m).is_err() {
                continue;
            }
            let (k, r) = fwc_compiler::read::limits::on_big_stack(|| (KdlDocument::parse_v2(&m), kdl_reader::read(&m)));
            match (k, r) {
                (Ok(k), Ok(r)) => {
                    alike += 1;
                    let mut d = Vec::new();
                    compare(&k, &r, "", &mut d);
                    if !d.is_empty() {
                        diffs.push(format!("{m:?}:\n  {}", d.join("\n  ")));
                    }
                }
                (Err(_), Err(_)) => refused += 1,
                (Ok(_), Err(e)) => decisions.push(format!("kdl accepts, fwc refuses ({e}): {m:?}")),
                (Err(_), Ok(_)) => decisions.push(format!("kdl refuses, fwc accepts: {m:?}")),
            }
        }
    }
    println!("edited files: {alike} read alike, {refused} refused by both, {} decided differently", decisions.len());
    for d in &decisions {
        println!("{d}");
    }
    assert!(diffs.is_empty(), "{} edited files read differently:\n{}", diffs.len(), diffs.join("\n"));
}
