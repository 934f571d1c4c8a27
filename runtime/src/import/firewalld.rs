//! firewalld's configuration as fwc rules (pure): zones (default zone, interfaces and sources,
//! targets, services, ports, source ports, ICMP blocks, masquerade, forward ports, rich rules),
//! services (the operator's over the system's), policies and ipsets, read from their XML with
//! each element's line as the rule's origin. `firewalld_source` reads the files and runs firewalld.

use std::collections::BTreeMap;

use roxmltree::{Document, Node};

use super::model::*;
use super::naming::{sanitize, unique_name, Names};

mod rich;
mod services;

/// A firewalld configuration as texts.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// firewalld.conf (DefaultZone, RFC3964_IPv4, IPv6_rpfilter, LogDenied).
    pub conf: String,
    /// `zones/public.xml` -> (label for origins, text): the system's files (/usr/lib/firewalld),
    /// replaced by the operator's of the same name, as firewalld itself does.
    pub files: BTreeMap<String, (String, String)>,
}

impl Config {
    /// A `KEY=value` of firewalld.conf (the last one wins, like firewalld's reader).
    pub fn setting(&self, key: &str) -> Option<String> {
        self.conf.lines().filter_map(|l| l.trim().strip_prefix(key)?.trim_start().strip_prefix('=').map(|v| v.trim().trim_matches('"').to_string())).last()
    }
    fn yes(&self, key: &str, default: bool) -> bool {
        match self.setting(key) {
            Some(v) => matches!(v.to_ascii_lowercase().as_str(), "yes" | "true" | "1"),
            None => default,
        }
    }
    pub fn default_zone(&self) -> String {
        self.setting("DefaultZone").filter(|z| !z.is_empty()).unwrap_or_else(|| "public".into())
    }
    fn of_kind(&self, dir: &str) -> impl Iterator<Item = (&str, &(String, String))> {
        let prefix = format!("{dir}/");
        self.files.iter().filter_map(move |(k, v)| Some((k.strip_prefix(&prefix)?.strip_suffix(".xml")?, v)))
    }
}

/// Where a zone or policy applies: an interface, a source network or ipset, or everything else.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bind {
    All,
    Iif(String),
    From(Addrs),
}

impl Bind {
    fn word(&self) -> String {
        match self {
            Bind::All => String::new(),
            Bind::Iif(i) => i.clone(),
            Bind::From(Addrs::Set(s)) => s.clone(),
            Bind::From(Addrs::List(l)) => l.join("-"),
        }
    }
}

/// The parts of a zone or policy, in firewalld's order: rich rules of negative priority,
/// then log, deny, allow, then rich rules of positive priority.
#[derive(Debug, Clone, Default)]
struct Parts {
    pre: Vec<(i64, Rule)>,
    log: Vec<Rule>,
    deny: Vec<Rule>,
    allow: Vec<Rule>,
    post: Vec<(i64, Rule)>,
    /// Forwarding between the zone's own interfaces (`<forward/>`).
    forward: bool,
    masquerade: Vec<(Option<Addrs>, Option<Family>, String)>,
    forwards: Vec<Forward>,
    /// `<icmp-block-inversion/>`: the listed ICMP types pass, the others do not (its origin).
    inversion: Option<String>,
}

impl Parts {
    fn rules(&self) -> Vec<Rule> {
        let mut pre = self.pre.clone();
        pre.sort_by_key(|(p, _)| *p);
        let mut post = self.post.clone();
        post.sort_by_key(|(p, _)| *p);
        pre.into_iter().map(|(_, r)| r).chain(self.log.iter().cloned()).chain(self.deny.iter().cloned()).chain(self.allow.iter().cloned()).chain(post.into_iter().map(|(_, r)| r)).collect()
    }
}

struct Zone {
    name: String,
    target: String,
    binds: Vec<Bind>,
    parts: Parts,
    origin: String,
}

struct Policy {
    name: String,
    priority: i64,
    target: String,
    ingress: Vec<String>,
    egress: Vec<String>,
    parts: Parts,
    origin: String,
}

struct Tx<'a> {
    cfg: &'a Config,
    out: Imported,
    names: Names,
}

fn line(doc: &Document, n: Node) -> u32 {
    doc.text_pos_at(n.range().start).row
}

/// The child elements of `n`, without repeats: firewalld ignores a second `<interface>`,
/// `<source>`, `<port>`, `<service>` … that is the same as an earlier one ("already set").
fn elements<'a, 'i>(n: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    let mut seen = std::collections::HashSet::new();
    n.children().filter(|c| c.is_element()).filter(move |c| {
        if c.children().any(|x| x.is_element()) {
            return true;
        }
        let mut key: Vec<(String, String)> = c.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect();
        key.sort();
        seen.insert((c.tag_name().name().to_string(), key, c.text().unwrap_or_default().trim().to_string()))
    })
}

