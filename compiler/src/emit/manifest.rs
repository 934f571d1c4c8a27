//! `manifest.json`: host, commit, and for every rule the backend(s) it went to, why, a one
//! line summary and a digest of its compiled definition (what `fwc plan` diffs), plus the
//! content hash of each other artifact.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::artifacts::*;
use crate::model::*;
use crate::select::HostPlan;

pub fn emit(plan: &HostPlan, commit: Option<&str>, nftables: &serde_json::Value, qos: &QosArtifact, forward: &ForwardArtifact) -> Manifest {
    let filters: BTreeMap<&str, &FilterRule> = plan.chains.iter().flat_map(|c| &c.rules).map(|r| (r.name.value.as_str(), *r)).collect();
    let forwards: BTreeMap<&str, &ForwardRule> =
        plan.kernel_forwards.iter().chain(&plan.userspace_forwards).map(|f| (f.name.value.as_str(), *f)).collect();
    let shapes: BTreeMap<&str, &ShapeRule> = plan.shapes.iter().map(|s| (s.name.value.as_str(), *s)).collect();
    let mut rules = Vec::new();
    for p in &plan.placements {
        let name = p.name.as_str();
        let (summary, digest) = match p.kind {
            RuleKind::Set => {
                let s = plan.set(name).expect("placed sets exist");
                (set_summary(s), digest(&s.elements.iter().map(|e| e.value).collect::<Vec<_>>()))
            }
            RuleKind::Filter => (filter_summary(filters[name]), digest(filters[name])),
            RuleKind::Forward => (forward_summary(forwards[name]), digest(forwards[name])),
            RuleKind::Shape => (shape_summary(shapes[name]), digest(shapes[name])),
        };
        rules.push(ManifestRule {
            kind: p.kind,
            name: p.name.clone(),
            chain: p.chain.map(|c| c.as_str().to_string()),
            backends: p.backends.clone(),
            reason: p.reason.clone(),
            summary,
            digest,
        });
    }
    let mut artifact_hashes = BTreeMap::new();
    artifact_hashes.insert(NFTABLES_FILE.to_string(), sha256_hex(to_pretty(nftables).as_bytes()));
    artifact_hashes.insert(QOS_FILE.to_string(), sha256_hex(to_pretty(qos).as_bytes()));
    artifact_hashes.insert(FORWARD_FILE.to_string(), sha256_hex(to_pretty(forward).as_bytes()));
    Manifest { version: ARTIFACT_VERSION, host: plan.host.name.value.clone(), commit: commit.map(str::to_string), rules, artifact_hashes }
}

fn digest<T: Serialize>(v: &T) -> String {
    sha256_hex(serde_json::to_string(v).expect("model serializes").as_bytes())[..16].to_string()
}

fn addr(m: &AddrMatch) -> String {
    match m {
        AddrMatch::Set(s) => format!("@{s}"),
        AddrMatch::Literal(l) => l.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
    }
}

fn ports(p: &[PortRange]) -> String {
    p.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn set_summary(s: &AddrSet) -> String {
    let shown: Vec<String> = s.elements.iter().take(4).map(|e| e.value.to_string()).collect();
    let more = s.elements.len().saturating_sub(4);
    let mut out = format!("{} element(s): {}", s.elements.len(), shown.join(", "));
    if more > 0 {
        out.push_str(&format!(", … {more} more"));
    }
    out
}

fn filter_summary(r: &FilterRule) -> String {
    let mut out = format!("{} {}", r.chain.as_str(), r.action.as_str());
    if let Some(p) = &r.proto {
        out.push_str(&format!(" {}", p.value.as_str()));
    }
    if let Some(p) = &r.ports {
        out.push_str(&format!(" port {}", ports(&p.value)));
    }
    if let Some(p) = &r.sports {
        out.push_str(&format!(" sport {}", ports(&p.value)));
    }
    if let Some(m) = &r.from {
        out.push_str(&format!(" from {}", addr(&m.value)));
    }
    if let Some(m) = &r.to {
        out.push_str(&format!(" to {}", addr(&m.value)));
    }
    if let Some(i) = &r.iif {
        out.push_str(&format!(" in {}", i.value));
    }
    if let Some(o) = &r.oif {
        out.push_str(&format!(" out {}", o.value));
    }
    if let Some(rate) = &r.rate {
        out.push_str(&format!(" rate {}", rate.value));
    }
    if r.log {
        out.push_str(" log");
    }
    out
}

fn forward_summary(f: &ForwardRule) -> String {
    let listen = match f.listen.addr {
        Some(std::net::IpAddr::V6(a)) => format!("[{a}]:{}", f.listen.ports),
        Some(a) => format!("{a}:{}", f.listen.ports),
        None => format!(":{}", f.listen.ports),
    };
    let targets: Vec<String> = f.targets.value.iter().map(ToString::to_string).collect();
    let mut out = format!("{} {listen} -> {}", f.proto.as_str(), targets.join(","));
    if let Some(m) = &f.from {
        out.push_str(&format!(" from {}", addr(&m.value)));
    }
    match (&f.up, &f.down) {
        (Some(u), Some(d)) if u.value == d.value => out.push_str(&format!(" bandwidth {}", rate(u.value))),
        (u, d) => {
            if let Some(u) = u {
                out.push_str(&format!(" up {}", rate(u.value)));
            }
            if let Some(d) = d {
                out.push_str(&format!(" down {}", rate(d.value)));
            }
        }
    }
    if let Some(m) = &f.max_conns {
        out.push_str(&format!(" max-conns {}", m.value));
    }
    if let Some(r) = &f.conn_rate {
        out.push_str(&format!(" conn-rate {}", r.value));
    }
    if let Some(p) = &f.proxy_protocol {
        out.push_str(&format!(" proxy-protocol v{}", p.value));
    }
    if let Some(t) = &f.idle_timeout_ms {
        out.push_str(&format!(" idle-timeout {}ms", t.value));
    }
    out
}

fn shape_summary(s: &ShapeRule) -> String {
    let mut out = rate(s.rate.value);
    if let Some(m) = &s.from {
        out.push_str(&format!(" from {}", addr(&m.value)));
    }
    if let Some(m) = &s.to {
        out.push_str(&format!(" to {}", addr(&m.value)));
    }
    if let Some(p) = &s.proto {
        out.push_str(&format!(" {}", p.value.as_str()));
    }
    if let Some(p) = &s.ports {
        out.push_str(&format!(" port {}", ports(&p.value)));
    }
    if !s.devs.is_empty() {
        out.push_str(&format!(" dev {}", s.devs.iter().map(|d| d.value.as_str()).collect::<Vec<_>>().join(",")));
    }
    out
}

/// Bytes per second, shown in bits the way operators write them.
pub fn rate(b: Bandwidth) -> String {
    let bits = b.0 as f64 * 8.0;
    let (v, unit) = if bits >= 1e9 {
        (bits / 1e9, "gbit")
    } else if bits >= 1e6 {
        (bits / 1e6, "mbit")
    } else if bits >= 1e3 {
        (bits / 1e3, "kbit")
    } else {
        (bits, "bit")
    };
    let s = format!("{v:.3}");
    format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
}
