//! `fwc agent` end to end: real bare git repositories (file:// and `git daemon`'s git:// on
//! loopback), commits pushed with rule changes, the agent applying them inside the fwc-host
//! namespace of a [`Topology`], and traffic from the client namespace proving what is live.
//! Also: signature refusals, a compile error, a failing apply, force-push, remote down and
//! back, drift heal vs alert, `kill -9` in the middle of an apply, metrics over HTTP.
//! Nothing is loaded into the root namespace: the agent runs with `--netns`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fwc_runtime::metrics::{github_signature, http_request};
use fwc_testkit::{privileged, Netns, Topology};
use serde_json::Value;

mod agent_common;
use agent_common::*;

// ---------------------------------------------------------------------------------------------
// helpers

fn tcp_ok(ns: &Netns, port: u16) -> bool {
    let o = ns.try_exec(&["timeout", "3", "socat", "-T1", "-", &format!("TCP4:198.18.1.1:{port},connect-timeout=1")]);
    o.status.success() && String::from_utf8_lossy(&o.stdout).contains(&format!("p{port}"))
}

fn serve(t: &mut Topology, port: u16) {
    t.host.spawn(&["socat", &format!("TCP4-LISTEN:{port},fork,reuseaddr"), &format!("SYSTEM:echo p{port}")]);
    let ns = t.host.name.clone();
    assert!(wait_until(Duration::from_secs(5), || {
        let o = Command::new("ip").args(["netns", "exec", &ns, "ss", "-ltnH"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).contains(&format!(":{port} "))
    }));
}

/// (alice's private key, mallory's private key, allowed-signers file naming only alice).
fn keys(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    for who in ["alice", "mallory"] {
        let st = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", who, "-f"]).arg(dir.join(who)).status().unwrap();
        assert!(st.success());
    }
    let pubkey = std::fs::read_to_string(dir.join("alice.pub")).unwrap();
    let allowed = dir.join("allowed_signers");
    std::fs::write(&allowed, format!("alice@example.com namespaces=\"git\" {pubkey}")).unwrap();
    (dir.join("alice"), dir.join("mallory"), allowed)
}

fn fwc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).stdin(Stdio::null()).output().unwrap()
}

