//! `fwc rollout` end to end with real parts: a real git remote (a bare repository, file:// and
//! `git daemon` with push), a real Prometheus scraping an HTTP endpoint the test serves with
//! agent-shaped metrics (`fwc_applied_commit_info{host,commit}`, `fwc_agent_degraded{host,
//! commit,reason}`), and the real `fwc` binary deciding and pushing. The hosts are played by the
//! test (the real agents' end-to-end scenarios live with the agent); no wall-clock budgets.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

mod agent_common;
use agent_common::{free_port, git, Repo};

const FWC: &str = env!("CARGO_BIN_EXE_fwc");

/// Wait (generously) until `f` gives a value.
fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    fwc_testkit::poll_until(what, Duration::from_secs(90), Duration::from_millis(200), || f().ok_or("not yet")).0
}

/// A policy: canary = c1 (soak 2 s, gates), early = e1 e2 (one may be missing), all = a1 a2.
struct Policy {
    canary_gate: Option<(&'static str, f64)>,
    soak: u64,
    /// The `rollout` node's properties, e.g. `on-failure="rollback"`.
    props: &'static str,
    /// false: the commit has no `rollout` block at all.
    rollout: bool,
    /// The canary gate's `grace=` (empty: none).
    gate_grace: &'static str,
}

impl Policy {
    fn plain() -> Policy {
        Policy { canary_gate: None, soak: 0, props: "", rollout: true, gate_grace: "" }
    }

    fn with(props: &'static str) -> Policy {
        Policy { props, ..Policy::plain() }
    }

    fn kdl(&self, marker: &str) -> String {
        let gate = match self.canary_gate {
            Some((q, max)) => {
                let grace = if self.gate_grace.is_empty() { String::new() } else { format!(" grace=\"{}\"", self.gate_grace) };
                format!(" {{\n        gate \"errors\" query={} max={max}{grace}\n    }}", serde_json::to_string(q).unwrap())
            }
            None => String::new(),
        };
        let soak = if self.soak > 0 { format!(" soak=\"{}s\"", self.soak) } else { String::new() };
        let mut s = format!("fwc 1\n// {marker}\n");
        if self.rollout {
            s.push_str(&format!(
                "rollout {}{{\n    wave \"canary\" on=\"role=canary\"{soak}{gate}\n    wave \"early\" on=\"role=early\" max-unavailable=1\n    wave \"all\"\n}}\n",
                if self.props.is_empty() { String::new() } else { format!("{} ", self.props) }
            ));
        }
        for (h, role) in [("c1", "canary"), ("e1", "early"), ("e2", "early"), ("a1", "web"), ("a2", "web")] {
            s.push_str(&format!("host \"{h}\" {{\n    labels role={role}\n}}\n"));
        }
        s.push_str("input policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n");
        s
    }
}

/// Commit `text` as fwc.kdl and push it to main; the commit id.
fn push(repo: &Repo, text: &str, msg: &str) -> String {
    repo.commit(text, msg, None, false)
}

/// `git log` of the rollout branch in the remote: first lines, newest first.
fn rollout_log(repo: &Repo) -> Vec<String> {
    let out = Command::new("git").args(["log", "--format=%s", "fwc-rollout"]).current_dir(&repo.bare).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

/// What one simulated host exports.
#[derive(Clone, Default)]
struct Host {
    applied: String,
    /// (commit, reason) of a failure; healthy when None.
    degraded: Option<(String, String)>,
}

/// The fleet's /metrics: every host's series in one endpoint (each carries `host`), plus a
/// free-form gauge for gates. A host removed from the map stops reporting.
#[derive(Clone, Default)]
struct Fleet {
    hosts: Arc<Mutex<BTreeMap<String, Host>>>,
    error_ratio: Arc<Mutex<f64>>,
    /// The rollout state every host accepted last (`fwc_rollout_accepted_state`), if any.
    accepted: Arc<Mutex<Option<(String, u64)>>>,
}

impl Fleet {
    fn new(names: &[&str], commit: &str) -> Fleet {
        let f = Fleet::default();
        for n in names {
            f.set(n, commit);
        }
        f
    }

    fn set(&self, host: &str, commit: &str) {
        self.hosts.lock().unwrap().insert(host.into(), Host { applied: commit.into(), degraded: None });
    }

    fn fail(&self, host: &str, applied: &str, failed: &str, reason: &str) {
        self.hosts.lock().unwrap().insert(host.into(), Host { applied: applied.into(), degraded: Some((failed.into(), reason.into())) });
    }

    fn offline(&self, host: &str) {
        self.hosts.lock().unwrap().remove(host);
    }

    fn text(&self) -> String {
        let mut s = String::from("# TYPE fwc_applied_commit_info gauge\n");
        let hosts = self.hosts.lock().unwrap();
        for (h, st) in hosts.iter() {
            s.push_str(&format!("fwc_applied_commit_info{{host=\"{h}\",commit=\"{}\"}} 1\n", st.applied));
        }
        s.push_str("# TYPE fwc_agent_degraded gauge\n");
        for (h, st) in hosts.iter() {
            match &st.degraded {
                Some((c, r)) => s.push_str(&format!("fwc_agent_degraded{{host=\"{h}\",commit=\"{c}\",reason=\"{r}\"}} 1\n")),
                None => s.push_str(&format!("fwc_agent_degraded{{host=\"{h}\",commit=\"{}\",reason=\"\"}} 0\n", st.applied)),
            }
        }
        if let Some((state, generation)) = self.accepted.lock().unwrap().clone() {
            s.push_str("# TYPE fwc_rollout_accepted_state gauge\n");
            for h in hosts.keys() {
                s.push_str(&format!("fwc_rollout_accepted_state{{host=\"{h}\",state=\"{state}\"}} {generation}\n"));
            }
        }
        s.push_str(&format!("# TYPE test_error_ratio gauge\ntest_error_ratio {}\n", self.error_ratio.lock().unwrap()));
        s
    }

    /// Serve /metrics on a loopback port (a thread per process lifetime).
    fn serve(&self) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let me = self.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let mut buf = [0u8; 4096];
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = c.read(&mut buf);
                let body = me.text();
                let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            }
        });
        addr
    }
}

