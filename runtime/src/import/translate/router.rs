//! A router's two forms among the original's rules: reverse-path filtering (`fib saddr [. iif]
//! oif missing drop`, which is also how iptables-nft lists `-m rpfilter --invert -j DROP`)
//! becomes a `prerouting` deny with `rpfilter=`; MSS clamping (`tcp flags syn … tcp option
//! maxseg size set rt mtu` or `set 1452`: iptables' `-j TCPMSS --clamp-mss-to-pmtu` /
//! `--set-mss`) a `clamp-mss` rule of the forward block. The rule's other matches come along
//! as the shared parser reads them; a rule with matches the form does not take stays with the
//! caller (refused by name there).

use serde_json::Value;

use super::tx::*;
use crate::import::model::*;

/// `fib saddr [. mark] [. iif] oif missing` (also `oif 0`, `eq 0`): `strict` with `iif`,
/// `loose` without. (A mark in the lookup only matters with policy routing by mark.)
fn rpfilter_mode(e: &Value) -> Option<&'static str> {
    let m = e.get("match")?;
    let fib = m.pointer("/left/fib")?;
    if fib.get("result")?.as_str()? != "oif" {
        return None;
    }
    let flags: Vec<&str> = fib.get("flags")?.as_array()?.iter().filter_map(Value::as_str).collect();
    if !flags.contains(&"saddr") || flags.iter().any(|f| !matches!(*f, "saddr" | "iif" | "mark")) {
        return None;
    }
    let right = m.get("right")?;
    let missing = *right == Value::Bool(false) || right.as_u64() == Some(0) || right.as_str() == Some("0");
    (m.get("op").and_then(Value::as_str).unwrap_or("==") == "==" && missing).then_some(if flags.contains(&"iif") { "strict" } else { "loose" })
}

/// `tcp option maxseg size set rt mtu` (`Some(None)`) / `… set 1452` (`Some(Some(1452))`).
fn clamp_to(e: &Value) -> Option<Option<u16>> {
    let m = e.get("mangle")?;
    if m.pointer("/key/tcp option/name")?.as_str()? != "maxseg" {
        return None;
    }
    let v = m.get("value")?;
    if v.pointer("/rt/key").and_then(Value::as_str) == Some("mtu") {
        return Some(None);
    }
    v.as_u64().and_then(|n| u16::try_from(n).ok()).map(Some)
}

/// Does the rule set a SYN's MSS (`tcp option maxseg size set …`)?
pub(super) fn is_clamp(expr: &[Value]) -> bool {
    expr.iter().any(|e| clamp_to(e).is_some())
}

