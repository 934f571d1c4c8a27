//! The `fwc` binary's compile-side commands, run as a user would: `check`, `compile`, `plan
//! --from`, `fmt`, `schema`, `completions`. Exit codes (0 ok, 1 error, 2 plan has changes),
//! file:line:col + hint on errors, `--json` diagnostics, and that a failed compile writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fwc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(args)
        .arg("--color=never")
        .env("NO_COLOR", "1")
        .env_remove("FWC_LOG")
        .output()
        .expect("run fwc")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("fwc exited normally")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Both streams, for assertion messages.
fn shown(o: &Output) -> String {
    format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", o.status.code(), text(&o.stdout), text(&o.stderr))
}

fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, body) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    dir
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Broken repositories: (fwc.kdl, "file:line:col" the report must show, a hint it must show).
const BAD: &[(&str, &str, &str)] = &[
    (
        "fwc 1\nforward \"tenant\" listen=\":9000\" to=\"10.0.0.7:9000\" bandwidth=\"10mbps\"\n",
        "fwc.kdl:2:52",
        "write 10mbit for bits per second or 10MB/s for bytes per second",
    ),
    ("fwc 1\ninput {\n    allow \"ssh\" prot=tcp port=22\n}\n", "fwc.kdl:3:17", "did you mean `proto`?"),
    ("fwc 1\nset \"office\" \"203.0.113.7/24\"\n", "fwc.kdl:2:14", "did you mean 203.0.113.0/24?"),
    ("fwc 1\ninput {\n    deny \"x\" from=\"192.0.2.0/24\" log=true\n}\n", "fwc.kdl:3:38", "write log=#true"),
];

#[test]
fn check_and_compile_report_errors_and_write_nothing() {
    for (body, at, hint) in BAD {
        let dir = repo(&[("fwc.kdl", body)]);
        let check = fwc(&["check", s(dir.path())]);
        assert_eq!(code(&check), 1, "check should fail:\n{}", shown(&check));
        let err = text(&check.stderr);
        assert!(err.contains(at), "check should point at {at}:\n{}", shown(&check));
        assert!(err.contains(hint), "check should give the hint {hint:?}:\n{}", shown(&check));
        assert!(err.contains("1 error(s)"), "summary line missing:\n{}", shown(&check));

        let out = dir.path().join("out");
        let compile = fwc(&["compile", s(dir.path()), "--out", s(&out)]);
        assert_eq!(code(&compile), 1, "compile should fail:\n{}", shown(&compile));
        let err = text(&compile.stderr);
        assert!(err.contains(at) && err.contains(hint), "compile should report {at} and the hint:\n{}", shown(&compile));
        assert!(!out.exists(), "a failed compile must not create {}", out.display());
    }
}

