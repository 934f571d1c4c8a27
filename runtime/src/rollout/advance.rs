//! The controller's I/O step around the pure [`decide`]: fetch the branch and the rollout ref,
//! compile the rollout commit's policy, read the hosts and gates from Prometheus, decide, and
//! commit + push the transition (fast-forward only; a lost race re-fetches and decides again).
//! Also the read-only views: `fwc rollout status` and `fwc fleet hosts`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use fwc_artifacts::rollout::{RolloutPhase, RolloutState};
use git2::Oid;
use serde::Serialize;

use super::controller::{decide, gates_wanted, policy_candidates, subject, Command, ControllerInput, Decision, Fleet, HostReport, Member};
use super::prometheus::Prometheus;
use super::state_ref::{HistoryEntry, Pushed, Remote, Signer, Snapshot};
use super::trust::{untrusted, StateTrust};
use crate::agent::verify::{verify_commit, SignaturePolicy};
use super::RolloutError;

/// Where the rules and the state live, and how to sign.
#[derive(Debug, Clone)]
pub struct Options {
    pub repo: String,
    pub branch: String,
    pub rollout_branch: String,
    pub signer: Option<Signer>,
    /// How many times a lost compare-and-swap is retried (re-fetch, re-decide).
    pub attempts: usize,
    /// The agents' trust policy: the state built on must verify with it.
    pub trust: SignaturePolicy,
}

/// What one step did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// "transition", "nothing" or "refused".
    pub result: &'static str,
    /// The transition's summary, or why nothing happened.
    pub message: String,
    /// The state after the step (None: still no rollout).
    pub state: Option<RolloutState>,
    /// The state commit pushed by this step.
    pub pushed: Option<String>,
    /// Pushes that lost a race before this outcome.
    pub lost_races: usize,
    /// The branch tip seen.
    pub tip: String,
    /// The controller's metrics after this step (Prometheus text, [`super::textfile`]).
    #[serde(skip)]
    pub metrics: String,
}

/// The fleet under the policy in force: the first of `candidates` (commit ids,
/// [`policy_candidates`]) that has a `rollout` policy (None: none has). Hosts that report
/// without being declared get the wave their name falls in.
pub fn load_fleet(remote: &Remote, candidates: &[String], reports: &BTreeMap<String, HostReport>) -> Result<Option<Fleet>, RolloutError> {
    for c in candidates {
        let commit = Oid::from_str(c).map_err(|_| RolloutError::new(format!("the rollout state names {c:?}, which is not a commit id"), "fix or restart the rollout (fwc rollout start)"))?;
        let tree = remote.source_tree(commit).map_err(|d| policy_error(commit, &d))?;
        let plan = fwc_compiler::features::rollout::fleet_plan(&tree).map_err(|d| policy_error(commit, &d))?;
        let Some(policy) = plan.policy else { continue };
        let mut members: Vec<Member> = plan.hosts.iter().map(|h| Member { name: h.name.clone(), wave: h.wave.unwrap_or(0), declared: true }).collect();
        let declared: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
        for name in reports.keys().filter(|h| !declared.contains(*h)) {
            members.push(Member { name: name.clone(), wave: fwc_compiler::features::rollout::wave_of(&policy, name, &BTreeMap::new()), declared: false });
        }
        return Ok(Some(Fleet { policy, members, policy_commit: c.clone() }));
    }
    Ok(None)
}

/// `fwc rollout start COMMIT` with an ancestor of `stable`: every agent would refuse it as a
/// rewind (and the rollout would halt), so it is refused up front, saying how to go back.
fn rewinds_stable(remote: &Remote, s: &RolloutState, command: &Command) -> Option<String> {
    let Command::Start { commit } = command else { return None };
    let stable = s.stable.as_deref().filter(|st| *st != commit)?;
    let (c, st) = (Oid::from_str(commit).ok()?, Oid::from_str(stable).ok()?);
    remote.repo.graph_descendant_of(st, c).ok().filter(|d| *d)?;
    Some(format!(
        "{} is an ancestor of the stable commit {}: agents refuse a commit that would roll them back, so this rollout would halt at the canary. To go back to it, push a revert commit (rolled out like any other), or `fwc rollout halt --rollback` while a rollout is in progress (back to stable)",
        &commit[..12.min(commit.len())],
        &stable[..12.min(stable.len())]
    ))
}

