//! The nftables change as a diff: from the live `table inet fwc` (a terse listing with
//! handles) and the last applied `nftables.json` to the next one, the batch that adds, deletes
//! or replaces individual rules (by handle), adds and deletes set and map elements, and
//! creates or deletes chains, sets and maps only when they change. Pure: no I/O.
//!
//! Rules are matched in order (longest common subsequence of each chain's rules as the kernel
//! lists them); an unmatched live rule with the same `fwc:<kind>:<name>` comment at the same
//! place as an unmatched new one is replaced in place, the rest are deleted or added at their
//! position (`insert … handle H` = right before the next unchanged rule H, or appended). Matched rules are
//! not touched, so they keep their counters, `limit` buckets and `ct count` lists.
//! Set and map elements are diffed between the last applied and the next `nftables.json`
//! (the live elements are not listed: that costs more than the change); additions are sent
//! as `add set`/`add map` with the unchanged declaration (nft 1.0.6 then does not read every
//! interval set of the table back, which `add element` does), removals as `delete element`.
//! Whatever the diff cannot express (a chain's hook or a set's type changed, objects fwc never
//! creates) is an `Err` with the reason, and the caller replaces the whole table.

use std::collections::{BTreeMap, HashMap};

use fwc_compiler::artifacts::NFT_TABLE;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::drift_text::rule_label;
use super::normalize::{strip_volatile, Normalized};

/// How the nftables part of an apply changes the live table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NftMode {
    /// Nothing to change.
    Unchanged,
    /// One batch of per-object changes; unchanged rules keep their state.
    Diff,
    /// `delete table` + the whole new table in one batch (counters and rule state reset).
    FullReplace,
}

/// What the nftables transaction will do (shown by `fwc plan`, recorded with the apply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NftChange {
    pub mode: NftMode,
    /// Why the table is replaced whole (empty for a diff).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub rules_added: usize,
    pub rules_deleted: usize,
    pub rules_replaced: usize,
    /// Rules left untouched (their counters and state survive).
    pub rules_kept: usize,
    /// Chains, sets and maps created, deleted or updated: `+ chain fwd_guard`, `- set x_v4`,
    /// `~ chain input: policy drop`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
    /// Element changes per nft set or map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elements: Vec<ElementCount>,
    /// Elements changed outside fwc put back, per plain hash set (a big set's hash sets and
    /// shards): the live elements fwc did not apply deleted, the applied ones missing added,
    /// in the same batch ([`repair`]), instead of replacing the table whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<ElementCount>,
    /// Commands in the batch.
    pub commands: usize,
    /// Sets and maps replaced by a new object of the same name (their declaration changes:
    /// type, flags, size, timeout): (kind, name). Their elements are loaded again; what the
    /// kernel or other programs added to them is gone (see `resets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redeclared: Vec<(String, String)>,
    /// The state this change discards, in words (`set X is replaced …: 12 tracked sources
    /// are reset`): what the plan names before the apply does it. Empty: nothing is lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resets: Vec<String>,
    /// A whole-table replace the diff could not avoid, discarding `resets`: `fwc apply`
    /// refuses it unless the operator passes `--allow-replace`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_allow_replace: bool,
}

/// Elements added to and removed from one nft set or map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElementCount {
    pub set: String,
    pub added: usize,
    pub removed: usize,
}

impl NftChange {
    /// A full replace for `reason`.
    pub fn full(reason: impl Into<String>) -> NftChange {
        NftChange {
            mode: NftMode::FullReplace,
            reason: reason.into(),
            rules_added: 0,
            rules_deleted: 0,
            rules_replaced: 0,
            rules_kept: 0,
            objects: vec![],
            elements: vec![],
            repaired: vec![],
            commands: 0,
            redeclared: vec![],
            resets: vec![],
            needs_allow_replace: false,
        }
    }

    /// One line: `diff: 1 rule replaced, 2 elements added …` or `full replace: <reason>`.
    pub fn describe(&self) -> String {
        match self.mode {
            NftMode::Unchanged => "no change to table inet fwc".into(),
            NftMode::FullReplace => format!("full replace of table inet fwc: {}", self.reason),
            NftMode::Diff => {
                let mut parts = Vec::new();
                let n = |k: usize, what: &str| format!("{k} rule{} {what}", if k == 1 { "" } else { "s" });
                for (k, what) in [(self.rules_added, "added"), (self.rules_replaced, "replaced"), (self.rules_deleted, "deleted")] {
                    if k > 0 {
                        parts.push(n(k, what));
                    }
                }
                let (add, del): (usize, usize) = self.elements.iter().fold((0, 0), |(a, d), e| (a + e.added, d + e.removed));
                if add > 0 {
                    parts.push(format!("{add} element{} added", if add == 1 { "" } else { "s" }));
                }
                if del > 0 {
                    parts.push(format!("{del} element{} removed", if del == 1 { "" } else { "s" }));
                }
                let fixed: usize = self.repaired.iter().map(|e| e.added + e.removed).sum();
                if fixed > 0 {
                    parts.push(format!("{fixed} element{} changed outside fwc put back", if fixed == 1 { "" } else { "s" }));
                }
                if !self.objects.is_empty() {
                    parts.push(format!("{} chain/set change{}", self.objects.len(), if self.objects.len() == 1 { "" } else { "s" }));
                }
                format!(
                    "diff of table inet fwc in one transaction ({} command{}): {}; {} unchanged rule{} keep counters and limit/ct count state",
                    self.commands,
                    if self.commands == 1 { "" } else { "s" },
                    parts.join(", "),
                    self.rules_kept,
                    if self.rules_kept == 1 { "" } else { "s" }
                )
            }
        }
    }
}

