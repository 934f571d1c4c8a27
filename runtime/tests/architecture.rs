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
