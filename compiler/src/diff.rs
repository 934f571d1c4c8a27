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
    /// A changed set: its elements added and removed, element by element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elements: Option<ElementChanges>,
}

/// Most elements listed per direction in a plan's JSON (the counts are always complete).
pub const ELEMENT_LIST_LIMIT: usize = 1000;
/// Most elements shown per direction in the plan text; past it, a count.
pub const ELEMENT_TEXT_LIMIT: usize = 10;

/// The elements a set gains and loses (as written in nftables.json: `198.51.100.7`,
/// `203.0.113.0/24`, `10.0.0.1-10.0.0.9`), both families, in the emitter's order; the lists
/// stop at [`ELEMENT_LIST_LIMIT`], the counts do not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElementChanges {
    pub added_count: usize,
    pub removed_count: usize,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

/// The nft sets of fwc set `name` in an nftables.json: the interval sets `<name>_v4`/`<name>_v6`
/// and the hash sets of a big set, `<name>_v4_<len>` (and their shards `<name>_v4_<len>_s<i>`): (nft name, prefix length of a hash set
/// shorter than the address, elements).
fn set_parts<'a>(nftables: &'a serde_json::Value, name: &str) -> Vec<(&'a str, Option<u32>, &'a [serde_json::Value])> {
    let halves = [crate::emit::nft::set_name(name, false), crate::emit::nft::set_name(name, true)];
    let mut out = Vec::new();
    for o in nftables.get("nftables").and_then(|v| v.as_array()).into_iter().flatten() {
        let Some(set) = o.get("add").and_then(|x| x.get("set")).or_else(|| o.get("set")) else { continue };
        let Some(n) = set.get("name").and_then(|n| n.as_str()) else { continue };
        let Some((half, rest)) = halves.iter().enumerate().find_map(|(i, h)| n.strip_prefix(h.as_str()).map(|r| (i, r))) else { continue };
        // "" (interval set), "_<len>" (hash set of one prefix length) or "_<len>_s<i>" (a shard of one)
        let rest = rest.rsplit_once("_s").filter(|(_, i)| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())).map_or(rest, |(r, _)| r);
        let len = match rest.strip_prefix('_').map(str::parse::<u32>) {
            None if rest.is_empty() => None,
            Some(Ok(len)) => Some(len).filter(|&l| l < if half == 0 { 32 } else { 128 }),
            _ => continue,
        };
        let elems = set.get("elem").and_then(|e| e.as_array()).map(Vec::as_slice).unwrap_or_default();
        out.push((n, len, elems));
    }
    out
}

/// An element as the plan shows it: `198.51.100.7`, `203.0.113.0/24` (also for an element of
/// a hash set of one prefix length), `a-b`.
fn shown(e: &serde_json::Value, len: Option<u32>) -> String {
    match len {
        Some(len) => format!("{}/{len}", element_text(e)),
        None => element_text(e),
    }
}