/// The objects of an nftables document or listing, by kind.
#[derive(Default)]
struct Objects<'a> {
    /// "set"/"map" name -> object.
    sets: BTreeMap<&'a str, (&'a str, &'a Value)>,
    chains: BTreeMap<&'a str, &'a Value>,
    rules: BTreeMap<&'a str, Vec<&'a Value>>,
    /// quota: named quota objects.
    quotas: BTreeMap<&'a str, &'a Value>,
    /// Kinds fwc never creates (counter, quota, flowtable, …): (kind, name).
    other: Vec<(&'a str, &'a str)>,
}

/// `doc`'s objects; `commands`: it is an input document (`{"add": {…}}`), else a listing.
fn objects(doc: &Value, commands: bool) -> Result<Objects<'_>, String> {
    let mut o = Objects::default();
    for item in doc.get("nftables").and_then(Value::as_array).into_iter().flatten() {
        let Some(mut m) = item.as_object() else { continue };
        if commands {
            match m.iter().next() {
                Some((op, inner)) if op == "add" => m = inner.as_object().ok_or("malformed command")?,
                // A bare object is an `add` too.
                Some((op, _)) if ["metainfo", "table", "set", "map", "chain", "rule", "quota"].contains(&op.as_str()) => {}
                Some((op, _)) => return Err(format!("the new ruleset uses `{op}` commands")),
                None => continue,
            }
        }
        let Some((kind, body)) = m.iter().next() else { continue };
        let name = body.get("name").and_then(Value::as_str).unwrap_or("");
        match kind.as_str() {
            "metainfo" | "table" => {}
            "set" | "map" => {
                o.sets.insert(name, (kind.as_str(), body));
            }
            "chain" => {
                o.chains.insert(name, body);
            }
            "rule" => o.rules.entry(body.get("chain").and_then(Value::as_str).unwrap_or("")).or_default().push(body),
            "quota" => {
                o.quotas.insert(name, body);
            }
            other => o.other.push((other, name)),
        }
    }
    Ok(o)
}

/// An object as listed, without handle, counters and what identifies its place.
fn comparable(v: &Value, drop: &[&str]) -> Value {
    let skip = |k: &str| ["handle", "family", "table", "chain", "elem"].contains(&k) || drop.contains(&k);
    let mut v = match v {
        Value::Object(m) => Value::Object(m.iter().filter(|(k, _)| !skip(k)).map(|(k, x)| (k.clone(), x.clone())).collect()),
        other => other.clone(),
    };
    strip_volatile(&mut v);
    v
}

fn is_dynamic(set: &Value) -> bool {
    set.get("flags").and_then(Value::as_array).is_some_and(|f| f.iter().any(|x| x == "timeout" || x == "dynamic"))
}

fn id(kind: &str, name: &str) -> Value {
    json!({kind: {"family": "inet", "table": NFT_TABLE, "name": name}})
}

