//! Listings made comparable: volatile parts (handles, counter values, quota usage, expiry,
//! element order, dynamic sets' contents) removed, and what the forwarder rewrites at run
//! time accepted; the element-less structure the diff and verify compare.

use std::collections::BTreeMap;

use fwc_compiler::artifacts::{sha256_hex, NftDoc};
use serde_json::{json, Value};

use super::lazy;

/// `doc` without the elements of its plain hash address sets (no flags, every element an
/// address: a big set's sets per prefix length), and those elements by set name. From the
/// document's text where it is held: only the element lists go through the JSON parser, not
/// into a whole tree that is copied.
pub(super) fn split_hash_elements(doc: &NftDoc) -> (Value, Vec<(String, Vec<Value>)>) {
    if let Some((text, split)) = lazy::split_doc(doc) {
        let mut out = split.skeleton.clone();
        let mut taken = Vec::new();
        for r in &split.raw {
            let Some(elems) = lazy::parse_elements(&text[r.range.clone()]) else { return split_hash_elements_of(doc.value()) };
            let Some(body) = lazy::body_mut(&mut out, r) else { return split_hash_elements_of(doc.value()) };
            let plain = r.kind == "set"
                && body.get("flags").is_none()
                && matches!(body.get("type").and_then(Value::as_str), Some("ipv4_addr" | "ipv6_addr"))
                && elems.iter().all(Value::is_string);
            if plain {
                taken.push((r.name.clone(), elems));
            } else {
                body.insert("elem".into(), Value::Array(elems));
            }
        }
        return (out, taken);
    }
    split_hash_elements_of(doc.value())
}

pub(super) fn split_hash_elements_of(doc: &Value) -> (Value, Vec<(String, Vec<Value>)>) {
    let mut out = doc.clone();
    let mut taken = Vec::new();
    for cmd in out.get_mut("nftables").and_then(Value::as_array_mut).into_iter().flatten() {
        let set = match cmd {
            Value::Object(m) if m.contains_key("add") => m.get_mut("add").and_then(|a| a.get_mut("set")),
            Value::Object(m) => m.get_mut("set"),
            _ => None,
        };
        let Some(Value::Object(b)) = set else { continue };
        let plain = b.get("flags").is_none()
            && matches!(b.get("type").and_then(Value::as_str), Some("ipv4_addr" | "ipv6_addr"))
            && b.get("elem").and_then(Value::as_array).is_some_and(|e| e.iter().all(Value::is_string));
        if let (true, Some(name)) = (plain, b.get("name").and_then(Value::as_str).map(str::to_string)) {
            if let Some(Value::Array(e)) = b.remove("elem") {
                taken.push((name, e));
            }
        }
    }
    (out, taken)
}

/// `doc` without the elements of its sets and maps: what the diff and verify compare with
/// the live table (its kernel rendering is cheap and stays cached across element changes).
pub fn structure(doc: &Value) -> Value {
    fn without_elem(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| match (k.as_str(), x) {
                        ("set" | "map", Value::Object(o)) => {
                            (k.clone(), Value::Object(o.iter().filter(|(f, _)| *f != "elem").map(|(f, y)| (f.clone(), y.clone())).collect()))
                        }
                        ("add", _) => (k.clone(), without_elem(x)),
                        _ => (k.clone(), x.clone()),
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let items = doc.get("nftables").and_then(Value::as_array).map(|a| a.iter().map(without_elem).collect()).unwrap_or_default();
    json!({"nftables": Value::Array(items)})
}

/// The first fwc-owned set or map whose live elements differ from the expected ones.
pub(super) fn elements_drifted(want: &Normalized, live: &Normalized) -> Option<String> {
    want.objects.iter().find_map(|((kind, name), w)| {
        let l = live.objects.get(&(kind.clone(), name.clone()))?;
        ((kind == "set" || kind == "map") && w.get("elem") != l.get("elem")).then(|| format!("{kind} {name}"))
    })
}

/// sha256 over a normalised listing ("absent" when there is no table): what a saved plan
/// records, so `fwc apply plan.json` can refuse when the live state changed since.
pub fn hash_of_listing(live: Option<&Value>) -> String {
    match live {
        // Streamed into the hash: a listing of a million elements is not built as text.
        Some(v) => fwc_compiler::artifacts::sha256_compact(&normalize(v)),
        None => sha256_hex(b"absent"),
    }
}

/// A listing with volatile parts removed, keyed for comparison.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Normalized {
    /// ("chain"|"set"|"map"|"counter"|…, name) -> attributes.
    pub objects: BTreeMap<(String, String), Value>,
    /// chain -> rules in order.
    pub rules: BTreeMap<String, Vec<Value>>,
}

impl serde::Serialize for Normalized {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let objects: Vec<_> = self.objects.iter().map(|((k, n), v)| json!([k, n, v])).collect();
        json!({"objects": objects, "rules": self.rules}).serialize(s)
    }
}

