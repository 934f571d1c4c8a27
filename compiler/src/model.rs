//! The typed rule model: what the KDL files say, after parsing, with every value carrying
//! the span it came from. `syntax` builds it, `check` validates it, `select` and `emit` read it.
//! Nothing here knows about nftables, eBPF or sockets.

use std::net::IpAddr;

use serde::Serialize;

pub mod forward;
pub mod header;
pub mod more;
pub mod quota;
pub mod rollout;
pub mod schedule;
pub mod span;
pub mod values;
pub mod window;

pub use more::{More, Rarely};
pub use forward::{BackendChoice, ForwardMore, ForwardProto, ForwardRule, HealthSpec, Listen, Target, TargetHost};
pub use rollout::{GateDecl, ProbeDecl, RolloutDecl, WaveDecl};
pub use schedule::{Schedule, Until};
pub use span::{Span, Spanned};
pub use values::{AddrElem, AddrMatch, Bandwidth, EventRate, Host, PerSource, PortRange, Proto, Selector, TimeUnit};

/// Everything the rule repository declares, for all hosts (before host selection).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ruleset {
    pub hosts: Vec<Host>,
    pub sets: Vec<AddrSet>,
    pub chains: Vec<Chain>,
    pub forwards: Vec<ForwardRule>,
    pub shapes: Vec<ShapeRule>,
    /// `rollout { … }` blocks (a repository has at most one; `check` reports the others).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutDecl>,
    /// `masquerade "…"` and `snat "…"`, in file order (the first that matches a packet wins).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snats: Vec<SnatRule>,
}

impl Ruleset {
    /// Drop the spare capacity the parse left (its vectors grew by doubling): a compile keeps
    /// the model until the artifacts are written.
    pub fn shrink_to_fit(&mut self) {
        self.hosts.shrink_to_fit();
        self.sets.shrink_to_fit();
        self.chains.shrink_to_fit();
        self.chains.iter_mut().for_each(|c| c.rules.shrink_to_fit());
        self.forwards.shrink_to_fit();
        self.shapes.shrink_to_fit();
        self.rollouts.shrink_to_fit();
        self.snats.shrink_to_fit();
    }
}

/// `set "name" …`: a named list of addresses, referenced as `@name`.
#[derive(Debug, Clone, Serialize)]
pub struct AddrSet {
    pub name: Spanned<String>,
    /// Inline elements, then those of `files` (read by `setfile::load_all`).
    pub elements: Vec<Spanned<AddrElem>>,
    /// `file=` paths as written (relative to the repository root, under `lists/`).
    #[serde(skip)]
    pub files: Vec<Spanned<String>>,
    /// `dynamic=#true`: other programs (fail2ban, CrowdSec, `nft add element`) fill the set at
    /// run time; fwc owns the declaration only, never the elements.
    pub dynamic: Option<DynamicSet>,
    #[serde(skip)]
    pub span: Span,
    /// For a set that is exactly one set file (no inline elements): its merged intervals and
    /// manifest digest, computed once when the file is read or taken from the set-file cache
    /// (setcache.rs), so the layout and the manifest do not derive them again.
    #[serde(skip)]
    pub from_file: Option<std::sync::Arc<FileFacts>>,
}

/// What a set made of exactly one file (no inline elements) takes from it, precomputed: the
/// merged intervals `[IPv4, IPv6]` its layout starts from and its manifest digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    pub merged: [crate::place::merged::Merged; 2],
    pub digest: String,
}

/// The run-time part of a `dynamic=#true` set: default element timeout and maximum size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DynamicSet {
    /// `timeout=`: elements added without their own timeout expire after this (None: never).
    pub timeout_s: Option<u32>,
    /// `size=`: most elements the kernel accepts (per address family).
    pub size: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChainKind {
    Input,
    Forward,
    Output,
    /// `containers { … }`: who reaches ports that Docker/Podman publish (DNAT into a bridge).
    Containers,
    /// `prerouting { deny … }`: early drops, before routing and DNAT (iptables' raw/mangle
    /// PREROUTING); only `deny` rules and the matches known before routing.
    Prerouting,
}