/// The batch that turns `live` into `next`. `base` is the `nftables.json` last applied (the
/// live elements are assumed to be its elements), `next_canon` the kernel's listing of
/// `next` without elements (same rule order as `next`). `Err`: why only a full replace works.
pub fn diff(base: &Value, next: &Value, next_canon: &Value, live: &Value) -> Result<(NftChange, Value), String> {
    let want = objects(next, true)?;
    let canon = objects(next_canon, false)?;
    let have = objects(live, false)?;
    let old = objects(base, true)?;
    let mut change = NftChange {
        mode: NftMode::Diff,
        reason: String::new(),
        rules_added: 0,
        rules_deleted: 0,
        rules_replaced: 0,
        rules_kept: 0,
        objects: vec![],
        elements: vec![],
        repaired: vec![],
        commands: 0,
        redeclared: vec![],
        resets: vec![],
        needs_allow_replace: false,
    };
    let (mut create, mut elements_del, mut elements_add, mut rules_del, mut rules_add, mut remove) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Sets and maps whose declaration changes: deleted after the rules that use them, created
    // again (with every element) before the rules that use the new one, in the same batch.
    let mut redeclare = Vec::new();

    // Chains.
    for (name, w) in &want.chains {
        let c = canon.chains.get(name).ok_or_else(|| format!("chain {name} is missing from the kernel's rendering"))?;
        match have.chains.get(name) {
            None => {
                create.push(json!({"add": {"chain": w}}));
                change.objects.push(format!("+ chain {name}"));
            }
            Some(l) if comparable(l, &[]) == comparable(c, &[]) => {}
            Some(l) if comparable(l, &["policy"]) == comparable(c, &["policy"]) => {
                create.push(json!({"add": {"chain": w}}));
                change.objects.push(format!("~ chain {name}: policy {}", c.get("policy").and_then(Value::as_str).unwrap_or("-")));
            }
            Some(_) => return Err(format!("chain {name} changes its type, hook or priority")),
        }
    }
    // Sets and maps.
    for (name, (kind, w)) in &want.sets {
        let (_, c) = canon.sets.get(name).ok_or_else(|| format!("{kind} {name} is missing from the kernel's rendering"))?;
        let Some((lkind, l)) = have.sets.get(name) else {
            create.push(json!({"add": {*kind: w}}));
            change.objects.push(format!("+ {kind} {name}"));
            continue;
        };
        if lkind != kind || comparable(l, &[]) != comparable(c, &[]) {
            // nft cannot change a set's type, flags or size in place: a new object of the
            // same name replaces it; the rules that refer to it go and come back around it.
            redeclare.push(json!({"delete": id(lkind, name)}));
            redeclare.push(json!({"add": {*kind: w}}));
            change.redeclared.push((kind.to_string(), name.to_string()));
            change.objects.push(format!("± {kind} {name} (its declaration changes: replaced, its elements loaded again)"));
            continue;
        }
        if is_dynamic(w) {
            continue; // other programs own its elements
        }
        let Some((okind, o)) = old.sets.get(name) else {
            return Err(format!("{kind} {name} exists live but not in the last applied ruleset"));
        };
        if okind != kind {
            return Err(format!("{kind} {name} was a {okind} in the last applied ruleset"));
        }
        let (added, removed) = element_diff(o.get("elem"), w.get("elem"), *kind == "map");
        if added.is_empty() && removed.is_empty() {
            continue;
        }
        change.elements.push(ElementCount { set: name.to_string(), added: added.len(), removed: removed.len() });
        if !removed.is_empty() {
            elements_del.push(json!({"delete": {"element": {"family": "inet", "table": NFT_TABLE, "name": name, "elem": removed}}}));
        }
        if !added.is_empty() {
            // The declaration as it is (a no-op for the existing set) with the new elements.
            let mut decl: serde_json::Map<String, Value> =
                w.as_object().into_iter().flatten().filter(|(k, _)| *k != "elem").map(|(k, v)| (k.clone(), v.clone())).collect();
            decl.insert("elem".into(), Value::Array(added));
            elements_add.push(json!({"add": {*kind: decl}}));
        }
    }
    // quota: an unchanged quota object is left alone (its count goes on); a
    // changed limit is an `add` of the existing object, which the kernel applies as an update
    // that keeps the count; a new one is created (the commit restores its `used`).
    let limit = |q: &Value| (q.get("bytes").cloned(), q.get("inv").and_then(Value::as_bool).unwrap_or(false));
    for (name, w) in &want.quotas {
        match have.quotas.get(name) {
            Some(l) if limit(l) == limit(w) => {}
            live => {
                create.push(json!({"add": {"quota": w}}));
                change.objects.push(format!("{} quota {name}", if live.is_some() { "~" } else { "+" }));
            }
        }
    }
    // Rules, chain by chain.
    for (chain, wr) in &want.rules {
        let cr = canon.rules.get(chain).map(Vec::as_slice).unwrap_or_default();
        if cr.len() != wr.len() {
            return Err(format!("chain {chain}: the kernel lists {} rules where {} were loaded", cr.len(), wr.len()));
        }
        let lr = have.rules.get(chain).map(Vec::as_slice).unwrap_or_default();
        let forced: Vec<bool> = lr.iter().map(|r| refers_to_any(r, &change.redeclared)).collect();
        rule_diff(chain, wr, cr, lr, &forced, &mut change, &mut rules_del, &mut rules_add)?;
    }
    for (chain, lr) in &have.rules {
        if !want.rules.contains_key(chain) && want.chains.contains_key(chain) {
            for l in lr {
                rules_del.push(json!({"delete": {"rule": {"family": "inet", "table": NFT_TABLE, "chain": chain, "handle": l["handle"]}}}));
                change.rules_deleted += 1;
            }
        }
    }
    // Objects that go away: after the rules that referred to them. Every chain that goes is
    // flushed before any object is deleted (a chain another removed chain jumps to, a set a
    // removed chain's rule looks up, is busy until that rule is gone); then sets and maps (a
    // verdict map's `goto` holds its chain), then the chains.
    let gone_chains: Vec<&&str> = have.chains.keys().filter(|n| !want.chains.contains_key(*n)).collect();
    for name in &gone_chains {
        change.rules_deleted += have.rules.get(**name).map_or(0, Vec::len);
        rules_del.push(json!({"flush": id("chain", name)}));
    }
    for (name, (kind, _)) in have.sets.iter().filter(|(n, _)| !want.sets.contains_key(*n)) {
        remove.push(json!({"delete": id(kind, name)}));
        change.objects.push(format!("- {kind} {name}"));
    }
    for name in &gone_chains {
        remove.push(json!({"delete": id("chain", name)}));
        change.objects.push(format!("- chain {name}"));
    }
    for name in have.quotas.keys().filter(|n| !want.quotas.contains_key(*n)) {
        remove.push(json!({"delete": id("quota", name)}));
        change.objects.push(format!("- quota {name}"));
    }
    for (kind, name) in &have.other {
        remove.push(json!({"delete": id(kind, name)}));
        change.objects.push(format!("- {kind} {name} (not created by fwc)"));
    }
    let batch: Vec<Value> =
        create.into_iter().chain(elements_del).chain(elements_add).chain(rules_del).chain(redeclare).chain(rules_add).chain(remove).collect();
    change.commands = batch.len();
    if batch.is_empty() {
        change.mode = NftMode::Unchanged;
    }
    Ok((change, json!({"nftables": batch})))
}

