//! Complete observation (#12 item 3): drift of the eBPF QoS dataplane (`fwc qos detach`, a TCX
//! link detached with `bpftool link detach`) and of the userspace forwarder (a listener removed
//! over its control socket, the forwarder killed) is reported per object by `fwc status` (exit
//! 2) and `fwc plan` (exit 2 with --detailed-exitcode), and healed by `fwc apply` although the
//! artifacts did not change, and by the agent without a restart. Real kernel, real forwarder,
//! real git remote for the agent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fwc_testkit::{privileged, Netns, Topology};

mod agent_common;
use agent_common::{wait_until, AgentProc, Repo};

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("FWC_TEST_FAIL")
        .env_remove("SSH_CONNECTION")
        .stdin(Stdio::null())
        .output()
        .expect("fwc runs")
}

/// stdout and stderr, miette's wrapping undone.
fn text(o: &Output) -> String {
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    all.replace('│', " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Removes a namespace's pin root (pins outlive the namespace otherwise).
struct PinGuard(String);
impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the forwarder `fwc apply` started for a state dir (its pid file), on drop.
struct StartedForwarder(PathBuf);
impl Drop for StartedForwarder {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.0.join("forwarder.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: plain kill(2) of the pid the apply recorded.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

struct Target<'a> {
    dir: &'a str,
    ns: &'a str,
    state: &'a str,
}

impl Target<'_> {
    fn status(&self) -> Output {
        fwc(&["status", "--netns", self.ns, "--state-dir", self.state])
    }
    fn plan(&self) -> Output {
        fwc(&["plan", self.dir, "--netns", self.ns, "--state-dir", self.state, "--detailed-exitcode"])
    }
    fn apply(&self) -> Output {
        fwc(&["apply", self.dir, "--netns", self.ns, "--state-dir", self.state, "--auto-approve"])
    }

    /// `status` and `plan` both see drift naming `what`; `apply` heals it; `status` is clean.
    #[track_caller]
    fn drift_seen_and_healed(&self, what: &[&str]) {
        let st = self.status();
        assert_eq!(st.status.code(), Some(2), "status must exit 2 on drift: {}", text(&st));
        let plan = self.plan();
        assert_eq!(plan.status.code(), Some(2), "plan must show changes: {}", text(&plan));
        for w in what {
            assert!(text(&st).contains(w), "status does not report {w:?}: {}", text(&st));
            assert!(text(&plan).contains(w), "plan does not report {w:?}: {}", text(&plan));
        }
        let o = self.apply();
        assert!(o.status.success(), "apply did not heal: {}", text(&o));
        self.clean();
    }

    #[track_caller]
    fn clean(&self) {
        let st = self.status();
        assert_eq!(st.status.code(), Some(0), "status after heal: {}", text(&st));
        assert!(text(&st).contains("Drift: no"), "{}", text(&st));
        let plan = self.plan();
        assert_eq!(plan.status.code(), Some(0), "plan after heal: {}", text(&plan));
    }
}

fn capped_rules() -> &'static str {
    "fwc 1\nforward \"bulk\" listen=\":5000\" to=\"198.18.2.2:5001\" bandwidth=\"10mbit\"\n"
}

fn userspace_rules() -> &'static str {
    "fwc 1\nforward \"api\" listen=\":7000\" to=\"198.18.2.2:7001\" backend=\"userspace\"\n\
     forward \"web\" listen=\":7002\" to=\"198.18.2.2:7001\" backend=\"userspace\"\n"
}

