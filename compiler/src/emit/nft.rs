//! `nftables.json`: the complete `table inet fwc` as libnftables JSON commands, loadable with
//! `nft -j -f` (the runtime deletes the old table in the same transaction; nothing here deletes
//! or flushes). Typed objects of the `nftables` crate are used for everything the crate can
//! express; raw JSON only for what it cannot (map-level `counter` statements, element comments).
//!
//! # Structure
//!
//! ```text
//! table inet fwc
//!   set <name>_v4 / <name>_v6           every AddrSet, type ipv{4,6}_addr, flags interval (maybe empty)
//!   map fwd4_addr, fwd6_addr             inet_proto . inet_service : ipv{4,6}_addr   (hash, counter)
//!   map fwd4_port, fwd6_port             inet_proto . inet_service : inet_service    (hash)
//!   map fwd4r_addr, fwd6r_addr           inet_proto . inet_service : ipv{4,6}_addr   (interval, counter)
//!   map fwd4r_port, fwd6r_port           inet_proto . inet_service : inet_service    (interval)
//!   map fwd4_keep, fwd6_keep             inet_proto . inet_service : ipv{4,6}_addr   (interval, counter)
//!   set fwd_ports_tcp, fwd_ports_udp     inet_service (interval): listen ports of kernel forwards
//!   chain input    filter/input/0     ct state established,related accept; iif lo accept;
//!                                     icmpv6 neighbour discovery accept; ct state invalid drop;
//!                                     user rules; userspace listener accepts;
//!                                     ct status dnat accept (kernel forwards to a local target)
//!   chain forward  filter/forward/0   ct state established,related accept; jump fwd_guard;
//!                                     user rules; ct status dnat accept
//!   chain output   filter/output/0    ct state established,related accept; jump fwd_guard;
//!                                     oif lo accept; icmpv6 neighbour discovery accept;
//!                                     forwarder accepts (IP targets; FORWARDER_SOCKET_MARK for
//!                                     DNS targets); ct status dnat accept; user rules
//!   -- only with kernel forwards:
//!   chain fwd_guard                   (regular, only with max-conns / conn-rate) the guards
//!   chain fwd_dnat                    (regular) the DNAT rules, see below
//!   chain prerouting   nat/prerouting/-100   fib daddr type local jump fwd_dnat
//!   chain nat_output   nat/output/-100       fib daddr type local jump fwd_dnat   (local clients)
//!   chain postrouting  nat/postrouting/100   masquerade fwc's DNAT flows (see below)
//!   -- only with QoS classes:
//!   set qos_p<id>                     inet_service (interval): a shape's ports
//!   chain qos_classify                (regular, capped forwards) new flow -> `ct mark` class bits
//!   chain qos_mark     filter/prerouting/-150  ct state new jump qos_classify  (capped forwards)
//!   chain qos_mark_out filter/output/-150      ct state new jump qos_classify  (capped forwards)
//!   chain qos_c<id>                   (regular) meta mark set meta mark & ~MASK | id<<16
//!   chain qos_apply    filter/postrouting/-150 forwards: ct direction {original,reply}
//!                                     ct mark & MASK vmap {…}; then shapes, per packet
//! ```
//!
//! # Kernel forwards
//!
//! A forward with one target, no `from=` and no listen address is a *map forward*: it adds
//! elements to the maps and costs no rule, so `fwd_dnat` always ends with the same six rules
//! however many forwards there are:
//!
//! ```text
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4_addr  : meta l4proto . th dport map @fwd4_port
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4r_addr : meta l4proto . th dport map @fwd4r_port
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4_keep
//! (the same for ipv6 / ip6)
//! ```
//!
//! A key missing from a map ends that rule, so a packet falls through to the next one.
//! nft 1.0.6 cannot read a map whose *data* is a concatenation (`ipv4_addr . inet_service`)
//! from JSON ("Invalid map type"), so address and port live in two maps with the same keys.
//! Forwards of a single listen port (nearly all) go to the *hash* maps `*_addr` / `*_port`:
//! an interval map with a concatenated key uses the kernel's pipapo backend, whose insert cost
//! grows with the set size (10,000 forwards: ~2 s of `nft -j -f` in interval maps, ~0.3 s in
//! hash maps; docs/performance.md). Listen port *ranges* need interval maps: `*r_addr` /
//! `*r_port` for a range with a fixed target port or mapped onto another range (which keeps
//! the offset by listing each port in `*r_port`), and `*_keep` for a range whose target keeps
//! the port (no target port, or the same range). Exact ports are looked up first.
//! Forwards with several targets (`numgen inc mod N map {…}`), `from=` or a listen address get
//! their own rules, placed before the map rules (those with `from=`/listen address first). A map
//! forward whose key would overlap an earlier one is emitted as its own rule after the map rules
//! (hash maps refuse duplicate keys, interval maps overlaps, and an exact port would shadow a
//! range across the maps; `check` reports the conflict).
//!
//! Masquerade: only fwc's own DNAT flows. Postrouting matches `ct status dnat` together with the
//! connection's *original* destination port (`ct original proto-dst`) in `fwd_ports_tcp` /
//! `fwd_ports_udp`, the listen ports of every kernel forward. (nft cannot put `ct original
//! proto-dst` into a concatenation, hence one set per protocol.) Docker's DNAT flows are left
//! alone unless docker publishes a port fwc also forwards, which would conflict anyway. No mark
//! bits are used for this, so fwc only ever touches `QOS_MARK_MASK`.
//!
//! `max-conns` and `conn-rate` are enforced for new DNATed flows of the forward
//! (`ct state new ct status dnat meta l4proto … ct original proto-dst …`) with `ct count over N`
//! (reject) and `limit rate over` (drop; burst: the rule's, else the count — what the userspace
//! forwarder does). The guards live in one regular chain, `fwd_guard`, jumped to from the filter
//! `forward` chain (remote clients) and from `output` (clients on the host itself: nat output
//! has already DNATed their flow; the jump precedes `oif lo accept`, since the output hook
//! keeps the pre-DNAT oif, `lo`, for a connection to a local listen address). The `ct count` list and the token bucket belong to the rule,
//! so both paths share one limit. Each guard is one rule, counting its own connections: a
//! `proto="both"` forward gets one per protocol, a forward whose `from=` has both address
//! families one per family (so the limits apply per protocol / family).
//!
//! # Forwards and the filter chains
//!
//! A forward's new connection is judged by the user rules of the chain it passes, and only
//! then accepted by fwc (the accept stands in for the chain's policy): a kernel forward to
//! another host is DNATed in prerouting and routed through `forward`, so `forward`'s user
//! rules see it (destination already the target: `th dport`/`daddr` are the target's); a
//! userspace forward's client connects to the forwarder on this host, so `input`'s user rules
//! see it (destination = the listen port). The forward's own `from=` is an extra condition
//! on top (no DNAT / no accept for other sources). Packets of accepted flows take the
//! `ct state established,related accept` fast path at the top of each chain.
//!
//! # Output with `policy=drop`
//!
//! `output` accepts, before the user rules: neighbour discovery (as `input`); the userspace
//! forwarder's connections to IP-literal targets (daddr + protocol + target ports of every
//! userspace forward); packets whose mark carries [`FORWARDER_SOCKET_MARK`] (the forwarder sets
//! it with `SO_MARK` on its upstream sockets; the only way to let connections to DNS-named
//! targets out, emitted when a userspace forward has one); and, with kernel forwards, the DNATed
//! flows of local clients (`ct status dnat accept`, after the guards).
//!
//! # Counters and comments
//!
//! Every rule that stands for an fwc rule carries `counter` and the comment
//! `fwc:<kind>:<name>` (see [`rule_comment`] / [`parse_rule_comment`]). NAT chains only see the
//! first packet of a flow, so forward counters count new connections. Map forwards have no rule:
//! their elements in `fwd{4,6}_addr` / `fwd{4,6}r_addr` / `fwd{4,6}_keep` carry the comment
//! and a per-element counter (the maps have a `counter` statement). The `qos_c<id>` rules count
//! every packet and byte of their class.
//!
//! # QoS marks
//!
//! Capped kernel forwards mark the *flow*: a new flow matching one (proto + listen port on a
//! local address, plus `from=`/listen address) gets its class pair into the `ct mark`:
//! `ct mark set ct mark & ~MASK | (up_id << 16)` (classification happens before DNAT, at mangle
//! priority, in prerouting and output). `qos_apply` copies it to each packet's `meta mark`,
//! touching only the mask bits. nft 1.0.6 cannot OR two registers
//! (`meta mark & ~MASK | ct mark & MASK`), so the copy is a verdict map from the ct-mark class
//! bits to one small chain per class that ORs in a constant. Original direction gets the up
//! class, replies the down class (`up_id + 1`).
//!
//! Shapes are classified *per packet* in `qos_apply` (postrouting, where both `iifname` and
//! `oifname` are known, before the tc egress program), by `goto qos_c<id>`:
//! - `dev` + `direction`: egress (default) matches packets leaving through `dev`
//!   (`oifname`), ingress packets that arrived on `dev` (`iifname`; without `dev`, every packet
//!   that arrived at all, `iif != 0`). Without `dev` an egress shape matches every interface.
//! - `from` / `to` / `proto` / `port` describe the *connection* as its first packet saw it
//!   (`ct original ip saddr`, `… daddr`, `meta l4proto`, `ct original proto-dst @qos_p<id>`),
//!   so both directions of a matching connection are charged where they pass `dev`:
//!   `shape from=<lan> dev=<lan-if>` shapes the downloads of that LAN.
//! - A packet gets one class. Forward classes come first (a packet whose flow carries a
//!   forward class for its direction never reaches the shape rules); then the shapes, **most
//!   specific first**: ordered by the number of match properties (`dev`, `from`, `to`,
//!   `proto`, `port`; more first), ties by name. So a catch-all `shape dev=eth0` never shadows
//!   `shape from=@guests dev=eth0`. The order depends only on the rules, not on file
//!   positions, so a rule's digest in the plan covers everything that decides precedence.
//! - Per-packet cost grows with the number of shapes (a few compares each).
//!
//! The class chain `qos_c<id>` counts every packet and byte charged to the class.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nftables::expr::{
    BinaryOperation, Expression, Fib, FibFlag, FibResult, Map as MapExpr, Meta, MetaKey, NamedExpression, NgMode, Numgen, Payload,
    PayloadField, Prefix, Range, SetItem, Verdict, CT, CTDir,
};
use nftables::schema::{Chain, Map, NfCmd, NfListObject, NfObject, Rule, Set, SetFlag, SetType, SetTypeValue, Table};
use nftables::stmt::{
    self, CTCount, Counter, JumpTarget, Limit, Log, Mangle, Match, Operator, Reject, RejectType, Statement, NAT,
    NATFamily,
};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook, RejectCode};
use serde_json::{json, Value};

