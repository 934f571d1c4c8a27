//! The agent's drift check: compare the live dataplane with the applied artifacts, record
//! what it observes, and heal or report as the pure `decide::drift_step` says.

use std::sync::atomic::Ordering;
use std::time::Instant;

use miette::Result;

use crate::audit::{Action, Outcome, Record};
use crate::state::StateLock;

use super::journal::Pending;
use super::{decide, short, Agent};

impl Agent {
    /// Compare live with the applied artifacts; heal or report.
    pub(super) fn check_drift(&mut self, lock: &StateLock) -> Result<()> {
        let Some(cur) = lock.dir.current()? else { return Ok(()) };
        let mut drift = Vec::new();
        for b in self.backends.iter_mut() {
            match b.observe(&cur.artifacts) {
                Ok(obs) => {
                    self.metrics.observe_rule_counters(&obs.counters);
                    if !obs.per_source.is_empty() || b.kind().as_str() == "nftables" {
                        self.metrics.observe_per_source(&obs.per_source);
                    }
                    for (rule, n) in &obs.active_connections {
                        self.metrics.set_forward_connections(rule, *n as i64);
                    }
                    let qos: Vec<(String, String, u64)> =
                        obs.qos_packets.iter().map(|q| (q.class.clone(), q.action.to_string(), q.packets)).collect();
                    self.metrics.observe_qos_counters(&qos);
                    self.metrics.observe_sni(&obs.sni);
                    for (rule, target, up) in &obs.target_health {
                        self.metrics.set_target_up(rule, target, *up);
                    }
                    let located = crate::backend::sources::locate(obs.drift, &cur.artifacts.manifest);
                    drift.extend(located.iter().map(|d| format!("{}: {d}", b.kind().as_str())));
                }
                Err(e) => drift.push(format!("{}: cannot read the live state: {e}", b.kind().as_str())),
            }
        }
        self.metrics.drift_checked();
        // quota: persist the counts, reset at the period's anchor, warn at 80 %.
        if !cur.artifacts.manifest.setup.quotas.is_empty() {
            let nft = crate::backend::nft::NftCmd::new(self.cfg.netns.clone());
            match crate::quota::sync(&nft, &self.cfg.state_dir, &cur.artifacts.manifest.setup.quotas, crate::quota::now()) {
                Ok(q) => self.metrics.observe_quotas(&q),
                Err(e) => tracing::warn!("quota: {e}"),
            }
        } else {
            self.metrics.observe_quotas(&[]);
        }
        if !self.health.ready.load(Ordering::Relaxed) && drift.is_empty() {
            // Restart: adopt what is live.
            if let Some(c) = &cur.meta.commit {
                if !self.is_refused(c) {
                    self.adopt(c);
                }
            }
            self.health.ready.store(true, Ordering::Relaxed);
        }
        let text = (!drift.is_empty()).then(|| drift.join("\n"));
        let heal_at = self.heal_retry.as_ref().map(|(_, at)| *at);
        let step = decide::drift_step(text.as_deref(), self.cfg.drift, self.last_drift.as_deref(), heal_at, Instant::now());
        let base = Record {
            host: self.cfg.host.clone(),
            commit: cur.meta.commit.clone(),
            previous_commit: cur.meta.commit.clone(),
            ..Default::default()
        };
        let text = text.unwrap_or_default();
        match step {
            decide::DriftStep::Clean { recovered } => {
                self.last_drift = None;
                if recovered {
                    self.heal_retry = None;
                    tracing::info!("the drift that failed to heal is gone");
                    if self.journal.handled.as_ref().is_none_or(|h| h.outcome == "applied") {
                        self.set_degraded(None, format!("running {}", cur.meta.commit.as_deref().map(short).unwrap_or("-")));
                    }
                }
            }
            decide::DriftStep::Reported | decide::DriftStep::Wait => {}
            decide::DriftStep::Report => {
                self.metrics.drift_total.inc();
                tracing::warn!("drift (alert only):\n{text}");
                let seq = self.next_seq()?;
                self.journal.pending = Some(Pending { seq, commit: cur.meta.commit.clone(), action: Action::Drift });
                self.journal.save(&self.cfg.state_dir)?;
                self.append(Record { action: Some(Action::Drift), result: Some(Outcome::Reported), detail: Some(text.clone()), ..base })?;
                self.journal.pending = None;
                self.journal.save(&self.cfg.state_dir)?;
                self.last_drift = Some(text);
            }
            decide::DriftStep::Heal { retry } => {
                // A failing heal backs off, and only its first failure is audited (and the
                // recovery): not an entry every interval.
                self.metrics.drift_total.inc();
                tracing::warn!("drift, healing{}:\n{text}", if retry { " (retry)" } else { "" });
                let t0 = Instant::now();
                self.transaction_audited(lock, &cur.artifacts, Action::Heal, Record { detail: Some(text), ..base }, t0, !retry)?;
            }
        }
        Ok(())
    }
}