fn verify_ok(state: &Path) {
    let o = fwc(&["audit", "verify", "--state-dir", state.to_str().unwrap()]);
    assert!(o.status.success(), "audit verify: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

// ---------------------------------------------------------------------------------------------

#[test]
fn agent_applies_signed_commits_refuses_the_rest_heals_drift_and_serves_metrics() {
    if !privileged("agent_applies_signed_commits_refuses_the_rest_heals_drift_and_serves_metrics") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t, 80);
    serve(&mut t, 81);
    let repo = Repo::new();
    let (alice, mallory, allowed) = keys(&repo.root);
    let state = repo.root.join("state");
    let secret = repo.root.join("hook.secret");
    std::fs::write(&secret, "hunter2\n").unwrap();

    let c1 = repo.commit(&allow(80, "web"), "allow 80", Some(&alice), false);
    let mut agent = AgentProc::start(
        &state,
        &repo.url(),
        &t.host.name,
        &["--allowed-signers", allowed.to_str().unwrap(), "--webhook-secret-file", secret.to_str().unwrap()],
        &[("FWC_AGENT_TEST_HOOKS", "1")],
    );
    let e = wait_entry(&state, &c1, "apply", &agent);
    assert_eq!(e["result"], "ok", "{e:#}");
    assert_eq!(e["signer"], "alice@example.com");
    assert_eq!(e["author"], "Alice <alice@example.com>");
    assert!(lists(&e, "added", "filter:web"), "{e:#}");
    assert!(tcp_ok(&t.client, 80), "80 must be open after c1");
    assert!(!tcp_ok(&t.client, 81), "81 must be closed after c1");
    assert!(wait_until(Duration::from_secs(5), || http_request(agent.metrics, "GET", "/readyz", &[], b"").unwrap().0 == 200));

    // Refusals: unsigned, signed by a key that is not allowed, compile error, failing apply.
    // Each leaves port 80 open and 81 closed, and writes exactly one entry.
    let c2 = repo.commit(&allow(81, "alt"), "unsigned", None, false);
    let e = wait_entry(&state, &c2, "refuse", &agent);
    assert!(e["detail"].as_str().unwrap().starts_with("signature: the commit is not signed"), "{e:#}");
    let c3 = repo.commit(&allow(81, "alt"), "mallory", Some(&mallory), false);
    let e = wait_entry(&state, &c3, "refuse", &agent);
    assert!(e["detail"].as_str().unwrap().contains("does not verify"), "{e:#}");
    let c4 = repo.commit("fwc 1\ninput policy=drop {\n    allow \"bad\" proto=tcp port=99999\n}\n", "typo", Some(&alice), false);
    let e = wait_entry(&state, &c4, "refuse", &agent);
    assert!(e["detail"].as_str().unwrap().starts_with("compile:"), "{e:#}");
    let c5 = repo.commit(&allow(81, "alt"), "breaks apply [fwc-test: fail-apply]", Some(&alice), false);
    let e = wait_entry(&state, &c5, "apply", &agent);
    assert_eq!(e["result"], "rolled_back", "{e:#}");
    assert_eq!(e["previous_commit"], c1.as_str());
    assert!(tcp_ok(&t.client, 80) && !tcp_ok(&t.client, 81), "the rolled-back apply must leave c1 live");
    let m = agent.scrape();
    for want in [
        format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c1}\"}} 1"),
        "fwc_commit_refused_total{reason=\"signature\"} 2".to_string(),
        "fwc_commit_refused_total{reason=\"compile\"} 1".to_string(),
        "fwc_commit_refused_total{reason=\"apply\"} 1".to_string(),
        "fwc_apply_total{result=\"rolled_back\"} 1".to_string(),
        format!("fwc_agent_degraded{{host=\"localhost\",commit=\"{c5}\",reason=\"rolled_back\"}} 1"),
    ] {
        assert!(m.contains(&want), "missing {want} in\n{m}");
    }
    // Refusals are not retried, a failed apply only after its backoff (at least 10 s): after
    // a few more intervals there is still one entry per commit.
    std::thread::sleep(Duration::from_millis(2500));
    let log = audit(&state);
    for c in [&c2, &c3, &c4, &c5] {
        assert_eq!(log.iter().filter(|e| e["commit"] == c.as_str()).count(), 1, "{c}: {log:#?}");
    }

    // Webhook: a wrong signature is 401 and counted; the right one triggers an immediate fetch.
    assert_eq!(http_request(agent.metrics, "POST", "/hooks/git", &[("X-Hub-Signature-256", "sha256=00")], b"{}").unwrap().0, 401);
    assert_eq!(http_request(agent.metrics, "POST", "/hooks/git", &[], b"{}").unwrap().0, 401);
    let c6 = repo.commit(&allow(81, "alt"), "switch to 81", Some(&alice), false);
    let body = br#"{"ref":"refs/heads/main"}"#;
    let sig = github_signature(b"hunter2", body);
    let t0 = Instant::now();
    assert_eq!(http_request(agent.metrics, "POST", "/hooks/git", &[("X-Hub-Signature-256", &sig)], body).unwrap().0, 202);
    let e = wait_entry(&state, &c6, "apply", &agent);
    eprintln!("webhook push-to-applied: {:?}", t0.elapsed());
    assert_eq!(e["result"], "ok", "{e:#}");
    assert!(lists(&e, "added", "filter:alt") && lists(&e, "removed", "filter:web"), "{e:#}");
    assert!(tcp_ok(&t.client, 81) && !tcp_ok(&t.client, 80));
    // The same signed delivery again is a replay: refused, no fetch.
    let (code, text) = http_request(agent.metrics, "POST", "/hooks/git", &[("X-Hub-Signature-256", &sig)], body).unwrap();
    assert_eq!(code, 409, "{text}");
    assert!(text.contains("replayed"), "{text}");

    // Force-push: history rewritten back onto c1 (a correctly signed rollback of c6). Refused
    // as a rewind: degraded, c6 stays live.
    git(&repo.work, &["reset", "-q", "--hard", &c1]);
    let c7 = repo.commit(&allow(80, "web"), "rewritten", Some(&alice), true);
    let e = wait_entry(&state, &c7, "refuse", &agent);
    assert!(e["detail"].as_str().unwrap().starts_with("rewind: "), "{e:#}");
    assert!(tcp_ok(&t.client, 81) && !tcp_ok(&t.client, 80), "a refused rewind must leave c6 live");
    let (code, text) = http_request(agent.metrics, "GET", "/readyz", &[], b"").unwrap();
    assert!(code == 200 && text.contains("degraded"), "{code} {text}");
    assert!(agent.scrape().contains("fwc_commit_refused_total{reason=\"rewind\"} 1"));
    // Allowed by the documented one-shot file: applied, audited as an allowed rewind, file gone.
    std::fs::write(state.join("allow-rewind"), format!("{c7}\n")).unwrap();
    let e = wait_entry(&state, &c7, "apply", &agent);
    assert_eq!(e["result"], "ok");
    assert!(e["detail"].as_str().unwrap_or("").contains("rewind allowed by the one-shot allow-rewind file"), "{e:#}");
    assert!(tcp_ok(&t.client, 80) && !tcp_ok(&t.client, 81));
    assert!(wait_until(Duration::from_secs(5), || !state.join("allow-rewind").exists()), "the one-shot file must be used up");

    // Drift: a hand-made change to table inet fwc is healed.
    t.host.exec(&["nft", "flush", "table", "inet", "fwc"]);
    let e = wait_entry(&state, &c7, "heal", &agent);
    assert_eq!(e["result"], "ok", "{e:#}");
    assert!(tcp_ok(&t.client, 80));

    // The counters move just after the audit entry is written: wait for them.
    wait_until(Duration::from_secs(5), || agent.scrape().contains("fwc_apply_total{result=\"ok\"} 4"));
    let m = agent.scrape();
    for want in [
        format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c7}\"}} 1"),
        "fwc_apply_total{result=\"ok\"} 4".to_string(), // c1, c6, c7, heal
        "fwc_drift_total 1".to_string(),
        "fwc_webhook_requests_total{result=\"unauthorized\"} 2".to_string(),
        "fwc_webhook_requests_total{result=\"accepted\"} 1".to_string(),
        "fwc_webhook_requests_total{result=\"replayed\"} 1".to_string(),
        format!("fwc_agent_degraded{{host=\"localhost\",commit=\"{c7}\",reason=\"\"}} 0"),
        "fwc_apply_duration_seconds_count 5".to_string(),
    ] {
        assert!(m.contains(&want), "missing {want} in\n{m}");
    }
    assert!(m.contains("fwc_git_fetch_total{result=\"ok\"}"), "{m}");
    assert!(m.contains("fwc_rule_packets_total{rule="), "per-rule counters: {m}");

    // SIGTERM: clean exit; a restart adopts the live state without writing or applying anything.
    let before = audit(&state).len();
    assert!(agent.term().success(), "{}", agent.log_text());
    let gen_before = std::fs::read_to_string(state.join("state.json")).unwrap();
    let agent2 = AgentProc::start(&state, &repo.url(), &t.host.name, &["--allowed-signers", allowed.to_str().unwrap()], &[]);
    assert!(wait_until(Duration::from_secs(10), || http_request(agent2.metrics, "GET", "/readyz", &[], b"").unwrap().0 == 200));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(audit(&state).len(), before, "restart must not write entries: {:#?}", audit(&state));
    assert_eq!(std::fs::read_to_string(state.join("state.json")).unwrap(), gen_before, "restart must not apply");
    assert!(agent2.scrape().contains(&format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c7}\"}} 1")));
    drop(agent2);
    verify_ok(&state);
}

