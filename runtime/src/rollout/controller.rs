//! The rollout controller's decision, as a pure function: given the current rollout state, the
//! branch tip, the fleet of the commit, what the hosts report (from Prometheus), the gate
//! results, the operator's command and the time, [`decide`] returns the next state or why nothing
//! changes. No I/O here: `rollout::advance` reads the inputs and commits the result.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use fwc_artifacts::rollout::{host_bucket, Gate, GateOp, MaxUnavailable, OnFailure, RolloutPhase, RolloutPolicy, RolloutState, Resumed, ROLLOUT_STATE_VERSION};

/// One host of the fleet and its wave in the rollout commit's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub wave: usize,
    /// A `host` block of the repository (expected to report; missing counts as unavailable).
    /// Hosts that report without being declared are members too, with `declared = false`.
    pub declared: bool,
}

/// The policy in force and every host's wave in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub policy: RolloutPolicy,
    pub members: Vec<Member>,
    /// The commit the policy was read from (the stable commit's policy governs a rollout when
    /// it has one: [`policy_candidates`]).
    pub policy_commit: String,
}

impl Fleet {
    pub fn wave_names(&self) -> Vec<String> {
        self.policy.waves.iter().map(|w| w.name.clone()).collect()
    }

    fn in_wave(&self, wave: usize) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.wave == wave)
    }
}

/// `fwc_agent_degraded{host, commit, reason} == 1`: a failure of `commit`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Degraded {
    pub commit: String,
    pub reason: String,
}

/// What one host reports through Prometheus.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostReport {
    /// `fwc_applied_commit_info{commit}`; None when the host reports no applied commit.
    pub applied: Option<String>,
    /// Every degraded series with value 1.
    pub degraded: Vec<Degraded>,
    /// Unix time of the latest sample (for people).
    pub last_seen: Option<f64>,
    /// In Prometheus' latest scrape. A host missing from it but seen within the grace period
    /// (`--missing-after`) is reported with `current = false` and nothing else: it counts as not
    /// yet applied, not as missing, so one failed scrape never halts a rollout.
    pub current: bool,
}

impl HostReport {
    fn degraded_for(&self, commit: &str) -> Option<&Degraded> {
        self.degraded.iter().find(|d| d.commit == commit)
    }
}

/// The outcome of one gate query.
#[derive(Debug, Clone, PartialEq)]
pub struct GateResult {
    pub wave: usize,
    pub gate: String,
    /// None = the gate holds; Some(why) = it fails.
    pub failure: Option<String>,
}

/// Judge one gate's instant-query result (`(labels, value)` per sample): every sample must
/// satisfy the comparison, an empty result fails unless `allow_empty`. None = holds.
pub fn judge_gate(gate: &Gate, samples: &[(String, f64)]) -> Option<String> {
    if samples.is_empty() {
        return (!gate.allow_empty).then(|| format!("gate {:?}: the query returned no samples ({})", gate.name, gate.query));
    }
    let (sym, ok): (&str, fn(f64, f64) -> bool) = match gate.op {
        GateOp::AtMost => ("<=", |v, t| v <= t),
        GateOp::AtLeast => (">=", |v, t| v >= t),
    };
    let bad: Vec<String> = samples
        .iter()
        .filter(|(_, v)| v.is_nan() || !ok(*v, gate.threshold))
        .map(|(l, v)| if l.is_empty() { format!("{v}") } else { format!("{l} = {v}") })
        .collect();
    (!bad.is_empty()).then(|| format!("gate {:?} ({} {sym} {}) fails: {}", gate.name, gate.query, gate.threshold, bad.join(", ")))
}

/// What the operator (or cron) asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `fwc rollout advance`: the automatic step.
    Advance,
    /// `fwc rollout start [COMMIT]` (the resolved commit; the tip when none was given).
    Start { commit: String },
    Pause { reason: String },
    Resume { reason: String },
    Halt { rollback: bool, reason: String },
    Stop { reason: String },
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone)]
pub struct ControllerInput<'a> {
    pub state: Option<&'a RolloutState>,
    /// The state commit `state` was read from (the next state names it as its predecessor).
    pub state_commit: Option<&'a str>,
    pub branch: &'a str,
    pub tip: &'a str,
    /// The fleet of [`subject`]'s commit; None when that commit has no `rollout` policy.
    pub fleet: Option<&'a Fleet>,
    pub reports: &'a BTreeMap<String, HostReport>,
    /// Results of the gates of the waves up to the promoted one.
    pub gates: &'a [GateResult],
    pub command: Command,
    pub now: SystemTime,
}

/// The result of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Commit this state; `summary` is the commit message's first line.
    Transition { state: RolloutState, summary: String },
    /// The state stays as it is (and why: waiting for hosts, soaking, ...).
    Nothing { why: String },
    /// The operator's command does not apply to the current state (what to do instead).
    Refused { why: String },
}

/// Which commit's policy and fleet [`decide`] needs: the tip when a new rollout would start,
/// else the commit being rolled out. The I/O loop compiles this commit before deciding.
pub fn subject(state: Option<&RolloutState>, tip: &str, command: &Command) -> String {
    match (command, state) {
        (Command::Start { commit }, _) => commit.clone(),
        (_, None) => tip.to_string(),
        (Command::Advance, Some(s)) if starts_new(s, tip) => tip.to_string(),
        (_, Some(s)) => s.commit.clone(),
    }
}

/// Which commits' policies may govern the rollout [`subject`] names, in order of preference:
/// the policy the running rollout was started under; for a new rollout the stable commit's
/// (the policy the fleet runs), then the new commit's own (the first rollout). A commit that
/// drops or weakens the policy is so rolled out under the policy it replaces.
pub fn policy_candidates(state: Option<&RolloutState>, tip: &str, command: &Command) -> Vec<String> {
    let subj = subject(state, tip, command);
    match state {
        Some(s) if s.commit == subj && !matches!(command, Command::Start { .. }) => vec![s.policy_commit().to_string()],
        Some(s) => {
            let stable = if s.phase == RolloutPhase::Complete { Some(s.commit.clone()) } else { s.stable.clone() };
            stable.into_iter().chain([subj]).collect()
        }
        None => vec![subj],
    }
}

/// Does a new tip start a new rollout (the current one is over)?
fn starts_new(s: &RolloutState, tip: &str) -> bool {
    s.commit != tip && matches!(s.phase, RolloutPhase::Complete | RolloutPhase::Stopped | RolloutPhase::Halted)
}

/// Which waves' gates [`decide`] wants results for: every promoted wave but the last (the
/// rollout completes when the last wave has applied; its gates are never checked).
pub fn gates_wanted(state: Option<&RolloutState>, fleet: &Fleet) -> Vec<usize> {
    let last = fleet.policy.waves.len().saturating_sub(1);
    match state.and_then(|s| s.promoted) {
        Some(k) => (0..=k.min(last)).filter(|w| *w < last).collect(),
        None => vec![],
    }
}

pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