/// The batch that puts the elements of fwc's plain hash sets (no flags, addresses: a big set's
/// hash sets and their shards) back to the expected ones, from the live ones: per drifted set,
/// `delete element` of the live elements not expected and an `add set` (the declaration as it
/// is, a no-op for the set) of the expected ones missing live. `want` and `live` are
/// normalised listings (elements sorted alike). None when anything else differs (rules, other
/// objects, a set's declaration, the elements of another kind of set or map): then only a
/// whole-table replace repairs it.
pub fn repair(want: &Normalized, live: &Normalized) -> Option<(Vec<ElementCount>, Vec<Value>)> {
    if want.rules != live.rules || want.objects.len() != live.objects.len() {
        return None;
    }
    let (mut counts, mut dels, mut adds) = (Vec::new(), Vec::new(), Vec::new());
    for ((kind, name), w) in &want.objects {
        let l = live.objects.get(&(kind.clone(), name.clone()))?;
        if w == l {
            continue;
        }
        let decl = |b: &Value| b.as_object().map(|m| m.iter().filter(|(k, _)| *k != "elem").map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<_, _>>());
        let strings = |b: &Value| b.get("elem").and_then(Value::as_array).is_none_or(|e| e.iter().all(Value::is_string));
        let plain = kind == "set"
            && w.get("flags").is_none()
            && matches!(w.get("type").and_then(Value::as_str), Some("ipv4_addr" | "ipv6_addr"))
            && strings(w)
            && strings(l);
        if !plain || decl(w) != decl(l) {
            return None;
        }
        let (added, removed) = element_diff(l.get("elem"), w.get("elem"), false);
        counts.push(ElementCount { set: name.clone(), added: added.len(), removed: removed.len() });
        if !removed.is_empty() {
            dels.push(json!({"delete": {"element": {"family": "inet", "table": NFT_TABLE, "name": name, "elem": removed}}}));
        }
        if !added.is_empty() {
            let mut d = decl(w).unwrap_or_default();
            d.insert("family".into(), json!("inet"));
            d.insert("table".into(), json!(NFT_TABLE));
            d.insert("elem".into(), Value::Array(added));
            adds.push(json!({"add": {"set": d}}));
        }
    }
    Some((counts, dels.into_iter().chain(adds).collect()))
}

/// Whether a live rule refers to one of `sets` (`@name` in its expressions).
fn refers_to_any(rule: &Value, sets: &[(String, String)]) -> bool {
    if sets.is_empty() {
        return false;
    }
    let text = rule.get("expr").map(Value::to_string).unwrap_or_default();
    sets.iter().any(|(_, name)| text.contains(&format!("\"@{name}\"")))
}

/// The key that identifies an element: the value without its comment wrapper, and for a map
/// entry `[key, value]` the key.
fn element_key(e: &Value, map: bool) -> &Value {
    let k = if map { e.as_array().and_then(|kv| kv.first()).unwrap_or(e) } else { e };
    k.get("elem").and_then(|el| el.get("val")).unwrap_or(k)
}

