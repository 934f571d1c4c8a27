//! The agent's decisions, without I/O: which step a commit takes next (skip it, verify its
//! signature, check for a rewind, compile, refuse, adopt, apply), how failures are retried
//! (backoff), what a self-check attempt leads to, and what drift leads to. The agent loop
//! (`agent/mod.rs`) gathers the facts (git, files, the clock) and executes the steps.

use std::time::{Duration, Instant};

use crate::rollout::follow::FollowDecision;

/// Exponential backoff: `base`, 2 × base, 4 × base, … up to `cap` (fetches: 0.5 s doubling).
#[derive(Debug, Clone)]
pub struct Backoff {
    pub failures: u32,
    pub base: Duration,
    pub cap: Duration,
}

/// Shortest delay before a failed apply or heal is tried again.
pub const RETRY_MIN: Duration = Duration::from_secs(10);

impl Backoff {
    pub fn new(interval: Duration) -> Backoff {
        Backoff { failures: 0, base: Duration::from_millis(500), cap: (interval * 4).clamp(Duration::from_secs(1), Duration::from_secs(300)).max(interval) }
    }
    /// Retries of a failed apply or heal: the interval (at least [`RETRY_MIN`]), doubling, at
    /// most 32 times that and 1 h.
    pub fn for_retries(interval: Duration) -> Backoff {
        let base = interval.max(RETRY_MIN);
        Backoff { failures: 0, base, cap: (base * 32).min(Duration::from_secs(3600)).max(base) }
    }
    /// Delay before the next attempt after one more failure.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = self.base.saturating_mul(1u32 << (self.failures - 1).min(20));
        d.min(self.cap)
    }
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// One-shot permission for one rewind, in the state dir: the file holds the full id of the
/// commit that may replace the applied one although it does not descend from it. It is
/// removed once that commit applied.
pub const ALLOW_REWIND_FILE: &str = "allow-rewind";

/// `--drift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftMode {
    Heal,
    Alert,
}

/// The rollout's decision as a commit to take: `(commit, rewind_to_stable)`, the branch tip
/// without a rollout policy; None: keep what is applied (a hold).
pub fn target<'a>(d: &'a FollowDecision, tip: &'a str) -> Option<(&'a str, bool)> {
    match d {
        FollowDecision::Tip => Some((tip, false)),
        FollowDecision::Apply { commit, rewind_to_stable, .. } => Some((commit.as_str(), *rewind_to_stable)),
        FollowDecision::Hold { .. } => None,
    }
}

/// What the journal remembers of the commit under consideration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior<T = Instant> {
    /// Never handled (or the journal is about another commit).
    New,
    Applied,
    /// Refused (final): for its signature or a compile error, or as a `rewind`.
    Refused { rewind: bool },
    /// The apply failed (perhaps transiently): tried again at `retry_at` (None: at once, e.g.
    /// after a restart).
    Failed { retry_at: Option<T> },
    /// Applied, then reverted by its self-check, while the host had accepted the rollout state
    /// of generation `generation` (None: no rollout state).
    SelfCheck { generation: Option<u64> },
}

/// Everything [`decide`] needs about one commit. The `Option` facts start as None and are
/// gathered by the agent when a step asks for them. `T` is the clock's type (an `Instant`;
/// plain numbers in tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts<'a, T = Instant> {
    /// The commit considered (the tip, or what the rollout state names).
    pub commit: &'a str,
    pub prior: Prior<T>,
    pub now: T,
    /// Re-apply even if already applied (an interrupted apply is redone).
    pub force: bool,
    /// The one-shot allow file in the state dir names `commit`.
    pub allow_file: bool,
    /// Its path (for the refusal's hint).
    pub allow_file_path: &'a str,
    /// `--allow-rewind`.
    pub allow_rewind: bool,
    /// The rollout state sends this host to its stable commit (an allowed rewind): why.
    pub by_state: Option<&'a str>,
    /// The generation of the last operator `resume` of the rollout state this host follows.
    pub resumed: Option<u64>,
    /// The signature verdict (None: not verified yet).
    pub signature: Option<Result<(), String>>,
    /// Why `commit` would roll back the applied commit (None: not checked yet; Some(None): it
    /// descends from it, or nothing is applied).
    pub rewind: Option<Option<String>>,
    /// The compile verdict (None: not compiled yet): Ok(whether the applied generation is this
    /// commit with the same artifacts), Err(the diagnostics).
    pub compiled: Option<Result<bool, String>>,
}

