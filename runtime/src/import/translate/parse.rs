//! One nftables rule's expressions read into a condition ([`Cond`]) and its statements
//! ([`Stmts`]): what the translation of every hook shares.

use serde_json::Value;

use super::tx::*;
use crate::import::model::*;
use crate::import::words::{describe, match_parts, statements};

/// What a rule does besides matching.
#[derive(Debug, Clone, Default)]
pub(super) struct Stmts {
    pub(super) verdict: Option<String>,
    pub(super) target: Option<String>,
    pub(super) reject_type: Option<String>,
    pub(super) log: bool,
    pub(super) log_prefix: Option<String>,
    pub(super) limit: Option<String>,
    pub(super) limit_over: bool,
    /// The limit counts each source address apart (a meter / dynamic set keyed by it).
    pub(super) per_source: bool,
    pub(super) dnat: Option<(String, Option<u64>)>,
    pub(super) masquerade: bool,
    pub(super) snat: Option<String>,
    /// `ct status dnat`, `fib daddr type local`: conditions only NAT rules may carry.
    pub(super) ct_dnat: bool,
    pub(super) fib_local: bool,
    /// `fib daddr type broadcast/multicast/…`, `ip6 hoplimit`, an extension header: matches of
    /// on-link or unusual packets fwc has no form for.
    pub(super) fib_other: bool,
    pub(super) hoplimit: bool,
    pub(super) exthdr: bool,
    /// A second, opposite match on the source (`ip saddr A ip saddr != B`): the addresses left
    /// out of `from` (source NAT's `from-except=`; filter rules and DNAT refuse it).
    pub(super) from_except: Option<Addrs>,
}

