//! `qos.json`: the token-bucket classes the eBPF QoS program enforces, keyed by the mark bits
//! the nftables rules set.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::RuleKind;

/// `qos.json`: the token-bucket classes the eBPF QoS program enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct QosArtifact {
    pub version: u32,
    /// Bits of the packet mark that carry the class (see [`QOS_MARK_MASK`]).
    pub mark_mask: u32,
    /// Sorted by `id`.
    pub classes: Vec<QosClass>,
}

/// Which way a class's traffic flows, relative to the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QosDirection {
    /// Forward: client -> target (the connection's original direction). Shape: the shaped traffic.
    Up,
    /// Forward: target -> client (the reply direction).
    Down,
}

/// One token bucket. Packets whose `mark & mark_mask == mark` are charged to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QosClass {
    /// Class id, 1..=4095, stable across compiles (derived from the rule name and direction).
    pub id: u32,
    /// `id << 16`: the value the nftables rules put into `ct mark` / `meta mark`.
    pub mark: u32,
    /// `forward` or `shape`.
    pub kind: RuleKind,
    /// The rule this class enforces.
    pub rule: String,
    pub direction: QosDirection,
    /// Sustained rate in bytes per second (wire length).
    pub rate_bytes_per_sec: u64,
    /// Bucket depth in bytes: default max(0.5 s of rate, 64 KiB).
    pub burst_bytes: u64,
    /// Interfaces whose egress the program is attached to; empty = every non-loopback
    /// interface that is up (a forward's traffic can leave on any of them).
    pub interfaces: Vec<String>,
}
