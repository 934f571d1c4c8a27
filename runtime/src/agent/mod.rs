//! `fwc agent`: pull-mode GitOps.
//!
//! One loop, on one thread, owns every change to the host:
//!
//! ```text
//! wake (interval | webhook | start) -> fetch (deadline, backoff on failure; the branch and
//!   the fleet rollout ref in one fetch)
//!   -> which commit? the tip, or what the rollout state names (rollout::follow::decide), or hold
//!   -> new commit?  verify signature -> compile for this host -> apply transaction
//!      -> self-check (git fetch, policy probes; revert on failure) -> audit
//!   -> otherwise drift check of the applied artifacts -> heal (re-apply) | alert (report)
//!   -> counters -> metrics
//! ```
//!
//! - Fleet rollouts (docs/fleet.md "What the agent does"): with a `rollout` policy at the tip
//!   the agent applies only the commit the rollout state names for its wave, goes back to
//!   `stable` on a halt with rollback (an allowed rewind), and reports why it holds back.
//! - A commit that is refused (signature, compile error) or whose apply fails (every backend
//!   rolled back to the last good state) is remembered in `agent.json`: the agent reports
//!   itself degraded (also after a restart). A refusal is final for that commit; a failed
//!   apply may be transient and is retried with exponential backoff (10 s or the interval,
//!   doubling, at most 1 h). The next commit is tried normally.
//! - A failing heal backs off the same way; its first failure and its recovery are audited,
//!   not every attempt.
//! - No rollback by force-push: a tip that does not descend from the applied commit is
//!   refused (`rewind`) unless `--allow-rewind` is given or the one-shot
//!   [`ALLOW_REWIND_FILE`] in the state dir names it.
//! - Restart adopts: when the state dir's current generation is the tip commit with the same
//!   artifacts, and the live dataplane matches it, nothing is touched.
//! - Crash safety of the audit log (`kill -9` anywhere): before an action the agent writes an
//!   intent to `agent.json` (the seq its audit entry will get), then acts (the apply
//!   transaction records the state dir itself), then appends the audit entry, then clears the
//!   intent. After a restart an intent whose entry is in the log is simply cleared; one whose
//!   entry is missing (the crash came before or during the audit write) is redone — an apply
//!   is re-run even if the state dir already shows its commit (the re-apply is idempotent) —
//!   and audited then. So every action has exactly one entry, and the state dir is never
//!   ahead of the log without a pending intent that says so.
//! - SIGTERM / SIGINT stop the agent within a bound: a compile in progress (it runs on a worker
//!   thread, having written nothing) is abandoned at once; an apply in progress finishes (its
//!   transaction is never cut by the agent itself); if the agent is still busy
//!   [`STOP_GRACE`] after the signal, it exits anyway, exactly as after a crash: the intent in
//!   `agent.json` makes the next start redo and audit the interrupted action.

pub mod decide;
pub mod git;
pub mod refs_poll;
/// Schedules: recompiling when the applied artifacts' `valid_until` passes.
pub mod schedule;
pub mod selfcheck;
pub mod verify;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::{Artifacts, BackendKind};
use fwc_compiler::diag::{Diagnostic, Diagnostics};
use fwc_compiler::source::SourceTree;
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

use crate::engine::{self, transaction::{self as apply, ApplyOptions}};
use crate::audit::{self, Action, AuditLog, Outcome, Record};
use crate::backend::{Backend, Observation};
use crate::metrics::{self, Health, Metrics, WebhookSecret};
use crate::state::{StateDir, StateLock};
pub use crate::state::agent_journal::{FollowStatus, Handled, JOURNAL_FILE};
pub use decide::{Backoff, DriftMode, ALLOW_REWIND_FILE, RETRY_MIN};
use git::Mirror;
use verify::SignaturePolicy;

/// Everything `fwc agent` is told.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub repo_url: String,
    pub host: String,
    pub branch: String,
    pub interval: Duration,
    pub state_dir: PathBuf,
    pub metrics_addr: Option<SocketAddr>,
    pub webhook: Option<WebhookSecret>,
    pub signatures: SignaturePolicy,
    pub drift: DriftMode,
    pub netns: Option<String>,
    /// Deadline of one fetch.
    pub fetch_timeout: Duration,
    /// How long SIGTERM waits for an action in progress before the agent exits anyway
    /// (`--stop-grace`, default [`STOP_GRACE`]).
    pub stop_grace: Duration,
    /// Do one iteration and return (for scripts and tests).
    pub once: bool,
    /// Host the userspace forwarder in this process (off when one runs separately).
    pub forwarder: bool,
    /// `--allow-rewind`: apply a tip that is not a descendant of the applied commit
    /// (force-push, history rewrite) without a one-shot allow file.
    pub allow_rewind: bool,
    /// `--refs-url`: poll this static `info/refs` and fetch with git only when a followed ref
    /// moved, with a full fetch every `refs_full_every` polls.
    pub refs_url: Option<String>,
    pub refs_full_every: u32,
}

/// `agent.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// An action that started and whose audit entry (`seq`) may not be written yet.
    pub pending: Option<Pending>,
    /// The newest commit the agent finished with, and how.
    pub handled: Option<Handled>,
    /// The fleet rollout the agent follows, and why it holds back (`fwc status` shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<FollowStatus>,
    /// The last rollout state this host accepted: a later one must succeed it
    /// ([`crate::rollout::follow::succession`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_state: Option<crate::rollout::follow::Accepted>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub seq: u64,
    pub commit: Option<String>,
    pub action: Action,
}

