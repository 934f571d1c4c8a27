//! JSON Schemas of the artifact files, generated from the types (`fwc schema` writes them to
//! `schemas/`).

use std::collections::BTreeMap;

use crate::*;

/// JSON Schemas of every artifact, by file name, generated from the types above (nftables.json
/// follows libnftables' own schema, which is only outlined here).
pub fn schemas() -> BTreeMap<&'static str, serde_json::Value> {
    let mut out = BTreeMap::new();
    out.insert(QOS_FILE, serde_json::to_value(schemars::schema_for!(QosArtifact)).expect("schema serializes"));
    out.insert(FORWARD_FILE, serde_json::to_value(schemars::schema_for!(ForwardArtifact)).expect("schema serializes"));
    out.insert(MANIFEST_FILE, serde_json::to_value(schemars::schema_for!(Manifest)).expect("schema serializes"));
    out.insert(
        NFTABLES_FILE,
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "nftables.json",
            "description": "libnftables JSON (see libnftables-json(5)) that creates `table inet fwc` from scratch; load with `nft -j -f`. Each command is an object with one key (add, ...).",
            "type": "object",
            "required": ["nftables"],
            "additionalProperties": false,
            "properties": {
                "nftables": {
                    "type": "array",
                    "items": { "type": "object", "minProperties": 1, "maxProperties": 1 }
                }
            }
        }),
    );
    out
}