impl ChainKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainKind::Input => "input",
            ChainKind::Forward => "forward",
            ChainKind::Output => "output",
            ChainKind::Containers => "containers",
            ChainKind::Prerouting => "prerouting",
        }
    }
    /// The nftables chain of the block (`prerouting` is the table's DNAT chain already).
    pub fn nft_name(self) -> &'static str {
        match self {
            ChainKind::Prerouting => "prerouting_filter",
            k => k.as_str(),
        }
    }
}

/// Interfaces that are container bridges when a `containers` block does not say `bridges=`:
/// Docker's default bridge and user networks, Podman's netavark and CNI bridges.
pub const DEFAULT_CONTAINER_BRIDGES: &[&str] = &["docker0", "br-*", "podman*", "cni-podman*"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Accept,
    Drop,
    /// The kernel policy is `drop`; a final rule rejects (after fwc's accepts for forwards).
    Reject,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Accept => "accept",
            Policy::Drop => "drop",
            Policy::Reject => "reject",
        }
    }
    /// Drop or reject: what is not allowed does not pass.
    pub fn is_closed(self) -> bool {
        self != Policy::Accept
    }
}

/// `reject-with=`: how a `reject` answers. ICMP codes are sent as ICMP or ICMPv6, whichever
/// the packet's family is (nft's `icmpx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectWith {
    TcpReset,
    PortUnreachable,
    HostUnreachable,
    NetUnreachable,
    AdminProhibited,
    /// ICMP protocol unreachable; IPv6 has no such code and gets port-unreachable.
    ProtUnreachable,
}

impl RejectWith {
    pub const ALL: [RejectWith; 6] = [
        RejectWith::TcpReset,
        RejectWith::PortUnreachable,
        RejectWith::HostUnreachable,
        RejectWith::NetUnreachable,
        RejectWith::AdminProhibited,
        RejectWith::ProtUnreachable,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            RejectWith::TcpReset => "tcp-reset",
            RejectWith::PortUnreachable => "port-unreachable",
            RejectWith::HostUnreachable => "host-unreachable",
            RejectWith::NetUnreachable => "net-unreachable",
            RejectWith::AdminProhibited => "admin-prohibited",
            RejectWith::ProtUnreachable => "prot-unreachable",
        }
    }
}

/// A conntrack state a rule can match with `state=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CtState {
    New,
    Established,
    Related,
    Invalid,
    Untracked,
}

impl CtState {
    pub const ALL: [CtState; 5] = [CtState::New, CtState::Established, CtState::Related, CtState::Invalid, CtState::Untracked];
    pub fn as_str(self) -> &'static str {
        match self {
            CtState::New => "new",
            CtState::Established => "established",
            CtState::Related => "related",
            CtState::Invalid => "invalid",
            CtState::Untracked => "untracked",
        }
    }
}

/// `input policy=drop { … }` (also `forward`, `output`). Several blocks of one kind are
/// concatenated in file order; the last `policy` given wins (a conflicting one is an error).
#[derive(Debug, Clone, Serialize)]
pub struct Chain {
    pub kind: ChainKind,
    pub policy: Option<Spanned<Policy>>,
    /// `containers bridges="docker0,br-*"`: interface names (a trailing `*` is a wildcard).
    /// Only on a `containers` block; skipped when absent (digests of the other chains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridges: Option<Spanned<Vec<String>>>,
    /// `reject-with=` on a `policy=reject` block: how the policy rejects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject_with: Option<Spanned<RejectWith>>,
    /// `input router-advertisements="wan0"`: the interfaces fwc's built-in accepts router
    /// advertisements on (empty: `"none"`, the user's rules decide them). Only on `input`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_advertisements: Option<Spanned<Vec<String>>>,
    pub rules: Vec<FilterRule>,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
    Reject,
    /// `log "…"`: logs the packet and matching goes on (not a verdict).
    Log,
    /// `clamp-mss "…"` (forward block): rewrites a TCP SYN's MSS option and matching goes on
    /// ([`crate::features::clamp`]).
    ClampMss,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Reject => "reject",
            Action::Log => "log",
            Action::ClampMss => "clamp-mss",
        }
    }
    /// Does a matching rule end the chain (allow, deny, reject), or does matching go on (log)?
    pub fn is_terminal(self) -> bool {
        !matches!(self, Action::Log | Action::ClampMss)
    }
}

