//! Flow effects of a change: representative flows derived from the rules a change touches
//! (their protocols and ports, each member of their address sets, a source outside every set)
//! and the repository's policy-test flows, evaluated against the old and the new artifacts.
//! What differs becomes "opens tcp/5432 from anywhere", "closes tcp/22 from 198.51.100.0/24",
//! "changes tcp/8080 from anywhere: DNAT 10.0.0.5:80 -> 10.0.0.6:80". Pure: `fwc plan` renders it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;

use super::{Evaluator, Explanation, Flow, FlowSpec, Origin, Verdict, L4};
use crate::artifacts::Artifacts;
use crate::model::{AddrElem, AddrMatch, ChainKind, ForwardProto, Proto, Ruleset};
use crate::read::source::SourceTree;
use crate::HostView;

/// One flow whose fate changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowEffect {
    /// `opens`, `closes` or `changes`.
    pub effect: &'static str,
    /// The sentence: `opens tcp/5432 from anywhere`.
    pub text: String,
    pub flow: String,
    pub before: String,
    pub after: String,
}

/// An expectation of the repository whose result changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectationChange {
    pub name: String,
    pub location: String,
    pub before: bool,
    pub after: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlowEffects {
    /// How many flows were evaluated on both sides.
    pub probes: usize,
    pub effects: Vec<FlowEffect>,
    pub expectations: Vec<ExpectationChange>,
}

/// A flow to try and how to name its source in a sentence.
#[derive(Debug, Clone)]
struct Probe {
    flow: Flow,
    from: String,
}

const OUTSIDE_V4: &[&str] = &["198.18.200.1", "100.64.200.1", "172.31.200.1", "192.0.2.254"];
const OUTSIDE_V6: &[&str] = &["2001:db8:ffff::1", "2001:db8:fffe::1", "fd00:ffff::1"];

fn first_addr(e: &AddrElem) -> IpAddr {
    match e {
        AddrElem::Net(n) => n.network(),
        AddrElem::Range(a, _) => *a,
    }
}

fn elem_contains(e: &AddrElem, a: IpAddr) -> bool {
    match e {
        AddrElem::Net(n) => n.contains(&a),
        AddrElem::Range(lo, hi) => lo.is_ipv4() == a.is_ipv4() && *lo <= a && a <= *hi,
    }
}

/// Every address element the rules mention (sets and literals).
fn all_elems(rs: &Ruleset) -> Vec<AddrElem> {
    let mut out: Vec<AddrElem> = rs.sets.iter().flat_map(|s| s.elements.iter().map(|e| e.value)).collect();
    let lit = |m: &Option<crate::model::Spanned<AddrMatch>>| match m.as_ref().map(|m| &m.value) {
        Some(AddrMatch::Literal(v)) => v.clone(),
        _ => Vec::new(),
    };
    for c in &rs.chains {
        for r in &c.rules {
            out.extend(lit(&r.from));
            out.extend(lit(&r.to));
        }
    }
    for f in &rs.forwards {
        out.extend(lit(&f.from));
    }
    out
}

/// An address outside every set and literal of both rulesets, per family.
fn outside(elems: &[AddrElem], v6: bool) -> IpAddr {
    let pool = if v6 { OUTSIDE_V6 } else { OUTSIDE_V4 };
    pool.iter().map(|s| s.parse::<IpAddr>().expect("valid")).find(|a| !elems.iter().any(|e| elem_contains(e, *a))).unwrap_or_else(|| pool[0].parse().expect("valid"))
}