/// Prometheus scraping the simulated fleet every 500 ms (testkit's; killed on drop).
struct Prometheus {
    server: fwc_testkit::Prometheus,
    url: String,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let server = fwc_testkit::Prometheus::start("fleet", &[target], "500ms");
        let addr = server.addr;
        wait_until("prometheus to scrape the fleet", || {
            let (code, body) = fwc_runtime::metrics::http_request(addr, "GET", "/api/v1/query?query=up%3D%3D1", &[], b"").ok()?;
            (code == 200 && body.contains("\"fleet\"")).then_some(())
        });
        Prometheus { url: server.url(), server }
    }

    /// Wait until Prometheus sees `host` on `commit` (the controller reads what it sees).
    fn wait_applied(&self, host: &str, commit: &str) {
        let addr = self.server.addr;
        let q = format!("fwc_applied_commit_info{{host=\"{host}\",commit=\"{commit}\"}}");
        let path = format!("/api/v1/query?query={}", q.bytes().map(|b| format!("%{b:02X}")).collect::<String>());
        wait_until(&format!("prometheus to see {host} on {commit}"), || {
            let (_, body) = fwc_runtime::metrics::http_request(addr, "GET", &path, &[], b"").ok()?;
            body.contains(commit).then_some(())
        });
    }
}

fn have_tools(test: &str) -> bool {
    fwc_testkit::tool(test, "prometheus", "prometheus") && fwc_testkit::tool(test, "git", "git")
}

/// Run `fwc rollout ARGS --repo URL`; (exit code, stdout, stderr).
fn fwc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(FWC).args(args).env("FWC_LOG", "warn").stdin(Stdio::null()).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `doc` conforms to schemas/output/<name>.schema.json (what machines reading `--json` rely on).
fn conforms(doc: Value, name: &str) -> Value {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../schemas/output/{name}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let id = schema["$id"].as_str().unwrap().to_string();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(&id, schema).unwrap();
    let mut compiled = boon::Schemas::new();
    let at = compiler.compile(&id, &mut compiled).unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
    compiled.validate(&doc, at).unwrap_or_else(|e| panic!("{name}: {e:#}\n{doc:#}"));
    doc
}

