//! Reading a rule repository out of git: the tree of a commit, straight from the object
//! database (no work tree), as a compiler [`SourceTree`]. Used by `fwc plan --from` and by
//! the agent.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use fwc_compiler::diag::{Diagnostic, Diagnostics};
use fwc_compiler::read::source::{EntryKind, RepoFs, SourceTree};
use miette::{miette, IntoDiagnostic, Result};

/// The rule files of `commit`, below `subdir` of the repository (empty = repository root).
/// Read with the compiler's reader ([`SourceTree::read`]): the same symlink resolution,
/// confinement and limits as a work tree, so a commit gets the verdict its checkout gets.
/// The commit and every tree and file read on the way are checked against their ids
/// ([`check_ids_in_fwc`]).
pub fn source_tree_at(repo: &git2::Repository, commit: &git2::Commit, subdir: &Path) -> Result<SourceTree, Diagnostics> {
    let git_error = |what: String| Diagnostics::single(Diagnostic::error("git", what));
    check_id(repo, commit.id()).map_err(|e| git_error(e.to_string()))?;
    let mut tree = commit.tree().map_err(|e| git_error(format!("cannot read the tree of commit {}: {}", commit.id(), e.message())))?;
    check_id(repo, tree.id()).map_err(|e| git_error(e.to_string()))?;
    let fs = GitFs { repo, root: tree.clone(), checked: Default::default() };
    if !subdir.as_os_str().is_empty() {
        let entry = fs
            .entry(&subdir.to_string_lossy())
            .ok()
            .flatten()
            .ok_or_else(|| git_error(format!("{} does not exist in commit {}", subdir.display(), commit.id())))?;
        tree = repo.find_tree(entry.id()).map_err(|_| git_error(format!("{} is not a directory in commit {}", subdir.display(), commit.id())))?;
        check_id(repo, tree.id()).map_err(|e| git_error(e.to_string()))?;
    }
    SourceTree::read(&GitFs { repo, root: tree, checked: fs.checked })
}

/// Set once a process reads objects with libgit2's own check off ([`check_ids_in_fwc`]).
static FWC_CHECKS_IDS: AtomicBool = AtomicBool::new(false);

/// From now on this process checks the objects it reads itself instead of libgit2.
///
/// libgit2 hashes every object it reads again with its collision-detecting SHA-1 (SHA-1DC,
/// ~3x slower than plain SHA-1) and compares the result with the id it was read by. The
/// agent reads a million-line set file from its mirror twice per new version (libgit2's
/// local transport reads the remote's object to pack it; the compile reads the mirror's), and
/// those hashes were a sixth of its reconcile. Turned off here, for the whole process (the
/// agent calls this when it opens its mirror). What it protected against remains checked:
/// - what a fetch brings is hashed by libgit2's indexer, which computes every object's id
///   from its content (SHA-1DC, independent of this option) and checks the pack's trailing
///   checksum: an object that is not what its id says never enters the mirror under that id;
/// - what is read afterwards (a disk error, or the mirror changed behind fwc's back) is caught
///   by zlib's Adler-32 of each object's stream and, for everything the agent compiles and
///   applies, by this module: the commit, every tree on the way to a rule file and every file
///   read ([`GitFs`]), and the commit whose signature is verified (`agent::verify`), are
///   hashed again with OpenSSL's SHA-1 ([`check_id`]) and refused when they differ. Plain
///   SHA-1 suffices there: the object was accepted with collision detection when it was
///   fetched, so a mismatch now can only be damage or a second preimage, not a collision.
pub fn check_ids_in_fwc() {
    git2::opts::strict_hash_verification(false);
    FWC_CHECKS_IDS.store(true, Ordering::SeqCst);
}

/// Object `id` of `repo` does not hash to `id`.
#[derive(Debug)]
pub struct IdMismatch(pub git2::Oid);

impl std::fmt::Display for IdMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "object {} of the repository does not match its id: the repository is damaged or was changed behind fwc's back; refusing to use it", self.0)
    }
}

/// The raw content of object `id` (checked against `id` when [`check_ids_in_fwc`] is on;
/// libgit2 checks it otherwise).
pub fn read_checked(repo: &git2::Repository, id: git2::Oid) -> std::io::Result<(git2::ObjectType, Vec<u8>)> {
    let odb = repo.odb().map_err(git_io)?;
    let obj = odb.read(id).map_err(git_io)?;
    if FWC_CHECKS_IDS.load(Ordering::SeqCst) && object_id(obj.kind(), obj.data()) != *id.as_bytes() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, IdMismatch(id).to_string()));
    }
    Ok((obj.kind(), obj.data().to_vec()))
}

/// [`read_checked`] without keeping the content (small objects: commits and trees).
pub fn check_id(repo: &git2::Repository, id: git2::Oid) -> std::io::Result<()> {
    if FWC_CHECKS_IDS.load(Ordering::SeqCst) {
        read_checked(repo, id)?;
    }
    Ok(())
}

/// git's id of an object: SHA-1 of `<type> <length>\0` and the content.
fn object_id(kind: git2::ObjectType, data: &[u8]) -> [u8; 20] {
    let mut h = openssl::sha::Sha1::new();
    h.update(format!("{} {}\0", kind.str(), data.len()).as_bytes());
    h.update(data);
    h.finish()
}

/// A commit's tree (or a subdirectory of it) as the compiler's reader sees a repository.
struct GitFs<'r> {
    repo: &'r git2::Repository,
    root: git2::Tree<'r>,
    /// Trees already checked against their ids.
    checked: RefCell<HashSet<git2::Oid>>,
}