/// Sources for a rule's `from=`: each member (labelled), and always "anywhere" (both families).
fn sources(rs: &Ruleset, from: Option<&AddrMatch>, elems: &[AddrElem]) -> Vec<(IpAddr, String)> {
    let mut out = Vec::new();
    match from {
        Some(AddrMatch::Set(name)) => {
            if let Some(set) = rs.sets.iter().find(|s| s.name.value == *name) {
                for e in &set.elements {
                    out.push((first_addr(&e.value), format!("{} (@{name})", e.value)));
                }
            }
        }
        Some(AddrMatch::Literal(v)) => out.extend(v.iter().map(|e| (first_addr(e), e.to_string()))),
        None => {}
    }
    out.push((outside(elems, false), "anywhere".into()));
    out.push((outside(elems, true), "anywhere (IPv6)".into()));
    out
}

fn l4s(p: Option<Proto>) -> Vec<L4> {
    match p {
        Some(Proto::Tcp) => vec![L4::Tcp],
        Some(Proto::Udp) => vec![L4::Udp],
        Some(Proto::Icmp) => vec![L4::Icmp],
        Some(Proto::Icmpv6) => vec![L4::Icmpv6],
        Some(Proto::Other(n)) => vec![L4::Other(n)],
        Some(Proto::Both) | None => vec![L4::Tcp, L4::Udp],
    }
}

/// What a rule admits, for probing: protocol, destination, port (ICMP: type), input and output
/// interface, ICMP code.
type Service = (L4, Option<IpAddr>, Option<u16>, Option<String>, Option<String>, Option<u8>);

/// Interfaces to probe for an `in=`/`out=` list: each name; negated, one no rule names.
fn ifaces(m: Option<&crate::model::Spanned<Vec<String>>>, negated: bool) -> Vec<Option<String>> {
    match m {
        None => vec![None],
        Some(_) if negated => vec![None],
        Some(l) => l.value.iter().cloned().map(Some).collect(),
    }
}

