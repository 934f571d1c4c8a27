//! Chain blocks and their filter rules (`input`/`forward`/`output`/`containers`/`prerouting`;
//! the forward block's `clamp-mss`), `masquerade` /
//! `snat`, and `shape`.

use std::net::IpAddr;

use crate::read::kdl_reader::Node as KdlNode;
use crate::features::headers;
use crate::model::header::Negations;
use crate::model::*;
use crate::suggest::did_you_mean;
use crate::read::units::{self, UnitError};

use super::parser::{Parser, Props};
use super::values::{parse_ifname, valid_ifname};

pub(super) const FILTER_ACTIONS: &[&str] = &["allow", "deny", "reject", "log"];

pub(super) const FILTER_PROPS: &[&str] = &[
    "proto", "port", "sport", "from", "to", "in", "out", "log", "rate", "icmp-type", "icmp-code", "tcp-flags", "pkttype", "reject-with", "log-prefix", "log-rate", "state", "on", "comment",
    // per-source limits (crate::features::persource)
    "rate-per-source", "max-conns-per-source", "per-source-prefix4", "per-source-prefix6", "per-source-size", "conn-rate-per-source",
    // schedules (crate::features::schedule)
    "during", "tz", "until",
];

/// A `log` rule logs and matching goes on: no verdict options (`log`, `rate`, `reject-with`).
pub(super) const LOG_RULE_PROPS: &[&str] = &[
    "proto", "port", "sport", "from", "to", "in", "out", "icmp-type", "icmp-code", "tcp-flags", "pkttype", "log-prefix", "log-rate", "state", "on", "comment",
    // schedules (crate::features::schedule)
    "during", "tz", "until",
];

/// A `prerouting` deny: the matches known before routing (`out` is read only to be refused by
/// name), `state` (as conntrack saw the packet), logging; no rates or schedules.
pub(super) const PREROUTING_RULE_PROPS: &[&str] =
    &["proto", "port", "sport", "from", "to", "in", "out", "icmp-type", "icmp-code", "tcp-flags", "pkttype", "state", "log", "log-prefix", "log-rate", "on", "comment", "rpfilter"];

/// A `clamp-mss` rule (forward block): which routed SYNs to clamp, and to what
/// ([`crate::features::clamp`]).
pub(super) const CLAMP_PROPS: &[&str] = &["from", "to", "in", "out", "mss", "on", "comment"];

pub(super) const MASQUERADE_PROPS: &[&str] = &["from", "from-except", "to", "in", "out", "proto", "port", "on", "comment"];

/// snat's `to` is the new source address, so its destination filter is `dst`.
pub(super) const SNAT_PROPS: &[&str] = &["from", "from-except", "dst", "to", "in", "out", "proto", "port", "on", "comment"];

/// A `containers` rule matches a published port as the client addressed it: no `sport`/`out`
/// (the output interface is the bridge).
pub(super) const CONTAINER_RULE_PROPS: &[&str] = &[
    "proto", "port", "from", "to", "in", "log", "rate", "reject-with", "log-prefix", "log-rate", "on", "comment",
    // schedules (crate::features::schedule)
    "during", "tz", "until",
];

pub(super) const SHAPE_PROPS: &[&str] = &[
    "from", "to", "proto", "port", "dev", "rate", "burst", "direction", "on", "comment",
    // traffic quotas (crate::features::quota)
    "quota", "quota-reset-day", "over-quota",
];

