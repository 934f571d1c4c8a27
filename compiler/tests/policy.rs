//! Policy tests and `explain` end to end (pure, no root): every example repository's
//! expectations hold; expectations that must fail do, with a clear message; `explain` output
//! is snapshot-tested in golden/explain/snapshots.

use std::path::{Path, PathBuf};

use fwc_compiler::eval::{self, Evaluator, Flow};
use fwc_compiler::policytest;
use fwc_compiler::read::source::SourceTree;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_example_has_passing_expectations() {
    let mut total = 0;
    for name in ["quickstart", "edge-host", "fleet"] {
        let tree = SourceTree::from_dir(&root().join("examples").join(name)).unwrap();
        assert!(!tree.tests.is_empty(), "examples/{name} has no tests/");
        let report = policytest::run(&tree).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        for r in &report.results {
            assert!(r.passed, "examples/{name} {}:{} [{}] {}: expected {}, got {}", r.location.file, r.location.line, r.host, r.name, r.expected, r.actual);
            // Every expectation names the rule that decided it, with a position, unless a policy decided.
            if r.explanation.decided_by.index.is_some() && r.explanation.decided_by.identity.is_some() {
                assert!(r.decided_at.is_some(), "{name} {}: no location for {}", r.name, r.decided_by);
            }
        }
        total += report.results.len();
    }
    assert!(total >= 50, "only {total} expectations across the examples");
}

#[test]
fn expectations_that_must_fail_fail_clearly() {
    let tree = SourceTree::from_dir(&root().join("compiler/tests/policy/must-fail")).unwrap();
    let report = policytest::run(&tree).unwrap();
    let got: Vec<(usize, bool, String, String)> =
        report.results.iter().map(|r| (r.location.line, r.passed, r.expected.clone(), r.actual.clone())).collect();
    let want = [
        (1, "accept", "drop by policy drop of chain input"),
        (2, "drop", "accept by rule fwc:filter:ssh (chain input, rule "),
        (3, "accept, decided by rule \"ssh\"", "accept by rule fwc:filter:web (chain input, rule "),
        (4, "forwarded to 10.0.0.6:80", "DNAT to 10.0.0.5:80"),
        (5, "forwarded by the userspace forwarder", "DNAT to 10.0.0.5:80"),
        (6, "charged to the QoS class of \"other\"", "QoS class"),
        (7, "reject", "accept by rule fwc:filter:web"),
        (8, "forwarded by a kernel DNAT", "userspace forwarder \"api\" to api.internal:8443"),
        (9, "accept", "drop by policy drop of chain input"),
        (10, "accept", "drop by policy drop of chain forward"),
        (11, "accept", "drop by rule fwc:filter:no-smtp (chain output, rule "),
        (12, "forwarded to 10.0.0.8:20000", "DNAT to 10.0.0.8:20005"),
        (13, "accept, decided by the chain policy", "accept by rule fwc:filter:lan-out (chain forward, rule "),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((line, passed, expected, actual), (wline, wexp, wact)) in got.iter().zip(want) {
        assert_eq!(*line, wline);
        assert!(!passed, "line {line} passed");
        assert_eq!(expected, wexp, "line {line}");
        assert!(actual.contains(wact), "line {line}: {actual:?} lacks {wact:?}");
    }
}

#[test]
fn check_reports_bad_test_files_with_positions() {
    let tree = SourceTree::from_files([
        ("fwc.kdl".to_string(), "fwc 1\nhost \"a\"\n".to_string()),
        ("tests/x.kdl".to_string(), "expect accept to=\":22\" host=\"b\"\nexpect dorp to=\":22\"\n".to_string()),
    ]);
    let d = policytest::check(&tree).unwrap_err();
    let l = d.0[0].location.clone().unwrap();
    assert_eq!((d.0[0].code.as_str(), l.file.as_str(), l.line, l.column), ("fwc::bad-outcome", "tests/x.kdl", 2, 8));
    assert!(d.0[0].help.as_deref().unwrap().contains("`drop`"));
    let tree = SourceTree::from_files([
        ("fwc.kdl".to_string(), "fwc 1\nhost \"a\"\n".to_string()),
        ("tests/x.kdl".to_string(), "expect accept to=\":22\" host=\"b\"\n".to_string()),
    ]);
    let d = policytest::check(&tree).unwrap_err();
    assert_eq!(d.0[0].code, "fwc::unknown-host");
    assert_eq!(d.0[0].location.as_ref().unwrap().line, 1);
}

#[test]
fn explain_snapshots() {
    let tree = SourceTree::from_dir(&root().join("examples/edge-host")).unwrap();
    let view = fwc_compiler::load_host(&tree, Some("edge-1")).unwrap();
    let art = fwc_compiler::emit_view(&view, None);
    let ev = Evaluator::new(&art).unwrap();
    let locs = eval::rule_locations(&view);
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("golden/explain/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for (name, flow) in [
            ("edge-dnat-8080", "tcp 203.0.113.5:40000 -> 198.18.1.1:8080"),
            ("edge-ssh-office", "tcp 203.0.113.5:40000 -> 198.18.1.1:22"),
            ("edge-ssh-blocked", "tcp 198.51.100.9:40000 -> 198.18.1.1:22"),
            ("edge-ssh-policy", "tcp 192.0.2.1:40000 -> 198.18.1.1:22"),
            ("edge-capped-9000", "tcp 192.0.2.1:40000 -> 198.18.1.1:9000"),
            ("edge-userspace-443", "tcp 192.0.2.1:40000 -> 198.18.1.1:443"),
            ("edge-v6-forward", "tcp [2001:db8:1::5]:40000 -> [2001:db8::10]:8443"),
            ("edge-guests-shaped", "tcp 10.2.0.5:40000 -> 192.0.2.80:443 in eth1 out eth0 forward"),
            ("edge-output-smtp", "tcp 198.18.1.1:40000 -> 192.0.2.25:25 out eth0 output"),
        ] {
            let x = ev.explain(&Flow::parse(flow).unwrap()).unwrap();
            insta::assert_snapshot!(name, eval::render::text(&x, "edge-1", &locs));
        }
    });
}

