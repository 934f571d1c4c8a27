//! Foreign rulesets for the evaluator: what `nft -j list ruleset` prints on any host (several
//! tables of the families `ip`, `ip6` and `inet`, chains of any name, handles, no comments of
//! fwc's), read into one [`Table`] the evaluator runs as it runs fwc's own. `fwc import` uses
//! it to state what the ORIGINAL firewall does to a flow. Anything else stays an error.

use serde_json::{Map, Value};

use super::nft::{EvalError, Table};

/// The name a chain or set of a foreign table gets in the merged table: `ip filter INPUT`.
pub fn qualified(family: &str, table: &str, name: &str) -> String {
    format!("{family} {table} {name}")
}

/// Read a listing (`{"nftables": [{"metainfo"}, {"table"}, {"chain"}, {"set"}, {"map"},
/// {"rule"}, …]}`). Chains and sets are renamed `FAMILY TABLE NAME` (jumps, gotos, verdict
/// maps and `@set` references rewritten with them) so tables cannot collide; base chains keep
/// their family, so an `ip` table sees only IPv4 packets. A rule without a comment gets
/// `FAMILY TABLE CHAIN handle N` as its identity, which is how a decision names it.
/// Tables of the `arp` family are skipped (they never see IP packets); `bridge` and `netdev`
/// tables are refused (the evaluator has no such hooks).
pub fn table_from_listing(v: &Value) -> Result<Table, EvalError> {
    Table::from_json(&serde_json::json!({ "nftables": listing_commands(v)? }))
}

/// fwc's own `nftables.json` and the host's other tables (a listing, fwc's tables left out by
/// the caller) in one [`Table`]: a packet passes every base chain of a hook in priority order,
/// so it is accepted only when both accept it — what the host does while both are loaded.
pub fn beside_fwc(fwc: &Value, listing: &Value) -> Result<Table, EvalError> {
    let mut cmds: Vec<Value> = fwc.get("nftables").and_then(Value::as_array).cloned().ok_or_else(|| EvalError::Malformed("no `nftables` array".into()))?;
    cmds.extend(listing_commands(listing)?);
    Table::from_json(&serde_json::json!({ "nftables": cmds }))
}

/// The listing as `add` commands of [`Table::from_json`], names qualified.
fn listing_commands(v: &Value) -> Result<Vec<Value>, EvalError> {
    let objs = v.get("nftables").and_then(Value::as_array).ok_or_else(|| EvalError::Malformed("no `nftables` array".into()))?;
    // Sets per table first, so `@name` references can be rewritten whatever the order.
    let mut sets: std::collections::BTreeSet<(String, String, String)> = Default::default();
    for o in objs {
        for kind in ["set", "map"] {
            if let Some(s) = o.get(kind) {
                sets.insert((s_of(s, "family"), s_of(s, "table"), s_of(s, "name")));
            }
        }
    }
    let mut cmds = Vec::new();
    for o in objs {
        let Some((kind, body)) = o.as_object().and_then(|m| m.iter().next()) else { continue };
        if kind == "metainfo" {
            continue;
        }
        let family = s_of(body, "family");
        if family == "arp" {
            continue;
        }
        if matches!(family.as_str(), "bridge" | "netdev") {
            return Err(EvalError::Unsupported {
                chain: s_of(body, "name"),
                rule: 0,
                what: format!("a table of family {family} (table {})", s_of(body, if kind == "table" { "name" } else { "table" })),
            });
        }
        // Stateful objects that decide nothing about a flow's first packet: named counters,
        // conntrack helpers/timeouts/expectations, flowtables (offload after the connection is
        // established), secmarks, synproxy settings. Their statements are read as what they
        // do to the first packet (counted, helped, offloaded later: nothing).
        if matches!(kind.as_str(), "counter" | "ct helper" | "ct timeout" | "ct expectation" | "flowtable" | "secmark" | "synproxy") {
            continue;
        }
        let mut body = body.as_object().cloned().unwrap_or_default();
        match kind.as_str() {
            "table" => {}
            // A named quota: renamed like a set, so `quota "name"` in a rule finds it.
            "quota" => {
                let table = s_of_map(&body, "table");
                let name = s_of_map(&body, "name");
                body.insert("name".into(), Value::String(qualified(&family, &table, &name)));
            }
            "chain" | "set" | "map" => {
                let table = s_of_map(&body, "table");
                let name = s_of_map(&body, "name");
                body.insert("name".into(), Value::String(qualified(&family, &table, &name)));
                if kind == "chain" && body.contains_key("hook") {
                    body.insert("family".into(), Value::String(family.clone()));
                }
            }
            "element" => {
                let table = s_of_map(&body, "table");
                let name = s_of_map(&body, "name");
                body.insert("name".into(), Value::String(qualified(&family, &table, &name)));
            }
            "rule" => {
                let table = s_of_map(&body, "table");
                let chain = s_of_map(&body, "chain");
                body.insert("chain".into(), Value::String(qualified(&family, &table, &chain)));
                if let Some(expr) = body.get_mut("expr") {
                    rewrite(expr, &family, &table, &sets);
                    super::listing_forms::normalize(expr);
                }
                if !body.contains_key("comment") {
                    let handle = body.get("handle").and_then(Value::as_u64).map_or(String::new(), |h| format!(" handle {h}"));
                    body.insert("comment".into(), Value::String(format!("{family} {table} {chain}{handle}")));
                }
            }
            other => return Err(EvalError::Malformed(format!("unknown object `{other}` in the listing"))),
        }
        let mut cmd = Map::new();
        cmd.insert(kind.clone(), Value::Object(body));
        cmds.push(serde_json::json!({ "add": Value::Object(cmd) }));
    }
    Ok(cmds)
}

