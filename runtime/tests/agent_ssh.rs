//! The agent's ssh transport end to end: a real `sshd` on 127.0.0.1 (its own host key, config,
//! authorized_keys and pid file in a temp dir; killed on drop), a bare rule repository fetched
//! over `ssh://root@127.0.0.1:PORT/abs/path/rules.git` with the key from `FWC_GIT_SSH_KEY`,
//! and the host key checked against `FWC_GIT_KNOWN_HOSTS`: unknown, changed and revoked keys
//! are refused with an actionable message, a known one (hashed entry) is accepted.
//! Nothing touches the host's own sshd, ~/.ssh or root namespace rules: the agent runs with
//! `--netns`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fwc_runtime::agent::git::Mirror;
use fwc_testkit::{privileged, which, Netns};

mod agent_common;
use agent_common::*;

const SSHD: &str = "/usr/sbin/sshd";

/// sshd, ssh-keygen and ssh-keyscan present and running as root; prints SKIP otherwise (a
/// failure under `FWC_REQUIRE_PRIVILEGED=1`), like `fwc_testkit::privileged`.
fn ssh_prereqs(test: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let tools = Path::new(SSHD).is_file() && ["ssh-keygen", "ssh-keyscan", "git"].iter().all(|t| which(t));
    if root && tools {
        return true;
    }
    let why = if !root { "not root" } else { "/usr/sbin/sshd, ssh-keygen, ssh-keyscan or git missing (apt-get install openssh-server)" };
    if std::env::var("FWC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{test}: cannot run ({why}) but FWC_REQUIRE_PRIVILEGED=1");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

fn sh(dir: &Path, line: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(line).current_dir(dir).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A temp dir with a bare rule repository, a work tree pushing to it, sshd's host key, a
/// second ("changed") host key and the client's key, all made with ssh-keygen.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    bare: PathBuf,
    work: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let (bare, work) = (root.join("rules.git"), root.join("work"));
        std::fs::create_dir_all(&work).unwrap();
        git(&root, &["init", "-q", "--bare", bare.to_str().unwrap()]);
        git(&work, &["init", "-q"]);
        sh(&root, "ssh-keygen -q -t ed25519 -N '' -C host -f host_key && ssh-keygen -q -t ed25519 -N '' -C other -f other_host_key");
        sh(&root, "ssh-keygen -q -t ed25519 -N '' -C agent -f client && cp client.pub authorized_keys");
        Fixture { _tmp: tmp, root, bare, work }
    }

    fn commit(&self, kdl: &str, msg: &str) -> String {
        std::fs::write(self.work.join("fwc.kdl"), kdl).unwrap();
        git(&self.work, &["add", "fwc.kdl"]);
        git(&self.work, &["commit", "-q", "--allow-empty", "-m", msg]);
        git(&self.work, &["push", "-q", self.bare.to_str().unwrap(), "HEAD:main"]);
        git(&self.work, &["rev-parse", "HEAD"])
    }

    fn url(&self, port: u16) -> String {
        format!("ssh://root@127.0.0.1:{port}{}", self.bare.display())
    }

    /// `SHA256:…` of a public key file.
    fn fingerprint(&self, pubkey: &str) -> String {
        sh(&self.root, &format!("ssh-keygen -lf {pubkey}")).split_whitespace().nth(1).unwrap().to_string()
    }
}

/// The sshd tests run one at a time: `/run/sshd` (sshd's privilege separation directory) is
/// created when missing and removed again by whoever created it.
static SSHD_LOCK: Mutex<()> = Mutex::new(());

/// `sshd -D -e -f CONFIG` on 127.0.0.1:port; killed (with its connection processes) on drop.
struct Sshd {
    child: Child,
    port: u16,
    log: PathBuf,
    made_run_dir: bool,
}