/// `allow "ssh" proto=tcp port=22 from="@office"` and friends, inside a chain block. The
/// properties few rules have are in [`FilterMore`], boxed and absent when none is given (a big
/// repository's rules are half the size); they read as fields of the rule (`rule.state`)
/// through `Deref`. Serialised (the rule's digest) as it always was: every property in its
/// place, absent ones skipped as before.
#[derive(Debug, Clone)]
pub struct FilterRule {
    pub name: Spanned<String>,
    pub chain: ChainKind,
    pub action: Action,
    pub proto: Option<Spanned<Proto>>,
    pub ports: Option<Spanned<Vec<PortRange>>>,
    pub sports: Option<Spanned<Vec<PortRange>>>,
    pub from: Option<Spanned<AddrMatch>>,
    pub to: Option<Spanned<AddrMatch>>,
    /// `in=`: input interface names (one or a list).
    pub iif: Option<Spanned<Vec<String>>>,
    /// `out=`: output interface names.
    pub oif: Option<Spanned<Vec<String>>>,
    /// `!` before `from`, `to`, `port`, `sport`, `in`, `out`: none of the list. Skipped when
    /// nothing is negated (digests of other rules).
    pub negate: header::Negations,
    /// `log=#true`, or implied by `log-prefix`/`log-rate`, or a `log` rule.
    pub log: bool,
    pub rate: Option<Spanned<EventRate>>,
    pub on: Option<Spanned<Selector>>,
    pub comment: Option<String>,
    pub span: Span,
    /// The rarely given properties.
    pub more: More<FilterMore>,
}

/// The properties of a [`FilterRule`] few rules have.
#[derive(Debug, Clone, Default)]
pub struct FilterMore {
    /// `icmp-type=`: ICMP (proto=icmp) or ICMPv6 (proto=icmpv6) type numbers.
    pub icmp_types: Option<Spanned<Vec<u8>>>,
    /// `icmp-code=`: codes of the rule's one ICMP type.
    pub icmp_codes: Option<Spanned<Vec<u8>>>,
    /// `tcp-flags=`.
    pub tcp_flags: Option<Spanned<header::TcpFlags>>,
    /// `pkttype=`: link-layer packet types.
    pub pkttypes: Option<Spanned<Vec<header::PktType>>>,
    /// `reject-with=` (reject rules only).
    pub reject_with: Option<Spanned<RejectWith>>,
    /// `log-prefix=`: the kernel log line's prefix (default `fwc <name>: `).
    pub log_prefix: Option<Spanned<String>>,
    /// `log-rate=`: at most this many log lines (the verdict applies to every packet).
    pub log_rate: Option<Spanned<EventRate>>,
    /// `state=`: conntrack states the packet's connection must be in.
    pub state: Option<Spanned<Vec<CtState>>>,
    /// per-source limits: `rate-per-source=`, `max-conns-per-source=`, … Skipped
    /// when absent, so digests of other rules do not change.
    pub per_source: Option<PerSource>,
    /// Schedules: `during=`, `tz=`, `until=` ([`crate::features::schedule`]). Skipped when
    /// absent (digests of other rules).
    pub schedule: Option<Schedule>,
    /// `rpfilter=` (prerouting denies): drop what fails reverse-path filtering
    /// ([`crate::features::rpfilter`]). Skipped when absent (digests of other rules).
    pub rpfilter: Option<Spanned<header::RpFilter>>,
    /// `mss=` of a `clamp-mss` rule: the MSS to set; `None`: the route's MTU
    /// ([`crate::features::clamp`]). Skipped when absent.
    pub mss: Option<Spanned<u16>>,
}

