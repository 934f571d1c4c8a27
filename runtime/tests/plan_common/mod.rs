//! A rule repository applied with the real `fwc` binary inside a `fwc-t-*` namespace, for the
//! tests that hold an apply to its plan (apply_plan_promise, apply_plan_property) and the
//! nftables diff tests (apply_nft_diff).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use fwc_testkit::output_text as text;
use serde_json::Value;

pub struct Repo {
    _tmp: tempfile::TempDir,
    pub repo: PathBuf,
    pub state: PathBuf,
    pub batches: PathBuf,
    pub ns: String,
}

impl Repo {
    pub fn new(ns: &str) -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        Repo { repo, state: tmp.path().join("state"), batches: tmp.path().join("batches.jsonl"), ns: ns.to_string(), _tmp: tmp }
    }

    pub fn fwc(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fwc"));
        c.args(args)
            .args(["--state-dir", self.state.to_str().unwrap(), "--netns", &self.ns])
            .env("NO_COLOR", "1")
            .env("FWC_NFT_BATCH_LOG", &self.batches)
            .env_remove("FWC_TEST_FAIL")
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    }

    /// Write the repository's files (`fwc.kdl` and others: name, text).
    pub fn write(&self, files: &[(&str, &str)]) {
        for (name, body) in files {
            let p = self.repo.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
    }

    /// `fwc plan --json` of the repository as written.
    pub fn plan(&self) -> Value {
        let o = self.fwc(&["plan", self.repo.to_str().unwrap(), "--json"]);
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("plan --json: {e}\n{}", text(&o)))
    }

    /// Write `kdl` as fwc.kdl and return `fwc plan --json` of it.
    pub fn plan_json(&self, kdl: &str) -> Value {
        self.write(&[("fwc.kdl", kdl)]);
        self.plan()
    }

    /// Packets counted for the rule `kind` `name` (`fwc status --json`).
    pub fn counter(&self, kind: &str, name: &str) -> u64 {
        let o = self.fwc(&["status", "--json"]);
        let st: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("status --json: {e}\n{}", text(&o)));
        st["counters"].as_array().unwrap().iter().find(|c| c["rule"] == name && c["kind"] == kind).map(|c| c["packets"].as_u64().unwrap()).unwrap_or(0)
    }

    /// `fwc apply --auto-approve` (and `extra`) of the repository as written.
    pub fn apply_out(&self, extra: &[&str]) -> Output {
        let mut args = vec!["apply", self.repo.to_str().unwrap(), "--auto-approve"];
        args.extend_from_slice(extra);
        self.fwc(&args)
    }

    /// Write `kdl` as fwc.kdl and apply it; panics when the apply fails.
    pub fn apply(&self, kdl: &str) -> String {
        self.write(&[("fwc.kdl", kdl)]);
        let o = self.apply_out(&[]);
        assert!(o.status.success(), "fwc apply failed:\n{}", text(&o));
        text(&o)
    }

    /// The number of batches committed so far.
    pub fn batch_count(&self) -> usize {
        std::fs::read_to_string(&self.batches).map(|l| l.lines().count()).unwrap_or(0)
    }

    /// The batch the last commit sent to nft.
    pub fn last_batch(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(&self.batches).unwrap();
        let v: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
        v["nftables"].as_array().unwrap().clone()
    }

    /// [`Self::live`], or an empty listing before the first apply.
    pub fn live_or_empty(&self) -> Value {
        let o = Command::new("ip").args(["netns", "exec", &self.ns, "nft", "-j", "list", "table", "inet", "fwc"]).output().unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    }

    /// The live table as nft lists it (JSON, with handles, counters and elements).
    pub fn live(&self) -> Value {
        let o = Command::new("ip").args(["netns", "exec", &self.ns, "nft", "-j", "list", "table", "inet", "fwc"]).output().unwrap();
        assert!(o.status.success(), "nft list: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

/// Whether a batch deletes the whole table (a full replace).
pub fn replaces_table(batch: &[Value]) -> bool {
    batch.iter().any(|c| c.pointer("/delete/table").is_some())
}

/// A live rule without what changes while it lives (handle, counter values).
fn content(rule: &Value) -> String {
    let mut r = rule.clone();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("handle");
                if let Some(Value::Object(c)) = m.get_mut("counter") {
                    c.remove("packets");
                    c.remove("bytes");
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut r);
    r.to_string()
}

/// Rules by handle: (content, packets) of every rule of a listing.
pub fn rules_by_handle(live: &Value) -> BTreeMap<u64, (String, u64)> {
    live["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("rule"))
        .filter_map(|r| {
            let packets = r["expr"].as_array()?.iter().find_map(|e| e.pointer("/counter/packets")?.as_u64()).unwrap_or(0);
            Some((r["handle"].as_u64()?, (content(r), packets)))
        })
        .collect()
}

/// Elements of every set of a listing, by set name (as JSON text, expiry left out).
pub fn set_elements(live: &Value) -> BTreeMap<String, Vec<String>> {
    live["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("set"))
        .map(|s| {
            let mut e: Vec<String> = s["elem"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| match x.pointer("/elem/val") {
                    Some(v) => v.to_string(),
                    None => x.to_string(),
                })
                .collect();
            e.sort();
            (s["name"].as_str().unwrap_or_default().to_string(), e)
        })
        .collect()
}

/// Plan `kdl` over what `r` applied, apply it, and hold the apply to the plan: the same mode,
/// no fallback, and the rules the plan keeps keep their handles and counters (as many as it
/// said). Returns the plan.
pub fn apply_as_planned(r: &Repo, kdl: &str) -> Value {
    r.write(&[("fwc.kdl", kdl)]);
    let plan = r.plan();
    let before = rules_by_handle(&r.live_or_empty());
    let batches = r.batch_count();
    let o = r.apply_out(&[]);
    let out = text(&o);
    assert!(o.status.success(), "fwc apply failed:\n{out}");
    assert!(!out.contains("replacing the table whole"), "the apply fell back to a whole-table replace:\n{out}");
    let mode = plan["nftables"]["mode"].as_str().unwrap_or_default().to_string();
    if mode == "unchanged" {
        assert!(r.batch_count() == batches || r.last_batch().is_empty(), "plan said unchanged, the apply changed the table:\n{out}");
    } else {
        assert!(r.batch_count() > batches, "no batch committed:\n{out}");
        assert_eq!(replaces_table(&r.last_batch()), mode == "full-replace", "plan said {mode}:\n{out}");
    }
    let after = rules_by_handle(&r.live());
    let kept: Vec<_> = after.iter().filter(|(h, (c, _))| before.get(h).is_some_and(|(bc, _)| bc == c)).collect();
    if mode == "diff" {
        assert_eq!(kept.len() as u64, plan["nftables"]["rules_kept"].as_u64().unwrap(), "rules kept (plan: {:#})", plan["nftables"]);
    }
    for (h, (_, packets)) in kept {
        assert!(*packets >= before[h].1, "rule {h}: its counter went back from {} to {packets}", before[h].1);
    }
    plan
}