impl Sshd {
    fn start(f: &Fixture) -> Sshd {
        let made_run_dir = !Path::new("/run/sshd").exists();
        if made_run_dir {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let port = free_port();
        let d = &f.root;
        let config = d.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 StrictModes no\nPidFile {d}/sshd.pid\nUsePAM no\nAllowTcpForwarding no\nX11Forwarding no\n",
                d = d.display()
            ),
        )
        .unwrap();
        let log = d.join("sshd.log");
        let child = Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut s = Sshd { child, port, log, made_run_dir };
        let up = wait_until(Duration::from_secs(10), || {
            s.log_text().contains("Server listening") || s.child.try_wait().ok().flatten().is_some()
        });
        assert!(up && s.child.try_wait().unwrap().is_none(), "sshd did not start:\n{}", s.log_text());
        s
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Sshd {
    /// The listener's per-connection processes (its children, each in its own session).
    fn connections(&self) -> Vec<i32> {
        let pid = self.child.id().to_string();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1));
            if ppid == Some(pid.as_str()) {
                out.extend(e.file_name().to_string_lossy().parse::<i32>());
            }
        }
        out
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Let finished connections wind down (the listener reaps them), then kill what is left.
        wait_until(Duration::from_secs(3), || self.connections().is_empty());
        for p in self.connections() {
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.made_run_dir {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// The git layer alone (no dataplane): every host-key case against one sshd.
#[test]
fn ssh_fetch_checks_the_host_key_against_known_hosts() {
    if !ssh_prereqs("ssh_fetch_checks_the_host_key_against_known_hosts") {
        return;
    }
    let _serial = SSHD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::new();
    let c1 = f.commit(&allow(80, "web"), "allow 80");
    let sshd = Sshd::start(&f);
    let (port, url) = (sshd.port, f.url(sshd.port));
    let name = format!("[127.0.0.1]:{port}");
    let fp = f.fingerprint("host_key.pub");
    let known_hosts = f.root.join("known_hosts");
    let kh = known_hosts.display().to_string();

    let mut m = Mirror::open(&f.root.join("state"), &url, "main", Duration::from_secs(10)).unwrap();
    m.ssh_key = Some(f.root.join("client"));
    m.known_hosts = known_hosts.clone();
    let fetch_err = |m: &Mirror| format!("{}", m.fetch(Duration::from_secs(10)).expect_err("must be refused"));

    // Unknown: no known_hosts file at all, then one without this host (port 22 only).
    let e = fetch_err(&m);
    eprintln!("unknown host: {e}");
    for want in [name.as_str(), "is not known", fp.as_str(), &format!("ssh-keyscan -p {port} -t ed25519 127.0.0.1 >> {kh}")] {
        assert!(e.contains(want), "missing {want:?} in: {e}");
    }
    sh(&f.root, "printf '127.0.0.1 %s\\n' \"$(cut -d' ' -f1,2 host_key.pub)\" > known_hosts");
    let e = fetch_err(&m);
    assert!(e.contains("is not known") && e.contains(&fp) && e.contains(&format!("has no entry for {name}")), "{e}");
    assert_eq!(m.tip(), None, "nothing may be fetched from an unknown host");

    // Changed: known_hosts has another key of the same type for this host.
    sh(&f.root, &format!("printf '%s %s\\n' '{name}' \"$(cut -d' ' -f1,2 other_host_key.pub)\" > known_hosts"));
    let e = fetch_err(&m);
    eprintln!("changed key: {e}");
    for want in ["CHANGED", fp.as_str(), "man-in-the-middle", &format!("ssh-keygen -R '{name}' -f {kh}")] {
        assert!(e.contains(want), "missing {want:?} in: {e}");
    }
    assert_eq!(m.tip(), None);

    // Known, hashed (`ssh-keyscan -H`): fetched, the rules read from the mirror.
    sh(&f.root, &format!("ssh-keyscan -H -p {port} 127.0.0.1 > known_hosts 2>/dev/null"));
    assert!(std::fs::read_to_string(&known_hosts).unwrap().starts_with("|1|"), "hashed entry expected");
    let got = m.fetch(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}\nsshd log:\n{}", sshd.log_text()));
    assert_eq!(got.new.to_string(), c1);
    assert_eq!(m.source_tree(got.new).unwrap().files["fwc.kdl"], allow(80, "web"));

    // A client key the server does not accept: a prompt, bounded failure (no retry loop).
    m.ssh_key = Some(f.root.join("other_host_key"));
    let t0 = Instant::now();
    let e = fetch_err(&m);
    eprintln!("wrong client key after {:?}: {e}", t0.elapsed());
    assert!(e.contains("did not accept the key FWC_GIT_SSH_KEY=") && e.contains("other_host_key"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(8), "authentication failure took {:?}", t0.elapsed());
    m.ssh_key = Some(f.root.join("client"));

    // Known, plain entry, plus a fast-forward.
    sh(&f.root, &format!("ssh-keyscan -p {port} 127.0.0.1 > known_hosts 2>/dev/null"));
    let c2 = f.commit(&allow(81, "alt"), "allow 81");
    let got = m.fetch(Duration::from_secs(10)).unwrap();
    assert!(got.changed() && !got.forced && got.new.to_string() == c2, "{got:?}");

    // Revoked: an `@revoked` line wins over a matching entry.
    sh(&f.root, &format!("printf '@revoked %s %s\\n' '{name}' \"$(cut -d' ' -f1,2 host_key.pub)\" >> known_hosts"));
    let e = fetch_err(&m);
    assert!(e.contains("REVOKED") && e.contains(&fp), "{e}");
    assert!(sshd.log_text().contains("Accepted publickey for root"), "{}", sshd.log_text());
}

/// What a user sees: `fwc agent` with an ssh:// remote refuses the unknown host (and says
/// what to do), then — once the operator added the key with ssh-keyscan — fetches and applies.
#[test]
fn agent_fetches_over_ssh_and_applies() {
    if !privileged("agent_fetches_over_ssh_and_applies") || !ssh_prereqs("agent_fetches_over_ssh_and_applies") {
        return;
    }
    let _serial = SSHD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::new("s");
    let f = Fixture::new();
    let c1 = f.commit(&allow(80, "web"), "allow 80");
    let sshd = Sshd::start(&f);
    let fp = f.fingerprint("host_key.pub");
    let (state, home, known_hosts) = (f.root.join("state"), f.root.join("home"), f.root.join("known_hosts"));
    std::fs::create_dir_all(&home).unwrap();
    let agent = AgentProc::start(
        &state,
        &f.url(sshd.port),
        &ns.name,
        &[],
        &[
            ("FWC_GIT_SSH_KEY", f.root.join("client").to_str().unwrap()),
            ("FWC_GIT_KNOWN_HOSTS", known_hosts.to_str().unwrap()),
            ("HOME", home.to_str().unwrap()),
        ],
    );
    assert!(
        wait_until(Duration::from_secs(15), || agent.log_text().contains("is not known")),
        "the unknown host must be refused:\n{}",
        agent.log_text()
    );
    let log = agent.log_text();
    assert!(log.contains(&fp) && log.contains(&format!("ssh-keyscan -p {} -t ed25519 127.0.0.1", sshd.port)), "{log}");
    assert!(!agent.scrape().contains("fwc_git_fetch_total{result=\"error\"} 0\n"));
    assert!(audit(&state).is_empty(), "nothing may be applied from an unknown host");

    // The operator adds the host key; the next (backed-off) fetch succeeds and applies.
    sh(&f.root, &format!("ssh-keyscan -H -p {} 127.0.0.1 > known_hosts 2>/dev/null", sshd.port));
    let e = wait_entry(&state, &c1, "apply", &agent);
    assert_eq!(e["result"], "ok", "{e:#}");
    assert!(lists(&e, "added", "filter:web"), "{e:#}");
    assert!(ns.exec(&["nft", "list", "table", "inet", "fwc"]).contains("dport 80"));

    let c2 = f.commit(&allow(81, "alt"), "allow 81");
    let e = wait_entry(&state, &c2, "apply", &agent);
    assert_eq!(e["result"], "ok", "{e:#}");
    assert!(lists(&e, "added", "filter:alt") && lists(&e, "removed", "filter:web"), "{e:#}");
    let live = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(live.contains("dport 81") && !live.contains("dport 80"), "{live}");
    // The audit entry is written before the metric moves: wait for it.
    let want = format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c2}\"}} 1");
    assert!(wait_until(Duration::from_secs(5), || agent.scrape().contains(&want)), "{}", agent.scrape());
}
