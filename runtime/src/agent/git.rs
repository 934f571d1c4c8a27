//! The agent's view of the rule repository: a bare mirror inside the state dir
//! (`<state-dir>/mirror.git`), fetched with a deadline, and commits read straight from its
//! object database (no work tree is ever checked out).
//!
//! One fetch brings two refs: `+refs/heads/<branch>:refs/remotes/origin/<branch>` and the
//! fleet rollout state, `+refs/heads/fwc-rollout:refs/remotes/origin/fwc-rollout` (absent in a
//! repository without rollouts; then only the branch moves). The `+` accepts non-fast-forward
//! updates: a force-push simply becomes the new desired state, and [`FetchOutcome::forced`]
//! tells the agent to say so in the audit log. Reading both from the same fetch means the agent
//! never pairs a tip with a state from another moment.
//!
//! ssh remotes: the server's host key must be listed in a known_hosts file
//! (`FWC_GIT_KNOWN_HOSTS`, default `~/.ssh/known_hosts` of the user running the agent); it is
//! looked up with `ssh-keygen -F` (hashed entries, `[host]:port`, `@revoked` work as in
//! OpenSSH). An unknown, changed or revoked key refuses the fetch with an error that names the
//! host, the key's fingerprint and what to do. Nothing is ever accepted or recorded silently.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use fwc_compiler::diag::{Diagnostic, Diagnostics};
use fwc_compiler::read::source::SourceTree;
use fwc_compiler::artifacts::rollout::{RolloutState, DEFAULT_ROLLOUT_BRANCH as ROLLOUT_BRANCH, ROLLOUT_STATE_FILE, ROLLOUT_STATE_VERSION};
use git2::{Oid, Repository};
use miette::{miette, IntoDiagnostic, Result, WrapErr};

use super::refs_poll::{self, Got, PollFacts, PollStep, RefsPoll};

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
    /// The rollout ref's commit before and after the fetch (None: absent).
    pub rollout_old: Option<Oid>,
    pub rollout_new: Option<Oid>,
}

impl FetchOutcome {
    /// The branch tip or the rollout state moved.
    pub fn changed(&self) -> bool {
        self.old != Some(self.new) || self.rollout_old != self.rollout_new
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
    /// ssh: the private key to authenticate with (`FWC_GIT_SSH_KEY`); None tries the
    /// ssh-agent, then `~/.ssh/id_ed25519|id_ecdsa|id_rsa`.
    pub ssh_key: Option<PathBuf>,
    /// ssh: the known_hosts file the server's host key must be in (`FWC_GIT_KNOWN_HOSTS`,
    /// default `~/.ssh/known_hosts`).
    pub known_hosts: PathBuf,
    /// Cheap polls: read the refs from a static `info/refs` first and fetch only when a
    /// followed ref moved (`fwc agent --refs-url`; see [`super::refs_poll`]).
    pub refs_poll: Option<RefsPoll>,
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
        super::git_zlib::linked();
        crate::repo::check_ids_in_fwc();
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
        let ssh_key = std::env::var_os("FWC_GIT_SSH_KEY").filter(|k| !k.is_empty()).map(PathBuf::from);
        let known_hosts = std::env::var_os("FWC_GIT_KNOWN_HOSTS")
            .filter(|k| !k.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir().join(".ssh").join("known_hosts"));
        Ok(Mirror { repo, path, url: url.to_string(), branch: branch.to_string(), ssh_key, known_hosts, refs_poll: None })
    }

    fn tracking_ref(&self) -> String {
        format!("refs/remotes/origin/{}", self.branch)
    }

    /// The branch tip as last fetched.
    pub fn tip(&self) -> Option<Oid> {
        self.repo.refname_to_id(&self.tracking_ref()).ok()
    }

    /// The commit of the rollout ref as last fetched (None: the remote has none).
    pub fn rollout_tip(&self) -> Option<Oid> {
        self.repo.refname_to_id(&format!("refs/remotes/origin/{ROLLOUT_BRANCH}")).ok()
    }

