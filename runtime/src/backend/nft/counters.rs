//! Packet and byte counters per rule, read from a live listing.

use std::collections::BTreeMap;

use fwc_compiler::artifacts::BackendKind;
use serde_json::Value;

use super::drift_text::rule_label;
use crate::backend::RuleCounter;

/// Packets and bytes per rule from a live listing, summed over the nft rules (and map
/// elements: map forwards have no rule of their own) carrying the same `fwc:<kind>:<name>`
/// comment.
pub fn counters(listing: &Value) -> Vec<RuleCounter> {
    fn add_counters(v: &Value, e: &mut (u64, u64)) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(c)) = m.get("counter") {
                    e.0 += c.get("packets").and_then(Value::as_u64).unwrap_or(0);
                    e.1 += c.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                }
                m.values().for_each(|x| add_counters(x, e));
            }
            Value::Array(a) => a.iter().for_each(|x| add_counters(x, e)),
            _ => {}
        }
    }
    /// Map/set elements: `{"elem": {"val": …, "counter": {…}, "comment": "fwc:…"}}`.
    fn elements(v: &Value, sums: &mut BTreeMap<String, (u64, u64)>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(el)) = m.get("elem") {
                    if let Some(id) = el.get("comment").and_then(Value::as_str).and_then(fwc_compiler::artifacts::RuleId::parse) {
                        let e = sums.entry(id.to_string()).or_default();
                        if let Some(Value::Object(c)) = el.get("counter") {
                            e.0 += c.get("packets").and_then(Value::as_u64).unwrap_or(0);
                            e.1 += c.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                        }
                    }
                }
                m.values().for_each(|x| elements(x, sums));
            }
            Value::Array(a) => a.iter().for_each(|x| elements(x, sums)),
            _ => {}
        }
    }
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let Some(arr) = listing.get("nftables").and_then(Value::as_array) else { return Vec::new() };
    for o in arr {
        if let Some(rule) = o.get("rule") {
            if let Some((kind, name)) = rule_label(rule) {
                add_counters(rule.get("expr").unwrap_or(&Value::Null), sums.entry(format!("{kind}:{name}")).or_default());
            }
        } else if let Some(m) = o.get("map").or_else(|| o.get("set")) {
            if let Some(el) = m.get("elem") {
                elements(el, &mut sums);
            }
        }
    }
    sums.into_iter()
        .filter_map(|(key, (packets, bytes))| {
            let comment = format!("{}{key}", fwc_compiler::emit::nft::COMMENT_PREFIX);
            let (kind, name) = fwc_compiler::emit::nft::parse_rule_comment(&comment)?;
            Some(RuleCounter { rule: name.to_string(), kind, backend: BackendKind::Nftables, packets, bytes })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::nft::drift_text::elem_text;
    use fwc_compiler::model::RuleKind;
    use serde_json::json;

    #[test]
    fn map_element_counters_and_text() {
        let l = json!({"nftables": [{"map": {"family": "inet", "table": "fwc", "name": "fwd4_addr", "elem": [
            [{"elem": {"val": {"concat": ["tcp", 8080]}, "counter": {"packets": 3, "bytes": 180}, "comment": "fwc:forward:web"}}, "10.0.0.5"]]}}]});
        assert_eq!(counters(&l), vec![RuleCounter { rule: "web".into(), kind: RuleKind::Forward, backend: BackendKind::Nftables, packets: 3, bytes: 180 }]);
        let e = &l["nftables"][0]["map"]["elem"][0];
        assert_eq!(elem_text(e), "tcp . 8080 (fwc:forward:web) : 10.0.0.5");
    }
}