/// The pinned TCX links of a pin root.
fn links(pins: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new(pins).join("links"))
        .map(|rd| rd.flatten().map(|e| e.path().display().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn qos_drift_is_reported_and_healed_by_apply() {
    if !privileged("qos_drift_is_reported_and_healed_by_apply") {
        return;
    }
    let t = Topology::new();
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", t.host.name);
    let _pins = PinGuard(pins.clone());
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules()).unwrap();
    let state = repo.path().join("state");
    let tg = Target { dir: repo.path().to_str().unwrap(), ns: &t.host.name, state: state.to_str().unwrap() };
    let o = tg.apply();
    assert!(o.status.success(), "{}", text(&o));
    tg.clean();
    let before = links(&pins);
    assert!(!before.is_empty(), "no TCX link pinned under {pins}");

    // 1. `fwc qos detach`: pins and attachments gone.
    let o = fwc(&["qos", "detach", "--pin-dir", &pins]);
    assert!(o.status.success(), "{}", text(&o));
    tg.drift_seen_and_healed(&["nothing pinned under", "not attached to", "QoS class"]);
    assert_eq!(links(&pins), before);

    // 2. The TCX link detached behind fwc's back (its pin stays, the attachment is gone).
    if fwc_testkit::which("bpftool") {
        for l in links(&pins) {
            let out = Command::new("bpftool").args(["-j", "link", "show", "pinned", &l]).output().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool json");
            let id = v["id"].as_u64().expect("link id").to_string();
            let o = Command::new("bpftool").args(["link", "detach", "id", &id]).output().unwrap();
            assert!(o.status.success(), "bpftool link detach: {}", text(&o));
        }
        tg.drift_seen_and_healed(&["not attached to"]);
    }
}

#[test]
fn forwarder_drift_is_reported_and_healed_by_apply() {
    if !privileged("forwarder_drift_is_reported_and_healed_by_apply") {
        return;
    }
    let mut ns = Netns::new("obs-fwd");
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), userspace_rules()).unwrap();
    let state = repo.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let _started = StartedForwarder(state.clone());
    let st = state.to_str().unwrap().to_string();
    let fwd = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_fwc"), "forward", "--state-dir", &st])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let fwd_pid = fwd.id();
    ns.adopt(fwd);
    assert!(wait_until(Duration::from_secs(10), || state.join("forwarder.sock").exists()), "no forwarder socket");
    let tg = Target { dir: repo.path().to_str().unwrap(), ns: &ns.name, state: &st };
    let o = tg.apply();
    assert!(o.status.success(), "{}", text(&o));
    tg.clean();

    // 1. A listener removed over the control socket.
    let mut c = fwc_forwarder::control::Client::connect(&state, Duration::from_secs(5)).unwrap();
    let st0 = c.request(&fwc_forwarder::control::Request::Status).unwrap().status.unwrap();
    let mut cfg = st0.config.clone();
    cfg.listeners.retain(|l| l.rule != "web");
    let r = c.request(&fwc_forwarder::control::Request::Apply { config: cfg }).unwrap();
    assert!(r.ok, "{r:?}");
    tg.drift_seen_and_healed(&["forward web: listener missing"]);
    let listening = ns.exec(&["ss", "-Hltn"]);
    assert!(listening.contains(":7002"), "{listening}");

    // 2. The forwarder killed: apply starts one (detached, inside the namespace).
    // SAFETY: kill(2) of the forwarder this test started.
    unsafe { libc::kill(fwd_pid as i32, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(5), || fwc_forwarder::control::Client::connect(&state, Duration::from_secs(1)).is_err()));
    tg.drift_seen_and_healed(&["userspace forwarder is not running"]);
    assert!(state.join("forwarder.pid").exists());
    let listening = ns.exec(&["ss", "-Hltn"]);
    assert!(listening.contains(":7000") && listening.contains(":7002"), "{listening}");
}

/// The agent heals QoS drift (`fwc qos detach`) without a restart — it used to fail its heal
/// every interval (`BPF_OBJ_PIN failed … ROLLBACK FAILED`) — and a listener removed from its
/// forwarder.
#[test]
fn agent_heals_qos_and_forwarder_drift_without_restart() {
    if !privileged("agent_heals_qos_and_forwarder_drift_without_restart") {
        return;
    }
    let t = Topology::new();
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", t.host.name);
    let _pins = PinGuard(pins.clone());
    let repo = Repo::new();
    let rules = format!("{}{}", capped_rules(), userspace_rules().trim_start_matches("fwc 1\n"));
    repo.commit(&rules, "cap and forwards", None, false);
    let state = repo.root.join("state");
    let st = state.to_str().unwrap().to_string();
    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &[], &[]);
    let status = || fwc(&["status", "--netns", &t.host.name, "--state-dir", &st]);
    assert!(wait_until(Duration::from_secs(30), || status().status.code() == Some(0)), "not applied: {}\n{}", text(&status()), agent.log_text());

    // Healed = an audited heal that succeeded and a clean status (status takes no lock, so
    // it alone could catch a heal half way).
    let healed = |n: usize| {
        wait_until(Duration::from_secs(20), || {
            agent_common::audit(&state).into_iter().filter(|e| e["action"] == "heal" && e["result"] == "ok").count() >= n
                && status().status.code() == Some(0)
        })
    };
    let o = fwc(&["qos", "detach", "--pin-dir", &pins]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(healed(1), "the agent did not heal the QoS drift: {}\n{}", text(&status()), agent.log_text());
    assert!(!links(&pins).is_empty());

    let mut c = fwc_forwarder::control::Client::connect(&state, Duration::from_secs(5)).unwrap();
    let mut cfg = c.request(&fwc_forwarder::control::Request::Status).unwrap().status.unwrap().config;
    cfg.listeners.retain(|l| l.rule != "web");
    assert!(c.request(&fwc_forwarder::control::Request::Apply { config: cfg }).unwrap().ok);
    assert!(healed(2), "the agent did not heal the forwarder drift: {}\n{}", text(&status()), agent.log_text());
    let log = agent.log_text();
    assert!(!log.contains("ROLLBACK FAILED"), "{log}");
    let heals = agent_common::audit(&state).into_iter().filter(|e| e["action"] == "heal" && e["result"] == "ok").count();
    assert!(heals >= 2, "two heals audited: {:?}\n{log}", agent_common::audit(&state));
}
