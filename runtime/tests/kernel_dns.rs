//! DNS-named targets, privileged, real traffic: a forward to a DNS name with
//! nothing else needing userspace is nftables DNAT; the forwarder (in the fwc host's namespace,
//! `/etc/netns/<ns>/resolv.conf` pointing at a dnsmasq in the backend's) resolves the name and
//! installs its address. When the name's address changes, new connections follow within the
//! TTL bounds while an established one keeps going; the install is not drift. A name that does
//! not resolve is a health failure, not an apply failure. The userspace resolver honours TTLs
//! too (a record with TTL 1 s is re-resolved after the 5 s minimum, not the old fixed 30 s).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fwc_testkit::{poll_until, privileged, rule_repo, tool, Topology};

fn fwc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).output().expect("fwc runs")
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The first line a new connection to the host's `port` gets ("" when none).
fn answer(t: &Topology, port: u16) -> String {
    let line = format!("exec 3<>/dev/tcp/198.18.1.1/{port} && timeout 2 head -n1 <&3");
    let o = t.client.try_exec(&["bash", "-c", &line]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Wait (up to `limit`) until new connections to `port` get `want`; returns how long it took.
fn until_answer(t: &Topology, port: u16, want: &str, limit: Duration) -> Duration {
    let what = format!("new connections to port {port} answer {want}");
    poll_until(&what, limit, Duration::from_millis(200), || {
        let a = answer(t, port);
        if a == want { Ok(()) } else { Err(a) }
    })
    .1
}

fn dns_chain(t: &Topology) -> String {
    t.host.exec(&["nft", "list", "chain", "inet", "fwc", "fdn4_api"])
}

#[test]
fn dns_named_kernel_forward_follows_the_name_and_keeps_established_flows() {
    if !privileged("dns_named_kernel_forward_follows_the_name_and_keeps_established_flows")
        || !tool("dns_named_kernel_forward_follows_the_name_and_keeps_established_flows", "dnsmasq", "dnsmasq-base")
    {
        return;
    }
    let mut t = Topology::new();
    for a in ["198.18.2.3/24", "198.18.2.53/24"] {
        t.backend.exec(&["ip", "addr", "add", a, "dev", &t.backend_if]);
    }
    // Two backends: each says who it is, then echoes.
    t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.2,reuseaddr,fork", "SYSTEM:echo A; cat"]);
    t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.3,reuseaddr,fork", "SYSTEM:echo B; cat"]);

    // The name server: authoritative for .internal (unknown names: NXDOMAIN), TTL 1 s, names
    // from a hosts-format file it reads again on SIGHUP.
    let dir = tempfile::tempdir().unwrap();
    let names = dir.path().join("names");
    std::fs::write(&names, "198.18.2.2 api.internal uapi.internal\n").unwrap();
    let dnsmasq = t.backend.spawn(&[
        "dnsmasq",
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--user=root",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        "--listen-address=198.18.2.53",
        "--local=/internal/",
        "--local-ttl=1",
        &format!("--addn-hosts={}", names.display()),
        &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
    ]);
    t.host.etc_file("resolv.conf", "nameserver 198.18.2.53\n");
    poll_until("dnsmasq answers for api.internal", Duration::from_secs(5), Duration::from_millis(100), || {
        let o = t.host.try_exec(&["getent", "ahostsv4", "api.internal"]);
        if o.status.success() { Ok(()) } else { Err(o.status) }
    });

    let state = dir.path().join("state");
    let st = state.to_str().unwrap().to_string();
    t.host.spawn_forwarder(env!("CARGO_BIN_EXE_fwc"), &state);
    let repo = rule_repo(
        dir.path(),
        "fwc 1\n\
         forward \"api\" listen=\":7000\" to=\"api.internal:7001\"\n\
         forward \"ghost\" listen=\":7100\" to=\"ghost.internal:7001\"\n\
         forward \"uapi\" listen=\":7200\" to=\"uapi.internal:7001\" backend=\"userspace\"\n",
    );
    let repo_s = repo.to_str().unwrap();
    let ns = t.host.name.clone();

    // The plan says why the name stays in the kernel.
    let o = fwc(&["plan", repo_s, "--netns", &ns, "--state-dir", &st]);
    assert!(text(&o).contains("kernel, name re-resolved"), "{}", text(&o));

    // Apply succeeds although "ghost" does not resolve.
    let o = fwc(&["apply", repo_s, "--netns", &ns, "--state-dir", &st, "--auto-approve"]);
    assert!(o.status.success(), "{}", text(&o));
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("gen-000001/manifest.json")).unwrap()).unwrap();
    let api = manifest["rules"].as_array().unwrap().iter().find(|r| r["name"] == "api").unwrap().clone();
    assert_eq!(api["backends"], serde_json::json!(["nftables"]), "a DNS target alone must not force userspace: {api}");
    let fj: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(state.join("gen-000001/forward.json")).unwrap()).unwrap();
    assert!(fj["listeners"].as_array().unwrap().iter().all(|l| l["rule"] != "api"), "no userspace listener for api: {fj}");

    // The forwarder resolves and installs: connections are DNATed to A.
    until_answer(&t, 7000, "A", Duration::from_secs(5));
    assert!(dns_chain(&t).contains("dnat ip to 198.18.2.2:7001"), "{}", dns_chain(&t));
    assert_eq!(answer(&t, 7200), "A", "userspace forward to uapi.internal");

    // An established flow through the kernel DNAT.
    let mut flow = t.client.cmd("socat");
    flow.args(["-", "TCP:198.18.1.1:7000"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut flow = flow.spawn().unwrap();
    let mut fin = flow.stdin.take().unwrap();
    let mut fout = BufReader::new(flow.stdout.take().unwrap());
    let mut line = String::new();
    fout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "A");

    // Installing is not drift; ghost's failure is health, listed by status.
    let o = fwc(&["plan", repo_s, "--netns", &ns, "--state-dir", &st, "--detailed-exitcode"]);
    assert!(!text(&o).to_lowercase().contains("drift"), "the install reported as drift:\n{}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = fwc(&["status", "--netns", &ns, "--state-dir", &st, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["target_health"].as_array().cloned().unwrap_or_default();
    assert!(rows.iter().any(|r| r["rule"] == "ghost" && r["up"] == false), "ghost does not resolve: down in {v}");
    assert!(rows.iter().any(|r| r["rule"] == "api" && r["up"] == true), "api resolves: up in {v}");
    assert_eq!(v["drift"], false, "{v}");
    let stats = fwc(&["forward", "--stats", "--json", "--state-dir", &st]);
    let s: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let row = s["health"].as_array().unwrap().iter().find(|h| h["rule"] == "api").cloned().unwrap();
    assert_eq!(row["addresses"], serde_json::json!(["198.18.2.2"]), "{s}");

    // The name moves to B: new connections follow within the TTL bounds (1 s TTL -> 5 s min).
    std::fs::write(&names, "198.18.2.3 api.internal uapi.internal\n").unwrap();
    Command::new("kill").args(["-HUP", &dnsmasq.to_string()]).status().unwrap();
    let moved = Instant::now();
    until_answer(&t, 7000, "B", Duration::from_secs(12));
    eprintln!("kernel forward followed the name after {:?}", moved.elapsed());
    assert!(dns_chain(&t).contains("198.18.2.3"), "{}", dns_chain(&t));
    until_answer(&t, 7200, "B", Duration::from_secs(12));
    eprintln!("userspace forward followed the name after {:?} (the old fixed TTL was 30 s)", moved.elapsed());

    // The established flow still reaches A.
    fin.write_all(b"still here\n").unwrap();
    line.clear();
    fout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "still here", "the established flow was cut by the address change");
    drop(fin);
    let _ = flow.kill();
    let _ = flow.wait();

    // Still no drift after the replacement.
    let o = fwc(&["plan", repo_s, "--netns", &ns, "--state-dir", &st, "--detailed-exitcode"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
