//! The agent in a fleet rollout, end to end with real parts: `fwc agent` processes
//! applying into test namespaces, a real git remote (file://, and `git daemon` in another
//! namespace for the self-check), rollout states committed on `refs/heads/fwc-rollout`.
//! - the self-check after apply reverts a commit that cuts the agent off from git;
//! - agents follow the state: the canary takes the rollout's commit, a later wave holds
//!   (`not_promoted`), a halt with rollback takes the canary back to `stable` (an allowed
//!   rewind, audited), and the later wave never applies the halted commit.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fwc_compiler::artifacts::rollout::{Resumed, RolloutPhase, RolloutState, ROLLOUT_STATE_VERSION};
use fwc_testkit::{privileged, Netns, Topology};

mod agent_common;
use agent_common::*;

fn policy_rules(body: &str) -> String {
    format!(
        "fwc 1\nhost \"canary-1\" {{\n    labels role=canary\n}}\nhost \"web-1\" {{\n    labels role=web\n}}\nrollout {{\n    wave \"canary\" on=\"role=canary\"\n    wave \"all\"\n}}\n{body}"
    )
}

fn allow_port(port: u16) -> String {
    policy_rules(&format!("input policy=drop {{\n    allow \"p{port}\" proto=tcp port={port}\n}}\n"))
}

/// Commit `state` as `rollout.json` on `fwc-rollout` (parent: its current tip) and push it,
/// as the controller does. Returns the state commit.
fn push_state(repo: &Repo, state: &RolloutState) -> String {
    let bare = repo.bare.to_str().unwrap();
    let parent = Command::new("git").args(["--git-dir", bare, "rev-parse", "--verify", "-q", "refs/heads/fwc-rollout"]).output().unwrap();
    push_state_on(repo, state, Some(String::from_utf8_lossy(&parent.stdout).trim()).filter(|p| !p.is_empty()))
}

