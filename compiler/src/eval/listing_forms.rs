//! Statements of foreign listings written in the forms the evaluator reads, deciding a
//! connection's first packet the same way: a meter (iptables' hashlimit per source, ufw's
//! `limit` as the import reads it) is its limit, which the first packet of a source is within;
//! `meta protocol ip`/`ip6` (the ethertype) is `meta nfproto ipv4`/`ipv6` for the IP packets
//! the evaluator's flows are; iptables' `--set-mark V` (`meta mark set mark and 0x0 xor V`) is
//! `meta mark set V`. Pure: JSON in, JSON out.

use serde_json::Value;

/// Rewrite one rule's statements in place.
pub fn normalize(expr: &mut Value) {
    let Some(stmts) = expr.as_array_mut() else { return };
    for st in stmts.iter_mut() {
        if let Some(inner) = st.get("meter").and_then(|m| m.get("stmt")).cloned() {
            *st = inner;
        }
        if let Some(m) = st.get_mut("match") {
            if is_meta_protocol(m.get("left")) {
                m["left"] = serde_json::json!({"meta": {"key": "nfproto"}});
                if let Some(r) = m.get_mut("right") {
                    ethertype_to_nfproto(r);
                }
            }
        }
        if let Some(v) = st.get_mut("vmap") {
            if is_meta_protocol(v.get("key")) {
                v["key"] = serde_json::json!({"meta": {"key": "nfproto"}});
                for pair in v.pointer_mut("/data/set").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(k) = pair.get_mut(0) {
                        ethertype_to_nfproto(k);
                    }
                }
            }
        }
        if let Some(value) = st.get_mut("mangle").and_then(|m| m.get_mut("value")) {
            fold_cleared_xor(value);
        }
    }
}

fn is_meta_protocol(v: Option<&Value>) -> bool {
    v.and_then(|l| l.pointer("/meta/key")).and_then(Value::as_str) == Some("protocol")
}

/// `ip` -> `ipv4`, `ip6` -> `ipv6`, in a literal or a set of them.
fn ethertype_to_nfproto(v: &mut Value) {
    match v {
        Value::String(s) if s == "ip" => *s = "ipv4".into(),
        Value::String(s) if s == "ip6" => *s = "ipv6".into(),
        Value::Array(a) => a.iter_mut().for_each(ethertype_to_nfproto),
        Value::Object(o) => o.values_mut().for_each(ethertype_to_nfproto),
        _ => {}
    }
}

/// `(x & 0) ^ V` is `V`.
fn fold_cleared_xor(v: &mut Value) {
    let folded = v.get("^").and_then(Value::as_array).filter(|a| a.len() == 2).and_then(|a| {
        let cleared = a[0].get("&").and_then(Value::as_array).is_some_and(|b| b.len() == 2 && b[1].as_u64() == Some(0));
        cleared.then(|| a[1].clone())
    });
    if let Some(f) = folded {
        *v = f;
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;
    use serde_json::json;

    #[test]
    fn meters_ethertypes_and_set_marks_are_read_as_plain_statements() {
        let mut e = json!([
            {"match": {"op": "==", "left": {"meta": {"key": "protocol"}}, "right": "ip6"}},
            {"vmap": {"key": {"meta": {"key": "protocol"}}, "data": {"set": [["ip", {"jump": {"target": "v4"}}], ["ip6", {"jump": {"target": "v6"}}]]}}},
            {"meter": {"key": {"elem": {"val": {"payload": {"protocol": "ip", "field": "saddr"}}, "timeout": 60}}, "stmt": {"limit": {"rate": 12, "burst": 6, "per": "minute"}}, "size": 65535, "name": "ufw-limit-22"}},
            {"mangle": {"key": {"meta": {"key": "mark"}}, "value": {"^": [{"&": [{"meta": {"key": "mark"}}, 0]}, 7]}}},
        ]);
        normalize(&mut e);
        assert_eq!(e[0], json!({"match": {"op": "==", "left": {"meta": {"key": "nfproto"}}, "right": "ipv6"}}));
        assert_eq!(e[1]["vmap"]["data"]["set"][0][0], json!("ipv4"));
        assert_eq!(e[1]["vmap"]["data"]["set"][1][0], json!("ipv6"));
        assert_eq!(e[2], json!({"limit": {"rate": 12, "burst": 6, "per": "minute"}}));
        assert_eq!(e[3]["mangle"]["value"], json!(7));
    }
}
