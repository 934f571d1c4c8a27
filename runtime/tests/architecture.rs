//! Dependency rules of the runtime (docs/architecture.md "Inside the runtime"): the engine is
//! the library; the CLI only parses arguments, calls it and renders.
//! - nothing outside `cli/` (engine, agent, backends, state) uses `crate::cli`;
//! - integration tests do not import `fwc_runtime::cli::apply`;
//! - `cli/apply.rs` defines no public type other than clap argument structs.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

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
