//! A flow to evaluate: the first packet of a new connection, where it enters the host (from
//! outside to a local address, routed through, or sent by the host) and its interfaces. Parsed
//! from `fwc explain`'s one-line form (`tcp 203.0.113.5:40000 -> 198.18.1.1:8080`) or built
//! from a policy test's properties.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address that stands for "this host" when a flow names only a port (`-> :22`).
pub const DEFAULT_LOCAL_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
pub const DEFAULT_LOCAL_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// The client when a flow names none: outside every documentation range fwc's examples use.
pub const DEFAULT_REMOTE_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 1);
pub const DEFAULT_REMOTE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
/// Source port when none is given.
pub const DEFAULT_SPORT: u16 = 40000;

/// Transport protocol of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum L4 {
    Tcp,
    Udp,
    Icmp,
    Icmpv6,
    /// Another IP protocol (gre 47, esp 50, …): no ports, no types.
    Other(u8),
}

impl L4 {
    pub fn number(self) -> u64 {
        match self {
            L4::Tcp => 6,
            L4::Udp => 17,
            L4::Icmp => 1,
            L4::Icmpv6 => 58,
            L4::Other(n) => u64::from(n),
        }
    }
    /// `tcp`, …, `gre` ([`crate::model::header::IP_PROTOCOLS`]'s names), or the number of a
    /// protocol without a name there.
    pub fn as_str(self) -> std::borrow::Cow<'static, str> {
        match self {
            L4::Tcp => "tcp".into(),
            L4::Udp => "udp".into(),
            L4::Icmp => "icmp".into(),
            L4::Icmpv6 => "icmpv6".into(),
            L4::Other(n) => crate::model::header::ip_protocol_name(n).map_or_else(|| n.to_string().into(), Into::into),
        }
    }
    pub fn has_ports(self) -> bool {
        matches!(self, L4::Tcp | L4::Udp)
    }
    pub fn is_icmp(self) -> bool {
        matches!(self, L4::Icmp | L4::Icmpv6)
    }
    /// A protocol by name (`tcp`, `ipv6-icmp`, `gre`, …) or number (`47`; `6` is tcp).
    pub fn parse(s: &str) -> Option<L4> {
        match s {
            "tcp" => Some(L4::Tcp),
            "udp" => Some(L4::Udp),
            "icmp" => Some(L4::Icmp),
            "icmpv6" | "ipv6-icmp" => Some(L4::Icmpv6),
            _ => match s.parse::<u8>().ok().or_else(|| crate::model::header::ip_protocol_number(s))? {
                6 => Some(L4::Tcp),
                17 => Some(L4::Udp),
                1 => Some(L4::Icmp),
                58 => Some(L4::Icmpv6),
                n => Some(L4::Other(n)),
            },
        }
    }
}

/// Where the first packet meets the host: the filter chain that decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Arrives from outside, addressed to this host (a DNAT may still route it on).
    Input,
    /// Arrives from outside, addressed elsewhere: routed through the host.
    Forward,
    /// Sent by a process on this host.
    Output,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Input => "input",
            Origin::Forward => "forward",
            Origin::Output => "output",
        }
    }
    pub fn parse(s: &str) -> Option<Origin> {
        match s {
            "input" => Some(Origin::Input),
            "forward" => Some(Origin::Forward),
            "output" => Some(Origin::Output),
            _ => None,
        }
    }
}

/// The route back to a flow's source, as reverse-path filtering (`fib saddr`) looks it up.
/// Flows say `back-via IF` (the route back leaves by IF) or `back-via none` (no route back);
/// a flow that says nothing is not spoofed: the route back leaves by the interface it came in.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteBack {
    #[default]
    InIf,
    Via(String),
    None,
}

impl RouteBack {
    /// Does the route back leave by `iif` (`None`: the flow's input interface, unnamed)?
    pub fn leaves_by(&self, iif: Option<&str>) -> bool {
        match self {
            RouteBack::InIf => true,
            RouteBack::Via(v) => iif == Some(v.as_str()),
            RouteBack::None => false,
        }
    }
    /// Is there a route back at all?
    pub fn exists(&self) -> bool {
        *self != RouteBack::None
    }
}