/// `198.51.100.7`, `203.0.113.0/24`, `a-b` for an element of nftables.json.
fn element_text(e: &serde_json::Value) -> String {
    use serde_json::Value;
    match e {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.contains_key("prefix") => {
            let p = &m["prefix"];
            format!("{}/{}", p.get("addr").map(element_text).unwrap_or_default(), p.get("len").map(|l| l.to_string()).unwrap_or_default())
        }
        Value::Object(m) if m.contains_key("range") => {
            m["range"].as_array().map(|r| r.iter().map(element_text).collect::<Vec<_>>().join("-")).unwrap_or_default()
        }
        Value::Object(m) if m.contains_key("elem") => m["elem"].get("val").map(element_text).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// The element changes of set `name` between two artifact sets (None when equal). The
/// emitter writes elements sorted, so each nft set's common head and tail are skipped by
/// value first: a one-element change in a million-element set formats a handful of elements.
fn element_changes(old: &serde_json::Value, new: &serde_json::Value, name: &str) -> Option<ElementChanges> {
    let (op, np) = (set_parts(old, name), set_parts(new, name));
    let (mut o, mut n): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for &(oname, olen, oe) in &op {
        let (ne, nlen) = match np.iter().find(|p| p.0 == oname) {
            Some(&(_, nlen, ne)) => (ne, nlen),
            None => (&[][..], olen),
        };
        let head = oe.iter().zip(ne).take_while(|(a, b)| a == b).count();
        let tail = oe[head..].iter().rev().zip(ne[head..].iter().rev()).take_while(|(a, b)| a == b).count();
        o.extend(oe[head..oe.len() - tail].iter().map(|e| shown(e, olen)));
        n.extend(ne[head..ne.len() - tail].iter().map(|e| shown(e, nlen)));
    }
    for &(_, nlen, ne) in np.iter().filter(|p| !op.iter().any(|q| q.0 == p.0)) {
        n.extend(ne.iter().map(|e| shown(e, nlen)));
    }
    let os: std::collections::HashSet<&str> = o.iter().map(String::as_str).collect();
    let ns: std::collections::HashSet<&str> = n.iter().map(String::as_str).collect();
    let added: Vec<&String> = n.iter().filter(|e| !os.contains(e.as_str())).collect();
    let removed: Vec<&String> = o.iter().filter(|e| !ns.contains(e.as_str())).collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    let list = |v: &[&String]| v.iter().take(ELEMENT_LIST_LIMIT).map(|e| e.to_string()).collect();
    Some(ElementChanges { added_count: added.len(), removed_count: removed.len(), added: list(&added), removed: list(&removed) })
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
                elements: None,
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
                elements: match (n.kind, old) {
                    (RuleKind::Set, Some(old)) => element_changes(&old.nftables, &new.nftables, &n.name),
                    _ => None,
                },
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
                elements: None,
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

/// `+ 198.51.100.7` / `- 192.0.2.66` lines, at most [`ELEMENT_TEXT_LIMIT`] per direction,
/// then what was left out and the counts.
fn render_elements(e: &ElementChanges, color: bool) -> String {
    let (green, red, dim, reset) = if color { ("\x1b[32m", "\x1b[31m", "\x1b[2m", "\x1b[0m") } else { ("", "", "", "") };
    let mut out = String::new();
    for (list, count, sign, col) in [(&e.added, e.added_count, '+', green), (&e.removed, e.removed_count, '-', red)] {
        for el in list.iter().take(ELEMENT_TEXT_LIMIT) {
            out.push_str(&format!("        {col}{sign} {el}{reset}\n"));
        }
        if count > ELEMENT_TEXT_LIMIT {
            out.push_str(&format!("        {dim}{sign} … {} more{reset}\n", count - ELEMENT_TEXT_LIMIT));
        }
    }
    out.push_str(&format!("        {dim}elements: {} added, {} removed{reset}\n", e.added_count, e.removed_count));
    out
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
        if let Some(e) = &c.elements {
            out.push_str(&render_elements(e, color));
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

#[cfg(test)]
mod element_tests {
    use super::*;

    #[test]
    fn set_changes_are_listed_element_by_element_and_summarised_past_the_limit() {
        let e = ElementChanges {
            added_count: 25,
            removed_count: 1,
            added: (0..25).map(|i| format!("198.51.100.{i}")).collect(),
            removed: vec!["192.0.2.66".into()],
        };
        let text = render_elements(&e, false);
        assert!(text.contains("        + 198.51.100.0\n") && text.contains("        + 198.51.100.9\n"), "{text}");
        assert!(!text.contains("198.51.100.10\n"), "{text}");
        assert!(text.contains("        + … 15 more\n"), "{text}");
        assert!(text.contains("        - 192.0.2.66\n"), "{text}");
        assert!(text.ends_with("elements: 25 added, 1 removed\n"), "{text}");
        let v = |els: &[&str]| serde_json::json!({"nftables": [{"add": {"set": {"name": "bl_v4", "elem": els}}}]});
        let c = element_changes(&v(&["192.0.2.66", "203.0.113.9"]), &v(&["198.51.100.7", "203.0.113.9"]), "bl").unwrap();
        assert_eq!((c.added, c.removed), (vec!["198.51.100.7".to_string()], vec!["192.0.2.66".to_string()]));
    }

    /// A big set's hash sets per prefix length; the networks keep their length.
    #[test]
    fn hash_set_changes_name_networks_with_their_length() {
        let v = |s32: &[&str], s24: &[&str]| {
            serde_json::json!({"nftables": [{"add": {"set": {"name": "bl_v4_24", "elem": s24}}}, {"add": {"set": {"name": "bl_v4_32", "elem": s32}}},
                {"add": {"set": {"name": "bl_v6", "elem": []}}}, {"add": {"set": {"name": "blx_v4_24", "elem": ["10.9.9.0"]}}}]})
        };
        let c = element_changes(&v(&["10.0.0.1", "10.0.0.2", "10.0.0.3"], &["10.1.0.0"]), &v(&["10.0.0.1", "10.0.0.3"], &["10.1.0.0", "10.2.0.0"]), "bl").unwrap();
        assert_eq!((c.added, c.removed), (vec!["10.2.0.0/24".to_string()], vec!["10.0.0.2".to_string()]));
        // An element moving between lengths (a /24 split into /25s) is a change of both.
        let c = element_changes(&v(&[], &["10.1.0.0"]), &serde_json::json!({"nftables": [{"add": {"set": {"name": "bl_v4_25", "elem": ["10.1.0.0", "10.1.0.128"]}}}]}), "bl").unwrap();
        assert_eq!((c.added_count, c.removed), (2, vec!["10.1.0.0/24".to_string()]));
    }

    /// The shards of a split hash set are one set's parts: a change names its networks, and a
    /// split into more shards moves elements without changing them.
    #[test]
    fn shard_changes_are_the_sets_changes() {
        let shard = |name: &str, e: &[&str]| serde_json::json!({"add": {"set": {"name": name, "elem": e}}});
        let two = serde_json::json!({"nftables": [shard("bl_v4_32_s0", &["10.0.0.1", "64.0.0.1"]), shard("bl_v4_32_s1", &["130.0.0.1"]), shard("bl_v4_24_s1", &["200.1.2.0"])]});
        let four = serde_json::json!({"nftables": [shard("bl_v4_32_s0", &["10.0.0.1"]), shard("bl_v4_32_s1", &["64.0.0.1"]), shard("bl_v4_32_s2", &["130.0.0.1", "131.0.0.9"]),
            shard("bl_v4_24_s1", &["200.1.2.0", "200.1.4.0"])]});
        let c = element_changes(&two, &four, "bl").unwrap();
        assert_eq!((c.added, c.removed), (vec!["200.1.4.0/24".to_string(), "131.0.0.9".to_string()], vec![]));
        assert!(element_changes(&two, &two, "bl").is_none());
    }
}
