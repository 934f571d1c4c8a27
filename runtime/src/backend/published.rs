//! Ports other programs publish (Docker's `ip nat DOCKER`, Podman's netavark tables: DNAT
//! rules — nft `dnat` or iptables-nft's `-j DNAT` — with a destination port, outside
//! `table inet fwc`), and which of them fwc's compiled
//! `containers` rules leave open to everyone, for the warnings of `fwc plan`. Pure: reads the
//! JSON listings only.

use fwc_compiler::artifacts::NFT_TABLE;
use serde_json::Value;

/// One published port: protocol, port range and where the DNAT rule is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub proto: String,
    pub lo: u64,
    pub hi: u64,
    /// `ip nat DOCKER`
    pub chain: String,
}

fn port_range(v: &Value) -> Vec<(u64, u64)> {
    match v {
        Value::Number(n) => n.as_u64().map(|p| vec![(p, p)]).unwrap_or_default(),
        Value::Object(o) if o.contains_key("range") => match o["range"].as_array().map(|r| (r[0].as_u64(), r[1].as_u64())) {
            Some((Some(a), Some(b))) => vec![(a, b)],
            _ => vec![],
        },
        Value::Object(o) if o.contains_key("set") => o["set"].as_array().into_iter().flatten().flat_map(port_range).collect(),
        _ => vec![],
    }
}

/// DNAT rules with a `tcp dport` / `udp dport` match in every table but fwc's
/// (`nft -t -j list ruleset`).
pub fn published_ports(ruleset: &Value) -> Vec<Published> {
    let mut out = Vec::new();
    for o in ruleset["nftables"].as_array().into_iter().flatten() {
        let Some(r) = o.get("rule") else { continue };
        if r["table"] == NFT_TABLE && r["family"] == "inet" {
            continue;
        }
        let expr = r["expr"].as_array().cloned().unwrap_or_default();
        // nft's `dnat`, or iptables-nft's compat target (`-j DNAT` lists as `xt target DNAT`).
        let dnat = |e: &Value| e.get("dnat").is_some() || (e["xt"]["type"] == "target" && e["xt"]["name"] == "DNAT");
        if !expr.iter().any(dnat) {
            continue;
        }
        for e in &expr {
            let Some(m) = e.get("match").filter(|m| m["op"] == "==") else { continue };
            let Some(p) = m["left"].get("payload") else { continue };
            let proto = p["protocol"].as_str().unwrap_or_default();
            if p["field"] != "dport" || !matches!(proto, "tcp" | "udp") {
                continue;
            }
            for (lo, hi) in port_range(&m["right"]) {
                let chain = format!("{} {} {}", r["family"].as_str().unwrap_or("?"), r["table"].as_str().unwrap_or("?"), r["chain"].as_str().unwrap_or("?"));
                out.push(Published { proto: proto.to_string(), lo, hi, chain });
            }
        }
    }
    out.sort_by(|a, b| (a.lo, &a.proto, &a.chain).cmp(&(b.lo, &b.proto, &b.chain)));
    out.dedup();
    out
}

/// Warnings for the published ports fwc's `containers` rules (in `nftables`, fwc's compiled
/// document) leave open to every client: no `containers` chain at all, or its policy is accept
/// and no rule names the port (`ct original proto-dst`) for its protocol.
pub fn open_to_everyone(published: &[Published], nftables: &Value) -> Vec<String> {
    let rules: Vec<&Value> = nftables["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("add").and_then(|a| a.get("rule")))
        .filter(|r| r["chain"] == "containers_rules")
        .collect();
    let policy_drop = rules.iter().any(|r| r["comment"] == "fwc:chain:containers");
    if policy_drop {
        return Vec::new();
    }
    let named = |p: &Published| {
        rules.iter().any(|r| {
            let expr = r["expr"].as_array().cloned().unwrap_or_default();
            let proto_ok = expr.iter().any(|e| e["match"]["left"]["meta"]["key"] == "l4proto" && e["match"]["right"] == p.proto.as_str());
            let ports: Vec<(u64, u64)> =
                expr.iter().filter(|e| e["match"]["left"]["ct"]["key"] == "proto-dst").flat_map(|e| port_range(&e["match"]["right"])).collect();
            proto_ok && ports.iter().any(|&(lo, hi)| lo <= p.hi && p.lo <= hi)
        })
    };
    let has_block = nftables["nftables"].as_array().into_iter().flatten().any(|c| c["add"]["chain"]["name"] == "containers_rules");
    published
        .iter()
        .filter(|p| !named(p))
        .map(|p| {
            let port = if p.lo == p.hi { p.lo.to_string() } else { format!("{}-{}", p.lo, p.hi) };
            let why = if has_block { "no containers rule names it and the containers policy is accept" } else { "the rules have no `containers` block" };
            format!(
                "{}/{port} is published by {} and open to everyone: {why} (docs/containers.md: `containers policy=drop {{ allow … }}`)",
                p.proto, p.chain
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn docker_nat() -> Value {
        json!({"nftables": [
            {"rule": {"family": "ip", "table": "nat", "chain": "DOCKER", "expr": [
                {"match": {"op": "!=", "left": {"meta": {"key": "iifname"}}, "right": "docker0"}},
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 8080}},
                {"counter": null},
                {"dnat": {"addr": "172.17.0.2", "port": 80}}]}},
            {"rule": {"family": "ip", "table": "nat", "chain": "DOCKER", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}},
                {"xt": {"type": "target", "name": "DNAT"}}]}},
            {"rule": {"family": "ip", "table": "nat", "chain": "POSTROUTING", "expr": [
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 80}},
                {"masquerade": null}]}},
        ]})
    }

    fn rule(expr: Value, comment: &str) -> Value {
        json!({"add": {"rule": {"family": "inet", "table": "fwc", "chain": "containers_rules", "expr": expr, "comment": comment}}})
    }

    #[test]
    fn finds_docker_dnat_ports_not_masquerades() {
        let p = published_ports(&docker_nat());
        assert_eq!(p.iter().map(|p| (p.proto.as_str(), p.lo)).collect::<Vec<_>>(), vec![("udp", 53), ("tcp", 8080)]);
        assert_eq!(p[1].chain, "ip nat DOCKER");
    }

    #[test]
    fn open_unless_named_or_policy_drop() {
        let p = published_ports(&docker_nat());
        let none = json!({"nftables": []});
        assert_eq!(open_to_everyone(&p, &none).len(), 2);
        assert!(open_to_everyone(&p, &none)[0].contains("no `containers` block"), "{:?}", open_to_everyone(&p, &none));
        let web = rule(
            json!([{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}},
                   {"match": {"op": "==", "left": {"ct": {"key": "proto-dst", "dir": "original"}}, "right": 8080}}, {"accept": null}]),
            "fwc:filter:web",
        );
        let chain = json!({"add": {"chain": {"family": "inet", "table": "fwc", "name": "containers_rules"}}});
        let named = json!({"nftables": [chain, web.clone()]});
        let w = open_to_everyone(&p, &named);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("udp/53 is published by ip nat DOCKER") && w[0].contains("policy is accept"), "{w:?}");
        let drop = json!({"nftables": [web, rule(json!([{"counter": null}, {"drop": null}]), "fwc:chain:containers")]});
        assert!(open_to_everyone(&p, &drop).is_empty());
    }
}
