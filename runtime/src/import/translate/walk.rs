//! The filter hooks: a base chain's rules (and the user chains it jumps to, inlined) become
//! fwc rules, merged into fwc's built-ins where those are no wider, or refused.

use serde_json::Value;

use super::owned::*;
use super::parse::*;
use super::tx::*;
use crate::import::model::*;
use crate::import::naming::rule_name;

impl Tx<'_> {
    /// Translate the rules of `c` (and of the user chains it jumps to, inlined) under `pre`.
    /// `via`: the origin of the jump that led here (a rule that adds no match of its own, such
    /// as ufw's `ufw-user-limit-accept` or `ufw-skip-to-policy-input`, is named by the jump).
    pub(super) fn walk(&mut self, c: &ChainInfo, pre: &Cond, hook: &'static str, depth: usize, via: Option<&str>, out: &mut Vec<Rule>) {
        let n = c.rules.len();
        for i in 0..n {
            let origin = self.origin(c, i);
            let r = &c.rules[i];
            let expr = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let comment = r.get("comment").and_then(Value::as_str).map(str::to_string);
            let named = |name: &str| self.sets.get(&(c.family.clone(), c.table.clone(), name.to_string())).map(|s| s.elems.clone());
            if let Some(rules) = flatten_vmap(&expr).or_else(|| flatten_concat(&expr, named)) {
                let rules: Vec<Value> = rules.into_iter().map(|e| serde_json::json!({ "expr": e })).collect();
                let flat = ChainInfo { handles: vec![None; rules.len()], rules, origin: Some(origin), ..c.clone() };
                self.walk(&flat, pre, hook, depth, via, out);
                continue;
            }
            if let Some(what) = comment.as_deref().and_then(|c| c.strip_prefix(crate::import::model::XT_MARK)) {
                self.out.refused.push(Refusal {
                    origin,
                    what: format!("an iptables match nftables cannot express ({what})"),
                    hint: "rewrite the rule without it (iptables-translate shows what nftables can say), or leave it out with --partial".into(),
                });
                continue;
            }
            if mentions_container_iface(&expr) {
                self.out.containers = true;
                self.note_at("rules about container bridges are Docker's/libvirt's own: left out — fwc's `containers` block keeps containers working", &origin);
                continue;
            }
            // MSS clamping in a mangle forward chain taken as the forward chain.
            if *pre == Cond::default() {
                if let Some((kind, rule)) = self.router_form(c, hook, i, &expr, &origin) {
                    match kind == hook {
                        true => out.push(rule),
                        false => self.add_to_block(kind, rule),
                    }
                    continue;
                }
            }
            if super::router::is_clamp(&expr) {
                self.out.refused.push(Refusal {
                    origin,
                    what: "MSS clamping (`tcp option maxseg size set …`) after rules that can accept, drop or jump, or in a chain jumped to: it clamps only the SYNs that get there, while fwc's clamp-mss sees every routed SYN".into(),
                    hint: "move it to a forward chain of its own at the mangle priority (type filter hook forward priority -150), which imports as `clamp-mss`, or leave it out with --partial".into(),
                });
                continue;
            }
            if super::prerouting::reverse_path(&expr) {
                self.out.refused.push(Refusal {
                    origin,
                    what: format!("`{}`: reverse-path filtering", crate::import::words::describe_rule(&expr)),
                    hint: super::other::hint_for(hook, "fib"),
                });
                continue;
            }
            let (cond, st) = match self.parse(&c.family, &c.table, &expr) {
                Ok(x) => x,
                Err((what, hint)) => {
                    self.out.refused.push(Refusal { origin, what, hint });
                    continue;
                }
            };
            let origin = match via {
                Some(v) if cond == Cond::default() => v.to_string(),
                _ => origin,
            };
            if st.from_except.is_some() {
                self.out.refused.push(Refusal { origin, what: "two matches on the source address (`ip saddr A ip saddr != B`) in a filter rule".into(), hint: "fwc's filter rules take one source match: split it by hand (a deny of the exception before an allow of the rest)".into() });
                continue;
            }
            if [&cond.iif, &cond.oif].into_iter().flatten().flat_map(|i| i.split(',')).any(container_iface) {
                self.out.containers = true;
                self.note_at("rules about container bridges are Docker's/libvirt's own: left out — fwc's `containers` block keeps containers working", &origin);
                continue;
            }
            let cond = match merge(pre, &cond) {
                Ok(c) => c,
                Err(what) => {
                    self.out.refused.push(Refusal { origin, what, hint: "split the jump's rules by hand".into() });
                    continue;
                }
            };
            if st.exthdr && st.verdict.as_deref() == Some("drop") {
                self.out.merged.push((origin, "a drop of packets with an IPv6 routing/extension header (type-0 routing headers are deprecated, RFC 5095; the kernel ignores them): fwc has no such match".into()));
                continue;
            }
            let accept = st.verdict.as_deref() == Some("accept");
            if accept && matches!(hook, "input" | "output") && has_nd(&cond) {
                if let Some(only) = narrower_than_builtin(&cond, pre) {
                    // Router advertisements only: `input router-advertisements="none"` takes
                    // them out of fwc's built-in, and this accept decides them as a rule.
                    if hook == "input" && cond.icmp_type.as_deref() == Some("nd-router-advert") {
                        self.out.ra_by_rules = true;
                        if st.hoplimit {
                            self.note_at("the hop-limit match of a router-advertisement accept is left out: the kernel ignores router advertisements whose hop limit is not 255", &origin);
                        }
                        let name = rule_name(&mut self.names, &Verb::Allow, &cond);
                        out.push(Rule { name, verb: Verb::Allow, cond, rate: None, per_source: false, log: st.log, log_prefix: st.log_prefix.clone(), log_rate: None, comment, origin });
                        continue;
                    }
                    self.out.refused.push(Refusal {
                        origin,
                        what: format!("an accept of neighbour discovery ({}) only {only}: fwc accepts neighbour discovery itself, before any rule, on every interface and from every address, which is wider", cond.icmp_type.clone().unwrap_or_default()),
                        hint: "fwc narrows only the router advertisements of its neighbour-discovery accept (`input router-advertisements=…`): accept the other types everywhere in the original, or keep this host on its original firewall".into(),
                    });
                    continue;
                }
            }
            if st.hoplimit {
                let only_nd = cond.icmp_type.as_deref().is_some_and(|t| t.split(',').all(|x| ND.contains(&x)));
                let only_ignored = cond.icmp_type.as_deref().is_some_and(|t| t.split(',').all(|x| KERNEL_IGNORES.contains(&x)));
                if only_nd && accept && matches!(hook, "input" | "output") {
                    self.out.merged.push((origin, "neighbour discovery with hop limit 255: fwc accepts neighbour discovery itself".into()));
                } else if only_ignored && accept && matches!(hook, "input" | "output") && cond.proto.as_deref() == Some("icmpv6") {
                    // ufw's before6.rules: an on-link accept (hop limit 255 or 1) of ICMPv6
                    // messages the kernel does not act on (inverse ND, SEND, multicast router
                    // discovery: informational types icmpv6_rcv passes over). Routed ones the
                    // original does not accept either; on-link ones now meet the policy.
                    self.out.merged.push((origin, format!("an on-link accept (hop limit) of ICMPv6 {} (inverse ND, SEND, multicast router discovery), which the kernel does not act on: left to the chain's policy — add `allow proto=icmpv6 icmp-type=…` if a userspace daemon (SEND, mrd6) reads them", cond.icmp_type.clone().unwrap_or_default())));
                } else {
                    self.out.refused.push(Refusal {
                        origin,
                        what: "a match on the hop limit / TTL (on-link ICMPv6 such as MLD, inverse ND, SEND)".into(),
                        hint: "fwc has no hop-limit match; these packets stay under the chain's policy (or add an nftables table of your own for them)".into(),
                    });
                }
                continue;
            }
            if st.fib_other {
                let target = st.target.clone().unwrap_or_default();
                if target.contains("skip-to-policy") {
                    self.out.merged.push((origin, format!("broadcast/multicast packets sent to the policy ({target}), where they end anyway")));
                } else {
                    self.out.refused.push(Refusal { origin, what: "a match on the destination's address type (broadcast, multicast)".into(), hint: "fwc has no such match; match the addresses instead".into() });
                }
                continue;
            }
            if st.ct_dnat || st.fib_local {
                if st.verdict.as_deref() == Some("accept") && st.ct_dnat && cond == *pre {
                    self.out.merged.push((origin, "`ct status dnat accept`: fwc accepts the connections of its forwards itself".into()));
                } else {
                    self.out.refused.push(Refusal { origin, what: "a filter rule matching `ct status`/`fib`".into(), hint: "fwc has no such match in filter rules; rewrite it with addresses".into() });
                }
                continue;
            }
            if st.dnat.is_some() || st.masquerade || st.snat.is_some() {
                self.out.refused.push(Refusal { origin, what: "NAT in a filter chain".into(), hint: "move it to a nat chain".into() });
                continue;
            }
            // ct state: fwc accepts established/related first and (input) drops invalid.
            let mut cond = cond;
            // (The prerouting block sees every packet, established ones too: its states stay.)
            if let Some(state) = cond.state.clone().filter(|_| hook != "prerouting") {
                let rest: Vec<&str> = state.split(',').filter(|x| !matches!(*x, "established" | "related")).collect();
                if rest.is_empty() {
                    if accept && cond == (Cond { state: Some(state.clone()), ..pre.clone() }) {
                        self.out.merged.push((origin, "`ct state established,related accept`: fwc adds it itself, first in every chain".into()));
                    } else if accept || st.verdict.is_none() {
                        self.out.merged.push((origin, "matches only established/related packets, which fwc accepts before any rule".into()));
                    } else {
                        self.out.refused.push(Refusal {
                            origin,
                            what: format!("a {} of established/related packets", st.verdict.clone().unwrap_or_default()),
                            hint: "fwc accepts established and related packets before any rule: this rule would never see them".into(),
                        });
                    }
                    continue;
                }
                if hook == "input" && rest == ["invalid"] && st.verdict.as_deref() == Some("drop") && cond == (Cond { state: Some(state.clone()), ..pre.clone() }) {
                    self.out.merged.push((origin.clone(), "`ct state invalid drop`: fwc's input chain does it itself".into()));
                    if self.invalid_dropped.is_none() {
                        self.invalid_dropped = Some(origin);
                    }
                    continue;
                }
                cond.state = if hook == "input" && rest == ["new"] { None } else { Some(rest.join(",")) };
            }
            // A chain jumped to from input and output alike: in output there is no input
            // interface (and in input no output interface), so such a rule never matches there
            // (and its negation, `iifname != "eth0"`, always does: it is no condition there).
            match hook {
                "output" if cond.not.iif => {
                    cond.iif = None;
                    cond.not.iif = false;
                }
                "input" if cond.not.oif => {
                    cond.oif = None;
                    cond.not.oif = false;
                }
                _ => {}
            }
            let never = match hook {
                "output" => cond.iif.clone().map(|i| format!("iif {i}")),
                "input" => cond.oif.clone().map(|o| format!("oif {o}")),
                _ => None,
            };
            if let Some(m) = never {
                self.out.merged.push((origin, format!("`{m}` never matches in the {hook} hook (its packets have no such interface): nothing to import there")));
                continue;
            }
            if hook == "input" && cond.iif.as_deref() == Some("lo") && !cond.not.iif && st.verdict.as_deref() == Some("accept") && (Cond { iif: None, ..cond.clone() }) == *pre {
                self.out.merged.push((origin, "`iif lo accept`: fwc accepts loopback itself".into()));
                continue;
            }
            if hook == "output" && cond.oif.as_deref() == Some("lo") && !cond.not.oif && st.verdict.as_deref() == Some("accept") && (Cond { oif: None, ..cond.clone() }) == *pre {
                self.out.merged.push((origin, "`oif lo accept`: fwc accepts loopback itself".into()));
                continue;
            }
            match st.verdict.as_deref() {
                Some("jump" | "goto") => {
                    let target = st.target.clone().unwrap_or_default();
                    if let Some(who) = owner(&c.family, &c.table, &target) {
                        self.note_at(&format!("jumps to {who}'s own chains left out — fwc coexists with them"), &format!("{origin} -> {target}"));
                        if who == "Docker" {
                            self.out.containers = true;
                        }
                        continue;
                    }
                    let key = (c.family.clone(), c.table.clone(), target.clone());
                    let Some(sub) = self.chains.get(&key).cloned() else {
                        self.out.refused.push(Refusal { origin, what: format!("jump to unknown chain {target}"), hint: "fix the original".into() });
                        continue;
                    };
                    if hook == "input" && sub.rules.first().is_some_and(|r| {
                        let e = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                        e.iter().any(|x| x.pointer("/match/left/fib").is_some() && x.pointer("/match/right") == Some(&Value::from("local"))) && e.iter().any(|x| x.get("return").is_some())
                    }) {
                        self.out.merged.push((origin, format!("chain {target} drops only packets not addressed to this host (it returns for local ones first); fwc's input rules see packets addressed to it")));
                        continue;
                    }
                    let log_only = sub.rules.iter().all(|r| {
                        r.get("expr").and_then(Value::as_array).into_iter().flatten().all(|x| {
                            x.get("match").is_some() || x.get("log").is_some() || x.get("limit").is_some() || x.get("counter").is_some() || x.get("return").is_some()
                        })
                    });
                    if log_only && !sub.rules.is_empty() {
                        self.out.merged.push((origin, format!("chain {target} only counts or logs, it decides nothing: left out (fwc logs with log=, log-prefix= on a rule)")));
                        continue;
                    }
                    if st.limit.is_some() {
                        let mut inner = Vec::new();
                        self.walk(&sub, &cond, hook, depth + 1, Some(&origin), &mut inner);
                        for mut r in inner {
                            if r.verb == Verb::Allow && r.rate.is_none() {
                                r.rate = st.limit.clone();
                                r.per_source = st.per_source;
                                out.push(r);
                            } else {
                                self.out.refused.push(Refusal { origin: r.origin.clone(), what: "a rate limit on a jump to rules other than accepts".into(), hint: "fwc limits the rate of allow rules only".into() });
                            }
                        }
                        continue;
                    }
                    if depth > 8 {
                        self.out.refused.push(Refusal { origin, what: "jumps nest deeper than 8 chains".into(), hint: "flatten the chains".into() });
                        continue;
                    }
                    if st.verdict.as_deref() == Some("goto") && i + 1 != n && cond != *pre {
                        self.out.refused.push(Refusal { origin, what: format!("a conditional goto to {target} before other rules"), hint: "use jump, or move the rule last".into() });
                        continue;
                    }
                    // A `return` is fine only as the sub-chain's unconditional last rule.
                    let returns_early = sub.rules.iter().enumerate().any(|(k, r)| {
                        let e = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                        e.iter().any(|x| x.get("return").is_some()) && !(k + 1 == sub.rules.len() && e.iter().all(|x| x.get("return").is_some() || x.get("counter").is_some()))
                    });
                    if returns_early {
                        self.out.refused.push(Refusal {
                            origin,
                            what: format!("chain {target} returns early under a condition (fwc's rules cannot skip the rest of a chain)"),
                            hint: "rewrite the chain without `return` before its end".into(),
                        });
                        continue;
                    }
                    if sub.handles.is_empty() {
                        continue;
                    }
                    self.walk(&sub, &cond, hook, depth + 1, Some(&origin), out);
                    if st.verdict.as_deref() == Some("goto") {
                        return;
                    }
                }
                Some("return") => {
                    if i + 1 == n && cond == *pre {
                        self.out.merged.push((origin, format!("the `return` that ends chain {}", c.name)));
                        continue;
                    }
                    self.out.refused.push(Refusal { origin, what: "a conditional `return`".into(), hint: "rewrite the chain without it".into() });
                }
                None if st.log => {
                    let name = rule_name(&mut self.names, &Verb::Log, &cond);
                    out.push(Rule { name, verb: Verb::Log, cond, rate: None, per_source: false, log: true, log_prefix: st.log_prefix.clone(), log_rate: st.limit.clone(), comment, origin });
                }
                None => self.out.merged.push((origin, "a rule without verdict or log (a counter) does nothing fwc needs".into())),
                Some(v) => {
                    let verb = match v {
                        "accept" => Verb::Allow,
                        "drop" => Verb::Deny,
                        _ => Verb::Reject(st.reject_type.clone()),
                    };
                    if st.limit_over {
                        self.out.refused.push(Refusal {
                            origin,
                            what: "`limit rate over …` (acts on the packets over a rate)".into(),
                            hint: "use `rate=` on the allow rule instead (new connections over the rate fall through to the policy)".into(),
                        });
                        continue;
                    }
                    if st.limit.is_some() && verb != Verb::Allow {
                        self.out.refused.push(Refusal { origin, what: format!("a rate limit on a {v} rule"), hint: "fwc limits the rate of allow rules only".into() });
                        continue;
                    }
                    let mut cond = cond;
                    if hook == "input" && verb == Verb::Allow {
                        let whole = cond.clone();
                        if let Some(dropped) = untrackable_icmp(&mut cond) {
                            match self.invalid_dropped.clone() {
                                // The original dropped invalid packets before this rule: it
                                // accepts only related ones, which fwc accepts itself.
                                Some(at) => self.out.merged.push((
                                    origin.clone(),
                                    format!("ICMP {dropped} after `ct state invalid drop` ({at}): unsolicited ones are `invalid` and were dropped there; related ones fwc accepts itself"),
                                )),
                                // Before the original's invalid drop: the unsolicited ones are
                                // accepted by a `state="invalid"` rule, which fwc decides before
                                // its own invalid drop (and before every other rule: sound only
                                // when no earlier rule of the chain could drop them).
                                None if whole.state.is_none() && st.limit.is_none() && out.iter().all(|r| matches!(r.verb, Verb::Allow | Verb::Log) || !may_overlap(&r.cond, &whole)) => {
                                    let only = Cond { icmp_type: Some(dropped.replace(", ", ",")), state: Some("invalid".into()), ..whole.clone() };
                                    let name = rule_name(&mut self.names, &verb, &only);
                                    out.push(Rule { name, verb: Verb::Allow, cond: only, rate: None, per_source: false, log: st.log, log_prefix: st.log_prefix.clone(), log_rate: None, comment: comment.clone(), origin: origin.clone() });
                                }
                                None => self.out.refused.push(Refusal {
                                    origin: origin.clone(),
                                    what: format!("an accept of ICMP {dropped} before the original drops invalid packets, after a rule that may drop some of them (or with a state or rate): conntrack calls these `invalid` unless they answer a connection, and fwc decides `state=\"invalid\"` rules before every other rule of the input chain"),
                                    hint: "write it by hand as `allow … state=\"invalid\"` if the earlier rules do not concern these packets; replies and errors of this host's own connections need nothing (fwc accepts them as established/related)".into(),
                                }),
                            }
                            if cond.icmp_type.is_none() {
                                continue;
                            }
                        }
                    }
                    // An interface list (`iifname { "br0", "wbr0" }`) stays one rule (`in="br0,wbr0"`).
                    let name = rule_name(&mut self.names, &verb, &cond);
                    out.push(Rule { name, verb, cond, rate: st.limit.clone(), per_source: st.per_source, log: st.log, log_prefix: st.log_prefix.clone(), log_rate: None, comment, origin });
                }
            }
        }
    }

    /// A log-only rule followed by a rule with the same conditions is that rule's `log=`.
    pub(super) fn merge_logs(&mut self, rules: &mut Vec<Rule>) {
        let mut i = 0;
        while i + 1 < rules.len() {
            if rules[i].verb == Verb::Log && rules[i + 1].verb != Verb::Log && rules[i].cond == rules[i + 1].cond && !rules[i + 1].log {
                let l = rules.remove(i);
                let next = &mut rules[i];
                next.log = true;
                next.log_prefix = l.log_prefix;
                next.log_rate = l.log_rate;
                self.names.remove(&l.name);
                self.out.merged.push((l.origin, format!("log rule merged into the next rule's log= ({})", next.name)));
            } else {
                i += 1;
            }
        }
    }
}

