//! The agent's pure decision on the fleet rollout: given the branch tip, the rollout state read
//! from the same fetch (verified or not, and whether it succeeds the last state this host
//! accepted), this host's wave and what is applied, which commit to apply — or why to hold. No
//! I/O here; the agent loop gathers the inputs and executes.
//!
//! The semantics (docs/fleet.md "What the agent does"):
//! - no rollout state ever seen and no `rollout` policy at the tip: as without fleet
//!   rollouts, the agent follows the branch tip; a state whose commit completed without a
//!   policy also hands the repository back to the tip (it left rollouts, wave by wave);
//! - otherwise the agent applies only a commit the state names: `commit` when its wave is
//!   promoted (and, in a wave with `max-parallel`, its batch admitted) and the phase is
//!   progressing, paused or complete; else it stays on (or goes to) `stable`; halted with
//!   rollback takes every host to `stable` (an allowed rewind); halted without rollback,
//!   paused and stopped keep what is applied (a host not promoted never applies `commit`);
//!   `stable = None` means "keep what you have";
//! - no state yet while the tip has a policy (the first rollout has not started), or a state
//!   about another branch: hold (`not_promoted`); an unsigned or unverifiable state when
//!   signatures are required: hold (`unverified_state`); a state that does not succeed the
//!   last one accepted ([`succession`]): hold (`state_rewound`); the rollout ref gone after a
//!   state was accepted: hold (`state_missing`), never the tip.

use fwc_compiler::artifacts::rollout::{RolloutPhase, RolloutState};
use serde::Serialize;

/// The rollout state as the agent found it in its fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateView<'a> {
    /// No rollout ref (or no `rollout.json` on it).
    Absent,
    /// Present but not trusted: unsigned or not verifiable while signatures are required, or
    /// not a readable state file.
    Unverified,
    /// Present and (when signatures are required) verified.
    Verified(&'a RolloutState),
    /// Verified, but not a successor of the last state this host accepted ([`succession`]).
    Rewound,
    /// The rollout ref is gone (deleted, pruned) although this host accepted a state before.
    Missing,
}

/// The last rollout state a host accepted (kept across restarts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Accepted {
    /// The state commit.
    pub commit: String,
    pub generation: u64,
}

/// May a host that accepted `accepted` accept the state in commit `commit` with `generation`?
/// Only a successor: the same commit, or one that descends from it (`descends`, from git) with
/// a higher generation. States written before generations (0 after 0) need descent only.
/// Err: why not, for the audit log.
pub fn succession(accepted: Option<&Accepted>, commit: &str, generation: u64, descends: bool) -> Result<(), String> {
    let Some(a) = accepted else { return Ok(()) };
    if a.commit == commit {
        return Ok(());
    }
    let short = |c: &str| c[..c.len().min(12)].to_string();
    if !descends {
        return Err(format!(
            "the rollout state {} does not descend from {}, the last state this host accepted: a replayed or rewritten state is not followed",
            short(commit),
            short(&a.commit)
        ));
    }
    if generation <= a.generation && !(generation == 0 && a.generation == 0) {
        return Err(format!(
            "the rollout state {} has generation {generation}, not above {} of {}, the last state this host accepted: a replayed state is not followed",
            short(commit),
            a.generation,
            short(&a.commit)
        ));
    }
    Ok(())
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowInput<'a> {
    /// The branch the agent watches (`--branch`).
    pub branch: &'a str,
    /// The fetched branch tip.
    pub tip: &'a str,
    /// Does the tip commit declare a `rollout` policy?
    pub tip_has_policy: bool,
    /// The state says complete and its commit has no `rollout` policy: the repository left
    /// rollouts (the commit that dropped the policy was itself rolled out wave by wave).
    pub left_rollouts: bool,
    /// This host's [`host_bucket`](fwc_compiler::artifacts::rollout::host_bucket) (batches).
    pub bucket: u32,
    pub state: StateView<'a>,
    /// This host's wave index in the policy of the state's `commit` (None: that commit has no
    /// policy this host could be placed by).
    pub wave: Option<usize>,
    /// The commit applied now (None: nothing applied yet).
    pub applied: Option<&'a str>,
}

