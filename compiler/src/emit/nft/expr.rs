//! Constructors of nft expressions and statements (typed objects of the `nftables` crate), and
//! the layer-4 matches every kind of rule shares.

use super::fam::Fam;
use super::prelude::*;

/// An nft expression.
pub(super) type E = Expression<'static>;
/// An nft statement.
pub(super) type S = Statement<'static>;

pub(super) fn s(x: impl Into<String>) -> E {
    Expression::String(Cow::Owned(x.into()))
}
pub(super) fn n(x: u32) -> E {
    Expression::Number(x)
}
pub(super) fn named(x: NamedExpression<'static>) -> E {
    Expression::Named(x)
}
pub(super) fn meta(key: MetaKey) -> E {
    named(NamedExpression::Meta(Meta { key }))
}
pub(super) fn payload(protocol: &'static str, field: &'static str) -> E {
    named(NamedExpression::Payload(Payload::PayloadField(PayloadField { protocol: protocol.into(), field: field.into() })))
}
pub(super) fn ct(key: &'static str) -> E {
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: None }))
}
/// `ct original <key>` (a key without address family: `proto-dst`, …).
pub(super) fn ct_orig(key: &'static str) -> E {
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: Some(CTDir::Original) }))
}
/// `ct original ip saddr` / `ct original ip6 daddr`. nft's JSON spells the family inside the
/// key (`"key": "ip saddr"`); nft 1.0.6 refuses the separate `"family"` field ("cannot
/// determine ip protocol version").
pub(super) fn ct_orig_addr(fam: Fam, field: &'static str) -> E {
    let key = format!("{} {field}", fam.proto());
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: Some(CTDir::Original) }))
}
pub(super) fn fib_daddr_type() -> E {
    named(NamedExpression::Fib(Fib { result: FibResult::Type, flags: HashSet::from([FibFlag::Daddr]) }))
}
pub(super) fn set(items: Vec<E>) -> E {
    named(NamedExpression::Set(items.into_iter().map(SetItem::Element).collect()))
}
pub(super) fn mapping(items: Vec<(E, E)>) -> E {
    named(NamedExpression::Set(items.into_iter().map(|(k, v)| SetItem::Mapping(k, v)).collect()))
}
pub(super) fn range(a: E, b: E) -> E {
    Expression::Range(Box::new(Range { range: [a, b] }))
}
pub(super) fn prefix(addr: String, len: u32) -> E {
    named(NamedExpression::Prefix(Prefix { addr: Box::new(s(addr)), len }))
}
pub(super) fn concat(v: Vec<E>) -> E {
    named(NamedExpression::Concat(v))
}
pub(super) fn map_lookup(key: E, data: E) -> E {
    named(NamedExpression::Map(Box::new(MapExpr { key, data })))
}
pub(super) fn and(a: E, b: E) -> E {
    Expression::BinaryOperation(Box::new(BinaryOperation::AND(a, b)))
}
pub(super) fn or(a: E, b: E) -> E {
    Expression::BinaryOperation(Box::new(BinaryOperation::OR(vec![a, b])))
}
pub(super) fn l4_key() -> E {
    concat(vec![meta(MetaKey::L4proto), payload("th", "dport")])
}

pub(super) fn m(left: E, op: Operator, right: E) -> S {
    Statement::Match(Match { left, right, op })
}
pub(super) fn eq(left: E, right: E) -> S {
    m(left, Operator::EQ, right)
}
pub(super) fn ct_state(states: &[&str]) -> S {
    let right = if states.len() == 1 { s(states[0]) } else { Expression::List(states.iter().map(|x| s(*x)).collect()) };
    m(ct("state"), Operator::IN, right)
}
pub(super) fn ct_status_dnat() -> S {
    m(ct("status"), Operator::IN, s("dnat"))
}
pub(super) fn counter() -> S {
    Statement::Counter(Counter::Anonymous(None))
}
pub(super) fn accept() -> S {
    Statement::Accept(None)
}
pub(super) fn drop_() -> S {
    Statement::Drop(None)
}
pub(super) fn jump(target: &str) -> S {
    Statement::Jump(JumpTarget { target: target.to_string().into() })
}
/// `limit rate [over] count/per burst B`: B is the rule's burst, else `default_burst`
/// (nft's 5 for filter `rate=`; the count for a forward's `conn-rate`, as the userspace
/// forwarder does, so both backends enforce the same limit).
pub(super) fn limit(rate: &EventRate, over: bool, default_burst: u32) -> S {
    Statement::Limit(Limit {
        rate: rate.count,
        rate_unit: None,
        per: Some(rate.per.as_str().into()),
        burst: Some(rate.burst.filter(|b| *b > 0).unwrap_or(default_burst)),
        burst_unit: None,
        inv: over.then_some(true),
    })
}
pub(super) fn reject(tcp_only: bool) -> S {
    if tcp_only {
        Statement::Reject(Some(Reject::new(Some(RejectType::TCPReset), None)))
    } else {
        Statement::Reject(Some(Reject::new(Some(RejectType::ICMPX), Some(RejectCode::PortUnreach))))
    }
}
/// `key set key & ~QOS_MARK_MASK | value`.
pub(super) fn set_mark_bits(key: E, value: u32) -> S {
    Statement::Mangle(Mangle { key: key.clone(), value: or(and(key, n(!QOS_MARK_MASK)), n(value)) })
}