use crate::artifacts::{QosDirection, NFT_TABLE, QOS_MARK_MASK, QOS_MARK_SHIFT};
use crate::model::*;
use crate::select::HostPlan;

type E = Expression<'static>;
type S = Statement<'static>;

/// Chain names of `table inet fwc`.
pub mod chains {
    pub const INPUT: &str = "input";
    pub const FORWARD: &str = "forward";
    pub const OUTPUT: &str = "output";
    pub const FWD_DNAT: &str = "fwd_dnat";
    pub const FWD_GUARD: &str = "fwd_guard";
    pub const PREROUTING: &str = "prerouting";
    pub const NAT_OUTPUT: &str = "nat_output";
    pub const POSTROUTING: &str = "postrouting";
    pub const QOS_CLASSIFY: &str = "qos_classify";
    pub const QOS_MARK: &str = "qos_mark";
    pub const QOS_MARK_OUT: &str = "qos_mark_out";
    pub const QOS_APPLY: &str = "qos_apply";
}

/// Map and set names used for kernel forwards.
pub mod maps {
    pub const FWD4_ADDR: &str = "fwd4_addr";
    pub const FWD4_PORT: &str = "fwd4_port";
    pub const FWD4R_ADDR: &str = "fwd4r_addr";
    pub const FWD4R_PORT: &str = "fwd4r_port";
    pub const FWD4_KEEP: &str = "fwd4_keep";
    pub const FWD6_ADDR: &str = "fwd6_addr";
    pub const FWD6_PORT: &str = "fwd6_port";
    pub const FWD6R_ADDR: &str = "fwd6r_addr";
    pub const FWD6R_PORT: &str = "fwd6r_port";
    pub const FWD6_KEEP: &str = "fwd6_keep";
    pub const PORTS_TCP: &str = "fwd_ports_tcp";
    pub const PORTS_UDP: &str = "fwd_ports_udp";
}

pub use fwc_artifacts::identity::{parse_rule_comment, rule_comment, COMMENT_PREFIX, MAX_COMMENT};
pub use fwc_artifacts::FORWARDER_SOCKET_MARK;
/// nft refuses log prefixes longer than this (bytes).
const MAX_LOG_PREFIX: usize = 127;
/// nft's default limit burst.
const DEFAULT_BURST: u32 = 5;

/// Name of the nft set that holds the `fam` half of fwc set `name`.
pub fn set_name(name: &str, v6: bool) -> String {
    format!("{name}_{}", if v6 { "v6" } else { "v4" })
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Address families and normalised address / port lists

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fam {
    V4,
    V6,
}

const FAMS: [Fam; 2] = [Fam::V4, Fam::V6];

impl Fam {
    fn of(ip: &IpAddr) -> Fam {
        if ip.is_ipv4() {
            Fam::V4
        } else {
            Fam::V6
        }
    }
    fn idx(self) -> usize {
        self as usize
    }
    /// Payload protocol name: `ip` / `ip6`.
    fn proto(self) -> &'static str {
        match self {
            Fam::V4 => "ip",
            Fam::V6 => "ip6",
        }
    }
    fn nat(self) -> NATFamily {
        match self {
            Fam::V4 => NATFamily::IP,
            Fam::V6 => NATFamily::IP6,
        }
    }
    fn nfproto(self) -> &'static str {
        match self {
            Fam::V4 => "ipv4",
            Fam::V6 => "ipv6",
        }
    }
    fn bits(self) -> u32 {
        match self {
            Fam::V4 => 32,
            Fam::V6 => 128,
        }
    }
    fn addr(self, v: u128) -> IpAddr {
        match self {
            Fam::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
            Fam::V6 => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }
}

fn ip_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

/// An address element as an inclusive interval of its family.
fn interval(e: &AddrElem) -> (Fam, u128, u128) {
    match e {
        AddrElem::Net(n) => {
            let fam = Fam::of(&n.addr());
            (fam, ip_u128(&n.network()), ip_u128(&n.broadcast()))
        }
        AddrElem::Range(a, b) => {
            let (x, y) = (ip_u128(a), ip_u128(b));
            (Fam::of(a), x.min(y), x.max(y))
        }
    }
}

/// Sorted, merged (overlapping or adjacent joined) intervals, per family.
fn merged<'a>(elems: impl IntoIterator<Item = &'a AddrElem>) -> [Vec<(u128, u128)>; 2] {
    let mut out: [Vec<(u128, u128)>; 2] = [Vec::new(), Vec::new()];
    for e in elems {
        let (fam, lo, hi) = interval(e);
        out[fam.idx()].push((lo, hi));
    }
    for list in &mut out {
        // In place: a million-element set file must not need a second copy.
        list.sort_unstable();
        let mut w = 0;
        for r in 0..list.len() {
            let (lo, hi) = list[r];
            if w > 0 && lo <= list[w - 1].1.saturating_add(1) {
                list[w - 1].1 = list[w - 1].1.max(hi);
            } else {
                list[w] = (lo, hi);
                w += 1;
            }
        }
        list.truncate(w);
        list.shrink_to_fit();
    }
    out
}

/// [`interval_expr`] as JSON, straight (named sets can hold millions of elements: no typed
/// expression in between). Same shape as the typed objects serialize to.
fn interval_value(fam: Fam, lo: u128, hi: u128) -> Value {
    if lo == hi {
        return Value::String(fam.addr(lo).to_string());
    }
    let diff = lo ^ hi;
    let host_bits = 128 - diff.leading_zeros();
    let is_prefix = diff.count_ones() == host_bits && lo & diff == 0;
    if is_prefix && host_bits <= fam.bits() {
        json!({"prefix": {"addr": fam.addr(lo).to_string(), "len": fam.bits() - host_bits}})
    } else {
        json!({"range": [fam.addr(lo).to_string(), fam.addr(hi).to_string()]})
    }
}

