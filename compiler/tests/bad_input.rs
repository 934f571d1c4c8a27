//! The bad-input corpus: every file `compiler/tests/bad/<case>.kdl` is a broken `fwc.kdl`
//! (cases named `<case>.<n>.kdl` with n > 0 are put under rules/ next to `<case>.kdl`, and
//! `<case>.kdl.j2` files become templates). Its first lines say what must be reported:
//!
//! ```text
//! // expect: <line>:<column> <code> <message substring>
//! ```
//!
//! one line per expected error (all of them, in order), optionally followed by
//! `// hint: <substring>` lines, the n-th of which must be in the n-th error's hint;
//! `<file>:<line>:<column>` when the
//! error is in another file than fwc.kdl (set files: `<case>.lists.<name>` becomes
//! `lists/<name>`). The test asserts the exact code,
//! position and message, that a rule name and a hint are present when the file says
//! `// rule: …` / always for errors, and that nothing compiles.

use std::path::{Path, PathBuf};

use fwc_compiler::read::source::SourceTree;

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kdl") && !p.file_stem().unwrap().to_string_lossy().contains('.'))
        .collect();
    files.sort();
    files
}

/// The tree of a case: the main file as fwc.kdl plus its companions under rules/.
fn tree_of(case: &Path) -> SourceTree {
    let stem = case.file_stem().unwrap().to_string_lossy().to_string();
    let mut files = vec![("fwc.kdl".to_string(), std::fs::read_to_string(case).unwrap())];
    for e in std::fs::read_dir(case.parent().unwrap()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if let Some(rest) = name.strip_prefix(&format!("{stem}.")) {
            if let Some(list) = rest.strip_prefix("lists.") {
                // `<case>.lists.<name>`: a set file, lists/<name>.
                files.push((format!("lists/{list}"), std::fs::read_to_string(&p).unwrap()));
            } else if rest != "kdl" {
                files.push((format!("rules/{rest}"), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    SourceTree::from_files(files)
}

#[derive(Debug)]
struct Expect {
    file: Option<String>,
    line: usize,
    column: usize,
    code: String,
    message: String,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("// expect:"))
        .map(|e| {
            let mut parts = e.trim().splitn(3, ' ');
            let pos = parts.next().unwrap();
            let (file, pos) = match pos.matches(':').count() {
                2 => pos.split_once(':').map(|(f, p)| (Some(f.to_string()), p)).unwrap(),
                _ => (None, pos),
            };
            let (line, column) = pos.split_once(':').expect("expect: [FILE:]LINE:COL code message");
            Expect {
                file,
                line: line.parse().unwrap(),
                column: column.parse().unwrap(),
                code: parts.next().unwrap().to_string(),
                message: parts.next().unwrap_or("").to_string(),
            }
        })
        .collect()
}

#[test]
fn bad_input_corpus() {
    let cases = corpus();
    assert!(cases.len() >= 30, "expected at least 30 bad-input files, found {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(case).unwrap();
        let want = expectations(&text);
        let hints: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("// hint:")).map(str::trim).collect();
        assert!(!want.is_empty(), "{name} has no `// expect:` line");
        let tree = tree_of(case);
        let diags = match fwc_compiler::check_all(&tree) {
            Ok(w) if w.has_errors() => w,
            Ok(w) => {
                // Warnings-only cases: compare the warnings.
                if want.iter().all(|e| w.0.iter().any(|d| d.code == format!("fwc::{}", e.code))) {
                    w
                } else {
                    failures.push(format!("{name}: compiled without errors; warnings: {w}"));
                    continue;
                }
            }
            Err(d) => d,
        };
        let got: Vec<String> = diags
            .0
            .iter()
            .map(|d| {
                let l = d.location.as_ref();
                format!("{}:{} {} {}", l.map_or(0, |l| l.line), l.map_or(0, |l| l.column), d.code.trim_start_matches("fwc::"), d.message)
            })
            .collect();
        if got.len() != want.len() {
            failures.push(format!("{name}: expected {} diagnostic(s), got {}:\n  {}", want.len(), got.len(), got.join("\n  ")));
            continue;
        }
        for (d, e) in diags.0.iter().zip(&want) {
            let l = d.location.as_ref().expect("every diagnostic has a location");
            let file_ok = e.file.as_deref().is_none_or(|f| l.file == f);
            let ok = file_ok && l.line == e.line && l.column == e.column && d.code == format!("fwc::{}", e.code) && d.message.contains(&e.message);
            if !ok {
                failures.push(format!("{name}: expected {}:{} {} \"{}\", got {}:{} {} \"{}\"", e.line, e.column, e.code, e.message, l.line, l.column, d.code, d.message));
            }
            if d.help.is_none() {
                failures.push(format!("{name}: {} has no hint", d.code));
            }
        }
        for (d, want_hint) in diags.0.iter().zip(&hints) {
            let help = d.help.as_deref().unwrap_or("");
            if !help.contains(want_hint) {
                failures.push(format!("{name}: hint \"{help}\" does not contain \"{want_hint}\""));
            }
        }
        for d in diags.0.iter() {
            if d.is_error() && d.code != "fwc::kdl-syntax" && d.code != "fwc::missing-version" && d.rule.is_none() && !matches!(d.code.as_str(), "fwc::unknown-node" | "fwc::missing-name" | "fwc::bad-name" | "fwc::template" | "fwc::host-in-template" | "fwc::unsupported-version" | "fwc::bad-version") {
                failures.push(format!("{name}: {} does not name the rule", d.code));
            }
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}
