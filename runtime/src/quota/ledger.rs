//! The quota ledger: the last usage seen per quota and period, `<state dir>/quota.json`,
//! written atomically (temp file, fsync, rename). Keyed by the rule's identity
//! (`forward:game`), so an unrelated commit, a rollback or a reboot finds it again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the ledger in the state dir.
pub const LEDGER_FILE: &str = "quota.json";

/// What the ledger knows about one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Start of the period the usage belongs to (Unix seconds, 00:00 UTC).
    pub period_start: i64,
    /// Bytes used in that period, as last read from the kernel (or restored).
    pub used: u64,
    /// The 80 % warning was logged for this period.
    #[serde(default)]
    pub warned: bool,
    /// The "used up" message was logged for this period.
    #[serde(default)]
    pub exhausted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// `<kind>:<rule>` -> entry.
    pub quotas: BTreeMap<String, LedgerEntry>,
}

/// The ledger key of a rule.
pub fn key(kind: fwc_artifacts::RuleKind, rule: &str) -> String {
    format!("{}:{rule}", kind.as_str())
}

impl Ledger {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(LEDGER_FILE)
    }

    /// The ledger of `state_dir`; empty when there is none yet. A ledger that cannot be read
    /// is reported and treated as empty (usage then restarts from what the kernel holds).
    pub fn load(state_dir: &Path) -> Ledger {
        match std::fs::read(Self::path(state_dir)) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!("quota ledger {} is unreadable ({e}); starting from the kernel's counts", Self::path(state_dir).display());
                Ledger::default()
            }),
            Err(_) => Ledger::default(),
        }
    }

    pub fn save(&self, state_dir: &Path) -> miette::Result<()> {
        crate::state::create_private_dir(state_dir)?;
        let bytes = serde_json::to_vec_pretty(self).expect("ledger serializes");
        crate::state::write_atomic(&Self::path(state_dir), &bytes)
    }
}