/// The state at the rollout ref does not verify with the agents' trust policy: why, and the
/// newest earlier state that does ([`untrusted`] decides and words it).
fn state_untrusted(remote: &Remote, snap: &Snapshot, opts: &Options) -> Option<String> {
    let id = snap.state_commit.filter(|_| opts.trust.enabled())?;
    let verified = verify_commit(&remote.repo, id, &opts.trust).map_err(|r| r.to_string());
    let mut last_trusted = None;
    if verified.is_err() {
        // The first-parent chain of states, newest first (bounded: a forger's chain can be long).
        let mut next = remote.repo.find_commit(id).ok().and_then(|c| c.parent_id(0).ok());
        for _ in 0..100 {
            let Some(p) = next else { break };
            if verify_commit(&remote.repo, p, &opts.trust).is_ok() {
                last_trusted = Some(p.to_string());
                break;
            }
            next = remote.repo.find_commit(p).ok().and_then(|c| c.parent_id(0).ok());
        }
    }
    let commit = id.to_string();
    untrusted(&StateTrust { state_commit: Some(&commit), required: true, verified, last_trusted: last_trusted.as_deref(), rollout_branch: &opts.rollout_branch })
}

fn policy_error(commit: Oid, d: &fwc_compiler::diag::Diagnostics) -> RolloutError {
    RolloutError::new(
        format!("the rules of commit {commit} do not compile, so its rollout policy cannot be read:\n{}", d.render(false)),
        "fix the rules (fwc check) and push; a commit that does not compile is never rolled out",
    )
}

/// Run `command` once against the remote: decide and push (retrying lost races).
/// `prometheus` is required for [`Command::Advance`] (host reports and gates).
pub fn step(opts: &Options, prometheus: Option<&Prometheus>, command: &Command, now: impl Fn() -> SystemTime) -> Result<Outcome, RolloutError> {
    step_with(&open(opts)?, opts, prometheus, command, now)
}

/// The remote of `opts` (a throw-away local copy; keep it across steps to fetch only what is new).
pub fn open(opts: &Options) -> Result<Remote, RolloutError> {
    Remote::open(&opts.repo, &opts.branch, &opts.rollout_branch)
}

