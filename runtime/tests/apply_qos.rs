//! End to end through all three layers of a bandwidth cap: a KDL forward with `bandwidth=`
//! compiles to an nftables DNAT + class marks and a QoS class; `fwc apply --netns` loads the
//! ruleset and attaches the eBPF program inside the namespace (its own pin root); real TCP
//! through the forward is held to the cap, measured on the receiver. Removing the cap detaches.

use std::process::Command;

use fwc_testkit::{privileged, Topology};

fn fwc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).output().expect("fwc runs")
}

#[test]
fn capped_forward_is_shaped_by_the_ebpf_program_inside_the_namespace() {
    if !privileged("capped_forward_is_shaped_by_the_ebpf_program_inside_the_namespace") {
        return;
    }
    let mut t = Topology::new();
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", t.host.name);
    // A sink on the backend that counts bytes and reports them when the sender closes.
    t.backend.spawn(&["socat", "-u", "TCP-LISTEN:5001,bind=198.18.2.2,reuseaddr,fork", "OPEN:/dev/null"]);
    let repo = tempfile::tempdir().unwrap();
    let rules = |cap: &str| format!("fwc 1\nforward \"bulk\" listen=\":5000\" to=\"198.18.2.2:5001\"{cap}\n");
    std::fs::write(repo.path().join("fwc.kdl"), rules(" bandwidth=\"10mbit\"")).unwrap();
    let state = repo.path().join("state");
    let (st, dir) = (state.to_str().unwrap(), repo.path().to_str().unwrap());
    let o = fwc(&["apply", dir, "--netns", &t.host.name, "--state-dir", st, "--auto-approve"]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    // Send for 4 s from the client through the forward; the cap is 10 Mbit/s = 1.25 MB/s.
    t.client.sh(
        "timeout 4 python3 -c \"import socket,sys\ns=socket.create_connection(('198.18.1.1',5000))\nb=b'x'*65536\nn=0\ntry:\n  while True: n+=s.send(b)\nexcept Exception: pass\" ; true",
    );
    // `qos stats` finds the namespace's pins from --netns and names the classes after the
    // rules of the state dir's applied generation, without --pin-dir or --artifacts.
    let o = fwc(&["qos", "stats", "--netns", &t.host.name, "--state-dir", st, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = stats.to_string();
    assert_eq!(stats["pin_dir"], pins.as_str(), "{text}");
    let o = fwc(&["qos", "stats", "--netns", &t.host.name, "--state-dir", st]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("bulk (up)") && table.contains("bulk (down)"), "classes named after their rule:\n{table}");
    // The up class saw the traffic, passed about 4 s x 1.25 MB/s and dropped the excess.
    let classes = stats["classes"].as_array().cloned().unwrap_or_default();
    assert_eq!(classes.len(), 2, "an up and a down class: {text}");
    let passed: u64 = classes.iter().filter_map(|c| c["passed_bytes"].as_u64()).sum();
    let dropped: u64 = classes.iter().filter_map(|c| c["dropped_pkts"].as_u64()).sum();
    assert!(passed > 2_000_000 && passed < 8_000_000, "passed {passed} bytes in 4 s at 10 Mbit/s: {text}");
    assert!(dropped > 0, "a sender faster than the cap must see drops: {text}");

    // Without the cap, the class and the attachment go away.
    std::fs::write(repo.path().join("fwc.kdl"), rules("")).unwrap();
    let o = fwc(&["apply", dir, "--netns", &t.host.name, "--state-dir", st, "--auto-approve"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = fwc(&["qos", "stats", "--netns", &t.host.name, "--json"]);
    let after: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(after["classes"].as_array().map(Vec::len).unwrap_or(0), 0, "classes of the removed cap remain: {after}");

    // Both manual applies are in the hash-chained audit log, which verifies.
    let o = fwc(&["audit", "verify", "--state-dir", st]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = fwc(&["audit", "show", "--state-dir", st, "--json"]);
    let log = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(log.matches("\"action\": \"apply\"").count() + log.matches("\"action\":\"apply\"").count(), 2, "{log}");
}

/// A first apply whose nftables commit fails is rolled back to nothing, and "nothing" includes
/// the QoS maps its prepare pinned: the pin root is gone afterwards (it was left behind, with
/// fwc saying "Every backend is back on nothing").
#[test]
fn a_failed_first_apply_leaves_no_qos_pins() {
    if !privileged("a_failed_first_apply_leaves_no_qos_pins") {
        return;
    }
    let t = Topology::new();
    let pins = format!("/sys/fs/bpf/fwc-netns-{}", t.host.name);
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("fwc.kdl"), "fwc 1\nforward \"bulk\" listen=\":5000\" to=\"198.18.2.2:5001\" bandwidth=\"10mbit\"\n").unwrap();
    let state = repo.path().join("state");
    let (st, dir) = (state.to_str().unwrap(), repo.path().to_str().unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(["apply", dir, "--netns", &t.host.name, "--state-dir", st, "--auto-approve"])
        .env("FWC_TEST_FAIL", "commit:nftables")
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "the injected commit failure did not fail the apply:\n{out}");
    assert!(out.contains("back on nothing"), "{out}");
    assert!(!std::path::Path::new(&pins).exists(), "the rolled-back first apply left QoS pins in {pins}:\n{out}");
    // And the next, unhindered apply still works from there.
    let o = fwc(&["apply", dir, "--netns", &t.host.name, "--state-dir", st, "--auto-approve"]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(std::path::Path::new(&pins).join("fwc_qos_cfg").exists(), "no pins after a successful apply");
}
