//! Complete observation: drift of the eBPF QoS dataplane (`fwc qos detach`, a TCX
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
    tg.drift_seen_and_healed(&["listener missing (web tcp"]);
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

/// `ip netns exec NS fwc apply` of a cap: the program must outlive fwc (it used to vanish with
/// the private bpffs of `ip netns exec`, measured 11.2 Gbit/s through a 10 Mbit/s cap), so real
/// TCP through the forward stays far under line rate after fwc exited, and `fwc status --netns`
/// from the host sees the same dataplane, in sync.
#[test]
fn a_cap_applied_under_ip_netns_exec_outlives_the_process() {
    if !privileged("a_cap_applied_under_ip_netns_exec_outlives_the_process") || !fwc_testkit::which("iperf3") {
        return;
    }
    let mut t = Topology::new();
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", t.host.name);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules()).unwrap();
    let state = repo.path().join("state");
    let (dir, st) = (repo.path().to_str().unwrap(), state.to_str().unwrap());
    let o = Command::new("ip")
        .args(["netns", "exec", &t.host.name, env!("CARGO_BIN_EXE_fwc"), "apply", dir, "--state-dir", st, "--auto-approve"])
        .env("NO_COLOR", "1")
        .env_remove("SSH_CONNECTION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // fwc has exited: the pins are in the host's bpffs, under the namespace's name.
    assert!(!links(&pins).is_empty(), "no TCX link pinned under {pins} after `ip netns exec … fwc apply`");
    let s = fwc(&["status", "--netns", &t.host.name, "--state-dir", st]);
    assert_eq!(s.status.code(), Some(0), "{}", text(&s));

    t.backend.spawn(&["iperf3", "-s", "-B", "198.18.2.2", "-p", "5001"]);
    std::thread::sleep(Duration::from_millis(500));
    let out = t.client.exec(&["iperf3", "-c", "198.18.1.1", "-p", "5000", "-t", "3", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 json: {e}: {out}"));
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or_else(|| panic!("{out}"));
    eprintln!("through the cap after fwc exited: {:.1} Mbit/s", bps / 1e6);
    // The cap is 10 Mbit/s; an uncapped veth pair carries Gbit/s.
    assert!(bps < 30e6, "{:.1} Mbit/s through a 10 Mbit/s cap after fwc exited", bps / 1e6);
    assert!(bps > 1e6, "{:.1} Mbit/s: the forward itself does not work", bps / 1e6);
}

/// One owner per namespace: a second state dir applying a cap into a namespace whose QoS
/// dataplane another state dir manages is refused, naming the owner, with nothing changed.
#[test]
fn a_second_state_dir_on_the_same_namespace_is_refused() {
    if !privileged("a_second_state_dir_on_the_same_namespace_is_refused") {
        return;
    }
    let t = Topology::new();
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules()).unwrap();
    let (a, b) = (repo.path().join("state-a"), repo.path().join("state-b"));
    let first = Target { dir: repo.path().to_str().unwrap(), ns: &t.host.name, state: a.to_str().unwrap() };
    let o = first.apply();
    assert!(o.status.success(), "{}", text(&o));
    let table = t.host.exec(&["nft", "list", "table", "inet", "fwc"]);
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules().replace("10mbit", "20mbit")).unwrap();
    let second = Target { dir: repo.path().to_str().unwrap(), ns: &t.host.name, state: b.to_str().unwrap() };
    let o = second.apply();
    let out = text(&o);
    assert!(!o.status.success(), "a second state dir took over the namespace: {out}");
    assert!(out.contains("is managed by the fwc state dir") && out.contains(a.to_str().unwrap()), "{out}");
    assert!(out.contains("Nothing was changed"), "{out}");
    assert_eq!(t.host.exec(&["nft", "list", "table", "inet", "fwc"]), table, "the refused apply changed nftables");
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules()).unwrap();
    first.clean();
}

