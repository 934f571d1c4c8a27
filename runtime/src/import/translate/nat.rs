//! nat chains: DNAT becomes forwards, masquerade/SNAT become `masquerade` and `snat` nodes.

use serde_json::Value;

use super::owned::*;
use super::parse::*;
use super::tx::*;
use crate::import::model::*;

impl Tx<'_> {
    /// nat chains: DNAT (prerouting) becomes forwards, masquerade/SNAT (postrouting) nodes.
    pub(super) fn nat(&mut self) {
        for hook in ["prerouting", "postrouting", "output", "input"] {
            for c in self.base(hook, "nat") {
                let mut flat = Vec::new();
                self.flatten(&c, 0, &mut flat);
                // A DNAT map (`dnat to tcp dport map { 80 : 10.0.0.5 . 8080 }`): one rule per element.
                let flat = flat.into_iter().flat_map(|(origin, fam, table, expr)| match flatten_dnat_map(&expr) {
                    Some(rules) => rules.into_iter().map(|e| (origin.clone(), fam.clone(), table.clone(), e)).collect(),
                    None => vec![(origin, fam, table, expr)],
                });
                for (origin, fam, table, expr) in flat {
                    if mentions_container_iface(&expr) || is_hairpin(&expr) {
                        self.note_at("NAT rules about container bridges and published ports are Docker's/libvirt's own: left out", &origin);
                        continue;
                    }
                    let (cond, st) = match self.parse(&fam, &table, &expr) {
                        Ok(x) => x,
                        Err((what, hint)) => {
                            self.out.refused.push(Refusal { origin, what, hint });
                            continue;
                        }
                    };
                    match (hook, st.verdict.as_deref()) {
                        ("prerouting", Some("dnat")) => self.dnat(origin, cond, st),
                        ("postrouting", Some("masquerade" | "snat")) => {
                            // fwc's masquerade/snat take one output interface and a list of
                            // input interfaces (`in=`, possibly negated).
                            let iif = cond.iif.clone();
                            for one in expand_ifaces(&Cond { iif: None, ..cond }) {
                                self.snat(origin.clone(), Cond { iif: iif.clone(), ..one }, st.clone());
                            }
                        }
                        (_, Some("accept" | "return")) if cond == Cond::default() => {}
                        (_, None) if st.log => self.out.merged.push((origin, format!("a log rule in a {hook} nat chain: left out (it decides nothing; fwc logs with log= on filter rules)"))),
                        (_, None) => {}
                        _ => self.out.refused.push(Refusal {
                            origin,
                            what: format!("this rule of a {hook} nat chain"),
                            hint: "fwc's NAT is forwards (DNAT in prerouting), masquerade and snat (postrouting)".into(),
                        }),
                    }
                }
            }
        }
    }

    /// The rules of a nat chain with the user chains it jumps to spliced in (jumps must be
    /// unconditional: nat rules are few and simple).
    pub(super) fn flatten(&mut self, c: &ChainInfo, depth: usize, out: &mut Vec<(Origin, String, String, Vec<Value>)>) {
        for (i, r) in c.rules.iter().enumerate() {
            let origin = self.origin(c, i);
            let expr = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let target = expr.iter().find_map(|e| e.get("jump").or_else(|| e.get("goto"))).and_then(|j| j.get("target")).and_then(Value::as_str);
            if let Some(t) = target {
                if let Some(who) = owner(&c.family, &c.table, t) {
                    self.note_at(&format!("jumps to {who}'s own chains left out — fwc coexists with them"), &format!("{origin} -> {t}"));
                    continue;
                }
                let only_jump = expr.iter().all(|e| e.get("jump").is_some() || e.get("goto").is_some() || e.get("counter").is_some());
                match self.chains.get(&(c.family.clone(), c.table.clone(), t.to_string())).cloned() {
                    Some(sub) if only_jump && depth < 8 => self.flatten(&sub, depth + 1, out),
                    _ => self.out.refused.push(Refusal { origin, what: format!("a conditional jump to {t} in a nat chain"), hint: "inline the chain in the original".into() }),
                }
                continue;
            }
            out.push((origin, c.family.clone(), c.table.clone(), expr));
        }
    }

    pub(super) fn dnat(&mut self, origin: Origin, cond: Cond, st: Stmts) {
        let (addr, port) = st.dnat.clone().unwrap_or_default();
        let refuse = |me: &mut Self, what: &str, hint: &str| me.out.refused.push(Refusal { origin: origin.clone(), what: what.into(), hint: hint.into() });
        let Some(proto) = cond.proto.clone().filter(|p| matches!(p.as_str(), "tcp" | "udp" | "both")) else {
            return refuse(self, "a DNAT without a protocol and port", "fwc forwards are per port: add `tcp dport N` in the original");
        };
        let Some(lport) = cond.port.clone() else {
            return refuse(self, "a DNAT without a destination port", "fwc forwards are per port: add `tcp dport N` in the original");
        };
        // A port list (`tcp dport { 80, 443 } dnat to A`): one forward per port or range.
        if lport.contains(',') && !cond.not.port {
            for p in lport.split(',') {
                self.dnat(origin.clone(), Cond { port: Some(p.trim().to_string()), ..cond.clone() }, st.clone());
            }
            return;
        }
        if cond.not != Not::default() || cond.tcp_flags.is_some() || cond.pkttype.is_some() || st.from_except.is_some() {
            return refuse(self, "a DNAT with a negated match, two source matches, tcp flags or a packet type", "fwc forwards take a protocol, a port, the addresses and in= (input interfaces): restrict the clients with a deny in the forward chain");
        }
        if cond.oif.is_some() || cond.sport.is_some() || cond.state.is_some() {
            return refuse(self, "a DNAT restricted to an output interface, source port or ct state", "fwc forwards take in= (the input interfaces): restrict the clients with a deny in the forward chain, or with from= (edit the generated forward)");
        }
        let listen = match &cond.to {
            None => format!(":{lport}"),
            Some(Addrs::List(l)) if l.len() == 1 && !l[0].contains('/') && !l[0].contains('-') => {
                if l[0].contains(':') { format!("[{}]:{lport}", l[0]) } else { format!("{}:{lport}", l[0]) }
            }
            Some(_) => return refuse(self, "a DNAT for a destination network or set", "fwc forwards listen on one address or on all"),
        };
        let target = match (addr.contains(':'), port) {
            (true, Some(p)) => format!("[{addr}]:{p}"),
            (false, Some(p)) => format!("{addr}:{p}"),
            (_, None) => addr.clone(),
        };
        // No destination match (nor `fib daddr type local`) on an input interface: routed
        // connections are DNATed too (`destinations="any"`).
        let any_destination = cond.to.is_none() && cond.iif.is_some() && !st.fib_local;
        if cond.to.is_none() && !any_destination && !st.fib_local {
            self.note_at(
                "DNAT without a destination address also rewrites packets routed through this host to other addresses; fwc's forwards take the packets addressed to this host (--verify shows such routed flows as differences)",
                &origin,
            );
        }
        let name = self.unique(&format!("fwd-{proto}-{lport}"));
        self.out.forwards.push(Forward { name, proto, listen, to: target, from: cond.from.clone(), iif: cond.iif.clone(), any_destination, origin });
    }

    pub(super) fn snat(&mut self, origin: Origin, cond: Cond, st: Stmts) {
        if st.ct_dnat {
            self.out.merged.push((origin, "masquerade of DNATed connections: fwc masquerades its forwards itself".into()));
            return;
        }
        if cond.not.oif || cond.not.port || cond.not.sport {
            self.out.refused.push(Refusal {
                origin,
                what: "source NAT with a negated output interface or port (`! -o`, `oifname != …`)".into(),
                hint: "fwc's masquerade/snat negate from, the destination and in= only: list the output interfaces or ports, or keep this rule in an nftables table of your own".into(),
            });
            return;
        }
        if cond.tcp_flags.is_some() || cond.pkttype.is_some() || cond.icmp_type.is_some() {
            self.out.refused.push(Refusal { origin, what: "source NAT restricted by tcp flags, packet type or ICMP type".into(), hint: "fwc's masquerade/snat take from, to, out, proto, port".into() });
            return;
        }
        if cond.state.is_some() || cond.sport.is_some() {
            self.out.refused.push(Refusal { origin, what: "source NAT restricted by ct state or source port".into(), hint: "fwc's masquerade/snat take from, from-except, to (dst), in, out, proto, port".into() });
            return;
        }
        let kind = if st.masquerade { "masquerade" } else { "snat" };
        let base = match (&cond.from, &cond.oif) {
            (Some(Addrs::Set(s)), _) => format!("{kind}-{s}"),
            (Some(Addrs::List(l)), _) if l.len() == 1 => format!("{kind}-{}", l[0]),
            (_, Some(o)) => format!("{kind}-{o}"),
            _ => kind.to_string(),
        };
        let name = self.unique(&base);
        let to_addr = st.snat.as_deref().and_then(|a| a.parse().ok());
        if st.snat.is_some() && to_addr.is_none() {
            self.out.refused.push(Refusal { origin, what: format!("snat to {}", st.snat.unwrap_or_default()), hint: "fwc snats to one address".into() });
            return;
        }
        self.out.nats.push(Nat { name, kind, from: cond.from, from_except: st.from_except, dst: cond.to, iif: cond.iif, not: cond.not, out: cond.oif, to_addr, proto: cond.proto, port: cond.port, origin });
    }
}
