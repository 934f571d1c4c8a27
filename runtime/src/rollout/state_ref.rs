//! The rollout state on a git ref: `rollout.json` at the root of `refs/heads/fwc-rollout` of the
//! rule repository. The controller fetches the branch and the rollout ref in one fetch (into a
//! throw-away bare repository), writes each transition as one commit whose parent is the previous
//! state commit (signed when asked), and pushes it WITHOUT force: the fast-forward-only push is
//! the compare-and-swap that serialises concurrent controllers (on local repositories a
//! `git push --force-with-lease` naming the state it was decided from).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use fwc_artifacts::rollout::{RolloutState, ROLLOUT_STATE_FILE};
use fwc_compiler::diag::Diagnostics;
use fwc_compiler::read::source::SourceTree;
use git2::{Oid, Repository};

use super::RolloutError;

/// How state commits are signed (so agents that require signed commits accept them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// `ssh-keygen -Y sign -n git -f KEY` (a private key, or a public key whose private half the
    /// ssh-agent holds), as `git commit -S` with `gpg.format=ssh`.
    Ssh(PathBuf),
    /// `gpg --detach-sign --armor -u KEY` with the keyring in `home` (None: GNUPGHOME or
    /// ~/.gnupg, as gpg itself finds it).
    Gpg { key: String, home: Option<PathBuf> },
}

/// What one fetch found.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The tip of the rule branch.
    pub tip: Oid,
    /// The tip of the rollout branch (None before the first rollout).
    pub state_commit: Option<Oid>,
    pub state: Option<RolloutState>,
}

/// How a push ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    Ok,
    /// Someone else moved the rollout ref first (the compare-and-swap lost): re-read, re-decide.
    Rejected(String),
}

/// One entry of the rollout branch's history.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HistoryEntry {
    pub id: String,
    pub time: String,
    pub author: String,
    pub message: String,
}

/// A throw-away bare clone of the branch and the rollout ref.
pub struct Remote {
    pub repo: Repository,
    _dir: tempfile::TempDir,
    pub url: String,
    pub branch: String,
    pub rollout_branch: String,
    ssh_key: Option<PathBuf>,
    known_hosts: PathBuf,
}

/// A `file://` URL or a local path (libgit2's local transport, which does not compare and swap).
fn is_local(url: &str) -> bool {
    url.starts_with("file://") || url.starts_with('/') || url.starts_with("./") || url.starts_with("../") || !url.contains(':')
}

/// Does a push's refusal say another writer moved the ref first (re-read and decide again)?
/// Only the words that say so; "failed to update ref" / "failed to lock" are [`ambiguous`].
fn lost_race(why: &str) -> bool {
    let m = why.to_ascii_lowercase();
    ["non-fast-forward", "fastforward", "fast-forward", "fetch first", "stale info", "reference already exists", "not present locally"].iter().any(|w| m.contains(w))
}

/// A refusal that may be a race or not: `git receive-pack` says "failed to update ref" (or
/// "failed to lock", "cannot lock") both for a ref that moved between its check and its lock
/// and for an update the server could not or would not make (an `update` hook, a permission,
/// a full disk). Only re-reading the remote ref tells them apart.
fn ambiguous(why: &str) -> bool {
    let m = why.to_ascii_lowercase();
    ["failed to update ref", "failed to lock", "cannot lock"].iter().any(|w| m.contains(w))
}

/// How a refused push is reported: a lost race (re-read, re-decide) or a refusal (an error
/// saying what the server said). `remote_now` is the rollout ref re-read after an ambiguous
/// refusal (`Some(None)`: it does not exist; `None`: it could not be read); `expected` is the
/// value the push was decided from. Pure.
pub fn push_verdict(why: &str, expected: Option<&str>, remote_now: Option<Option<&str>>) -> bool {
    if lost_race(why) {
        return true;
    }
    // Ambiguous: a race only if the ref really moved away from what the push expected.
    ambiguous(why) && remote_now.is_some_and(|now| now != expected)
}

/// The `remote:` lines of git's output (what a hook said).
fn remote_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("remote: ")).map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        "-".into()
    } else {
        lines.join("; ")
    }
}

fn git_err(what: impl Into<String>, e: git2::Error) -> RolloutError {
    RolloutError::new(format!("{}: {}", what.into(), e.message()), "check the --repo URL, your access to it and the network")
}