/// `fwc rollout advance --json` once; the outcome document.
fn advance(url: &str, prom: &Prometheus) -> Value {
    let (code, out, err) = fwc(&["rollout", "advance", "--repo", url, "--prometheus", &prom.url, "--missing-after", "3s", "--json"]);
    assert_eq!(code, 0, "advance failed:\n{out}{err}");
    conforms(serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")), "rollout-step")
}

/// Advance until the state satisfies `want` (Prometheus may need a scrape or two to see a change).
fn advance_until(url: &str, prom: &Prometheus, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    wait_until(what, || {
        let o = advance(url, prom);
        want(&o["state"]).then_some(o)
    })
}

fn status(url: &str) -> Value {
    let (code, out, err) = fwc(&["rollout", "status", "--repo", url, "--json"]);
    assert_eq!(code, 0, "{err}");
    conforms(serde_json::from_str(&out).unwrap(), "rollout-status")
}

const HOSTS: [&str; 5] = ["c1", "e1", "e2", "a1", "a2"];

/// A repository whose first commit (v1, with the policy) is rolled out to every host and
/// complete: (repo, its URL, v1, the simulated fleet, Prometheus scraping it).
/// The policy in force for the next rollout is v1's (`policy`).
fn rolled_out_v1(policy: &Policy) -> (Repo, String, String, Fleet, Prometheus) {
    let repo = Repo::new();
    let url = repo.url();
    let c1 = push(&repo, &policy.kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, &c1);
    let prom = Prometheus::start(fleet.serve());
    advance_until(&url, &prom, "v1 complete", |s| s["phase"] == "complete");
    (repo, url, c1, fleet, prom)
}

#[test]
fn happy_path_canary_soaks_then_every_wave_then_complete() {
    if !have_tools("happy_path_canary_soaks_then_every_wave_then_complete") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    // The policy in force for a rollout is the stable commit's: v1's gate and soak govern v2's.
    let gated = Policy { canary_gate: Some(("max(test_error_ratio)", 0.1)), soak: 2, ..Policy::plain() };
    let c1 = push(&repo, &gated.kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, &c1);
    let prom = Prometheus::start(fleet.serve());
    // The first advance starts a rollout of the tip; the hosts already run it: it completes.
    let o = advance(&url, &prom);
    assert_eq!(o["result"], "transition", "{o}");
    assert_eq!((o["state"]["phase"].as_str(), o["state"]["promoted"].as_u64()), (Some("progressing"), Some(0)));
    advance_until(&url, &prom, "v1 complete", |s| s["phase"] == "complete");
    assert_eq!(status(&url)["state"]["stable"], c1.as_str());

    let c2 = push(&repo, &gated.kdl("v2"), "v2");
    let o = advance(&url, &prom);
    assert_eq!(o["message"].as_str().unwrap().contains("start"), true, "{o}");
    assert_eq!(o["state"]["stable"], c1.as_str());
    // Nobody applied v2 yet: nothing to do, and again (idempotent: no second commit).
    let n_before = rollout_log(&repo).len();
    for _ in 0..2 {
        let o = advance(&url, &prom);
        assert_eq!(o["result"], "nothing", "{o}");
        assert!(o["message"].as_str().unwrap().contains("c1"), "{o}");
    }
    assert_eq!(rollout_log(&repo).len(), n_before);

    fleet.set("c1", &c2);
    prom.wait_applied("c1", &c2);
    let o = advance_until(&url, &prom, "early promoted", |s| s["promoted"] == 1);
    let st = &o["state"];
    // The soak started when the canary was seen applied (a transition of its own) and early was
    // promoted at least 2 s later.
    let history = status(&url)["history"].clone();
    let soak = history.as_array().unwrap().iter().find(|h| h["message"].as_str().unwrap().contains("wave canary applied, soak")).unwrap_or_else(|| panic!("{history:#}"));
    let soak_at = humantime::parse_rfc3339(soak["time"].as_str().unwrap()).unwrap();
    let early_at = humantime::parse_rfc3339(st["promoted_at"].as_str().unwrap()).unwrap();
    assert!(early_at.duration_since(soak_at).unwrap() >= Duration::from_secs(2), "early promoted before the canary soaked 2 s: {st}\n{history:#}");
    // The later wave waits for its hosts.
    for h in ["e1", "e2"] {
        fleet.set(h, &c2);
    }
    advance_until(&url, &prom, "all promoted", |s| s["promoted"] == 2);
    for h in ["a1", "a2"] {
        fleet.set(h, &c2);
    }
    let o = advance_until(&url, &prom, "v2 complete", |s| s["phase"] == "complete");
    assert_eq!(o["state"]["stable"], c2.as_str());

    // `fwc fleet hosts`: every host on the rollout's commit, in its wave, healthy.
    let (code, out, err) = fwc(&["fleet", "hosts", "--repo", &url, "--prometheus", &prom.url, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = conforms(serde_json::from_str(&out).unwrap(), "fleet-hosts");
    let rows = v["hosts"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{v}");
    for r in rows {
        assert_eq!((r["on"].as_str(), r["health"].as_str()), (Some("rollout"), Some("ok")), "{r}");
    }
    assert_eq!(rows.iter().find(|r| r["host"] == "e1").unwrap()["wave_name"], "early");
    let (_, text, _) = fwc(&["fleet", "hosts", "--repo", &url, "--prometheus", &prom.url]);
    assert!(text.contains("HOST") && text.lines().any(|l| l.starts_with("c1") && l.contains("canary") && l.contains("ok")), "{text}");

    // The audit trail: one commit per transition, newest first.
    let log = rollout_log(&repo);
    assert!(
        log[0].contains("complete") && log[1].contains("promote wave all") && log[2].contains("promote wave early") && log[3].contains("wave canary applied, soak") && log[4].contains("start"),
        "{log:#?}"
    );
}

#[test]
fn a_degraded_canary_halts_with_rollback_and_a_fix_is_not_halted_by_the_old_failure() {
    if !have_tools("a_degraded_canary_halts_with_rollback_and_a_fix_is_not_halted_by_the_old_failure") {
        return;
    }
    let (repo, url, c1, fleet, prom) = rolled_out_v1(&Policy::with("on-failure=\"rollback\""));

    let bad = push(&repo, &Policy::with("on-failure=\"rollback\"").kdl("bad"), "bad");
    advance_until(&url, &prom, "bad started", |s| s["commit"] == bad.as_str());
    // The canary's apply fails; it stays on v1 and says the failure belongs to `bad`.
    fleet.fail("c1", &c1, &bad, "apply_failed");
    let o = advance_until(&url, &prom, "halt", |s| s["phase"] == "halted");
    let st = &o["state"];
    assert_eq!((st["rollback"].as_bool(), st["promoted"].as_u64(), st["stable"].as_str()), (Some(true), Some(0), Some(c1.as_str())), "{st}");
    assert!(st["reason"].as_str().unwrap().contains("c1 (apply_failed)"), "{st}");
    // Halted stays halted, and no later wave is ever promoted.
    for _ in 0..3 {
        let o = advance(&url, &prom);
        assert_eq!((o["result"].as_str(), o["state"]["promoted"].as_u64()), (Some("nothing"), Some(0)), "{o}");
    }
    assert!(!rollout_log(&repo).iter().any(|l| l.contains(&bad[..12]) && l.contains("promote wave early")), "{:#?}", rollout_log(&repo));
    // `fwc fleet hosts` shows who failed, for which commit, and that it runs the stable commit.
    let (code, text, err) = fwc(&["fleet", "hosts", "--repo", &url, "--prometheus", &prom.url]);
    assert_eq!(code, 0, "{err}");
    let c1_line = text.lines().find(|l| l.starts_with("c1 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(c1_line.contains("canary") && c1_line.contains("stable") && c1_line.contains("degraded") && c1_line.contains(&format!("apply_failed ({})", &bad[..12])), "{text}");
    assert!(text.starts_with(&format!("rollout of {}: halted", &bad[..12])), "{text}");

    // A fix: a new rollout starts; the canary still reports its failure of `bad`, which must
    // not halt the fix.
    let fix = push(&repo, &Policy::plain().kdl("fix"), "fix");
    let o = advance(&url, &prom);
    assert_eq!((o["result"].as_str(), o["state"]["commit"].as_str(), o["state"]["phase"].as_str()), (Some("transition"), Some(fix.as_str()), Some("progressing")), "{o}");
    assert_eq!(o["state"]["stable"], c1.as_str());
    let o = advance(&url, &prom);
    assert_eq!(o["result"], "nothing", "the old failure halted the fix: {o}");
    fleet.fail("c1", &fix, &bad, "apply_failed");
    prom.wait_applied("c1", &fix);
    advance_until(&url, &prom, "the fix's early wave promoted", |s| s["promoted"] == 1 && s["phase"] == "progressing");
}

#[test]
fn a_failing_gate_halts_once_the_canary_applied() {
    if !have_tools("a_failing_gate_halts_once_the_canary_applied") {
        return;
    }
    let gated = Policy { canary_gate: Some(("max(test_error_ratio)", 0.1)), props: "on-failure=\"rollback\"", ..Policy::plain() };
    let (repo, url, _, fleet, prom) = rolled_out_v1(&gated);
    *fleet.error_ratio.lock().unwrap() = 0.5;
    let c2 = push(&repo, &gated.kdl("v2"), "v2");
    advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    fleet.set("c1", &c2);
    prom.wait_applied("c1", &c2);
    let o = advance_until(&url, &prom, "gate halt", |s| s["phase"] == "halted");
    let reason = o["state"]["reason"].as_str().unwrap();
    assert!(reason.contains("gate \"errors\"") && reason.contains("0.5"), "{reason}");
    assert_eq!(o["state"]["rollback"], true);
    assert_eq!(o["state"]["promoted"], 0);

    // 3 a.m.: the operator reads the state, calls it a false alarm and resumes — signed, as
    // agents requiring signatures need; git itself verifies the state commit. The gate still
    // fails, so the next advance halts again.
    let (_, text, _) = fwc(&["rollout", "status", "--repo", &url]);
    assert!(text.contains("phase:     halted (rollback to stable)") && text.contains("gate \"errors\"") && text.contains("history (fwc-rollout, newest first)"), "{text}");
    fwc_testkit::sh(&format!("ssh-keygen -q -t ed25519 -N '' -C ctl -f {}/ctl", repo.root.display()));
    let key = repo.root.join("ctl");
    let allowed = repo.root.join("allowed");
    std::fs::write(&allowed, format!("ops@example.com namespaces=\"git\" {}", std::fs::read_to_string(key.with_extension("pub")).unwrap())).unwrap();
    let (code, out, err) = fwc(&["rollout", "resume", "--repo", &url, "--reason", "flaky gate", "--sign-key", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resume") && out.contains("flaky gate"), "{out}");
    let verified = Command::new("git")
        .args(["-c", &format!("gpg.ssh.allowedSignersFile={}", allowed.display()), "verify-commit", "fwc-rollout"])
        .current_dir(&repo.bare)
        .output()
        .unwrap();
    assert!(verified.status.success(), "git verify-commit: {}", String::from_utf8_lossy(&verified.stderr));
    assert_eq!(status(&url)["state"]["phase"], "progressing");
    let o = advance_until(&url, &prom, "halted again", |s| s["phase"] == "halted");
    assert!(o["state"]["reason"].as_str().unwrap().contains("errors"), "{o}");
    // A missing signing key: what, why, what to do; exit 1, nothing changed.
    let before = rollout_log(&repo).len();
    let (code, _, err) = fwc(&["rollout", "stop", "--repo", &url, "--sign-key", "/nonexistent/key"]);
    assert_eq!(code, 1);
    assert!(err.contains("does not exist") && err.contains("--sign-key"), "{err}");
    assert_eq!(rollout_log(&repo).len(), before);
}

#[test]
fn missing_hosts_count_against_max_unavailable_and_stop_ends_a_wave() {
    if !have_tools("missing_hosts_count_against_max_unavailable_and_stop_ends_a_wave") {
        return;
    }
    let (repo, url, _, fleet, prom) = rolled_out_v1(&Policy::with("missing-timeout=\"3s\""));
    let c2 = push(&repo, &Policy::plain().kdl("v2"), "v2");
    advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    fleet.set("c1", &c2);
    advance_until(&url, &prom, "early promoted", |s| s["promoted"] == 1);
    // e2 goes offline: early allows one missing host, so e1 alone completes the wave.
    fleet.offline("e2");
    fleet.set("e1", &c2);
    advance_until(&url, &prom, "all promoted with e2 missing", |s| s["promoted"] == 2);

    // stop during the last wave: hosts keep what they have, nothing more happens.
    let (code, out, err) = fwc(&["rollout", "stop", "--repo", &url, "--reason", "change window over"]);
    assert_eq!(code, 0, "{out}{err}");
    let s = status(&url);
    assert_eq!((s["state"]["phase"].as_str(), s["state"]["promoted"].as_u64()), (Some("stopped"), Some(2)), "{s}");
    assert!(s["state"]["reason"].as_str().unwrap().contains("change window over"));
    let o = advance(&url, &prom);
    assert_eq!(o["result"], "nothing", "{o}");
    // Operator commands that do not apply say so with exit code 4.
    let (code, _, err) = fwc(&["rollout", "pause", "--repo", &url]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("cannot pause"), "{err}");

    // A new tip starts a new rollout; now two early hosts are missing (one allowed). Missing is
    // not the commit's fault: the controller waits, and past missing-timeout (3 s, v1's
    // policy) it pauses, naming them; it never halts or rolls back for it.
    let c3 = push(&repo, &Policy::plain().kdl("v3"), "v3");
    advance_until(&url, &prom, "v3 started", |s| s["commit"] == c3.as_str());
    fleet.set("c1", &c3);
    advance_until(&url, &prom, "v3 early promoted", |s| s["promoted"] == 1);
    fleet.offline("e1");
    let o = advance_until(&url, &prom, "paused on missing hosts", |s| s["phase"] != "progressing");
    let reason = o["state"]["reason"].as_str().unwrap();
    assert_eq!((o["state"]["phase"].as_str(), o["state"]["rollback"].as_bool()), (Some("paused"), Some(false)), "{o}");
    assert!(reason.contains("2 host(s) not reporting, 1 allowed") && reason.contains("e1, e2") && reason.contains("missing-timeout"), "{reason}");
    assert!(!rollout_log(&repo).iter().any(|l| l.contains("halt")), "{:#?}", rollout_log(&repo));
    // They come back: the rollout goes on by itself.
    for h in ["e1", "e2"] {
        fleet.set(h, &c3);
    }
    advance_until(&url, &prom, "v3 all promoted", |s| s["promoted"] == 2 && s["phase"] == "progressing");

    // Prometheus seeing no agent at all (a scrape or relabelling outage) is an error, never
    // "every host is missing": nothing is decided, nothing committed.
    for h in HOSTS {
        fleet.offline(h);
    }
    let commits = rollout_log(&repo).len();
    let err = wait_until("advance to refuse an empty Prometheus", || {
        let (code, _, err) = fwc(&["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--missing-after", "1s"]);
        (code == 1).then_some(err)
    });
    assert!(err.contains("reports no fwc agent"), "{err}");
    assert_eq!(rollout_log(&repo).len(), commits);
}

/// A host of a finished wave away (a reboot) while the next wave rolls out: the rollout goes
/// on. It used to count against the finished wave's max-unavailable (0) and halt with rollback,
/// sending every promoted host back to stable.
#[test]
fn a_host_of_a_finished_wave_away_neither_halts_nor_rolls_back() {
    if !have_tools("a_host_of_a_finished_wave_away_neither_halts_nor_rolls_back") {
        return;
    }
    let (repo, url, _, fleet, prom) = rolled_out_v1(&Policy::plain());
    let c2 = push(&repo, &Policy::plain().kdl("v2"), "v2");
    advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    fleet.set("c1", &c2);
    advance_until(&url, &prom, "early promoted", |s| s["promoted"] == 1);
    // The canary reboots for a while; early rolls out meanwhile.
    fleet.offline("c1");
    for h in ["e1", "e2"] {
        fleet.set(h, &c2);
    }
    prom.wait_applied("e2", &c2);
    std::thread::sleep(Duration::from_secs(4)); // past --missing-after: c1 counts as missing
    let o = advance_until(&url, &prom, "all promoted, c1 still away", |s| s["promoted"] == 2 || s["phase"] != "progressing");
    assert_eq!((o["state"]["phase"].as_str(), o["state"]["rollback"].as_bool()), (Some("progressing"), Some(false)), "{o}");
    for h in ["a1", "a2"] {
        fleet.set(h, &c2);
    }
    let o = advance_until(&url, &prom, "complete", |s| s["phase"] != "progressing");
    assert_eq!(o["state"]["phase"], "complete", "{o}");
    assert!(!rollout_log(&repo).iter().any(|l| l.contains("halt")), "{:#?}", rollout_log(&repo));
}

/// The rollout ref set back to an older state (a replay, a restore from an old copy) behind
/// what the hosts accepted: the agents refuse every state built on it, so the controller
/// builds nothing on it and says which state to restore; restored, the rollout goes on.
#[test]
fn a_rollout_ref_set_back_behind_the_fleet_is_refused_with_the_state_to_restore() {
    if !have_tools("a_rollout_ref_set_back_behind_the_fleet_is_refused_with_the_state_to_restore") {
        return;
    }
    let (repo, url, _, fleet, prom) = rolled_out_v1(&Policy::plain());
    let old = git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]);
    let c2 = push(&repo, &Policy::plain().kdl("v2"), "v2");
    let o = advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    let newest = git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]);
    let generation = o["state"]["generation"].as_u64().unwrap();
    *fleet.accepted.lock().unwrap() = Some((newest.clone(), generation));
    let q = format!("fwc_rollout_accepted_state{{state=\"{newest}\"}}");
    let path = format!("/api/v1/query?query={}", q.bytes().map(|b| format!("%{b:02X}")).collect::<String>());
    wait_until("prometheus to see the accepted state", || {
        let (_, body) = fwc_runtime::metrics::http_request(prom.server.addr, "GET", &path, &[], b"").ok()?;
        body.contains(&newest).then_some(())
    });
    git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &old]);
    let (code, out, err) = fwc(&["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--missing-after", "3s"]);
    assert_eq!(code, 4, "{out}{err}");
    let restore = format!("git push --force origin {newest}:refs/heads/fwc-rollout");
    assert!(err.contains("the ref was set back") && err.contains(&restore), "{err}");
    assert_eq!(git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]), old, "nothing was built on the old state");
    // Deleted: the same refusal.
    git(&repo.bare, &["update-ref", "-d", "refs/heads/fwc-rollout"]);
    let (code, _, err) = fwc(&["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--missing-after", "3s"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("the rollout ref is gone") && err.contains(&restore), "{err}");
    // Restored as the refusal says: the rollout goes on from the newest state.
    git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &newest]);
    fleet.set("c1", &c2);
    let o = advance_until(&url, &prom, "early promoted", |s| s["promoted"] == 1);
    assert_eq!(o["state"]["predecessor"].as_str(), Some(newest.as_str()), "{o}");
}

