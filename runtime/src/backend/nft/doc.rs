//! nftables.json documents as batches: their objects, their dynamic sets, and the batch that
//! replaces fwc's table whole (refusing any other table).

use fwc_compiler::artifacts::NFT_TABLE;
use miette::{miette, Result};
use serde_json::{json, Value};

/// The dynamic sets of an `nftables.json` (name, declaration): sets with the `timeout` flag,
/// which the emitter gives exactly the `dynamic=#true` sets. Other programs own their
/// elements: drift ignores them ([`normalize`]) and an apply carries them over.
pub fn dynamic_sets(doc: &Value) -> Vec<(String, Value)> {
    let Some(arr) = doc.get("nftables").and_then(Value::as_array) else { return Vec::new() };
    arr.iter()
        .filter_map(|o| o.get("add").and_then(|a| a.get("set")).or_else(|| o.get("set")))
        .filter(|s| s["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "timeout")) || is_per_source_set(s))
        .filter_map(|s| Some((s["name"].as_str()?.to_string(), s.clone())))
        .collect()
}

/// A per-source limit's set (`fwc_compiler::features::persource`): the kernel adds its
/// elements (the sources it sees), so they are neither drift nor dropped by an apply.
pub(super) fn is_per_source_set(set: &Value) -> bool {
    set["name"].as_str().is_some_and(|n| fwc_compiler::features::persource::parse_set_name(n).is_some())
}

/// What must match for a dynamic set's elements to be carried over.
pub(super) fn declaration(set: &Value) -> (Value, Vec<String>, Value, Value) {
    let mut flags: Vec<String> = set["flags"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(str::to_string)).collect();
    flags.sort();
    (set["type"].clone(), flags, set["timeout"].clone(), set["size"].clone())
}

pub(super) fn add_table() -> Value {
    json!({"add": {"table": {"family": "inet", "name": NFT_TABLE}}})
}

pub(super) fn delete_table() -> Value {
    json!({"delete": {"table": {"family": "inet", "name": NFT_TABLE}}})
}

/// Whether a `{"nftables": [...]}` document has no object (metainfo aside), without copying it.
pub(super) fn is_empty_doc(doc: &Value) -> Result<bool> {
    let arr = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| miette!("nftables.json is not a libnftables JSON document (no \"nftables\" array)"))?;
    Ok(arr.iter().all(|o| o.get("metainfo").is_some()))
}

/// The objects of a `{"nftables": [...]}` document, without metainfo.
pub(super) fn items(doc: &Value) -> Result<Vec<Value>> {
    let arr = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| miette!("nftables.json is not a libnftables JSON document (no \"nftables\" array)"))?;
    Ok(arr.iter().filter(|o| o.get("metainfo").is_none()).cloned().collect())
}

/// `add table; delete table; <doc>`: one batch that replaces fwc's table whether or not it exists.
/// Refuses documents that touch any other table.
pub fn replace_tx(doc: &Value) -> Result<Value> {
    let objs = items(doc)?;
    for o in &objs {
        if let Some(t) = foreign_table(o) {
            return Err(miette!("nftables.json touches table {t}; fwc only ever changes table inet {NFT_TABLE}"));
        }
    }
    let mut tx = vec![add_table(), delete_table()];
    tx.extend(objs);
    Ok(json!({"nftables": tx}))
}

/// If an object (possibly wrapped in add/create/insert/…) names a table other than inet fwc.
pub(super) fn foreign_table(o: &Value) -> Option<String> {
    let Value::Object(m) = o else { return None };
    let (k, v) = m.iter().next()?;
    let inner = match k.as_str() {
        "add" | "create" | "insert" | "replace" | "delete" | "flush" | "destroy" => v.as_object()?.values().next()?,
        _ => v,
    };
    let (family, table) = if k == "table" || inner.get("table").is_none() {
        (inner.get("family")?.as_str()?, inner.get("name")?.as_str()?)
    } else {
        (inner.get("family")?.as_str()?, inner.get("table")?.as_str()?)
    };
    (family != "inet" || table != NFT_TABLE).then(|| format!("{family} {table}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_tx_refuses_foreign_tables() {
        let doc = json!({"nftables": [{"table": {"family": "ip", "name": "nat"}}]});
        assert!(replace_tx(&doc).unwrap_err().to_string().contains("ip nat"));
        let doc = json!({"nftables": [{"add": {"rule": {"family": "inet", "table": "filter", "chain": "x", "expr": []}}}]});
        assert!(replace_tx(&doc).is_err());
        let ok = json!({"nftables": [{"table": {"family": "inet", "name": "fwc"}},
            {"chain": {"family": "inet", "table": "fwc", "name": "input"}}]});
        assert_eq!(replace_tx(&ok).unwrap()["nftables"].as_array().unwrap().len(), 4);
    }
}