/// firewalld's ICMP type names as nft spells them, for IPv4 and IPv6.
fn icmp_names(name: &str) -> Option<(Option<&'static str>, Option<&'static str>)> {
    Some(match name {
        "echo-request" => (Some("echo-request"), Some("echo-request")),
        "echo-reply" => (Some("echo-reply"), Some("echo-reply")),
        "destination-unreachable" => (Some("destination-unreachable"), Some("destination-unreachable")),
        "time-exceeded" => (Some("time-exceeded"), Some("time-exceeded")),
        "parameter-problem" => (Some("parameter-problem"), Some("parameter-problem")),
        "redirect" => (Some("redirect"), Some("nd-redirect")),
        "router-advertisement" => (Some("router-advertisement"), Some("nd-router-advert")),
        "router-solicitation" => (Some("router-solicitation"), Some("nd-router-solicit")),
        "neighbour-advertisement" => (None, Some("nd-neighbor-advert")),
        "neighbour-solicitation" => (None, Some("nd-neighbor-solicit")),
        "packet-too-big" => (None, Some("packet-too-big")),
        "source-quench" => (Some("source-quench"), None),
        "timestamp-request" => (Some("timestamp-request"), None),
        "timestamp-reply" => (Some("timestamp-reply"), None),
        _ => return None,
    })
}

/// A rich rule's reject type as fwc's `reject-with=`.
fn reject_with(t: &str) -> Option<&'static str> {
    Some(match t {
        "tcp-reset" => "tcp-reset",
        "icmp-port-unreachable" | "icmp6-port-unreachable" => "port-unreachable",
        "icmp-host-unreachable" | "icmp6-addr-unreachable" => "host-unreachable",
        "icmp-net-unreachable" | "icmp6-no-route" => "net-unreachable",
        "icmp-admin-prohibited" | "icmp6-adm-prohibited" | "icmp-host-prohibited" | "icmp-net-prohibited" => "admin-prohibited",
        "icmp-proto-unreachable" => "prot-unreachable",
        _ => return None,
    })
}

/// `3/m` -> `3/minute`.
fn rate(v: &str) -> Option<String> {
    let (n, u) = v.split_once('/')?;
    n.trim().parse::<u64>().ok()?;
    let unit = match u.trim() {
        "s" | "second" => "second",
        "m" | "minute" => "minute",
        "h" | "hour" => "hour",
        "d" | "day" => "day",
        _ => return None,
    };
    Some(format!("{}/{unit}", n.trim()))
}

fn family_of_addr(a: &str) -> Family {
    if a.contains(':') { Family::V6 } else { Family::V4 }
}

/// A source or destination address as fwc writes it (a host without `/32`; a network given
/// with host bits, `149.126.4.94/23`, as the network firewalld and the kernel match).
fn addr(a: &str) -> String {
    let a = a.trim();
    let net = a.parse::<ipnet::IpNet>().ok().map(|n| n.trunc().to_string());
    let a = net.as_deref().unwrap_or(a);
    a.strip_suffix("/32").filter(|x| !x.contains(':')).or_else(|| a.strip_suffix("/128").filter(|x| x.contains(':'))).unwrap_or(a).to_string()
}

impl<'a> Tx<'a> {
    fn unique(&mut self, base: &str) -> String {
        unique_name(&mut self.names, base)
    }