impl Journal {
    fn load(dir: &Path) -> Result<Journal> {
        let p = dir.join(JOURNAL_FILE);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t).into_diagnostic().wrap_err_with(|| format!("corrupt {}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Journal::default()),
            Err(e) => Err(e).into_diagnostic(),
        }
    }

    fn save(&self, dir: &Path) -> Result<()> {
        crate::state::write_atomic(&dir.join(JOURNAL_FILE), fwc_compiler::artifacts::to_pretty(self).as_bytes())
    }
}

/// Default of how long SIGTERM waits for an action in progress (an apply, a fetch) before the
/// agent exits regardless (recovered like a crash at the next start); `--stop-grace` sets it.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stack of the compile worker (parsing itself runs on its own big-stack thread).
const COMPILE_STACK_BYTES: usize = 64 << 20;

/// What wakes the loop early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A webhook said something was pushed: fetch now.
    Push,
    /// SIGTERM / SIGINT.
    Stop,
}

/// Test hooks, active only with `FWC_AGENT_TEST_HOOKS=1`: a commit whose message contains
/// `[fwc-test: fail-apply]` makes the first backend fail right after its commit (so the real
/// rollback path runs), while the file named by `FWC_AGENT_TEST_FAIL_FILE` exists its commit
/// and rollback fail (a persistent failure), and `FWC_AGENT_TEST_SLOW_COMMIT_MS` sleeps after every backend commit
/// (a window for `kill -9` in the middle of an apply).
struct Hooked {
    inner: Box<dyn Backend>,
    fail_commit: Arc<AtomicBool>,
    slow: Option<Duration>,
    /// While this file exists, commit and rollback fail (a persistent failure).
    fail_file: Option<PathBuf>,
}

impl Hooked {
    fn failing(&self) -> bool {
        self.fail_file.as_deref().is_some_and(Path::exists)
    }
}

impl Backend for Hooked {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn prepare(&mut self, next: &Artifacts) -> miette::Result<()> {
        self.inner.prepare(next)
    }
    fn commit(&mut self) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.commit()?;
        if let Some(d) = self.slow {
            eprintln!("fwc-agent-test: committed {}, sleeping {d:?}", self.inner.kind().as_str());
            std::thread::sleep(d);
        }
        if self.fail_commit.swap(false, Ordering::SeqCst) {
            return Err(miette!("injected failure after commit ([fwc-test: fail-apply])"));
        }
        Ok(())
    }
    fn rollback(&mut self, previous: Option<&Artifacts>) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected rollback failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.rollback(previous)
    }
    fn rollback_from(&mut self, previous: Option<&Artifacts>, committed: &Artifacts) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected rollback failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.rollback_from(previous, committed)
    }
    fn observe(&mut self, expected: &Artifacts) -> miette::Result<Observation> {
        self.inner.observe(expected)
    }
}

const FAIL_MARKER: &str = "[fwc-test: fail-apply]";

/// The running agent.
pub struct Agent {
    pub cfg: AgentConfig,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    state: StateDir,
    audit: AuditLog,
    mirror: Mirror,
    backends: Vec<Box<dyn Backend>>,
    journal: Journal,
    hooks: bool,
    fail_commit: Arc<AtomicBool>,
    /// Drift text last reported (alert mode reports a given drift once).
    last_drift: Option<String>,
    backoff: Backoff,
    /// The tip of the last successful fetch differs from the one before it by a force-push.
    forced: Option<(String, String)>,
    /// A failed apply of this commit is retried (the failure may be transient) at `.2`.
    apply_retry: Option<(String, Backoff, Instant)>,
    /// Heals are failing: backoff and the time of the next attempt. Only the first failure and
    /// the recovery are audited.
    heal_retry: Option<(Backoff, Instant)>,
    /// Set by SIGTERM / SIGINT: a compile in progress is abandoned.
    pub stop: Arc<AtomicBool>,
    /// The commit the last reconcile aimed at (the tip, or what the rollout state names).
    target: Option<String>,
    /// Parsed rollout inputs, by the commit they were read from.
    follow_cache: FollowCache,
    /// Schedules: the applied artifacts' `valid_until` (compile again then).
    pub valid_until: Option<jiff::Timestamp>,
    /// Schedules: why the applied commit is being compiled again (the audit entry's detail).
    schedule_note: Option<String>,
}

/// What the fleet-rollout inputs cost to compute, computed once per commit.
#[derive(Default)]
struct FollowCache {
    /// tip -> does it declare a `rollout` policy (None: its policy does not parse)?
    tip_policy: Option<(git2::Oid, Option<bool>)>,
    /// rollout ref commit -> the state, or why it is not trusted.
    state: Option<(git2::Oid, std::result::Result<fwc_compiler::artifacts::rollout::RolloutState, String>)>,
    /// "rollout-commit policy-commit" -> this host's wave (index, name) in the policy in force,
    /// and whether the rollout commit has a policy of its own.
    wave: Option<(String, Wave, bool)>,
}

/// This host's wave: its index and name.
type Wave = Option<(usize, String)>;

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