/// Why a host is not on the rollout's commit (the `reason` label of `fwc_rollout_held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    NotPromoted,
    Halted,
    Paused,
    Stopped,
    UnverifiedState,
    StateRewound,
    StateMissing,
}

/// Every hold reason, in the order the metric lists them.
pub const HOLD_REASONS: [HoldReason; 7] = [
    HoldReason::NotPromoted,
    HoldReason::Halted,
    HoldReason::Paused,
    HoldReason::Stopped,
    HoldReason::UnverifiedState,
    HoldReason::StateRewound,
    HoldReason::StateMissing,
];

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::NotPromoted => "not_promoted",
            HoldReason::Halted => "halted",
            HoldReason::Paused => "paused",
            HoldReason::Stopped => "stopped",
            HoldReason::UnverifiedState => "unverified_state",
            HoldReason::StateRewound => "state_rewound",
            HoldReason::StateMissing => "state_missing",
        }
    }
}

/// What the agent does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowDecision {
    /// No rollout policy at the tip: apply the branch tip exactly as without fleet rollouts.
    Tip,
    /// Apply `commit` (nothing happens when it is already applied). `rewind_to_stable`: the
    /// commit is the state's `stable`, which may roll the host back; the rollout state allows
    /// that rewind (audited as such). `held`: why this is not the rollout's commit.
    Apply { commit: String, rewind_to_stable: bool, held: Option<HoldReason> },
    /// Keep what is applied (possibly nothing).
    Hold { reason: HoldReason },
}

impl FollowDecision {
    /// Why the host is not on the rollout's commit, if it is not.
    pub fn held(&self) -> Option<HoldReason> {
        match self {
            FollowDecision::Tip => None,
            FollowDecision::Apply { held, .. } => *held,
            FollowDecision::Hold { reason } => Some(*reason),
        }
    }
}

