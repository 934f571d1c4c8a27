//! Hostile and clumsy input: what a commit contains must never crash, hang or wedge fwc.
//! Each case is a reproduction from the issue: the command must end by itself, with exit 1 and
//! a diagnostic that has file:line:column — never an abort (134), a panic (101) or a hang.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run fwc with a deadline; a run past it is killed and fails the test.
fn fwc_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(args)
        .arg("--color=never")
        .env("NO_COLOR", "1")
        .env_remove("FWC_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fwc");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("fwc {args:?} still running after {limit:?}; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn repo(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, body) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    dir
}

fn path(d: &Path) -> &str {
    d.to_str().unwrap()
}

/// exit 1 (not an abort or a panic) and stderr names the file:line:column and the words.
fn assert_refused(o: &Output, location: &str, words: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "expected exit 1, got {:?}; stderr:\n{err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(location), "expected {location} in:\n{err}");
    assert!(err.contains(words), "expected {words:?} in:\n{err}");
}

#[test]
fn deeply_nested_blocks_are_an_error_not_a_stack_overflow() {
    let text = format!("fwc 1\n{}{}\n", "a {".repeat(1500), "}".repeat(1500));
    let d = repo(&[("fwc.kdl", text)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(60));
    assert_refused(&o, "fwc.kdl:2:", "nested more than 64 levels");
    let o = fwc_within(&["fmt", "--check", path(d.path())], Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nested"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn deeply_nested_comments_are_an_error_not_a_stack_overflow() {
    let text = format!("fwc 1\n{}{}\n", "/*".repeat(5000), "*/".repeat(5000));
    let d = repo(&[("fwc.kdl", text)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(60));
    assert_refused(&o, "fwc.kdl:2:", "block comments are nested");
}

#[test]
fn deep_nesting_in_a_rules_file_and_a_test_file_is_refused_too() {
    let deep = format!("{}{}\n", "a {".repeat(3000), "}".repeat(3000));
    let d = repo(&[("fwc.kdl", "fwc 1\n".into()), ("rules/x.kdl", deep.clone()), ("tests/t.kdl", deep)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(60));
    assert_refused(&o, "rules/x.kdl:1:", "nested");
}

#[test]
fn a_runaway_template_runs_out_of_fuel() {
    let t = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n";
    let d = repo(&[("fwc.kdl", "fwc 1\n".into()), ("rules/x.kdl.j2", t.into())]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(120));
    assert_refused(&o, "rules/x.kdl.j2:1:", "steps of work");
}

#[test]
fn a_template_that_renders_too_much_is_refused() {
    // 1,000 x 100 KB: few steps of work, 100 MB of output.
    let t = "{% for i in range(1000) %}// {{ \"x\" * 100000 }}\n{% endfor %}\n";
    let d = repo(&[("fwc.kdl", "fwc 1\n".into()), ("rules/x.kdl.j2", t.into())]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rendered more than"), "{err}");
}

#[test]
fn an_error_past_column_65535_renders_for_people() {
    // Regression: miette's renderer panicked on such a column; `check --json` did not.
    let text = format!("fwc 1\nset \"x\" {}\"198.51.100.1/33\"\n", " ".repeat(70_000));
    let d = repo(&[("fwc.kdl", text)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(60));
    assert_refused(&o, "fwc.kdl:2:", "line is");
}

#[test]
fn report_commands_survive_a_closed_pipe() {
    // Regression: println! into a closed pipe panicked (exit 101 with a panic message).
    let d = repo(&[("fwc.kdl", "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n".into())]);
    let state = tempfile::tempdir().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["check", "--json", path(d.path())],
        vec!["schema"],
        vec!["audit", "show", "--state-dir", path(state.path())],
        vec!["audit", "verify", "--state-dir", path(state.path())],
        vec!["completions", "bash"],
    ];
    for args in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fwc"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end at once, like `| head -c0`.
        drop(child.stdout.take());
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert!(!err.contains("panicked"), "fwc {args:?} panicked on a closed pipe:\n{err}");
        assert_ne!(status.code(), Some(101), "fwc {args:?}: {err}");
    }
}

#[test]
fn a_million_entry_blocklist_is_within_the_limits() {
    let list: String = (0..1_000_000u32).map(|i| format!("{}.{}.{}.0/24\n", 10 + (i >> 16), (i >> 8) & 255, i & 255)).collect();
    let root = "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\ninput policy=drop {\n    deny \"bl\" from=\"@bl\"\n}\n";
    let d = repo(&[("fwc.kdl", root.into()), ("lists/bl.netset", list)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(300));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn more_set_elements_than_the_limit_are_refused_at_the_first_one_past_it() {
    // 4,000,000 from set files (two of 2,000,000 lines), then one inline too many.
    let list: String = (0..2_000_000u32).map(|i| format!("10.{}.{}.{}\n", i >> 16, (i >> 8) & 255, i & 255)).collect();
    let root = "fwc 1\nset \"a\" file=\"lists/a.txt\"\nset \"b\" file=\"lists/b.txt\"\nset \"c\" file=\"lists/c.txt\"\ninput policy=drop {\n    deny \"a\" from=\"@a\"\n}\n";
    let d = repo(&[("fwc.kdl", root.into()), ("lists/a.txt", list.clone()), ("lists/b.txt", list), ("lists/c.txt", "192.0.2.1\n192.0.2.2\n".into())]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(300));
    assert_refused(&o, "lists/c.txt:1:1", "more than 4000000 elements");
    assert!(String::from_utf8_lossy(&o.stderr).contains("set \"c\""), "names the rule");
}

#[test]
fn more_rules_than_the_limit_are_refused() {
    let mut text = String::from("fwc 1\ninput policy=drop {\n");
    for i in 0..100_001 {
        text.push_str(&format!("    allow \"r{i}\" proto=tcp port={}\n", 1 + i % 60000));
    }
    text.push_str("}\n");
    let d = repo(&[("fwc.kdl", text)]);
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(300));
    assert_refused(&o, "fwc.kdl:100003:11", "more than 100000 rules");
}

#[test]
fn more_files_than_the_limit_are_refused_before_they_are_read() {
    let d = repo(&[("fwc.kdl", "fwc 1\n".into())]);
    for i in 0..10_001 {
        let p = d.path().join(format!("rules/d{}/r{i}.kdl", i / 1000));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "// empty\n").unwrap();
    }
    let o = fwc_within(&["check", path(d.path())], Duration::from_secs(120));
    assert_refused(&o, "rules/", "more than 10000 files");
}