/// The first packet of a new connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Flow {
    pub proto: L4,
    pub saddr: IpAddr,
    pub sport: u16,
    pub daddr: IpAddr,
    /// Destination port (TCP/UDP) or ICMP type (ICMP: 8 echo request; ICMPv6: 128).
    pub dport: u16,
    pub origin: Origin,
    /// Interface the packet arrives on (`None`: an interface no rule names; output: none).
    pub iif: Option<String>,
    /// Interface it leaves by (`None`: one no rule names; to a local address: `lo`).
    pub oif: Option<String>,
    /// TCP flag bits of the packet (`syn` = 0x02 unless the flow says `flags …`); 0 for others.
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 code (0 unless the flow says `code …`).
    pub icmp_code: u8,
    /// The route back to the source (reverse-path filtering); skipped when the default.
    #[serde(skip_serializing_if = "is_default_back")]
    pub back: RouteBack,
}

fn is_default_back(b: &RouteBack) -> bool {
    *b == RouteBack::InIf
}

/// A flow description that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FlowError {
    pub message: String,
    pub help: String,
}

fn flow_err<T>(message: impl Into<String>) -> Result<T, FlowError> {
    Err(FlowError {
        message: message.into(),
        help: "write a flow as `PROTO [SRC[:PORT]] -> [DST]:PORT`, e.g. `tcp 203.0.113.5:40000 -> 198.18.1.1:8080`, \
`udp -> :53`, `tcp [2001:db8::5]:40000 -> [2001:db8::10]:8443`, `icmp 192.0.2.1 -> 198.18.1.1 type echo-reply`"
            .into(),
    })
}

/// An endpoint as written: an optional address and an optional port (`1.2.3.4:80`, `:22`,
/// `[2001:db8::1]:443`, `2001:db8::1`, `10.0.0.0`).
pub fn parse_endpoint(s: &str) -> Result<(Option<IpAddr>, Option<u16>), FlowError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok((None, None));
    }
    let port = |p: &str| -> Result<Option<u16>, FlowError> {
        match p.parse::<u16>() {
            Ok(0) | Err(_) => flow_err(format!("\"{p}\" is not a port (1-65535)")),
            Ok(n) => Ok(Some(n)),
        }
    };
    let addr = |a: &str| -> Result<Option<IpAddr>, FlowError> {
        if a.is_empty() {
            return Ok(None);
        }
        a.parse::<IpAddr>().map(Some).or_else(|_| flow_err(format!("\"{a}\" is not an IP address")))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((a, tail)) = rest.split_once(']') else { return flow_err(format!("\"{s}\": `[` without `]`")) };
        let a = addr(a)?;
        return match tail.strip_prefix(':') {
            Some(p) => Ok((a, port(p)?)),
            None if tail.is_empty() => Ok((a, None)),
            None => flow_err(format!("\"{s}\": expected `:PORT` after `]`")),
        };
    }
    if s.matches(':').count() > 1 {
        // A bare IPv6 address (ports on IPv6 need brackets).
        return Ok((addr(s)?, None));
    }
    match s.split_once(':') {
        Some((a, p)) => Ok((addr(a)?, port(p)?)),
        None if s.chars().all(|c| c.is_ascii_digit()) => Ok((None, port(s)?)),
        None => Ok((addr(s)?, None)),
    }
}

/// The parts a flow is built from; unset parts take the documented defaults.
#[derive(Debug, Clone, Default)]
pub struct FlowSpec {
    pub proto: Option<L4>,
    pub from: (Option<IpAddr>, Option<u16>),
    pub to: (Option<IpAddr>, Option<u16>),
    pub origin: Option<Origin>,
    pub iif: Option<String>,
    pub oif: Option<String>,
    /// ICMP / ICMPv6 type (default: echo-request).
    pub icmp_type: Option<u8>,
    /// ICMP / ICMPv6 code (default 0).
    pub icmp_code: Option<u8>,
    /// TCP flags (default: SYN, the first packet of a connection).
    pub tcp_flags: Option<u8>,
    /// The route back to the source (default: by the input interface).
    pub back: Option<RouteBack>,
}

/// `back-via eth1` / `back-via none`.
pub fn parse_route_back(s: &str) -> RouteBack {
    match s {
        "none" => RouteBack::None,
        other => RouteBack::Via(other.to_string()),
    }
}

/// `echo-reply`, `nd-neighbor-solicit` (nft's names, in the family of `proto`) or a number.
pub fn parse_icmp_type(proto: L4, s: &str) -> Result<u8, FlowError> {
    let v6 = match proto {
        L4::Icmp => false,
        L4::Icmpv6 => true,
        _ => return flow_err(format!("an ICMP type on a {} flow (use icmp or icmpv6)", proto.as_str())),
    };
    if let Ok(n) = s.parse::<u8>() {
        return Ok(n);
    }
    crate::read::units::parse_icmp_types(s, v6).ok().and_then(|v| (v.len() == 1).then(|| v[0])).map_or_else(
        || flow_err(format!("\"{s}\" is not one {} type (nft's names, e.g. echo-request, or a number)", proto.as_str())),
        Ok,
    )
}

