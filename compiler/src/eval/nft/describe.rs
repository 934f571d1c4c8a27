//! A rule's matches in nft-like words, for people reading a trace.

use serde_json::Value;

/// The match statements of a rule in nft-like words, for people reading a trace.
pub fn describe_matches(expr: &[Value]) -> String {
    pub(super) fn side(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Array(a) => a.iter().map(side).collect::<Vec<_>>().join(","),
            Value::Object(o) => match o.iter().next() {
                Some((k, b)) if k == "meta" || k == "ct" => {
                    let key = b.get("key").and_then(Value::as_str).unwrap_or_default();
                    match b.get("dir").and_then(Value::as_str) {
                        Some(d) => format!("{k} {d} {key}"),
                        None => format!("{k} {key}"),
                    }
                }
                Some((k, b)) if k == "payload" => format!(
                    "{} {}",
                    b.get("protocol").and_then(Value::as_str).unwrap_or_default(),
                    b.get("field").and_then(Value::as_str).unwrap_or_default()
                ),
                Some((k, b)) if k == "fib" => {
                    let flags: Vec<&str> = b.get("flags").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
                    format!("fib {} {}", flags.join(" . "), b.get("result").and_then(Value::as_str).unwrap_or_default())
                }
                Some((k, b)) if k == "set" => format!("{{{}}}", side(b)),
                Some((k, b)) if k == "prefix" => format!("{}/{}", side(&b["addr"]), side(&b["len"])),
                Some((k, b)) if k == "range" => b.as_array().map(|r| r.iter().map(side).collect::<Vec<_>>().join("-")).unwrap_or_default(),
                Some((k, b)) if k == "&" || k == "|" => b.as_array().map(|r| r.iter().map(side).collect::<Vec<_>>().join(&format!(" {k} "))).unwrap_or_default(),
                Some((k, _)) => k.clone(),
                None => String::new(),
            },
            // A fib lookup's result: found or not.
            Value::Bool(b) => if *b { "exists" } else { "missing" }.to_string(),
            _ => v.to_string(),
        }
    }
    expr.iter()
        .filter_map(|s| s.get("match"))
        .map(|m| {
            let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
            let op = if op == "==" || op == "in" { String::new() } else { format!("{op} ") };
            format!("{} {op}{}", side(m.get("left").unwrap_or(&Value::Null)), side(m.get("right").unwrap_or(&Value::Null)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
