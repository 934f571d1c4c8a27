//! One rule's statements in order: matches, counters and logs, limits, per-source sets,
//! quotas, verdicts and verdict maps, mark mangling, DNAT/SNAT/masquerade; what the rule did
//! ([`Hit`], [`Effect`]).

use std::net::IpAddr;

use serde_json::Value;

use super::expr::Cx;
use super::packet::{Packet, Val};
use super::table::{ChainDef, EvalError, RuleDef, Table, Verdict};

/// What a rule did, for the trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Effect {
    Verdict { verdict: Verdict },
    Jump { chain: String },
    Goto { chain: String },
    Return,
    Dnat { addr: IpAddr, port: Option<u16> },
    Masquerade,
    /// Source NAT to a fixed address.
    Snat { addr: IpAddr },
    SetMark { which: &'static str, value: u32 },
    /// MSS clamping: a SYN's MSS option set to `to` (`rt mtu`: the route's; or a number).
    /// Not a verdict.
    ClampMss { to: String },
    /// The rule matched but only counted or logged.
    Continue,
}

/// One rule that matched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Hit {
    pub chain: String,
    /// 0-based index of the rule in its chain.
    pub index: usize,
    /// The rule's matches in nft-like words (`ct status dnat`, `tcp dport 22`).
    pub matches: String,
    /// The rule's comment (`fwc:<kind>:<name>`), or of the map element that decided.
    pub identity: Option<String>,
    pub effects: Vec<Effect>,
    /// Things the evaluator assumed (a rate limit passes the first packet, …).
    pub notes: Vec<String>,
}

pub(super) enum Flowctl {
    Next,
    Verdict(Verdict),
    Jump(String),
    Goto(String),
    Return,
}

/// What one statement left for the rest of the rule.
enum Step {
    /// The rule goes on with its next statement.
    On,
    /// The rule ends here: `None` if a match failed (or a lookup missed), else what it does.
    End(Option<Flowctl>),
}

/// Evaluate one rule: `None` if a match failed (or a map lookup missed), else what it does.
pub(super) fn eval_rule(t: &Table, chain: &ChainDef, index: usize, rule: &RuleDef, p: &mut Packet, hit: &mut Hit) -> Result<Option<Flowctl>, EvalError> {
    let cx = Cx { t, chain: &chain.name, index, field: std::cell::Cell::new(crate::eval::headers::Field::Other) };
    for stmt in &rule.expr {
        let (kind, body) = stmt.as_object().and_then(|m| m.iter().next()).ok_or_else(|| cx.unsupported(format!("statement {stmt}")))?;
        let verdict = |hit: &mut Hit, v: Verdict| Step::End(Some(done(hit, Flowctl::Verdict(v))));
        let step = match kind.as_str() {
            "match" if cx.eval_match(body, p)? => Step::On,
            "match" => Step::End(None),
            "counter" => Step::On,
            "log" => {
                hit.notes.push("logged".into());
                Step::On
            }
            "limit" => rate_limit(body, hit),
            "ct count" => ct_count(&cx, body, hit)?,
            "set" => per_source_set(&cx, rule, body, p)?,
            "quota" => quota(&cx, rule, stmt, body, hit)?,
            "accept" => verdict(hit, Verdict::Accept),
            "drop" => verdict(hit, Verdict::Drop),
            "reject" => {
                if let Some(how) = reject_answer(body, p) {
                    hit.notes.push(how);
                }
                verdict(hit, Verdict::Reject)
            }
            "return" => Step::End(Some(done(hit, Flowctl::Return))),
            "jump" | "goto" => {
                let target = body.get("target").and_then(Value::as_str).ok_or_else(|| cx.unsupported(format!("{kind} {body}")))?.to_string();
                Step::End(Some(done(hit, if kind == "jump" { Flowctl::Jump(target) } else { Flowctl::Goto(target) })))
            }
            "vmap" => verdict_map(&cx, body, p, hit)?,
            "mangle" => mangle(&cx, body, p, hit)?,
            "dnat" => dnat(&cx, kind, body, p, hit)?,
            "masquerade" => {
                hit.effects.push(Effect::Masquerade);
                verdict(hit, Verdict::Accept)
            }
            "snat" => snat(&cx, kind, body, p, hit)?,
            other => return Err(cx.unsupported(format!("statement `{other}`"))),
        };
        if let Step::End(ctl) = step {
            return Ok(ctl);
        }
    }
    Ok(Some(done(hit, Flowctl::Next)))
}

/// `limit rate N` / `limit rate over N`: the first packet is within any rate, so `limit rate N`
/// matches it and `limit rate over N` (inv) does not.
fn rate_limit(body: &Value, hit: &mut Hit) -> Step {
    if body.get("inv").and_then(Value::as_bool).unwrap_or(false) {
        hit.notes.push("rate limit over: the first packet is within the rate".into());
        return Step::End(None);
    }
    hit.notes.push("rate limit: the first packet is within the rate".into());
    Step::On
}

