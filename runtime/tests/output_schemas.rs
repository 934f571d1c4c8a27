//! Every `--json` document fwc prints (check, plan, status, apply, rollback, audit show/verify)
//! is valid against its schema in schemas/output/ and carries `format_version`; outcomes are
//! spelled one way (the audit log's words), with no Rust internals (`{"Ok":null}`) in them.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use fwc_testkit::{privileged, Netns};
use serde_json::Value;

fn fwc(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
    c.args(args).current_dir(dir).env("NO_COLOR", "1").env_remove("FWC_LOG").env_remove("FWC_TEST_FAIL").stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// stdout as one JSON document, validated against schemas/output/<schema>.schema.json.
fn valid(o: &Output, schema: &str) -> Value {
    let text = String::from_utf8_lossy(&o.stdout);
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{schema}: stdout is not one JSON document ({e}):\n{text}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr)));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/output").join(format!("{schema}.schema.json"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let url = s["$id"].as_str().expect("schemas have an $id").to_string();
    let (mut schemas, mut compiler) = (boon::Schemas::new(), boon::Compiler::new());
    compiler.add_resource(&url, s).unwrap();
    let index = compiler.compile(&url, &mut schemas).unwrap_or_else(|e| panic!("{}: not a valid schema: {e:#}", path.display()));
    if let Err(e) = schemas.validate(&doc, index) {
        panic!("{schema}: output does not match its schema:\n{e:#}\n{doc:#}");
    }
    assert_eq!(doc["format_version"], 1, "{doc:#}");
    assert!(!text.contains("\"Ok\"") && !text.contains("\"Err\""), "Rust internals in the output:\n{text}");
    doc
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git").args(args).current_dir(dir).env("GIT_AUTHOR_NAME", "t").env("GIT_AUTHOR_EMAIL", "t@example.org").env("GIT_COMMITTER_NAME", "t").env("GIT_COMMITTER_EMAIL", "t@example.org").output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

const V1: &str = "fwc 1\ninput policy=accept {\n    allow \"ssh\" proto=tcp port=22\n}\n";
const V2: &str = "fwc 1\ninput policy=accept {\n    allow \"ssh\" proto=tcp port=22\n    allow \"web\" proto=tcp port=80\n}\n";

