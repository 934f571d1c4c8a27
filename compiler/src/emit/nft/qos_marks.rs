//! QoS marks: capped kernel forwards classify their flow into the ct mark, shapes classify
//! packets in `qos_apply`, and one small chain per class ORs its bits into the packet mark.

use super::expr::*;
use super::fam::*;
use super::family::*;
use super::forwards::*;
use super::names::*;
use super::out::*;
use super::prelude::*;

/// The class pair base (the up id, even) of a rule with QoS classes.
pub(super) fn pair_base(plan: &HostPlan, kind: RuleKind, name: &str) -> Option<u32> {
    plan.qos_class(kind, name, QosDirection::Up).or_else(|| plan.qos_class(kind, name, QosDirection::Down)).map(|c| c.id & !1)
}

/// How specific a shape is: the number of its match properties (`dev`, `from`, `to`, `proto`,
/// `port`). `direction` does not count, it only says which side `dev` is.
pub(super) fn shape_specificity(sh: &ShapeRule) -> usize {
    usize::from(!sh.devs.is_empty())
        + usize::from(sh.from.is_some())
        + usize::from(sh.to.is_some())
        + usize::from(sh.proto.is_some())
        + usize::from(sh.ports.is_some())
}

/// Shapes in classification order: most specific first, ties by name. The order depends only
/// on the rules themselves (not on where they are written), so the compiled ruleset is a
/// function of the rules' digests and `fwc plan` never misses a change of precedence.
pub(super) fn shape_order<'a>(shapes: &[&'a ShapeRule]) -> Vec<&'a ShapeRule> {
    let mut v = shapes.to_vec();
    v.sort_by(|a, b| shape_specificity(b).cmp(&shape_specificity(a)).then_with(|| a.name.value.cmp(&b.name.value)));
    v
}

/// Name of the `inet_service` set with a shape's ports (`ct original proto-dst` only types
/// correctly against a named set when the ports are a list or the protocol is `both`).
pub(super) fn shape_ports_set(id: u32) -> String {
    format!("qos_p{id}")
}

/// The named port set of a shape with a class, when its ports are matched (not for ICMP or
/// another protocol without ports): its name and the ports.
fn shape_port_set<'r>(plan: &HostPlan, sh: &'r ShapeRule) -> Option<(String, &'r [PortRange])> {
    let class = plan.qos_class(RuleKind::Shape, &sh.name.value, QosDirection::Up)?;
    let ports = sh.ports.as_ref().map(|p| p.value.as_slice())?;
    let portless = matches!(sh.proto.as_ref().map(|p| p.value), Some(Proto::Icmp | Proto::Icmpv6 | Proto::Other(_)));
    (!portless).then(|| (shape_ports_set(class.id), ports))
}

/// The rules in `qos_apply` that put a shape's class into the packet mark.
pub(super) fn shape_rules(out: &mut Out, plan: &HostPlan, sh: &ShapeRule) {
    let Some(class) = plan.qos_class(RuleKind::Shape, &sh.name.value, QosDirection::Up) else { return };
    let comment = rule_comment(RuleKind::Shape, &sh.name.value);
    let mut head = Vec::new();
    let mut devs: Vec<String> = sh.devs.iter().map(|d| d.value.clone()).collect();
    devs.sort();
    devs.dedup();
    let side = match sh.direction {
        Direction::Egress => MetaKey::Oifname,
        Direction::Ingress => MetaKey::Iifname,
    };
    match one_or_set(devs.into_iter().map(s).collect()) {
        Some(d) => head.push(eq(meta(side), d)),
        // Ingress on any interface: everything that arrived (locally sent packets have iif 0).
        None if sh.direction == Direction::Ingress => head.push(m(meta(MetaKey::Iif), Operator::NEQ, n(0))),
        None => {}
    }
    let proto = sh.proto.as_ref().map(|p| p.value);
    let ports = sh.ports.as_ref().map(|p| p.value.as_slice());
    let l4 = match (proto, ports.is_some()) {
        (None, false) => None,
        (None, true) | (Some(Proto::Both), _) => Some(set(vec![s("tcp"), s("udp")])),
        (Some(Proto::Tcp), _) => Some(s("tcp")),
        (Some(Proto::Udp), _) => Some(s("udp")),
        (Some(Proto::Icmp), _) => Some(s("icmp")),
        (Some(Proto::Icmpv6), _) => Some(s("ipv6-icmp")),
        (Some(Proto::Other(p)), _) => Some(n(u32::from(p))),
    };
    if let Some(l4) = l4 {
        head.push(eq(meta(MetaKey::L4proto), l4));
    }
    if let Some((name, _)) = shape_port_set(plan, sh) {
        head.push(eq(ct_orig("proto-dst"), s(format!("@{name}"))));
    }
    let from = sh.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let to = sh.to.as_ref().map(|m| addr_parts(plan, &m.value));
    let parts: Vec<&AddrParts> = from.iter().chain(to.iter()).collect();
    let only = match proto {
        Some(Proto::Icmp) => Some(Fam::V4),
        Some(Proto::Icmpv6) => Some(Fam::V6),
        _ => None,
    };
    for fam in families(&parts, only) {
        let mut expr = head.clone();
        if let Some(fam) = fam {
            if let Some(a) = from.as_ref().and_then(|p| one_alt(p, fam)) {
                expr.push(a.on(ct_orig_addr(fam, "saddr")));
            }
            if let Some(a) = to.as_ref().and_then(|p| one_alt(p, fam)) {
                expr.push(a.on(ct_orig_addr(fam, "daddr")));
            }
        }
        expr.push(Statement::Goto(JumpTarget { target: class_chain(class.id).into() }));
        out.rule(chains::QOS_APPLY, expr, Some(comment.clone()));
    }
}

