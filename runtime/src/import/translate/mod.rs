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
    /// The base chain's priority (0: the filter priority; mangle -150, raw -300).
    prio: i64,
    policy: String,
    rules: Vec<Value>,
    /// The origin of every rule (a verdict map's rules, flattened, are all its rule's).
    origin: Option<Origin>,
    handles: Vec<Option<u64>>,
}

#[derive(Debug, Clone)]
struct SetInfo {
    fwc_name: String,
    /// `addr` (ipv4_addr/ipv6_addr), `port` (inet_service), anything else.
    what: &'static str,
    elems: Vec<Value>,
}

mod naming;
mod nat;
mod other;
mod owned;
mod probes;
mod parse;
mod walk;

pub(crate) use naming::{sanitize, unique_name, Names};
pub use owned::{owner, strip_owned};
pub use parse::addr_elem;
pub use probes::probe_chains;
pub use walk::icmp_opens;
use owned::*;
use parse::*;

struct Tx<'a> {
    chains: BTreeMap<(String, String, String), ChainInfo>,
    sets: BTreeMap<(String, String, String), SetInfo>,
    origins: &'a Origins,
    out: Imported,
    names: Names,
    notes: BTreeSet<String>,
    /// Notes that name many places: one line each, listing them.
    grouped: BTreeMap<String, Vec<String>>,
    /// Base chains the filter hooks did not take (a mangle chain beside the filter chain):
    /// their rules are refused by name with the other hooks'.
    passed_over: Vec<ChainInfo>,
    /// The unconditional `ct state invalid drop` met so far in the input chain being walked.
    invalid_dropped: Option<Origin>,
}

/// Translate a listing. Never fails: every problem is a refusal in the result.
pub fn translate(listing: &Value, origins: &Origins) -> Imported {
    let mut tx = Tx { chains: BTreeMap::new(), sets: BTreeMap::new(), origins, out: Imported::default(), names: Names::default(), notes: BTreeSet::new(), grouped: BTreeMap::new(), passed_over: Vec::new(), invalid_dropped: None };
    tx.read(listing);
    tx.sets_out();
    for hook in ["input", "forward", "output"] {
        tx.filter_hook(hook);
    }
    tx.nat();
    tx.other_hooks();
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
                        prio: c.get("prio").and_then(Value::as_i64).unwrap_or(0),
                        policy: c.get("policy").and_then(Value::as_str).unwrap_or("accept").to_string(),
                        rules: Vec::new(),
                        origin: None,
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
        if let Some(o) = &c.origin {
            return o.clone();
        }
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
                        what: format!("element `{}` is not an address, network or range", crate::import::describe(e)),
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
        // Beside the filter chain (priority 0), a mangle/raw/security chain of the same hook
        // (iptables' mangle INPUT, a `priority -150` chain) is not a second filter: its rules
        // are refused by name with the other hooks'.
        for fam in [&mut v4, &mut v6] {
            if fam.len() > 1 && fam.iter().filter(|c| c.prio == 0).count() == 1 {
                for c in fam.iter().filter(|c| c.prio != 0) {
                    if !self.passed_over.iter().any(|p| (&p.family, &p.table, &p.name) == (&c.family, &c.table, &c.name)) {
                        self.passed_over.push((*c).clone());
                    }
                }
                fam.retain(|c| c.prio == 0);
            }
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
            self.invalid_dropped = None;
            self.walk(&c, &Cond::default(), hook, 0, None, &mut rules);
        } else {
            for (c, fam) in [(&c4, Family::V4), (&c6, Family::V6)] {
                if let Some(c) = c {
                    self.invalid_dropped = None;
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
            rules.push(Rule { name, verb: Verb::Allow, cond: Cond { family: Some(fam), ..Cond::default() }, rate: None, per_source: false, log: false, log_prefix: None, log_rate: None, comment: None, origin });
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