/// The next thing the agent does with a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing: already handled (refused, failed and not due again, reverted by its self-check).
    Skip,
    /// Verify the commit's signature and come back.
    VerifySignature,
    /// Find out whether the commit descends from the applied one and come back.
    CheckRewind,
    /// Compile the commit for this host and come back.
    Compile,
    /// Refuse the commit for good (audited, degraded) with this reason and detail.
    Refuse { reason: &'static str, detail: String },
    /// The live state is already this commit's: serve it.
    Adopt,
    /// Apply it; `note` says why a rewind is allowed.
    Apply { note: Option<String> },
}

/// The decision about one commit. The rules, in order:
/// - a commit already refused, failed (until its retry is due) or reverted by its self-check is
///   skipped, unless the apply is forced, a rewind refusal is now allowed (allow file,
///   `--allow-rewind`, the rollout state), or — after a self-check revert — the operator
///   resumed the rollout since;
/// - an unverified signature is refused (`signature`);
/// - a commit that does not descend from the applied one is refused (`rewind`) unless the
///   rewind is allowed;
/// - a compile error is refused (`compile`);
/// - the same commit with the same artifacts is adopted (not forced);
/// - otherwise it is applied.
pub fn decide<T: PartialOrd + Copy>(f: &Facts<T>) -> Step {
    let rewind_allowed_now = f.allow_file || (f.prior == Prior::Refused { rewind: true } && (f.allow_rewind || f.by_state.is_some()));
    let again = match f.prior {
        Prior::New | Prior::Applied => true,
        Prior::Refused { .. } => false,
        Prior::Failed { retry_at } => retry_at.is_none_or(|at| f.now >= at),
        Prior::SelfCheck { generation } => f.resumed.is_some_and(|r| r > generation.unwrap_or(0)),
    };
    if !(f.force || rewind_allowed_now || again) {
        return Step::Skip;
    }
    let Some(signature) = &f.signature else { return Step::VerifySignature };
    if let Err(why) = signature {
        return Step::Refuse { reason: "signature", detail: why.clone() };
    }
    let Some(rewind) = &f.rewind else { return Step::CheckRewind };
    let note = match rewind {
        None => None,
        Some(why) if !(f.allow_rewind || f.allow_file || f.by_state.is_some()) => {
            return Step::Refuse {
                reason: "rewind",
                detail: format!(
                    "{why}; a force-push or history rewrite would roll the host back. To apply it anyway write its id to {} (one-shot) or run the agent with --allow-rewind",
                    f.allow_file_path
                ),
            }
        }
        Some(why) => {
            let by = match f.by_state {
                Some(st) => format!("the fleet rollout state ({st}): back to its stable commit"),
                None if f.allow_file => format!("the one-shot {} file", ALLOW_REWIND_FILE),
                None => "--allow-rewind".to_string(),
            };
            Some(format!("rewind allowed by {by}: {why}"))
        }
    };
    match &f.compiled {
        None => Step::Compile,
        Some(Err(diags)) => Step::Refuse { reason: "compile", detail: diags.clone() },
        Some(Ok(true)) if !f.force => Step::Adopt,
        Some(Ok(_)) => Step::Apply { note },
    }
}

/// What a transaction was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Apply,
    Heal,
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub kind: Kind,
    pub ok: bool,
    /// The apply went through, then its self-check failed and it was reverted.
    pub self_check_failed: bool,
    /// The backends rolled back to the previous state.
    pub rolled_back: bool,
    /// The nft backend refused a replace that would discard state.
    pub replace_refused: bool,
}

/// What the journal and the metrics say about a transaction's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The journal's `handled.outcome`: `applied`, `failed`, `self_check`.
    pub outcome: &'static str,
    /// The journal's `handled.degraded`: kept across restarts (None: healthy).
    pub degraded: Option<&'static str>,
    /// The `reason` of `fwc_agent_degraded` right after the failure (None: healthy).
    pub reason: Option<&'static str>,
    /// Whether it is tried again (with [`retry`]'s backoff): a failed apply or heal may be
    /// transient; a self-check revert is final (re-applying would cut the host off again)
    /// until the rollout is resumed.
    pub retry: bool,
}

