//! `nftables.json` read into a [`Table`]: chains with their hooks and rules, sets and maps
//! (indexed for exact lookups), named quotas; the verdicts and the evaluator's errors.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

/// Why a ruleset could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("nftables.json: {what} is not something the evaluator understands (chain {chain}, rule {rule})")]
    Unsupported { chain: String, rule: usize, what: String },
    #[error("nftables.json: {0}")]
    Malformed(String),
    #[error("nftables.json: chain {from} jumps to unknown chain {to}")]
    UnknownChain { from: String, to: String },
    #[error("nftables.json: rule refers to unknown set @{set} (chain {chain})")]
    UnknownSet { chain: String, set: String },
    #[error("nftables.json: jumps nest deeper than 16 chains from {0} (a loop?)")]
    TooDeep(String),
}

/// A base chain's hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub hook: String,
    pub kind: String,
    pub prio: i64,
    pub policy: Verdict,
    /// The table's family when it sees only one address family (`ip`, `ip6`); `None` for
    /// `inet` (fwc's own table) — foreign listings only ([`super::foreign`]).
    pub family: Option<String>,
}

impl Hook {
    /// Does a base chain of this hook see packets of this address family?
    pub fn sees(&self, v6: bool) -> bool {
        match self.family.as_deref() {
            Some("ip") => !v6,
            Some("ip6") => v6,
            _ => true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChainDef {
    pub name: String,
    pub hook: Option<Hook>,
    pub rules: Vec<RuleDef>,
}

#[derive(Debug, Clone)]
pub struct RuleDef {
    pub comment: Option<String>,
    pub expr: Vec<Value>,
}

/// A set or map element: key (one value or a concatenation; each part exact, prefix or range),
/// optional data, optional element comment.
#[derive(Debug, Clone)]
pub(super) struct Elem {
    pub(super) key: Value,
    pub(super) data: Option<Value>,
    pub(super) comment: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct SetDef {
    pub(super) elems: Vec<Elem>,
    /// A set whose elements are all plain addresses (a big set's hash set of one prefix
    /// length) is looked up here, not by a scan of a million elements.
    pub(super) exact: Option<std::collections::HashSet<IpAddr>>,
}

impl SetDef {
    pub(super) fn index(&mut self) {
        let plain = |e: &Elem| -> Option<IpAddr> {
            if e.data.is_some() || e.comment.is_some() {
                return None;
            }
            e.key.as_str()?.parse().ok()
        };
        self.exact = self.elems.iter().map(plain).collect();
    }
}

/// `table inet fwc`, read from `nftables.json`.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub chains: BTreeMap<String, ChainDef>,
    pub(super) sets: BTreeMap<String, SetDef>,
    /// quota (issue #26): named quota objects, name -> limit in bytes.
    pub(super) quotas: BTreeMap<String, u64>,
}

/// The verdict of a rule or chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Accept,
    Drop,
    Reject,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Drop => "drop",
            Verdict::Reject => "reject",
        }
    }
}

impl Table {
    /// Read the commands of `nftables.json` (`add`/`create` of table, chain, set, map, rule, element).
    pub fn from_json(v: &Value) -> Result<Table, EvalError> {
        let cmds = v.get("nftables").and_then(Value::as_array).ok_or_else(|| EvalError::Malformed("no `nftables` array".into()))?;
        let mut t = Table::default();
        for cmd in cmds {
            let Some(obj) = cmd.get("add").or_else(|| cmd.get("create")) else {
                if cmd.get("metainfo").is_some() {
                    continue;
                }
                return Err(EvalError::Malformed(format!("command {cmd} is not add/create")));
            };
            let (kind, o) = obj.as_object().and_then(|m| m.iter().next()).ok_or_else(|| EvalError::Malformed("empty command".into()))?;
            let name = o.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            match kind.as_str() {
                "table" => {}
                "chain" => {
                    let hook = o.get("hook").and_then(Value::as_str).map(|h| Hook {
                        hook: h.to_string(),
                        kind: o.get("type").and_then(Value::as_str).unwrap_or("filter").to_string(),
                        prio: o.get("prio").and_then(Value::as_i64).unwrap_or(0),
                        policy: if o.get("policy").and_then(Value::as_str) == Some("drop") { Verdict::Drop } else { Verdict::Accept },
                        family: o.get("family").and_then(Value::as_str).filter(|f| matches!(*f, "ip" | "ip6")).map(str::to_string),
                    });
                    t.chains.insert(name.clone(), ChainDef { name, hook, rules: Vec::new() });
                }
                "set" | "map" => {
                    let mut def = SetDef::default();
                    for e in o.get("elem").and_then(Value::as_array).into_iter().flatten() {
                        def.elems.push(read_elem(e, kind == "map"));
                    }
                    def.index();
                    t.sets.insert(name, def);
                }
                "element" => {
                    let set = o.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                    let def = t.sets.entry(set).or_default();
                    for e in o.get("elem").and_then(Value::as_array).into_iter().flatten() {
                        def.elems.push(read_elem(e, e.is_array()));
                    }
                    def.index();
                }
                "rule" => {
                    let chain = o.get("chain").and_then(Value::as_str).unwrap_or_default();
                    let c = t.chains.get_mut(chain).ok_or_else(|| EvalError::Malformed(format!("rule in unknown chain {chain}")))?;
                    let expr = o.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
                    c.rules.push(RuleDef { comment: o.get("comment").and_then(Value::as_str).map(str::to_string), expr });
                }
                // quota (issue #26): a named quota object (`over N bytes`).
                "quota" => {
                    t.quotas.insert(name, o.get("bytes").and_then(Value::as_u64).unwrap_or(0));
                }
                other => return Err(EvalError::Malformed(format!("unknown object `{other}`"))),
            }
        }
        Ok(t)
    }

    /// Base chains of `hook`, in priority order (ties: name order, as nft does not promise one).
    pub fn base_chains(&self, hook: &str) -> Vec<&ChainDef> {
        let mut v: Vec<&ChainDef> = self.chains.values().filter(|c| c.hook.as_ref().is_some_and(|h| h.hook == hook)).collect();
        v.sort_by_key(|c| (c.hook.as_ref().map_or(0, |h| h.prio), c.name.clone()));
        v
    }
}

pub(super) fn read_elem(e: &Value, is_map: bool) -> Elem {
    let (k, data) = match (is_map, e.as_array()) {
        (true, Some(pair)) if pair.len() == 2 => (pair[0].clone(), Some(pair[1].clone())),
        _ => (e.clone(), None),
    };
    // `{"elem": {"val": KEY, "comment": …}}` carries per-element options.
    match k.get("elem") {
        Some(inner) => Elem {
            key: inner.get("val").cloned().unwrap_or(Value::Null),
            data,
            comment: inner.get("comment").and_then(Value::as_str).map(str::to_string),
        },
        None => Elem { key: k, data, comment: None },
    }
}