/// One interval as an nft value: an address, a prefix or a range.
fn interval_expr(fam: Fam, lo: u128, hi: u128) -> E {
    if lo == hi {
        return s(fam.addr(lo).to_string());
    }
    let diff = lo ^ hi;
    let host_bits = 128 - diff.leading_zeros();
    let is_prefix = diff.count_ones() == host_bits && lo & diff == 0;
    if is_prefix && host_bits <= fam.bits() {
        prefix(fam.addr(lo).to_string(), fam.bits() - host_bits)
    } else {
        range(s(fam.addr(lo).to_string()), s(fam.addr(hi).to_string()))
    }
}

/// Elements of the two halves of a set.
fn set_elems(elems: &[AddrElem]) -> [Vec<E>; 2] {
    let m = merged(elems);
    [
        m[0].iter().map(|&(lo, hi)| interval_expr(Fam::V4, lo, hi)).collect(),
        m[1].iter().map(|&(lo, hi)| interval_expr(Fam::V6, lo, hi)).collect(),
    ]
}

/// Right-hand side of an address match, per family (None = no address of that family).
type AddrParts = [Option<E>; 2];

fn addr_parts(plan: &HostPlan, m: &AddrMatch) -> AddrParts {
    match m {
        AddrMatch::Set(name) => {
            // A dynamic set may hold either family at run time: match both halves.
            let set = plan.set(name);
            let dynamic = set.is_some_and(|s| s.dynamic.is_some());
            let has = |fam: Fam| dynamic || set.is_some_and(|s| s.elements.iter().any(|e| e.value.is_ipv4() == (fam == Fam::V4)));
            [Fam::V4, Fam::V6].map(|fam| has(fam).then(|| s(format!("@{}", set_name(name, fam == Fam::V6)))))
        }
        AddrMatch::Literal(elems) => {
            let [v4, v6] = set_elems(elems);
            [one_or_set(v4), one_or_set(v6)]
        }
    }
}

fn one_or_set(mut v: Vec<E>) -> Option<E> {
    match v.len() {
        0 => None,
        1 => v.pop(),
        _ => Some(set(v)),
    }
}

/// Sorted, merged port ranges.
fn merged_ports(ports: &[PortRange]) -> Vec<PortRange> {
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

fn port_expr(p: PortRange) -> E {
    if p.is_single() {
        n(u32::from(p.lo))
    } else {
        range(n(u32::from(p.lo)), n(u32::from(p.hi)))
    }
}

fn ports_expr(ports: &[PortRange]) -> Option<E> {
    one_or_set(merged_ports(ports).into_iter().map(port_expr).collect())
}

// ---------------------------------------------------------------------------------------------
// Expression / statement constructors

fn s(x: impl Into<String>) -> E {
    Expression::String(Cow::Owned(x.into()))
}
fn n(x: u32) -> E {
    Expression::Number(x)
}
fn named(x: NamedExpression<'static>) -> E {
    Expression::Named(x)
}
fn meta(key: MetaKey) -> E {
    named(NamedExpression::Meta(Meta { key }))
}
fn payload(protocol: &'static str, field: &'static str) -> E {
    named(NamedExpression::Payload(Payload::PayloadField(PayloadField { protocol: protocol.into(), field: field.into() })))
}
fn ct(key: &'static str) -> E {
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: None }))
}
/// `ct original <key>` (a key without address family: `proto-dst`, …).
fn ct_orig(key: &'static str) -> E {
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: Some(CTDir::Original) }))
}
/// `ct original ip saddr` / `ct original ip6 daddr`. nft's JSON spells the family inside the
/// key (`"key": "ip saddr"`); nft 1.0.6 refuses the separate `"family"` field ("cannot
/// determine ip protocol version").
fn ct_orig_addr(fam: Fam, field: &'static str) -> E {
    let key = format!("{} {field}", fam.proto());
    named(NamedExpression::CT(CT { key: key.into(), family: None, dir: Some(CTDir::Original) }))
}
fn fib_daddr_type() -> E {
    named(NamedExpression::Fib(Fib { result: FibResult::Type, flags: HashSet::from([FibFlag::Daddr]) }))
}
fn set(items: Vec<E>) -> E {
    named(NamedExpression::Set(items.into_iter().map(SetItem::Element).collect()))
}
fn mapping(items: Vec<(E, E)>) -> E {
    named(NamedExpression::Set(items.into_iter().map(|(k, v)| SetItem::Mapping(k, v)).collect()))
}
fn range(a: E, b: E) -> E {
    Expression::Range(Box::new(Range { range: [a, b] }))
}
fn prefix(addr: String, len: u32) -> E {
    named(NamedExpression::Prefix(Prefix { addr: Box::new(s(addr)), len }))
}
fn concat(v: Vec<E>) -> E {
    named(NamedExpression::Concat(v))
}
fn map_lookup(key: E, data: E) -> E {
    named(NamedExpression::Map(Box::new(MapExpr { key, data })))
}
fn and(a: E, b: E) -> E {
    Expression::BinaryOperation(Box::new(BinaryOperation::AND(a, b)))
}
fn or(a: E, b: E) -> E {
    Expression::BinaryOperation(Box::new(BinaryOperation::OR(vec![a, b])))
}
fn l4_key() -> E {
    concat(vec![meta(MetaKey::L4proto), payload("th", "dport")])
}

fn m(left: E, op: Operator, right: E) -> S {
    Statement::Match(Match { left, right, op })
}
fn eq(left: E, right: E) -> S {
    m(left, Operator::EQ, right)
}
fn ct_state(states: &[&str]) -> S {
    let right = if states.len() == 1 { s(states[0]) } else { Expression::List(states.iter().map(|x| s(*x)).collect()) };
    m(ct("state"), Operator::IN, right)
}
fn ct_status_dnat() -> S {
    m(ct("status"), Operator::IN, s("dnat"))
}
fn counter() -> S {
    Statement::Counter(Counter::Anonymous(None))
}
fn accept() -> S {
    Statement::Accept(None)
}
fn drop_() -> S {
    Statement::Drop(None)
}
fn jump(target: &str) -> S {
    Statement::Jump(JumpTarget { target: target.to_string().into() })
}
/// `limit rate [over] count/per burst B`: B is the rule's burst, else `default_burst`
/// (nft's 5 for filter `rate=`; the count for a forward's `conn-rate`, as the userspace
/// forwarder does, so both backends enforce the same limit).
fn limit(rate: &EventRate, over: bool, default_burst: u32) -> S {
    Statement::Limit(Limit {
        rate: rate.count,
        rate_unit: None,
        per: Some(rate.per.as_str().into()),
        burst: Some(rate.burst.filter(|b| *b > 0).unwrap_or(default_burst)),
        burst_unit: None,
        inv: over.then_some(true),
    })
}
fn reject(tcp_only: bool) -> S {
    if tcp_only {
        Statement::Reject(Some(Reject::new(Some(RejectType::TCPReset), None)))
    } else {
        Statement::Reject(Some(Reject::new(Some(RejectType::ICMPX), Some(RejectCode::PortUnreach))))
    }
}
/// `key set key & ~QOS_MARK_MASK | value`.
fn set_mark_bits(key: E, value: u32) -> S {
    Statement::Mangle(Mangle { key: key.clone(), value: or(and(key, n(!QOS_MARK_MASK)), n(value)) })
}

/// The layer-4 match of a rule: protocol, destination and source ports.
///
/// tcp/udp with ports use `tcp dport …` (the implicit protocol dependency is what nft lists);
/// `both` uses `meta l4proto {tcp, udp}` and `th dport …`. Ports without a protocol mean both.
fn l4_match(proto: Option<Proto>, dports: Option<&[PortRange]>, sports: Option<&[PortRange]>) -> Vec<S> {
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
        out.push(eq(payload(hdr, "dport"), d));
    }
    if let Some(sp) = sports {
        out.push(eq(payload(hdr, "sport"), sp));
    }
    out
}

