//! The fill of the per-source limits' tracking tables (`fwc_compiler::features::persource`):
//! the kernel sets, counted from the full listing the drift check takes anyway (no extra
//! kernel round trip), and the forwarder's tables, from its status. Exported as
//! `fwc_per_source_entries` / `fwc_per_source_size`.

use fwc_compiler::model::RuleKind;
use fwc_compiler::features::persource::{parse_set_name, Kind};
use serde_json::Value;

use super::PerSourceFill;

/// Every per-source set of `listing` (`nft -j list table inet fwc`, with elements).
pub fn fill(listing: &Value) -> Vec<PerSourceFill> {
    let mut out = Vec::new();
    for o in listing.get("nftables").and_then(Value::as_array).into_iter().flatten() {
        let Some(set) = o.get("set") else { continue };
        let Some((owner, rule, kind, v6)) = set["name"].as_str().and_then(parse_set_name) else { continue };
        out.push(PerSourceFill {
            rule: rule.to_string(),
            kind: if owner == "fwd" { RuleKind::Forward } else { RuleKind::Filter },
            limit: if kind == Kind::Rate { "rate" } else { "conns" },
            family: if v6 { "ipv6" } else { "ipv4" },
            entries: set.get("elem").and_then(Value::as_array).map_or(0, |e| e.len() as u64),
            size: set["size"].as_u64().unwrap_or(0),
        });
    }
    out
}

/// The forwarder's per-source tables (one per userspace forward, both limits in one entry):
/// a series per limit it tracks and family, like the kernel's sets.
pub fn userspace_fill(rules: &[fwc_forwarder::RuleStatsSnapshot]) -> Vec<PerSourceFill> {
    let mut out = Vec::new();
    for r in rules.iter().filter(|r| r.per_source_size > 0) {
        for limit in &r.per_source_limits {
            let limit = if limit == "rate" { "rate" } else { "conns" };
            for (family, entries) in [("ipv4", r.per_source_entries_v4), ("ipv6", r.per_source_entries_v6)] {
                out.push(PerSourceFill { rule: r.rule.clone(), kind: RuleKind::Forward, limit, family, entries, size: r.per_source_size });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_the_elements_of_per_source_sets_only() {
        let l = json!({"nftables": [
            {"set": {"family": "inet", "table": "fwc", "name": "_ps_input_ssh_r_v4", "type": "ipv4_addr", "size": 2, "flags": ["timeout"],
                "elem": [{"elem": {"val": "198.18.1.2", "timeout": 60, "expires": 50}}, {"elem": {"val": "198.18.1.3", "timeout": 60, "expires": 59}}]}},
            {"set": {"family": "inet", "table": "fwc", "name": "_ps_fwd_web_c_v6", "type": "ipv6_addr", "size": 65536}},
            {"set": {"family": "inet", "table": "fwc", "name": "office_v4", "type": "ipv4_addr", "elem": ["198.18.1.2"]}},
        ]});
        let f = fill(&l);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].rule.as_str(), f[0].kind, f[0].limit, f[0].family, f[0].entries, f[0].size), ("ssh", RuleKind::Filter, "rate", "ipv4", 2, 2));
        assert_eq!((f[1].rule.as_str(), f[1].kind, f[1].limit, f[1].family, f[1].entries, f[1].size), ("web", RuleKind::Forward, "conns", "ipv6", 0, 65536));
    }
}
