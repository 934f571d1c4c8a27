//! The filter chains: user rules (with their ICMP types, states, logging and ways to reject),
//! the accepts that let userspace forwards' listeners and the forwarder's own connections
//! through a drop policy, and the final reject of a `policy=reject` chain.

use super::containers::*;
use super::expr::*;
use super::fam::*;
use super::family::*;
use super::forwards::*;
use super::names::*;
use super::persource;
use super::out::*;
use super::rule_parts::*;
use super::schedule::*;
use super::prelude::*;

pub(super) fn filter_rule(out: &mut Out, plan: &HostPlan, r: &FilterRule) {
    let comment = rule_comment(RuleKind::Filter, &r.name.value);
    let proto = r.proto.as_ref().map(|p| p.value);
    let from = r.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let to = r.to.as_ref().map(|m| addr_parts(plan, &m.value));
    let parts: Vec<&AddrParts> = from.iter().chain(to.iter()).collect();
    let only = match proto {
        // AH over IPv6 is an extension header that nft's `meta l4proto` skips: IPv4 only.
        Some(Proto::Icmp | Proto::Other(crate::model::header::IPPROTO_AH)) => Some(Fam::V4),
        Some(Proto::Icmpv6) => Some(Fam::V6),
        _ => None,
    };
    let neg = r.negate;
    let l4 = l4_match_not(proto, r.ports.as_ref().map(|p| p.value.as_slice()), r.sports.as_ref().map(|p| p.value.as_slice()), (neg.ports, neg.sports));
    for fam in families(&parts, only) {
        // One nft rule per combination of the matches' alternatives (a big set is one hash set
        // per prefix length: `ip saddr & 255.255.255.0 @bl_v4_24`, then `ip saddr @bl_v4_32`).
        // They never overlap, so a packet takes at most one of them. A negated match is one
        // way: the address is in none of them.
        let (fa, ta) = match fam {
            Some(fam) => (addr_ways(from.as_ref(), neg.from, fam, "saddr"), addr_ways(to.as_ref(), neg.to, fam, "daddr")),
            None => (vec![Vec::new()], vec![Vec::new()]),
        };
        for f in &fa {
            for t in &ta {
                let mut expr = Vec::new();
                if let Some(i) = &r.iif {
                    expr.push(iface_match(MetaKey::Iifname, neg.iif, &i.value));
                }
                if let Some(o) = &r.oif {
                    expr.push(iface_match(MetaKey::Oifname, neg.oif, &o.value));
                }
                if let Some(p) = &r.pkttypes {
                    let right = one_or_set(p.value.iter().map(|t| s(t.as_str())).collect()).expect("pkttype lists at least one type");
                    expr.push(eq(meta(MetaKey::Pkttype), right));
                }
                expr.extend(l4.iter().cloned());
                let v6 = proto == Some(Proto::Icmpv6);
                if let Some(t) = &r.icmp_types {
                    expr.push(icmp_type_match(v6, &t.value));
                }
                if let Some(c) = &r.icmp_codes {
                    let one_type = r.icmp_types.as_ref().and_then(|t| t.value.first().copied());
                    expr.push(icmp_code_match(v6, one_type, &c.value));
                }
                if let Some(fl) = &r.tcp_flags {
                    expr.push(tcp_flags_match(fl.value));
                }
                if let Some(mode) = &r.rpfilter {
                    expr.push(crate::features::rpfilter::fib_missing(mode.value));
                }
                expr.extend(f.iter().cloned());
                expr.extend(t.iter().cloned());
                match &r.state {
                    Some(st) => expr.push(ct_state(&st.value.iter().map(|c| c.as_str()).collect::<Vec<_>>())),
                    None if r.rate.is_some() => expr.push(ct_state(&["new"])),
                    None => {}
                }
                persource::filter_guards(out, r, fam, &expr, &comment);
                match time_match(r.schedule.as_ref()) {
                    // schedules
                    Some(t) => out_rules_timed(out, rule_chain(r), expr, rule_tails(r, proto == Some(Proto::Tcp), fam), &comment, &t),
                    None => out_rules(out, rule_chain(r), expr, rule_tails(r, proto == Some(Proto::Tcp), fam), &comment),
                }
            }
        }
    }
}

/// The chain a filter rule goes to: its block's, or the base chain of its feature
/// (reverse-path filtering, MSS clamping).
fn rule_chain(r: &FilterRule) -> &'static str {
    if r.rpfilter.is_some() {
        crate::features::rpfilter::CHAIN
    } else if r.action == Action::ClampMss {
        crate::features::clamp::CHAIN
    } else {
        r.chain.nft_name()
    }
}