/// The one decision function. Every new state counts one generation more than the state it was
/// decided from and names that state's commit as its predecessor.
pub fn decide(inp: &ControllerInput) -> Decision {
    match decide_phase(inp) {
        Decision::Transition { mut state, summary } => {
            state.generation = inp.state.map_or(0, |s| s.generation) + 1;
            state.predecessor = inp.state_commit.map(str::to_string);
            Decision::Transition { state, summary }
        }
        d => d,
    }
}

fn decide_phase(inp: &ControllerInput) -> Decision {
    let now = rfc3339(inp.now);
    match (&inp.command, inp.state) {
        (Command::Start { commit }, st) => start(inp, st, commit, &now, true),
        (Command::Advance, None) => start(inp, None, inp.tip, &now, false),
        (Command::Advance, Some(s)) => {
            if starts_new(s, inp.tip) {
                return start(inp, Some(s), inp.tip, &now, false);
            }
            match s.phase {
                RolloutPhase::Progressing | RolloutPhase::Paused => evaluate(inp, s, &now),
                RolloutPhase::Halted => Decision::Nothing {
                    why: format!("the rollout of {} is halted ({}); push a fix, or `fwc rollout resume`/`start`", short(&s.commit), s.reason),
                },
                RolloutPhase::Complete => Decision::Nothing { why: format!("{} is rolled out to every wave; waiting for a new tip of {}", short(&s.commit), s.branch) },
                RolloutPhase::Stopped => Decision::Nothing { why: format!("the rollout of {} was stopped; the next new tip of {} starts a rollout", short(&s.commit), s.branch) },
            }
        }
        (_, None) => Decision::Refused { why: "there is no rollout yet: start one with `fwc rollout start` (or `advance`)".into() },
        (Command::Pause { reason }, Some(s)) => match s.phase {
            RolloutPhase::Progressing => transition(s, RolloutPhase::Paused, false, reason, "pause", &now),
            RolloutPhase::Paused => Decision::Nothing { why: "the rollout is already paused".into() },
            p => Decision::Refused { why: format!("cannot pause: the rollout of {} is {}", short(&s.commit), p.as_str()) },
        },
        (Command::Resume { reason }, Some(s)) => match s.phase {
            RolloutPhase::Paused | RolloutPhase::Halted => match transition(s, RolloutPhase::Progressing, false, reason, "resume", &now) {
                // Hosts whose self-check reverted the commit try it again after a resume.
                Decision::Transition { mut state, summary } => {
                    state.resumed = Some(Resumed { generation: s.generation + 1, at: now.clone() });
                    Decision::Transition { state, summary }
                }
                d => d,
            },
            RolloutPhase::Progressing => Decision::Nothing { why: "the rollout is already progressing".into() },
            p => Decision::Refused {
                why: format!("cannot resume: the rollout of {} is {}; start a new one with `fwc rollout start [COMMIT]`", short(&s.commit), p.as_str()),
            },
        },
        (Command::Halt { rollback: true, .. }, Some(s)) if s.stable.is_none() && s.phase != RolloutPhase::Complete && s.phase != RolloutPhase::Stopped => Decision::Refused {
            why: format!(
                "cannot roll back: this is the first rollout ({} has no stable commit to return to); `fwc rollout halt` without --rollback stops it where it is, and a revert commit rolled out next undoes it",
                short(&s.commit)
            ),
        },
        (Command::Halt { rollback, reason }, Some(s)) => match s.phase {
            RolloutPhase::Progressing | RolloutPhase::Paused => transition(s, RolloutPhase::Halted, *rollback, reason, if *rollback { "halt --rollback" } else { "halt" }, &now),
            RolloutPhase::Halted if *rollback && !s.rollback => transition(s, RolloutPhase::Halted, true, reason, "halt --rollback", &now),
            RolloutPhase::Halted => Decision::Nothing { why: "the rollout is already halted".into() },
            p => Decision::Refused { why: format!("cannot halt: the rollout of {} is {} (nothing is being rolled out)", short(&s.commit), p.as_str()) },
        },
        (Command::Stop { reason }, Some(s)) => match s.phase {
            RolloutPhase::Progressing | RolloutPhase::Paused | RolloutPhase::Halted => transition(s, RolloutPhase::Stopped, false, reason, "stop", &now),
            RolloutPhase::Stopped => Decision::Nothing { why: "the rollout is already stopped".into() },
            RolloutPhase::Complete => Decision::Refused { why: format!("cannot stop: the rollout of {} is complete", short(&s.commit)) },
        },
    }
}

/// An operator's phase change.
fn transition(s: &RolloutState, phase: RolloutPhase, rollback: bool, reason: &str, verb: &str, now: &str) -> Decision {
    let mut n = s.clone();
    n.phase = phase;
    n.rollback = rollback;
    n.reason = if reason.is_empty() { format!("{verb} by the operator") } else { format!("{verb} by the operator: {reason}") };
    n.since = now.to_string();
    Decision::Transition { summary: format!("rollout {}: {verb}", short(&s.commit)), state: n }
}

/// Start a rollout of `commit` (wave 0 promoted at once).
fn start(inp: &ControllerInput, st: Option<&RolloutState>, commit: &str, now: &str, by_operator: bool) -> Decision {
    let Some(fleet) = inp.fleet else {
        let why = format!("commit {} of {} has no `rollout` policy: agents apply the branch tip as without a fleet rollout", short(commit), inp.branch);
        return if by_operator { Decision::Refused { why } } else { Decision::Nothing { why } };
    };
    if fleet.policy.waves.is_empty() {
        return Decision::Refused { why: format!("the `rollout` policy of {} has no waves", short(commit)) };
    }
    if let Some(s) = st {
        if s.commit == commit && matches!(s.phase, RolloutPhase::Progressing | RolloutPhase::Paused | RolloutPhase::Complete) {
            let what = if s.phase == RolloutPhase::Complete { "rolled out" } else { "being rolled out" };
            return Decision::Nothing { why: format!("{} is already {what} ({})", short(commit), s.phase.as_str()) };
        }
    }
    // Starting a rollout promotes wave 0: the windows hold back an automatic start (an operator's
    // `start` is never blocked).
    if !by_operator && !super::window::open_at(&fleet.policy.windows, inp.now) {
        return Decision::Nothing { why: format!("{} for the rollout of {}", super::window::closed_reason(&fleet.policy.windows, inp.now), short(commit)) };
    }
    let stable = st.and_then(|s| if s.phase == RolloutPhase::Complete { Some(s.commit.clone()) } else { s.stable.clone() });
    let reason = match (by_operator, st) {
        (true, _) => format!("started by the operator: {} promoted", fleet.policy.waves[0].name),
        (false, None) => format!("new tip of {}: {} promoted", inp.branch, fleet.policy.waves[0].name),
        (false, Some(s)) => format!("new tip of {} (the rollout of {} was {}): {} promoted", inp.branch, short(&s.commit), s.phase.as_str(), fleet.policy.waves[0].name),
    };
    let state = RolloutState {
        version: ROLLOUT_STATE_VERSION,
        branch: inp.branch.to_string(),
        commit: commit.to_string(),
        stable,
        waves: fleet.wave_names(),
        promoted: Some(0),
        phase: RolloutPhase::Progressing,
        rollback: false,
        reason,
        since: now.to_string(),
        promoted_at: Some(now.to_string()),
        generation: 0,
        predecessor: None,
        policy_commit: Some(fleet.policy_commit.clone()),
        batch_below: next_batch(fleet, 0, None),
        resumed: None,
    };
    Decision::Transition { summary: format!("rollout {}: start, promote wave {}", short(commit), fleet.policy.waves[0].name), state }
}

