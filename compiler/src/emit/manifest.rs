//! manifest.json emitter (being written).
use crate::artifacts::*;
pub fn emit(plan: &crate::select::HostPlan, commit: Option<&str>, _n: &serde_json::Value, _q: &QosArtifact, _f: &ForwardArtifact) -> Manifest {
    Manifest { version: ARTIFACT_VERSION, host: plan.host.name.value.clone(), commit: commit.map(str::to_string), rules: vec![], artifact_hashes: Default::default() }
}