/// The first packet's conntrack state of an ICMP type: `new` for requests, `untracked` for
/// MLD and neighbour discovery, `invalid` for replies and errors (as the evaluator models it).
pub fn icmp_opens(v6: bool, t: u8) -> bool {
    if v6 { matches!(t, 128 | 139 | 130..=136 | 143) } else { matches!(t, 8 | 13 | 15 | 17) }
}

/// Remove from an input allow the ICMP types that are `invalid` on their own (fwc drops those
/// first); returns their names when there were any (the rule keeps the others, or none).
pub(super) fn untrackable_icmp(cond: &mut Cond) -> Option<String> {
    let types = cond.icmp_type.clone()?;
    let v6 = cond.proto.as_deref() == Some("icmpv6");
    let (mut keep, mut gone) = (Vec::new(), Vec::new());
    for name in types.split(',') {
        match fwc_compiler::read::units::parse_icmp_types(name, v6).ok().and_then(|v| v.first().copied()) {
            Some(t) if !icmp_opens(v6, t) => gone.push(name.to_string()),
            _ => keep.push(name.to_string()),
        }
    }
    if gone.is_empty() {
        return None;
    }
    cond.icmp_type = (!keep.is_empty()).then(|| keep.join(","));
    Some(gone.join(", "))
}