/// `ct count [over] N`: the first connection is one connection counted.
fn ct_count(cx: &Cx, body: &Value, hit: &mut Hit) -> Result<Step, EvalError> {
    let n = body.get("val").and_then(Value::as_u64).ok_or_else(|| cx.unsupported(format!("ct count {body}")))?;
    let over = body.get("inv").and_then(Value::as_bool).unwrap_or(false);
    if over && n >= 1 {
        hit.notes.push(format!("connection limit {n}: the first connection is within it"));
        return Ok(Step::End(None));
    }
    Ok(if !over && n < 1 { Step::End(None) } else { Step::On })
}

/// `update/add @set { key limit rate over … / ct count over … }`: a per-source limit. The source
/// gets its element; its first connection is within any limit, so the rule does not match.
fn per_source_set(cx: &Cx, rule: &RuleDef, body: &Value, p: &mut Packet) -> Result<Step, EvalError> {
    let name = body.get("set").and_then(Value::as_str).and_then(|s| s.strip_prefix('@')).ok_or_else(|| cx.unsupported(format!("set {body}")))?;
    let key = cx.eval_expr(body.get("elem").unwrap_or(&Value::Null), p)?;
    if key == Val::Absent {
        return Ok(Step::End(None));
    }
    p.dyn_elems.push((name.to_string(), key));
    let mut within = false;
    for st in body.get("stmt").and_then(Value::as_array).into_iter().flatten() {
        let Some(note) = per_source_note(st, body.get("elem"), rule.comment.as_deref()) else {
            return Err(cx.unsupported(format!("set element statement {st}")));
        };
        if !p.limits.contains(&note) {
            p.limits.push(note);
        }
        within = true;
    }
    Ok(if within { Step::End(None) } else { Step::On })
}

/// A named quota: the evaluator does not know a quota's usage; it assumes the quota is not
/// used up (the rule does nothing) and says what happens once it is.
fn quota(cx: &Cx, rule: &RuleDef, stmt: &Value, body: &Value, hit: &mut Hit) -> Result<Step, EvalError> {
    let name = body.as_str().ok_or_else(|| cx.unsupported(format!("anonymous quota {body}")))?;
    let limit = cx.t.quotas.get(name).ok_or_else(|| cx.unsupported(format!("quota {name} is not declared")))?;
    let pos = rule.expr.iter().position(|x| std::ptr::eq(x, stmt)).unwrap_or(0);
    let then: Vec<String> = rule.expr[pos + 1..]
        .iter()
        .filter_map(|x| x.as_object().and_then(|m| m.iter().next()))
        .map(|(k, b)| match k.as_str() {
            "limit" => format!("limit to {} {}/{}", b["rate"], b["rate_unit"].as_str().unwrap_or("packets"), b["per"].as_str().unwrap_or("second")),
            other => other.to_string(),
        })
        .collect();
    hit.notes.push(format!(
        "counted by quota {name} ({}); assumed not used up (the evaluator does not know its usage: `fwc status` shows it); once used up: {}",
        fwc_artifacts::quota::human_bytes(*limit),
        then.join(" then ")
    ));
    Ok(Step::End(Some(Flowctl::Next)))
}

/// `vmap`: the verdict of the key's element (a miss: the rule does not match); a round-robin
/// key (`numgen inc`) records every target first.
fn verdict_map(cx: &Cx, body: &Value, p: &mut Packet, hit: &mut Hit) -> Result<Step, EvalError> {
    let key = cx.eval_expr(body.get("key").unwrap_or(&Value::Null), p)?;
    let data = body.get("data").ok_or_else(|| cx.unsupported("vmap without data".into()))?;
    if body.pointer("/key/numgen").is_some() {
        round_robin_chains(cx, data, p)?;
        hit.notes.push("round robin: the first connection goes to the first target".into());
    }
    let Some(Some(v)) = cx.lookup(data, &key, p)? else { return Ok(Step::End(None)) };
    let (k, b) = v.as_object().and_then(|m| m.iter().next()).ok_or_else(|| cx.unsupported(format!("vmap verdict {v}")))?;
    let ctl = match k.as_str() {
        "accept" => Flowctl::Verdict(Verdict::Accept),
        "drop" => Flowctl::Verdict(Verdict::Drop),
        "jump" | "goto" => {
            let target = b.get("target").and_then(Value::as_str).ok_or_else(|| cx.unsupported(format!("vmap {v}")))?.to_string();
            if k == "jump" { Flowctl::Jump(target) } else { Flowctl::Goto(target) }
        }
        _ => return Err(cx.unsupported(format!("vmap verdict {v}"))),
    };
    Ok(Step::End(Some(done(hit, ctl))))
}

