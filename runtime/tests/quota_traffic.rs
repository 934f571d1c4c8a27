//! quota with real traffic: a kernel forward with `quota="2MB/day"` inside the
//! fwc-host namespace of a [`Topology`] stops a download past 2 MB; an unrelated commit,
//! `fwc rollback`, a new fwc process and a "reboot" (the table gone, the state dir kept) do not
//! reset it; the next day does — the clock is `FWC_TEST_NOW`, never a sleep. Nothing is loaded
//! into the root namespace.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fwc_testkit::{privileged, tool, Topology, output_text as text};

/// The day the test lives in (12:00 UTC) and the next one.
const DAY1: &str = "2026-11-26T12:00:00Z";
const DAY2: &str = "2026-11-27T00:00:05Z";
const LIMIT: u64 = 2_000_000;
/// What the backend sends on every connection: more than the quota.
const BODY: u64 = 3_000_000;

fn fwc(args: &[&str], now: &str, batch_log: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fwc"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("FWC_TEST_NOW", now)
        .env("FWC_NFT_BATCH_LOG", batch_log)
        .env_remove("FWC_TEST_FAIL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

struct Host<'a> {
    t: &'a Topology,
    repo: std::path::PathBuf,
    state: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Host<'_> {
    fn apply(&self, kdl: &str, now: &str) {
        std::fs::write(self.repo.join("fwc.kdl"), kdl).unwrap();
        let o = fwc(
            &["apply", self.repo.to_str().unwrap(), "--state-dir", self.state.to_str().unwrap(), "--netns", &self.t.host.name, "--auto-approve"],
            now,
            &self.log,
        );
        assert!(o.status.success(), "fwc apply failed:\n{}", text(&o));
    }

    fn rollback(&self, now: &str) {
        let o = fwc(&["rollback", "--state-dir", self.state.to_str().unwrap(), "--netns", &self.t.host.name, "--auto-approve"], now, &self.log);
        assert!(o.status.success(), "fwc rollback failed:\n{}", text(&o));
    }

    /// `fwc status --json`'s quota of forward "dl": (used, limit, used up, period end).
    fn quota(&self, now: &str) -> (u64, u64, bool, String) {
        let o = fwc(&["status", "--json", "--state-dir", self.state.to_str().unwrap(), "--netns", &self.t.host.name], now, &self.log);
        assert!(o.status.success(), "fwc status failed:\n{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        valid_status(&v);
        // A quota's count is not drift.
        assert_eq!(v["drift"], false, "{}", v["drift_details"]);
        let q = v["quotas"].as_array().and_then(|a| a.iter().find(|q| q["rule"] == "dl")).unwrap_or_else(|| panic!("no quota in {v}"));
        (q["used_bytes"].as_u64().unwrap(), q["limit_bytes"].as_u64().unwrap(), q["used_up"].as_bool().unwrap(), q["period_end"].as_str().unwrap().into())
    }

    /// Download from the forward: the bytes that arrive before the connection ends or stalls
    /// (socat's -T: no data for 3 s ends it — a stall detector, the count is what is asserted).
    fn download(&self) -> u64 {
        let o = self.t.client.try_exec(&[
            "sh",
            "-c",
            "timeout 60 socat -T3 -u TCP4:198.18.1.1:8080,connect-timeout=3 - | wc -c",
        ]);
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0)
    }
}

/// `fwc status --json` with quotas is valid against schemas/output/status.schema.json.
fn valid_status(doc: &serde_json::Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/output/status.schema.json");
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let url = s["$id"].as_str().unwrap().to_string();
    let (mut schemas, mut compiler) = (boon::Schemas::new(), boon::Compiler::new());
    compiler.add_resource(&url, s).unwrap();
    let index = compiler.compile(&url, &mut schemas).unwrap();
    if let Err(e) = schemas.validate(doc, index) {
        panic!("fwc status --json does not match its schema: {e:#}\n{doc:#}");
    }
}

/// The backend serves BODY bytes on every connection to 198.18.2.2:80.
fn serve(t: &mut Topology) {
    t.backend.spawn(&["socat", "TCP4-LISTEN:80,fork,reuseaddr", &format!("SYSTEM:head -c {BODY} /dev/zero")]);
    let start = Instant::now();
    // A generous deadline for the listener to come up, not a budget.
    while start.elapsed() < Duration::from_secs(60) {
        let o = t.backend.try_exec(&["ss", "-Hlnt", "sport = :80"]);
        if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the backend does not listen");
}

const POLICY: &str = r#"fwc 1
forward "dl" listen=":8080" to="198.18.2.2:80" quota="2MB/day"
"#;

const UNRELATED: &str = r#"fwc 1
forward "dl" listen=":8080" to="198.18.2.2:80" quota="2MB/day"
input {
    allow "ssh" proto=tcp port=22
}
"#;

#[test]
fn a_tiny_quota_stops_a_transfer_keeps_its_count_and_resets_the_next_day() {
    if !privileged("quota_traffic") || !tool("quota_traffic", "socat", "socat") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t);
    let dir = tempfile::tempdir().unwrap();
    let h = Host { t: &t, repo: dir.path().join("repo"), state: dir.path().join("state"), log: dir.path().join("batches.jsonl") };
    std::fs::create_dir_all(&h.repo).unwrap();
    h.apply(POLICY, DAY1);

    // Under the quota a download flows; past it the kernel drops the rest.
    let got = h.download();
    assert!(got > 0 && got < BODY, "the download should start and stop past the quota, got {got} bytes");
    assert!(got <= LIMIT, "more than the quota came through: {got} bytes");
    let (used, limit, used_up, end) = h.quota(DAY1);
    eprintln!("downloaded {got} bytes; the kernel counted {used} of {limit}");
    assert_eq!(limit, LIMIT);
    assert!(used >= LIMIT && used_up, "the kernel counted {used} bytes");
    assert_eq!(end, "2026-11-27T00:00:00Z");
    assert_eq!(h.download(), 0, "a new connection gets through a used-up quota");

    // An unrelated commit: the quota object is not touched (the batch has no quota in it)
    // and stays used up.
    let before = std::fs::read_to_string(&h.log).unwrap_or_default().lines().count();
    h.apply(UNRELATED, DAY1);
    let batches = std::fs::read_to_string(&h.log).unwrap();
    let new: Vec<&str> = batches.lines().skip(before).collect();
    assert!(!new.is_empty() && new.iter().all(|b| !b.contains("\"quota\":{")), "the unrelated apply touched the quota: {new:?}");
    assert!(h.quota(DAY1).0 >= used, "an unrelated commit reset the quota");
    assert_eq!(h.download(), 0, "an unrelated commit let traffic through a used-up quota");

    // fwc rollback (back to the first generation): still used up.
    h.rollback(DAY1);
    assert!(h.quota(DAY1).0 >= used, "a rollback reset the quota");
    assert_eq!(h.download(), 0);

    // A reboot: the kernel's table is gone, the state dir stays; the next fwc process (an
    // agent restarting, `fwc apply`) recreates the quota from the ledger, not from zero.
    t.host.exec(&["nft", "delete", "table", "inet", "fwc"]);
    h.apply(UNRELATED, DAY1);
    let (after, _, used_up, _) = h.quota(DAY1);
    assert!(after >= LIMIT && used_up, "the reboot reset the quota to {after}");
    assert_eq!(h.download(), 0, "after a reboot the used-up quota let traffic through");

    // A bigger quota: the count carries over (the object is updated in place, not recreated),
    // so only the difference comes through.
    h.apply(&UNRELATED.replace("2MB/day", "3MB/day"), DAY1);
    let (carried, limit, used_up, _) = h.quota(DAY1);
    assert!(carried >= LIMIT && limit == 3_000_000 && !used_up, "a changed limit lost the count: {carried} of {limit}");
    let more = h.download();
    eprintln!("after raising the quota to 3MB: downloaded {more} bytes");
    assert!(more > 0 && more <= 1_000_000, "a raised quota should let about 1 MB more through, got {more}");
    h.apply(UNRELATED, DAY1);
    assert_eq!(h.download(), 0, "back to 2MB/day: used up again");

    // The next day (by the injected clock) the quota starts again.
    let (reset, _, used_up, end) = h.quota(DAY2);
    assert!(reset < LIMIT && !used_up, "the reset did not happen: {reset}");
    assert_eq!(end, "2026-11-28T00:00:00Z");
    let got = h.download();
    eprintln!("after the reset ({reset} bytes counted): downloaded {got} bytes");
    assert!(got > 0 && got <= LIMIT, "after the reset the download should flow up to the quota again, got {got}");
    // The ledger has the new period.
    let ledger: serde_json::Value = serde_json::from_slice(&std::fs::read(h.state.join("quota.json")).unwrap()).unwrap();
    assert_eq!(ledger["quotas"]["forward:dl"]["period_start"], 1_795_737_600i64, "{ledger}");
}

/// A userspace forward's quota is charged by its clients' packets to and from the listen port
/// (the forwarder's own connections to the target are not counted twice): it stops a download
/// past it too, and the next day resets it.
#[test]
fn a_userspace_forwards_quota_stops_a_transfer_and_resets() {
    if !privileged("quota_traffic_userspace") || !tool("quota_traffic_userspace", "socat", "socat") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    t.host.spawn_forwarder(env!("CARGO_BIN_EXE_fwc"), &state);
    let h = Host { t: &t, repo: dir.path().join("repo"), state, log: dir.path().join("batches.jsonl") };
    std::fs::create_dir_all(&h.repo).unwrap();
    h.apply(&POLICY.replace("quota=", "backend=\"userspace\" quota="), DAY1);
    stops_then_resets(&h, "userspace");
}

/// A download stops at the quota, a new one gets nothing, and the next day one flows again.
fn stops_then_resets(h: &Host, what: &str) {
    let got = h.download();
    let (used, limit, used_up, _) = h.quota(DAY1);
    eprintln!("{what}: downloaded {got} bytes; the kernel counted {used} of {limit}");
    assert!(got > 0 && got <= LIMIT, "{what}: the download should start and stop at the quota, got {got} bytes");
    assert!(used >= LIMIT && used_up, "{what}: the kernel counted {used} bytes");
    assert_eq!(h.download(), 0, "{what}: a new download gets through a used-up quota");

    let (reset, _, used_up, _) = h.quota(DAY2);
    assert!(reset < LIMIT && !used_up, "{what}: the reset did not happen: {reset}");
    let got = h.download();
    assert!(got > 0 && got <= LIMIT, "{what}: after the reset the download should flow up to the quota again, got {got}");
}

/// A shape's quota is charged by the packets its QoS class takes (here: the downloads leaving
/// towards the client), with the real eBPF program attached: it stops a download past it, and
/// the next day resets it.
#[test]
fn a_shapes_quota_stops_a_transfer_and_resets() {
    if !privileged("quota_traffic_shape") || !tool("quota_traffic_shape", "socat", "socat") {
        return;
    }
    let mut t = Topology::new();
    serve(&mut t);
    let dir = tempfile::tempdir().unwrap();
    let h = Host { t: &t, repo: dir.path().join("repo"), state: dir.path().join("state"), log: dir.path().join("batches.jsonl") };
    std::fs::create_dir_all(&h.repo).unwrap();
    let policy = format!(
        "fwc 1\nforward \"web\" listen=\":8080\" to=\"198.18.2.2:80\"\nshape \"dl\" from=\"198.18.1.2\" rate=\"1gbit\" dev={} quota=\"2MB/day\"\n",
        t.host_if_client
    );
    h.apply(&policy, DAY1);
    stops_then_resets(&h, "shape");
}
