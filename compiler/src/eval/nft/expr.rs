//! Expressions and matches of one rule: payload, meta, ct, fib, set and map lookups
//! (prefixes, ranges, concatenations), literals in the family being compared, DNAT values.

use std::net::IpAddr;

use serde_json::Value;

use crate::eval::flow::L4;
use crate::eval::headers;
use super::packet::{Packet, Val};
use super::table::{EvalError, Table};

/// A set/map element found by a lookup: its data (maps) and its comment.
pub(super) type Found = (Option<Value>, Option<String>);

pub(super) struct Cx<'a> {
    pub(super) t: &'a Table,
    pub(super) chain: &'a str,
    pub(super) index: usize,
    /// What the match being evaluated compares: names on the right are read as that field's
    /// (`echo-request` is 8 in ICMP, 128 in ICMPv6; `syn` a TCP flag; `broadcast` a packet type).
    pub(super) field: std::cell::Cell<headers::Field>,
}

/// An IP protocol by the name nft prints (`ip protocol igmp accept` in a foreign ruleset) or a
/// number. (`ipv6`, protocol 41, is read as `meta nfproto ipv6`: the same word.)
pub(super) fn proto_number(s: &str) -> Option<u64> {
    L4::parse(s).filter(|_| s != "ipv6").map(L4::number)
}

