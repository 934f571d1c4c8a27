//! How the agent follows the fleet rollout: it gathers the inputs (the tip's policy, the
//! verified state, this host's wave) for the pure `rollout::follow::decide` and reports the result.

use std::sync::atomic::Ordering;

use crate::audit::{Action, Outcome, Record};

use super::journal::FollowStatus;
use super::{decide, short, verify, Agent};

impl Agent {
    /// The fleet rollout: gather the inputs (the tip's policy, the state read from the same
    /// fetch and verified like a rule commit, this host's wave), let the pure
    /// [`follow::decide`](crate::rollout::follow::decide) choose, and report it (metrics,
    /// status, an audit entry when the hold changes). Returns the commit to go to and, when
    /// it is the state's stable commit, why a rewind to it is allowed; None: keep what is
    /// applied.
    pub(super) fn follow(&mut self, tip: git2::Oid, applied: Option<&str>) -> Option<(git2::Oid, Option<String>)> {
        use crate::rollout::follow::{decide, succession, Accepted, FollowDecision, FollowInput, StateView};
        let rollout_tip = self.mirror.rollout_tip();
        let state = rollout_tip.map(|r| {
            if self.follow_cache.state.as_ref().map(|(o, _)| *o) != Some(r) {
                let read = verify::verify_commit(&self.mirror.repo, r, &self.cfg.signatures)
                    .map_err(|e| format!("the rollout state commit {}: {e}", short(&r.to_string())))
                    .and_then(|_| self.mirror.rollout_state(r));
                if let Err(e) = &read {
                    tracing::warn!("not following the rollout state: {e}");
                }
                self.follow_cache.state = Some((r, read));
            }
            self.follow_cache.state.as_ref().map(|(_, s)| s.clone()).expect("just cached")
        });
        if self.follow_cache.tip_policy.map(|(o, _)| o) != Some(tip) {
            let has = self.mirror.source_tree(tip).ok().and_then(|t| fwc_compiler::features::rollout::fleet_plan(&t).ok()).map(|p| p.policy.is_some());
            self.follow_cache.tip_policy = Some((tip, has));
        }
        // A tip whose policy does not parse counts as a rollout repository when a state exists
        // (a broken commit must not skip the waves).
        let tip_has_policy = self.follow_cache.tip_policy.and_then(|(_, h)| h).unwrap_or(state.is_some());
        // Only a successor of the last accepted state is followed; the ref gone after a state
        // was accepted is a hold, never a return to the tip.
        let accepted = self.journal.accepted_state.clone();
        let mut state = state;
        let mut rewound = None;
        if let (Some(r), Some(Ok(s))) = (rollout_tip, &state) {
            let descends = git2::Oid::from_str(accepted.as_ref().map_or("", |a| a.commit.as_str())).is_ok_and(|a| self.mirror.repo.graph_descendant_of(r, a).unwrap_or(false));
            match succession(accepted.as_ref(), &r.to_string(), s.generation, descends) {
                Ok(()) => {
                    let now_accepted = Some(Accepted { commit: r.to_string(), generation: s.generation });
                    if self.journal.accepted_state != now_accepted {
                        self.journal.accepted_state = now_accepted;
                        if let Err(e) = self.journal.save(&self.cfg.state_dir) {
                            tracing::error!("{e}");
                        }
                    }
                }
                Err(why) => {
                    tracing::warn!("{why}");
                    rewound = Some(why.clone());
                    state = Some(Err(why));
                }
            }
        }
        self.metrics.set_accepted_state(self.journal.accepted_state.as_ref().map(|a| (a.commit.as_str(), a.generation)));
        let missing = rollout_tip.is_none() && accepted.is_some();
        let wave = match &state {
            Some(Ok(s)) => {
                let key = format!("{} {}", s.commit, s.policy_commit());
                if self.follow_cache.wave.as_ref().map(|w| w.0.as_str()) != Some(key.as_str()) {
                    let (w, has) = self.placement(s.policy_commit(), &s.commit);
                    self.follow_cache.wave = Some((key, w, has));
                }
                self.follow_cache.wave.as_ref().and_then(|w| w.1.clone())
            }
            _ => None,
        };
        let left_rollouts = match &state {
            Some(Ok(s)) => s.phase == fwc_compiler::artifacts::rollout::RolloutPhase::Complete && self.follow_cache.wave.as_ref().is_some_and(|w| !w.2),
            _ => false,
        };
        let view = match &state {
            None if missing => StateView::Missing,
            None => StateView::Absent,
            Some(Err(_)) if rewound.is_some() => StateView::Rewound,
            Some(Err(_)) => StateView::Unverified,
            Some(Ok(s)) => StateView::Verified(s),
        };
        let tip_s = tip.to_string();
        let bucket = fwc_compiler::artifacts::rollout::host_bucket(&self.cfg.host);
        let d = decide(&FollowInput { branch: &self.cfg.branch, tip: &tip_s, tip_has_policy, left_rollouts, bucket, state: view, wave: wave.as_ref().map(|w| w.0), applied });
        // report
        let held = d.held();
        self.metrics.set_held(held.map(|h| h.as_str()));
        let st = match (&d, &state) {
            (FollowDecision::Tip, _) => None,
            (_, None) if missing => Some(FollowStatus {
                phase: "missing".into(),
                commit: None,
                stable: None,
                wave: None,
                target: None,
                held: held.map(|h| h.as_str().into()),
                detail: format!(
                    "the rollout ref is gone from the remote (the last state accepted was {}); keeping what is applied until a state that succeeds it is pushed",
                    accepted.as_ref().map_or("-", |a| short(&a.commit))
                ),
            }),
            (_, None) => Some(FollowStatus { phase: "none".into(), commit: None, stable: None, wave: None, target: None, held: held.map(|h| h.as_str().into()), detail: "no rollout state yet: the first rollout has not started".into() }),
            (_, Some(Err(e))) if rewound.is_some() => Some(FollowStatus { phase: "rewound".into(), commit: None, stable: None, wave: None, target: None, held: held.map(|h| h.as_str().into()), detail: e.clone() }),
            (_, Some(Err(e))) => Some(FollowStatus { phase: "unverified".into(), commit: None, stable: None, wave: None, target: None, held: held.map(|h| h.as_str().into()), detail: e.clone() }),
            (_, Some(Ok(s))) => Some(FollowStatus {
                phase: s.phase.as_str().into(),
                commit: Some(s.commit.clone()),
                stable: s.stable.clone(),
                wave: wave.clone(),
                target: match &d { FollowDecision::Apply { commit, .. } => Some(commit.clone()), _ => None },
                held: held.map(|h| h.as_str().into()),
                detail: s.reason.clone(),
            }),
        };
        match (&state, &st) {
            (Some(Ok(s)), Some(_)) => self.metrics.set_rollout(Some((&s.commit, s.stable.as_deref(), s.phase.as_str())), wave.as_ref().map(|(i, n)| (*i, n.as_str()))),
            _ => self.metrics.set_rollout(None, None),
        }
        if st != self.journal.rollout {
            if let Some(f) = st.as_ref().filter(|f| f.held.is_some()) {
                let text = format!(
                    "rollout {} of {}: held back ({}) on {}{}: {}",
                    f.phase,
                    f.commit.as_deref().map(short).unwrap_or("-"),
                    f.held.as_deref().unwrap_or("-"),
                    f.target.as_deref().or(applied).map(short).unwrap_or("nothing"),
                    f.wave.as_ref().map(|(i, n)| format!(" (wave {} \"{n}\")", i + 1)).unwrap_or_default(),
                    f.detail
                );
                tracing::info!("{text}");
                let rec = Record {
                    host: self.cfg.host.clone(),
                    action: Some(Action::Hold),
                    result: Some(Outcome::Reported),
                    commit: f.commit.clone(),
                    previous_commit: applied.map(str::to_string),
                    detail: Some(text),
                    ..Default::default()
                };
                if let Err(e) = self.append(rec) {
                    tracing::error!("{e}");
                }
            }
            self.journal.rollout = st.clone();
            if let Err(e) = self.journal.save(&self.cfg.state_dir) {
                tracing::error!("{e}");
            }
        }
        let oid = |c: &str| match git2::Oid::from_str(c).ok().filter(|o| self.mirror.repo.find_commit(*o).is_ok()) {
            Some(o) => Some(o),
            None => {
                tracing::warn!("the rollout state names {c}, which the fetched branch does not contain; keeping what is applied");
                None
            }
        };
        match decide::target(&d, &tip_s) {
            Some((commit, rewind_to_stable)) => {
                let why = rewind_to_stable.then(|| st.as_ref().map(|f| format!("{}: {}", f.phase, f.detail)).unwrap_or_default());
                oid(commit).map(|o| (o, why))
            }
            None => {
                let now = applied.map(short).unwrap_or("nothing");
                if !self.health.degraded.load(Ordering::Relaxed) {
                    self.health.set_status(format!("running {now}; rollout holds it ({})", held.map_or("-", |h| h.as_str())));
                }
                None
            }
        }
    }