    /// A file's XML, or a refusal naming it (firewalld refuses it too).
    fn parse<'t>(&mut self, label: &str, text: &'t str) -> Option<Document<'t>> {
        match Document::parse(text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.refuse(label, format!("not valid XML: {e}"), "firewalld refuses it too: fix the file");
                None
            }
        }
    }

    fn refuse(&mut self, origin: &str, what: impl Into<String>, hint: impl Into<String>) {
        self.out.refused.push(Refusal { origin: origin.into(), what: what.into(), hint: hint.into() });
    }

    fn rule(&mut self, verb: Verb, base: &str, cond: Cond, origin: &str) -> Rule {
        let name = self.unique(base);
        Rule { name, verb, cond, rate: None, per_source: false, log: false, log_prefix: None, log_rate: None, comment: None, origin: origin.into() }
    }

    /// ICMP rules of one firewalld ICMP type: one per family it exists in (and `family` allows).
    fn icmp_rules(&mut self, ty: &str, base: &Cond, verb: Verb, name: &str, origin: &str) -> Vec<Rule> {
        let Some((v4, v6)) = icmp_names(ty) else {
            self.refuse(origin, format!("ICMP type `{ty}`: fwc imports the common ones (echo-request, destination-unreachable, …) only"), "match it by hand with icmp-type=");
            return Vec::new();
        };
        let fam = base.family.or_else(|| match &base.from {
            Some(Addrs::List(l)) => l.first().map(|a| family_of_addr(a)),
            _ => None,
        });
        let mut out = Vec::new();
        let both = v4.is_some() && v6.is_some() && fam.is_none();
        for (proto, nft, f) in [("icmp", v4, Family::V4), ("icmpv6", v6, Family::V6)] {
            let Some(t) = nft else { continue };
            if fam.is_some_and(|x| x != f) {
                continue;
            }
            let c = Cond { proto: Some(proto.into()), icmp_type: Some(t.into()), family: None, ..base.clone() };
            // `block-echo-request` and `block-echo-request-v6` when a type exists in both families.
            let n = if proto == "icmpv6" && both { format!("{name}-v6") } else { name.to_string() };
            out.push(self.rule(verb.clone(), &n, c, origin));
        }
        out
    }

    /// The elements of a zone or policy (`label` names the file).
    fn parts(&mut self, doc: &Document, root: Node, label: &str, is_policy: bool) -> Parts {
        let mut p = Parts::default();
        let inverted = elements(root).any(|n| n.tag_name().name() == "icmp-block-inversion");
        for n in elements(root) {
            let origin = format!("{label}:{}", line(doc, n));
            let at = |k: &str| n.attribute(k).unwrap_or_default().to_string();
            match n.tag_name().name() {
                "short" | "description" | "interface" | "source" | "ingress-zone" | "egress-zone" => {}
                "service" => {
                    let r = self.service_rules(&at("name"), &Cond::default(), &Verb::Allow, &origin);
                    p.allow.extend(r);
                }
                tag @ ("port" | "source-port") => {
                    let (proto, port, src) = (at("protocol"), at("port"), tag == "source-port");
                    if proto != "tcp" && proto != "udp" {
                        self.refuse(&origin, format!("{tag} {port}/{proto}: fwc matches tcp and udp ports only"), "leave it out, or allow it outside fwc");
                        continue;
                    }
                    let (name, port, sport) = if src { (format!("from-{proto}-{port}"), None, Some(port)) } else { (format!("{proto}-{port}"), Some(port), None) };
                    let r = self.rule(Verb::Allow, &name, Cond { proto: Some(proto), port, sport, ..Default::default() }, &origin);
                    p.allow.push(r);
                }
                "protocol" => match proto_name(&at("value")) {
                    Some(pr) => {
                        let r = self.rule(Verb::Allow, &format!("proto-{pr}"), Cond { proto: Some(pr.into()), ..Default::default() }, &origin);
                        p.allow.push(r);
                    }
                    None => self.refuse(&origin, format!("protocol `{}`: fwc matches tcp, udp, icmp and icmpv6 only", at("value")), "leave it out, or allow it outside fwc"),
                },
                "icmp-block" if !inverted => {
                    let r = self.icmp_rules(&at("name"), &Cond::default(), Verb::Reject(Some("admin-prohibited".into())), &format!("block-{}", at("name")), &origin);
                    p.deny.extend(r);
                }
                // Inverted, the listed types are accepted (with the zone's other accepts).
                "icmp-block" => {
                    let r = self.icmp_rules(&at("name"), &Cond::default(), Verb::Allow, &at("name"), &origin);
                    p.allow.extend(r);
                }
                "icmp-block-inversion" => p.inversion = Some(origin),
                "masquerade" => p.masquerade.push((None, Some(Family::V4), origin)),
                "forward" => p.forward = true,
                "forward-port" => self.forward_port(n, None, &origin, &mut p),
                "rule" => self.rich(n, &origin, &mut p),
                other => self.refuse(&origin, format!("<{other}> in a {}", if is_policy { "policy" } else { "zone" }), "fwc has no form for it: leave it out, or add it by hand"),
            }
        }
        p
    }

    fn forward_port(&mut self, n: Node, from: Option<Addrs>, origin: &str, p: &mut Parts) {
        let at = |k: &str| n.attribute(k).unwrap_or_default().to_string();
        let (port, proto, to_port, to_addr) = (at("port"), at("protocol"), n.attribute("to-port").map(str::to_string), at("to-addr"));
        if to_addr.is_empty() {
            self.refuse(origin, format!("forward-port {port}/{proto} without to-addr redirects to a local port"), "fwc forwards to another host: run the service on the port itself, or forward to the backend's address");
            return;
        }
        if to_addr.contains(':') || port.contains('-') || to_port.as_deref().is_some_and(|t| t.contains('-')) || (proto != "tcp" && proto != "udp") {
            self.refuse(origin, format!("forward-port {port}/{proto} to {to_addr}: fwc forwards one tcp or udp port to an IPv4 address"), "write the forwards by hand, one port each");
            return;
        }
        let to_port = to_port.unwrap_or_else(|| port.clone());
        let name = self.unique(&format!("fwd-{proto}-{port}"));
        p.forwards.push(Forward { name, proto, listen: format!(":{port}"), to: format!("{to_addr}:{to_port}"), from, iif: None, any_destination: false, origin: origin.into() });
    }

    fn zone(&mut self, name: &str, label: &str, text: &str) -> Option<Zone> {
        let doc = self.parse(label, text)?;
        let root = doc.root_element();
        let mut binds = Vec::new();
        for n in elements(root) {
            let origin = format!("{label}:{}", line(&doc, n));
            match n.tag_name().name() {
                "interface" => binds.push(Bind::Iif(n.attribute("name").unwrap_or_default().to_string())),
                "source" => {
                    if let Some(a) = n.attribute("address") {
                        binds.push(Bind::From(Addrs::List(vec![addr(a)])));
                    } else if let Some(s) = n.attribute("ipset") {
                        binds.push(Bind::From(Addrs::Set(s.to_string())));
                    } else {
                        self.refuse(&origin, "a zone source by MAC address", "bind the zone to the host's address instead");
                    }
                }
                _ => {}
            }
        }
        let active = !binds.is_empty() || name == self.cfg.default_zone();
        let origin = format!("{label}:{}", line(&doc, root));
        if !active {
            return None;
        }
        let parts = self.parts(&doc, root, label, false);
        let target = root.attribute("target").unwrap_or("default").to_string();
        if !matches!(target.as_str(), "default" | "ACCEPT" | "DROP" | "%%REJECT%%") {
            self.refuse(&origin, format!("zone target `{target}`"), "firewalld refuses it too (it falls back to its stock configuration): use default, ACCEPT, DROP or %%REJECT%%");
        }
        Some(Zone { name: name.into(), target, binds, parts, origin })
    }

    fn policy(&mut self, name: &str, label: &str, text: &str) -> Option<Policy> {
        let doc = self.parse(label, text)?;
        let root = doc.root_element();
        let list = |tag: &str| elements(root).filter(|n| n.tag_name().name() == tag).filter_map(|n| n.attribute("name").map(str::to_string)).collect::<Vec<_>>();
        let (ingress, egress) = (list("ingress-zone"), list("egress-zone"));
        if ingress.is_empty() || egress.is_empty() {
            return None; // inactive, as in firewalld
        }
        let origin = format!("{label}:{}", line(&doc, root));
        let Some(target) = root.attribute("target") else {
            self.refuse(&origin, format!("policy `{name}` without a target"), "firewalld refuses it too: add target=\"CONTINUE\" (or ACCEPT, DROP, REJECT)");
            return None;
        };
        let parts = self.parts(&doc, root, label, true);
        Some(Policy {
            name: name.into(),
            priority: root.attribute("priority").and_then(|p| p.parse().ok()).unwrap_or(-1),
            target: target.to_string(),
            ingress,
            egress,
            parts,
            origin,
        })
    }

    fn ipset(&mut self, name: &str, label: &str, text: &str) {
        let Some(doc) = self.parse(label, text) else { return };
        let root = doc.root_element();
        let origin = format!("{label}:{}", line(&doc, root));
        let ty = root.attribute("type").unwrap_or_default();
        if ty != "hash:ip" && ty != "hash:net" {
            return self.refuse(&origin, format!("ipset `{name}` of type {ty}"), "fwc sets hold addresses and networks (hash:ip, hash:net)");
        }
        let elems = elements(root).filter(|n| n.tag_name().name() == "entry").filter_map(|n| n.text()).map(addr).collect();
        self.out.sets.push(Set { name: name.into(), elems, dynamic: false, origin });
    }
}

