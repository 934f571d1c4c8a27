//! Names of imported rules (every importer's): made from what a rule does (`ssh`, `from-admins-ssh`), sanitized
//! and unique.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Addrs, Cond, Family, Verb};

pub(crate) fn sanitize(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '-' };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    let mut out = out.trim_end_matches('-').to_string();
    out.truncate(40);
    let out = out.trim_end_matches(['-', '.']).to_string();
    if out.is_empty() { "rule".into() } else { out }
}

/// The rule names given so far, with the next suffix to try for each base, so naming stays
/// linear however many rules share a base (thousands of identical firewalld ports).
#[derive(Debug, Default)]
pub(crate) struct Names {
    used: BTreeSet<String>,
    next: BTreeMap<String, usize>,
}

impl Names {
    /// Give a name back (a rule merged into another).
    pub(crate) fn remove(&mut self, name: &str) {
        self.used.remove(name);
    }
}

/// `base` made a rule name, unique among `names` (`ssh`, `ssh-2`, …).
pub(crate) fn unique_name(names: &mut Names, base: &str) -> String {
    let base = sanitize(base);
    if names.used.insert(base.clone()) {
        return base;
    }
    let n = names.next.entry(base.clone()).or_insert(2);
    loop {
        let name = format!("{base}-{n}");
        *n += 1;
        if names.used.insert(name.clone()) {
            return name;
        }
    }
}

/// A unique name for a rule, from what it does (`deny-from-admins-ssh`).
pub(crate) fn rule_name(names: &mut Names, verb: &Verb, c: &Cond) -> String {
    let not = |n: bool| if n { "not-" } else { "" };
    let mut parts: Vec<String> = Vec::new();
    match verb {
        Verb::Allow => {}
        Verb::Deny => parts.push("deny".into()),
        Verb::Reject(_) => parts.push("reject".into()),
        Verb::Log => parts.push("log".into()),
        Verb::ClampMss(_) => parts.push("clamp-mss".into()),
    }
    if let Some(Addrs::Set(s)) = &c.from {
        parts.push(format!("{}from-{s}", not(c.not.from)));
    } else if let Some(Addrs::List(l)) = &c.from {
        if l.len() == 1 && !matches!(l[0].as_str(), "0.0.0.0/0" | "::/0") {
            parts.push(format!("{}from-{}", not(c.not.from), l[0]));
        }
    }
    if let Some(Addrs::Set(s)) = &c.to {
        parts.push(format!("{}to-{s}", not(c.not.to)));
    }
    if let Some(i) = &c.iif {
        parts.push(format!("{}in-{i}", not(c.not.iif)));
    }
    if let Some(o) = &c.oif {
        parts.push(format!("{}out-{o}", not(c.not.oif)));
    }
    match (&c.port, &c.proto) {
        (Some(p), _) => parts.push(format!("{}{}", not(c.not.port), service(p, c.proto.as_deref()))),
        (None, Some(pr)) if pr.starts_with("icmp") => parts.push(match &c.icmp_type {
            Some(t) if !t.contains(',') => t.clone(),
            _ => pr.clone(),
        }),
        (None, Some(pr)) if pr.bytes().all(|b| b.is_ascii_digit()) => parts.push(format!("proto-{pr}")),
        (None, Some(pr)) => parts.push(pr.clone()),
        _ => {}
    }
    if let Some(st) = &c.state {
        parts.push(st.replace(',', "-"));
    }
    // `syn`, `not-syn`, `flags-none`, `flags-fin-syn` (the flags a rule wants set).
    if let Some(f) = &c.tcp_flags {
        let set = f.trim_start_matches('!').split('/').next().unwrap_or_default();
        let word = if f.trim_start_matches('!') == "syn" { "syn".to_string() } else { format!("flags-{}", set.replace(',', "-")) };
        parts.push(format!("{}{word}", not(f.starts_with('!'))));
    }
    if let Some(p) = &c.pkttype {
        parts.push(p.replace(',', "-"));
    }
    if parts.iter().all(|p| matches!(p.as_str(), "deny" | "reject" | "log")) {
        parts.push(match c.family {
            Some(Family::V4) => "ipv4".into(),
            Some(Family::V6) => "ipv6".into(),
            None => "all".into(),
        });
    }
    unique_name(names, &parts.join("-"))
}

/// A name for ports: `ssh`, `web-80-443`, `tcp-8000-8100`.
fn service(ports: &str, proto: Option<&str>) -> String {
    let known = |p: &str| -> Option<&'static str> {
        Some(match p {
            "22" => "ssh",
            "25" => "smtp",
            "53" => "dns",
            "80" => "http",
            "443" => "https",
            "123" => "ntp",
            "67" | "68" => "dhcp",
            "587" => "submission",
            "993" => "imaps",
            "3306" => "mysql",
            "5432" => "postgres",
            "51820" => "wireguard",
            "1194" => "openvpn",
            _ => return None,
        })
    };
    let list: Vec<&str> = ports.split(',').collect();
    if list.len() > 1 && list.iter().all(|p| matches!(*p, "80" | "443" | "8080" | "8443")) {
        return format!("web-{}", list.join("-"));
    }
    if list.len() == 1 {
        if let Some(k) = known(list[0]) {
            return k.into();
        }
    }
    format!("{}-{}", proto.unwrap_or("port"), list.join("-"))
}
