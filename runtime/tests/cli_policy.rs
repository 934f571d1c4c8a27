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
    assert!(out.contains("8 expectation(s): 0 passed, 8 failed"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"<testsuites name="fwc policy tests" tests="8" failures="8">"#), "{xml}");
    assert!(xml.contains(r#"<testcase classname="tests/wrong.kdl" name="office is dropped [localhost]" file="tests/wrong.kdl" line="2">"#), "{xml}");
    assert!(xml.contains("<failure message=\"expected charged to the QoS class of &quot;other&quot;"), "{xml}");
    // --json: one result per expectation, machine-readable.
    let o = fwc(&["test", &path("compiler/tests/policy/must-fail"), "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 8);
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
