//! The shipped Prometheus alert rules (packaging/prometheus/fwc-alerts.yml), checked by the real
//! `promtool`: `check rules` accepts them and `test rules` runs their unit tests
//! (fwc-alerts.test.yml). Besides: every alert the issue names is there, each has a summary, a
//! description and a runbook that exists in docs/fleet.md, and each is tested both firing and
//! not firing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/prometheus")
}

fn promtool(args: &[&str]) -> String {
    let o = Command::new("promtool").args(args).current_dir(dir()).output().expect("promtool runs");
    let report = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "promtool {args:?} failed:\n{report}");
    report
}

/// The alert names in file order.
fn alerts(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).map(|n| n.trim().to_string()).collect()
}

#[test]
fn promtool_accepts_and_tests_the_shipped_rules() {
    if !fwc_testkit::tool("promtool_accepts_and_tests_the_shipped_rules", "promtool", "prometheus") {
        return;
    }
    let rules = std::fs::read_to_string(dir().join("fwc-alerts.yml")).unwrap();
    let names = alerts(&rules);
    let report = promtool(&["check", "rules", "fwc-alerts.yml"]);
    assert!(report.contains(&format!("SUCCESS: {} rules found", names.len())), "{report}");
    let report = promtool(&["test", "rules", "fwc-alerts.test.yml"]);
    assert!(report.contains("SUCCESS"), "{report}");
}

#[test]
fn every_alert_is_documented_and_tested_firing_and_not() {
    let rules = std::fs::read_to_string(dir().join("fwc-alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir().join("fwc-alerts.test.yml")).unwrap();
    let fleet_md = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet.md")).unwrap();
    let names = alerts(&rules);
    for want in ["FwcRolloutHalted", "FwcAgentDegraded", "FwcDriftNotHealed", "FwcGitFetchFailing", "FwcSelfCheckFailing", "FwcRolloutStuck"] {
        assert!(names.iter().any(|n| n == want), "{want} is missing from fwc-alerts.yml");
    }
    // Each rule's text runs from its `- alert:` line to the next.
    let blocks: Vec<&str> = rules.split("- alert: ").skip(1).collect();
    let mut problems = Vec::new();
    for (name, block) in names.iter().zip(&blocks) {
        for key in ["summary:", "description:", "runbook_url:", "severity:"] {
            if !block.contains(key) {
                problems.push(format!("{name}: no {key}"));
            }
        }
        let anchor = name.to_lowercase();
        if !block.contains(&format!("runbook_url: \"docs/fleet.md#{anchor}\"")) {
            problems.push(format!("{name}: its runbook_url is not docs/fleet.md#{anchor}"));
        }
        if !fleet_md.lines().any(|l| l.trim_start_matches('#').trim() == name.as_str() && l.starts_with("###")) {
            problems.push(format!("{name}: docs/fleet.md has no `### {name}` section (the runbook)"));
        }
        // Tested firing (a non-empty exp_alerts) and not firing (exp_alerts: []).
        let cases: Vec<&str> = tests.split(&format!("alertname: {name}\n")).skip(1).collect();
        let quiet = cases.iter().any(|c| c.trim_start().starts_with("exp_alerts: []"));
        let fires = cases.iter().any(|c| c.trim_start().starts_with("exp_alerts:\n"));
        if !quiet || !fires {
            problems.push(format!("{name}: fwc-alerts.test.yml tests it firing: {fires}, not firing: {quiet}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