/// (added entries, removed keys) between two `elem` arrays of the emitter. Deterministic
/// output keeps long runs in place, so the common prefix and suffix are skipped first.
fn element_diff(old: Option<&Value>, new: Option<&Value>, map: bool) -> (Vec<Value>, Vec<Value>) {
    let empty = Vec::new();
    let o = old.and_then(Value::as_array).unwrap_or(&empty);
    let n = new.and_then(Value::as_array).unwrap_or(&empty);
    let pre = o.iter().zip(n).take_while(|(a, b)| a == b).count();
    let suf = o[pre..].iter().rev().zip(n[pre..].iter().rev()).take_while(|(a, b)| a == b).count();
    let (o, n) = (&o[pre..o.len() - suf], &n[pre..n.len() - suf]);
    let key = |e: &Value| element_key(e, map).to_string();
    let old_by_key: HashMap<String, &Value> = o.iter().map(|e| (key(e), e)).collect();
    let new_by_key: HashMap<String, &Value> = n.iter().map(|e| (key(e), e)).collect();
    let mut removed = Vec::new();
    for e in o {
        match new_by_key.get(&key(e)) {
            Some(ne) if *ne == e => {}
            _ => removed.push(element_key(e, map).clone()),
        }
    }
    let added = n.iter().filter(|e| old_by_key.get(&key(e)).is_none_or(|oe| oe != e)).cloned().collect();
    (added, removed)
}

/// The rule changes of one chain. `want`: the new rules as loaded, `canon`: the same as the
/// kernel lists them, `live`: the live rules (with handles).
#[allow(clippy::too_many_arguments)] // one chain's inputs and the three outputs it appends to
fn rule_diff(
    chain: &str,
    want: &[&Value],
    canon: &[&Value],
    live: &[&Value],
    forced: &[bool],
    change: &mut NftChange,
    dels: &mut Vec<Value>,
    adds: &mut Vec<Value>,
) -> Result<(), String> {
    let c: Vec<Value> = canon.iter().map(|r| comparable(r, &[])).collect();
    // A live rule that refers to a replaced set never matches: it is deleted before the set
    // and added again after the new one (not replaced in place: that would hold the old set).
    let l: Vec<Value> = live.iter().zip(forced).map(|(r, f)| if *f { json!({"refers to a replaced set": r.get("handle")}) } else { comparable(r, &[]) }).collect();
    let pairs = common_subsequence(&c, &l);
    change.rules_kept += pairs.len();
    let handle = |i: usize| live[i].get("handle").cloned().ok_or_else(|| format!("chain {chain}: a live rule has no handle"));
    let with_handle = |r: &Value, h: Option<Value>| {
        let mut r = r.clone();
        if let Some(h) = h {
            r["handle"] = h;
        }
        r
    };
    // Gaps between matched rules: (new range, live range, the matched rule before, after).
    let mut bounds: Vec<(usize, usize)> = vec![(usize::MAX, usize::MAX)];
    bounds.extend(pairs.iter().copied());
    bounds.push((c.len(), l.len()));
    for w in bounds.windows(2) {
        let ((pc, pl), (nc, nl)) = (w[0], w[1]);
        let (c0, l0) = if pc == usize::MAX { (0, 0) } else { (pc + 1, pl + 1) };
        let (new_r, live_r) = (c0..nc, l0..nl);
        if new_r.is_empty() && live_r.is_empty() {
            continue;
        }
        let labels = |rules: &[&Value], r: std::ops::Range<usize>| -> Vec<Option<(String, String)>> { r.map(|i| rule_label(rules[i])).collect() };
        let (ln, ll) = (labels(canon, new_r.clone()), labels(live, live_r.clone()));
        if ln.len() == ll.len() && ln == ll && ln.iter().all(Option::is_some) && !live_r.clone().any(|j| forced[j]) {
            // The same fwc rules at the same place, changed: replace each in place.
            for (i, j) in new_r.zip(live_r) {
                adds.push(json!({"replace": {"rule": with_handle(want[i], Some(handle(j)?))}}));
                change.rules_replaced += 1;
            }
            continue;
        }
        for j in live_r {
            dels.push(json!({"delete": {"rule": {"family": "inet", "table": NFT_TABLE, "chain": chain, "handle": handle(j)?}}}));
            change.rules_deleted += 1;
        }
        change.rules_added += new_r.len();
        if nc < c.len() {
            // Before the matched rule after the gap (`insert … handle H` puts each right
            // before H, so in order). nft 1.0.6 ignores the handle of a JSON `add`.
            let h = handle(nl)?;
            for i in new_r {
                adds.push(json!({"insert": {"rule": with_handle(want[i], Some(h.clone()))}}));
            }
        } else {
            // At the end of the chain (the live rules after the last match are deleted first).
            for i in new_r {
                adds.push(json!({"add": {"rule": with_handle(want[i], None)}}));
            }
        }
    }
    Ok(())
}

