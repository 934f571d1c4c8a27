//! `fwc test`, `fwc explain` and `fwc check` on test files, run as a user would: exit codes
//! (0 pass, 3 an expectation failed, 1 error), the JUnit report, `--json`, and explain's output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).arg("--color=never").env("NO_COLOR", "1").env_remove("FWC_LOG").output().expect("run fwc")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

fn shown(o: &Output) -> String {
    format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn examples_pass_with_exit_0() {
    for ex in ["examples/quickstart", "examples/edge-host", "examples/fleet"] {
        let o = fwc(&["test", &path(ex)]);
        assert_eq!(o.status.code(), Some(0), "{ex}: {}", shown(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(" 0 failed"), "{out}");
        assert!(!out.contains("FAIL"), "{out}");
    }
    let o = fwc(&["test", &path("examples/edge-host")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("PASS tests/filter.kdl:2:1 [edge-1] office reaches ssh"), "{out}");
    assert!(out.contains("(rules/10-filter.kdl:3:5)"), "{out}");
}

#[test]
fn failing_expectations_exit_3_with_junit() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let o = fwc(&["test", &path("compiler/tests/policy/must-fail"), "--junit", junit.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", shown(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("FAIL tests/wrong.kdl:2:1 [localhost] office is dropped"), "{out}");
    assert!(out.contains("     expected: drop\n     actual:   accept by rule fwc:filter:ssh (chain input, rule "), "{out}");
    assert!(out.contains("(fwc.kdl:5:5)"), "{out}");
    assert!(out.contains("13 expectation(s): 0 passed, 13 failed"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"<testsuites name="fwc policy tests" tests="13" failures="13">"#), "{xml}");
    assert!(xml.contains(r#"<testcase classname="tests/wrong.kdl" name="office is dropped [localhost]" file="tests/wrong.kdl" line="2">"#), "{xml}");
    assert!(xml.contains("<failure message=\"expected charged to the QoS class of &quot;other&quot;"), "{xml}");
    // --json: one result per expectation, machine-readable.
    let o = fwc(&["test", &path("compiler/tests/policy/must-fail"), "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 13);
    assert_eq!(v["results"][0]["passed"], false);
    assert_eq!(v["results"][0]["location"]["line"], 1);
}

#[test]
fn broken_test_files_exit_1_and_check_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fwc.kdl"), "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n").unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    std::fs::write(dir.path().join("tests/a.kdl"), "expect accept to=\":22\"\nexpect acept to=\":22\"\n").unwrap();
    let d = dir.path().to_str().unwrap();
    for cmd in ["test", "check"] {
        let o = fwc(&[cmd, d]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", shown(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("unknown outcome `acept`") && err.contains("tests/a.kdl:2:8") && err.contains("did you mean `accept`?"), "{cmd}: {err}");
    }
    std::fs::write(dir.path().join("tests/a.kdl"), "expect accept to=\":22\" rule=\"ssh\"\n").unwrap();
    let o = fwc(&["check", d]);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 test file(s)"));
    assert_eq!(fwc(&["test", d]).status.code(), Some(0));
}

#[test]
fn explain_names_the_deciding_line() {
    let o = fwc(&["explain", &path("examples/edge-host"), "tcp 198.51.100.9:40000 -> 198.18.1.1:22"]);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("verdict: drop (decided by rule fwc:filter:blocked (chain input, rule "), "{out}");
    assert!(out.contains("))  rules/10-filter.kdl:2:5"), "{out}");
    let o = fwc(&["explain", &path("examples/edge-host"), "tcp -> :8080", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["explanation"]["dnat"], serde_json::json!(["10.0.0.5", 80]));
    assert_eq!(v["locations"]["fwc:forward:web"]["line"], 2);
    let o = fwc(&["explain", &path("examples/edge-host"), "tcp -> nowhere:22"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not an IP address"), "{}", shown(&o));
    // --live without an applied generation: a clear refusal, nothing touched.
    let state = tempfile::tempdir().unwrap();
    let o = fwc(&["explain", "--live", "--state-dir", state.path().to_str().unwrap(), "tcp -> :22"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing is applied"), "{}", shown(&o));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git").current_dir(dir).args(["-c", "user.email=t@example.org", "-c", "user.name=t"]).args(args).output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn plan_from_rev_shows_flow_effects_text_markdown_json() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_dir(&root().join("examples/quickstart"), &repo);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "init"]);
    let f = repo.join("fwc.kdl");
    let text = std::fs::read_to_string(&f).unwrap().replace("    reject \"ident\"", "    allow \"postgres\" proto=tcp port=5432\n    reject \"ident\"").replace("port=22 from=\"@office\"", "port=22 from=\"192.0.2.0/24\"");
    std::fs::write(&f, text).unwrap();
    let d = repo.to_str().unwrap();
    let o = fwc(&["plan", d, "--from", "HEAD", "--detailed-exitcode"]);
    assert_eq!(o.status.code(), Some(2), "{}", shown(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in ["Flow effects (", "  + opens tcp/5432 from anywhere\n", "  - closes tcp/22 from 198.18.1.0/24 (@office)\n", "  + opens tcp/22 from 192.0.2.0/24\n", "  ! expectation \"office reaches ssh\" (tests/policy.kdl:2) now FAILS\n"] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    let o = fwc(&["plan", d, "--from", "HEAD", "--format", "markdown"]);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.starts_with("### fwc plan\n") && md.contains("| 🟢 opens | `tcp/5432 from anywhere` |") && md.contains("```diff\n"), "{md}");
    let o = fwc(&["plan", d, "--from", "HEAD", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let effects = v["flow_effects"]["effects"].as_array().unwrap();
    assert!(effects.iter().any(|e| e["effect"] == "opens" && e["text"] == "opens tcp/5432 from anywhere"), "{v:#}");
    // Nothing changed: no effects.
    git(&repo, &["checkout", "-q", "--", "."]);
    let o = fwc(&["plan", d, "--from", "HEAD"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("Flow effects: none"), "{}", shown(&o));
}

#[test]
fn live_plan_and_explain_live_against_an_applied_generation() {
    if !fwc_testkit::privileged("live_plan_and_explain_live_against_an_applied_generation") {
        return;
    }
    let ns = fwc_testkit::Netns::new("explain");
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let state = tmp.path().join("state");
    copy_dir(&root().join("examples/quickstart"), &repo);
    let (d, s) = (repo.to_str().unwrap(), state.to_str().unwrap());
    let o = fwc(&["apply", d, "--netns", &ns.name, "--state-dir", s, "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    // explain --live reads the applied generation (and finds positions in DIR).
    let o = fwc(&["explain", "--live", "--state-dir", s, d, "tcp 192.0.2.9 -> :8080"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    assert!(out.contains("(applied generation gen-000001)") && out.contains("dnat:    198.18.2.2:80 by fwc:forward:web  fwc.kdl:16:1"), "{out}");
    // The live plan lists what the working copy would open.
    let f = repo.join("fwc.kdl");
    std::fs::write(&f, std::fs::read_to_string(&f).unwrap().replace("    reject \"ident\"", "    allow \"postgres\" proto=tcp port=5432\n    reject \"ident\"")).unwrap();
    let o = fwc(&["plan", d, "--netns", &ns.name, "--state-dir", s, "--detailed-exitcode"]);
    assert_eq!(o.status.code(), Some(2), "{}", shown(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("  + opens tcp/5432 from anywhere\n"), "{}", shown(&o));
    let o = fwc(&["plan", d, "--netns", &ns.name, "--state-dir", s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["flow_effects"]["effects"][0]["text"], "opens tcp/5432 from anywhere");
}

/// Drift names the KDL line: a rule deleted by hand with nft is reported by `fwc status` (text
/// and JSON) and `fwc plan` with the file:line:column the applied generation's manifest
/// recorded, and `fwc explain --live --rule` finds the line from the nft comment.
#[test]
fn drift_names_the_rules_file_and_line() {
    if !fwc_testkit::privileged("drift_names_the_rules_file_and_line") {
        return;
    }
    let ns = fwc_testkit::Netns::new("drift");
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("rules")).unwrap();
    std::fs::write(repo.join("fwc.kdl"), "fwc 1\nset \"office\" \"198.18.1.0/24\"\n").unwrap();
    std::fs::write(
        repo.join("rules/web.kdl"),
        "// Web and ssh.\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22 from=\"@office\"\n    allow \"web\" proto=tcp port=\"80,443\"\n}\n",
    )
    .unwrap();
    let state = tmp.path().join("state");
    let (d, s) = (repo.to_str().unwrap(), state.to_str().unwrap());
    let o = fwc(&["apply", d, "--netns", &ns.name, "--state-dir", s, "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    // Someone deletes the web rule and empties the office set by hand.
    let listing = ns.exec(&["nft", "-a", "list", "chain", "inet", "fwc", "input"]);
    let handle = listing.lines().find(|l| l.contains("\"fwc:filter:web\"")).and_then(|l| l.rsplit("# handle ").next()).expect("web rule listed").trim().to_string();
    ns.exec(&["nft", "delete", "rule", "inet", "fwc", "input", "handle", &handle]);
    ns.exec(&["nft", "flush", "set", "inet", "fwc", "office_v4"]);
    let o = fwc(&["status", "--netns", &ns.name, "--state-dir", s]);
    assert_eq!(o.status.code(), Some(2), "{}", shown(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("chain input: rule filter \"web\" (rules/web.kdl:4:5) was deleted"), "{}", shown(&o));
    assert!(out.contains("set office_v4 (fwc.kdl:2:1): elements removed: 198.18.1.0/24"), "{}", shown(&o));
    let o = fwc(&["status", "--json", "--netns", &ns.name, "--state-dir", s]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["drift_details"].to_string().contains("rule filter \\\"web\\\" (rules/web.kdl:4:5) was deleted"), "{v:#}");
    let o = fwc(&["plan", d, "--netns", &ns.name, "--state-dir", s]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("rule filter \"web\" (rules/web.kdl:4:5) was deleted"), "{}", shown(&o));
    // From the comment nft shows to the line, for the generation applied here.
    let o = fwc(&["explain", "--live", "--state-dir", s, "--rule", "fwc:filter:ssh"]);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("fwc:filter:ssh  rules/web.kdl:3:5\n"), "{}", shown(&o));
}