impl Parser<'_, '_> {
    pub(super) fn chain(&mut self, node: &KdlNode) -> Option<Chain> {
        let kind = match node.name().value() {
            "input" => ChainKind::Input,
            "output" => ChainKind::Output,
            "containers" => ChainKind::Containers,
            "prerouting" => ChainKind::Prerouting,
            _ => ChainKind::Forward,
        };
        let rule = format!("{} chain", kind.as_str());
        let allowed: &[&str] = match kind {
            ChainKind::Containers => &["policy", "bridges"],
            // Early drops only: what no rule drops goes on to routing (`policy` is refused below).
            ChainKind::Prerouting => &["policy"],
            ChainKind::Input => &["policy", "reject-with", "router-advertisements"],
            _ => &["policy", "reject-with"],
        };
        let mut props = self.props(node, &rule, allowed, 0);
        if kind == ChainKind::Prerouting {
            if let Some((_, span)) = self.text(&mut props, "policy") {
                self.error("prerouting-policy", "the prerouting block has no policy", span, "what no deny drops goes on")
                    .rule(&rule)
                    .help("a packet no deny of the prerouting block drops goes on to routing and the input/forward chains, whose policy decides; remove policy=");
            }
        }
        let policy = if kind == ChainKind::Containers {
            self.choice(&mut props, "policy", &[("accept", Policy::Accept), ("drop", Policy::Drop)])
        } else {
            self.choice(&mut props, "policy", &[("accept", Policy::Accept), ("drop", Policy::Drop), ("reject", Policy::Reject)])
        };
        let bridges = self.parsed(&mut props, "bridges", parse_bridges);
        let reject_with = self.parsed(&mut props, "reject-with", units::parse_reject_with);
        let router_advertisements = self.parsed(&mut props, "router-advertisements", |s| match s {
            "none" => Ok(Vec::new()),
            _ => headers::parse_ifnames(s, parse_ifname),
        });
        if let (Some(r), false) = (&reject_with, policy.as_ref().is_some_and(|p| p.value == Policy::Reject)) {
            self.error("reject-with-without-reject", "reject-with on a chain block whose policy is not reject", r.span, "no policy=reject here")
                .rule(&rule)
                .help(format!("add policy=reject to this block ({} policy=reject reject-with=\"{}\" {{ … }}), or remove reject-with", kind.as_str(), r.value.as_str()));
        }
        let children = node.children().map(|d| d.nodes()).unwrap_or_default();
        // Exactly as many as the block has rules: no doubling of a big chain's vector.
        let mut rules = Vec::with_capacity(children.len());
        for child in children {
            let action = match child.name().value() {
                "allow" | "reject" | "log" if kind == ChainKind::Prerouting => {
                    let span = self.span(child.name().span());
                    self.error("prerouting-not-deny", format!("`{}` in the prerouting block", child.name().value()), span, "only deny here")
                        .rule(&rule)
                        .help("the prerouting block drops early (deny); allow, reject and log belong in input/forward (log=#true on a deny logs it)");
                    continue;
                }
                "allow" => Action::Allow,
                "deny" => Action::Deny,
                "reject" => Action::Reject,
                "log" if kind == ChainKind::Containers => {
                    let span = self.span(child.name().span());
                    self.error("log-in-containers", "`log` rules are not for the containers block", span, "here")
                        .rule(&rule)
                        .help("log in the forward chain (forward { log \"x\" … }), or add log=#true to a containers rule");
                    continue;
                }
                "log" => Action::Log,
                "clamp-mss" if kind == ChainKind::Forward => Action::ClampMss,
                "clamp-mss" => {
                    let span = self.span(child.name().span());
                    self.error("clamp-mss-not-in-forward", format!("`clamp-mss` in the {} block", kind.as_str()), span, "only routed connections are clamped")
                        .rule(&rule)
                        .help("put it in the forward block (forward { clamp-mss \"wan\" out=\"ppp0\" }): the host's own connections take their MSS from the route already");
                    continue;
                }
                other => {
                    let span = self.span(child.name().span());
                    let help = match did_you_mean(other, FILTER_ACTIONS.iter().copied()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None if other == "drop" || other == "accept" => {
                            format!("fwc says allow/deny/reject: write `{}`", if other == "drop" { "deny" } else { "allow" })
                        }
                        None => "chain blocks hold allow, deny, reject and log rules".into(),
                    };
                    self.error("unknown-node", format!("unknown rule `{other}` in the {} chain", kind.as_str()), span, "here").help(help);
                    continue;
                }
            };
            if let Some(r) = self.filter_rule(child, kind, action) {
                rules.push(r);
            }
        }
        Some(Chain { kind, policy, bridges, reject_with, router_advertisements, rules, span: self.span(node.span()) })
    }