/// Can a rule with `a` match some packets a rule with `b` matches? Rules of different address
/// families (or protocols) cannot; anything else may.
fn may_overlap(a: &Cond, b: &Cond) -> bool {
    let fam = |c: &Cond| {
        c.family.or(match c.proto.as_deref() {
            Some("icmp") => Some(Family::V4),
            Some("icmpv6") => Some(Family::V6),
            _ => None,
        })
    };
    fn protos(c: &Cond) -> Option<Vec<&str>> {
        c.proto.as_deref().map(|p| if p == "both" { vec!["tcp", "udp"] } else { vec![p] })
    }
    let disjoint_fam = matches!((fam(a), fam(b)), (Some(x), Some(y)) if x != y);
    let disjoint_proto = matches!((protos(a), protos(b)), (Some(x), Some(y)) if !x.iter().any(|p| y.contains(p)));
    !disjoint_fam && !disjoint_proto
}

/// The neighbour-discovery types fwc accepts itself in input and output.
const ND: [&str; 4] = ["nd-router-solicit", "nd-router-advert", "nd-neighbor-solicit", "nd-neighbor-advert"];

/// ICMPv6 informational types Linux's `icmpv6_rcv` passes over (only a raw socket would read
/// them): inverse neighbour discovery (141, 142), SEND (148, 149), multicast router discovery
/// (151–153) — nft's names where it has them, else the number.
const KERNEL_IGNORES: [&str; 9] = ["ind-neighbor-solicit", "ind-neighbor-advert", "141", "142", "148", "149", "151", "152", "153"];