    /// This host's wave (index, name) in the rollout policy of `policy_commit` (the policy in
    /// force), and whether `commit` (the one rolled out) has a policy of its own; (None, _)
    /// without a policy in force.
    pub(super) fn placement(&self, policy_commit: &str, commit: &str) -> (Option<(usize, String)>, bool) {
        let plan_of = |c: &str| {
            git2::Oid::from_str(c).ok().and_then(|o| self.mirror.source_tree(o).ok()).and_then(|t| fwc_compiler::features::rollout::fleet_plan(&t).ok())
        };
        // A commit whose policy does not parse counts as having one (it never leaves rollouts).
        let commit_has_policy = plan_of(commit).is_none_or(|p| p.policy.is_some());
        let Some((policy, hosts)) = plan_of(policy_commit).and_then(|p| Some((p.policy?, p.hosts))) else { return (None, commit_has_policy) };
        let labels = hosts.iter().find(|h| h.name == self.cfg.host).map(|h| h.labels.clone()).unwrap_or_default();
        let w = fwc_compiler::features::rollout::wave_of(&policy, &self.cfg.host, &labels);
        (policy.waves.get(w).map(|x| (w, x.name.clone())), commit_has_policy)
    }

    pub(super) fn is_refused(&self, commit: &str) -> bool {
        self.journal.handled.as_ref().is_some_and(|h| h.commit == commit && h.outcome != "applied")
    }
}
