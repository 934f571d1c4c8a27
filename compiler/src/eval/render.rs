//! Text rendering of an [`Explanation`] for `fwc explain`: the hooks in order, each rule that
//! matched (with its KDL file:line:column when it stands for an fwc rule), then the summary.
//! Deterministic, so it is snapshot-tested.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Effect, Explanation, Hit};
use crate::diag::Location;

fn at(locs: &BTreeMap<String, Location>, identity: Option<&str>) -> String {
    match identity.and_then(|id| locs.get(id)) {
        Some(l) => format!("  {}:{}:{}", l.file, l.line, l.column),
        None => String::new(),
    }
}

fn effect(e: &Effect) -> String {
    match e {
        Effect::Verdict { verdict } => verdict.as_str().to_string(),
        Effect::Jump { chain } => format!("jump {chain}"),
        Effect::Goto { chain } => format!("goto {chain}"),
        Effect::Return => "return".into(),
        Effect::Dnat { addr, port } => match (addr, port) {
            (std::net::IpAddr::V6(a), Some(p)) => format!("dnat to [{a}]:{p}"),
            (a, Some(p)) => format!("dnat to {a}:{p}"),
            (a, None) => format!("dnat to {a} (port kept)"),
        },
        Effect::Masquerade => "masquerade".into(),
        Effect::Snat { addr } => format!("snat to {addr}"),
        Effect::SetMark { which, value } => format!("{which} set {value:#010x}"),
        Effect::ClampMss { to } => format!("tcp option maxseg size set {to} (MSS clamped; the verdict is the filter chains')"),
        Effect::Continue => "continue".into(),
    }
}

fn hit_line(out: &mut String, h: &Hit, locs: &BTreeMap<String, Location>) {
    let who = h.identity.as_deref().unwrap_or("(fwc built-in)");
    let effects: Vec<String> = h.effects.iter().map(effect).collect();
    let matches = if h.matches.is_empty() { String::new() } else { format!("{} => ", h.matches) };
    let _ = write!(out, "    {:<14} #{:<3} {:<28} {matches}{}", h.chain, h.index, who, effects.join(", "));
    let _ = writeln!(out, "{}", at(locs, h.identity.as_deref()));
    for n in &h.notes {
        let _ = writeln!(out, "{:>25}note: {n}", "");
    }
}

/// Render `x` (rule locations from [`super::rule_locations`]; empty when unknown, e.g. `--live`).
pub fn text(x: &Explanation, host: &str, locs: &BTreeMap<String, Location>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "flow:    {}", x.flow);
    let _ = writeln!(out, "host:    {host}");
    let _ = writeln!(out, "path:");
    for s in &x.steps {
        let dir = if s.direction == "reply" { " (replies)" } else { "" };
        let _ = writeln!(out, "  {}{dir}: chains {} -> {}", s.hook, if s.chains.is_empty() { "(none)".into() } else { s.chains.join(", ") }, s.verdict.as_str());
        if s.hits.is_empty() {
            let _ = writeln!(out, "    (no rule matched)");
        }
        for h in &s.hits {
            hit_line(&mut out, h, locs);
        }
    }
    let _ = writeln!(out, "verdict: {} (decided by {}){}", x.verdict.as_str(), x.decided_by.what, at(locs, x.decided_by.identity.as_deref()));
    for l in &x.limits {
        let _ = writeln!(out, "limit:   {l}");
    }
    match x.dnat {
        Some((a, p)) => {
            let target = if a.is_ipv6() { format!("[{a}]:{p}") } else { format!("{a}:{p}") };
            let by = x.dnat_rule.as_deref().unwrap_or("(unnamed)");
            let _ = writeln!(out, "dnat:    {target} by {by}{}{}", at(locs, x.dnat_rule.as_deref()), if x.masquerade { ", masqueraded" } else { "" });
        }
        None => match &x.dnat_name {
            Some(name) => {
                let by = x.dnat_rule.as_deref().unwrap_or("(unnamed)");
                let _ = writeln!(out, "dnat:    the addresses of {name} (the forwarder resolves the name) by {by}{}", at(locs, x.dnat_rule.as_deref()));
            }
            None => {
                let _ = writeln!(out, "dnat:    none");
            }
        },
    }
    if let Some(sn) = &x.snat {
        let to = match sn.to {
            Some(a) => format!("source {a}"),
            None => "source: the out interface's address (masquerade)".into(),
        };
        let _ = writeln!(out, "snat:    {to} by {}{}", sn.rule, at(locs, Some(&sn.rule)));
    }
    if x.qos.is_empty() {
        let _ = writeln!(out, "qos:     no class");
    }
    for q in &x.qos {
        let id = format!("fwc:{}:{}", if locs.contains_key(&format!("fwc:shape:{}", q.rule)) { "shape" } else { "forward" }, q.rule);
        let _ = writeln!(out, "qos:     class {} of \"{}\" ({}){}", q.id, q.rule, format!("{:?}", q.direction).to_lowercase(), at(locs, Some(&id)));
    }
    match &x.userspace {
        Some(u) => {
            let id = format!("fwc:forward:{}", u.rule);
            let who = if u.allowed { format!("takes it: listener {} -> {}", u.listen, u.targets.join(", ")) } else { format!("listener {} refuses this client (allow_from)", u.listen) };
            let _ = writeln!(out, "userspace forwarder: \"{}\" {who}{}", u.rule, at(locs, Some(&id)));
        }
        None => {
            let _ = writeln!(out, "userspace forwarder: not involved");
        }
    }
    out
}