    pub(super) fn filter_rule(&mut self, node: &KdlNode, chain: ChainKind, action: Action) -> Option<FilterRule> {
        let name = self.name(node, "rule")?;
        let rule = format!("{} \"{}\"", action.as_str(), name.value);
        let allowed = match (chain, action) {
            (ChainKind::Containers, _) => CONTAINER_RULE_PROPS,
            (ChainKind::Prerouting, _) => PREROUTING_RULE_PROPS,
            (_, Action::Log) => LOG_RULE_PROPS,
            (_, Action::ClampMss) => CLAMP_PROPS,
            _ => FILTER_PROPS,
        };
        let mut p = self.props(node, &rule, allowed, 1);
        self.no_children(node, &rule);
        let proto = match action {
            // A clamp rewrites TCP SYNs only.
            Action::ClampMss => Some(Spanned::new(Proto::Tcp, name.span)),
            _ => self.parsed(&mut p, "proto", headers::parse_proto),
        };
        let icmp_types = self.icmp_types(&mut p, proto.as_ref());
        let icmp_codes = self.icmp_codes(&mut p, proto.as_ref());
        let mut negate = Negations::default();
        let (from, to) = (self.addr_match_not(&mut p, "from", &mut negate.from), self.addr_match_not(&mut p, "to", &mut negate.to));
        let ports = self.parsed_not(&mut p, "port", &mut negate.ports, units::parse_port_list);
        let sports = self.parsed_not(&mut p, "sport", &mut negate.sports, units::parse_port_list);
        let iif = self.parsed_not(&mut p, "in", &mut negate.iif, |s| headers::parse_ifnames(s, parse_ifname));
        let oif = self.parsed_not(&mut p, "out", &mut negate.oif, |s| headers::parse_ifnames(s, parse_ifname));
        if let (ChainKind::Prerouting, Some(o)) = (chain, &oif) {
            self.error("oif-in-prerouting", "out= in the prerouting block: before routing, no packet has an output interface", o.span, "not known yet")
                .rule(&rule)
                .help("match out= in a forward rule (forward { deny … out=… }), or match the destination (to=…) here");
        }
        if chain == ChainKind::Containers && negate.any() {
            let span = self.span(node.span());
            self.error("negation-in-containers", "`!` (none of the list) in a containers rule", span, "here")
                .rule(&rule)
                .help("write the clients a containers rule admits positively (from=\"@clients\"), or deny the others in a rule before it");
        }
        let log_given = p.values.contains_key("log");
        let log = self.bool(&mut p, "log");
        let log_prefix = self.parsed(&mut p, "log-prefix", units::parse_log_prefix);
        let log_rate = self.parsed(&mut p, "log-rate", units::parse_event_rate);
        if log_given && !log {
            if let Some(span) = log_prefix.as_ref().map(|x| x.span).or(log_rate.as_ref().map(|x| x.span)) {
                self.error("log-options-without-log", "log-prefix/log-rate on a rule that says log=#false", span, "nothing is logged")
                    .rule(&rule)
                    .help("remove log=#false (log-prefix and log-rate turn logging on), or remove log-prefix/log-rate");
            }
        }
        let reject_with = self.parsed(&mut p, "reject-with", units::parse_reject_with);
        if let Some(r) = &reject_with {
            if action != Action::Reject {
                self.error("reject-with-without-reject", format!("reject-with on a `{}` rule", action.as_str()), r.span, "only reject rules answer")
                    .rule(&rule)
                    .help(format!("make it a reject rule (reject \"{}\" … reject-with=\"{}\"), or remove reject-with", name.value, r.value.as_str()));
            } else if r.value == RejectWith::TcpReset && proto.as_ref().is_none_or(|p| p.value != Proto::Tcp) {
                self.error("tcp-reset-without-tcp", "reject-with=\"tcp-reset\" answers TCP only, and this rule is not proto=tcp", r.span, "TCP reset")
                    .rule(&rule)
                    .help("add proto=tcp, or reject with an ICMP code (reject-with=\"port-unreachable\", \"admin-prohibited\", …)");
            }
        }
        // Read in the order the properties were always read (their diagnostics' order).
        let tcp_flags = match action {
            Action::ClampMss => Some(Spanned::new(crate::features::clamp::SYN_FLAGS, name.span)),
            _ => self.parsed(&mut p, "tcp-flags", headers::parse_tcp_flags),
        };
        let pkttypes = self.parsed(&mut p, "pkttype", headers::parse_pkttypes);
        let log = log || log_prefix.is_some() || log_rate.is_some() || action == Action::Log;
        let state = self.parsed(&mut p, "state", units::parse_ct_states);
        let rate = self.parsed(&mut p, "rate", units::parse_event_rate);
        let on = self.selector(&mut p);
        let comment = self.comment(&mut p);
        let span = self.span(node.span());
        let per_source = self.per_source(&mut p, Some(action));
        let schedule = self.schedule(&mut p);
        let rpfilter = self.parsed(&mut p, "rpfilter", crate::features::rpfilter::parse);
        let mss = {
            let (lo, hi) = crate::features::clamp::MSS_RANGE;
            self.number(&mut p, "mss", lo, hi).map(|m| Spanned::new(m.value as u16, m.span))
        };
        let more = FilterMore { icmp_types, icmp_codes, tcp_flags, pkttypes, reject_with, log_prefix, log_rate, state, per_source, schedule, rpfilter, mss };
        let r = FilterRule { chain, action, proto, negate, log, ports, sports, from, to, iif, oif, rate, on, comment, span, more: More::new(more), name };
        Some(r)
    }

