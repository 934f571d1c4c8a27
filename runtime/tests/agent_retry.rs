//! Transient failures: a failed apply is retried with backoff and succeeds once the cause is
//! gone; a failing heal backs off and is audited on state change (first failure, recovery),
//! not every interval. The failure is injected with the agent's test hook
//! (`FWC_AGENT_TEST_FAIL_FILE`: the first backend fails right after its commit while the file
//! exists, so the real rollback path runs) in a scratch namespace.

use std::time::Duration;

use fwc_testkit::{privileged, Netns};

mod agent_common;
use agent_common::*;

#[test]
fn failed_apply_is_retried_and_a_failing_heal_backs_off_with_one_entry_per_state_change() {
    if !privileged("failed_apply_is_retried_and_a_failing_heal_backs_off_with_one_entry_per_state_change") {
        return;
    }
    let ns = Netns::new("retry");
    let repo = Repo::new();
    let state = repo.root.join("state");
    let fail = repo.root.join("fail-now");
    let c1 = repo.commit(&allow(80, "web"), "v1", None, false);
    let fail_s = fail.to_str().unwrap().to_string();
    let agent = AgentProc::start(&state, &repo.url(), &ns.name, &["--no-forwarder"], &[("FWC_AGENT_TEST_HOOKS", "1"), ("FWC_AGENT_TEST_FAIL_FILE", &fail_s)]);
    wait_entry(&state, &c1, "apply", &agent);

    // Apply of c2 fails (transient): rolled back, degraded; retried after the backoff once the
    // cause is gone.
    std::fs::write(&fail, "").unwrap();
    let c2 = repo.commit(&allow(81, "alt"), "v2", None, false);
    let e = wait_entry(&state, &c2, "apply", &agent);
    assert_ne!(e["result"], "ok", "{e:#}");
    std::fs::remove_file(&fail).unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || audit(&state).iter().any(|e| e["commit"] == c2.as_str() && e["result"] == "ok")),
        "c2 was not retried: {:#?}\n{}",
        audit(&state),
        agent.log_text()
    );
    assert!(wait_until(Duration::from_secs(5), || agent.scrape().contains("reason=\"\"} 0")), "{}", agent.scrape());

    // Heal fails while the hook file exists: one entry, then silence (backoff), then the
    // recovery is audited.
    std::fs::write(&fail, "").unwrap();
    ns.exec(&["nft", "flush", "table", "inet", "fwc"]);
    let e = wait_entry(&state, &c2, "heal", &agent);
    assert_ne!(e["result"], "ok", "{e:#}");
    std::thread::sleep(Duration::from_secs(5)); // five intervals
    let heals = |st: &std::path::Path| audit(st).into_iter().filter(|e| e["action"] == "heal").count();
    assert_eq!(heals(&state), 1, "a failing heal must not be audited every interval: {:#?}", audit(&state));
    std::fs::remove_file(&fail).unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || audit(&state).iter().any(|e| e["action"] == "heal" && e["result"] == "ok")),
        "the heal was not retried: {:#?}\n{}",
        audit(&state),
        agent.log_text()
    );
    assert_eq!(heals(&state), 2, "{:#?}", audit(&state));
}
