//! The packet and its connection while the hooks run ([`Packet`]), the values expressions
//! produce ([`Val`]), and the conntrack state of a flow's first packet.

use std::net::IpAddr;

use crate::eval::flow::{Flow, RouteBack, L4};

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
    /// TCP flag bits (0 for other protocols).
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 code.
    pub icmp_code: u8,
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
    /// Per-source limits the packet passed, in words: the evaluator cannot know a
    /// source's history, so it assumes the source is within them and says so.
    pub limits: Vec<String>,
    /// When the packet passes (Unix seconds): `meta day` / `meta hour` (schedules).
    pub at: Option<i64>,
    /// The route back to the source (`fib saddr`, reverse-path filtering).
    pub back: RouteBack,
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
            tcp_flags: flow.tcp_flags,
            icmp_code: flow.icmp_code,
            ct_dnat: false,
            orig: (flow.saddr, flow.daddr, flow.sport, flow.dport),
            local,
            round_robin: Vec::new(),
            dyn_elems: Vec::new(),
            limits: Vec::new(),
            at: None,
            back: flow.back.clone(),
        }
    }
}

/// The conntrack state of a flow's first packet: `new`, except for ICMP types that cannot open
/// a connection (replies, errors): conntrack calls those `invalid`; MLD and neighbour
/// discovery are `untracked`
/// (`valid_new` in nf_conntrack_proto_icmp.c / nf_conntrack_proto_icmpv6.c).
pub(super) fn first_packet_state(flow: &Flow) -> &'static str {
    let opens = match flow.proto {
        // echo, timestamp, info and address-mask requests
        L4::Icmp => matches!(flow.dport, 8 | 13 | 15 | 17),
        // echo request, node information query
        L4::Icmpv6 => matches!(flow.dport, 128 | 139),
        L4::Tcp => return crate::eval::headers::first_tcp_state(flow.tcp_flags),
        // AH over IPv6 is an extension header conntrack skips; a flow's packet has nothing
        // after it (no next header, 59), which conntrack cannot track: invalid.
        L4::Other(crate::model::header::IPPROTO_AH) if flow.daddr.is_ipv6() => false,
        // UDP and the protocols conntrack tracks generically (or as GRE, SCTP, …): new.
        L4::Udp | L4::Other(_) => true,
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