#[test]
fn agent_over_git_daemon_survives_remote_down_and_alerts_on_drift() {
    if !privileged("agent_over_git_daemon_survives_remote_down_and_alerts_on_drift") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t, 80);
    serve(&mut t, 81);
    let repo = Repo::new();
    git(&repo.bare, &["config", "daemon.uploadpack", "true"]);
    let state = repo.root.join("state");
    let port = free_port();
    let daemon = |root: &Path| -> Child {
        // The daemon binary itself (`git daemon` would fork it and leave it behind on kill).
        let exec_path = git(root, &["--exec-path"]);
        let c = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args(["--reuseaddr", "--export-all", "--listen=127.0.0.1", &format!("--port={port}"), &format!("--base-path={}", root.display())])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(5), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
        c
    };
    struct Kill(Option<Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut d = Kill(Some(daemon(&repo.root)));
    let url = format!("git://127.0.0.1:{port}/rules.git");
    let c1 = repo.commit(&allow(80, "web"), "allow 80", None, false);
    let agent = AgentProc::start(&state, &url, &t.host.name, &["--drift", "alert"], &[]);
    wait_entry(&state, &c1, "apply", &agent);
    assert!(tcp_ok(&t.client, 80) && !tcp_ok(&t.client, 81));

    // Remote down: the agent keeps running and counts failed fetches.
    let mut c = d.0.take().unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    let c2 = repo.commit(&allow(81, "alt"), "allow 81 while the remote is down", None, false);
    assert!(
        wait_until(Duration::from_secs(10), || !agent.scrape().contains("fwc_git_fetch_total{result=\"error\"} 0\n")),
        "{}\n{}",
        agent.scrape(),
        agent.log_text()
    );
    assert_eq!(http_request(agent.metrics, "GET", "/healthz", &[], b"").unwrap().0, 200);
    assert!(tcp_ok(&t.client, 80), "the last good state keeps running");
    // Back: the pending commit is applied (after backoff).
    d.0 = Some(daemon(&repo.root));
    let t0 = Instant::now();
    let e = wait_entry(&state, &c2, "apply", &agent);
    eprintln!("recovered after the remote came back in {:?}", t0.elapsed());
    assert_eq!(e["result"], "ok");
    assert!(tcp_ok(&t.client, 81) && !tcp_ok(&t.client, 80));

    // Drift in alert mode: reported once, not healed.
    t.host.exec(&["nft", "flush", "table", "inet", "fwc"]);
    let e = wait_entry(&state, &c2, "drift", &agent);
    assert_eq!(e["result"], "reported");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!tcp_ok(&t.client, 81), "alert mode must not heal");
    assert_eq!(audit(&state).iter().filter(|e| e["action"] == "drift").count(), 1, "one report per distinct drift");
    assert!(agent.scrape().contains("fwc_drift_total 1"));
    verify_ok(&state);
}

