//! Active health checks (`health-check="tcp"`): one task per forward probes each target with
//! a TCP connect every interval; a target is taken out after `fall` failed probes in a row and
//! put back after `rise` good ones. New connections skip targets that are down; when every
//! target is down they try all of them anyway (a probe can be wrong, a refused connect costs
//! the client nothing more than no forwarder would).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use fwc_artifacts::{ForwardTarget, HealthCheck};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::resolve::Resolver;

/// Health of one target of one forward.
#[derive(Debug)]
struct TargetState {
    up: AtomicBool,
    /// Consecutive probes that disagreed with `up` (failures while up, successes while down).
    streak: AtomicU64,
    checks: AtomicU64,
    failures: AtomicU64,
    /// What a DNS-named target resolved to last (kernel forwards to a name).
    addresses: Mutex<Vec<String>>,
}

/// The health of a forward's targets; targets never probed (no health check) count as up.
#[derive(Debug, Default)]
pub struct Health {
    targets: RwLock<HashMap<(String, u16), Arc<TargetState>>>,
}

/// One target's health as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetHealth {
    pub rule: String,
    /// `host:port` as in forward.json.
    pub target: String,
    pub up: bool,
    pub checks: u64,
    pub failures: u64,
    /// A DNS-named kernel target: the addresses its DNAT uses (the last good answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

impl Health {
    /// Asked for every new connection: a rule without health checks (no target tracked)
    /// answers without building a key, and a tracked rule's few targets are compared in place
    /// (no copy of the host name per connection).
    pub fn is_up(&self, t: &ForwardTarget) -> bool {
        let targets = self.targets.read().unwrap();
        targets.is_empty()
            || targets.iter().find(|((host, port), _)| *port == t.port && *host == t.host).is_none_or(|(_, s)| s.up.load(Relaxed))
    }

    /// Is any target down?
    pub fn any_down(&self) -> bool {
        self.targets.read().unwrap().values().any(|s| !s.up.load(Relaxed))
    }

    /// Forget every target (the rule lost its health check).
    pub fn clear(&self) {
        self.targets.write().unwrap().clear();
    }

    pub fn snapshot(&self, rule: &str) -> Vec<TargetHealth> {
        let mut v: Vec<TargetHealth> = self
            .targets
            .read()
            .unwrap()
            .iter()
            .map(|((h, p), s)| TargetHealth {
                rule: rule.to_string(),
                target: match p {
                    0 => h.clone(), // a DNS-named kernel target that keeps the client's port
                    _ if h.contains(':') => format!("[{h}]:{p}"),
                    _ => format!("{h}:{p}"),
                },
                up: s.up.load(Relaxed),
                checks: s.checks.load(Relaxed),
                failures: s.failures.load(Relaxed),
                addresses: s.addresses.lock().unwrap().clone(),
            })
            .collect();
        v.sort_by(|a, b| a.target.cmp(&b.target));
        v
    }

    fn state(&self, t: &ForwardTarget) -> Arc<TargetState> {
        let key = (t.host.clone(), t.port);
        if let Some(s) = self.targets.read().unwrap().get(&key) {
            return s.clone();
        }
        let fresh = TargetState { up: AtomicBool::new(true), streak: AtomicU64::new(0), checks: AtomicU64::new(0), failures: AtomicU64::new(0), addresses: Mutex::default() };
        self.targets.write().unwrap().entry(key).or_insert_with(|| Arc::new(fresh)).clone()
    }

    /// Note what a DNS-named target resolved to (status shows it).
    pub(crate) fn set_addresses(&self, t: &ForwardTarget, addrs: &[std::net::IpAddr]) {
        *self.state(t).addresses.lock().unwrap() = addrs.iter().map(|a| a.to_string()).collect();
    }

    /// Record one probe; returns the new state when it changed.
    pub(crate) fn record(&self, rule: &str, t: &ForwardTarget, ok: bool, hc: &HealthCheck) -> Option<bool> {
        let s = self.state(t);
        s.checks.fetch_add(1, Relaxed);
        if !ok {
            s.failures.fetch_add(1, Relaxed);
        }
        let up = s.up.load(Relaxed);
        if ok == up {
            s.streak.store(0, Relaxed);
            return None;
        }
        let n = s.streak.fetch_add(1, Relaxed) + 1;
        let need = u64::from(if up { hc.fall } else { hc.rise }.max(1));
        if n < need {
            return None;
        }
        s.streak.store(0, Relaxed);
        s.up.store(ok, Relaxed);
        tracing::warn!(rule, target = %format!("{}:{}", t.host, t.port), "target is {}", if ok { "up again" } else { "down" });
        Some(ok)
    }
}

/// Probe `targets` forever (until the task is aborted), recording into `health`.
/// `on_change` runs after a round of probes that changed a target's state.
pub(crate) fn spawn(
    rule: String,
    health: Arc<Health>,
    targets: Vec<ForwardTarget>,
    hc: HealthCheck,
    resolver: Arc<Resolver>,
    on_change: Option<Box<dyn Fn() + Send + Sync>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(hc.interval_ms.max(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut probes = tokio::task::JoinSet::new();
            for t in targets.iter().cloned() {
                let resolver = resolver.clone();
                let timeout = Duration::from_millis(hc.timeout_ms.max(1));
                probes.spawn(async move {
                    let ok = probe(&resolver, &t, timeout).await;
                    (t, ok)
                });
            }
            let mut changed = false;
            while let Some(Ok((t, ok))) = probes.join_next().await {
                changed |= health.record(&rule, &t, ok, &hc).is_some();
            }
            if let (true, Some(f)) = (changed, &on_change) {
                f();
            }
        }
    })
}

/// One TCP connect to the target's first address within `timeout` (a name that does not
/// resolve is a failed probe).
async fn probe(resolver: &Arc<Resolver>, t: &ForwardTarget, timeout: Duration) -> bool {
    let Ok(Ok(addrs)) = tokio::time::timeout(timeout, resolver.resolve(&t.host, t.port)).await else { return false };
    let Some(addr) = addrs.first().copied() else { return false };
    matches!(tokio::time::timeout(timeout, crate::connect_marked(addr)).await, Ok(Ok(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_and_rise_count_probes_in_a_row() {
        let h = Health::default();
        let t = ForwardTarget { host: "10.0.0.1".into(), port: 80 };
        let hc = HealthCheck { interval_ms: 100, timeout_ms: 50, rise: 2, fall: 3 };
        assert!(h.is_up(&t));
        assert_eq!(h.record("r", &t, false, &hc), None);
        assert_eq!(h.record("r", &t, false, &hc), None);
        assert_eq!(h.record("r", &t, true, &hc), None, "a success resets the failure streak");
        assert_eq!(h.record("r", &t, false, &hc), None);
        assert_eq!(h.record("r", &t, false, &hc), None);
        assert_eq!(h.record("r", &t, false, &hc), Some(false));
        assert!(!h.is_up(&t));
        assert_eq!(h.record("r", &t, true, &hc), None);
        assert_eq!(h.record("r", &t, true, &hc), Some(true));
        assert!(h.is_up(&t));
        let s = &h.snapshot("r")[0];
        assert_eq!((s.target.as_str(), s.checks, s.failures), ("10.0.0.1:80", 8, 5));
    }
}
