//! The agent's apply transaction over every backend, with its intent, audit entry, self-check
//! and retry bookkeeping.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::Artifacts;
use miette::Result;

use crate::audit::{Action, Outcome, Record};
use crate::engine::{self, transaction::{self as apply, ApplyOptions}};
use crate::metrics::Metrics;
use crate::state::StateLock;

use super::hooked::FAIL_MARKER;
use super::journal::{Handled, Pending};
use super::{decide, selfcheck, short, Agent};

impl Agent {
    /// Run the apply transaction over every backend and audit it. Returns whether it succeeded.
    pub(super) fn transaction(&mut self, lock: &StateLock, artifacts: &Artifacts, action: Action, base: Record, t0: Instant) -> Result<bool> {
        self.transaction_audited(lock, artifacts, action, base, t0, true)
    }

    /// [`Self::transaction`]; `audit_it` = false skips the audit entry of a failure (a heal
    /// that keeps failing).
    pub(super) fn transaction_audited(&mut self, lock: &StateLock, artifacts: &Artifacts, action: Action, base: Record, t0: Instant, audit_it: bool) -> Result<bool> {
        let commit = artifacts.manifest.commit.clone();
        let seq = self.next_seq()?;
        self.journal.pending = Some(Pending { seq, commit: commit.clone(), action });
        self.journal.save(&self.cfg.state_dir)?;
        if action == Action::Apply && self.hooks {
            let msg = commit
                .as_deref()
                .and_then(|c| git2::Oid::from_str(c).ok())
                .and_then(|o| self.mirror.commit_info(o).ok())
                .map(|i| i.message)
                .unwrap_or_default();
            self.fail_commit.store(msg.contains(FAIL_MARKER), Ordering::SeqCst);
        }
        let opts = ApplyOptions {
            source: format!("fwc agent: {} {}", self.cfg.repo_url, commit.as_deref().unwrap_or("-")),
            netns: self.cfg.netns.clone(),
            no_sysctl: false,
            // Set elements changed outside fwc: the nft backend saw it in its drift check.
            nft_full_replace: None,
            // A replace that discards state needs a person (`fwc apply --allow-replace`).
            allow_replace: false,
        };
        let done = engine::record::transact(&mut self.backends, lock, artifacts, &opts, action);
        self.fail_commit.store(false, Ordering::SeqCst);
        let mut done = done?;
        // The self-check ("magic rollback"): an apply after which the agent cannot reach its
        // git remote (or a probe of the rollout policy fails) is reverted at once.
        let mut self_check: Option<String> = None;
        if action == Action::Apply && done.result.is_ok() {
            let (probes, policy) = commit.as_deref().map(|c| self.self_check_policy(c)).unwrap_or_default();
            if let Err(why) = selfcheck::run(&self.mirror, &probes, self.cfg.fetch_timeout.min(selfcheck::SELF_CHECK_TIMEOUT), policy) {
                tracing::error!("self-check failed after applying {}: {why}; reverting", commit.as_deref().map(short).unwrap_or("-"));
                self.metrics.self_check_failed();
                let back = engine::confirm::rollback_target(&lock.dir, "self-check failed").and_then(|(prev, source)| {
                    let o = ApplyOptions { source, netns: self.cfg.netns.clone(), no_sysctl: true, nft_full_replace: None, allow_replace: true };
                    let r = engine::record::transact(&mut self.backends, lock, &prev, &o, Action::Rollback).map_err(|e| engine::transaction::chain(&e))?;
                    r.result.map_err(|f| f.to_string())
                });
                let (detail, outcome) = match &back {
                    Ok(rep) => (format!("self-check failed after the apply: {why}; reverted ({})", rep.generation), Outcome::RolledBack),
                    Err(e) => (format!("self-check failed after the apply: {why}; REVERT FAILED: {e}"), Outcome::Failed),
                };
                done.record.result = Some(outcome);
                self_check = Some(detail);
            }
        }
        let self_check_failed = self_check.is_some();
        let r: std::result::Result<apply::ApplyReport, String> = match self_check {
            Some(d) => Err(d),
            None => done.result.map_err(|f| f.to_string()),
        };
        let elapsed = t0.elapsed();
        let outcome = done.record.result.unwrap_or(Outcome::Failed);
        let settled = decide::settle(decide::Ended {
            kind: if action == Action::Heal { decide::Kind::Heal } else { decide::Kind::Apply },
            ok: r.is_ok(),
            self_check_failed,
            rolled_back: outcome == Outcome::RolledBack,
            replace_refused: r.as_ref().is_err_and(|f| f.contains(crate::backend::nft::REPLACE_REFUSED)),
        });
        let detail = match &r {
            Ok(_) => base.detail.clone(),
            Err(f) => Some(f.to_string()),
        };
        // A heal that keeps failing is audited once; its recovery always.
        if audit_it || r.is_ok() {
            self.append(Record { action: done.record.action, changes: done.record.changes, result: Some(outcome), detail, duration_ms: elapsed.as_millis() as u64, ..base })?;
        }
        self.journal.pending = None;
        if let Some(c) = &commit {
            if action == Action::Apply {
                self.journal.handled = Some(Handled {
                    commit: c.clone(),
                    outcome: settled.outcome.into(),
                    reason: r.as_ref().err().map(|f| f.to_string()),
                    degraded: settled.degraded.map(str::to_string),
                    state_generation: self.journal.accepted_state.as_ref().map(|a| a.generation),
                });
            }
        }
        self.journal.save(&self.cfg.state_dir)?;
        Metrics::inc(&self.metrics.apply_total, outcome.as_str());
        self.metrics.apply_duration_seconds.observe(elapsed.as_secs_f64());
        match r {
            Ok(rep) => {
                tracing::info!(commit = rep.commit.as_deref().unwrap_or("-"), generation = %rep.generation, ms = rep.total_ms, "{} ok", action.as_str());
                match action {
                    Action::Apply => self.apply_retry = None,
                    Action::Heal => self.heal_retry = None,
                    _ => {}
                }
                self.last_drift = None;
                self.metrics.apply_succeeded();
                self.metrics.set_applied_commit(rep.commit.as_deref());
                self.set_degraded(None, format!("running {}", rep.commit.as_deref().map(short).unwrap_or("-")));
                self.health.ready.store(true, Ordering::Relaxed);
                Ok(true)
            }
            Err(f) => {
                // Apply and heal failures may be transient (a busy kernel, a port in use, the
                // forwarder restarting): retried with exponential backoff.
                let retry_in = match action {
                    _ if !settled.retry => None,
                    Action::Apply => {
                        let c = commit.clone().unwrap_or_default();
                        let previous = self.apply_retry.take().filter(|(rc, _, _)| *rc == c).map(|(_, b, _)| b);
                        let (b, d) = decide::retry(previous, self.cfg.interval);
                        self.apply_retry = Some((c, b, Instant::now() + d));
                        Some(d)
                    }
                    Action::Heal => {
                        let (b, d) = decide::retry(self.heal_retry.take().map(|(b, _)| b), self.cfg.interval);
                        self.heal_retry = Some((b, Instant::now() + d));
                        Some(d)
                    }
                    _ => None,
                };
                let retry = retry_in.map(|d| format!("; retrying in {:.1} s", d.as_secs_f64())).unwrap_or_default();
                tracing::error!("{f}{retry}");
                if action == Action::Apply {
                    self.metrics.refused("apply");
                }
                let now = lock.dir.current()?.and_then(|g| g.meta.commit);
                self.metrics.set_applied_commit(now.as_deref());
                self.set_degraded(
                    Some((commit.as_deref().unwrap_or(""), settled.reason.unwrap_or("apply_failed"))),
                    format!("{} of {} failed; running {}", action.as_str(), commit.as_deref().map(short).unwrap_or("-"), now.as_deref().map(short).unwrap_or("nothing")),
                );
                // Ready = serving a known state, even if it is the previous one.
                self.health.ready.store(now.is_some(), Ordering::Relaxed);
                Ok(false)
            }
        }
    }

    /// The self-check of `commit`: the probes and retry policy of the rollout policy in its
    /// tree (none and the defaults without one).
    pub(super) fn self_check_policy(&self, commit: &str) -> (Vec<fwc_compiler::artifacts::rollout::Probe>, decide::SelfCheckPolicy) {
        let policy = git2::Oid::from_str(commit).ok().and_then(|o| self.mirror.source_tree(o).ok()).and_then(|t| fwc_compiler::features::rollout::fleet_plan(&t).ok()).and_then(|p| p.policy);
        match policy {
            Some(p) => (p.probes, decide::SelfCheckPolicy { attempts: p.self_check_attempts, spacing: Duration::from_millis(p.self_check_spacing_ms) }),
            None => (vec![], decide::SelfCheckPolicy::default()),
        }
    }
}