/// A host whose self-check reverted the commit before an operator resumed the rollout tries
/// it again: its old failure is waited for like a host that has not applied yet, until
/// `missing-timeout` after the resume (then it counts again).
fn retrying_after_resume(s: &RolloutState, d: &Degraded, timeout_secs: u64, now: SystemTime) -> bool {
    let Some(r) = &s.resumed else { return false };
    let at = humantime::parse_rfc3339_weak(&r.at).unwrap_or(SystemTime::UNIX_EPOCH);
    d.reason == "self_check" && now.duration_since(at).unwrap_or_default() < Duration::from_secs(timeout_secs)
}

/// Halt for a failure of the commit; the policy's `on-failure` says whether promoted hosts go
/// back to `stable` (only when there is one).
fn halt(s: &RolloutState, policy: &RolloutPolicy, why: String, now: &str) -> Decision {
    let rollback = policy.on_failure == OnFailure::Rollback && s.stable.is_some();
    let mut n = s.clone();
    n.phase = RolloutPhase::Halted;
    n.rollback = rollback;
    n.reason = match (policy.on_failure, rollback) {
        (OnFailure::Halt, _) => format!("{why}; promoted hosts keep what they have (on-failure=\"halt\")"),
        (OnFailure::Rollback, true) => format!("{why}; promoted hosts go back to the stable commit (on-failure=\"rollback\")"),
        (OnFailure::Rollback, false) => format!("{why}; no stable commit to roll back to (first rollout): hosts keep what they have"),
    };
    n.since = now.to_string();
    let verb = if rollback { "halt and roll back" } else { "halt" };
    Decision::Transition { summary: format!("rollout {}: {verb}", short(&s.commit)), state: n }
}

/// The members of wave `wave` in stable-hash order (the order batches take them).
fn by_bucket<'f>(fleet: &'f Fleet, wave: usize) -> Vec<(u32, &'f Member)> {
    let mut v: Vec<(u32, &Member)> = fleet.in_wave(wave).map(|m| (host_bucket(&m.name), m)).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    v
}

/// `batch_below` for the next batch of wave `wave` after the hosts below `current` (None: the
/// first batch): the bucket of the first host the batch leaves out; None when the batch
/// reaches every host of the wave (or the wave has no `max-parallel`).
fn next_batch(fleet: &Fleet, wave: usize, current: Option<u32>) -> Option<u32> {
    let size = fleet.policy.waves.get(wave)?.max_parallel?;
    let hosts = by_bucket(fleet, wave);
    let admitted = current.map_or(0, |b| hosts.iter().filter(|(k, _)| *k < b).count());
    let upto = admitted + size.batch(hosts.len());
    let below = hosts.get(upto).map(|(k, _)| *k)?;
    // Hosts sharing a bucket go together; a batch always takes at least one more host.
    match current {
        Some(c) if below <= c => hosts.iter().map(|(k, _)| *k).find(|k| *k > c),
        _ => Some(below),
    }
}

/// Is `m` (of the promoted wave) in the batches admitted so far?
fn admitted(s: &RolloutState, m: &Member) -> bool {
    s.batch_below.is_none_or(|b| host_bucket(&m.name) < b)
}

/// The reason of a pause for missing hosts starts with this (such a pause ends by itself once
/// the hosts are back).
const MISSING_PAUSE: &str = "missing hosts: ";

fn allowed_missing(m: MaxUnavailable, hosts: usize) -> usize {
    match m {
        MaxUnavailable::Hosts(n) => n as usize,
        MaxUnavailable::Percent(p) => hosts * p as usize / 100,
    }
}

