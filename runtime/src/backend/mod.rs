//! One module per dataplane, all behind the [`Backend`] trait that the apply transaction
//! (`crate::engine::transaction`) drives: prepare everything, commit everything, verify, and on any failure
//! roll every backend back to the previously applied artifacts.

pub mod forward;
pub mod netns;
pub mod nft;
pub mod persource;
pub mod published;
pub mod qos;
pub mod sources;

use fwc_compiler::artifacts::{Artifacts, BackendKind};
use serde::Serialize;

/// A dataplane fwc can program. Implementations own only their own state (fwc's nftables
/// table, fwc's pinned BPF maps, the forwarder's listeners) and never touch anything else.
pub trait Backend {
    /// Which dataplane this is (for plans, audit entries and metrics).
    fn kind(&self) -> BackendKind;

    /// Called before [`Self::prepare`] with the artifacts the live dataplane was last set to
    /// (None: nothing applied), so a backend can change only what differs from them;
    /// `full_replace`: the caller knows the live state drifted in a way a diff would not
    /// repair, so replace everything (the reason is reported). Default: ignored.
    fn set_base(&mut self, _previous: Option<&Artifacts>, _full_replace: Option<&str>) {}

    /// Whether the operator accepts a replace of the whole dataplane state where a diff
    /// cannot be made (`fwc apply --allow-replace`); without it such an apply is refused and
    /// nothing changes. Default: ignored (backends that never discard state).
    fn allow_replace(&mut self, _allow: bool) {}

    /// Validate `next` and stage it; nothing visible may change. Any error here aborts the
    /// apply before any backend commits.
    fn prepare(&mut self, next: &Artifacts) -> miette::Result<()>;

    /// Make the staged state live. Must be atomic per backend where the dataplane allows it.
    fn commit(&mut self) -> miette::Result<()>;

    /// Restore `previous` (the last applied artifacts), or remove everything this backend
    /// owns when there is none. Called for every backend when any of them fails.
    fn rollback(&mut self, previous: Option<&Artifacts>) -> miette::Result<()>;

    /// [`Self::rollback`] after `committed` went live through this backend's commit, so the
    /// way back can be a diff from it (nftables: rules that stayed keep their counters and
    /// `limit` / `ct count` state). Default: [`Self::rollback`].
    fn rollback_from(&mut self, previous: Option<&Artifacts>, _committed: &Artifacts) -> miette::Result<()> {
        self.rollback(previous)
    }

    /// Read the live state back and compare it with `expected`: used by verify after commit,
    /// by drift detection, and for per-rule counters.
    fn observe(&mut self, expected: &Artifacts) -> miette::Result<Observation>;
}

/// What a backend saw when it read its live state back.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Observation {
    /// Human-readable differences between live and expected; empty = in sync.
    pub drift: Vec<String>,
    /// Per-rule counters, where the dataplane keeps them.
    pub counters: Vec<RuleCounter>,
    /// Per-rule gauge of open connections and UDP sessions (the userspace forwarder).
    pub active_connections: Vec<(String, u64)>,
    /// Packets per QoS class and action (`passed`, `paced`, `ecn`, `fastpass`, `dropped`).
    pub qos_packets: Vec<QosPackets>,
    /// Connections of the forwarder's SNI-routed sockets by how they were routed.
    pub sni: Vec<SniConnections>,
    /// Health of health-checked forward targets: (rule, `host:port`, up).
    pub target_health: Vec<(String, String, bool)>,
    /// Fill of the per-source limits' tracking sets.
    pub per_source: Vec<PerSourceFill>,
}

/// One per-source tracking set: a rule's rate or connection limit, one address
/// family; `entries` of at most `size` sources (new sources are refused when they are equal).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PerSourceFill {
    pub rule: String,
    pub kind: fwc_compiler::model::RuleKind,
    /// `rate` or `conns`.
    pub limit: &'static str,
    /// `ipv4` or `ipv6`.
    pub family: &'static str,
    pub entries: u64,
    pub size: u64,
}

/// Connections of one SNI-routed socket (`tcp 0.0.0.0:443`) with one `result`: `routed`,
/// `fallback`, `miss` (no route, no fallback: closed), `parse_failure` (not a TLS
/// ClientHello), `timeout` (no complete ClientHello in time). Cumulative.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SniConnections {
    pub listener: String,
    pub result: &'static str,
    pub connections: u64,
}

/// A QoS class's packet counter for one action; `class` is `<rule>/<up|down>`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct QosPackets {
    pub class: String,
    pub action: &'static str,
    pub packets: u64,
}

impl Observation {
    pub fn in_sync(&self) -> bool {
        self.drift.is_empty()
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RuleCounter {
    /// The rule's name as written in the rules file.
    pub rule: String,
    pub kind: fwc_compiler::model::RuleKind,
    pub backend: BackendKind,
    pub packets: u64,
    pub bytes: u64,
}