/// `ct mark set …` / `meta mark set …`; `tcp option maxseg size set …` (MSS clamping).
fn mangle(cx: &Cx, body: &Value, p: &mut Packet, hit: &mut Hit) -> Result<Step, EvalError> {
    let key = body.get("key").ok_or_else(|| cx.unsupported(format!("mangle {body}")))?;
    if key.pointer("/tcp option/name").and_then(Value::as_str) == Some("maxseg") {
        let value = body.get("value").unwrap_or(&Value::Null);
        let to = match value.pointer("/rt/key").and_then(Value::as_str) {
            Some("mtu") => "rt mtu".to_string(),
            _ => match value.as_u64() {
                Some(n) => n.to_string(),
                None => return Err(cx.unsupported(format!("MSS clamping to {value}"))),
            },
        };
        hit.effects.push(Effect::ClampMss { to });
        return Ok(Step::On);
    }
    let value = match cx.eval_expr(body.get("value").unwrap_or(&Value::Null), p)? {
        Val::Int(n) => n as u32,
        other => return Err(cx.unsupported(format!("mangle value {other:?}"))),
    };
    let which = if key.pointer("/ct/key").and_then(Value::as_str) == Some("mark") {
        p.ct_mark = value;
        "ct mark"
    } else if key.pointer("/meta/key").and_then(Value::as_str) == Some("mark") {
        p.meta_mark = value;
        "meta mark"
    } else {
        return Err(cx.unsupported(format!("mangle of {key}")));
    };
    hit.effects.push(Effect::SetMark { which, value });
    Ok(Step::On)
}

/// `dnat to ADDR[:PORT]`, from a literal or a map (a round-robin map records every target);
/// a statement of the other address family does nothing and the rule goes on.
fn dnat(cx: &Cx, kind: &str, body: &Value, p: &mut Packet, hit: &mut Hit) -> Result<Step, EvalError> {
    if let Some(note) = other_family(kind, body, p) {
        hit.notes.push(note);
        return Ok(Step::On);
    }
    let addr_v = body.get("addr").ok_or_else(|| cx.unsupported("dnat without addr".into()))?;
    if addr_v.pointer("/map/key/numgen").is_some() {
        for pair in addr_v.pointer("/map/data/set").and_then(Value::as_array).into_iter().flatten() {
            if let Some(Some((Val::Addr(a), port, _))) = pair.get(1).map(|d| cx.dnat_value(d, p)).transpose()? {
                p.round_robin.push((a, port));
            }
        }
        hit.notes.push("round robin: the first connection goes to the first target".into());
    }
    let (addr, port_from_addr, ident) = match cx.dnat_value(addr_v, p)? {
        None => return Ok(Step::End(None)),
        Some(x) => x,
    };
    if let Some(c) = ident {
        hit.identity = Some(c);
    }
    let port = match body.get("port") {
        None => port_from_addr,
        Some(pv) => match cx.dnat_value(pv, p)? {
            None => return Ok(Step::End(None)),
            Some((Val::Int(n), _, _)) => Some(n as u16),
            Some(other) => return Err(cx.unsupported(format!("dnat port {:?}", other.0))),
        },
    };
    let Val::Addr(addr) = addr else { return Err(cx.unsupported(format!("dnat address {addr:?}"))) };
    p.daddr = addr;
    if let Some(port) = port {
        p.dport = port;
    }
    p.ct_dnat = true;
    hit.effects.push(Effect::Dnat { addr, port });
    Ok(Step::End(Some(done(hit, Flowctl::Verdict(Verdict::Accept)))))
}

/// `snat to ADDR` (a fixed address, no port or flags); the other address family's statement
/// does nothing and the rule goes on.
fn snat(cx: &Cx, kind: &str, body: &Value, p: &mut Packet, hit: &mut Hit) -> Result<Step, EvalError> {
    if let Some(note) = other_family(kind, body, p) {
        hit.notes.push(note);
        return Ok(Step::On);
    }
    let addr = match body.get("addr") {
        Some(Value::String(a)) => a.parse::<IpAddr>().map_err(|_| cx.unsupported(format!("snat address {a}")))?,
        other => return Err(cx.unsupported(format!("snat to {}", other.unwrap_or(&Value::Null)))),
    };
    if body.get("port").is_some() || body.get("flags").is_some() {
        return Err(cx.unsupported(format!("snat {body}")));
    }
    p.saddr = addr;
    hit.effects.push(Effect::Snat { addr });
    Ok(Step::End(Some(done(hit, Flowctl::Verdict(Verdict::Accept)))))
}