/// Probes for the named rules of one ruleset (`changed`: identities `fwc:<kind>:<name>`; a
/// changed chain probes all its rules).
fn probes_for(rs: &Ruleset, changed: &BTreeSet<String>, elems: &[AddrElem], out: &mut Vec<Probe>) {
    let mut add = |proto: L4, src: (IpAddr, String), dst: Option<IpAddr>, port: Option<u16>, origin: Origin, iif: Option<String>, oif: Option<String>, icmp_code: Option<u8>| {
        let v6 = src.0.is_ipv6();
        if dst.is_some_and(|d| d.is_ipv6() != v6) || (proto == L4::Icmp && v6) || (proto == L4::Icmpv6 && !v6) {
            return;
        }
        let dst = match (origin, dst) {
            (Origin::Forward | Origin::Output, None) => Some(outside(elems, v6)),
            (_, d) => d,
        };
        if dst == Some(src.0) {
            return; // a packet from an address to itself is no flow a rule is written for
        }
        let src_addr = if origin == Origin::Output { None } else { Some(src.0) };
        // An ICMP service's "port" is its ICMP type.
        let icmp_type = port.filter(|_| proto.is_icmp()).and_then(|t| u8::try_from(t).ok());
        let spec = FlowSpec {
            proto: Some(proto),
            from: (src_addr, None),
            to: (dst, port.filter(|_| proto.has_ports()).or(proto.has_ports().then_some(9))),
            origin: Some(origin),
            iif,
            oif,
            icmp_type,
            icmp_code: icmp_code.filter(|_| proto.is_icmp()),
            tcp_flags: None,
            back: None,
        };
        if let Ok(flow) = spec.build() {
            out.push(Probe { flow, from: if origin == Origin::Output { "this host".into() } else { src.1 } });
        }
    };
    // A chain with any change is probed as a whole: every service (protocol, port,
    // destination, interfaces) of its rules from every source any of its rules names, so that a
    // changed `deny` shows on the ports other rules allow.
    for c in &rs.chains {
        let chain_changed = changed.contains(&format!("fwc:chain:{}", c.kind.as_str()));
        let touched = chain_changed || c.rules.iter().any(|r| changed.contains(&crate::emit::nft::rule_comment(crate::model::RuleKind::Filter, &r.name.value)));
        if !touched {
            continue;
        }
        let origin = match c.kind {
            ChainKind::Input | ChainKind::Prerouting => Origin::Input,
            ChainKind::Forward => Origin::Forward,
            ChainKind::Output => Origin::Output,
            // Published ports are DNATed by Docker/Podman, whose tables fwc does not compile:
            // no probe can reach this chain offline.
            ChainKind::Containers => continue,
        };
        let mut services: BTreeSet<Service> = BTreeSet::new();
        let mut srcs: Vec<(IpAddr, String)> = Vec::new();
        for r in &c.rules {
            let dsts: Vec<Option<IpAddr>> = match r.to.as_ref().map(|m| &m.value) {
                Some(AddrMatch::Literal(v)) => v.iter().map(|e| Some(first_addr(e))).collect(),
                Some(AddrMatch::Set(n)) => rs.sets.iter().find(|s| s.name.value == *n).map(|s| s.elements.iter().map(|e| Some(first_addr(&e.value))).collect()).unwrap_or_default(),
                None => vec![None],
            };
            let ports: Vec<Option<u16>> = match (r.ports.as_ref(), r.icmp_types.as_ref()) {
                (Some(p), _) => p.value.iter().flat_map(|r| if r.lo == r.hi { vec![Some(r.lo)] } else { vec![Some(r.lo), Some(r.hi)] }).collect(),
                (None, Some(t)) => t.value.iter().map(|&t| Some(u16::from(t))).collect(),
                (None, None) => vec![None],
            };
            let codes: Vec<Option<u8>> = match &r.icmp_codes {
                Some(c) => c.value.iter().map(|&c| Some(c)).collect(),
                None => vec![None],
            };
            for proto in l4s(r.proto.as_ref().map(|p| p.value)) {
                for dst in &dsts {
                    for port in &ports {
                        for iif in ifaces(r.iif.as_ref(), r.negate.iif) {
                            for oif in ifaces(r.oif.as_ref(), r.negate.oif) {
                                for code in &codes {
                                    services.insert((proto, *dst, *port, iif.clone(), oif.clone(), *code));
                                }
                            }
                        }
                    }
                }
            }
            for src in sources(rs, r.from.as_ref().map(|m| &m.value), elems) {
                if !srcs.iter().any(|s| s.0 == src.0) {
                    srcs.push(src);
                }
            }
        }
        for (proto, dst, port, iif, oif, code) in &services {
            for src in &srcs {
                add(*proto, src.clone(), *dst, *port, origin, iif.clone(), oif.clone(), *code);
            }
        }
    }
    for f in &rs.forwards {
        if !changed.contains(&crate::emit::nft::rule_comment(crate::model::RuleKind::Forward, &f.name.value)) {
            continue;
        }
        let protos = match f.proto {
            ForwardProto::Tcp => vec![L4::Tcp],
            ForwardProto::Udp => vec![L4::Udp],
            ForwardProto::Both => vec![L4::Tcp, L4::Udp],
        };
        let ports = [f.listen.ports.lo, f.listen.ports.hi];
        for proto in protos {
            for src in sources(rs, f.from.as_ref().map(|m| &m.value), elems) {
                for port in ports.iter().collect::<BTreeSet<_>>() {
                    let iif = f.iif.as_ref().and_then(|i| i.value.first().cloned());
                    add(proto, src.clone(), f.listen.addr, Some(*port), Origin::Input, iif, None, None);
                }
            }
        }
    }
    // A changed masquerade/snat: routed flows from its sources out of its interface.
    for sn in &rs.snats {
        if !changed.contains(&crate::emit::nft::rule_comment(sn.kind.rule_kind(), &sn.name.value)) {
            continue;
        }
        let mut dsts: Vec<Option<IpAddr>> = match sn.dst.as_ref().map(|m| &m.value) {
            Some(AddrMatch::Literal(v)) => v.iter().map(|e| Some(first_addr(e))).collect(),
            Some(AddrMatch::Set(n)) => rs.sets.iter().find(|s| s.name.value == *n).map(|s| s.elements.iter().map(|e| Some(first_addr(&e.value))).collect()).unwrap_or_default(),
            None => vec![None],
        };
        // A negated destination (`to="!…"`): the listed ones are left alone, the others translated.
        if sn.negate.to {
            dsts.push(None);
        }
        // Routed from one of its input interfaces (a negated list: from none of them).
        let iif = sn.iif.as_ref().filter(|_| !sn.negate.iif).and_then(|i| i.value.first().cloned());
        let ports: Vec<Option<u16>> = match sn.ports.as_ref() {
            Some(p) => p.value.iter().flat_map(|r| [Some(r.lo), Some(r.hi)]).collect::<BTreeSet<_>>().into_iter().collect(),
            None => vec![None],
        };
        for proto in l4s(sn.proto.as_ref().map(|p| p.value)) {
            for src in sources(rs, sn.from.as_ref().map(|m| &m.value), elems) {
                for dst in &dsts {
                    for port in &ports {
                        add(proto, src.clone(), *dst, *port, Origin::Forward, iif.clone(), sn.oif.as_ref().map(|o| o.value.clone()), None);
                    }
                }
            }
        }
    }
}