/// `icmp type { echo-request, 200 }` / `icmpv6 type …`: nft's names where a type has one.
pub(super) fn icmp_type_match(v6: bool, types: &[u8]) -> S {
    let items = types.iter().map(|&t| match crate::read::units::icmp_type_name(v6, t) {
        Some(name) => s(name),
        None => n(u32::from(t)),
    });
    let right = one_or_set(items.collect()).expect("icmp-type lists at least one type");
    eq(payload(if v6 { "icmpv6" } else { "icmp" }, "type"), right)
}

/// `icmp code frag-needed` / `icmpv6 code { 0, 4 }`: nft's names where a code of the type has one.
fn icmp_code_match(v6: bool, icmp_type: Option<u8>, codes: &[u8]) -> S {
    let items = codes.iter().map(|&c| match crate::features::headers::icmp_code_name_of(v6, icmp_type, c) {
        Some(name) => s(name),
        None => n(u32::from(c)),
    });
    let right = one_or_set(items.collect()).expect("icmp-code lists at least one code");
    eq(payload(if v6 { "icmpv6" } else { "icmp" }, "code"), right)
}

/// `tcp flags & (fin|syn|rst|ack) == syn` (`!=` when negated): flag names as nft lists them,
/// a single name alone, none as 0.
fn tcp_flags_match(f: crate::model::header::TcpFlags) -> S {
    let names = |bits: u8| {
        let v = crate::model::header::tcp_flag_names(bits);
        match v.as_slice() {
            [] => n(0),
            [one] => s(*one),
            many => Expression::List(many.iter().map(|x| s(*x)).collect()),
        }
    };
    eq_or_ne(f.negated, and(payload("tcp", "flags"), names(f.mask)), names(f.set))
}

/// The end of a `policy=reject` chain (its kernel policy is drop): reject what no rule
/// decided, after fwc's accepts for forwards. Default: TCP reset for TCP, else ICMP(v6)
/// port unreachable; `reject-with=` on the chain block: that, for every packet (`tcp-reset`:
/// the default). Comment `fwc:chain:<chain>`.
fn policy_reject(out: &mut Out, c: &ChainPlan) {
    let comment = Some(rule_comment(RuleKind::Chain, c.kind.as_str()));
    let name = c.kind.nft_name();
    match c.reject_with {
        None | Some(RejectWith::TcpReset) => {
            out.rule(name, vec![eq(meta(MetaKey::L4proto), s("tcp")), counter(), reject(true)], comment.clone());
            out.rule(name, vec![counter(), reject(false)], comment);
        }
        Some(w) => {
            for (only, verdict) in reject_as(Some(w), false) {
                let mut e: Vec<S> = only.map(|f| eq(meta(MetaKey::Nfproto), s(f.nfproto()))).into_iter().collect();
                e.push(counter());
                e.push(verdict);
                out.rule(name, e, comment.clone());
            }
        }
    }
}

/// `input` accepts for a userspace forward's listeners, so a drop policy does not block them.
pub(super) fn userspace_accept(out: &mut Out, plan: &HostPlan, f: &ForwardRule) {
    let comment = rule_comment(RuleKind::Forward, &f.name.value);
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let parts: Vec<&AddrParts> = from.iter().collect();
    let addr = listen_addr(f);
    let fams = match (parts.is_empty(), listen_fam(f)) {
        (true, None) => vec![None],
        (true, Some(fam)) => vec![Some(fam)],
        (false, only) => families(&parts, only),
    };
    for fam in fams {
        let mut expr = l4_match(Some(fproto(f.proto)), Some(&[f.listen.value.ports]), None);
        if let Some(fam) = fam {
            match addr {
                Some(a) => expr.push(eq(payload(fam.proto(), "daddr"), s(a.to_string()))),
                None if parts.is_empty() => expr.push(eq(meta(MetaKey::Nfproto), s(fam.nfproto()))),
                None => {}
            }
            // (a set in a forward's from= is always one interval set: `set_layouts`)
            if let Some(a) = from.as_ref().and_then(|p| one_alt(p, fam)) {
                expr.push(a.on(payload(fam.proto(), "saddr")));
            }
        }
        expr.push(counter());
        expr.push(accept());
        out.rule(chains::INPUT, expr, Some(comment.clone()));
    }
}

pub(super) fn has_dns_target(f: &ForwardRule) -> bool {
    f.targets.value.iter().any(|t| matches!(t.host, TargetHost::Dns(_)))
}