/// `frag-needed` (nft's names, in the family of `proto`) or a number.
pub fn parse_icmp_code(proto: L4, s: &str) -> Result<u8, FlowError> {
    let v6 = match proto {
        L4::Icmp => false,
        L4::Icmpv6 => true,
        _ => return flow_err(format!("an ICMP code on a {} flow (use icmp or icmpv6)", proto.as_str())),
    };
    match crate::features::headers::parse_icmp_codes(s, v6).ok().as_deref() {
        Some([c]) => Ok(*c),
        _ => flow_err(format!("\"{s}\" is not one {} code (nft's names, e.g. port-unreachable, or a number)", proto.as_str())),
    }
}

/// `syn,ack` (flag names, comma separated, or `none`): the bits of a packet's TCP flags.
pub fn parse_tcp_flag_bits(s: &str) -> Result<u8, FlowError> {
    if s == "none" {
        return Ok(0);
    }
    let mut bits = 0;
    for part in s.split(',') {
        match crate::model::header::TCP_FLAGS.iter().find(|(n, _)| *n == part) {
            Some((_, b)) => bits |= b,
            None => return flow_err(format!("\"{part}\" is not a TCP flag (fin, syn, rst, psh, ack, urg, ecn, cwr, or none)")),
        }
    }
    Ok(bits)
}

/// The type of an ICMP flow that names none (echo request; 0 for a protocol without types).
fn default_icmp_type(proto: L4) -> u16 {
    match proto {
        L4::Icmp => 8,
        L4::Icmpv6 => 128,
        _ => 0,
    }
}

impl FlowSpec {
    /// Fill the defaults and check the parts fit together.
    pub fn build(self) -> Result<Flow, FlowError> {
        let proto = self.proto.unwrap_or(L4::Tcp);
        let family_v6 = match (self.from.0, self.to.0) {
            (Some(a), Some(b)) if a.is_ipv4() != b.is_ipv4() => {
                return flow_err(format!("source {a} and destination {b} are of different address families"))
            }
            (Some(a), _) | (None, Some(a)) => a.is_ipv6(),
            (None, None) => proto == L4::Icmpv6,
        };
        match (proto, family_v6) {
            (L4::Icmp, true) => return flow_err("icmp is IPv4; use icmpv6 for IPv6"),
            (L4::Icmpv6, false) => return flow_err("icmpv6 is IPv6; use icmp for IPv4"),
            _ => {}
        }
        let origin = self.origin.unwrap_or(Origin::Input);
        let local = if family_v6 { IpAddr::V6(DEFAULT_LOCAL_V6) } else { IpAddr::V4(DEFAULT_LOCAL_V4) };
        let remote = if family_v6 { IpAddr::V6(DEFAULT_REMOTE_V6) } else { IpAddr::V4(DEFAULT_REMOTE_V4) };
        let (saddr, daddr) = match origin {
            Origin::Input | Origin::Forward => (self.from.0.unwrap_or(remote), self.to.0.unwrap_or(local)),
            Origin::Output => (self.from.0.unwrap_or(local), self.to.0.unwrap_or(remote)),
        };
        if origin == Origin::Forward && self.to.0.is_none() {
            return flow_err("a routed (forward) flow needs a destination address that is not this host's");
        }
        if (self.icmp_type.is_some() || self.icmp_code.is_some()) && !proto.is_icmp() {
            return flow_err(format!("a {} flow has no ICMP type or code", proto.as_str()));
        }
        if self.tcp_flags.is_some() && proto != L4::Tcp {
            return flow_err(format!("a {} flow has no TCP flags", proto.as_str()));
        }
        let dport = match (proto.has_ports(), self.to.1) {
            (true, Some(p)) => p,
            (true, None) => return flow_err(format!("a {} flow needs a destination port", proto.as_str())),
            (false, Some(_)) => return flow_err(format!("{} has no ports", proto.as_str())),
            (false, None) => self.icmp_type.map_or(default_icmp_type(proto), u16::from),
        };
        let sport = if proto.has_ports() { self.from.1.unwrap_or(DEFAULT_SPORT) } else { 0 };
        if origin == Origin::Output && self.iif.is_some() {
            return flow_err("a flow sent by this host has no input interface");
        }
        let tcp_flags = if proto == L4::Tcp { self.tcp_flags.unwrap_or(crate::model::header::TCP_SYN) } else { 0 };
        if origin == Origin::Output && self.back.is_some() {
            return flow_err("a flow sent by this host has no route back to check (back-via is for packets that arrive)");
        }
        let back = self.back.unwrap_or_default();
        Ok(Flow { proto, saddr, sport, daddr, dport, origin, iif: self.iif, oif: self.oif, tcp_flags, icmp_code: self.icmp_code.unwrap_or(0), back })
    }
}