fn list(names: &[&str]) -> String {
    const SHOWN: usize = 5;
    let mut s = names.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// The reason of the transition that starts a wave's soak says this.
const SOAKING: &str = "; soaking ";

/// Progressing or paused, same commit: halt on failures; (progressing only) promote or complete.
fn evaluate(inp: &ControllerInput, s: &RolloutState, now: &str) -> Decision {
    let Some(fleet) = inp.fleet else {
        return Decision::Nothing { why: format!("commit {} has no `rollout` policy any more; nothing to promote (stop the rollout)", short(&s.commit)) };
    };
    let last = fleet.policy.waves.len() - 1;
    let k = s.promoted.unwrap_or(0).min(last);
    let mut pending: Vec<&str> = vec![];
    let mut fully_applied: BTreeSet<usize> = BTreeSet::new();
    let mut missing_now: Vec<&str> = vec![];
    let mut unadmitted = 0usize;
    for j in 0..=k {
        let wave = &fleet.policy.waves[j];
        let hosts: Vec<&Member> = fleet.in_wave(j).filter(|m| j < k || admitted(s, m)).collect();
        if j == k {
            unadmitted = fleet.in_wave(j).count() - hosts.len();
        }
        let mut degraded = vec![];
        let mut missing = vec![];
        let mut waiting = vec![];
        for h in &hosts {
            match inp.reports.get(&h.name) {
                None => {
                    if h.declared {
                        missing.push(h.name.as_str())
                    }
                }
                Some(r) => {
                    if let Some(d) = r.degraded_for(&s.commit).filter(|d| !retrying_after_resume(s, d, fleet.policy.missing_timeout_secs, inp.now)) {
                        degraded.push(format!("{} ({})", h.name, d.reason));
                    } else if r.applied.as_deref() != Some(s.commit.as_str()) {
                        waiting.push(h.name.as_str());
                    }
                }
            }
        }
        // A host that applied the commit and failed halts the rollout: the commit's fault.
        if !degraded.is_empty() {
            let names: Vec<&str> = degraded.iter().map(String::as_str).collect();
            return halt(s, &fleet.policy, format!("wave {}: degraded for {}: {}", wave.name, short(&s.commit), list(&names)), now);
        }
        // A missing host is not the commit's fault. It counts against max-unavailable only in
        // the wave being promoted; the hosts of finished waves are never waited for.
        if j == k && missing.len() > allowed_missing(wave.max_unavailable, hosts.len()) {
            missing_now = missing;
        }
        if waiting.is_empty() && (j < k || missing_now.is_empty()) {
            fully_applied.insert(j);
        }
        pending.extend(waiting);
    }
    for g in inp.gates.iter().filter(|g| g.wave <= k && g.wave < last && fully_applied.contains(&g.wave)) {
        if let Some(why) = &g.failure {
            return halt(s, &fleet.policy, format!("wave {}: {why}", fleet.policy.waves[g.wave].name), now);
        }
    }
    let wave = &fleet.policy.waves[k];
    if !missing_now.is_empty() {
        let allowed = allowed_missing(wave.max_unavailable, fleet.in_wave(k).filter(|m| admitted(s, m)).count());
        let timeout = Duration::from_secs(fleet.policy.missing_timeout_secs);
        let start = humantime::parse_rfc3339_weak(&s.since).unwrap_or(SystemTime::UNIX_EPOCH);
        let waited = inp.now.duration_since(start).unwrap_or(Duration::ZERO);
        let what = format!("wave {}: {} host(s) not reporting, {allowed} allowed (max-unavailable): {}", wave.name, missing_now.len(), list(&missing_now));
        if s.phase == RolloutPhase::Progressing && waited >= timeout {
            let mut n = s.clone();
            n.phase = RolloutPhase::Paused;
            n.reason = format!(
                "{MISSING_PAUSE}{what}, for more than {} (missing-timeout); the rollout goes on by itself when they report again, or `fwc rollout resume` after removing them from the host blocks",
                fwc_compiler::rollout::format_secs(timeout.as_secs())
            );
            n.since = now.to_string();
            return Decision::Transition { summary: format!("rollout {}: pause, hosts missing", short(&s.commit)), state: n };
        }
        if s.phase == RolloutPhase::Progressing {
            return Decision::Nothing { why: format!("{what}; waiting for them ({}s of {}s missing-timeout, then the rollout pauses)", waited.as_secs(), timeout.as_secs()) };
        }
    } else if s.phase == RolloutPhase::Paused && s.reason.starts_with(MISSING_PAUSE) {
        let mut n = s.clone();
        n.phase = RolloutPhase::Progressing;
        n.reason = format!("the missing hosts of wave {} report again: the rollout goes on", wave.name);
        n.since = now.to_string();
        return Decision::Transition { summary: format!("rollout {}: resume, hosts back", short(&s.commit)), state: n };
    }
    if s.phase == RolloutPhase::Paused {
        return Decision::Nothing { why: format!("the rollout of {} is paused ({}); `fwc rollout resume` continues it", short(&s.commit), s.reason) };
    }
    if !pending.is_empty() {
        return Decision::Nothing { why: format!("waiting for {} host(s) to apply {}: {}", pending.len(), short(&s.commit), list(&pending)) };
    }
    if unadmitted > 0 {
        let mut n = s.clone();
        n.batch_below = next_batch(fleet, k, s.batch_below);
        let now_in = fleet.in_wave(k).filter(|m| admitted(&n, m)).count();
        n.reason = format!("wave {}: the batch applied and healthy; {now_in} of {} host(s) may apply now (max-parallel)", wave.name, fleet.in_wave(k).count());
        n.since = now.to_string();
        return Decision::Transition { summary: format!("rollout {}: wave {} next batch", short(&s.commit), wave.name), state: n };
    }
    if k == last {
        let mut n = s.clone();
        n.phase = RolloutPhase::Complete;
        n.stable = Some(s.commit.clone());
        n.rollback = false;
        n.reason = format!("every wave applied; {} is stable", short(&s.commit));
        n.since = now.to_string();
        return Decision::Transition { summary: format!("rollout {}: complete", short(&s.commit)), state: n };
    }
    if wave.soak_secs > 0 {
        // The soak counts from the moment the wave is seen fully applied and healthy: that moment
        // is a transition of its own (`since`), the first one after the promotion (a later
        // resume restarts the clock).
        // (`since` has whole seconds: a soak that started in the second of the promotion is
        // known by its reason.)
        if s.since == s.promoted_at.clone().unwrap_or_default() && !s.reason.contains(SOAKING) {
            let mut n = s.clone();
            n.reason = format!("wave {} applied and healthy on every host{SOAKING}{}s before {} is promoted", wave.name, wave.soak_secs, fleet.policy.waves[k + 1].name);
            n.since = now.to_string();
            return Decision::Transition { summary: format!("rollout {}: wave {} applied, soak", short(&s.commit), wave.name), state: n };
        }
        let start = humantime::parse_rfc3339_weak(&s.since).unwrap_or(SystemTime::UNIX_EPOCH);
        let soaked = inp.now.duration_since(start).unwrap_or(Duration::ZERO);
        if soaked < Duration::from_secs(wave.soak_secs) {
            return Decision::Nothing { why: format!("wave {} is applied and soaking: {}s of {}s", wave.name, soaked.as_secs(), wave.soak_secs) };
        }
    }
    let next = &fleet.policy.waves[k + 1];
    if !super::window::open_at(&fleet.policy.windows, inp.now) {
        return Decision::Nothing { why: format!("{} to promote {}", super::window::closed_reason(&fleet.policy.windows, inp.now), next.name) };
    }
    let mut n = s.clone();
    n.promoted = Some(k + 1);
    n.batch_below = next_batch(fleet, k + 1, None);
    n.promoted_at = Some(now.to_string());
    n.reason = format!("wave {} applied and healthy{}: {} promoted", wave.name, if wave.soak_secs > 0 { format!(" for {}s", wave.soak_secs) } else { String::new() }, next.name);
    n.since = now.to_string();
    Decision::Transition { summary: format!("rollout {}: promote wave {}", short(&s.commit), next.name), state: n }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_artifacts::rollout::{Wave, WaveSelect, Window};

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";
    const T0: u64 = 1_800_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    fn wave(name: &str, soak: u64, max_unavailable: u32) -> Wave {
        Wave { name: name.into(), select: WaveSelect::Rest, soak_secs: soak, max_unavailable: MaxUnavailable::Hosts(max_unavailable), gates: vec![], max_parallel: None }
    }

    /// canary (c1), early (e1, e2; one may be missing), all (a1, a2, a3).
    fn fleet() -> Fleet {
        fleet_with(vec![])
    }

    fn fleet_with(windows: Vec<Window>) -> Fleet {
        let mut members = vec![];
        for (w, names) in [(0, &["c1"][..]), (1, &["e1", "e2"]), (2, &["a1", "a2", "a3"])] {
            members.extend(names.iter().map(|n| Member { name: n.to_string(), wave: w, declared: true }));
        }
        Fleet {
            policy: RolloutPolicy {
                waves: vec![wave("canary", 60, 0), wave("early", 0, 1), wave("all", 0, 0)],
                probes: vec![],
                windows,
                on_failure: OnFailure::Rollback,
                missing_timeout_secs: 600,
                self_check_attempts: 3,
                self_check_spacing_ms: 1000,
            },
            members,
            policy_commit: C1.into(),
        }
    }

    fn state(commit: &str, promoted: usize, phase: RolloutPhase, promoted_at: u64) -> RolloutState {
        RolloutState {
            version: 1,
            branch: "main".into(),
            commit: commit.into(),
            stable: Some(C1.into()),
            waves: vec!["canary".into(), "early".into(), "all".into()],
            promoted: Some(promoted),
            phase,
            rollback: false,
            reason: "r".into(),
            since: rfc3339(at(promoted_at)),
            promoted_at: Some(rfc3339(at(promoted_at))),
            generation: 7,
            predecessor: None,
            policy_commit: None,
            batch_below: None,
            resumed: None,
        }
    }

    /// `s` with its wave seen fully applied at `t` (after the promotion: the soak started).
    fn soaking(mut s: RolloutState, t: u64) -> RolloutState {
        s.since = rfc3339(at(t));
        assert_ne!(Some(&s.since), s.promoted_at.as_ref(), "the soak starts after the promotion");
        s
    }

    fn missing_paused() -> RolloutState {
        let mut s = state(C2, 1, Paused, 60);
        s.reason = format!("{MISSING_PAUSE}wave early: 2 host(s) not reporting");
        s.since = rfc3339(at(660));
        s
    }

    fn first_rollout() -> RolloutState {
        let mut s = state(C2, 1, Progressing, 0);
        s.stable = None;
        s
    }

    fn soak_started_at_promotion() -> RolloutState {
        let mut s = state(C2, 0, Progressing, 0);
        s.reason = format!("wave canary applied and healthy on every host{SOAKING}60s before early is promoted");
        s
    }

    fn on(commit: &str) -> HostReport {
        HostReport { applied: Some(commit.into()), degraded: vec![], last_seen: Some(0.0), current: true }
    }

    fn degraded(applied: &str, for_commit: &str, reason: &str) -> HostReport {
        HostReport { applied: Some(applied.into()), degraded: vec![Degraded { commit: for_commit.into(), reason: reason.into() }], last_seen: Some(0.0), current: true }
    }

    /// Every host of the fleet reports `commit`, except the listed overrides (None = missing).
    fn reports(commit: &str, overrides: &[(&str, Option<HostReport>)]) -> BTreeMap<String, HostReport> {
        let mut m: BTreeMap<String, HostReport> = fleet().members.iter().map(|h| (h.name.clone(), on(commit))).collect();
        for (h, r) in overrides {
            match r {
                Some(r) => m.insert(h.to_string(), r.clone()),
                None => m.remove(*h),
            };
        }
        m
    }

    struct Case {
        name: &'static str,
        state: Option<RolloutState>,
        tip: &'static str,
        reports: BTreeMap<String, HostReport>,
        gates: Vec<GateResult>,
        command: Command,
        now: u64,
        /// Expected: Ok((phase, promoted, rollback, reason contains)) for a transition,
        /// Err(why contains) for nothing / refused.
        want: Result<(RolloutPhase, Option<usize>, bool, &'static str), &'static str>,
    }

    fn case(name: &'static str, state: Option<RolloutState>, tip: &'static str, reports: BTreeMap<String, HostReport>, command: Command, now: u64) -> Case {
        Case { name, state, tip, reports, gates: vec![], command, now, want: Err("") }
    }

    impl Case {
        fn want(mut self, phase: RolloutPhase, promoted: usize, rollback: bool, reason: &'static str) -> Case {
            self.want = Ok((phase, Some(promoted), rollback, reason));
            self
        }
        fn nothing(mut self, why: &'static str) -> Case {
            self.want = Err(why);
            self
        }
        fn gate(mut self, wave: usize, failure: Option<&str>) -> Case {
            self.gates.push(GateResult { wave, gate: "errors".into(), failure: failure.map(String::from) });
            self
        }
    }

    use RolloutPhase::*;

    fn cases() -> Vec<Case> {
        let fl = || reports(C1, &[]);
        let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
        let c2_early = || reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C2))), ("e2", Some(on(C2)))]);
        vec![
            case("no state: the tip starts a rollout", None, C2, fl(), Command::Advance, 0).want(Progressing, 0, false, "new tip of main"),
            case("complete, new tip: a new rollout", Some(state(C1, 2, Complete, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was complete"),
            case("halted, new tip (a fix): a new rollout", Some(state(C1, 0, Halted, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was halted"),
            case("stopped, new tip: a new rollout", Some(state(C1, 1, Stopped, 0)), C2, fl(), Command::Advance, 10).want(Progressing, 0, false, "was stopped"),
            case("progressing, new tip: the current rollout continues", Some(state(C2, 0, Progressing, 0)), "3333333333333333333333333333333333333333", reports(C1, &[]), Command::Advance, 10)
                .nothing("waiting for 1 host(s)"),
            case("canary not applied yet: wait for hosts", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Advance, 100).nothing("waiting for 1 host(s) to apply 222222222222: c1"),
            case("canary seen applied: the soak starts (a transition)", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 30).want(Progressing, 0, false, "soaking 60s"),
            case("the soak started in the second of the promotion: soaking, not started twice", Some(soak_started_at_promotion()), C2, c2_canary(), Command::Advance, 0).nothing("soaking: 0s of 60s"),
            case("canary soaking, not over: wait", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, c2_canary(), Command::Advance, 80).nothing("soaking: 50s of 60s"),
            case("canary applied and soaked: promote early", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, c2_canary(), Command::Advance, 90).want(Progressing, 1, false, "early promoted"),
            case("soaking, a host falls behind: wait for it", Some(soaking(state(C2, 0, Progressing, 0), 30)), C2, fl(), Command::Advance, 90).nothing("waiting for 1 host(s)"),
            case("a later wave's hosts may lag before their promotion", Some(state(C2, 1, Progressing, 60)), C2, c2_canary(), Command::Advance, 70).nothing("waiting for 2 host(s)"),
            case("degraded canary for this commit: halt with rollback", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 5)
                .want(Halted, 0, true, "c1 (apply_failed)"),
            case("degraded for an older commit: no halt", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, reports(C1, &[("c1", Some(degraded(C2, C1, "rolled_back")))]), Command::Advance, 61)
                .want(Progressing, 1, false, "early promoted"),
            case("degraded while paused: still halts", Some(state(C2, 0, Paused, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "self_check")))]), Command::Advance, 5)
                .want(Halted, 0, true, "self_check"),
            case("a failing gate of an applied wave: halt", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 60)
                .gate(0, Some("gate \"errors\" fails: 3"))
                .want(Halted, 0, true, "errors"),
            case("a holding gate: promote", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, c2_canary(), Command::Advance, 61).gate(0, None).want(Progressing, 1, false, "early promoted"),
            case("the last wave's gates are never checked: complete", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70)
                .gate(2, Some("fails"))
                .want(Complete, 2, false, "is stable"),
            case("an earlier wave's gate regressing during a later wave: halt", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70)
                .gate(0, Some("gate \"errors\" fails: 9"))
                .want(Halted, 2, true, "wave canary: gate"),
            case("a failing gate of a wave still applying: wait", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Advance, 60).gate(0, Some("fails")).nothing("waiting"),
            case("one early host missing, one allowed: promote", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C2))), ("e2", None)]), Command::Advance, 70)
                .want(Progressing, 2, false, "all promoted"),
            case("the canary between scrapes (grace period): wait, no halt", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(HostReport::default()))]), Command::Advance, 5)
                .nothing("waiting for 1 host(s)"),
            case("the canary missing, none allowed: wait for it, never halt", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", None)]), Command::Advance, 5)
                .nothing("not reporting, 0 allowed (max-unavailable): c1; waiting for them (5s of 600s"),
            case("two early hosts missing, one allowed: wait", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 70)
                .nothing("2 host(s) not reporting, 1 allowed"),
            case("missing past missing-timeout: pause, naming them", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 660)
                .want(Paused, 1, false, "missing hosts: wave early: 2 host(s) not reporting, 1 allowed (max-unavailable): e1, e2, for more than 10m"),
            case("paused for missing hosts, still missing: nothing", Some(missing_paused()), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", None), ("e2", None)]), Command::Advance, 900)
                .nothing("paused"),
            case("paused for missing hosts, back: the rollout goes on", Some(missing_paused()), C2, reports(C1, &[("c1", Some(on(C2))), ("e1", Some(on(C1)))]), Command::Advance, 900)
                .want(Progressing, 1, false, "report again"),
            case("paused for missing hosts, a degraded host: halt", Some(missing_paused()), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "self_check"))), ("e1", None), ("e2", None)]), Command::Advance, 900)
                .want(Halted, 1, true, "self_check"),
            case("a host of a finished wave missing (a reboot): the next wave goes on", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[("c1", None)]), Command::Advance, 70)
                .want(Complete, 2, false, "is stable"),
            case("a host of a finished wave missing for hours: never a halt", Some(state(C2, 1, Progressing, 60)), C2, reports(C1, &[("c1", None), ("e1", None), ("e2", Some(on(C2)))]), Command::Advance, 99_999)
                .want(Progressing, 2, false, "all promoted"),
            case("halt --rollback on a first rollout: refused, no stable commit", Some(first_rollout()), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5)
                .nothing("no stable commit to return to"),
            case("halt on a first rollout: fine", Some(first_rollout()), C2, c2_early(), Command::Halt { rollback: false, reason: String::new() }, 5).want(Halted, 1, false, "halt by the operator"),
            case("missing hosts of unpromoted waves do not count", Some(soaking(state(C2, 0, Progressing, 0), 1)), C2, reports(C1, &[("c1", Some(on(C2))), ("a1", None), ("a2", None)]), Command::Advance, 61)
                .want(Progressing, 1, false, "early promoted"),
            case("the last wave applied: complete, stable", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 70).want(Complete, 2, false, "is stable"),
            case("complete, same tip: nothing", Some(state(C2, 2, Complete, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("rolled out to every wave"),
            case("halted, same tip: nothing", Some(state(C2, 0, Halted, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("is halted"),
            case("stopped, same tip: nothing", Some(state(C2, 0, Stopped, 60)), C2, reports(C2, &[]), Command::Advance, 70).nothing("was stopped"),
            case("paused: no promotion", Some(state(C2, 0, Paused, 0)), C2, c2_canary(), Command::Advance, 100).nothing("paused"),
            case("pause", Some(state(C2, 0, Progressing, 0)), C2, fl(), Command::Pause { reason: "lunch".into() }, 5).want(Paused, 0, false, "pause by the operator: lunch"),
            case("pause twice", Some(state(C2, 0, Paused, 0)), C2, fl(), Command::Pause { reason: String::new() }, 5).nothing("already paused"),
            case("resume a paused rollout", Some(state(C2, 0, Paused, 0)), C2, fl(), Command::Resume { reason: String::new() }, 5).want(Progressing, 0, false, "resume by the operator"),
            case("resume a halted rollout", Some(state(C2, 0, Halted, 0)), C2, fl(), Command::Resume { reason: "false alarm".into() }, 5).want(Progressing, 0, false, "false alarm"),
            case("resume a complete rollout: refused", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Resume { reason: String::new() }, 5).nothing("cannot resume"),
            case("halt without rollback", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Halt { rollback: false, reason: "look".into() }, 5).want(Halted, 1, false, "halt by the operator: look"),
            case("halt --rollback", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5).want(Halted, 1, true, "halt --rollback by the operator"),
            case("halt --rollback after a plain halt", Some(state(C2, 1, Halted, 0)), C2, c2_early(), Command::Halt { rollback: true, reason: String::new() }, 5).want(Halted, 1, true, "halt --rollback"),
            case("halt a complete rollout: refused", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Halt { rollback: true, reason: String::new() }, 5).nothing("cannot halt"),
            case("stop during a wave", Some(state(C2, 1, Progressing, 0)), C2, c2_early(), Command::Stop { reason: "enough".into() }, 5).want(Stopped, 1, false, "stop by the operator: enough"),
            case("stop twice", Some(state(C2, 1, Stopped, 0)), C2, c2_early(), Command::Stop { reason: String::new() }, 5).nothing("already stopped"),
            case("start an older commit while complete", Some(state(C2, 2, Complete, 0)), C2, fl(), Command::Start { commit: C1.into() }, 5).want(Progressing, 0, false, "started by the operator"),
            case("start the commit being rolled out: nothing", Some(state(C2, 1, Progressing, 0)), C2, fl(), Command::Start { commit: C2.into() }, 5).nothing("already being rolled out"),
            case("start the halted commit again: restart", Some(state(C2, 1, Halted, 0)), C2, fl(), Command::Start { commit: C2.into() }, 5).want(Progressing, 0, false, "started by the operator"),
            case("pause without a rollout: refused", None, C2, fl(), Command::Pause { reason: String::new() }, 5).nothing("no rollout yet"),
        ]
    }

    #[test]
    fn every_transition() {
        run(&fleet(), cases());
    }

    fn win(allow: bool, days: &[u8], start: u16, end: u16, offset_min: i16) -> Window {
        Window { allow, window: fwc_artifacts::window::DayWindow { days: days.to_vec(), start_min: start, end_min: end }, offset_min, tz: None }
    }

    /// T0 is Friday 2027-01-15 08:00 UTC.
    #[test]
    fn promotion_windows() {
        // window allow="Mon-Fri 09:00-17:00" tz="UTC"; window deny="Fri 15:00-24:00"
        let office = fleet_with(vec![win(true, &[0, 1, 2, 3, 4], 9 * 60, 17 * 60, 0), win(false, &[4], 15 * 60, 1440, 0)]);
        let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
        let soaked = || Some(soaking(state(C2, 0, Progressing, 0), 30));
        const H: u64 = 3600;
        run(&office, vec![
            case("inside the allow window: promote", soaked(), C2, c2_canary(), Command::Advance, H).want(Progressing, 1, false, "early promoted"),
            case("outside the allow window: wait, and say when it opens", soaked(), C2, c2_canary(), Command::Advance, 100)
                .nothing("waiting: outside the promotion windows (next opens 2027-01-15T09:00:00Z) to promote early"),
            case("inside the deny window: wait until Monday", soaked(), C2, c2_canary(), Command::Advance, 7 * H)
                .nothing("outside the promotion windows (next opens 2027-01-18T09:00:00Z)"),
            case("a new tip outside the windows: the start (wave 0) waits", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Advance, 100)
                .nothing("outside the promotion windows"),
            case("a new tip inside the windows: start", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Advance, H).want(Progressing, 0, false, "was complete"),
            case("the operator's start is never blocked", Some(state(C1, 2, Complete, 0)), C2, reports(C1, &[]), Command::Start { commit: C2.into() }, 100)
                .want(Progressing, 0, false, "started by the operator"),
            case("a degraded canary halts outside the windows", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 100)
                .want(Halted, 0, true, "c1 (apply_failed)"),
            case("a degraded canary halts inside the deny window", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 8 * H)
                .want(Halted, 0, true, "c1 (apply_failed)"),
            case("pause outside the windows", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Pause { reason: String::new() }, 100).want(Paused, 0, false, "pause"),
            case("halt --rollback outside the windows", Some(state(C2, 1, Progressing, 0)), C2, c2_canary(), Command::Halt { rollback: true, reason: String::new() }, 100)
                .want(Halted, 1, true, "halt --rollback"),
            case("stop outside the windows", Some(state(C2, 1, Progressing, 0)), C2, c2_canary(), Command::Stop { reason: String::new() }, 100).want(Stopped, 1, false, "stop"),
            case("the soak starts outside the windows (not a promotion)", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 30).want(Progressing, 0, false, "soaking 60s"),
            case("the last wave applied outside the windows: complete (not a promotion)", Some(state(C2, 2, Progressing, 60)), C2, reports(C2, &[]), Command::Advance, 100)
                .want(Complete, 2, false, "is stable"),
        ]);
        // window allow="Thu 23:00-24:00" tz="-09:00": Friday 08:00-09:00 UTC (another day in UTC).
        let west = fleet_with(vec![win(true, &[3], 23 * 60, 1440, -9 * 60)]);
        run(&west, vec![
            case("a window across a fixed offset: open at Thu 23:30 local = Fri 08:30 UTC", soaked(), C2, c2_canary(), Command::Advance, H / 2).want(Progressing, 1, false, "early promoted"),
            case("a window across a fixed offset: closed at Fri 00:00 local = 09:00 UTC", soaked(), C2, c2_canary(), Command::Advance, H)
                .nothing("next opens 2027-01-22T08:00:00Z"),
        ]);
    }

    fn run(f: &Fleet, cases: Vec<Case>) {
        let mut failures = vec![];
        for c in cases {
            let inp = ControllerInput {
                state: c.state.as_ref(),
                state_commit: Some("5555555555555555555555555555555555555555"),
                branch: "main",
                tip: c.tip,
                fleet: Some(f),
                reports: &c.reports,
                gates: &c.gates,
                command: c.command.clone(),
                now: at(c.now),
            };
            let d = decide(&inp);
            let ok = match (&c.want, &d) {
                (Ok((phase, promoted, rollback, reason)), Decision::Transition { state, .. }) => {
                    state.phase == *phase && state.promoted == *promoted && state.rollback == *rollback && state.reason.contains(reason) && state.since == rfc3339(at(c.now))
                }
                (Err(why), Decision::Nothing { why: w } | Decision::Refused { why: w }) => w.contains(why),
                _ => false,
            };
            if !ok {
                failures.push(format!("{}: want {:?}, got {d:#?}", c.name, c.want));
            }
            // Idempotence: deciding again on the new state with the same input changes nothing
            // (operator commands included: pausing a paused rollout is "nothing"), so a
            // controller that crashed after its push and runs again does not transition twice.
            if let Decision::Transition { state, .. } = &d {
                let again = ControllerInput { state: Some(state), ..inp.clone() };
                let d2 = decide(&again);
                if matches!(d2, Decision::Transition { .. }) {
                    failures.push(format!("{}: not idempotent, second decision {d2:#?}", c.name));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    #[test]
    fn on_failure_halt_lets_promoted_hosts_keep_the_commit() {
        let mut f = fleet();
        f.policy.on_failure = OnFailure::Halt;
        let c2_canary = || reports(C1, &[("c1", Some(on(C2)))]);
        run(&f, vec![
            case("degraded canary, on-failure=halt: halt, no rollback", Some(state(C2, 0, Progressing, 0)), C2, reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]), Command::Advance, 5)
                .want(Halted, 0, false, "keep what they have (on-failure=\"halt\")"),
            case("failing gate, on-failure=halt: halt, no rollback", Some(state(C2, 0, Progressing, 0)), C2, c2_canary(), Command::Advance, 60)
                .gate(0, Some("gate \"errors\": the query failed"))
                .want(Halted, 0, false, "the query failed"),
            case("the operator's halt --rollback stays possible", Some(state(C2, 0, Halted, 0)), C2, c2_canary(), Command::Halt { rollback: true, reason: String::new() }, 60)
                .want(Halted, 0, true, "halt --rollback"),
        ]);
        // on-failure="rollback" on a first rollout: nothing to return to.
        let mut first = state(C2, 0, Progressing, 0);
        first.stable = None;
        let r = reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]);
        let d = decide(&ControllerInput { state: Some(&first), state_commit: None, branch: "main", tip: C2, fleet: Some(&fleet()), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
        let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
        assert!(n.phase == Halted && !n.rollback && n.reason.contains("no stable commit"), "{n:?}");
    }

    /// wave "all" of 10 hosts with max-parallel=3: batches of 3, 3, 3, 1 in stable-hash order,
    /// each admitted when the previous one applied and is healthy.
    #[test]
    fn max_parallel_batches_a_wave() {
        use fwc_artifacts::rollout::MaxParallel;
        let mut f = fleet();
        f.members.retain(|m| m.wave < 2);
        f.members.extend((0..10).map(|i| Member { name: format!("a{i}"), wave: 2, declared: true }));
        f.policy.waves[2].max_parallel = Some(MaxParallel::Hosts(3));
        let order: Vec<String> = by_bucket(&f, 2).iter().map(|(_, m)| m.name.clone()).collect();
        let mut st = state(C2, 1, Progressing, 0);
        let mut seen = vec![];
        let mut reports: BTreeMap<String, HostReport> = f.members.iter().map(|m| (m.name.clone(), on(if m.wave < 2 { C2 } else { C1 }))).collect();
        for round in 0..8 {
            let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &reports, gates: &[], command: Command::Advance, now: at(100 + round) });
            match d {
                Decision::Transition { state: n, .. } => st = n,
                Decision::Nothing { why } => panic!("round {round}: {why}"),
                Decision::Refused { why } => panic!("{why}"),
            }
            if st.phase == Complete {
                break;
            }
            let now_in: Vec<String> = f.in_wave(2).filter(|m| admitted(&st, m)).map(|m| m.name.clone()).collect();
            seen.push(now_in.len());
            // The admitted hosts are a prefix of the stable-hash order.
            let mut sorted = now_in.clone();
            sorted.sort_by_key(|n| order.iter().position(|o| o == n));
            assert_eq!(sorted, order[..now_in.len()], "round {round}");
            // Not yet applied: nothing happens; a degraded one halts.
            let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &reports, gates: &[], command: Command::Advance, now: at(200) });
            assert!(matches!(&d, Decision::Nothing { why } if why.contains("waiting for")), "{d:?}");
            for n in &now_in {
                reports.insert(n.clone(), on(C2));
            }
        }
        assert_eq!(seen, [3, 6, 9, 10], "batches");
        assert_eq!(st.phase, Complete);
    }

    #[test]
    fn every_state_counts_a_generation_and_names_its_predecessor() {
        let f = fleet();
        let st = state(C2, 0, Progressing, 0);
        let r = reports(C1, &[]);
        let d = decide(&ControllerInput { state: Some(&st), state_commit: Some("abc"), branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Pause { reason: String::new() }, now: at(5) });
        let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
        assert_eq!((n.generation, n.predecessor.as_deref()), (8, Some("abc")));
        let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
        let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
        assert_eq!((n.generation, n.predecessor, n.policy_commit.as_deref()), (1, None, Some(C1)));
    }

    /// `fwc rollout resume` after a self-check halt: the resume is recorded (hosts try the
    /// commit again); the canary's old `self_check` failure is waited for, not halted on, until
    /// `missing-timeout` after the resume; a failure of another kind still halts.
    #[test]
    fn after_a_resume_hosts_try_a_self_check_failure_again() {
        let f = fleet();
        let halted = state(C2, 0, Halted, 0);
        let r = reports(C1, &[("c1", Some(degraded(C1, C2, "self_check")))]);
        let input = |st, command, now| ControllerInput { state: Some(st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command, now: at(now) };
        let Decision::Transition { state: resumed, .. } = decide(&input(&halted, Command::Resume { reason: String::new() }, 100)) else { panic!("resume") };
        assert_eq!(resumed.resumed, Some(Resumed { generation: resumed.generation, at: rfc3339(at(100)) }));
        let d = decide(&input(&resumed, Command::Advance, 160));
        assert!(matches!(&d, Decision::Nothing { why } if why.contains("waiting for 1 host(s)")), "{d:?}");
        let d = decide(&input(&resumed, Command::Advance, 100 + 600));
        assert!(matches!(&d, Decision::Transition { state, .. } if state.phase == Halted), "past missing-timeout the failure counts: {d:?}");
        let r = reports(C1, &[("c1", Some(degraded(C1, C2, "apply_failed")))]);
        let d = decide(&ControllerInput { state: Some(&resumed), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(160) });
        assert!(matches!(&d, Decision::Transition { state, .. } if state.phase == Halted), "{d:?}");
    }

    #[test]
    fn the_policy_in_force_is_the_stable_commits() {
        let done = state(C1, 2, Complete, 0);
        assert_eq!(policy_candidates(Some(&done), C2, &Command::Advance), [C1, C2]);
        let mut running = state(C2, 1, Progressing, 0);
        running.policy_commit = Some(C1.into());
        assert_eq!(policy_candidates(Some(&running), C2, &Command::Advance), [C1]);
        running.policy_commit = None;
        assert_eq!(policy_candidates(Some(&running), C2, &Command::Advance), [C2]);
        assert_eq!(policy_candidates(None, C2, &Command::Advance), [C2]);
        let halted = state(C2, 0, Halted, 0);
        assert_eq!(policy_candidates(Some(&halted), "3333333333333333333333333333333333333333", &Command::Advance), [C1, "3333333333333333333333333333333333333333"]);
    }

    #[test]
    fn a_new_rollout_keeps_stable_and_a_complete_one_sets_it() {
        let f = fleet();
        let st = state(C1, 2, Complete, 0);
        let r = reports(C1, &[]);
        let d = decide(&ControllerInput { state: Some(&st), state_commit: None, branch: "main", tip: C2, fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
        let Decision::Transition { state: n, summary } = d else { panic!("{d:?}") };
        assert_eq!((n.commit.as_str(), n.stable.as_deref()), (C2, Some(C1)));
        assert_eq!(n.waves, ["canary", "early", "all"]);
        assert!(summary.contains("start"), "{summary}");
        // A halted rollout's commit never becomes stable: the fix keeps the old stable.
        let mut h = state(C2, 0, Halted, 0);
        h.stable = Some(C1.into());
        let d = decide(&ControllerInput { state: Some(&h), state_commit: None, branch: "main", tip: "3333333333333333333333333333333333333333", fleet: Some(&f), reports: &r, gates: &[], command: Command::Advance, now: at(5) });
        let Decision::Transition { state: n, .. } = d else { panic!("{d:?}") };
        assert_eq!(n.stable.as_deref(), Some(C1));
    }

    #[test]
    fn without_a_policy_nothing_starts() {
        let r = BTreeMap::new();
        let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C1, fleet: None, reports: &r, gates: &[], command: Command::Advance, now: at(0) });
        assert!(matches!(&d, Decision::Nothing { why } if why.contains("no `rollout` policy")), "{d:?}");
        let d = decide(&ControllerInput { state: None, state_commit: None, branch: "main", tip: C1, fleet: None, reports: &r, gates: &[], command: Command::Start { commit: C1.into() }, now: at(0) });
        assert!(matches!(d, Decision::Refused { .. }), "{d:?}");
    }

    #[test]
    fn subject_is_the_tip_only_when_a_rollout_would_start() {
        let p = state(C1, 0, Progressing, 0);
        assert_eq!(subject(Some(&p), C2, &Command::Advance), C1);
        assert_eq!(subject(Some(&state(C1, 0, Halted, 0)), C2, &Command::Advance), C2);
        assert_eq!(subject(Some(&state(C1, 0, Halted, 0)), C2, &Command::Stop { reason: String::new() }), C1);
        assert_eq!(subject(None, C2, &Command::Advance), C2);
        assert_eq!(subject(Some(&p), C2, &Command::Start { commit: C1.into() }), C1);
    }

    #[test]
    fn gates_wanted_skip_the_last_wave() {
        assert_eq!(gates_wanted(Some(&state(C2, 0, Progressing, 0)), &fleet()), [0]);
        assert_eq!(gates_wanted(Some(&state(C2, 2, Progressing, 0)), &fleet()), [0, 1]);
        assert!(gates_wanted(None, &fleet()).is_empty());
    }

    #[test]
    fn gates_judge_every_sample() {
        let g = Gate { name: "errors".into(), query: "rate(x[1m])".into(), op: GateOp::AtMost, threshold: 0.5, allow_empty: false };
        assert_eq!(judge_gate(&g, &[("{host=\"a\"}".into(), 0.1), ("{host=\"b\"}".into(), 0.5)]), None);
        let bad = judge_gate(&g, &[("{host=\"a\"}".into(), 0.1), ("{host=\"b\"}".into(), 0.7)]).unwrap();
        assert!(bad.contains("host=\"b\"} = 0.7") && !bad.contains("0.1"), "{bad}");
        assert!(judge_gate(&g, &[]).unwrap().contains("no samples"));
        assert!(judge_gate(&Gate { allow_empty: true, ..g.clone() }, &[]).is_none());
        let min = Gate { op: GateOp::AtLeast, threshold: 1.0, ..g };
        assert!(judge_gate(&min, &[(String::new(), 0.9)]).is_some());
        assert!(judge_gate(&min, &[(String::new(), f64::NAN)]).is_some());
    }

    #[test]
    fn max_unavailable_percent_rounds_down() {
        assert_eq!(allowed_missing(MaxUnavailable::Percent(10), 25), 2);
        assert_eq!(allowed_missing(MaxUnavailable::Percent(10), 9), 0);
        assert_eq!(allowed_missing(MaxUnavailable::Hosts(3), 1), 3);
    }
}
