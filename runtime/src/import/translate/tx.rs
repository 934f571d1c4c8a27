//! The translation's state: the chains and sets of the listing as read, the origin of each
//! rule, and what the import has produced so far. Every hook's translation shares it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::import::model::*;
use crate::import::naming::{unique_name, Names};

#[derive(Debug, Clone)]
pub(super) struct ChainInfo {
    pub(super) family: String,
    pub(super) table: String,
    pub(super) name: String,
    pub(super) hook: Option<String>,
    pub(super) kind: String,
    /// The base chain's priority (0: the filter priority; mangle -150, raw -300).
    pub(super) prio: i64,
    pub(super) policy: String,
    pub(super) rules: Vec<Value>,
    /// The origin of every rule (a verdict map's rules, flattened, are all its rule's).
    pub(super) origin: Option<Origin>,
    pub(super) handles: Vec<Option<u64>>,
}

#[derive(Debug, Clone)]
pub(super) struct SetInfo {
    pub(super) fwc_name: String,
    /// `addr` (ipv4_addr/ipv6_addr), `port` (inet_service), anything else.
    pub(super) what: &'static str,
    pub(super) elems: Vec<Value>,
}

pub(super) struct Tx<'a> {
    pub(super) chains: BTreeMap<(String, String, String), ChainInfo>,
    pub(super) sets: BTreeMap<(String, String, String), SetInfo>,
    pub(super) origins: &'a Origins,
    pub(super) out: Imported,
    pub(super) names: Names,
    pub(super) notes: BTreeSet<String>,
    /// Notes that name many places: one line each, listing them.
    pub(super) grouped: BTreeMap<String, Vec<String>>,
    /// Base chains the filter hooks did not take (a mangle chain beside the filter chain):
    /// their rules are refused by name with the other hooks'.
    pub(super) passed_over: Vec<ChainInfo>,
    /// The unconditional `ct state invalid drop` met so far in the input chain being walked.
    pub(super) invalid_dropped: Option<Origin>,
}

pub(super) fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

impl Tx<'_> {
    pub(super) fn note_at(&mut self, what: &str, place: &str) {
        let v = self.grouped.entry(what.to_string()).or_default();
        if !v.iter().any(|p| p == place) {
            v.push(place.to_string());
        }
    }

    pub(super) fn unique(&mut self, base: &str) -> String {
        unique_name(&mut self.names, base)
    }

    pub(super) fn origin(&self, c: &ChainInfo, i: usize) -> Origin {
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
}