/// Words for a per-source limit statement (`limit rate over` / `ct count over` on a set
/// element), or `None` for one the evaluator does not know.
pub(super) fn per_source_note(st: &Value, key: Option<&Value>, identity: Option<&str>) -> Option<String> {
    let (kind, b) = st.as_object().and_then(|m| m.iter().next())?;
    if !b.get("inv").and_then(Value::as_bool).unwrap_or(false) {
        return None;
    }
    let what = match kind.as_str() {
        "limit" => format!(
            "at most {}/{} new connections (burst {}) per source, over it dropped",
            b.get("rate")?.as_u64()?,
            b.get("per").and_then(Value::as_str).unwrap_or("second"),
            b.get("burst").and_then(Value::as_u64).unwrap_or(5)
        ),
        "ct count" => format!("at most {} concurrent connections per source, over it rejected", b.get("val")?.as_u64()?),
        _ => return None,
    };
    let group = match key.and_then(|k| k.get("&")).and_then(|a| a.get(1)).and_then(Value::as_str) {
        Some(mask) => format!(" (sources grouped by mask {mask})"),
        None => String::new(),
    };
    let who = identity.map(|i| format!("{i}: ")).unwrap_or_default();
    Some(format!("{who}per-source limit: {what}{group}; a new source is also refused while the tracking set is full — assumed here: the source is within its limit"))
}

/// Every target of a round-robin dispatch (`numgen inc mod N vmap { i : goto C }`, the
/// health-checked kernel forwards): the DNAT of each chain `C`, in slot order.
pub(super) fn round_robin_chains(cx: &Cx, data: &Value, p: &mut Packet) -> Result<(), EvalError> {
    for e in data.get("set").and_then(Value::as_array).into_iter().flatten() {
        let Some(c) = e.pointer("/1/goto/target").and_then(Value::as_str).and_then(|n| cx.t.chains.get(n)) else { continue };
        for nat in c.rules.iter().flat_map(|r| r.expr.iter()).filter_map(|st| st.get("dnat")) {
            let Some(addr) = nat.get("addr") else { continue };
            if let Some((Val::Addr(a), port, _)) = cx.dnat_value(addr, p)? {
                let port = match nat.get("port") {
                    Some(pv) => match cx.dnat_value(pv, p)? {
                        Some((Val::Int(n), _, _)) => Some(n as u16),
                        _ => port,
                    },
                    None => port,
                };
                p.round_robin.push((a, port));
            }
        }
    }
    Ok(())
}

/// A `dnat`/`snat` statement for the other address family than the packet's: the kernel's
/// inet NAT expression ignores the packet (nft_nat_inet_eval), the statement does nothing and
/// the rule goes on. The note saying so, or `None` when the statement applies.
pub(super) fn other_family(kind: &str, body: &Value, p: &Packet) -> Option<String> {
    let v6 = match body.get("family").and_then(Value::as_str) {
        Some("ip") => false,
        Some("ip6") => true,
        _ => return None,
    };
    (v6 != p.daddr.is_ipv6()).then(|| format!("{kind} {} to … does not apply to this packet's family", if v6 { "ip6" } else { "ip" }))
}

/// How a `reject` answers this packet, when it is not the plain default (TCP reset for TCP,
/// ICMP(v6) port unreachable): `answers with ICMP admin-prohibited`.
pub(super) fn reject_answer(body: &Value, p: &Packet) -> Option<String> {
    let kind = body.get("type").and_then(Value::as_str)?;
    let code = body.get("expr").and_then(Value::as_str).unwrap_or("port-unreachable");
    let family = if p.daddr.is_ipv6() { "ICMPv6" } else { "ICMP" };
    match kind {
        "tcp reset" => None,
        "icmpx" if code == "port-unreachable" => None,
        // icmpx codes in each family's words (nft_reject_icmpx_code).
        "icmpx" => Some(format!(
            "answers with {family} {}",
            match (code, p.daddr.is_ipv6()) {
                ("no-route", false) => "net-unreachable",
                ("no-route", true) => "no-route",
                ("host-unreachable", true) => "addr-unreachable",
                (c, _) => c,
            }
        )),
        "icmp" => Some(format!("answers with ICMP {code}")),
        "icmpv6" => Some(format!("answers with ICMPv6 {code}")),
        _ => None,
    }
}

pub(super) fn done(hit: &mut Hit, ctl: Flowctl) -> Flowctl {
    hit.effects.push(match &ctl {
        Flowctl::Next => Effect::Continue,
        Flowctl::Verdict(v) => Effect::Verdict { verdict: *v },
        Flowctl::Jump(c) => Effect::Jump { chain: c.clone() },
        Flowctl::Goto(c) => Effect::Goto { chain: c.clone() },
        Flowctl::Return => Effect::Return,
    });
    // NAT statements are terminal in nft but record their own effect; drop the generic accept.
    if matches!(hit.effects.first(), Some(Effect::Dnat { .. } | Effect::Masquerade | Effect::Snat { .. })) && hit.effects.len() == 2 {
        hit.effects.pop();
    }
    ctl
}