impl Rarely for FilterMore {
    const NONE: &'static FilterMore = &FilterMore {
        icmp_types: None,
        icmp_codes: None,
        tcp_flags: None,
        pkttypes: None,
        reject_with: None,
        log_prefix: None,
        log_rate: None,
        state: None,
        per_source: None,
        schedule: None,
        rpfilter: None,
        mss: None,
    };

    fn is_none(&self) -> bool {
        let FilterMore { icmp_types, icmp_codes, tcp_flags, pkttypes, reject_with, log_prefix, log_rate, state, per_source, schedule, rpfilter, mss } = self;
        icmp_types.is_none()
            && icmp_codes.is_none()
            && tcp_flags.is_none()
            && pkttypes.is_none()
            && reject_with.is_none()
            && log_prefix.is_none()
            && log_rate.is_none()
            && state.is_none()
            && per_source.is_none()
            && schedule.is_none()
            && rpfilter.is_none()
            && mss.is_none()
    }
}

impl std::ops::Deref for FilterRule {
    type Target = FilterMore;
    fn deref(&self) -> &FilterMore {
        self.more.get()
    }
}

/// Setting a rarely given property boxes them.
impl std::ops::DerefMut for FilterRule {
    fn deref_mut(&mut self) -> &mut FilterMore {
        self.more.get_mut()
    }
}

/// The fields in the order, and with the skips, of the rule's digest since it exists.
impl Serialize for FilterRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Ifaces<'a>(&'a Option<Spanned<Vec<String>>>);
        impl Serialize for Ifaces<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serialize_ifaces(self.0, s)
            }
        }
        let m: &FilterMore = self;
        let mut st = s.serialize_struct("FilterRule", 27)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("chain", &self.chain)?;
        st.serialize_field("action", &self.action)?;
        st.serialize_field("proto", &self.proto)?;
        st.serialize_field("ports", &self.ports)?;
        st.serialize_field("sports", &self.sports)?;
        st.serialize_field("from", &self.from)?;
        st.serialize_field("to", &self.to)?;
        st.serialize_field("iif", &Ifaces(&self.iif))?;
        st.serialize_field("oif", &Ifaces(&self.oif))?;
        if self.negate.none() {
            st.skip_field("negate")?;
        } else {
            st.serialize_field("negate", &self.negate)?;
        }
        st.serialize_field("log", &self.log)?;
        st.serialize_field("rate", &self.rate)?;
        more::field_if_some(&mut st, "icmp_types", &m.icmp_types)?;
        more::field_if_some(&mut st, "icmp_codes", &m.icmp_codes)?;
        more::field_if_some(&mut st, "tcp_flags", &m.tcp_flags)?;
        more::field_if_some(&mut st, "pkttypes", &m.pkttypes)?;
        more::field_if_some(&mut st, "reject_with", &m.reject_with)?;
        more::field_if_some(&mut st, "log_prefix", &m.log_prefix)?;
        more::field_if_some(&mut st, "log_rate", &m.log_rate)?;
        more::field_if_some(&mut st, "state", &m.state)?;
        st.serialize_field("on", &self.on)?;
        st.serialize_field("comment", &self.comment)?;
        more::field_if_some(&mut st, "per_source", &m.per_source)?;
        more::field_if_some(&mut st, "schedule", &m.schedule)?;
        more::field_if_some(&mut st, "rpfilter", &m.rpfilter)?;
        more::field_if_some(&mut st, "mss", &m.mss)?;
        st.end()
    }
}