/// [`push_state`] on top of the state commit `parent` (None: a first state), which the work
/// repository has; a forced update of the ref.
fn push_state_on(repo: &Repo, state: &RolloutState, parent: Option<&str>) -> String {
    let json = serde_json::to_string_pretty(state).unwrap();
    let blob_file = repo.root.join("rollout.json.tmp");
    std::fs::write(&blob_file, json).unwrap();
    let blob = git(&repo.work, &["hash-object", "-w", blob_file.to_str().unwrap()]);
    let tree = {
        let mut c = Command::new("git")
            .args(["mktree"])
            .current_dir(&repo.work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(format!("100644 blob {blob}\trollout.json\n").as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let bare = repo.bare.to_str().unwrap();
    let mut args = vec!["commit-tree", tree.as_str(), "-m", "rollout state"];
    if let Some(p) = parent {
        if !Command::new("git").args(["cat-file", "-e", p]).current_dir(&repo.work).status().unwrap().success() {
            git(&repo.work, &["fetch", "-q", bare, "refs/heads/fwc-rollout"]);
        }
        args.extend(["-p", p]);
    }
    let c = git(&repo.work, &args);
    git(&repo.work, &["push", "-q", "--force", bare, &format!("{c}:refs/heads/fwc-rollout")]);
    c
}

fn state_of(commit: &str, stable: Option<&str>, promoted: Option<usize>, phase: RolloutPhase, rollback: bool) -> RolloutState {
    state(commit, stable, promoted, phase, rollback)
}

fn state(commit: &str, stable: Option<&str>, promoted: Option<usize>, phase: RolloutPhase, rollback: bool) -> RolloutState {
    RolloutState {
        version: ROLLOUT_STATE_VERSION,
        branch: "main".into(),
        commit: commit.into(),
        stable: stable.map(str::to_string),
        waves: vec!["canary".into(), "all".into()],
        promoted,
        phase,
        rollback,
        reason: format!("test: {}", phase.as_str()),
        since: "2026-11-26T12:00:00Z".into(),
        promoted_at: None,
        // Each state made here is pushed after the one made before it: a higher generation.
        generation: GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        predecessor: None,
        policy_commit: None,
        batch_below: None,
        resumed: None,
    }
}

static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn applied(state_dir: &Path) -> Option<String> {
    fwc_runtime::state::StateDir::new(state_dir).current().unwrap().and_then(|g| g.meta.commit)
}

#[test]
fn agents_follow_the_rollout_state_canary_first_halt_rolls_back_later_waves_never_apply() {
    if !privileged("agents_follow_the_rollout_state_canary_first_halt_rolls_back_later_waves_never_apply") {
        return;
    }
    let (ns_c, ns_w) = (Netns::new("fc"), Netns::new("fw"));
    let repo = Repo::new();
    let c1 = repo.commit(&allow_port(80), "v1", None, false);
    push_state(&repo, &state(&c1, Some(&c1), Some(1), RolloutPhase::Complete, false));
    let (sc, sw) = (repo.root.join("canary"), repo.root.join("web"));
    let canary = AgentProc::start_as("canary-1", &sc, &repo.url(), &ns_c.name, &["--no-forwarder"], &[]);
    let web = AgentProc::start_as("web-1", &sw, &repo.url(), &ns_w.name, &["--no-forwarder"], &[]);
    wait_entry(&sc, &c1, "apply", &canary);
    wait_entry(&sw, &c1, "apply", &web);
    let m = web.scrape();
    for want in [
        format!("fwc_rollout_info{{host=\"web-1\",commit=\"{c1}\",stable=\"{c1}\",phase=\"complete\"}} 1"),
        "fwc_rollout_wave{host=\"web-1\",wave=\"all\"} 1".to_string(),
        "fwc_rollout_held{host=\"web-1\",reason=\"not_promoted\"} 0".to_string(),
    ] {
        assert!(wait_until(Duration::from_secs(10), || web.scrape().contains(&want)), "missing {want} in\n{m}");
    }

    // A new tip alone moves nobody: only a commit the state names is applied.
    let c2 = repo.commit(&allow_port(81), "v2", None, false);
    std::thread::sleep(Duration::from_millis(2500)); // two poll intervals
    assert_eq!((applied(&sc), applied(&sw)), (Some(c1.clone()), Some(c1.clone())), "a tip the state does not name was applied");

    // The rollout of c2 starts: the canary wave takes it, the other wave holds.
    push_state(&repo, &state(&c2, Some(&c1), Some(0), RolloutPhase::Progressing, false));
    wait_entry(&sc, &c2, "apply", &canary);
    let held = "fwc_rollout_held{host=\"web-1\",reason=\"not_promoted\"} 1";
    assert!(wait_until(Duration::from_secs(15), || web.scrape().contains(held)), "{}", web.scrape());
    let hold = wait_entry(&sw, &c2, "hold", &web);
    assert!(hold["detail"].as_str().unwrap().contains("not_promoted"), "{hold:#}");
    // The audit entry is written before the metric moves: wait for it.
    let on_c2 = format!("fwc_applied_commit_info{{host=\"canary-1\",commit=\"{c2}\"}} 1");
    assert!(wait_until(Duration::from_secs(10), || canary.scrape().contains(&on_c2)), "{}", canary.scrape());
    // `fwc status` says why the host holds back.
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["status", "--json", "--state-dir", sw.to_str().unwrap(), "--netns", &ns_w.name]).output().unwrap();
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!((st["agent"]["rollout"]["held"].as_str(), st["agent"]["rollout"]["phase"].as_str()), (Some("not_promoted"), Some("progressing")), "{st:#}");
    assert_eq!(st["agent"]["rollout"]["wave"], serde_json::json!([1, "all"]), "{st:#}");
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["status", "--state-dir", sw.to_str().unwrap(), "--netns", &ns_w.name]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Rollout:    progressing of") && text.contains("held back: not_promoted"), "{text}");
    // Waves are numbered as `fwc plan --waves` numbers them (from 1).
    assert!(text.contains(", wave 2 \"all\""), "{text}");
    // agent.json is written right after the audit entry: wait for it.
    let journal = || std::fs::read_to_string(sw.join("agent.json")).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    assert!(wait_until(Duration::from_secs(10), || journal().is_some_and(|j| j["rollout"]["held"] == "not_promoted")), "{:?}", journal());

    // Halt with rollback: the canary goes back to stable (an allowed rewind, audited as such).
    push_state(&repo, &state(&c2, Some(&c1), Some(0), RolloutPhase::Halted, true));
    let back = {
        let mut found = None;
        wait_until(Duration::from_secs(30), || {
            found = audit(&sc).into_iter().filter(|e| e["commit"] == c1.as_str() && e["action"] == "apply").nth(1);
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("no rewind to stable; audit {:#?}\n{}", audit(&sc), canary.log_text()))
    };
    assert_eq!(back["result"], "ok", "{back:#}");
    assert_eq!(back["previous_commit"], c2.as_str());
    assert!(back["detail"].as_str().unwrap().contains("rewind allowed by the fleet rollout state"), "{back:#}");
    assert_eq!(applied(&sc), Some(c1.clone()));
    assert!(wait_until(Duration::from_secs(10), || canary.scrape().contains("fwc_rollout_held{host=\"canary-1\",reason=\"halted\"} 1")));

    // The later wave never applied the halted commit.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!audit(&sw).iter().any(|e| e["commit"] == c2.as_str() && e["action"] == "apply"), "{:#?}", audit(&sw));
    assert_eq!(applied(&sw), Some(c1.clone()));
    assert_audit_verifies(&sc);
    assert_audit_verifies(&sw);
}

/// An unsigned rollout state, with signatures required, is refused: the host keeps what it has
/// and says why (`unverified_state`).
#[test]
fn an_unsigned_rollout_state_is_not_followed_when_signatures_are_required() {
    if !privileged("an_unsigned_rollout_state_is_not_followed_when_signatures_are_required") {
        return;
    }
    let ns = Netns::new("fu");
    let repo = Repo::new();
    let key = repo.root.join("alice");
    assert!(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f"]).arg(&key).status().unwrap().success());
    let allowed = repo.root.join("allowed_signers");
    std::fs::write(&allowed, format!("alice@example.com namespaces=\"git\" {}", std::fs::read_to_string(key.with_extension("pub")).unwrap())).unwrap();
    let c1 = repo.commit(&allow_port(80), "v1", Some(&key), false);
    push_state(&repo, &state(&c1, None, Some(1), RolloutPhase::Progressing, false));
    let s = repo.root.join("s");
    let agent = AgentProc::start_as("web-1", &s, &repo.url(), &ns.name, &["--no-forwarder", "--allowed-signers", allowed.to_str().unwrap()], &[]);
    let want = "fwc_rollout_held{host=\"web-1\",reason=\"unverified_state\"} 1";
    assert!(wait_until(Duration::from_secs(15), || agent.scrape().contains(want)), "{}\n{}", agent.scrape(), agent.log_text());
    assert_eq!(applied(&s), None, "nothing may be applied on an unverified state");
    // The metric moves before agent.json is written: wait for it.
    let journal = || std::fs::read_to_string(s.join("agent.json")).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    assert!(wait_until(Duration::from_secs(10), || journal().is_some_and(|j| j["rollout"].is_object())), "{:?}", journal());
    let status = journal().unwrap();
    assert_eq!(status["rollout"]["held"], "unverified_state", "{status:#}");
    assert!(status["rollout"]["detail"].as_str().unwrap().contains("not signed"), "{status:#}");
}

/// The rollout state cannot be replayed or made to disappear, and a tip that drops the policy
/// does not bypass it (with a real agent and a real file:// remote):
/// - the ref set back to an older "halted, roll back" state: the host holds (`state_rewound`,
///   audited) instead of going back to that state's old stable commit;
/// - the ref deleted: the host holds (`state_missing`), never falls back to the tip, even one
///   without a `rollout` block;
/// - a state that succeeds the last one, halted: a tip without a policy is not applied.
#[test]
fn replayed_deleted_and_bypassed_rollout_states_are_not_followed() {
    if !privileged("replayed_deleted_and_bypassed_rollout_states_are_not_followed") {
        return;
    }
    let ns = Netns::new("fr");
    let repo = Repo::new();
    let held = |a: &AgentProc, r: &str| a.scrape().contains(&format!("fwc_rollout_held{{host=\"canary-1\",reason=\"{r}\"}} 1"));
    let c1 = repo.commit(&allow_port(80), "v1", None, false);
    push_state(&repo, &state(&c1, Some(&c1), Some(1), RolloutPhase::Complete, false));
    let sc = repo.root.join("canary");
    let agent = AgentProc::start_as("canary-1", &sc, &repo.url(), &ns.name, &["--no-forwarder"], &[]);
    wait_entry(&sc, &c1, "apply", &agent);
    // c2 halted with rollback to c1 (this state is what gets replayed later) ...
    let c2 = repo.commit(&allow_port(81), "v2", None, false);
    let old = push_state(&repo, &state(&c2, Some(&c1), Some(0), RolloutPhase::Halted, true));
    assert!(wait_until(Duration::from_secs(15), || held(&agent, "halted")), "{}", agent.log_text());
    // ... then c3 rolled out everywhere.
    let c3 = repo.commit(&allow_port(82), "v3", None, false);
    let good = push_state(&repo, &state(&c3, Some(&c3), Some(1), RolloutPhase::Complete, false));
    wait_entry(&sc, &c3, "apply", &agent);

    // Replay: the ref set back to the old state.
    git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &old]);
    assert!(wait_until(Duration::from_secs(15), || held(&agent, "state_rewound")), "{}\n{}", agent.scrape(), agent.log_text());
    std::thread::sleep(Duration::from_millis(2500)); // two polls
    assert_eq!(applied(&sc), Some(c3.clone()), "a replayed state moved the host");
    let hold = audit(&sc).into_iter().rev().find(|e| e["action"] == "hold").expect("a hold entry");
    assert!(hold["detail"].as_str().unwrap().contains("state_rewound") && hold["detail"].as_str().unwrap().contains("does not descend"), "{hold:#}");
    // Put back: followed again.
    git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &good]);
    assert!(wait_until(Duration::from_secs(15), || !held(&agent, "state_rewound")), "{}", agent.scrape());

    // Deleted ref, and a tip without a `rollout` block: the host holds on c3.
    git(&repo.bare, &["update-ref", "-d", "refs/heads/fwc-rollout"]);
    let c4 = repo.commit("fwc 1\nhost \"canary-1\" {\n    labels role=canary\n}\ninput policy=drop {\n    allow \"p84\" proto=tcp port=84\n}\n", "v4 drops the rollout block", None, false);
    assert!(wait_until(Duration::from_secs(15), || held(&agent, "state_missing")), "{}\n{}", agent.scrape(), agent.log_text());
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(applied(&sc), Some(c3.clone()), "the tip was applied without a rollout state");

    // A successor of the last state, halted without rollback, with that tip: still held.
    let mut halted = state(&c4, Some(&c3), Some(0), RolloutPhase::Halted, false);
    halted.policy_commit = Some(c3.clone()); // the policy in force: the stable commit's
    push_state_on(&repo, &halted, Some(&good));
    assert!(wait_until(Duration::from_secs(15), || held(&agent, "halted")), "{}\n{}", agent.scrape(), agent.log_text());
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(applied(&sc), Some(c3.clone()), "a tip without a policy bypassed a halted rollout");
    assert!(!audit(&sc).iter().any(|e| e["commit"] == c4.as_str() && e["action"] == "apply"), "{:#?}", audit(&sc));
    // Its rollout completing hands the repository back to the tip.
    let mut done = state(&c4, Some(&c4), Some(1), RolloutPhase::Complete, false);
    done.policy_commit = Some(c3.clone());
    push_state(&repo, &done);
    wait_entry(&sc, &c4, "apply", &agent);
    let c5 = repo.commit("fwc 1\nhost \"canary-1\" {\n    labels role=canary\n}\ninput policy=drop {\n    allow \"p85\" proto=tcp port=85\n}\n", "v5", None, false);
    wait_entry(&sc, &c5, "apply", &agent);
    assert_audit_verifies(&sc);
}

