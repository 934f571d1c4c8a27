//! Privileged tests of big static set changes: a change of a big static set costs what it changes.
//! A one-element change of a 60,000-element set file is one element delta in the nft batch
//! (applied from an artifact dir, from the repository, and rolled back); generations store
//! the big `nftables.json` in content-defined chunks that the next generation shares except
//! where it changed, and a damaged chunk is refused like a damaged file; an element deleted
//! behind fwc's back is named by `fwc plan` and `fwc status` alike, also in a set big enough to
//! be split into shards, where the agent's drift check names and heals it too, putting back only
//! the drifted elements (packets dropped again); real nft, in
//! `fwc-t-*` namespaces; no timing is asserted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fwc_testkit::{privileged, Netns, output_text as text, batch_ops as ops};
use serde_json::Value;

const N: u32 = 60_000;
/// Above `setlayout::SHARD_MAX` (65,536): the /32 set is split into shards.
const SHARDED: u32 = 70_000;

struct Host {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    out: PathBuf,
    state: PathBuf,
    batches: PathBuf,
    ns: String,
    /// Addresses in the list.
    n: u32,
}

impl Host {
    fn new(ns: &Netns) -> Host {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("lists")).unwrap();
        std::fs::write(
            repo.join("fwc.kdl"),
            "fwc 1\nset \"big\" file=\"lists/big.netset\"\ninput {\n    deny \"big\" from=\"@big\"\n}\n",
        )
        .unwrap();
        Host {
            out: tmp.path().join("art"),
            state: tmp.path().join("state"),
            batches: tmp.path().join("batches.jsonl"),
            ns: ns.name.clone(),
            n: N,
            repo,
            _tmp: tmp,
        }
    }

    /// The list: N /32s (every other address from 46.0.0.0), without `skip`, plus `extra`.
    fn list(&self, skip: Option<u32>, extra: &str) {
        let mut s = String::new();
        for i in (0..self.n).filter(|i| Some(*i) != skip) {
            s.push_str(&format!("{}\n", std::net::Ipv4Addr::from(0x2e00_0000 + 2 * i)));
        }
        s.push_str(extra);
        std::fs::write(self.repo.join("lists/big.netset"), s).unwrap();
    }

    fn fwc(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
        c.args(args)
            .env("NO_COLOR", "1")
            .env("FWC_NFT_BATCH_LOG", &self.batches)
            .env_remove("FWC_TEST_FAIL")
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    }

    fn on_host(&self, args: &[&str]) -> Output {
        let mut a = args.to_vec();
        a.extend(["--state-dir", self.state.to_str().unwrap(), "--netns", &self.ns]);
        self.fwc(&a)
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.on_host(args);
        assert!(o.status.success(), "fwc {args:?} failed:\n{}", text(&o));
        text(&o)
    }

    /// Compile the repository into an artifact dir and apply that (as the benchmark does).
    fn apply_compiled(&self) -> String {
        let _ = std::fs::remove_dir_all(&self.out);
        let o = self.fwc(&["compile", self.repo.to_str().unwrap(), "--out", self.out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        self.ok(&["apply", self.out.to_str().unwrap(), "--auto-approve"])
    }

    fn last_batch(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(&self.batches).unwrap();
        let v: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
        v["nftables"].as_array().unwrap().clone()
    }

    fn current_gen(&self) -> PathBuf {
        let st: Value = serde_json::from_slice(&std::fs::read(self.state.join("state.json")).unwrap()).unwrap();
        self.state.join(st["current"].as_str().unwrap())
    }
}

fn blobs(gen: &Path) -> BTreeSet<String> {
    let parts: Value = serde_json::from_slice(&std::fs::read(gen.join("nftables.json.parts")).expect("stored in pieces")).unwrap();
    parts["pieces"].as_array().unwrap().iter().filter_map(|p| p["blob"].as_str().map(str::to_string)).collect()
}

#[test]
fn one_element_of_a_big_set_is_one_element_delta_and_generations_share_chunks() {
    if !privileged("one_element_of_a_big_set_is_one_element_delta_and_generations_share_chunks") {
        return;
    }
    let ns = Netns::new("bsc");
    let h = Host::new(&ns);
    h.list(None, "");
    h.apply_compiled();
    let g1 = h.current_gen();
    assert!(!g1.join("nftables.json").exists(), "a big nftables.json is stored in pieces");
    let b1 = blobs(&g1);
    assert!(b1.len() >= 3, "{b1:?}");

    // One /32 more, applied from an artifact dir: one `add set` carrying that element alone.
    h.list(None, "198.51.100.7\n");
    let out = h.apply_compiled();
    assert!(out.contains("+ 198.51.100.7"), "the plan names the element:\n{out}");
    let batch = h.last_batch();
    assert_eq!(ops(&batch), ["add set"], "{batch:?}");
    assert_eq!(batch[0]["add"]["set"]["elem"], serde_json::json!(["198.51.100.7"]));
    let g2 = h.current_gen();
    let b2 = blobs(&g2);
    assert!(b2.difference(&b1).count() <= 2 && b1.intersection(&b2).count() + 2 >= b1.len(), "the generations share all but the changed chunk:\n{b1:?}\n{b2:?}");

    // One /32 less, from the repository (compiled in-process): one `delete element`.
    h.list(Some(12_345), "198.51.100.7\n");
    std::fs::write(h.repo.join("fwc.kdl"), std::fs::read_to_string(h.repo.join("fwc.kdl")).unwrap()).unwrap();
    let out = h.ok(&["apply", h.repo.to_str().unwrap(), "--auto-approve"]);
    let gone = std::net::Ipv4Addr::from(0x2e00_0000 + 2 * 12_345).to_string();
    assert!(out.contains(&format!("- {gone}")), "{out}");
    let batch = h.last_batch();
    assert_eq!(ops(&batch), ["delete element"], "{batch:?}");
    assert_eq!(batch[0]["delete"]["element"]["elem"], serde_json::json!([gone]));
    let listed = ns.exec(&["nft", "list", "set", "inet", "fwc", "big_v4_32"]);
    assert!(!listed.contains(&format!("{gone},")) && listed.contains("198.51.100.7"), "{listed}");

    // Rollback to the previous generation (read back from its chunks): the element delta back.
    h.ok(&["rollback", "--auto-approve"]);
    let batch = h.last_batch();
    assert_eq!(ops(&batch), ["add set"], "{batch:?}");
    assert_eq!(batch[0]["add"]["set"]["elem"], serde_json::json!([gone]));
    assert!(ns.exec(&["nft", "list", "set", "inet", "fwc", "big_v4_32"]).contains(&gone));
    let st = h.ok(&["status"]);
    assert!(st.split_whitespace().collect::<Vec<_>>().join(" ").contains("Drift: no"), "{st}");

    // One /32 more in the middle of the file, from the repository: the set-file cache holds the
    // version before it (its text beside its entry), so only the changed line is read again;
    // the plan names exactly that element and the batch carries only it.
    h.list(None, "198.51.100.7\n"); // the rolled-back version, applied (nothing to change)
    let out = h.ok(&["apply", h.repo.to_str().unwrap(), "--auto-approve"]);
    assert!(!out.contains("+ ") && !out.contains("- "), "{out}");
    let mut lines: Vec<String> = std::fs::read_to_string(h.repo.join("lists/big.netset")).unwrap().lines().map(str::to_string).collect();
    lines.insert(30_000, "198.51.100.9".into());
    std::fs::write(h.repo.join("lists/big.netset"), lines.join("\n") + "\n").unwrap();
    let sets_dir: Vec<String> = std::fs::read_dir(h.state.join("sets")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(sets_dir.iter().any(|n| n.ends_with("-text.set")) && sets_dir.iter().any(|n| n.ends_with("-last.set")), "{sets_dir:?}");
    let out = h.ok(&["apply", h.repo.to_str().unwrap(), "--auto-approve"]);
    let element_lines: Vec<&str> = out.lines().map(str::trim).filter(|l| l.starts_with("+ ") || l.starts_with("- ")).collect();
    assert_eq!(element_lines, ["+ 198.51.100.9"], "{out}");
    let batch = h.last_batch();
    assert_eq!(ops(&batch), ["add set"], "{batch:?}");
    assert_eq!(batch[0]["add"]["set"]["elem"], serde_json::json!(["198.51.100.9"]));
    lines.remove(30_000);
    std::fs::write(h.repo.join("lists/big.netset"), lines.join("\n") + "\n").unwrap();
    let out = h.ok(&["apply", h.repo.to_str().unwrap(), "--auto-approve"]);
    assert!(out.contains("- 198.51.100.9"), "{out}");

    // Only the chunks of the kept generations stay.
    let kept: BTreeSet<String> = std::fs::read_dir(h.state.join("blobs")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let used: BTreeSet<String> = [h.current_gen()]
        .iter()
        .chain(std::fs::read_dir(&h.state).unwrap().map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("gen-")).collect::<Vec<_>>().iter())
        .flat_map(|g| blobs(g))
        .collect();
    assert_eq!(kept, used);

    // A damaged chunk is refused like a damaged file: nothing is loaded from that generation.
    let victim = h.state.join("blobs").join(blobs(&h.current_gen()).into_iter().next().unwrap());
    let original = std::fs::read(&victim).unwrap();
    let mut bad = original.clone();
    bad[10] ^= 1;
    std::fs::write(&victim, &bad).unwrap();
    let o = h.on_host(&["status"]);
    assert!(!o.status.success() && text(&o).contains("does not match its recorded digests"), "{}", text(&o));
    std::fs::write(&victim, &original).unwrap();
    h.ok(&["status"]);
}

#[test]
fn an_element_deleted_behind_fwcs_back_is_named_by_plan_and_status() {
    if !privileged("an_element_deleted_behind_fwcs_back_is_named_by_plan_and_status") {
        return;
    }
    let ns = Netns::new("bsd");
    let mut h = Host::new(&ns);
    h.n = SHARDED;
    h.list(None, "");
    h.apply_compiled();
    // Split into shards by address bits (46.0.0.0/15 and 46.2.0.0/15), no unsplit set.
    let sets = ns.exec(&["nft", "-t", "list", "sets", "inet"]);
    assert!(sets.contains("set big_v4_32_s0 ") && sets.contains("set big_v4_32_s1 ") && !sets.contains("set big_v4_32 "), "{sets}");
    let victim = std::net::Ipv4Addr::from(0x2e00_0000 + 2 * 40_000).to_string();
    ns.exec(&["nft", "delete", "element", "inet", "fwc", "big_v4_32_s0", &format!("{{ {victim} }}")]);
    let plan = h.on_host(&["plan", h.out.to_str().unwrap()]);
    let plan = text(&plan);
    assert!(plan.contains(&format!("set big_v4_32_s0 (fwc.kdl:2:1): elements removed: {victim}")), "{plan}");
    let st = h.on_host(&["status"]);
    assert!(text(&st).contains(&format!("elements removed: {victim}")), "status and plan agree:\n{}", text(&st));
    // An element added behind fwc's back too, in the other shard.
    ns.exec(&["nft", "add", "element", "inet", "fwc", "big_v4_32_s1", "{ 46.3.0.1 }"]);
    let st = text(&h.on_host(&["status"]));
    assert!(st.contains("set big_v4_32_s1 (fwc.kdl:2:1): elements added outside fwc: 46.3.0.1") && st.contains(&victim), "{st}");
    // The apply puts back only those two elements (no whole-table replace) and both agree again.
    let plan = text(&h.on_host(&["plan", h.out.to_str().unwrap()]));
    assert!(plan.contains("2 elements changed outside fwc put back") && !plan.contains("full replace"), "{plan}");
    h.ok(&["apply", h.out.to_str().unwrap(), "--auto-approve"]);
    assert_only_the_drift_put_back(&h.last_batch(), &victim, "46.3.0.1");
    assert!(h.ok(&["status"]).split_whitespace().collect::<Vec<_>>().join(" ").contains("Drift: no"));
    assert!(!h.ok(&["plan", h.out.to_str().unwrap()]).contains("elements removed"));

    // The agent's drift check (`--drift heal`) names the element and puts it back.
    let agent_ns = Netns::new("bsa");
    let git = |args: &[&str]| {
        let o = Command::new("git").args(["-c", "user.email=t@fwc.invalid", "-c", "user.name=t"]).args(args).current_dir(&h.repo).output().unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "big set"]);
    let agent_state = h.out.with_file_name("agent-state");
    let agent = || {
        let o = h.fwc(&[
            "agent", "--once", "--repo", &format!("file://{}", h.repo.display()), "--host", "localhost", "--branch", "main",
            "--netns", &agent_ns.name, "--state-dir", agent_state.to_str().unwrap(), "--metrics", "off", "--no-forwarder", "--drift", "heal",
        ]);
        text(&o)
    };
    agent();
    // A client at the victim's address and at the one added behind fwc's back below (46.1.0.1
    // and 46.3.0.1 are odd: not in the list) connects to a closed port of the agent's host:
    // refused (curl's 7) when the SYN passes the input chain, a timeout (28) when it is dropped.
    let client = Netns::new("bsk");
    fwc_testkit::veth(&agent_ns, &["46.1.0.1/14"], &client, &[&format!("{victim}/14"), "46.3.0.1/14"]);
    let passes = |from: &str| {
        let o = client.try_exec(&["curl", "-s", "--connect-timeout", "3", "--interface", from, "http://46.1.0.1:9/"]);
        assert!(matches!(o.status.code(), Some(7 | 28)), "curl from {from}: {}", text(&o));
        o.status.code() == Some(7)
    };
    assert!(!passes(&victim) && passes("46.3.0.1"), "the list as applied: the victim dropped, the other passes");
    agent_ns.exec(&["nft", "delete", "element", "inet", "fwc", "big_v4_32_s0", &format!("{{ {victim} }}")]);
    agent_ns.exec(&["nft", "add", "element", "inet", "fwc", "big_v4_32_s1", "{ 46.3.0.1 }"]);
    assert!(passes(&victim) && !passes("46.3.0.1"), "the drift is live: the victim passes, the added one is dropped");
    let log = agent();
    assert!(log.contains(&format!("elements removed: {victim}")) && log.contains("elements added outside fwc: 46.3.0.1"), "the agent names both:\n{log}");
    // The heal's batch carries those two elements and nothing else.
    assert_only_the_drift_put_back(&h.last_batch(), &victim, "46.3.0.1");
    let listed = agent_ns.exec(&["nft", "get", "element", "inet", "fwc", "big_v4_32_s0", &format!("{{ {victim} }}")]);
    assert!(listed.contains(&victim), "the agent put it back:\n{listed}\n{log}");
    assert!(!passes(&victim) && passes("46.3.0.1"), "healed: the victim is dropped again, the other passes again");
    assert!(!agent().contains("elements removed"), "healed: no drift left");
}

/// A batch that puts back `removed` (deleted behind fwc's back from shard 0) and deletes
/// `added` (added behind its back to shard 1): those two elements, nothing else.
fn assert_only_the_drift_put_back(batch: &[Value], removed: &str, added: &str) {
    assert_eq!(ops(batch), ["delete element", "add set"], "{batch:?}");
    assert_eq!(batch[0]["delete"]["element"]["name"], "big_v4_32_s1", "{batch:?}");
    assert_eq!(batch[0]["delete"]["element"]["elem"], serde_json::json!([added]), "{batch:?}");
    assert_eq!(batch[1]["add"]["set"]["name"], "big_v4_32_s0", "{batch:?}");
    assert_eq!(batch[1]["add"]["set"]["elem"], serde_json::json!([removed]), "{batch:?}");
}
