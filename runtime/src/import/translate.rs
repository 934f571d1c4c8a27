//! The pure translation: an nftables listing (`nft -j list ruleset`, whatever the source was)
//! to fwc's rules ([`Imported`]). Filter base chains become `input`/`forward`/`output` blocks,
//! jumps to user chains are inlined, DNAT becomes forwards, masquerade/SNAT become `masquerade`
//! and `snat` nodes; Docker's, libvirt's and Kubernetes' chains are left out with a note; what
//! fwc cannot say is a [`Refusal`] naming its origin, never silently dropped.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::*;

/// Where each rule of the listing came from: (family, table, chain, index in chain) -> origin.
pub type Origins = BTreeMap<(String, String, String, usize), Origin>;

#[derive(Debug, Clone)]
struct ChainInfo {
    family: String,
    table: String,
    name: String,
    hook: Option<String>,
    kind: String,
    policy: String,
    rules: Vec<Value>,
    handles: Vec<Option<u64>>,
}

#[derive(Debug, Clone)]
struct SetInfo {
    fwc_name: String,
    /// `addr` (ipv4_addr/ipv6_addr), `port` (inet_service), anything else.
    what: &'static str,
    elems: Vec<Value>,
}

/// Who owns a table or chain the importer must leave alone.
pub fn owner(family: &str, table: &str, chain: &str) -> Option<&'static str> {
    if family == "inet" && table == "fwc" {
        return Some("fwc (this is fwc's own table)");
    }
    let t = table.to_ascii_lowercase();
    if t.starts_with("docker") {
        return Some("Docker");
    }
    if t.starts_with("libvirt") {
        return Some("libvirt");
    }
    if t.starts_with("kube") || t.starts_with("cilium") || t.starts_with("calico") {
        return Some("Kubernetes");
    }
    if chain.starts_with("DOCKER") && chain != "DOCKER-USER" {
        return Some("Docker");
    }
    if chain.starts_with("LIBVIRT_") {
        return Some("libvirt");
    }
    if chain.starts_with("KUBE-") || chain.starts_with("cali-") || chain.starts_with("CILIUM_") {
        return Some("Kubernetes");
    }
    None
}

fn container_iface(name: &str) -> bool {
    name == "docker0" || name.starts_with("br-") || name.starts_with("virbr") || name.starts_with("cni") || name.starts_with("podman")
}

struct Tx<'a> {
    chains: BTreeMap<(String, String, String), ChainInfo>,
    sets: BTreeMap<(String, String, String), SetInfo>,
    origins: &'a Origins,
    out: Imported,
    names: BTreeSet<String>,
    notes: BTreeSet<String>,
    /// Notes that name many places: one line each, listing them.
    grouped: BTreeMap<String, Vec<String>>,
}