impl Tx<'_> {
    /// Matches and statements of one rule.
    pub(super) fn parse(&self, family: &str, table: &str, expr: &[Value]) -> Result<(Cond, Stmts), (String, String)> {
        let mut c = Cond::default();
        let mut st = Stmts::default();
        let refuse = |what: String, hint: &str| Err((what, hint.to_string()));
        for (k, b) in statements(expr) {
            match k {
                "counter" => {}
                "match" => {
                    let (op, left, right) = match_parts(b);
                    let (left, right) = (left.clone(), right.clone());
                    if let Some(flags) = tcp_flags(op, &left, &right) {
                        let flags = flags.map_err(|what| (what, "fwc's tcp-flags= says which of a set of flags are set (`syn`, `!syn`, `none/all`, `syn,fin/syn,fin`)".to_string()))?;
                        match c.proto.as_deref() {
                            None | Some("tcp" | "both") => c.proto = Some("tcp".into()),
                            Some(p) => return refuse(format!("tcp flags with protocol {p}"), "fix the original"),
                        }
                        set_once(&mut c.tcp_flags, flags)?;
                        continue;
                    }
                    let (lk, lb) = left.as_object().and_then(|m| m.iter().next()).map(|(a, b)| (a.clone(), b.clone())).unwrap_or_default();
                    let key = s(&lb, "key");
                    let negated = op == "!=";
                    let negatable = matches!((lk.as_str(), key.as_str()), ("meta", "iifname" | "oifname" | "iif" | "oif"))
                        || (lk == "payload" && matches!((s(&lb, "protocol").as_str(), s(&lb, "field").as_str()), ("ip" | "ip6", "saddr" | "daddr") | ("tcp" | "udp" | "th", "dport" | "sport")));
                    if !(op == "==" || op == "in" || (negated && negatable)) {
                        return refuse(
                            format!("the match `{} {op} {}`", describe(&left), describe(&right)),
                            "fwc negates addresses, ports and interfaces only (`from=\"!…\"`) and has no other masked or compared matches: list what is allowed instead, or deny the exception in a rule before",
                        );
                    }
                    match (lk.as_str(), key.as_str()) {
                        ("meta", "l4proto") => set_once(&mut c.proto, proto_of(&right).ok_or_else(|| (format!("the protocol `{}`", describe(&right)), "fwc matches tcp, udp, icmp, icmpv6 and IP protocols by name or number (gre, esp, 47)".into()))?)?,
                        ("meta", "nfproto") => c.family = Some(if right == "ipv6" { Family::V6 } else { Family::V4 }),
                        // The ethertype: `ip`/`ip6` are the two families of IP packets.
                        ("meta", "protocol") if right == "ip" || right == "ip6" => c.family = Some(if right == "ip6" { Family::V6 } else { Family::V4 }),
                        ("meta", "iifname" | "iif") => {
                            set_once(&mut c.iif, iface(&right)?)?;
                            c.not.iif = negated;
                        }
                        ("meta", "oifname" | "oif") => {
                            set_once(&mut c.oif, iface(&right)?)?;
                            c.not.oif = negated;
                        }
                        ("meta", "pkttype") => set_once(&mut c.pkttype, strings(&right).join(","))?,
                        ("ct", "state") => set_once(&mut c.state, strings(&right).join(","))?,
                        ("ct", "status") if strings(&right) == ["dnat"] => st.ct_dnat = true,
                        ("fib", _) if lb.get("result").and_then(Value::as_str) == Some("type") && strings(&right) == ["local"] => st.fib_local = true,
                        ("fib", _) if lb.get("result").and_then(Value::as_str) == Some("type") => st.fib_other = true,
                        ("exthdr", _) => st.exthdr = true,
                        ("payload", _) => {
                            let proto = s(&lb, "protocol");
                            let field = s(&lb, "field");
                            match (proto.as_str(), field.as_str()) {
                                ("ip" | "ip6", "saddr" | "daddr") => {
                                    let a = self.addrs(family, table, &right)?;
                                    c.family.get_or_insert(if proto == "ip" { Family::V4 } else { Family::V6 });
                                    if field == "saddr" && c.from.is_some() && negated != c.not.from && st.from_except.is_none() {
                                        if negated {
                                            st.from_except = Some(a);
                                        } else {
                                            st.from_except = c.from.replace(a);
                                            c.not.from = false;
                                        }
                                    } else if field == "saddr" {
                                        set_once(&mut c.from, a)?;
                                        c.not.from = negated;
                                    } else {
                                        set_once(&mut c.to, a)?;
                                        c.not.to = negated;
                                    }
                                }
                                ("ip6", "hoplimit") | ("ip", "ttl") => st.hoplimit = true,
                                ("ip", "protocol") | ("ip6", "nexthdr") => {
                                    // `ip protocol` sees IPv4 packets only (`ip6 nexthdr` IPv6).
                                    c.family.get_or_insert(if proto == "ip" { Family::V4 } else { Family::V6 });
                                    set_once(&mut c.proto, proto_of(&right).ok_or_else(|| (format!("the protocol `{}`", describe(&right)), "fwc matches tcp, udp, icmp, icmpv6 and IP protocols by name or number (gre, esp, 47)".into()))?)?
                                }
                                ("tcp" | "udp" | "th", "dport" | "sport") => {
                                    if proto != "th" {
                                        match c.proto.as_deref() {
                                            None => c.proto = Some(proto.clone()),
                                            Some(p) if p == proto => {}
                                            Some("both") => c.proto = Some(proto.clone()),
                                            Some(p) => return refuse(format!("{proto} {field} with protocol {p}"), "fix the original"),
                                        }
                                    } else if c.proto.is_none() {
                                        c.proto = Some("both".into());
                                    }
                                    let ports = self.ports(family, table, &right)?;
                                    if field == "dport" {
                                        set_once(&mut c.port, ports)?;
                                        c.not.port = negated;
                                    } else {
                                        set_once(&mut c.sport, ports)?;
                                        c.not.sport = negated;
                                    }
                                }
                                ("icmp" | "icmpv6", "type") => {
                                    c.proto = Some(proto.clone());
                                    set_once(&mut c.icmp_type, strings(&right).join(","))?;
                                }
                                ("icmp" | "icmpv6", "code") => {
                                    c.proto = Some(proto.clone());
                                    set_once(&mut c.icmp_code, strings(&right).join(","))?;
                                }
                                _ => return refuse(format!("the match on {proto} {field}"), "fwc matches addresses, ports, protocols, interfaces, ICMP types and codes, tcp flags, packet types and ct state"),
                            }
                        }
                        _ => return refuse(format!("the match on {}", describe(&left)), "fwc matches addresses, ports, protocols, interfaces, ICMP types and codes, tcp flags, packet types and ct state"),
                    }
                }
                "accept" | "drop" | "return" => st.verdict = Some(k.to_string()),
                "reject" => {
                    st.verdict = Some("reject".into());
                    st.reject_type = reject_type(b);
                }
                "jump" | "goto" => {
                    st.verdict = Some(k.to_string());
                    st.target = b.get("target").and_then(Value::as_str).map(str::to_string);
                }
                "log" => {
                    st.log = true;
                    st.log_prefix = b.get("prefix").and_then(Value::as_str).map(str::to_string);
                }
                "limit" => {
                    let rate = b.get("rate").and_then(Value::as_u64).unwrap_or(0);
                    let per = s(b, "per");
                    if b.get("rate_unit").and_then(Value::as_str).is_some_and(|u| u != "packets") {
                        return refuse("a byte-rate limit".into(), "fwc rates count connections; use a `shape` for bandwidth");
                    }
                    let burst = b.get("burst").and_then(Value::as_u64).unwrap_or(5);
                    st.limit = Some(if burst == 5 || burst == 0 { format!("{rate}/{per}") } else { format!("{rate}/{per} burst {burst}") });
                    st.limit_over = b.get("inv").and_then(Value::as_bool).unwrap_or(false);
                }
                // `meter NAME { ip saddr limit rate N/unit burst B }` (iptables' hashlimit per
                // source, ufw's `limit` as the import reads it): a rate per source address.
                "meter" => {
                    let key = b.get("key").map(|k| k.get("elem").and_then(|e| e.get("val")).unwrap_or(k)).cloned().unwrap_or(Value::Null);
                    let by_source = matches!(key.get("payload").map(|p| (s(p, "protocol"), s(p, "field"))), Some((ref pr, ref f)) if (pr == "ip" || pr == "ip6") && f == "saddr");
                    let lim = b.get("stmt").and_then(|x| x.get("limit"));
                    match lim {
                        Some(l) if by_source && !l.get("inv").and_then(Value::as_bool).unwrap_or(false) && l.get("rate_unit").and_then(Value::as_str).is_none_or(|u| u == "packets") => {
                            let rate = l.get("rate").and_then(Value::as_u64).unwrap_or(0);
                            let burst = l.get("burst").and_then(Value::as_u64).unwrap_or(5);
                            st.limit = Some(if burst == 5 || burst == 0 { format!("{rate}/{}", s(l, "per")) } else { format!("{rate}/{} burst {burst}", s(l, "per")) });
                            st.per_source = true;
                        }
                        _ => return refuse(format!("the meter `{}` (a per-key limit other than a rate per source address)", s(b, "name")), "fwc limits rates per source address (rate-per-source=); rewrite the rule so, or leave it out with --partial"),
                    }
                }
                "dnat" => {
                    let addr = b.get("addr").and_then(Value::as_str).map(str::to_string).ok_or_else(|| (format!("dnat {}", describe(b)), "fwc forwards to one address (and port)".to_string()))?;
                    st.dnat = Some((addr, b.get("port").and_then(Value::as_u64)));
                    st.verdict = Some("dnat".into());
                }
                "masquerade" => {
                    st.masquerade = true;
                    st.verdict = Some("masquerade".into());
                }
                "snat" => {
                    let addr = b.get("addr").and_then(Value::as_str).map(str::to_string).ok_or_else(|| (format!("snat {}", describe(b)), "fwc snats to one address".to_string()))?;
                    st.snat = Some(addr);
                    st.verdict = Some("snat".into());
                }
                "xt" => return refuse(format!("the iptables extension `{}` ({}), which nftables cannot express", s(b, "name"), s(b, "type")), "rewrite the rule without it (iptables-translate shows the nftables form)"),
                other => return refuse(format!("the statement `{other}`"), "fwc has no form for it; leave it out with --partial and add it by hand (e.g. in another nftables table)"),
            }
        }
        // fwc's proto=ah is IPv4's: in IPv6, AH is an extension header.
        if c.proto.as_deref() == Some("ah") && (family == "ip6" || c.family == Some(Family::V6)) {
            return refuse("the protocol `ah` over IPv6 (an extension header there)".into(), "fwc's proto=ah matches IPv4 only: leave the rule out with --partial, or keep it in an nftables table of your own");
        }
        Ok((c, st))
    }

    pub(super) fn addrs(&self, family: &str, table: &str, right: &Value) -> Result<Addrs, (String, String)> {
        if let Some(name) = right.as_str().and_then(|x| x.strip_prefix('@')) {
            return match self.sets.get(&(family.to_string(), table.to_string(), name.to_string())) {
                Some(si) if si.what == "addr" || si.what == "dynamic" => Ok(Addrs::Set(si.fwc_name.clone())),
                _ => Err((format!("set @{name} (not an address set)"), "fwc sets hold addresses".into())),
            };
        }
        let items: Vec<Value> = match right.get("set").and_then(Value::as_array) {
            Some(a) => a.clone(),
            None => vec![right.clone()],
        };
        let mut out = Vec::new();
        for i in &items {
            out.push(addr_elem(i).ok_or_else(|| (format!("the address `{}`", describe(i)), "fwc matches addresses, networks and ranges".to_string()))?);
        }
        Ok(Addrs::List(out))
    }

    pub(super) fn ports(&self, family: &str, table: &str, right: &Value) -> Result<String, (String, String)> {
        let items: Vec<Value> = if let Some(name) = right.as_str().and_then(|x| x.strip_prefix('@')) {
            match self.sets.get(&(family.to_string(), table.to_string(), name.to_string())) {
                Some(si) if si.what == "port" => si.elems.clone(),
                _ => return Err((format!("set @{name} (not a port set)"), "fwc ports are lists".into())),
            }
        } else {
            match right.get("set").and_then(Value::as_array) {
                Some(a) => a.clone(),
                None => vec![right.clone()],
            }
        };
        let mut out = Vec::new();
        for i in &items {
            let i = i.get("elem").and_then(|e| e.get("val")).unwrap_or(i);
            match (i.as_u64(), i.get("range").and_then(Value::as_array)) {
                (Some(p), _) => out.push(p.to_string()),
                (None, Some(r)) if r.len() == 2 && r[0].is_u64() && r[1].is_u64() => out.push(format!("{}-{}", r[0], r[1])),
                _ => return Err((format!("the port `{}`", describe(i)), "fwc ports are numbers and ranges".into())),
            }
        }
        Ok(out.join(","))
    }

}