/// The decision. See the module documentation for the rules.
pub fn decide(i: &FollowInput) -> FollowDecision {
    let s = match i.state {
        StateView::Missing => return FollowDecision::Hold { reason: HoldReason::StateMissing },
        StateView::Rewound => return FollowDecision::Hold { reason: HoldReason::StateRewound },
        StateView::Absent if !i.tip_has_policy => return FollowDecision::Tip,
        StateView::Absent => return FollowDecision::Hold { reason: HoldReason::NotPromoted },
        StateView::Unverified => return FollowDecision::Hold { reason: HoldReason::UnverifiedState },
        StateView::Verified(s) if s.branch != i.branch && !i.tip_has_policy => return FollowDecision::Tip,
        StateView::Verified(s) if s.branch != i.branch => return FollowDecision::Hold { reason: HoldReason::NotPromoted },
        StateView::Verified(_) if i.left_rollouts && !i.tip_has_policy => return FollowDecision::Tip,
        StateView::Verified(s) => s,
    };
    let admitted = s.batch_below.is_none_or(|b| i.bucket < b);
    let promoted = matches!((i.wave, s.promoted), (Some(w), Some(p)) if w < p || (w == p && admitted));
    // Keep what is applied: a host already on `commit` is on the rollout's commit (no hold).
    let stay = |reason: HoldReason| {
        if i.applied == Some(s.commit.as_str()) {
            FollowDecision::Apply { commit: s.commit.clone(), rewind_to_stable: false, held: None }
        } else {
            FollowDecision::Hold { reason }
        }
    };
    // Go to `stable` (an allowed rewind), or keep what is applied when there is none.
    let to_stable = |reason: HoldReason| match &s.stable {
        Some(st) => FollowDecision::Apply { commit: st.clone(), rewind_to_stable: true, held: (st != &s.commit).then_some(reason) },
        None => stay(reason),
    };
    // Keep what is applied; a host with nothing applied takes `stable` (named by the state).
    let keep = |reason: HoldReason| match i.applied {
        None => to_stable(reason),
        Some(_) => stay(reason),
    };
    match s.phase {
        RolloutPhase::Halted if s.rollback => to_stable(HoldReason::Halted),
        RolloutPhase::Progressing | RolloutPhase::Paused | RolloutPhase::Complete if promoted => {
            FollowDecision::Apply { commit: s.commit.clone(), rewind_to_stable: false, held: None }
        }
        RolloutPhase::Progressing | RolloutPhase::Complete => to_stable(HoldReason::NotPromoted),
        RolloutPhase::Paused => keep(HoldReason::Paused),
        RolloutPhase::Halted => keep(HoldReason::Halted),
        RolloutPhase::Stopped => keep(HoldReason::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_compiler::artifacts::rollout::ROLLOUT_STATE_VERSION;

    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";
    const S: &str = "5555555555555555555555555555555555555555";
    const TIP: &str = "7777777777777777777777777777777777777777";
    const OLD: &str = "0000000000000000000000000000000000000000";

    fn state(phase: RolloutPhase, promoted: Option<usize>, stable: Option<&str>, rollback: bool) -> RolloutState {
        RolloutState {
            version: ROLLOUT_STATE_VERSION,
            branch: "main".into(),
            commit: C.into(),
            stable: stable.map(str::to_string),
            waves: vec!["canary".into(), "early".into(), "all".into()],
            promoted,
            phase,
            rollback,
            reason: "test".into(),
            since: "2026-11-26T12:00:00Z".into(),
            promoted_at: None,
            generation: 1,
            predecessor: None,
            policy_commit: None,
            batch_below: None,
            resumed: None,
        }
    }

    fn apply(c: &str) -> FollowDecision {
        FollowDecision::Apply { commit: c.into(), rewind_to_stable: false, held: None }
    }
    fn stable(r: HoldReason) -> FollowDecision {
        FollowDecision::Apply { commit: S.into(), rewind_to_stable: true, held: Some(r) }
    }
    fn hold(r: HoldReason) -> FollowDecision {
        FollowDecision::Hold { reason: r }
    }

    fn run(st: StateView, wave: Option<usize>, applied: Option<&str>) -> FollowDecision {
        decide(&FollowInput { branch: "main", tip: TIP, tip_has_policy: true, left_rollouts: false, bucket: 5000, state: st, wave, applied })
    }

    use HoldReason as H;
    use RolloutPhase::*;

    /// Every row: phase, promoted, stable, rollback, wave, applied -> decision.
    #[test]
    fn table() {
        #[allow(clippy::type_complexity)]
        let rows: Vec<(RolloutPhase, Option<usize>, Option<&str>, bool, Option<usize>, Option<&str>, FollowDecision)> = vec![
            // progressing: promoted waves take `commit`, the others stay on / go to stable
            (Progressing, Some(0), Some(S), false, Some(0), Some(S), apply(C)),
            (Progressing, Some(0), Some(S), false, Some(0), None, apply(C)),
            (Progressing, Some(1), Some(S), false, Some(0), Some(C), apply(C)),
            (Progressing, Some(0), Some(S), false, Some(1), Some(S), stable(H::NotPromoted)),
            (Progressing, Some(0), Some(S), false, Some(2), None, stable(H::NotPromoted)),
            // a host on a commit the state does not name goes to stable
            (Progressing, Some(0), Some(S), false, Some(1), Some(OLD), stable(H::NotPromoted)),
            // no stable yet: keep what you have
            (Progressing, Some(0), None, false, Some(1), Some(OLD), hold(H::NotPromoted)),
            (Progressing, Some(0), None, false, Some(1), None, hold(H::NotPromoted)),
            // nothing promoted yet
            (Progressing, None, Some(S), false, Some(0), Some(S), stable(H::NotPromoted)),
            // this host cannot be placed in a wave: never promoted
            (Progressing, Some(2), Some(S), false, None, Some(S), stable(H::NotPromoted)),
            // paused: promoted hosts still take commit, the others keep what they have
            (Paused, Some(0), Some(S), false, Some(0), Some(S), apply(C)),
            (Paused, Some(0), Some(S), false, Some(1), Some(S), hold(H::Paused)),
            (Paused, Some(0), Some(S), false, Some(1), Some(OLD), hold(H::Paused)),
            (Paused, Some(0), Some(S), false, Some(1), None, stable(H::Paused)),
            (Paused, Some(0), None, false, Some(1), None, hold(H::Paused)),
            // complete: everyone on commit (= stable)
            (Complete, Some(2), Some(C), false, Some(2), Some(OLD), apply(C)),
            (Complete, Some(2), Some(C), false, Some(0), None, apply(C)),
            // halted without rollback: keep; a host not promoted never applies commit
            (Halted, Some(0), Some(S), false, Some(0), Some(C), apply(C)),
            (Halted, Some(0), Some(S), false, Some(0), Some(S), hold(H::Halted)),
            (Halted, Some(0), Some(S), false, Some(1), Some(S), hold(H::Halted)),
            (Halted, Some(0), Some(S), false, Some(1), None, stable(H::Halted)),
            (Halted, Some(0), None, false, Some(1), None, hold(H::Halted)),
            // halted with rollback: every host to stable, an allowed rewind
            (Halted, Some(1), Some(S), true, Some(0), Some(C), stable(H::Halted)),
            (Halted, Some(1), Some(S), true, Some(2), Some(S), stable(H::Halted)),
            (Halted, Some(1), Some(S), true, Some(2), None, stable(H::Halted)),
            // ... without a stable commit: keep what you have (here already `commit`)
            (Halted, Some(1), None, true, Some(0), Some(C), apply(C)),
            (Halted, Some(1), None, true, Some(2), Some(OLD), hold(H::Halted)),
            // stopped: keep what you have
            (Stopped, Some(1), Some(S), false, Some(0), Some(C), apply(C)),
            (Stopped, Some(1), Some(S), false, Some(2), Some(S), hold(H::Stopped)),
            (Stopped, Some(1), Some(S), false, Some(2), None, stable(H::Stopped)),
        ];
        for (n, (phase, promoted, st, rollback, wave, applied, want)) in rows.into_iter().enumerate() {
            let s = state(phase, promoted, st, rollback);
            let got = run(StateView::Verified(&s), wave, applied);
            assert_eq!(got, want, "row {n}: {phase:?} promoted={promoted:?} stable={st:?} rollback={rollback} wave={wave:?} applied={applied:?}");
        }
    }

    #[test]
    fn without_a_state_and_a_policy_the_tip_is_followed_as_today() {
        let d = decide(&FollowInput { branch: "main", tip: TIP, tip_has_policy: false, left_rollouts: false, bucket: 0, state: StateView::Absent, wave: None, applied: Some(S) });
        assert_eq!(d, FollowDecision::Tip);
        assert_eq!(d.held(), None);
    }

    /// The policy in force is the one the fleet runs: a tip that drops the `rollout` block does
    /// not bypass a state (halted here: nobody takes the tip); only a state that completed a
    /// commit without a policy hands the repository back to the tip.
    #[test]
    fn a_tip_without_a_policy_does_not_bypass_the_state() {
        let s = state(Halted, Some(0), Some(S), true);
        let run = |st: StateView, left: bool, tip_policy: bool| decide(&FollowInput { branch: "main", tip: TIP, tip_has_policy: tip_policy, left_rollouts: left, bucket: 0, state: st, wave: Some(0), applied: Some(S) });
        assert_eq!(run(StateView::Verified(&s), false, false), stable(H::Halted));
        assert_eq!(run(StateView::Unverified, false, false), hold(H::UnverifiedState));
        assert_eq!(run(StateView::Missing, false, false), hold(H::StateMissing));
        assert_eq!(run(StateView::Rewound, false, false), hold(H::StateRewound));
        let done = state(Complete, Some(2), Some(C), false);
        assert_eq!(run(StateView::Verified(&done), true, false), FollowDecision::Tip);
        // ... until a tip brings a policy back: then the state rules again (the next rollout).
        assert_eq!(run(StateView::Verified(&done), true, true), apply(C));
    }

    /// A promoted wave with `max-parallel`: only hosts of the admitted batches take the commit.
    #[test]
    fn batches_admit_hosts_below_the_bucket() {
        let mut s = state(Progressing, Some(1), Some(S), false);
        s.batch_below = Some(3000);
        let run = |bucket: u32, wave: usize| decide(&FollowInput { branch: "main", tip: TIP, tip_has_policy: true, left_rollouts: false, bucket, state: StateView::Verified(&s), wave: Some(wave), applied: Some(S) });
        assert_eq!(run(2999, 1), apply(C));
        assert_eq!(run(3000, 1), stable(H::NotPromoted));
        assert_eq!(run(9999, 0), apply(C), "earlier waves are whole");
    }

    #[test]
    fn succession_accepts_only_fast_forwards_with_a_higher_generation() {
        let acc = Accepted { commit: "a".repeat(40), generation: 5 };
        let legacy = Accepted { commit: "a".repeat(40), generation: 0 };
        let b = "b".repeat(40);
        #[allow(clippy::type_complexity)]
        let rows: Vec<(Option<&Accepted>, &str, u64, bool, Result<(), &str>)> = vec![
            (None, &b, 0, false, Ok(())),
            (Some(&acc), &acc.commit, 5, true, Ok(())),
            (Some(&acc), &b, 6, true, Ok(())),
            (Some(&acc), &b, 6, false, Err("does not descend")),
            (Some(&acc), &b, 5, true, Err("generation 5, not above 5")),
            (Some(&acc), &b, 0, true, Err("generation 0")),
            (Some(&legacy), &b, 0, true, Ok(())),
            (Some(&legacy), &b, 0, false, Err("does not descend")),
        ];
        for (n, (a, c, g, d, want)) in rows.into_iter().enumerate() {
            let got = succession(a, c, g, d);
            match (&got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) if e.contains(w) => {}
                _ => panic!("row {n}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn without_a_trusted_state_the_host_keeps_what_it_has() {
        assert_eq!(run(StateView::Absent, Some(0), Some(S)), hold(H::NotPromoted));
        assert_eq!(run(StateView::Unverified, Some(0), Some(S)), hold(H::UnverifiedState));
        assert_eq!(run(StateView::Unverified, Some(0), None), hold(H::UnverifiedState));
        // a state about another branch is not about this host
        let mut s = state(Progressing, Some(2), Some(S), false);
        s.branch = "staging".into();
        assert_eq!(run(StateView::Verified(&s), Some(0), Some(S)), hold(H::NotPromoted));
    }

    /// "Never a commit the state does not name": over every combination, the decision applies
    /// the state's `commit` or `stable`, never the tip or anything else; `commit` only on a
    /// promoted wave (or a host already on it); a rewind only to `stable`.
    #[test]
    fn never_a_commit_the_state_does_not_name() {
        let waves = [None, Some(0), Some(1), Some(2)];
        let applied = [None, Some(S), Some(C), Some(OLD), Some(TIP)];
        for phase in [Progressing, Paused, Halted, Complete, Stopped] {
            for promoted in [None, Some(0), Some(1), Some(2)] {
                for st in [None, Some(S)] {
                    for rollback in [false, true] {
                        let s = state(phase, promoted, st, rollback);
                        for w in waves {
                            for a in applied {
                                let d = run(StateView::Verified(&s), w, a);
                                let ctx = format!("{phase:?} promoted={promoted:?} stable={st:?} rollback={rollback} wave={w:?} applied={a:?}: {d:?}");
                                match &d {
                                    FollowDecision::Tip => panic!("tip followed with a policy: {ctx}"),
                                    FollowDecision::Apply { commit, rewind_to_stable, .. } => {
                                        assert!(commit == C || Some(commit.as_str()) == st, "{ctx}");
                                        if commit == C && a != Some(C) {
                                            let p = matches!((w, promoted), (Some(w), Some(p)) if w <= p);
                                            assert!(p && matches!(phase, Progressing | Paused | Complete), "commit applied unpromoted: {ctx}");
                                        }
                                        assert_eq!(*rewind_to_stable, Some(commit.as_str()) == st && commit != C, "{ctx}");
                                    }
                                    FollowDecision::Hold { .. } => {}
                                }
                                if phase == Halted && rollback && st.is_some() {
                                    assert_eq!(d, stable(H::Halted), "{ctx}");
                                }
                                // held names the reason exactly when the host ends off `commit`
                                let ends_on = match &d {
                                    FollowDecision::Apply { commit, .. } => Some(commit.as_str()),
                                    _ => a,
                                };
                                assert_eq!(d.held().is_none(), ends_on == Some(C), "{ctx}");
                            }
                        }
                    }
                }
            }
        }
    }
}
