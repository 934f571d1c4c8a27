//! quota under the real agent: `fwc agent` applies a kernel forward with
//! `quota="2MB/day"` from a git repository into the fwc-host namespace of a [`Topology`]; after
//! a download past it the agent exports `fwc_quota_used_bytes` / `fwc_quota_limit_bytes` and
//! logs the 80 % and used-up warnings once; an unrelated commit and an agent restart keep it
//! used up (no second warning); the agent started on the next day (the injected clock,
//! `FWC_TEST_NOW`) resets it.

use std::time::Duration;

use fwc_testkit::{privileged, tool, Topology};

mod agent_common;
use agent_common::*;

const DAY1: &str = "2026-11-26T12:00:00Z";
const DAY2: &str = "2026-11-27T00:00:05Z";
const USED_UP: &str = "fwc_quota_used_bytes{host=\"localhost\",rule=\"dl\",kind=\"forward\",period=\"day\"} 2000000";
const LIMIT: &str = "fwc_quota_limit_bytes{host=\"localhost\",rule=\"dl\",kind=\"forward\",period=\"day\"} 2000000";
const POLICY: &str = "fwc 1\nforward \"dl\" listen=\":8080\" to=\"198.18.2.2:80\" quota=\"2MB/day\"\n";

fn download(t: &Topology) -> u64 {
    let o = t.client.try_exec(&["sh", "-c", "timeout 60 socat -T3 -u TCP4:198.18.1.1:8080,connect-timeout=3 - | wc -c"]);
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0)
}

/// Wait (a generous deadline, not a budget) until the agent's metrics contain `line`.
fn wait_metric(agent: &AgentProc, line: &str) {
    assert!(wait_until(Duration::from_secs(60), || agent.scrape().contains(line)), "no `{line}` in\n{}\nlog:\n{}", agent.scrape(), agent.log_text());
}

#[test]
fn the_agent_counts_warns_keeps_and_resets_a_quota() {
    if !privileged("quota_agent") || !tool("quota_agent", "socat", "socat") {
        return;
    }
    let mut t = Topology::new();
    t.backend.spawn(&["socat", "TCP4-LISTEN:80,fork,reuseaddr", "SYSTEM:head -c 3000000 /dev/zero"]);
    assert!(
        wait_until(Duration::from_secs(60), || !t.backend.sh("ss -Hlnt 'sport = :80'").trim().is_empty()),
        "the backend does not listen"
    );
    let repo = Repo::new();
    let state = repo.root.join("state");
    let c1 = repo.commit(POLICY, "a 2MB/day quota", None, false);
    let day1 = [("FWC_TEST_NOW", DAY1)];
    let mut agent = AgentProc::start(&state, &repo.url(), &t.host.name, &["--no-forwarder"], &day1);
    wait_entry(&state, &c1, "apply", &agent);
    wait_metric(&agent, LIMIT);

    let got = download(&t);
    assert!(got > 0 && got <= 2_000_000, "the download should stop at the quota, got {got}");
    wait_metric(&agent, USED_UP);
    let warned = |log: &str| (log.matches("80 % or more").count(), log.matches("is used up").count());
    assert!(wait_until(Duration::from_secs(60), || warned(&agent.log_text()) == (1, 1)), "warnings:\n{}", agent.log_text());

    // An unrelated commit: still used up, no new warning.
    let c2 = repo.commit(&format!("{POLICY}input {{\n    allow \"ssh\" proto=tcp port=22\n}}\n"), "unrelated", None, false);
    wait_entry(&state, &c2, "apply", &agent);
    wait_metric(&agent, USED_UP);
    assert_eq!(download(&t), 0, "an unrelated commit let traffic through a used-up quota");
    assert_eq!(warned(&agent.log_text()), (1, 1), "warned twice in one period:\n{}", agent.log_text());

    // An agent restart: the count stays, and the warnings are not repeated (the ledger says so).
    assert!(agent.term().success());
    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &["--no-forwarder"], &day1);
    wait_metric(&agent, USED_UP);
    assert_eq!(download(&t), 0, "an agent restart let traffic through a used-up quota");
    assert_eq!(warned(&agent.log_text()), (0, 0), "the restarted agent warned again:\n{}", agent.log_text());
    drop(agent);

    // The next day: the agent resets the quota at its anchor and traffic flows again.
    let agent = AgentProc::start(&state, &repo.url(), &t.host.name, &["--no-forwarder"], &[("FWC_TEST_NOW", DAY2)]);
    assert!(
        wait_until(Duration::from_secs(60), || agent.scrape().contains("fwc_quota_used_bytes{host=\"localhost\",rule=\"dl\",kind=\"forward\",period=\"day\"} 0")),
        "no reset:\n{}\n{}",
        agent.scrape(),
        agent.log_text()
    );
    assert!(agent.log_text().contains("reset"), "{}", agent.log_text());
    assert!(download(&t) > 0, "after the reset the download flows again");
}
