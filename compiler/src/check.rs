//! Semantic checks over a parsed ruleset: names unique per kind, set references that exist,
//! one forward per (host, proto, port), selectors that select something, address families
//! that the kernel path can translate, and values that only make sense together. Errors
//! point at the exact span and name the rule; all of them are reported in one run.

use std::collections::BTreeMap;

use crate::artifacts::QOS_MAX_CLASS_ID;
use crate::diag::{Diagnostic, Diagnostics};
use crate::model::*;
use crate::place::select::place_forward;
use crate::read::source::SourceMap;
use crate::suggest::did_you_mean;

/// Most ports one userspace forward may listen on (each is a socket).
pub const MAX_USERSPACE_PORTS: u32 = 1024;

/// Check `rs`; `Ok` carries the warnings, `Err` all errors and warnings.
pub fn check(map: &SourceMap, rs: &Ruleset) -> Result<Diagnostics, Diagnostics> {
    // A dynamic set holds whatever other programs add at run time: either family.
    let set_families = rs
        .sets
        .iter()
        .map(|s| (s.name.value.as_str(), if s.dynamic.is_some() { Some(Family::Both) } else { family_of(s.elements.iter().map(|e| e.is_ipv4())) }))
        .collect();
    let mut c = Checker { map, rs, set_families, out: Diagnostics::default() };
    c.hosts();
    c.sets();
    c.chains();
    c.forwards();
    c.shapes();
    c.snats();
    c.selectors();
    c.out.extend(crate::features::schedule::check(map, rs)); // schedules
    if c.out.has_errors() {
        Err(c.out)
    } else {
        Ok(c.out)
    }
}

struct Checker<'a> {
    map: &'a SourceMap,
    rs: &'a Ruleset,
    /// Declared sets and the address families of their elements.
    set_families: BTreeMap<&'a str, Option<Family>>,
    out: Diagnostics,
}