fn fproto(p: ForwardProto) -> Proto {
    match p {
        ForwardProto::Tcp => Proto::Tcp,
        ForwardProto::Udp => Proto::Udp,
        ForwardProto::Both => Proto::Both,
    }
}

fn fproto_names(p: ForwardProto) -> &'static [&'static str] {
    match p {
        ForwardProto::Tcp => &["tcp"],
        ForwardProto::Udp => &["udp"],
        ForwardProto::Both => &["tcp", "udp"],
    }
}

/// `meta l4proto tcp` / `meta l4proto { tcp, udp }` for a forward.
fn l4proto_is(p: ForwardProto) -> S {
    match p {
        ForwardProto::Tcp => eq(meta(MetaKey::L4proto), s("tcp")),
        ForwardProto::Udp => eq(meta(MetaKey::L4proto), s("udp")),
        ForwardProto::Both => eq(meta(MetaKey::L4proto), set(vec![s("tcp"), s("udp")])),
    }
}

/// Which address families a rule with these address matches needs: `[None]` (one `inet` rule)
/// without address matches, else each family every match has addresses for (maybe none).
fn families(parts: &[&AddrParts], only: Option<Fam>) -> Vec<Option<Fam>> {
    if parts.is_empty() {
        return vec![None];
    }
    FAMS.into_iter()
        .filter(|f| only.is_none_or(|o| o == *f))
        .filter(|f| parts.iter().all(|p| p[f.idx()].is_some()))
        .map(Some)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The output document

struct Out {
    objects: Vec<Value>,
    rules: Vec<Value>,
}

fn to_value(obj: NfListObject<'static>) -> Value {
    serde_json::to_value(NfObject::CmdObject(NfCmd::Add(obj))).expect("nftables objects serialize")
}

impl Out {
    fn add(&mut self, obj: NfListObject<'static>) {
        self.objects.push(to_value(obj));
    }

    fn chain(&mut self, name: &str, base: Option<(NfChainType, NfHook, i32, NfChainPolicy)>) {
        let mut c = Chain { family: NfFamily::INet, table: NFT_TABLE.into(), name: name.to_string().into(), ..Chain::default() };
        if let Some((t, hook, prio, policy)) = base {
            c._type = Some(t);
            c.hook = Some(hook);
            c.prio = Some(prio);
            c.policy = Some(policy);
        }
        self.add(NfListObject::Chain(c));
    }

    fn rule(&mut self, chain: &str, expr: Vec<S>, comment: Option<String>) {
        let r = Rule {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            chain: chain.to_string().into(),
            expr: expr.into(),
            handle: None,
            index: None,
            comment: comment.map(Cow::Owned),
        };
        self.rules.push(to_value(NfListObject::Rule(r)));
    }

    /// A named address set (interval) with the merged intervals `elems`, built as JSON directly.
    fn named_addr_set(&mut self, name: String, fam: Fam, elems: &[(u128, u128)]) {
        let mut set = serde_json::Map::new();
        set.insert("family".into(), json!("inet"));
        set.insert("table".into(), json!(NFT_TABLE));
        set.insert("name".into(), Value::String(name));
        set.insert("type".into(), json!(match fam { Fam::V4 => "ipv4_addr", Fam::V6 => "ipv6_addr" }));
        set.insert("flags".into(), json!(["interval"]));
        if !elems.is_empty() {
            set.insert("elem".into(), Value::Array(elems.iter().map(|&(lo, hi)| interval_value(fam, lo, hi)).collect()));
        }
        // Not `json!` around a big value: the macro would deep-copy it (`to_value`).
        let wrap = |k: &str, v: Value| Value::Object(serde_json::Map::from_iter([(k.to_string(), v)]));
        self.objects.push(wrap("add", wrap("set", Value::Object(set))));
    }

    /// A `dynamic=#true` set: `flags interval, timeout` (other programs add addresses, CIDRs
    /// or ranges, with or without their own timeout), the default `timeout` and `size`, no
    /// elements. Raw JSON: the crate keeps flags in a HashSet, whose order is not deterministic.
    fn dynamic_set(&mut self, name: String, fam: Fam, d: DynamicSet) {
        let mut set = json!({
            "family": "inet", "table": NFT_TABLE, "name": name,
            "type": match fam { Fam::V4 => "ipv4_addr", Fam::V6 => "ipv6_addr" },
            "flags": ["interval", "timeout"],
        });
        if let Some(t) = d.timeout_s {
            set["timeout"] = json!(t);
        }
        if let Some(s) = d.size {
            set["size"] = json!(s);
        }
        self.objects.push(json!({"add": {"set": set}}));
    }

    fn port_set(&mut self, name: &str, ports: &[PortRange]) {
        let elems: Vec<E> = merged_ports(ports).into_iter().map(port_expr).collect();
        self.interval_set(name.to_string(), SetType::InetService, elems);
    }

    /// A named interval set of `set_type` holding `elems`.
    fn interval_set(&mut self, name: String, set_type: SetType, elems: Vec<E>) {
        let set = Set {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            name: name.into(),
            handle: None,
            set_type: SetTypeValue::Single(set_type),
            policy: None,
            flags: Some(HashSet::from([SetFlag::Interval])),
            elem: (!elems.is_empty()).then(|| elems.into()),
            timeout: None,
            gc_interval: None,
            size: None,
            comment: None,
        };
        self.add(NfListObject::Set(Box::new(set)));
    }

    /// A `inet_proto . inet_service : <data>` map: a hash map for exact keys, an interval map
    /// when keys may be port ranges. Elements are `[key, value]` JSON pairs (built raw: element
    /// comments need fields the crate would serialize as null).
    fn fwd_map(&mut self, name: &str, data: SetType, elems: Vec<Value>, interval: bool, counters: bool) {
        let map = Map {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            name: name.to_string().into(),
            handle: None,
            set_type: SetTypeValue::Concatenated(Cow::Owned(vec![SetType::InetProto, SetType::InetService])),
            map: SetTypeValue::Single(data),
            policy: None,
            flags: interval.then(|| HashSet::from([SetFlag::Interval])),
            elem: None,
            timeout: None,
            gc_interval: None,
            size: None,
            comment: None,
        };
        let mut v = to_value(NfListObject::Map(Box::new(map)));
        let obj = v["add"]["map"].as_object_mut().expect("map object");
        if !elems.is_empty() {
            obj.insert("elem".into(), Value::Array(elems));
        }
        if counters {
            // A map-level statement: every element gets its own counter.
            obj.insert("stmt".into(), json!([{"counter": null}]));
        }
        self.objects.push(v);
    }
}

fn ev<T: serde::Serialize>(x: &T) -> Value {
    serde_json::to_value(x).expect("expressions serialize")
}

/// `{"elem": {"val": key, "comment": c}}`: a map key with a comment.
fn commented(key: E, comment: &str) -> Value {
    json!({"elem": {"val": ev(&key), "comment": comment}})
}

// ---------------------------------------------------------------------------------------------
// Kernel forwards

/// How one target treats the destination port of a connection to listen port `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TPort {
    /// Keep the port the client connected to.
    Keep,
    /// Always this port.
    Fixed(u16),
    /// `p - listen.lo + to` (a range mapped onto another range).
    Offset { listen_lo: u16, to_lo: u16, to_hi: u16 },
}

impl TPort {
    fn of(listen: PortRange, target: Option<PortRange>) -> TPort {
        match target {
            _ if listen.is_single() => TPort::Fixed(target.map_or(listen.lo, |t| t.lo)),
            None => TPort::Keep,
            Some(t) if t.is_single() => TPort::Fixed(t.lo),
            Some(t) if t.lo == listen.lo => TPort::Keep,
            Some(t) => TPort::Offset { listen_lo: listen.lo, to_lo: t.lo, to_hi: t.hi },
        }
    }
    /// The target port for listen port `p`.
    fn port(self, p: u16) -> u16 {
        match self {
            TPort::Keep => p,
            TPort::Fixed(x) => x,
            TPort::Offset { listen_lo, to_lo, to_hi } => {
                let v = u32::from(to_lo) + u32::from(p - listen_lo);
                v.min(u32::from(to_hi)) as u16
            }
        }
    }
}

