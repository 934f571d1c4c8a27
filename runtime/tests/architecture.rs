//! The house rules (docs/architecture.md "Rules that hold"), checked from `cargo metadata` and
//! the sources:
//! - nothing outside `cli/` (engine, agent, backends, state) uses `crate::cli`;
//! - integration tests do not import `fwc_runtime::cli::apply`;
//! - `cli/apply.rs` defines no public type other than clap argument structs;
//! - the crate dependency rules (the compiler is pure, the dataplanes never depend on it, the
//!   contract crate stays small);
//! - no import cycles between files of one crate, but for the named ones of `KNOWN_CYCLES`,
//!   a list that only shrinks;
//! - the runtime's lower layers (engine, state, backends, metrics, …) never import the agent,
//!   the rollout or the CLI (`LAYERS`);
//! - decision modules are pure (`PURE`), and so is the compiler but for reading rule files;
//! - comments name concepts, never issue numbers;
//! - docs/architecture.md names every module of every crate.

use std::path::{Path, PathBuf};

use modgraph::rust_files;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn library_modules_do_not_use_the_cli() {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let mut bad = vec![];
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("cli") || rel == Path::new("main.rs") || rel == Path::new("lib.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.contains("crate::cli") || line.contains("super::cli") {
                bad.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(bad.is_empty(), "library modules must not depend on the CLI:\n{}", bad.join("\n"));
}

#[test]
fn tests_call_the_engine_not_the_cli() {
    let mut files = vec![];
    rust_files(&root().join("tests"), &mut files);
    let needle = ["fwc_runtime::cli::", "apply::"].concat();
    let bad: Vec<_> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains(&needle))
        .map(|f| f.display().to_string())
        .collect();
    assert!(bad.is_empty(), "tests import the CLI's apply module instead of fwc_runtime::engine: {bad:?}");
}

