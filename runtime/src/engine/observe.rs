//! Observation of the live dataplanes besides nftables (whose listing `plan` and `status` also
//! need for the live hash and the counters): the eBPF QoS dataplane (pins, class map, the
//! attachment of every interface as the kernel reports it) and the userspace forwarder
//! (running, listeners equal to `forward.json`). Every difference is one drift line per object.

use fwc_compiler::artifacts::{Artifacts, BackendKind};

use super::transaction;
use crate::backend::{Observation, RuleCounter};

/// What the QoS and forwarder dataplanes look like against `expected`.
#[derive(Debug, Default)]
pub struct Observed {
    pub drift: Vec<String>,
    pub counters: Vec<RuleCounter>,
    /// Health-checked targets (forwarder): (rule, target, up).
    pub target_health: Vec<(String, String, bool)>,
    /// Fill of the forwarder's per-source tables.
    pub per_source: Vec<crate::backend::PerSourceFill>,
}

/// Observe every dataplane except nftables against `expected`. A dataplane that cannot be
/// read is drift too (`qos: cannot read the live state: …`), not an error: `status` must still
/// say what it can.
pub fn besides_nft(netns: Option<&str>, state_dir: &std::path::Path, expected: &Artifacts) -> Observed {
    let mut out = Observed::default();
    for mut b in transaction::default_backends(netns, state_dir) {
        if b.kind() == BackendKind::Nftables {
            continue;
        }
        match b.observe(expected) {
            Ok(Observation { drift, counters, target_health, per_source, .. }) => {
                out.drift.extend(drift);
                out.counters.extend(counters);
                out.target_health.extend(target_health);
                out.per_source.extend(per_source);
            }
            Err(e) => out.drift.push(format!("{}: cannot read the live state: {}", b.kind().as_str(), transaction::chain(&e))),
        }
    }
    out
}
