//! The value types rules share: hosts and their selectors, addresses and address matches,
//! protocols and port ranges, event rates, bandwidths and per-source limits. Below every rule
//! kind of the model; names nothing above it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use super::header;
use super::span::{Span, Spanned};

#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub name: Spanned<String>,
    pub labels: BTreeMap<String, String>,
    pub vars: BTreeMap<String, String>,
}

/// One address: a network (a single address is a /32 or /128) or an inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AddrElem {
    Net(IpNet),
    Range(IpAddr, IpAddr),
}

impl AddrElem {
    pub fn is_ipv4(&self) -> bool {
        match self {
            AddrElem::Net(n) => matches!(n, IpNet::V4(_)),
            AddrElem::Range(a, _) => a.is_ipv4(),
        }
    }
}

impl fmt::Display for AddrElem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrElem::Net(n) if n.prefix_len() == n.max_prefix_len() => write!(f, "{}", n.addr()),
            AddrElem::Net(n) => write!(f, "{n}"),
            AddrElem::Range(a, b) => write!(f, "{a}-{b}"),
        }
    }
}

/// An address match in a rule: a set reference, or literal addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum AddrMatch {
    Set(String),
    Literal(Vec<AddrElem>),
}

/// Protocol of a filter rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
    /// tcp and udp
    Both,
    Icmp,
    Icmpv6,
    /// Another IP protocol, by number (`proto=gre` is 47): no ports, no ICMP types.
    Other(u8),
}

impl Proto {
    /// The protocol as a rule writes it: `tcp`, …, `gre` (names of [`header::IP_PROTOCOLS`]),
    /// or the number of one without a name there.
    pub fn as_str(self) -> std::borrow::Cow<'static, str> {
        match self {
            Proto::Tcp => "tcp".into(),
            Proto::Udp => "udp".into(),
            Proto::Both => "both".into(),
            Proto::Icmp => "icmp".into(),
            Proto::Icmpv6 => "icmpv6".into(),
            Proto::Other(n) => header::ip_protocol_name(n).map_or_else(|| n.to_string().into(), Into::into),
        }
    }
    pub fn has_ports(self) -> bool {
        matches!(self, Proto::Tcp | Proto::Udp | Proto::Both)
    }
}

/// Inclusive port range; a single port has `lo == hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    pub fn single(p: u16) -> Self {
        PortRange { lo: p, hi: p }
    }
    /// Number of ports (a range holds at least one, so there is no `is_empty`).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        u32::from(self.hi) - u32::from(self.lo) + 1
    }
    pub fn is_single(&self) -> bool {
        self.lo == self.hi
    }
    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single() {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    Second,
    Minute,
    Hour,
    Day,
}

impl TimeUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Second => "second",
            TimeUnit::Minute => "minute",
            TimeUnit::Hour => "hour",
            TimeUnit::Day => "day",
        }
    }
    pub fn seconds(self) -> u64 {
        match self {
            TimeUnit::Second => 1,
            TimeUnit::Minute => 60,
            TimeUnit::Hour => 3600,
            TimeUnit::Day => 86400,
        }
    }
}

/// A rate of events (new connections, packets): `50/second`, `10/minute burst 20`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EventRate {
    pub count: u32,
    pub per: TimeUnit,
    pub burst: Option<u32>,
}

impl fmt::Display for EventRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.per.as_str())?;
        if let Some(b) = self.burst {
            write!(f, " burst {b}")?;
        }
        Ok(())
    }
}

/// `on="edge-1"` or `on="role=edge,region=eu"`: host name, or labels that must all match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Selector {
    Name(String),
    Labels(BTreeMap<String, String>),
}

impl Selector {
    pub fn matches(&self, host: &Host) -> bool {
        self.matches_name(&host.name.value, &host.labels)
    }

    /// [`Selector::matches`] for a host known by name and labels only (a fleet member).
    pub fn matches_name(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Name(n) => name == n,
            Selector::Labels(want) => want.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }
}

/// A bandwidth in bytes per second (as written: `100mbit` = 12_500_000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Bandwidth(pub u64);

/// Per-source limits of a filter rule or forward (see [`crate::features::persource`]): each source
/// (an IPv4 address or IPv6 /64, by default) gets its own new-connection token bucket and
/// connection count, tracked in kernel sets of at most `size` sources per address family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PerSource {
    /// New connections per source: `rate-per-source=` (filter rules), `conn-rate-per-source=`
    /// (forwards). Burst: as written, else the count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Spanned<EventRate>>,
    /// `max-conns-per-source=`: concurrent connections per source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_conns: Option<Spanned<u32>>,
    /// `per-source-prefix4=` (default 32) / `per-source-prefix6=` (default 64): how sources are
    /// grouped.
    pub prefix4: u8,
    pub prefix6: u8,
    /// `per-source-size=`: most sources tracked per address family and limit.
    pub size: u32,
    /// The first per-source property as written (where `check` points).
    #[serde(skip)]
    pub span: Span,
}
