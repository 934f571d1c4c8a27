//! `schemas/` holds the JSON Schemas of every artifact, generated from the Rust types. This
//! test fails when they are stale; regenerate with `fwc schema --out schemas/`.

use std::path::Path;

#[test]
fn schemas_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut stale = Vec::new();
    for (name, schema) in fwc_compiler::artifacts::schemas() {
        let file = dir.join(format!("{}.schema.json", name.trim_end_matches(".json")));
        let want = fwc_compiler::artifacts::to_pretty(&schema);
        match std::fs::read_to_string(&file) {
            Ok(have) if have == want => {}
            _ => stale.push(file.display().to_string()),
        }
    }
    assert!(stale.is_empty(), "stale or missing schemas (run `fwc schema --out schemas/`): {stale:?}");
}