pub fn settle(e: Ended) -> Settled {
    if e.ok {
        return Settled { outcome: "applied", degraded: None, reason: None, retry: false };
    }
    let degraded = if e.self_check_failed {
        "self_check"
    } else if e.rolled_back {
        "rolled_back"
    } else if e.replace_refused {
        "replace_refused"
    } else {
        "apply_failed"
    };
    let reason = match e.kind {
        _ if e.self_check_failed => "self_check",
        Kind::Heal => "heal_failed",
        Kind::Apply if e.rolled_back => "rolled_back",
        Kind::Apply => "apply_failed",
    };
    Settled { outcome: if e.self_check_failed { "self_check" } else { "failed" }, degraded: Some(degraded), reason: Some(reason), retry: !e.self_check_failed }
}

/// The backoff of the next retry after one more failure: `previous` (of the same commit, or of
/// the failing heal) continued, or a new one from the interval; and the delay.
pub fn retry(previous: Option<Backoff>, interval: Duration) -> (Backoff, Duration) {
    let mut b = previous.unwrap_or_else(|| Backoff::for_retries(interval));
    let d = b.fail();
    (b, d)
}

/// The self-check's retry policy (the `rollout` policy's `self-check-attempts=` and
/// `self-check-spacing=`; the defaults without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfCheckPolicy {
    /// How often the whole self-check is tried before the apply is reverted (at least 1).
    pub attempts: u32,
    /// The pause before the second attempt, doubling after each failure.
    pub spacing: Duration,
}

impl Default for SelfCheckPolicy {
    fn default() -> Self {
        SelfCheckPolicy { attempts: DEFAULT_SELF_CHECK_ATTEMPTS, spacing: DEFAULT_SELF_CHECK_SPACING }
    }
}

/// Defaults of the self-check's retries (as the policy's): a git blip or a busy server must
/// not revert a good commit for good.
pub const DEFAULT_SELF_CHECK_ATTEMPTS: u32 = fwc_compiler::artifacts::rollout::DEFAULT_SELF_CHECK_ATTEMPTS;
pub const DEFAULT_SELF_CHECK_SPACING: Duration = Duration::from_millis(fwc_compiler::artifacts::rollout::DEFAULT_SELF_CHECK_SPACING_MS);

/// After a self-check attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelfCheckStep {
    Pass,
    /// Try again after this pause.
    RetryAfter(Duration),
    /// Give up: revert the apply, for this reason.
    Revert { why: String },
}

/// The step after attempt number `attempt` (1 = the first) ended with `last`.
pub fn self_check_step(policy: SelfCheckPolicy, attempt: u32, last: Result<(), String>) -> SelfCheckStep {
    let attempts = policy.attempts.max(1);
    match last {
        Ok(()) => SelfCheckStep::Pass,
        Err(_) if attempt < attempts => SelfCheckStep::RetryAfter(policy.spacing.saturating_mul(1u32 << (attempt - 1).min(20))),
        Err(why) if attempts > 1 => SelfCheckStep::Revert { why: format!("{why} ({attempt} attempts)") },
        Err(why) => SelfCheckStep::Revert { why },
    }
}

/// After a drift check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftStep {
    /// No drift. `recovered`: a heal had been failing (say it is over).
    Clean { recovered: bool },
    /// Alert mode: report this drift (audited once).
    Report,
    /// Alert mode: this drift was reported already.
    Reported,
    /// Heal mode: re-apply; `retry`: after a failed heal (not audited again unless it works).
    Heal { retry: bool },
    /// Heal mode: a heal failed and its retry is not due yet.
    Wait,
}

