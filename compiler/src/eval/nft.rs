//! An interpreter of `nftables.json` as fwc emits it: chains, jumps/gotos/returns, verdict
//! maps, named and anonymous sets (prefixes, ranges, concatenations), DNAT maps, SNAT and
//! masquerade, `ct` state, status and marks, ICMP types, `fib daddr type`, mark mangling,
//! log (matching goes on) and every kind of reject. It reads the JSON, not the emitter's
//! code: an expression it does not know is an [`EvalError::Unsupported`], never a guess.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use super::flow::{Flow, L4};

/// Why a ruleset could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("nftables.json: {what} is not something the evaluator understands (chain {chain}, rule {rule})")]
    Unsupported { chain: String, rule: usize, what: String },
    #[error("nftables.json: {0}")]
    Malformed(String),
    #[error("nftables.json: chain {from} jumps to unknown chain {to}")]
    UnknownChain { from: String, to: String },
    #[error("nftables.json: rule refers to unknown set @{set} (chain {chain})")]
    UnknownSet { chain: String, set: String },
    #[error("nftables.json: jumps nest deeper than 16 chains from {0} (a loop?)")]
    TooDeep(String),
}

/// A base chain's hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub hook: String,
    pub kind: String,
    pub prio: i64,
    pub policy: Verdict,
    /// The table's family when it sees only one address family (`ip`, `ip6`); `None` for
    /// `inet` (fwc's own table) — foreign listings only ([`super::foreign`]).
    pub family: Option<String>,
}

impl Hook {
    /// Does a base chain of this hook see packets of this address family?
    pub fn sees(&self, v6: bool) -> bool {
        match self.family.as_deref() {
            Some("ip") => !v6,
            Some("ip6") => v6,
            _ => true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChainDef {
    pub name: String,
    pub hook: Option<Hook>,
    pub rules: Vec<RuleDef>,
}

#[derive(Debug, Clone)]
pub struct RuleDef {
    pub comment: Option<String>,
    pub expr: Vec<Value>,
}

/// A set or map element: key (one value or a concatenation; each part exact, prefix or range),
/// optional data, optional element comment.
#[derive(Debug, Clone)]
struct Elem {
    key: Value,
    data: Option<Value>,
    comment: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct SetDef {
    elems: Vec<Elem>,
    /// A set whose elements are all plain addresses (a big set's hash set of one prefix
    /// length) is looked up here, not by a scan of a million elements.
    exact: Option<std::collections::HashSet<IpAddr>>,
}

impl SetDef {
    fn index(&mut self) {
        let plain = |e: &Elem| -> Option<IpAddr> {
            if e.data.is_some() || e.comment.is_some() {
                return None;
            }
            e.key.as_str()?.parse().ok()
        };
        self.exact = self.elems.iter().map(plain).collect();
    }
}

/// `table inet fwc`, read from `nftables.json`.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub chains: BTreeMap<String, ChainDef>,
    sets: BTreeMap<String, SetDef>,
    /// quota (issue #26): named quota objects, name -> limit in bytes.
    quotas: BTreeMap<String, u64>,
}

/// The verdict of a rule or chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Accept,
    Drop,
    Reject,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Drop => "drop",
            Verdict::Reject => "reject",
        }
    }
}

impl Table {
    /// Read the commands of `nftables.json` (`add`/`create` of table, chain, set, map, rule, element).
    pub fn from_json(v: &Value) -> Result<Table, EvalError> {
        let cmds = v.get("nftables").and_then(Value::as_array).ok_or_else(|| EvalError::Malformed("no `nftables` array".into()))?;
        let mut t = Table::default();
        for cmd in cmds {
            let Some(obj) = cmd.get("add").or_else(|| cmd.get("create")) else {
                if cmd.get("metainfo").is_some() {
                    continue;
                }
                return Err(EvalError::Malformed(format!("command {cmd} is not add/create")));
            };
            let (kind, o) = obj.as_object().and_then(|m| m.iter().next()).ok_or_else(|| EvalError::Malformed("empty command".into()))?;
            let name = o.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            match kind.as_str() {
                "table" => {}
                "chain" => {
                    let hook = o.get("hook").and_then(Value::as_str).map(|h| Hook {
                        hook: h.to_string(),
                        kind: o.get("type").and_then(Value::as_str).unwrap_or("filter").to_string(),
                        prio: o.get("prio").and_then(Value::as_i64).unwrap_or(0),
                        policy: if o.get("policy").and_then(Value::as_str) == Some("drop") { Verdict::Drop } else { Verdict::Accept },
                        family: o.get("family").and_then(Value::as_str).filter(|f| matches!(*f, "ip" | "ip6")).map(str::to_string),
                    });
                    t.chains.insert(name.clone(), ChainDef { name, hook, rules: Vec::new() });
                }
                "set" | "map" => {
                    let mut def = SetDef::default();
                    for e in o.get("elem").and_then(Value::as_array).into_iter().flatten() {
                        def.elems.push(read_elem(e, kind == "map"));
                    }
                    def.index();
                    t.sets.insert(name, def);
                }
                "element" => {
                    let set = o.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                    let def = t.sets.entry(set).or_default();
                    for e in o.get("elem").and_then(Value::as_array).into_iter().flatten() {
                        def.elems.push(read_elem(e, e.is_array()));
                    }
                    def.index();
                }
                "rule" => {
                    let chain = o.get("chain").and_then(Value::as_str).unwrap_or_default();
                    let c = t.chains.get_mut(chain).ok_or_else(|| EvalError::Malformed(format!("rule in unknown chain {chain}")))?;
                    let expr = o.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                    c.rules.push(RuleDef { comment: o.get("comment").and_then(Value::as_str).map(str::to_string), expr });
                }
                // quota (issue #26): a named quota object (`over N bytes`).
                "quota" => {
                    t.quotas.insert(name, o.get("bytes").and_then(Value::as_u64).unwrap_or(0));
                }
                other => return Err(EvalError::Malformed(format!("unknown object `{other}`"))),
            }
        }
        Ok(t)
    }