/// A degraded canary halts the rollout even when a gate's query cannot be evaluated (here it
/// returns a range vector): the gate counts as failing, it no longer aborts the step. With the
/// default on-failure="halt" the promoted hosts keep the commit (no rollback).
#[test]
fn a_broken_gate_never_stops_a_degraded_canary_from_halting() {
    if !have_tools("a_broken_gate_never_stops_a_degraded_canary_from_halting") {
        return;
    }
    let broken = Policy { canary_gate: Some(("test_error_ratio[1m]", 0.1)), ..Policy::plain() };
    let (repo, url, _, fleet, prom) = rolled_out_v1(&Policy::plain());
    // v2 brings the broken gate (rolled out under v1's policy, which has none).
    let c1 = push(&repo, &broken.kdl("v2"), "v2");
    advance_until(&url, &prom, "v2 started", |s| s["commit"] == c1.as_str());
    for h in HOSTS {
        fleet.set(h, &c1);
    }
    advance_until(&url, &prom, "v2 complete", |s| s["phase"] == "complete");
    let c2 = push(&repo, &broken.kdl("v3"), "v3");
    advance_until(&url, &prom, "v3 started", |s| s["commit"] == c2.as_str());
    fleet.fail("c1", &c1, &c2, "self_check");
    let o = advance_until(&url, &prom, "halted", |s| s["phase"] == "halted");
    let st = &o["state"];
    assert_eq!(st["rollback"], false, "on-failure defaults to halt: {st}");
    assert!(st["reason"].as_str().unwrap().contains("c1 (self_check)") && st["reason"].as_str().unwrap().contains("keep what they have"), "{st}");

    // The canary applied and healthy, the gate's query still failing: a halt, not an abort.
    let c3 = push(&repo, &broken.kdl("v4"), "v4");
    advance_until(&url, &prom, "v4 started", |s| s["commit"] == c3.as_str());
    fleet.set("c1", &c3);
    prom.wait_applied("c1", &c3);
    let o = advance_until(&url, &prom, "halted by the broken gate", |s| s["phase"] == "halted");
    assert!(o["state"]["reason"].as_str().unwrap().contains("the query failed"), "{o}");

    // The same broken gate with its own grace (in force: a first rollout of another repository
    // runs under its own policy): pending within it, neither promoted nor halted.
    let graced = Policy { gate_grace: "1h", ..broken };
    let repo = Repo::new();
    let url = repo.url();
    let g1 = push(&repo, &graced.kdl("graced v1"), "v1");
    advance_until(&url, &prom, "graced v1 started", |s| s["commit"] == g1.as_str());
    fleet.set("c1", &g1);
    prom.wait_applied("c1", &g1);
    let o = advance(&url, &prom);
    assert_eq!((o["result"].as_str(), o["state"]["phase"].as_str(), o["state"]["promoted"].as_u64()), (Some("nothing"), Some("progressing"), Some(0)), "{o}");
    assert!(o["message"].as_str().unwrap().contains("the query failed") && o["message"].as_str().unwrap().contains("within its grace"), "{o}");
}

