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
//!
//! This file holds the agent itself and what it does with one commit (gather the facts for
//! [`decide::decide`], execute the step). Beside it: [`decide`] (the pure decisions),
//! `following.rs` (the fleet rollout's inputs), `transaction.rs` (the apply, its audit entry and
//! self-check), `drift.rs` (drift check, heal or report), `journal.rs` (`agent.json`),
//! `run_loop.rs` (the process: loop, signals, forwarder) and `hooked.rs` (test hooks).

pub mod decide;
mod drift;
mod following;
pub mod git;
pub mod git_zlib;
mod hooked;
mod journal;
pub mod refs_poll;
/// Schedules: recompiling when the applied artifacts' `valid_until` passes.
pub mod schedule;
mod run_loop;
pub mod selfcheck;
mod transaction;
pub mod verify;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::Artifacts;
use fwc_compiler::diag::{Diagnostic, Diagnostics};
use fwc_compiler::read::source::SourceTree;
use miette::{miette, IntoDiagnostic, Result, WrapErr};

use crate::engine::{self, transaction as apply};
use crate::audit::{self, Action, AuditLog, Outcome, Record};
use crate::backend::Backend;
use crate::metrics::{Health, Metrics, WebhookSecret};
use crate::state::{StateDir, StateLock};
pub use decide::{Backoff, DriftMode, ALLOW_REWIND_FILE, RETRY_MIN};
use git::Mirror;
use hooked::Hooked;
pub use journal::{FollowStatus, Handled, Journal, Pending, JOURNAL_FILE};
pub use run_loop::{run, Wake};
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

/// Default of how long SIGTERM waits for an action in progress (an apply, a fetch) before the
/// agent exits regardless (recovered like a crash at the next start); `--stop-grace` sets it.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stack of the compile worker (parsing itself runs on its own big-stack thread).
const COMPILE_STACK_BYTES: usize = 64 << 20;

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
        let mut tree = tree;
        tree.set_cache = crate::state::set_cache::DirSetStore::cache(&self.cfg.state_dir);
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
