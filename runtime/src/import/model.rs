//! What an import produces before it is written: fwc rules as data (a condition per rule,
//! its verb, its origin), sets, forwards and source NAT, and the import's account (imported,
//! merged, refused, notes). Pure values; `translate` fills them, `render` writes them as KDL.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Where a construct of the original came from: `nftables.conf:12` or `ip filter INPUT handle 7`.
pub type Origin = String;

/// Where each rule of the listing came from: (family, table, chain, index in chain) -> origin.
pub type Origins = BTreeMap<(String, String, String, usize), Origin>;

/// The address family a rule is limited to (a rule of an `ip` table sees only IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

/// An address match: literal networks/ranges, or a named set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addrs {
    /// Elements as fwc writes them (`192.0.2.0/24`, `10.0.0.1-10.0.0.9`, `2001:db8::1`).
    List(Vec<String>),
    Set(String),
}

/// Everything a rule matches on (all given parts must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cond {
    /// `tcp`, `udp`, `both`, `icmp`, `icmpv6`.
    pub proto: Option<String>,
    /// Destination ports, fwc syntax (`22`, `80,443`, `8000-8100`).
    pub port: Option<String>,
    pub sport: Option<String>,
    pub from: Option<Addrs>,
    pub to: Option<Addrs>,
    pub iif: Option<String>,
    pub oif: Option<String>,
    /// ICMP types as nft names them.
    pub icmp_type: Option<String>,
    /// ICMP codes (numbers, comma separated), with one ICMP type.
    pub icmp_code: Option<String>,
    /// ct states, comma separated (`new`, `invalid`).
    pub state: Option<String>,
    pub family: Option<Family>,
    /// TCP flags as fwc writes them (`syn`, `!syn`, `none/fin,syn,rst,psh,ack,urg`).
    pub tcp_flags: Option<String>,
    /// Packet types (`broadcast,multicast`).
    pub pkttype: Option<String>,
    /// Which of the list matches are negated (`from="!…"`: none of the list).
    pub not: Not,
    /// `rpfilter="strict"|"loose"` (prerouting denies): reverse-path filtering.
    pub rpfilter: Option<String>,
}

/// The negated matches of a rule (nft `!=`, iptables `! -s`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Not {
    pub from: bool,
    pub to: bool,
    pub port: bool,
    pub sport: bool,
    pub iif: bool,
    pub oif: bool,
}

/// What a filter rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    Allow,
    Deny,
    /// With the reject type (`tcp-reset`, `admin-prohibited`, …) when the original named one.
    Reject(Option<String>),
    /// Logs and goes on (the contract's `log` node).
    Log,
    /// `clamp-mss` (forward block): a SYN's MSS set to the route's MTU (`None`) or a number.
    ClampMss(Option<u16>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub verb: Verb,
    pub cond: Cond,
    /// `rate="…"` (allow rules: new connections per time unit).
    pub rate: Option<String>,
    /// The rate counts each source address apart (`rate-per-source=`, ufw's `limit`).
    pub per_source: bool,
    pub log: bool,
    pub log_prefix: Option<String>,
    pub log_rate: Option<String>,
    /// The original's comment, if it had one.
    pub comment: Option<String>,
    pub origin: Origin,
}

/// One of fwc's chain blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// `input`, `forward`, `output`.
    pub kind: &'static str,
    /// `accept`, `drop` or `reject`.
    pub policy: &'static str,
    /// `reject-with=` of a `policy=reject` chain.
    pub reject_with: Option<String>,
    pub rules: Vec<Rule>,
    /// A block of a chain split by origin (firewalld: one per zone): the file name's suffix
    /// and the block's heading. Blocks of one kind are concatenated in file order.
    pub part: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    pub elems: Vec<String>,
    pub dynamic: bool,
    pub origin: Origin,
}

/// A DNAT port forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub name: String,
    pub proto: String,
    pub listen: String,
    pub to: String,
    pub from: Option<Addrs>,
    /// Input interfaces the DNAT is restricted to (`in=`), comma separated.
    pub iif: Option<String>,
    /// `destinations="any"`: the original DNATs what arrives on `in=` whatever its
    /// destination (it has no destination match).
    pub any_destination: bool,
    pub origin: Origin,
}

/// Source NAT of a network: `masquerade` (to = destination filter) or `snat` (to = new source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nat {
    pub name: String,
    pub kind: &'static str,
    pub from: Option<Addrs>,
    /// `from-except=`: sources left out of `from`.
    pub from_except: Option<Addrs>,
    pub dst: Option<Addrs>,
    /// `in=`: input interfaces (a list).
    pub iif: Option<String>,
    /// Which of `from`, `dst` and `iif` are negated.
    pub not: Not,
    pub out: Option<String>,
    pub to_addr: Option<IpAddr>,
    pub proto: Option<String>,
    pub port: Option<String>,
    pub origin: Origin,
}

/// A construct that could not be expressed: where it is and what to do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    pub origin: Origin,
    pub what: String,
    pub hint: String,
}

/// The whole import, ready to be rendered.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    pub sets: Vec<Set>,
    pub chains: Vec<Chain>,
    pub forwards: Vec<Forward>,
    pub nats: Vec<Nat>,
    /// Docker/libvirt/Kubernetes parts left out (they keep managing them), and other remarks.
    pub notes: Vec<String>,
    pub refused: Vec<Refusal>,
    /// Rules of the original that became part of another rule or of fwc's built-ins.
    pub merged: Vec<(Origin, String)>,
    /// Emit a `containers` block (Docker/Podman bridges seen), so `forward policy=drop` keeps containers working.
    pub containers: bool,
    /// The original accepts router advertisements more narrowly than fwc's built-in: the input
    /// block says `router-advertisements="none"` and the original's accept is a rule.
    pub ra_by_rules: bool,
}

impl Imported {
    pub fn imported(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum::<usize>() + self.forwards.len() + self.nats.len()
    }
}

/// The comment of a rule iptables-nft could not translate to nftables (`source` marks such
/// rules with it; the translation refuses them by name).
pub const XT_MARK: &str = "fwc-import-xt: ";

/// TCP flag names, in wire order (fin = 0x01 … cwr = 0x80), as nft and fwc write them.
pub const TCP_FLAGS: [&str; 8] = ["fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"];