/// Identities whose compiled definition differs between the two manifests (or exist on one side).
fn changed_identities(old: Option<&Artifacts>, new: &Artifacts) -> BTreeSet<String> {
    let digests = |a: &Artifacts| -> BTreeMap<String, String> {
        a.manifest.rules.iter().map(|r| (format!("fwc:{}:{}", r.kind.as_str(), if r.kind == crate::model::RuleKind::Chain { r.chain.clone().unwrap_or(r.name.clone()) } else { r.name.clone() }), r.digest.clone())).collect()
    };
    let n = digests(new);
    let o = old.map(digests).unwrap_or_default();
    let mut out: BTreeSet<String> = n.iter().filter(|(k, d)| o.get(*k) != Some(*d)).map(|(k, _)| k.clone()).collect();
    out.extend(o.keys().filter(|k| !n.contains_key(*k)).cloned());
    // A changed set changes every rule that uses it: probe the chains.
    if out.iter().any(|k| k.starts_with("fwc:set:")) {
        out.extend(["fwc:chain:input", "fwc:chain:forward", "fwc:chain:output"].map(String::from));
        out.extend(new.manifest.rules.iter().filter(|r| r.kind == crate::model::RuleKind::Forward).map(|r| format!("fwc:forward:{}", r.name)));
    }
    out
}

fn accepted(x: &Explanation) -> bool {
    x.verdict == Verdict::Accept && x.userspace.as_ref().is_none_or(|u| u.allowed)
}

/// What happens to an accepted flow, in words (empty when nothing is worth saying).
fn fate(x: &Explanation) -> String {
    if !accepted(x) {
        return format!("{} ({})", x.verdict.as_str(), x.decided_by.what);
    }
    let mut parts = vec!["accept".to_string()];
    if let Some((a, p)) = x.dnat {
        parts.push(if a.is_ipv6() { format!("DNAT [{a}]:{p}") } else { format!("DNAT {a}:{p}") });
    }
    if let Some(u) = &x.userspace {
        parts.push(format!("forwarder {} -> {}", u.rule, u.targets.join(",")));
    }
    for q in &x.qos {
        parts.push(format!("class {} ({:?})", q.rule, q.direction).to_lowercase());
    }
    if let Some(sn) = &x.snat {
        parts.push(match sn.to {
            Some(a) => format!("SNAT {a}"),
            None => "masquerade".into(),
        });
    }
    parts.join(", ")
}

