//! `schemas/` must match what `fwc schema` generates from the Rust types (every artifact and
//! the audit entry). Regenerate with `fwc schema --out schemas/`.

use std::path::Path;

#[test]
fn schemas_dir_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut stale = Vec::new();
    for (name, schema) in fwc_runtime::cli::compile::all_schemas() {
        let file = dir.join(format!("{}.schema.json", name.trim_end_matches(".json")));
        if std::fs::read_to_string(&file).ok() != Some(fwc_compiler::artifacts::to_pretty(&schema)) {
            stale.push(file.display().to_string());
        }
    }
    assert!(stale.is_empty(), "stale or missing (run `fwc schema --out schemas/`): {stale:?}");
}