/// The edge-host example as (path, text) pairs, with `edit` applied to each file's text.
fn edge_tree(edit: impl Fn(&str, String) -> String) -> SourceTree {
    let base = SourceTree::from_dir(&root().join("examples/edge-host")).unwrap();
    let files = base.files.iter().chain(base.tests.iter()).map(|(p, t)| (p.clone(), edit(p, t.clone())));
    SourceTree::from_files(files)
}

#[test]
fn plan_flow_effects_snapshot() {
    let old = edge_tree(|_, t| t);
    let new = edge_tree(|p, t| match p {
        "fwc.kdl" => t.replace("    - \"198.51.100.0/24\"\n", ""),
        "rules/10-filter.kdl" => t.replace("    allow \"web\"", "    allow \"postgres\" proto=tcp port=5432\n    allow \"web\"").replace(" from=\"@office\" comment", " from=\"198.51.100.0/24\" comment"),
        "rules/20-forwards.kdl" => t.replace("to=\"10.0.0.5:80\"", "to=\"10.0.0.6:80\""),
        _ => t,
    });
    assert_ne!(old, new);
    let effects = fwc_compiler::eval::effects::between_trees(Some(&old), &new, Some("edge-1")).unwrap().unwrap();
    let texts: Vec<&str> = effects.effects.iter().map(|e| e.text.as_str()).collect();
    for want in ["opens tcp/5432 from anywhere", "closes tcp/22 from 203.0.113.0/24 (@office)", "opens tcp/22 from 198.51.100.0/24", "opens tcp/443 from 198.51.100.0/24"] {
        assert!(texts.contains(&want), "{want:?} not in {texts:#?}");
    }
    assert!(texts.iter().any(|t| t.starts_with("changes tcp/8080 from anywhere: accept, DNAT 10.0.0.5:80 -> accept, DNAT 10.0.0.6:80")), "{texts:#?}");
    assert!(effects.expectations.iter().any(|x| x.name == "office reaches ssh" && x.before && !x.after));
    let (oa, _) = fwc_compiler::compile(&old, Some("edge-1"), None).unwrap();
    let (na, _) = fwc_compiler::compile(&new, Some("edge-1"), None).unwrap();
    let plan = fwc_compiler::diff::plan(Some(&oa), &na);
    let text = format!("{}{}", fwc_compiler::diff::render(&plan, false), fwc_compiler::eval::effects::render_text(&effects));
    let md = fwc_compiler::eval::effects::render_markdown(&fwc_compiler::diff::render(&plan, false), &effects);
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("golden/explain/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::assert_snapshot!("plan-effects-text", text);
        insta::assert_snapshot!("plan-effects-markdown", md);
    });
    // No change, no effects.
    let same = fwc_compiler::eval::effects::between_trees(Some(&old), &old, Some("edge-1")).unwrap().unwrap();
    assert!(same.effects.is_empty() && same.expectations.is_empty(), "{same:?}");
}