pub(super) fn set_once<T: PartialEq>(slot: &mut Option<T>, v: T) -> Result<(), (String, String)> {
    match slot {
        Some(old) if *old != v => Err((
            "two different matches on the same field (`ip saddr A ip saddr != B` in one rule, or a jump's match and its rule's)".into(),
            "fwc takes one match per field in a rule: split it by hand (a deny of the exception before an allow of the rest)".into(),
        )),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// Conditions of a jump and of a rule in the chain it leads to, together.
pub(super) fn merge(a: &Cond, b: &Cond) -> Result<Cond, String> {
    pub(super) fn one<T: Clone + PartialEq>(x: &Option<T>, y: &Option<T>, what: &str) -> Result<Option<T>, String> {
        match (x, y) {
            (Some(p), Some(q)) if p != q => Err(format!("the jump and the rule both match {what}, differently")),
            (Some(p), _) => Ok(Some(p.clone())),
            (None, q) => Ok(q.clone()),
        }
    }
    let proto = match (&a.proto, &b.proto) {
        (Some(x), Some(y)) if x == "both" && (y == "tcp" || y == "udp") => Some(y.clone()),
        (Some(x), Some(y)) if y == "both" && (x == "tcp" || x == "udp") => Some(x.clone()),
        _ => one(&a.proto, &b.proto, "the protocol")?,
    };
    // A negated match and a plain one on the same field differ even with the same values.
    let (an, bn) = (a.not, b.not);
    let side = |x: bool, y: bool, ax: bool, bx: bool, what: &str| -> Result<bool, String> {
        match (ax, bx) {
            (true, true) if x != y => Err(format!("the jump and the rule both match {what}, one of them negated")),
            (true, _) => Ok(x),
            (false, _) => Ok(y),
        }
    };
    let not = Not {
        from: side(an.from, bn.from, a.from.is_some(), b.from.is_some(), "the source")?,
        to: side(an.to, bn.to, a.to.is_some(), b.to.is_some(), "the destination")?,
        port: side(an.port, bn.port, a.port.is_some(), b.port.is_some(), "ports")?,
        sport: side(an.sport, bn.sport, a.sport.is_some(), b.sport.is_some(), "source ports")?,
        iif: side(an.iif, bn.iif, a.iif.is_some(), b.iif.is_some(), "the input interface")?,
        oif: side(an.oif, bn.oif, a.oif.is_some(), b.oif.is_some(), "the output interface")?,
    };
    Ok(Cond {
        proto,
        port: one(&a.port, &b.port, "ports")?,
        sport: one(&a.sport, &b.sport, "source ports")?,
        from: one(&a.from, &b.from, "the source")?,
        to: one(&a.to, &b.to, "the destination")?,
        iif: one(&a.iif, &b.iif, "the input interface")?,
        oif: one(&a.oif, &b.oif, "the output interface")?,
        icmp_type: one(&a.icmp_type, &b.icmp_type, "ICMP types")?,
        icmp_code: one(&a.icmp_code, &b.icmp_code, "ICMP codes")?,
        state: one(&a.state, &b.state, "ct state")?,
        family: one(&a.family, &b.family, "the address family")?,
        tcp_flags: one(&a.tcp_flags, &b.tcp_flags, "tcp flags")?,
        pkttype: one(&a.pkttype, &b.pkttype, "packet types")?,
        not,
        rpfilter: one(&a.rpfilter, &b.rpfilter, "reverse-path filtering")?,
    })
}

pub(super) fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(x) => vec![x.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) if o.contains_key("set") => strings(&o["set"]),
        Value::Number(n) => vec![n.to_string()],
        _ => vec![],
    }
}

