//! The agent's view of the rule repository: a bare mirror inside the state dir
//! (`<state-dir>/mirror.git`), fetched with a deadline, and commits read straight from its
//! object database (no work tree is ever checked out).
//!
//! Only one ref is fetched: `+refs/heads/<branch>:refs/remotes/origin/<branch>`. The `+`
//! accepts non-fast-forward updates: a force-push simply becomes the new desired state, and
//! [`FetchOutcome::forced`] tells the agent to say so in the audit log.

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use fwc_compiler::source::SourceTree;
use git2::{Oid, Repository};
use miette::{miette, IntoDiagnostic, Result, WrapErr};

/// Directory of the mirror inside the state dir.
pub const MIRROR_DIR: &str = "mirror.git";

/// What a fetch found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOutcome {
    /// The branch tip before the fetch (None on the first fetch).
    pub old: Option<Oid>,
    pub new: Oid,
    /// The new tip does not contain the old one: history was rewritten (force-push).
    pub forced: bool,
}

impl FetchOutcome {
    pub fn changed(&self) -> bool {
        self.old != Some(self.new)
    }
}

/// Who made a commit, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    pub id: String,
    /// `Name <email>`.
    pub author: String,
    pub summary: String,
    pub message: String,
}

/// A bare mirror of one branch of the rule repository.
pub struct Mirror {
    pub repo: Repository,
    pub path: PathBuf,
    pub url: String,
    pub branch: String,
}

static GIT_TIMEOUTS: Once = Once::new();

/// libgit2's own socket timeouts (process-wide): connect and every read/write. Together with
/// the deadline checked in the transfer callbacks this bounds a fetch from a hung server.
fn set_socket_timeouts(t: Duration) {
    GIT_TIMEOUTS.call_once(|| {
        let ms = t.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: called once, before any other libgit2 use by the agent.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
        }
    });
}

impl Mirror {
    /// Open (or create) `<state_dir>/mirror.git` for `url` / `branch`. A changed URL is
    /// updated in place; the objects already fetched are kept.
    pub fn open(state_dir: &Path, url: &str, branch: &str, timeout: Duration) -> Result<Mirror> {
        set_socket_timeouts(timeout);
        let path = state_dir.join(MIRROR_DIR);
        let repo = match Repository::open_bare(&path) {
            Ok(r) => r,
            Err(_) => {
                std::fs::create_dir_all(state_dir).into_diagnostic()?;
                Repository::init_bare(&path).into_diagnostic().wrap_err_with(|| format!("cannot create {}", path.display()))?
            }
        };
        match repo.find_remote("origin") {
            Ok(r) if r.url() == Some(url) => {}
            Ok(_) => repo.remote_set_url("origin", url).into_diagnostic()?,
            Err(_) => {
                repo.remote_with_fetch("origin", url, &refspec(branch)).into_diagnostic()?;
            }
        }
        Ok(Mirror { repo, path, url: url.to_string(), branch: branch.to_string() })
    }

    fn tracking_ref(&self) -> String {
        format!("refs/remotes/origin/{}", self.branch)
    }

    /// The branch tip as last fetched.
    pub fn tip(&self) -> Option<Oid> {
        self.repo.refname_to_id(&self.tracking_ref()).ok()
    }

