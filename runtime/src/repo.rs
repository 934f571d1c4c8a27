//! Reading a rule repository out of git: the tree of a commit, straight from the object
//! database (no work tree), as a compiler [`SourceTree`]. Used by `fwc plan --from` and by
//! the agent.

use std::path::Path;

use fwc_compiler::diag::{Diagnostic, Diagnostics};
use fwc_compiler::read::source::{EntryKind, RepoFs, SourceTree};
use miette::{miette, IntoDiagnostic, Result};

/// The rule files of `commit`, below `subdir` of the repository (empty = repository root).
/// Read with the compiler's reader ([`SourceTree::read`]): the same symlink resolution,
/// confinement and limits as a work tree, so a commit gets the verdict its checkout gets.
pub fn source_tree_at(repo: &git2::Repository, commit: &git2::Commit, subdir: &Path) -> Result<SourceTree, Diagnostics> {
    let git_error = |what: String| Diagnostics::single(Diagnostic::error("git", what));
    let mut tree = commit.tree().map_err(|e| git_error(format!("cannot read the tree of commit {}: {}", commit.id(), e.message())))?;
    if !subdir.as_os_str().is_empty() {
        let entry = tree
            .get_path(subdir)
            .map_err(|_| git_error(format!("{} does not exist in commit {}", subdir.display(), commit.id())))?;
        tree = repo.find_tree(entry.id()).map_err(|_| git_error(format!("{} is not a directory in commit {}", subdir.display(), commit.id())))?;
    }
    SourceTree::read(&GitFs { repo, root: tree })
}

/// A commit's tree (or a subdirectory of it) as the compiler's reader sees a repository.
struct GitFs<'r> {
    repo: &'r git2::Repository,
    root: git2::Tree<'r>,
}

impl GitFs<'_> {
    fn entry(&self, path: &str) -> std::io::Result<Option<git2::TreeEntry<'static>>> {
        match self.root.get_path(Path::new(path)) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git_io(e)),
        }
    }
    fn blob(&self, path: &str) -> std::io::Result<Vec<u8>> {
        let entry = self.entry(path)?.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        Ok(self.repo.find_blob(entry.id()).map_err(git_io)?.content().to_vec())
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
            self.repo.find_tree(entry.id()).map_err(git_io)?
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