#[test]
fn cli_apply_defines_only_argument_types() {
    let text = std::fs::read_to_string(root().join("src/cli/apply.rs")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut bad = vec![];
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("pub struct") || line.starts_with("pub enum") {
            // the nearest derive above the item must be clap's
            let derive = lines[..i].iter().rev().take(4).find(|l| l.starts_with("#[derive("));
            if !derive.is_some_and(|d| d.contains("clap::Args")) {
                bad.push(format!("cli/apply.rs:{}: {line}", i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "cli/apply.rs may only define clap argument types publicly:\n{}", bad.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Crate dependency rules (docs/architecture.md "Rules that hold"), from `cargo metadata`.

/// Names of every package `root` depends on (its own dev-dependencies included, as in
/// `cargo tree -p root`; only normal and build dependencies further down).
fn dependency_closure(metadata: &serde_json::Value, root: &str) -> std::collections::BTreeSet<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> =
        metadata["resolve"]["nodes"].as_array().unwrap().iter().map(|n| (n["id"].as_str().unwrap(), n)).collect();
    let root_id = names.iter().find(|(_, n)| **n == root).map(|(id, _)| *id).unwrap_or_else(|| panic!("no package {root}"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![(root_id, true)];
    while let Some((id, is_root)) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let kinds = dep["dep_kinds"].as_array().unwrap();
            let counts = kinds.iter().any(|k| is_root || k["kind"].is_null() || k["kind"] == "build");
            let dep_id = dep["pkg"].as_str().unwrap();
            if counts && seen.insert(names[dep_id].to_string()) {
                todo.push((dep_id, false));
            }
        }
    }
    seen
}

fn workspace_metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        // Only this platform's dependencies (the others are not downloaded).
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform"])
        .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .arg("--manifest-path")
        .arg(root().join("../Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn crate_dependency_rules_hold() {
    let md = workspace_metadata();
    let heavy = ["fwc-compiler", "kdl", "minijinja", "miette", "nftables"];
    let mut bad = vec![];
    // The dataplanes read artifacts; they never pull in the compiler or its parsers.
    for krate in ["fwc-forwarder", "fwc-qos"] {
        let deps = dependency_closure(&md, krate);
        assert!(deps.contains("fwc-artifacts"), "{krate} should depend on fwc-artifacts");
        bad.extend(heavy.iter().filter(|h| deps.contains(**h)).map(|h| format!("{krate} depends on {h}")));
    }
    // The contract crate stays small: no fwc crate, no parser, no runtime machinery.
    let deps = dependency_closure(&md, "fwc-artifacts");
    for h in heavy.iter().chain(&["fwc-runtime", "fwc-forwarder", "fwc-qos", "tokio", "aya", "git2", "rustix"]) {
        if deps.contains(*h) {
            bad.push(format!("fwc-artifacts depends on {h}"));
        }
    }
    // The compiler is pure: no async runtime, no kernel, network or git access.
    let deps = dependency_closure(&md, "fwc-compiler");
    for h in ["fwc-runtime", "fwc-forwarder", "fwc-qos", "tokio", "aya", "git2", "hyper"] {
        if deps.contains(h) {
            bad.push(format!("fwc-compiler depends on {h}"));
        }
    }
    assert!(bad.is_empty(), "dependency rules broken:\n{}", bad.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// File rules (docs/architecture.md "Rules that hold"), from the sources.

#[path = "architecture/modgraph.rs"]
mod modgraph;

/// The crates whose files are checked for import cycles, by their directory in the workspace.
const CRATES: &[&str] = &["artifacts", "compiler", "runtime", "forwarder", "ebpf", "testkit", "bench"];

/// Import cycles that exist today, each named by the knot it is. This list only shrinks: a
/// new cycle fails the test, and so does an entry that no longer matches (a cycle untied, or
/// one that grew), so that the list is edited with the code.
const KNOWN_CYCLES: &[(&str, &[&str], &str)] = &[];

#[test]
fn no_import_cycles_between_files_of_one_crate() {
    let ws = root().join("..");
    let mut problems = vec![];
    let mut seen = vec![];
    for krate in CRATES {
        let graph = modgraph::Graph::read(&ws.join(krate).join("src"));
        for cycle in graph.cycles() {
            let known = KNOWN_CYCLES.iter().find(|(k, files, _)| k == krate && files.iter().copied().eq(cycle.iter().map(String::as_str)));
            match known {
                Some((_, _, name)) => seen.push(*name),
                None => problems.push(format!(
                    "{krate}: import cycle between {}:\n    {}",
                    cycle.join(", "),
                    graph.explain(&cycle).join("\n    ")
                )),
            }
        }
    }
    for (krate, files, name) in KNOWN_CYCLES {
        if !seen.contains(name) {
            problems.push(format!("{krate}: the known cycle \"{name}\" ({}) is gone or changed: remove or update its entry in KNOWN_CYCLES", files.join(", ")));
        }
    }
    assert!(problems.is_empty(), "files of one crate must not import each other, directly or in a loop (cut one edge: move the shared type down, or pass it in):\n{}", problems.join("\n"));
}

/// Layers of the runtime, by the top-level module a file belongs to: the agent and the rollout
/// (and the CLI) drive the engine, the state dir, the backends and the metrics; nothing below
/// reaches up into them. A type both sides need lives below (`state::agent_journal`,
/// `metrics::replay`), or the caller passes the value down (`Metrics::set_held` takes the
/// reason's name).
const LAYERS: &[(&str, &[&str], &[&str])] = &[(
    "runtime",
    &["audit", "backend", "detached", "engine", "http", "import", "kernel_eval", "metrics", "quota", "repo", "state"],
    &["agent", "rollout", "cli"],
)];

#[test]
fn lower_layers_do_not_import_upper_ones() {
    let ws = root().join("..");
    let mut bad = vec![];
    for (krate, lower, upper) in LAYERS {
        let graph = modgraph::Graph::read(&ws.join(krate).join("src"));
        let top = |f: &str| f.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        for (a, edges) in graph.edges.iter().enumerate() {
            if !lower.contains(&top(&graph.files[a]).as_str()) {
                continue;
            }
            for (b, at) in edges {
                if upper.contains(&top(&graph.files[*b]).as_str()) {
                    bad.push(format!("{krate}: {} -> {} ({at})", graph.files[a], graph.files[*b]));
                }
            }
        }
    }
    assert!(bad.is_empty(), "a lower layer imports an upper one (move the shared item down, or pass the value in):\n{}", bad.join("\n"));
}

/// Decision modules: the pure cores that decide, with table tests; the I/O around them lives
/// in other files. They name no git, filesystem, process, socket or async crate, read no
/// clock (`now` is an input), and record no metric or audit entry.
const PURE: &[(&str, &[&str])] = &[
    (
        "runtime",
        &[
            "agent/decide.rs",
            "rollout/controller.rs",
            "rollout/rewind.rs",
            "rollout/trust.rs",
            "rollout/follow.rs",
            "rollout/textfile.rs",
            "rollout/window.rs",
            "quota/decide.rs",
            "backend/nft/diff.rs",
            "backend/nft/lazy.rs",
            "backend/published.rs",
            "import/naming.rs",
            "import/words.rs",
            "import/model.rs",
            "import/translate/mod.rs",
            "import/translate/chains.rs",
            "import/translate/tx.rs",
            "import/translate/nat.rs",
            "import/translate/other.rs",
            "import/translate/owned.rs",
            "import/translate/parse.rs",
            "import/translate/probes.rs",
            "import/translate/walk.rs",
            "import/render.rs",
            "import/firewalld.rs",
            "import/firewalld/rich.rs",
            "import/firewalld/services.rs",
        ],
    ),
];

/// What a pure file may not name: token sequences of its code (comments and strings left out).
const IMPURE: &[&[&str]] = &[
    &["git2"],
    &["tokio"],
    &["hyper"],
    &["std", "::", "fs"],
    &["std", "::", "process"],
    &["TcpStream"],
    &["TcpListener"],
    &["UdpSocket"],
    &["ToSocketAddrs"],
    &["Command", "::", "new"],
    &["::", "now"],
    &["metrics", "::"],
    &["audit", "::"],
];

fn impure_uses(tokens: &[String]) -> Vec<String> {
    let mut found = vec![];
    for bad in IMPURE {
        if tokens.windows(bad.len()).any(|w| w.iter().map(String::as_str).eq(bad.iter().copied())) {
            found.push(bad.concat());
        }
    }
    found
}

#[test]
fn decision_modules_are_pure() {
    let ws = root().join("..");
    let mut bad = vec![];
    for (krate, files) in PURE {
        let graph = modgraph::Graph::read(&ws.join(krate).join("src"));
        for f in *files {
            let i = graph.files.iter().position(|g| g == f).unwrap_or_else(|| panic!("{krate}/src/{f} is listed as a decision module but does not exist"));
            let found = impure_uses(&graph.tokens[i]);
            if !found.is_empty() {
                bad.push(format!("{krate}/src/{f}: {}", found.join(", ")));
            }
        }
    }
    // The compiler as a whole: its one reader of files is read/source.rs; it never reads the clock.
    let graph = modgraph::Graph::read(&ws.join("compiler/src"));
    for (f, tokens) in graph.files.iter().zip(&graph.tokens) {
        let found: Vec<String> = impure_uses(tokens).into_iter().filter(|u| !(f == "read/source.rs" && u == "std::fs")).collect();
        if !found.is_empty() {
            bad.push(format!("compiler/src/{f}: {}", found.join(", ")));
        }
    }
    assert!(bad.is_empty(), "decision modules must be pure (take the I/O's result as an argument, do the I/O in the caller):\n{}", bad.join("\n"));
}

/// Does this comment name an issue of fwc's tracker by its number: the word followed by a
/// number, with or without `#` ("issue NN", "Issue #NN", "issues NN"); a `#` and a number in
/// parentheses ("(#NN)"); a bare `#` with one to three digits ("see #NN", "#NN item 5")?
/// fwc's issues are numbered below 1000; an upstream project's issue is named with its
/// project and full number ("crowdsec #4517") and is a reference, not a stand-in for a concept.
/// (The table test below spells real cases; they are string literals, not comments.)
fn names_an_issue(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    let b = lower.as_bytes();
    let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let word = lower.match_indices("issue").any(|(i, _)| {
        let rest = lower[i + 5..].trim_start_matches('s').trim_start_matches(' ').trim_start_matches('#');
        (i == 0 || !b[i - 1].is_ascii_alphanumeric()) && digits(rest) > 0
    });
    let hash = lower.match_indices('#').any(|(i, _)| {
        let rest = &lower[i + 1..];
        let d = digits(rest);
        let ends = !rest[d..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        match i.checked_sub(1).map(|p| b[p]) {
            Some(b'(') => d > 0,
            None | Some(b' ' | b'\t') => (1..=3).contains(&d) && ends,
            _ => false,
        }
    });
    word || hash
}

/// Where a line's comment starts: the first `//` outside a string literal (an even number of
/// unescaped quotes before it).
fn comment_start(line: &str) -> Option<usize> {
    let quotes_before = |i: usize| line[..i].replace("\\\\", "").replace("\\\"", "").matches('"').count();
    line.match_indices("//").map(|(i, _)| i).find(|&i| quotes_before(i) % 2 == 0)
}

#[test]
fn names_an_issue_is_precise() {
    for yes in ["// Schedules (issue #26): wake", "/// Issue 23: a commit", "// issue27 layout", "// Fail closed (#12): a", "// see #31.", "// #27 item 5", "//! the fix of issues 24"] {
        assert!(names_an_issue(yes), "{yes}");
    }
    for no in ["// crowdsec #4517: a set", "// tissue 3", "// `#[cfg(test)]`", "// the issue is the lock", "// color #fff", "// x#1"] {
        assert!(!names_an_issue(no), "{no}");
    }
    assert_eq!(comment_start(r#"let s = "// not a comment"; // a comment"#), Some(28));
    assert_eq!(comment_start(r#"f(["// a", "// b"]);"#), None);
}

/// Every Rust file of the workspace's crates: sources, tests (helpers included), benches,
/// examples and build scripts. Third-party programs the benches build (`bench/*/peers/`) and
/// recorded results are not fwc's code.
fn workspace_rust_files() -> Vec<PathBuf> {
    let ws = root().join("..");
    let mut files = vec![];
    for krate in CRATES {
        for dir in ["src", "tests", "benches", "examples"] {
            if ws.join(krate).join(dir).is_dir() {
                rust_files(&ws.join(krate).join(dir), &mut files);
            }
        }
        if ws.join(krate).join("build.rs").is_file() {
            files.push(ws.join(krate).join("build.rs"));
        }
    }
    files
}

#[test]
fn comments_name_concepts_not_issue_numbers() {
    let ws = root().join("..");
    let mut found = vec![];
    for f in workspace_rust_files() {
        let rel = f.strip_prefix(&ws).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if comment_start(line).is_some_and(|i| names_an_issue(&line[i..])) {
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "comments name the concept they explain, not an issue number (docs/ and bench/results journals keep the history):\n{}", found.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// docs/architecture.md names every module.

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs` (one level of braces; anything else as it is).
fn expand_braces(s: &str) -> Vec<String> {
    match (s.find('{'), s.find('}')) {
        (Some(a), Some(b)) if a < b => s[a + 1..b].split(',').map(|m| format!("{}{}{}", &s[..a], m.trim(), &s[b + 1..])).collect(),
        _ => vec![s.to_string()],
    }
}

/// The paths one table row of "Every module, one line each" names: every backticked path
/// (braces expanded); a bare file name (`read.rs`) after the first cell counts under the folder
/// the first cell names (`syntax/`).
fn row_paths(row: &str) -> Vec<String> {
    let cells: Vec<&str> = row.trim().trim_matches('|').split('|').collect();
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).flat_map(expand_braces).collect() };
    let first = cells.first().map(|c| ticked(c)).unwrap_or_default();
    let folder = first.iter().find(|p| p.ends_with('/')).cloned();
    let mut out = first.clone();
    for cell in cells.iter().skip(1) {
        for p in ticked(cell) {
            match &folder {
                Some(f) if !p.contains('/') && p.ends_with(".rs") => out.push(format!("{f}{p}")),
                _ => out.push(p),
            }
        }
    }
    out
}

#[test]
fn architecture_md_names_every_module() {
    let ws = root().join("..");
    let doc = std::fs::read_to_string(ws.join("docs/architecture.md")).unwrap();
    let start = doc.find("\n## Every module, one line each").expect("docs/architecture.md has \"Every module, one line each\"");
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut missing = vec![];
    for krate in CRATES {
        // The crate's subsection: the `### ` heading that names `<crate>/src/`.
        let head = format!("`{krate}/src/`");
        let sub = section.split("\n### ").find(|s| s.lines().next().is_some_and(|h| h.contains(&head)));
        let Some(sub) = sub else {
            missing.push(format!("{krate}: no \"### … ({head})\" subsection"));
            continue;
        };
        let named: std::collections::BTreeSet<String> = sub.lines().filter(|l| l.starts_with('|')).flat_map(row_paths).collect();
        let src = ws.join(krate).join("src");
        let mut files = vec![];
        rust_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            // A folder's unit tests (`tests.rs`) are the folder's.
            if rel == "tests.rs" || rel.ends_with("/tests.rs") {
                continue;
            }
            let folder = rel.strip_suffix("mod.rs").filter(|d| !d.is_empty());
            if !named.contains(&rel) && !folder.is_some_and(|d| named.contains(d)) {
                missing.push(format!("{krate}/src/{rel}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md \"Every module, one line each\" does not name these (by their path under src/, in a table row of their crate's subsection):\n{}", missing.join("\n"));
}

#[test]
fn module_table_rows_are_read_as_written() {
    assert_eq!(expand_braces("metrics/{exposition, health}.rs"), ["metrics/exposition.rs", "metrics/health.rs"]);
    assert_eq!(row_paths("| `syntax/`, `suggest.rs` | `read.rs` (text), `model/{a,b}.rs` |"), ["syntax/", "suggest.rs", "syntax/read.rs", "model/a.rs", "model/b.rs"]);
}
