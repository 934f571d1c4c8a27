//! The state dir can be trusted: it is 0700 with 0600 files whatever the umask,
//! no other user can take its lock, and a generation whose files no longer match the digests in
//! its `applied.json` is refused by `fwc rollback` and `fwc status` with nothing changed.
//! Privileged: real `fwc apply` into a namespace of the test's own.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use fwc_testkit::{privileged, Netns};

fn fwc_cmd(args: &[&str], umask: Option<&str>) -> Output {
    let bin = env!("CARGO_BIN_EXE_fwc");
    let mut c = match umask {
        // The shell sets the umask, then becomes fwc.
        Some(m) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(format!("umask {m}; exec \"$0\" \"$@\"")).arg(bin).args(args);
            c
        }
        None => {
            let mut c = Command::new(bin);
            c.args(args);
            c
        }
    };
    c.env("NO_COLOR", "1").env_remove("FWC_TEST_FAIL").env_remove("SSH_CONNECTION").stdin(std::process::Stdio::null());
    c.output().expect("fwc runs")
}

/// stdout and stderr, with miette's line wrapping undone (one space between words).
fn text(o: &Output) -> String {
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    all.replace('│', " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn repo(dir: &Path, port: u16) {
    std::fs::write(dir.join("fwc.kdl"), format!("fwc 1\ninput {{\n  allow \"web\" proto=\"tcp\" port={port}\n}}\n")).unwrap();
}

fn apply(repo: &Path, ns: &Netns, state: &Path, umask: Option<&str>) -> Output {
    fwc_cmd(
        &["apply", repo.to_str().unwrap(), "--netns", &ns.name, "--state-dir", state.to_str().unwrap(), "--auto-approve"],
        umask,
    )
}

/// Every directory and regular file below `dir` (and `dir` itself) with its mode.
fn modes(dir: &Path, out: &mut Vec<(String, u32, bool)>) {
    let m = std::fs::symlink_metadata(dir).unwrap();
    out.push((dir.display().to_string(), m.permissions().mode() & 0o7777, true));
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            modes(&e.path(), out);
        } else if ft.is_file() {
            out.push((e.path().display().to_string(), e.metadata().unwrap().permissions().mode() & 0o7777, false));
        }
    }
}

#[test]
fn state_dir_is_private_whatever_the_umask() {
    if !privileged("state_dir_is_private_whatever_the_umask") {
        return;
    }
    let ns = Netns::new("st-umask");
    let tmp = tempfile::tempdir().unwrap();
    repo(tmp.path(), 80);
    let state = tmp.path().join("var/lib/fwc");
    let o = apply(tmp.path(), &ns, &state, Some("000"));
    assert!(o.status.success(), "{}", text(&o));
    repo(tmp.path(), 81);
    let o = apply(tmp.path(), &ns, &state, Some("000"));
    assert!(o.status.success(), "{}", text(&o));
    let o = fwc_cmd(&["status", "--netns", &ns.name, "--state-dir", state.to_str().unwrap()], Some("000"));
    assert!(o.status.success(), "{}", text(&o));
    let mut all = Vec::new();
    modes(&state, &mut all);
    assert!(all.iter().any(|(p, _, _)| p.ends_with("/lock")), "{all:?}");
    assert!(all.iter().any(|(p, _, _)| p.ends_with("audit.jsonl")), "{all:?}");
    assert!(all.iter().filter(|(p, _, _)| p.ends_with("nftables.json")).count() >= 2, "{all:?}");
    let wrong: Vec<_> = all.iter().filter(|(_, m, dir)| *m != if *dir { 0o700 } else { 0o600 }).collect();
    assert!(wrong.is_empty(), "under umask 000 these have the wrong mode: {wrong:?}");
}

#[test]
fn another_user_cannot_take_the_lock() {
    if !privileged("another_user_cannot_take_the_lock") || !fwc_testkit::which("setpriv") || !fwc_testkit::which("flock") {
        return;
    }
    let ns = Netns::new("st-lock");
    let tmp = tempfile::tempdir().unwrap();
    // A world-traversable parent, as /var/lib is.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    repo(tmp.path(), 80);
    // A state dir left by an older fwc: 0755 with a 0644 lock file.
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(state.join("lock"), "").unwrap();
    std::fs::set_permissions(state.join("lock"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = apply(tmp.path(), &ns, &state, None);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o7777, 0o700);
    assert_eq!(std::fs::metadata(state.join("lock")).unwrap().permissions().mode() & 0o7777, 0o600);
    // nobody tries to hold the lock (a read-only open would do for flock).
    let lock = state.join("lock");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "flock", "-n", "-s"])
        .arg(&lock)
        .arg("true")
        .output()
        .unwrap();
    assert!(!o.status.success(), "user nobody took the state lock: {}", text(&o));
    // A lock file that belongs to someone else is refused, not shared.
    std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
    let o = apply(tmp.path(), &ns, &state, None);
    assert!(!o.status.success() && text(&o).contains("belongs to uid 65534"), "{}", text(&o));
    assert_eq!(std::fs::metadata(&lock).unwrap().uid(), 65534);
}

#[test]
fn a_tampered_generation_is_refused() {
    if !privileged("a_tampered_generation_is_refused") {
        return;
    }
    let ns = Netns::new("st-tamper");
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let st = state.to_str().unwrap();
    repo(tmp.path(), 80);
    assert!(apply(tmp.path(), &ns, &state, None).status.success());
    repo(tmp.path(), 81);
    let o = apply(tmp.path(), &ns, &state, None);
    assert!(o.status.success(), "{}", text(&o));
    let live = ns.exec(&["nft", "list", "table", "inet", "fwc"]);
    assert!(live.contains("dport 81"), "{live}");
    // Someone edits the previous generation: rollback would load it.
    let gens: Vec<_> = {
        let mut v: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("gen-"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(gens.len(), 2, "{gens:?}");
    let f = state.join(&gens[0]).join("nftables.json");
    let original = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, original.replace("80", "23")).unwrap();
    let o = fwc_cmd(&["rollback", "--netns", &ns.name, "--state-dir", st, "--auto-approve"], None);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains(&gens[0]) && out.contains("does not match its recorded digests") && out.contains("nftables.json"), "{out}");
    assert_eq!(ns.exec(&["nft", "list", "table", "inet", "fwc"]), live, "a refused rollback changed the live ruleset");
    // The current generation edited (the previous one repaired): status refuses too (exit 1,
    // not "in sync").
    std::fs::write(state.join(&gens[0]).join("nftables.json"), &original).unwrap();
    let f = state.join(&gens[1]).join("qos.json");
    let mut t = std::fs::read_to_string(&f).unwrap();
    t.push(' ');
    std::fs::write(&f, t).unwrap();
    let o = fwc_cmd(&["status", "--netns", &ns.name, "--state-dir", st], None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("qos.json"), "{}", text(&o));
}
