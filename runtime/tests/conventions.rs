//! The conventions of the tools fwc's users already know, checked on the real binary: colour
//! decided per stream (a terminal on stdout does not colour a stderr redirected to a file;
//! NO_COLOR and --color win), the human output of each stream as a snapshot (not a terminal /
//! a terminal / a terminal with NO_COLOR; terminals made with script(1)), `--lock-timeout`,
//! `-v`/`-q`, and `plan`'s terraform exit codes.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const FWC: &str = env!("CARGO_BIN_EXE_fwc");

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git").args(args).current_dir(dir).env("GIT_AUTHOR_NAME", "t").env("GIT_AUTHOR_EMAIL", "t@example.org").env("GIT_COMMITTER_NAME", "t").env("GIT_COMMITTER_EMAIL", "t@example.org").env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z").env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z").output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A repository with two commits (the second adds a rule) and a broken work tree file in
/// `broken/` (an undefined set).
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("fwc.kdl"), "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n").unwrap();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "one"]);
    std::fs::write(d.join("fwc.kdl"), "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    allow \"web\" proto=tcp port=80\n}\n").unwrap();
    git(d, &["commit", "-q", "-am", "two"]);
    std::fs::create_dir(d.join("broken")).unwrap();
    std::fs::write(d.join("broken/fwc.kdl"), "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22 from=\"@office\"\n}\n").unwrap();
    dir
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Run `fwc ARGS` in `dir` with `stdout`/`stderr` each a terminal (script(1)) or a file, and
/// return (stdout, stderr, exit code); a terminal's text has its `\r\n` made `\n`.
fn run(dir: &Path, args: &[&str], tty_out: bool, tty_err: bool, env: &[(&str, &str)]) -> (String, String, i32) {
    let out = dir.join(".out");
    let err = dir.join(".err");
    let mut line = format!("{} {}", shell_quote(FWC), args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "));
    if !tty_out {
        line.push_str(&format!(" >{}", shell_quote(out.to_str().unwrap())));
    }
    if !tty_err {
        line.push_str(&format!(" 2>{}", shell_quote(err.to_str().unwrap())));
    }
    let mut c = if tty_out || tty_err {
        // script(1) gives the command a terminal; -e passes the exit status on.
        let mut c = Command::new("script");
        c.args(["-qefc", &line, "/dev/null"]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &line]);
        c
    };
    c.current_dir(dir).env_remove("FWC_LOG").env_remove("NO_COLOR").env("TERM", "xterm").stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let o: Output = c.output().unwrap();
    let tty = String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n");
    let file = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (so, se) = match (tty_out, tty_err) {
        (true, true) => (tty, String::new()),
        (true, false) => (tty, file(&err)),
        (false, true) => (file(&out), tty),
        (false, false) => (file(&out), file(&err)),
    };
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&err);
    (so, se, o.status.code().unwrap_or(-1))
}

fn has_ansi(s: &str) -> bool {
    s.contains("\x1b[")
}

fn script_available() -> bool {
    fwc_testkit::tool("conventions", "script", "bsdutils")
}

/// `fwc check 2>log` on a terminal: the log gets no ANSI (the colour of stderr is decided by
/// stderr, not stdout); on a terminal stderr the diagnostic is coloured unless NO_COLOR or
/// --color=never.
#[test]
fn colour_is_decided_per_stream() {
    if !script_available() {
        return;
    }
    let dir = fixture();
    let d = dir.path();
    let (_, err, code) = run(d, &["check", "broken"], true, false, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("@office") && !has_ansi(&err), "stderr to a file must be plain:\n{err}");
    let (_, err, _) = run(d, &["check", "broken"], false, true, &[]);
    assert!(has_ansi(&err), "stderr on a terminal is coloured:\n{err}");
    let (_, err, _) = run(d, &["check", "broken"], false, true, &[("NO_COLOR", "1")]);
    assert!(!has_ansi(&err), "NO_COLOR:\n{err}");
    let (_, err, _) = run(d, &["check", "broken", "--color=never"], false, true, &[]);
    assert!(!has_ansi(&err), "--color=never:\n{err}");
    let (_, err, _) = run(d, &["check", "broken", "--color=always"], false, false, &[]);
    assert!(has_ansi(&err), "--color=always:\n{err}");
    // The plan on stdout: coloured on a terminal even when stderr is a file, plain in a file
    // even when stderr is a terminal.
    let (out, _, _) = run(d, &["plan", "--from", "HEAD~1"], true, false, &[]);
    assert!(has_ansi(&out), "{out}");
    let (out, _, _) = run(d, &["plan", "--from", "HEAD~1"], false, true, &[]);
    assert!(!has_ansi(&out), "{out}");
}