/// The objects QoS needs in the ruleset: the classify, class and apply chains and the shapes'
/// port sets (in classification order).
pub(super) fn declare_qos(out: &mut Out, plan: &HostPlan) {
    if plan.qos_classes.is_empty() {
        return;
    }
    if plan.qos_classes.iter().any(|c| c.kind == RuleKind::Forward) {
        out.chain(chains::QOS_CLASSIFY, None);
        out.chain(chains::QOS_MARK, Some((NfChainType::Filter, NfHook::Prerouting, -150, NfChainPolicy::Accept)));
        out.chain(chains::QOS_MARK_OUT, Some((NfChainType::Filter, NfHook::Output, -150, NfChainPolicy::Accept)));
    }
    for c in &plan.qos_classes {
        out.chain(&class_chain(c.id), None);
    }
    out.chain(chains::QOS_APPLY, Some((NfChainType::Filter, NfHook::Postrouting, -150, NfChainPolicy::Accept)));
    for sh in shape_order(&plan.shapes) {
        if let Some((name, ports)) = shape_port_set(plan, sh) {
            out.port_set(&name, ports);
        }
    }
}

/// The rules of QoS (its objects: [`declare_qos`]).
pub(super) fn qos(out: &mut Out, plan: &HostPlan) {
    if plan.qos_classes.is_empty() {
        return;
    }
    let forward_classes = plan.qos_classes.iter().any(|c| c.kind == RuleKind::Forward);
    for f in &plan.kernel_forwards {
        classify_forward(out, plan, f);
    }
    if forward_classes {
        for hooked in [chains::QOS_MARK, chains::QOS_MARK_OUT] {
            out.rule(hooked, vec![ct_state(&["new"]), jump(chains::QOS_CLASSIFY)], None);
        }
    }

    // Per class: OR its mark into the packet mark.
    for c in &plan.qos_classes {
        super::quota::shape_class_rule(out, plan, c); // traffic quotas
        let expr = vec![set_mark_bits(meta(MetaKey::Mark), c.mark), counter()];
        out.rule(&class_chain(c.id), expr, Some(rule_comment(c.kind, &c.rule)));
    }

    // Forwards: ct mark class bits (always the pair base) -> class chain, per direction.
    let mut original: Vec<(E, E)> = Vec::new();
    let mut reply: Vec<(E, E)> = Vec::new();
    for c in plan.qos_classes.iter().filter(|c| c.kind == RuleKind::Forward) {
        let key = n((c.id & !1) << QOS_MARK_SHIFT);
        let goto = Expression::Verdict(Verdict::Goto(JumpTarget { target: class_chain(c.id).into() }));
        match c.direction {
            QosDirection::Up => original.push((key, goto)),
            QosDirection::Down => reply.push((key, goto)),
        }
    }
    for (dir, entries) in [("original", original), ("reply", reply)] {
        if entries.is_empty() {
            continue;
        }
        let expr = vec![
            eq(ct("direction"), s(dir)),
            Statement::VerdictMap(stmt::VerdictMap { key: and(ct("mark"), n(QOS_MARK_MASK)), data: mapping(entries) }),
        ];
        out.rule(chains::QOS_APPLY, expr, None);
    }
    // Shapes, per packet: a packet no forward class took gets the first matching shape's.
    for sh in shape_order(&plan.shapes) {
        shape_rules(out, plan, sh);
    }
}

/// A capped kernel forward: its new flows get the class pair into the ct mark (before DNAT),
/// in `qos_classify`.
fn classify_forward(out: &mut Out, plan: &HostPlan, f: &ForwardRule) {
    let classify_tail = |base: u32| vec![set_mark_bits(ct("mark"), base << QOS_MARK_SHIFT), counter(), Statement::Return(None)];
    let Some(base) = pair_base(plan, RuleKind::Forward, &f.name.value) else { return };
    let comment = rule_comment(RuleKind::Forward, &f.name.value);
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let target_fams: Vec<Fam> = FAMS.into_iter().filter(|fam| ip_targets(f).iter().any(|(ip, _)| Fam::of(ip) == *fam)).collect();
    let fams: Vec<Option<Fam>> = match (&from, listen_fam(f)) {
        (None, None) if target_fams.len() == 2 => vec![None],
        (None, None) => target_fams.iter().copied().map(Some).collect(),
        (None, Some(lf)) => vec![Some(lf)],
        (Some(p), lf) => families(&[p], lf),
    };
    for fam in fams {
        if fam.is_some_and(|fam| !target_fams.contains(&fam)) {
            continue;
        }
        let mut expr = l4_match(Some(fproto(f.proto)), Some(&[f.listen.value.ports]), None);
        match (fam, listen_addr(f)) {
            (Some(fam), Some(a)) => expr.push(eq(payload(fam.proto(), "daddr"), s(a.to_string()))),
            (fam, None) => {
                if let (Some(fam), None) = (fam, &from) {
                    expr.push(eq(meta(MetaKey::Nfproto), s(fam.nfproto())));
                }
                expr.push(eq(fib_daddr_type(), s("local")));
            }
            (None, Some(_)) => unreachable!("a listen address always picks a family"),
        }
        if let (Some(fam), Some(parts)) = (fam, &from) {
            if let Some(a) = one_alt(parts, fam) {
                expr.push(a.on(payload(fam.proto(), "saddr")));
            }
        }
        expr.extend(classify_tail(base));
        out.rule(chains::QOS_CLASSIFY, expr, Some(comment.clone()));
    }
}
