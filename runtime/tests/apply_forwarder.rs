//! End to end for the userspace path: a forward to a DNS name (`backend="userspace"`: a DNS
//! target alone would be a kernel forward, see kernel_dns.rs) on a host whose input and output
//! policies are `drop`. `fwc forward --state-dir` runs in
//! the host's namespace, `fwc apply --netns` hands it the listeners over the control socket and
//! loads the ruleset; the client reaches the backend by name, and the forwarder's upstream
//! connection gets out only because it carries fwc's socket mark.


use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fwc_testkit::{privileged, Topology};

fn fwc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).output().expect("fwc runs")
}

#[test]
fn forward_to_a_dns_name_under_drop_policies() {
    if !privileged("forward_to_a_dns_name_under_drop_policies") {
        return;
    }
    let mut t = Topology::new();
    t.host.etc_file("hosts", "127.0.0.1 localhost\n198.18.2.2 backend.test\n");
    // The backend answers with a greeting (no route back to the client: the forwarder proxies).
    t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.2,reuseaddr,fork", "SYSTEM:echo from-backend"]);

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let st = state.to_str().unwrap().to_string();
    let fwd = Command::new("ip")
        .args(["netns", "exec", &t.host.name, env!("CARGO_BIN_EXE_fwc"), "forward", "--state-dir", &st])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    t.host.adopt(fwd);
    let sock = state.join("forwarder.sock");
    let t0 = Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sock.exists(), "the forwarder did not create {}", sock.display());

    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join("fwc.kdl"),
        "fwc 1\ninput policy=drop {\n    allow \"ping\" proto=icmp\n}\noutput policy=drop {\n}\nforward \"api\" listen=\":7000\" to=\"backend.test:7001\" backend=\"userspace\"\n",
    )
    .unwrap();
    let o = fwc(&["apply", repo.to_str().unwrap(), "--netns", &t.host.name, "--state-dir", &st, "--auto-approve"]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let manifest = std::fs::read_to_string(state.join("gen-000001/manifest.json")).unwrap();
    assert!(manifest.contains("backend=\\\"userspace\\\" was asked for"), "{manifest}");

    // The client, through the forwarder, reaches the backend by name.
    let reply = t.client.exec(&["bash", "-c", "exec 3<>/dev/tcp/198.18.1.1/7000; timeout 5 cat <&3"]);
    assert_eq!(reply.trim(), "from-backend", "no answer through the forwarder under output policy=drop");

    // A connection the forwarder is not part of is still dropped by the output policy.
    let out = t.host.try_exec(&["timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/198.18.2.2/7001"]);
    assert!(!out.status.success(), "output policy=drop let an unmarked connection out");
}