#[test]
fn check_and_plan_documents_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("fwc.kdl"), V1).unwrap();
    let doc = valid(&fwc(d, &["check", "--json"], &[]), "check");
    assert_eq!(doc["ok"], true);
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "one"]);
    std::fs::write(d.join("fwc.kdl"), V2).unwrap();
    let doc = valid(&fwc(d, &["plan", "--from", "HEAD", "--json"], &[]), "plan");
    assert_eq!((doc["mode"].as_str(), doc["has_changes"].as_bool(), doc["add"].as_u64()), (Some("revisions"), Some(true), Some(1)), "{doc:#}");
    std::fs::write(d.join("fwc.kdl"), "fwc 1\ninput {\n    allow \"ssh\" proto=tcp port=22 from=\"@nowhere\"\n}\n").unwrap();
    let o = fwc(d, &["check", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let doc = valid(&o, "check");
    assert_eq!((doc["ok"].as_bool(), doc["errors"].as_u64()), (Some(false), Some(1)), "{doc:#}");
    let o = fwc(d, &["plan", "--from", "HEAD", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    valid(&o, "check");
}

#[test]
fn host_documents_match_their_schemas() {
    if !privileged("host_documents_match_their_schemas") {
        return;
    }
    let ns = Netns::new("schema");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let state = d.join("state");
    let sd = state.to_str().unwrap();
    let host = |extra: &[&str]| -> Vec<String> { ["--state-dir", sd, "--netns", &ns.name].iter().chain(extra).map(|s| s.to_string()).collect() };
    let run = |args: Vec<String>, env: &[(&str, &str)]| fwc(d, &args.iter().map(String::as_str).collect::<Vec<_>>(), env);
    let with = |head: &[&str], extra: &[&str]| -> Vec<String> { head.iter().map(|s| s.to_string()).chain(host(extra)).collect() };

    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let o = run(with(&["status", "--json"], &[]), &[]);
    assert_eq!(o.status.code(), Some(3), "nothing applied: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(valid(&o, "status")["applied"], false);

    std::fs::write(d.join("fwc.kdl"), V1).unwrap();
    let o = run(with(&["apply", ".", "--json", "--auto-approve"], &[]), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = valid(&o, "apply");
    assert_eq!((doc["action"].as_str(), doc["result"].as_str()), (Some("apply"), Some("ok")), "{doc:#}");
    let doc = valid(&run(with(&["apply", ".", "--json", "--auto-approve"], &[]), &[]), "apply");
    assert_eq!(doc["result"], "unchanged", "{doc:#}");

    // Live plan: the document, and with a rule error the error document on stdout and one
    // report (not a report inside a report) on stderr.
    std::fs::write(d.join("fwc.kdl"), V2).unwrap();
    let doc = valid(&run(with(&["plan", "--json"], &[]), &[]), "plan");
    assert_eq!((doc["mode"].as_str(), doc["has_changes"].as_bool()), (Some("live"), Some(true)), "{doc:#}");
    assert!(doc.get("rollout").is_none(), "no rollout policy, no rollout key: {doc:#}");
    // With a rollout policy, the live plan says the host's wave (JSON and text).
    std::fs::write(d.join("fwc.kdl"), format!("{V2}rollout {{\n    wave \"all\"\n}}\n")).unwrap();
    let doc = valid(&run(with(&["plan", "--json"], &[]), &[]), "plan");
    assert_eq!(doc["rollout"], serde_json::json!({"host": "localhost", "index": 0, "wave": "all", "waves": 1, "declared": false}), "{doc:#}");
    let o = run(with(&["plan"], &[]), &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.ends_with("Rollout: host localhost (not declared in a host block: no labels) is in wave \"all\", 1 of 1 (every host left). `fwc plan --waves` lists the fleet.\n"), "{out}");
    std::fs::write(d.join("fwc.kdl"), "fwc 1\ninput {\n    allow \"ssh\" proto=tcp port=22 from=\"@nowhere\"\n}\n").unwrap();
    let o = run(with(&["plan", "--json"], &[]), &[]);
    assert_eq!(o.status.code(), Some(1));
    let doc = valid(&o, "check");
    assert_eq!(doc["diagnostics"][0]["code"], "fwc::unknown-set", "{doc:#}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("fwc::unknown-set").count(), 1, "one report on stderr:\n{err}");
    assert!(!err.contains("do not compile"), "no wrapper around the report:\n{err}");

    // Failures: prepare (nothing changed: aborted) and commit (rolled back), typed.
    std::fs::write(d.join("fwc.kdl"), V2).unwrap();
    for (phase, outcome) in [("prepare", "aborted"), ("commit", "rolled_back")] {
        let o = run(with(&["apply", ".", "--json", "--auto-approve"], &[]), &[("FWC_TEST_FAIL", &format!("{phase}:nftables"))]);
        assert_eq!(o.status.code(), Some(1));
        let doc = valid(&o, "apply");
        assert_eq!(doc["result"], outcome, "{doc:#}");
        assert_eq!(doc["failure"]["phase"], phase, "{doc:#}");
    }
    let o = run(with(&["apply", ".", "--json", "--auto-approve"], &[]), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let o = run(with(&["status", "--json"], &[]), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    let doc = valid(&o, "status");
    assert!(doc["counters"].as_array().unwrap().iter().any(|c| c["rule"] == "ssh" && c["kind"] == "filter"), "{doc:#}");

    let doc = valid(&run(with(&["rollback", "--json", "--auto-approve"], &[]), &[]), "rollback");
    assert_eq!((doc["action"].as_str(), doc["result"].as_str()), (Some("rollback"), Some("ok")), "{doc:#}");

    let doc = valid(&run(vec!["audit".into(), "show".into(), "--json".into(), "--state-dir".into(), sd.into()], &[]), "audit-show");
    let results: Vec<&str> = doc["entries"].as_array().unwrap().iter().map(|e| e["result"].as_str().unwrap()).collect();
    assert_eq!(results, ["ok", "aborted", "rolled_back", "ok", "ok"], "{doc:#}");
    let doc = valid(&run(vec!["audit".into(), "verify".into(), "--json".into(), "--state-dir".into(), sd.into()], &[]), "audit-verify");
    assert_eq!(doc["entries"], 5);
}

/// `fwc plan --waves --json` and a one-host plan of a repository with a rollout policy.
#[test]
fn rollout_documents_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fleet = "fwc 1\nhost \"canary-1\" {\n    labels role=canary\n}\nhost \"web-1\"\nrollout {\n    wave \"canary\" on=\"role=canary\" soak=\"10m\" {\n        gate \"errors\" query=\"sum(up)\" max=0.01\n    }\n    wave \"all\" max-unavailable=\"10%\"\n    probe \"api\" tcp=\"198.18.0.1:443\"\n}\n";
    std::fs::write(d.join("fwc.kdl"), fleet).unwrap();
    let doc = valid(&fwc(d, &["plan", "--waves", "--json"], &[]), "plan-waves");
    assert_eq!(doc["hosts"][1]["wave"], 1, "{doc:#}");
    let doc = valid(&fwc(d, &["plan", "--waves", "--host", "web-1", "--json"], &[]), "plan-waves");
    assert_eq!(doc["host"]["wave"], "all", "{doc:#}");
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "one"]);
    let doc = valid(&fwc(d, &["plan", "--from", "HEAD", "--host", "canary-1", "--json"], &[]), "plan");
    assert_eq!(doc["rollout"]["wave"], "canary", "{doc:#}");
    std::fs::write(d.join("fwc.kdl"), "fwc 1\n").unwrap();
    let doc = valid(&fwc(d, &["plan", "--waves", "--json"], &[]), "plan-waves");
    assert!(doc["policy"].is_null(), "{doc:#}");
}
