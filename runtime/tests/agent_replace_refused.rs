//! The agent never replaces fwc's nftables table whole where its plan would keep state: a
//! commit that needs `fwc apply --allow-replace` is refused, nothing changes, the audit log
//! has it as aborted with the reason, and the agent reports itself degraded
//! (`replace_refused`) with that reason. Real git remote, real nft in a `fwc-t-*` namespace.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use fwc_testkit::{privileged, Netns};

mod agent_common;
use agent_common::*;

fn once(state: &Path, url: &str, ns: &Netns) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(["agent", "--once", "--no-forwarder", "--metrics", "off", "--host", "localhost", "--fetch-timeout", "10s"])
        .args(["--repo", url, "--state-dir", state.to_str().unwrap(), "--netns", &ns.name])
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_replace_that_needs_allow_replace_makes_the_agent_degraded_with_the_reason() {
    if !privileged("a_replace_that_needs_allow_replace_makes_the_agent_degraded_with_the_reason") {
        return;
    }
    let ns = Netns::new("arr");
    let repo = Repo::new();
    let state = repo.root.join("state");
    repo.commit(&allow(22, "ssh"), "v1", None, false);
    let o = once(&state, &repo.url(), &ns);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    // A set the next commit declares already exists live, made by hand: no diff can add it.
    ns.exec(&["nft", "add", "set", "inet", "fwc", "office_v4", "{ type ipv4_addr; flags interval; }"]);
    let before = ns.exec(&["nft", "-a", "list", "table", "inet", "fwc"]);
    let c2 = repo.commit("fwc 1\nset \"office\" \"203.0.113.0/24\"\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n    allow \"office\" proto=tcp port=443 from=\"@office\"\n}\n", "v2", None, false);
    let o = once(&state, &repo.url(), &ns);
    assert_ne!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ns.exec(&["nft", "-a", "list", "table", "inet", "fwc"]), before, "the agent changed the table");
    let e = audit(&state).into_iter().rfind(|e| e["commit"] == c2.as_str()).expect("an audit entry for v2");
    assert_eq!(e["result"], "aborted", "{e:#}");
    assert!(e["detail"].as_str().unwrap_or_default().contains("refusing to replace table inet fwc whole"), "{e:#}");
    let journal: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("agent.json")).unwrap()).unwrap();
    assert_eq!(journal["handled"]["degraded"], "replace_refused", "{journal:#}");
    assert!(journal["handled"]["reason"].as_str().unwrap_or_default().contains("--allow-replace"), "{journal:#}");
}