/// Which source NAT a [`SnatRule`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnatKind {
    /// The new source is the address of the interface the packet leaves by.
    Masquerade,
    /// The new source is a fixed address (`to=`).
    Snat,
}

impl SnatKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SnatKind::Masquerade => "masquerade",
            SnatKind::Snat => "snat",
        }
    }
    pub fn rule_kind(self) -> RuleKind {
        match self {
            SnatKind::Masquerade => RuleKind::Masquerade,
            SnatKind::Snat => RuleKind::Snat,
        }
    }
}

/// `masquerade "lan-out" from="192.168.1.0/24" out=eth0` and
/// `snat "office-out" from="10.8.0.0/16" out=eth0 to="198.18.0.1"`: source NAT of connections
/// leaving the host (routed or its own), in the nat postrouting chain.
#[derive(Debug, Clone, Serialize)]
pub struct SnatRule {
    pub name: Spanned<String>,
    pub kind: SnatKind,
    pub from: Option<Spanned<AddrMatch>>,
    /// Destination filter (`to=` of masquerade, `dst=` of snat).
    pub dst: Option<Spanned<AddrMatch>>,
    /// snat: the new source address (`to=`).
    pub to_addr: Option<Spanned<IpAddr>>,
    pub oif: Option<Spanned<String>>,
    /// `in=`: input interface names (routed connections only: the host's own have none).
    /// Skipped when absent, as the two below (digests of the other rules).
    #[serde(serialize_with = "serialize_ifaces", skip_serializing_if = "Option::is_none")]
    pub iif: Option<Spanned<Vec<String>>>,
    /// `from-except=`: sources left out of `from` (nft's `ip saddr A ip saddr != B`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_except: Option<Spanned<AddrMatch>>,
    /// `!` before `from`, the destination filter (`to`/`dst`) or `in`: none of the list.
    #[serde(skip_serializing_if = "header::Negations::none")]
    pub negate: header::Negations,
    pub proto: Option<Spanned<Proto>>,
    pub ports: Option<Spanned<Vec<PortRange>>>,
    pub on: Option<Spanned<Selector>>,
    pub comment: Option<String>,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Traffic leaving through `dev` (the default).
    Egress,
    /// Traffic arriving on `dev`, shaped on the way back out of the host's other interfaces.
    Ingress,
}

/// `shape "guests" from="10.2.0.0/16" rate="20mbit" burst="256KiB" dev=eth1`
#[derive(Debug, Clone, Serialize)]
pub struct ShapeRule {
    pub name: Spanned<String>,
    pub from: Option<Spanned<AddrMatch>>,
    pub to: Option<Spanned<AddrMatch>>,
    pub proto: Option<Spanned<Proto>>,
    pub ports: Option<Spanned<Vec<PortRange>>>,
    pub devs: Vec<Spanned<String>>,
    pub rate: Spanned<Bandwidth>,
    pub burst: Option<Spanned<u64>>,
    pub direction: Direction,
    pub on: Option<Spanned<Selector>>,
    pub comment: Option<String>,
    #[serde(skip)]
    pub span: Span,
    /// quota: as on forwards; counted in the shape's class chain. Skipped when
    /// absent (digests of other shapes do not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<Spanned<quota::QuotaSpec>>,
}

/// The kind of a named thing (defined with the artifacts: it appears in manifests and rule
/// comments).
pub use fwc_artifacts::RuleKind;

/// An interface list as rule digests have always held a single interface (`{"value": "eth0"}`),
/// a list as a list: a rule's digest does not change because `in=` became a list type.
pub fn serialize_ifaces<S: serde::Serializer>(v: &Option<Spanned<Vec<String>>>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    match v {
        None => s.serialize_none(),
        Some(sp) => {
            let mut st = s.serialize_struct("Spanned", 1)?;
            match sp.value.as_slice() {
                [one] => st.serialize_field("value", one)?,
                many => st.serialize_field("value", many)?,
            }
            st.end()
        }
    }
}
