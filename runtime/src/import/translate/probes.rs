//! What the proof samples besides the imported rules: the matches of EVERY rule of the
//! original, on every hook, whether it was imported, merged, refused or left out. Each rule's
//! addresses, ports, protocol and interfaces are read leniently (a match fwc cannot express
//! still gives its values), so a rule lost on the way shows as a flow the original and the
//! import decide differently.

use serde_json::Value;

use std::collections::{BTreeMap, BTreeSet};

use super::parse::*;
use super::tx::*;
use crate::import::model::*;
use crate::import::naming::Names;

/// The fwc chains whose flows a hook's rules decide: a prerouting rule sees what is
/// delivered here and what is routed through.
fn kinds_of(hook: Option<&str>) -> &'static [&'static str] {
    match hook {
        Some("input") => &["input"],
        Some("forward") => &["forward"],
        Some("output") => &["output"],
        Some("postrouting") => &["forward", "output"],
        Some("prerouting" | "ingress") => &["input", "forward"],
        // A nat chain's DNAT to one of this host's addresses: fwc's forwards listen there
        // (the flows to them are input flows).
        Some("dnat") => &["input"],
        // A DNAT without a destination also rewrites what is routed through to other hosts:
        // those flows are sampled too, so a difference there shows.
        Some("dnat-any") => &["input", "forward"],
        _ => &["input", "forward", "output"],
    }
}

/// Probe conditions of every rule of `listing` (without the parts others own), as rules of
/// synthetic chains (one per fwc chain kind) for [`crate::import::proof::sample`].
pub fn probe_chains(listing: &Value) -> Vec<Chain> {
    let origins = Origins::new();
    let mut tx = Tx {
        chains: BTreeMap::new(),
        sets: BTreeMap::new(),
        origins: &origins,
        out: Imported::default(),
        names: Names::default(),
        notes: BTreeSet::new(),
        grouped: BTreeMap::new(),
        passed_over: Vec::new(),
        invalid_dropped: None,
    };
    tx.read(listing);
    let mut out: Vec<Chain> = ["input", "forward", "output"].into_iter().map(|kind| Chain { kind, policy: "accept", reject_with: None, rules: Vec::new(), part: None }).collect();
    for c in tx.chains.values() {
        if !matches!(c.family.as_str(), "ip" | "ip6" | "inet" | "netdev" | "bridge") {
            continue;
        }
        let exprs = c.rules.iter().flat_map(|r| {
            let expr = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            flatten_vmap(&expr).unwrap_or_else(|| vec![expr])
        });
        for expr in exprs {
            let mut cond = tx.probe_cond(&c.family, &c.table, &expr);
            match c.family.as_str() {
                "ip" => cond.family = Some(Family::V4),
                "ip6" => cond.family = Some(Family::V6),
                _ => {}
            }
            if cond == Cond::default() {
                continue;
            }
            let dnat = expr.iter().any(|e| e.get("dnat").is_some() || e.get("redirect").is_some());
            let hook = match dnat || (c.kind == "nat" && c.hook.as_deref() == Some("prerouting")) {
                true if cond.to.is_none() && dnat => Some("dnat-any"),
                true => Some("dnat"),
                false => c.hook.as_deref(),
            };
            for kind in kinds_of(hook) {
                let chain = out.iter_mut().find(|x| x.kind == *kind).expect("three kinds");
                for cond in expand_ifaces(&cond) {
                    if !chain.rules.iter().any(|r| r.cond == cond) {
                        chain.rules.push(Rule { name: String::new(), verb: Verb::Deny, cond, rate: None, per_source: false, log: false, log_prefix: None, log_rate: None, comment: None, origin: String::new() });
                    }
                }
            }
        }
    }
    out
}

impl Tx<'_> {
    /// The values of a rule's matches, each read on its own (negated ones too: the flows sit
    /// on both sides of a boundary anyway); what cannot be read is skipped.
    fn probe_cond(&self, family: &str, table: &str, expr: &[Value]) -> Cond {
        let mut cond = Cond::default();
        for e in expr {
            let Some(m) = e.get("match") else { continue };
            let mut m = m.clone();
            let Some(obj) = m.as_object_mut() else { continue };
            obj.insert("op".into(), Value::from("=="));
            let Ok((c, _)) = self.parse(family, table, &[serde_json::json!({ "match": m })]) else { continue };
            if let Ok(merged) = merge(&cond, &c) {
                cond = merged;
            }
        }
        cond
    }
}