    /// Base chains of `hook`, in priority order (ties: name order, as nft does not promise one).
    pub fn base_chains(&self, hook: &str) -> Vec<&ChainDef> {
        let mut v: Vec<&ChainDef> = self.chains.values().filter(|c| c.hook.as_ref().is_some_and(|h| h.hook == hook)).collect();
        v.sort_by_key(|c| (c.hook.as_ref().map_or(0, |h| h.prio), c.name.clone()));
        v
    }
}

fn read_elem(e: &Value, is_map: bool) -> Elem {
    let (k, data) = match (is_map, e.as_array()) {
        (true, Some(pair)) if pair.len() == 2 => (pair[0].clone(), Some(pair[1].clone())),
        _ => (e.clone(), None),
    };
    // `{"elem": {"val": KEY, "comment": …}}` carries per-element options.
    match k.get("elem") {
        Some(inner) => Elem {
            key: inner.get("val").cloned().unwrap_or(Value::Null),
            data,
            comment: inner.get("comment").and_then(Value::as_str).map(str::to_string),
        },
        None => Elem { key: k, data, comment: None },
    }
}

/// The state of the packet and its connection while the hooks run.
#[derive(Debug, Clone)]
pub struct Packet {
    pub proto: L4,
    pub saddr: IpAddr,
    pub daddr: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub iifname: Option<String>,
    pub oifname: Option<String>,
    pub meta_mark: u32,
    pub ct_mark: u32,
    /// `ct state` (`new` for the first packet).
    pub ct_state: &'static str,
    /// `original` or `reply`.
    pub ct_direction: &'static str,
    pub ct_dnat: bool,
    /// The connection's original tuple (before any NAT).
    pub orig: (IpAddr, IpAddr, u16, u16),
    /// Addresses `fib daddr type` calls `local`.
    pub local: Vec<IpAddr>,
    /// Every target of a round-robin DNAT (`numgen inc`): the first connection gets the first,
    /// later ones the others in turn.
    pub round_robin: Vec<(IpAddr, Option<u16>)>,
    /// Elements the packet's `add`/`update @set` statements put into dynamic sets (per-source
    /// limits): a later `ip saddr != @set` sees them.
    pub dyn_elems: Vec<(String, Val)>,
    /// Per-source limits the packet passed (issue #26), in words: the evaluator cannot know a
    /// source's history, so it assumes the source is within them and says so.
    pub limits: Vec<String>,
    /// When the packet passes (Unix seconds): `meta day` / `meta hour` (issue #26).
    pub at: Option<i64>,
}

impl Packet {
    pub fn new(flow: &Flow, local: Vec<IpAddr>) -> Packet {
        Packet {
            proto: flow.proto,
            saddr: flow.saddr,
            daddr: flow.daddr,
            sport: flow.sport,
            dport: flow.dport,
            iifname: flow.iif.clone(),
            oifname: flow.oif.clone(),
            meta_mark: 0,
            ct_mark: 0,
            ct_state: first_packet_state(flow),
            ct_direction: "original",
            ct_dnat: false,
            orig: (flow.saddr, flow.daddr, flow.sport, flow.dport),
            local,
            round_robin: Vec::new(),
            dyn_elems: Vec::new(),
            limits: Vec::new(),
            at: None,
        }
    }
}

/// The conntrack state of a flow's first packet: `new`, except for ICMP types that cannot open
/// a connection (replies, errors): conntrack calls those `invalid`; MLD and neighbour
/// discovery are `untracked`
/// (`valid_new` in nf_conntrack_proto_icmp.c / nf_conntrack_proto_icmpv6.c).
fn first_packet_state(flow: &Flow) -> &'static str {
    let opens = match flow.proto {
        // echo, timestamp, info and address-mask requests
        L4::Icmp => matches!(flow.dport, 8 | 13 | 15 | 17),
        // echo request, node information query
        L4::Icmpv6 => matches!(flow.dport, 128 | 139),
        L4::Tcp | L4::Udp => true,
    };
    // MLD (130-132, 143) and neighbour discovery (133-136) are not tracked at all
    // (`noct_valid_new` in nf_conntrack_proto_icmpv6.c): `ct state untracked`, not invalid —
    // so a `ct state invalid drop` before the ND accepts does not break IPv6 (the import
    // tests' IPv6 probes through such a ruleset show it in a real kernel).
    if flow.proto == L4::Icmpv6 && matches!(flow.dport, 130..=136 | 143) {
        return "untracked";
    }
    if opens {
        "new"
    } else {
        "invalid"
    }
}

/// Words for a per-source limit statement (`limit rate over` / `ct count over` on a set
/// element), or `None` for one the evaluator does not know.
fn per_source_note(st: &Value, key: Option<&Value>, identity: Option<&str>) -> Option<String> {
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

/// The outcome of running one hook's base chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    pub verdict: Verdict,
    /// The rule that gave a terminal verdict, or `None` for a chain policy / no chain.
    pub decided_by: Option<Hit>,
    /// The base chain whose policy decided (when `decided_by` is `None` and a chain ran).
    pub policy_of: Option<String>,
}