    /// `rollout.json` of rollout-state commit `id`, parsed.
    pub fn rollout_state(&self, id: Oid) -> std::result::Result<RolloutState, String> {
        let commit = self.repo.find_commit(id).map_err(|e| format!("rollout commit {id}: {}", e.message()))?;
        let tree = commit.tree().map_err(|e| e.message().to_string())?;
        let entry = tree.get_name(ROLLOUT_STATE_FILE).ok_or_else(|| format!("the rollout commit {id} has no {ROLLOUT_STATE_FILE}"))?;
        let (size, _) = self.repo.odb().and_then(|db| db.read_header(entry.id())).map_err(|e| format!("{ROLLOUT_STATE_FILE}: {}", e.message()))?;
        if size > 1 << 20 {
            return Err(format!("{ROLLOUT_STATE_FILE} of {id} is larger than 1 MiB"));
        }
        let blob = match crate::repo::read_checked(&self.repo, entry.id()).map_err(|e| format!("{ROLLOUT_STATE_FILE}: {e}"))? {
            (git2::ObjectType::Blob, data) => data,
            (kind, _) => return Err(format!("{ROLLOUT_STATE_FILE} of {id} is a {kind}, not a file")),
        };
        let state: RolloutState = serde_json::from_slice(&blob).map_err(|e| format!("{ROLLOUT_STATE_FILE} of {id}: {e}"))?;
        if state.version != ROLLOUT_STATE_VERSION {
            return Err(format!("{ROLLOUT_STATE_FILE} of {id} has version {}, this fwc reads {ROLLOUT_STATE_VERSION}", state.version));
        }
        Ok(state)
    }

    /// The refs this mirror follows, with the commit it holds for each.
    fn followed(&self) -> [(String, Option<String>); 2] {
        [
            (format!("refs/heads/{}", self.branch), self.tip().map(|o| o.to_string())),
            (format!("refs/heads/{ROLLOUT_BRANCH}"), self.rollout_tip().map(|o| o.to_string())),
        ]
    }

    /// One poll: with a refs file ([`Mirror::refs_poll`]) a git fetch only when a followed ref
    /// moved (or the periodic full fetch is due); without one, a git fetch. Fails after
    /// `timeout` or when the branch is missing.
    pub fn fetch(&self, timeout: Duration) -> Result<FetchOutcome> {
        let Some(poll) = &self.refs_poll else { return self.fetch_git(timeout) };
        let got = poll.get(timeout);
        let refs = match &got {
            Got::Refs(r) => Some(r),
            Got::Failed(why) => {
                tracing::warn!("refs file {why}; fetching with git");
                None
            }
        };
        let followed = self.followed();
        let followed: Vec<(&str, Option<String>)> = followed.iter().map(|(n, o)| (n.as_str(), o.clone())).collect();
        let facts = PollFacts { refs, followed: &followed, polls_since_full: poll.polls_since_full(), full_every: poll.full_every };
        let reason = match refs_poll::decide(&facts) {
            PollStep::Skip => {
                poll.polled(false);
                let (tip, rollout) = (self.tip().ok_or_else(|| miette!("branch {} was never fetched", self.branch))?, self.rollout_tip());
                return Ok(FetchOutcome { old: Some(tip), new: tip, forced: false, rollout_old: rollout, rollout_new: rollout });
            }
            PollStep::Fetch(reason) => reason,
        };
        let out = self.fetch_git(timeout)?;
        poll.polled(true);
        let found = self.followed();
        let found: Vec<(&str, Option<String>)> = found.iter().map(|(n, o)| (n.as_str(), o.clone())).collect();
        if poll.check_stale(&reason, &found) {
            tracing::warn!(
                "the refs file {} is stale: a full fetch found refs it did not list (is `git update-server-info` in the repository's post-update hook, or does a cache keep an old copy?)",
                poll.url
            );
        }
        Ok(out)
    }

