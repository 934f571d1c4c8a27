//! forward.json emitter (being written).
use crate::artifacts::*;
pub fn emit(_plan: &crate::select::HostPlan) -> ForwardArtifact {
    ForwardArtifact { version: ARTIFACT_VERSION, listeners: vec![] }
}