/// What to do about the drift found (`drift`: its text, None when live matches).
pub fn drift_step<T: PartialOrd>(drift: Option<&str>, mode: DriftMode, last_reported: Option<&str>, heal_retry_at: Option<T>, now: T) -> DriftStep {
    let Some(text) = drift else { return DriftStep::Clean { recovered: heal_retry_at.is_some() } };
    match mode {
        DriftMode::Alert if last_reported == Some(text) => DriftStep::Reported,
        DriftMode::Alert => DriftStep::Report,
        DriftMode::Heal => match heal_retry_at {
            Some(at) if now < at => DriftStep::Wait,
            at => DriftStep::Heal { retry: at.is_some() },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(2));
        let d: Vec<_> = (0..6).map(|_| b.fail().as_millis()).collect();
        assert_eq!(d, vec![500, 1000, 2000, 4000, 8000, 8000]);
        b.reset();
        assert_eq!(b.fail().as_millis(), 500);
        let mut b = Backoff::new(Duration::from_millis(200));
        assert_eq!((0..4).map(|_| b.fail().as_millis()).collect::<Vec<_>>(), vec![500, 1000, 1000, 1000]);
    }

    use crate::rollout::follow::{self, FollowInput, HoldReason, StateView};
    use fwc_compiler::artifacts::rollout::{RolloutPhase, RolloutState, ROLLOUT_STATE_VERSION};

    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";
    const S: &str = "5555555555555555555555555555555555555555";
    const TIP: &str = "7777777777777777777777777777777777777777";

    fn facts(now: u64) -> Facts<'static, u64> {
        Facts {
            commit: C,
            prior: Prior::New,
            now,
            force: false,
            allow_file: false,
            allow_file_path: "/var/lib/fwc/allow-rewind",
            allow_rewind: false,
            by_state: None,
            resumed: None,
            signature: None,
            rewind: None,
            compiled: None,
        }
    }

    /// The commit the agent goes to, from the rollout inputs (as the agent loop does).
    fn goes_to(state: StateView, tip_has_policy: bool, wave: Option<usize>) -> Result<String, HoldReason> {
        let d = follow::decide(&FollowInput { branch: "main", tip: TIP, tip_has_policy, left_rollouts: false, bucket: 0, state, wave, applied: Some(S) });
        target(&d, TIP).map(|(c, _)| c.to_string()).ok_or_else(|| d.held().expect("a hold names its reason"))
    }

    fn rollout(phase: RolloutPhase, promoted: usize, rollback: bool) -> RolloutState {
        RolloutState {
            version: ROLLOUT_STATE_VERSION,
            branch: "main".into(),
            commit: C.into(),
            stable: Some(S.into()),
            waves: vec!["canary".into(), "all".into()],
            promoted: Some(promoted),
            phase,
            rollback,
            reason: "test".into(),
            since: "2026-11-26T12:00:00Z".into(),
            promoted_at: None,
            generation: 7,
            predecessor: None,
            policy_commit: Some(S.into()),
            batch_below: None,
            resumed: None,
        }
    }

    /// The faults a fleet meets, each a row: the agent's step for the commit it considers.
    #[test]
    fn every_fault_is_a_row() {
        let (now, later) = (100, 110);
        let ok = Some(Ok(()));
        #[allow(clippy::type_complexity)]
        let rows: Vec<(&str, Facts<u64>, Step)> = vec![
            ("a new commit: verify its signature first", facts(now), Step::VerifySignature),
            ("bad signature: refused", Facts { signature: Some(Err("not signed by a trusted key".into())), ..facts(now) }, Step::Refuse { reason: "signature", detail: "not signed by a trusted key".into() }),
            ("signed: is it a rewind?", Facts { signature: ok.clone(), ..facts(now) }, Step::CheckRewind),
            ("descends: compile", Facts { signature: ok.clone(), rewind: Some(None), ..facts(now) }, Step::Compile),
            ("compile error: refused", Facts { signature: ok.clone(), rewind: Some(None), compiled: Some(Err("fwc.kdl:1:1 oops".into())), ..facts(now) }, Step::Refuse { reason: "compile", detail: "fwc.kdl:1:1 oops".into() }),
            ("compiled, new artifacts: apply", Facts { signature: ok.clone(), rewind: Some(None), compiled: Some(Ok(false)), ..facts(now) }, Step::Apply { note: None }),
            ("compiled, same as live: adopt", Facts { signature: ok.clone(), rewind: Some(None), compiled: Some(Ok(true)), ..facts(now) }, Step::Adopt),
            ("same as live but an interrupted apply: re-apply", Facts { force: true, signature: ok.clone(), rewind: Some(None), compiled: Some(Ok(true)), ..facts(now) }, Step::Apply { note: None }),
            (
                "a force-push (rewind) without the allow file: refused, saying how to allow it",
                Facts { signature: ok.clone(), rewind: Some(Some("C does not descend from A".into())), ..facts(now) },
                Step::Refuse {
                    reason: "rewind",
                    detail: "C does not descend from A; a force-push or history rewrite would roll the host back. To apply it anyway write its id to /var/lib/fwc/allow-rewind (one-shot) or run the agent with --allow-rewind".into(),
                },
            ),
            (
                "the rewind with the allow file: applied, noted",
                Facts { allow_file: true, signature: ok.clone(), rewind: Some(Some("C does not descend from A".into())), compiled: Some(Ok(false)), ..facts(now) },
                Step::Apply { note: Some("rewind allowed by the one-shot allow-rewind file: C does not descend from A".into()) },
            ),
            (
                "the rewind to the rollout's stable commit (halt with rollback): allowed by the state",
                Facts { by_state: Some("halted: canary degraded"), signature: ok.clone(), rewind: Some(Some("S does not descend from C".into())), compiled: Some(Ok(false)), ..facts(now) },
                Step::Apply { note: Some("rewind allowed by the fleet rollout state (halted: canary degraded): back to its stable commit: S does not descend from C".into()) },
            ),
            ("refused as a rewind before: skipped", Facts { prior: Prior::Refused { rewind: true }, ..facts(now) }, Step::Skip),
            ("refused as a rewind, now allowed by the file: considered", Facts { prior: Prior::Refused { rewind: true }, allow_file: true, ..facts(now) }, Step::VerifySignature),
            ("refused as a rewind, now --allow-rewind: considered", Facts { prior: Prior::Refused { rewind: true }, allow_rewind: true, ..facts(now) }, Step::VerifySignature),
            ("refused for its signature: final, even with --allow-rewind", Facts { prior: Prior::Refused { rewind: false }, allow_rewind: true, ..facts(now) }, Step::Skip),
            ("apply error: not again before its retry is due", Facts { prior: Prior::Failed { retry_at: Some(later) }, ..facts(now) }, Step::Skip),
            ("apply error: again once due", Facts { prior: Prior::Failed { retry_at: Some(later) }, ..facts(later) }, Step::VerifySignature),
            ("apply error before a restart: again at once", Facts { prior: Prior::Failed { retry_at: None }, ..facts(now) }, Step::VerifySignature),
            ("reverted by its self-check: final", Facts { prior: Prior::SelfCheck { generation: Some(7) }, ..facts(now) }, Step::Skip),
            ("reverted by its self-check, a resume before the failure: still final", Facts { prior: Prior::SelfCheck { generation: Some(7) }, resumed: Some(7), ..facts(now) }, Step::Skip),
            ("reverted by its self-check, the rollout resumed since: tried again", Facts { prior: Prior::SelfCheck { generation: Some(7) }, resumed: Some(9), ..facts(now) }, Step::VerifySignature),
            ("applied before, live drifted to another commit: considered", Facts { prior: Prior::Applied, ..facts(now) }, Step::VerifySignature),
        ];
        for (what, f, want) in rows {
            assert_eq!(decide(&f), want, "{what}");
        }
    }

    /// The rollout's faults, each a row: where the agent goes (or why it holds).
    #[test]
    fn rollout_faults_are_rows() {
        let progressing = rollout(RolloutPhase::Progressing, 0, false);
        let halted = rollout(RolloutPhase::Halted, 0, true);
        #[allow(clippy::type_complexity)]
        let rows: Vec<(&str, StateView, bool, Option<usize>, Result<String, HoldReason>)> = vec![
            ("a replayed (older) state: hold, never the tip", StateView::Rewound, true, Some(0), Err(HoldReason::StateRewound)),
            ("the rollout ref deleted: hold, never the tip", StateView::Missing, true, Some(0), Err(HoldReason::StateMissing)),
            ("a forged state (bad signature): hold", StateView::Unverified, true, Some(0), Err(HoldReason::UnverifiedState)),
            ("a commit that drops the policy, not promoted: stays on stable", StateView::Verified(&progressing), false, Some(1), Ok(S.into())),
            ("a commit that drops the policy, halted with rollback: stable", StateView::Verified(&halted), false, Some(0), Ok(S.into())),
            ("the canary's wave promoted: the commit", StateView::Verified(&progressing), true, Some(0), Ok(C.into())),
            ("a host the policy cannot place: never promoted, stays on stable", StateView::Verified(&progressing), true, None, Ok(S.into())),
            ("no state, no policy: the tip, as without rollouts", StateView::Absent, false, None, Ok(TIP.into())),
        ];
        for (what, state, tip_policy, wave, want) in rows {
            assert_eq!(goes_to(state, tip_policy, wave), want, "{what}");
        }
    }

    #[test]
    fn a_transient_self_check_failure_is_retried_then_passes() {
        let p = SelfCheckPolicy::default();
        assert_eq!(self_check_step(p, 1, Err("git fetch: connection reset".into())), SelfCheckStep::RetryAfter(Duration::from_secs(1)));
        assert_eq!(self_check_step(p, 2, Ok(())), SelfCheckStep::Pass);
        assert_eq!(self_check_step(p, 2, Err("x".into())), SelfCheckStep::RetryAfter(Duration::from_secs(2)));
        assert_eq!(self_check_step(p, 3, Err("unreachable".into())), SelfCheckStep::Revert { why: "unreachable (3 attempts)".into() });
        let once = SelfCheckPolicy { attempts: 1, spacing: Duration::from_secs(5) };
        assert_eq!(self_check_step(once, 1, Err("unreachable".into())), SelfCheckStep::Revert { why: "unreachable".into() });
        let zero = SelfCheckPolicy { attempts: 0, spacing: Duration::from_secs(5) };
        assert_eq!(self_check_step(zero, 1, Err("u".into())), SelfCheckStep::Revert { why: "u".into() }, "at least one attempt");
    }

    #[test]
    fn failures_settle_and_retry() {
        let e = |kind, ok, sc, rb, rr| settle(Ended { kind, ok, self_check_failed: sc, rolled_back: rb, replace_refused: rr });
        assert_eq!(e(Kind::Apply, true, false, false, false), Settled { outcome: "applied", degraded: None, reason: None, retry: false });
        assert_eq!(e(Kind::Apply, false, false, true, false), Settled { outcome: "failed", degraded: Some("rolled_back"), reason: Some("rolled_back"), retry: true });
        assert_eq!(e(Kind::Apply, false, false, false, false), Settled { outcome: "failed", degraded: Some("apply_failed"), reason: Some("apply_failed"), retry: true });
        assert_eq!(e(Kind::Apply, false, false, false, true), Settled { outcome: "failed", degraded: Some("replace_refused"), reason: Some("apply_failed"), retry: true });
        assert_eq!(e(Kind::Apply, false, true, true, false), Settled { outcome: "self_check", degraded: Some("self_check"), reason: Some("self_check"), retry: false });
        assert_eq!(e(Kind::Heal, false, false, true, false).reason, Some("heal_failed"));
        // apply error then retry: 10 s, 20 s, 40 s ... (interval 2 s: at least RETRY_MIN)
        let (b, d1) = retry(None, Duration::from_secs(2));
        let (_, d2) = retry(Some(b), Duration::from_secs(2));
        assert_eq!((d1, d2), (Duration::from_secs(10), Duration::from_secs(20)));
    }

    #[test]
    fn drift_is_healed_reported_or_waited_for() {
        let (now, later) = (100u64, 130u64);
        assert_eq!(drift_step(None, DriftMode::Heal, None, None, now), DriftStep::Clean { recovered: false });
        assert_eq!(drift_step(None, DriftMode::Heal, None, Some(later), now), DriftStep::Clean { recovered: true });
        assert_eq!(drift_step(Some("d"), DriftMode::Heal, None, None, now), DriftStep::Heal { retry: false });
        assert_eq!(drift_step(Some("d"), DriftMode::Heal, None, Some(later), now), DriftStep::Wait);
        assert_eq!(drift_step(Some("d"), DriftMode::Heal, None, Some(later), later), DriftStep::Heal { retry: true });
        assert_eq!(drift_step(Some("d"), DriftMode::Alert, None, None, now), DriftStep::Report);
        assert_eq!(drift_step(Some("d"), DriftMode::Alert, Some("d"), None, now), DriftStep::Reported);
        assert_eq!(drift_step(Some("e"), DriftMode::Alert, Some("d"), None, now), DriftStep::Report);
    }
}