    /// Fetch the branch and the rollout ref with git.
    fn fetch_git(&self, timeout: Duration) -> Result<FetchOutcome> {
        let old = self.tip();
        let rollout_old = self.rollout_tip();
        let deadline = Instant::now() + timeout;
        // ssh: the host key must be in known_hosts (libgit2 alone only consults
        // ~/.ssh/known_hosts and says "invalid or unknown remote ssh hostkey"). libgit2
        // replaces the callback's error message with that text, so the reason is kept here.
        let refusal: RefCell<Option<String>> = RefCell::new(None);
        let port = ssh_port(&self.url);
        let mut cb = git2::RemoteCallbacks::new();
        cb.transfer_progress(move |_| Instant::now() < deadline);
        cb.sideband_progress(move |_| Instant::now() < deadline);
        cb.credentials(|url, user, allowed| credentials(url, user, allowed, self.ssh_key.as_deref()));
        cb.certificate_check(|cert, host| {
            let Some(hk) = cert.as_hostkey() else {
                // TLS (https): libgit2's own certificate verification decides.
                return Ok(git2::CertificateCheckStatus::CertificatePassthrough);
            };
            let Some(blob) = hk.hostkey() else {
                let msg = format!("ssh host key of {host}: the server's key could not be read; refusing");
                *refusal.borrow_mut() = Some(msg.clone());
                return Err(git2::Error::new(git2::ErrorCode::Certificate, git2::ErrorClass::Ssh, msg));
            };
            match check_host_key(&self.known_hosts, host, port, blob) {
                Ok(()) => Ok(git2::CertificateCheckStatus::CertificateOk),
                Err(msg) => {
                    *refusal.borrow_mut() = Some(msg.clone());
                    Err(git2::Error::new(git2::ErrorCode::Certificate, git2::ErrorClass::Ssh, msg))
                }
            }
        });
        let mut fo = git2::FetchOptions::new();
        fo.remote_callbacks(cb);
        fo.download_tags(git2::AutotagOption::None);
        fo.prune(git2::FetchPrune::Off);
        let mut remote = self.repo.remote_anonymous(&self.url).into_diagnostic()?;
        // FETCH_HEAD says which of the two refs this fetch found on the remote; libgit2 leaves
        // it as it was when nothing matched, so an old one must not speak for this fetch.
        let fetch_head = self.repo.path().join("FETCH_HEAD");
        match std::fs::remove_file(&fetch_head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(miette!("cannot remove {}: {e}", fetch_head.display())),
        }
        let (spec, rollout) = (refspec(&self.branch), refspec(ROLLOUT_BRANCH));
        remote
            .fetch(&[spec.as_str(), rollout.as_str()], Some(&mut fo), Some("fwc agent fetch"))
            .map_err(|e| {
                if let Some(why) = refusal.borrow_mut().take() {
                    miette!("fetch from {} refused: {why}", self.url)
                } else if Instant::now() >= deadline {
                    miette!("fetch from {} timed out after {:?}", self.url, timeout)
                } else if e.class() == git2::ErrorClass::Ssh && e.code() == git2::ErrorCode::Auth {
                    let key = match &self.ssh_key {
                        Some(k) => format!("the key FWC_GIT_SSH_KEY={}", k.display()),
                        None => "the ssh-agent's keys or ~/.ssh/id_ed25519|id_ecdsa|id_rsa".to_string(),
                    };
                    miette!("fetch from {} failed: {} (the server did not accept {key})", self.url, e.message())
                } else {
                    miette!("fetch from {} failed: {}", self.url, e.message())
                }
            })?;
        // The rollout ref deleted on the remote is deleted here too (the agent then holds with
        // `state_missing`, never follows a stale or absent state as if nothing happened). The
        // fetch wrote FETCH_HEAD with the refs it found. (Not `Remote::list`: git2 0.20 builds a
        // slice from libgit2's null pointer when the remote has no refs at all, which is
        // undefined behaviour and aborts debug builds.)
        let rollout_ref = format!("refs/heads/{ROLLOUT_BRANCH}");
        let mut advertised = false;
        // No FETCH_HEAD: the remote had neither ref.
        let _ = self.repo.fetchhead_foreach(|name, _, _, _| {
            advertised |= name == rollout_ref;
            true
        });
        if !advertised {
            if let Ok(mut r) = self.repo.find_reference(&format!("refs/remotes/origin/{ROLLOUT_BRANCH}")) {
                tracing::warn!("the rollout ref {rollout_ref} is gone from {}", self.url);
                r.delete().into_diagnostic()?;
            }
        }
        let new = self.tip().ok_or_else(|| miette!("branch {} does not exist in {}", self.branch, self.url))?;
        let forced = match old {
            Some(o) if o != new => !self.repo.graph_descendant_of(new, o).unwrap_or(false),
            _ => false,
        };
        Ok(FetchOutcome { old, new, forced, rollout_old, rollout_new: self.rollout_tip() })
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
    pub fn source_tree(&self, id: Oid) -> std::result::Result<SourceTree, Diagnostics> {
        source_tree(&self.repo, id)
    }
}

fn refspec(branch: &str) -> String {
    format!("+refs/heads/{branch}:refs/remotes/origin/{branch}")
}

fn home_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty()).unwrap_or_else(|| "/root".into()))
}