    /// Fetch the branch; fails after `timeout` (whole fetch) or when the branch is missing.
    pub fn fetch(&self, timeout: Duration) -> Result<FetchOutcome> {
        let old = self.tip();
        let deadline = Instant::now() + timeout;
        let mut cb = git2::RemoteCallbacks::new();
        cb.transfer_progress(move |_| Instant::now() < deadline);
        cb.sideband_progress(move |_| Instant::now() < deadline);
        cb.credentials(|url, user, allowed| credentials(url, user, allowed));
        let mut fo = git2::FetchOptions::new();
        fo.remote_callbacks(cb);
        fo.download_tags(git2::AutotagOption::None);
        fo.prune(git2::FetchPrune::Off);
        let mut remote = self.repo.remote_anonymous(&self.url).into_diagnostic()?;
        let spec = refspec(&self.branch);
        remote
            .fetch(&[spec.as_str()], Some(&mut fo), Some("fwc agent fetch"))
            .map_err(|e| {
                if Instant::now() >= deadline {
                    miette!("fetch from {} timed out after {:?}", self.url, timeout)
                } else {
                    miette!("fetch from {} failed: {}", self.url, e.message())
                }
            })?;
        let new = self.tip().ok_or_else(|| miette!("branch {} does not exist in {}", self.branch, self.url))?;
        let forced = match old {
            Some(o) if o != new => !self.repo.graph_descendant_of(new, o).unwrap_or(false),
            _ => false,
        };
        Ok(FetchOutcome { old, new, forced })
    }

    pub fn commit_info(&self, id: Oid) -> Result<CommitInfo> {
        let c = self.repo.find_commit(id).into_diagnostic()?;
        let a = c.author();
        Ok(CommitInfo {
            id: id.to_string(),
            author: format!("{} <{}>", a.name().unwrap_or("?"), a.email().unwrap_or("?")),
            summary: c.summary().unwrap_or("").to_string(),
            message: c.message().unwrap_or("").to_string(),
        })
    }

    /// The rule files of commit `id`, read from the object database.
    pub fn source_tree(&self, id: Oid) -> Result<SourceTree> {
        source_tree(&self.repo, id)
    }
}

fn refspec(branch: &str) -> String {
    format!("+refs/heads/{branch}:refs/remotes/origin/{branch}")
}

/// ssh: the ssh-agent, then `~/.ssh/id_ed25519` / `id_rsa` of the user running the agent
/// (or `FWC_GIT_SSH_KEY`); https: `FWC_GIT_USERNAME` / `FWC_GIT_PASSWORD` (a token).
fn credentials(_url: &str, user: Option<&str>, allowed: git2::CredentialType) -> std::result::Result<git2::Cred, git2::Error> {
    if allowed.contains(git2::CredentialType::SSH_KEY) {
        let user = user.unwrap_or("git");
        if let Ok(key) = std::env::var("FWC_GIT_SSH_KEY") {
            return git2::Cred::ssh_key(user, None, Path::new(&key), None);
        }
        if let Ok(c) = git2::Cred::ssh_key_from_agent(user) {
            return Ok(c);
        }
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        for k in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            let p = Path::new(&home).join(".ssh").join(k);
            if p.exists() {
                return git2::Cred::ssh_key(user, None, &p, None);
            }
        }
    }
    if allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) {
        if let (Ok(u), Ok(p)) = (std::env::var("FWC_GIT_USERNAME"), std::env::var("FWC_GIT_PASSWORD")) {
            return git2::Cred::userpass_plaintext(&u, &p);
        }
    }
    Err(git2::Error::from_str("no credentials for this remote (see docs/operations.md, agent: git access)"))
}

