//! Helpers shared by the agent's end-to-end tests (`agent_e2e.rs`, `agent_ssh.rs`): a running
//! `fwc agent` process killed on drop, waiting, free ports, audit-log lookups, rule text.
#![allow(dead_code)] // each test file uses a different subset

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fwc_runtime::metrics::http_request;
use serde_json::Value;

/// `git` in `dir` as Alice (signing format ssh, no automatic signing); stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Alice", "-c", "user.email=alice@example.com", "-c", "init.defaultBranch=main"])
        .args(["-c", "gpg.format=ssh", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `fwc agent`; killed on drop. stderr goes to a file.
pub struct AgentProc {
    child: Option<Child>,
    pub metrics: SocketAddr,
    pub log: PathBuf,
}

impl AgentProc {
    pub fn start(state: &Path, url: &str, netns: &str, extra: &[&str], env: &[(&str, &str)]) -> AgentProc {
        AgentProc::start_as("localhost", state, url, netns, extra, env)
    }

    /// [`AgentProc::start`] with `--host host`.
    pub fn start_as(host: &str, state: &Path, url: &str, netns: &str, extra: &[&str], env: &[(&str, &str)]) -> AgentProc {
        AgentProc::start_on(free_port(), host, state, url, netns, extra, env)
    }

    /// [`AgentProc::start_as`] with its metrics on 127.0.0.1:`port` (a restart keeps its scrape target).
    pub fn start_on(port: u16, host: &str, state: &Path, url: &str, netns: &str, extra: &[&str], env: &[(&str, &str)]) -> AgentProc {
        let metrics: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = state.with_extension(format!("log{}", port));
        let err = std::fs::File::create(&log).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
        c.args(["agent", "--repo", url, "--host", host, "--interval", "1s"])
            .args(if extra.contains(&"--fetch-timeout") { &[][..] } else { &["--fetch-timeout", "5s"][..] })
            .args(["--state-dir", state.to_str().unwrap(), "--metrics", &metrics.to_string(), "--netns", netns])
            .args(extra)
            .env("FWC_LOG", "info")
            .env_remove("FWC_TEST_FAIL")
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.spawn().unwrap();
        let a = AgentProc { child: Some(child), metrics, log };
        assert!(
            wait_until(Duration::from_secs(10), || http_request(metrics, "GET", "/healthz", &[], b"").is_ok()),
            "agent did not start:\n{}",
            a.log_text()
        );
        a
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn scrape(&self) -> String {
        let (code, body) = http_request(self.metrics, "GET", "/metrics", &[], b"").unwrap();
        assert_eq!(code, 200);
        body
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn term(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > Duration::from_secs(15) {
                let _ = c.kill();
                panic!("agent did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

pub fn audit(state: &Path) -> Vec<Value> {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `fwc audit verify` of the state dir passes.
pub fn assert_audit_verifies(state: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["audit", "verify", "--state-dir", state.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Wait for an audit entry about `commit` with `action`; returns it.
pub fn wait_entry(state: &Path, commit: &str, action: &str, agent: &AgentProc) -> Value {
    let mut found = None;
    wait_until(Duration::from_secs(30), || {
        found = audit(state).into_iter().find(|e| e["commit"] == commit && e["action"] == action);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no {action} entry for {commit}; audit:\n{:#?}\nagent log:\n{}", audit(state), agent.log_text()))
}

/// Does the entry's nftables change list `which` (added/changed/removed) name `rule`?
pub fn lists(e: &Value, which: &str, rule: &str) -> bool {
    e["changes"]["nftables"][which].as_array().is_some_and(|a| a.iter().any(|r| r == rule))
}

pub fn allow(port: u16, name: &str) -> String {
    format!("fwc 1\ninput policy=drop {{\n    allow \"{name}\" proto=tcp port={port}\n}}\n")
}

/// A bare repository and a work tree that pushes to it.
pub struct Repo {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub bare: PathBuf,
    pub work: PathBuf,
}

impl Repo {
    pub fn new() -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let bare = root.join("rules.git");
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&root, &["init", "-q", "--bare", bare.to_str().unwrap()]);
        git(&work, &["init", "-q"]);
        Repo { _tmp: tmp, root, bare, work }
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    /// Commit `fwc.kdl` = `kdl`, signed with `key` (an ssh private key path) or not, and push.
    pub fn commit(&self, kdl: &str, msg: &str, key: Option<&Path>, force: bool) -> String {
        std::fs::write(self.work.join("fwc.kdl"), kdl).unwrap();
        git(&self.work, &["add", "fwc.kdl"]);
        match key {
            Some(k) => git(&self.work, &["-c", &format!("user.signingkey={}", k.display()), "commit", "-q", "--allow-empty", "-S", "-m", msg]),
            None => git(&self.work, &["commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", msg]),
        };
        let mut push = vec!["push", "-q"];
        if force {
            push.push("-f");
        }
        let bare = self.bare.to_str().unwrap().to_string();
        push.extend([bare.as_str(), "HEAD:main"]);
        git(&self.work, &push);
        git(&self.work, &["rev-parse", "HEAD"])
    }
}