/// The `fwc_agent_degraded` reason of a commit the journal remembers as not applied.
fn degraded_reason(h: &Handled) -> &str {
    if let Some(d) = h.degraded.as_deref().filter(|d| crate::metrics::DEGRADED_REASONS.contains(d)) {
        return d;
    }
    match h.outcome.as_str() {
        "refused" => "refused",
        "self_check" => "self_check",
        _ => "apply_failed",
    }
}

impl Agent {
    pub fn new(cfg: AgentConfig, metrics: Arc<Metrics>, health: Arc<Health>) -> Result<Agent> {
        // Everything the agent writes into the state dir (its git mirror included, which
        // libgit2 creates with umask modes) is private to it.
        // SAFETY: umask only sets this process's file mode creation mask.
        unsafe { libc::umask(0o077) };
        crate::state::create_private_dir(&cfg.state_dir)?;
        let state = StateDir::new(&cfg.state_dir);
        let audit = AuditLog::in_state_dir(&cfg.state_dir);
        let mut mirror = Mirror::open(&cfg.state_dir, &cfg.repo_url, &cfg.branch, cfg.fetch_timeout)?;
        if let Some(url) = &cfg.refs_url {
            mirror.refs_poll = Some(refs_poll::RefsPoll::new(url, cfg.refs_full_every).map_err(|e| miette!("{e}"))?);
        }
        let hooks = std::env::var("FWC_AGENT_TEST_HOOKS").as_deref() == Ok("1");
        let fail_commit = Arc::new(AtomicBool::new(false));
        let slow = std::env::var("FWC_AGENT_TEST_SLOW_COMMIT_MS").ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
        let mut backends = apply::default_backends(cfg.netns.as_deref(), &cfg.state_dir);
        if hooks {
            backends = backends
                .into_iter()
                .enumerate()
                .map(|(i, b)| {
                    Box::new(Hooked {
                        inner: b,
                        fail_commit: if i == 0 { fail_commit.clone() } else { Arc::new(AtomicBool::new(false)) },
                        slow: if i == 0 { slow } else { None },
                        fail_file: if i == 0 { std::env::var_os("FWC_AGENT_TEST_FAIL_FILE").map(PathBuf::from) } else { None },
                    }) as Box<dyn Backend>
                })
                .collect();
        }
        let journal = Journal::load(&cfg.state_dir)?;
        // Degraded survives a restart: the journal remembers the refused or failed tip until a
        // later commit applies.
        if let Some(h) = journal.handled.as_ref().filter(|h| h.outcome != "applied") {
            metrics.set_degraded(Some((&h.commit, degraded_reason(h))), None);
            health.degraded.store(true, Ordering::Relaxed);
            health.set_status(format!("{} {} ({}) before the restart", h.outcome, short(&h.commit), h.reason.as_deref().unwrap_or("-")));
        }
        let backoff = Backoff::new(cfg.interval);
        Ok(Agent {
            cfg,
            metrics,
            health,
            state,
            audit,
            mirror,
            backends,
            journal,
            hooks,
            fail_commit,
            last_drift: None,
            backoff,
            forced: None,
            apply_retry: None,
            heal_retry: None,
            stop: Arc::new(AtomicBool::new(false)),
            target: None,
            follow_cache: FollowCache::default(),
            valid_until: None,
            schedule_note: None,
        })
    }

    fn append(&mut self, rec: Record) -> Result<audit::AuditEntry> {
        let (e, torn) = self.audit.append(rec).into_diagnostic().wrap_err("cannot write the audit log")?;
        if let Some(t) = torn {
            tracing::error!(
                line = t.line,
                bytes = t.bytes,
                "the audit log ended in a torn write (crash); the bytes were preserved in {} and the entry is re-recorded",
                self.audit.torn_path.display()
            );
        }
        // The event itself is logged once where it happens (applied, refused, drift, ...).
        tracing::debug!(seq = e.seq, action = e.action.as_str(), result = e.result.as_str(), commit = ?e.commit, "audit");
        Ok(e)
    }

    fn next_seq(&self) -> Result<u64> {
        Ok(self.audit.last().into_diagnostic()?.map(|e| e.seq).unwrap_or(0) + 1)
    }

    /// Resolve an intent left by a crash. Returns true when the pending action must be redone
    /// with force (its audit entry is missing).
    fn recover(&mut self) -> Result<bool> {
        let Some(p) = self.journal.pending.clone() else { return Ok(false) };
        let last = self.audit.last().into_diagnostic()?.map(|e| e.seq).unwrap_or(0);
        // Any torn tail is cut (and preserved) by the next append; `last` already ignores it.
        if last >= p.seq {
            tracing::info!(seq = p.seq, "intent from before a crash is already in the audit log");
            let e = self.audit.entries().into_diagnostic()?.into_iter().find(|e| e.seq == p.seq);
            if let (Some(e), Some(c)) = (e, p.commit.clone()) {
                let outcome = match (e.action, e.result) {
                    (Action::Refuse, _) => "refused",
                    (_, Outcome::Ok) => "applied",
                    _ => "failed",
                };
                if matches!(e.action, Action::Apply | Action::Refuse) {
                    let degraded = match (outcome, e.result) {
                        ("applied", _) => None,
                        ("refused", _) => Some("refused"),
                        (_, Outcome::RolledBack) => Some("rolled_back"),
                        _ => Some("apply_failed"),
                    };
                    self.journal.handled = Some(Handled { commit: c, outcome: outcome.into(), reason: e.detail.clone(), degraded: degraded.map(str::to_string), state_generation: None });
                }
            }
            self.journal.pending = None;
            self.journal.save(&self.cfg.state_dir)?;
            Ok(false)
        } else {
            tracing::warn!(seq = p.seq, "an {} of {} was interrupted; redoing it (the agent died during it)", p.action.as_str(), p.commit.as_deref().unwrap_or("-"));
            self.journal.pending = None;
            // Keep the pending marker on disk until the redo writes its entry.
            Ok(matches!(p.action, Action::Apply | Action::Heal))
        }
    }