/// Remove handles, counter values, quota usage, element expiry; sort set elements (except in
/// dynamic sets, whose contents the kernel fills at run time and which are ignored).
pub fn normalize(listing: &Value) -> Normalized {
    normalize_with(listing, true)
}

/// [`normalize`]; `elements: false` leaves the elements of sets and maps out (what a terse
/// listing, `nft -t`, does not show).
pub(super) fn normalize_with(listing: &Value, elements: bool) -> Normalized {
    let mut n = Normalized::default();
    let Some(arr) = listing.get("nftables").and_then(Value::as_array) else { return n };
    for o in arr {
        let Value::Object(m) = o else { continue };
        let Some((kind, body)) = m.iter().next() else { continue };
        if kind == "metainfo" || kind == "table" {
            continue;
        }
        let mut body = match body {
            Value::Object(m) if !elements && (kind == "set" || kind == "map") => {
                Value::Object(m.iter().filter(|(k, _)| *k != "elem").map(|(k, v)| (k.clone(), v.clone())).collect())
            }
            _ => body.clone(),
        };
        strip_volatile(&mut body);
        if let Value::Object(b) = &mut body {
            if kind == "quota" {
                b.remove("used"); // quota: the count is not drift
            }
            b.remove("handle");
            b.remove("family");
            b.remove("table");
            if kind == "set" || kind == "map" {
                let dynamic = b
                    .get("flags")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|x| x == "dynamic" || x == "timeout"));
                let per_source = b.get("name").and_then(Value::as_str).is_some_and(|n| fwc_compiler::features::persource::parse_set_name(n).is_some());
                if dynamic || per_source {
                    b.remove("elem");
                } else if let Some(Value::Array(elems)) = b.get_mut("elem") {
                    elems.sort_unstable_by(element_order);
                }
            }
        }
        if kind == "rule" {
            let chain = body.get("chain").and_then(Value::as_str).unwrap_or("").to_string();
            if let Value::Object(b) = &mut body {
                b.remove("chain");
            }
            n.rules.entry(chain).or_default().push(body);
        } else {
            let name = body.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            n.objects.insert((kind.clone(), name), body);
        }
    }
    n
}

/// The order set elements are compared in (any total order does, the same on both sides):
/// strings (addresses, the elements of big sets) as text without allocating, the rest by
/// their JSON text.
pub(super) fn element_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::String(_), _) => std::cmp::Ordering::Less,
        (_, Value::String(_)) => std::cmp::Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// The goto targets of a dispatch rule of a health-checked kernel forward
/// (`numgen inc mod N vmap { 0 : goto c0, … }`, its only statement), in slot order.
pub(super) fn dispatch_targets(rule: &Value) -> Option<Vec<&str>> {
    let [stmt] = rule.get("expr")?.as_array()?.as_slice() else { return None };
    let vmap = stmt.get("vmap")?;
    vmap.pointer("/key/numgen")?;
    vmap.pointer("/data/set")?.as_array()?.iter().map(|e| e.pointer("/1/goto/target").and_then(Value::as_str)).collect()
}