/// The policy in force is the stable commit's: a commit that drops the `rollout` block is
/// rolled out wave by wave under the policy it removes, and the repository leaves rollouts
/// only when that rollout completes.
#[test]
fn a_commit_that_drops_the_policy_is_rolled_out_under_the_stable_policy() {
    if !have_tools("a_commit_that_drops_the_policy_is_rolled_out_under_the_stable_policy") {
        return;
    }
    let (repo, url, c1, fleet, prom) = rolled_out_v1(&Policy::plain());
    let no_policy = Policy { rollout: false, ..Policy::plain() };
    let c2 = push(&repo, &no_policy.kdl("v2 drops the rollout block"), "v2");
    let o = advance_until(&url, &prom, "v2 started", |s| s["commit"] == c2.as_str());
    assert_eq!((o["state"]["promoted"].as_u64(), o["state"]["policy_commit"].as_str()), (Some(0), Some(c1.as_str())), "{o}");
    for _ in 0..2 {
        assert_eq!(advance(&url, &prom)["result"], "nothing", "the canary has not applied v2");
    }
    fleet.set("c1", &c2);
    advance_until(&url, &prom, "early promoted", |s| s["promoted"] == 1);
    for h in HOSTS {
        fleet.set(h, &c2);
    }
    let o = advance_until(&url, &prom, "v2 complete", |s| s["phase"] == "complete");
    assert_eq!(o["state"]["stable"], c2.as_str());
    // Now out of rollouts: a new tip starts none.
    push(&repo, &no_policy.kdl("v3"), "v3");
    let o = advance(&url, &prom);
    assert_eq!(o["result"], "nothing", "{o}");
    assert!(o["message"].as_str().unwrap().contains("no `rollout` policy"), "{o}");
}