impl Flow {
    /// Parse `PROTO [SRC[:PORT]] -> [DST]:PORT [in IF] [out IF] [input|forward|output]`.
    pub fn parse(s: &str) -> Result<Flow, FlowError> {
        let mut words = s.split_whitespace().peekable();
        let Some(p) = words.next() else { return flow_err("empty flow") };
        let Some(proto) = L4::parse(p) else { return flow_err(format!("unknown protocol \"{p}\" (tcp, udp, icmp, icmpv6, gre, esp, … or a number 0-255)")) };
        let mut spec = FlowSpec { proto: Some(proto), ..FlowSpec::default() };
        match words.next() {
            Some("->") => {}
            Some(src) => {
                spec.from = parse_endpoint(src)?;
                if words.next() != Some("->") {
                    return flow_err("expected `->` after the source");
                }
            }
            None => return flow_err("expected `-> DST`"),
        }
        let Some(dst) = words.next() else { return flow_err("expected a destination after `->`") };
        spec.to = parse_endpoint(dst)?;
        while let Some(w) = words.next() {
            match w {
                "type" => {
                    let Some(t) = words.next() else { return flow_err("`type` needs an ICMP type") };
                    spec.icmp_type = Some(parse_icmp_type(proto, t)?);
                }
                "code" => {
                    let Some(c) = words.next() else { return flow_err("`code` needs an ICMP code") };
                    spec.icmp_code = Some(parse_icmp_code(proto, c)?);
                }
                "flags" => {
                    let Some(f) = words.next() else { return flow_err("`flags` needs TCP flags (syn,ack)") };
                    spec.tcp_flags = Some(parse_tcp_flag_bits(f)?);
                }
                "back-via" => {
                    let Some(b) = words.next() else { return flow_err("`back-via` needs an interface name or `none`") };
                    spec.back = Some(parse_route_back(b));
                }
                "in" | "out" => {
                    let Some(name) = words.next() else { return flow_err(format!("`{w}` needs an interface name")) };
                    if w == "in" {
                        spec.iif = Some(name.to_string());
                    } else {
                        spec.oif = Some(name.to_string());
                    }
                }
                other => match Origin::parse(other) {
                    Some(o) => spec.origin = Some(o),
                    None => return flow_err(format!("unexpected \"{other}\" (type ICMP-TYPE, code ICMP-CODE, flags TCP-FLAGS, in IF, out IF, back-via IF|none, input, forward, output)")),
                },
            }
        }
        spec.build()
    }

    pub fn is_ipv6(&self) -> bool {
        self.saddr.is_ipv6()
    }
}