fn service(f: &Flow) -> String {
    let mut s = if f.proto.has_ports() { format!("{}/{}", f.proto.as_str(), f.dport) } else { f.proto.as_str().to_string() };
    match f.origin {
        Origin::Forward => s.push_str(&format!(" to {} (routed)", f.daddr)),
        Origin::Output => s.push_str(&format!(" to {} (outgoing)", f.daddr)),
        Origin::Input if f.daddr != IpAddr::V4(super::flow::DEFAULT_LOCAL_V4) && f.daddr != IpAddr::V6(super::flow::DEFAULT_LOCAL_V6) => {
            s.push_str(&format!(" on {}", f.daddr))
        }
        Origin::Input => {}
    }
    s
}

/// Compare `old` (None: nothing applied / did not compile) and `new` for the host of `new_view`.
/// `old_view` (the old rules, when known: a `--from` plan) adds probes for rules the change
/// removes; against an applied generation only its artifacts are known.
pub fn flow_effects(
    old_view: Option<&HostView>,
    old: Option<&Artifacts>,
    new_view: &HostView,
    new: &Artifacts,
    tests: &[crate::policytest::PolicyTest],
) -> Result<FlowEffects, super::EvalError> {
    flow_effects_at(old_view, old, new_view, new, tests, jiff::Timestamp::UNIX_EPOCH)
}

/// [`flow_effects`] with the flows evaluated at `at` (schedules).
pub fn flow_effects_at(
    old_view: Option<&HostView>,
    old: Option<&Artifacts>,
    new_view: &HostView,
    new: &Artifacts,
    tests: &[crate::policytest::PolicyTest],
    at: jiff::Timestamp,
) -> Result<FlowEffects, super::EvalError> {
    effects_beside(old_view, old, new_view, new, tests, at, None)
}

/// [`flow_effects_at`] on a host that also runs other tables (`foreign`: their listing, fwc's
/// own tables left out): both sides are evaluated with them loaded, so a flow's fate is what
/// the host does before and after — an original firewall still loaded beside fwc (the import's
/// migration step) decides as much as fwc's rules do.
fn effects_beside(
    old_view: Option<&HostView>,
    old: Option<&Artifacts>,
    new_view: &HostView,
    new: &Artifacts,
    tests: &[crate::policytest::PolicyTest],
    at: jiff::Timestamp,
    foreign: Option<&serde_json::Value>,
) -> Result<FlowEffects, super::EvalError> {
    let changed = changed_identities(old, new);
    let mut elems = all_elems(&new_view.ruleset);
    if let Some(ov) = old_view {
        elems.extend(all_elems(&ov.ruleset));
    }
    let mut probes = Vec::new();
    probes_for(&new_view.ruleset, &changed, &elems, &mut probes);
    if let Some(ov) = old_view {
        probes_for(&ov.ruleset, &changed, &elems, &mut probes);
    }
    let evaluator = |a: &Artifacts| match foreign {
        Some(l) => Evaluator::beside(a, l),
        None => Evaluator::new(a),
    };
    let new_ev = evaluator(new)?.at(at);
    let old_ev = old.map(|o| evaluator(o).map(|e| e.at(at))).transpose()?;
    let nothing = match foreign {
        Some(l) => super::foreign::table_from_listing(l)?,
        None => super::nft::Table::default(),
    };
    let empty = Evaluator { table: nothing, qos: Default::default(), forward: Default::default(), at: Some(at) };
    let old_ev = old_ev.as_ref().unwrap_or(&empty);
    let mut out = FlowEffects::default();
    let mut seen = BTreeSet::new();
    let host = &new_view.host.name.value;
    let host_tests: Vec<&crate::policytest::PolicyTest> = tests.iter().filter(|t| t.host.as_ref().is_none_or(|h| h == host)).collect();
    for t in &host_tests {
        probes.push(Probe { flow: t.flow.clone(), from: t.flow.saddr.to_string() });
    }
    for p in &probes {
        if !seen.insert(p.flow.to_string()) {
            continue;
        }
        out.probes += 1;
        let (b, a) = (old_ev.explain(&p.flow)?, new_ev.explain(&p.flow)?);
        let (fb, fa) = (fate(&b), fate(&a));
        if fb == fa {
            continue;
        }
        let what = format!("{} from {}", service(&p.flow), p.from);
        let (effect, text) = match (accepted(&b), accepted(&a)) {
            (false, true) => ("opens", format!("opens {what}")),
            (true, false) => ("closes", format!("closes {what}")),
            (false, false) if b.verdict == a.verdict => continue,
            _ => ("changes", format!("changes {what}: {fb} -> {fa}")),
        };
        out.effects.push(FlowEffect { effect, text, flow: p.flow.to_string(), before: fb, after: fa });
    }
    // Several probes often tell the same story (two ports of one range): one line each; and a
    // service opened or closed "from anywhere" need not be listed again per source.
    let mut texts = BTreeSet::new();
    out.effects.retain(|e| texts.insert(e.text.clone()));
    let anywhere: BTreeSet<(String, String)> = out
        .effects
        .iter()
        .filter_map(|e| e.text.split_once(" from anywhere").map(|(head, _)| (head.to_string(), e.after.clone())))
        .collect();
    out.effects.retain(|e| match e.text.split_once(" from ") {
        Some((head, rest)) if !rest.starts_with("anywhere") => !anywhere.contains(&(head.to_string(), e.after.clone())),
        _ => true,
    });
    for t in host_tests {
        let locs = BTreeMap::new();
        let before = crate::policytest::judge(t, host, old_ev.explain(&t.flow)?, &locs).passed;
        let after = crate::policytest::judge(t, host, new_ev.explain(&t.flow)?, &locs).passed;
        if before != after {
            out.expectations.push(ExpectationChange { name: t.name.clone(), location: format!("{}:{}", t.location.file, t.location.line), before, after });
        }
    }
    Ok(out)
}