    /// Fetch, with backoff bookkeeping and metrics. Returns the delay before the next fetch
    /// and whether the tip moved.
    pub fn fetch(&mut self) -> (Duration, bool) {
        match self.mirror.fetch(self.cfg.fetch_timeout) {
            Ok(f) => {
                self.metrics.fetched(true);
                self.backoff.reset();
                if f.forced {
                    let old = f.old.map(|o| o.to_string()).unwrap_or_default();
                    tracing::warn!(old = %old, new = %f.new, "the branch was force-pushed");
                    self.forced = Some((old, f.new.to_string()));
                }
                (self.cfg.interval, f.changed())
            }
            Err(e) => {
                self.metrics.fetched(false);
                let d = self.backoff.fail();
                tracing::warn!("{e}; retrying in {d:?}");
                self.health.set_status(format!("fetch failing ({} times): {e}", self.backoff.failures));
                (d, false)
            }
        }
    }

    /// One reconcile pass (fetch excluded). `force` re-applies the tip even when the state dir
    /// says it is applied (recovery of an interrupted apply).
    pub fn reconcile(&mut self, force: bool) -> Result<()> {
        let lock = self.state.lock(true)?;
        // Fail closed: a manual `fwc apply --confirm` past its deadline whose reverter is
        // gone is reverted now, before anything else.
        match engine::confirm::enforce_deadline(&lock, self.cfg.netns.as_deref())? {
            Some(Ok(rep)) => tracing::warn!(generation = %rep.generation, "an unconfirmed apply was past its deadline: reverted"),
            Some(Err(e)) => tracing::error!("an unconfirmed apply was past its deadline: REVERT FAILED: {e}"),
            None => {}
        }
        let Some(tip) = self.mirror.tip() else {
            self.health.set_status("waiting for the first successful fetch");
            return Ok(());
        };
        let current = lock.dir.current()?;
        // The fleet rollout decides which commit this host goes to (or that it holds).
        let applied = current.as_ref().and_then(|g| g.meta.commit.clone());
        let (target, by_state) = match self.follow(tip, applied.as_deref()) {
            Some(t) => t,
            None => {
                self.target = None;
                self.check_drift(&lock)?;
                return Ok(());
            }
        };
        self.target = Some(target.to_string());
        let tip = target;
        let tip_s = tip.to_string();
        let handled_same = self.journal.handled.as_ref().is_some_and(|h| h.commit == tip_s);
        let mut just_applied = false;
        let current_is_tip = current.as_ref().and_then(|g| g.meta.commit.as_deref()) == Some(tip_s.as_str());
        // Schedules: past `valid_until` the applied commit is compiled again.
        let schedule_due = current.as_ref().is_some_and(|g| schedule::recompile_due(g.artifacts.manifest.valid_until.as_deref(), self.now()));
        if schedule_due {
            tracing::info!(commit = %short(&tip_s), "the applied rules' schedules changed (daylight saving or an until= passed): compiling again");
            let until = current.as_ref().and_then(|g| g.artifacts.manifest.valid_until.clone()).unwrap_or_default();
            self.schedule_note = Some(format!("schedules: the applied rules were valid until {until} (a time zone's clock change or an until=); compiled again for {}", self.now()));
        }
        if force || !handled_same || !current_is_tip || schedule_due {
            just_applied = self.consider(&lock, tip, force, by_state)?;
        }
        self.schedule_note = None;
        if !just_applied {
            self.check_drift(&lock)?;
        }
        self.valid_until = schedule::until(lock.dir.current()?.as_ref().and_then(|g| g.artifacts.manifest.valid_until.as_deref()));
        Ok(())
    }

    /// The agent's clock (schedules; fixed by `FWC_AGENT_TEST_NOW` under the test hooks).
    fn now(&self) -> jiff::Timestamp {
        schedule::now(self.hooks)
    }

