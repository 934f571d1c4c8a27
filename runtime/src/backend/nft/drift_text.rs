//! Drift in words: what differs between the expected and the live table, per rule (by the
//! `fwc:<kind>:<name>` comments), per set element and per chain policy.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::normalize::Normalized;

/// `fwc:filter:ssh` -> ("filter", "ssh") (the comment format's one parser is
/// [`fwc_compiler::artifacts::parse_rule_comment`]).
pub fn rule_label(rule: &Value) -> Option<(String, String)> {
    let (kind, name) = fwc_compiler::artifacts::parse_rule_comment(rule.get("comment")?.as_str()?)?;
    Some((kind.as_str().to_string(), name.to_string()))
}

pub(super) fn label_text(rule: &Value) -> String {
    match rule_label(rule) {
        Some((k, n)) => format!("{k} \"{n}\""),
        None => "(rule without fwc comment)".into(),
    }
}

/// Human-readable differences: expected (`want`) vs live.
pub fn describe_drift(want: &Normalized, live: &Normalized, live_text: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, w) in &want.objects {
        match live.objects.get(key) {
            None => out.push(format!("{} {} was deleted", key.0, key.1)),
            Some(l) if l != w => out.push(describe_object_change(&key.0, &key.1, w, l)),
            _ => {}
        }
    }
    for key in live.objects.keys() {
        if !want.objects.contains_key(key) {
            out.push(format!("{} {} was added outside fwc", key.0, key.1));
        }
    }
    let chains: std::collections::BTreeSet<&String> = want.rules.keys().chain(live.rules.keys()).collect();
    let empty = Vec::new();
    for chain in chains {
        let w = want.rules.get(chain).unwrap_or(&empty);
        let l = live.rules.get(chain).unwrap_or(&empty);
        if w == l {
            continue;
        }
        let group = |rules: &[Value]| {
            let mut g: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for r in rules {
                g.entry(r.get("comment").and_then(Value::as_str).unwrap_or("").to_string()).or_default().push(r.clone());
            }
            g
        };
        let (gw, gl) = (group(w), group(l));
        let before = out.len();
        for (label, rw) in &gw {
            match gl.get(label) {
                None if label.is_empty() => {
                    for r in rw {
                        out.push(format!("chain {chain}: fwc rule deleted: {}", render_rule(chain, r, &[], None)));
                    }
                }
                None => out.push(format!("chain {chain}: rule {} was deleted", label_text(&rw[0]))),
                Some(rl) if rl != rw => {
                    if label.is_empty() {
                        // fwc's own housekeeping rules have no comment: report the difference
                        // as a multiset (hand-added rules usually land here).
                        let mut missing: Vec<&Value> = rw.iter().collect();
                        let mut extra = Vec::new();
                        for r in rl {
                            match missing.iter().position(|m| *m == r) {
                                Some(i) => {
                                    missing.remove(i);
                                }
                                None => extra.push(r),
                            }
                        }
                        for r in extra {
                            out.push(format!("chain {chain}: rule added outside fwc: {}", render_rule(chain, r, l, live_text)));
                        }
                        for r in missing {
                            out.push(format!("chain {chain}: fwc rule deleted: {}", render_rule(chain, r, &[], None)));
                        }
                    } else {
                        out.push(format!("chain {chain}: rule {} was changed", label_text(&rw[0])));
                    }
                }
                _ => {}
            }
        }
        for (label, rl) in &gl {
            if !gw.contains_key(label) {
                for r in rl {
                    out.push(format!("chain {chain}: rule added outside fwc: {}", render_rule(chain, r, l, live_text)));
                }
            }
        }
        if out.len() == before {
            out.push(format!("chain {chain}: rules were reordered"));
        }
    }
    out
}

pub(super) fn describe_object_change(kind: &str, name: &str, w: &Value, l: &Value) -> String {
    if kind == "set" || kind == "map" {
        let elems = |v: &Value| -> Vec<String> {
            v.get("elem").and_then(Value::as_array).map(|a| a.iter().map(elem_text).collect()).unwrap_or_default()
        };
        let (ew, el) = (elems(w), elems(l));
        // Hash sets of the texts: linear in the set size (`Vec::contains` made
        // this quadratic, and drift in a 1M-element set was never reported).
        let (hw, hl): (HashSet<&str>, HashSet<&str>) = (ew.iter().map(String::as_str).collect(), el.iter().map(String::as_str).collect());
        let added: Vec<_> = el.iter().filter(|e| !hw.contains(e.as_str())).cloned().collect();
        let removed: Vec<_> = ew.iter().filter(|e| !hl.contains(e.as_str())).cloned().collect();
        if !added.is_empty() || !removed.is_empty() {
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("elements added outside fwc: {}", abbreviate(&added)));
            }
            if !removed.is_empty() {
                parts.push(format!("elements removed: {}", abbreviate(&removed)));
            }
            return format!("{kind} {name}: {}", parts.join("; "));
        }
    }
    if kind == "chain" {
        let (pw, pl) = (w.get("policy"), l.get("policy"));
        if pw != pl {
            return format!(
                "chain {name}: policy changed from {} to {}",
                pw.and_then(Value::as_str).unwrap_or("-"),
                pl.and_then(Value::as_str).unwrap_or("-")
            );
        }
    }
    format!("{kind} {name} was changed outside fwc")
}

