//! Finding and holding the rule files: `fwc.kdl` at the root and every `*.kdl` / `*.kdl.j2`
//! under `rules/`, in path order, and the set files under `lists/` (`set … file=`). A
//! [`SourceTree`] is read through a [`RepoFs`]: a directory (the compiler's only I/O) or a git
//! commit (the runtime). Files are read only inside the repository, within [`limits`].

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::diag::{Diagnostic, Diagnostics};
use crate::read::limits;
pub use crate::read::sourcemap::{SourceFile, SourceMap};

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
    /// Where parsed set files are cached (`crate::read::setcache`); off unless the caller sets it.
    pub set_cache: crate::read::setcache::SetCache,
}

impl SourceTree {
    /// Read `fwc.kdl`, `rules/**/*.kdl{,.j2}`, `lists/**` and `tests/**/*.kdl` below `dir`.
    pub fn from_dir(dir: &Path) -> Result<SourceTree, Diagnostics> {
        SourceTree::read(&DirFs { root: dir.to_path_buf() })
    }

    /// Read a repository through `fs` (a work tree or a git commit): the same walk, symlink
    /// resolution, confinement and limits for both, so they give the same verdict.
    pub fn read(fs: &dyn RepoFs) -> Result<SourceTree, Diagnostics> {
        let mut r = Reader { fs, entries: 0, bytes: 0, diags: Diagnostics::default() };
        let mut files = BTreeMap::new();
        match r.resolve(ROOT_FILE) {
            Ok((physical, EntryKind::File { size })) => {
                if let Some(text) = r.read_text(ROOT_FILE, &physical, size, limits::MAX_FILE_BYTES as u64) {
                    files.insert(ROOT_FILE.to_string(), text);
                }
            }
            Ok(_) => r.diags.push(
                Diagnostic::error("no-root-file", format!("there is no {ROOT_FILE} (a file) at the root of the repository"))
                    .help("a rule repository has fwc.kdl at its root, starting with `fwc 1`"),
            ),
            Err(refusal) => r.refuse(ROOT_FILE, refusal),
        }
        let mut tests = BTreeMap::new();
        let mut lists = BTreeMap::new();
        r.walk(RULES_DIR, is_rule_file, limits::MAX_FILE_BYTES as u64, &mut files);
        r.walk(TESTS_DIR, is_test_file, limits::MAX_FILE_BYTES as u64, &mut tests);
        r.walk(LISTS_DIR, |_| true, limits::MAX_SET_FILE_BYTES, &mut lists);
        if r.diags.has_errors() {
            return Err(r.diags);
        }
        Ok(SourceTree { files, lists, tests, set_cache: Default::default() })
    }
    /// Build a tree from (path, contents) pairs, keeping only rule files (for git trees).
    pub fn from_files<I: IntoIterator<Item = (String, String)>>(files: I) -> SourceTree {
        let (tests, files): (BTreeMap<_, _>, BTreeMap<_, _>) = files
            .into_iter()
            .filter(|(p, _)| is_tree_file(p))
            .partition(|(p, _)| p.starts_with("tests/"));
        let (lists, files) = files.into_iter().partition(|(p, _)| is_list_file(p));
        SourceTree { files, lists, tests, set_cache: Default::default() }
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

/// What a repository path is, without following a symlink at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File { size: u64 },
    Dir,
    Symlink,
    Missing,
    /// A device, socket, git submodule…: never read.
    Other,
}

/// A rule repository as [`SourceTree::read`] sees it: the work tree of a directory
/// ([`DirFs`]) or the tree of a git commit (the runtime's `repo` module). Paths are relative
/// and `/`-separated ("" is the root), and never pass through a symlink: the reader resolves
/// symlinks itself, one component at a time, and refuses those that leave the repository.
pub trait RepoFs {
    fn kind(&self, path: &str) -> std::io::Result<EntryKind>;
    /// The target of the symlink at `path`, as written.
    fn read_link(&self, path: &str) -> std::io::Result<Vec<u8>>;
    /// The names in directory `path` (raw bytes: a name may not be UTF-8).
    fn read_dir(&self, path: &str) -> std::io::Result<Vec<Vec<u8>>>;
    /// The contents of the regular file `path`.
    fn read(&self, path: &str) -> std::io::Result<Vec<u8>>;
}

/// The work tree below `root`.
pub struct DirFs {
    pub root: PathBuf,
}

impl RepoFs for DirFs {
    fn kind(&self, path: &str) -> std::io::Result<EntryKind> {
        let meta = match std::fs::symlink_metadata(self.root.join(path)) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(EntryKind::Missing),
            Err(e) => return Err(e),
        };
        let t = meta.file_type();
        Ok(if t.is_symlink() {
            EntryKind::Symlink
        } else if t.is_dir() {
            EntryKind::Dir
        } else if t.is_file() {
            EntryKind::File { size: meta.len() }
        } else {
            EntryKind::Other
        })
    }
    fn read_link(&self, path: &str) -> std::io::Result<Vec<u8>> {
        Ok(std::fs::read_link(self.root.join(path))?.into_os_string().into_vec())
    }
    fn read_dir(&self, path: &str) -> std::io::Result<Vec<Vec<u8>>> {
        std::fs::read_dir(self.root.join(path))?.map(|e| Ok(e?.file_name().into_vec())).collect()
    }
    fn read(&self, path: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.root.join(path))
    }
}