pub(super) fn proto_of(v: &Value) -> Option<String> {
    let mut names: Vec<String> = strings(v)
        .into_iter()
        .map(|x| match x.as_str() {
            "6" => "tcp".into(),
            "17" => "udp".into(),
            "1" => "icmp".into(),
            "58" | "ipv6-icmp" => "icmpv6".into(),
            _ => x,
        })
        .collect();
    names.sort();
    names.dedup();
    match names.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["tcp"] | ["udp"] | ["icmp"] | ["icmpv6"] => Some(names[0].clone()),
        ["tcp", "udp"] => Some("both".into()),
        [other] => ip_protocol(other),
        _ => None,
    }
}

/// The names nft prints from /etc/protocols for other IP protocols where they differ from
/// fwc's `proto=` names (the language's table, `fwc_compiler::model::header::IP_PROTOCOLS`).
const NFT_PROTOCOL_ALIASES: [(&str, &str); 3] = [("ipencap", "ipip"), ("ospfigp", "ospf"), ("ipcomp", "comp")];

/// Another IP protocol by name or number as fwc's `proto=` (`gre`, `47` -> `gre`, `253`).
fn ip_protocol(x: &str) -> Option<String> {
    use fwc_compiler::model::header::{ip_protocol_name, ip_protocol_number};
    let lower = x.to_ascii_lowercase();
    let name = NFT_PROTOCOL_ALIASES.iter().find(|(nft, _)| *nft == lower).map_or(lower.as_str(), |(_, fwc)| fwc);
    if ip_protocol_number(name).is_some() {
        return Some(name.to_string());
    }
    let n: u8 = x.parse().ok()?;
    Some(ip_protocol_name(n).map_or(n.to_string(), str::to_string))
}

