//! nftables expressions and rules in nft-like words, for messages (never raw JSON).

use serde_json::Value;

/// An nftables expression in nft-like words, for messages (never raw JSON).
pub fn describe(v: &Value) -> String {
    let st = |b: &Value, k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    match v {
        Value::Object(o) => match o.iter().next() {
            Some((k, b)) if b.get("key").and_then(Value::as_str).is_some() => format!("{k} {}", st(b, "key")),
            Some((k, b)) if k == "payload" => format!("{} {}", st(b, "protocol"), st(b, "field")),
            Some((k, b)) if k == "fib" => {
                let flags: Vec<String> = b.get("flags").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
                format!("fib {} {}", flags.join(" . "), st(b, "result"))
            }
            Some((k, b)) if k.ends_with("option") || k == "exthdr" => format!("{} {} {}", k, st(b, "name"), st(b, "field")).trim_end().to_string(),
            Some((k, b)) if matches!(k.as_str(), "&" | "|" | "^") => match b.as_array().and_then(|a| a.first()) {
                Some(first) => describe(first),
                None => k.clone(),
            },
            Some((k, b)) if k == "prefix" => format!("{}/{}", st(b, "addr"), b.get("len").map(|l| l.to_string()).unwrap_or_default()),
            Some((k, b)) if k == "range" => b.as_array().map(|a| a.iter().map(describe).collect::<Vec<_>>().join("-")).unwrap_or_else(|| k.clone()),
            Some((k, b)) if k == "set" => match b.as_array() {
                Some(a) => format!("{{ {} }}", a.iter().take(8).map(describe).collect::<Vec<_>>().join(", ") + if a.len() > 8 { ", …" } else { "" }),
                None => describe(b),
            },
            Some((k, b)) if k == "elem" => b.get("val").map(describe).unwrap_or_else(|| k.clone()),
            Some((k, b)) if k == "concat" => b.as_array().map(|a| a.iter().map(describe).collect::<Vec<_>>().join(" . ")).unwrap_or_else(|| k.clone()),
            Some((k, _)) => k.clone(),
            None => "{}".into(),
        },
        Value::Array(a) => a.iter().map(describe).collect::<Vec<_>>().join(", "),
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One rule's expressions in nft-like words: `ip saddr 192.0.2.0/24 drop`,
/// `tcp option maxseg size set rt mtu`.
pub fn describe_rule(expr: &[Value]) -> String {
    let mut parts = Vec::new();
    for (k, b) in statements(expr) {
        match k {
            "counter" => {}
            "match" => {
                let (op, left, right) = match_parts(b);
                let op = if op == "==" || op == "in" { String::new() } else { format!("{op} ") };
                parts.push(format!("{} {op}{}", describe(left), describe(right)));
            }
            "mangle" => parts.push(format!("{} set {}", describe(b.get("key").unwrap_or(&Value::Null)), describe(b.get("value").unwrap_or(&Value::Null)))),
            "jump" | "goto" => parts.push(format!("{k} {}", b.get("target").and_then(Value::as_str).unwrap_or_default())),
            "log" => parts.push("log".into()),
            other => parts.push(other.to_string()),
        }
    }
    let text = parts.join(" ");
    if text.chars().count() > 120 { format!("{}…", text.chars().take(120).collect::<String>()) } else { text }
}

/// A rule's statements as (kind, body), in order: `("match", {…})`, `("accept", null)` — what
/// reading a rule ([`describe_rule`], the translation's parse) walks.
pub fn statements(expr: &[Value]) -> impl Iterator<Item = (&str, &Value)> {
    expr.iter().filter_map(|e| e.as_object().and_then(|m| m.iter().next())).map(|(k, b)| (k.as_str(), b))
}

/// A match's operator (`==` when it has none), left and right.
pub fn match_parts(b: &Value) -> (&str, &Value, &Value) {
    (b.get("op").and_then(Value::as_str).unwrap_or("=="), b.get("left").unwrap_or(&Value::Null), b.get("right").unwrap_or(&Value::Null))
}