/// Representative flows of every rule of a host (as if everything were new), plus the flows of
/// `tests`: what `fwc plan` would try for a first apply. The kernel cross-check of the golden
/// cases uses them.
pub fn representative_flows(view: &HostView, art: &Artifacts, tests: &[crate::policytest::PolicyTest]) -> Vec<Flow> {
    let changed = changed_identities(None, art);
    let elems = all_elems(&view.ruleset);
    let mut probes = Vec::new();
    probes_for(&view.ruleset, &changed, &elems, &mut probes);
    let mut seen = BTreeSet::new();
    let mut out: Vec<Flow> = Vec::new();
    for f in probes.into_iter().map(|p| p.flow).chain(tests.iter().map(|t| t.flow.clone())) {
        if seen.insert(f.to_string()) {
            out.push(f);
        }
    }
    out
}

/// Flow effects of `--from`-style plans: both trees, one host. `None` when the new side does not compile.
pub fn between_trees(old: Option<&SourceTree>, new: &SourceTree, host: Option<&str>) -> Option<Result<FlowEffects, super::EvalError>> {
    between_trees_at(old, new, host, jiff::Timestamp::UNIX_EPOCH)
}

/// [`between_trees`] compiled and evaluated at `at` (schedules).
pub fn between_trees_at(old: Option<&SourceTree>, new: &SourceTree, host: Option<&str>, at: jiff::Timestamp) -> Option<Result<FlowEffects, super::EvalError>> {
    let nv = crate::load_host(new, host).ok()?;
    let na = crate::emit_view_at(&nv, None, at);
    let ov = old.and_then(|t| crate::load_host(t, Some(&nv.host.name.value)).ok());
    let oa = ov.as_ref().map(|v| crate::emit_view_at(v, None, at));
    let tests = crate::policytest::parse(new, &mut crate::read::source::SourceMap::default()).unwrap_or_default();
    Some(flow_effects_at(ov.as_ref(), oa.as_ref(), &nv, &na, &tests, at))
}

