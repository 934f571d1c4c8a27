//! firewalld's rich rules (`<rule>` of a zone or policy) as fwc rules: family, source and
//! destination, service/port/protocol/ICMP elements, log, limit and the action, in the
//! section of the zone their priority puts them.

use roxmltree::Node;

use super::*;

impl Tx<'_> {
    pub(super) fn rich(&mut self, n: Node, origin: &str, p: &mut Parts) {
        let family = match n.attribute("family") {
            Some("ipv4") => Some(Family::V4),
            Some("ipv6") => Some(Family::V6),
            _ => None,
        };
        let priority: i64 = n.attribute("priority").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut cond = Cond { family, ..Default::default() };
        let mut what: Option<Node> = None;
        let mut log: Option<Node> = None;
        let mut action: Option<Node> = None;
        let mut words: Vec<String> = Vec::new();
        for c in elements(n) {
            match c.tag_name().name() {
                t @ ("source" | "destination") => {
                    if c.attribute("invert").is_some_and(|v| v == "true" || v == "yes") {
                        self.refuse(origin, format!("a rich rule with an inverted {t} (`not`)"), "fwc has no negated addresses: list the addresses the rule is for, or use a set");
                        return;
                    }
                    let dir = if t == "source" { "from" } else { "to" };
                    let a = if let Some(a) = c.attribute("address") {
                        words.push(format!("{dir}-{}", addr(a)));
                        Addrs::List(vec![addr(a)])
                    } else if let Some(s) = c.attribute("ipset") {
                        words.push(format!("{dir}-{s}"));
                        Addrs::Set(s.to_string())
                    } else {
                        self.refuse(origin, format!("a rich rule's {t} by MAC address"), "fwc matches addresses and sets: use the host's address");
                        return;
                    };
                    if t == "source" {
                        cond.from = Some(a)
                    } else {
                        cond.to = Some(a)
                    }
                }
                "service" | "port" | "protocol" | "icmp-block" | "icmp-type" | "masquerade" | "forward-port" | "source-port" => what = Some(c),
                "log" => log = Some(c),
                "accept" | "reject" | "drop" => action = Some(c),
                "audit" => {
                    self.refuse(origin, "a rich rule with audit", "fwc writes no audit records: use log instead");
                    return;
                }
                "nflog" => {
                    self.refuse(origin, "a rich rule with nflog", "fwc logs to the kernel log: use log instead");
                    return;
                }
                other => {
                    self.refuse(origin, format!("a rich rule with {other}{}", if other == "mark" { " (packet marks)" } else { "" }), "fwc has no form for it: leave it out, or add it by hand");
                    return;
                }
            }
        }
        // firewalld limits a rich rule to its family only through its addresses (and ICMP types).
        if cond.from.is_none() && cond.to.is_none() {
            if what.is_some_and(|w| !matches!(w.tag_name().name(), "icmp-block" | "icmp-type" | "masquerade" | "forward-port")) {
                cond.family = None;
            }
        }
        let prefix = if words.is_empty() { String::new() } else { format!("{}-", words.join("-")) };
        // Masquerade, forward ports and ICMP blocks are whole rules of their own.
        if let Some(w) = what {
            match w.tag_name().name() {
                "masquerade" => {
                    p.masquerade.push((cond.from.clone(), cond.family.or(Some(Family::V4)), origin.to_string()));
                    return;
                }
                "forward-port" => {
                    self.forward_port(w, cond.from.clone(), origin, p);
                    return;
                }
                "icmp-block" => {
                    let ty = w.attribute("name").unwrap_or_default().to_string();
                    let r = self.icmp_rules(&ty, &cond, Verb::Reject(Some("admin-prohibited".into())), &format!("{prefix}block-{ty}"), origin);
                    push(p, priority, "deny", r);
                    return;
                }
                _ => {}
            }
        }
        let (verb, section) = match action.map(|a| a.tag_name().name()) {
            Some("accept") => (Verb::Allow, "allow"),
            Some("drop") => (Verb::Deny, "deny"),
            Some("reject") => {
                let t = action.and_then(|a| a.attribute("type"));
                match t {
                    // nft's plain `reject` (firewalld's): ICMP port-unreachable, TCP too.
                    None => (Verb::Reject(Some("port-unreachable".into())), "deny"),
                    Some(t) => match reject_with(t) {
                        Some(w) => {
                            if matches!(t, "icmp-host-prohibited" | "icmp-net-prohibited") {
                                self.out.notes.push(format!("{origin}: reject type {t} imported as reject-with=\"{w}\" (another ICMP code, the same refusal)"));
                            }
                            (Verb::Reject(Some(w.into())), "deny")
                        }
                        None => {
                            self.refuse(origin, format!("reject type `{t}`"), "use one of tcp-reset, icmp-port-unreachable, icmp-host-unreachable, icmp-net-unreachable, icmp-admin-prohibited");
                            return;
                        }
                    },
                }
            }
            _ => (Verb::Log, "log"),
        };
        if action.is_none() && log.is_none() {
            self.refuse(origin, "a rich rule with neither an action nor log", "firewalld ignores it too: add accept, reject or drop");
            return;
        }
        let limit = |x: Node| elements(x).find(|c| c.tag_name().name() == "limit").and_then(|l| l.attribute("value")).map(str::to_string);
        let action_rate = match action.and_then(limit) {
            Some(v) => match rate(&v) {
                Some(r) if verb == Verb::Allow => Some(r),
                _ => {
                    self.refuse(origin, format!("a limit of {v} on a rich rule's {}", action.map(|a| a.tag_name().name()).unwrap_or_default()), "fwc rates accepts only (rate=): drop the limit");
                    return;
                }
            },
            None => None,
        };
        // What the rule matches, as one or more conditions with a name each.
        let base_name = |t: &str| format!("{}{prefix}{t}", match &verb {
            Verb::Allow | Verb::Log | Verb::ClampMss(_) => "",
            Verb::Deny => "deny-",
            Verb::Reject(_) => "reject-",
        });
        let mut matches: Vec<(String, Cond)> = Vec::new();
        match what {
            None => matches.push((base_name("all").replace("-all", "").trim_end_matches('-').to_string(), cond.clone())),
            Some(w) => {
                let at = |k: &str| w.attribute(k).unwrap_or_default().to_string();
                match w.tag_name().name() {
                    "service" => {
                        // Named by the service; the verb and name come below.
                        let rules = self.service_rules(&at("name"), &cond, &Verb::Allow, origin);
                        for r in rules {
                            self.names.remove(&r.name);
                            matches.push((base_name(&r.name), r.cond));
                        }
                    }
                    "port" => matches.push((base_name(&format!("{}-{}", at("protocol"), at("port"))), Cond { proto: Some(at("protocol")), port: Some(at("port")), ..cond.clone() })),
                    "source-port" => matches.push((base_name(&format!("sport-{}-{}", at("protocol"), at("port"))), Cond { proto: Some(at("protocol")), sport: Some(at("port")), ..cond.clone() })),
                    "protocol" => match proto_name(&at("value")) {
                        Some(pr) => matches.push((base_name(pr), Cond { proto: Some(pr.into()), ..cond.clone() })),
                        None => {
                            self.refuse(origin, format!("protocol `{}`: fwc matches tcp, udp, icmp and icmpv6 only", at("value")), "leave it out");
                            return;
                        }
                    },
                    "icmp-type" => {
                        let ty = at("name");
                        let r = self.icmp_rules(&ty, &cond, verb.clone(), &base_name(&ty), origin);
                        for r in r {
                            self.names.remove(&r.name);
                            matches.push((r.name, r.cond));
                        }
                    }
                    _ => {}
                }
            }
        }
        for (_, c) in &matches {
            if let Some(pr) = &c.proto {
                if (c.port.is_some() || c.sport.is_some()) && pr != "tcp" && pr != "udp" && pr != "both" {
                    self.refuse(origin, format!("{pr} ports: fwc matches tcp and udp ports only"), "leave the rule out");
                    return;
                }
            }
            if verb == Verb::Reject(Some("tcp-reset".into())) && c.proto.as_deref() != Some("tcp") {
                self.refuse(origin, "reject type tcp-reset on a rule that is not for tcp only", "firewalld resets TCP only: write the rule for tcp");
                return;
            }
        }
        if let Some(l) = log {
            let prefix = l.attribute("prefix").map(str::to_string);
            let lrate = match limit(l) {
                Some(v) => match rate(&v) {
                    Some(r) => Some(r),
                    None => {
                        self.refuse(origin, format!("log limit `{v}`"), "use N/s, N/m, N/h or N/d");
                        return;
                    }
                },
                None => None,
            };
            let mut logs = Vec::new();
            for (n, c) in &matches {
                let bare = n.trim_start_matches("deny-").trim_start_matches("reject-");
                let mut r = self.rule(Verb::Log, &format!("log-{bare}"), c.clone(), origin);
                r.log = true;
                r.log_prefix = prefix.clone();
                r.log_rate = lrate.clone();
                logs.push(r);
            }
            push(p, priority, "log", logs);
        }
        if verb == Verb::Log {
            return;
        }
        let mut rules = Vec::new();
        for (n, c) in matches {
            let mut r = self.rule(verb.clone(), &n, c, origin);
            r.rate = action_rate.clone();
            rules.push(r);
        }
        push(p, priority, section, rules);
    }
}