/// `halt --rollback` during the first rollout (no stable commit): refused, saying so.
#[test]
fn halt_rollback_on_a_first_rollout_says_there_is_no_stable_commit() {
    if !have_tools("halt_rollback_on_a_first_rollout_says_there_is_no_stable_commit") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    let c1 = push(&repo, &Policy::plain().kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, "0000000000000000000000000000000000000000");
    let prom = Prometheus::start(fleet.serve());
    advance_until(&url, &prom, "v1 started", |s| s["commit"] == c1.as_str());
    let (code, out, err) = fwc(&["rollout", "halt", "--rollback", "--repo", &url]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("no stable commit to return to") && err.contains("revert commit"), "{err}");
    assert_eq!(status(&url)["state"]["phase"], "progressing");
}

/// The compare-and-swap on a `file://` remote: two controllers that decided from the same state
/// both push; exactly one wins, the other is told it lost the race (not last-writer-wins), for a
/// first state as for a later one. A push refused by a hook is an error saying so, not a race.
#[test]
fn compare_and_swap_on_a_file_remote_and_a_hook_that_refuses() {
    use fwc_runtime::rollout::state_ref::{Pushed, Remote};
    if !fwc_testkit::tool("compare_and_swap_on_a_file_remote_and_a_hook_that_refuses", "git", "git") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    let c1 = push(&repo, &Policy::plain().kdl("v1"), "v1");
    let state = |reason: &str| -> fwc_compiler::artifacts::rollout::RolloutState {
        serde_json::from_value(serde_json::json!({
            "version": 1, "branch": "main", "commit": c1, "stable": null, "waves": ["canary", "all"],
            "promoted": 0, "phase": "progressing", "reason": reason, "since": "2026-11-26T12:00:00Z",
        }))
        .unwrap()
    };
    for round in 0..2 {
        let (a, b) = (Remote::open(&url, "main", "fwc-rollout").unwrap(), Remote::open(&url, "main", "fwc-rollout").unwrap());
        let (sa, sb) = (a.fetch().unwrap(), b.fetch().unwrap());
        assert_eq!(sa.state_commit, sb.state_commit);
        let ia = a.write(sa.state_commit, &state(&format!("a{round}")), "a", None).unwrap();
        let ib = b.write(sb.state_commit, &state(&format!("b{round}")), "b", None).unwrap();
        assert_eq!(a.push(ia).unwrap(), Pushed::Ok, "round {round}");
        let lost = b.push(ib).unwrap();
        assert!(matches!(&lost, Pushed::Rejected(_)), "round {round}: the second writer overwrote the first: {lost:?}");
        let tip = git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]);
        assert_eq!(tip, ia.to_string(), "round {round}");
    }
    // A pre-receive hook that refuses (a protected ref): reported as what it is.
    let hook = repo.bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'fwc-rollout is protected here'\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755)).unwrap();
    let before = rollout_log(&repo);
    let (code, out, err) = fwc(&["rollout", "pause", "--repo", &url, "--reason", "freeze"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("refused") && err.contains("pre-receive hook declined") && err.contains("fwc-rollout is protected here") && err.contains("not a lost race"), "{err}");
    assert!(!err.contains("lost the race"), "{err}");
    assert_eq!(rollout_log(&repo), before);
    // A stale lock on the server: "failed to update ref" although the ref did not move.
    std::fs::remove_file(&hook).unwrap();
    let lock = repo.bare.join("refs/heads/fwc-rollout.lock");
    std::fs::write(&lock, "").unwrap();
    let (code, out, err) = fwc(&["rollout", "pause", "--repo", &url, "--reason", "freeze"]);
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("failed to update ref") && err.contains("cannot lock ref") && err.contains("not a lost race"), "{err}");
    assert_eq!(rollout_log(&repo), before);
}