impl Remote {
    pub fn open(url: &str, branch: &str, rollout_branch: &str) -> Result<Remote, RolloutError> {
        let dir = tempfile::Builder::new().prefix("fwc-rollout-").tempdir().map_err(|e| RolloutError::new(format!("cannot create a temporary directory: {e}"), "check TMPDIR"))?;
        let repo = Repository::init_bare(dir.path()).map_err(|e| git_err("cannot create a temporary repository", e))?;
        let ssh_key = std::env::var_os("FWC_GIT_SSH_KEY").filter(|k| !k.is_empty()).map(PathBuf::from);
        let home = PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty()).unwrap_or_else(|| "/root".into()));
        let known_hosts = std::env::var_os("FWC_GIT_KNOWN_HOSTS").filter(|k| !k.is_empty()).map(PathBuf::from).unwrap_or_else(|| home.join(".ssh/known_hosts"));
        Ok(Remote { repo, _dir: dir, url: url.into(), branch: branch.into(), rollout_branch: rollout_branch.into(), ssh_key, known_hosts })
    }

    fn tracking(&self, branch: &str) -> String {
        format!("refs/remotes/origin/{branch}")
    }

    /// ssh host keys checked against known_hosts as the agent does; credentials as the agent's.
    fn callbacks<'a>(&'a self, refusal: &'a RefCell<Option<String>>, rejected: Option<&'a RefCell<Option<String>>>) -> git2::RemoteCallbacks<'a> {
        let port = crate::agent::git::ssh_port(&self.url);
        let mut cb = git2::RemoteCallbacks::new();
        cb.credentials(|url, user, allowed| crate::agent::git::credentials(url, user, allowed, self.ssh_key.as_deref()));
        cb.certificate_check(move |cert, host| {
            let Some(blob) = cert.as_hostkey().and_then(|hk| hk.hostkey()) else {
                return Ok(git2::CertificateCheckStatus::CertificatePassthrough);
            };
            crate::agent::git::check_host_key(&self.known_hosts, host, port, blob).map(|()| git2::CertificateCheckStatus::CertificateOk).map_err(|msg| {
                *refusal.borrow_mut() = Some(msg.clone());
                git2::Error::new(git2::ErrorCode::Certificate, git2::ErrorClass::Ssh, msg)
            })
        });
        if let Some(rej) = rejected {
            cb.push_update_reference(move |_name, status| {
                if let Some(s) = status {
                    *rej.borrow_mut() = Some(s.to_string());
                }
                Ok(())
            });
        }
        cb
    }

    /// Fetch the branch and the rollout ref (one fetch, two refspecs) and read the state.
    pub fn fetch(&self) -> Result<Snapshot, RolloutError> {
        let refusal = RefCell::new(None);
        let mut fo = git2::FetchOptions::new();
        fo.remote_callbacks(self.callbacks(&refusal, None));
        fo.download_tags(git2::AutotagOption::None);
        let specs = [
            format!("+refs/heads/{b}:{}", self.tracking(&self.branch), b = self.branch),
            format!("+refs/heads/{b}:{}", self.tracking(&self.rollout_branch), b = self.rollout_branch),
        ];
        let mut remote = self.repo.remote_anonymous(&self.url).map_err(|e| git_err(format!("bad repository URL {}", self.url), e))?;
        remote.fetch(&specs, Some(&mut fo), None).map_err(|e| match refusal.borrow_mut().take() {
            Some(why) => RolloutError::new(format!("fetch from {} refused: {why}", self.url), "add the server's host key to known_hosts (FWC_GIT_KNOWN_HOSTS)"),
            None => git_err(format!("fetch from {} failed", self.url), e),
        })?;
        let tip = self.repo.refname_to_id(&self.tracking(&self.branch)).map_err(|_| {
            RolloutError::new(format!("branch {} does not exist in {}", self.branch, self.url), "name the rule branch with --branch (default main)")
        })?;
        let state_commit = self.repo.refname_to_id(&self.tracking(&self.rollout_branch)).ok();
        let state = match state_commit {
            Some(id) => Some(self.read_state(id)?),
            None => None,
        };
        Ok(Snapshot { tip, state_commit, state })
    }

    /// `rollout.json` of the state commit `id`.
    pub fn read_state(&self, id: Oid) -> Result<RolloutState, RolloutError> {
        let where_ = format!("{ROLLOUT_STATE_FILE} of {} ({id})", self.rollout_branch);
        let fix = format!("the rollout branch must hold only commits made by `fwc rollout`; inspect it with `git log -p {}`", self.rollout_branch);
        let commit = self.repo.find_commit(id).map_err(|e| git_err(format!("cannot read {where_}"), e))?;
        let tree = commit.tree().map_err(|e| git_err(format!("cannot read {where_}"), e))?;
        let entry = tree.get_name(ROLLOUT_STATE_FILE).ok_or_else(|| RolloutError::new(format!("{where_} is missing"), fix.clone()))?;
        let blob = self.repo.find_blob(entry.id()).map_err(|e| git_err(format!("cannot read {where_}"), e))?;
        serde_json::from_slice(blob.content()).map_err(|e| RolloutError::new(format!("{where_} is not a rollout state: {e}"), fix))
    }

    /// Resolve a commit name (full or abbreviated hex, or a ref of the fetched branch).
    pub fn resolve(&self, rev: &str) -> Result<Oid, RolloutError> {
        let obj = self
            .repo
            .revparse_single(rev)
            .or_else(|_| self.repo.revparse_single(&self.tracking(rev)))
            .map_err(|_| RolloutError::new(format!("commit {rev:?} is not in branch {} of {}", self.branch, self.url), "name a commit of the branch (full or abbreviated hash); push it first"))?;
        let c = obj.peel_to_commit().map_err(|e| git_err(format!("{rev} is not a commit"), e))?;
        let tip = self.repo.refname_to_id(&self.tracking(&self.branch)).ok();
        if tip.is_some_and(|t| t != c.id() && !self.repo.graph_descendant_of(t, c.id()).unwrap_or(false)) {
            return Err(RolloutError::new(format!("commit {} is not on branch {}", c.id(), self.branch), "roll out commits of the branch agents fetch (--branch)"));
        }
        Ok(c.id())
    }

    /// The rule files of commit `id`.
    pub fn source_tree(&self, id: Oid) -> Result<SourceTree, Diagnostics> {
        crate::agent::git::source_tree(&self.repo, id)
    }

    /// Write `state` as a commit on top of `parent` (the state commit it was decided from).
    pub fn write(&self, parent: Option<Oid>, state: &RolloutState, message: &str, signer: Option<&Signer>) -> Result<Oid, RolloutError> {
        let mut json = serde_json::to_string_pretty(state).expect("state serialises");
        json.push('\n');
        let blob = self.repo.blob(json.as_bytes()).map_err(|e| git_err("cannot write the state", e))?;
        let mut tb = self.repo.treebuilder(None).map_err(|e| git_err("cannot write the state", e))?;
        tb.insert(ROLLOUT_STATE_FILE, blob, 0o100644).map_err(|e| git_err("cannot write the state", e))?;
        let tree = self.repo.find_tree(tb.write().map_err(|e| git_err("cannot write the state", e))?).map_err(|e| git_err("cannot write the state", e))?;
        let parents: Vec<git2::Commit> = parent.map(|p| self.repo.find_commit(p)).transpose().map_err(|e| git_err("cannot read the previous state", e))?.into_iter().collect();
        let parent_refs: Vec<&git2::Commit> = parents.iter().collect();
        let who = identity();
        let buf = self.repo.commit_create_buffer(&who, &who, message, &tree, &parent_refs).map_err(|e| git_err("cannot write the state commit", e))?;
        let text = buf.as_str().ok_or_else(|| RolloutError::new("the state commit is not UTF-8", "use a UTF-8 --reason"))?.to_string();
        let id = match signer {
            None => {
                // Same object as commit_signed without a signature.
                self.repo.odb().and_then(|o| o.write(git2::ObjectType::Commit, text.as_bytes())).map_err(|e| git_err("cannot write the state commit", e))?
            }
            Some(s) => {
                let sig = sign(s, text.as_bytes())?;
                self.repo.commit_signed(&text, &sig, None).map_err(|e| git_err("cannot write the signed state commit", e))?
            }
        };
        Ok(id)
    }

    /// Push `id` to the rollout branch, fast-forward only: a compare-and-swap whose expected
    /// old value is `id`'s parent (the state it was decided from; none for a first state).
    /// On `file://` URLs and local paths `git push --force-with-lease` does it (libgit2's local
    /// transport would force-create the ref: last writer wins); elsewhere the server refuses a
    /// push that is not a fast-forward. A refusal that is not a lost race (a hook, a
    /// permission) is an error saying so, never retried.
    pub fn push(&self, id: Oid) -> Result<Pushed, RolloutError> {
        let local = "refs/fwc/rollout-next";
        self.repo.reference(local, id, true, "fwc rollout").map_err(|e| git_err("cannot prepare the push", e))?;
        if is_local(&self.url) {
            let expected = self.repo.find_commit(id).ok().and_then(|c| c.parent_id(0).ok());
            return self.push_local(local, expected);
        }
        let refusal = RefCell::new(None);
        let rejected = RefCell::new(None);
        let mut po = git2::PushOptions::new();
        po.remote_callbacks(self.callbacks(&refusal, Some(&rejected)));
        let mut remote = self.repo.remote_anonymous(&self.url).map_err(|e| git_err("bad repository URL", e))?;
        let spec = format!("{local}:refs/heads/{}", self.rollout_branch);
        match remote.push(&[spec.as_str()], Some(&mut po)) {
            Ok(()) => {}
            Err(e) => {
                if e.code() == git2::ErrorCode::NotFastForward || self.lost(e.message(), id) {
                    return Ok(Pushed::Rejected(e.message().to_string()));
                }
                return Err(match refusal.borrow_mut().take() {
                    Some(why) => RolloutError::new(format!("push to {} refused: {why}", self.url), "add the server's host key to known_hosts (FWC_GIT_KNOWN_HOSTS)"),
                    None => self.refused(e.message()),
                });
            }
        }
        let rejected = rejected.borrow_mut().take();
        if let Some(why) = rejected {
            return if self.lost(&why, id) { Ok(Pushed::Rejected(why)) } else { Err(self.refused(&why)) };
        }
        Ok(Pushed::Ok)
    }

    /// Is the refusal `why` of the push of `id` a lost race ([`push_verdict`]; an ambiguous one
    /// re-reads the remote ref)?
    fn lost(&self, why: &str, id: Oid) -> bool {
        let expected = self.repo.find_commit(id).ok().and_then(|c| c.parent_id(0).ok()).map(|o| o.to_string());
        let now = if ambiguous(why) && !lost_race(why) { self.remote_ref() } else { None };
        push_verdict(why, expected.as_deref(), now.as_ref().map(|o| o.as_deref()))
    }

    /// The rollout ref as the remote has it now (`ls-remote`): Some(None) when it does not
    /// exist, None when the remote cannot be read.
    fn remote_ref(&self) -> Option<Option<String>> {
        let refusal = RefCell::new(None);
        let mut remote = self.repo.remote_anonymous(&self.url).ok()?;
        let conn = remote.connect_auth(git2::Direction::Fetch, Some(self.callbacks(&refusal, None)), None).ok()?;
        let want = format!("refs/heads/{}", self.rollout_branch);
        let heads = conn.list().ok()?;
        Some(heads.iter().find(|h| h.name() == want).map(|h| h.oid().to_string()))
    }

    fn refused(&self, why: &str) -> RolloutError {
        RolloutError::new(
            format!("push of the rollout state to {} refused: {why}", self.url),
            format!("not a lost race: the server refused the update (a hook, a protected branch, a permission). The controller needs push access to refs/heads/{} (and only there; protect the rule branch)", self.rollout_branch),
        )
    }

    /// [`Self::push`] on a local repository: `git push --force-with-lease` (the receiving side
    /// updates the ref under its lock only if it still has the expected value; hooks run).
    fn push_local(&self, local: &str, expected: Option<Oid>) -> Result<Pushed, RolloutError> {
        let dst = format!("refs/heads/{}", self.rollout_branch);
        let lease = format!("--force-with-lease={dst}:{}", expected.map(|o| o.to_string()).unwrap_or_default());
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.repo.path())
            .args(["push", "--porcelain", "--quiet", &lease, &self.url, &format!("{local}:{dst}")])
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .map_err(|e| RolloutError::new(format!("cannot run git to push to {}: {e}", self.url), "install git: the controller pushes to file:// and local repositories with it"))?;
        if out.status.success() {
            return Ok(Pushed::Ok);
        }
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // Porcelain: "!<TAB>from:to<TAB>[rejected] (stale info)" for a lost lease.
        let line = text.lines().find(|l| l.starts_with('!')).map(|l| l.split('\t').next_back().unwrap_or(l).to_string());
        let moved = || {
            let now = if ambiguous(&text) { self.remote_ref() } else { None };
            push_verdict(&text, expected.map(|o| o.to_string()).as_deref(), now.as_ref().map(|o| o.as_deref()))
        };
        match line {
            Some(why) if lost_race(&why) || moved() => Ok(Pushed::Rejected(why)),
            Some(why) => Err(self.refused(&format!("{why}: {}", remote_lines(&text)))),
            None => Err(self.refused(text.trim())),
        }
    }

    /// The rollout branch's latest `n` commits, newest first.
    pub fn history(&self, from: Option<Oid>, n: usize) -> Vec<HistoryEntry> {
        let mut out = vec![];
        let mut next = from;
        while let Some(id) = next {
            let Ok(c) = self.repo.find_commit(id) else { break };
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.time().seconds().max(0) as u64);
            out.push(HistoryEntry {
                id: id.to_string(),
                time: super::controller::rfc3339(when),
                author: c.author().name().unwrap_or("?").to_string(),
                message: c.message().unwrap_or("").trim().to_string(),
            });
            if out.len() >= n {
                break;
            }
            next = c.parent_id(0).ok();
        }
        out
    }
}