/// The human output of `check` (stderr) and `plan` (stdout) as a user sees it in each setting.
#[test]
fn human_output_snapshots_per_stream() {
    if !script_available() {
        return;
    }
    let dir = fixture();
    let d = dir.path();
    for (setting, tty, env) in [("not_a_tty", false, vec![]), ("tty", true, vec![]), ("tty_no_color", true, vec![("NO_COLOR", "1")])] {
        let (_, err, code) = run(d, &["check", "broken"], false, tty, &env);
        assert_eq!(code, 1, "{err}");
        insta::assert_snapshot!(format!("check_stderr_{setting}"), err.replace(d.to_str().unwrap(), "<DIR>"));
        let (out, _, code) = run(d, &["plan", "--from", "HEAD~1"], tty, false, &env);
        assert_eq!(code, 0, "{out}");
        insta::assert_snapshot!(format!("plan_stdout_{setting}"), out.replace(d.to_str().unwrap(), "<DIR>"));
    }
}

/// terraform: `plan` exits 0 with or without changes; `--detailed-exitcode` 0 none, 2 changes,
/// 1 error.
#[test]
fn plan_exit_codes() {
    let dir = fixture();
    let d = dir.path();
    let code = |args: &[&str]| run(d, args, false, false, &[]).2;
    assert_eq!(code(&["plan", "--from", "HEAD~1"]), 0);
    assert_eq!(code(&["plan", "--from", "HEAD~1", "--detailed-exitcode"]), 2);
    assert_eq!(code(&["plan", "--from", "HEAD", "--detailed-exitcode"]), 0);
    assert_eq!(code(&["plan", "--from", "HEAD"]), 0);
    assert_eq!(code(&["plan", "broken", "--from", "HEAD"]), 1);
    assert_eq!(code(&["plan", "broken", "--from", "HEAD", "--detailed-exitcode"]), 1);
}

/// A command that needs the state lock waits at most --lock-timeout, then fails (exit 1)
/// having changed nothing; without it, it waits.
#[test]
fn lock_timeout_bounds_the_wait_for_the_state_lock() {
    let dir = tempfile::tempdir().unwrap();
    let state = fwc_runtime::state::StateDir::new(dir.path().join("state"));
    let held = state.lock(false).unwrap();
    let sd = state.path.to_str().unwrap();
    let t0 = std::time::Instant::now();
    let o = Command::new(FWC).args(["rollback", "--state-dir", sd, "--auto-approve", "--lock-timeout", "500ms"]).env("NO_COLOR", "1").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(t0.elapsed() >= std::time::Duration::from_millis(500), "gave up before the timeout");
    assert!(err.contains("holds the state lock") && err.contains("--lock-timeout"), "{err}");
    // The holder goes away while a second command waits: it proceeds (and finds nothing to
    // roll back, which is its own error).
    let child = Command::new(FWC)
        .args(["rollback", "--state-dir", sd, "--auto-approve", "--lock-timeout", "30s"])
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(held);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nothing to roll back"), "{err}");
}

#[test]
fn verbose_quiet_and_fwc_log_are_documented_flags() {
    let o = Command::new(FWC).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for want in ["--verbose", "--quiet", "FWC_LOG", "NO_COLOR", "--color"] {
        assert!(help.contains(want), "--help lacks {want}:\n{help}");
    }
    let o = Command::new(FWC).args(["-q", "-v", "check"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "-q and -v conflict (a usage error)");
    let dir = fixture();
    let o = Command::new(FWC).args(["-vv", "check"]).current_dir(dir.path()).env_remove("FWC_LOG").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
