//! The values of filter rules' packet-header matches, as the model holds them: TCP flags
//! (`tcp-flags="syn"`), packet types (`pkttype="broadcast"`), and the negated form of a list
//! (`from="!10.0.0.0/8"`). Parsing them is [`crate::features::headers`].

use serde::Serialize;

/// IP protocols a filter rule names besides tcp, udp, icmp and icmpv6 (`proto=gre`), with
/// their numbers (Linux's `IPPROTO_*`; nft prints them by these names). A rule may also give any
/// protocol by number (`proto=47`).
pub const IP_PROTOCOLS: &[(&str, u8)] = &[
    ("igmp", 2),
    ("ipip", 4),
    ("dccp", 33),
    ("ipv6", 41),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("ospf", 89),
    ("pim", 103),
    ("comp", 108),
    ("vrrp", 112),
    ("l2tp", 115),
    ("sctp", 132),
    ("udplite", 136),
];

/// AH: in IPv6 an extension header, which the kernel's `meta l4proto` (and ip6tables' `-p`)
/// skips to the header after it; fwc's `proto=ah` is IPv4 only.
pub const IPPROTO_AH: u8 = 51;

/// The name of IP protocol `n` in [`IP_PROTOCOLS`], if it has one there.
pub fn ip_protocol_name(n: u8) -> Option<&'static str> {
    IP_PROTOCOLS.iter().find(|(_, p)| *p == n).map(|(name, _)| *name)
}

/// The number of the IP protocol called `name` in [`IP_PROTOCOLS`].
pub fn ip_protocol_number(name: &str) -> Option<u8> {
    IP_PROTOCOLS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}

/// TCP flag bits as on the wire (and as nft and the evaluator's flows hold them).
pub const TCP_FLAGS: &[(&str, u8)] = &[("fin", 0x01), ("syn", 0x02), ("rst", 0x04), ("psh", 0x08), ("ack", 0x10), ("urg", 0x20), ("ecn", 0x40), ("cwr", 0x80)];

/// `fin,syn,rst,ack`: the mask of `tcp-flags="SET"` written without one (iptables' `--syn`).
pub const DEFAULT_TCP_MASK: u8 = 0x01 | 0x02 | 0x04 | 0x10;

/// The SYN bit: the flags of a flow's first TCP packet unless it says otherwise.
pub const TCP_SYN: u8 = 0x02;

/// `tcp-flags="SET/MASK"`: the flags in `mask` are exactly `set` (`negated`: they are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct TcpFlags {
    pub set: u8,
    pub mask: u8,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub negated: bool,
}

impl TcpFlags {
    /// Does a packet with `flags` match?
    pub fn matches(self, flags: u8) -> bool {
        (flags & self.mask == self.set) != self.negated
    }
}

/// Names of the flags in `bits`, in wire order (`["syn", "ack"]`).
pub fn tcp_flag_names(bits: u8) -> Vec<&'static str> {
    TCP_FLAGS.iter().filter(|(_, b)| bits & b != 0).map(|(n, _)| *n).collect()
}

impl std::fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |bits: u8| if bits == 0 { "none".to_string() } else if bits == 0xff { "all".to_string() } else { tcp_flag_names(bits).join(",") };
        if self.negated {
            f.write_str("!")?;
        }
        f.write_str(&names(self.set))?;
        if self.mask != DEFAULT_TCP_MASK {
            write!(f, "/{}", names(self.mask))?;
        }
        Ok(())
    }
}

/// `pkttype=`: how the link layer addressed the packet (nft `meta pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PktType {
    Host,
    Broadcast,
    Multicast,
    Other,
}

impl PktType {
    pub const ALL: [PktType; 4] = [PktType::Host, PktType::Broadcast, PktType::Multicast, PktType::Other];
    pub fn as_str(self) -> &'static str {
        match self {
            PktType::Host => "host",
            PktType::Broadcast => "broadcast",
            PktType::Multicast => "multicast",
            PktType::Other => "other",
        }
    }
    /// The kernel's `PACKET_*` number (`meta pkttype` compares it).
    pub fn number(self) -> u64 {
        match self {
            PktType::Host => 0,
            PktType::Broadcast => 1,
            PktType::Multicast => 2,
            PktType::Other => 3,
        }
    }
}

/// Which of a filter rule's list matches are negated (`from="!…"`: none of the list).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Negations {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub to: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ports: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sports: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub iif: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub oif: bool,
}

impl Negations {
    pub fn any(&self) -> bool {
        self.from || self.to || self.ports || self.sports || self.iif || self.oif
    }
    /// For serde: nothing negated.
    pub fn none(&self) -> bool {
        !self.any()
    }
}

/// `rpfilter=` on a prerouting deny: reverse-path filtering, the test the deny drops on
/// ([`crate::features::rpfilter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RpFilter {
    /// The route back to the source leaves by the interface the packet came in
    /// (nft `fib saddr . iif oif missing`; the kernel's `rp_filter=1`).
    Strict,
    /// Some route back to the source exists (nft `fib saddr oif missing`; `rp_filter=2`).
    Loose,
}

impl RpFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            RpFilter::Strict => "strict",
            RpFilter::Loose => "loose",
        }
    }
}
