//! Repository confinement: fwc reads files only inside the rule repository. A symlink
//! whose target leaves it is refused with a diagnostic and its target is never read — on the
//! work-tree path (`fwc check`) and on the git-object path (`fwc plan --from`, the agent) with
//! the same verdict. Symlinks that stay inside are followed on both paths. Bytes that are not
//! UTF-8 are reported at their line and column.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

mod agent_common;
use agent_common::git;

const SECRET: &str = "TOPSECRET-LINE-7f3a {";

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(args)
        .arg("--color=never")
        .env("NO_COLOR", "1")
        .env_remove("FWC_LOG")
        .output()
        .expect("run fwc")
}

/// A temp dir holding `outside/secret.kdl` (never to be read) and a git repository `repo/`
/// with `fwc.kdl` and `files`; `setup` adds symlinks before the commit.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(root: &str, files: &[(&str, &[u8])], setup: impl FnOnce(&Path, &Path)) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.kdl"), format!("{SECRET}\n{SECRET}\n")).unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("fwc.kdl"), root).unwrap();
        for (p, body) in files {
            let p = repo.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        setup(&repo, &outside);
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "rules"]);
        Fixture { dir }
    }
    fn repo(&self) -> String {
        self.dir.path().join("repo").to_str().unwrap().to_string()
    }
    /// `fwc check` (work tree) and `fwc plan --from HEAD --to HEAD` (git objects).
    fn both(&self) -> [(&'static str, Output); 2] {
        let repo = self.repo();
        [("check", fwc(&["check", &repo])), ("plan --from", fwc(&["plan", "--from", "HEAD", "--to", "HEAD", &repo]))]
    }
}

/// Both paths refuse, with `words` and `location` in the message, and no line of the secret.
fn assert_refused_on_both(f: &Fixture, location: &str, words: &str) {
    for (path, o) in f.both() {
        let out = flat(&o);
        assert_eq!(o.status.code(), Some(1), "{path}: expected exit 1, got {:?}:\n{out}", o.status);
        assert!(!out.contains("TOPSECRET"), "{path} leaked the target's contents:\n{out}");
        assert!(!out.contains("panicked"), "{path}:\n{out}");
        assert!(out.contains(location), "{path}: expected {location:?} in:\n{out}");
        assert!(out.contains(words), "{path}: expected {words:?} in:\n{out}");
    }
}