#[test]
fn agent_killed_mid_apply_converges_after_restart_with_one_entry_per_action() {
    if !privileged("agent_killed_mid_apply_converges_after_restart_with_one_entry_per_action") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t, 80);
    serve(&mut t, 81);
    let repo = Repo::new();
    let state = repo.root.join("state");
    let c1 = repo.commit(&allow(80, "web"), "allow 80", None, false);
    let slow = [("FWC_AGENT_TEST_HOOKS", "1"), ("FWC_AGENT_TEST_SLOW_COMMIT_MS", "3000")];
    let mut agent = AgentProc::start(&state, &repo.url(), &t.host.name, &[], &slow);
    wait_entry(&state, &c1, "apply", &agent);
    let c2 = repo.commit(&allow(81, "alt"), "allow 81", None, false);
    // Wait until the second apply has committed nftables and sleeps, then kill -9.
    assert!(wait_until(Duration::from_secs(20), || agent.log_text().matches("fwc-agent-test: committed").count() >= 2), "{}", agent.log_text());
    agent.kill9();
    // Live is c2, the state dir still says c1, the intent is pending, no entry for c2.
    assert!(tcp_ok(&t.client, 81));
    let journal: Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert_eq!(journal["pending"]["commit"], c2.as_str(), "{journal:#}");
    assert!(audit(&state).iter().all(|e| e["commit"] != c2.as_str()));
    // Worst case on top: the process also died while writing an audit line.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(state.join("audit.jsonl")).unwrap();
        f.write_all(br#"{"seq":2,"time":"2026-"#).unwrap();
    }
    let o = fwc(&["audit", "verify", "--state-dir", state.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("line 2: incomplete last line"), "{}", String::from_utf8_lossy(&o.stdout));

    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &[], &[]);
    let e = wait_entry(&state, &c2, "apply", &agent);
    assert_eq!(e["result"], "ok", "{e:#}");
    std::thread::sleep(Duration::from_millis(2000));
    let log = audit(&state);
    assert_eq!(log.iter().filter(|e| e["commit"] == c1.as_str()).count(), 1, "{log:#?}");
    assert_eq!(log.iter().filter(|e| e["commit"] == c2.as_str()).count(), 1, "{log:#?}");
    assert_eq!(log.len(), 2, "{log:#?}");
    assert!(tcp_ok(&t.client, 81) && !tcp_ok(&t.client, 80));
    let st: Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert!(st["pending"].is_null(), "{st:#}");
    assert!(std::fs::read_to_string(state.join("audit.jsonl.torn")).unwrap().contains(r#"{"seq":2,"time":"2026-"#));
    let o = fwc(&["audit", "verify", "--state-dir", state.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("recovered earlier"), "{out}");
    let mut s = String::new();
    std::fs::File::open(&agent.log).unwrap().read_to_string(&mut s).unwrap();
    assert!(s.contains("was interrupted; redoing it"), "{s}");
}

/// The agent hosts the userspace forwarder: a commit with a forward to a DNS name (which only
/// the forwarder can do) is applied by the agent and carries traffic; a later commit removes it.
#[test]
fn agent_hosts_the_forwarder_for_userspace_rules() {
    if !privileged("agent_hosts_the_forwarder_for_userspace_rules") {
        return;
    }
    let mut t = Topology::new();
    // The target, by name: `localhost` inside the fwc host's namespace.
    t.host.spawn(&["socat", "TCP-LISTEN:7001,bind=127.0.0.1,reuseaddr,fork", "SYSTEM:echo via-forwarder"]);
    let repo = Repo::new();
    let state = repo.root.join("state");
    let rules = "fwc 1\nforward \"api\" listen=\":7000\" to=\"localhost:7001\"\n";
    let c1 = repo.commit(rules, "userspace forward", None, false);
    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &[], &[]);
    let e = wait_entry(&state, &c1, "apply", &agent);
    assert_eq!(e["result"], "ok", "{e:#}\n{}", agent.log_text());
    let out = t.client.exec(&["bash", "-c", "exec 3<>/dev/tcp/198.18.1.1/7000; timeout 5 cat <&3"]);
    assert_eq!(out.trim(), "via-forwarder", "{}", agent.log_text());
    assert!(agent.log_text().contains("forwarder running"), "{}", agent.log_text());

    let c2 = repo.commit("fwc 1\n", "no forwards", None, false);
    wait_entry(&state, &c2, "apply", &agent);
    let gone = t.client.try_exec(&["timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/198.18.1.1/7000"]);
    assert!(!gone.status.success(), "the removed forward still accepts");
}
