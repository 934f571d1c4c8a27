//! The import as a rule repository: `fwc.kdl` (version, sets, forwards, source NAT, notes),
//! `rules/<chain>.kdl` per chain block, large sets as files under `lists/`. Pure: returns
//! (path, text) pairs, formatted as `fwc fmt` would leave them.

use super::model::*;

/// Sets with more elements than this go to `lists/<name>.txt`.
pub const LIST_FILE_THRESHOLD: usize = 32;

/// A KDL string literal.
pub fn q(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn addrs(a: &Addrs) -> String {
    not_addrs(a, false)
}

/// An address match, `!` first when negated (`from="!10.0.0.0/8"`: none of them).
fn not_addrs(a: &Addrs, not: bool) -> String {
    let bang = if not { "!" } else { "" };
    match a {
        Addrs::Set(s) => q(&format!("{bang}@{s}")),
        Addrs::List(l) => q(&format!("{bang}{}", l.join(","))),
    }
}

/// A port list: a bare number, else quoted (`"80,443"`, `"!22"`).
fn ports(p: &str, not: bool) -> String {
    if !not && p.chars().all(|d| d.is_ascii_digit()) { p.to_string() } else { q(&format!("{}{p}", if not { "!" } else { "" })) }
}

/// `from=` standing in for a family limit when a rule names no address of its own.
fn family_from(c: &Cond) -> Option<&'static str> {
    match (c.family, &c.from, &c.to) {
        (Some(Family::V4), None, None) => Some("0.0.0.0/0"),
        (Some(Family::V6), None, None) => Some("::/0"),
        _ => None,
    }
}

fn rule_line(r: &Rule) -> String {
    let verb = match r.verb {
        Verb::Allow => "allow",
        Verb::Deny => "deny",
        Verb::Reject(_) => "reject",
        Verb::Log => "log",
        Verb::ClampMss(_) => "clamp-mss",
    };
    let c = &r.cond;
    let mut p = vec![format!("{verb} {}", q(&r.name))];
    if let Some(x) = &c.proto {
        p.push(format!("proto={x}"));
    }
    if let Some(x) = &c.icmp_type {
        p.push(format!("icmp-type={}", q(x)));
    }
    if let Some(x) = &c.icmp_code {
        p.push(format!("icmp-code={}", q(x)));
    }
    if let Some(x) = &c.tcp_flags {
        p.push(format!("tcp-flags={}", q(x)));
    }
    if let Some(x) = &c.port {
        p.push(format!("port={}", ports(x, c.not.port)));
    }
    if let Some(x) = &c.sport {
        p.push(format!("sport={}", ports(x, c.not.sport)));
    }
    if let Some(x) = &c.from {
        p.push(format!("from={}", not_addrs(x, c.not.from)));
    } else if let Some(f) = family_from(c) {
        p.push(format!("from={}", q(f)));
    }
    if let Some(x) = &c.to {
        p.push(format!("to={}", not_addrs(x, c.not.to)));
    }
    let bang = |n: bool| if n { "!" } else { "" };
    if let Some(x) = &c.iif {
        p.push(format!("in={}", q(&format!("{}{x}", bang(c.not.iif)))));
    }
    if let Some(x) = &c.oif {
        p.push(format!("out={}", q(&format!("{}{x}", bang(c.not.oif)))));
    }
    if let Some(x) = &c.pkttype {
        p.push(format!("pkttype={}", q(x)));
    }
    if let Some(x) = &c.state {
        p.push(format!("state={}", q(x)));
    }
    if let Some(x) = &c.rpfilter {
        p.push(format!("rpfilter={}", q(x)));
    }
    if let Verb::ClampMss(Some(n)) = &r.verb {
        p.push(format!("mss={n}"));
    }
    match &r.rate {
        Some(x) if r.per_source => {
            p.push(format!("rate-per-source={}", q(x)));
            // iptables' hashlimit and ufw's `limit` count each IPv6 address apart; fwc groups
            // IPv6 sources by /64 unless told.
            if c.family != Some(Family::V4) {
                p.push("per-source-prefix6=128".into());
            }
        }
        Some(x) => p.push(format!("rate={}", q(x))),
        None => {}
    }
    // tcp-reset is already what `reject` does to TCP.
    if let Verb::Reject(Some(t)) = &r.verb.clone().filter_default(c) {
        p.push(format!("reject-with={}", q(t)));
    }
    if r.log && r.verb != Verb::Log && r.log_prefix.is_none() && r.log_rate.is_none() {
        p.push("log=#true".into());
    }
    if let Some(x) = &r.log_prefix {
        p.push(format!("log-prefix={}", q(x)));
    }
    if let Some(x) = &r.log_rate {
        p.push(format!("log-rate={}", q(x)));
    }
    let comment = match &r.comment {
        Some(c) => format!("{}: {c}", r.origin),
        None => r.origin.clone(),
    };
    p.push(format!("comment={}", q(&comment)));
    p.join(" ")
}

