//! `fwc audit show|verify` on a real log: tampering detected in each of the three ways
//! (edited, deleted, reordered) with the line named, and the agent's refusal path without
//! root (a commit that does not compile is refused and audited; nothing is applied).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use fwc_runtime::audit::{Action, AuditLog, Outcome, Record};

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).stdin(Stdio::null()).env("NO_COLOR", "1").output().unwrap()
}

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn log_with(dir: &Path, n: usize) -> Vec<String> {
    let log = AuditLog::in_state_dir(dir);
    for i in 0..n {
        log.append(Record {
            host: "edge-1".into(),
            action: Some(Action::Apply),
            commit: Some(format!("{i:040x}")),
            result: Some(Outcome::Ok),
            ..Default::default()
        })
        .unwrap();
    }
    std::fs::read_to_string(&log.path).unwrap().lines().map(str::to_string).collect()
}

fn write(dir: &Path, lines: &[String]) {
    std::fs::write(dir.join("audit.jsonl"), lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

fn verify(dir: &Path) -> (bool, String) {
    let o = fwc(&["audit", "verify", "--state-dir", dir.to_str().unwrap()]);
    (o.status.success(), out(&o))
}

#[test]
fn audit_verify_detects_edit_delete_reorder_with_line_numbers() {
    let d = tempfile::tempdir().unwrap();
    let lines = log_with(d.path(), 4);
    let (ok, text) = verify(d.path());
    assert!(ok && text.contains("4 entries, chain intact"), "{text}");
    let show = out(&fwc(&["audit", "show", "--state-dir", d.path().to_str().unwrap()]));
    assert_eq!(show.lines().count(), 4, "{show}");

    // edited
    let mut l = lines.clone();
    l[2] = l[2].replace("\"result\":\"ok\"", "\"result\":\"rolled_back\"");
    write(d.path(), &l);
    let (ok, text) = verify(d.path());
    assert!(!ok && text.contains("line 3 (seq 3): content does not match its hash"), "{text}");

    // deleted (middle)
    let mut l = lines.clone();
    l.remove(1);
    write(d.path(), &l);
    let (ok, text) = verify(d.path());
    assert!(!ok && text.contains("line 2: seq 3 follows seq 1"), "{text}");

    // deleted (newest)
    write(d.path(), &lines[..3]);
    let (ok, text) = verify(d.path());
    assert!(!ok && text.contains("records seq 4"), "{text}");

    // reordered
    let mut l = lines.clone();
    l.swap(1, 2);
    write(d.path(), &l);
    let (ok, text) = verify(d.path());
    assert!(!ok && text.contains("line 3: seq 2 comes after seq 3"), "{text}");

    // JSON output
    let o = fwc(&["audit", "verify", "--state-dir", d.path().to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["findings"].as_array().unwrap().iter().any(|f| f["problem"] == "reordered" && f["line"] == 3), "{v:#}");

    // restored: intact again
    write(d.path(), &lines);
    assert!(verify(d.path()).0);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=Bob", "-c", "user.email=bob@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn agent_once_refuses_a_commit_that_does_not_compile() {
    let d = tempfile::tempdir().unwrap();
    let work = d.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("fwc.kdl"), "fwc 1\ninput policy=drop {\n    allow \"x\" proto=tcp port=70000\n}\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "broken"]);
    let commit = git(&work, &["rev-parse", "HEAD"]);
    let state = d.path().join("state");
    let o = fwc(&[
        "agent", "--once", "--repo", &format!("file://{}", work.display()), "--host", "localhost",
        "--state-dir", state.to_str().unwrap(), "--metrics", "off",
    ]);
    // `--once` exits 4 on a refused tip (docs/operations.md, "Exit codes of fwc agent --once").
    assert_eq!(o.status.code(), Some(4), "{}", out(&o));
    assert!(out(&o).contains("refusing"), "{}", out(&o));
    let entries = AuditLog::in_state_dir(&state).entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].action, Action::Refuse);
    assert_eq!(entries[0].commit.as_deref(), Some(commit.as_str()));
    assert_eq!(entries[0].author.as_deref(), Some("Bob <bob@example.com>"));
    assert!(entries[0].detail.as_deref().unwrap().starts_with("compile:"));
    assert!(!state.join("state.json").exists(), "nothing applied");
    // A second run does not retry (or re-audit) the refused commit.
    let o = fwc(&[
        "agent", "--once", "--repo", &format!("file://{}", work.display()), "--host", "localhost",
        "--state-dir", state.to_str().unwrap(), "--metrics", "off",
    ]);
    assert_eq!(o.status.code(), Some(4), "still refused while it is the tip: {}", out(&o));
    assert_eq!(AuditLog::in_state_dir(&state).entries().unwrap().len(), 1);
    assert!(verify(&state).0);
}
