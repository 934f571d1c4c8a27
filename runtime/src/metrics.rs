//! Prometheus metrics of the agent and the small HTTP server that serves them, the health
//! probes and the git webhook.
//!
//! Metric names (docs/design.md "The agent"): `fwc_apply_total{result}`,
//! `fwc_apply_duration_seconds`, `fwc_applied_commit_info{commit}`, `fwc_drift_total`,
//! `fwc_git_fetch_total{result}`, `fwc_rule_packets_total{rule,backend}`,
//! `fwc_rule_bytes_total{rule,backend}`, `fwc_forward_connections_active{rule}`,
//! `fwc_qos_packets_total{class,action}`, `fwc_forward_sni_connections_total{listener,result}`, `fwc_forward_target_up{rule,target}`,
//! `fwc_quota_used_bytes{host,rule,kind,period}`, `fwc_quota_limit_bytes{…}` (quota), plus `fwc_webhook_requests_total{result}`,
//! `fwc_commit_refused_total{reason}`, `fwc_agent_degraded`, `fwc_build_info{version}`,
//! `fwc_per_source_entries{rule,kind,limit,family}` / `fwc_per_source_size{…}` and the
//! `fwc_last_*_timestamp_seconds` gauges. `rule` is always the rule's name as written in the
//! rules file, with its kind in a `kind` label (filter, forward, shape). Every label value an
//! alert may test (results, refusal reasons) exists at 0 from the start, so `increase()` sees
//! the first event. `/metrics` speaks OpenMetrics 1.0 and, when the scraper prefers it, the
//! Prometheus text format 0.0.4 ([`negotiate`]).
//!
//! One job per file: the registry here, the exposition formats (`exposition`), the health
//! probes' state (`health`), the webhook's authentication (`webhook`); the HTTP server and
//! client that serve them are [`crate::http`] (re-exported here under their old paths).

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::backend::RuleCounter;

mod exposition;
mod health;
pub mod replay;
mod webhook;