    /// `icmp-type=`: names of the rule's ICMP family (`proto=icmp` or `proto=icmpv6`), or numbers.
    pub(super) fn icmp_types(&mut self, p: &mut Props, proto: Option<&Spanned<Proto>>) -> Option<Spanned<Vec<u8>>> {
        let (text, span) = self.text(p, "icmp-type")?;
        let rule = p.rule.clone();
        let v6 = match proto.map(|p| p.value) {
            Some(Proto::Icmp) => false,
            Some(Proto::Icmpv6) => true,
            other => {
                // Suggest the family the names belong to.
                let names: Vec<&str> = text.split(',').map(str::trim).collect();
                let v4 = names.iter().all(|n| n.parse::<u8>().is_ok() || units::icmp_type_code(false, n).is_some());
                let v6 = names.iter().all(|n| n.parse::<u8>().is_ok() || units::icmp_type_code(true, n).is_some());
                let fix = match (v4, v6) {
                    (true, false) => "add proto=icmp".to_string(),
                    (false, true) => "add proto=icmpv6".to_string(),
                    _ => "add proto=icmp (IPv4) or proto=icmpv6 (IPv6); for both, write two rules".to_string(),
                };
                let what = match other {
                    Some(p) => format!("icmp-type on a proto={} rule", p.as_str()),
                    None => "icmp-type without proto=icmp or proto=icmpv6".to_string(),
                };
                self.error("icmp-type-without-icmp", what, span, "ICMP types need an ICMP protocol").rule(rule).help(fix);
                return None;
            }
        };
        self.convert(&rule, "icmp-type", &text, span, |s| units::parse_icmp_types(s, v6))
    }

    /// `icmp-code=`: codes (nft's names of the rule's ICMP family, or numbers).
    pub(super) fn icmp_codes(&mut self, p: &mut Props, proto: Option<&Spanned<Proto>>) -> Option<Spanned<Vec<u8>>> {
        let (text, span) = self.text(p, "icmp-code")?;
        let rule = p.rule.clone();
        let v6 = match proto.map(|p| p.value) {
            Some(Proto::Icmp) => false,
            Some(Proto::Icmpv6) => true,
            _ => {
                self.error("icmp-type-without-icmp", "icmp-code without proto=icmp or proto=icmpv6", span, "ICMP codes need an ICMP protocol")
                    .rule(rule)
                    .help("add proto=icmp (IPv4) or proto=icmpv6 (IPv6) and the one icmp-type the codes belong to");
                return None;
            }
        };
        self.convert(&rule, "icmp-code", &text, span, |s| headers::parse_icmp_codes(s, v6))
    }

