//! The `containers` chains: who reaches ports that Docker or Podman publish. Their DNAT lives in
//! their own tables; fwc judges the new DNATed connection at the forward hook, before Docker's
//! filter chains, by the port and address the client originally addressed (`ct original`).

use super::expr::*;
use super::family::*;
use super::names::*;
use super::out::Out;
use super::rule_parts::*;
use super::schedule::*;
use super::prelude::*;

/// Priority of the `containers` base chain: before iptables-nft's `ip filter FORWARD` (0) and
/// fwc's own `forward` (0), so a deny here is counted before anyone accepts.
pub(super) const CONTAINERS_PRIORITY: i32 = -5;

/// `containers` (base chain, forward hook) and `containers_rules` (the user's rules).
pub(super) fn declare_containers_chains(out: &mut Out) {
    out.chain(chains::CONTAINERS, Some((NfChainType::Filter, NfHook::Forward, CONTAINERS_PRIORITY, NfChainPolicy::Accept)));
    out.chain(chains::CONTAINERS_RULES, None);
}

/// New connections DNATed into a bridge go through the user's rules, then the policy.
/// Everything else (replies, established flows, traffic not DNATed into a bridge) passes this
/// chain untouched: the `forward` chain and Docker's own chains judge it.
pub(super) fn containers_chain_rules(out: &mut Out, plan: &HostPlan, c: &ChainPlan) {
    for bridge in &c.bridges {
        out.rule(
            chains::CONTAINERS,
            vec![ct_state(&["new"]), ct_status_dnat(), eq(meta(MetaKey::Oifname), s(bridge.clone())), jump(chains::CONTAINERS_RULES)],
            None,
        );
    }
    for r in &c.rules {
        container_rule(out, plan, r);
    }
    if c.policy == Policy::Drop {
        out.rule(chains::CONTAINERS_RULES, vec![counter(), drop_()], Some(rule_comment(RuleKind::Chain, ChainKind::Containers.as_str())));
    }
}

/// One `containers` rule: `port` is the published port (`ct original proto-dst`), `to` the
/// address the client connected to (`ct original ip daddr`), `from` the client. nft types
/// `ct original proto-dst` only after a one-protocol match, so one nft rule per protocol, port
/// range and family.
fn container_rule(out: &mut Out, plan: &HostPlan, r: &FilterRule) {
    let comment = rule_comment(RuleKind::Filter, &r.name.value);
    let from = r.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let to = r.to.as_ref().map(|m| addr_parts(plan, &m.value));
    let parts: Vec<&AddrParts> = from.iter().chain(to.iter()).collect();
    let protos: Vec<Option<ForwardProto>> = match r.proto.as_ref().map(|p| p.value) {
        Some(Proto::Tcp) => vec![Some(ForwardProto::Tcp)],
        Some(Proto::Udp) => vec![Some(ForwardProto::Udp)],
        Some(Proto::Both) => vec![Some(ForwardProto::Tcp), Some(ForwardProto::Udp)],
        _ => vec![None],
    };
    let ports: Vec<Option<PortRange>> = match &r.ports {
        Some(p) => merged_ports(&p.value).into_iter().map(Some).collect(),
        None => vec![None],
    };
    let none = (vec![None], vec![None]);
    for fam in families(&parts, None) {
        // One nft rule per combination of alternatives, as in `filter_rule`.
        let (fa, ta) = fam.map(|fam| (alts(from.as_ref(), fam), alts(to.as_ref(), fam))).unwrap_or_else(|| none.clone());
        for (fal, tal) in fa.iter().flat_map(|f| ta.iter().map(move |t| (f, t))) {
        for proto in &protos {
            for port in &ports {
                let mut expr = Vec::new();
                if let Some(i) = &r.iif {
                    expr.push(iface_match(MetaKey::Iifname, r.negate.iif, &i.value));
                }
                if let Some(p) = proto {
                    expr.push(l4proto_is(*p));
                    if let Some(port) = port {
                        expr.push(eq(ct_orig("proto-dst"), port_expr(*port)));
                    }
                }
                if let Some(fam) = fam {
                    if let Some(a) = fal {
                        expr.push(a.on(payload(fam.proto(), "saddr")));
                    }
                    if let Some(a) = tal {
                        expr.push(a.on(ct_orig_addr(fam, "daddr")));
                    }
                }
                match time_match(r.schedule.as_ref()) {
                    // schedules
                    Some(t) => out_rules_timed(out, chains::CONTAINERS_RULES, expr, rule_tails(r, proto == &Some(ForwardProto::Tcp), fam), &comment, &t),
                    None => out_rules(out, chains::CONTAINERS_RULES, expr, rule_tails(r, proto == &Some(ForwardProto::Tcp), fam), &comment),
                }
            }
        }
        }
    }
}

/// `forward` with `policy=drop`: the containers' own connections (out to the world, to other
/// bridges) are accepted after the user's rules, standing in for the policy, as Docker's
/// `-i docker0 ! -o docker0 -j ACCEPT` does; a `deny … in=docker0` in `forward` still stops them.
pub(super) fn container_egress_accepts(out: &mut Out, plan: &HostPlan) {
    for bridge in plan.container_bridges() {
        out.rule(chains::FORWARD, vec![eq(meta(MetaKey::Iifname), s(bridge)), accept()], None);
    }
}
