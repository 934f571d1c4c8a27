//! Privileged tests of the nftables backend, the apply transaction and the apply CLI on
//! hand-written nftables JSON, each inside its own network namespace.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::Artifacts;
use fwc_runtime::engine::transaction::{self as apply, empty_artifacts, ApplyOptions};
use fwc_runtime::state::{dir_digest, StateDir};
use fwc_testkit::{privileged, Netns, output_text as text};
use serde_json::{json, Value};

fn table(extra_ports: &[u16], office: &[&str]) -> Artifacts {
    let mut objs = vec![
        json!({"table": {"family": "inet", "name": "fwc"}}),
        json!({"chain": {"family": "inet", "table": "fwc", "name": "input", "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}),
        set("office_v4", office),
        json!({"rule": {"family": "inet", "table": "fwc", "chain": "input", "comment": "fwc:filter:ssh", "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@office_v4"}},
            {"counter": null}, {"accept": null}]}}),
    ];
    for p in extra_ports {
        objs.push(json!({"rule": {"family": "inet", "table": "fwc", "chain": "input", "comment": format!("fwc:filter:port{p}"), "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": p}},
            {"counter": null}, {"accept": null}]}}));
    }
    let mut a = empty_artifacts("localhost");
    a.nftables = json!({ "nftables": objs }).into();
    a.manifest.commit = Some(format!("c{}", extra_ports.len()));
    a
}

fn set(name: &str, elems: &[&str]) -> Value {
    let mut s = json!({"family": "inet", "table": "fwc", "name": name, "type": "ipv4_addr", "flags": ["interval"]});
    if !elems.is_empty() {
        let e: Vec<Value> = elems
            .iter()
            .map(|e| match e.split_once('/') {
                Some((a, l)) => json!({"prefix": {"addr": a, "len": l.parse::<u32>().unwrap()}}),
                None => json!(e),
            })
            .collect();
        s["elem"] = json!(e);
    }
    json!({ "set": s })
}

fn write_dir(a: &Artifacts, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for (f, t) in a.files() {
        std::fs::write(dir.join(f), t.as_bytes()).unwrap();
    }
}