/// Every rule file (`fwc.kdl`, `rules/**/*.kdl{,.j2}`) of commit `id`, straight from the
/// object database, as a compiler source tree.
pub fn source_tree(repo: &Repository, id: Oid) -> Result<SourceTree> {
    let commit = repo.find_commit(id).into_diagnostic().wrap_err_with(|| format!("commit {id} is not in the mirror"))?;
    let tree = commit.tree().into_diagnostic()?;
    let mut files = Vec::new();
    let mut err = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() != Some(git2::ObjectType::Blob) {
            return git2::TreeWalkResult::Ok;
        }
        let path = format!("{dir}{}", entry.name().unwrap_or(""));
        if !(path == fwc_compiler::source::ROOT_FILE
            || (path.starts_with("rules/") && fwc_compiler::source::is_rule_file(&path)))
        {
            return git2::TreeWalkResult::Ok;
        }
        match repo.find_blob(entry.id()) {
            Ok(b) => match std::str::from_utf8(b.content()) {
                Ok(t) => files.push((path, t.to_string())),
                Err(_) => {
                    err = Some(miette!("{path} in commit {id} is not UTF-8"));
                    return git2::TreeWalkResult::Abort;
                }
            },
            Err(e) => {
                err = Some(miette!("cannot read {path} in commit {id}: {}", e.message()));
                return git2::TreeWalkResult::Abort;
            }
        }
        git2::TreeWalkResult::Ok
    })
    .or_else(|e| if err.is_some() { Ok(()) } else { Err(e) })
    .into_diagnostic()?;
    if let Some(e) = err {
        return Err(e);
    }
    Ok(SourceTree::from_files(files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn mirror_fetch_tree_and_force_push() {
        let d = tempfile::tempdir().unwrap();
        let remote = d.path().join("remote.git");
        let work = d.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(d.path(), &["init", "-q", "--bare", remote.to_str().unwrap()]);
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("fwc.kdl"), "fwc 1\n").unwrap();
        std::fs::create_dir_all(work.join("rules/sub")).unwrap();
        std::fs::write(work.join("rules/sub/a.kdl"), "// a\n").unwrap();
        std::fs::write(work.join("rules/b.kdl.j2"), "// b\n").unwrap();
        std::fs::write(work.join("README.md"), "no\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-qm", "one"]);
        git(&work, &["push", "-q", remote.to_str().unwrap(), "HEAD:main"]);
        let c1 = git(&work, &["rev-parse", "HEAD"]);

        let url = format!("file://{}", remote.display());
        let state = d.path().join("state");
        let m = Mirror::open(&state, &url, "main", Duration::from_secs(10)).unwrap();
        let f = m.fetch(Duration::from_secs(10)).unwrap();
        assert_eq!((f.old, f.new.to_string(), f.forced), (None, c1.clone(), false));
        let t = m.source_tree(f.new).unwrap();
        assert_eq!(t.files.keys().cloned().collect::<Vec<_>>(), vec!["fwc.kdl", "rules/b.kdl.j2", "rules/sub/a.kdl"]);
        assert_eq!(t.files["fwc.kdl"], "fwc 1\n");
        let info = m.commit_info(f.new).unwrap();
        assert_eq!((info.author.as_str(), info.summary.as_str()), ("T <t@example.com>", "one"));
        assert!(!state.join(MIRROR_DIR).join("fwc.kdl").exists(), "bare: no work tree");

        // fast-forward
        std::fs::write(work.join("fwc.kdl"), "fwc 1\n// two\n").unwrap();
        git(&work, &["commit", "-qam", "two"]);
        git(&work, &["push", "-q", remote.to_str().unwrap(), "HEAD:main"]);
        let f2 = m.fetch(Duration::from_secs(10)).unwrap();
        assert!(f2.changed() && !f2.forced);
        // nothing new
        assert!(!m.fetch(Duration::from_secs(10)).unwrap().changed());
        // force-push back to a rewritten history
        git(&work, &["reset", "-q", "--hard", &c1]);
        std::fs::write(work.join("fwc.kdl"), "fwc 1\n// rewritten\n").unwrap();
        git(&work, &["commit", "-qam", "rewritten"]);
        git(&work, &["push", "-qf", remote.to_str().unwrap(), "HEAD:main"]);
        let f3 = m.fetch(Duration::from_secs(10)).unwrap();
        assert!(f3.changed() && f3.forced, "{f3:?}");
        assert_eq!(m.source_tree(f3.new).unwrap().files["fwc.kdl"], "fwc 1\n// rewritten\n");

        // reopen keeps the tip; a dead remote fails fast with a message
        drop(m);
        let m = Mirror::open(&state, &format!("file://{}/missing.git", d.path().display()), "main", Duration::from_secs(10)).unwrap();
        assert_eq!(m.tip(), Some(f3.new));
        let e = m.fetch(Duration::from_secs(5)).unwrap_err();
        assert!(format!("{e}").contains("fetch from"), "{e}");
        assert_eq!(m.tip(), Some(f3.new));
    }
}