/// An interface name, or a list of them (`{ "br0", "wbr0" }`, kept as `br0,wbr0` until
/// [`expand_ifaces`] makes one rule of each).
pub(super) fn iface(v: &Value) -> Result<String, (String, String)> {
    let names = match v {
        Value::String(x) => vec![x.clone()],
        Value::Object(o) if o.contains_key("set") => strings(v),
        _ => Vec::new(),
    };
    if names.is_empty() || names.iter().any(|n| n.is_empty() || n.contains(',')) {
        return Err((format!("the interface match `{}`", describe(v)), "fwc matches interfaces by name: write each interface by its name".into()));
    }
    Ok(names.join(","))
}

/// A condition with interface lists, as one condition per interface (input x output).
pub(super) fn expand_ifaces(c: &Cond) -> Vec<Cond> {
    let split = |o: &Option<String>| -> Vec<Option<String>> {
        match o {
            Some(l) => l.split(',').map(|x| Some(x.to_string())).collect(),
            None => vec![None],
        }
    };
    let mut out = Vec::new();
    for iif in split(&c.iif) {
        for oif in split(&c.oif) {
            out.push(Cond { iif: iif.clone(), oif, ..c.clone() });
        }
    }
    out
}

pub(super) fn reject_type(b: &Value) -> Option<String> {
    let ty = b.get("type").and_then(Value::as_str).unwrap_or_default();
    let expr = b.get("expr").and_then(Value::as_str).unwrap_or_default();
    match (ty, expr) {
        ("tcp reset", _) => Some("tcp-reset".into()),
        (_, "port-unreachable") | (_, "") => None,
        (_, "admin-prohibited" | "adm-prohibited") => Some("admin-prohibited".into()),
        (_, "host-unreachable" | "addr-unreachable") => Some("host-unreachable".into()),
        (_, "net-unreachable" | "no-route") => Some("net-unreachable".into()),
        (_, "prot-unreachable") => Some("prot-unreachable".into()),
        (_, other) => Some(other.to_string()),
    }
}