enum Flowctl {
    Next,
    Verdict(Verdict),
    Jump(String),
    Goto(String),
    Return,
}

/// Run every base chain of `hook` in priority order, recording matching rules in `hits`.
/// `nat` chains see only a connection's first packet; so does every evaluation here.
/// With `skip_nat`, `nat` chains are left out (packets after a connection's first).
pub fn run_hook(t: &Table, hook: &str, p: &mut Packet, hits: &mut Vec<Hit>, skip_nat: bool) -> Result<HookResult, EvalError> {
    let mut last = HookResult { verdict: Verdict::Accept, decided_by: None, policy_of: None };
    // A packet without a connection (`invalid`) passes no nat chain (nf_nat_inet_fn).
    let skip_nat = skip_nat || p.ct_state == "invalid";
    for base in t.base_chains(hook) {
        if skip_nat && base.hook.as_ref().is_some_and(|h| h.kind == "nat") {
            continue;
        }
        if !base.hook.as_ref().is_none_or(|h| h.sees(p.daddr.is_ipv6())) {
            continue;
        }
        let policy = base.hook.as_ref().map_or(Verdict::Accept, |h| h.policy);
        let (verdict, by) = run_chain(t, base, policy, p, hits)?;
        last = HookResult { verdict, policy_of: by.is_none().then(|| base.name.clone()), decided_by: by };
        if verdict != Verdict::Accept {
            return Ok(last);
        }
    }
    Ok(last)
}

/// Run a base chain (with its jumps) to a verdict: `(verdict, deciding rule or None = policy)`.
fn run_chain(t: &Table, base: &ChainDef, policy: Verdict, p: &mut Packet, hits: &mut Vec<Hit>) -> Result<(Verdict, Option<Hit>), EvalError> {
    // Stack of (chain, next rule index) to return to.
    let mut stack: Vec<(&ChainDef, usize)> = Vec::new();
    let mut chain = base;
    let mut i = 0;
    loop {
        if i >= chain.rules.len() {
            match stack.pop() {
                Some((c, at)) => {
                    chain = c;
                    i = at;
                    continue;
                }
                None => return Ok((policy, None)),
            }
        }
        let rule = &chain.rules[i];
        let mut hit = Hit { chain: chain.name.clone(), index: i, matches: describe_matches(&rule.expr), identity: rule.comment.clone(), effects: Vec::new(), notes: Vec::new() };
        let ctl = eval_rule(t, chain, i, rule, p, &mut hit)?;
        i += 1;
        let Some(ctl) = ctl else { continue };
        hits.push(hit.clone());
        let target = |name: &str| t.chains.get(name).ok_or_else(|| EvalError::UnknownChain { from: chain.name.clone(), to: name.to_string() });
        match ctl {
            Flowctl::Next => {}
            Flowctl::Verdict(v) => return Ok((v, Some(hit))),
            Flowctl::Jump(name) => {
                let next = target(&name)?;
                if stack.len() >= 16 {
                    return Err(EvalError::TooDeep(base.name.clone()));
                }
                stack.push((chain, i));
                chain = next;
                i = 0;
            }
            Flowctl::Goto(name) => {
                chain = target(&name)?;
                i = 0;
            }
            Flowctl::Return => match stack.pop() {
                Some((c, at)) => {
                    chain = c;
                    i = at;
                }
                None => return Ok((policy, None)),
            },
        }
    }
}

