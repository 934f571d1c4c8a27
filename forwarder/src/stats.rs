//! Per-rule counters of the forwarder (bytes up/down, connections active/total/refused, UDP
//! sessions). Live atomics shared by every connection of a rule; [`RuleStatsSnapshot`] is the
//! serialisable copy that `status`, `fwc forward --stats` and the agent's metrics read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Live counters of one rule. Cumulative counters never go down, also across reloads.
#[derive(Debug, Default)]
pub struct RuleStats {
    /// Client -> target bytes written to the target.
    pub bytes_up: AtomicU64,
    /// Target -> client bytes written to the client.
    pub bytes_down: AtomicU64,
    pub conns_active: AtomicU64,
    pub conns_total: AtomicU64,
    /// Refused by max-conns, conn-rate or allow-from (closed at once).
    pub conns_refused: AtomicU64,
    /// No target could be connected to.
    pub connect_failures: AtomicU64,
    /// Accept errors (EMFILE …) that made the listener back off.
    pub accept_errors: AtomicU64,
    pub udp_sessions_active: AtomicU64,
    pub udp_sessions_total: AtomicU64,
    /// UDP datagrams not delivered, either way: cap exceeded, socket full, no target, a new
    /// client refused (`from=`, conn-rate), or a reply reaching a session that was evicted or
    /// expired (see `udp::LINGER`).
    pub udp_dropped: AtomicU64,
    /// Connections closed by the idle timeout.
    pub idle_timeouts: AtomicU64,
}

impl RuleStats {
    pub fn snapshot(&self, rule: &str) -> RuleStatsSnapshot {
        RuleStatsSnapshot {
            rule: rule.to_string(),
            bytes_up: self.bytes_up.load(Relaxed),
            bytes_down: self.bytes_down.load(Relaxed),
            conns_active: self.conns_active.load(Relaxed),
            conns_total: self.conns_total.load(Relaxed),
            conns_refused: self.conns_refused.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            accept_errors: self.accept_errors.load(Relaxed),
            udp_sessions_active: self.udp_sessions_active.load(Relaxed),
            udp_sessions_total: self.udp_sessions_total.load(Relaxed),
            udp_dropped: self.udp_dropped.load(Relaxed),
            idle_timeouts: self.idle_timeouts.load(Relaxed),
            ..RuleStatsSnapshot::default()
        }
    }
}

/// A copy of one rule's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleStatsSnapshot {
    pub rule: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub conns_active: u64,
    pub conns_total: u64,
    pub conns_refused: u64,
    pub connect_failures: u64,
    pub accept_errors: u64,
    pub udp_sessions_active: u64,
    pub udp_sessions_total: u64,
    pub udp_dropped: u64,
    pub idle_timeouts: u64,
    /// Per-source limits: sources tracked [IPv4, IPv6], the table's size per
    /// family (0: no per-source limit), and which limits it tracks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub per_source_size: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub per_source_entries_v4: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub per_source_entries_v6: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_source_limits: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