/// A set element or address literal as fwc writes it.
pub fn addr_elem(e: &Value) -> Option<String> {
    let e = e.get("elem").and_then(|x| x.get("val")).unwrap_or(e);
    if let Some(a) = e.as_str() {
        return a.parse::<std::net::IpAddr>().ok().map(|a| a.to_string());
    }
    if let Some(p) = e.get("prefix") {
        let a: std::net::IpAddr = p.get("addr")?.as_str()?.parse().ok()?;
        let len = p.get("len")?.as_u64()?;
        return Some(format!("{a}/{len}"));
    }
    if let Some(r) = e.get("range").and_then(Value::as_array) {
        let a: std::net::IpAddr = r.first()?.as_str()?.parse().ok()?;
        let b: std::net::IpAddr = r.get(1)?.as_str()?.parse().ok()?;
        return Some(format!("{a}-{b}"));
    }
    None
}

/// A rule ending in a verdict map (`ct state vmap { established : accept, invalid : drop }`,
/// `iifname vmap { "lo" : accept, "br0" : jump lan }`, `ip protocol . th dport vmap { … }`) as
/// one rule per element: the rule's other matches, the element's key as matches, its verdict.
/// The keys of a map are distinct, so at most one of the rules matches a packet: in order,
/// they decide as the map did. `None` when the rule has no verdict map.
pub(super) fn flatten_vmap(expr: &[Value]) -> Option<Vec<Vec<Value>>> {
    let at = expr.iter().position(|e| e.get("vmap").is_some())?;
    let vmap = &expr[at]["vmap"];
    let key = vmap.get("key")?;
    let elems = vmap.pointer("/data/set").and_then(Value::as_array)?;
    let lefts: Vec<Value> = match key.get("concat").and_then(Value::as_array) {
        Some(parts) => parts.clone(),
        None => vec![key.clone()],
    };
    let mut out = Vec::new();
    for el in elems {
        let (k, verdict) = (el.get(0)?, el.get(1)?);
        let rights: Vec<Value> = match k.get("concat").and_then(Value::as_array) {
            Some(parts) => parts.clone(),
            None => vec![k.clone()],
        };
        if rights.len() != lefts.len() {
            return None;
        }
        let mut rule: Vec<Value> = expr[..at].to_vec();
        for (l, r) in lefts.iter().zip(rights) {
            rule.push(serde_json::json!({ "match": { "op": "==", "left": l, "right": r } }));
        }
        rule.push(verdict.clone());
        out.push(rule);
    }
    Some(out)
}