pub(super) fn elem_text(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.contains_key("prefix") => {
            let p = &m["prefix"];
            format!("{}/{}", p.get("addr").map(elem_text).unwrap_or_default(), p.get("len").map(|l| l.to_string()).unwrap_or_default())
        }
        Value::Object(m) if m.contains_key("range") => {
            let r = m["range"].as_array().cloned().unwrap_or_default();
            r.iter().map(elem_text).collect::<Vec<_>>().join("-")
        }
        Value::Object(m) if m.contains_key("elem") => {
            let el = &m["elem"];
            let val = el.get("val").map(elem_text).unwrap_or_default();
            match el.get("comment").and_then(Value::as_str) {
                Some(c) => format!("{val} ({c})"),
                None => val,
            }
        }
        Value::Object(m) if m.contains_key("concat") => {
            m["concat"].as_array().map(|a| a.iter().map(elem_text).collect::<Vec<_>>().join(" . ")).unwrap_or_default()
        }
        // map entry: [key, value]
        Value::Array(kv) if kv.len() == 2 => format!("{} : {}", elem_text(&kv[0]), elem_text(&kv[1])),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

pub(super) fn abbreviate(v: &[String]) -> String {
    if v.len() <= 5 {
        v.join(", ")
    } else {
        format!("{} … ({} in all)", v[..5].join(", "), v.len())
    }
}

/// A rule in nft syntax when the text listing has it (matched by position in its chain),
/// else compact JSON.
pub(super) fn render_rule(chain: &str, rule: &Value, chain_rules: &[Value], text: Option<&str>) -> String {
    let idx = chain_rules.iter().position(|r| r == rule);
    if let (Some(text), Some(idx)) = (text, idx) {
        let mut in_chain = false;
        let mut i = 0;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("chain ") {
                in_chain = t.split_whitespace().nth(1) == Some(chain);
                continue;
            }
            if !in_chain || t.is_empty() || t == "}" || t.starts_with("type ") || !t.contains("# handle") {
                continue;
            }
            if i == idx {
                return t.split(" # handle").next().unwrap_or(t).to_string();
            }
            i += 1;
        }
    }
    let s = rule.to_string();
    if s.len() > 160 {
        format!("{}…", &s[..s.char_indices().nth(160).map(|(i, _)| i).unwrap_or(s.len())])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::nft::normalize::normalize;
    use serde_json::json;

    /// A big set: one element deleted behind fwc's back from a 200,000-element set is named
    /// (the comparison was quadratic: `Vec::contains` per element; bench/sets has the times).
    #[test]
    fn drift_in_a_big_set_names_the_element() {
        let addrs: Vec<Value> = (0..200_000u32).map(|i| json!(std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string())).collect();
        let set = |elems: &[Value]| json!({"family": "inet", "table": "fwc", "name": "bl_v4_32", "type": "ipv4_addr", "elem": elems});
        let mut live = addrs.clone();
        let gone = live.remove(123_456);
        live.push(json!("192.0.2.7"));
        let d = describe_object_change("set", "bl_v4_32", &set(&addrs), &set(&live));
        assert_eq!(d, format!("set bl_v4_32: elements added outside fwc: 192.0.2.7; elements removed: {}", gone.as_str().unwrap()));
    }

    #[test]
    fn drift_is_described_per_rule() {
        let base = |elems: Value, rules: Vec<Value>, policy: &str| {
            let mut v = vec![
                json!({"chain": {"family": "inet", "table": "fwc", "name": "input", "policy": policy}}),
                json!({"set": {"family": "inet", "table": "fwc", "name": "office", "elem": elems}}),
            ];
            for r in rules {
                v.push(json!({"rule": r}));
            }
            normalize(&json!({"nftables": v}))
        };
        let ssh = json!({"chain": "input", "comment": "fwc:filter:ssh", "expr": [{"accept": null}]});
        let ssh2 = json!({"chain": "input", "comment": "fwc:filter:ssh", "expr": [{"drop": null}]});
        let web = json!({"chain": "input", "comment": "fwc:filter:web", "expr": [{"accept": null}]});
        let hand = json!({"chain": "input", "expr": [{"drop": null}]});
        let want = base(json!(["10.0.0.1"]), vec![ssh.clone(), web.clone()], "drop");
        assert!(describe_drift(&want, &want, None).is_empty());
        let live = base(json!(["10.0.0.1", "10.9.9.9"]), vec![ssh2, hand.clone()], "accept");
        let d = describe_drift(&want, &live, None);
        assert!(d.contains(&"chain input: policy changed from drop to accept".to_string()), "{d:?}");
        assert!(d.contains(&"set office: elements added outside fwc: 10.9.9.9".to_string()), "{d:?}");
        assert!(d.contains(&"chain input: rule filter \"ssh\" was changed".to_string()), "{d:?}");
        assert!(d.contains(&"chain input: rule filter \"web\" was deleted".to_string()), "{d:?}");
        assert!(d.iter().any(|l| l.starts_with("chain input: rule added outside fwc:")), "{d:?}");
        let est = json!({"chain": "input", "expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established"]}}, {"accept": null}]});
        let want2 = base(json!(["10.0.0.1"]), vec![est.clone(), ssh.clone()], "drop");
        let live2 = base(json!(["10.0.0.1"]), vec![est.clone(), ssh.clone(), hand.clone()], "drop");
        let d = describe_drift(&want2, &live2, None);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("chain input: rule added outside fwc: "), "{d:?}");
        let live3 = base(json!(["10.0.0.1"]), vec![ssh.clone()], "drop");
        let d = describe_drift(&want2, &live3, None);
        assert!(d.len() == 1 && d[0].starts_with("chain input: fwc rule deleted: "), "{d:?}");
        let reordered = base(json!(["10.0.0.1"]), vec![web, ssh], "drop");
        assert_eq!(describe_drift(&want, &reordered, None), vec!["chain input: rules were reordered".to_string()]);
    }
}