/// `advance --watch` stopped by SIGTERM (systemd) or SIGINT (a terminal) removes its scratch
/// clone of the repository.
#[test]
fn a_stopped_watch_removes_its_scratch_clone() {
    if !fwc_testkit::tool("a_stopped_watch_removes_its_scratch_clone", "git", "git") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    push(&repo, &Policy::plain().kdl("v1"), "v1");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let scratch = || std::fs::read_dir(tmp.path()).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("fwc-rollout-")).count();
        let mut child = Command::new(FWC)
            .args(["rollout", "advance", "--watch", "--interval", "1h", "--repo", &url, "--prometheus", "http://127.0.0.1:9"])
            .env("TMPDIR", tmp.path())
            .env("FWC_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The first step fails (no Prometheus there) and the watch sleeps: its clone exists.
        let mut err = child.stderr.take().unwrap();
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while !seen.contains("Prometheus") && !seen.contains("prometheus") {
            let n = err.read(&mut buf).unwrap();
            assert!(n > 0, "the watch ended early: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert_eq!(scratch(), 1, "the watch's clone in TMPDIR");
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "signal {sig}: {status:?}");
        assert_eq!(scratch(), 0, "signal {sig}: the scratch clone is left behind");
    }
}

/// The controller builds only on a state the agents trust: a state commit on the rollout ref
/// signed by a key outside the agents' allowed signers, or unsigned, is refused before anything
/// is decided (exit 4, nothing pushed), naming the key and the newest state that verifies, for
/// `advance` as for the operator's commands; restored as the refusal says, the rollout goes on.
#[test]
fn a_forged_or_unsigned_state_is_refused_before_anything_is_built_on_it() {
    let test = "a_forged_or_unsigned_state_is_refused_before_anything_is_built_on_it";
    if !have_tools(test) || !fwc_testkit::tool(test, "ssh-keygen", "openssh-client") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    let root = repo.root.display().to_string();
    fwc_testkit::sh(&format!("ssh-keygen -q -t ed25519 -N '' -C ctl -f {root}/ctl && ssh-keygen -q -t ed25519 -N '' -C mallory -f {root}/mallory"));
    let allowed = repo.root.join("allowed");
    std::fs::write(&allowed, format!("ops@example.com namespaces=\"git\" {}", std::fs::read_to_string(repo.root.join("ctl.pub")).unwrap())).unwrap();
    let c1 = push(&repo, &Policy::plain().kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, "0000000000000000000000000000000000000000");
    let prom = Prometheus::start(fleet.serve());
    let (key, allowed) = (format!("{root}/ctl"), allowed.display().to_string());
    let trust = ["--sign-key", key.as_str(), "--allowed-signers", allowed.as_str()];
    let advance = || fwc(&[&["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--missing-after", "3s"][..], &trust].concat());
    let (code, out, err) = advance();
    assert_eq!(code, 0, "{out}{err}");
    let good = git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]);
    assert_eq!(status(&url)["state"]["commit"], c1.as_str());
    // A forger with push access writes the next state: a halt with rollback, signed with their
    // own key; then the same without a signature.
    let forge = |sign: &str| {
        let line = format!(
            "cd {bare} && blob=$(git show {good}:rollout.json | sed 's/\"phase\": \"progressing\"/\"phase\": \"halted\"/; s/\"rollback\": false/\"rollback\": true/' | git hash-object -w --stdin) && tree=$(printf '100644 blob %s\\trollout.json\\n' $blob | git mktree) && git -c gpg.format=ssh -c user.signingkey={root}/mallory -c user.name=M -c user.email=m@example.com commit-tree {sign} -p {good} -m forged $tree",
            bare = repo.bare.display()
        );
        let id = fwc_testkit::sh(&line).trim().to_string();
        git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &id]);
        id
    };
    let mallory = fwc_testkit::sh(&format!("ssh-keygen -lf {root}/mallory.pub")).split_whitespace().nth(1).unwrap().to_string();
    let restore = format!("git push --force origin {good}:refs/heads/fwc-rollout");
    for (sign, why) in [("-S", mallory.as_str()), ("", "not signed")] {
        let forged = forge(sign);
        let (code, out, err) = advance();
        assert_eq!(code, 4, "{sign}: {out}{err}");
        assert!(err.contains("is not trusted") && err.contains(why) && err.contains(&restore) && err.contains("unverified_state"), "{sign}: {err}");
        assert_eq!(git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]), forged, "{sign}: nothing was built on the forged state");
        let (code, out, err) = fwc(&[&["rollout", "resume", "--repo", &url, "--reason", "go"][..], &trust].concat());
        assert_eq!((code, err.contains("is not trusted")), (4, true), "{sign}: {out}{err}");
        assert_eq!(git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout"]), forged);
    }
    // A trust file that does not exist is an error, not "trust nothing".
    let (code, _, err) = fwc(&["rollout", "pause", "--repo", &url, "--allowed-signers", "/nonexistent/allowed"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("does not exist"), "{err}");
    // Restored as the refusal says: the controller builds on the trusted state again.
    git(&repo.bare, &["update-ref", "refs/heads/fwc-rollout", &good]);
    fleet.set("c1", &c1);
    prom.wait_applied("c1", &c1);
    let o = wait_until("early promoted", || {
        let (code, out, err) = advance();
        assert_eq!(code, 0, "{out}{err}");
        status(&url)["state"]["promoted"].as_u64().filter(|p| *p == 1).map(|_| out)
    });
    assert!(o.contains("promote wave early"), "{o}");
    assert_eq!(git(&repo.bare, &["rev-parse", "refs/heads/fwc-rollout^"]), good);
}