/// A value of tcp flags (`syn`, `["fin", "syn"]`, `{"|": ["syn", "ack"]}`, `0`) as bits.
fn flag_bits(v: &Value) -> Option<u8> {
    match v {
        Value::String(x) => match TCP_FLAGS.iter().position(|f| f == x) {
            Some(i) => Some(1 << i),
            None => u8::from_str_radix(x.strip_prefix("0x")?, 16).ok(),
        },
        Value::Number(n) => n.as_u64().and_then(|n| u8::try_from(n).ok()),
        Value::Array(a) => a.iter().try_fold(0u8, |acc, x| Some(acc | flag_bits(x)?)),
        Value::Object(o) => match o.get("|").or_else(|| o.get("set")) {
            Some(x) => flag_bits(x),
            None => None,
        },
        _ => None,
    }
}

/// Bits as fwc writes flags: `syn,ack`, `none`, `all`.
fn flag_words(bits: u8, none: &str) -> String {
    if bits == 0 {
        return none.into();
    }
    if bits == 0xff {
        return "all".into();
    }
    TCP_FLAGS.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, f)| *f).collect::<Vec<_>>().join(",")
}

/// A match on TCP flags as fwc's `tcp-flags=` (`SET[/MASK]`, a leading `!` when negated; the
/// mask defaults to fin,syn,rst,ack as iptables' `--syn`): `tcp flags & (fin|syn|rst|ack) ==
/// syn` -> `syn`, `tcp flags ! fin,syn,rst,psh,ack,urg` (`--tcp-flags ALL NONE`) ->
/// `none/fin,syn,rst,psh,ack,urg`, `tcp flags syn` (syn is set) -> `syn/syn`. `None` when
/// `left` is not tcp flags; an error names what fwc cannot say.
pub(super) fn tcp_flags(op: &str, left: &Value, right: &Value) -> Option<Result<String, String>> {
    let is_flags = |v: &Value| v.get("payload").is_some_and(|p| s(p, "protocol") == "tcp" && s(p, "field") == "flags");
    let mask = match left.get("&").and_then(Value::as_array) {
        Some(a) if a.len() == 2 && is_flags(&a[0]) => Some(a[1].clone()),
        _ if is_flags(left) => None,
        _ => return None,
    };
    let unreadable = || Err(format!("the match `{} {op} {}`", describe(left), describe(right)));
    let Some(value) = flag_bits(right) else { return Some(unreadable()) };
    // (set, mask, negated): the flags in mask are exactly set (or not).
    let (set, mask, negated) = match (mask.as_ref().map(flag_bits), op) {
        (Some(None), _) => return Some(unreadable()),
        (Some(Some(m)), "==" | "!=") => (value, m, op == "!="),
        (None, "==" | "!=") => (value, 0xff, op == "!="),
        // `tcp flags ! syn,ack`: none of them is set.
        (None, "!") => (0, value, false),
        // `tcp flags syn`: syn is set; `tcp flags syn,ack`: one of them is (not none of them).
        (None, "in") if value.count_ones() == 1 => (value, value, false),
        (None, "in") => (0, value, true),
        _ => return Some(unreadable()),
    };
    if set & !mask != 0 {
        return Some(Err(format!("the match `{} {op} {}`, whose flags lie outside its mask", describe(left), describe(right))));
    }
    let bang = if negated { "!" } else { "" };
    let set = flag_words(set, "none");
    // fin,syn,rst,ack is fwc's default mask (iptables' --syn).
    Some(Ok(if mask == 0x17 { format!("{bang}{set}") } else { format!("{bang}{set}/{}", flag_words(mask, "none")) }))
}