/// Most symlinks followed to resolve one path (Linux's own bound).
const MAX_SYMLINK_HOPS: usize = 40;

/// Why a path was not read.
#[derive(Debug)]
enum Refusal {
    /// A symlink on the way points outside the repository (`..` past its root, or absolute).
    Escapes { link: String, target: String },
    Loop { link: String },
    NotUtf8Link { link: String },
    Io(std::io::Error),
}

/// One walk over a repository: counts entries and bytes against the limits, collects errors.
struct Reader<'a> {
    fs: &'a dyn RepoFs,
    entries: usize,
    bytes: u64,
    diags: Diagnostics,
}

impl Reader<'_> {
    /// Resolve `path` (no `..`, no `.`) to the physical path it names, following symlinks
    /// that stay inside the repository.
    fn resolve(&self, path: &str) -> Result<(String, EntryKind), Refusal> {
        let mut done: Vec<String> = Vec::new();
        let mut todo: Vec<String> = path.split('/').filter(|c| !c.is_empty()).rev().map(String::from).collect();
        let mut hops = 0;
        let mut kind = EntryKind::Dir;
        while let Some(c) = todo.pop() {
            if kind != EntryKind::Dir {
                // a file (or nothing) where a directory should be
                return Ok((done.join("/"), EntryKind::Missing));
            }
            match c.as_str() {
                "." => continue,
                ".." => {
                    // only symlink targets contain `..` (a walked path never does)
                    if done.pop().is_none() {
                        return Err(Refusal::Escapes { link: path.to_string(), target: path.to_string() });
                    }
                    continue;
                }
                _ => done.push(c),
            }
            let here = done.join("/");
            kind = self.fs.kind(&here).map_err(Refusal::Io)?;
            if kind == EntryKind::Symlink {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Refusal::Loop { link: here });
                }
                let raw = self.fs.read_link(&here).map_err(Refusal::Io)?;
                let Ok(target) = String::from_utf8(raw) else { return Err(Refusal::NotUtf8Link { link: here }) };
                done.pop();
                if target.starts_with('/') || escapes(&done, &target) {
                    return Err(Refusal::Escapes { link: here, target });
                }
                todo.extend(target.split('/').filter(|c| !c.is_empty()).rev().map(String::from));
                kind = EntryKind::Dir;
            }
        }
        Ok((done.join("/"), kind))
    }

    /// Read every file below `sub` that `keep` accepts (relative paths with `/`), in path order.
    fn walk(&mut self, sub: &str, keep: fn(&str) -> bool, max_size: u64, out: &mut BTreeMap<String, String>) {
        let top = match self.resolve(sub) {
            Ok((physical, EntryKind::Dir)) => physical,
            Ok(_) => return,
            Err(refusal) => return self.refuse(sub, refusal),
        };
        // (logical path, physical path, physical directories above it: a symlink back to one
        // of them would make the walk endless)
        let mut stack = vec![(sub.to_string(), top, Vec::<String>::new())];
        while let Some((logical, physical, mut above)) = stack.pop() {
            let mut names = match self.fs.read_dir(&physical) {
                Ok(n) => n,
                Err(e) => return self.refuse(&logical, Refusal::Io(e)),
            };
            names.sort();
            above.push(physical.clone());
            for raw in names {
                self.entries += 1;
                if self.entries > limits::MAX_FILES {
                    let d = Diagnostic::error("limit", format!("the repository has more than {} files and directories under rules/, lists/ and tests/", limits::MAX_FILES))
                        .help("keep the repository to the rule files it needs; merge small set files");
                    self.diags.push(whole_file(d, &logical));
                    return;
                }
                let Ok(name) = String::from_utf8(raw) else {
                    let d = Diagnostic::error("not-utf8", format!("a file name in {logical}/ is not UTF-8")).help("rename the file: fwc reads UTF-8 names only");
                    self.diags.push(whole_file(d, &logical));
                    continue;
                };
                if matches!(name.as_str(), "" | "." | "..") || name.contains('/') {
                    continue; // only a hand-made git tree has these
                }
                let child = format!("{logical}/{name}");
                match self.resolve(&format!("{physical}/{name}")) {
                    Ok((p, EntryKind::Dir)) if above.contains(&p) => self.refuse(&child, Refusal::Loop { link: child.clone() }),
                    Ok((p, EntryKind::Dir)) => stack.push((child, p, above.clone())),
                    Ok((p, EntryKind::File { size })) if keep(&child) => {
                        if let Some(text) = self.read_text(&child, &p, size, max_size) {
                            out.insert(child, text);
                        }
                    }
                    Ok((_, EntryKind::Missing)) if keep(&child) => {
                        let d = Diagnostic::error("io", format!("{child} is a symlink to a file that does not exist")).help("fix or remove the symlink");
                        self.diags.push(whole_file(d, &child));
                    }
                    Ok(_) => {}
                    Err(refusal) => self.refuse(&child, refusal),
                }
            }
        }
    }

    /// The text of `logical` (found at `physical`), or None after reporting why not.
    fn read_text(&mut self, logical: &str, physical: &str, size: u64, max_size: u64) -> Option<String> {
        if size > max_size {
            let d = Diagnostic::error("limit", format!("{logical} is {size} bytes, more than the limit of {max_size}"))
                .help("split the rules over several files under rules/; large address lists belong in a set file under lists/");
            self.diags.push(whole_file(d, logical));
            return None;
        }
        if self.bytes > limits::MAX_TOTAL_BYTES {
            return None; // reported once, at the file that went past the limit
        }
        self.bytes += size;
        if self.bytes > limits::MAX_TOTAL_BYTES {
            let d = Diagnostic::error("limit", format!("the repository's files add up to more than {} bytes", limits::MAX_TOTAL_BYTES))
                .help("keep the repository to the rule files and set files it needs");
            self.diags.push(whole_file(d, logical));
            return None;
        }
        let bytes = match self.fs.read(physical) {
            Ok(b) => b,
            Err(e) => {
                self.refuse(logical, Refusal::Io(e));
                return None;
            }
        };
        match String::from_utf8(bytes) {
            Ok(t) => Some(t),
            Err(e) => {
                self.diags.push(not_utf8(logical, e));
                None
            }
        }
    }

    fn refuse(&mut self, logical: &str, refusal: Refusal) {
        // The symlink that failed, when it is not the walked path itself.
        let via = |link: &str| if link == logical { String::new() } else { format!(" (the symlink {link})") };
        let d = match refusal {
            Refusal::Escapes { link, target } => Diagnostic::error("outside-repository", format!("symlink to \"{target}\" leaves the repository{}; not read", via(&link)))
                .help("fwc reads only files inside the repository: copy the file in, or make the symlink relative and keep its target inside the repository"),
            Refusal::Loop { link } => Diagnostic::error("symlink-loop", format!("symlinks loop (or chain more than {MAX_SYMLINK_HOPS} deep){}; not read", via(&link)))
                .help("remove the symlink that points back at a directory above it"),
            Refusal::NotUtf8Link { link } => Diagnostic::error("outside-repository", format!("symlink target is not UTF-8{}; not read", via(&link)))
                .help("make the symlink relative and keep its target inside the repository"),
            Refusal::Io(e) => Diagnostic::error("io", format!("cannot read {logical}: {e}")),
        };
        self.diags.push(whole_file(d, logical));
    }
}