#[test]
fn several_errors_are_reported_in_one_run() {
    let dir = repo(&[(
        "fwc.kdl",
        "fwc 1\nset \"office\" \"203.0.113.0/33\"\ninput {\n    allow \"ssh\" proto=tcpp port=22 from=\"@office\"\n}\nforward \"web\" listen=\":8080\" to=\"10.0.0.300:80\"\n",
    )]);
    let o = fwc(&["check", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let err = text(&o.stderr);
    for at in ["fwc.kdl:2:14", "fwc.kdl:4:17", "fwc.kdl:6:30"] {
        assert!(err.contains(at), "missing {at}:\n{}", shown(&o));
    }
    assert!(err.contains("3 error(s), 0 warning(s)"), "{}", shown(&o));
}

#[test]
fn json_diagnostics_are_machine_readable() {
    let dir = repo(&[("fwc.kdl", BAD[0].0)]);
    let o = fwc(&["check", s(dir.path()), "--json"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", shown(&o)));
    assert_eq!((v["format_version"].as_u64(), v["ok"].as_bool(), v["errors"].as_u64()), (Some(1), Some(false), Some(1)), "{v:#}");
    let diags = v["diagnostics"].as_array().expect("an array of diagnostics");
    assert_eq!(diags.len(), 1, "{v:#}");
    let d = &diags[0];
    assert_eq!(d["severity"], "error");
    assert_eq!(d["code"], "fwc::bad-bandwidth");
    assert_eq!(d["file"], "fwc.kdl");
    assert_eq!(d["line"], 2);
    assert_eq!(d["column"], 52);
    assert_eq!(d["rule"], "forward \"tenant\"");
    assert!(d["message"].as_str().unwrap().contains("ambiguous"), "{d:#}");
    assert!(d["help"].as_str().unwrap().contains("10mbit"), "{d:#}");

    // compile --json on a broken repo: JSON diagnostics too, exit 1.
    let o = fwc(&["compile", s(dir.path()), "--json"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", shown(&o)));
    assert_eq!(v["diagnostics"][0]["code"], "fwc::bad-bandwidth", "{v:#}");

    // Warnings only: exit 0, warnings in the JSON.
    let dir = repo(&[("fwc.kdl", "fwc 1\nset \"nothing\" {\n}\n")]);
    let o = fwc(&["check", s(dir.path()), "--json"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["ok"].as_bool(), v["warnings"].as_u64()), (Some(true), Some(2)), "{v:#}");
    assert_eq!(v["diagnostics"][0]["severity"], "warning", "{v:#}");
    assert_eq!(v["diagnostics"][0]["code"], "fwc::empty-set", "{v:#}");
}

#[test]
fn compile_quickstart_writes_four_artifacts() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("art");
    let o = fwc(&["check", s(&examples().join("quickstart"))]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(text(&o.stdout).starts_with("ok:"), "{}", shown(&o));

    let o = fwc(&["compile", s(&examples().join("quickstart")), "--out", s(&dest), "--commit", "abc123"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    for f in ["nftables.json", "qos.json", "forward.json", "manifest.json"] {
        let body = std::fs::read_to_string(dest.join(f)).unwrap_or_else(|e| panic!("{f} not written ({e}):\n{}", shown(&o)));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{f} is not JSON: {e}"));
        assert!(v.is_object(), "{f}");
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dest.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["host"], "localhost");
    assert_eq!(manifest["commit"], "abc123");
    let nft: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dest.join("nftables.json")).unwrap()).unwrap();
    assert!(nft["nftables"].as_array().is_some_and(|a| !a.is_empty()));
    // nftables.json is written as it is emitted and hashed on the way: the manifest's hash is
    // the written file's.
    let written = std::fs::read(dest.join("nftables.json")).unwrap();
    assert_eq!(manifest["artifact_hashes"]["nftables.json"], fwc_compiler::artifacts::sha256_hex(&written));

    // --json prints the same artifacts on stdout.
    let o = fwc(&["compile", s(&examples().join("quickstart")), "--json", "--commit", "abc123"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["manifest"], manifest);

    // A fleet needs --host; an unknown host is an error with the list of hosts.
    let o = fwc(&["compile", s(&examples().join("fleet")), "--out", s(&out.path().join("fleet"))]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("--host"), "{}", shown(&o));
    assert!(!out.path().join("fleet").exists());
    let o = fwc(&["compile", s(&examples().join("fleet")), "--host", "edge-3", "--out", s(&out.path().join("fleet"))]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("edge-1"), "{}", shown(&o));
    let o = fwc(&["compile", s(&examples().join("fleet")), "--host", "edge-1", "--out", s(&out.path().join("fleet"))]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(out.path().join("fleet/manifest.json").is_file());
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
}

/// A repository with two commits: the second adds, changes (one rule moves to userspace) and
/// removes rules.
fn two_commits() -> tempfile::TempDir {
    let dir = repo(&[(
        "fwc.kdl",
        "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    allow \"web\" proto=tcp port=80\n    allow \"old\" proto=tcp port=8080\n}\nforward \"fwd\" listen=\":9000\" to=\"10.0.0.7:9000\"\n",
    )]);
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "one"]);
    std::fs::write(
        d.join("fwc.kdl"),
        "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    allow \"web\" proto=tcp port=\"80,443\"\n    allow \"new\" proto=udp port=51820\n}\nforward \"fwd\" listen=\":9000\" to=\"app.internal:9000\" proxy-protocol=2\n",
    )
    .unwrap();
    git(d, &["commit", "-q", "-am", "two"]);
    dir
}

#[test]
fn plan_from_a_git_revision() {
    let dir = two_commits();
    let d = dir.path();
    // Exit 0 with changes (scripts under `set -e` go on), 2 only when asked (terraform).
    let o = fwc(&["plan", s(d), "--from", "HEAD~1"]);
    assert_eq!(code(&o), 0, "a plan with changes exits 0 without --detailed-exitcode:\n{}", shown(&o));
    let o = fwc(&["plan", s(d), "--from", "HEAD~1", "--detailed-exitcode"]);
    assert_eq!(code(&o), 2, "with --detailed-exitcode a plan with changes exits 2:\n{}", shown(&o));
    let out = text(&o.stdout);
    for want in ["+ filter \"new\"", "~ filter \"web\"", "- filter \"old\"", "~ forward \"fwd\"", "[userspace]", "moves from [nftables]", "was: input allow tcp port 80"] {
        assert!(out.contains(want), "plan should show {want:?}:\n{}", shown(&o));
    }
    assert!(!out.contains("filter \"ssh\""), "unchanged rules are not listed:\n{out}");
    // The input chain changes too: its rules changed order and membership.
    assert!(out.contains("~ chain \"input\""), "{}", shown(&o));
    assert!(out.contains("Plan: 1 to add, 3 to change, 1 to remove."), "{}", shown(&o));

    // Nothing changed since HEAD: exit 0.
    let o = fwc(&["plan", s(d), "--from", "HEAD", "--detailed-exitcode"]);
    assert_eq!(code(&o), 0, "no changes exits 0:\n{}", shown(&o));
    assert!(text(&o.stdout).contains("No rule changes"), "{}", shown(&o));

    // --to: between two revisions, ignoring the work tree.
    std::fs::write(d.join("fwc.kdl"), "fwc 1\n").unwrap();
    let o = fwc(&["plan", s(d), "--from", "HEAD~1", "--to", "HEAD", "--detailed-exitcode"]);
    assert_eq!(code(&o), 2, "{}", shown(&o));
    assert!(text(&o.stdout).contains("+ filter \"new\""), "{}", shown(&o));

    // A broken work tree: exit 1 with the diagnostic.
    std::fs::write(d.join("fwc.kdl"), "fwc 1\nsett \"x\"\n").unwrap();
    let o = fwc(&["plan", s(d), "--from", "HEAD", "--detailed-exitcode"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("fwc.kdl:2:1"), "{}", shown(&o));
}

/// `--json` output is one JSON document (the plan), so `fwc plan --json | jq` works.
#[test]
fn plan_json_is_one_document() {
    let dir = two_commits();
    let o = fwc(&["plan", s(dir.path()), "--from", "HEAD~1", "--json", "--detailed-exitcode"]);
    assert_eq!(code(&o), 2, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("plan --json must print exactly one JSON document ({e}):\n{}", shown(&o)));
    assert_eq!((v["add"].as_u64(), v["change"].as_u64(), v["remove"].as_u64()), (Some(1), Some(3), Some(1)), "{v:#}");
    assert_eq!(v["changes"].as_array().map(Vec::len), Some(5), "{v:#}");
}

/// A repository with comments everywhere, badly indented: what `fwc fmt` is for.
const MESSY: &str = "// the root file\nfwc 1   // version\n\n\n\ninput   policy=drop {   // inbound\n        allow \"ssh\"    proto=tcp port = 22 // admins only\n\n  /- allow \"old\" proto=tcp port=23\n   /* a block\n      comment */\n    deny \"x\" from=\"192.0.2.0/24\"\n}\n";
const TIDY: &str = "// the root file\nfwc 1   // version\n\ninput policy=drop {   // inbound\n    allow \"ssh\" proto=tcp port=22 // admins only\n\n    /- allow \"old\" proto=tcp port=23\n    /* a block\n      comment */\n    deny \"x\" from=\"192.0.2.0/24\"\n}\n";

#[test]
fn fmt_check_detects_unformatted_files() {
    let dir = repo(&[("fwc.kdl", MESSY), ("rules/a.kdl", "set \"x\" \"192.0.2.1\"\n"), ("tests/t.kdl", "expect  \"a\" drop proto=tcp to=\":22\"\n")]);
    let o = fwc(&["fmt", "--check", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert_eq!(text(&o.stdout), "not formatted: fwc.kdl\nnot formatted: tests/t.kdl\n", "{}", shown(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("fwc.kdl")).unwrap(), MESSY, "--check must not write");

    let o = fwc(&["fmt", s(dir.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert_eq!(text(&o.stdout), "formatted fwc.kdl\nformatted tests/t.kdl\n", "{}", shown(&o));
    // Only whitespace changed: every comment, the slashdash and the blank lines are still there.
    assert_eq!(std::fs::read_to_string(dir.path().join("fwc.kdl")).unwrap(), TIDY);
    let o = fwc(&["fmt", "--check", s(dir.path())]);
    assert_eq!((code(&o), text(&o.stdout)), (0, String::new()), "formatted files pass --check:\n{}", shown(&o));
    // Formatting does not change what the rules mean.
    let o = fwc(&["check", s(dir.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

#[test]
fn fmt_diff_shows_what_would_change_and_writes_nothing() {
    let dir = repo(&[("fwc.kdl", MESSY), ("rules/ok.kdl", "set \"x\" \"192.0.2.1\"\n")]);
    let o = fwc(&["fmt", "--diff", s(dir.path())]);
    assert_eq!(code(&o), 1, "changes to show: exit 1\n{}", shown(&o));
    insta::assert_snapshot!("fmt_diff", text(&o.stdout));
    assert_eq!(std::fs::read_to_string(dir.path().join("fwc.kdl")).unwrap(), MESSY, "--diff must not write");
    std::fs::write(dir.path().join("fwc.kdl"), TIDY).unwrap();
    let o = fwc(&["fmt", "--diff", s(dir.path())]);
    assert_eq!((code(&o), text(&o.stdout)), (0, String::new()), "{}", shown(&o));
}

#[test]
fn fmt_json_reports_every_file_and_skips_templates() {
    let dir = repo(&[("fwc.kdl", MESSY), ("rules/ok.kdl", "set \"x\" \"192.0.2.1\"\n"), ("rules/t.kdl.j2", "set   \"{{ host.name }}\"  \"192.0.2.9\"\n")]);
    let o = fwc(&["fmt", "--check", "--json", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("one JSON document ({e}):\n{}", shown(&o)));
    let statuses: Vec<(String, String)> =
        v["files"].as_array().unwrap().iter().map(|f| (f["path"].as_str().unwrap().into(), f["status"].as_str().unwrap().into())).collect();
    let want = [("fwc.kdl", "not-formatted"), ("rules/ok.kdl", "unchanged"), ("rules/t.kdl.j2", "skipped")];
    assert_eq!(statuses, want.map(|(p, st)| (p.to_string(), st.to_string())), "{v:#}");
    // People are told that templates are left alone.
    let o = fwc(&["fmt", s(dir.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(text(&o.stderr).contains("skipped rules/t.kdl.j2 (templates"), "{}", shown(&o));
}

#[test]
fn fmt_refuses_invalid_kdl_with_its_position_and_formats_nothing_of_it() {
    let bad = "fwc 1\ninput {\n    deny \"x\"   from=\"192.0.2.0/24\" log=true\n}\n";
    let dir = repo(&[("fwc.kdl", bad), ("rules/a.kdl", "set   \"x\" \"192.0.2.1\"\n")]);
    let o = fwc(&["fmt", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("fwc.kdl:3:"), "file:line:column of the error:\n{}", shown(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("fwc.kdl")).unwrap(), bad);
    // The valid file is formatted anyway.
    assert_eq!(std::fs::read_to_string(dir.path().join("rules/a.kdl")).unwrap(), "set \"x\" \"192.0.2.1\"\n");
    let o = fwc(&["fmt", "--check", "--json", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["diagnostics"][0]["code"], "fwc::kdl-syntax", "{v:#}");
    assert_eq!(v["diagnostics"][0]["line"], 3, "{v:#}");
}

/// The bug this replaces: `fwc fmt` deleted end-of-line comments and blank lines, and
/// `fmt --check` failed on every shipped example.
#[test]
fn fmt_leaves_every_example_byte_for_byte() {
    for example in ["quickstart", "edge-host", "fleet"] {
        let src = examples().join(example);
        let o = fwc(&["fmt", "--check", s(&src)]);
        assert_eq!(code(&o), 0, "examples/{example} is formatted:\n{}", shown(&o));
        let copy = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        copy_tree(&src, copy.path(), &mut files);
        let o = fwc(&["fmt", s(copy.path())]);
        assert_eq!(code(&o), 0, "{}", shown(&o));
        for rel in files {
            assert_eq!(std::fs::read(copy.path().join(&rel)).unwrap(), std::fs::read(src.join(&rel)).unwrap(), "examples/{example}/{}", rel.display());
        }
    }
}

fn copy_tree(from: &Path, to: &Path, files: &mut Vec<PathBuf>) {
    for entry in walk(from) {
        let rel = entry.strip_prefix(from).unwrap().to_path_buf();
        std::fs::create_dir_all(to.join(&rel).parent().unwrap()).unwrap();
        std::fs::copy(&entry, to.join(&rel)).unwrap();
        files.push(rel);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn schema_prints_json_schemas() {
    let o = fwc(&["schema", "qos.json"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", shown(&o)));
    assert!(v.get("$schema").is_some(), "{v:#}");
    assert!(text(&o.stdout).contains("mark_mask"), "{}", shown(&o));

    let o = fwc(&["schema"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    for key in ["mark_mask", "listeners", "artifact_hashes", "nftables"] {
        assert!(text(&o.stdout).contains(key), "all schemas should mention {key}:\n{}", shown(&o));
    }

    let dir = tempfile::tempdir().unwrap();
    let o = fwc(&["schema", "--out", s(dir.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    for f in ["nftables", "qos", "forward", "manifest"] {
        assert!(dir.path().join(format!("{f}.schema.json")).is_file(), "{f}.schema.json");
    }

    let o = fwc(&["schema", "nope.json"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
}

#[test]
fn completions_for_bash() {
    let o = fwc(&["completions", "bash"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let out = text(&o.stdout);
    assert!(out.contains("_fwc") && out.contains("complete"), "{}", shown(&o));
    for sub in ["check", "compile", "plan", "fmt", "schema"] {
        assert!(out.contains(sub), "bash completions should know `{sub}`");
    }
    let o = fwc(&["completions", "no-such-shell"]);
    assert_ne!(code(&o), 0);
}

/// Sets from files. `file=` (repeatable) reads lists/ of the repository, combined
/// with inline elements, in the work tree (`compile`) and in a git commit (`plan --from/--to`):
/// a change of the set file alone is a change of the set.
#[test]
fn set_files_in_the_work_tree_and_in_git() {
    let dir = repo(&[
        (
            "fwc.kdl",
            "fwc 1\nset \"blocklist\" \"203.0.113.9\" file=\"lists/firehol.netset\" file=\"lists/ipset.save\"\ninput {\n    deny \"blocked\" from=\"@blocklist\"\n}\n",
        ),
        ("lists/firehol.netset", "# FireHOL level 1\n192.0.2.0/24\n; comment\n\n198.51.100.1-198.51.100.9\n2001:db8::/32\n"),
        ("lists/ipset.save", "create bl hash:net family inet\nadd bl 10.9.0.0/16\n"),
    ]);
    let d = dir.path();
    let out = tempfile::tempdir().unwrap();
    let o = fwc(&["compile", s(d), "--out", s(out.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let nft: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("nftables.json")).unwrap()).unwrap();
    let set = |name: &str| {
        nft["nftables"].as_array().unwrap().iter().find_map(|o| o["add"]["set"].as_object().filter(|s| s["name"] == name).cloned()).unwrap()
    };
    assert_eq!(
        set("blocklist_v4")["elem"],
        serde_json::json!([
            {"prefix": {"addr": "10.9.0.0", "len": 16}},
            {"prefix": {"addr": "192.0.2.0", "len": 24}},
            {"range": ["198.51.100.1", "198.51.100.9"]},
            "203.0.113.9"
        ])
    );
    assert_eq!(set("blocklist_v6")["elem"], serde_json::json!([{"prefix": {"addr": "2001:db8::", "len": 32}}]));

    // Git: the set file is read from the commit, not from the work tree.
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "one"]);
    std::fs::write(d.join("lists/firehol.netset"), "192.0.2.0/24\n192.0.2.77-192.0.2.80\n").unwrap();
    git(d, &["commit", "-q", "-am", "two"]);
    let o = fwc(&["plan", s(d), "--from", "HEAD~1", "--to", "HEAD", "--detailed-exitcode"]);
    assert_eq!(code(&o), 2, "{}", shown(&o));
    assert!(text(&o.stdout).contains("~ set \"blocklist\""), "{}", shown(&o));
    let o = fwc(&["plan", s(d), "--from", "HEAD", "--to", "HEAD", "--detailed-exitcode"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    // A bad line in the committed set file: file:line:column, exit 1.
    std::fs::write(d.join("lists/firehol.netset"), "192.0.2.0/24\nnot-an-address\n").unwrap();
    git(d, &["commit", "-q", "-am", "three"]);
    let o = fwc(&["plan", s(d), "--from", "HEAD~1", "--to", "HEAD"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("lists/firehol.netset:2:1"), "{}", shown(&o));
}

/// Lints are warnings (exit 0, with file:line:col and a hint); `--deny-warnings`
/// makes them fail CI (exit 1).
#[test]
fn check_deny_warnings_fails_on_lints() {
    let dir = repo(&[("fwc.kdl", "fwc 1\ninput policy=drop {\n    allow \"web\" proto=tcp port=443\n}\n")]);
    let o = fwc(&["check", s(dir.path())]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(all.contains("fwc.kdl:2:7") && all.contains("no rule allows SSH") && all.contains("allow \"ssh\" proto=tcp port=22"), "{}", shown(&o));
    let o = fwc(&["check", s(dir.path()), "--deny-warnings"]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("1 warning(s) and --deny-warnings"), "{}", shown(&o));
    // Allowing SSH (from a set, even) silences it.
    let ok = repo(&[("fwc.kdl", "fwc 1\nset \"admins\" \"192.0.2.0/24\"\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22 from=\"@admins\"\n}\n")]);
    let o = fwc(&["check", s(ok.path()), "--deny-warnings"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
}

/// `fwc compile --all-hosts --out DIR`: every host into DIR/<host>/, the same bytes as
/// `--host H --out` for each; a broken host writes nothing for any host.
#[test]
fn compile_all_hosts_writes_each_host_as_host_by_host() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/15-hosts");
    let g = golden.to_str().unwrap();
    let out = tempfile::tempdir().unwrap();
    let all = out.path().join("all");
    let o = fwc(&["compile", g, "--all-hosts", "--commit", "c0ffee", "--out", all.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    for host in ["edge-1", "edge-2", "db-1"] {
        let one = out.path().join(host);
        let o = fwc(&["compile", g, "--host", host, "--commit", "c0ffee", "--out", one.to_str().unwrap()]);
        assert_eq!(code(&o), 0, "{}", shown(&o));
        for f in ["nftables.json", "qos.json", "forward.json", "manifest.json"] {
            assert_eq!(std::fs::read(all.join(host).join(f)).unwrap(), std::fs::read(one.join(f)).unwrap(), "{host}/{f}");
        }
    }
    let o = fwc(&["compile", g, "--all-hosts", "--json"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["edge-1", "edge-2", "db-1"]);

    let bad = repo(&[("fwc.kdl", "fwc 1\nhost \"a\"\nhost \"b\"\nforward \"x\" listen=\":1\" to=\"10.0.0.1\" on=\"b\" from=\"@nope\"\n")]);
    let dest = out.path().join("bad");
    let o = fwc(&["compile", bad.path().to_str().unwrap(), "--all-hosts", "--out", dest.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    assert!(text(&o.stderr).contains("nope"), "{}", shown(&o));
    assert!(!dest.exists(), "nothing written when a host fails");
}

/// The minimal rollout policy, exactly as written, over a small fleet.
const FLEET_WITH_ROLLOUT: &str = "fwc 1\nhost \"canary-1\" {\n    labels role=canary\n}\nhost \"web-1\" {\n    labels role=web\n}\nhost \"web-2\" {\n    labels role=web\n}\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\nrollout {\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=50\n    wave \"all\"\n}\n";

/// `fwc plan --waves`: the fleet by wave from the rule files alone (no host, no git), as text
/// and as JSON; with --host, one host's wave (declared or not).
#[test]
fn plan_waves_lists_the_fleet_by_wave() {
    let dir = repo(&[("fwc.kdl", FLEET_WITH_ROLLOUT)]);
    let d = s(dir.path());
    let o = fwc(&["plan", d, "--waves"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let out = text(&o.stdout);
    // web-2's stable bucket is 3591 (< 5000: early), web-1's 9545 (the rest).
    for want in ["Rollout policy: 3 wave(s), 3 declared host(s).", "wave 1 \"canary\": on=\"role=canary\"; 1 host(s)\n  canary-1\n", "wave 2 \"early\": the first 50% of the fleet by a stable hash of the name (cumulative; hosts of earlier waves excluded); 1 host(s)\n  web-2\n", "wave 3 \"all\": every host left; 1 host(s)\n  web-1\n"] {
        assert!(out.contains(want), "want {want:?}:\n{}", shown(&o));
    }
    let o = fwc(&["plan", d, "--waves", "--json"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown(&o)));
    let waves: Vec<(&str, u64)> = v["hosts"].as_array().unwrap().iter().map(|h| (h["name"].as_str().unwrap(), h["wave"].as_u64().unwrap())).collect();
    assert_eq!(waves, [("canary-1", 0), ("web-1", 2), ("web-2", 1)], "{v:#}");
    assert_eq!(v["policy"]["waves"][1]["select"], serde_json::json!({"percent": 50}), "{v:#}");
    let o = fwc(&["plan", d, "--waves", "--host", "web-2"]);
    assert_eq!(text(&o.stdout), "Rollout: host web-2 is in wave \"early\", 2 of 3 (the first 50% of the fleet by a stable hash of the name (cumulative; hosts of earlier waves excluded)). `fwc plan --waves` lists the fleet.\n", "{}", shown(&o));
    // Without a policy: said so, exit 0.
    let plain = repo(&[("fwc.kdl", "fwc 1\n")]);
    let o = fwc(&["plan", s(plain.path()), "--waves"]);
    assert_eq!((code(&o), text(&o.stdout).starts_with("No rollout policy")), (0, true), "{}", shown(&o));
}

/// A one-host plan says the host's wave (text and JSON) when the repository has a policy, and
/// nothing when it has none (the plan is byte-identical to one without the feature).
#[test]
fn plan_from_shows_the_hosts_wave() {
    let dir = two_commits();
    let d = dir.path();
    let o = fwc(&["plan", s(d), "--from", "HEAD~1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("rollout").is_none(), "no policy, no rollout key: {v:#}");
    assert!(!text(&fwc(&["plan", s(d), "--from", "HEAD~1"]).stdout).contains("Rollout"));

    std::fs::write(d.join("fwc.kdl"), FLEET_WITH_ROLLOUT).unwrap();
    let o = fwc(&["plan", s(d), "--from", "HEAD", "--host", "canary-1"]);
    assert_eq!(code(&o), 0, "{}", shown(&o));
    assert!(text(&o.stdout).ends_with("\nRollout: host canary-1 is in wave \"canary\", 1 of 3 (on=\"role=canary\"). `fwc plan --waves` lists the fleet.\n"), "{}", shown(&o));
    let o = fwc(&["plan", s(d), "--from", "HEAD", "--host", "web-1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown(&o)));
    assert_eq!(v["rollout"], serde_json::json!({"host": "web-1", "index": 2, "wave": "all", "waves": 3, "declared": true}), "{v:#}");
}

/// `fwc check` refuses a policy whose last wave selects hosts: file:line:column, the code, a
/// hint, exit 1.
#[test]
fn check_refuses_a_last_wave_that_selects() {
    let dir = repo(&[("fwc.kdl", &FLEET_WITH_ROLLOUT.replace("wave \"all\"", "wave \"all\" on=\"role=web\""))]);
    let o = fwc(&["check", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", shown(&o));
    let err = text(&o.stderr);
    for want in ["fwc::rollout-last-wave", "fwc.kdl:17:16", "hosts it misses would never get a commit"] {
        assert!(err.contains(want), "want {want:?}:\n{}", shown(&o));
    }
}
