//! Reading a rule repository out of git: the tree of a commit, straight from the object
//! database (no work tree), as a compiler [`SourceTree`]. Used by `fwc plan --from` and by
//! the agent.

use std::path::Path;

use fwc_compiler::source::SourceTree;
use miette::{miette, IntoDiagnostic, Result, WrapErr};

/// The rule files of `commit`, below `subdir` of the repository (empty = repository root).
pub fn source_tree_at(repo: &git2::Repository, commit: &git2::Commit, subdir: &Path) -> Result<SourceTree> {
    let mut tree = commit.tree().into_diagnostic()?;
    if !subdir.as_os_str().is_empty() {
        let entry = tree
            .get_path(subdir)
            .map_err(|_| miette!("{} does not exist in commit {}", subdir.display(), commit.id()))?;
        tree = repo.find_tree(entry.id()).into_diagnostic().wrap_err_with(|| format!("{} is not a directory", subdir.display()))?;
    }
    let mut files = Vec::new();
    let mut walk_err = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() != Some(git2::ObjectType::Blob) {
            return git2::TreeWalkResult::Ok;
        }
        let path = format!("{dir}{}", entry.name().unwrap_or_default());
        if !fwc_compiler::source::is_tree_file(&path) {
            return git2::TreeWalkResult::Ok;
        }
        match entry.to_object(repo).and_then(|o| o.peel_to_blob()) {
            Ok(blob) => match std::str::from_utf8(blob.content()) {
                Ok(text) => files.push((path, text.to_string())),
                Err(_) => walk_err = Some(miette!("{path} in commit {} is not UTF-8", commit.id())),
            },
            Err(e) => walk_err = Some(miette!("cannot read {path}: {e}")),
        }
        git2::TreeWalkResult::Ok
    })
    .into_diagnostic()?;
    if let Some(e) = walk_err {
        return Err(e);
    }
    Ok(SourceTree::from_files(files))
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

/// Resolve `rev` (`HEAD~1`, a branch, a hash) to a commit.
pub fn commit_at<'r>(repo: &'r git2::Repository, rev: &str) -> Result<git2::Commit<'r>> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| miette!("cannot resolve git revision \"{rev}\": {}", e.message()))
}
