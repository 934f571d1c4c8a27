//! One simulated agent (the agent's real follow core on its own libgit2 mirror, the
//! dataplane simulated) and what the agents share with the controller (reports, events).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::rollout::{RolloutPhase, RolloutState};
use fwc_runtime::agent::git::Mirror;
use fwc_runtime::rollout::controller::{Degraded, HostReport};
use fwc_runtime::rollout::follow::{decide, succession, Accepted, FollowDecision, FollowInput, StateView};
use fwc_runtime::rollout::rewind::AcceptedReport;

/// What the fleet's policy says, per commit (computed once per commit, as each real agent
/// compiles a commit once).
#[derive(Clone)]
pub(crate) struct Plan {
    pub(crate) has_policy: bool,
    pub(crate) waves: HashMap<String, usize>,
    pub(crate) fail: bool,
}

pub(crate) struct Shared {
    pub(crate) plans: Mutex<HashMap<String, Arc<Plan>>>,
    /// host -> its report (what Prometheus would hold).
    pub(crate) reports: Mutex<BTreeMap<String, HostReport>>,
    pub(crate) events: Mutex<Vec<(f64, String, String, &'static str)>>,
    /// host -> the last rollout state it accepted (`fwc_rollout_accepted_state`).
    pub(crate) accepted: Mutex<BTreeMap<String, AcceptedReport>>,
    /// The controller's last refusal to build on a state behind the fleet.
    pub(crate) refused: Mutex<Option<String>>,
    pub(crate) t0: Instant,
}

impl Shared {
    pub(crate) fn plan(&self, m: &Mirror, commit: git2::Oid) -> Arc<Plan> {
        let key = commit.to_string();
        if let Some(p) = self.plans.lock().unwrap().get(&key) {
            return p.clone();
        }
        let info = m.commit_info(commit).unwrap();
        let tree = m.source_tree(commit).unwrap();
        let fp = fwc_compiler::features::rollout::fleet_plan(&tree).unwrap();
        let p = Arc::new(Plan {
            has_policy: fp.policy.is_some(),
            waves: fp.hosts.iter().map(|h| (h.name.clone(), h.wave.unwrap_or(0))).collect(),
            fail: info.message.contains("[sim: fail]"),
        });
        self.plans.lock().unwrap().insert(key, p.clone());
        p
    }
    pub(crate) fn event(&self, host: &str, commit: &str, what: &'static str) {
        self.events.lock().unwrap().push((self.t0.elapsed().as_secs_f64(), host.to_string(), commit.to_string(), what));
    }
}

pub(crate) struct Agent {
    pub(crate) name: String,
    pub(crate) mirror: Mirror,
    pub(crate) applied: Option<String>,
    /// Halted commits this agent has seen the halt of.
    pub(crate) saw_halt: Vec<String>,
    pub(crate) last_state: Option<git2::Oid>,
    /// The last rollout state this host accepted (the agent's succession check).
    pub(crate) accepted: Option<Accepted>,
    /// The state this host follows (the last accepted one).
    pub(crate) following: Option<RolloutState>,
    /// Chaos: away (no poll, no report) until then.
    pub(crate) away_until: Option<Instant>,
    /// Chaos: the next self-check sees a git failure once (the retry passes).
    pub(crate) selfcheck_blip: bool,
}

impl Agent {
    pub(crate) fn poll(&mut self, sh: &Shared) {
        if let Some(until) = self.away_until {
            if Instant::now() < until {
                // Away: no poll, and Prometheus loses the host's series.
                sh.reports.lock().unwrap().remove(&self.name);
                return;
            }
            self.away_until = None;
            sh.event(&self.name, "", "back");
        }
        if self.mirror.fetch(Duration::from_secs(20)).is_err() {
            sh.event(&self.name, "", "fetch_error");
            return;
        }
        // Reporting (as to Prometheus) from the first successful fetch on, applied or not.
        sh.reports.lock().unwrap().entry(self.name.clone()).or_default().current = true;
        let Some(tip) = self.mirror.tip() else { return };
        let rtip = self.mirror.rollout_tip();
        let fetched: Option<RolloutState> = rtip.and_then(|r| self.mirror.rollout_state(r).ok());
        // The agent's succession check: a state is followed only when it descends from the last
        // one this host accepted, with a higher generation (else held `state_rewound`).
        if let (Some(r), Some(s)) = (rtip, &fetched) {
            let descends = self.accepted.as_ref().is_none_or(|a| git2::Oid::from_str(&a.commit).is_ok_and(|a| a == r || self.mirror.repo.graph_descendant_of(r, a).unwrap_or(false)));
            match succession(self.accepted.as_ref(), &r.to_string(), s.generation, descends) {
                Ok(()) => {
                    self.accepted = Some(Accepted { commit: r.to_string(), generation: s.generation });
                    sh.accepted.lock().unwrap().insert(self.name.clone(), AcceptedReport { host: self.name.clone(), state: r.to_string(), generation: s.generation });
                    self.following = Some(s.clone());
                }
                Err(_) => {
                    if rtip != self.last_state {
                        sh.event(&self.name, &s.commit, "held_state_rewound");
                    }
                }
            }
        }
        let state = self.following.clone();
        if rtip != self.last_state {
            self.last_state = rtip;
            if let Some(s) = &state {
                sh.event(&self.name, &s.commit, if s.phase == RolloutPhase::Halted { "saw_halt" } else { "saw_state" });
                if s.phase == RolloutPhase::Halted && !self.saw_halt.contains(&s.commit) {
                    self.saw_halt.push(s.commit.clone());
                }
            }
        }
        let tip_plan = sh.plan(&self.mirror, tip);
        let wave = state.as_ref().and_then(|s| git2::Oid::from_str(s.policy_commit()).ok()).map(|c| sh.plan(&self.mirror, c)).and_then(|p| p.waves.get(&self.name).copied());
        let left_rollouts = state.as_ref().is_some_and(|s| s.phase == RolloutPhase::Complete && git2::Oid::from_str(&s.commit).is_ok_and(|c| !sh.plan(&self.mirror, c).has_policy));
        let tip_s = tip.to_string();
        let view = match &state {
            Some(s) => StateView::Verified(s),
            None => StateView::Absent,
        };
        let d = decide(&FollowInput {
            branch: "main",
            tip: &tip_s,
            tip_has_policy: tip_plan.has_policy,
            left_rollouts,
            bucket: fwc_compiler::artifacts::rollout::host_bucket(&self.name),
            state: view,
            wave,
            applied: self.applied.as_deref(),
        });
        let target = match d {
            FollowDecision::Tip => Some(tip_s),
            FollowDecision::Apply { commit, .. } => Some(commit),
            FollowDecision::Hold { .. } => None,
        };
        let Some(target) = target.filter(|t| Some(t) != self.applied.as_ref()) else { return };
        let mut reports = sh.reports.lock().unwrap();
        let rep = reports.entry(self.name.clone()).or_default();
        if rep.degraded.iter().any(|d| d.commit == target) {
            return; // a failed apply is not retried in the simulation
        }
        let plan = sh.plan(&self.mirror, git2::Oid::from_str(&target).unwrap());
        if self.saw_halt.contains(&target) {
            sh.event(&self.name, &target, "apply_after_halt");
        }
        // The wave this host is in under the policy in force, and whether the state promoted it.
        let promoted_ok = match &state {
            None => true,
            Some(s) => wave.is_none_or(|w| s.promoted.is_some_and(|p| w <= p)) || s.stable.as_deref() == Some(target.as_str()),
        };
        if !promoted_ok {
            sh.event(&self.name, &target, "applied_before_its_wave");
        }
        if self.selfcheck_blip {
            // A git failure during the self-check: the agent retries (3 attempts by default)
            // and the second attempt passes; nothing is reverted.
            self.selfcheck_blip = false;
            sh.event(&self.name, &target, "selfcheck_retried");
        }
        if plan.fail && plan.waves.get(&self.name) == Some(&0) {
            rep.degraded = vec![Degraded { commit: target.clone(), reason: "rolled_back".into() }];
            sh.event(&self.name, &target, "apply_failed");
        } else {
            self.applied = Some(target.clone());
            rep.applied = Some(target.clone());
            rep.degraded.clear();
            sh.event(&self.name, &target, "applied");
            // Which rollout state the apply followed (its state commit): the chaos report counts
            // the applies made under a replayed state.
            if let Some(a) = &self.accepted {
                sh.event(&self.name, &a.commit, "applied_under_state");
            }
        }
        rep.current = true;
    }
}