fn fwc(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
    c.args(args).env("NO_COLOR", "1").env_remove("FWC_TEST_FAIL").stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn ruleset(ns: &Netns) -> String {
    ns.exec(&["nft", "-j", "list", "ruleset"])
}

#[test]
fn transaction_applies_verifies_and_rolls_back() {
    if !privileged("transaction_applies_verifies_and_rolls_back") {
        return;
    }
    let ns = Netns::new("n");
    let tmp = tempfile::tempdir().unwrap();
    let state = StateDir::new(tmp.path().join("state"));
    let opts = ApplyOptions { source: "test".into(), netns: Some(ns.name.clone()), ..Default::default() };

    let v1 = table(&[], &["198.18.1.0/24"]);
    let lock = state.lock(false).unwrap();
    let mut b = apply::default_backends(Some(&ns.name), &state.path);
    let r = apply::transaction(&mut b, &lock, &v1, &opts).unwrap();
    assert_eq!(r.generation, "gen-000001");
    let live1 = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(live1.contains("fwc:filter:ssh"), "{live1}");

    let v2 = table(&[80, 443], &["198.18.1.0/24", "198.18.3.7"]);
    let mut b = apply::default_backends(Some(&ns.name), &state.path);
    apply::transaction(&mut b, &lock, &v2, &opts).unwrap();
    let live2 = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(live2.contains("fwc:filter:port443") && live2.contains("198.18.3.7"), "{live2}");
    assert_eq!(state.current().unwrap().unwrap().artifacts, v2);
    assert_eq!(state.previous().unwrap().unwrap().artifacts, v1);

    // A failing verify (injected drift) rolls back to v2 and leaves the state dir as it was.
    let before = dir_digest(&state.path);
    let v3 = table(&[8080], &[]);
    std::env::set_var("FWC_TEST_FAIL", "verify:nftables");
    let mut b = apply::default_backends(Some(&ns.name), &state.path);
    let err = apply::transaction(&mut b, &lock, &v3, &opts).unwrap_err();
    std::env::remove_var("FWC_TEST_FAIL");
    assert!(err.to_string().contains("backend nftables failed in verify"), "{err}");
    assert_eq!(dir_digest(&state.path), before);
    assert_eq!(ns.exec(&["nft", "list", "table", "inet", "fwc"]), live2);
    drop(lock);

    // fwc rollback goes back to v1, and a second rollback forward again to v2.
    let sd = state.path.to_str().unwrap();
    // Without a terminal to ask on and without --auto-approve, rollback refuses: exit 1,
    // nothing changed.
    let o = fwc(&["rollback", "--state-dir", sd, "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("pass --auto-approve"), "{}", text(&o));
    assert_eq!(ns.exec(&["nft", "list", "table", "inet", "fwc"]), live2);
    let o = fwc(&["rollback", "--state-dir", sd, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ns.exec(&["nft", "list", "table", "inet", "fwc"]), live1);
    let o = fwc(&["rollback", "--state-dir", sd, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ns.exec(&["nft", "list", "table", "inet", "fwc"]), live2);
}

#[test]
fn injected_prepare_and_commit_failures_change_nothing() {
    if !privileged("injected_prepare_and_commit_failures_change_nothing") {
        return;
    }
    let ns = Netns::new("n");
    // Another table that fwc must never touch.
    ns.exec(&["nft", "add", "table", "ip", "other"]);
    ns.exec(&["nft", "add", "chain", "ip", "other", "c", "{ type filter hook input priority 10; }"]);
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let sd = sd.to_str().unwrap();
    let (d1, d2) = (tmp.path().join("a1"), tmp.path().join("a2"));
    write_dir(&table(&[80], &["198.18.1.0/24"]), &d1);
    write_dir(&table(&[80, 8443], &["198.18.9.0/24"]), &d2);

    let o = fwc(&["apply", d1.to_str().unwrap(), "--state-dir", sd, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let before_rules = ruleset(&ns);
    let before_state = dir_digest(Path::new(sd));

    // A prepare failure changed nothing and is audited `aborted`; a commit failure was rolled
    // back (`rolled_back`).
    for (phase, want, outcome) in [("prepare", "backend nftables failed in prepare", "aborted"), ("commit", "backend nftables failed in commit", "rolled_back")] {
        let o = fwc(
            &["apply", d2.to_str().unwrap(), "--state-dir", sd, "--netns", &ns.name, "--auto-approve"],
            &[("FWC_TEST_FAIL", &format!("{phase}:nftables"))],
        );
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains(want), "{t}");
        assert!(t.contains("the state dir is unchanged"), "{t}");
        assert_eq!(ruleset(&ns), before_rules, "{phase} failure changed the live ruleset");
        assert_eq!(dir_digest(Path::new(sd)), before_state, "{phase} failure changed the state dir");
        // …but the attempt is in the audit log.
        let log = std::fs::read_to_string(Path::new(sd).join("audit.jsonl")).unwrap_or_default();
        let last = log.lines().last().unwrap_or_default();
        assert!(last.contains(&format!("\"result\":\"{outcome}\"")) && last.contains(phase), "{phase} failure not audited as {outcome}: {last}");
    }
    // And without injection it goes through.
    let o = fwc(&["apply", d2.to_str().unwrap(), "--state-dir", sd, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(ruleset(&ns).contains("8443"));
    assert!(ns.exec(&["nft", "list", "tables"]).contains("table ip other"));
}

#[test]
fn drift_status_plan_and_stale_plan() {
    if !privileged("drift_status_plan_and_stale_plan") {
        return;
    }
    let ns = Netns::new("n");
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let sds = sd.to_str().unwrap();
    let d1 = tmp.path().join("a1");
    write_dir(&table(&[80], &["198.18.1.0/24"]), &d1);

    // No terminal and no --auto-approve: refused.
    let o = fwc(&["apply", d1.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("--auto-approve"), "{}", text(&o));

    let o = fwc(&["apply", d1.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
    assert_eq!(st["drift"], false, "{st}");
    assert_eq!(st["nft_rules"], 2);

    // A saved plan of a new version; then someone edits the table by hand.
    let d2 = tmp.path().join("a2");
    write_dir(&table(&[80, 81], &["198.18.1.0/24"]), &d2);
    let (a2, _) = fwc_runtime::engine::load::load_artifacts(&d2, None, false, None).unwrap();
    let plan = fwc_runtime::engine::plan::make_plan(&StateDir::new(&sd), Some(&ns.name), a2, "test".into()).unwrap();
    assert_eq!(plan.rules.as_ref().unwrap().changes.len(), 0);
    assert!(plan.has_changes());
    let planfile = tmp.path().join("plan.json");
    std::fs::write(&planfile, serde_json::to_string(&plan).unwrap()).unwrap();

    ns.exec(&["nft", "add", "rule", "inet", "fwc", "input", "tcp", "dport", "23", "accept"]);
    ns.exec(&["nft", "add", "element", "inet", "fwc", "office_v4", "{ 203.0.113.9 }"]);
    let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
    assert_eq!(st["drift"], true, "{st}");
    let details = st["drift_details"].to_string();
    assert!(details.contains("rule added outside fwc: tcp dport 23 accept"), "{details}");
    assert!(details.contains("set office_v4: elements added outside fwc: 203.0.113.9"), "{details}");
    let o = fwc(&["status", "--state-dir", sds, "--netns", &ns.name], &[]);
    assert!(text(&o).contains("Drift:      yes"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(2), "status exits 2 on drift: {}", text(&o));

    let o = fwc(&["apply", planfile.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("the plan file is stale"), "{}", text(&o));
    assert!(ns.exec(&["nft", "list", "table", "inet", "fwc"]).contains("dport 23"));

    // A fresh plan applies, and heals the drift.
    let (a2, _) = fwc_runtime::engine::load::load_artifacts(&d2, None, false, None).unwrap();
    let plan = fwc_runtime::engine::plan::make_plan(&StateDir::new(&sd), Some(&ns.name), a2, "test".into()).unwrap();
    assert_eq!(plan.drift.len(), 2, "{:?}", plan.drift);
    std::fs::write(&planfile, serde_json::to_string(&plan).unwrap()).unwrap();
    let o = fwc(&["apply", planfile.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let live = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(!live.contains("dport 23") && live.contains("dport 81"), "{live}");
    let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
    assert_eq!(st["drift"], false, "{st}");
}

fn wait_until(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

#[test]
fn confirm_or_revert() {
    if !privileged("confirm_or_revert") {
        return;
    }
    let ns = Netns::new("n");
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let sds = sd.to_str().unwrap();
    let (d1, d2, d3) = (tmp.path().join("a1"), tmp.path().join("a2"), tmp.path().join("a3"));
    write_dir(&table(&[80], &[]), &d1);
    write_dir(&table(&[80, 9001], &[]), &d2);
    write_dir(&table(&[80, 9002], &[]), &d3);
    let apply = |d: &Path, extra: &[&str]| {
        let mut args = vec!["apply", d.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"];
        args.extend_from_slice(extra);
        fwc(&args, &[])
    };
    let live = || ns.exec(&["nft", "list", "table", "inet", "fwc"]);

    let o = apply(&d1, &[]);
    assert!(o.status.success(), "{}", text(&o));
    // Not confirmed: reverted to v1 after the deadline.
    let o = apply(&d2, &["--confirm", "2s"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("fwc confirm"), "{}", text(&o));
    // (on a loaded machine the 2 s may already be over: then the revert is logged)
    let reverted = || std::fs::read_to_string(sd.join("confirm.log")).unwrap_or_default().contains("not confirmed in time, reverted");
    assert!(live().contains("9001") || reverted(), "{}", live());
    // Deadlines, not budgets: each waits for a condition.
    assert!(wait_until(Duration::from_secs(60), || !live().contains("9001")), "not reverted: {}", live());
    assert!(live().contains("dport 80"));
    assert!(wait_until(Duration::from_secs(60), || !sd.join("confirm.json").exists()));
    // (the reverter removes confirm.json, then writes its log line)
    assert!(wait_until(Duration::from_secs(60), reverted), "{}", std::fs::read_to_string(sd.join("confirm.log")).unwrap_or_default());

    // Confirmed: stays after the reverter is gone. (A confirm window no loaded machine
    // outlives, so the refusal and the confirm below always happen inside it.)
    let o = apply(&d3, &["--confirm", "10m"]);
    assert!(o.status.success(), "{}", text(&o));
    let reverter = pending_reverter(&sd);
    // A second apply while waiting is refused.
    let o = apply(&d2, &[]);
    assert!(!o.status.success() && text(&o).contains("waiting for `fwc confirm`"), "{}", text(&o));
    let o = fwc(&["confirm", "--state-dir", sds], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        wait_until(Duration::from_secs(60), || !Path::new(&format!("/proc/{reverter}")).exists()
            || std::fs::read_to_string(format!("/proc/{reverter}/stat")).is_ok_and(|s| s.contains(") Z "))),
        "the reverter did not exit after the confirm"
    );
    assert!(live().contains("9002"), "{}", live());
    let o = fwc(&["confirm", "--state-dir", sds], &[]);
    assert!(!o.status.success() && text(&o).contains("nothing to confirm"));
}

/// `fwc status` exit codes, and `--netns` / `--state-dir` that name nothing are errors
/// (before: `plan --netns typo` planned against nothing, `status --state-dir /nonexistent`
/// printed "nothing yet / Drift: no" and exited 0).
#[test]
fn status_exit_codes_and_targets_that_name_nothing() {
    if !privileged("status_exit_codes_and_targets_that_name_nothing") {
        return;
    }
    let ns = Netns::new("n");
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let sds = sd.to_str().unwrap();
    let d1 = tmp.path().join("a1");
    write_dir(&table(&[80], &[]), &d1);

    let missing = tmp.path().join("nonexistent");
    let o = fwc(&["status", "--state-dir", missing.to_str().unwrap(), "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    assert!(!missing.exists(), "status must not create the state dir");
    for cmd in ["confirm", "rollback"] {
        let o = fwc(&[cmd, "--state-dir", missing.to_str().unwrap()], &[]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", text(&o));
        assert!(text(&o).contains("does not exist"), "{cmd}: {}", text(&o));
    }
    let typo = format!("{}-typo", ns.name);
    for args in [
        vec!["status", "--state-dir", sds, "--netns", &typo],
        vec!["apply", d1.to_str().unwrap(), "--state-dir", sds, "--netns", &typo, "--auto-approve"],
    ] {
        let o = fwc(&args, &[]);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("does not exist") && text(&o).contains(&typo), "{args:?}: {}", text(&o));
    }
    assert!(!sd.exists(), "a refused apply must not create the state dir");

    std::fs::create_dir_all(&sd).unwrap();
    let o = fwc(&["status", "--state-dir", sds, "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(3), "nothing applied: {}", text(&o));
    let o = fwc(&["apply", d1.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = fwc(&["status", "--state-dir", sds, "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(0), "in sync: {}", text(&o));
    let d2 = tmp.path().join("a2");
    write_dir(&table(&[80, 9001], &[]), &d2);
    let o = fwc(&["apply", d2.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve", "--confirm", "60s"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = fwc(&["status", "--state-dir", sds, "--netns", &ns.name], &[]);
    assert_eq!(o.status.code(), Some(4), "pending confirmation: {}", text(&o));
    let o = fwc(&["confirm", "--state-dir", sds], &[]);
    assert!(o.status.success(), "{}", text(&o));
}

fn pending_reverter(sd: &Path) -> i32 {
    let c: Value = serde_json::from_str(&std::fs::read_to_string(sd.join("confirm.json")).unwrap()).unwrap();
    c["reverter_pid"].as_i64().unwrap() as i32
}

fn kill9(pid: i32) {
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill -9 {pid}");
    // the reverter is not our child: wait until it is gone
    assert!(wait_until(Duration::from_secs(60), || !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))));
}

/// Confirm-or-revert fails closed: with the reverter killed (-9), the unconfirmed apply is
/// reverted by the next `fwc status`, `fwc confirm` or `fwc apply` after the deadline
/// (before: it stayed live forever, `status` said "deadline passed, reverting", `confirm`
/// said too late and `apply` refused).
#[test]
fn killed_reverter_is_reverted_by_the_next_command() {
    if !privileged("killed_reverter_is_reverted_by_the_next_command") {
        return;
    }
    let ns = Netns::new("n");
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let sds = sd.to_str().unwrap();
    let (d1, d2, d3) = (tmp.path().join("a1"), tmp.path().join("a2"), tmp.path().join("a3"));
    write_dir(&table(&[80], &[]), &d1);
    write_dir(&table(&[80, 9001], &[]), &d2);
    write_dir(&table(&[80, 9002], &[]), &d3);
    let apply = |d: &Path, extra: &[&str]| {
        let mut args = vec!["apply", d.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"];
        args.extend_from_slice(extra);
        fwc(&args, &[])
    };
    let live = || ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    let o = apply(&d1, &[]);
    assert!(o.status.success(), "{}", text(&o));

    // The next command is `fwc status`.
    let o = apply(&d2, &["--confirm", "2s"]);
    assert!(o.status.success(), "{}", text(&o));
    kill9(pending_reverter(&sd));
    std::thread::sleep(Duration::from_millis(2600));
    assert!(live().contains("9001"), "nothing reverts before a command runs: {}", live());
    let o = fwc(&["status", "--state-dir", sds, "--netns", &ns.name], &[]);
    assert!(!live().contains("9001") && live().contains("dport 80"), "status did not revert: {}\n{}", text(&o), live());
    assert!(text(&o).contains("reverted now"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(0), "after the revert the host is in sync: {}", text(&o));
    assert!(!sd.join("confirm.json").exists());

    // The next command is `fwc confirm` (without --netns: the namespace recorded with the
    // pending confirmation is the one reverted): too late, and reverted.
    let o = apply(&d2, &["--confirm", "2s"]);
    assert!(o.status.success(), "{}", text(&o));
    kill9(pending_reverter(&sd));
    std::thread::sleep(Duration::from_millis(2600));
    let o = fwc(&["confirm", "--state-dir", sds], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("too late") && text(&o).contains("reverted"), "{}", text(&o));
    assert!(!live().contains("9001"), "{}", live());

    // The next command is `fwc apply`: it reverts, then applies the new rules.
    let o = apply(&d2, &["--confirm", "2s"]);
    assert!(o.status.success(), "{}", text(&o));
    kill9(pending_reverter(&sd));
    std::thread::sleep(Duration::from_millis(2600));
    let o = apply(&d3, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("reverted now"), "{}", text(&o));
    assert!(!live().contains("9001") && live().contains("9002"), "{}", live());
    let log = std::fs::read_to_string(sd.join("confirm.log")).unwrap();
    assert_eq!(log.matches("not confirmed in time, reverted by pid").count(), 3, "{log}");
    let audit = std::fs::read_to_string(sd.join("audit.jsonl")).unwrap();
    assert_eq!(audit.matches("reverter gone").count(), 3, "{audit}");
}

/// The forms imported rulesets use (ICMP types, reject kinds, log rules with a rate,
/// states, policy=reject, masquerade and snat in nat postrouting) load into a real kernel and
/// list back as compiled: no drift after apply, nothing to change in a fresh plan; a rule
/// someone adds to the nat postrouting chain is drift, and the next apply heals it.
#[test]
fn imported_forms_apply_without_drift() {
    if !privileged("imported_forms_apply_without_drift") {
        return;
    }
    for case in ["29-icmp-reject-log", "30-source-nat"] {
        let ns = Netns::new("imp");
        let tmp = tempfile::tempdir().unwrap();
        let sd = tmp.path().join("state");
        let sds = sd.to_str().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden").join(case);
        let tree = fwc_compiler::read::source::SourceTree::from_dir(&repo).unwrap();
        let (art, _) = fwc_compiler::compile(&tree, None, Some("imported")).unwrap_or_else(|d| panic!("{case}: {}", d.render(false)));
        let dir = tmp.path().join("a");
        write_dir(&art, &dir);
        let o = fwc(&["apply", dir.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
        assert!(o.status.success(), "{case}: {}", text(&o));
        let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
        assert_eq!(st["drift"], false, "{case}: {st}");
        let (again, _) = fwc_runtime::engine::load::load_artifacts(&dir, None, false, None).unwrap();
        let plan = fwc_runtime::engine::plan::make_plan(&StateDir::new(&sd), Some(&ns.name), again, "test".into()).unwrap();
        assert!(!plan.has_changes(), "{case}: {:?}", plan.rules);
        let live = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
        for want in match case {
            "29-icmp-reject-log" => &["icmp type echo-request", "reject with icmpx admin-prohibited", "log prefix \"SSH \"", "comment \"fwc:chain:input\""][..],
            _ => &["masquerade comment \"fwc:masquerade:lan-out\"", "snat ip to 198.18.0.1 comment \"fwc:snat:office-out\""][..],
        } {
            assert!(live.contains(want), "{case}: no `{want}` in\n{live}");
        }
        ns.exec(&["nft", "add", "rule", "inet", "fwc", "postrouting", "oifname", "eth9", "masquerade"]);
        let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
        assert_eq!(st["drift"], true, "{case}: {st}");
        assert!(st["drift_details"].to_string().contains("oifname \\\"eth9\\\" masquerade"), "{case}: {st}");
        let o = fwc(&["apply", dir.to_str().unwrap(), "--state-dir", sds, "--netns", &ns.name, "--auto-approve"], &[]);
        assert!(o.status.success(), "{case}: {}", text(&o));
        let st: Value = serde_json::from_slice(&fwc(&["status", "--json", "--state-dir", sds, "--netns", &ns.name], &[]).stdout).unwrap();
        assert_eq!(st["drift"], false, "{case}: {st}");
        assert!(!ns.exec(&["nft", "list", "table", "inet", "fwc"]).contains("eth9"));
    }
}