/// Index pairs (a, b) of a longest common subsequence of `a` and `b`, in order. Common prefix
/// and suffix first; the quadratic part only runs on what is left (bounded: past it, nothing
/// in the middle is matched and those rules are replaced).
fn common_subsequence(a: &[Value], b: &[Value]) -> Vec<(usize, usize)> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..].iter().rev().zip(b[pre..].iter().rev()).take_while(|(x, y)| x == y).count();
    let mut pairs: Vec<(usize, usize)> = (0..pre).map(|i| (i, i)).collect();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    if !am.is_empty() && !bm.is_empty() && am.len() * bm.len() <= 4_000_000 {
        // dp[i][j] = LCS length of am[i..], bm[j..]
        let (n, m) = (am.len(), bm.len());
        let mut dp = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                dp[i * (m + 1) + j] =
                    if am[i] == bm[j] { dp[(i + 1) * (m + 1) + j + 1] + 1 } else { dp[(i + 1) * (m + 1) + j].max(dp[i * (m + 1) + j + 1]) };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n && j < m {
            if am[i] == bm[j] {
                pairs.push((pre + i, pre + j));
                i += 1;
                j += 1;
            } else if dp[(i + 1) * (m + 1) + j] >= dp[i * (m + 1) + j + 1] {
                i += 1;
            } else {
                j += 1;
            }
        }
    }
    pairs.extend((0..suf).map(|k| (a.len() - suf + k, b.len() - suf + k)));
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(chain: &str, comment: Option<&str>, port: u16, handle: Option<u64>) -> Value {
        let mut r = json!({"family": "inet", "table": "fwc", "chain": chain,
            "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": port}},
                     {"counter": {"packets": 7, "bytes": 700}}, {"accept": null}]});
        if let Some(c) = comment {
            r["comment"] = json!(c);
        }
        if let Some(h) = handle {
            r["handle"] = json!(h);
        }
        r
    }
    fn chain(name: &str, policy: &str, handle: Option<u64>) -> Value {
        let mut c = json!({"family": "inet", "table": "fwc", "name": name, "type": "filter", "hook": "input", "prio": 0, "policy": policy});
        if let Some(h) = handle {
            c["handle"] = json!(h);
        }
        c
    }
    fn set(name: &str, elem: Value) -> Value {
        json!({"family": "inet", "table": "fwc", "name": name, "type": "ipv4_addr", "flags": ["interval"], "elem": elem})
    }
    /// (input document, kernel rendering without elements, live listing with handles)
    fn docs(policy: &str, rules: &[(Option<&str>, u16)], elems: Value, live_rules: &[(Option<&str>, u16, u64)]) -> (Value, Value, Value) {
        let mut input = vec![json!({"add": {"table": {"family": "inet", "name": "fwc"}}}), json!({"add": {"set": set("bl_v4", elems)}}),
            json!({"add": {"chain": chain("input", policy, None)}})];
        let mut canon = vec![json!({"table": {"family": "inet", "name": "fwc", "handle": 1}}), json!({"set": set("bl_v4", Value::Null)}),
            json!({"chain": chain("input", policy, Some(2))})];
        for (c, p) in rules {
            input.push(json!({"add": {"rule": rule("input", *c, *p, None)}}));
            canon.push(json!({"rule": rule("input", *c, *p, Some(9))}));
        }
        let mut live = vec![json!({"table": {"family": "inet", "name": "fwc", "handle": 1}}), json!({"set": set("bl_v4", Value::Null)}),
            json!({"chain": chain("input", "drop", Some(2))})];
        for (c, p, h) in live_rules {
            live.push(json!({"rule": rule("input", *c, *p, Some(*h))}));
        }
        (json!({"nftables": input}), json!({"nftables": canon}), json!({"nftables": live}))
    }

    #[test]
    fn unchanged_table_is_an_empty_batch() {
        let (doc, canon, live) = docs("drop", &[(Some("fwc:filter:a"), 22), (None, 80)], json!(["10.0.0.1"]), &[(Some("fwc:filter:a"), 22, 4), (None, 80, 5)]);
        let (c, batch) = diff(&doc, &doc, &canon, &live).unwrap();
        assert_eq!(c.mode, NftMode::Unchanged);
        assert_eq!(batch["nftables"].as_array().unwrap().len(), 0);
        assert_eq!(c.rules_kept, 2);
    }

    #[test]
    fn a_changed_rule_is_replaced_by_handle_and_elements_are_added_and_deleted() {
        let (old, _, live) = docs("drop", &[], json!(["10.0.0.1", "192.0.2.66"]), &[(Some("fwc:filter:a"), 22, 4), (Some("fwc:filter:b"), 80, 5), (None, 99, 6)]);
        let (new, canon, _) =
            docs("drop", &[(Some("fwc:filter:a"), 22), (Some("fwc:filter:b"), 8080), (None, 99)], json!(["10.0.0.1", "198.51.100.7"]), &[]);
        let (c, batch) = diff(&old, &new, &canon, &live).unwrap();
        assert_eq!((c.mode, c.rules_replaced, c.rules_kept, c.rules_added, c.rules_deleted), (NftMode::Diff, 1, 2, 0, 0));
        assert_eq!(c.elements, vec![ElementCount { set: "bl_v4".into(), added: 1, removed: 1 }]);
        let b = batch["nftables"].as_array().unwrap();
        assert_eq!(b.len(), 3, "{batch:#}");
        assert_eq!(b[0]["delete"]["element"]["elem"], json!(["192.0.2.66"]));
        assert_eq!(b[1]["add"]["set"]["elem"], json!(["198.51.100.7"]));
        assert_eq!(b[2]["replace"]["rule"]["handle"], json!(5));
        assert_eq!(b[2]["replace"]["rule"]["expr"][0]["match"]["right"], json!(8080));
    }

    #[test]
    fn new_rules_go_to_their_place_and_removed_ones_by_handle() {
        let (old, _, live) = docs("drop", &[], json!([]), &[(Some("fwc:filter:a"), 1, 4), (Some("fwc:filter:c"), 3, 5), (Some("fwc:filter:gone"), 9, 6)]);
        let (new, canon, _) = docs(
            "drop",
            &[(Some("fwc:filter:first"), 0), (Some("fwc:filter:a"), 1), (Some("fwc:filter:b1"), 2), (Some("fwc:filter:b2"), 2), (Some("fwc:filter:c"), 3)],
            json!([]),
            &[],
        );
        let (c, batch) = diff(&old, &new, &canon, &live).unwrap();
        assert_eq!((c.rules_added, c.rules_deleted, c.rules_kept), (3, 1, 2));
        let b = batch["nftables"].as_array().unwrap();
        assert_eq!(b[0]["delete"]["rule"]["handle"], json!(6));
        // before a kept rule: inserted right before it, in order
        assert_eq!(b[1]["insert"]["rule"]["handle"], json!(4));
        assert_eq!(b[1]["insert"]["rule"]["comment"], json!("fwc:filter:first"));
        assert_eq!(b[2]["insert"]["rule"]["comment"], json!("fwc:filter:b1"));
        assert_eq!(b[3]["insert"]["rule"]["comment"], json!("fwc:filter:b2"));
        assert_eq!(b[3]["insert"]["rule"]["handle"], json!(5));
    }

    #[test]
    fn chain_layout_changes_need_a_full_replace_sets_are_redeclared_and_policy_is_updated_in_place() {
        let (old, _, live) = docs("drop", &[], json!([]), &[]);
        let (new, canon, _) = docs("accept", &[], json!([]), &[]);
        let (c, batch) = diff(&old, &new, &canon, &live).unwrap();
        assert_eq!(c.objects, vec!["~ chain input: policy accept".to_string()]);
        assert!(batch["nftables"][0]["add"]["chain"].is_object());
        let mut canon2 = canon.clone();
        canon2["nftables"][2]["chain"]["prio"] = json!(10);
        assert!(diff(&old, &new, &canon2, &live).unwrap_err().contains("chain input"));
        // A set's type changes: deleted and created again in the batch, not a full replace.
        let mut canon3 = canon.clone();
        canon3["nftables"][1]["set"]["type"] = json!("ipv6_addr");
        let (c, batch) = diff(&old, &new, &canon3, &live).unwrap();
        assert_eq!(c.redeclared, vec![("set".to_string(), "bl_v4".to_string())]);
        let ops: Vec<String> = batch["nftables"].as_array().unwrap().iter().map(|o| o.to_string()).collect();
        let del = ops.iter().position(|o| o.contains("\"delete\":{\"set\"")).expect("set deleted");
        let add = ops.iter().position(|o| o.contains("\"add\":{\"set\"")).expect("set added again");
        assert!(del < add, "{ops:#?}");
    }

    #[test]
    fn map_entries_are_keyed_by_their_key() {
        let e = |port: u16, addr: &str| json!([{"elem": {"val": {"concat": ["tcp", port]}, "comment": "fwc:forward:x"}}, addr]);
        let (added, removed) = element_diff(Some(&json!([e(1, "10.0.0.1"), e(2, "10.0.0.2")])), Some(&json!([e(1, "10.0.0.1"), e(2, "10.0.0.9"), e(3, "10.0.0.3")])), true);
        assert_eq!(removed, vec![json!({"concat": ["tcp", 2]})]);
        assert_eq!(added, vec![e(2, "10.0.0.9"), e(3, "10.0.0.3")]);
    }

    #[test]
    fn elements_changed_outside_fwc_are_put_back_alone_or_not_at_all() {
        use crate::backend::nft::normalize::normalize;
        let doc = |s0: &[&str], s1: &[&str], flags: bool| {
            let set = |name: &str, e: &[&str]| {
                let mut b = json!({"family": "inet", "table": "fwc", "name": name, "type": "ipv4_addr", "elem": e});
                if flags {
                    b["flags"] = json!(["interval"]);
                }
                json!({"set": b})
            };
            json!({"nftables": [set("bl_v4_32_s0", s0), set("bl_v4_32_s1", s1), {"rule": rule("input", Some("fwc:filter:bl"), 22, Some(4))}]})
        };
        let want = normalize(&doc(&["10.0.0.1", "10.0.0.2", "10.0.0.3"], &["200.0.0.1"], false));
        // One element deleted from shard 0, one added to shard 1: those two, nothing else.
        let (counts, batch) = repair(&want, &normalize(&doc(&["10.0.0.3", "10.0.0.1"], &["200.0.0.1", "200.0.0.9"], false))).unwrap();
        assert_eq!(counts, vec![ElementCount { set: "bl_v4_32_s0".into(), added: 1, removed: 0 }, ElementCount { set: "bl_v4_32_s1".into(), added: 0, removed: 1 }]);
        assert_eq!(batch, vec![
            json!({"delete": {"element": {"family": "inet", "table": "fwc", "name": "bl_v4_32_s1", "elem": ["200.0.0.9"]}}}),
            json!({"add": {"set": {"family": "inet", "table": "fwc", "name": "bl_v4_32_s0", "type": "ipv4_addr", "elem": ["10.0.0.2"]}}}),
        ]);
        // Nothing drifted: an empty batch.
        assert_eq!(repair(&want, &want).unwrap().1, Vec::<Value>::new());
        // An interval set's elements, or a rule changed beside them: only a whole replace.
        let want_iv = normalize(&doc(&["10.0.0.1"], &[], true));
        assert!(repair(&want_iv, &normalize(&doc(&[], &[], true))).is_none());
        let mut other = doc(&["10.0.0.1", "10.0.0.2"], &["200.0.0.1"], false);
        other["nftables"][2]["rule"] = rule("input", Some("fwc:filter:bl"), 23, Some(4));
        assert!(repair(&want, &normalize(&other)).is_none());
    }

    #[test]
    fn lcs_keeps_the_longest_run() {
        let v = |xs: &[i64]| xs.iter().map(|x| json!(x)).collect::<Vec<_>>();
        assert_eq!(common_subsequence(&v(&[1, 2, 3, 4]), &v(&[1, 3, 4, 5])), vec![(0, 0), (2, 1), (3, 2)]);
        assert_eq!(common_subsequence(&v(&[]), &v(&[1])), vec![]);
        assert_eq!(common_subsequence(&v(&[2, 1]), &v(&[1, 2])).len(), 1);
    }

    /// quota: an unchanged quota object is not in the batch (it keeps counting), a
    /// changed limit is one `add quota` (the kernel updates it in place, keeping the count), a
    /// new one is added before the rules, a gone one deleted after them.
    #[test]
    fn quota_objects_are_kept_updated_added_and_deleted() {
        let with = |doc: &mut Value, q: Value, live: bool| {
            let v = if live { json!({"quota": q}) } else { json!({"add": {"quota": q}}) };
            doc["nftables"].as_array_mut().unwrap().insert(2, v);
        };
        let q = |name: &str, bytes: u64, used: Option<u64>| {
            let mut v = json!({"family": "inet", "table": "fwc", "name": name, "bytes": bytes, "inv": true});
            if let Some(u) = used {
                v["used"] = json!(u);
                v["handle"] = json!(30);
            }
            v
        };
        let (mut old, _, mut live) = docs("drop", &[(None, 80)], json!([]), &[(None, 80, 5)]);
        let (mut new, canon, _) = docs("drop", &[(None, 80)], json!([]), &[]);
        with(&mut old, q("quota_a", 100, None), false);
        with(&mut old, q("quota_gone", 100, None), false);
        with(&mut live, q("quota_a", 100, Some(77)), true);
        with(&mut live, q("quota_gone", 100, Some(5)), true);
        with(&mut new, q("quota_a", 100, None), false);
        let (c, batch) = diff(&old, &new, &canon, &live).unwrap();
        assert_eq!(c.objects, vec!["- quota quota_gone".to_string()], "{batch:#}");
        assert_eq!(batch["nftables"].as_array().unwrap().len(), 1);
        assert_eq!(batch["nftables"][0]["delete"]["quota"]["name"], json!("quota_gone"));
        // Unchanged: nothing at all.
        let (c, _) = diff(&new, &new, &canon, &{
            let mut l = live.clone();
            l["nftables"].as_array_mut().unwrap().retain(|o| o.pointer("/quota/name") != Some(&json!("quota_gone")));
            l
        })
        .unwrap();
        assert_eq!(c.mode, NftMode::Unchanged);
        // A new limit and a new quota: `add quota` each, before anything else.
        let mut bigger = new.clone();
        bigger["nftables"][2]["add"]["quota"]["bytes"] = json!(200);
        with(&mut bigger, q("quota_new", 50, None), false);
        let (c, batch) = diff(&new, &bigger, &canon, &live).unwrap();
        assert!(c.objects.contains(&"~ quota quota_a".to_string()) && c.objects.contains(&"+ quota quota_new".to_string()), "{:?}", c.objects);
        let b = batch["nftables"].as_array().unwrap();
        assert_eq!(b[0]["add"]["quota"]["bytes"], json!(200));
        assert_eq!(b[1]["add"]["quota"]["name"], json!("quota_new"));
    }
}
