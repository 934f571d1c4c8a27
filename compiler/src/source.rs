//! Finding and holding the rule files: `fwc.kdl` at the root and every `*.kdl` / `*.kdl.j2`
//! under `rules/`, in path order, and the set files under `lists/` (`set … file=`). A [`SourceTree`] is read from a directory (the compiler's
//! only I/O) or built in memory (the agent builds it from git objects).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::diag::{Diagnostic, Diagnostics};

/// The root file of a rule repository.
pub const ROOT_FILE: &str = "fwc.kdl";
/// Directory whose `*.kdl` and `*.kdl.j2` files are read too.
pub const RULES_DIR: &str = "rules";
/// Directory of set files (any name), read by `set … file="lists/…"` (see `setfile`).
pub const LISTS_DIR: &str = "lists";
/// Directory of policy test files (`*.kdl`, see [`crate::policytest`]); kept apart from the rules.
pub const TESTS_DIR: &str = "tests";

/// The rule files of a repository: relative path (with `/`) -> contents, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceTree {
    pub files: BTreeMap<String, String>,
    /// Set files: every file under `lists/`, relative path -> contents.
    pub lists: BTreeMap<String, String>,
    /// Policy test files `tests/**/*.kdl`: relative path -> contents. Not rules.
    pub tests: BTreeMap<String, String>,
}

impl SourceTree {
    /// Read `fwc.kdl` and `rules/**/*.kdl{,.j2}` below `dir`.
    pub fn from_dir(dir: &Path) -> Result<SourceTree, Diagnostics> {
        let mut files = BTreeMap::new();
        let root = dir.join(ROOT_FILE);
        match std::fs::read_to_string(&root) {
            Ok(t) => {
                files.insert(ROOT_FILE.to_string(), t);
            }
            Err(e) => {
                return Err(Diagnostics::single(
                    Diagnostic::error("no-root-file", format!("cannot read {}: {e}", root.display()))
                        .help("a rule repository has fwc.kdl at its root, starting with `fwc 1`"),
                ))
            }
        }
        read_tree_dir(dir, RULES_DIR, is_rule_file, &mut files)?;
        let mut tests = BTreeMap::new();
        read_tree_dir(dir, TESTS_DIR, is_test_file, &mut tests)?;
        let mut lists = BTreeMap::new();
        read_tree_dir(dir, LISTS_DIR, |_| true, &mut lists)?;
        Ok(SourceTree { files, lists, tests })
    }

    /// Build a tree from (path, contents) pairs, keeping only rule files (for git trees).
    pub fn from_files<I: IntoIterator<Item = (String, String)>>(files: I) -> SourceTree {
        let (tests, files): (BTreeMap<_, _>, BTreeMap<_, _>) = files
            .into_iter()
            .filter(|(p, _)| is_tree_file(p))
            .partition(|(p, _)| p.starts_with("tests/"));
        let (lists, files) = files.into_iter().partition(|(p, _)| is_list_file(p));
        SourceTree { files, lists, tests }
    }

    pub fn has_templates(&self) -> bool {
        self.files.keys().any(|p| p.ends_with(".kdl.j2"))
    }
}

/// Is this path a rule file (`*.kdl` or `*.kdl.j2`)?
pub fn is_rule_file(path: &str) -> bool {
    path.ends_with(".kdl") || path.ends_with(".kdl.j2")
}

/// Is this repository path a set file (anything under `lists/`)?
pub fn is_list_file(path: &str) -> bool {
    path.strip_prefix(LISTS_DIR).is_some_and(|r| r.starts_with('/'))
}

/// Does this repository path belong in a [`SourceTree`] (root file, rule file, set file,
/// policy test file)? The git readers use it to pick blobs.
pub fn is_tree_file(path: &str) -> bool {
    path == ROOT_FILE
        || (path.starts_with("rules/") && is_rule_file(path))
        || is_list_file(path)
        || (path.starts_with("tests/") && is_test_file(path))
}

/// Is this path a policy test file (`*.kdl`)?
pub fn is_test_file(path: &str) -> bool {
    path.ends_with(".kdl")
}

/// Read every file below `dir/sub` that `keep` accepts into `out` (relative paths with `/`).
fn read_tree_dir(dir: &Path, sub: &str, keep: fn(&str) -> bool, out: &mut BTreeMap<String, String>) -> Result<(), Diagnostics> {
    let top = dir.join(sub);
    if !top.is_dir() {
        return Ok(());
    }
    let mut stack = vec![top];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| io_error(&d, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&d, e))?;
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if keep(&path.to_string_lossy()) {
                let text = std::fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
                out.insert(rel, text);
            }
        }
    }
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> Diagnostics {
    Diagnostics::single(Diagnostic::error("io", format!("cannot read {}: {e}", path.display())))
}

/// A file as diagnostics see it: its display path and the exact text that was parsed (for a
/// template, the text rendered for one host).
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: String,
    pub text: Arc<str>,
}

/// Every text parsed in one run; spans index into it by `file`.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn add(&mut self, path: impl Into<String>, text: &str) -> u32 {
        self.files.push(SourceFile { path: path.into(), text: Arc::from(text) });
        (self.files.len() - 1) as u32
    }
    pub fn file(&self, id: u32) -> &SourceFile {
        &self.files[id as usize]
    }
}