/// `start COMMIT` with an ancestor of `stable` (every agent would refuse it as a rewind): refused
/// up front, saying how to go back; nothing is written to the rollout ref.
#[test]
fn start_of_an_ancestor_of_stable_is_refused_up_front() {
    if !have_tools("start_of_an_ancestor_of_stable_is_refused_up_front") {
        return;
    }
    let repo = Repo::new();
    let url = repo.url();
    let c0 = push(&repo, &Policy::plain().kdl("v0"), "v0");
    let c1 = push(&repo, &Policy::plain().kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, &c1);
    let prom = Prometheus::start(fleet.serve());
    advance_until(&url, &prom, "v1 complete", |s| s["phase"] == "complete");
    let before = rollout_log(&repo);
    let (code, out, err) = fwc(&["rollout", "start", "--repo", &url, &c0]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("ancestor of the stable commit") && err.contains("revert commit") && err.contains("halt --rollback"), "{err}");
    assert_eq!(rollout_log(&repo), before, "nothing written");
    assert_eq!(status(&url)["state"]["commit"], c1.as_str());
    // The one-shot `advance --textfile`: the controller's metrics for node-exporter.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fwc-rollout.prom");
    let (code, out, err) = fwc(&["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--textfile", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&file).unwrap();
    for want in ["fwc_rollout_controller_last_success_timestamp_seconds ", "fwc_rollout_controller_step{result=\"nothing\"} 1", "fwc_rollout_state_since_timestamp_seconds{commit=", "fwc_rollout_hosts{wave=\"canary\",state=\"applied\"} "] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
}

#[test]
fn a_killed_controller_resumes_from_the_ref_and_racing_controllers_make_one_transition() {
    if !have_tools("a_killed_controller_resumes_from_the_ref_and_racing_controllers_make_one_transition") {
        return;
    }
    let repo = Repo::new();
    // git daemon with push (receive-pack): the compare-and-swap is the server's.
    git(&repo.bare, &["config", "daemon.receivepack", "true"]);
    let port = free_port();
    let exec_path = git(&repo.root, &["--exec-path"]);
    let daemon = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args(["--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1", &format!("--port={port}"), &format!("--base-path={}", repo.root.display())])
        .arg(&repo.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _daemon = Kill(daemon);
    wait_until("git daemon", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
    let url = format!("git://127.0.0.1:{port}/rules.git");

    let c1 = push(&repo, &Policy::plain().kdl("v1"), "v1");
    let fleet = Fleet::new(&HOSTS, &c1);
    let prom = Prometheus::start(fleet.serve());

    // Two controllers at once, repeatedly: each transition either is pushed or loses the race
    // and is decided again on the winner's state; exactly one start, no transition lost or
    // doubled (the history holds exactly the state commits reported as pushed; two controllers
    // deciding the same transition in the same second make the same commit, pushed once).
    let mut pushed = std::collections::BTreeSet::new();
    for round in 0..3 {
        let spawn = || {
            Command::new(FWC)
                .args(["rollout", "advance", "--repo", &url, "--prometheus", &prom.url, "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        assert!(a.status.success() && b.status.success(), "{}{}", String::from_utf8_lossy(&a.stderr), String::from_utf8_lossy(&b.stderr));
        let results: Vec<Value> = [&a, &b].iter().map(|o| serde_json::from_slice(&o.stdout).unwrap()).collect();
        let transitions = results.iter().filter(|r| r["result"] == "transition").count();
        eprintln!("round {round}: {:?}", results.iter().map(|r| (r["result"].as_str().unwrap_or("").to_string(), r["lost_races"].as_u64())).collect::<Vec<_>>());
        if round == 0 {
            assert!(transitions >= 1, "{results:#?}");
        }
        pushed.extend(results.iter().filter_map(|r| r["pushed"].as_str().map(String::from)));
        let log = rollout_log(&repo);
        assert!(log.iter().filter(|l| l.contains("start")).count() == 1, "two controllers both started: {log:#?}");
        let ids = git(&repo.bare, &["log", "--format=%H", "fwc-rollout"]);
        let ids: std::collections::BTreeSet<String> = ids.lines().map(String::from).collect();
        assert_eq!(ids, pushed, "{log:#?}\n{results:#?}");
    }
    advance_until(&url, &prom, "v1 complete", |s| s["phase"] == "complete");

    // A watching controller killed mid-wave: the next advance goes on from the ref.
    let c2 = push(&repo, &Policy::plain().kdl("v2"), "v2");
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let mut watch = Kill(
        Command::new(FWC)
            .args(["rollout", "advance", "--watch", "--interval", "200ms", "--repo", &url, "--prometheus", &prom.url, "--metrics", &metrics_addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    fleet.set("c1", &c2);
    wait_until("the watcher to promote early", || (status(&url)["state"]["promoted"] == 1 && status(&url)["state"]["commit"] == c2.as_str()).then_some(()));
    // The watching controller serves its metrics (as of its last step).
    let scrape = || fwc_runtime::metrics::http_request(metrics_addr.parse().unwrap(), "GET", "/metrics", &[], b"").ok().filter(|(code, _)| *code == 200).map(|(_, body)| body);
    let body = wait_until("the controller's /metrics", || scrape().filter(|b| b.contains("fwc_rollout_hosts{wave=\"early\"")));
    for want in ["fwc_rollout_controller_last_success_timestamp_seconds ", "fwc_rollout_controller_step{result=", &format!("fwc_rollout_state_generation{{commit=\"{c2}\"}}")] {
        assert!(body.contains(want), "{want} in\n{body}");
    }
    watch.0.kill().unwrap();
    let _ = watch.0.wait();
    for h in ["e1", "e2"] {
        fleet.set(h, &c2);
    }
    let o = advance_until(&url, &prom, "resumed: all promoted", |s| s["promoted"] == 2);
    assert_eq!(o["state"]["commit"], c2.as_str());
    let log = rollout_log(&repo);
    assert_eq!(log.iter().filter(|l| l.contains(&c2[..12]) && l.contains("promote wave early")).count(), 1, "{log:#?}");

    // A stale lock on the server (a git process that crashed there): receive-pack answers
    // "failed to update ref", as it does for a ref that moved under its lock. The ref did not
    // move, so it is reported as the server's refusal, not retried as a lost race.
    let lock = repo.bare.join("refs/heads/fwc-rollout.lock");
    std::fs::write(&lock, "").unwrap();
    let before = rollout_log(&repo);
    let (code, out, err) = fwc(&["rollout", "pause", "--repo", &url, "--reason", "freeze"]);
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("failed to update ref") && err.contains("not a lost race"), "{err}");
    assert!(!err.contains("lost the race"), "{err}");
    assert_eq!(rollout_log(&repo), before);
}