/// The layer-4 match of a rule: protocol, destination and source ports.
///
/// tcp/udp with ports use `tcp dport …` (the implicit protocol dependency is what nft lists);
/// `both` uses `meta l4proto {tcp, udp}` and `th dport …`. Ports without a protocol mean both.
pub(super) fn l4_match(proto: Option<Proto>, dports: Option<&[PortRange]>, sports: Option<&[PortRange]>) -> Vec<S> {
    l4_match_not(proto, dports, sports, (false, false))
}

/// The opposite match: `==` becomes `!=` (none of the list).
pub(super) fn ne(left: E, right: E) -> S {
    m(left, Operator::NEQ, right)
}

/// `==`, or `!=` when `negated`.
pub(super) fn eq_or_ne(negated: bool, left: E, right: E) -> S {
    if negated {
        ne(left, right)
    } else {
        eq(left, right)
    }
}

/// [`l4_match`] with its destination and source ports each possibly negated (`port="!22"`:
/// `tcp dport != 22`).
pub(super) fn l4_match_not(proto: Option<Proto>, dports: Option<&[PortRange]>, sports: Option<&[PortRange]>, not: (bool, bool)) -> Vec<S> {
    let dports = dports.and_then(ports_expr);
    let sports = sports.and_then(ports_expr);
    let has_ports = dports.is_some() || sports.is_some();
    let proto = match proto {
        None if has_ports => Some(Proto::Both),
        p => p,
    };
    let mut out = Vec::new();
    let hdr = match proto {
        None => return out,
        Some(Proto::Icmp) => {
            out.push(eq(meta(MetaKey::L4proto), s("icmp")));
            return out;
        }
        Some(Proto::Icmpv6) => {
            out.push(eq(meta(MetaKey::L4proto), s("ipv6-icmp")));
            return out;
        }
        // By number: nft resolves protocol names through /etc/protocols, which a minimal host
        // may lack; it lists the number by name (`meta l4proto gre`).
        Some(Proto::Other(p)) => {
            out.push(eq(meta(MetaKey::L4proto), n(u32::from(p))));
            return out;
        }
        Some(Proto::Both) => {
            out.push(eq(meta(MetaKey::L4proto), set(vec![s("tcp"), s("udp")])));
            "th"
        }
        Some(Proto::Tcp) if !has_ports => {
            out.push(eq(meta(MetaKey::L4proto), s("tcp")));
            return out;
        }
        Some(Proto::Udp) if !has_ports => {
            out.push(eq(meta(MetaKey::L4proto), s("udp")));
            return out;
        }
        Some(Proto::Tcp) => "tcp",
        Some(Proto::Udp) => "udp",
    };
    if let Some(d) = dports {
        out.push(eq_or_ne(not.0, payload(hdr, "dport"), d));
    }
    if let Some(sp) = sports {
        out.push(eq_or_ne(not.1, payload(hdr, "sport"), sp));
    }
    out
}

pub(super) fn fproto(p: ForwardProto) -> Proto {
    match p {
        ForwardProto::Tcp => Proto::Tcp,
        ForwardProto::Udp => Proto::Udp,
        ForwardProto::Both => Proto::Both,
    }
}

pub(super) fn fproto_names(p: ForwardProto) -> &'static [&'static str] {
    match p {
        ForwardProto::Tcp => &["tcp"],
        ForwardProto::Udp => &["udp"],
        ForwardProto::Both => &["tcp", "udp"],
    }
}

/// `meta l4proto tcp` / `meta l4proto { tcp, udp }` for a forward.
pub(super) fn l4proto_is(p: ForwardProto) -> S {
    match p {
        ForwardProto::Tcp => eq(meta(MetaKey::L4proto), s("tcp")),
        ForwardProto::Udp => eq(meta(MetaKey::L4proto), s("udp")),
        ForwardProto::Both => eq(meta(MetaKey::L4proto), set(vec![s("tcp"), s("udp")])),
    }
}

pub(super) fn one_or_set(mut v: Vec<E>) -> Option<E> {
    match v.len() {
        0 => None,
        1 => v.pop(),
        _ => Some(set(v)),
    }
}

/// Sorted, merged port ranges.
pub(super) fn merged_ports(ports: &[PortRange]) -> Vec<PortRange> {
    let mut v: Vec<PortRange> = ports.iter().map(|p| PortRange { lo: p.lo.min(p.hi), hi: p.lo.max(p.hi) }).collect();
    v.sort();
    let mut out: Vec<PortRange> = Vec::with_capacity(v.len());
    for p in v {
        match out.last_mut() {
            Some(last) if u32::from(p.lo) <= u32::from(last.hi) + 1 => last.hi = last.hi.max(p.hi),
            _ => out.push(p),
        }
    }
    out
}

pub(super) fn port_expr(p: PortRange) -> E {
    if p.is_single() {
        n(u32::from(p.lo))
    } else {
        range(n(u32::from(p.lo)), n(u32::from(p.hi)))
    }
}

pub(super) fn ports_expr(ports: &[PortRange]) -> Option<E> {
    one_or_set(merged_ports(ports).into_iter().map(port_expr).collect())
}
