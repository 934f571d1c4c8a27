//! Who owns what the importer leaves alone: Docker's, libvirt's and Kubernetes' tables,
//! chains and bridges, and the listing without them (what the proof evaluates).

use serde_json::Value;

use super::parse::strings;
use super::tx::s;

/// Who owns a table or chain the importer must leave alone.
pub fn owner(family: &str, table: &str, chain: &str) -> Option<&'static str> {
    if family == "inet" && table == "fwc" {
        return Some("fwc (this is fwc's own table)");
    }
    let t = table.to_ascii_lowercase();
    if t.starts_with("docker") {
        return Some("Docker");
    }
    if t.starts_with("libvirt") {
        return Some("libvirt");
    }
    if t.starts_with("kube") || t.starts_with("cilium") || t.starts_with("calico") {
        return Some("Kubernetes");
    }
    if chain.starts_with("DOCKER") && chain != "DOCKER-USER" {
        return Some("Docker");
    }
    if chain.starts_with("LIBVIRT_") {
        return Some("libvirt");
    }
    if chain.starts_with("KUBE-") || chain.starts_with("cali-") || chain.starts_with("CILIUM_") {
        return Some("Kubernetes");
    }
    None
}

/// A bridge Docker, libvirt, CNI or Podman made: `docker0` and `br-` + 12 lowercase hex digits
/// (Docker's user networks), `virbrN`, `cniN`, `podmanN`. Anything else (`br-lan`, `br0`) is
/// the user's own bridge, and its rules are the user's.
pub(super) fn container_iface(name: &str) -> bool {
    let hex12 = |s: &str| s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name == "docker0"
        || name.strip_prefix("br-").is_some_and(hex12)
        || name.strip_prefix("virbr").is_some_and(number)
        || name.strip_prefix("cni").is_some_and(number)
        || name.strip_prefix("podman").is_some_and(number)
}

/// Does a rule match a container bridge ([`container_iface`]), in any sense?
pub(super) fn mentions_container_iface(expr: &[Value]) -> bool {
    expr.iter().filter_map(|e| e.get("match")).any(|m| {
        let key = m.pointer("/left/meta/key").and_then(Value::as_str).unwrap_or_default();
        matches!(key, "iifname" | "oifname" | "iif" | "oif") && strings(m.get("right").unwrap_or(&Value::Null)).iter().any(|i| container_iface(i))
    })
}

/// Docker's hairpin masquerade of a published port: source and destination the same container.
pub(super) fn is_hairpin(expr: &[Value]) -> bool {
    // `ip saddr X ip daddr X` (Docker's), not `ip saddr X ip daddr != X` (a VPN gateway's
    // masquerade of its clients' traffic leaving their network).
    let addr = |field: &str| {
        expr.iter()
            .filter_map(|e| e.get("match"))
            .find(|m| m.pointer("/left/payload/field").and_then(Value::as_str) == Some(field))
            .filter(|m| m.get("op").and_then(Value::as_str).is_none_or(|op| op == "==" || op == "in"))
            .and_then(|m| m.get("right").cloned())
    };
    expr.iter().any(|e| e.get("masquerade").is_some()) && addr("saddr").is_some() && addr("saddr") == addr("daddr")
}

/// The listing without what others own (Docker's, libvirt's, Kubernetes' tables and chains,
/// the rules that jump to them or match their bridges): the policy fwc takes over, which the
/// proof evaluates. Those parts keep running beside fwc, untouched.
pub fn strip_owned(listing: &Value) -> Value {
    let objs = listing.get("nftables").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for o in objs {
        let Some((kind, b)) = o.as_object().and_then(|m| m.iter().next()).map(|(k, b)| (k.clone(), b.clone())) else { continue };
        let fam = s(&b, "family");
        let table = if kind == "table" { s(&b, "name") } else { s(&b, "table") };
        let chain = match kind.as_str() {
            "chain" => s(&b, "name"),
            "rule" => s(&b, "chain"),
            _ => String::new(),
        };
        if owner(&fam, &table, &chain).is_some() {
            continue;
        }
        if kind == "rule" {
            let expr = b.get("expr").and_then(Value::as_array).cloned().unwrap_or_default();
            let jumps_away = expr.iter().filter_map(|e| e.get("jump").or_else(|| e.get("goto"))).filter_map(|j| j.get("target").and_then(Value::as_str)).any(|t| owner(&fam, &table, t).is_some());
            if jumps_away || mentions_container_iface(&expr) || is_hairpin(&expr) {
                continue;
            }
        }
        out.push(o);
    }
    serde_json::json!({ "nftables": out })
}