/// Author and committer of state commits: git's user.name/user.email when configured (so the
/// history says who paused or halted), else `fwc rollout`.
fn identity() -> git2::Signature<'static> {
    let cfg = git2::Config::open_default().ok();
    let get = |k: &str| cfg.as_ref().and_then(|c| c.get_string(k).ok()).filter(|v| !v.is_empty());
    let name = std::env::var("FWC_ROLLOUT_AUTHOR_NAME").ok().or_else(|| get("user.name")).unwrap_or_else(|| "fwc rollout".into());
    let email = std::env::var("FWC_ROLLOUT_AUTHOR_EMAIL").ok().or_else(|| get("user.email")).unwrap_or_else(|| "fwc-rollout@localhost".into());
    git2::Signature::now(&name, &email).unwrap_or_else(|_| git2::Signature::now("fwc rollout", "fwc-rollout@localhost").expect("static identity"))
}

/// Sign a commit buffer as git does (`gpgsig` header content).
pub fn sign(signer: &Signer, payload: &[u8]) -> Result<String, RolloutError> {
    let (mut cmd, what) = match signer {
        Signer::Ssh(key) => {
            let mut c = Command::new("ssh-keygen");
            c.args(["-Y", "sign", "-n", "git", "-f"]).arg(key);
            (c, format!("ssh key {}", key.display()))
        }
        Signer::Gpg { key, home } => {
            let mut c = Command::new("gpg");
            if let Some(h) = home {
                c.env("GNUPGHOME", h);
            }
            c.args(["--batch", "--no-tty", "--detach-sign", "--armor", "-u", key]);
            (c, format!("gpg key {key}"))
        }
    };
    let out = crate::agent::verify::run_with_stdin(&mut cmd, payload).map_err(|e| {
        RolloutError::new(format!("cannot sign the state commit with the {what}: {e}"), "install openssh-client (ssh keys) or gnupg (gpg keys)")
    })?;
    let sig = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() || sig.trim().is_empty() {
        return Err(RolloutError::new(
            format!("cannot sign the state commit with the {what}: {}", String::from_utf8_lossy(&out.stderr).trim()),
            "--sign-key takes an ssh private key without a passphrase, or a public key whose private key the ssh-agent holds; --gpg-sign-key a key id in GNUPGHOME",
        ));
    }
    Ok(sig)
}