/// The agent (`--no-forwarder`: the forwarder is its own process) heals a forwarder killed
/// with SIGKILL: the next drift check reports it ("userspace
/// forwarder is not running", audited as the heal's detail) and the heal starts a new one, with
/// every listener, while the agent keeps running.
#[test]
fn agent_restarts_a_killed_forwarder_without_restart() {
    if !privileged("agent_restarts_a_killed_forwarder_without_restart") {
        return;
    }
    let t = Topology::new();
    let repo = Repo::new();
    repo.commit(userspace_rules(), "forwards", None, false);
    let state = repo.root.join("state");
    let _started = StartedForwarder(state.clone());
    let st = state.to_str().unwrap().to_string();
    // The forwarder as its own process (the apply starts it), not the agent's thread.
    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &["--no-forwarder"], &[]);
    let status = || fwc(&["status", "--netns", &t.host.name, "--state-dir", &st]);
    assert!(wait_until(Duration::from_secs(30), || status().status.code() == Some(0)), "not applied: {}\n{}", text(&status()), agent.log_text());
    let pid_of = || std::fs::read_to_string(state.join("forwarder.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok());
    let first = pid_of().expect("the agent started a forwarder (forwarder.pid)");

    // SAFETY: kill(2) of the forwarder the agent started for this test's state dir.
    unsafe { libc::kill(first, libc::SIGKILL) };
    let healed = || {
        agent_common::audit(&state).into_iter().any(|e| {
            e["action"] == "heal" && e["result"] == "ok" && e["detail"].as_str().is_some_and(|d| d.contains("userspace forwarder is not running"))
        }) && status().status.code() == Some(0)
    };
    assert!(wait_until(Duration::from_secs(30), healed), "the agent did not heal the killed forwarder: {}\n{:?}\n{}", text(&status()), agent_common::audit(&state), agent.log_text());
    let second = pid_of().expect("forwarder.pid after the heal");
    assert_ne!(first, second, "the forwarder pid did not change");
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(second, 0) }, 0, "the new forwarder {second} is not running");
    let listening = t.host.exec(&["ss", "-Hltn"]);
    assert!(listening.contains(":7000") && listening.contains(":7002"), "{listening}");
    assert!(!agent.scrape().is_empty(), "the agent is not running any more: {}", agent.log_text());
}

/// Where no bpffs outlives the process — a container without the host's bpffs, entered with
/// `ip netns exec` — a cap is refused before anything changes (no table, no pin, no
/// generation), and the message says what to do. Built with a private pid and mount namespace
/// whose `/sys/fs/bpf` is a tmpfs, and `ip netns exec` inside it.
#[test]
fn a_cap_without_a_persistent_bpffs_is_refused_before_anything_changes() {
    if !privileged("a_cap_without_a_persistent_bpffs_is_refused_before_anything_changes") {
        return;
    }
    let t = Topology::new();
    let ns = &t.host;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), capped_rules()).unwrap();
    let state = repo.path().join("state");
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", ns.name);
    // pid 1 (sh) -> sh -> ip netns exec -> fwc: fwc's ancestors see only the tmpfs.
    let inner = format!(
        "ip netns exec {} {} apply {} --state-dir {} --auto-approve; echo \"rc=$?\"",
        ns.name,
        env!("CARGO_BIN_EXE_fwc"),
        repo.path().display(),
        state.display()
    );
    let script = format!("mount -t tmpfs fwc-t-nobpf /sys/fs/bpf && sh -c '{inner}'; true");
    let o = Command::new("unshare")
        .args(["-m", "-p", "--fork", "--mount-proc", "sh", "-c", &script])
        .env("NO_COLOR", "1")
        .env_remove("SSH_CONNECTION")
        .env_remove("FWC_TEST_FAIL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = text(&o);
    assert!(out.contains("rc=") && !out.contains("rc=0"), "the apply was not refused: {out}");
    assert!(out.contains("outlives") && out.contains("fwc apply --netns"), "the refusal does not say what to do: {out}");
    let table = ns.try_exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(!table.status.success(), "table inet fwc was created by a refused apply: {}", String::from_utf8_lossy(&table.stdout));
    assert!(!Path::new(&pins).exists(), "pins under {pins} after a refused apply");
    let s = fwc(&["status", "--netns", &ns.name, "--state-dir", state.to_str().unwrap()]);
    assert!(text(&s).contains("nothing") || !s.status.success(), "a generation was recorded: {}", text(&s));
}