fn endpoint(f: &mut fmt::Formatter<'_>, a: IpAddr, port: Option<u16>) -> fmt::Result {
    match (a, port) {
        (IpAddr::V6(a), Some(p)) => write!(f, "[{a}]:{p}"),
        (a, Some(p)) => write!(f, "{a}:{p}"),
        (a, None) => write!(f, "{a}"),
    }
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = self.proto.has_ports();
        write!(f, "{} ", self.proto.as_str())?;
        endpoint(f, self.saddr, ports.then_some(self.sport))?;
        f.write_str(" -> ")?;
        endpoint(f, self.daddr, ports.then_some(self.dport))?;
        if self.proto.is_icmp() && self.dport != default_icmp_type(self.proto) {
            let v6 = self.proto == L4::Icmpv6;
            match u8::try_from(self.dport).ok().and_then(|t| crate::read::units::icmp_type_name(v6, t)) {
                Some(n) => write!(f, " type {n}")?,
                None => write!(f, " type {}", self.dport)?,
            }
        }
        if self.proto.is_icmp() && self.icmp_code != 0 {
            match crate::features::headers::icmp_code_name_of(self.proto == L4::Icmpv6, u8::try_from(self.dport).ok(), self.icmp_code) {
                Some(n) => write!(f, " code {n}")?,
                None => write!(f, " code {}", self.icmp_code)?,
            }
        }
        if self.proto == L4::Tcp && self.tcp_flags != crate::model::header::TCP_SYN {
            match crate::model::header::tcp_flag_names(self.tcp_flags).join(",") {
                n if n.is_empty() => f.write_str(" flags none")?,
                n => write!(f, " flags {n}")?,
            }
        }
        if let Some(i) = &self.iif {
            write!(f, " in {i}")?;
        }
        if let Some(o) = &self.oif {
            write!(f, " out {o}")?;
        }
        match &self.back {
            RouteBack::InIf => {}
            RouteBack::Via(v) => write!(f, " back-via {v}")?,
            RouteBack::None => f.write_str(" back-via none")?,
        }
        write!(f, " ({})", self.origin.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_explain_form() {
        let f = Flow::parse("tcp 203.0.113.5:40000 -> 198.18.1.1:8080").unwrap();
        assert_eq!(f.to_string(), "tcp 203.0.113.5:40000 -> 198.18.1.1:8080 (input)");
        let f = Flow::parse("udp -> :53 in eth0").unwrap();
        assert_eq!((f.saddr, f.daddr, f.dport, f.iif.as_deref()), (IpAddr::V4(DEFAULT_REMOTE_V4), IpAddr::V4(DEFAULT_LOCAL_V4), 53, Some("eth0")));
        let f = Flow::parse("tcp [2001:db8::5]:1234 -> [2001:db8::10]:8443").unwrap();
        assert!(f.is_ipv6());
        assert_eq!(f.sport, 1234);
        let f = Flow::parse("icmpv6 -> 2001:db8::1").unwrap();
        assert_eq!(f.dport, 128);
        let f = Flow::parse("icmpv6 -> 2001:db8::1 type nd-neighbor-solicit").unwrap();
        assert_eq!(f.dport, 135);
        assert_eq!(f.to_string(), "icmpv6 2001:db8:ffff::1 -> 2001:db8::1 type nd-neighbor-solicit (input)");
        let f = Flow::parse("icmp -> 198.18.1.1 type 200").unwrap();
        assert_eq!(f.to_string(), "icmp 198.18.200.1 -> 198.18.1.1 type 200 (input)");
        let f = Flow::parse("icmp -> 198.18.1.1 type destination-unreachable code frag-needed").unwrap();
        assert_eq!((f.dport, f.icmp_code), (3, 4));
        assert_eq!(f.to_string(), "icmp 198.18.200.1 -> 198.18.1.1 type destination-unreachable code frag-needed (input)");
        let f = Flow::parse("tcp -> :22 flags ack,psh").unwrap();
        assert_eq!(f.tcp_flags, 0x18);
        assert_eq!(f.to_string(), "tcp 198.18.200.1:40000 -> 198.18.1.1:22 flags psh,ack (input)");
        assert_eq!(Flow::parse("tcp -> :22").unwrap().tcp_flags, 0x02);
        let f = Flow::parse("udp 198.18.0.9 -> :53 in wan0 back-via lan0").unwrap();
        assert_eq!(f.back, RouteBack::Via("lan0".into()));
        assert_eq!(f.to_string(), "udp 198.18.0.9:40000 -> 198.18.1.1:53 in wan0 back-via lan0 (input)");
        assert_eq!(Flow::parse("udp -> :53 back-via none").unwrap().back, RouteBack::None);
        assert!(Flow::parse("tcp -> 192.0.2.7:25 back-via none output").is_err());
        let f = Flow::parse("tcp -> 192.0.2.7:25 out eth0 output").unwrap();
        assert_eq!((f.origin, f.saddr), (Origin::Output, IpAddr::V4(DEFAULT_LOCAL_V4)));
    }

    #[test]
    fn refuses_what_does_not_fit() {
        for bad in ["", "sctp -> :1", "tcp -> 1.2.3.4", "tcp 1.2.3.4 -> [2001:db8::1]:80", "icmp -> 1.2.3.4:5", "tcp -> :0", "icmp -> 2001:db8::1", "tcp -> :22 sideways", "tcp -> :22 forward", "tcp -> :22 type 8", "icmp -> 198.18.1.1 type nd-neighbor-solicit", "icmp -> 198.18.1.1 type", "udp -> :53 flags syn", "tcp -> :22 code 3", "tcp -> :22 flags sin", "icmp -> 198.18.1.1 type 3 code no-route"] {
            assert!(Flow::parse(bad).is_err(), "{bad} parsed");
        }
        assert!(Flow::parse("tcp 1.2.3.4 ->").unwrap_err().help.contains("PROTO"));
    }
}