/// Translate a listing. Never fails: every problem is a refusal in the result.
pub fn translate(listing: &Value, origins: &Origins) -> Imported {
    let mut tx = Tx { chains: BTreeMap::new(), sets: BTreeMap::new(), origins, out: Imported::default(), names: BTreeSet::new(), notes: BTreeSet::new(), grouped: BTreeMap::new() };
    tx.read(listing);
    tx.sets_out();
    for hook in ["input", "forward", "output"] {
        tx.filter_hook(hook);
    }
    tx.nat();
    tx.out.notes.extend(std::mem::take(&mut tx.notes));
    for (what, places) in std::mem::take(&mut tx.grouped) {
        let more = places.len().saturating_sub(20);
        let shown = places.into_iter().take(20).collect::<Vec<_>>().join(", ");
        tx.out.notes.push(if more > 0 { format!("{what}: {shown} and {more} more") } else { format!("{what}: {shown}") });
    }
    tx.out
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

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

/// `base` made a rule name, unique among `names` (`ssh`, `ssh-2`, …).
pub(crate) fn unique_name(names: &mut BTreeSet<String>, base: &str) -> String {
    let base = sanitize(base);
    let mut name = base.clone();
    let mut n = 2;
    while !names.insert(name.clone()) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

impl Tx<'_> {
    fn note_at(&mut self, what: &str, place: &str) {
        let v = self.grouped.entry(what.to_string()).or_default();
        if !v.iter().any(|p| p == place) {
            v.push(place.to_string());
        }
    }

    fn unique(&mut self, base: &str) -> String {
        unique_name(&mut self.names, base)
    }

    fn read(&mut self, listing: &Value) {
        let objs = listing.get("nftables").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut set_names: BTreeSet<String> = BTreeSet::new();
        for o in &objs {
            if let Some(c) = o.get("chain") {
                let key = (s(c, "family"), s(c, "table"), s(c, "name"));
                self.chains.insert(
                    key.clone(),
                    ChainInfo {
                        family: key.0,
                        table: key.1,
                        name: key.2,
                        hook: c.get("hook").and_then(Value::as_str).map(str::to_string),
                        kind: s(c, "type"),
                        policy: c.get("policy").and_then(Value::as_str).unwrap_or("accept").to_string(),
                        rules: Vec::new(),
                        handles: Vec::new(),
                    },
                );
            } else if let Some(r) = o.get("rule") {
                let key = (s(r, "family"), s(r, "table"), s(r, "chain"));
                if let Some(c) = self.chains.get_mut(&key) {
                    c.rules.push(r.clone());
                    c.handles.push(r.get("handle").and_then(Value::as_u64));
                }
            } else if let Some(st) = o.get("set").or_else(|| o.get("map")) {
                let key = (s(st, "family"), s(st, "table"), s(st, "name"));
                if owner(&key.0, &key.1, "").is_some() {
                    continue;
                }
                let ty = st.get("type").cloned().unwrap_or(Value::Null);
                let what = match ty.as_str() {
                    Some("ipv4_addr" | "ipv6_addr") if o.get("set").is_some() => "addr",
                    Some("inet_service") if o.get("set").is_some() => "port",
                    _ => "other",
                };
                let mut fwc_name = sanitize(&key.2);
                if !set_names.insert(fwc_name.clone()) {
                    fwc_name = sanitize(&format!("{}-{}", key.2, key.0));
                    set_names.insert(fwc_name.clone());
                }
                let dynamic = st.get("flags").and_then(Value::as_array).is_some_and(|f| f.iter().any(|x| x == "timeout" || x == "dynamic"));
                if dynamic && what == "addr" {
                    self.notes.insert(format!(
                        "set {} {} {}: elements are added at run time (timeout/dynamic): imported as `dynamic=#true`, its current elements are not copied",
                        key.0, key.1, key.2
                    ));
                }
                let elems = if dynamic { Vec::new() } else { st.get("elem").and_then(Value::as_array).cloned().unwrap_or_default() };
                self.sets.insert(key, SetInfo { fwc_name, what, elems: elems.clone() });
                if dynamic && what == "addr" {
                    self.sets.get_mut(&(s(st, "family"), s(st, "table"), s(st, "name"))).unwrap().what = "dynamic";
                }
            }
        }
    }

    fn origin(&self, c: &ChainInfo, i: usize) -> Origin {
        match self.origins.get(&(c.family.clone(), c.table.clone(), c.name.clone(), i)) {
            Some(o) => o.clone(),
            None => match c.handles.get(i).copied().flatten() {
                Some(h) => format!("{} {} {} handle {h}", c.family, c.table, c.name),
                None => format!("{} {} {} rule {}", c.family, c.table, c.name, i + 1),
            },
        }
    }

    fn sets_out(&mut self) {
        for ((fam, table, name), si) in &self.sets {
            if si.what != "addr" && si.what != "dynamic" {
                continue;
            }
            let mut elems = Vec::new();
            for e in &si.elems {
                match addr_elem(e) {
                    Some(x) => elems.push(x),
                    None => self.out.refused.push(Refusal {
                        origin: format!("set {fam} {table} {name}"),
                        what: format!("element {e} is not an address, network or range"),
                        hint: "edit the set in the original and import again".into(),
                    }),
                }
            }
            self.out.sets.push(Set { name: si.fwc_name.clone(), elems, dynamic: si.what == "dynamic", origin: format!("set {fam} {table} {name}") });
        }
    }

    /// The base chains of a hook of one type that are not owned by others.
    fn base(&mut self, hook: &str, kind: &str) -> Vec<ChainInfo> {
        let mut v = Vec::new();
        for c in self.chains.values() {
            if c.hook.as_deref() != Some(hook) || c.kind != kind {
                continue;
            }
            if let Some(who) = owner(&c.family, &c.table, &c.name) {
                self.notes.insert(format!("table {} {} (chain {}): {who}'s own, left out — fwc coexists with it", c.family, c.table, c.name));
                continue;
            }
            if matches!(c.family.as_str(), "ip" | "ip6" | "inet") {
                v.push(c.clone());
            } else {
                self.notes.insert(format!("table {} {}: family {} is not imported (fwc filters ip/ip6)", c.family, c.table, c.family));
            }
        }
        v
    }

    fn filter_hook(&mut self, hook: &'static str) {
        let bases = self.base(hook, "filter");
        // One chain per address family (an inet chain serves both).
        let mut v4: Vec<&ChainInfo> = bases.iter().filter(|c| c.family != "ip6").collect();
        let mut v6: Vec<&ChainInfo> = bases.iter().filter(|c| c.family != "ip").collect();
        let trivial = |c: &&ChainInfo| c.rules.is_empty() && c.policy == "accept";
        if v4.len() > 1 {
            v4.retain(|c| !trivial(c));
        }
        if v6.len() > 1 {
            v6.retain(|c| !trivial(c));
        }
        for fam in [&v4, &v6] {
            if fam.len() > 1 {
                let names: Vec<String> = fam.iter().map(|c| format!("{} {} {}", c.family, c.table, c.name)).collect();
                self.out.refused.push(Refusal {
                    origin: names.join(", "),
                    what: format!("several base chains filter the {hook} hook for one address family; a packet must pass all of them"),
                    hint: "merge them into one chain in the original (or import each table separately and combine by hand)".into(),
                });
                return;
            }
        }
        let (c4, c6) = (v4.first().map(|c| (*c).clone()), v6.first().map(|c| (*c).clone()));
        if c4.is_none() && c6.is_none() {
            return;
        }
        let mut rules = Vec::new();
        let same = match (&c4, &c6) {
            (Some(a), Some(b)) => a.family == b.family && a.table == b.table && a.name == b.name,
            _ => false,
        };
        let pol = |c: &Option<ChainInfo>| c.as_ref().map_or("accept", |c| if c.policy == "drop" { "drop" } else { "accept" });
        let (p4, p6) = (pol(&c4), pol(&c6));
        if same {
            let c = c4.clone().unwrap();
            self.walk(&c, &Cond::default(), hook, 0, None, &mut rules);
        } else {
            for (c, fam) in [(&c4, Family::V4), (&c6, Family::V6)] {
                if let Some(c) = c {
                    let start = Cond { family: Some(fam), ..Cond::default() };
                    self.walk(c, &start, hook, 0, None, &mut rules);
                }
            }
        }
        let mut policy: &'static str = if p4 == p6 { p4 } else { "drop" };
        if p4 != p6 {
            let (fam, label, chain) = if p4 == "accept" { (Family::V4, "ipv4", &c4) } else { (Family::V6, "ipv6", &c6) };
            let origin = match chain {
                Some(c) => format!("policy accept of chain {} {} {}", c.family, c.table, c.name),
                None => format!("no {label} chain on the {hook} hook: the kernel accepts {label}"),
            };
            let name = self.unique(&format!("{label}-{hook}-accept"));
            rules.push(Rule { name, verb: Verb::Allow, cond: Cond { family: Some(fam), ..Cond::default() }, rate: None, log: false, log_prefix: None, log_rate: None, comment: None, origin });
        }
        self.merge_logs(&mut rules);
        // A last catch-all reject is the chain's policy (fwc's forwards stay accepted after it).
        let mut reject_with = None;
        if rules.last().is_some_and(|l| l.cond == Cond::default() && matches!(l.verb, Verb::Reject(_)) && !l.log) {
            let last = rules.pop().unwrap();
            self.out.merged.push((last.origin.clone(), format!("a final reject of everything became `{hook} policy=reject`")));
            policy = "reject";
            if let Verb::Reject(t) = last.verb {
                reject_with = t;
            }
        }
        self.out.chains.push(Chain { kind: hook, policy, reject_with, rules, part: None });
    }
}

/// What a rule does besides matching.
#[derive(Debug, Clone, Default)]
struct Stmts {
    verdict: Option<String>,
    target: Option<String>,
    reject_type: Option<String>,
    log: bool,
    log_prefix: Option<String>,
    limit: Option<String>,
    limit_over: bool,
    dnat: Option<(String, Option<u64>)>,
    masquerade: bool,
    snat: Option<String>,
    /// `ct status dnat`, `fib daddr type local`: conditions only NAT rules may carry.
    ct_dnat: bool,
    fib_local: bool,
    /// `fib daddr type broadcast/multicast/…`, `ip6 hoplimit`, an extension header: matches of
    /// on-link or unusual packets fwc has no form for.
    fib_other: bool,
    hoplimit: bool,
    exthdr: bool,
}

impl Tx<'_> {
    /// Translate the rules of `c` (and of the user chains it jumps to, inlined) under `pre`.
    /// `via`: the origin of the jump that led here (a rule that adds no match of its own, such
    /// as ufw's `ufw-user-limit-accept` or `ufw-skip-to-policy-input`, is named by the jump).
    fn walk(&mut self, c: &ChainInfo, pre: &Cond, hook: &'static str, depth: usize, via: Option<&str>, out: &mut Vec<Rule>) {
        let n = c.rules.len();
        for i in 0..n {
            let origin = self.origin(c, i);
            let r = &c.rules[i];
            let expr = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let comment = r.get("comment").and_then(Value::as_str).map(str::to_string);
            if let Some(what) = comment.as_deref().and_then(|c| c.strip_prefix(super::source::XT_MARK)) {
                self.out.refused.push(Refusal {
                    origin,
                    what: format!("an iptables match nftables cannot express ({what})"),
                    hint: "rewrite the rule without it (iptables-translate shows what nftables can say), or leave it out with --partial".into(),
                });
                continue;
            }
            if mentions_container_iface(&expr) {
                self.out.containers = true;
                self.note_at("rules about container bridges are Docker's/libvirt's own: left out — fwc's `containers` block keeps containers working", &origin);
                continue;
            }
            let (cond, st) = match self.parse(&c.family, &c.table, &expr) {
                Ok(x) => x,
                Err((what, hint)) => {
                    self.out.refused.push(Refusal { origin, what, hint });
                    continue;
                }
            };
            let origin = match via {
                Some(v) if cond == Cond::default() => v.to_string(),
                _ => origin,
            };
            if [&cond.iif, &cond.oif].into_iter().flatten().any(|i| container_iface(i)) {
                self.out.containers = true;
                self.note_at("rules about container bridges are Docker's/libvirt's own: left out — fwc's `containers` block keeps containers working", &origin);
                continue;
            }
            let cond = match merge(pre, &cond) {
                Ok(c) => c,
                Err(what) => {
                    self.out.refused.push(Refusal { origin, what, hint: "split the jump's rules by hand".into() });
                    continue;
                }
            };
            if st.exthdr && st.verdict.as_deref() == Some("drop") {
                self.out.merged.push((origin, "a drop of packets with an IPv6 routing/extension header (type-0 routing headers are deprecated, RFC 5095; the kernel ignores them): fwc has no such match".into()));
                continue;
            }
            if st.hoplimit {
                let nd = ["nd-router-solicit", "nd-router-advert", "nd-neighbor-solicit", "nd-neighbor-advert"];
                let only_nd = cond.icmp_type.as_deref().is_some_and(|t| t.split(',').all(|x| nd.contains(&x)));
                if only_nd && st.verdict.as_deref() == Some("accept") && matches!(hook, "input" | "output") {
                    self.out.merged.push((origin, "neighbour discovery with hop limit 255: fwc accepts neighbour discovery itself".into()));
                } else {
                    self.out.refused.push(Refusal {
                        origin,
                        what: "a match on the hop limit / TTL (on-link ICMPv6 such as MLD, inverse ND, SEND)".into(),
                        hint: "fwc has no hop-limit match; these packets stay under the chain's policy (or add an nftables table of your own for them)".into(),
                    });
                }
                continue;
            }
            if st.fib_other {
                let target = st.target.clone().unwrap_or_default();
                if target.contains("skip-to-policy") {
                    self.out.merged.push((origin, format!("broadcast/multicast packets sent to the policy ({target}), where they end anyway")));
                } else {
                    self.out.refused.push(Refusal { origin, what: "a match on the destination's address type (broadcast, multicast)".into(), hint: "fwc has no such match; match the addresses instead".into() });
                }
                continue;
            }
            if st.ct_dnat || st.fib_local {
                if st.verdict.as_deref() == Some("accept") && st.ct_dnat && cond == *pre {
                    self.out.merged.push((origin, "`ct status dnat accept`: fwc accepts the connections of its forwards itself".into()));
                } else {
                    self.out.refused.push(Refusal { origin, what: "a filter rule matching `ct status`/`fib`".into(), hint: "fwc has no such match in filter rules; rewrite it with addresses".into() });
                }
                continue;
            }
            if st.dnat.is_some() || st.masquerade || st.snat.is_some() {
                self.out.refused.push(Refusal { origin, what: "NAT in a filter chain".into(), hint: "move it to a nat chain".into() });
                continue;
            }
            // ct state: fwc accepts established/related first and (input) drops invalid.
            let mut cond = cond;
            if let Some(state) = cond.state.clone() {
                let rest: Vec<&str> = state.split(',').filter(|x| !matches!(*x, "established" | "related")).collect();
                if rest.is_empty() {
                    if st.verdict.as_deref() == Some("accept") && cond == (Cond { state: Some(state.clone()), ..pre.clone() }) {
                        self.out.merged.push((origin, "`ct state established,related accept`: fwc adds it itself, first in every chain".into()));
                    } else {
                        self.out.merged.push((origin, "matches only established/related packets, which fwc accepts before any rule".into()));
                    }
                    continue;
                }
                if hook == "input" && rest == ["invalid"] && st.verdict.as_deref() == Some("drop") && cond == (Cond { state: Some(state.clone()), ..pre.clone() }) {
                    self.out.merged.push((origin, "`ct state invalid drop`: fwc's input chain does it itself".into()));
                    continue;
                }
                cond.state = if hook == "input" && rest == ["new"] { None } else { Some(rest.join(",")) };
            }
            if hook == "input" && cond.iif.as_deref() == Some("lo") && st.verdict.as_deref() == Some("accept") && (Cond { iif: None, ..cond.clone() }) == *pre {
                self.out.merged.push((origin, "`iif lo accept`: fwc accepts loopback itself".into()));
                continue;
            }
            if hook == "output" && cond.oif.as_deref() == Some("lo") && st.verdict.as_deref() == Some("accept") && (Cond { oif: None, ..cond.clone() }) == *pre {
                self.out.merged.push((origin, "`oif lo accept`: fwc accepts loopback itself".into()));
                continue;
            }
            match st.verdict.as_deref() {
                Some("jump" | "goto") => {
                    let target = st.target.clone().unwrap_or_default();
                    if let Some(who) = owner(&c.family, &c.table, &target) {
                        self.note_at(&format!("jumps to {who}'s own chains left out — fwc coexists with them"), &format!("{origin} -> {target}"));
                        if who == "Docker" {
                            self.out.containers = true;
                        }
                        continue;
                    }
                    let key = (c.family.clone(), c.table.clone(), target.clone());
                    let Some(sub) = self.chains.get(&key).cloned() else {
                        self.out.refused.push(Refusal { origin, what: format!("jump to unknown chain {target}"), hint: "fix the original".into() });
                        continue;
                    };
                    if hook == "input" && sub.rules.first().is_some_and(|r| {
                        let e = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                        e.iter().any(|x| x.pointer("/match/left/fib").is_some() && x.pointer("/match/right") == Some(&Value::from("local"))) && e.iter().any(|x| x.get("return").is_some())
                    }) {
                        self.out.merged.push((origin, format!("chain {target} drops only packets not addressed to this host (it returns for local ones first); fwc's input rules see packets addressed to it")));
                        continue;
                    }
                    let log_only = sub.rules.iter().all(|r| {
                        r.get("expr").and_then(Value::as_array).into_iter().flatten().all(|x| {
                            x.get("match").is_some() || x.get("log").is_some() || x.get("limit").is_some() || x.get("counter").is_some() || x.get("return").is_some()
                        })
                    });
                    if log_only && !sub.rules.is_empty() {
                        self.out.merged.push((origin, format!("chain {target} only logs: its logging is left out (fwc logs with log=, log-prefix= on a rule)")));
                        continue;
                    }
                    if st.limit.is_some() {
                        let mut inner = Vec::new();
                        self.walk(&sub, &cond, hook, depth + 1, Some(&origin), &mut inner);
                        for mut r in inner {
                            if r.verb == Verb::Allow && r.rate.is_none() {
                                r.rate = st.limit.clone();
                                out.push(r);
                            } else {
                                self.out.refused.push(Refusal { origin: r.origin.clone(), what: "a rate limit on a jump to rules other than accepts".into(), hint: "fwc limits the rate of allow rules only".into() });
                            }
                        }
                        continue;
                    }
                    if depth > 8 {
                        self.out.refused.push(Refusal { origin, what: "jumps nest deeper than 8 chains".into(), hint: "flatten the chains".into() });
                        continue;
                    }
                    if st.verdict.as_deref() == Some("goto") && i + 1 != n && cond != *pre {
                        self.out.refused.push(Refusal { origin, what: format!("a conditional goto to {target} before other rules"), hint: "use jump, or move the rule last".into() });
                        continue;
                    }
                    // A `return` is fine only as the sub-chain's unconditional last rule.
                    let returns_early = sub.rules.iter().enumerate().any(|(k, r)| {
                        let e = r.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                        e.iter().any(|x| x.get("return").is_some()) && !(k + 1 == sub.rules.len() && e.iter().all(|x| x.get("return").is_some() || x.get("counter").is_some()))
                    });
                    if returns_early {
                        self.out.refused.push(Refusal {
                            origin,
                            what: format!("chain {target} returns early under a condition (fwc's rules cannot skip the rest of a chain)"),
                            hint: "rewrite the chain without `return` before its end".into(),
                        });
                        continue;
                    }
                    if sub.handles.is_empty() {
                        continue;
                    }
                    self.walk(&sub, &cond, hook, depth + 1, Some(&origin), out);
                    if st.verdict.as_deref() == Some("goto") {
                        return;
                    }
                }
                Some("return") => {
                    if i + 1 == n && cond == *pre {
                        self.out.merged.push((origin, format!("the `return` that ends chain {}", c.name)));
                        continue;
                    }
                    self.out.refused.push(Refusal { origin, what: "a conditional `return`".into(), hint: "rewrite the chain without it".into() });
                }
                None if st.log => {
                    let name = self.name_for(&Verb::Log, &cond);
                    out.push(Rule {
                        name,
                        verb: Verb::Log,
                        cond,
                        rate: None,
                        log: true,
                        log_prefix: st.log_prefix.clone(),
                        log_rate: st.limit.clone(),
                        comment,
                        origin,
                    });
                }
                None => self.out.merged.push((origin, "a rule without verdict or log (a counter) does nothing fwc needs".into())),
                Some(v) => {
                    let verb = match v {
                        "accept" => Verb::Allow,
                        "drop" => Verb::Deny,
                        _ => Verb::Reject(st.reject_type.clone()),
                    };
                    if st.limit_over {
                        self.out.refused.push(Refusal {
                            origin,
                            what: "`limit rate over …` (acts on the packets over a rate)".into(),
                            hint: "use `rate=` on the allow rule instead (new connections over the rate fall through to the policy)".into(),
                        });
                        continue;
                    }
                    if st.limit.is_some() && verb != Verb::Allow {
                        self.out.refused.push(Refusal { origin, what: format!("a rate limit on a {v} rule"), hint: "fwc limits the rate of allow rules only".into() });
                        continue;
                    }
                    let mut cond = cond;
                    if hook == "input" && verb == Verb::Allow {
                        if let Some(dropped) = untrackable_icmp(&mut cond) {
                            self.out.refused.push(Refusal {
                                origin: origin.clone(),
                                what: format!("an accept of ICMP {dropped} before the original drops invalid packets: conntrack calls these `invalid` unless they answer a connection, and fwc's input chain drops invalid packets before any rule"),
                                hint: "nothing to do for replies and errors of this host's own connections (fwc accepts them as established/related); unsolicited ones are now dropped".into(),
                            });
                            if cond.icmp_type.is_none() {
                                continue;
                            }
                        }
                    }
                    let name = self.name_for(&verb, &cond);
                    out.push(Rule {
                        name,
                        verb,
                        cond,
                        rate: st.limit.clone(),
                        log: st.log,
                        log_prefix: st.log_prefix.clone(),
                        log_rate: None,
                        comment,
                        origin,
                    });
                }
            }
        }
    }

    /// A log-only rule followed by a rule with the same conditions is that rule's `log=`.
    fn merge_logs(&mut self, rules: &mut Vec<Rule>) {
        let mut i = 0;
        while i + 1 < rules.len() {
            if rules[i].verb == Verb::Log && rules[i + 1].verb != Verb::Log && rules[i].cond == rules[i + 1].cond && !rules[i + 1].log {
                let l = rules.remove(i);
                let next = &mut rules[i];
                next.log = true;
                next.log_prefix = l.log_prefix;
                next.log_rate = l.log_rate;
                self.names.remove(&l.name);
                self.out.merged.push((l.origin, format!("log rule merged into the next rule's log= ({})", next.name)));
            } else {
                i += 1;
            }
        }
    }

    fn name_for(&mut self, verb: &Verb, c: &Cond) -> String {
        let mut parts: Vec<String> = Vec::new();
        match verb {
            Verb::Allow => {}
            Verb::Deny => parts.push("deny".into()),
            Verb::Reject(_) => parts.push("reject".into()),
            Verb::Log => parts.push("log".into()),
        }
        if let Some(Addrs::Set(s)) = &c.from {
            parts.push(format!("from-{s}"));
        } else if let Some(Addrs::List(l)) = &c.from {
            if l.len() == 1 && !matches!(l[0].as_str(), "0.0.0.0/0" | "::/0") {
                parts.push(format!("from-{}", l[0]));
            }
        }
        if let Some(Addrs::Set(s)) = &c.to {
            parts.push(format!("to-{s}"));
        }
        if let Some(i) = &c.iif {
            parts.push(format!("in-{i}"));
        }
        if let Some(o) = &c.oif {
            parts.push(format!("out-{o}"));
        }
        match (&c.port, &c.proto) {
            (Some(p), _) => parts.push(service(p, c.proto.as_deref())),
            (None, Some(pr)) if pr.starts_with("icmp") => parts.push(match &c.icmp_type {
                Some(t) if !t.contains(',') => t.clone(),
                _ => pr.clone(),
            }),
            (None, Some(pr)) => parts.push(pr.clone()),
            _ => {}
        }
        if let Some(st) = &c.state {
            parts.push(st.replace(',', "-"));
        }
        if parts.iter().all(|p| matches!(p.as_str(), "deny" | "reject" | "log")) {
            parts.push(match c.family {
                Some(Family::V4) => "ipv4".into(),
                Some(Family::V6) => "ipv6".into(),
                None => "all".into(),
            });
        }
        self.unique(&parts.join("-"))
    }

    /// Matches and statements of one rule.
    fn parse(&self, family: &str, table: &str, expr: &[Value]) -> Result<(Cond, Stmts), (String, String)> {
        let mut c = Cond::default();
        let mut st = Stmts::default();
        let refuse = |what: String, hint: &str| Err((what, hint.to_string()));
        for e in expr {
            let Some((k, b)) = e.as_object().and_then(|m| m.iter().next()) else { continue };
            match k.as_str() {
                "counter" => {}
                "match" => {
                    let op = b.get("op").and_then(Value::as_str).unwrap_or("==");
                    let left = b.get("left").cloned().unwrap_or(Value::Null);
                    let right = b.get("right").cloned().unwrap_or(Value::Null);
                    if op != "==" && op != "in" {
                        return refuse(format!("the match `{} {op} {}`", crate::import::describe(&left), crate::import::describe(&right)), "fwc rules have no negated or masked matches: list what is allowed instead, or deny the exception in a rule before");
                    }
                    let (lk, lb) = left.as_object().and_then(|m| m.iter().next()).map(|(a, b)| (a.clone(), b.clone())).unwrap_or_default();
                    let key = s(&lb, "key");
                    match (lk.as_str(), key.as_str()) {
                        ("meta", "l4proto") => set_once(&mut c.proto, proto_of(&right).ok_or_else(|| (format!("protocol {right}"), "fwc matches tcp, udp, icmp, icmpv6".into()))?)?,
                        ("meta", "nfproto") => c.family = Some(if right == "ipv6" { Family::V6 } else { Family::V4 }),
                        ("meta", "iifname" | "iif") => set_once(&mut c.iif, iface(&right)?)?,
                        ("meta", "oifname" | "oif") => set_once(&mut c.oif, iface(&right)?)?,
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
                                    if field == "saddr" { set_once(&mut c.from, a)? } else { set_once(&mut c.to, a)? }
                                }
                                ("ip6", "hoplimit") | ("ip", "ttl") => st.hoplimit = true,
                                ("ip", "protocol") | ("ip6", "nexthdr") => set_once(&mut c.proto, proto_of(&right).ok_or_else(|| (format!("protocol {right}"), "fwc matches tcp, udp, icmp, icmpv6".into()))?)?,
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
                                    if field == "dport" { set_once(&mut c.port, ports)? } else { set_once(&mut c.sport, ports)? }
                                }
                                ("icmp" | "icmpv6", "type") => {
                                    c.proto = Some(proto.clone());
                                    set_once(&mut c.icmp_type, strings(&right).join(","))?;
                                }
                                _ => return refuse(format!("the match on {proto} {field}"), "fwc matches addresses, ports, protocols, interfaces, ICMP types and ct state"),
                            }
                        }
                        _ => return refuse(format!("the match on {}", crate::import::describe(&left)), "fwc matches addresses, ports, protocols, interfaces, ICMP types and ct state"),
                    }
                }
                "accept" | "drop" | "return" => st.verdict = Some(k.clone()),
                "reject" => {
                    st.verdict = Some("reject".into());
                    st.reject_type = reject_type(b);
                }
                "jump" | "goto" => {
                    st.verdict = Some(k.clone());
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
                "dnat" => {
                    let addr = b.get("addr").and_then(Value::as_str).map(str::to_string).ok_or_else(|| (format!("dnat {b}"), "fwc forwards to one address (and port)".to_string()))?;
                    st.dnat = Some((addr, b.get("port").and_then(Value::as_u64)));
                    st.verdict = Some("dnat".into());
                }
                "masquerade" => {
                    st.masquerade = true;
                    st.verdict = Some("masquerade".into());
                }
                "snat" => {
                    let addr = b.get("addr").and_then(Value::as_str).map(str::to_string).ok_or_else(|| (format!("snat {b}"), "fwc snats to one address".to_string()))?;
                    st.snat = Some(addr);
                    st.verdict = Some("snat".into());
                }
                "xt" => return refuse(format!("the iptables extension `{}` ({}), which nftables cannot express", s(b, "name"), s(b, "type")), "rewrite the rule without it (iptables-translate shows the nftables form)"),
                other => return refuse(format!("the statement `{other}`"), "fwc has no form for it; leave it out with --partial and add it by hand (e.g. in another nftables table)"),
            }
        }
        Ok((c, st))
    }

    fn addrs(&self, family: &str, table: &str, right: &Value) -> Result<Addrs, (String, String)> {
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
            out.push(addr_elem(i).ok_or_else(|| (format!("address {i}"), "fwc matches addresses, networks and ranges".to_string()))?);
        }
        Ok(Addrs::List(out))
    }

    fn ports(&self, family: &str, table: &str, right: &Value) -> Result<String, (String, String)> {
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
                _ => return Err((format!("port {i}"), "fwc ports are numbers and ranges".into())),
            }
        }
        Ok(out.join(","))
    }

    /// nat chains: DNAT (prerouting) becomes forwards, masquerade/SNAT (postrouting) nodes.
    fn nat(&mut self) {
        for hook in ["prerouting", "postrouting", "output", "input"] {
            for c in self.base(hook, "nat") {
                let mut flat = Vec::new();
                self.flatten(&c, 0, &mut flat);
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
                        ("postrouting", Some("masquerade" | "snat")) => self.snat(origin, cond, st),
                        (_, Some("accept" | "return")) if cond == Cond::default() => {}
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
    fn flatten(&mut self, c: &ChainInfo, depth: usize, out: &mut Vec<(Origin, String, String, Vec<Value>)>) {
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

    fn dnat(&mut self, origin: Origin, cond: Cond, st: Stmts) {
        let (addr, port) = st.dnat.clone().unwrap_or_default();
        let refuse = |me: &mut Self, what: &str, hint: &str| me.out.refused.push(Refusal { origin: origin.clone(), what: what.into(), hint: hint.into() });
        let Some(proto) = cond.proto.clone().filter(|p| matches!(p.as_str(), "tcp" | "udp" | "both")) else {
            return refuse(self, "a DNAT without a protocol and port", "fwc forwards are per port: add `tcp dport N` in the original");
        };
        let Some(lport) = cond.port.clone().filter(|p| !p.contains(',')) else {
            return refuse(self, "a DNAT without one destination port or range", "one forward per port or range");
        };
        if cond.iif.is_some() || cond.oif.is_some() || cond.sport.is_some() || cond.state.is_some() {
            return refuse(self, "a DNAT restricted to an interface, source port or ct state", "fwc forwards listen on every interface: restrict the clients with a deny in the forward chain, or with from= (edit the generated forward)");
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
        let name = self.unique(&format!("fwd-{proto}-{lport}"));
        self.out.forwards.push(Forward { name, proto, listen, to: target, from: cond.from.clone(), origin });
    }

    fn snat(&mut self, origin: Origin, cond: Cond, st: Stmts) {
        if st.ct_dnat {
            self.out.merged.push((origin, "masquerade of DNATed connections: fwc masquerades its forwards itself".into()));
            return;
        }
        if cond.iif.is_some() || cond.state.is_some() || cond.sport.is_some() {
            self.out.refused.push(Refusal { origin, what: "source NAT restricted by input interface, ct state or source port".into(), hint: "fwc's masquerade/snat take from, to, out, proto, port".into() });
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
        self.out.nats.push(Nat { name, kind, from: cond.from, dst: cond.to, out: cond.oif, to_addr, proto: cond.proto, port: cond.port, origin });
    }
}

fn set_once<T: PartialEq>(slot: &mut Option<T>, v: T) -> Result<(), (String, String)> {
    match slot {
        Some(old) if *old != v => Err(("two different matches on the same field (e.g. from a jump and the rule it leads to)".into(), "merge them by hand".into())),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// Conditions of a jump and of a rule in the chain it leads to, together.
fn merge(a: &Cond, b: &Cond) -> Result<Cond, String> {
    fn one<T: Clone + PartialEq>(x: &Option<T>, y: &Option<T>, what: &str) -> Result<Option<T>, String> {
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
    Ok(Cond {
        proto,
        port: one(&a.port, &b.port, "ports")?,
        sport: one(&a.sport, &b.sport, "source ports")?,
        from: one(&a.from, &b.from, "the source")?,
        to: one(&a.to, &b.to, "the destination")?,
        iif: one(&a.iif, &b.iif, "the input interface")?,
        oif: one(&a.oif, &b.oif, "the output interface")?,
        icmp_type: one(&a.icmp_type, &b.icmp_type, "ICMP types")?,
        state: one(&a.state, &b.state, "ct state")?,
        family: one(&a.family, &b.family, "the address family")?,
    })
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(x) => vec![x.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) if o.contains_key("set") => strings(&o["set"]),
        Value::Number(n) => vec![n.to_string()],
        _ => vec![],
    }
}

fn proto_of(v: &Value) -> Option<String> {
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
        _ => None,
    }
}

fn iface(v: &Value) -> Result<String, (String, String)> {
    match v.as_str() {
        Some(x) if !x.is_empty() => Ok(x.to_string()),
        _ => Err((format!("interface match {v}"), "fwc matches one interface name per rule: one rule per interface".into())),
    }
}

fn reject_type(b: &Value) -> Option<String> {
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

/// Does a rule match a container bridge (`docker0`, `br-…`, `virbr…`), in any sense?
fn mentions_container_iface(expr: &[Value]) -> bool {
    expr.iter().filter_map(|e| e.get("match")).any(|m| {
        let key = m.pointer("/left/meta/key").and_then(Value::as_str).unwrap_or_default();
        matches!(key, "iifname" | "oifname" | "iif" | "oif") && strings(m.get("right").unwrap_or(&Value::Null)).iter().any(|i| container_iface(i))
    })
}

/// Docker's hairpin masquerade of a published port: source and destination the same container.
fn is_hairpin(expr: &[Value]) -> bool {
    let addr = |field: &str| {
        expr.iter().filter_map(|e| e.get("match")).find(|m| m.pointer("/left/payload/field").and_then(Value::as_str) == Some(field)).and_then(|m| m.get("right").cloned())
    };
    expr.iter().any(|e| e.get("masquerade").is_some()) && addr("saddr").is_some() && addr("saddr") == addr("daddr")
}

/// The listing without what others own (Docker's, libvirt's, Kubernetes' tables and chains,
/// the rules that jump to them or match their bridges): the policy fwc takes over, which the
/// proof evaluates. Those parts keep running beside fwc, untouched.
pub fn strip_owned(listing: &Value) -> Value {
    let objs = listing.get("nftables").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for o in objs {
        let Some((kind, b)) = o.as_object().and_then(|m| m.iter().next()).map(|(k, b)| (k.clone(), b.clone())) else { continue };
        let fam = s(&b, "family");
        let table = if kind == "table" { s(&b, "name") } else { s(&b, "table") };
        let chain = match kind.as_str() {
            "chain" => s(&b, "name"),
            "rule" => s(&b, "chain"),
            _ => String::new(),
        };
        if owner(&fam, &table, &chain).is_some() {
            continue;
        }
        if kind == "rule" {
            let expr = b.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let jumps_away = expr.iter().filter_map(|e| e.get("jump").or_else(|| e.get("goto"))).filter_map(|j| j.get("target").and_then(Value::as_str)).any(|t| owner(&fam, &table, t).is_some());
            if jumps_away || mentions_container_iface(&expr) || is_hairpin(&expr) {
                continue;
            }
        }
        out.push(o);
    }
    serde_json::json!({ "nftables": out })
}

/// The first packet's conntrack state of an ICMP type: `new` for requests, `untracked` for
/// MLD and neighbour discovery, `invalid` for replies and errors (as the evaluator models it).
pub fn icmp_opens(v6: bool, t: u8) -> bool {
    if v6 { matches!(t, 128 | 139 | 130..=136 | 143) } else { matches!(t, 8 | 13 | 15 | 17) }
}

/// Remove from an input allow the ICMP types that are `invalid` on their own (fwc drops those
/// first); returns their names when there were any (the rule keeps the others, or none).
fn untrackable_icmp(cond: &mut Cond) -> Option<String> {
    let types = cond.icmp_type.clone()?;
    let v6 = cond.proto.as_deref() == Some("icmpv6");
    let (mut keep, mut gone) = (Vec::new(), Vec::new());
    for name in types.split(',') {
        match fwc_compiler::units::parse_icmp_types(name, v6).ok().and_then(|v| v.first().copied()) {
            Some(t) if !icmp_opens(v6, t) => gone.push(name.to_string()),
            _ => keep.push(name.to_string()),
        }
    }
    if gone.is_empty() {
        return None;
    }
    cond.icmp_type = (!keep.is_empty()).then(|| keep.join(","));
    Some(gone.join(", "))
}