/// Render the whole repository. `source` names what was imported (for the header).
pub fn files(imp: &Imported, source: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut root = String::new();
    root.push_str(&format!("// Imported by `fwc import` from {source}.\n"));
    root.push_str("// Review every rule, run `fwc test` (tests/imported.kdl holds what the original did) and\n");
    root.push_str("// `fwc plan` before applying; see docs/import.md.\n");
    for n in &imp.notes {
        root.push_str(&format!("// note: {}\n", n.replace('\n', " ")));
    }
    root.push_str("fwc 1\n");
    if !imp.sets.is_empty() {
        root.push('\n');
    }
    for s in &imp.sets {
        root.push_str(&format!("// {}\n", s.origin));
        if s.dynamic {
            root.push_str(&format!("set {} dynamic=#true\n", q(&s.name)));
        } else if s.elems.len() > LIST_FILE_THRESHOLD {
            let path = format!("lists/{}.txt", s.name);
            let mut body = format!("# {} elements of {}, imported by fwc import\n", s.elems.len(), s.origin);
            for e in &s.elems {
                body.push_str(e);
                body.push('\n');
            }
            files.push((path.clone(), body));
            root.push_str(&format!("set {} file={}\n", q(&s.name), q(&path)));
        } else if s.elems.is_empty() {
            root.push_str(&format!("set {}\n", q(&s.name)));
        } else {
            root.push_str(&format!("set {} {{\n", q(&s.name)));
            for e in &s.elems {
                root.push_str(&format!("    - {}\n", q(e)));
            }
            root.push_str("}\n");
        }
    }
    if imp.containers {
        root.push_str("\n// Docker/libvirt bridges: their own chains stay theirs; with `forward policy=drop` this keeps\n// containers reaching out (see docs/containers.md).\ncontainers {}\n");
    }
    if !imp.forwards.is_empty() {
        root.push('\n');
    }
    for f in &imp.forwards {
        let mut p = vec![format!("forward {}", q(&f.name))];
        if f.proto != "tcp" {
            p.push(format!("proto={}", f.proto));
        }
        p.push(format!("listen={}", q(&f.listen)));
        p.push(format!("to={}", q(&f.to)));
        if let Some(a) = &f.from {
            p.push(format!("from={}", addrs(a)));
        }
        if let Some(i) = &f.iif {
            p.push(format!("in={}", q(i)));
        }
        if f.any_destination {
            p.push("destinations=\"any\"".into());
        }
        p.push(format!("comment={}", q(&f.origin)));
        root.push_str(&p.join(" "));
        root.push('\n');
    }
    if !imp.nats.is_empty() {
        root.push('\n');
    }
    for n in &imp.nats {
        let mut p = vec![format!("{} {}", n.kind, q(&n.name))];
        if let Some(a) = &n.from {
            p.push(format!("from={}", not_addrs(a, n.not.from)));
        }
        if let Some(a) = &n.from_except {
            p.push(format!("from-except={}", addrs(a)));
        }
        if let Some(a) = &n.dst {
            p.push(format!("{}={}", if n.kind == "snat" { "dst" } else { "to" }, not_addrs(a, n.not.to)));
        }
        if let Some(i) = &n.iif {
            p.push(format!("in={}", q(&format!("{}{i}", if n.not.iif { "!" } else { "" }))));
        }
        if let Some(o) = &n.out {
            p.push(format!("out={}", q(o)));
        }
        if let Some(a) = n.to_addr {
            p.push(format!("to={}", q(&a.to_string())));
        }
        if let Some(x) = &n.proto {
            p.push(format!("proto={x}"));
        }
        if let Some(x) = &n.port {
            p.push(format!("port={}", q(x)));
        }
        p.push(format!("comment={}", q(&n.origin)));
        root.push_str(&p.join(" "));
        root.push('\n');
    }
    files.push(("fwc.kdl".into(), root));
    // rules/10-input.kdl, … (three digits from ten blocks on, so file order stays block order).
    let width = if imp.chains.len() >= 10 { 3 } else { 2 };
    for (i, c) in imp.chains.iter().enumerate() {
        if c.rules.is_empty() && c.policy == "accept" {
            continue;
        }
        let mut t = match &c.part {
            Some((_, heading)) => format!("// The {} chain: {heading}, imported.\n", c.kind),
            None => format!("// The {} chain, imported.\n", c.kind),
        };
        let mut head = c.kind.to_string();
        if c.policy != "accept" {
            head.push_str(&format!(" policy={}", c.policy));
        }
        if let Some(r) = &c.reject_with {
            head.push_str(&format!(" reject-with={}", q(r)));
        }
        if imp.ra_by_rules && c.kind == "input" && !imp.chains[..i].iter().any(|p| p.kind == "input") {
            head.push_str(" router-advertisements=\"none\"");
        }
        if c.rules.is_empty() {
            t.push_str(&format!("{head} {{}}\n"));
        } else {
            t.push_str(&format!("{head} {{\n"));
            for r in &c.rules {
                t.push_str("    ");
                t.push_str(&rule_line(r));
                t.push('\n');
            }
            t.push_str("}\n");
        }
        let suffix = c.part.as_ref().map(|(f, _)| format!("-{f}")).unwrap_or_default();
        files.push((format!("rules/{:0width$}-{}{suffix}.kdl", (i + 1) * 10, c.kind), t));
    }
    files
}

impl Verb {
    /// The reject type, without the one `reject` uses anyway for this rule's protocol.
    fn filter_default(self, c: &Cond) -> Verb {
        match self {
            Verb::Reject(Some(t)) if t == "tcp-reset" && c.proto.as_deref() == Some("tcp") => Verb::Reject(None),
            v => v,
        }
    }
}
