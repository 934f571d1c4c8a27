//! What one audit entry says: its action, outcome and backend changes, its canonical JSON and
//! its hash, and the changes between two manifests it records.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use fwc_compiler::artifacts::{BackendKind, Manifest};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// File name of the log inside the state dir.
pub const AUDIT_FILE: &str = "audit.jsonl";
/// Seq and hash of the newest entry, replaced atomically after every append.
pub const HEAD_FILE: &str = "audit.head";
/// Where torn tails found after a crash are preserved.
pub const TORN_FILE: &str = "audit.jsonl.torn";
/// `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A commit was applied (or its apply failed and was rolled back: see `result`).
    Apply,
    /// The host went back to previously applied artifacts on request.
    Rollback,
    /// A commit was refused before anything was applied (signature, compile error, …).
    Refuse,
    /// The live state differs from the applied artifacts (reported, `--drift alert`).
    Drift,
    /// Drift was repaired by re-applying the applied artifacts (`--drift heal`).
    Heal,
    /// The agent started on an existing state and took it over without touching traffic.
    Adopt,
    /// The fleet rollout holds the host back from the rollout's commit (not promoted, halted,
    /// paused, stopped, an unverified state): recorded when the reason or the state changes.
    Hold,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Apply => "apply",
            Action::Rollback => "rollback",
            Action::Refuse => "refuse",
            Action::Drift => "drift",
            Action::Heal => "heal",
            Action::Adopt => "adopt",
            Action::Hold => "hold",
        }
    }
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done; the host runs what the entry names.
    Ok,
    /// Failed and rolled back: the host still runs the previous state.
    RolledBack,
    /// Failed before any backend changed anything (prepare: a ruleset the kernel refuses, a
    /// program that does not load): nothing to roll back; the host runs what it ran.
    Aborted,
    /// Failed and the rollback failed too: the host may be in a mixed state.
    Failed,
    /// Not attempted (refusals, drift in alert mode).
    Refused,
    /// Reported only.
    Reported,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::RolledBack => "rolled_back",
            Outcome::Aborted => "aborted",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Reported => "reported",
        }
    }
}

/// Rule changes on one backend, as `kind:name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BackendChanges {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

impl BackendChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What the caller fills in; `seq`, `time`, `prev_hash` and `hash` are added by [`AuditLog::append`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub host: String,
    pub action: Option<Action>,
    pub commit: Option<String>,
    pub previous_commit: Option<String>,
    pub author: Option<String>,
    pub signer: Option<String>,
    /// backend name (`nftables`, `qos`, `userspace`) -> changes.
    pub changes: BTreeMap<String, BackendChanges>,
    pub result: Option<Outcome>,
    /// Why (refusal reason, failure, drift description).
    pub detail: Option<String>,
    pub duration_ms: u64,
}

/// One line of `audit.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditEntry {
    /// 1, 2, 3, … without gaps.
    pub seq: u64,
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub host: String,
    pub action: Action,
    pub commit: Option<String>,
    pub previous_commit: Option<String>,
    /// Commit author, `Name <email>`.
    pub author: Option<String>,
    /// Who signed the commit (the allowed-signers principal or the GPG key), when verified.
    pub signer: Option<String>,
    pub changes: BTreeMap<String, BackendChanges>,
    pub result: Outcome,
    pub detail: Option<String>,
    pub duration_ms: u64,
    pub prev_hash: String,
    pub hash: String,
}

/// `audit.head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

/// JSON with object keys sorted at every level, no whitespace: the bytes that are hashed.
pub fn canonical_json(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sort(v))).collect();
                let mut out = serde_json::Map::new();
                for (k, v) in sorted {
                    out.insert(k.clone(), v);
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sort(v)).expect("json values serialize")
}

/// sha256 (hex) of the canonical form of `entry` without its `hash` field.
pub fn entry_hash(entry: &Value) -> String {
    let mut v = entry.clone();
    if let Value::Object(m) = &mut v {
        m.remove("hash");
    }
    hex::encode(Sha256::digest(canonical_json(&v).as_bytes()))
}

/// Rule changes per backend between two manifests (None = nothing applied before).
pub fn changes_between(prev: Option<&Manifest>, next: &Manifest) -> BTreeMap<String, BackendChanges> {
    type Key = (String, BackendKind);
    let index = |m: &Manifest| -> BTreeMap<Key, String> {
        let mut out = BTreeMap::new();
        for r in &m.rules {
            for b in &r.backends {
                out.insert((format!("{}:{}", r.kind.as_str(), r.name), *b), r.digest.clone());
            }
        }
        out
    };
    let before = prev.map(index).unwrap_or_default();
    let after = index(next);
    let mut out: BTreeMap<String, BackendChanges> = BTreeMap::new();
    for ((rule, b), digest) in &after {
        match before.get(&(rule.clone(), *b)) {
            None => out.entry(b.as_str().to_string()).or_default().added.push(rule.clone()),
            Some(d) if d != digest => out.entry(b.as_str().to_string()).or_default().changed.push(rule.clone()),
            Some(_) => {}
        }
    }
    for (rule, b) in before.keys() {
        if !after.contains_key(&(rule.clone(), *b)) {
            out.entry(b.as_str().to_string()).or_default().removed.push(rule.clone());
        }
    }
    out
}

/// `2024-05-01T12:34:56.789Z`.
pub fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t.max(UNIX_EPOCH)).to_string()
}