/// A rule whose DNAT takes its target from a map keyed by the destination port (`dnat ip addr
/// . port to tcp dport map { 80 : 10.0.0.5 . 8080, 443 : 10.0.0.5 }`) as one rule per element:
/// the rule's matches, `tcp dport 80`, `dnat to 10.0.0.5:8080`. The keys are distinct ports, so
/// at most one of the rules matches a packet, as the map did. `None` for any other rule (or a
/// map with keys other than single ports: it is refused as before).
pub(super) fn flatten_dnat_map(expr: &[Value]) -> Option<Vec<Vec<Value>>> {
    let at = expr.iter().position(|e| e.pointer("/dnat/addr/map").is_some())?;
    let dnat = &expr[at]["dnat"];
    let map = &dnat["addr"]["map"];
    let key = map.get("key")?;
    let proto = key.pointer("/payload/protocol").and_then(Value::as_str).filter(|p| matches!(*p, "tcp" | "udp"))?;
    (key.pointer("/payload/field").and_then(Value::as_str) == Some("dport")).then_some(())?;
    let mut out = Vec::new();
    for el in map.pointer("/data/set").and_then(Value::as_array)? {
        let port = el.get(0)?.as_u64()?;
        let (addr, to_port) = match el.get(1)? {
            Value::String(a) => (a.clone(), None),
            v => {
                let parts = v.get("concat").and_then(Value::as_array)?;
                (parts.first()?.as_str()?.to_string(), Some(parts.get(1)?.as_u64()?))
            }
        };
        let mut rule: Vec<Value> = expr[..at].to_vec();
        rule.push(serde_json::json!({ "match": { "op": "==", "left": { "payload": { "protocol": proto, "field": "dport" } }, "right": port } }));
        let mut d = serde_json::json!({ "addr": addr });
        if let Some(p) = to_port {
            d["port"] = Value::from(p);
        }
        if let Some(f) = dnat.get("family") {
            d["family"] = f.clone();
        }
        rule.push(serde_json::json!({ "dnat": d }));
        rule.extend(expr[at + 1..].iter().cloned());
        out.push(rule);
    }
    Some(out)
}

/// A rule matching a concatenation against a set (`meta l4proto . th dport { tcp . 53, udp .
/// 53 }`, or a named set of such elements) as one rule per element: the rule's other parts and
/// each part of the key matched on its own (`meta l4proto tcp th dport 53`). The rules share
/// the verdict, so together they decide as the set did. `None` when the rule has no such match,
/// or carries a rate (one limit per element would be a different limit).
pub(super) fn flatten_concat(expr: &[Value], named: impl Fn(&str) -> Option<Vec<Value>>) -> Option<Vec<Vec<Value>>> {
    if expr.iter().any(|e| e.get("limit").is_some() || e.get("meter").is_some()) {
        return None;
    }
    let at = expr.iter().position(|e| {
        e.get("match").is_some_and(|m| matches!(m.get("op").and_then(Value::as_str), Some("==" | "in") | None) && m.pointer("/left/concat").is_some())
    })?;
    let m = &expr[at]["match"];
    let lefts = m.pointer("/left/concat").and_then(Value::as_array)?;
    let right = &m["right"];
    let elems: Vec<Value> = match (right.as_str().and_then(|r| r.strip_prefix('@')), right.get("set").and_then(Value::as_array)) {
        (Some(name), _) => named(name)?,
        (None, Some(a)) => a.clone(),
        (None, None) => vec![right.clone()],
    };
    let mut out = Vec::new();
    for el in elems {
        let el = el.get("elem").and_then(|e| e.get("val")).unwrap_or(&el);
        let parts = el.get("concat").and_then(Value::as_array)?;
        if parts.len() != lefts.len() {
            return None;
        }
        let mut rule: Vec<Value> = expr[..at].to_vec();
        for (l, r) in lefts.iter().zip(parts) {
            rule.push(serde_json::json!({ "match": { "op": "==", "left": l, "right": r } }));
        }
        rule.extend(expr[at + 1..].iter().cloned());
        out.push(rule);
    }
    Some(out)
}