/// Is `path` usable as an ssh signing key (exists)?
pub fn ssh_signer(path: &Path) -> Result<Signer, RolloutError> {
    if !path.exists() {
        return Err(RolloutError::new(format!("signing key {} does not exist", path.display()), "give --sign-key the path of an ssh private key (or of a public key held by the ssh-agent)"));
    }
    Ok(Signer::Ssh(path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_artifacts::rollout::{RolloutPhase, ROLLOUT_STATE_VERSION};

    fn sh(dir: &Path, line: &str) -> String {
        fwc_testkit::sh(&format!("cd '{}' && {line}", dir.display())).trim().to_string()
    }

    fn state(commit: &str, reason: &str) -> RolloutState {
        RolloutState {
            version: ROLLOUT_STATE_VERSION,
            branch: "main".into(),
            commit: commit.into(),
            stable: None,
            waves: vec!["all".into()],
            promoted: Some(0),
            phase: RolloutPhase::Progressing,
            rollback: false,
            reason: reason.into(),
            since: "2026-11-26T12:00:00Z".into(),
            promoted_at: None,
            generation: 1,
            predecessor: None,
            policy_commit: None,
            batch_below: None,
            resumed: None,
        }
    }

    /// A refusal is a lost race when it says so, or when it is ambiguous ("failed to update
    /// ref", as `git receive-pack` says over git:// for a ref that moved under its lock and for
    /// a hook or permission alike) and the remote ref really moved; otherwise it is reported as
    /// what the server said.
    #[test]
    fn a_refusal_is_a_race_only_when_the_ref_moved() {
        let (old, new) = ("1".repeat(40), "2".repeat(40));
        // (refusal, expected old value, the remote ref re-read, lost race?)
        let rows: &[(&str, Option<&str>, Option<Option<&str>>, bool)] = &[
            ("[rejected] (non-fast-forward)", Some(&old), None, true),
            ("[rejected] (fetch first)", Some(&old), None, true),
            ("[rejected] (stale info)", Some(&old), None, true),
            ("reference already exists", None, None, true),
            ("failed to update ref", Some(&old), Some(Some(&new)), true),
            ("failed to update ref", None, Some(Some(&new)), true),
            ("failed to update ref", Some(&old), Some(None), true),
            ("failed to update ref", Some(&old), Some(Some(&old)), false),
            ("failed to update ref", None, Some(None), false),
            ("failed to update ref", Some(&old), None, false),
            ("failed to lock", Some(&old), Some(Some(&old)), false),
            ("pre-receive hook declined", Some(&old), Some(Some(&new)), false),
            ("permission denied", Some(&old), None, false),
        ];
        for (why, expected, now, race) in rows {
            assert_eq!(push_verdict(why, *expected, *now), *race, "{why} expected {expected:?} remote now {now:?}");
        }
    }

    #[test]
    fn the_push_is_a_compare_and_swap_and_signed_states_verify() {
        if !fwc_testkit::which("git") || !fwc_testkit::which("ssh-keygen") {
            eprintln!("SKIP the_push_is_a_compare_and_swap_and_signed_states_verify: git or ssh-keygen missing");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        sh(p, "git init -q --bare r.git && git init -q -b main w && cd w && echo 'fwc 1' > fwc.kdl && git add . && git -c user.name=a -c user.email=a@b -c commit.gpgsign=false commit -qm one && git push -q ../r.git HEAD:main");
        let url = format!("file://{}/r.git", p.display());
        let (a, b) = (Remote::open(&url, "main", "fwc-rollout").unwrap(), Remote::open(&url, "main", "fwc-rollout").unwrap());
        let (sa, sb) = (a.fetch().unwrap(), b.fetch().unwrap());
        assert!(sa.state.is_none() && sa.state_commit.is_none());
        let tip = sa.tip.to_string();
        // Both decide on "no state" and race to create the ref: one wins.
        let ia = a.write(sa.state_commit, &state(&tip, "a"), "a\n", None).unwrap();
        let ib = b.write(sb.state_commit, &state(&tip, "b"), "b\n", None).unwrap();
        assert_eq!(a.push(ia).unwrap(), Pushed::Ok);
        assert!(matches!(b.push(ib).unwrap(), Pushed::Rejected(_)), "the second creation must lose");
        // The loser re-reads: it sees the winner's state and builds on it.
        let sb = b.fetch().unwrap();
        assert_eq!((sb.state_commit, sb.state.as_ref().map(|s| s.reason.as_str())), (Some(ia), Some("a")));
        let ib2 = b.write(sb.state_commit, &state(&tip, "b2"), "b2\n", None).unwrap();
        assert_eq!(b.push(ib2).unwrap(), Pushed::Ok);
        // A decision taken on the old state (parent ia) is now stale: rejected, not forced.
        let ia2 = a.write(Some(ia), &state(&tip, "a2"), "a2\n", None).unwrap();
        assert!(matches!(a.push(ia2).unwrap(), Pushed::Rejected(_)));
        assert_eq!(a.fetch().unwrap().state.unwrap().reason, "b2");
        let hist = a.history(Some(ib2), 10);
        assert_eq!(hist.iter().map(|h| h.message.as_str()).collect::<Vec<_>>(), ["b2", "a"]);

        // Signed with an ssh key: the agent's verification accepts it; a foreign key does not.
        sh(p, "ssh-keygen -q -t ed25519 -N '' -C ctl -f ctl && ssh-keygen -q -t ed25519 -N '' -C other -f other");
        sh(p, "printf 'rollout@example.com namespaces=\"git\" %s\\n' \"$(cat ctl.pub)\" > allowed");
        let s = a.fetch().unwrap();
        let signed = a.write(s.state_commit, &state(&tip, "signed"), "signed\n", Some(&Signer::Ssh(p.join("ctl")))).unwrap();
        assert_eq!(a.push(signed).unwrap(), Pushed::Ok);
        let pol = crate::agent::verify::SignaturePolicy { allowed_signers: Some(p.join("allowed")), gpg_home: None };
        let check = Remote::open(&url, "main", "fwc-rollout").unwrap();
        let snap = check.fetch().unwrap();
        assert_eq!(snap.state_commit, Some(signed));
        assert_eq!(crate::agent::verify::verify_commit(&check.repo, signed, &pol), Ok(Some("rollout@example.com".into())));
        let foreign = a.write(Some(signed), &state(&tip, "foreign"), "foreign\n", Some(&Signer::Ssh(p.join("other")))).unwrap();
        assert!(crate::agent::verify::verify_commit(&a.repo, foreign, &pol).is_err());
        assert_eq!(crate::agent::verify::verify_commit(&a.repo, ib2, &pol), Err(crate::agent::verify::Refusal::Unsigned));
        // git itself reads the state commit and the file.
        assert_eq!(sh(p, "git -C r.git show fwc-rollout:rollout.json").contains("\"reason\": \"signed\""), true);
        // GnuPG: signed with a key of one keyring, verified against a keyring holding only its
        // public half, as an agent with --gpg-home does.
        if fwc_testkit::which("gpg") && fwc_testkit::which("gpgconf") {
            let (signer, trusted) = (p.join("gpg-signer"), p.join("gpg-trusted"));
            struct Agents(Vec<PathBuf>);
            impl Drop for Agents {
                fn drop(&mut self) {
                    for h in &self.0 {
                        let _ = Command::new("gpgconf").arg("--homedir").arg(h).args(["--kill", "all"]).output();
                    }
                }
            }
            let _agents = Agents(vec![signer.clone(), trusted.clone()]);
            sh(p, "mkdir -m 700 gpg-signer gpg-trusted && GNUPGHOME=gpg-signer gpg --batch --quiet --passphrase '' --quick-gen-key 'rollout <r@example.com>' ed25519 sign never");
            sh(p, "GNUPGHOME=gpg-signer gpg --batch --export r@example.com | GNUPGHOME=gpg-trusted gpg --batch --quiet --import");
            let gpg = Signer::Gpg { key: "r@example.com".into(), home: Some(signer.clone()) };
            let id = a.write(Some(signed), &state(&tip, "gpg"), "gpg\n", Some(&gpg)).unwrap();
            let pol = crate::agent::verify::SignaturePolicy { allowed_signers: None, gpg_home: Some(trusted.clone()) };
            let who = crate::agent::verify::verify_commit(&a.repo, id, &pol).unwrap().unwrap();
            assert!(who.contains("r@example.com"), "{who}");
        } else {
            eprintln!("SKIP (gpg part): gpg or gpgconf missing");
        }
        // A missing key is a clear error.
        let e = ssh_signer(&p.join("nope")).unwrap_err();
        assert!(e.what.contains("does not exist"), "{e}");
    }
}