/// The listen address of a forward, if it names one (`0.0.0.0` / `::` mean every address).
fn listen_addr(f: &ForwardRule) -> Option<IpAddr> {
    f.listen.value.addr.filter(|a| !a.is_unspecified())
}

/// Address family a forward's listen address restricts it to (`0.0.0.0` means IPv4 only).
fn listen_fam(f: &ForwardRule) -> Option<Fam> {
    match f.listen.value.addr {
        Some(IpAddr::V4(_)) => Some(Fam::V4),
        Some(IpAddr::V6(a)) if !a.is_unspecified() => Some(Fam::V6),
        _ => None,
    }
}

fn ip_targets(f: &ForwardRule) -> Vec<(IpAddr, Option<PortRange>)> {
    f.targets
        .value
        .iter()
        .filter_map(|t| match &t.host {
            TargetHost::Ip(ip) => Some((*ip, t.ports)),
            TargetHost::Dns(_) => None,
        })
        .collect()
}

fn is_map_forward(f: &ForwardRule) -> bool {
    ip_targets(f).len() == 1 && f.targets.value.len() == 1 && f.from.is_none() && f.listen.value.addr.is_none_or(|a| a.is_unspecified())
}

#[derive(Default)]
struct NatMaps {
    /// Single listen port (hash maps).
    addr: [Vec<Value>; 2],
    port: [Vec<Value>; 2],
    /// Listen port range with a fixed or offset target port (interval maps).
    raddr: [Vec<Value>; 2],
    rport: [Vec<Value>; 2],
    /// Listen port range keeping the port (interval map).
    keep: [Vec<Value>; 2],
    /// Keys already taken per family: (proto, listen range).
    used: [Vec<(&'static str, PortRange)>; 2],
}

impl NatMaps {
    /// Add a map forward; false when one of its keys overlaps an earlier forward's.
    fn try_add(&mut self, f: &ForwardRule) -> bool {
        let (ip, tports) = ip_targets(f)[0];
        let fam = Fam::of(&ip);
        if listen_fam(f).is_some_and(|lf| lf != fam) {
            return true; // `listen="0.0.0.0:…"` with an IPv6 target: nothing can match
        }
        let i = fam.idx();
        let listen = f.listen.value.ports;
        let protos = fproto_names(f.proto);
        if protos.iter().any(|p| self.used[i].iter().any(|(q, r)| q == p && r.overlaps(&listen))) {
            return false;
        }
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        let tp = TPort::of(listen, tports);
        for proto in protos {
            self.used[i].push((proto, listen));
            let key = concat(vec![s(*proto), port_expr(listen)]);
            let addr = ev(&s(ip.to_string()));
            match tp {
                TPort::Keep => self.keep[i].push(json!([commented(key, &comment), addr])),
                TPort::Fixed(p) if listen.is_single() => {
                    self.addr[i].push(json!([commented(key.clone(), &comment), addr]));
                    self.port[i].push(json!([ev(&key), p]));
                }
                TPort::Fixed(p) => {
                    self.raddr[i].push(json!([commented(key.clone(), &comment), addr]));
                    self.rport[i].push(json!([ev(&key), p]));
                }
                TPort::Offset { .. } => {
                    self.raddr[i].push(json!([commented(key, &comment), addr]));
                    for p in listen.lo..=listen.hi {
                        self.rport[i].push(json!([ev(&concat(vec![s(*proto), n(u32::from(p))])), tp.port(p)]));
                    }
                }
            }
        }
        true
    }
}

/// The DNAT rules of a forward that does not fit the maps.
fn own_dnat_rules(out: &mut Out, plan: &HostPlan, f: &ForwardRule) {
    let comment = rule_comment(RuleKind::Forward, &f.name.value);
    let listen = f.listen.value.ports;
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let targets = ip_targets(f);
    for fam in FAMS {
        let tg: Vec<(IpAddr, TPort)> =
            targets.iter().filter(|(ip, _)| Fam::of(ip) == fam).map(|(ip, p)| (*ip, TPort::of(listen, *p))).collect();
        if tg.is_empty() || listen_fam(f).is_some_and(|lf| lf != fam) {
            continue;
        }
        let mut base = l4_match(Some(fproto(f.proto)), None, None);
        if let Some(a) = listen_addr(f) {
            base.push(eq(payload(fam.proto(), "daddr"), s(a.to_string())));
        }
        if let Some(parts) = &from {
            match &parts[fam.idx()] {
                Some(e) => base.push(eq(payload(fam.proto(), "saddr"), e.clone())),
                None => continue,
            }
        }
        let dport = |r: PortRange| eq(payload("th", "dport"), port_expr(r));
        let nat = |addr: E, port: Option<E>| Statement::DNAT(Some(NAT { addr: Some(addr), family: Some(fam.nat()), port, flags: None }));
        let mut rules: Vec<Vec<S>> = Vec::new();
        if let [(ip, tp)] = tg[..] {
            let st = match tp {
                TPort::Keep => nat(s(ip.to_string()), None),
                TPort::Fixed(p) => nat(s(ip.to_string()), Some(n(u32::from(p)))),
                TPort::Offset { .. } => {
                    let m = (listen.lo..=listen.hi).map(|p| (n(u32::from(p)), n(u32::from(tp.port(p))))).collect();
                    nat(s(ip.to_string()), Some(map_lookup(payload("th", "dport"), mapping(m))))
                }
            };
            rules.push(vec![dport(listen), counter(), st]);
        } else {
            let ng = || named(NamedExpression::Numgen(Numgen { mode: NgMode::Inc, ng_mod: tg.len() as u32, offset: None }));
            if tg.iter().all(|(_, tp)| *tp == TPort::Keep) {
                let m = tg.iter().enumerate().map(|(i, (ip, _))| (n(i as u32), s(ip.to_string()))).collect();
                rules.push(vec![dport(listen), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
            } else if tg.iter().all(|(_, tp)| matches!(tp, TPort::Fixed(_))) {
                let m = tg
                    .iter()
                    .enumerate()
                    .map(|(i, (ip, tp))| (n(i as u32), concat(vec![s(ip.to_string()), n(u32::from(tp.port(listen.lo)))])))
                    .collect();
                rules.push(vec![dport(listen), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
            } else {
                // Targets disagree on how ports map: one rule per listen port.
                for p in listen.lo..=listen.hi {
                    let m = tg
                        .iter()
                        .enumerate()
                        .map(|(i, (ip, tp))| (n(i as u32), concat(vec![s(ip.to_string()), n(u32::from(tp.port(p)))])))
                        .collect();
                    rules.push(vec![dport(PortRange::single(p)), counter(), nat(map_lookup(ng(), mapping(m)), None)]);
                }
            }
        }
        for r in rules {
            let mut expr = base.clone();
            expr.extend(r);
            out.rule(chains::FWD_DNAT, expr, Some(comment.clone()));
        }
    }
}

/// Matches that pick a forward's new connections after DNAT (in `fwd_guard`, reached from the
/// filter `forward` and `output` chains), per family needed.
fn forward_guard_matches(plan: &HostPlan, f: &ForwardRule) -> Vec<(ForwardProto, Vec<S>)> {
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let fams: Vec<Option<Fam>> = match (&from, listen_addr(f)) {
        (None, None) => vec![None],
        (None, Some(a)) => vec![Some(Fam::of(&a))],
        (Some(p), a) => families(&[p], a.map(|a| Fam::of(&a))),
    };
    // One guard per protocol: nft can type `ct original proto-dst` only after a single-protocol
    // match (with `meta l4proto {tcp, udp}` it lists "0xbb8 [invalid type]", which nft cannot
    // read back).
    let protos: &[ForwardProto] = match f.proto {
        ForwardProto::Both => &[ForwardProto::Tcp, ForwardProto::Udp],
        ForwardProto::Tcp => &[ForwardProto::Tcp],
        ForwardProto::Udp => &[ForwardProto::Udp],
    };
    fams.into_iter()
        .flat_map(|fam| protos.iter().map(move |p| (fam, *p)))
        .map(|(fam, proto)| {
            let mut v = vec![
                ct_state(&["new"]),
                ct_status_dnat(),
                l4proto_is(proto),
                eq(ct_orig("proto-dst"), port_expr(f.listen.value.ports)),
            ];
            if let Some(fam) = fam {
                if let Some(a) = listen_addr(f) {
                    v.push(eq(ct_orig_addr(fam, "daddr"), s(a.to_string())));
                }
                if let Some(Some(e)) = from.as_ref().map(|p| &p[fam.idx()]) {
                    v.push(eq(payload(fam.proto(), "saddr"), e.clone()));
                }
            }
            (proto, v)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Filter chains

fn filter_rule(out: &mut Out, plan: &HostPlan, r: &FilterRule) {
    let comment = rule_comment(RuleKind::Filter, &r.name.value);
    let proto = r.proto.as_ref().map(|p| p.value);
    let from = r.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let to = r.to.as_ref().map(|m| addr_parts(plan, &m.value));
    let parts: Vec<&AddrParts> = from.iter().chain(to.iter()).collect();
    let only = match proto {
        Some(Proto::Icmp) => Some(Fam::V4),
        Some(Proto::Icmpv6) => Some(Fam::V6),
        _ => None,
    };
    let l4 = l4_match(proto, r.ports.as_ref().map(|p| p.value.as_slice()), r.sports.as_ref().map(|p| p.value.as_slice()));
    for fam in families(&parts, only) {
        let mut expr = Vec::new();
        if let Some(i) = &r.iif {
            expr.push(eq(meta(MetaKey::Iifname), s(i.value.clone())));
        }
        if let Some(o) = &r.oif {
            expr.push(eq(meta(MetaKey::Oifname), s(o.value.clone())));
        }
        expr.extend(l4.iter().cloned());
        if let Some(fam) = fam {
            if let Some(Some(e)) = from.as_ref().map(|p| &p[fam.idx()]) {
                expr.push(eq(payload(fam.proto(), "saddr"), e.clone()));
            }
            if let Some(Some(e)) = to.as_ref().map(|p| &p[fam.idx()]) {
                expr.push(eq(payload(fam.proto(), "daddr"), e.clone()));
            }
        }
        if let Some(rate) = &r.rate {
            expr.push(ct_state(&["new"]));
            expr.push(limit(&rate.value, false, DEFAULT_BURST));
        }
        if r.log {
            let prefix = truncate(format!("fwc {}: ", r.name.value), MAX_LOG_PREFIX);
            expr.push(Statement::Log(Some(Log { prefix: Some(prefix.into()), ..Log::new(None) })));
        }
        expr.push(counter());
        expr.push(match r.action {
            Action::Allow => accept(),
            Action::Deny => drop_(),
            Action::Reject => reject(proto == Some(Proto::Tcp)),
        });
        out.rule(r.chain.as_str(), expr, Some(comment.clone()));
    }
}

/// `input` accepts for a userspace forward's listeners, so a drop policy does not block them.
fn userspace_accept(out: &mut Out, plan: &HostPlan, f: &ForwardRule) {
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
            if let Some(Some(e)) = from.as_ref().map(|p| &p[fam.idx()]) {
                expr.push(eq(payload(fam.proto(), "saddr"), e.clone()));
            }
        }
        expr.push(counter());
        expr.push(accept());
        out.rule(chains::INPUT, expr, Some(comment.clone()));
    }
}

fn has_dns_target(f: &ForwardRule) -> bool {
    f.targets.value.iter().any(|t| matches!(t.host, TargetHost::Dns(_)))
}

/// `output` accepts for a userspace forward's connections to its IP-literal targets (address,
/// protocol and the ports the forwarder connects to, as in `forward.json`), so a drop policy
/// does not cut the forwarder off. One rule per (family, target ports), addresses in a set.
fn forwarder_target_accept(out: &mut Out, f: &ForwardRule) {
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

// ---------------------------------------------------------------------------------------------
// QoS

fn class_chain(id: u32) -> String {
    format!("qos_c{id}")
}

/// The class pair base (the up id, even) of a rule with QoS classes.
fn pair_base(plan: &HostPlan, kind: RuleKind, name: &str) -> Option<u32> {
    plan.qos_class(kind, name, QosDirection::Up).or_else(|| plan.qos_class(kind, name, QosDirection::Down)).map(|c| c.id & !1)
}

/// How specific a shape is: the number of its match properties (`dev`, `from`, `to`, `proto`,
/// `port`). `direction` does not count, it only says which side `dev` is.
fn shape_specificity(sh: &ShapeRule) -> usize {
    usize::from(!sh.devs.is_empty())
        + usize::from(sh.from.is_some())
        + usize::from(sh.to.is_some())
        + usize::from(sh.proto.is_some())
        + usize::from(sh.ports.is_some())
}

/// Shapes in classification order: most specific first, ties by name. The order depends only
/// on the rules themselves (not on where they are written), so the compiled ruleset is a
/// function of the rules' digests and `fwc plan` never misses a change of precedence.
fn shape_order<'a>(shapes: &[&'a ShapeRule]) -> Vec<&'a ShapeRule> {
    let mut v = shapes.to_vec();
    v.sort_by(|a, b| shape_specificity(b).cmp(&shape_specificity(a)).then_with(|| a.name.value.cmp(&b.name.value)));
    v
}

/// Name of the `inet_service` set with a shape's ports (`ct original proto-dst` only types
/// correctly against a named set when the ports are a list or the protocol is `both`).
fn shape_ports_set(id: u32) -> String {
    format!("qos_p{id}")
}

/// The rules in `qos_apply` that put a shape's class into the packet mark.
fn shape_rules(out: &mut Out, plan: &HostPlan, sh: &ShapeRule) {
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
    };
    if let Some(l4) = l4 {
        head.push(eq(meta(MetaKey::L4proto), l4));
    }
    if let Some(ports) = ports.filter(|_| !matches!(proto, Some(Proto::Icmp | Proto::Icmpv6))) {
        let name = shape_ports_set(class.id);
        out.port_set(&name, ports);
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
            if let Some(Some(e)) = from.as_ref().map(|p| &p[fam.idx()]) {
                expr.push(eq(ct_orig_addr(fam, "saddr"), e.clone()));
            }
            if let Some(Some(e)) = to.as_ref().map(|p| &p[fam.idx()]) {
                expr.push(eq(ct_orig_addr(fam, "daddr"), e.clone()));
            }
        }
        expr.push(Statement::Goto(JumpTarget { target: class_chain(class.id).into() }));
        out.rule(chains::QOS_APPLY, expr, Some(comment.clone()));
    }
}

fn qos(out: &mut Out, plan: &HostPlan) {
    if plan.qos_classes.is_empty() {
        return;
    }
    let forward_classes = plan.qos_classes.iter().any(|c| c.kind == RuleKind::Forward);
    if forward_classes {
        out.chain(chains::QOS_CLASSIFY, None);
        out.chain(chains::QOS_MARK, Some((NfChainType::Filter, NfHook::Prerouting, -150, NfChainPolicy::Accept)));
        out.chain(chains::QOS_MARK_OUT, Some((NfChainType::Filter, NfHook::Output, -150, NfChainPolicy::Accept)));
    }
    for c in &plan.qos_classes {
        out.chain(&class_chain(c.id), None);
    }
    out.chain(chains::QOS_APPLY, Some((NfChainType::Filter, NfHook::Postrouting, -150, NfChainPolicy::Accept)));

    // Capped forwards: a new flow's class pair goes into its ct mark (before DNAT).
    let classify_tail = |base: u32| vec![set_mark_bits(ct("mark"), base << QOS_MARK_SHIFT), counter(), Statement::Return(None)];
    for f in &plan.kernel_forwards {
        let Some(base) = pair_base(plan, RuleKind::Forward, &f.name.value) else { continue };
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
                if let Some(e) = &parts[fam.idx()] {
                    expr.push(eq(payload(fam.proto(), "saddr"), e.clone()));
                }
            }
            expr.extend(classify_tail(base));
            out.rule(chains::QOS_CLASSIFY, expr, Some(comment.clone()));
        }
    }
    if forward_classes {
        for hooked in [chains::QOS_MARK, chains::QOS_MARK_OUT] {
            out.rule(hooked, vec![ct_state(&["new"]), jump(chains::QOS_CLASSIFY)], None);
        }
    }

    // Per class: OR its mark into the packet mark.
    for c in &plan.qos_classes {
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

// ---------------------------------------------------------------------------------------------

/// The nftables ruleset of one host: `{"nftables": [ {"add": …}, … ]}`.
pub fn emit(plan: &HostPlan) -> Value {
    let mut out = Out { objects: Vec::new(), rules: Vec::new() };
    out.add(NfListObject::Table(Table { family: NfFamily::INet, name: NFT_TABLE.into(), handle: None }));

    // Sets: both halves of every set, always.
    for set in &plan.sets {
        if let Some(d) = set.dynamic {
            out.dynamic_set(set_name(&set.name.value, false), Fam::V4, d);
            out.dynamic_set(set_name(&set.name.value, true), Fam::V6, d);
            continue;
        }
        let [v4, v6] = merged(set.elements.iter().map(|e| &e.value));
        out.named_addr_set(set_name(&set.name.value, false), Fam::V4, &v4);
        drop(v4);
        out.named_addr_set(set_name(&set.name.value, true), Fam::V6, &v6);
    }

    // Kernel forwards: maps and the masquerade port sets.
    let has_nat = !plan.kernel_forwards.is_empty();
    let mut maps = NatMaps::default();
    let mut own: Vec<&ForwardRule> = Vec::new();
    let mut demoted: Vec<&ForwardRule> = Vec::new();
    for f in &plan.kernel_forwards {
        if ip_targets(f).is_empty() {
            continue;
        }
        if is_map_forward(f) {
            if !maps.try_add(f) {
                demoted.push(f);
            }
        } else {
            own.push(f);
        }
    }
    // Specific forwards (from= or a listen address) before catch-all multi-target ones.
    own.sort_by_key(|f| (f.from.is_none() && listen_addr(f).is_none(), f.name.value.clone()));
    if has_nat {
        let NatMaps { addr, port, raddr, rport, keep, .. } = maps;
        let [a4, a6] = addr;
        let [p4, p6] = port;
        let [ra4, ra6] = raddr;
        let [rp4, rp6] = rport;
        let [k4, k6] = keep;
        // Exact-port forwards in hash maps (the bulk, cheap to load); ranges in interval maps,
        // whose kernel backend (pipapo, for concatenated keys) is slow to fill.
        out.fwd_map(maps::FWD4_ADDR, SetType::Ipv4Addr, a4, false, true);
        out.fwd_map(maps::FWD4_PORT, SetType::InetService, p4, false, false);
        out.fwd_map(maps::FWD4R_ADDR, SetType::Ipv4Addr, ra4, true, true);
        out.fwd_map(maps::FWD4R_PORT, SetType::InetService, rp4, true, false);
        out.fwd_map(maps::FWD4_KEEP, SetType::Ipv4Addr, k4, true, true);
        out.fwd_map(maps::FWD6_ADDR, SetType::Ipv6Addr, a6, false, true);
        out.fwd_map(maps::FWD6_PORT, SetType::InetService, p6, false, false);
        out.fwd_map(maps::FWD6R_ADDR, SetType::Ipv6Addr, ra6, true, true);
        out.fwd_map(maps::FWD6R_PORT, SetType::InetService, rp6, true, false);
        out.fwd_map(maps::FWD6_KEEP, SetType::Ipv6Addr, k6, true, true);
        let ports = |proto: &str| -> Vec<PortRange> {
            plan.kernel_forwards.iter().filter(|f| fproto_names(f.proto).contains(&proto)).map(|f| f.listen.value.ports).collect()
        };
        out.port_set(maps::PORTS_TCP, &ports("tcp"));
        out.port_set(maps::PORTS_UDP, &ports("udp"));
    }

    // Filter chains.
    for c in &plan.chains {
        let hook = match c.kind {
            ChainKind::Input => NfHook::Input,
            ChainKind::Forward => NfHook::Forward,
            ChainKind::Output => NfHook::Output,
        };
        let policy = match c.policy {
            Policy::Accept => NfChainPolicy::Accept,
            Policy::Drop => NfChainPolicy::Drop,
        };
        out.chain(c.kind.as_str(), Some((NfChainType::Filter, hook, 0, policy)));
    }
    // max-conns / conn-rate guards of kernel forwards: one regular chain, jumped to from both
    // `forward` (remote clients) and `output` (clients on the host itself), so both paths share
    // one `ct count` list and one token bucket per guard (the state lives in the rule).
    let mut guards: Vec<(Vec<S>, String)> = Vec::new();
    for f in &plan.kernel_forwards {
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        for (proto, matches) in forward_guard_matches(plan, f) {
            if let Some(max) = &f.max_conns {
                let mut e = matches.clone();
                e.push(Statement::CTCount(CTCount { val: n(max.value), inv: Some(true) }));
                e.push(counter());
                e.push(reject(proto == ForwardProto::Tcp));
                guards.push((e, comment.clone()));
            }
            if let Some(rate) = &f.conn_rate {
                let mut e = matches.clone();
                e.push(limit(&rate.value, true, rate.value.count));
                e.push(counter());
                e.push(drop_());
                guards.push((e, comment.clone()));
            }
        }
    }
    if !guards.is_empty() {
        out.chain(chains::FWD_GUARD, None);
    }
    if has_nat {
        out.chain(chains::FWD_DNAT, None);
        out.chain(chains::PREROUTING, Some((NfChainType::NAT, NfHook::Prerouting, -100, NfChainPolicy::Accept)));
        out.chain(chains::NAT_OUTPUT, Some((NfChainType::NAT, NfHook::Output, -100, NfChainPolicy::Accept)));
        out.chain(chains::POSTROUTING, Some((NfChainType::NAT, NfHook::Postrouting, 100, NfChainPolicy::Accept)));
    }

    // Neighbour discovery has no conntrack entry (it would hit `invalid`); without it a drop
    // policy cuts the host off IPv6 entirely, in either direction.
    let nd = || {
        let types = ["nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-solicit", "nd-router-advert"];
        vec![
            eq(meta(MetaKey::L4proto), s("ipv6-icmp")),
            eq(payload("icmpv6", "type"), set(types.iter().map(|t| s(*t)).collect())),
            accept(),
        ]
    };
    for c in &plan.chains {
        let name = c.kind.as_str();
        match c.kind {
            ChainKind::Input => {
                out.rule(name, vec![ct_state(&["established", "related"]), accept()], None);
                out.rule(name, vec![eq(meta(MetaKey::Iif), s("lo")), accept()], None);
                out.rule(name, nd(), None);
                out.rule(name, vec![ct_state(&["invalid"]), drop_()], None);
            }
            ChainKind::Forward => {
                out.rule(name, vec![ct_state(&["established", "related"]), accept()], None);
                if !guards.is_empty() {
                    out.rule(name, vec![jump(chains::FWD_GUARD)], None);
                }
            }
            ChainKind::Output => {
                out.rule(name, vec![ct_state(&["established", "related"]), accept()], None);
                // Clients on the host itself connecting to a kernel forward: nat output has
                // DNATed the flow already, guard it like a remote client's. Before `oif lo`:
                // a forward's listen address is local, so the hook's oif is `lo` even after
                // the DNAT reroute.
                if !guards.is_empty() {
                    out.rule(name, vec![jump(chains::FWD_GUARD)], None);
                }
                out.rule(name, vec![eq(meta(MetaKey::Oif), s("lo")), accept()], None);
                out.rule(name, nd(), None);
                // The userspace forwarder's own connections to its targets.
                for f in &plan.userspace_forwards {
                    forwarder_target_accept(&mut out, f);
                }
                if plan.userspace_forwards.iter().any(|f| has_dns_target(f)) {
                    let mark = n(FORWARDER_SOCKET_MARK);
                    out.rule(name, vec![eq(and(meta(MetaKey::Mark), mark.clone()), mark), accept()], None);
                }
                // Local clients' DNATed flows (today they pass `oif lo` already; this keeps
                // them out of the user rules whatever the route).
                if has_nat {
                    out.rule(name, vec![ct_status_dnat(), accept()], None);
                }
            }
        }
        for r in &c.rules {
            filter_rule(&mut out, plan, r);
        }
        // Forwards obey the filter policy: their accepts come AFTER the user's rules, so a
        // `deny`/`reject` of the chain a forward's new connection passes stops it, and the
        // accept only stands in for the chain's policy (see "Forwards and the filter chains"
        // in docs/rules.md). Established/related packets took the fast path above.
        match c.kind {
            // Userspace forwards: the client connects to the forwarder's socket on this host.
            // Kernel forwards to a local target (DNAT to an address of this host) arrive here too.
            ChainKind::Input => {
                for f in &plan.userspace_forwards {
                    userspace_accept(&mut out, plan, f);
                }
                if has_nat {
                    out.rule(name, vec![ct_status_dnat(), accept()], None);
                }
            }
            // Kernel forwards to another host: DNATed in prerouting, routed through `forward`.
            ChainKind::Forward => out.rule(name, vec![ct_status_dnat(), accept()], None),
            ChainKind::Output => {}
        }
    }

    for (e, comment) in guards.iter().cloned() {
        out.rule(chains::FWD_GUARD, e, Some(comment));
    }

    if has_nat {
        for f in &own {
            own_dnat_rules(&mut out, plan, f);
        }
        let l4 = || eq(meta(MetaKey::L4proto), set(vec![s("tcp"), s("udp")]));
        for fam in FAMS {
            let (addr, port, raddr, rport, keep) = match fam {
                Fam::V4 => (maps::FWD4_ADDR, maps::FWD4_PORT, maps::FWD4R_ADDR, maps::FWD4R_PORT, maps::FWD4_KEEP),
                Fam::V6 => (maps::FWD6_ADDR, maps::FWD6_PORT, maps::FWD6R_ADDR, maps::FWD6R_PORT, maps::FWD6_KEEP),
            };
            let lookup = |m: &str| map_lookup(l4_key(), s(format!("@{m}")));
            // `meta nfproto`: the lookups must not see the other family's packets (they would
            // count them in the element counters and hand `dnat ip` an IPv6 packet).
            let nfproto = || eq(meta(MetaKey::Nfproto), s(fam.nfproto()));
            // Exact ports first (hash maps), then ranges; a key missing from a map ends the rule.
            for (a, p) in [(addr, port), (raddr, rport)] {
                let both = NAT { addr: Some(lookup(a)), family: Some(fam.nat()), port: Some(lookup(p)), flags: None };
                out.rule(chains::FWD_DNAT, vec![nfproto(), l4(), Statement::DNAT(Some(both))], None);
            }
            let kept = NAT { addr: Some(lookup(keep)), family: Some(fam.nat()), port: None, flags: None };
            out.rule(chains::FWD_DNAT, vec![nfproto(), l4(), Statement::DNAT(Some(kept))], None);
        }
        for f in &demoted {
            own_dnat_rules(&mut out, plan, f);
        }
        for hooked in [chains::PREROUTING, chains::NAT_OUTPUT] {
            out.rule(hooked, vec![eq(fib_daddr_type(), s("local")), jump(chains::FWD_DNAT)], None);
        }
        for (proto, set) in [("tcp", maps::PORTS_TCP), ("udp", maps::PORTS_UDP)] {
            let expr = vec![
                ct_status_dnat(),
                eq(meta(MetaKey::L4proto), s(proto)),
                eq(ct_orig("proto-dst"), s(format!("@{set}"))),
                Statement::Masquerade(None),
            ];
            out.rule(chains::POSTROUTING, expr, None);
        }
    }

    qos(&mut out, plan);

    let mut objects = out.objects;
    objects.extend(out.rules);
    // Not `json!`: it would deep-copy the whole document (`to_value`), set elements included.
    Value::Object(serde_json::Map::from_iter([("nftables".to_string(), Value::Array(objects))]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> AddrElem {
        AddrElem::Net(s.parse().unwrap())
    }

    #[test]
    fn comments_round_trip() {
        let c = rule_comment(RuleKind::Forward, "web");
        assert_eq!(c, "fwc:forward:web");
        assert_eq!(parse_rule_comment(&c), Some((RuleKind::Forward, "web")));
        assert_eq!(parse_rule_comment("fwc:shape:a:b"), Some((RuleKind::Shape, "a:b")));
        assert_eq!(parse_rule_comment("docker"), None);
        assert!(rule_comment(RuleKind::Filter, &"x".repeat(300)).len() <= MAX_COMMENT);
    }

    #[test]
    fn addresses_merge_and_render() {
        let [v4, v6] = set_elems(&[
            net("10.0.0.0/8"),
            net("10.1.0.0/16"),
            net("192.0.2.7/32"),
            AddrElem::Range("192.0.2.8".parse().unwrap(), "192.0.2.20".parse().unwrap()),
            net("2001:db8::/32"),
            net("0.0.0.0/0"),
        ]);
        // 0.0.0.0/0 swallows everything else.
        assert_eq!(serde_json::to_value(&v4).unwrap(), json!([{"prefix": {"addr": "0.0.0.0", "len": 0}}]));
        assert_eq!(serde_json::to_value(&v6).unwrap(), json!([{"prefix": {"addr": "2001:db8::", "len": 32}}]));
        let [v4, _] = set_elems(&[
            net("192.0.2.7/32"),
            AddrElem::Range("192.0.2.8".parse().unwrap(), "192.0.2.20".parse().unwrap()),
            net("198.51.100.0/24"),
            net("198.51.101.0/24"),
        ]);
        assert_eq!(
            serde_json::to_value(&v4).unwrap(),
            json!([{"range": ["192.0.2.7", "192.0.2.20"]}, {"prefix": {"addr": "198.51.100.0", "len": 23}}])
        );
        let [_, v6] = set_elems(&[net("::/0")]);
        assert_eq!(serde_json::to_value(&v6).unwrap(), json!([{"prefix": {"addr": "::", "len": 0}}]));
        let [v4, _] = set_elems(&[net("203.0.113.9/32")]);
        assert_eq!(serde_json::to_value(&v4).unwrap(), json!(["203.0.113.9"]));
    }

    #[test]
    fn ports_merge() {
        let p = |lo, hi| PortRange { lo, hi };
        assert_eq!(merged_ports(&[p(80, 80), p(443, 443), p(81, 90), p(85, 100)]), vec![p(80, 100), p(443, 443)]);
        assert_eq!(serde_json::to_value(ports_expr(&[p(22, 22)]).unwrap()).unwrap(), json!(22));
        assert_eq!(serde_json::to_value(ports_expr(&[p(22, 22), p(80, 90)]).unwrap()).unwrap(), json!({"set": [22, {"range": [80, 90]}]}));
    }

    #[test]
    fn target_ports() {
        let r = |lo, hi| PortRange { lo, hi };
        assert_eq!(TPort::of(r(80, 80), None), TPort::Fixed(80));
        assert_eq!(TPort::of(r(80, 80), Some(r(8080, 8080))), TPort::Fixed(8080));
        assert_eq!(TPort::of(r(100, 110), None), TPort::Keep);
        assert_eq!(TPort::of(r(100, 110), Some(r(100, 110))), TPort::Keep);
        assert_eq!(TPort::of(r(100, 110), Some(r(9000, 9000))), TPort::Fixed(9000));
        let off = TPort::of(r(100, 110), Some(r(2100, 2110)));
        assert_eq!(off.port(100), 2100);
        assert_eq!(off.port(105), 2105);
        // A shorter target range clamps.
        assert_eq!(TPort::of(r(100, 110), Some(r(2100, 2102))).port(110), 2102);
    }

    #[test]
    fn l4_forms() {
        let v = |x: Vec<S>| serde_json::to_value(x).unwrap();
        assert_eq!(v(l4_match(None, None, None)), json!([]));
        assert_eq!(
            v(l4_match(Some(Proto::Tcp), Some(&[PortRange::single(22)]), None)),
            json!([{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}])
        );
        assert_eq!(
            v(l4_match(None, Some(&[PortRange::single(53)]), None))[0],
            json!({"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": {"set": ["tcp", "udp"]}}})
        );
        assert_eq!(
            v(l4_match(Some(Proto::Icmpv6), Some(&[PortRange::single(53)]), None)),
            json!([{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "ipv6-icmp"}}])
        );
    }
}