fn push(p: &mut Parts, priority: i64, section: &str, rules: Vec<Rule>) {
    for r in rules {
        match (priority.signum(), section) {
            (-1, _) => p.pre.push((priority, r)),
            (1, _) => p.post.push((priority, r)),
            (_, "log") => p.log.push(r),
            (_, "deny") => p.deny.push(r),
            (_, _) => p.allow.push(r),
        }
    }
}

fn proto_name(p: &str) -> Option<&'static str> {
    Some(match p {
        "tcp" => "tcp",
        "udp" => "udp",
        "icmp" => "icmp",
        "ipv6-icmp" | "icmpv6" => "icmpv6",
        _ => return None,
    })
}

/// Add a zone's binding to a rule: `in=`, or `from=` (a rule with its own source cannot).
fn bound(mut r: Rule, b: &Bind, prefix: &str, tx: &mut Tx) -> Option<Rule> {
    match b {
        Bind::All => return Some(r),
        Bind::Iif(i) => r.cond.iif = Some(i.clone()),
        Bind::From(a) => {
            // A rule of one family never matches a source of the other (firewalld's neither):
            // by its family, its ICMP, or its destination (dhcpv6-client's fe80::/64).
            let to_fam = match &r.cond.to {
                Some(Addrs::List(l)) if !l.is_empty() && l.iter().all(|x| family_of_addr(x) == family_of_addr(&l[0])) => Some(family_of_addr(&l[0])),
                _ => None,
            };
            let rule_fam = r.cond.family.or(match r.cond.proto.as_deref() {
                Some("icmp") => Some(Family::V4),
                Some("icmpv6") => Some(Family::V6),
                _ => None,
            }).or(to_fam);
            let fams: Vec<Family> = match a {
                Addrs::List(l) => l.iter().map(|x| family_of_addr(x)).collect(),
                Addrs::Set(s) => tx.out.sets.iter().find(|x| &x.name == s).map(|x| x.elems.iter().map(|e| family_of_addr(e)).collect()).unwrap_or_default(),
            };
            if let Some(f) = rule_fam {
                if !fams.is_empty() && fams.iter().all(|x| *x != f) {
                    tx.names.remove(&r.name);
                    return None;
                }
            }
            if r.cond.from.is_some() {
                tx.refuse(&r.origin, "a rich rule with a source in a zone bound to a source", "fwc matches one source per rule: bind the zone to an interface, or write the rule by hand");
                return None;
            }
            r.cond.from = Some(a.clone());
        }
    }
    tx.names.remove(&r.name);
    r.name = tx.unique(&format!("{prefix}-{}", r.name));
    Some(r)
}