/// ssh: `FWC_GIT_SSH_KEY` when set, else the ssh-agent, then `~/.ssh/id_ed25519|id_ecdsa|id_rsa`
/// of the user running the agent; https: `FWC_GIT_USERNAME` / `FWC_GIT_PASSWORD` (a token).
pub fn credentials(
    _url: &str,
    user: Option<&str>,
    allowed: git2::CredentialType,
    ssh_key: Option<&Path>,
) -> std::result::Result<git2::Cred, git2::Error> {
    if allowed.contains(git2::CredentialType::SSH_KEY) {
        let user = user.unwrap_or("git");
        if let Some(key) = ssh_key {
            return git2::Cred::ssh_key(user, None, key, None);
        }
        if let Ok(c) = git2::Cred::ssh_key_from_agent(user) {
            return Ok(c);
        }
        for k in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            let p = home_dir().join(".ssh").join(k);
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

/// The ssh port of a remote URL: `ssh://[user@]host[:port]/path` (also `ssh+git://`,
/// `git+ssh://`, `[v6addr]:port`); 22 for scp-like `[user@]host:path` and anything else.
pub fn ssh_port(url: &str) -> u16 {
    let Some(rest) = ["ssh://", "ssh+git://", "git+ssh://"].iter().find_map(|s| url.strip_prefix(s)) else {
        return 22;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = if hostport.starts_with('[') {
        hostport.split_once("]:").map(|(_, p)| p)
    } else {
        hostport.rsplit_once(':').map(|(_, p)| p)
    };
    port.and_then(|p| p.parse().ok()).unwrap_or(22)
}

/// The name of `host` in known_hosts: `host` on port 22, `[host]:port` otherwise.
pub fn known_hosts_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// OpenSSH's fingerprint of a host key blob (`SHA256:` + unpadded base64 of its SHA-256).
pub fn ssh_fingerprint(blob: &[u8]) -> String {
    use sha2::Digest;
    format!("SHA256:{}", base64(&sha2::Sha256::digest(blob)).trim_end_matches('='))
}

/// The key type written inside an ssh public key blob (`ssh-ed25519`, `ssh-rsa`, ...).
fn blob_key_type(blob: &[u8]) -> Option<&str> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    std::str::from_utf8(blob.get(4..4 + len)?).ok()
}

/// Standard base64 with padding (the base64 crate), as OpenSSH writes keys.
fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Is the host key `blob` that `host`:`port` presented listed for it in `known_hosts`?
/// Err is the operator-facing reason for refusing (unknown, changed, revoked).
pub fn check_host_key(known_hosts: &Path, host: &str, port: u16, blob: &[u8]) -> std::result::Result<(), String> {
    let name = known_hosts_name(host, port);
    let fp = ssh_fingerprint(blob);
    let ktype = blob_key_type(blob).unwrap_or("unknown");
    let key = base64(blob);
    let file = known_hosts.display();
    let p = if port == 22 { String::new() } else { format!("-p {port} ") };
    let short = match ktype {
        "ssh-rsa" => "rsa",
        "ssh-dss" => "dsa",
        t if t.starts_with("ecdsa-sha2-") => "ecdsa",
        t => t.strip_prefix("ssh-").unwrap_or(t),
    };
    let add = format!(
        "if {fp} is the server's host key (on the server: `ssh-keygen -lf /etc/ssh/ssh_host_{short}_key.pub`), add it with \
         `ssh-keyscan {p}-t {short} {host} >> {file}` (or point FWC_GIT_KNOWN_HOSTS at a known_hosts file that lists it)"
    );
    if !known_hosts.exists() {
        return Err(format!("ssh host key of {name} is not known: the server presented {ktype} key {fp}, and there is no known_hosts file {file}; {add}"));
    }
    let out = Command::new("ssh-keygen")
        .arg("-F")
        .arg(&name)
        .arg("-f")
        .arg(known_hosts)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ssh host key of {name}: cannot run ssh-keygen to read {file}: {e}; refusing"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 0: found, 1: not found, anything else: the file cannot be read.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(format!(
            "ssh host key of {name}: cannot read {file} (ssh-keygen -F: {}); refusing",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut same_type_other_key = false;
    let mut other_types = Vec::new();
    let mut matched = false;
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        let (marker, t, k) = if first.starts_with('@') {
            (first, f.nth(1).unwrap_or(""), f.next().unwrap_or(""))
        } else {
            ("", f.next().unwrap_or(""), f.next().unwrap_or(""))
        };
        match marker {
            "@revoked" if k == key => {
                return Err(format!(
                    "ssh host key of {name} is REVOKED in {file}: the server presented {ktype} key {fp}, which is marked @revoked; refusing"
                ))
            }
            "" if k == key => matched = true,
            "" if t == ktype => same_type_other_key = true,
            "" => other_types.push(t.to_string()),
            _ => {} // @cert-authority: host certificates are not supported by libgit2's ssh
        }
    }
    if matched {
        return Ok(());
    }
    if same_type_other_key {
        return Err(format!(
            "ssh host key of {name} CHANGED: the server presented {ktype} key {fp}, but {file} lists a different {ktype} key for {name}. \
             This can be a man-in-the-middle attack; nothing was fetched. If the server's key was really replaced, \
             remove the old entry (`ssh-keygen -R '{name}' -f {file}`) and then, {add}"
        ));
    }
    if !other_types.is_empty() {
        return Err(format!(
            "ssh host key of {name} is not known: the server presented {ktype} key {fp}, but {file} only lists {} key(s) for {name}; {add}",
            other_types.join(", ")
        ));
    }
    Err(format!("ssh host key of {name} is not known: the server presented {ktype} key {fp}, and {file} has no entry for {name}; {add}"))
}

/// Every rule file (`fwc.kdl`, `rules/**/*.kdl{,.j2}`, `lists/**`, `tests/**/*.kdl`) of
/// commit `id`, straight from the object database, as a compiler source tree; or why not (a
/// symlink leaving the repository, a limit, a file that is not UTF-8).
pub fn source_tree(repo: &Repository, id: Oid) -> std::result::Result<SourceTree, Diagnostics> {
    let commit = repo
        .find_commit(id)
        .map_err(|_| Diagnostics::single(Diagnostic::error("git", format!("commit {id} is not in the mirror"))))?;
    crate::repo::source_tree_at(repo, &commit, Path::new(""))
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
    fn ssh_url_ports_names_and_fingerprints() {
        assert_eq!(ssh_port("ssh://git@git.example.com:2222/net/rules.git"), 2222);
        assert_eq!(ssh_port("ssh://git.example.com/net/rules.git"), 22);
        assert_eq!(ssh_port("ssh://user@[2001:db8::1]:2200/r.git"), 2200);
        assert_eq!(ssh_port("ssh://[2001:db8::1]/r.git"), 22);
        assert_eq!(ssh_port("git+ssh://h:23/r.git"), 23);
        assert_eq!(ssh_port("git@git.example.com:net/rules.git"), 22);
        assert_eq!(ssh_port("https://git.example.com:8443/r.git"), 22);
        assert_eq!(known_hosts_name("h", 22), "h");
        assert_eq!(known_hosts_name("h", 2222), "[h]:2222");
        for (i, o) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")] {
            assert_eq!(base64(i.as_bytes()), o);
        }
        // The blob of an ssh-ed25519 key, as in `ssh-ed25519 AAAA…` (OpenSSH's fingerprint).
        let b64 = "AAAAC3NzaC1lZDI1NTE5AAAAIGUVNj8s+NR/BZ8Tym/hY1q4NIRC8Wm/qD0cJSQW/avR";
        let blob: Vec<u8> = {
            let val = |c: u8| b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".iter().position(|x| *x == c).unwrap() as u32;
            let mut out = Vec::new();
            for ch in b64.as_bytes().chunks(4) {
                let n = ch.iter().fold(0u32, |n, c| (n << 6) | val(*c)) << (6 * (4 - ch.len()));
                out.extend_from_slice(&n.to_be_bytes()[1..ch.len()]);
            }
            out
        };
        assert_eq!(base64(&blob).trim_end_matches('='), b64);
        assert_eq!(blob_key_type(&blob), Some("ssh-ed25519"));
        assert_eq!(ssh_fingerprint(&blob), "SHA256:rIDEYwnlZD5lbN7dYpYf465yxOSgmqe+c/MCmzLxqq4");
    }

    /// A static file server for `<bare>/info/refs` (ETag = the content's length and hash;
    /// `If-None-Match` answered with 304), counting its GETs.
    fn serve_info_refs(bare: PathBuf) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let gets = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let g = gets.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let mut r = std::io::BufReader::new(c.try_clone().unwrap());
                let mut inm = None;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("if-none-match:") {
                        inm = Some(v.trim().to_string());
                    }
                }
                g.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = std::fs::read(bare.join("info/refs")).unwrap_or_default();
                let etag = format!("\"{}-{}\"", body.len(), body.iter().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(*b as u64)));
                let mut c = c;
                if inm.as_deref() == Some(etag.as_str()) {
                    let _ = write!(c, "HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\nConnection: close\r\n\r\n");
                } else {
                    let _ = write!(c, "HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = c.write_all(&body);
                }
            }
        });
        (port, gets)
    }

    #[test]
    fn refs_file_polls_skip_git_until_a_followed_ref_moves_and_a_stale_file_costs_at_most_full_every_polls() {
        let tmp = tempfile::tempdir().unwrap();
        let (bare, work) = (tmp.path().join("rules.git"), tmp.path().join("work"));
        std::fs::create_dir_all(&work).unwrap();
        git(tmp.path(), &["init", "-q", "--bare", bare.to_str().unwrap()]);
        git(&work, &["init", "-q"]);
        let commit = |n: &str, server_info: bool| {
            std::fs::write(work.join("fwc.kdl"), format!("fwc 1\n// {n}\n")).unwrap();
            git(&work, &["add", "."]);
            git(&work, &["commit", "-qm", n]);
            git(&work, &["push", "-q", bare.to_str().unwrap(), "HEAD:main"]);
            if server_info {
                git(&bare, &["update-server-info"]);
            }
            git(&work, &["rev-parse", "HEAD"])
        };
        let c1 = commit("c1", true);
        let (port, gets) = serve_info_refs(bare.clone());
        let url = format!("file://{}", bare.display());
        let mut m = Mirror::open(&tmp.path().join("state"), &url, "main", Duration::from_secs(10)).unwrap();
        m.refs_poll = Some(RefsPoll::new(&format!("http://127.0.0.1:{port}/rules.git/info/refs"), 4).unwrap());
        let t = Duration::from_secs(10);
        // The first poll fetches (nothing fetched yet); then polls read only the file: with
        // the repository moved away, they still succeed and report nothing changed.
        assert!(m.fetch(t).unwrap().changed());
        assert_eq!(m.tip().unwrap().to_string(), c1);
        let hidden = tmp.path().join("moved-away.git");
        std::fs::rename(&bare, &hidden).unwrap();
        std::fs::create_dir_all(bare.join("info")).unwrap();
        std::fs::copy(hidden.join("info/refs"), bare.join("info/refs")).unwrap();
        for _ in 0..3 {
            assert!(!m.fetch(t).unwrap().changed(), "an idle poll is the file alone");
        }
        assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), 4);
        // The periodic full fetch (every 4th poll after a fetch) needs the repository.
        assert!(m.fetch(t).is_err(), "the 4th poll after a fetch is a git fetch");
        std::fs::remove_dir_all(&bare).unwrap();
        std::fs::rename(&hidden, &bare).unwrap();
        assert!(!m.fetch(t).unwrap().changed());
        // A push with the hook: the next poll fetches it.
        let c2 = commit("c2", true);
        let f = m.fetch(t).unwrap();
        assert!(f.changed());
        assert_eq!(f.new.to_string(), c2);
        // A push without the hook (a stale file): polls say nothing moved until the periodic
        // full fetch, at most 4 polls later, finds it.
        let c3 = commit("c3", false);
        let mut polls = 0;
        loop {
            polls += 1;
            let f = m.fetch(t).unwrap();
            if f.changed() {
                assert_eq!(f.new.to_string(), c3);
                break;
            }
            assert!(polls < 4, "a stale refs file delays a change by at most --refs-full-every polls");
        }
        // A rollout state written: the file lists the new ref, the next poll fetches it.
        git(&bare, &["update-ref", "refs/heads/fwc-rollout", &c1]);
        git(&bare, &["update-server-info"]);
        let f = m.fetch(t).unwrap();
        assert!(f.changed());
        assert_eq!(f.rollout_new.map(|o| o.to_string()), Some(c1.clone()));
        // The file's server down: the poll falls back to git.
        m.refs_poll = Some(RefsPoll::new("http://127.0.0.1:1/rules.git/info/refs", 4).unwrap());
        git(&bare, &["update-ref", "-d", "refs/heads/fwc-rollout"]);
        let f = m.fetch(t).unwrap();
        assert!(f.changed() && f.rollout_new.is_none(), "{f:?}");
    }

    /// The mirror is whole for git, its packs are stored (agent/git_zlib.rs), and a file
    /// changed in it behind fwc's back is refused by fwc's own id check although libgit2, which
    /// no longer hashes what it reads, and zlib's checksum accept it.
    #[test]
    fn a_fetched_mirror_passes_fsck_and_an_object_changed_in_it_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (remote, work) = (d.path().join("remote.git"), d.path().join("work"));
        std::fs::create_dir_all(work.join("lists")).unwrap();
        git(d.path(), &["init", "-q", "--bare", remote.to_str().unwrap()]);
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("fwc.kdl"), "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\n").unwrap();
        let list = "192.0.2.1\n192.0.2.77\n";
        std::fs::write(work.join("lists/bl.netset"), list).unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-qm", "one"]);
        git(&work, &["push", "-q", remote.to_str().unwrap(), "HEAD:main"]);
        let state = d.path().join("state");
        let url = format!("file://{}", remote.display());
        let tip = Mirror::open(&state, &url, "main", Duration::from_secs(10)).unwrap().fetch(Duration::from_secs(10)).unwrap().new;
        let mirror = state.join(MIRROR_DIR);
        git(&mirror, &["fsck", "--full", "--strict"]);
        // The list's bytes are in the pack as they are (stored); change one address and fix
        // the stream's Adler-32 (right after the data of a one-block stored stream).
        let pack = std::fs::read_dir(mirror.join("objects/pack")).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "pack")).unwrap();
        let mut bytes = std::fs::read(&pack).unwrap();
        let at = bytes.windows(list.len()).position(|w| w == list.as_bytes()).expect("the list stored as it is");
        let changed = list.replace("77", "78");
        bytes[at..at + list.len()].copy_from_slice(changed.as_bytes());
        let adler = changed.bytes().fold((1u32, 0u32), |(a, b), c| ((a + c as u32) % 65521, (b + (a + c as u32) % 65521) % 65521));
        bytes[at + list.len()..at + list.len() + 4].copy_from_slice(&((adler.1 << 16) | adler.0).to_be_bytes());
        std::fs::write(&pack, &bytes).unwrap();
        let m = Mirror::open(&state, &url, "main", Duration::from_secs(10)).unwrap();
        let id = m.repo.find_commit(tip).unwrap().tree().unwrap().get_path(Path::new("lists/bl.netset")).unwrap().id();
        assert_eq!(m.repo.find_blob(id).unwrap().content(), changed.as_bytes(), "libgit2 reads the changed list without a word");
        let e = m.source_tree(tip).unwrap_err();
        assert!(format!("{e:?}").contains(&format!("object {id} of the repository does not match its id")), "{e:?}");
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
        assert_eq!((f.old, f.new.to_string(), f.forced, f.rollout_new), (None, c1.clone(), false, None));
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

        // The rollout state rides on the same fetch: a new state commit alone is a change.
        let st = d.path().join("st");
        std::fs::create_dir_all(&st).unwrap();
        git(&st, &["init", "-q"]);
        let state_json = format!(
            r#"{{"version":1,"branch":"main","commit":"{}","stable":null,"waves":["canary","all"],"promoted":0,"phase":"progressing","rollback":false,"reason":"r","since":"2026-11-26T12:00:00Z","promoted_at":null}}"#,
            f3.new
        );
        std::fs::write(st.join("rollout.json"), &state_json).unwrap();
        git(&st, &["add", "."]);
        git(&st, &["commit", "-qm", "state"]);
        git(&st, &["push", "-q", remote.to_str().unwrap(), "HEAD:refs/heads/fwc-rollout"]);
        let f4 = m.fetch(Duration::from_secs(10)).unwrap();
        assert!(f4.changed() && f4.old == Some(f3.new) && f4.new == f3.new, "{f4:?}");
        let r = m.rollout_tip().unwrap();
        assert_eq!(f4.rollout_new, Some(r));
        let s = m.rollout_state(r).unwrap();
        assert_eq!((s.commit, s.promoted), (f3.new.to_string(), Some(0)));
        assert!(!m.fetch(Duration::from_secs(10)).unwrap().changed());
        std::fs::write(st.join("rollout.json"), "{not json").unwrap();
        git(&st, &["commit", "-qam", "broken"]);
        git(&st, &["push", "-q", remote.to_str().unwrap(), "HEAD:refs/heads/fwc-rollout"]);
        m.fetch(Duration::from_secs(10)).unwrap();
        let e = m.rollout_state(m.rollout_tip().unwrap()).unwrap_err();
        assert!(e.contains("rollout.json of"), "{e}");

        // reopen keeps the tip; a dead remote fails fast with a message
        drop(m);
        let m = Mirror::open(&state, &format!("file://{}/missing.git", d.path().display()), "main", Duration::from_secs(10)).unwrap();
        assert_eq!(m.tip(), Some(f3.new));
        let e = m.fetch(Duration::from_secs(5)).unwrap_err();
        assert!(format!("{e}").contains("fetch from"), "{e}");
        assert_eq!(m.tip(), Some(f3.new));
    }
}
