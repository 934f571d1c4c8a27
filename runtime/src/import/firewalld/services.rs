//! firewalld's services as rules: a service's definition read from its XML (the operator's
//! over the system's), its ports grouped by protocol, included services in turn.

use super::*;

/// Ports of a service or an element: (protocol, port or range) in order.
type Ports = Vec<(String, String)>;

/// The ports of a service grouped by protocol: `tcp: 80,443`; the same list for tcp and udp is `both`.
fn grouped(ports: &Ports) -> Vec<(String, String)> {
    let mut by: Vec<(String, Vec<String>)> = Vec::new();
    for (proto, port) in ports {
        match by.iter_mut().find(|(p, _)| p == proto) {
            Some((_, v)) => {
                if !v.contains(port) {
                    v.push(port.clone())
                }
            }
            None => by.push((proto.clone(), vec![port.clone()])),
        }
    }
    if by.len() == 2 && by[0].1 == by[1].1 && by.iter().all(|(p, _)| p == "tcp" || p == "udp") {
        return vec![("both".into(), by[0].1.join(","))];
    }
    by.into_iter().map(|(p, v)| (p, v.join(","))).collect()
}

/// A service's definition: ports, source ports, protocols, destination limits.
#[derive(Debug, Default, Clone)]
pub(super) struct Service {
    ports: Ports,
    sports: Ports,
    protocols: Vec<String>,
    to: Vec<String>,
    helpers: Vec<String>,
    /// Included services: rules of their own (with their own destinations, as firewalld).
    includes: Vec<String>,
}

impl Tx<'_> {
    fn service(&mut self, name: &str, origin: &str) -> Option<Service> {
        let Some((label, text)) = self.cfg.files.get(&format!("services/{name}.xml")).cloned() else {
            self.refuse(origin, format!("service `{name}` is not defined (neither services/{name}.xml nor the system's)"), "define it under services/, or give the system's definitions with --firewalld-lib");
            return None;
        };
        let doc = self.parse(&label, &text)?;
        let mut s = Service::default();
        for n in elements(doc.root_element()) {
            let at = |k: &str| n.attribute(k).unwrap_or_default().to_string();
            match n.tag_name().name() {
                "port" => s.ports.push((at("protocol"), at("port"))),
                "source-port" => s.sports.push((at("protocol"), at("port"))),
                "protocol" => s.protocols.push(at("value")),
                "destination" => {
                    for k in ["ipv4", "ipv6"] {
                        if let Some(a) = n.attribute(k) {
                            s.to.push(addr(a));
                        }
                    }
                }
                "include" => s.includes.push(at("service")),
                "helper" | "module" => s.helpers.push(at("name")),
                _ => {}
            }
        }
        Some(s)
    }

    /// Rules for matching `base` plus each port group of a service, named after it.
    pub(super) fn service_rules(&mut self, name: &str, base: &Cond, verb: &Verb, origin: &str) -> Vec<Rule> {
        self.service_rules_at(name, base, verb, origin, 0)
    }

    fn service_rules_at(&mut self, name: &str, base: &Cond, verb: &Verb, origin: &str, depth: usize) -> Vec<Rule> {
        let Some(s) = self.service(name, origin) else { return Vec::new() };
        let mut included = Vec::new();
        for inc in &s.includes {
            if depth < 8 {
                included.extend(self.service_rules_at(inc, base, verb, origin, depth + 1));
            }
        }
        if !s.helpers.is_empty() {
            self.out.notes.push(format!("{origin}: service `{name}` loads the conntrack helper(s) {}: fwc does not load helpers (related connections need them)", s.helpers.join(", ")));
        }
        let mut base = base.clone();
        if !s.to.is_empty() {
            if base.to.is_some() {
                self.refuse(origin, format!("service `{name}` limits its destination, and so does the rule"), "write the rule with a port instead of the service");
                return Vec::new();
            }
            base.to = Some(Addrs::List(s.to.clone()));
        }
        let mut out = Vec::new();
        let groups = grouped(&s.ports);
        let sgroups = grouped(&s.sports);
        let n = groups.len() + sgroups.len() + s.protocols.len();
        for (proto, ports) in groups {
            let c = Cond { proto: Some(proto.clone()), port: Some(ports), ..base.clone() };
            out.push((if n > 1 { format!("{name}-{proto}") } else { name.to_string() }, c));
        }
        for (proto, ports) in sgroups {
            let c = Cond { proto: Some(proto.clone()), sport: Some(ports), ..base.clone() };
            out.push((format!("{name}-from-{proto}"), c));
        }
        for p in &s.protocols {
            match proto_name(p) {
                Some(pr) => out.push((format!("{name}-{pr}"), Cond { proto: Some(pr.into()), ..base.clone() })),
                None => self.refuse(origin, format!("service `{name}` allows protocol `{p}`: fwc matches tcp, udp, icmp and icmpv6 only"), "leave the protocol out, or allow it outside fwc"),
            }
        }
        for (proto, _) in s.ports.iter().chain(s.sports.iter()) {
            if proto != "tcp" && proto != "udp" {
                self.refuse(origin, format!("service `{name}` has {proto} ports: fwc matches tcp and udp ports only"), "leave them out");
                return Vec::new();
            }
        }
        let mut rules: Vec<Rule> = out.into_iter().map(|(n, c)| self.rule(verb.clone(), &n, c, origin)).collect();
        rules.extend(included);
        rules
    }
}