/// The reject that ends a zone of target default/REJECT (firewalld answers admin-prohibited).
const PROHIBITED: &str = "admin-prohibited";

/// firewalld's RFC 3964 rule: IPv6 packets to IPv4-compatible and 6to4 addresses of private
/// networks are rejected in forward and output.
const RFC3964: &str = "::/96,::ffff:0.0.0.0/96,2002::/24,2002:a00::/24,2002:7f00::/24,2002:a9fe::/32,2002:ac10::/28,2002:c0a8::/32,2002:e000::/19";

/// Translate a firewalld configuration.
pub fn translate(cfg: &Config) -> Imported {
    let mut tx = Tx { cfg, out: Imported::default(), names: Names::default() };
    let default = cfg.default_zone();
    for (name, (label, text)) in cfg.of_kind("ipsets").map(|(n, v)| (n.to_string(), v.clone())).collect::<Vec<_>>() {
        tx.ipset(&name, &label, &text);
    }
    let mut zones = Vec::new();
    for (name, (label, text)) in cfg.of_kind("zones").map(|(n, v)| (n.to_string(), v.clone())).collect::<Vec<_>>() {
        if let Some(z) = tx.zone(&name, &label, &text) {
            zones.push(z);
        }
    }
    if !zones.iter().any(|z| z.name == default) {
        tx.refuse("firewalld.conf", format!("the default zone `{default}` is not defined"), "set DefaultZone= to one of the zones");
    }
    let mut policies = Vec::new();
    for (name, (label, text)) in cfg.of_kind("policies").map(|(n, v)| (n.to_string(), v.clone())).collect::<Vec<_>>() {
        if let Some(p) = tx.policy(&name, &label, &text) {
            policies.push(p);
        }
    }
    policies.sort_by_key(|p| p.priority);
    // A policy is active only while all its named zones are (firewalld.policy(5)): one to or
    // from a zone nothing binds in the configuration (Docker binds `docker0` to its zone at
    // run time) is left out, as firewalld leaves it.
    policies.retain(|p| {
        let idle: Vec<&str> = p.ingress.iter().chain(p.egress.iter()).filter(|z| *z != "ANY" && *z != "HOST" && !zones.iter().any(|x| &x.name == *z)).map(String::as_str).collect();
        if !idle.is_empty() {
            tx.out.notes.push(format!("{}: policy `{}` is not active — zone {} has no interface or source in the configuration (a program may bind one at run time, as Docker binds docker0 to its zone): left out, as firewalld leaves it", p.origin, p.name, idle.join(", ")));
        }
        idle.is_empty()
    });
    // Zones in firewalld's dispatch order: sources, then interfaces, then the default zone.
    let mut dispatch: Vec<(usize, Bind)> = Vec::new();
    for want_src in [true, false] {
        for (i, z) in zones.iter().enumerate() {
            for b in &z.binds {
                if matches!(b, Bind::From(_)) == want_src {
                    dispatch.push((i, b.clone()));
                }
            }
        }
    }
    if let Some(i) = zones.iter().position(|z| z.name == default) {
        dispatch.push((i, Bind::All));
    }
    let zone_ifaces: Vec<String> = zones.iter().flat_map(|z| z.binds.iter()).filter_map(|b| if let Bind::Iif(i) = b { Some(i.clone()) } else { None }).collect();
    let applies = |pz: &[String], zone: &str| pz.iter().any(|z| z == "ANY" || z == zone);
    // One input block per zone binding (rules/10-input-internal-eth1.kdl, …), in dispatch order.
    let mut inputs: Vec<Chain> = Vec::new();
    let mut forward = Chain { kind: "forward", policy: "accept", reject_with: None, rules: Vec::new(), part: None };
    let mut output = Chain { kind: "output", policy: "accept", reject_with: None, rules: Vec::new(), part: None };
    if cfg.yes("RFC3964_IPv4", true) {
        for ch in [&mut forward, &mut output] {
            let r = Rule {
                name: tx.unique(&format!("rfc3964-{}", ch.kind)),
                verb: Verb::Reject(Some("host-unreachable".into())),
                cond: Cond { to: Some(Addrs::List(RFC3964.split(',').map(str::to_string).collect())), ..Default::default() },
                rate: None,
                per_source: false,
                log: false,
                log_prefix: None,
                log_rate: None,
                comment: Some("IPv6 to IPv4-compatible and 6to4 private addresses (RFC 3964; firewalld answers addr-unreachable)".into()),
                origin: "firewalld.conf RFC3964_IPv4".into(),
            };
            ch.rules.push(r);
        }
    }
    // Policies from HOST (output) and between zones (forward), of any ingress zone: policy
    // rules match by ingress/egress binding only where one zone is named.
    for (zi, b) in dispatch.clone() {
        let z = &zones[zi];
        let zname = z.name.clone();
        let (file, heading) = match &b {
            Bind::All => (zname.clone(), format!("zone {zname}, the default zone ({})", z.origin)),
            Bind::Iif(i) => (format!("{zname}-{i}"), format!("zone {zname}, packets in by {i} ({})", z.origin)),
            Bind::From(a) => (sanitize(&format!("{zname}-from-{}", b.word())), format!("zone {zname}, packets from {} ({})", match a {
                Addrs::Set(s) => format!("@{s}"),
                Addrs::List(l) => l.join(","),
            }, z.origin)),
        };
        let mut input = Chain { kind: "input", policy: "accept", reject_with: None, rules: Vec::new(), part: Some((file, heading)) };
        let prefix = if matches!(b, Bind::All) { String::new() } else { zname.clone() };
        let mut rules: Vec<Rule> = Vec::new();
        let pols: Vec<usize> = (0..policies.len()).filter(|&pi| applies(&policies[pi].ingress, &zname) && policies[pi].egress.iter().any(|e| e == "HOST")).collect();
        for &pi in pols.iter().filter(|&&pi| policies[pi].priority < 0) {
            rules.extend(policies[pi].parts.rules());
            if let Some(r) = policy_target(&mut tx, &policies[pi]) {
                rules.push(r);
            }
        }
        rules.extend(z.parts.rules());
        for &pi in pols.iter().filter(|&&pi| policies[pi].priority >= 0) {
            rules.extend(policies[pi].parts.rules());
            if let Some(r) = policy_target(&mut tx, &policies[pi]) {
                rules.push(r);
            }
        }
        let target = z.target.as_str();
        let mut tail: Vec<Rule> = Vec::new();
        let zo = z.origin.clone();
        if let (Some(o), "ACCEPT") = (&z.parts.inversion, target) {
            tx.refuse(o, format!("icmp-block-inversion in zone `{zname}` of target ACCEPT"), "list the ICMP types to block instead (no inversion)");
        }
        // Target default accepts the ICMP the zone did not block; inverted, it refuses it.
        if target == "default" && z.parts.inversion.is_none() {
            for pr in ["icmp", "icmpv6"] {
                let r = tx.rule(Verb::Allow, &format!("{zname}-{pr}"), Cond { proto: Some(pr.into()), ..Default::default() }, &zo);
                tail.push(r);
            }
        }
        let verb = match target {
            "ACCEPT" => Verb::Allow,
            "DROP" => Verb::Deny,
            _ => Verb::Reject(Some(PROHIBITED.into())),
        };
        for r in rules.into_iter().chain(tail) {
            if let Some(r) = bound(r, &b, &prefix, &mut tx) {
                input.rules.push(r);
            }
        }
        // The forward chain: intra-zone forwarding, then the zone's target.
        if z.parts.forward {
            for i in z.binds.iter().filter_map(|x| if let Bind::Iif(i) = x { Some(i.clone()) } else { None }) {
                let r = tx.rule(Verb::Allow, &format!("{zname}-forward-to-{i}"), Cond { oif: Some(i), ..Default::default() }, &zo);
                if let Some(r) = bound(r, &b, &prefix, &mut tx) {
                    forward.rules.push(r);
                }
            }
            // A zone bound to sources forwards to those sources (firewalld: `ip daddr SOURCE
            // accept` in the zone's forward allow chain).
            for x in &z.binds {
                if let Bind::From(a) = x {
                    let r = tx.rule(Verb::Allow, &format!("forward-to-{}", x.word()), Cond { to: Some(a.clone()), ..Default::default() }, &zo);
                    if let Some(r) = bound(r, &b, &prefix, &mut tx) {
                        forward.rules.push(r);
                    }
                }
            }
        }
        if matches!(b, Bind::All) {
            input.policy = match verb {
                Verb::Allow => "accept",
                Verb::Deny => "drop",
                _ => "reject",
            };
            if input.policy == "reject" {
                input.reject_with = Some(PROHIBITED.into());
            }
            forward.policy = input.policy;
            forward.reject_with = input.reject_with.clone();
            forward.part = None;
            let others: Vec<&str> = zones.iter().filter(|o| !o.binds.is_empty()).map(|o| o.name.as_str()).collect();
            if !others.is_empty() {
                for f in &z.parts.forwards {
                    tx.out.notes.push(format!(
                        "{}: firewalld applies this forward-port only to packets of zone {zname}, not to those of {} (bound to interfaces or sources); fwc's forward takes them too: --verify lists such flows; limit the forward with from= or accept the difference",
                        f.origin,
                        others.join(", ")
                    ));
                }
            }
            if !zone_ifaces.is_empty() && !z.parts.masquerade.is_empty() {
                tx.out.notes.push(format!("{}: masquerade of the default zone applies to every interface here, also those of other zones (firewalld masquerades only what leaves by the default zone's)", z.parts.masquerade[0].2));
            }
        } else {
            let word = match verb {
                Verb::Allow => "accept",
                Verb::Deny => "drop",
                _ => "reject",
            };
            let by = match &b {
                Bind::Iif(i) => format!("in-{i}"),
                _ => format!("from-{}", b.word()),
            };
            for ch in [&mut input, &mut forward] {
                let name = if ch.kind == "input" { format!("{by}-{word}") } else { format!("{by}-forward-{word}") };
                let r = tx.rule(verb.clone(), &name, Cond::default(), &zo);
                if let Some(r) = bound(r, &b, &prefix, &mut tx) {
                    ch.rules.push(r);
                }
            }
        }
        inputs.push(input);
        // Masquerade by the zone as egress; forward ports by it as ingress.
        for (from, fam, origin) in z.parts.masquerade.clone() {
            let (out, dst) = match &b {
                Bind::All => (None, None),
                Bind::Iif(i) => (Some(i.clone()), None),
                Bind::From(a) => (None, Some(a.clone())),
            };
            let from = from.or(match fam {
                Some(Family::V6) => Some(Addrs::List(vec!["::/0".into()])),
                _ => Some(Addrs::List(vec!["0.0.0.0/0".into()])),
            });
            let name = tx.unique(&format!("masquerade-{zname}{}", if b.word().is_empty() { String::new() } else { format!("-{}", b.word()) }));
            tx.out.nats.push(Nat { name, kind: "masquerade", from, from_except: None, dst, iif: None, not: Not::default(), out, to_addr: None, proto: None, port: None, origin });
        }
        for mut f in z.parts.forwards.clone() {
            match &b {
                Bind::All => {}
                Bind::Iif(_) => {
                    tx.refuse(&f.origin, format!("a forward-port in zone `{zname}`, bound to an interface"), "fwc forwards are not limited to an input interface: move the forward-port to the default zone, or limit it to the clients' addresses");
                    continue;
                }
                Bind::From(a) => {
                    if f.from.is_some() {
                        tx.refuse(&f.origin, "a forward-port with a source in a zone bound to a source", "write the forward by hand");
                        continue;
                    }
                    f.from = Some(a.clone());
                }
            }
            if tx.out.forwards.iter().any(|x| x.name == f.name) {
                f.name = tx.unique(&f.name);
            }
            tx.out.forwards.push(f);
        }
    }
    // Policies of other directions.
    for pol in &policies {
        let to_host = pol.egress.iter().any(|e| e == "HOST");
        let from_host = pol.ingress.iter().any(|e| e == "HOST");
        if to_host {
            continue;
        }
        let named: Vec<&String> = pol.ingress.iter().chain(pol.egress.iter()).filter(|z| *z != "ANY" && *z != "HOST").collect();
        if !named.is_empty() {
            tx.refuse(&pol.origin, format!("policy `{}` between named zones ({})", pol.name, named.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")), "fwc imports policies of ANY and HOST only: write its rules by hand with in=/out=");
            continue;
        }
        let mut rules = pol.parts.rules();
        if let Some(r) = policy_target(&mut tx, pol) {
            rules.push(r);
        }
        if from_host { output.rules.extend(rules) } else {
            // Before the zones' forward rules (firewalld's FORWARD_POLICIES_pre) or after.
            if pol.priority < 0 { forward.rules.splice(0..0, rules); } else { forward.rules.extend(rules) }
        }
        if !pol.parts.masquerade.is_empty() || !pol.parts.forwards.is_empty() {
            tx.refuse(&pol.origin, format!("masquerade or forward-port in policy `{}`", pol.name), "put them in the zone");
        }
    }
    // Built-ins of firewalld that fwc has too.
    for (what, why) in [
        ("ct state established,related accept", "fwc adds it itself, first in every chain"),
        ("ct state invalid drop", "fwc's input chain does it itself"),
        ("iifname \"lo\" accept", "fwc accepts loopback itself"),
        ("ct status dnat accept", "fwc accepts the connections of its forwards itself"),
    ] {
        tx.out.merged.push((format!("firewalld's built-in `{what}`"), why.into()));
    }
    // Reverse-path filtering: `yes` (firewalld 1), `strict`, `loose`, `strict-forward`,
    // `loose-forward` (firewalld 2, whose default is strict); only `no` turns it off.
    // firewalld's chain is fwc's rpfilter deny for IPv6 (its exemption of router advertisements
    // and neighbour solicitations included); the `-forward` modes check routed packets only,
    // which a prerouting deny cannot tell apart.
    let rpfilter = cfg.setting("IPv6_rpfilter").unwrap_or_else(|| "yes".into());
    let origin = format!("firewalld.conf IPv6_rpfilter={rpfilter}");
    let mut prerouting = Chain { kind: "prerouting", policy: "accept", reject_with: None, rules: Vec::new(), part: None };
    match rpfilter.to_ascii_lowercase().as_str() {
        "no" | "false" | "0" => {}
        mode @ ("yes" | "true" | "1" | "strict" | "loose") => {
            let mode = if mode == "loose" { "loose" } else { "strict" };
            let cond = Cond { rpfilter: Some(mode.into()), family: Some(Family::V6), ..Default::default() };
            prerouting.rules.push(tx.rule(Verb::Deny, "ipv6-rpfilter", cond, &origin));
            tx.out.notes.push(format!("{origin}: imported as `prerouting {{ deny rpfilter=\"{mode}\" }}` for IPv6 (the proof runs firewalld with it off: its flows are not spoofed)"));
        }
        _ => tx.out.refused.push(Refusal {
            origin,
            what: "reverse-path filtering of routed packets only (IPv6_rpfilter=strict-forward / loose-forward)".into(),
            hint: "fwc's rpfilter deny checks every packet that arrives: set IPv6_rpfilter=strict or loose (or no) in the original, or keep this host on firewalld".into(),
        }),
    }
    if let Some(l) = cfg.setting("LogDenied").filter(|l| l != "off") {
        tx.out.notes.push(format!("firewalld.conf LogDenied={l}: firewalld logs what its zones refuse; add log=#true to the rules you want logged"));
    }
    // Only the default zone's block carries the chain's policy (the others leave it unsaid).
    if inputs.is_empty() {
        inputs.push(Chain { kind: "input", policy: "accept", reject_with: None, rules: Vec::new(), part: None });
    }
    // firewalld's FORWARD drops invalid packets (an unsolicited ICMP error, a redirect) before
    // any zone or policy; fwc's forward chain does not by itself.
    let invalid = tx.rule(Verb::Deny, "forward-invalid", Cond { state: Some("invalid".into()), ..Default::default() }, "firewalld's built-in `ct state invalid drop` (forward)");
    forward.rules.insert(0, invalid);
    tx.out.chains = inputs;
    tx.out.chains.extend([forward, output]);
    if !prerouting.rules.is_empty() {
        tx.out.chains.push(prerouting);
    }
    tx.out
}

/// A policy's target as a final rule (CONTINUE: none).
fn policy_target(tx: &mut Tx, p: &Policy) -> Option<Rule> {
    let verb = match p.target.as_str() {
        "ACCEPT" => Verb::Allow,
        "DROP" => Verb::Deny,
        "REJECT" => Verb::Reject(Some(PROHIBITED.into())),
        _ => return None,
    };
    Some(tx.rule(verb, &format!("policy-{}", p.name), Cond::default(), &p.origin))
}

/// firewalld's ruleset for the proof, without its conntrack helper objects and the rules'
/// `ct helper set` statements (they only let related connections in; the evaluator decides
/// first packets, and fwc loads no helpers: the translation notes each service that has one).
pub fn without_helpers(listing: &serde_json::Value) -> serde_json::Value {
    let mut v = listing.clone();
    if let Some(objs) = v.get_mut("nftables").and_then(serde_json::Value::as_array_mut) {
        objs.retain(|o| o.get("ct helper").is_none());
        for o in objs.iter_mut() {
            if let Some(expr) = o.pointer_mut("/rule/expr").and_then(serde_json::Value::as_array_mut) {
                expr.retain(|e| e.get("ct helper").is_none());
            }
        }
    }
    v
}