    /// The fleet rollout: gather the inputs (the tip's policy, the state read from the same
    /// fetch and verified like a rule commit, this host's wave), let the pure
    /// [`follow::decide`](crate::rollout::follow::decide) choose, and report it (metrics,
    /// status, an audit entry when the hold changes). Returns the commit to go to and, when
    /// it is the state's stable commit, why a rewind to it is allowed; None: keep what is
    /// applied.
    fn follow(&mut self, tip: git2::Oid, applied: Option<&str>) -> Option<(git2::Oid, Option<String>)> {
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
            let has = self.mirror.source_tree(tip).ok().and_then(|t| fwc_compiler::rollout::fleet_plan(&t).ok()).map(|p| p.policy.is_some());
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
    fn placement(&self, policy_commit: &str, commit: &str) -> (Option<(usize, String)>, bool) {
        let plan_of = |c: &str| {
            git2::Oid::from_str(c).ok().and_then(|o| self.mirror.source_tree(o).ok()).and_then(|t| fwc_compiler::rollout::fleet_plan(&t).ok())
        };
        // A commit whose policy does not parse counts as having one (it never leaves rollouts).
        let commit_has_policy = plan_of(commit).is_none_or(|p| p.policy.is_some());
        let Some((policy, hosts)) = plan_of(policy_commit).and_then(|p| Some((p.policy?, p.hosts))) else { return (None, commit_has_policy) };
        let labels = hosts.iter().find(|h| h.name == self.cfg.host).map(|h| h.labels.clone()).unwrap_or_default();
        let w = fwc_compiler::rollout::wave_of(&policy, &self.cfg.host, &labels);
        (policy.waves.get(w).map(|x| (w, x.name.clone())), commit_has_policy)
    }

    fn is_refused(&self, commit: &str) -> bool {
        self.journal.handled.as_ref().is_some_and(|h| h.commit == commit && h.outcome != "applied")
    }

    /// Take commit `tip` into account: gather what the pure [`decide::decide`] asks for
    /// (signature, rewind, compile) and execute its step. Returns true when an apply ran.
    fn consider(&mut self, lock: &StateLock, tip: git2::Oid, force: bool, by_state: Option<String>) -> Result<bool> {
        use decide::Step;
        let tip_s = tip.to_string();
        let allow_path = self.cfg.state_dir.join(ALLOW_REWIND_FILE).display().to_string();
        let mut facts = decide::Facts {
            commit: &tip_s,
            prior: self.prior(&tip_s),
            now: Instant::now(),
            force,
            allow_file: self.allow_file_names(&tip_s),
            allow_file_path: &allow_path,
            allow_rewind: self.cfg.allow_rewind,
            by_state: by_state.as_deref(),
            resumed: self.resumed(),
            signature: None,
            rewind: None,
            compiled: None,
        };
        let mut step = decide::decide(&facts);
        if step == Step::Skip {
            return Ok(false);
        }
        let info = self.mirror.commit_info(tip)?;
        let current = lock.dir.current()?;
        let prev_commit = current.as_ref().and_then(|g| g.meta.commit.clone());
        let forced_note = match &self.forced {
            Some((old, new)) if *new == tip_s => Some(format!("force-push: {} was replaced by {}", short(old), short(new))),
            _ => None,
        };
        let base = Record {
            host: self.cfg.host.clone(),
            commit: Some(tip_s.clone()),
            previous_commit: prev_commit.clone(),
            author: Some(info.author.clone()),
            ..Default::default()
        };
        let (mut signer, mut artifacts, mut t0) = (None, None, Instant::now());
        loop {
            match step {
                Step::Skip => return Ok(false),
                Step::VerifySignature => {
                    facts.signature = Some(match verify::verify_commit(&self.mirror.repo, tip, &self.cfg.signatures) {
                        Ok(s) => {
                            signer = s;
                            Ok(())
                        }
                        Err(refusal) => Err(refusal.to_string()),
                    })
                }
                Step::CheckRewind => facts.rewind = Some(prev_commit.as_deref().filter(|p| *p != tip_s).and_then(|p| self.rewind_from(tip, p))),
                Step::Compile => {
                    t0 = Instant::now();
                    facts.compiled = Some(match self.mirror.source_tree(tip) {
                        Err(diags) => Err(diags.to_string().trim_end().to_string()),
                        Ok(tree) => {
                            tracing::info!(commit = %short(&tip_s), "compiling");
                            match self.compile_unless_stopped(tree, &tip_s) {
                                None => {
                                    tracing::info!(commit = %short(&tip_s), "stopping: the compile is abandoned (nothing was applied or recorded)");
                                    return Ok(false);
                                }
                                Some(Err(diags)) => Err(diags.to_string().trim_end().to_string()),
                                Some(Ok((a, _warnings))) => {
                                    let unchanged = current.as_ref().is_some_and(|cur| cur.meta.commit.as_deref() == Some(tip_s.as_str()) && cur.artifacts == a);
                                    artifacts = Some(a);
                                    Ok(unchanged)
                                }
                            }
                        }
                    })
                }
                Step::Refuse { reason, detail } => {
                    self.refuse(Record { signer, ..base }, reason, detail)?;
                    return Ok(false);
                }
                Step::Adopt => {
                    self.adopt(&tip_s);
                    return Ok(false);
                }
                Step::Apply { note } => {
                    let artifacts = artifacts.take().expect("decide applies only a compiled commit");
                    let detail = note.or(forced_note.clone()).or(self.schedule_note.take());
                    let base = Record { signer, detail, ..base };
                    tracing::info!(commit = %short(&tip_s), "applying");
                    let ok = self.transaction(lock, &artifacts, Action::Apply, base, t0)?;
                    if forced_note.is_some() {
                        self.forced = None;
                    }
                    if ok && facts.allow_file {
                        let p = self.cfg.state_dir.join(ALLOW_REWIND_FILE);
                        if let Err(e) = std::fs::remove_file(&p) {
                            tracing::warn!("cannot remove the used one-shot {}: {e}", p.display());
                        }
                    }
                    return Ok(true);
                }
            }
            step = decide::decide(&facts);
        }
    }

    /// What the journal remembers of `commit`, for [`decide::decide`].
    fn prior(&self, commit: &str) -> decide::Prior {
        use decide::Prior;
        match self.journal.handled.as_ref().filter(|h| h.commit == commit) {
            None => Prior::New,
            Some(h) => match h.outcome.as_str() {
                "applied" => Prior::Applied,
                "refused" => Prior::Refused { rewind: h.reason.as_deref() == Some("rewind") },
                "self_check" => Prior::SelfCheck { generation: h.state_generation },
                _ => Prior::Failed {
                    retry_at: match &self.apply_retry {
                        Some((c, _, at)) if c == commit => Some(*at),
                        _ => None,
                    },
                },
            },
        }
    }

    /// The generation of the last operator `resume` of the rollout state this host accepted.
    fn resumed(&self) -> Option<u64> {
        let accepted = self.journal.accepted_state.as_ref()?;
        match &self.follow_cache.state {
            Some((o, Ok(s))) if o.to_string() == accepted.commit => s.resumed.as_ref().map(|r| r.generation),
            _ => None,
        }
    }

    /// Compile `tree` for this host on a worker thread, so that SIGTERM need not wait for it
    /// (a large commit can take seconds): None when the agent is stopping — the compile is
    /// abandoned, having written nothing. A panic in the compiler refuses the commit instead
    /// of ending the agent.
    fn compile_unless_stopped(&self, tree: SourceTree, commit: &str) -> Option<Result<(Artifacts, Diagnostics), Diagnostics>> {
        let (tx, rx) = mpsc::channel();
        let (host, id, now) = (self.cfg.host.clone(), commit.to_string(), self.now());
        let worker = std::thread::Builder::new().name("fwc-compile".into()).stack_size(COMPILE_STACK_BYTES).spawn(move || {
            let _ = tx.send(fwc_compiler::compile_at(&tree, Some(&host), Some(&id), now));
        });
        if let Err(e) = worker {
            return Some(Err(Diagnostics::single(Diagnostic::error("compile", format!("cannot start the compile thread: {e}")))));
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(r) => return Some(r),
                Err(RecvTimeoutError::Timeout) if self.stop.load(Ordering::SeqCst) => return None,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Some(Err(Diagnostics::single(
                        Diagnostic::error("compiler-crash", "the compiler crashed on this commit (a bug in fwc; please report it with the rules)"),
                    )))
                }
            }
        }
    }

    /// Does the one-shot allow file name `commit` (its full id, or a prefix of at least 7
    /// hex digits)?
    fn allow_file_names(&self, commit: &str) -> bool {
        let Ok(text) = std::fs::read_to_string(self.cfg.state_dir.join(ALLOW_REWIND_FILE)) else { return false };
        text.split_whitespace().any(|w| w.len() >= 7 && commit.starts_with(&w.to_ascii_lowercase()))
    }

    /// Why `tip` would roll back the applied commit `applied`, or None when it descends from it.
    /// An applied commit the mirror no longer knows counts as a rewind (it was rewritten away).
    fn rewind_from(&self, tip: git2::Oid, applied: &str) -> Option<String> {
        let repo = &self.mirror.repo;
        let Ok(old) = git2::Oid::from_str(applied) else {
            return Some(format!("the applied commit {applied} is not a git commit id"));
        };
        if repo.find_commit(old).is_err() {
            return Some(format!("{} does not descend from the applied commit {} (which the branch no longer contains)", short(&tip.to_string()), short(applied)));
        }
        match repo.graph_descendant_of(tip, old) {
            Ok(true) => None,
            _ => Some(format!("{} does not descend from the applied commit {}", short(&tip.to_string()), short(applied))),
        }
    }

    /// The live state is `commit`'s: serve it. A newer tip that was refused or failed (the
    /// journal's `handled`) keeps the agent degraded; adopting the older live commit does not
    /// forget it.
    fn adopt(&mut self, commit: &str) {
        if !self.health.ready.load(Ordering::Relaxed) {
            tracing::info!(commit, "adopted the applied state (commit already live)");
        }
        self.metrics.set_applied_commit(Some(commit));
        self.health.ready.store(true, Ordering::Relaxed);
        let keep = self.journal.handled.as_ref().filter(|h| h.outcome != "applied" && h.commit != commit).cloned();
        match keep {
            Some(h) => {
                self.set_degraded(Some((&h.commit, degraded_reason(&h))), format!("{} {} ({}); running {}", h.outcome, short(&h.commit), h.reason.as_deref().unwrap_or("-"), short(commit)));
            }
            None => {
                self.journal.handled = Some(Handled { commit: commit.into(), outcome: "applied".into(), reason: None, degraded: None, state_generation: None });
                let _ = self.journal.save(&self.cfg.state_dir);
                self.set_degraded(None, format!("running {}", short(commit)));
            }
        }
    }

    /// `fwc agent --once`: the exit code of this iteration (see [`exit_code`]).
    pub fn once_code(&self, fetch_failed: bool, reconcile_failed: bool) -> u8 {
        if fetch_failed {
            return exit_code::FETCH;
        }
        if reconcile_failed {
            return exit_code::RECONCILE;
        }
        let tip = self.target.clone();
        match self.journal.handled.as_ref().filter(|h| Some(&h.commit) == tip.as_ref()) {
            Some(h) if h.outcome == "refused" => exit_code::REFUSED,
            Some(h) if h.outcome == "failed" || h.outcome == "self_check" => exit_code::APPLY_FAILED,
            _ => exit_code::OK,
        }
    }

    fn refuse(&mut self, rec: Record, reason: &str, detail: String) -> Result<()> {
        let commit = rec.commit.clone().unwrap_or_default();
        tracing::warn!(commit = %commit, reason, "refusing commit: {detail}");
        let seq = self.next_seq()?;
        self.journal.pending = Some(Pending { seq, commit: Some(commit.clone()), action: Action::Refuse });
        self.journal.save(&self.cfg.state_dir)?;
        self.append(Record {
            action: Some(Action::Refuse),
            result: Some(Outcome::Refused),
            detail: Some(format!("{reason}: {detail}")),
            ..rec
        })?;
        self.journal.pending = None;
        self.journal.handled = Some(Handled { commit: commit.clone(), outcome: "refused".into(), reason: Some(reason.into()), degraded: Some("refused".into()), state_generation: None });
        self.journal.save(&self.cfg.state_dir)?;
        self.metrics.refused(reason);
        self.set_degraded(Some((&commit, "refused")), format!("refused {} ({reason})", short(&commit)));
        Ok(())
    }

    /// Degraded with (the commit the failure belongs to, its `fwc_agent_degraded` reason), or
    /// healthy (None).
    fn set_degraded(&self, failure: Option<(&str, &str)>, status: String) {
        let applied = self.state.current().ok().flatten().and_then(|g| g.meta.commit);
        self.metrics.set_degraded(failure, applied.as_deref());
        self.health.degraded.store(failure.is_some(), Ordering::Relaxed);
        self.health.set_status(status);
    }

    /// Run the apply transaction over every backend and audit it. Returns whether it succeeded.
    fn transaction(&mut self, lock: &StateLock, artifacts: &Artifacts, action: Action, base: Record, t0: Instant) -> Result<bool> {
        self.transaction_audited(lock, artifacts, action, base, t0, true)
    }

    /// [`Self::transaction`]; `audit_it` = false skips the audit entry of a failure (a heal
    /// that keeps failing).
    fn transaction_audited(&mut self, lock: &StateLock, artifacts: &Artifacts, action: Action, base: Record, t0: Instant, audit_it: bool) -> Result<bool> {
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
    fn self_check_policy(&self, commit: &str) -> (Vec<fwc_compiler::artifacts::rollout::Probe>, decide::SelfCheckPolicy) {
        let policy = git2::Oid::from_str(commit).ok().and_then(|o| self.mirror.source_tree(o).ok()).and_then(|t| fwc_compiler::rollout::fleet_plan(&t).ok()).and_then(|p| p.policy);
        match policy {
            Some(p) => (p.probes, decide::SelfCheckPolicy { attempts: p.self_check_attempts, spacing: Duration::from_millis(p.self_check_spacing_ms) }),
            None => (vec![], decide::SelfCheckPolicy::default()),
        }
    }

    /// Compare live with the applied artifacts; heal or report.
    fn check_drift(&mut self, lock: &StateLock) -> Result<()> {
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
        // Traffic quotas: persist the counts, reset at the period's anchor, warn at 80 %.
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

/// Exit codes of `fwc agent --once` (documented in docs/operations.md). A usage or
/// configuration error (bad flag, unreadable secret, state dir not writable) exits 1 (2 for a
/// flag clap rejects).
pub mod exit_code {
    /// The tip is applied (or was already live).
    pub const OK: u8 = 0;
    /// The fetch failed: remote unreachable, branch missing, ssh host key refused, timeout.
    pub const FETCH: u8 = 3;
    /// The tip commit was refused: signature, compile error (including an unknown `--host`),
    /// or a rewind (force-push) that was not allowed.
    pub const REFUSED: u8 = 4;
    /// The tip's apply failed and was rolled back (or failed to roll back), or its self-check
    /// failed and the agent reverted it.
    pub const APPLY_FAILED: u8 = 5;
    /// The reconcile itself failed (state dir, audit log, git object store).
    pub const RECONCILE: u8 = 6;
}

/// Run the agent until SIGTERM / SIGINT (returns 0), or one iteration with `once` (returns
/// its [`exit_code`]).
pub fn run(cfg: AgentConfig) -> Result<u8> {
    let metrics = Arc::new(Metrics::for_host(&cfg.host));
    let health = Arc::new(Health::new((cfg.interval * 3).max(Duration::from_secs(60)) + cfg.fetch_timeout));
    let (tx, rx) = mpsc::channel::<Wake>();
    let _server = match cfg.metrics_addr {
        Some(addr) => {
            let push = tx.clone();
            let s = metrics::serve(
                addr,
                metrics::ServerState {
                    metrics: metrics.clone(),
                    health: health.clone(),
                    webhook: cfg.webhook.clone(),
                    deliveries: Some(Arc::new(metrics::replay::DeliveryGuard::load(&cfg.state_dir))),
                    on_push: Arc::new(move || {
                        let _ = push.send(Wake::Push);
                    }),
                },
            )
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot listen on {addr} (--metrics)"))?;
            tracing::info!("metrics on http://{}/metrics", s.addr);
            Some(s)
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    spawn_signal_thread(tx.clone(), stop.clone(), cfg.stop_grace);
    if cfg.forwarder {
        spawn_forwarder(&cfg.state_dir, cfg.netns.as_deref())?;
    }
    let mut agent = Agent::new(cfg.clone(), metrics, health.clone())?;
    agent.stop = stop.clone();
    // Recover an interrupted action before anything else.
    let mut force = {
        let _lock = agent.state.lock(true)?;
        agent.recover()?
    };
    tracing::info!(
        "watching {} branch {} for host {}, every {:?}, state in {}",
        cfg.repo_url,
        cfg.branch,
        cfg.host,
        cfg.interval,
        cfg.state_dir.display()
    );
    let mut next_fetch = Instant::now();
    let mut next_check = Instant::now();
    loop {
        health.tick();
        let now = Instant::now();
        let (mut fetch_failed, mut reconcile_failed) = (false, false);
        if now >= next_fetch {
            let (delay, changed) = agent.fetch();
            fetch_failed = agent.backoff.failures > 0;
            next_fetch = Instant::now() + delay;
            if changed {
                // A new tip is reconciled at once, not at the next drift-check tick.
                next_check = Instant::now();
            }
        }
        if Instant::now() >= next_check || force {
            if let Err(e) = agent.reconcile(force) {
                tracing::error!("reconcile failed: {e:?}");
                let c = agent.target.clone().unwrap_or_default();
                agent.set_degraded(Some((&c, "apply_failed")), format!("reconcile error: {e}"));
                reconcile_failed = true;
            }
            force = false;
            next_check = Instant::now() + cfg.interval;
        }
        if stop.load(Ordering::SeqCst) {
            tracing::info!("stopping");
            return Ok(exit_code::OK);
        }
        if cfg.once {
            return Ok(agent.once_code(fetch_failed, reconcile_failed));
        }
        // Schedules: wake when the applied artifacts stop being valid.
        // (Already past — the last reconcile could not apply — waits for the usual tick.)
        if let Some(d) = schedule::wait_until(agent.valid_until, agent.now()).filter(|d| !d.is_zero()) {
            next_check = next_check.min(Instant::now() + d);
        }
        let wait = next_fetch.min(next_check).saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => {
                tracing::info!("stopping");
                return Ok(exit_code::OK);
            }
            Ok(Wake::Push) => {
                // Coalesce a burst of webhooks into one fetch.
                while let Ok(w) = rx.try_recv() {
                    if w == Wake::Stop {
                        tracing::info!("stopping");
                        return Ok(exit_code::OK);
                    }
                }
                agent.backoff.reset();
                next_fetch = Instant::now();
                next_check = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The userspace forwarder, hosted by the agent: a tokio runtime on its own thread (inside
/// `--netns` when given, so its sockets live there) serving the control socket in the state
/// dir, which the forward backend of every apply talks to. It starts with the applied
/// `forward.json`, so a restart adopts the listeners. Returns once it serves (or failed to).
fn spawn_forwarder(state_dir: &std::path::Path, netns: Option<&str>) -> Result<()> {
    use fwc_forwarder::control;
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<usize, String>>();
    let (dir, ns) = (state_dir.to_path_buf(), netns.map(str::to_string));
    std::thread::Builder::new()
        .name("fwc-forwarder".into())
        .spawn(move || {
            if let Some(ns) = &ns {
                if let Err(e) = crate::backend::netns::enter_netns(ns) {
                    let _ = ready_tx.send(Err(format!("{e}")));
                    return;
                }
            }
            let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let sock = control::socket_path(&dir);
                let listener = match control::bind(&sock) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("control socket {}: {e}", sock.display())));
                        return;
                    }
                };
                let fwd = fwc_forwarder::server::Forwarder::new(Default::default());
                let mut n = 0;
                if let Ok(Some(cfg)) = control::applied_config(&dir) {
                    n = cfg.listeners.len();
                    if let Err(e) = fwd.reload(cfg).await {
                        tracing::error!("forwarder could not restore the applied listeners: {e}");
                    }
                }
                let _ = ready_tx.send(Ok(n));
                control::serve(fwd, listener).await;
            });
        })
        .into_diagnostic()?;
    match ready_rx.recv() {
        Ok(Ok(n)) => {
            tracing::info!("forwarder running ({n} listener(s) restored)");
            Ok(())
        }
        Ok(Err(e)) => Err(miette::miette!(
            help = "if a `fwc forward --state-dir` already serves this state dir, run the agent with --no-forwarder",
            "cannot start the in-process forwarder: {e}"
        )),
        Err(_) => Err(miette::miette!("the forwarder thread ended before it started")),
    }
}

/// On SIGTERM / SIGINT: raise `stop`, wake the loop, and if the process still runs after
/// `grace`, exit (the journal's intent makes the next start redo what was cut).
fn spawn_signal_thread(tx: mpsc::Sender<Wake>, stop: Arc<AtomicBool>, grace: Duration) {
    std::thread::Builder::new()
        .name("fwc-signals".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                    return;
                };
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                stop.store(true, Ordering::SeqCst);
                let _ = tx.send(Wake::Stop);
            });
            std::thread::sleep(grace);
            tracing::warn!("still busy {grace:?} after the stop signal: exiting now; the next start redoes the interrupted action");
            std::process::exit(i32::from(exit_code::OK));
        })
        .expect("signal thread");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_round_trip() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Journal::load(d.path()).unwrap(), Journal::default());
        let j = Journal {
            pending: Some(Pending { seq: 3, commit: Some("abc".into()), action: Action::Apply }),
            handled: Some(Handled { commit: "abc".into(), outcome: "applied".into(), reason: None, degraded: None, state_generation: None }),
            rollout: None,
            accepted_state: Some(crate::rollout::follow::Accepted { commit: "def".into(), generation: 4 }),
        };
        j.save(d.path()).unwrap();
        assert_eq!(Journal::load(d.path()).unwrap(), j);
    }
}