/// Evaluate one rule: `None` if a match failed (or a map lookup missed), else what it does.
fn eval_rule(t: &Table, chain: &ChainDef, index: usize, rule: &RuleDef, p: &mut Packet, hit: &mut Hit) -> Result<Option<Flowctl>, EvalError> {
    let unsupported = |what: String| EvalError::Unsupported { chain: chain.name.clone(), rule: index, what };
    let cx = Cx { t, chain: &chain.name, index, icmp_v6: std::cell::Cell::new(None) };
    for stmt in &rule.expr {
        let (kind, body) = stmt.as_object().and_then(|m| m.iter().next()).ok_or_else(|| unsupported(format!("statement {stmt}")))?;
        match kind.as_str() {
            "match" => {
                if !cx.eval_match(body, p)? {
                    return Ok(None);
                }
            }
            "counter" => {}
            "log" => hit.notes.push("logged".into()),
            "limit" => {
                // The first packet is within any rate: `limit rate N` matches it, `limit rate
                // over N` (inv) does not.
                if body.get("inv").and_then(Value::as_bool).unwrap_or(false) {
                    hit.notes.push("rate limit over: the first packet is within the rate".into());
                    return Ok(None);
                }
                hit.notes.push("rate limit: the first packet is within the rate".into());
            }
            "ct count" => {
                // The first connection: one connection counted.
                let n = body.get("val").and_then(Value::as_u64).ok_or_else(|| unsupported(format!("ct count {body}")))?;
                let over = body.get("inv").and_then(Value::as_bool).unwrap_or(false);
                if over && n >= 1 {
                    hit.notes.push(format!("connection limit {n}: the first connection is within it"));
                    return Ok(None);
                }
                if !over && n < 1 {
                    return Ok(None);
                }
            }
            "set" => {
                // `update/add @set { key limit rate over … / ct count over … }`: a per-source
                // limit (issue #26). The source gets its element; its first connection is
                // within any limit, so the rule does not match.
                let name = body.get("set").and_then(Value::as_str).and_then(|s| s.strip_prefix('@')).ok_or_else(|| unsupported(format!("set {body}")))?;
                let key = cx.eval_expr(body.get("elem").unwrap_or(&Value::Null), p)?;
                if key == Val::Absent {
                    return Ok(None);
                }
                p.dyn_elems.push((name.to_string(), key));
                let mut within = false;
                for st in body.get("stmt").and_then(Value::as_array).into_iter().flatten() {
                    let Some(note) = per_source_note(st, body.get("elem"), rule.comment.as_deref()) else {
                        return Err(unsupported(format!("set element statement {st}")));
                    };
                    if !p.limits.contains(&note) {
                        p.limits.push(note);
                    }
                    within = true;
                }
                if within {
                    return Ok(None);
                }
            }
            // quota (issue #26): the evaluator does not know a quota's usage; it assumes the
            // quota is not used up (the rule does nothing) and says what happens once it is.
            "quota" => {
                let name = body.as_str().ok_or_else(|| unsupported(format!("anonymous quota {body}")))?;
                let limit = t.quotas.get(name).ok_or_else(|| unsupported(format!("quota {name} is not declared")))?;
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
                return Ok(Some(Flowctl::Next));
            }
            "accept" => return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Accept)))),
            "drop" => return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Drop)))),
            "reject" => {
                if let Some(how) = reject_answer(body, p) {
                    hit.notes.push(how);
                }
                return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Reject))));
            }
            "return" => return Ok(Some(done(hit, Flowctl::Return))),
            "jump" | "goto" => {
                let target = body.get("target").and_then(Value::as_str).ok_or_else(|| unsupported(format!("{kind} {body}")))?.to_string();
                return Ok(Some(done(hit, if kind == "jump" { Flowctl::Jump(target) } else { Flowctl::Goto(target) })));
            }
            "vmap" => {
                let key = cx.eval_expr(body.get("key").unwrap_or(&Value::Null), p)?;
                let data = body.get("data").ok_or_else(|| unsupported("vmap without data".into()))?;
                if body.pointer("/key/numgen").is_some() {
                    round_robin_chains(&cx, data, p)?;
                    hit.notes.push("round robin: the first connection goes to the first target".into());
                }
                let Some(Some(v)) = cx.lookup(data, &key, p)? else { return Ok(None) };
                let (k, b) = v.as_object().and_then(|m| m.iter().next()).ok_or_else(|| unsupported(format!("vmap verdict {v}")))?;
                let ctl = match k.as_str() {
                    "accept" => Flowctl::Verdict(Verdict::Accept),
                    "drop" => Flowctl::Verdict(Verdict::Drop),
                    "jump" | "goto" => {
                        let target = b.get("target").and_then(Value::as_str).ok_or_else(|| unsupported(format!("vmap {v}")))?.to_string();
                        if k == "jump" { Flowctl::Jump(target) } else { Flowctl::Goto(target) }
                    }
                    _ => return Err(unsupported(format!("vmap verdict {v}"))),
                };
                return Ok(Some(done(hit, ctl)));
            }
            "mangle" => {
                let key = body.get("key").ok_or_else(|| unsupported(format!("mangle {body}")))?;
                let value = match cx.eval_expr(body.get("value").unwrap_or(&Value::Null), p)? {
                    Val::Int(n) => n as u32,
                    other => return Err(unsupported(format!("mangle value {other:?}"))),
                };
                let which = if key.pointer("/ct/key").and_then(Value::as_str) == Some("mark") {
                    p.ct_mark = value;
                    "ct mark"
                } else if key.pointer("/meta/key").and_then(Value::as_str) == Some("mark") {
                    p.meta_mark = value;
                    "meta mark"
                } else {
                    return Err(unsupported(format!("mangle of {key}")));
                };
                hit.effects.push(Effect::SetMark { which, value });
            }
            "dnat" => {
                if let Some(note) = other_family(kind, body, p) {
                    hit.notes.push(note);
                    continue;
                }
                let addr_v = body.get("addr").ok_or_else(|| unsupported("dnat without addr".into()))?;
                if addr_v.pointer("/map/key/numgen").is_some() {
                    for pair in addr_v.pointer("/map/data/set").and_then(Value::as_array).into_iter().flatten() {
                        if let Some(Some((Val::Addr(a), port, _))) = pair.get(1).map(|d| cx.dnat_value(d, p)).transpose()? {
                            p.round_robin.push((a, port));
                        }
                    }
                    hit.notes.push("round robin: the first connection goes to the first target".into());
                }
                let (addr, port_from_addr, ident) = match cx.dnat_value(addr_v, p)? {
                    None => return Ok(None),
                    Some(x) => x,
                };
                if let Some(c) = ident {
                    hit.identity = Some(c);
                }
                let port = match body.get("port") {
                    None => port_from_addr,
                    Some(pv) => match cx.dnat_value(pv, p)? {
                        None => return Ok(None),
                        Some((Val::Int(n), _, _)) => Some(n as u16),
                        Some(other) => return Err(unsupported(format!("dnat port {:?}", other.0))),
                    },
                };
                let Val::Addr(addr) = addr else { return Err(unsupported(format!("dnat address {addr:?}"))) };
                p.daddr = addr;
                if let Some(port) = port {
                    p.dport = port;
                }
                p.ct_dnat = true;
                hit.effects.push(Effect::Dnat { addr, port });
                return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Accept))));
            }
            "masquerade" => {
                hit.effects.push(Effect::Masquerade);
                return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Accept))));
            }
            "snat" => {
                if let Some(note) = other_family(kind, body, p) {
                    hit.notes.push(note);
                    continue;
                }
                let addr = match body.get("addr") {
                    Some(Value::String(a)) => a.parse::<IpAddr>().map_err(|_| unsupported(format!("snat address {a}")))?,
                    other => return Err(unsupported(format!("snat to {}", other.unwrap_or(&Value::Null)))),
                };
                if body.get("port").is_some() || body.get("flags").is_some() {
                    return Err(unsupported(format!("snat {body}")));
                }
                p.saddr = addr;
                hit.effects.push(Effect::Snat { addr });
                return Ok(Some(done(hit, Flowctl::Verdict(Verdict::Accept))));
            }
            other => return Err(unsupported(format!("statement `{other}`"))),
        }
    }
    Ok(Some(done(hit, Flowctl::Next)))
}