/// stdout and stderr, with miette's line wrapping undone.
fn flat(o: &Output) -> String {
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    all.replace('│', " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn assert_ok_on_both(f: &Fixture) {
    for (path, o) in f.both() {
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{path}: expected success, got {:?}:\n{out}", o.status);
    }
}

#[test]
fn an_absolute_symlink_to_a_file_outside_is_refused_and_not_read() {
    let f = Fixture::new("fwc 1\n", &[], |repo, outside| {
        std::fs::create_dir_all(repo.join("rules")).unwrap();
        symlink(outside.join("secret.kdl"), repo.join("rules/x.kdl")).unwrap();
    });
    assert_refused_on_both(&f, "rules/x.kdl:1:1", "leaves the repository");
}

#[test]
fn etc_shadow_behind_a_rules_symlink_is_never_printed() {
    let f = Fixture::new("fwc 1\n", &[], |repo, _| {
        std::fs::create_dir_all(repo.join("rules")).unwrap();
        symlink("/etc/shadow", repo.join("rules/x.kdl")).unwrap();
    });
    assert_refused_on_both(&f, "rules/x.kdl:1:1", "symlink to \"/etc/shadow\" leaves the repository");
    if let Ok(shadow) = std::fs::read_to_string("/etc/shadow") {
        for (_, o) in f.both() {
            let out = String::from_utf8_lossy(&o.stderr);
            for line in shadow.lines().filter(|l| l.len() > 8) {
                assert!(!out.contains(line), "a line of /etc/shadow was printed");
            }
        }
    }
}

#[test]
fn a_relative_symlink_climbing_out_is_refused() {
    let f = Fixture::new("fwc 1\n", &[], |repo, _| {
        std::fs::create_dir_all(repo.join("rules/sub")).unwrap();
        symlink("../../../outside/secret.kdl", repo.join("rules/sub/x.kdl")).unwrap();
    });
    assert_refused_on_both(&f, "rules/sub/x.kdl:1:1", "leaves the repository");
}

#[test]
fn the_rules_directory_itself_as_a_symlink_outside_is_refused() {
    let f = Fixture::new("fwc 1\n", &[], |repo, outside| {
        symlink(outside, repo.join("rules")).unwrap();
    });
    assert_refused_on_both(&f, "rules:1:1", "leaves the repository");
}

#[test]
fn a_directory_symlink_below_rules_leading_out_is_refused() {
    let f = Fixture::new("fwc 1\n", &[("rules/a.kdl", b"// fine\n")], |repo, _| {
        symlink("../../outside", repo.join("rules/more")).unwrap();
    });
    assert_refused_on_both(&f, "rules/more:1:1", "leaves the repository");
}

#[test]
fn a_root_file_symlink_outside_is_refused() {
    let f = Fixture::new("", &[], |repo, outside| {
        std::fs::remove_file(repo.join("fwc.kdl")).unwrap();
        symlink(outside.join("secret.kdl"), repo.join("fwc.kdl")).unwrap();
    });
    assert_refused_on_both(&f, "fwc.kdl:1:1", "leaves the repository");
}

#[test]
fn a_set_file_symlink_outside_is_refused() {
    let root = "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\ninput policy=drop {\n    deny \"bl\" from=\"@bl\"\n}\n";
    let f = Fixture::new(root, &[], |repo, outside| {
        std::fs::create_dir_all(repo.join("lists")).unwrap();
        symlink(outside.join("secret.kdl"), repo.join("lists/bl.netset")).unwrap();
    });
    assert_refused_on_both(&f, "lists/bl.netset:1:1", "leaves the repository");
}

#[test]
fn symlinks_that_stay_inside_are_followed_on_both_paths() {
    let root = "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\n";
    let files: &[(&str, &[u8])] = &[
        ("shared/input.kdl", b"input policy=drop {\n    deny \"bl\" from=\"@bl\"\n    allow \"ssh\" proto=tcp port=22\n}\n"),
        ("shared/lists/bl.txt", b"192.0.2.0/24\n"),
    ];
    let f = Fixture::new(root, files, |repo, _| {
        std::fs::create_dir_all(repo.join("rules")).unwrap();
        symlink("../shared/input.kdl", repo.join("rules/input.kdl")).unwrap();
        symlink("shared/lists", repo.join("lists")).unwrap();
        symlink("bl.txt", repo.join("shared/lists/bl.netset")).unwrap();
    });
    assert_ok_on_both(&f);
    // the rule behind the symlink was read: its error surfaces through the symlink's path
    std::fs::write(f.dir.path().join("repo/shared/input.kdl"), "input {\n    allow \"ssh\" prot=tcp\n}\n").unwrap();
    let o = fwc(&["check", &f.repo()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rules/input.kdl:2:17"), "{err}");
}

#[test]
fn a_symlink_loop_is_refused_not_walked_forever() {
    let f = Fixture::new("fwc 1\n", &[("rules/a.kdl", b"// fine\n")], |repo, _| {
        symlink(".", repo.join("rules/again")).unwrap();
        symlink("self", repo.join("rules/self")).unwrap();
    });
    assert_refused_on_both(&f, "rules/again:1:1", "loop");
    for (_, o) in f.both() {
        assert!(String::from_utf8_lossy(&o.stderr).contains("rules/self:1:1"));
    }
}

#[test]
fn invalid_utf8_is_reported_at_its_line_and_column() {
    let f = Fixture::new("fwc 1\n", &[("rules/a.kdl", b"input {\n    allow \"x\xff\" proto=tcp port=22\n}\n")], |_, _| {});
    assert_refused_on_both(&f, "rules/a.kdl:2:13", "not UTF-8");
}

#[test]
fn invalid_utf8_in_the_root_file_is_reported_at_its_line_and_column() {
    let f = Fixture::new("", &[], |repo, _| std::fs::write(repo.join("fwc.kdl"), b"fwc 1\n// caf\xe9\n").unwrap());
    assert_refused_on_both(&f, "fwc.kdl:2:7", "not UTF-8");
    for (_, o) in f.both() {
        assert!(!String::from_utf8_lossy(&o.stderr).contains("no root file"));
    }
}