/// The forwarder rewrites the dispatch chains of health-checked kernel forwards
/// (forwarder/src/kernel.rs): a live dispatch rule over a non-empty subsequence of the
/// expected targets, with the expected comment, is what fwc wrote, not drift.
pub(super) fn accept_health_rewrites(want: &Normalized, live: &mut Normalized) {
    for (chain, w) in &want.rules {
        let [wr] = w.as_slice() else { continue };
        let Some(all) = dispatch_targets(wr) else { continue };
        let Some([lr]) = live.rules.get(chain).map(Vec::as_slice) else { continue };
        let Some(used) = dispatch_targets(lr) else { continue };
        let mut rest = all.iter();
        let subsequence = !used.is_empty() && used.iter().all(|u| rest.any(|a| a == u));
        if subsequence && lr.get("comment") == wr.get("comment") {
            live.rules.insert(chain.clone(), w.clone());
        }
    }
}

/// The forwarder fills the DNAT chain of a kernel forward to a DNS name
/// (forwarder/src/kernel_dns.rs), compiled empty: one live rule in an expected-empty
/// `fdn4_<rule>` / `fdn6_<rule>` chain, with that forward's comment, matching `meta l4proto`
/// and DNATing in the chain's family to an address or a `numgen` map of them, is what fwc
/// wrote, not drift. Anything else in such a chain is.
pub(super) fn accept_dns_installs(want: &Normalized, live: &mut Normalized) {
    for (kind, chain) in want.objects.keys() {
        let fam = match chain.get(..5) {
            Some("fdn4_") => "ip",
            Some("fdn6_") => "ip6",
            _ => continue,
        };
        if kind != "chain" || want.rules.get(chain).is_some_and(|r| !r.is_empty()) {
            continue;
        }
        let Some([lr]) = live.rules.get(chain).map(Vec::as_slice) else { continue };
        let comment = fwc_compiler::artifacts::rule_comment(fwc_compiler::artifacts::RuleKind::Forward, &chain[5..]);
        let Some([m, nat]) = lr.get("expr").and_then(Value::as_array).map(Vec::as_slice) else { continue };
        let l4 = m.pointer("/match/left/meta/key") == Some(&json!("l4proto"));
        let dnat = nat.pointer("/dnat/family") == Some(&json!(fam))
            && nat.pointer("/dnat/addr").is_some_and(|a| a.is_string() || a.pointer("/map/key/numgen").is_some());
        if l4 && dnat && lr.get("comment") == Some(&json!(comment)) {
            live.rules.remove(chain);
            if let Some(w) = want.rules.get(chain) {
                live.rules.insert(chain.clone(), w.clone());
            }
        }
    }
}