/// Every target of a round-robin dispatch (`numgen inc mod N vmap { i : goto C }`, the
/// health-checked kernel forwards): the DNAT of each chain `C`, in slot order.
fn round_robin_chains(cx: &Cx, data: &Value, p: &mut Packet) -> Result<(), EvalError> {
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
fn other_family(kind: &str, body: &Value, p: &Packet) -> Option<String> {
    let v6 = match body.get("family").and_then(Value::as_str) {
        Some("ip") => false,
        Some("ip6") => true,
        _ => return None,
    };
    (v6 != p.daddr.is_ipv6()).then(|| format!("{kind} {} to … does not apply to this packet's family", if v6 { "ip6" } else { "ip" }))
}

/// How a `reject` answers this packet, when it is not the plain default (TCP reset for TCP,
/// ICMP(v6) port unreachable): `answers with ICMP admin-prohibited`.
fn reject_answer(body: &Value, p: &Packet) -> Option<String> {
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

fn done(hit: &mut Hit, ctl: Flowctl) -> Flowctl {
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

/// The match statements of a rule in nft-like words, for people reading a trace.
pub fn describe_matches(expr: &[Value]) -> String {
    fn side(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Array(a) => a.iter().map(side).collect::<Vec<_>>().join(","),
            Value::Object(o) => match o.iter().next() {
                Some((k, b)) if k == "meta" || k == "ct" => {
                    let key = b.get("key").and_then(Value::as_str).unwrap_or_default();
                    match b.get("dir").and_then(Value::as_str) {
                        Some(d) => format!("{k} {d} {key}"),
                        None => format!("{k} {key}"),
                    }
                }
                Some((k, b)) if k == "payload" => format!(
                    "{} {}",
                    b.get("protocol").and_then(Value::as_str).unwrap_or_default(),
                    b.get("field").and_then(Value::as_str).unwrap_or_default()
                ),
                Some((k, b)) if k == "fib" => format!("fib daddr {}", b.get("result").and_then(Value::as_str).unwrap_or_default()),
                Some((k, b)) if k == "set" => format!("{{{}}}", side(b)),
                Some((k, b)) if k == "prefix" => format!("{}/{}", side(&b["addr"]), side(&b["len"])),
                Some((k, b)) if k == "range" => b.as_array().map(|r| r.iter().map(side).collect::<Vec<_>>().join("-")).unwrap_or_default(),
                Some((k, b)) if k == "&" || k == "|" => b.as_array().map(|r| r.iter().map(side).collect::<Vec<_>>().join(&format!(" {k} "))).unwrap_or_default(),
                Some((k, _)) => k.clone(),
                None => String::new(),
            },
            _ => v.to_string(),
        }
    }
    expr.iter()
        .filter_map(|s| s.get("match"))
        .map(|m| {
            let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
            let op = if op == "==" || op == "in" { String::new() } else { format!("{op} ") };
            format!("{} {op}{}", side(m.get("left").unwrap_or(&Value::Null)), side(m.get("right").unwrap_or(&Value::Null)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A value an expression produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Int(u64),
    Addr(IpAddr),
    Str(String),
    Concat(Vec<Val>),
    /// The expression does not apply to this packet (`ip saddr` of an IPv6 packet, `tcp dport`
    /// of UDP): nft's implicit dependency fails, so the match fails.
    Absent,
}

/// A set/map element found by a lookup: its data (maps) and its comment.
type Found = (Option<Value>, Option<String>);

struct Cx<'a> {
    t: &'a Table,
    chain: &'a str,
    index: usize,
    /// Set while a match compares an ICMP (false) / ICMPv6 (true) type: names on the right
    /// are read in that family's table (`echo-request` is 8 in ICMP, 128 in ICMPv6).
    icmp_v6: std::cell::Cell<Option<bool>>,
}

fn proto_number(s: &str) -> Option<u64> {
    L4::parse(s).map(L4::number)
}

/// An ICMP or ICMPv6 type name as nft spells it, in the family being compared.
fn icmp_type(s: &str, v6: Option<bool>) -> Option<u64> {
    crate::units::icmp_type_code(v6?, s).map(u64::from)
}

impl Cx<'_> {
    fn unsupported(&self, what: String) -> EvalError {
        EvalError::Unsupported { chain: self.chain.to_string(), rule: self.index, what }
    }

    fn eval_match(&self, m: &Value, p: &Packet) -> Result<bool, EvalError> {
        let left_expr = m.get("left").unwrap_or(&Value::Null);
        let left = self.eval_expr(left_expr, p)?;
        self.icmp_v6.set(match (left_expr.pointer("/payload/protocol").and_then(Value::as_str), left_expr.pointer("/payload/field").and_then(Value::as_str)) {
            (Some("icmp"), Some("type")) => Some(false),
            (Some("icmpv6"), Some("type")) => Some(true),
            _ => None,
        });
        let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
        let right = m.get("right").unwrap_or(&Value::Null);
        if left == Val::Absent {
            return Ok(false);
        }
        let hit = match op {
            "==" | "in" => self.contains(right, &left, p)?,
            "!=" => !self.contains(right, &left, p)?,
            other => return Err(self.unsupported(format!("match operator `{other}`"))),
        };
        Ok(hit)
    }

    /// Does `right` (a literal, prefix, range, anonymous set, `@named` set, or flag list) hold `v`?
    fn contains(&self, right: &Value, v: &Val, p: &Packet) -> Result<bool, EvalError> {
        match right {
            Value::String(s) if s.starts_with('@') => {
                if p.dyn_elems.iter().any(|(n, k)| n == &s[1..] && k == v) {
                    return Ok(true);
                }
                Ok(self.lookup(right, v, p)?.is_some())
            }
            Value::Object(o) if o.contains_key("set") => {
                let elems = o["set"].as_array().ok_or_else(|| self.unsupported(format!("set {right}")))?;
                for e in elems {
                    if self.elem_matches(e, v)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Value::Array(list) => {
                for e in list {
                    if self.elem_matches(e, v)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            _ => self.elem_matches(right, v),
        }
    }

    /// Look `key` up in `set` (`"@name"` or `{"set": [[k, data], …]}`): `None` = absent,
    /// `Some(data)` = found (data `None` for a plain set).
    fn lookup(&self, set: &Value, key: &Val, _p: &Packet) -> Result<Option<Option<Value>>, EvalError> {
        Ok(self.lookup_elem(set, key)?.map(|(d, _)| d))
    }

    /// Look `key` up: `Some((data, element comment))` when found.
    fn lookup_elem(&self, set: &Value, key: &Val) -> Result<Option<Found>, EvalError> {
        match set {
            Value::String(s) if s.starts_with('@') => {
                let name = &s[1..];
                let def = self.t.sets.get(name).ok_or_else(|| EvalError::UnknownSet { chain: self.chain.to_string(), set: name.to_string() })?;
                if let (Some(exact), Val::Addr(a)) = (&def.exact, key) {
                    return Ok(exact.contains(a).then_some((None, None)));
                }
                for e in &def.elems {
                    if self.elem_matches(&e.key, key)? {
                        return Ok(Some((e.data.clone(), e.comment.clone())));
                    }
                }
                Ok(None)
            }
            Value::Object(o) if o.contains_key("set") => {
                for e in o["set"].as_array().into_iter().flatten() {
                    match e.as_array() {
                        Some(pair) if pair.len() == 2 => {
                            if self.elem_matches(&pair[0], key)? {
                                return Ok(Some((Some(pair[1].clone()), None)));
                            }
                        }
                        _ => {
                            if self.elem_matches(e, key)? {
                                return Ok(Some((None, None)));
                            }
                        }
                    }
                }
                Ok(None)
            }
            other => Err(self.unsupported(format!("lookup in {other}"))),
        }
    }

    /// Does one element (exact value, `prefix`, `range`, `concat` of those) match `v`?
    fn elem_matches(&self, e: &Value, v: &Val) -> Result<bool, EvalError> {
        if let Some(inner) = e.get("elem") {
            return self.elem_matches(inner.get("val").unwrap_or(&Value::Null), v);
        }
        if let Some(parts) = e.get("concat").and_then(Value::as_array) {
            let Val::Concat(vs) = v else { return Ok(false) };
            if parts.len() != vs.len() {
                return Ok(false);
            }
            for (part, val) in parts.iter().zip(vs) {
                if !self.elem_matches(part, val)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        if let Some(pre) = e.get("prefix") {
            let (Some(addr), Some(len)) = (pre.get("addr").and_then(Value::as_str), pre.get("len").and_then(Value::as_u64)) else {
                return Err(self.unsupported(format!("prefix {e}")));
            };
            let net: ipnet::IpNet = format!("{addr}/{len}").parse().map_err(|_| self.unsupported(format!("prefix {e}")))?;
            return Ok(matches!(v, Val::Addr(a) if net.contains(a)));
        }
        if let Some(r) = e.get("range").and_then(Value::as_array) {
            if r.len() != 2 {
                return Err(self.unsupported(format!("range {e}")));
            }
            let (lo, hi) = (self.literal(&r[0], v)?, self.literal(&r[1], v)?);
            return Ok(match (lo, hi, v) {
                (Val::Int(a), Val::Int(b), Val::Int(x)) => a <= *x && *x <= b,
                (Val::Addr(a), Val::Addr(b), Val::Addr(x)) => a.is_ipv4() == x.is_ipv4() && a <= *x && *x <= b,
                _ => false,
            });
        }
        // nft's interface-name wildcard: `"br-*"` matches every name starting with `br-`
        // (`\*` is a literal star).
        if let (Value::String(pat), Val::Str(name)) = (e, v) {
            if let Some(stem) = pat.strip_suffix('*').filter(|s| !s.ends_with('\\')) {
                return Ok(name.starts_with(stem));
            }
        }
        Ok(self.literal(e, v)? == *v)
    }

    /// A literal on the right, read in the type of the left value `like`.
    fn literal(&self, e: &Value, like: &Val) -> Result<Val, EvalError> {
        Ok(match (e, like) {
            (Value::Number(n), _) => Val::Int(n.as_u64().ok_or_else(|| self.unsupported(format!("number {n}")))?),
            // `exists` / `missing` (a fib lookup's result): 1 or 0.
            (Value::Bool(b), _) => Val::Int(u64::from(*b)),
            (Value::String(s), Val::Int(_)) => match proto_number(s).or_else(|| icmp_type(s, self.icmp_v6.get())).or_else(|| s.parse().ok()).or(match s.as_str() {
                "ipv4" => Some(2),
                "ipv6" => Some(10),
                _ => None,
            }) {
                Some(n) => Val::Int(n),
                None => return Err(self.unsupported(format!("value \"{s}\""))),
            },
            (Value::String(s), Val::Addr(_)) => Val::Addr(s.parse().map_err(|_| self.unsupported(format!("address \"{s}\"")))?),
            (Value::String(s), _) => Val::Str(s.clone()),
            (other, _) => return Err(self.unsupported(format!("value {other}"))),
        })
    }

    fn eval_expr(&self, e: &Value, p: &Packet) -> Result<Val, EvalError> {
        let (kind, body) = e.as_object().and_then(|m| m.iter().next()).ok_or_else(|| self.unsupported(format!("expression {e}")))?;
        let key = body.get("key").and_then(Value::as_str).unwrap_or_default();
        Ok(match kind.as_str() {
            "meta" => match key {
                "l4proto" => Val::Int(p.proto.number()),
                "nfproto" => Val::Int(if p.daddr.is_ipv6() { 10 } else { 2 }),
                "iif" | "iifname" => Val::Str(p.iifname.clone().unwrap_or_else(|| "(unnamed)".into())),
                "oif" | "oifname" => Val::Str(p.oifname.clone().unwrap_or_else(|| "(unnamed)".into())),
                "mark" => Val::Int(u64::from(p.meta_mark)),
                // Schedules (issue #26): the kernel's UTC weekday (0 = Sunday) and seconds
                // since UTC midnight.
                // Without a time: the Unix epoch, the time `emit_view` compiles for.
                "day" | "hour" => {
                    let t = p.at.unwrap_or(0);
                    match key {
                        "day" => Val::Int((t.div_euclid(86_400) + 4).rem_euclid(7) as u64),
                        _ => Val::Int(t.rem_euclid(86_400) as u64),
                    }
                }
                other => return Err(self.unsupported(format!("meta {other}"))),
            },
            "payload" => {
                let proto = body.get("protocol").and_then(Value::as_str).unwrap_or_default();
                let field = body.get("field").and_then(Value::as_str).unwrap_or_default();
                match (proto, field) {
                    ("ip", "saddr") if p.saddr.is_ipv4() => Val::Addr(p.saddr),
                    ("ip", "daddr") if p.daddr.is_ipv4() => Val::Addr(p.daddr),
                    ("ip6", "saddr") if p.saddr.is_ipv6() => Val::Addr(p.saddr),
                    ("ip6", "daddr") if p.daddr.is_ipv6() => Val::Addr(p.daddr),
                    ("ip" | "ip6", "saddr" | "daddr") => Val::Absent,
                    ("ip", "protocol") if p.daddr.is_ipv4() => Val::Int(p.proto.number()),
                    ("ip6", "nexthdr") if p.daddr.is_ipv6() => Val::Int(p.proto.number()),
                    ("ip", "protocol") | ("ip6", "nexthdr") => Val::Absent,
                    // Foreign rulesets (ufw's before6.rules): a flow comes from elsewhere, so
                    // it arrives with a routed hop limit / TTL (64 here), never 255 or 1 —
                    // the on-link values neighbour discovery and MLD rules match.
                    ("ip6", "hoplimit") if p.daddr.is_ipv6() => Val::Int(64),
                    ("ip", "ttl") if p.daddr.is_ipv4() => Val::Int(64),
                    ("ip6", "hoplimit") | ("ip", "ttl") => Val::Absent,
                    ("tcp" | "udp" | "th", "dport" | "sport") => {
                        let ok = match proto {
                            "th" => p.proto.has_ports(),
                            _ => L4::parse(proto) == Some(p.proto),
                        };
                        match (ok, field) {
                            (false, _) => Val::Absent,
                            (true, "dport") => Val::Int(u64::from(p.dport)),
                            (true, _) => Val::Int(u64::from(p.sport)),
                        }
                    }
                    ("icmp" | "icmpv6", "type") => {
                        if L4::parse(proto) == Some(p.proto) {
                            Val::Int(u64::from(p.dport))
                        } else {
                            Val::Absent
                        }
                    }
                    _ => return Err(self.unsupported(format!("payload {proto} {field}"))),
                }
            }
            "ct" => {
                let original = body.get("dir").and_then(Value::as_str) == Some("original");
                match (key, original) {
                    ("state", false) => Val::Str(p.ct_state.into()),
                    ("status", false) => Val::Str(if p.ct_dnat { "dnat".into() } else { "(none)".into() }),
                    ("direction", false) => Val::Str(p.ct_direction.into()),
                    ("mark", false) => Val::Int(u64::from(p.ct_mark)),
                    ("proto-dst", true) => Val::Int(u64::from(p.orig.3)),
                    ("proto-src", true) => Val::Int(u64::from(p.orig.2)),
                    ("ip saddr", true) if p.orig.0.is_ipv4() => Val::Addr(p.orig.0),
                    ("ip daddr", true) if p.orig.1.is_ipv4() => Val::Addr(p.orig.1),
                    ("ip6 saddr", true) if p.orig.0.is_ipv6() => Val::Addr(p.orig.0),
                    ("ip6 daddr", true) if p.orig.1.is_ipv6() => Val::Addr(p.orig.1),
                    ("ip saddr" | "ip daddr" | "ip6 saddr" | "ip6 daddr", true) => Val::Absent,
                    (other, _) => return Err(self.unsupported(format!("ct {other}"))),
                }
            }
            "fib" => {
                let flags = body.get("flags").and_then(Value::as_array).cloned().unwrap_or_default();
                let result = body.get("result").and_then(Value::as_str).unwrap_or_default();
                // Reverse-path filtering (`fib saddr . iif oif missing drop`, firewalld's
                // rpfilter): a flow's source is reachable back through the interface it came
                // in by (the evaluator's flows are not spoofed), so the lookup finds one.
                if matches!(result, "oif" | "oifname") && flags.contains(&Value::from("saddr")) {
                    return Ok(match result {
                        "oif" => Val::Int(1),
                        _ => Val::Str(p.iifname.clone().unwrap_or_else(|| "(unnamed)".into())),
                    });
                }
                if result != "type" || flags != [Value::from("daddr")] {
                    let names: Vec<&str> = flags.iter().filter_map(Value::as_str).collect();
                    return Err(self.unsupported(format!("`fib {} {result}`", names.join(" . "))));
                }
                Val::Str(if p.local.contains(&p.daddr) { "local".into() } else { "unicast".into() })
            }
            "&" | "|" => {
                let args = body.as_array().filter(|a| a.len() == 2).ok_or_else(|| self.unsupported(format!("{kind} {body}")))?;
                // `ip saddr & 255.255.255.0`: the network of a masked lookup (a big set's hash
                // set of one prefix length).
                if let (Value::Object(_), Value::String(m)) = (&args[0], &args[1]) {
                    if let Ok(mask) = m.parse::<IpAddr>() {
                        return Ok(match (self.eval_expr(&args[0], p)?, mask) {
                            (Val::Absent, _) => Val::Absent,
                            (Val::Addr(IpAddr::V4(a)), IpAddr::V4(m)) if kind == "&" => Val::Addr(IpAddr::V4((u32::from(a) & u32::from(m)).into())),
                            (Val::Addr(IpAddr::V6(a)), IpAddr::V6(m)) if kind == "&" => Val::Addr(IpAddr::V6((u128::from(a) & u128::from(m)).into())),
                            _ => return Err(self.unsupported(format!("{kind} {body}"))),
                        });
                    }
                }
                let a = self.eval_expr_or_literal(&args[0], p)?;
                let b = self.eval_expr_or_literal(&args[1], p)?;
                Val::Int(if kind == "&" { a & b } else { a | b })
            }
            "concat" => {
                let parts = body.as_array().ok_or_else(|| self.unsupported(format!("concat {body}")))?;
                let mut vs = Vec::with_capacity(parts.len());
                for part in parts {
                    let v = self.eval_expr(part, p)?;
                    if v == Val::Absent {
                        return Ok(Val::Absent);
                    }
                    vs.push(v);
                }
                Val::Concat(vs)
            }
            // A flow carries no IPv6 extension headers (ufw drops type-0 routing headers).
            "exthdr" => Val::Absent,
            "numgen" => {
                if body.get("mode").and_then(Value::as_str) != Some("inc") {
                    return Err(self.unsupported(format!("numgen {body}")));
                }
                // The first packet through the rule gets 0.
                Val::Int(0)
            }
            other => return Err(self.unsupported(format!("expression `{other}`"))),
        })
    }

    fn eval_expr_or_literal(&self, e: &Value, p: &Packet) -> Result<u64, EvalError> {
        match e {
            Value::Number(n) => n.as_u64().ok_or_else(|| self.unsupported(format!("number {n}"))),
            _ => match self.eval_expr(e, p)? {
                Val::Int(n) => Ok(n),
                other => Err(self.unsupported(format!("arithmetic on {other:?}"))),
            },
        }
    }

    /// A DNAT address or port: a literal, or `{"map": {key, data}}` (absent key = `None`).
    /// Returns the value, a port carried by a concatenated value, and the element's comment.
    #[allow(clippy::type_complexity)]
    fn dnat_value(&self, v: &Value, p: &Packet) -> Result<Option<(Val, Option<u16>, Option<String>)>, EvalError> {
        if let Some(m) = v.get("map") {
            let key = self.eval_expr(m.get("key").unwrap_or(&Value::Null), p)?;
            if key == Val::Absent {
                return Ok(None);
            }
            let data = m.get("data").ok_or_else(|| self.unsupported(format!("map {m}")))?;
            let Some((Some(found), comment)) = self.lookup_elem(data, &key)? else { return Ok(None) };
            return Ok(self.dnat_value(&found, p)?.map(|(val, port, c)| (val, port, c.or(comment))));
        }
        match v {
            Value::String(s) => match s.parse::<IpAddr>() {
                Ok(a) => Ok(Some((Val::Addr(a), None, None))),
                Err(_) => Err(self.unsupported(format!("dnat value \"{s}\""))),
            },
            Value::Number(n) => Ok(Some((Val::Int(n.as_u64().unwrap_or(0)), None, None))),
            Value::Object(o) if o.contains_key("concat") => {
                let parts = o["concat"].as_array().filter(|a| a.len() == 2).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                let addr = parts[0].as_str().and_then(|s| s.parse::<IpAddr>().ok()).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                let port = parts[1].as_u64().and_then(|n| u16::try_from(n).ok()).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                Ok(Some((Val::Addr(addr), Some(port), None)))
            }
            other => Err(self.unsupported(format!("dnat value {other}"))),
        }
    }
}