impl Checker<'_> {
    fn err(&mut self, code: &str, rule: &str, msg: impl Into<String>, span: Span, label: &str, help: impl Into<String>) {
        self.out.push(Diagnostic::error(code, msg).at(self.map, span, label).rule(rule).help(help));
    }

    fn warn(&mut self, code: &str, rule: &str, msg: impl Into<String>, span: Span, label: &str, help: impl Into<String>) {
        self.out.push(Diagnostic::warning(code, msg).at(self.map, span, label).rule(rule).help(help));
    }

    /// Report the second and later uses of a name within one kind. Items are (the word the
    /// rule starts with, e.g. `allow`, and its name).
    fn unique<'n>(&mut self, kind: &str, names: impl Iterator<Item = (&'n str, &'n Spanned<String>)>) {
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for (word, n) in names {
            if let Some(first) = seen.get(n.value.as_str()) {
                let f = self.map.file(first.file);
                let first = format!("{} line {}", f.path, crate::diag::line_col(&f.text, first.offset as usize).0);
                let rule = format!("{word} \"{}\"", n.value);
                self.err(
                    "duplicate-name",
                    &rule,
                    format!("{kind} name \"{}\" is used twice", n.value),
                    n.span,
                    "second use",
                    format!("names are unique per kind (first use: {first}); rename one of them"),
                );
            } else {
                seen.insert(&n.value, n.span);
            }
        }
    }

    fn hosts(&mut self) {
        self.unique("host", self.rs.hosts.iter().map(|h| ("host", &h.name)));
    }

    fn sets(&mut self) {
        self.unique("set", self.rs.sets.iter().map(|s| ("set", &s.name)));
        for s in &self.rs.sets {
            if s.elements.is_empty() && s.dynamic.is_none() {
                let rule = format!("set \"{}\"", s.name.value);
                self.warn("empty-set", &rule, "this set is empty", s.name.span, "no elements", "a rule matching an empty set never matches; add elements or remove the set");
            }
        }
    }

    fn addr(&mut self, rule: &str, m: &Option<Spanned<AddrMatch>>) {
        let Some(m) = m else { return };
        if let AddrMatch::Set(name) = &m.value {
            if !self.set_families.contains_key(name.as_str()) {
                let help = match did_you_mean(name, self.rs.sets.iter().map(|s| s.name.value.as_str())) {
                    Some(s) => format!("did you mean \"@{s}\"?"),
                    None => format!("declare it: set \"{name}\" \"192.0.2.0/24\""),
                };
                self.err("unknown-set", rule, format!("set \"{name}\" is not declared"), m.span, "unknown set", help);
            }
        }
    }

    /// `tcp-flags=` needs `proto=tcp`; `icmp-code=` one ICMP type (a code means something only
    /// within its type).
    fn header_matches(&mut self, rule: &str, r: &FilterRule) {
        if let Some(f) = &r.tcp_flags {
            if r.proto.as_ref().is_none_or(|p| p.value != Proto::Tcp) {
                let what = match &r.proto {
                    Some(p) => format!("tcp-flags on a proto={} rule", p.value.as_str()),
                    None => "tcp-flags without proto=tcp".to_string(),
                };
                self.err("tcp-flags-without-tcp", rule, what, f.span, "TCP flags need proto=tcp", "add proto=tcp (TCP flags exist only in TCP packets)");
            }
        }
        if let Some(c) = &r.icmp_codes {
            if r.icmp_types.as_ref().is_none_or(|t| t.value.len() != 1) {
                let help = "name one ICMP type, e.g. icmp-type=\"destination-unreachable\" icmp-code=\"frag-needed\"; for codes of several types write one rule per type";
                self.err("icmp-code-without-one-type", rule, "icmp-code needs exactly one icmp-type", c.span, "codes of which type?", help);
            }
        }
    }

    fn ports_need_proto(&mut self, rule: &str, proto: Option<&Spanned<Proto>>, ports: Option<&Spanned<Vec<PortRange>>>, key: &str) {
        let Some(ports) = ports else { return };
        match proto {
            None => self.err(
                "port-without-proto",
                rule,
                format!("`{key}` needs a protocol"),
                ports.span,
                "ports without proto",
                "add proto=\"tcp\", \"udp\" or \"both\"",
            ),
            Some(p) if matches!(p.value, Proto::Icmp | Proto::Icmpv6) => self.err(
                "port-with-icmp",
                rule,
                format!("{} has no ports", p.value.as_str()),
                ports.span,
                "ports on an ICMP rule",
                "remove the port, or use proto=\"tcp\"/\"udp\"",
            ),
            Some(p) if !p.value.has_ports() => self.err(
                "port-without-ports",
                rule,
                format!("proto={} has no ports fwc matches", p.value.as_str()),
                ports.span,
                "ports on a protocol without them",
                "remove the port (the rule then matches every packet of the protocol), or use proto=\"tcp\"/\"udp\"/\"both\"",
            ),
            _ => {}
        }
    }

    fn chains(&mut self) {
        let rules: Vec<&FilterRule> = self.rs.chains.iter().flat_map(|c| c.rules.iter()).collect();
        self.unique("filter rule", rules.iter().map(|r| (r.action.as_str(), &r.name)));
        for kind in [ChainKind::Input, ChainKind::Forward, ChainKind::Output, ChainKind::Containers] {
            let mut policy: Option<&Spanned<Policy>> = None;
            for c in self.rs.chains.iter().filter(|c| c.kind == kind) {
                if let (Some(first), Some(p)) = (policy, &c.policy) {
                    if first.value != p.value {
                        let rule = format!("{} chain", kind.as_str());
                        self.err(
                            "conflicting-policy",
                            &rule,
                            format!("the {} chain's policy is set twice, differently", kind.as_str()),
                            p.span,
                            "conflicts with an earlier block",
                            "give the policy in one block only",
                        );
                    }
                }
                policy = policy.or(c.policy.as_ref());
            }
        }
        for r in rules {
            let rule = format!("{} \"{}\"", r.action.as_str(), r.name.value);
            self.addr(&rule, &r.from);
            self.addr(&rule, &r.to);
            self.ports_need_proto(&rule, r.proto.as_ref(), r.ports.as_ref(), "port");
            self.ports_need_proto(&rule, r.proto.as_ref(), r.sports.as_ref(), "sport");
            if let (ChainKind::Output, Some(i)) = (r.chain, &r.iif) {
                self.err("iif-in-output", &rule, "locally generated packets have no input interface", i.span, "`in` in the output chain", "use `out=` in the output chain");
            }
            if let (ChainKind::Input, Some(o)) = (r.chain, &r.oif) {
                self.err("oif-in-input", &rule, "packets for this host have no output interface", o.span, "`out` in the input chain", "use `in=` in the input chain");
            }
            if let (ChainKind::Input, Some(st)) = (r.chain, &r.state) {
                if st.value.len() > 1 && st.value.contains(&crate::model::CtState::Invalid) {
                    self.err(
                        "invalid-with-other-states",
                        &rule,
                        "in the input chain, `state=\"invalid\"` is decided before fwc's built-in invalid drop and every other state after it",
                        st.span,
                        "`invalid` with other states",
                        "write two rules: one with state=\"invalid\" alone, one with the other states",
                    );
                }
            }
            self.header_matches(&rule, r);
            self.family_mix(&rule, &r.from, &r.to);
            if let (ChainKind::Containers, Some(p)) = (r.chain, &r.proto) {
                if !p.value.has_ports() {
                    self.err(
                        "containers-proto",
                        &rule,
                        format!("containers rules judge published ports; proto={} has no ports", p.value.as_str()),
                        p.span,
                        "no published port",
                        "use proto=tcp, udp or both (ICMP to containers is judged in the forward chain)",
                    );
                }
            }
            if let Some(p) = &r.proto {
                let fam = self.match_family(&r.from).or(self.match_family(&r.to));
                let clash = match (p.value, fam) {
                    (Proto::Icmp, Some(Family::V6)) => Some("icmp is IPv4; use proto=\"icmpv6\" for IPv6 addresses"),
                    (Proto::Icmpv6, Some(Family::V4)) => Some("icmpv6 is IPv6; use proto=\"icmp\" for IPv4 addresses"),
                    (Proto::Other(crate::model::header::IPPROTO_AH), Some(Family::V6)) => {
                        Some("proto=ah matches IPv4 only: in IPv6, AH is an extension header the kernel's protocol match skips (as ip6tables' -p ah)")
                    }
                    _ => None,
                };
                if let Some(help) = clash {
                    self.err("family-mismatch", &rule, "protocol and addresses are of different IP families", p.span, "this protocol", help);
                }
            }
        }
    }

    fn match_family(&self, m: &Option<Spanned<AddrMatch>>) -> Option<Family> {
        match &m.as_ref()?.value {
            AddrMatch::Literal(l) => family_of(l.iter().map(|e| e.is_ipv4())),
            AddrMatch::Set(n) => *self.set_families.get(n.as_str())?,
        }
    }

    /// `from` only IPv4 and `to` only IPv6 (or the reverse) can never match.
    fn family_mix(&mut self, rule: &str, from: &Option<Spanned<AddrMatch>>, to: &Option<Spanned<AddrMatch>>) {
        if let (Some(a), Some(b), Some(to_m)) = (self.match_family(from), self.match_family(to), to) {
            if a != b && a != Family::Both && b != Family::Both {
                self.err("family-mismatch", rule, "`from` and `to` are of different IP families: this rule can never match", to_m.span, "other family than `from`", "split it into an IPv4 and an IPv6 rule");
            }
        }
    }

    fn forwards(&mut self) {
        self.unique("forward", self.rs.forwards.iter().map(|f| ("forward", &f.name)));
        let shared = crate::place::select::sni_listeners_any_host(self.rs);
        for f in &self.rs.forwards {
            let rule = format!("forward \"{}\"", f.name.value);
            self.addr(&rule, &f.from);
            let on = shared.get(f.name.value.as_str());
            let (backends, _) = place_forward(f, on);
            let userspace = backends.contains(&crate::artifacts::BackendKind::Userspace);
            if let (true, Some(m)) = (userspace, &f.from) {
                if let AddrMatch::Set(name) = &m.value {
                    if self.rs.sets.iter().any(|s| &s.name.value == name && s.dynamic.is_some()) {
                        self.err(
                            "dynamic-set-in-userspace-forward",
                            &rule,
                            format!("the userspace forwarder cannot follow dynamic set \"{name}\""),
                            m.span,
                            "dynamic set in from=",
                            "the forwarder reads from= once per apply, a dynamic set changes at run time; deny the set in the input chain instead (input { deny \"banned\" from=\"@banned\" } stops userspace forwards too)",
                        );
                    }
                }
            }
            let listen_len = f.listen.ports.len();
            for t in f.targets.value.iter() {
                if let Some(tp) = t.ports {
                    if !tp.is_single() && tp.len() != listen_len {
                        self.err(
                            "port-range-mismatch",
                            &rule,
                            format!("target ports {tp} ({} ports) do not match listen ports {} ({listen_len} ports)", tp.len(), f.listen.ports),
                            f.targets.span,
                            "different length",
                            "a target range maps one to one onto the listen range: give it the same length, a single port, or none (same port)",
                        );
                    }
                }
            }
            if f.backend.value == crate::model::BackendChoice::Kernel && userspace {
                let (_, reason) = place_forward(&ForwardRule { backend: Spanned::new(BackendChoice::Auto, f.backend.span), ..f.clone() }, on);
                self.err("kernel-impossible", &rule, format!("backend=\"kernel\" was asked for, but {reason}"), f.backend.span, "kernel not possible", "remove backend=\"kernel\" or the option that needs userspace");
            }
            if let (true, Some(i)) = (userspace, &f.iif) {
                let (_, reason) = place_forward(f, on);
                self.err(
                    "in-on-userspace-forward",
                    &rule,
                    format!("in= restricts the kernel path's DNAT, but this forward is carried by the userspace forwarder: {reason}"),
                    i.span,
                    "input interface",
                    "drop what needs userspace (the message says what), or restrict the listener in the input chain: allow … in=… before a deny of its port",
                );
            }
            if userspace && listen_len > MAX_USERSPACE_PORTS {
                self.err(
                    "too-many-ports",
                    &rule,
                    format!("a userspace forward listens on one socket per port; {listen_len} ports is more than {MAX_USERSPACE_PORTS}"),
                    f.listen.span,
                    "port range",
                    "use IP-literal targets (kernel path) for large port ranges, or split the range",
                );
            }
            if !userspace {
                self.kernel_families(&rule, f);
            }
            if let Some(s) = &f.sni {
                self.sni(&rule, f, s);
            }
            if let (Some(h), 1) = (&f.health, f.targets.value.len()) {
                self.err(
                    "health-check-one-target",
                    &rule,
                    "health-check on a forward with one target: there is nothing to fail over to",
                    h.span,
                    "one target",
                    "give several targets (to=\"10.0.0.5:80,10.0.0.6:80\"), or remove health-check",
                );
            }
            // quota: counted in the kernel by the forward's ports; the routes of an
            // SNI listener share one port, so the kernel cannot tell their bytes apart.
            if let (Some(q), true) = (&f.quota, f.sni.is_some() || on.is_some()) {
                self.err(
                    "quota-on-sni-route",
                    &rule,
                    "quota= on a forward that shares its listen port with SNI routes: the kernel counts a quota by port and cannot tell the routes apart",
                    q.span,
                    "quota on an SNI route",
                    "give the forward a listen port of its own, or remove quota=",
                );
            }
            if let (Some(b), None, None) = (&f.burst, &f.up, &f.down) {
                self.err("burst-without-rate", &rule, "burst without a bandwidth cap", b.span, "burst alone", "add bandwidth=\"100mbit\" (or up=/down=), or remove burst");
            }
        }
        self.listen_conflicts();
    }

    /// `sni=` routes TLS over TCP on one port.
    fn sni(&mut self, rule: &str, f: &ForwardRule, s: &Spanned<String>) {
        if f.proto != ForwardProto::Tcp {
            self.err(
                "sni-needs-tcp",
                rule,
                format!("sni= routes TLS connections by server name, but this forward is proto={}", f.proto.as_str()),
                s.span,
                "TCP only",
                "remove proto= (tcp is the default) or sni=; QUIC (TLS over UDP) is not routed by name",
            );
        }
        if !f.listen.ports.is_single() {
            self.err(
                "sni-port-range",
                rule,
                format!("sni= needs a single listen port, not the range {}", f.listen.ports),
                f.listen.span,
                "port range",
                "forwards share one port by server name: give this forward one port, e.g. listen=\":443\"",
            );
        }
    }

    /// The kernel path translates within one family: an IPv4 listen address cannot DNAT to IPv6.
    fn kernel_families(&mut self, rule: &str, f: &ForwardRule) {
        let fam = family_of(f.targets.value.iter().filter_map(|t| match t.host {
            TargetHost::Ip(ip) => Some(ip.is_ipv4()),
            TargetHost::Dns(_) => None,
        }));
        if let (Some(listen), Some(fam)) = (f.listen.addr, fam) {
            let lf = if listen.is_ipv4() { Family::V4 } else { Family::V6 };
            if fam != lf {
                self.err(
                    "family-mismatch",
                    rule,
                    format!("listen address {listen} is {} but the target is {}: the kernel path cannot translate between IPv4 and IPv6", lf.name(), fam.name()),
                    f.targets.span,
                    "other family",
                    "use a target of the same family, listen on \":port\" (both families), or set backend=\"userspace\" to proxy across families",
                );
            }
        }
        if f.targets.value.len() > 1 && fam == Some(Family::Both) {
            self.err(
                "family-mismatch",
                rule,
                "a kernel forward balances within one family, but these targets mix IPv4 and IPv6",
                f.targets.span,
                "mixed families",
                "make two forwards (one per family, different listen addresses), or set backend=\"userspace\"",
            );
        }
    }

    /// Two forwards of one host on the same proto and overlapping ports (and addresses).
    /// A sweep over listen ranges sorted by start: O(n log n), not O(n²).
    fn listen_conflicts(&mut self) {
        let hosts: Vec<Host> = if self.rs.hosts.is_empty() { vec![crate::place::select::implicit_host()] } else { self.rs.hosts.clone() };
        let mut reported = std::collections::BTreeSet::new();
        for h in &hosts {
            for proto in [ForwardProto::Tcp, ForwardProto::Udp] {
                let mut fs: Vec<&ForwardRule> = self
                    .rs
                    .forwards
                    .iter()
                    .filter(|f| (f.proto == proto || f.proto == ForwardProto::Both) && f.on.as_ref().is_none_or(|s| s.value.matches(h)))
                    .collect();
                fs.sort_by_key(|f| (f.listen.ports.lo, f.span));
                let mut active: Vec<&ForwardRule> = Vec::new();
                for a in fs {
                    active.retain(|b| b.listen.ports.hi >= a.listen.ports.lo);
                    for b in &active {
                        let same_addr = match (a.listen.addr, b.listen.addr) {
                            (Some(x), Some(y)) => x == y,
                            _ => true,
                        };
                        // Report the later one in the files, pointing at the earlier.
                        let (first, second) = if b.span <= a.span { (*b, a) } else { (a, *b) };
                        // Forwards with sni= share a TCP listener written the same way.
                        let share = proto == ForwardProto::Tcp
                            && a.listen.value == b.listen.value
                            && a.listen.ports.is_single()
                            && (a.sni.is_some() || b.sni.is_some());
                        if share {
                            if let (Some(x), Some(y)) = (&first.sni, &second.sni) {
                                if x.value == y.value && reported.insert((second.name.value.clone(), first.name.value.clone())) {
                                    let rule = format!("forward \"{}\"", second.name.value);
                                    self.err(
                                        "duplicate-sni",
                                        &rule,
                                        format!(
                                            "sni \"{}\" on tcp port {} is already routed to forward \"{}\" on host \"{}\"",
                                            y.value, second.listen.ports, first.name.value, h.name.value
                                        ),
                                        y.span,
                                        "same server name",
                                        "each server name goes to one forward per listen address; remove one, or restrict one of them to other hosts with on=…",
                                    );
                                }
                            }
                            continue;
                        }
                        if same_addr && reported.insert((second.name.value.clone(), first.name.value.clone())) {
                            let rule = format!("forward \"{}\"", second.name.value);
                            self.err(
                                "listen-conflict",
                                &rule,
                                format!(
                                    "listens on {} port {} which forward \"{}\" already uses on host \"{}\"",
                                    proto.as_str(),
                                    second.listen.ports,
                                    first.name.value,
                                    h.name.value
                                ),
                                second.listen.span,
                                "port already taken",
                                "use another port, or restrict one of them to other hosts with on=…",
                            );
                        }
                    }
                    active.push(a);
                }
            }
        }
    }

    fn shapes(&mut self) {
        self.unique("shape", self.rs.shapes.iter().map(|s| ("shape", &s.name)));
        for s in &self.rs.shapes {
            let rule = format!("shape \"{}\"", s.name.value);
            self.addr(&rule, &s.from);
            self.addr(&rule, &s.to);
            self.ports_need_proto(&rule, s.proto.as_ref(), s.ports.as_ref(), "port");
            self.family_mix(&rule, &s.from, &s.to);
            if s.from.is_none() && s.to.is_none() && s.proto.is_none() && s.devs.is_empty() {
                self.err("shape-matches-everything", &rule, "this shape matches all traffic on every interface", s.name.span, "no match given", "say what to shape: from=, to=, proto=/port= or dev=");
            }
            // quota: a shape's quota is counted in postrouting, where the kernel
            // cannot reject.
            if let Some(q) = s.quota.as_ref().filter(|q| q.value.over == crate::features::quota::OverQuota::Reject) {
                self.err(
                    "quota-reject-on-shape",
                    &rule,
                    "over-quota=\"reject\" on a shape: shapes are applied in postrouting, where the kernel cannot reject",
                    q.span,
                    "reject",
                    "use over-quota=\"drop\" (the default) or a fallback rate such as over-quota=\"1mbit\"",
                );
            }
        }
        let capped = self.rs.forwards.iter().filter(|f| f.up.is_some() || f.down.is_some()).count() + self.rs.shapes.len();
        if capped as u32 >= QOS_MAX_CLASS_ID / 2 - 1 {
            let span = self.rs.shapes.first().map(|s| s.span).or(self.rs.forwards.first().map(|f| f.span)).unwrap_or_default();
            self.err("too-many-classes", "qos", format!("{capped} capped rules; at most {} fit in the QoS mark space", QOS_MAX_CLASS_ID / 2 - 2), span, "here", "merge caps into shape rules that cover several addresses");
        }
    }

    /// `masquerade` / `snat`: set references, ports with a protocol, one address family.
    fn snats(&mut self) {
        self.unique("source NAT rule", self.rs.snats.iter().map(|s| (s.kind.as_str(), &s.name)));
        for s in &self.rs.snats {
            let rule = format!("{} \"{}\"", s.kind.as_str(), s.name.value);
            self.addr(&rule, &s.from);
            self.addr(&rule, &s.from_except);
            self.addr(&rule, &s.dst);
            self.ports_need_proto(&rule, s.proto.as_ref(), s.ports.as_ref(), "port");
            self.family_mix(&rule, &s.from, &s.dst);
            let Some(to) = &s.to_addr else { continue };
            let fam = if to.value.is_ipv4() { Family::V4 } else { Family::V6 };
            let proto_fam = match s.proto.as_ref().map(|p| p.value) {
                Some(Proto::Icmp) => Some(Family::V4),
                Some(Proto::Icmpv6) => Some(Family::V6),
                _ => None,
            };
            let clash = [("from", self.match_family(&s.from)), ("dst", self.match_family(&s.dst)), ("proto", proto_fam)]
                .into_iter()
                .find(|(_, f)| matches!(f, Some(f) if *f != fam && *f != Family::Both));
            if let Some((key, Some(other))) = clash {
                self.err(
                    "family-mismatch",
                    &rule,
                    format!("to={} is {} but {key}= is {}: this snat can never translate", to.value, fam.name(), other.name()),
                    to.span,
                    "other family",
                    "snat translates within one address family: write one snat per family, each with a to= of its family",
                );
            }
        }
        self.snat_without_routing();
    }

    /// A `masquerade`/`snat` of other machines' traffic (`from=`) on a host whose forward
    /// chain lets nothing through (closed policy, no allow, no kernel forward): nothing is
    /// ever routed to it.
    fn snat_without_routing(&mut self) {
        let hosts: Vec<Host> = if self.rs.hosts.is_empty() { vec![crate::place::select::implicit_host()] } else { self.rs.hosts.clone() };
        let mut warned = std::collections::BTreeSet::new();
        for h in &hosts {
            let plan = crate::place::select::plan_host(self.rs, h);
            let Some(fwd) = plan.chains.iter().find(|c| c.kind == ChainKind::Forward) else { continue };
            let routes = !fwd.policy.is_closed() || fwd.rules.iter().any(|r| r.action == Action::Allow) || !plan.kernel_forwards.is_empty();
            if routes {
                continue;
            }
            for s in plan.snats.iter().filter(|s| s.from.is_some()) {
                if !warned.insert((s.kind, s.name.value.clone())) {
                    continue;
                }
                let rule = format!("{} \"{}\"", s.kind.as_str(), s.name.value);
                self.warn(
                    "snat-nothing-routed",
                    &rule,
                    format!(
                        "{} \"{}\" translates routed traffic, but host \"{}\" forwards nothing: its forward chain is policy={} with no allow rule",
                        s.kind.as_str(),
                        s.name.value,
                        h.name.value,
                        fwd.policy.as_str()
                    ),
                    s.name.span,
                    "nothing reaches it",
                    format!(
                        "allow the traffic in the forward chain, e.g. forward policy={} {{ allow \"{}\" from=… out=… }} (and enable net.ipv4.ip_forward), or remove this rule",
                        fwd.policy.as_str(),
                        s.name.value
                    ),
                );
            }
        }
    }

    /// A selector that matches no declared host is probably a typo: warn.
    fn selectors(&mut self) {
        let hosts: Vec<Host> = if self.rs.hosts.is_empty() { vec![crate::place::select::implicit_host()] } else { self.rs.hosts.clone() };
        let mut sels: Vec<(String, &Spanned<Selector>)> = Vec::new();
        for r in self.rs.chains.iter().flat_map(|c| &c.rules) {
            if let Some(s) = &r.on {
                sels.push((format!("{} \"{}\"", r.action.as_str(), r.name.value), s));
            }
        }
        for f in &self.rs.forwards {
            if let Some(s) = &f.on {
                sels.push((format!("forward \"{}\"", f.name.value), s));
            }
        }
        for sh in &self.rs.shapes {
            if let Some(s) = &sh.on {
                sels.push((format!("shape \"{}\"", sh.name.value), s));
            }
        }
        for sn in &self.rs.snats {
            if let Some(s) = &sn.on {
                sels.push((format!("{} \"{}\"", sn.kind.as_str(), sn.name.value), s));
            }
        }
        for (rule, s) in sels {
            if !hosts.iter().any(|h| s.value.matches(h)) {
                let names: Vec<&str> = hosts.iter().map(|h| h.name.value.as_str()).collect();
                let help = match &s.value {
                    Selector::Name(n) => match did_you_mean(n, names.iter().copied()) {
                        Some(m) => format!("did you mean on=\"{m}\"?"),
                        None => format!("hosts: {}", names.join(", ")),
                    },
                    Selector::Labels(_) => "no host has all these labels; check `labels` in the host blocks".into(),
                };
                self.warn("selector-matches-nothing", &rule, "this rule's on= selects no host, so it is never applied", s.span, "selects no host", help);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
    Both,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
            Family::Both => "IPv4 and IPv6",
        }
    }
}

