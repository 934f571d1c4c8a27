//! Per-rule diff of two artifact sets (old may be absent): which rules are added, removed or
//! changed, with the backend each goes to, rendered terraform-like for people and as JSON for
//! machines. Rules are compared by (kind, name) and their manifest digest.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::artifacts::{Artifacts, BackendKind, ManifestRule, FORWARD_FILE, NFTABLES_FILE, QOS_FILE};
use crate::model::RuleKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    Add,
    Change,
    Remove,
}

impl ChangeAction {
    fn sign(self) -> char {
        match self {
            ChangeAction::Add => '+',
            ChangeAction::Change => '~',
            ChangeAction::Remove => '-',
        }
    }
    fn ansi(self) -> &'static str {
        match self {
            ChangeAction::Add => "\x1b[32m",
            ChangeAction::Change => "\x1b[33m",
            ChangeAction::Remove => "\x1b[31m",
        }
    }
}

/// One rule that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleChange {
    pub action: ChangeAction,
    pub kind: RuleKind,
    pub name: String,
    /// Backends after the change (before it, for a removal).
    pub backends: Vec<BackendKind>,
    /// Backends before, when a change moved the rule to another dataplane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backends_before: Option<Vec<BackendKind>>,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_before: Option<String>,
    pub reason: String,
}

/// The plan between two artifact sets of one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub host: String,
    pub from_commit: Option<String>,
    pub to_commit: Option<String>,
    pub changes: Vec<RuleChange>,
    /// Per artifact file: does its content change?
    pub artifacts_changed: BTreeMap<String, bool>,
    pub add: usize,
    pub change: usize,
    pub remove: usize,
}

impl Plan {
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty() || self.artifacts_changed.values().any(|c| *c)
    }
}

/// Diff `old` (None = nothing applied yet) against `new`.
pub fn plan(old: Option<&Artifacts>, new: &Artifacts) -> Plan {
    let key = |r: &ManifestRule| (r.kind, r.name.clone());
    let before: BTreeMap<_, &ManifestRule> = old.map(|o| o.manifest.rules.iter().map(|r| (key(r), r)).collect()).unwrap_or_default();
    let after: BTreeMap<_, &ManifestRule> = new.manifest.rules.iter().map(|r| (key(r), r)).collect();
    let mut changes = Vec::new();
    for (k, n) in &after {
        match before.get(k) {
            None => changes.push(RuleChange {
                action: ChangeAction::Add,
                kind: n.kind,
                name: n.name.clone(),
                backends: n.backends.clone(),
                backends_before: None,
                summary: n.summary.clone(),
                summary_before: None,
                reason: n.reason.clone(),
            }),
            Some(o) if o.digest != n.digest || o.backends != n.backends || o.chain != n.chain => changes.push(RuleChange {
                action: ChangeAction::Change,
                kind: n.kind,
                name: n.name.clone(),
                backends: n.backends.clone(),
                backends_before: (o.backends != n.backends).then(|| o.backends.clone()),
                summary: n.summary.clone(),
                summary_before: (o.summary != n.summary).then(|| o.summary.clone()),
                reason: n.reason.clone(),
            }),
            Some(_) => {}
        }
    }
    for (k, o) in &before {
        if !after.contains_key(k) {
            changes.push(RuleChange {
                action: ChangeAction::Remove,
                kind: o.kind,
                name: o.name.clone(),
                backends: o.backends.clone(),
                backends_before: None,
                summary: o.summary.clone(),
                summary_before: None,
                reason: o.reason.clone(),
            });
        }
    }
    changes.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut artifacts_changed = BTreeMap::new();
    for file in [NFTABLES_FILE, QOS_FILE, FORWARD_FILE] {
        let changed = match old {
            None => true,
            Some(o) => o.manifest.artifact_hashes.get(file) != new.manifest.artifact_hashes.get(file),
        };
        artifacts_changed.insert(file.to_string(), changed);
    }
    let count = |a: ChangeAction| changes.iter().filter(|c| c.action == a).count();
    Plan {
        host: new.manifest.host.clone(),
        from_commit: old.and_then(|o| o.manifest.commit.clone()),
        to_commit: new.manifest.commit.clone(),
        add: count(ChangeAction::Add),
        change: count(ChangeAction::Change),
        remove: count(ChangeAction::Remove),
        changes,
        artifacts_changed,
    }
}

fn backends(b: &[BackendKind]) -> String {
    b.iter().map(|k| k.as_str()).collect::<Vec<_>>().join("+")
}

/// Render the plan for a terminal (ANSI colours when `color`).
pub fn render(plan: &Plan, color: bool) -> String {
    let (bold, dim, reset) = if color { ("\x1b[1m", "\x1b[2m", "\x1b[0m") } else { ("", "", "") };
    let short = |c: &Option<String>| c.as_deref().map(|c| c.chars().take(12).collect::<String>()).unwrap_or_else(|| "(none)".into());
    let mut out = format!("{bold}fwc plan for host {}{reset} ({} -> {})\n\n", plan.host, short(&plan.from_commit), short(&plan.to_commit));
    if plan.changes.is_empty() {
        out.push_str("No rule changes.\n");
    }
    let width = plan.changes.iter().map(|c| c.kind.as_str().len() + c.name.len() + 3).max().unwrap_or(0);
    for c in &plan.changes {
        let (col, end) = if color { (c.action.ansi(), reset) } else { ("", "") };
        let name = format!("{} \"{}\"", c.kind.as_str(), c.name);
        out.push_str(&format!("  {col}{} {name:<width$}{end}  [{}]  {}\n", c.action.sign(), backends(&c.backends), c.summary));
        if let Some(before) = &c.backends_before {
            out.push_str(&format!("      {dim}moves from [{}]: {}{reset}\n", backends(before), c.reason));
        } else if c.action == ChangeAction::Add {
            out.push_str(&format!("      {dim}{}{reset}\n", c.reason));
        }
        if let Some(before) = &c.summary_before {
            out.push_str(&format!("      {dim}was: {before}{reset}\n"));
        }
    }
    let files: Vec<&str> = plan.artifacts_changed.iter().filter(|(_, c)| **c).map(|(f, _)| f.as_str()).collect();
    out.push_str(&format!(
        "\nPlan: {} to add, {} to change, {} to remove. Artifacts changed: {}.\n",
        plan.add,
        plan.change,
        plan.remove,
        if files.is_empty() { "none".to_string() } else { files.join(", ") }
    ));
    out
}