pub use crate::http::{http_request, serve, Server, ServerState, MAX_CONNS};
pub use exposition::{negotiate, openmetrics_to_prometheus_text, Exposition};
pub use health::Health;
pub use webhook::{fwc_signature, github_signature, WebhookSecret};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommitLabel {
    pub host: String,
    pub commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabel {
    pub host: String,
}

/// `fwc_agent_degraded`: the commit the failure belongs to and its kind ([`DEGRADED_REASONS`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DegradedLabel {
    pub host: String,
    pub commit: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutInfoLabel {
    pub host: String,
    pub commit: String,
    pub stable: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostWaveLabel {
    pub host: String,
    pub wave: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostStateLabel {
    pub host: String,
    /// A rollout state commit.
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostReasonLabel {
    pub host: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleBackendLabel {
    /// The rule's name as written in the rules file (`ssh`, not `filter:ssh`).
    pub rule: String,
    /// filter, forward or shape.
    pub kind: String,
    pub backend: String,
}

impl RuleBackendLabel {
    pub fn of(c: &RuleCounter) -> RuleBackendLabel {
        RuleBackendLabel { rule: c.rule.clone(), kind: c.kind.as_str().to_string(), backend: c.backend.as_str().to_string() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    pub version: String,
}

/// Label values of the counters alerts test, created at 0 by [`Metrics::new`].
pub const APPLY_RESULTS: &[&str] = &["ok", "aborted", "rolled_back", "failed"];
pub const FETCH_RESULTS: &[&str] = &["ok", "error"];
pub const REFUSAL_REASONS: &[&str] = &["signature", "compile", "rewind", "apply"];
pub const WEBHOOK_RESULTS: &[&str] = &["accepted", "unauthorized", "replayed", "stale", "disabled"];
/// `reason` of `fwc_rollout_held`: why a host is not on the rollout's commit, the names of
/// `rollout::follow::HoldReason` (a test keeps the two in step).
pub const HOLD_REASONS: &[&str] = &["not_promoted", "halted", "paused", "stopped", "unverified_state", "state_rewound", "state_missing"];
/// The `reason` of `fwc_agent_degraded` (docs/fleet.md): what went wrong with its `commit`.
pub const DEGRADED_REASONS: &[&str] = &["refused", "apply_failed", "rolled_back", "self_check", "heal_failed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabel {
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassActionLabel {
    pub class: String,
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleTargetLabel {
    pub rule: String,
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerResultLabel {
    pub listener: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// Every metric of the agent, registered in [`Metrics::registry`].
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub apply_total: Family<ResultLabel, Counter>,
    pub apply_duration_seconds: Histogram,
    pub applied_commit_info: Family<CommitLabel, Gauge>,
    pub drift_total: Counter,
    pub git_fetch_total: Family<ResultLabel, Counter>,
    pub rule_packets_total: Family<RuleBackendLabel, Counter>,
    pub rule_bytes_total: Family<RuleBackendLabel, Counter>,
    pub forward_connections_active: Family<RuleLabel, Gauge>,
    pub qos_packets_total: Family<ClassActionLabel, Counter>,
    pub forward_sni_connections_total: Family<ListenerResultLabel, Counter>,
    pub forward_target_up: Family<RuleTargetLabel, Gauge>,
    pub webhook_requests_total: Family<ResultLabel, Counter>,
    pub commit_refused_total: Family<ReasonLabel, Counter>,
    pub agent_degraded: Family<DegradedLabel, Gauge>,
    /// `fwc_rollout_info{host, commit, stable, phase}`: the rollout state followed.
    pub rollout_info: Family<RolloutInfoLabel, Gauge>,
    /// `fwc_rollout_wave{host, wave}`: this host's wave index.
    pub rollout_wave: Family<HostWaveLabel, Gauge>,
    /// `fwc_rollout_accepted_state{host,state}`: the generation of the last rollout state this
    /// host accepted (the controller refuses to build on an older state at the ref).
    pub rollout_accepted_state: Family<HostStateLabel, Gauge>,
    /// `fwc_rollout_held{host, reason}`: 1 for why the host is not on the rollout's commit.
    pub rollout_held: Family<HostReasonLabel, Gauge>,
    pub self_check_failures_total: Family<HostLabel, Counter>,
    /// The agent's `--host`, a label of every fleet series.
    pub host: String,
    pub build_info: Family<BuildLabel, Gauge>,
    /// Unix time of the last apply (or heal) that succeeded.
    pub last_apply_success: Gauge,
    /// Unix time of the last fetch of the rule repository that succeeded.
    pub last_fetch_success: Gauge,
    /// Unix time of the last comparison of the live dataplane with the applied artifacts.
    pub last_drift_check: Gauge,
    /// Last absolute dataplane counter values seen, to turn them into monotonic counters
    /// (the kernel's counters restart from zero when the table is re-created by an apply).
    last_rule_counters: Mutex<HashMap<RuleBackendLabel, (u64, u64)>>,
    last_qos_counters: Mutex<HashMap<ClassActionLabel, u64>>,
    last_sni_counters: Mutex<HashMap<ListenerResultLabel, u64>>,
    /// `fwc_per_source_entries{rule,kind,limit,family}` / `fwc_per_source_size{…}`:
    /// sources tracked by a per-source limit, and how many fit (then new sources are refused).
    pub per_source_entries: Family<PerSourceLabel, Gauge>,
    pub per_source_size: Family<PerSourceLabel, Gauge>,
    /// quota: `fwc_quota_used_bytes{host,rule,kind,period}` and
    /// `fwc_quota_limit_bytes{host,rule,kind,period}`.
    pub quota_used_bytes: Family<QuotaLabel, Gauge>,
    pub quota_limit_bytes: Family<QuotaLabel, Gauge>,
}

/// Labels of the per-source gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PerSourceLabel {
    pub rule: String,
    pub kind: String,
    /// `rate` or `conns`.
    pub limit: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
}

/// quota: the labels of the quota gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabel {
    /// The agent's `--host`, as on the fleet series (the alert rules group by it).
    pub host: String,
    pub rule: String,
    pub kind: String,
    /// day, week or month.
    pub period: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::for_host("")
    }

    /// The metrics of the agent of `host` (its `--host`, a label of the fleet series).
    pub fn for_host(host: &str) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            apply_total: Family::default(),
            apply_duration_seconds: Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]),
            applied_commit_info: Family::default(),
            drift_total: Counter::default(),
            git_fetch_total: Family::default(),
            rule_packets_total: Family::default(),
            rule_bytes_total: Family::default(),
            forward_connections_active: Family::default(),
            qos_packets_total: Family::default(),
            forward_sni_connections_total: Family::default(),
            forward_target_up: Family::default(),
            webhook_requests_total: Family::default(),
            commit_refused_total: Family::default(),
            agent_degraded: Family::default(),
            rollout_info: Family::default(),
            rollout_wave: Family::default(),
            rollout_accepted_state: Family::default(),
            rollout_held: Family::default(),
            self_check_failures_total: Family::default(),
            host: host.to_string(),
            build_info: Family::default(),
            last_apply_success: Gauge::default(),
            last_fetch_success: Gauge::default(),
            last_drift_check: Gauge::default(),
            last_rule_counters: Mutex::default(),
            last_qos_counters: Mutex::default(),
            last_sni_counters: Mutex::default(),
            per_source_entries: Family::default(),
            per_source_size: Family::default(),
            quota_used_bytes: Family::default(),
            quota_limit_bytes: Family::default(),
            registry: Registry::default(),
        };
        registry.register("fwc_quota_used_bytes", "Bytes a quota counted in its current period (both directions)", m.quota_used_bytes.clone());
        registry.register("fwc_quota_limit_bytes", "Bytes a quota allows per period", m.quota_limit_bytes.clone());
        // Counters get their `_total` suffix from the encoder.
        registry.register("fwc_apply", "Applies by result (ok, aborted, rolled_back, failed)", m.apply_total.clone());
        registry.register("fwc_apply_duration_seconds", "Duration of apply transactions", m.apply_duration_seconds.clone());
        registry.register(
            "fwc_applied_commit_info",
            "The commit whose rules are live (value 1, one series), with the agent's --host",
            m.applied_commit_info.clone(),
        );
        registry.register("fwc_drift", "Times the live dataplane differed from the applied artifacts", m.drift_total.clone());
        registry.register("fwc_git_fetch", "Fetches of the rule repository by result (ok, error)", m.git_fetch_total.clone());
        registry.register("fwc_rule_packets", "Packets matched per rule and backend", m.rule_packets_total.clone());
        registry.register("fwc_rule_bytes", "Bytes matched per rule and backend", m.rule_bytes_total.clone());
        registry.register(
            "fwc_forward_connections_active",
            "Open connections of userspace forwards",
            m.forward_connections_active.clone(),
        );
        registry.register("fwc_qos_packets", "QoS packets per class (<rule>/<up|down>) and action (passed, paced, ecn, fastpass, dropped)", m.qos_packets_total.clone());
        registry.register(
            "fwc_forward_sni_connections",
            "Connections of SNI-routed forwarder sockets by listener and result (routed, fallback, miss, parse_failure, timeout)",
            m.forward_sni_connections_total.clone(),
        );
        registry.register(
            "fwc_forward_target_up",
            "1 while a health-checked forward target passes its checks, 0 while it is taken out",
            m.forward_target_up.clone(),
        );
        registry.register(
            "fwc_webhook_requests",
            "Webhook requests by result (accepted, unauthorized, replayed, stale, disabled)",
            m.webhook_requests_total.clone(),
        );
        registry.register("fwc_commit_refused", "Commits refused by reason (signature, compile, rewind, apply)", m.commit_refused_total.clone());
        registry.register(
            "fwc_agent_degraded",
            "1 while degraded: commit = the commit the failure belongs to, reason = refused|apply_failed|rolled_back|self_check|heal_failed; \
             0 when healthy (commit = the applied commit, reason empty). One series.",
            m.agent_degraded.clone(),
        );
        registry.register(
            "fwc_rollout_info",
            "The fleet rollout state the agent follows (value 1): its commit, stable commit and phase",
            m.rollout_info.clone(),
        );
        registry.register("fwc_rollout_wave", "This host's wave in the rollout policy (value = 0-based index, wave = its name)", m.rollout_wave.clone());
        registry.register(
            "fwc_rollout_accepted_state",
            "The generation of the last rollout state this host accepted (state = its commit); the controller refuses to build on an older state",
            m.rollout_accepted_state.clone(),
        );
        registry.register(
            "fwc_rollout_held",
            "1 for the reason the host is not on the rollout's commit (not_promoted, halted, paused, stopped, unverified_state), 0 for the others",
            m.rollout_held.clone(),
        );
        registry.register(
            "fwc_self_check_failures",
            "Applies reverted because the self-check after them failed (git fetch or a policy probe)",
            m.self_check_failures_total.clone(),
        );
        registry.register("fwc_build_info", "The running fwc (value 1, one series)", m.build_info.clone());
        registry.register(
            "fwc_last_apply_success_timestamp_seconds",
            "Unix time of the last apply or heal that succeeded (0: none since the agent started)",
            m.last_apply_success.clone(),
        );
        registry.register(
            "fwc_last_git_fetch_success_timestamp_seconds",
            "Unix time of the last successful fetch of the rule repository (0: none yet)",
            m.last_fetch_success.clone(),
        );
        registry.register(
            "fwc_last_drift_check_timestamp_seconds",
            "Unix time of the last comparison of the live dataplane with the applied artifacts",
            m.last_drift_check.clone(),
        );
        registry.register(
            "fwc_per_source_entries",
            "Sources tracked by a per-source limit (limit = rate|conns, per address family); at fwc_per_source_size new sources are refused",
            m.per_source_entries.clone(),
        );
        registry.register("fwc_per_source_size", "Most sources a per-source limit tracks per address family (per-source-size=)", m.per_source_size.clone());
        m.build_info.get_or_create(&BuildLabel { version: env!("CARGO_PKG_VERSION").to_string() }).set(1);
        for (family, values) in [(&m.apply_total, APPLY_RESULTS), (&m.git_fetch_total, FETCH_RESULTS), (&m.webhook_requests_total, WEBHOOK_RESULTS)] {
            for v in values {
                let _ = family.get_or_create(&ResultLabel { result: v.to_string() });
            }
        }
        for r in REFUSAL_REASONS {
            let _ = m.commit_refused_total.get_or_create(&ReasonLabel { reason: r.to_string() });
        }
        let _ = m.self_check_failures_total.get_or_create(&HostLabel { host: m.host.clone() });
        m.agent_degraded.get_or_create(&DegradedLabel { host: m.host.clone(), commit: String::new(), reason: String::new() }).set(0);
        m.set_held(None);
        Metrics { registry, ..m }
    }

    /// OpenMetrics 1.0 text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding into a String cannot fail");
        out
    }

    /// Every metric in `format`.
    pub fn encode_as(&self, format: Exposition) -> String {
        match format {
            Exposition::OpenMetrics => self.encode(),
            Exposition::PrometheusText => openmetrics_to_prometheus_text(&self.encode()),
        }
    }

    /// Record that an apply or heal succeeded now.
    pub fn apply_succeeded(&self) {
        self.last_apply_success.set(unix_now());
    }

    /// Record that the live dataplane was compared with the applied artifacts now.
    pub fn drift_checked(&self) {
        self.last_drift_check.set(unix_now());
    }

    /// Count a fetch by result; a success also moves its timestamp.
    pub fn fetched(&self, ok: bool) {
        Metrics::inc(&self.git_fetch_total, if ok { "ok" } else { "error" });
        if ok {
            self.last_fetch_success.set(unix_now());
        }
    }

    pub fn inc(family: &Family<ResultLabel, Counter>, result: &str) {
        family.get_or_create(&ResultLabel { result: result.to_string() }).inc();
    }

    /// Count a refused commit. `reason` is one of [`REFUSAL_REASONS`].
    pub fn refused(&self, reason: &str) {
        debug_assert!(REFUSAL_REASONS.contains(&reason), "undocumented refusal reason {reason}");
        self.commit_refused_total.get_or_create(&ReasonLabel { reason: reason.to_string() }).inc();
    }

    /// Make `commit` the only series of `fwc_applied_commit_info`.
    pub fn set_applied_commit(&self, commit: Option<&str>) {
        self.applied_commit_info.clear();
        if let Some(c) = commit {
            self.applied_commit_info.get_or_create(&CommitLabel { host: self.host.clone(), commit: c.to_string() }).set(1);
        }
    }

    /// Make `fwc_agent_degraded` one series: `failure` = (the commit the failure belongs to,
    /// one of [`DEGRADED_REASONS`]) with value 1, or None: healthy, value 0 with `commit` = the
    /// applied commit. The commit label lets the controller tell an old failure from one of
    /// the commit it rolls out.
    pub fn set_degraded(&self, failure: Option<(&str, &str)>, applied: Option<&str>) {
        debug_assert!(failure.is_none_or(|(_, r)| DEGRADED_REASONS.contains(&r)), "undocumented degraded reason {failure:?}");
        self.agent_degraded.clear();
        let (commit, reason, v) = match failure {
            Some((c, r)) => (c, r, 1),
            None => (applied.unwrap_or(""), "", 0),
        };
        self.agent_degraded.get_or_create(&DegradedLabel { host: self.host.clone(), commit: commit.to_string(), reason: reason.to_string() }).set(v);
    }

    /// `fwc_rollout_accepted_state` of the last rollout state this host accepted.
    pub fn set_accepted_state(&self, accepted: Option<(&str, u64)>) {
        self.rollout_accepted_state.clear();
        if let Some((state, generation)) = accepted {
            self.rollout_accepted_state.get_or_create(&HostStateLabel { host: self.host.clone(), state: state.to_string() }).set(generation as i64);
        }
    }

    /// `fwc_rollout_info` and `fwc_rollout_wave` of the rollout state followed (None: no rollout).
    pub fn set_rollout(&self, state: Option<(&str, Option<&str>, &str)>, wave: Option<(usize, &str)>) {
        self.rollout_info.clear();
        if let Some((commit, stable, phase)) = state {
            let l = RolloutInfoLabel { host: self.host.clone(), commit: commit.to_string(), stable: stable.unwrap_or("").to_string(), phase: phase.to_string() };
            self.rollout_info.get_or_create(&l).set(1);
        }
        self.rollout_wave.clear();
        if let Some((i, name)) = wave {
            self.rollout_wave.get_or_create(&HostWaveLabel { host: self.host.clone(), wave: name.to_string() }).set(i as i64);
        }
    }

    /// `fwc_rollout_held`: 1 for `reason`, 0 for every other (all 0: on the rollout's commit or
    /// no rollout).
    pub fn set_held(&self, reason: Option<&str>) {
        for r in HOLD_REASONS {
            self.rollout_held.get_or_create(&HostReasonLabel { host: self.host.clone(), reason: r.to_string() }).set((Some(*r) == reason) as i64);
        }
    }

    /// Count an apply reverted by its self-check.
    pub fn self_check_failed(&self) {
        self.self_check_failures_total.get_or_create(&HostLabel { host: self.host.clone() }).inc();
    }

    /// Feed absolute per-rule counters read from the dataplane. A value smaller than the last
    /// one means the dataplane counter restarted (table re-created): the new value is all new.
    pub fn observe_rule_counters(&self, counters: &[RuleCounter]) {
        let mut last = self.last_rule_counters.lock().unwrap();
        for c in counters {
            let key = RuleBackendLabel::of(c);
            let (lp, lb) = last.get(&key).copied().unwrap_or((0, 0));
            let dp = if c.packets >= lp { c.packets - lp } else { c.packets };
            let db = if c.bytes >= lb { c.bytes - lb } else { c.bytes };
            self.rule_packets_total.get_or_create(&key).inc_by(dp);
            self.rule_bytes_total.get_or_create(&key).inc_by(db);
            last.insert(key, (c.packets, c.bytes));
        }
    }

    /// Feed absolute QoS class counters (class, action, packets), same reset rule.
    pub fn observe_qos_counters(&self, counters: &[(String, String, u64)]) {
        let mut last = self.last_qos_counters.lock().unwrap();
        for (class, action, v) in counters {
            let key = ClassActionLabel { class: class.clone(), action: action.clone() };
            self.qos_packets_total.get_or_create(&key).inc_by(advance(&mut last, key, *v));
        }
    }

    /// Feed the forwarder's absolute SNI routing counters, same reset rule (a restarted
    /// forwarder or a re-created socket starts from zero).
    pub fn observe_sni(&self, counters: &[crate::backend::SniConnections]) {
        let mut last = self.last_sni_counters.lock().unwrap();
        for c in counters {
            let key = ListenerResultLabel { listener: c.listener.clone(), result: c.result.to_string() };
            self.forward_sni_connections_total.get_or_create(&key).inc_by(advance(&mut last, key, c.connections));
        }
    }

    pub fn set_target_up(&self, rule: &str, target: &str, up: bool) {
        self.forward_target_up.get_or_create(&RuleTargetLabel { rule: rule.to_string(), target: target.to_string() }).set(up as i64);
    }

    /// The fill of the per-source sets; sets gone since the last reading are
    /// dropped from the families.
    pub fn observe_per_source(&self, fills: &[crate::backend::PerSourceFill]) {
        self.per_source_entries.clear();
        self.per_source_size.clear();
        for f in fills {
            let l = PerSourceLabel { rule: f.rule.clone(), kind: f.kind.as_str().to_string(), limit: f.limit.to_string(), family: f.family.to_string() };
            self.per_source_entries.get_or_create(&l).set(f.entries as i64);
            self.per_source_size.get_or_create(&l).set(f.size as i64);
        }
    }

    /// quota: the gauges of every quota of the applied rules (quotas no longer
    /// applied disappear).
    pub fn observe_quotas(&self, quotas: &[crate::quota::QuotaStatus]) {
        self.quota_used_bytes.clear();
        self.quota_limit_bytes.clear();
        for q in quotas {
            let l = QuotaLabel { host: self.host.clone(), rule: q.rule.clone(), kind: q.kind.as_str().to_string(), period: q.period.as_str().to_string() };
            self.quota_used_bytes.get_or_create(&l).set(q.used_bytes.min(i64::MAX as u64) as i64);
            self.quota_limit_bytes.get_or_create(&l).set(q.limit_bytes.min(i64::MAX as u64) as i64);
        }
    }

    pub fn set_forward_connections(&self, rule: &str, n: i64) {
        self.forward_connections_active.get_or_create(&RuleLabel { rule: rule.to_string() }).set(n);
    }
}

/// How much an absolute counter grew since the last reading (all of it when it went down:
/// the source restarted), remembering the new reading.
fn advance<K: std::hash::Hash + Eq>(last: &mut HashMap<K, u64>, key: K, v: u64) -> u64 {
    let l = last.insert(key, v).unwrap_or(0);
    if v >= l {
        v - l
    } else {
        v
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_compiler::artifacts::BackendKind;
    use fwc_compiler::model::RuleKind;

    #[test]
    fn names_are_the_documented_ones() {
        let m = Metrics::for_host("edge-1");
        Metrics::inc(&m.apply_total, "ok");
        m.apply_duration_seconds.observe(0.3);
        m.set_applied_commit(Some("abc"));
        m.set_applied_commit(Some("def"));
        m.drift_total.inc();
        Metrics::inc(&m.git_fetch_total, "error");
        m.observe_rule_counters(&[RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 5, bytes: 300 }]);
        m.observe_rule_counters(&[RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 7, bytes: 400 }]);
        // counter restarted (table re-created): 2 more packets
        m.observe_rule_counters(&[RuleCounter { rule: "ssh".into(), kind: RuleKind::Filter, backend: BackendKind::Nftables, packets: 2, bytes: 100 }]);
        m.set_forward_connections("api", 3);
        m.observe_qos_counters(&[("tenant-b/up".into(), "dropped".into(), 4)]);
        let sni = |n| crate::backend::SniConnections { listener: "tcp [::]:443".into(), result: "miss", connections: n };
        m.observe_sni(&[sni(2)]);
        m.observe_sni(&[sni(5)]);
        m.set_target_up("api", "10.0.0.5:80", false);
        Metrics::inc(&m.webhook_requests_total, "unauthorized");
        m.refused("signature");
        m.set_degraded(Some(("bad", "apply_failed")), Some("def"));
        m.set_rollout(Some(("bad", Some("def"), "halted")), Some((1, "early")));
        m.set_held(Some(crate::rollout::follow::HoldReason::Halted.as_str()));
        m.self_check_failed();
        let fill = crate::backend::PerSourceFill { rule: "ssh".into(), kind: RuleKind::Filter, limit: "rate", family: "ipv6", entries: 3, size: 65536 };
        m.observe_per_source(&[fill]);
        let t = m.encode();
        for want in [
            "fwc_apply_total{result=\"ok\"} 1",
            "fwc_apply_duration_seconds_count 1",
            "fwc_applied_commit_info{host=\"edge-1\",commit=\"def\"} 1",
            "fwc_drift_total 1",
            "fwc_git_fetch_total{result=\"error\"} 1",
            "fwc_rule_packets_total{rule=\"ssh\",kind=\"filter\",backend=\"nftables\"} 9",
            "fwc_rule_bytes_total{rule=\"ssh\",kind=\"filter\",backend=\"nftables\"} 500",
            "fwc_forward_connections_active{rule=\"api\"} 3",
            "fwc_qos_packets_total{class=\"tenant-b/up\",action=\"dropped\"} 4",
            "fwc_forward_sni_connections_total{listener=\"tcp [::]:443\",result=\"miss\"} 5",
            "fwc_forward_target_up{rule=\"api\",target=\"10.0.0.5:80\"} 0",
            "fwc_webhook_requests_total{result=\"unauthorized\"} 1",
            "fwc_commit_refused_total{reason=\"signature\"} 1",
            "fwc_agent_degraded{host=\"edge-1\",commit=\"bad\",reason=\"apply_failed\"} 1",
            "fwc_rollout_info{host=\"edge-1\",commit=\"bad\",stable=\"def\",phase=\"halted\"} 1",
            "fwc_rollout_wave{host=\"edge-1\",wave=\"early\"} 1",
            "fwc_rollout_held{host=\"edge-1\",reason=\"halted\"} 1",
            "fwc_rollout_held{host=\"edge-1\",reason=\"not_promoted\"} 0",
            "fwc_self_check_failures_total{host=\"edge-1\"} 1",
            "fwc_per_source_entries{rule=\"ssh\",kind=\"filter\",limit=\"rate\",family=\"ipv6\"} 3",
            "fwc_per_source_size{rule=\"ssh\",kind=\"filter\",limit=\"rate\",family=\"ipv6\"} 65536",
        ] {
            assert!(t.contains(want), "missing {want} in\n{t}");
        }
        assert!(!t.contains("commit=\"abc\""), "{t}");
    }

    /// An alert on `increase(fwc_commit_refused_total{reason="signature"}[1h]) > 0` fires on
    /// the first refusal only if the series existed at 0 before it.
    #[test]
    fn alerted_series_exist_at_zero() {
        let t = Metrics::new().encode();
        for r in REFUSAL_REASONS {
            assert!(t.contains(&format!("fwc_commit_refused_total{{reason=\"{r}\"}} 0\n")), "{r} in\n{t}");
        }
        for (name, values) in [("fwc_apply_total", APPLY_RESULTS), ("fwc_git_fetch_total", FETCH_RESULTS), ("fwc_webhook_requests_total", WEBHOOK_RESULTS)] {
            for v in values {
                assert!(t.contains(&format!("{name}{{result=\"{v}\"}} 0\n")), "{name} {v} in\n{t}");
            }
        }
        assert!(t.contains(&format!("fwc_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))), "{t}");
        assert!(t.contains("fwc_last_apply_success_timestamp_seconds 0\n"), "{t}");
        assert!(t.contains("fwc_self_check_failures_total{host=\"\"} 0\n"), "{t}");
        assert!(t.contains("fwc_agent_degraded{host=\"\",commit=\"\",reason=\"\"} 0\n"), "{t}");
        let reasons: Vec<&str> = crate::rollout::follow::HOLD_REASONS.iter().map(|r| r.as_str()).collect();
        assert_eq!(reasons, HOLD_REASONS, "the metric's hold reasons are the rollout's");
        for r in crate::rollout::follow::HOLD_REASONS {
            assert!(t.contains(&format!("fwc_rollout_held{{host=\"\",reason=\"{}\"}} 0\n", r.as_str())), "{r:?} in\n{t}");
        }
    }

    /// `fwc_agent_degraded` names the commit its failure belongs to (and the host),
    /// so a controller rolling out a fix is not halted by the canary's old failure; it stays
    /// one series, and healthy names the applied commit with value 0.
    #[test]
    fn degraded_names_the_failing_commit_and_the_host() {
        let m = Metrics::for_host("canary-1");
        m.set_degraded(Some(("c0ffee", "apply_failed")), Some("a11ed"));
        let t = m.encode();
        assert!(t.contains("fwc_agent_degraded{host=\"canary-1\",commit=\"c0ffee\",reason=\"apply_failed\"} 1\n"), "{t}");
        m.set_degraded(None, Some("f1x"));
        let t = m.encode();
        assert!(t.contains("fwc_agent_degraded{host=\"canary-1\",commit=\"f1x\",reason=\"\"} 0\n"), "{t}");
        assert_eq!(t.matches("fwc_agent_degraded{").count(), 1, "{t}");
        assert!(!t.contains("c0ffee"), "the old failure is gone once healthy:\n{t}");
    }

    /// Every backend labels a rule by its name, its kind apart: one label format.
    #[test]
    fn one_rule_label_format() {
        let m = Metrics::new();
        m.observe_rule_counters(&[
            RuleCounter { rule: "app".into(), kind: RuleKind::Forward, backend: BackendKind::Nftables, packets: 1, bytes: 60 },
            RuleCounter { rule: "app".into(), kind: RuleKind::Forward, backend: BackendKind::Userspace, packets: 0, bytes: 900 },
            RuleCounter { rule: "tenant-b".into(), kind: RuleKind::Shape, backend: BackendKind::Qos, packets: 3, bytes: 300 },
        ]);
        m.set_forward_connections("app", 2);
        let t = m.encode();
        for want in [
            "fwc_rule_bytes_total{rule=\"app\",kind=\"forward\",backend=\"nftables\"} 60",
            "fwc_rule_bytes_total{rule=\"app\",kind=\"forward\",backend=\"userspace\"} 900",
            "fwc_rule_bytes_total{rule=\"tenant-b\",kind=\"shape\",backend=\"qos\"} 300",
            "fwc_forward_connections_active{rule=\"app\"} 2",
        ] {
            assert!(t.contains(want), "missing {want} in\n{t}");
        }
        assert!(!t.contains("forward:app"), "{t}");
    }

    #[test]
    fn content_negotiation() {
        use Exposition::*;
        // What Prometheus 2.x sends by default, and with scrape_protocols = [PrometheusText0.0.4].
        let prom2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom2)), OpenMetrics);
        assert_eq!(negotiate(Some("text/plain;version=0.0.4;q=1,*/*;q=0.1")), PrometheusText);
        assert_eq!(negotiate(Some("text/plain")), PrometheusText);
        assert_eq!(negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.9")), PrometheusText);
        assert_eq!(negotiate(Some("text/plain;q=0.5, application/openmetrics-text;q=0.5")), OpenMetrics);
        assert_eq!(negotiate(Some("*/*")), OpenMetrics);
        assert_eq!(negotiate(Some("application/json")), OpenMetrics);
        assert_eq!(negotiate(None), OpenMetrics);
        assert_eq!(negotiate(Some("text/plain;q=0")), OpenMetrics);
    }

    #[test]
    fn prometheus_text_names_samples() {
        let m = Metrics::new();
        m.apply_duration_seconds.observe(0.2);
        let t = m.encode_as(Exposition::PrometheusText);
        assert!(t.contains("# HELP fwc_apply_total Applies"), "{t}");
        assert!(t.contains("# TYPE fwc_apply_total counter\n"), "{t}");
        assert!(t.contains("# TYPE fwc_apply_duration_seconds histogram\n"), "{t}");
        assert!(t.contains("# TYPE fwc_build_info gauge\n"), "{t}");
        assert!(!t.contains("# EOF"), "{t}");
        let om = m.encode();
        assert!(om.ends_with("# EOF\n"), "{om}");
        // The samples themselves are the same.
        let samples = |s: &str| s.lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(samples(&t), samples(&om));
    }

    #[test]
    fn webhook_signatures() {
        let s = WebhookSecret::new(b"s3cret\n");
        let body = br#"{"ref":"refs/heads/main"}"#;
        let sig = github_signature(b"s3cret", body);
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(s.check(&h("X-Hub-Signature-256", &sig), body));
        assert!(s.check(&h("x-gitea-signature", sig.strip_prefix("sha256=").unwrap()), body));
        assert!(!s.check(&h("X-Hub-Signature-256", &sig), b"{}"));
        assert!(!s.check(&h("X-Hub-Signature-256", &github_signature(b"other", body)), body));
        assert!(!s.check(&h("X-Hub-Signature-256", "sha1=00"), body));
        assert!(!s.check(&[], body));
        assert!(s.check(&h("X-Gitlab-Token", "s3cret"), body));
        assert!(!s.check(&h("X-Gitlab-Token", "s3cre"), body));
        assert!(!WebhookSecret::new(b"").check(&h("X-Gitlab-Token", ""), body));
    }

    /// quota: one used and one limit gauge per quota; a quota no longer applied
    /// disappears.
    #[test]
    fn quota_gauges() {
        let m = Metrics::for_host("edge-1");
        let q = |rule: &str, used| crate::quota::QuotaStatus {
            kind: RuleKind::Forward,
            rule: rule.into(),
            limit_bytes: 2_000_000,
            used_bytes: used,
            period: fwc_artifacts::quota::QuotaPeriod::Day,
            period_start: "2026-11-26T00:00:00Z".into(),
            period_end: "2026-11-27T00:00:00Z".into(),
            over_quota: "drop".into(),
            used_up: false,
            counted: true,
        };
        m.observe_quotas(&[q("game", 1_500_000), q("old", 1)]);
        m.observe_quotas(&[q("game", 1_600_000)]);
        let t = m.encode();
        assert!(t.contains("fwc_quota_used_bytes{host=\"edge-1\",rule=\"game\",kind=\"forward\",period=\"day\"} 1600000"), "{t}");
        assert!(t.contains("fwc_quota_limit_bytes{host=\"edge-1\",rule=\"game\",kind=\"forward\",period=\"day\"} 2000000"), "{t}");
        assert!(!t.contains("rule=\"old\""), "{t}");
    }
}