fn family_of(is_v4: impl Iterator<Item = bool>) -> Option<Family> {
    let (mut v4, mut v6) = (false, false);
    for f in is_v4 {
        if f {
            v4 = true
        } else {
            v6 = true
        }
    }
    match (v4, v6) {
        (true, true) => Some(Family::Both),
        (true, false) => Some(Family::V4),
        (false, true) => Some(Family::V6),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    fn warnings(kdl: &str) -> Vec<String> {
        let tree = crate::read::source::SourceTree::from_files([("fwc.kdl".to_string(), kdl.to_string())]);
        crate::compile(&tree, None, None).unwrap_or_else(|d| panic!("{}", d.render(false))).1 .0.iter().map(|d| format!("{} {}", d.code, d.message)).collect()
    }

    /// Source NAT of other machines' traffic on a host that routes nothing warns; an allow in
    /// forward, a kernel forward or an open forward chain each make it quiet.
    #[test]
    fn snat_on_a_host_that_routes_nothing_warns() {
        let nat = "masquerade \"lan\" from=\"192.168.1.0/24\" out=eth0\nsnat \"own\" out=eth0 to=\"198.18.0.1\"\n";
        let w = warnings(&format!("fwc 1\nforward policy=reject {{\n}}\n{nat}"));
        let hits: Vec<&String> = w.iter().filter(|w| w.contains("snat-nothing-routed")).collect();
        assert_eq!(hits.len(), 1, "{w:?}");
        assert!(hits[0].contains("masquerade \"lan\" translates routed traffic, but host \"localhost\" forwards nothing"), "{w:?}");
        for quiet in [
            format!("fwc 1\nforward policy=drop {{\n    allow \"lan\" in=eth1\n}}\n{nat}"),
            format!("fwc 1\nforward policy=drop {{\n}}\nforward \"web\" listen=\":8080\" to=\"10.0.0.5:80\"\n{nat}"),
            format!("fwc 1\n{nat}"),
        ] {
            let w = warnings(&quiet);
            assert!(!w.iter().any(|w| w.contains("snat-nothing-routed")), "{quiet}\n{w:?}");
        }
    }
}