/// Flow effects of a live plan: the applied artifacts (None: nothing applied) against `new`'s
/// rules for `host`. `None` when the new side does not compile.
pub fn against_applied(applied: Option<&Artifacts>, new: &SourceTree, host: Option<&str>) -> Option<Result<FlowEffects, super::EvalError>> {
    against_applied_at(applied, new, host, jiff::Timestamp::UNIX_EPOCH)
}

/// [`against_applied`] compiled and evaluated at `at` (schedules).
pub fn against_applied_at(applied: Option<&Artifacts>, new: &SourceTree, host: Option<&str>, at: jiff::Timestamp) -> Option<Result<FlowEffects, super::EvalError>> {
    let nv = crate::load_host(new, host).ok()?;
    let na = crate::emit_view_at(&nv, None, at);
    let tests = crate::policytest::parse(new, &mut crate::read::source::SourceMap::default()).unwrap_or_default();
    Some(flow_effects_at(None, applied, &nv, &na, &tests, at))
}

/// [`against_applied_at`] on a host that runs other tables beside fwc's (`foreign`: their
/// `nft -j list ruleset` listing without fwc's tables).
pub fn against_applied_beside(applied: Option<&Artifacts>, new: &SourceTree, host: Option<&str>, at: jiff::Timestamp, foreign: &serde_json::Value) -> Option<Result<FlowEffects, super::EvalError>> {
    let nv = crate::load_host(new, host).ok()?;
    let na = crate::emit_view_at(&nv, None, at);
    let tests = crate::policytest::parse(new, &mut crate::read::source::SourceMap::default()).unwrap_or_default();
    Some(effects_beside(None, applied, &nv, &na, &tests, at, Some(foreign)))
}

/// The flow-effects section of a plan, as text.
pub fn render_text(e: &FlowEffects) -> String {
    let mut out = String::new();
    if e.effects.is_empty() && e.expectations.is_empty() {
        let _ = writeln!(out, "\nFlow effects: none ({} representative flow(s) evaluated before and after).", e.probes);
        return out;
    }
    let _ = writeln!(out, "\nFlow effects ({} representative flow(s) evaluated before and after):", e.probes);
    for f in &e.effects {
        let sign = match f.effect {
            "opens" => '+',
            "closes" => '-',
            _ => '~',
        };
        let _ = writeln!(out, "  {sign} {}", f.text);
    }
    for x in &e.expectations {
        let _ = writeln!(out, "  ! expectation \"{}\" ({}) {}", x.name, x.location, if x.after { "now passes" } else { "now FAILS" });
    }
    out
}

/// Plan text and flow effects as a pull-request comment (GitHub/GitLab markdown).
pub fn render_markdown(plan_text: &str, e: &FlowEffects) -> String {
    let mut out = String::from("### fwc plan\n\n");
    let failing = e.expectations.iter().filter(|x| !x.after).count();
    if failing > 0 {
        let _ = writeln!(out, "**{failing} policy expectation(s) would fail.**\n");
    }
    if e.effects.is_empty() {
        let _ = writeln!(out, "No flow changes its fate ({} representative flows evaluated).\n", e.probes);
    } else {
        let _ = writeln!(out, "| | flow effect | before | after |\n|---|---|---|---|");
        for f in &e.effects {
            let icon = match f.effect {
                "opens" => "🟢 opens",
                "closes" => "🔴 closes",
                _ => "🟡 changes",
            };
            let text = f.text.split_once(' ').map_or(f.text.as_str(), |(_, rest)| rest).split(": ").next().unwrap_or_default();
            let _ = writeln!(out, "| {icon} | `{}` | {} | {} |", text.replace('|', "\\|"), f.before.replace('|', "\\|"), f.after.replace('|', "\\|"));
        }
        out.push('\n');
    }
    for x in &e.expectations {
        let _ = writeln!(out, "- expectation **{}** (`{}`) {}", x.name, x.location, if x.after { "now passes" } else { "**now fails**" });
    }
    let _ = writeln!(out, "\n<details><summary>rule changes</summary>\n\n```diff\n{}```\n</details>", plan_text);
    out
}