impl<'r> GitFs<'r> {
    /// The entry at `path`, walking one tree at a time so that every tree read on the way is
    /// checked against its id.
    fn entry(&self, path: &str) -> std::io::Result<Option<git2::TreeEntry<'static>>> {
        let mut tree = self.root.clone();
        let mut names = path.split('/').filter(|n| !n.is_empty()).peekable();
        while let Some(name) = names.next() {
            let Some(e) = tree.get_name(name).map(|e| e.to_owned()) else { return Ok(None) };
            if names.peek().is_none() {
                return Ok(Some(e));
            }
            if e.kind() != Some(git2::ObjectType::Tree) {
                return Ok(None);
            }
            tree = self.tree(e.id())?;
        }
        Ok(None)
    }
    /// Tree `id`, checked against its id the first time.
    fn tree(&self, id: git2::Oid) -> std::io::Result<git2::Tree<'r>> {
        if self.checked.borrow_mut().insert(id) {
            check_id(self.repo, id)?;
        }
        self.repo.find_tree(id).map_err(git_io)
    }
    fn blob(&self, path: &str) -> std::io::Result<Vec<u8>> {
        let entry = self.entry(path)?.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        match read_checked(self.repo, entry.id())? {
            (git2::ObjectType::Blob, data) => Ok(data),
            (kind, _) => Err(std::io::Error::other(format!("{path}: object {} is a {kind}, not a file", entry.id()))),
        }
    }
}

fn git_io(e: git2::Error) -> std::io::Error {
    std::io::Error::other(e.message().to_string())
}

impl RepoFs for GitFs<'_> {
    fn kind(&self, path: &str) -> std::io::Result<EntryKind> {
        if path.is_empty() {
            return Ok(EntryKind::Dir);
        }
        let Some(entry) = self.entry(path)? else { return Ok(EntryKind::Missing) };
        Ok(match entry.filemode() {
            0o040000 => EntryKind::Dir,
            0o120000 => EntryKind::Symlink,
            0o100644 | 0o100755 | 0o100664 => {
                let (size, _) = self.repo.odb().and_then(|db| db.read_header(entry.id())).map_err(git_io)?;
                EntryKind::File { size: size as u64 }
            }
            _ => EntryKind::Other, // a submodule (commit)
        })
    }
    fn read_link(&self, path: &str) -> std::io::Result<Vec<u8>> {
        self.blob(path)
    }
    fn read_dir(&self, path: &str) -> std::io::Result<Vec<Vec<u8>>> {
        let tree = if path.is_empty() {
            self.root.clone()
        } else {
            let entry = self.entry(path)?.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
            self.tree(entry.id())?
        };
        Ok(tree.iter().map(|e| e.name_bytes().to_vec()).collect())
    }
    fn read(&self, path: &str) -> std::io::Result<Vec<u8>> {
        self.blob(path)
    }
}

/// Open the git repository that contains `dir`, and `dir`'s path relative to its work tree.
pub fn discover(dir: &Path) -> Result<(git2::Repository, std::path::PathBuf)> {
    let repo = git2::Repository::discover(dir)
        .map_err(|e| miette!("{} is not inside a git repository: {}", dir.display(), e.message()))?;
    let workdir = repo.workdir().ok_or_else(|| miette!("the repository of {} is bare; run fwc in a checkout", dir.display()))?;
    let abs = dir.canonicalize().into_diagnostic()?;
    let rel = abs.strip_prefix(workdir.canonicalize().into_diagnostic()?).unwrap_or(Path::new("")).to_path_buf();
    Ok((repo, rel))
}

/// The commit string of the checkout containing `dir`, as `fwc compile` and `fwc apply` both
/// record it: HEAD's id, with `-dirty` when a tracked file differs from it (in the index or the
/// work tree; untracked files do not count). None outside a git checkout or before the first
/// commit. Read with git2: no `git` binary needed.
pub fn checkout_commit(dir: &Path) -> Option<String> {
    let repo = git2::Repository::discover(dir).ok()?;
    let head = repo.head().ok()?.peel_to_commit().ok()?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(false).include_ignored(false).exclude_submodules(true);
    let dirty = repo.statuses(Some(&mut opts)).ok().is_some_and(|s| !s.is_empty());
    Some(format!("{}{}", head.id(), if dirty { "-dirty" } else { "" }))
}

/// Resolve `rev` (`HEAD~1`, a branch, a hash) to a commit.
pub fn commit_at<'r>(repo: &'r git2::Repository, rev: &str) -> Result<git2::Commit<'r>> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| miette!("cannot resolve git revision \"{rev}\": {}", e.message()))
}

#[cfg(test)]
mod checkout_tests {
    /// compile and apply record the same string: HEAD's id, `-dirty` only for changed tracked
    /// files; made and read with git2 alone (no `git` on PATH needed).
    #[test]
    fn checkout_commit_is_head_with_dirty_for_tracked_changes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(super::checkout_commit(d), None, "not a checkout");
        let repo = git2::Repository::init(d).unwrap();
        std::fs::write(d.join("fwc.kdl"), "fwc 1\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(std::path::Path::new("fwc.kdl")).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.org").unwrap();
        let id = repo.commit(Some("HEAD"), &sig, &sig, "one", &tree, &[]).unwrap();
        assert_eq!(super::checkout_commit(d), Some(id.to_string()));
        std::fs::write(d.join("notes.txt"), "untracked\n").unwrap();
        assert_eq!(super::checkout_commit(d), Some(id.to_string()), "untracked files do not make it dirty");
        std::fs::write(d.join("fwc.kdl"), "fwc 1\n// changed\n").unwrap();
        assert_eq!(super::checkout_commit(&d.join(".")), Some(format!("{id}-dirty")));
    }
}