/// Does an accept let neighbour discovery through (some of its ICMPv6 types)?
fn has_nd(c: &Cond) -> bool {
    c.proto.as_deref() == Some("icmpv6") && c.icmp_type.as_deref().is_some_and(|t| t.split(',').any(|x| ND.contains(&x)))
}

/// How an accept of neighbour discovery is narrower than fwc's built-in accept (which takes
/// every interface and address): `on in=wan0, from fe80::/10`; `None` when it is not.
fn narrower_than_builtin(c: &Cond, pre: &Cond) -> Option<String> {
    let mut parts = Vec::new();
    let differs = |a: &Option<String>, b: &Option<String>| a.is_some() && a != b;
    if differs(&c.iif, &pre.iif) {
        parts.push(format!("in={}", c.iif.clone().unwrap_or_default()));
    }
    if differs(&c.oif, &pre.oif) {
        parts.push(format!("out={}", c.oif.clone().unwrap_or_default()));
    }
    for (what, a, b) in [("from", &c.from, &pre.from), ("to", &c.to, &pre.to)] {
        if a.is_some() && a != b {
            parts.push(match a {
                Some(Addrs::List(l)) => format!("{what} {}", l.join(",")),
                Some(Addrs::Set(s)) => format!("{what} @{s}"),
                None => String::new(),
            });
        }
    }
    if differs(&c.state, &pre.state) {
        parts.push(format!("ct state {}", c.state.clone().unwrap_or_default()));
    }
    (!parts.is_empty()).then(|| format!("for {}", parts.join(", ")))
}