// ---------------------------------------------------------------------------------------------
// self-check

fn once_as_in(ns: &Netns, host: &str, state: &Path, url: &str) -> Output {
    // The agent runs inside the namespace (no --netns): its own fetch goes through the rules
    // it applies, as on a real host.
    Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_fwc"), "agent", "--once", "--no-forwarder", "--metrics", "off"])
        .args(["--host", host, "--fetch-timeout", "3s", "--repo", url, "--state-dir", state.to_str().unwrap()])
        .env("FWC_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Magic rollback: a commit whose rules cut the agent off from its git remote is reverted by the
/// self-check after the apply, so the host keeps its connectivity (without the self-check the
/// commit stays applied and the next fetch fails: exit 3).
#[test]
fn self_check_reverts_a_commit_that_cuts_the_agent_off_from_git() {
    if !privileged("self_check_reverts_a_commit_that_cuts_the_agent_off_from_git") {
        return;
    }
    let mut t = Topology::new();
    let repo = Repo::new();
    // git daemon in the client namespace; the agent in the host namespace reaches it over the veth.
    let port = 9418;
    let exec_path = git(&repo.root, &["--exec-path"]);
    let daemon = Path::new(&exec_path).join("git-daemon");
    t.client.spawn(&[
        daemon.to_str().unwrap(),
        "--reuseaddr",
        "--export-all",
        "--listen=198.18.1.2",
        &format!("--port={port}"),
        &format!("--base-path={}", repo.root.display()),
        repo.root.to_str().unwrap(),
    ]);
    let url = format!("git://198.18.1.2:{port}/rules.git");
    let ls = |ns: &Netns| ns.try_exec(&["timeout", "10", "git", "ls-remote", &url]).status.success();
    assert!(wait_until(Duration::from_secs(10), || ls(&t.host)), "git daemon not reachable from the host namespace");

    // v1 has no rollout policy: applied as today.
    let c1 = repo.commit("fwc 1\nhost \"canary-1\" {\n    labels role=canary\n}\noutput {\n    deny \"no-smtp\" proto=tcp port=25\n}\n", "v1", None, false);
    let state = repo.root.join("state");
    let once_in = |ns: &Netns, state: &Path, url: &str| once_as_in(ns, "canary-1", state, url);
    let o = once_in(&t.host, &state, &url);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(applied(&state), Some(c1.clone()));

    // The commit docs/fleet.md shows ("never strands it").
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet.md")).unwrap();
    let after = &doc[doc.find("commit that cuts a host off from git, e.g.").expect("the example in docs/fleet.md")..];
    let block = after.split("```kdl\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    let c2 = repo.commit(block, "cuts git off", None, false);
    // Its rollout starts: the canary wave (this host) is promoted.
    push_state(&repo, &state_of(&c2, Some(&c1), Some(0), RolloutPhase::Progressing, false));
    let o = once_in(&t.host, &state, &url);
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(5), "the self-check failure exits like a failed apply:\n{log}");
    assert!(log.contains("self-check failed"), "{log}");
    // Reverted: c1 is live again, and the host still reaches git.
    assert_eq!(applied(&state), Some(c1.clone()), "{log}");
    assert!(ls(&t.host), "the host lost its path to git");
    let e = audit(&state).into_iter().find(|e| e["commit"] == c2.as_str() && e["action"] == "apply").expect("apply entry");
    assert_eq!(e["result"], "rolled_back", "{e:#}");
    assert!(e["detail"].as_str().unwrap().contains("self-check failed after the apply: the git remote is unreachable"), "{e:#}");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert_eq!(j["handled"]["outcome"], "self_check", "{j:#}");
    // Final for that commit: the next run fetches fine and does not re-apply it.
    let o = once_in(&t.host, &state, &url);
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(audit(&state).iter().filter(|e| e["commit"] == c2.as_str() && e["action"] == "apply").count(), 1);
    // An operator resumes the rollout (after its halt): the host tries the commit again (here
    // it still cuts git off, so it is reverted again), and then it is final again.
    let mut resumed = state_of(&c2, Some(&c1), Some(0), RolloutPhase::Progressing, false);
    resumed.resumed = Some(Resumed { generation: resumed.generation, at: "2026-11-26T12:05:00Z".into() });
    push_state(&repo, &resumed);
    let o = once_in(&t.host, &state, &url);
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(5), "{log}");
    assert!(log.contains("self-check failed"), "tried again after the resume:\n{log}");
    assert_eq!(applied(&state), Some(c1.clone()), "{log}");
    assert_eq!(audit(&state).iter().filter(|e| e["commit"] == c2.as_str() && e["action"] == "apply").count(), 2);
    let o = once_in(&t.host, &state, &url);
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(audit(&state).iter().filter(|e| e["commit"] == c2.as_str() && e["action"] == "apply").count(), 2, "once per resume");
    assert_audit_verifies(&state);
}

// ---------------------------------------------------------------------------------------------
// real agents, a real Prometheus scraping them, `fwc rollout` deciding

/// A Prometheus server scraping `targets` every 500 ms (testkit's launcher; killed on drop),
/// with the queries these scenarios wait on.
struct Prometheus {
    server: fwc_testkit::Prometheus,
}

impl Prometheus {
    fn start(targets: &[std::net::SocketAddr]) -> Prometheus {
        let p = Prometheus { server: fwc_testkit::Prometheus::start("fwc", targets, "500ms") };
        let n = targets.len();
        assert!(
            wait_until(Duration::from_secs(60), || p.query("count(fwc_build_info)").is_some_and(|r| r.first().and_then(|s| s["value"][1].as_str()) == Some(&n.to_string()))),
            "prometheus does not scrape the {n} agents"
        );
        p
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn query(&self, q: &str) -> Option<Vec<serde_json::Value>> {
        let path = format!("/api/v1/query?query={}", q.bytes().map(|b| format!("%{b:02X}")).collect::<String>());
        let (code, body) = fwc_runtime::metrics::http_request(self.server.addr, "GET", &path, &[], b"").ok()?;
        if code != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"].as_array().cloned()
    }

    /// Wait until Prometheus has a sample of `q`.
    fn wait_for(&self, q: &str) {
        assert!(wait_until(Duration::from_secs(30), || self.query(q).is_some_and(|r| !r.is_empty())), "prometheus never saw {q}");
    }
}

fn fwc_cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).env("FWC_LOG", "warn").stdin(Stdio::null()).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `fwc rollout advance --json` until the state satisfies `want`; the last state.
fn advance_until(url: &str, prom: &Prometheus, what: &str, want: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let ok = wait_until(Duration::from_secs(60), || {
        let (code, out, err) = fwc_cli(&["rollout", "advance", "--repo", url, "--prometheus", &prom.url(), "--missing-after", "3s", "--json"]);
        assert_eq!(code, 0, "advance failed:\n{out}{err}");
        last = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        want(&last["state"])
    });
    assert!(ok, "gave up waiting for {what}; last advance:\n{last:#}");
    last["state"].clone()
}

fn fleet_rules(marker: &str, port: u16) -> String {
    format!(
        "fwc 1\n// {marker}\nhost \"canary-1\" {{\n    labels role=canary\n}}\nhost \"web-1\" {{\n    labels role=web\n}}\nrollout on-failure=\"rollback\" {{\n    wave \"canary\" on=\"role=canary\"\n    wave \"all\" max-unavailable=1\n}}\ninput policy=drop {{\n    allow \"p{port}\" proto=tcp port={port}\n}}\n"
    )
}

/// The issue's scenarios with two real agents (a canary and a host of the last wave), a real
/// git remote, a real Prometheus scraping both, and `fwc rollout` deciding from what it sees:
/// happy path canary -> all; the canary's apply fails -> halted, the later wave never applies
/// that commit; a fix is not halted by the canary's old failure; `halt --rollback` takes the
/// promoted canary back to stable; a host offline is tolerated (max-unavailable) and catches
/// up when it is back.
#[test]
fn rollout_scenarios_with_real_agents_and_a_real_prometheus() {
    if !privileged("rollout_scenarios_with_real_agents_and_a_real_prometheus")
        || !fwc_testkit::tool("rollout_scenarios_with_real_agents_and_a_real_prometheus", "prometheus", "prometheus")
    {
        return;
    }
    let (ns_c, ns_w) = (Netns::new("pc"), Netns::new("pw"));
    let repo = Repo::new();
    let url = repo.url();
    let (sc, sw) = (repo.root.join("canary"), repo.root.join("web"));
    let web_port = free_port();
    let c1 = repo.commit(&fleet_rules("v1", 80), "v1", None, false);
    let canary = AgentProc::start_as("canary-1", &sc, &url, &ns_c.name, &["--no-forwarder"], &[("FWC_AGENT_TEST_HOOKS", "1")]);
    let mut web = Some(AgentProc::start_on(web_port, "web-1", &sw, &url, &ns_w.name, &["--no-forwarder"], &[]));
    let prom = Prometheus::start(&[canary.metrics, web.as_ref().unwrap().metrics]);

    // 1. Happy path: no state yet, nobody applies; advance starts the rollout of the tip, the
    //    canary takes it, then the last wave, then complete.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!((applied(&sc), applied(&sw)), (None, None), "nothing before the first rollout starts");
    prom.wait_for("fwc_rollout_held{host=\"web-1\",reason=\"not_promoted\"} == 1");
    let st = advance_until(&url, &prom, "v1 started", |s| s["commit"] == c1.as_str());
    assert_eq!(st["promoted"], 0, "{st}");
    wait_entry(&sc, &c1, "apply", &canary);
    assert_eq!(applied(&sw), None, "the last wave waits for the canary");
    let st = advance_until(&url, &prom, "v1 complete", |s| s["phase"] == "complete");
    assert_eq!(st["stable"], c1.as_str());
    wait_entry(&sw, &c1, "apply", web.as_ref().unwrap());

    // 2. The canary's apply fails: the rollout halts with rollback; the last wave never applies it.
    let c2 = repo.commit(&fleet_rules("v2", 81), "v2 [fwc-test: fail-apply]", None, false);
    advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    let e = wait_entry(&sc, &c2, "apply", &canary);
    assert_eq!(e["result"], "rolled_back", "{e:#}");
    prom.wait_for(&format!("fwc_agent_degraded{{host=\"canary-1\",commit=\"{c2}\",reason=\"rolled_back\"}} == 1"));
    let st = advance_until(&url, &prom, "v2 halted", |s| s["phase"] == "halted");
    assert_eq!((st["rollback"].as_bool(), st["stable"].as_str()), (Some(true), Some(c1.as_str())), "{st}");
    assert!(st["reason"].as_str().unwrap().contains("canary-1"), "the halt names the host: {st}");
    prom.wait_for("fwc_rollout_held{host=\"web-1\",reason=\"halted\"} == 1");
    assert!(!audit(&sw).iter().any(|e| e["commit"] == c2.as_str() && e["action"] == "apply"), "the last wave applied the halted commit");
    assert_eq!((applied(&sc), applied(&sw)), (Some(c1.clone()), Some(c1.clone())));
    // Back on stable, the canary still names the failure and its kind (not a generic one).
    let still = format!("fwc_agent_degraded{{host=\"canary-1\",commit=\"{c2}\",reason=\"rolled_back\"}} 1");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(canary.scrape().contains(&still), "{}", canary.scrape());

    // 3. The fix rolls out although the canary's old failure is still in its history: the
    //    degraded series names the failing commit, not "the canary".
    let c3 = repo.commit(&fleet_rules("v3", 82), "v3 fixes v2", None, false);
    advance_until(&url, &prom, "v3 started", |s| s["commit"] == c3.as_str() && s["phase"] == "progressing");
    wait_entry(&sc, &c3, "apply", &canary);
    prom.wait_for(&format!("fwc_agent_degraded{{host=\"canary-1\",commit=\"{c3}\",reason=\"\"}} == 0"));
    // 4. ... and an operator halts it with rollback: the promoted canary goes back to stable.
    let (code, out, err) = fwc_cli(&["rollout", "halt", "--rollback", "--reason", "test: operator", "--repo", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let back = {
        let mut found = None;
        wait_until(Duration::from_secs(30), || {
            found = audit(&sc).into_iter().rev().find(|e| e["commit"] == c1.as_str() && e["action"] == "apply" && e["previous_commit"] == c3.as_str());
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("the canary did not go back to stable:\n{:#?}\n{}", audit(&sc), canary.log_text()))
    };
    assert!(back["detail"].as_str().unwrap().contains("rewind allowed by the fleet rollout state"), "{back:#}");
    assert_eq!(applied(&sw), Some(c1.clone()), "the last wave was never promoted");

    // 5. A host offline: the rollout of v4 completes without it (max-unavailable=1), and it
    //    catches up when it is back.
    web.take().unwrap().kill9();
    let c4 = repo.commit(&fleet_rules("v4", 83), "v4", None, false);
    advance_until(&url, &prom, "v4 started", |s| s["commit"] == c4.as_str() && s["phase"] == "progressing");
    wait_entry(&sc, &c4, "apply", &canary);
    let st = advance_until(&url, &prom, "v4 complete without web-1", |s| s["phase"] == "complete");
    assert_eq!(st["stable"], c4.as_str());
    assert_eq!(applied(&sw), Some(c1.clone()));
    let web = AgentProc::start_on(web_port, "web-1", &sw, &url, &ns_w.name, &["--no-forwarder"], &[]);
    wait_entry(&sw, &c4, "apply", &web);
    prom.wait_for(&format!("fwc_applied_commit_info{{host=\"web-1\",commit=\"{c4}\"}} == 1"));
    assert!(!audit(&sw).iter().any(|e| e["commit"] == c2.as_str() && e["action"] == "apply"), "the halted commit never reached the last wave");
    assert_audit_verifies(&sc);
    assert_audit_verifies(&sw);
}