/// `output` accepts for a userspace forward's connections to its IP-literal targets (address,
/// protocol and the ports the forwarder connects to, as in `forward.json`), so a drop policy
/// does not cut the forwarder off. One rule per (family, target ports), addresses in a set.
pub(super) fn forwarder_target_accept(out: &mut Out, f: &ForwardRule) {
    let comment = rule_comment(RuleKind::Forward, &f.name.value);
    let listen = f.listen.value.ports;
    let mut groups: Vec<((Fam, PortRange), Vec<IpAddr>)> = Vec::new();
    for (ip, tports) in ip_targets(f) {
        let ports = match tports {
            None => listen,
            Some(r) if r.is_single() => r,
            Some(r) => PortRange { lo: r.lo, hi: r.lo.saturating_add(listen.hi - listen.lo) },
        };
        let key = (Fam::of(&ip), ports);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ips)) => ips.push(ip),
            None => groups.push((key, vec![ip])),
        }
    }
    groups.sort_by_key(|(k, _)| *k);
    for ((fam, ports), mut ips) in groups {
        ips.sort();
        ips.dedup();
        let mut expr = l4_match(Some(fproto(f.proto)), Some(&[ports]), None);
        let addrs = one_or_set(ips.iter().map(|ip| s(ip.to_string())).collect()).expect("at least one target");
        expr.push(eq(payload(fam.proto(), "daddr"), addrs));
        expr.push(accept());
        out.rule(chains::OUTPUT, expr, Some(comment.clone()));
    }
}

/// nftables' priorities of the raw and mangle tables (before / after conntrack at -200).
const PRIO_RAW: i32 = -300;
const PRIO_MANGLE: i32 = -150;

/// The filter base chains, with the user's policies (and the prerouting block's early drops).
pub(super) fn declare_filter_chains(out: &mut Out, plan: &HostPlan) {
    for c in &plan.chains {
        let hook = match c.kind {
            ChainKind::Input => NfHook::Input,
            ChainKind::Forward => NfHook::Forward,
            ChainKind::Output => NfHook::Output,
            ChainKind::Containers => {
                declare_containers_chains(out);
                continue;
            }
            ChainKind::Prerouting => {
                // Before conntrack (raw) unless a rule asks a connection's state (mangle).
                let prio = if c.rules.iter().any(|r| r.state.is_some()) { PRIO_MANGLE } else { PRIO_RAW };
                out.chain(c.kind.nft_name(), Some((NfChainType::Filter, NfHook::Prerouting, prio, NfChainPolicy::Accept)));
                if c.rules.iter().any(|r| r.rpfilter.is_some()) {
                    // Right after the block's other denies (crate::features::rpfilter).
                    out.chain(crate::features::rpfilter::CHAIN, Some((NfChainType::Filter, NfHook::Prerouting, prio + 1, NfChainPolicy::Accept)));
                }
                continue;
            }
        };
        let policy = match c.policy {
            Policy::Accept => NfChainPolicy::Accept,
            // A final rule rejects ([`policy_reject`]).
            Policy::Drop | Policy::Reject => NfChainPolicy::Drop,
        };
        out.chain(c.kind.nft_name(), Some((NfChainType::Filter, hook, 0, policy)));
        if c.rules.iter().any(|r| r.action == Action::ClampMss) {
            use crate::features::clamp;
            out.chain(clamp::CHAIN, Some((NfChainType::Filter, NfHook::Forward, clamp::PRIORITY, NfChainPolicy::Accept)));
        }
    }
}

/// Every rule of one filter chain: fwc's housekeeping, the user's rules, then the accepts of
/// forwards (which stand in for the chain's policy, so they come after the user's rules).
pub(super) fn filter_chain_rules(out: &mut Out, plan: &HostPlan, c: &ChainPlan, guards: bool, nat: bool) {
    if c.kind == ChainKind::Prerouting {
        // Early drops: the user's denies alone (every packet passes here, established too).
        if c.rules.iter().any(|r| r.rpfilter.is_some()) {
            out.rule(crate::features::rpfilter::CHAIN, crate::features::rpfilter::exemption(), None);
        }
        for r in &c.rules {
            filter_rule(out, plan, r);
        }
        return;
    }
    // In `input`, rules matching only `invalid` packets are decided before fwc's own invalid
    // drop (in their order); every other rule comes after it.
    let (early, rules): (Vec<&FilterRule>, Vec<&FilterRule>) = c.rules.iter().partition(|r| c.kind == ChainKind::Input && matches_only_invalid(r));
    chain_head(out, plan, c, guards, nat, &early);
    for r in rules {
        filter_rule(out, plan, r);
    }
    chain_tail(out, plan, c.kind, nat);
    if c.policy == Policy::Reject {
        policy_reject(out, c);
    }
}

/// A rule with `state="invalid"` alone: in `input` it is decided before fwc's built-in
/// `ct state invalid drop` (after it, it could never match).
pub(crate) fn matches_only_invalid(r: &FilterRule) -> bool {
    r.state.as_ref().is_some_and(|s| s.value == [crate::model::CtState::Invalid])
}

/// Neighbour discovery has no conntrack entry (it would hit `invalid`); without it a drop
/// policy cuts the host off IPv6 entirely, in either direction.
fn neighbour_discovery() -> Vec<S> {
    nd_accept(&["nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-solicit", "nd-router-advert"])
}