/// Does the relative symlink `target`, found in directory `dir` (physical components), lead
/// above the repository root?
fn escapes(dir: &[String], target: &str) -> bool {
    let mut depth = dir.len();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if depth == 0 => return true,
            ".." => depth -= 1,
            _ => depth += 1,
        }
    }
    false
}

/// Point `d` at the start of `file` (a problem with a file as a whole: no text to show).
fn whole_file(mut d: Diagnostic, file: &str) -> Diagnostic {
    d.location = Some(crate::diag::Location { file: file.to_string(), line: 1, column: 1 });
    d
}

/// The first invalid byte of a file that is not UTF-8, at its line and column.
fn not_utf8(path: &str, e: std::string::FromUtf8Error) -> Diagnostic {
    let at = e.utf8_error().valid_up_to();
    let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
    let mut map = SourceMap::default();
    let id = map.add(path, &text);
    let byte = e.as_bytes()[at];
    Diagnostic::error("not-utf8", format!("the file is not UTF-8 text (byte 0x{byte:02x})"))
        .at(&map, crate::model::Span { file: id, offset: at as u32, len: '\u{FFFD}'.len_utf8() as u32 }, "not UTF-8")
        .help("save the file as UTF-8 (rule files and set files are text)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line index counts as `diag::line_col` does, at every offset (mid-character too).
    #[test]
    fn line_index_agrees_with_line_col() {
        let text = "fwc 1\n\nset \"é\" \"10.0.0.1\"\r\n  input {\n}\nlast";
        let mut map = SourceMap::default();
        let f = map.add("fwc.kdl", text);
        for offset in 0..=text.len() + 2 {
            let mut at = offset.min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            assert_eq!(map.file(f).line_col(offset), crate::diag::line_col(text, at), "offset {offset}");
        }
    }

    /// A repository in memory: files (with a size that may be larger than their text, to
    /// test size limits without the bytes), directories, symlinks.
    #[derive(Default)]
    struct MemFs {
        files: BTreeMap<String, (u64, String)>,
        links: BTreeMap<String, String>,
    }

    impl MemFs {
        fn file(mut self, p: &str, text: &str) -> Self {
            self.files.insert(p.into(), (text.len() as u64, text.into()));
            self
        }
        fn sized(mut self, p: &str, size: u64) -> Self {
            self.files.insert(p.into(), (size, String::new()));
            self
        }
        fn link(mut self, p: &str, target: &str) -> Self {
            self.links.insert(p.into(), target.into());
            self
        }
        fn is_dir(&self, p: &str) -> bool {
            let prefix = format!("{p}/");
            p.is_empty() || self.files.keys().chain(self.links.keys()).any(|k| k.starts_with(&prefix))
        }
    }

    impl RepoFs for MemFs {
        fn kind(&self, p: &str) -> std::io::Result<EntryKind> {
            Ok(if let Some((size, _)) = self.files.get(p) {
                EntryKind::File { size: *size }
            } else if self.links.contains_key(p) {
                EntryKind::Symlink
            } else if self.is_dir(p) {
                EntryKind::Dir
            } else {
                EntryKind::Missing
            })
        }
        fn read_link(&self, p: &str) -> std::io::Result<Vec<u8>> {
            Ok(self.links[p].clone().into_bytes())
        }
        fn read_dir(&self, p: &str) -> std::io::Result<Vec<Vec<u8>>> {
            let prefix = if p.is_empty() { String::new() } else { format!("{p}/") };
            let mut names: Vec<Vec<u8>> = self
                .files
                .keys()
                .chain(self.links.keys())
                .filter_map(|k| k.strip_prefix(&prefix))
                .map(|rest| rest.split('/').next().unwrap_or_default().as_bytes().to_vec())
                .collect();
            names.dedup();
            Ok(names)
        }
        fn read(&self, p: &str) -> std::io::Result<Vec<u8>> {
            Ok(self.files[p].1.clone().into_bytes())
        }
    }

    fn errors(fs: MemFs) -> Vec<String> {
        SourceTree::read(&fs).unwrap_err().0.iter().map(|d| format!("{}: {}", d.location.as_ref().map_or("-", |l| &l.file), d.message)).collect()
    }

    #[test]
    fn a_file_over_its_size_limit_is_refused_before_it_is_read() {
        let fs = MemFs::default().file("fwc.kdl", "fwc 1\n").sized("rules/big.kdl", limits::MAX_FILE_BYTES as u64 + 1);
        assert_eq!(errors(fs), [format!("rules/big.kdl: rules/big.kdl is {} bytes, more than the limit of {}", limits::MAX_FILE_BYTES + 1, limits::MAX_FILE_BYTES)]);
        // set files may be larger
        let fs = MemFs::default().file("fwc.kdl", "fwc 1\n").sized("lists/a", limits::MAX_FILE_BYTES as u64 + 1);
        assert!(SourceTree::read(&fs).is_ok());
        let fs = MemFs::default().file("fwc.kdl", "fwc 1\n").sized("lists/a", limits::MAX_SET_FILE_BYTES + 1);
        assert!(errors(fs)[0].contains("more than the limit"));
    }

    #[test]
    fn the_repository_as_a_whole_has_a_size_limit() {
        let mut fs = MemFs::default().file("fwc.kdl", "fwc 1\n");
        for i in 0..5 {
            fs = fs.sized(&format!("lists/l{i}"), limits::MAX_SET_FILE_BYTES);
        }
        assert_eq!(errors(fs), [format!("lists/l3: the repository's files add up to more than {} bytes", limits::MAX_TOTAL_BYTES)]);
    }

    #[test]
    fn symlinks_resolve_inside_and_are_refused_outside() {
        let fs = MemFs::default()
            .file("fwc.kdl", "fwc 1\n")
            .file("shared/a.kdl", "// a\n")
            .link("rules/a.kdl", "../shared/./a.kdl")
            .link("rules/dir", "../shared")
            .link("rules/chain.kdl", "a.kdl");
        let t = SourceTree::read(&fs).unwrap();
        assert_eq!(t.files.keys().collect::<Vec<_>>(), ["fwc.kdl", "rules/a.kdl", "rules/chain.kdl", "rules/dir/a.kdl"]);
        assert!(t.files.values().skip(1).all(|t| t == "// a\n"));
        let fs = MemFs::default().file("fwc.kdl", "fwc 1\n").link("rules/x.kdl", "../../x").link("rules/y.kdl", "/etc/shadow").link("rules/z", "..");
        assert_eq!(
            errors(fs),
            [
                "rules/x.kdl: symlink to \"../../x\" leaves the repository; not read",
                "rules/y.kdl: symlink to \"/etc/shadow\" leaves the repository; not read",
                // `..` is the root, which holds rules/ again
                "rules/z/rules: symlinks loop (or chain more than 40 deep); not read",
            ]
        );
        // a link that climbs out and back in still left the repository on the way
        let fs = MemFs::default().file("fwc.kdl", "fwc 1\n").file("rules/a.kdl", "").link("rules/b.kdl", "../../repo/rules/a.kdl");
        assert_eq!(errors(fs).len(), 1);
    }
}
