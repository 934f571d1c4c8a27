//! Machine output (`--json`) of check, plan, status, apply, rollback and audit: every document
//! starts with `format_version` (bumped on an incompatible change; schemas/output/*.schema.json
//! describe version 1) and spells outcomes one way.

use fwc_compiler::diag::Diagnostics;
use serde::Serialize;
use serde_json::{Map, Value};

/// The version of every `--json` document fwc prints.
pub const FORMAT_VERSION: u32 = 1;

/// `value` (an object) with `format_version` as its first field.
pub fn versioned<T: Serialize>(value: &T) -> Value {
    let mut out = Map::new();
    out.insert("format_version".into(), FORMAT_VERSION.into());
    match serde_json::to_value(value).expect("output types serialize") {
        Value::Object(m) => out.extend(m),
        other => {
            out.insert("value".into(), other);
        }
    }
    Value::Object(out)
}

/// Print a document on stdout, pretty.
pub fn print(doc: &Value) {
    println!("{}", serde_json::to_string_pretty(doc).expect("JSON values serialize"));
}

/// `check --json` (and the error document of compile/plan): every diagnostic and the counts.
pub fn diagnostics(diags: &Diagnostics) -> Value {
    let errors = diags.errors().count();
    versioned(&serde_json::json!({
        "ok": errors == 0,
        "errors": errors,
        "warnings": diags.warnings().count(),
        "diagnostics": diags,
    }))
}

/// The result of a command that changes the host (apply, rollback): the audit log's outcome
/// words (`ok`, `rolled_back`, `failed`, `aborted`) plus `unchanged` (nothing to do; not audited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandResult {
    Ok,
    Unchanged,
    RolledBack,
    Failed,
    Aborted,
}

impl From<crate::audit::Outcome> for CommandResult {
    fn from(o: crate::audit::Outcome) -> CommandResult {
        use crate::audit::Outcome;
        match o {
            Outcome::Ok => CommandResult::Ok,
            Outcome::RolledBack => CommandResult::RolledBack,
            Outcome::Aborted => CommandResult::Aborted,
            Outcome::Failed | Outcome::Refused | Outcome::Reported => CommandResult::Failed,
        }
    }
}