pub(super) fn strip_volatile(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("handle");
            m.remove("expires");
            if let Some(c) = m.get_mut("counter") {
                if let Value::Object(cm) = c {
                    cm.remove("packets");
                    cm.remove("bytes");
                    if cm.is_empty() {
                        *c = Value::Null;
                    }
                }
            }
            if let Some(Value::Object(q)) = m.get_mut("quota") {
                q.remove("used");
            }
            for (_, x) in m.iter_mut() {
                strip_volatile(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::nft::counters::counters;
    use crate::backend::nft::drift_text::describe_drift;
    use crate::backend::RuleCounter;
    use fwc_compiler::artifacts::BackendKind;
    use fwc_compiler::model::RuleKind;

    #[test]
    fn health_rewrites_of_a_dispatch_chain_are_not_drift() {
        let dispatch = |targets: &[&str], comment: &str| {
            let set: Vec<Value> = targets.iter().enumerate().map(|(i, t)| json!([i, {"goto": {"target": t}}])).collect();
            json!({"nftables": [{"rule": {"family": "inet", "table": "fwc", "chain": "fhc4_web", "comment": comment,
                "expr": [{"vmap": {"key": {"numgen": {"mode": "inc", "mod": targets.len(), "offset": 0}}, "data": {"set": set}}}]}}]})
        };
        let want = normalize(&dispatch(&["fhc4_web_t0", "fhc4_web_t1", "fhc4_web_t2"], "fwc:forward:web"));
        for (live, ok) in [
            (dispatch(&["fhc4_web_t0", "fhc4_web_t2"], "fwc:forward:web"), true),
            (dispatch(&["fhc4_web_t1"], "fwc:forward:web"), true),
            (dispatch(&["fhc4_web_t2", "fhc4_web_t0"], "fwc:forward:web"), false),
            (dispatch(&["fhc4_web_t0", "elsewhere"], "fwc:forward:web"), false),
            (dispatch(&[], "fwc:forward:web"), false),
            (dispatch(&["fhc4_web_t0"], "fwc:forward:other"), false),
        ] {
            let mut live = normalize(&live);
            accept_health_rewrites(&want, &mut live);
            assert_eq!(describe_drift(&want, &live, None).is_empty(), ok, "{live:?}");
        }
    }

    #[test]
    fn dns_installs_in_an_empty_dns_chain_are_not_drift() {
        let chain = |name: &str| json!({"chain": {"family": "inet", "table": "fwc", "name": name}});
        let rule = |chain: &str, comment: &str, nat: Value| {
            json!({"rule": {"family": "inet", "table": "fwc", "chain": chain, "comment": comment,
                "expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, {"dnat": nat}]}})
        };
        let want = normalize(&json!({"nftables": [chain("fdn4_api")]}));
        let one = json!({"family": "ip", "addr": "198.18.2.2", "port": 8443});
        let map = json!({"family": "ip", "addr": {"map": {"key": {"numgen": {"mode": "inc", "mod": 2, "offset": 0}}, "data": {"set": [[0, "198.18.2.2"], [1, "198.18.2.3"]]}}}});
        for (live, ok) in [
            (vec![chain("fdn4_api")], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", one.clone())], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", map)], true),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:other", one.clone())], false),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", json!({"family": "ip6", "addr": "2001:db8::1"}))], false),
            (vec![chain("fdn4_api"), rule("fdn4_api", "fwc:forward:api", one.clone()), rule("fdn4_api", "fwc:forward:api", one)], false),
        ] {
            let mut live = normalize(&json!({"nftables": live}));
            accept_dns_installs(&want, &mut live);
            assert_eq!(describe_drift(&want, &live, None).is_empty(), ok, "{live:?}");
        }
    }

    #[test]
    fn normalize_drops_volatile_parts() {
        let a = json!({"nftables": [{"metainfo": {}}, {"table": {"family": "inet", "name": "fwc", "handle": 3}},
            {"set": {"family": "inet", "table": "fwc", "name": "s", "handle": 4, "type": "ipv4_addr", "elem": ["10.0.0.2", "10.0.0.1"]}},
            {"rule": {"family": "inet", "table": "fwc", "chain": "input", "handle": 9, "comment": "fwc:filter:ssh",
              "expr": [{"counter": {"packets": 5, "bytes": 300}}, {"accept": null}]}}]});
        let b = json!({"nftables": [{"table": {"family": "inet", "name": "fwc", "handle": 1}},
            {"set": {"family": "inet", "table": "fwc", "name": "s", "handle": 2, "type": "ipv4_addr", "elem": ["10.0.0.1", "10.0.0.2"]}},
            {"rule": {"family": "inet", "table": "fwc", "chain": "input", "handle": 3, "comment": "fwc:filter:ssh",
              "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"accept": null}]}}]});
        assert_eq!(normalize(&a), normalize(&b));
        let c = counters(&a);
        assert_eq!(c, vec![RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 5, bytes: 300 }]);
    }
}