/// Could this rule, before a clamp in its chain, end a SYN's way through the chain (a verdict,
/// a jump or a verdict map, unless it matches established/related packets only)? Then the
/// original clamps only what gets past it, while fwc's clamp-mss sees every routed SYN.
fn ends_syns(rule: &Value) -> bool {
    let expr = rule.get("expr").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let verdict = expr.iter().any(|e| ["accept", "drop", "reject", "jump", "goto", "return", "vmap", "queue"].iter().any(|k| e.get(*k).is_some()));
    let established_only = expr.iter().any(|e| {
        let state = e.pointer("/match/left/ct/key").and_then(Value::as_str) == Some("state");
        let right = e.pointer("/match/right");
        let words: Vec<&str> = match right {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(Value::Object(o)) => o.get("set").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        state && !words.is_empty() && words.iter().all(|w| matches!(*w, "established" | "related"))
    });
    verdict && !established_only
}

/// A match of SYNs: `tcp flags syn` (`in`), `tcp flags & (syn|rst) == syn`, `tcp flags syn / …`.
fn syn_match(e: &Value) -> bool {
    let Some(m) = e.get("match") else { return false };
    let left = m.get("left").unwrap_or(&Value::Null);
    let flags = left.pointer("/payload/field").and_then(Value::as_str) == Some("flags")
        || left.pointer("/&/0/payload/field").and_then(Value::as_str) == Some("flags");
    flags && m.get("right").and_then(Value::as_str) == Some("syn") && matches!(m.get("op").and_then(Value::as_str), Some("==" | "in"))
}

impl Tx<'_> {
    /// Rule `expr` of chain `c` on `hook` as one of the router forms: the fwc block it belongs
    /// to and the rule, or `None` (not one of them, or with matches the form does not take).
    /// `index`: the rule's place in `c` (a clamp after a rule that can end a SYN's way is not
    /// fwc's clamp-mss, which sees every routed SYN).
    pub(super) fn router_form(&mut self, c: &ChainInfo, hook: &str, index: usize, expr: &[Value], origin: &str) -> Option<(&'static str, Rule)> {
        if hook == "prerouting" {
            let mode = expr.iter().find_map(rpfilter_mode)?;
            let rest: Vec<Value> = expr.iter().filter(|e| rpfilter_mode(e).is_none()).cloned().collect();
            let (mut cond, st) = self.parse(&c.family, &c.table, &rest).ok()?;
            if st.verdict.as_deref() != Some("drop") || cond.oif.is_some() || st.limit.is_some() || st.dnat.is_some() || st.fib_other || st.fib_local || st.ct_dnat {
                return None;
            }
            cond.rpfilter = Some(mode.into());
            if cond.family.is_none() && c.family != "inet" {
                cond.family = Some(if c.family == "ip6" { Family::V6 } else { Family::V4 });
            }
            let name = self.unique(&match &cond.iif {
                Some(i) => format!("rpfilter-{i}"),
                None => "rpfilter".into(),
            });
            let rule = Rule { name, verb: Verb::Deny, cond, rate: None, per_source: false, log: st.log, log_prefix: st.log_prefix, log_rate: None, comment: None, origin: origin.to_string() };
            return Some(("prerouting", rule));
        }
        if hook != "forward" {
            return None;
        }
        let to = expr.iter().find_map(clamp_to)?;
        if !expr.iter().any(syn_match) || c.rules[..index.min(c.rules.len())].iter().any(ends_syns) {
            return None;
        }
        let rest: Vec<Value> = expr.iter().filter(|e| clamp_to(e).is_none() && !syn_match(e)).cloned().collect();
        let (mut cond, st) = self.parse(&c.family, &c.table, &rest).ok()?;
        if st.verdict.is_some() || st.log || st.limit.is_some() {
            return None;
        }
        // Only what clamp-mss takes: interfaces and addresses (it is TCP by itself).
        if cond.proto.as_deref().is_some_and(|p| p != "tcp") {
            return None;
        }
        cond.proto = None;
        let bare = Cond { iif: None, oif: None, from: None, to: None, family: None, not: Not { from: false, to: false, iif: false, oif: false, ..cond.not }, ..cond.clone() };
        if bare != Cond::default() {
            return None;
        }
        if cond.family.is_none() && c.family != "inet" {
            cond.family = Some(if c.family == "ip6" { Family::V6 } else { Family::V4 });
        }
        let name = self.unique(&match &cond.oif {
            Some(o) => format!("clamp-mss-{o}"),
            None => "clamp-mss".into(),
        });
        let rule = Rule { name, verb: Verb::ClampMss(to), cond, rate: None, per_source: false, log: false, log_prefix: None, log_rate: None, comment: None, origin: origin.to_string() };
        Some(("forward", rule))
    }

    /// Add `r` to fwc's `kind` block (made, with policy accept, when the import has none).
    pub(super) fn add_to_block(&mut self, kind: &'static str, r: Rule) {
        match self.out.chains.iter_mut().find(|c| c.kind == kind) {
            Some(c) => c.rules.push(r),
            None => self.out.chains.push(Chain { kind, policy: "accept", reject_with: None, rules: vec![r], part: None }),
        }
    }
}