fn nd_accept(types: &[&str]) -> Vec<S> {
    vec![eq(meta(MetaKey::L4proto), s("ipv6-icmp")), eq(payload("icmpv6", "type"), set(types.iter().map(|t| s(*t)).collect())), accept()]
}

/// The input chain's neighbour-discovery accept, with router advertisements narrowed to the
/// interfaces of `input router-advertisements=` (none: the user's rules decide them — they are
/// `untracked`, so they pass the invalid drop).
fn input_neighbour_discovery(out: &mut Out, name: &str, ra: Option<&[String]>) {
    let Some(ifaces) = ra else {
        out.rule(name, neighbour_discovery(), None);
        return;
    };
    out.rule(name, nd_accept(&["nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-solicit"]), None);
    if !ifaces.is_empty() {
        let mut expr = vec![eq(meta(MetaKey::L4proto), s("ipv6-icmp")), eq(payload("icmpv6", "type"), s("nd-router-advert"))];
        expr.push(iface_match(MetaKey::Iifname, false, ifaces));
        expr.push(accept());
        out.rule(name, expr, None);
    }
}

/// The rules before the user's: the established fast path, loopback, neighbour discovery,
/// the forward guards and, in `output`, the forwarder's own connections.
fn chain_head(out: &mut Out, plan: &HostPlan, c: &ChainPlan, guards: bool, nat: bool, before_invalid_drop: &[&FilterRule]) {
    let kind = c.kind;
    let name = kind.nft_name();
    out.rule(name, vec![ct_state(&["established", "related"]), accept()], None);
    match kind {
        ChainKind::Input => {
            out.rule(name, vec![eq(meta(MetaKey::Iif), s("lo")), accept()], None);
            input_neighbour_discovery(out, name, c.router_advertisements.as_deref());
            for r in before_invalid_drop {
                filter_rule(out, plan, r);
            }
            out.rule(name, vec![ct_state(&["invalid"]), drop_()], None);
        }
        ChainKind::Forward => {
            if guards {
                out.rule(name, vec![jump(chains::FWD_GUARD)], None);
            }
        }
        ChainKind::Containers | ChainKind::Prerouting => {}
        ChainKind::Output => {
            // Clients on the host itself connecting to a kernel forward: nat output has
            // DNATed the flow already, guard it like a remote client's. Before `oif lo`:
            // a forward's listen address is local, so the hook's oif is `lo` even after
            // the DNAT reroute.
            if guards {
                out.rule(name, vec![jump(chains::FWD_GUARD)], None);
            }
            out.rule(name, vec![eq(meta(MetaKey::Oif), s("lo")), accept()], None);
            out.rule(name, neighbour_discovery(), None);
            // The userspace forwarder's own connections to its targets.
            for f in &plan.userspace_forwards {
                forwarder_target_accept(out, f);
            }
            if plan.userspace_forwards.iter().any(|f| has_dns_target(f)) {
                let mark = n(FORWARDER_SOCKET_MARK);
                out.rule(name, vec![eq(and(meta(MetaKey::Mark), mark.clone()), mark), accept()], None);
            }
            // Local clients' DNATed flows (today they pass `oif lo` already; this keeps
            // them out of the user rules whatever the route).
            if nat {
                out.rule(name, vec![ct_status_dnat(), accept()], None);
            }
        }
    }
}

/// The rules after the user's. Forwards obey the filter policy: their accepts come AFTER the
/// user's rules, so a `deny`/`reject` of the chain a forward's new connection passes stops it,
/// and the accept only stands in for the chain's policy (see "Forwards and the filter chains"
/// in docs/rules.md). Established/related packets took the fast path above.
fn chain_tail(out: &mut Out, plan: &HostPlan, kind: ChainKind, nat: bool) {
    let name = kind.nft_name();
    match kind {
        // Userspace forwards: the client connects to the forwarder's socket on this host.
        // Kernel forwards to a local target (DNAT to an address of this host) arrive here too.
        ChainKind::Input => {
            for f in &plan.userspace_forwards {
                userspace_accept(out, plan, f);
            }
            if nat {
                out.rule(name, vec![ct_status_dnat(), accept()], None);
            }
        }
        // Kernel forwards to another host: DNATed in prerouting, routed through `forward`.
        // Containers' own connections: Docker's rules accept them; a drop policy must not
        // (docs/containers.md).
        ChainKind::Forward => {
            out.rule(name, vec![ct_status_dnat(), accept()], None);
            if plan.chains.iter().any(|c| c.kind == ChainKind::Forward && c.policy.is_closed()) {
                container_egress_accepts(out, plan);
            }
        }
        ChainKind::Output | ChainKind::Containers | ChainKind::Prerouting => {}
    }
}
