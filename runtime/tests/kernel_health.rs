//! Health checks on the kernel path: a health-checked forward to IP literals stays
//! on nftables DNAT; the forwarder (`fwc forward --state-dir`, in the host's namespace) probes
//! the targets and rewrites the forward's dispatch chain. Real connections through the DNAT
//! show a stopped target taken out within interval × fall and back after rise; the rewrite is
//! not drift; with every target down, every target is in the dispatch again.

use std::process::Command;
use std::time::{Duration, Instant};

use fwc_testkit::{poll_until, privileged, rule_repo, Topology};

const INTERVAL_MS: u64 = 300;
const FALL: u64 = 2;
const RISE: u64 = 2;

fn fwc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fwc")).args(args).output().expect("fwc runs")
}

/// The backend names that answer `n` new connections through the forward.
fn answers(t: &Topology, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let o = t.client.try_exec(&["bash", "-c", "exec 3<>/dev/tcp/198.18.1.1/7000; timeout 3 cat <&3"]);
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect()
}

/// Wait (up to `limit`) until `n` connections all get `want`; returns how long it took.
fn until_only(t: &Topology, want: &str, limit: Duration) -> Duration {
    let what = format!("connections get only {want}");
    poll_until(&what, limit, Duration::from_millis(50), || {
        let a = answers(t, 4);
        if a.iter().all(|x| x == want) { Ok(()) } else { Err(a) }
    })
    .1
}

fn dispatch_rule(t: &Topology) -> String {
    t.host.exec(&["nft", "list", "chain", "inet", "fwc", "fhc4_web"])
}

#[test]
fn kernel_forward_fails_over_by_health_checks() {
    if !privileged("kernel_forward_fails_over_by_health_checks") {
        return;
    }
    let mut t = Topology::new();
    t.backend.exec(&["ip", "addr", "add", "198.18.2.3/24", "dev", &t.backend_if]);
    let a_pid = t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.2,reuseaddr,fork", "SYSTEM:echo A"]);
    let b = t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.3,reuseaddr,fork", "SYSTEM:echo B"]);

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let st = state.to_str().unwrap().to_string();
    t.host.spawn_forwarder(env!("CARGO_BIN_EXE_fwc"), &state);

    let repo = rule_repo(
        dir.path(),
        &format!(
            "fwc 1\nforward \"web\" listen=\":7000\" to=\"198.18.2.2:7001,198.18.2.3:7001\" health-check=\"tcp\" \
             health-interval=\"{INTERVAL_MS}ms\" health-timeout=\"100ms\" health-fall={FALL} health-rise={RISE}\n"
        ),
    );
    let repo_s = repo.to_str().unwrap();
    let o = fwc(&["apply", repo_s, "--netns", &t.host.name, "--state-dir", &st, "--auto-approve"]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let manifest = std::fs::read_to_string(state.join("gen-000001/manifest.json")).unwrap();
    assert!(manifest.contains("nftables DNAT + masquerade; health-checked"), "{manifest}");
    let forward_json = std::fs::read_to_string(state.join("gen-000001/forward.json")).unwrap();
    assert!(forward_json.contains("\"listeners\": []"), "no userspace listener expected: {forward_json}");

    // Both targets take connections through the DNAT.
    let a = answers(&t, 8);
    assert!(a.contains(&"A".to_string()) && a.contains(&"B".to_string()), "round robin over both: {a:?}");

    // B stops: out within interval × fall (+ one interval for the probe phase, + slack for nft).
    let stop = Instant::now();
    t.backend.exec(&["kill", &b.to_string()]);
    // A deadline, not a budget: the time it took is printed, never asserted.
    until_only(&t, "A", Duration::from_secs(60));
    eprintln!("B taken out after {:?} (interval {INTERVAL_MS} ms × fall {FALL})", stop.elapsed());
    assert!(!dispatch_rule(&t).contains("fhc4_web_t1"), "{}", dispatch_rule(&t));
    let stats = fwc(&["forward", "--stats", "--json", "--state-dir", &st]);
    let stats = String::from_utf8_lossy(&stats.stdout).to_string();
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let b_up = v["health"].as_array().and_then(|h| h.iter().find(|x| x["target"] == "198.18.2.3:7001")).map(|x| x["up"].clone());
    assert_eq!(b_up, Some(serde_json::Value::Bool(false)), "status lists B down: {stats}");

    let o = fwc(&["status", "--netns", &t.host.name, "--state-dir", &st, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["target_health"].as_array().cloned().unwrap_or_default();
    assert!(rows.iter().any(|r| r["rule"] == "web" && r["target"] == "198.18.2.3:7001" && r["up"] == false), "fwc status lists B down: {v}");
    assert_eq!(v["drift"], false, "{v}");

    // The rewrite is not drift.
    let o = fwc(&["plan", repo_s, "--netns", &t.host.name, "--state-dir", &st, "--detailed-exitcode"]);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!text.to_lowercase().contains("drift"), "the prober's rewrite reported as drift:\n{text}");
    assert_eq!(o.status.code(), Some(0), "plan sees a change:\n{text}");

    // An apply (here: one more forward; the nft diff also replaces the dispatch rule with the
    // compiled one, over every target) is followed by the forwarder's commit, which writes the
    // current health again.
    let kdl = std::fs::read_to_string(repo.join("fwc.kdl")).unwrap();
    std::fs::write(repo.join("fwc.kdl"), kdl + "forward \"other\" listen=\":7100\" to=\"198.18.2.2:7001\"\n").unwrap();
    let log = dir.path().join("batches.log");
    let o = Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(["apply", repo_s, "--netns", &t.host.name, "--state-dir", &st, "--auto-approve"])
        .env("FWC_NFT_BATCH_LOG", &log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let batch = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(batch.contains("\"fhc4_web\""), "the apply's nft batch did not reset the dispatch rule:\n{batch}");
    let t0 = Instant::now();
    while dispatch_rule(&t).contains("fhc4_web_t1") {
        assert!(t0.elapsed() < Duration::from_secs(60), "after an apply B is still in the dispatch:\n{}", dispatch_rule(&t));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answers(&t, 4), ["A", "A", "A", "A"]);

    // B is back: in the rotation again within interval × rise (+ one interval).
    let b2 = t.backend.spawn(&["socat", "TCP-LISTEN:7001,bind=198.18.2.3,reuseaddr,fork", "SYSTEM:echo B"]);
    let back = Instant::now();
    let limit = Duration::from_secs(60);
    loop {
        let a = answers(&t, 4);
        if a.contains(&"B".to_string()) {
            break;
        }
        assert!(back.elapsed() < limit, "B not back after {:?}: {a:?}", back.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("B back after {:?} (interval {INTERVAL_MS} ms × rise {RISE})", back.elapsed());

    // Every target down: the dispatch uses all of them again (as without checks; connections
    // are refused by the targets themselves).
    // (by pid: only the listeners this test started)
    t.backend.exec(&["kill", &a_pid.to_string(), &b2.to_string()]);
    let down = Instant::now();
    loop {
        let stats = fwc(&["forward", "--stats", "--json", "--state-dir", &st]);
        let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap_or_default();
        let all_down = v.pointer("/health").and_then(|h| h.as_array()).is_some_and(|h| h.len() == 2 && h.iter().all(|x| x["up"] == false));
        if all_down {
            break;
        }
        assert!(down.elapsed() < Duration::from_secs(60), "targets not both down: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let rule = dispatch_rule(&t);
    assert!(rule.contains("fhc4_web_t0") && rule.contains("fhc4_web_t1"), "all down: every target in the dispatch\n{rule}");
}