impl Cx<'_> {
    pub(super) fn unsupported(&self, what: String) -> EvalError {
        EvalError::Unsupported { chain: self.chain.to_string(), rule: self.index, what }
    }

    pub(super) fn eval_match(&self, m: &Value, p: &Packet) -> Result<bool, EvalError> {
        let left_expr = m.get("left").unwrap_or(&Value::Null);
        let left = self.eval_expr(left_expr, p)?;
        let field = headers::Field::of(left_expr);
        self.field.set(field);
        let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
        let right = m.get("right").unwrap_or(&Value::Null);
        if left == Val::Absent {
            return Ok(false);
        }
        // Flag lists are bit masks, not sets of alternatives.
        if let (headers::Field::TcpFlags, Val::Int(v)) = (field, &left) {
            let bits = headers::flag_bits(right).ok_or_else(|| self.unsupported(format!("tcp flags {right}")))?;
            return headers::flags_match(op, *v, bits).ok_or_else(|| self.unsupported(format!("match operator `{op}` on tcp flags")));
        }
        let hit = match op {
            "==" | "in" => self.contains(right, &left, p)?,
            "!=" => !self.contains(right, &left, p)?,
            other => return Err(self.unsupported(format!("match operator `{other}`"))),
        };
        Ok(hit)
    }

    /// Does `right` (a literal, prefix, range, anonymous set, `@named` set, or flag list) hold `v`?
    pub(super) fn contains(&self, right: &Value, v: &Val, p: &Packet) -> Result<bool, EvalError> {
        match right {
            Value::String(s) if s.starts_with('@') => {
                if p.dyn_elems.iter().any(|(n, k)| n == &s[1..] && k == v) {
                    return Ok(true);
                }
                Ok(self.lookup(right, v, p)?.is_some())
            }
            Value::Object(o) if o.contains_key("set") => {
                let elems = o["set"].as_array().ok_or_else(|| self.unsupported(format!("set {right}")))?;
                for e in elems {
                    if self.elem_matches(e, v)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Value::Array(list) => {
                for e in list {
                    if self.elem_matches(e, v)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            _ => self.elem_matches(right, v),
        }
    }

    /// Look `key` up in `set` (`"@name"` or `{"set": [[k, data], …]}`): `None` = absent,
    /// `Some(data)` = found (data `None` for a plain set).
    pub(super) fn lookup(&self, set: &Value, key: &Val, _p: &Packet) -> Result<Option<Option<Value>>, EvalError> {
        Ok(self.lookup_elem(set, key)?.map(|(d, _)| d))
    }

    /// Look `key` up: `Some((data, element comment))` when found.
    pub(super) fn lookup_elem(&self, set: &Value, key: &Val) -> Result<Option<Found>, EvalError> {
        match set {
            Value::String(s) if s.starts_with('@') => {
                let name = &s[1..];
                let def = self.t.sets.get(name).ok_or_else(|| EvalError::UnknownSet { chain: self.chain.to_string(), set: name.to_string() })?;
                if let (Some(exact), Val::Addr(a)) = (&def.exact, key) {
                    return Ok(exact.contains(a).then_some((None, None)));
                }
                for e in &def.elems {
                    if self.elem_matches(&e.key, key)? {
                        return Ok(Some((e.data.clone(), e.comment.clone())));
                    }
                }
                Ok(None)
            }
            Value::Object(o) if o.contains_key("set") => {
                for e in o["set"].as_array().into_iter().flatten() {
                    match e.as_array() {
                        Some(pair) if pair.len() == 2 => {
                            if self.elem_matches(&pair[0], key)? {
                                return Ok(Some((Some(pair[1].clone()), None)));
                            }
                        }
                        _ => {
                            if self.elem_matches(e, key)? {
                                return Ok(Some((None, None)));
                            }
                        }
                    }
                }
                Ok(None)
            }
            other => Err(self.unsupported(format!("lookup in {other}"))),
        }
    }

    /// Does one element (exact value, `prefix`, `range`, `concat` of those) match `v`?
    pub(super) fn elem_matches(&self, e: &Value, v: &Val) -> Result<bool, EvalError> {
        if let Some(inner) = e.get("elem") {
            return self.elem_matches(inner.get("val").unwrap_or(&Value::Null), v);
        }
        if let Some(parts) = e.get("concat").and_then(Value::as_array) {
            let Val::Concat(vs) = v else { return Ok(false) };
            if parts.len() != vs.len() {
                return Ok(false);
            }
            for (part, val) in parts.iter().zip(vs) {
                if !self.elem_matches(part, val)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        if let Some(pre) = e.get("prefix") {
            let (Some(addr), Some(len)) = (pre.get("addr").and_then(Value::as_str), pre.get("len").and_then(Value::as_u64)) else {
                return Err(self.unsupported(format!("prefix {e}")));
            };
            let net: ipnet::IpNet = format!("{addr}/{len}").parse().map_err(|_| self.unsupported(format!("prefix {e}")))?;
            return Ok(matches!(v, Val::Addr(a) if net.contains(a)));
        }
        if let Some(r) = e.get("range").and_then(Value::as_array) {
            if r.len() != 2 {
                return Err(self.unsupported(format!("range {e}")));
            }
            let (lo, hi) = (self.literal(&r[0], v)?, self.literal(&r[1], v)?);
            return Ok(match (lo, hi, v) {
                (Val::Int(a), Val::Int(b), Val::Int(x)) => a <= *x && *x <= b,
                (Val::Addr(a), Val::Addr(b), Val::Addr(x)) => a.is_ipv4() == x.is_ipv4() && a <= *x && *x <= b,
                _ => false,
            });
        }
        // nft's interface-name wildcard: `"br-*"` matches every name starting with `br-`
        // (`\*` is a literal star).
        if let (Value::String(pat), Val::Str(name)) = (e, v) {
            if let Some(stem) = pat.strip_suffix('*').filter(|s| !s.ends_with('\\')) {
                return Ok(name.starts_with(stem));
            }
        }
        Ok(self.literal(e, v)? == *v)
    }

    /// A literal on the right, read in the type of the left value `like`.
    pub(super) fn literal(&self, e: &Value, like: &Val) -> Result<Val, EvalError> {
        Ok(match (e, like) {
            (Value::Number(n), _) => Val::Int(n.as_u64().ok_or_else(|| self.unsupported(format!("number {n}")))?),
            // `exists` / `missing` (a fib lookup's result): 1 or 0.
            (Value::Bool(b), _) => Val::Int(u64::from(*b)),
            (Value::String(s), Val::Int(_)) => match self.field.get().name_value(s).or_else(|| proto_number(s)).or_else(|| s.parse().ok()).or(match s.as_str() {
                "ipv4" => Some(2),
                "ipv6" => Some(10),
                _ => None,
            }) {
                Some(n) => Val::Int(n),
                None => return Err(self.unsupported(format!("value \"{s}\""))),
            },
            (Value::String(s), Val::Addr(_)) => Val::Addr(s.parse().map_err(|_| self.unsupported(format!("address \"{s}\"")))?),
            (Value::String(s), _) => Val::Str(s.clone()),
            (other, _) => return Err(self.unsupported(format!("value {other}"))),
        })
    }

    pub(super) fn eval_expr(&self, e: &Value, p: &Packet) -> Result<Val, EvalError> {
        let (kind, body) = e.as_object().and_then(|m| m.iter().next()).ok_or_else(|| self.unsupported(format!("expression {e}")))?;
        let key = body.get("key").and_then(Value::as_str).unwrap_or_default();
        Ok(match kind.as_str() {
            "meta" => match key {
                "l4proto" => Val::Int(headers::l4proto(p.proto, p.daddr.is_ipv6())),
                "nfproto" => Val::Int(if p.daddr.is_ipv6() { 10 } else { 2 }),
                "iif" | "iifname" => Val::Str(p.iifname.clone().unwrap_or_else(|| "(unnamed)".into())),
                "oif" | "oifname" => Val::Str(p.oifname.clone().unwrap_or_else(|| "(unnamed)".into())),
                "mark" => Val::Int(u64::from(p.meta_mark)),
                "pkttype" => Val::Int(headers::pkttype_of(p.daddr).number()),
                // Schedules: the kernel's UTC weekday (0 = Sunday) and seconds
                // since UTC midnight.
                // Without a time: the Unix epoch, the time `emit_view` compiles for.
                "day" | "hour" => {
                    let t = p.at.unwrap_or(0);
                    match key {
                        "day" => Val::Int((t.div_euclid(86_400) + 4).rem_euclid(7) as u64),
                        _ => Val::Int(t.rem_euclid(86_400) as u64),
                    }
                }
                other => return Err(self.unsupported(format!("meta {other}"))),
            },
            "payload" => {
                let proto = body.get("protocol").and_then(Value::as_str).unwrap_or_default();
                let field = body.get("field").and_then(Value::as_str).unwrap_or_default();
                match (proto, field) {
                    ("ip", "saddr") if p.saddr.is_ipv4() => Val::Addr(p.saddr),
                    ("ip", "daddr") if p.daddr.is_ipv4() => Val::Addr(p.daddr),
                    ("ip6", "saddr") if p.saddr.is_ipv6() => Val::Addr(p.saddr),
                    ("ip6", "daddr") if p.daddr.is_ipv6() => Val::Addr(p.daddr),
                    ("ip" | "ip6", "saddr" | "daddr") => Val::Absent,
                    ("ip", "protocol") if p.daddr.is_ipv4() => Val::Int(p.proto.number()),
                    ("ip6", "nexthdr") if p.daddr.is_ipv6() => Val::Int(p.proto.number()),
                    ("ip", "protocol") | ("ip6", "nexthdr") => Val::Absent,
                    // Foreign rulesets (ufw's before6.rules): a flow comes from elsewhere, so
                    // it arrives with a routed hop limit / TTL (64 here), never 255 or 1 —
                    // the on-link values neighbour discovery and MLD rules match.
                    ("ip6", "hoplimit") if p.daddr.is_ipv6() => Val::Int(64),
                    ("ip", "ttl") if p.daddr.is_ipv4() => Val::Int(64),
                    ("ip6", "hoplimit") | ("ip", "ttl") => Val::Absent,
                    // A flow's IPv4 header carries no options: 5 words.
                    ("ip", "hdrlength") if p.daddr.is_ipv4() => Val::Int(5),
                    ("ip", "hdrlength") => Val::Absent,
                    ("tcp" | "udp" | "th", "dport" | "sport") => {
                        let ok = match proto {
                            "th" => p.proto.has_ports(),
                            _ => L4::parse(proto) == Some(p.proto),
                        };
                        match (ok, field) {
                            (false, _) => Val::Absent,
                            (true, "dport") => Val::Int(u64::from(p.dport)),
                            (true, _) => Val::Int(u64::from(p.sport)),
                        }
                    }
                    ("icmp" | "icmpv6", "type" | "code") => match (L4::parse(proto) == Some(p.proto), field) {
                        (false, _) => Val::Absent,
                        (true, "type") => Val::Int(u64::from(p.dport)),
                        (true, _) => Val::Int(u64::from(p.icmp_code)),
                    },
                    ("tcp", "flags") if p.proto == L4::Tcp => Val::Int(u64::from(p.tcp_flags)),
                    ("tcp", "flags") => Val::Absent,
                    _ => return Err(self.unsupported(format!("payload {proto} {field}"))),
                }
            }
            "ct" => {
                let original = body.get("dir").and_then(Value::as_str) == Some("original");
                match (key, original) {
                    ("state", false) => Val::Str(p.ct_state.into()),
                    ("status", false) => Val::Str(if p.ct_dnat { "dnat".into() } else { "(none)".into() }),
                    ("direction", false) => Val::Str(p.ct_direction.into()),
                    ("mark", false) => Val::Int(u64::from(p.ct_mark)),
                    ("proto-dst", true) => Val::Int(u64::from(p.orig.3)),
                    ("proto-src", true) => Val::Int(u64::from(p.orig.2)),
                    ("ip saddr", true) if p.orig.0.is_ipv4() => Val::Addr(p.orig.0),
                    ("ip daddr", true) if p.orig.1.is_ipv4() => Val::Addr(p.orig.1),
                    ("ip6 saddr", true) if p.orig.0.is_ipv6() => Val::Addr(p.orig.0),
                    ("ip6 daddr", true) if p.orig.1.is_ipv6() => Val::Addr(p.orig.1),
                    ("ip saddr" | "ip daddr" | "ip6 saddr" | "ip6 daddr", true) => Val::Absent,
                    (other, _) => return Err(self.unsupported(format!("ct {other}"))),
                }
            }
            "fib" => {
                let flags = body.get("flags").and_then(Value::as_array).cloned().unwrap_or_default();
                let result = body.get("result").and_then(Value::as_str).unwrap_or_default();
                // Reverse-path filtering (`fib saddr . iif oif missing drop`, firewalld's
                // rpfilter): the route back to the source is the flow's (`back-via`; by
                // default it leaves by the interface the flow came in: not spoofed). With
                // `iif` the lookup finds only a route back by that interface (strict); a mark
                // does not change the evaluator's routes.
                if matches!(result, "oif" | "oifname") && flags.contains(&Value::from("saddr")) {
                    let found = if flags.contains(&Value::from("iif")) { p.back.leaves_by(p.iifname.as_deref()) } else { p.back.exists() };
                    let via = match &p.back {
                        crate::eval::flow::RouteBack::Via(v) => v.clone(),
                        _ => p.iifname.clone().unwrap_or_else(|| "(unnamed)".into()),
                    };
                    return Ok(match (result, found) {
                        ("oif", found) => Val::Int(u64::from(found)),
                        (_, true) => Val::Str(via),
                        (_, false) => Val::Str(String::new()),
                    });
                }
                if result != "type" || flags != [Value::from("daddr")] {
                    let names: Vec<&str> = flags.iter().filter_map(Value::as_str).collect();
                    return Err(self.unsupported(format!("`fib {} {result}`", names.join(" . "))));
                }
                Val::Str(if p.local.contains(&p.daddr) { "local".into() } else { "unicast".into() })
            }
            "&" | "|" => {
                let args = body.as_array().filter(|a| a.len() == 2).ok_or_else(|| self.unsupported(format!("{kind} {body}")))?;
                // `ip saddr & 255.255.255.0`: the network of a masked lookup (a big set's hash
                // set of one prefix length).
                if let (Value::Object(_), Value::String(m)) = (&args[0], &args[1]) {
                    if let Ok(mask) = m.parse::<IpAddr>() {
                        return Ok(match (self.eval_expr(&args[0], p)?, mask) {
                            (Val::Absent, _) => Val::Absent,
                            (Val::Addr(IpAddr::V4(a)), IpAddr::V4(m)) if kind == "&" => Val::Addr(IpAddr::V4((u32::from(a) & u32::from(m)).into())),
                            (Val::Addr(IpAddr::V6(a)), IpAddr::V6(m)) if kind == "&" => Val::Addr(IpAddr::V6((u128::from(a) & u128::from(m)).into())),
                            _ => return Err(self.unsupported(format!("{kind} {body}"))),
                        });
                    }
                }
                // `tcp flags & (…)` of a packet without TCP: the match fails.
                if args[0].is_object() && self.eval_expr(&args[0], p)? == Val::Absent {
                    return Ok(Val::Absent);
                }
                let a = self.eval_expr_or_literal(&args[0], p)?;
                let b = self.eval_expr_or_literal(&args[1], p)?;
                Val::Int(if kind == "&" { a & b } else { a | b })
            }
            "concat" => {
                let parts = body.as_array().ok_or_else(|| self.unsupported(format!("concat {body}")))?;
                let mut vs = Vec::with_capacity(parts.len());
                for part in parts {
                    let v = self.eval_expr(part, p)?;
                    if v == Val::Absent {
                        return Ok(Val::Absent);
                    }
                    vs.push(v);
                }
                Val::Concat(vs)
            }
            // A flow carries no IPv6 extension headers (ufw drops type-0 routing headers).
            "exthdr" => Val::Absent,
            "numgen" => {
                if body.get("mode").and_then(Value::as_str) != Some("inc") {
                    return Err(self.unsupported(format!("numgen {body}")));
                }
                // The first packet through the rule gets 0.
                Val::Int(0)
            }
            other => return Err(self.unsupported(format!("expression `{other}`"))),
        })
    }

    pub(super) fn eval_expr_or_literal(&self, e: &Value, p: &Packet) -> Result<u64, EvalError> {
        match e {
            Value::Number(n) => n.as_u64().ok_or_else(|| self.unsupported(format!("number {n}"))),
            // `tcp flags & (fin|syn|rst|ack)`: the mask is a flag list.
            Value::Array(_) | Value::String(_) => headers::flag_bits(e).ok_or_else(|| self.unsupported(format!("value {e}"))),
            _ => match self.eval_expr(e, p)? {
                Val::Int(n) => Ok(n),
                other => Err(self.unsupported(format!("arithmetic on {other:?}"))),
            },
        }
    }

    /// A DNAT address or port: a literal, or `{"map": {key, data}}` (absent key = `None`).
    /// Returns the value, a port carried by a concatenated value, and the element's comment.
    #[allow(clippy::type_complexity)]
    pub(super) fn dnat_value(&self, v: &Value, p: &Packet) -> Result<Option<(Val, Option<u16>, Option<String>)>, EvalError> {
        if let Some(m) = v.get("map") {
            let key = self.eval_expr(m.get("key").unwrap_or(&Value::Null), p)?;
            if key == Val::Absent {
                return Ok(None);
            }
            let data = m.get("data").ok_or_else(|| self.unsupported(format!("map {m}")))?;
            let Some((Some(found), comment)) = self.lookup_elem(data, &key)? else { return Ok(None) };
            return Ok(self.dnat_value(&found, p)?.map(|(val, port, c)| (val, port, c.or(comment))));
        }
        match v {
            Value::String(s) => match s.parse::<IpAddr>() {
                Ok(a) => Ok(Some((Val::Addr(a), None, None))),
                Err(_) => Err(self.unsupported(format!("dnat value \"{s}\""))),
            },
            Value::Number(n) => Ok(Some((Val::Int(n.as_u64().unwrap_or(0)), None, None))),
            Value::Object(o) if o.contains_key("concat") => {
                let parts = o["concat"].as_array().filter(|a| a.len() == 2).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                let addr = parts[0].as_str().and_then(|s| s.parse::<IpAddr>().ok()).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                let port = parts[1].as_u64().and_then(|n| u16::try_from(n).ok()).ok_or_else(|| self.unsupported(format!("dnat {v}")))?;
                Ok(Some((Val::Addr(addr), Some(port), None)))
            }
            other => Err(self.unsupported(format!("dnat value {other}"))),
        }
    }
}