/// [`step`] with a remote kept by the caller (`advance --watch`).
pub fn step_with(remote: &Remote, opts: &Options, prometheus: Option<&Prometheus>, command: &Command, now: impl Fn() -> SystemTime) -> Result<Outcome, RolloutError> {
    let mut lost = 0;
    loop {
        let snap = remote.fetch()?;
        let tip = snap.tip.to_string();
        // Verified first: every command builds its state on this one.
        if let Some(why) = state_untrusted(remote, &snap, opts) {
            return Ok(Outcome { result: "refused", message: why, state: snap.state, pushed: None, lost_races: lost, tip, metrics: String::new() });
        }
        let command = match command {
            Command::Start { commit } if commit.is_empty() => Command::Start { commit: tip.clone() },
            Command::Start { commit } => Command::Start { commit: remote.resolve(commit)?.to_string() },
            c => c.clone(),
        };
        let reports = match (&command, prometheus) {
            (Command::Advance, Some(p)) => p.host_reports()?,
            (Command::Advance, None) => return Err(RolloutError::new("advance needs --prometheus", "give the Prometheus server that scrapes the agents: --prometheus http://HOST:9090")),
            _ => BTreeMap::new(),
        };
        if let Some(why) = snap.state.as_ref().and_then(|s| rewinds_stable(remote, s, &command)) {
            return Ok(Outcome { result: "refused", message: why, state: snap.state, pushed: None, lost_races: lost, tip, metrics: String::new() });
        }
        // A state behind what the hosts accepted (the ref set back or deleted): every state
        // built on it would be refused by every agent, so nothing is decided.
        if let Some(p) = prometheus {
            let state_commit = snap.state_commit.map(|c| c.to_string());
            if let Some(why) = super::rewind::behind_the_fleet(snap.state.as_ref(), state_commit.as_deref(), &p.accepted_states()?, &opts.rollout_branch) {
                return Ok(Outcome { result: "refused", message: why, state: snap.state, pushed: None, lost_races: lost, tip, metrics: String::new() });
            }
        }
        let subj = subject(snap.state.as_ref(), &tip, &command);
        let fleet = load_fleet(remote, &policy_candidates(snap.state.as_ref(), &tip, &command), &reports)?;
        if let (Command::Advance, Some(p), Some(_)) = (&command, prometheus, &fleet) {
            // A monitoring outage must not read as "every host is gone" (and halt + roll back),
            // nor a fleet that reports nothing as "every wave applied".
            if !reports.values().any(|r| r.current) {
                return Err(RolloutError::new(
                    format!("Prometheus {} reports no fwc agent (no fwc_applied_commit_info or fwc_agent_degraded series with a host label); nothing was decided", p.url),
                    "check that Prometheus scrapes the agents' /metrics and that every agent runs with --host; `fwc fleet hosts` shows what Prometheus sees",
                ));
            }
        }
        let mut gates = vec![];
        if let (Command::Advance, Some(p), Some(f)) = (&command, prometheus, &fleet) {
            if snap.state.as_ref().is_some_and(|s| s.commit == subj && matches!(s.phase, RolloutPhase::Progressing | RolloutPhase::Paused)) {
                for w in gates_wanted(snap.state.as_ref(), f) {
                    for g in &f.policy.waves[w].gates {
                        // A gate that cannot be evaluated fails (fail safe, after its grace): it
                        // never stops the decision, so a degraded host still halts the rollout.
                        gates.push(p.gate(w, g));
                    }
                }
            }
        }
        let state_commit = snap.state_commit.map(|c| c.to_string());
        let input = ControllerInput { state: snap.state.as_ref(), state_commit: state_commit.as_deref(), branch: &opts.branch, tip: &tip, fleet: fleet.as_ref(), reports: &reports, gates: &gates, command: command.clone(), now: now() };
        let metrics = |result: &str, state: Option<&RolloutState>| {
            let since = state.and_then(|s| humantime::parse_rfc3339_weak(&s.since).ok()).and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_secs_f64());
            let at = now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
            super::textfile::render(&super::textfile::StepView { result, state, since, fleet: fleet.as_ref(), reports: &reports, gates: &gates, now: at })
        };
        match decide(&input) {
            Decision::Nothing { why } => {
                let metrics = metrics("nothing", snap.state.as_ref());
                return Ok(Outcome { result: "nothing", message: why, state: snap.state, pushed: None, lost_races: lost, tip, metrics });
            }
            Decision::Refused { why } => {
                let metrics = metrics("refused", snap.state.as_ref());
                return Ok(Outcome { result: "refused", message: why, state: snap.state, pushed: None, lost_races: lost, tip, metrics });
            }
            Decision::Transition { state, summary } => {
                let message = format!("{summary}\n\n{}\n\nphase: {}\ncommit: {}\nstable: {}\npromoted: {}\n", state.reason, state.phase.as_str(), state.commit, state.stable.as_deref().unwrap_or("none"), promoted_name(&state));
                let id = remote.write(snap.state_commit, &state, &message, opts.signer.as_ref())?;
                match remote.push(id)? {
                    Pushed::Ok => {
                        let metrics = metrics("transition", Some(&state));
                        return Ok(Outcome { result: "transition", message: summary, state: Some(state), pushed: Some(id.to_string()), lost_races: lost, tip, metrics });
                    }
                    Pushed::Rejected(why) => {
                        lost += 1;
                        tracing::info!("another controller moved {} first ({why}); deciding again", opts.rollout_branch);
                        if lost >= opts.attempts.max(1) {
                            return Err(RolloutError::new(
                                format!("the push to {} lost the race {lost} times in a row ({why})", opts.rollout_branch),
                                "another controller keeps moving the rollout ref; run one `advance` at a time, or retry",
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// The promoted wave's name (or "none").
pub fn promoted_name(s: &RolloutState) -> String {
    match s.promoted {
        Some(k) => format!("{} ({} of {})", s.waves.get(k).map(String::as_str).unwrap_or("?"), k + 1, s.waves.len()),
        None => "none".into(),
    }
}

/// `fwc rollout status`: the state and the latest transitions.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub repo: String,
    pub branch: String,
    pub rollout_branch: String,
    pub tip: String,
    pub state: Option<RolloutState>,
    pub state_commit: Option<String>,
    /// Newest first.
    pub history: Vec<HistoryEntry>,
}

pub fn status(opts: &Options, history: usize) -> Result<Status, RolloutError> {
    let remote = Remote::open(&opts.repo, &opts.branch, &opts.rollout_branch)?;
    let snap = remote.fetch()?;
    Ok(Status {
        repo: opts.repo.clone(),
        branch: opts.branch.clone(),
        rollout_branch: opts.rollout_branch.clone(),
        tip: snap.tip.to_string(),
        history: remote.history(snap.state_commit, history),
        state_commit: snap.state_commit.map(|c| c.to_string()),
        state: snap.state,
    })
}

/// One row of `fwc fleet hosts`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostRow {
    pub host: String,
    /// Wave index and name in the rollout commit's policy (None without a policy).
    pub wave: Option<usize>,
    pub wave_name: Option<String>,
    /// Declared in the repository (`host` block).
    pub declared: bool,
    /// Reporting to Prometheus.
    pub up: bool,
    pub applied: Option<String>,
    /// `rollout` (the commit being rolled out), `stable`, `other` or `none`.
    pub on: &'static str,
    /// "ok", "degraded", "stale" (absent from the latest scrape, seen within --missing-after) or
    /// "missing".
    pub health: &'static str,
    /// Degraded series: `reason (commit)`.
    pub degraded: Vec<String>,
    /// Unix time of the host's latest sample.
    pub last_seen: Option<f64>,
}

/// `fwc fleet hosts`: which host runs which commit, in which wave, healthy or not.
#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    pub tip: String,
    pub state: Option<RolloutState>,
    /// The commit whose policy assigned the waves.
    pub policy_commit: String,
    pub hosts: Vec<HostRow>,
}

pub fn hosts(opts: &Options, prometheus: &Prometheus) -> Result<FleetView, RolloutError> {
    let remote = Remote::open(&opts.repo, &opts.branch, &opts.rollout_branch)?;
    let snap = remote.fetch()?;
    let reports = prometheus.host_reports()?;
    let commit = match &snap.state {
        Some(s) => s.policy_commit().to_string(),
        None => snap.tip.to_string(),
    };
    let fleet = load_fleet(&remote, std::slice::from_ref(&commit), &reports)?;
    Ok(FleetView { tip: snap.tip.to_string(), policy_commit: commit, hosts: host_rows(snap.state.as_ref(), fleet.as_ref(), &reports), state: snap.state })
}

/// Join the fleet (declared hosts and waves) with what Prometheus reports.
pub fn host_rows(state: Option<&RolloutState>, fleet: Option<&Fleet>, reports: &BTreeMap<String, HostReport>) -> Vec<HostRow> {
    let mut names: BTreeMap<String, (Option<usize>, bool)> = BTreeMap::new();
    if let Some(f) = fleet {
        for m in &f.members {
            names.insert(m.name.clone(), (Some(m.wave), m.declared));
        }
    }
    for h in reports.keys() {
        names.entry(h.clone()).or_insert((None, false));
    }
    names
        .into_iter()
        .map(|(host, (wave, declared))| {
            let r = reports.get(&host);
            let applied = r.and_then(|r| r.applied.clone());
            let on = match (&applied, state) {
                (None, _) => "none",
                (Some(a), Some(s)) if *a == s.commit => "rollout",
                (Some(a), Some(s)) if s.stable.as_deref() == Some(a.as_str()) => "stable",
                _ => "other",
            };
            let degraded: Vec<String> = r.map(|r| r.degraded.iter().map(|d| format!("{} ({})", d.reason, &d.commit[..d.commit.len().min(12)])).collect()).unwrap_or_default();
            let health = match r {
                None => "missing",
                Some(r) if !r.current => "stale",
                Some(r) if !r.degraded.is_empty() => "degraded",
                Some(_) => "ok",
            };
            HostRow {
                wave_name: wave.and_then(|w| fleet.and_then(|f| f.policy.waves.get(w)).map(|w| w.name.clone())),
                wave,
                declared,
                up: r.is_some_and(|r| r.current),
                applied,
                on,
                health,
                degraded,
                last_seen: r.and_then(|r| r.last_seen),
                host,
            }
        })
        .collect()
}
