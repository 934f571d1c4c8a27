//! The listing read into chains and sets (those others own left out with a note), the
//! address sets written as fwc sets, and the base chains of a hook.

use std::collections::BTreeSet;

use serde_json::Value;

use super::owned::owner;
use super::parse::addr_elem;
use super::tx::*;
use crate::import::model::*;
use crate::import::naming::sanitize;
use crate::import::words::describe;

impl Tx<'_> {
    pub(super) fn read(&mut self, listing: &Value) {
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

    pub(super) fn sets_out(&mut self) {
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
                        what: format!("element `{}` is not an address, network or range", describe(e)),
                        hint: "edit the set in the original and import again".into(),
                    }),
                }
            }
            self.out.sets.push(Set { name: si.fwc_name.clone(), elems, dynamic: si.what == "dynamic", origin: format!("set {fam} {table} {name}") });
        }
    }

    /// The base chains of a hook of one type that are not owned by others.
    pub(super) fn base(&mut self, hook: &str, kind: &str) -> Vec<ChainInfo> {
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
}
