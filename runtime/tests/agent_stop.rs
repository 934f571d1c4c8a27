//! SIGTERM mid-reconcile: a real `fwc agent` busy compiling a huge-but-legal commit (a
//! set file of millions of addresses) exits within the documented bound, and its state dir and
//! audit log are consistent afterwards (nothing of the abandoned commit recorded, no pending
//! intent, the chain verifies). Applies inside a scratch namespace, never the root namespace.

use std::process::Command;
use std::time::{Duration, Instant};

use fwc_testkit::{privileged, Netns};

mod agent_common;
use agent_common::*;

/// SIGTERM during a compile: the compile is abandoned at once (it polls every 50 ms); the
/// process then only closes its listener.
const BOUND: Duration = Duration::from_secs(3);

/// Wait until the agent logs `busy` (it started compiling or applying), send SIGTERM a moment
/// later, and check it exits cleanly within `bound`; returns its log.
fn term_once_busy(agent: &mut AgentProc, busy: &str, bound: Duration) -> String {
    assert!(
        wait_until(Duration::from_secs(180), || agent.log_text().contains(busy)),
        "the agent never logged {busy:?}:\n{}",
        agent.log_text()
    );
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let status = agent.term();
    let took = t0.elapsed();
    let log = agent.log_text();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(took < bound, "SIGTERM took {took:?} (bound {bound:?}):\n{log}");
    log
}

#[test]
fn sigterm_mid_compile_exits_promptly_and_leaves_the_state_consistent() {
    if !privileged("sigterm_mid_compile_exits_promptly_and_leaves_the_state_consistent") {
        return;
    }
    let ns = Netns::new("stop");
    let repo = Repo::new();
    let c1 = repo.commit(&allow(80, "web"), "allow 80", None, false);
    let state = repo.root.join("state");
    let mut agent = AgentProc::start(&state, &repo.url(), &ns.name, &["--no-forwarder", "--fetch-timeout", "120s"], &[]);
    wait_entry(&state, &c1, "apply", &agent);

    // A legal commit that takes the compiler seconds: 2.5 million set elements.
    let list: String = (0..2_500_000u32).map(|i| format!("10.{}.{}.{}\n", i >> 16, (i >> 8) & 255, i & 255)).collect();
    std::fs::create_dir_all(repo.work.join("lists")).unwrap();
    std::fs::write(repo.work.join("lists/bl.netset"), list).unwrap();
    git(&repo.work, &["add", "lists"]);
    let kdl = "fwc 1\nset \"bl\" file=\"lists/bl.netset\"\ninput policy=drop {\n    deny \"bl\" from=\"@bl\"\n    allow \"web\" proto=tcp port=80\n}\n";
    let c2 = repo.commit(kdl, "huge blocklist", None, false);
    let log = term_once_busy(&mut agent, &format!("compiling commit={}", &c2[..12]), BOUND);
    assert!(log.contains("the compile is abandoned"), "SIGTERM did not land mid-compile:\n{log}");

    // Consistent: the chain verifies, the abandoned commit left no entry and no intent, the
    // applied generation is still c1's.
    assert_audit_verifies(&state);
    let entries = audit(&state);
    assert!(entries.iter().all(|e| e["commit"] != c2.as_str()), "{entries:?}");
    assert_eq!(entries.last().unwrap()["commit"], c1.as_str());
    let journal: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert!(journal.get("pending").is_none_or(|p| p.is_null()), "{journal}");
    let status = Command::new(env!("CARGO_BIN_EXE_fwc")).args(["status", "--json", "--state-dir", state.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains(&c1), "{}", String::from_utf8_lossy(&status.stdout));
}

/// SIGTERM during an apply: the transaction is not cut by the agent itself, but the agent
/// exits once `--stop-grace` has passed (here 1 s, against an apply held up 30 s before its
/// commit by `FWC_TEST_FAIL=stall:commit`); the next start (without the stall) redoes the interrupted apply from the intent
/// journal and audits it, and the chain verifies.
#[test]
fn sigterm_mid_apply_exits_after_the_grace_and_the_next_start_redoes_it() {
    if !privileged("sigterm_mid_apply_exits_after_the_grace_and_the_next_start_redoes_it") {
        return;
    }
    let ns = Netns::new("grace");
    let repo = Repo::new();
    let c1 = repo.commit(&allow(80, "web"), "allow 80", None, false);
    let state = repo.root.join("state");
    let extra = ["--no-forwarder", "--stop-grace", "1s"];
    let mut first = AgentProc::start(&state, &repo.url(), &ns.name, &extra, &[]);
    wait_entry(&state, &c1, "apply", &first);
    assert!(first.term().success());

    let c2 = repo.commit(&allow(443, "tls"), "allow 443", None, false);
    let mut agent = AgentProc::start(&state, &repo.url(), &ns.name, &extra, &[("FWC_TEST_FAIL", "stall:commit")]);
    let log = term_once_busy(&mut agent, &format!("applying commit={}", &c2[..12]), Duration::from_secs(4));
    assert!(log.contains("still busy 1s after the stop signal"), "the apply was not in progress at SIGTERM:\n{log}");
    assert!(audit(&state).iter().all(|e| e["commit"] != c2.as_str()), "the cut apply was audited as if finished");

    // The next start finds the intent and redoes the apply; the chain verifies.
    let agent = AgentProc::start(&state, &repo.url(), &ns.name, &extra, &[]);
    let entry = wait_entry(&state, &c2, "apply", &agent);
    assert_eq!(entry["result"], "ok", "{entry}");
    assert_audit_verifies(&state);
}
