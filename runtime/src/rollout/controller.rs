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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateResult {
    pub wave: usize,
    pub gate: String,
    /// None = the gate holds; Some(why) = it fails.
    pub failure: Option<String>,
    /// The failure is no answer: the query failed, or returned nothing (without `allow-empty`).
    pub no_answer: bool,
    /// The gate's `grace=`: how long no answer is waited for before it fails.
    pub grace_secs: u64,
}

/// Judge one gate from its instant query's answer (`Err`: the query failed). No answer, or an
/// empty one without `allow_empty`, fails (fail safe), marked `no_answer` for the gate's grace.
pub fn gate_result(wave: usize, gate: &Gate, answer: Result<&[(String, f64)], &str>) -> GateResult {
    let (failure, no_answer) = match answer {
        Err(e) => (Some(format!("gate {:?}: the query failed: {e}", gate.name)), true),
        Ok(samples) => (judge_gate(gate, samples), samples.is_empty()),
    };
    GateResult { wave, gate: gate.name.clone(), no_answer: no_answer && failure.is_some(), failure, grace_secs: gate.grace_secs }
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
    // A gate that fails halts. One that gives no answer (its query errors or returns nothing)
    // is waited for within its grace, counted from the state's last transition: nothing is
    // promoted meanwhile, and degraded hosts (above) still halt; past the grace it fails.
    let mut gate_wait: Option<String> = None;
    for g in inp.gates.iter().filter(|g| g.wave <= k && g.wave < last && fully_applied.contains(&g.wave)) {
        let Some(why) = &g.failure else { continue };
        let wave_name = &fleet.policy.waves[g.wave].name;
        if !g.no_answer || g.grace_secs == 0 {
            return halt(s, &fleet.policy, format!("wave {wave_name}: {why}"), now);
        }
        let start = humantime::parse_rfc3339_weak(&s.since).unwrap_or(SystemTime::UNIX_EPOCH);
        let waited = inp.now.duration_since(start).unwrap_or(Duration::ZERO);
        let grace = fwc_compiler::features::rollout::format_secs(g.grace_secs);
        if waited >= Duration::from_secs(g.grace_secs) {
            return halt(s, &fleet.policy, format!("wave {wave_name}: {why}; no answer for longer than its grace ({grace})"), now);
        }
        gate_wait.get_or_insert(format!("wave {wave_name}: {why}; waiting within its grace ({}s of {grace}), nothing is promoted meanwhile", waited.as_secs()));
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
                fwc_compiler::features::rollout::format_secs(timeout.as_secs())
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
    if let Some(why) = gate_wait {
        return Decision::Nothing { why };
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
mod tests;