/// Every golden case and example, every host: the evaluator understands everything the
/// compiler emits (no `Unsupported`), for representative flows of every rule.
#[test]
fn evaluator_understands_every_golden_case_and_example() {
    let mut cases = 0;
    for under in ["golden", "examples"] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join(under)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("fwc.kdl").is_file()).collect();
        dirs.sort();
        for dir in dirs {
            let tree = SourceTree::from_dir(&dir).unwrap();
            let mut map = fwc_compiler::read::source::SourceMap::default();
            let Ok(rs) = fwc_compiler::read::syntax::parse_plain(&tree, &mut map) else { continue };
            let tests = policytest::parse(&tree, &mut fwc_compiler::read::source::SourceMap::default()).unwrap();
            for host in fwc_compiler::host_names(&rs) {
                let Ok(view) = fwc_compiler::load_host(&tree, Some(&host)) else { continue };
                let art = fwc_compiler::emit_view(&view, None);
                let ev = Evaluator::new(&art).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                for f in fwc_compiler::eval::effects::representative_flows(&view, &art, &tests) {
                    ev.explain(&f).unwrap_or_else(|e| panic!("{} [{host}] {f}: {e}", dir.display()));
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 500, "only {cases} flows");
}

/// Every golden case has a tests/ directory, and its expectations hold (each names the rule or
/// policy that must decide, so a passing verdict from the wrong rule fails).
#[test]
fn every_golden_case_has_passing_expectations() {
    let (mut cases, mut total) = (0, 0);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("golden")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("fwc.kdl").is_file()).collect();
    dirs.sort();
    for dir in dirs {
        let tree = SourceTree::from_dir(&dir).unwrap();
        assert!(tree.tests.len() >= 1, "{} has no tests/*.kdl", dir.display());
        let report = policytest::run(&tree).unwrap_or_else(|e| panic!("{}: {e:?}", dir.display()));
        assert!(report.results.len() >= 3, "{}: only {} expectation(s)", dir.display(), report.results.len());
        for r in &report.results {
            assert!(r.passed, "{} {}:{} {}: expected {}, got {}", dir.display(), r.location.file, r.location.line, r.name, r.expected, r.actual);
        }
        cases += 1;
        total += report.results.len();
    }
    assert_eq!(cases, 39, "golden cases");
    assert!(total >= 250, "only {total} expectations across the golden cases");
}

/// `fwc explain` of the forms imported rulesets use (golden 29 and 30): an ICMP type of each
/// family, a rejecting policy, a reject kind, a log rule that lets matching go on, an echo reply
/// that conntrack calls invalid, and source NAT (masquerade, snat).
#[test]
fn explain_snapshots_of_the_imported_forms() {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("golden/explain/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for (case, name, flow) in [
            ("29-icmp-reject-log", "imported-ping6", "icmpv6 -> 2001:db8::1"),
            ("29-icmp-reject-log", "imported-echo-reply-invalid", "icmp -> 198.18.1.1 type echo-reply"),
            ("29-icmp-reject-log", "imported-telnet-admin-prohibited", "tcp 192.0.2.1:40000 -> 198.18.1.1:23"),
            ("29-icmp-reject-log", "imported-ssh-logged", "tcp 192.0.2.1:40000 -> 198.18.1.1:22"),
            ("29-icmp-reject-log", "imported-policy-reject", "udp 192.0.2.1:40000 -> 198.18.1.1:5353"),
            ("29-icmp-reject-log", "imported-forward-policy-reject", "tcp 192.0.2.80:40000 -> 10.1.0.5:22 in eth0 out eth1 forward"),
            ("30-source-nat", "imported-masquerade", "tcp 192.168.1.5:40000 -> 192.0.2.80:443 in eth1 out eth0 forward"),
            ("30-source-nat", "imported-snat", "tcp 10.8.0.5:40000 -> 192.0.2.80:443 in eth1 out eth0 forward"),
        ] {
            let tree = SourceTree::from_dir(&root().join("golden").join(case)).unwrap();
            let view = fwc_compiler::load_host(&tree, None).unwrap();
            let art = fwc_compiler::emit_view(&view, None);
            let x = Evaluator::new(&art).unwrap().explain(&Flow::parse(flow).unwrap()).unwrap();
            insta::assert_snapshot!(name, eval::render::text(&x, "localhost", &eval::rule_locations(&view)));
        }
    });
}

/// quota: `fwc explain` names the quota that counts a forward's flow and what
/// happens once it is used up (drop; a fallback rate), assuming it is not used up.
#[test]
fn explain_snapshots_of_quotas() {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("golden/explain/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for (name, flow) in [
            ("quota-game-drop", "tcp 203.0.113.5:40000 -> 203.0.113.1:27015"),
            ("quota-vpn-rate", "udp 203.0.113.5:40000 -> 203.0.113.1:51820"),
            ("quota-shape-guests", "tcp 10.2.0.5:40000 -> 192.0.2.80:443 in eth0 out eth1 forward"),
        ] {
            let tree = SourceTree::from_dir(&root().join("golden/60-forward-quota")).unwrap();
            let view = fwc_compiler::load_host(&tree, None).unwrap();
            let art = fwc_compiler::emit_view(&view, None);
            let x = Evaluator::new(&art).unwrap().explain(&Flow::parse(flow).unwrap()).unwrap();
            insta::assert_snapshot!(name, eval::render::text(&x, "localhost", &eval::rule_locations(&view)));
        }
    });
}