fn s_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn s_of_map(m: &Map<String, Value>, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Qualify jump/goto targets and `@set` references inside a rule's expressions.
fn rewrite(v: &mut Value, family: &str, table: &str, sets: &std::collections::BTreeSet<(String, String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, inner) in m.iter_mut() {
                if k == "quota" {
                    if let Value::String(q) = inner {
                        *q = qualified(family, table, q);
                        continue;
                    }
                }
                if (k == "jump" || k == "goto") && inner.get("target").is_some() {
                    if let Some(Value::String(t)) = inner.get_mut("target") {
                        *t = qualified(family, table, t);
                    }
                    continue;
                }
                rewrite(inner, family, table, sets);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, family, table, sets)),
        Value::String(s) => {
            if let Some(name) = s.strip_prefix('@') {
                if sets.contains(&(family.to_string(), table.to_string(), name.to_string())) {
                    *s = format!("@{}", qualified(family, table, name));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{Evaluator, Flow, Verdict};

    fn listing() -> Value {
        serde_json::json!({"nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip", "name": "filter", "handle": 1}},
            {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
            {"chain": {"family": "ip", "table": "filter", "name": "USER", "handle": 2}},
            {"set": {"family": "ip", "table": "filter", "name": "office", "type": "ipv4_addr", "flags": ["interval"], "elem": [{"prefix": {"addr": "203.0.113.0", "len": 24}}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 5, "expr": [{"jump": {"target": "USER"}}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "USER", "handle": 6, "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@office"}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}},
                {"accept": null}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "USER", "handle": 7, "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 23}},
                {"reject": {"type": "tcp reset"}}]}},
            {"table": {"family": "ip6", "name": "filter", "handle": 2}},
            {"chain": {"family": "ip6", "table": "filter", "name": "INPUT", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
        ]})
    }

    #[test]
    fn a_foreign_listing_is_evaluated_per_family_with_qualified_names() {
        let t = table_from_listing(&listing()).unwrap();
        let ev = Evaluator::from_table(t);
        let x = |f: &str| ev.explain(&Flow::parse(f).unwrap()).unwrap();
        let e = x("tcp 203.0.113.5 -> 198.18.1.1:22");
        assert_eq!(e.verdict, Verdict::Accept);
        assert_eq!(e.decided_by.identity.as_deref(), Some("ip filter USER handle 6"));
        let e = x("tcp 192.0.2.5 -> 198.18.1.1:22");
        assert_eq!((e.verdict, e.decided_by.what.as_str()), (Verdict::Drop, "policy drop of chain ip filter INPUT"));
        assert_eq!(x("tcp 192.0.2.5 -> 198.18.1.1:23").verdict, Verdict::Reject);
        // The ip table never sees IPv6: only the ip6 table's accept policy decides.
        assert_eq!(x("tcp [2001:db8::5]:1000 -> [2001:db8::1]:22").verdict, Verdict::Accept);
    }

    /// Reverse-path filtering: the evaluator's flows are not spoofed, so `fib saddr . iif oif`
    /// finds a route back (`missing`/`0` do not match, `exists` does).
    #[test]
    fn reverse_path_fib_lookups_find_the_way_back() {
        let fib = |right: Value| serde_json::json!({"match": {"op": "==", "left": {"fib": {"result": "oif", "flags": ["saddr", "iif"]}}, "right": right}});
        for (right, verdict) in [(Value::Bool(false), Verdict::Accept), (Value::from("0"), Verdict::Accept), (Value::Bool(true), Verdict::Drop)] {
            let v = serde_json::json!({"nftables": [
                {"table": {"family": "inet", "name": "f", "handle": 1}},
                {"chain": {"family": "inet", "table": "f", "name": "pre", "handle": 1, "type": "filter", "hook": "prerouting", "prio": 0, "policy": "accept"}},
                {"rule": {"family": "inet", "table": "f", "chain": "pre", "handle": 2, "expr": [fib(right.clone()), {"drop": null}]}},
            ]});
            let ev = Evaluator::from_table(table_from_listing(&v).unwrap());
            let x = ev.explain(&Flow::parse("tcp 192.0.2.5 -> 198.18.1.1:22").unwrap()).unwrap();
            assert_eq!(x.verdict, verdict, "fib saddr . iif oif == {right}");
        }
    }

    /// What real listings hold beside tables, chains and rules: named counters (and their
    /// `counter name` statements), a flowtable, a named quota used by a rule.
    #[test]
    fn named_counters_flowtables_and_quotas_are_read() {
        let v = serde_json::json!({"nftables": [
            {"table": {"family": "inet", "name": "f", "handle": 1}},
            {"counter": {"family": "inet", "table": "f", "name": "ssh-in", "handle": 2, "packets": 0, "bytes": 0}},
            {"flowtable": {"family": "inet", "table": "f", "name": "ft", "handle": 3, "hook": "ingress", "prio": 0, "dev": ["lo"]}},
            {"quota": {"family": "inet", "table": "f", "name": "cap", "handle": 4, "bytes": 1000, "used": 0, "inv": true}},
            {"chain": {"family": "inet", "table": "f", "name": "in", "handle": 5, "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
            {"rule": {"family": "inet", "table": "f", "chain": "in", "handle": 6, "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}},
                {"counter": "ssh-in"}, {"accept": null}]}},
            {"rule": {"family": "inet", "table": "f", "chain": "in", "handle": 7, "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 80}},
                {"quota": "cap"}, {"drop": null}]}},
        ]});
        let ev = Evaluator::from_table(table_from_listing(&v).unwrap());
        let x = |f: &str| ev.explain(&Flow::parse(f).unwrap()).unwrap().verdict;
        assert_eq!(x("tcp 192.0.2.5 -> 198.18.1.1:22"), Verdict::Accept);
        // `quota over 1000 bytes` is assumed not used up: the rule does nothing.
        assert_eq!(x("tcp 192.0.2.5 -> 198.18.1.1:80"), Verdict::Drop);
        assert_eq!(x("tcp 192.0.2.5 -> 198.18.1.1:23"), Verdict::Drop);
    }

    /// A router's `ip protocol igmp accept`, `meta l4proto { gre, esp }`: protocols the
    /// evaluator's flows never are, so the match is false, not an error.
    #[test]
    fn other_ip_protocols_by_name_do_not_match_tcp_flows() {
        let proto = |right: Value| serde_json::json!({"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": right}});
        let v = serde_json::json!({"nftables": [
            {"table": {"family": "inet", "name": "f", "handle": 1}},
            {"chain": {"family": "inet", "table": "f", "name": "in", "handle": 2, "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
            {"rule": {"family": "inet", "table": "f", "chain": "in", "handle": 3, "expr": [proto(Value::from("igmp")), {"accept": null}]}},
            {"rule": {"family": "inet", "table": "f", "chain": "in", "handle": 4, "expr": [proto(serde_json::json!({"set": ["gre", "esp"]})), {"accept": null}]}},
            {"rule": {"family": "inet", "table": "f", "chain": "in", "handle": 5, "expr": [proto(Value::from("tcp")), {"accept": null}]}},
        ]});
        let ev = Evaluator::from_table(table_from_listing(&v).unwrap());
        let e = ev.explain(&Flow::parse("tcp 192.0.2.5 -> 198.18.1.1:22").unwrap()).unwrap();
        assert_eq!((e.verdict, e.decided_by.identity.as_deref()), (Verdict::Accept, Some("inet f in handle 5")));
    }

    #[test]
    fn bridge_tables_are_refused() {
        let v = serde_json::json!({"nftables": [{"table": {"family": "bridge", "name": "f", "handle": 1}}]});
        assert!(matches!(table_from_listing(&v), Err(EvalError::Unsupported { .. })));
    }
}
