//! `qos.json`: the token-bucket classes the plan assigned (`select::classes`), with the mark
//! mask the nftables side and the eBPF program share.

use crate::artifacts::*;

pub fn emit(plan: &crate::place::select::HostPlan) -> QosArtifact {
    QosArtifact { version: ARTIFACT_VERSION, mark_mask: QOS_MARK_MASK, classes: plan.qos_classes.clone() }
}