    /// `masquerade "lan-out" from=… out=…` and `snat "office-out" from=… out=… to="198.18.0.1"`.
    pub(super) fn snat(&mut self, node: &KdlNode) -> Option<SnatRule> {
        let kind = if node.name().value() == "snat" { SnatKind::Snat } else { SnatKind::Masquerade };
        let name = self.name(node, kind.as_str())?;
        let rule = format!("{} \"{}\"", kind.as_str(), name.value);
        let allowed = match kind {
            SnatKind::Masquerade => MASQUERADE_PROPS,
            SnatKind::Snat => SNAT_PROPS,
        };
        let mut p = self.props(node, &rule, allowed, 1);
        self.no_children(node, &rule);
        let mut negate = Negations::default();
        let (dst, to_addr) = match kind {
            SnatKind::Masquerade => (self.addr_match_not(&mut p, "to", &mut negate.to), None),
            SnatKind::Snat => {
                let dst = self.addr_match_not(&mut p, "dst", &mut negate.to);
                let to = if p.values.contains_key("to") {
                    self.parsed(&mut p, "to", parse_snat_addr)
                } else {
                    let span = self.span(node.name().span());
                    self.error("snat-without-to", "snat needs to=, the new source address", span, "no to=")
                        .rule(&rule)
                        .help("add to=\"198.18.0.1\" (an address of this host), or use masquerade to take the out interface's address");
                    None
                };
                (dst, Some(to?))
            }
        };
        let s = SnatRule {
            kind,
            from: self.addr_match_not(&mut p, "from", &mut negate.from),
            from_except: self.addr_match(&mut p, "from-except"),
            dst,
            to_addr,
            oif: self.parsed(&mut p, "out", parse_ifname),
            iif: self.parsed_not(&mut p, "in", &mut negate.iif, |s| headers::parse_ifnames(s, parse_ifname)),
            negate,
            proto: self.choice(&mut p, "proto", &[("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)]),
            ports: self.parsed(&mut p, "port", units::parse_port_list),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            name,
        };
        Some(s)
    }

    pub(super) fn shape(&mut self, node: &KdlNode) -> Option<ShapeRule> {
        let name = self.name(node, "shape")?;
        let rule = format!("shape \"{}\"", name.value);
        let mut p = self.props(node, &rule, SHAPE_PROPS, 1);
        self.no_children(node, &rule);
        let rate = self.required(&mut p, "rate", "\"20mbit\"").and_then(|(t, s)| self.convert(&rule, "rate", &t, s, units::parse_bandwidth));
        let devs = match self.text(&mut p, "dev") {
            Some((t, s)) => t.split(',').map(|d| Spanned::new(d.trim().to_string(), s)).collect(),
            None => Vec::new(),
        };
        for d in &devs {
            if !valid_ifname(&d.value) {
                self.error("bad-dev", format!("\"{}\" is not an interface name", d.value), d.span, "this value")
                    .rule(&rule)
                    .help("interface names are 1-15 characters without spaces or `/`, e.g. dev=eth1 or dev=\"eth1,eth2\"");
            }
        }
        let s = ShapeRule {
            from: self.addr_match(&mut p, "from"),
            to: self.addr_match(&mut p, "to"),
            proto: self.choice(&mut p, "proto", &[("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)]),
            ports: self.parsed(&mut p, "port", units::parse_port_list),
            devs,
            burst: self.parsed(&mut p, "burst", units::parse_size),
            direction: self
                .choice(&mut p, "direction", &[("egress", Direction::Egress), ("ingress", Direction::Ingress)])
                .map_or(Direction::Egress, |d| d.value),
            quota: self.quota(&mut p, &rule),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            rate: rate?,
            name,
        };
        Some(s)
    }
}

/// snat's `to=`: one IP address (the new source).
pub(super) fn parse_snat_addr(s: &str) -> Result<IpAddr, UnitError> {
    s.trim().parse::<IpAddr>().map_err(|_| UnitError {
        message: format!("\"{s}\" is not an IP address"),
        help: "snat's to= is the new source address, e.g. to=\"198.18.0.1\" (to filter by destination, use dst=)".into(),
    })
}

/// `bridges="docker0,br-*"`: interface names, each may end in `*` (a prefix wildcard).
pub(super) fn parse_bridges(s: &str) -> Result<Vec<String>, UnitError> {
    let help = "a comma-separated list of interface names, each may end in `*`: bridges=\"docker0,br-*,podman*\"";
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let stem = part.strip_suffix('*').unwrap_or(part);
        if part.is_empty() || !valid_ifname(part) || stem.contains('*') || (stem.is_empty() && part != "*") {
            let what = if part.is_empty() { "an empty entry".to_string() } else { format!("\"{part}\"") };
            return Err(UnitError { message: format!("{what} is not an interface name or pattern"), help: help.into() });
        }
        if part == "*" {
            return Err(UnitError { message: "\"*\" would make every interface a container bridge".into(), help: help.into() });
        }
        out.push(part.to_string());
    }
    Ok(out)
}
