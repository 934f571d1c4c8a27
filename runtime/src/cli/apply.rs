//! `fwc apply`, `fwc confirm`, `fwc status`, `fwc rollback`, and the live part of `fwc plan`
//! (the plan against what is applied and live on this host).
//!
//! Confirm-or-revert (`fwc apply --confirm 60s`): after a successful apply fwc writes
//! `confirm.json` (token, generation, deadline) into the state dir and starts a detached
//! reverter process (`fwc __confirm-watch`, its own session, so it survives the operator's
//! SSH session dying). `fwc confirm` deletes `confirm.json`; the reverter sees it gone and
//! exits. If the deadline passes first, the reverter takes the state lock and applies the
//! previous generation (or removes everything when there was none), through the same
//! transaction as any apply, then deletes `confirm.json`. Its log is `confirm.log`. While a
//! confirmation is pending, `fwc apply` refuses to start (run `fwc confirm` or
//! `fwc rollback`, which cancels the pending confirmation and reverts at once).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use fwc_compiler::artifacts::{sha256_hex, Artifacts, MANIFEST_FILE, NFTABLES_FILE};
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

use super::Global;
use crate::apply::{self, ApplyOptions, SysctlStatus};
use crate::audit::{self, AuditLog, Outcome};
use crate::backend::nft::NftBackend;
use crate::backend::Backend;
use crate::state::{self, PendingConfirm, StateDir, StateLock};

fn default_state_dir() -> PathBuf {
    PathBuf::from(state::DEFAULT_STATE_DIR)
}

/// Options shared by the commands that touch the live host.
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// State dir: applied artifacts, previous generation, lock.
    #[arg(long, env = "FWC_STATE_DIR", default_value_os_t = default_state_dir())]
    pub state_dir: PathBuf,
    /// Run nft and sysctl inside this network namespace (`ip netns exec NS …`).
    #[arg(long, value_hint = clap::ValueHint::Other, env = "FWC_NETNS")]
    pub netns: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// A rule repository (fwc.kdl), an artifact dir (`fwc compile --out`), or a saved plan (`fwc plan --out plan.json`).
    #[arg(default_value = ".")]
    pub source: PathBuf,
    /// Host to compile for (repositories that declare several hosts).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub host: Option<String>,
    #[command(flatten)]
    pub target: HostArgs,
    /// Apply without asking (required when stdin is not a terminal).
    #[arg(long)]
    pub auto_approve: bool,
    /// Revert automatically unless `fwc confirm` runs within this time (e.g. 60s, 5m).
    #[arg(long, value_parser = super::parse_duration)]
    pub confirm: Option<Duration>,
    /// Check and report needed sysctls but do not set them.
    #[arg(long)]
    pub no_sysctl: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Apply even if the ruleset would drop new connections of the SSH session this runs in
    /// (SSH_CONNECTION): you may be locked out after this session ends.
    #[arg(long)]
    pub allow_lockout: bool,
}

#[derive(Debug, clap::Args)]
pub struct ConfirmArgs {
    #[command(flatten)]
    pub target: HostArgs,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: HostArgs,
    /// Print the status as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub target: HostArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The hidden reverter process of `fwc apply --confirm`.
#[derive(Debug, clap::Args)]
pub struct ConfirmWatchArgs {
    #[command(flatten)]
    pub target: HostArgs,
    #[arg(long)]
    pub token: String,
}

// ---------------------------------------------------------------------------------------------
// loading what to apply

/// Where the artifacts came from.
pub enum Loaded {
    /// Compiled from a rule repository or read from an artifact dir.
    Artifacts { artifacts: Box<Artifacts>, source: String },
    /// A saved plan (`fwc plan --out`).
    Plan(Box<LivePlan>),
}

/// Git commit of `dir` (with `-dirty` when the work tree has changes), if it is a git checkout.
pub fn git_commit(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git").arg("-C").arg(dir).args(["rev-parse", "HEAD"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let mut c = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let st = std::process::Command::new("git").arg("-C").arg(dir).args(["status", "--porcelain", "--untracked-files=no"]).output().ok()?;
    if st.status.success() && !st.stdout.is_empty() {
        c.push_str("-dirty");
    }
    Some(c)
}

/// Compile a rule repository, or read an artifact dir.
pub fn load_artifacts(path: &Path, host: Option<&str>, color: bool) -> Result<(Artifacts, String)> {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if path.join(MANIFEST_FILE).is_file() && path.join(NFTABLES_FILE).is_file() {
        let a = Artifacts::read_dir(path).into_diagnostic()?;
        return Ok((a, format!("artifacts {}", abs.display())));
    }
    let tree = fwc_compiler::source::SourceTree::from_dir(path).map_err(|d| miette!("{}", d.render(color)))?;
    let commit = git_commit(path);
    let (a, warnings) = fwc_compiler::compile(&tree, host, commit.as_deref()).map_err(|d| miette!("{}", d.render(color)))?;
    if !warnings.is_empty() {
        eprint!("{}", warnings.render(color));
    }
    Ok((a, format!("rules {}", abs.display())))
}

pub fn load(path: &Path, host: Option<&str>, color: bool) -> Result<Loaded> {
    if path.is_file() {
        let text = std::fs::read_to_string(path).into_diagnostic().wrap_err_with(|| format!("cannot read {}", path.display()))?;
        let plan: LivePlan = serde_json::from_str(&text)
            .into_diagnostic()
            .wrap_err_with(|| format!("{} is not a plan file written by `fwc plan --out`", path.display()))?;
        if plan.version != PLAN_VERSION {
            return Err(miette!("{}: plan format version {} is not supported (expected {PLAN_VERSION})", path.display(), plan.version));
        }
        return Ok(Loaded::Plan(Box::new(plan)));
    }
    let (artifacts, source) = load_artifacts(path, host, color)?;
    Ok(Loaded::Artifacts { artifacts: Box::new(artifacts), source })
}

// ---------------------------------------------------------------------------------------------
// the live plan

pub const PLAN_VERSION: u32 = 1;

/// A plan against the live host: what `fwc apply` would change. Saved by `--out` and applied
/// only while the live state still hashes to `live_hash`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LivePlan {
    pub version: u32,
    pub host: String,
    pub source: String,
    pub created_at: String,
    /// sha256 over the live dataplane state (normalised nftables table) and the applied generation.
    pub live_hash: String,
    pub applied_generation: Option<String>,
    pub applied_commit: Option<String>,
    pub commit: Option<String>,
    /// Per-rule changes between the applied artifacts and the new ones (recomputed when a
    /// saved plan is applied).
    #[serde(skip_deserializing)]
    pub rules: Option<fwc_compiler::diff::Plan>,
    /// Artifacts whose content changes.
    pub artifacts_changed: Vec<String>,
    /// Differences between the live dataplane and the applied artifacts (hand edits).
    pub drift: Vec<String>,
    pub sysctls: Vec<SysctlStatus>,
    /// The exact artifacts `fwc apply plan.json` applies.
    pub artifacts: Artifacts,
}

impl LivePlan {
    pub fn has_changes(&self) -> bool {
        self.rules.as_ref().is_some_and(|r| !r.changes.is_empty())
            || !self.artifacts_changed.is_empty()
            || !self.drift.is_empty()
            || self.sysctls.iter().any(|s| s.was.as_deref() != Some(s.want.as_str()))
    }
}

fn file_hashes(a: &Artifacts) -> BTreeMap<&'static str, String> {
    a.files().into_iter().filter(|(f, _)| *f != MANIFEST_FILE).map(|(f, t)| (f, sha256_hex(t.as_bytes()))).collect()
}

/// sha256 over the live state: the normalised live nftables table plus the applied generation.
pub fn live_hash(state: &StateDir, nft: &NftBackend) -> Result<String> {
    live_hash_of(state, &nft.live_hash()?)
}

fn live_hash_of(state: &StateDir, nft_hash: &str) -> Result<String> {
    let ptr = state.pointer()?;
    Ok(sha256_hex(format!("nft={nft_hash}\ngen={}\n", ptr.current.as_deref().unwrap_or("-")).as_bytes()))
}

/// Build the plan of applying `next` on the live host.
pub fn make_plan(state: &StateDir, netns: Option<&str>, next: Artifacts, source: String) -> Result<LivePlan> {
    let mut nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state.path.join(state::CACHE_DIR));
    let current = state.current()?;
    // One listing of the live table serves the hash and the drift check (it is the costly
    // part with large sets).
    let live = nft.list_table()?;
    let live_hash = live_hash_of(state, &crate::backend::nft::hash_of_listing(live.as_ref()))?;
    let drift = match &current {
        Some(g) => nft.drift_of(&g.artifacts.nftables, live)?.drift,
        None => match live {
            Some(_) => vec!["table inet fwc exists but fwc has no applied state here (it will be replaced)".into()],
            None => vec![],
        },
    };
    let rules = fwc_compiler::diff::plan(current.as_ref().map(|g| &g.artifacts), &next);
    let old_h = current.as_ref().map(|g| file_hashes(&g.artifacts)).unwrap_or_default();
    let artifacts_changed =
        file_hashes(&next).into_iter().filter(|(f, h)| old_h.get(f) != Some(h)).map(|(f, _)| f.to_string()).collect();
    let sysctls = apply::check_sysctls(&next, netns);
    Ok(LivePlan {
        version: PLAN_VERSION,
        host: next.manifest.host.clone(),
        source,
        created_at: state::rfc3339(state::now_unix()),
        live_hash,
        applied_generation: current.as_ref().map(|g| g.name.clone()),
        applied_commit: current.as_ref().and_then(|g| g.meta.commit.clone()),
        commit: next.manifest.commit.clone(),
        rules: Some(rules),
        artifacts_changed,
        drift,
        sysctls,
        artifacts: next,
    })
}

struct Paint(bool);
impl Paint {
    fn c(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

fn short(c: &Option<String>) -> String {
    match c {
        Some(c) if c.len() > 12 && !c.contains("dirty") => c[..12].to_string(),
        Some(c) => c.clone(),
        None => "(no commit)".into(),
    }
}

/// Terraform-like text of a plan: the per-rule diff (`fwc_compiler::diff::render`), then the
/// live-host part: what is applied now, drift, sysctls.
pub fn render_plan(p: &LivePlan, color: bool) -> String {
    let paint = Paint(color);
    let mut s = String::new();
    if let Some(r) = &p.rules {
        s.push_str(&fwc_compiler::diff::render(r, color));
    }
    s.push_str(&format!("\nSource: {}\n", p.source));
    match &p.applied_generation {
        Some(g) => s.push_str(&format!("Live:   {} applied ({g})\n", short(&p.applied_commit))),
        None => s.push_str("Live:   nothing applied yet by fwc\n"),
    }
    if !p.drift.is_empty() {
        s.push_str(&format!("\n{}\n", paint.c("1;35", "Drift: the live state differs from what fwc applied (apply overwrites it):")));
        for d in &p.drift {
            s.push_str(&format!("  {} {d}\n", paint.c("35", "!")));
        }
    }
    if !p.sysctls.is_empty() {
        s.push_str("\nSysctls:\n");
        for st in &p.sysctls {
            let have = st.was.as_deref().unwrap_or("?");
            if have == st.want {
                s.push_str(&format!("    {} = {} (already set; {})\n", st.key, st.want, st.reason));
            } else {
                s.push_str(&format!("  {} {} = {} (is {have}; {})\n", paint.c("33", "~"), st.key, st.want, st.reason));
            }
        }
    }
    s.push('\n');
    if p.has_changes() {
        let mut what = Vec::new();
        if p.rules.as_ref().is_some_and(|r| !r.changes.is_empty()) || !p.artifacts_changed.is_empty() {
            what.push("the rules above".to_string());
        }
        if !p.drift.is_empty() {
            what.push(format!("{} drift item(s) overwritten", p.drift.len()));
        }
        let sys = p.sysctls.iter().filter(|s| s.was.as_deref() != Some(s.want.as_str())).count();
        if sys > 0 {
            what.push(format!("{sys} sysctl(s) set"));
        }
        s.push_str(&paint.c("1", &format!("Apply would change the live host: {}.", what.join(", "))));
    } else {
        s.push_str(&paint.c("1", "No changes: the live state matches the rules."));
    }
    s.push('\n');
    s
}

/// What the lead's `fwc plan` calls when no `--from` is given: plan `dir` against the live host.
/// Exit codes: 0 no changes, 2 changes (with `detailed_exitcode`), errors as `Err`.
pub struct LivePlanRequest {
    pub dir: PathBuf,
    pub host: Option<String>,
    pub target: HostArgs,
    pub out: Option<PathBuf>,
    pub json: bool,
    pub detailed_exitcode: bool,
}

pub fn plan_live(req: LivePlanRequest, g: &Global) -> Result<ExitCode> {
    let (artifacts, source) = load_artifacts(&req.dir, req.host.as_deref(), g.color())?;
    let state = StateDir::new(&req.target.state_dir);
    let plan = make_plan(&state, req.target.netns.as_deref(), artifacts, source)?;
    if let Some(out) = &req.out {
        state::write_atomic(out, fwc_compiler::artifacts::to_pretty(&plan).as_bytes())?;
    }
    let effects = super::explain::live_flow_effects(&state, &req.dir, req.host.as_deref())?;
    if req.json {
        let mut v = serde_json::to_value(&plan).into_diagnostic()?;
        v.as_object_mut().unwrap().remove("artifacts");
        v.as_object_mut().unwrap().insert("has_changes".into(), serde_json::json!(plan.has_changes()));
        v.as_object_mut().unwrap().insert("flow_effects".into(), serde_json::to_value(&effects).into_diagnostic()?);
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
    } else {
        print!("{}", render_plan(&plan, g.color()));
        if let Some(e) = &effects {
            print!("{}", fwc_compiler::eval::effects::render_text(e));
        }
        if let Some(out) = &req.out {
            println!("Saved the plan to {}; apply exactly it with `fwc apply {}`.", out.display(), out.display());
        }
    }
    Ok(if req.detailed_exitcode && plan.has_changes() { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

// ---------------------------------------------------------------------------------------------
// apply

fn lock_state(state: &StateDir) -> Result<StateLock> {
    match state.lock(false) {
        Ok(l) => Ok(l),
        Err(_) => {
            eprintln!("waiting for another fwc apply to finish (lock {}) …", state.path.join("lock").display());
            state.lock(true)
        }
    }
}

fn ask(question: &str) -> Result<bool> {
    eprint!("{question} Only 'yes' is accepted: ");
    std::io::stderr().flush().ok();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).into_diagnostic()?;
    Ok(line.trim() == "yes")
}

pub fn apply(a: ApplyArgs, g: &Global) -> Result<ExitCode> {
    let color = g.color();
    let state = StateDir::new(&a.target.state_dir);
    let netns = a.target.netns.clone();
    let loaded = load(&a.source, a.host.as_deref(), color)?;
    let lock = lock_state(&state)?;
    if let Some(p) = state.pending_confirm()? {
        return Err(miette!(
            "the apply of {} is waiting for `fwc confirm` (reverts in {}s); run `fwc confirm` or `fwc rollback` first",
            p.generation,
            p.deadline_unix.saturating_sub(state::now_unix())
        ));
    }
    let plan = match loaded {
        Loaded::Plan(saved) => {
            let nft = NftBackend::new(netns.clone());
            let now = live_hash(&state, &nft)?;
            if now != saved.live_hash {
                return Err(miette!(
                    "the plan file is stale: the live state changed since it was made ({}).\n\
                     It was planned against {} (live hash {}), the live hash is now {}.\n\
                     Run `fwc plan --out FILE` again and review the new plan.",
                    saved.created_at,
                    saved.applied_generation.as_deref().unwrap_or("an empty host"),
                    &saved.live_hash[..12],
                    &now[..12]
                ));
            }
            make_plan(&state, netns.as_deref(), saved.artifacts, saved.source)?
        }
        Loaded::Artifacts { artifacts, source } => make_plan(&state, netns.as_deref(), *artifacts, source)?,
    };
    if !a.json {
        print!("{}", render_plan(&plan, color));
    }
    if !plan.has_changes() && a.confirm.is_none() {
        if a.json {
            println!("{}", serde_json::json!({"result": "unchanged", "generation": plan.applied_generation}));
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Over SSH: refuse a ruleset that would drop this very session's next login.
    if let (false, Ok(conn)) = (a.allow_lockout, std::env::var("SSH_CONNECTION")) {
        if let Some(why) = fwc_compiler::lint::ssh_session_refusal(&plan.artifacts, &conn) {
            return Err(miette!(
                help = "allow SSH first (allow \"ssh\" proto=tcp port=22 from=\"@admins\"), or pass --allow-lockout if you have another way in (console, --confirm to auto-revert)",
                "refusing to apply: {why}. Nothing was applied."
            ));
        }
    }
    if !a.auto_approve {
        if !std::io::stdin().is_terminal() {
            return Err(miette!("stdin is not a terminal, so fwc cannot ask: pass --auto-approve to apply without asking"));
        }
        if !ask("\nApply these changes?")? {
            eprintln!("Apply cancelled.");
            return Ok(ExitCode::from(1));
        }
    }
    let mut backends = apply::default_backends(netns.as_deref(), &state.path);
    let opts = ApplyOptions { source: plan.source.clone(), netns: netns.clone(), no_sysctl: a.no_sysctl };
    let before = lock.dir.current().ok().flatten().map(|g| g.artifacts);
    let result = apply::transaction(&mut backends, &lock, &plan.artifacts, &opts);
    record(&lock, audit::Action::Apply, before.as_ref(), &plan.artifacts, result.as_ref().map_err(|f| f.to_string()), &plan.source);
    let report = match result {
        Ok(r) => r,
        Err(f) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({"result": "failed", "failure": f})).unwrap());
            }
            eprintln!("{}", Paint(color).c("1;31", &f.to_string()));
            return Ok(ExitCode::from(1));
        }
    };
    let mut pending = None;
    if let Some(d) = a.confirm {
        pending = Some(start_confirm(&lock, &report.generation, d, netns.as_deref())?);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"result": "applied", "report": report, "pending_confirm": pending})).unwrap()
        );
    } else {
        let paint = Paint(color);
        println!(
            "\n{} {} ({}) in {} ms (prepare {} ms, commit {} ms, verify {} ms).",
            paint.c("1;32", "Applied"),
            short(&report.commit),
            report.generation,
            report.total_ms,
            report.prepare_ms,
            report.commit_ms,
            report.verify_ms
        );
        for s in report.sysctls.iter().filter(|s| s.changed) {
            println!("Set sysctl {s}");
        }
        if let Some(p) = &pending {
            println!(
                "{} run `fwc confirm{}` within {}s, or this apply is reverted automatically.",
                paint.c("1;33", "Confirm:"),
                state_arg(&a.target),
                p.deadline_unix.saturating_sub(state::now_unix())
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn state_arg(t: &HostArgs) -> String {
    let mut s = String::new();
    if t.state_dir != default_state_dir() {
        s.push_str(&format!(" --state-dir {}", t.state_dir.display()));
    }
    s
}

fn start_confirm(lock: &StateLock, generation: &str, d: Duration, netns: Option<&str>) -> Result<PendingConfirm> {
    let token = sha256_hex(format!("{generation}-{}-{:?}", std::process::id(), std::time::SystemTime::now()).as_bytes())[..16].to_string();
    let deadline_unix = state::now_unix() + d.as_secs_f64().ceil() as u64;
    let mut pending = PendingConfirm { token: token.clone(), generation: generation.into(), deadline_unix, reverter_pid: None, netns: netns.map(str::to_string) };
    lock.set_pending_confirm(Some(&pending))?;
    let exe = std::env::current_exe().into_diagnostic()?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(lock.dir.path.join(state::CONFIRM_LOG)).into_diagnostic()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("__confirm-watch").arg("--state-dir").arg(&lock.dir.path).arg("--token").arg(&token);
    if let Some(ns) = netns {
        cmd.arg("--netns").arg(ns);
    }
    cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone().into_diagnostic()?).stderr(log);
    use std::os::unix::process::CommandExt;
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd.spawn().into_diagnostic().wrap_err("cannot start the confirm reverter")?;
    pending.reverter_pid = Some(child.id());
    lock.set_pending_confirm(Some(&pending))?;
    lock.dir.log_confirm(&format!("{generation}: waiting for `fwc confirm` until {} (reverter pid {})", state::rfc3339(deadline_unix), child.id()));
    Ok(pending)
}

pub fn confirm(a: ConfirmArgs, _g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    let lock = lock_state(&state)?;
    let Some(p) = state.pending_confirm()? else {
        return Err(miette!("nothing to confirm: no apply is waiting for confirmation in {}", state.path.display()));
    };
    if state::now_unix() >= p.deadline_unix {
        return Err(miette!("too late: the confirmation deadline of {} has passed and it is being reverted", p.generation));
    }
    lock.set_pending_confirm(None)?;
    state.log_confirm(&format!("{}: confirmed", p.generation));
    println!("Confirmed {}; it stays applied.", p.generation);
    Ok(ExitCode::SUCCESS)
}

/// Revert to the previous generation (or to nothing) through a full transaction.
fn revert(lock: &StateLock, netns: Option<&str>, why: &str) -> std::result::Result<apply::ApplyReport, String> {
    let cur = lock.dir.current().map_err(|e| apply::chain(&e))?;
    let prev = lock.dir.previous().map_err(|e| apply::chain(&e))?;
    let (artifacts, source) = match (&prev, &cur) {
        (Some(p), _) => (p.artifacts.clone(), format!("{why}: back to {} ({})", p.name, short(&p.meta.commit))),
        (None, Some(c)) => (apply::empty_artifacts(&c.meta.host), format!("{why}: back to nothing (first apply)")),
        (None, None) => return Err("nothing has been applied, so there is nothing to roll back".into()),
    };
    let mut backends = apply::default_backends(netns, &lock.dir.path);
    let opts = ApplyOptions { source: source.clone(), netns: netns.map(str::to_string), no_sysctl: true };
    let before = cur.map(|g| g.artifacts);
    let result = apply::transaction(&mut backends, lock, &artifacts, &opts).map_err(|f| f.to_string());
    record(lock, audit::Action::Rollback, before.as_ref(), &artifacts, result.as_ref().map_err(Clone::clone), &source);
    result
}

/// Write a manual apply or rollback into the same hash-chained audit log the agent keeps
/// (`<state-dir>/audit.jsonl`). A log that cannot be written is reported, not fatal: the
/// change itself already happened or was rolled back.
fn record(
    lock: &StateLock,
    action: audit::Action,
    before: Option<&Artifacts>,
    next: &Artifacts,
    result: std::result::Result<&apply::ApplyReport, String>,
    source: &str,
) {
    let (outcome, detail, ms) = match &result {
        Ok(r) => (Outcome::Ok, source.to_string(), r.total_ms),
        Err(e) => (Outcome::RolledBack, format!("{source}: {e}"), 0),
    };
    let rec = audit::Record {
        host: next.manifest.host.clone(),
        action: Some(action),
        commit: next.manifest.commit.clone(),
        previous_commit: before.and_then(|b| b.manifest.commit.clone()),
        changes: audit::changes_between(before.map(|b| &b.manifest), &next.manifest),
        result: Some(outcome),
        detail: Some(detail),
        duration_ms: ms,
        ..Default::default()
    };
    if let Err(e) = AuditLog::in_state_dir(&lock.dir.path).append(rec) {
        eprintln!("warning: could not write the audit log in {}: {e}", lock.dir.path.display());
    }
}

pub fn confirm_watch(a: ConfirmWatchArgs) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    loop {
        let p = match state.pending_confirm() {
            Ok(Some(p)) if p.token == a.token => p,
            _ => return Ok(ExitCode::SUCCESS), // confirmed, or superseded
        };
        if state::now_unix() >= p.deadline_unix {
            let lock = state.lock(true)?;
            match state.pending_confirm() {
                Ok(Some(p2)) if p2.token == a.token => {}
                _ => return Ok(ExitCode::SUCCESS),
            }
            let r = revert(&lock, a.target.netns.as_deref(), "not confirmed in time");
            let _ = lock.set_pending_confirm(None);
            match r {
                Ok(rep) => state.log_confirm(&format!("{}: not confirmed in time, reverted ({})", p.generation, rep.generation)),
                Err(e) => state.log_confirm(&format!("{}: not confirmed in time, REVERT FAILED: {e}", p.generation)),
            }
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn rollback(a: RollbackArgs, g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    let lock = lock_state(&state)?;
    let cancelled = state.pending_confirm()?;
    if cancelled.is_some() {
        lock.set_pending_confirm(None)?;
    }
    let report = revert(&lock, a.target.netns.as_deref(), "fwc rollback").map_err(|e| miette!("{e}"))?;
    if let Some(p) = cancelled {
        state.log_confirm(&format!("{}: rolled back by `fwc rollback` before confirmation", p.generation));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"result": "rolled-back", "report": report})).unwrap());
    } else {
        println!(
            "{} to {} ({}) in {} ms.",
            Paint(g.color()).c("1;32", "Rolled back"),
            short(&report.commit),
            report.generation,
            report.total_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// status

#[derive(Debug, Serialize)]
pub struct Status {
    pub state_dir: String,
    pub applied: bool,
    pub generation: Option<String>,
    pub commit: Option<String>,
    pub host: Option<String>,
    pub applied_at: Option<String>,
    pub source: Option<String>,
    /// Rules per backend (from the manifest; a rule on two backends counts on both).
    pub rules_per_backend: BTreeMap<String, usize>,
    /// nft rules in the applied nftables.json.
    pub nft_rules: usize,
    pub drift: bool,
    pub drift_details: Vec<String>,
    pub previous_generation: Option<String>,
    pub previous_commit: Option<String>,
    pub pending_confirm: Option<PendingConfirm>,
    pub counters: Vec<crate::backend::RuleCounter>,
}

pub fn status_of(state: &StateDir, netns: Option<&str>) -> Result<Status> {
    let cur = state.current()?;
    let prev = state.previous()?;
    let mut st = Status {
        state_dir: state.path.display().to_string(),
        applied: cur.is_some(),
        generation: None,
        commit: None,
        host: None,
        applied_at: None,
        source: None,
        rules_per_backend: BTreeMap::new(),
        nft_rules: 0,
        drift: false,
        drift_details: vec![],
        previous_generation: prev.as_ref().map(|p| p.name.clone()),
        previous_commit: prev.as_ref().and_then(|p| p.meta.commit.clone()),
        pending_confirm: state.pending_confirm()?,
        counters: vec![],
    };
    let mut nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state.path.join(state::CACHE_DIR));
    match &cur {
        Some(g) => {
            st.generation = Some(g.name.clone());
            st.commit = g.meta.commit.clone();
            st.host = Some(g.meta.host.clone());
            st.applied_at = Some(g.meta.applied_at.clone());
            st.source = Some(g.meta.source.clone());
            for r in &g.artifacts.manifest.rules {
                for b in &r.backends {
                    *st.rules_per_backend.entry(b.as_str().to_string()).or_default() += 1;
                }
            }
            st.nft_rules = g
                .artifacts
                .nftables
                .get("nftables")
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter(|o| o.get("rule").is_some() || o.get("add").and_then(|x| x.get("rule")).is_some()).count())
                .unwrap_or(0);
            let obs = nft.observe(&g.artifacts)?;
            st.drift_details = obs.drift;
            st.counters = obs.counters;
        }
        None => {
            if nft.list_table()?.is_some() {
                st.drift_details.push("table inet fwc exists but fwc has no applied state in this state dir".into());
            }
        }
    }
    st.drift = !st.drift_details.is_empty();
    Ok(st)
}

pub fn status(a: StatusArgs, g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    let st = status_of(&state, a.target.netns.as_deref())?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&st).unwrap());
        return Ok(ExitCode::SUCCESS);
    }
    let paint = Paint(g.color());
    println!("State dir:  {}", st.state_dir);
    if !st.applied {
        println!("Applied:    nothing yet");
    } else {
        println!(
            "Applied:    {} ({}) for host {} at {}",
            short(&st.commit),
            st.generation.as_deref().unwrap_or("-"),
            st.host.as_deref().unwrap_or("-"),
            st.applied_at.as_deref().unwrap_or("-")
        );
        println!("Source:     {}", st.source.as_deref().unwrap_or("-"));
        let per: Vec<String> = st.rules_per_backend.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("Rules:      {} ({} nft rules)", if per.is_empty() { "none".into() } else { per.join(", ") }, st.nft_rules);
        if let Some(p) = &st.previous_generation {
            println!("Previous:   {} ({}) — `fwc rollback` returns to it", short(&st.previous_commit), p);
        }
    }
    if st.drift {
        println!("Drift:      {}", paint.c("1;35", "yes"));
        for d in &st.drift_details {
            println!("  {} {d}", paint.c("35", "!"));
        }
    } else {
        println!("Drift:      no");
    }
    if let Some(p) = &st.pending_confirm {
        let left = p.deadline_unix as i64 - state::now_unix() as i64;
        println!(
            "Confirm:    {} waits for `fwc confirm` ({})",
            p.generation,
            if left > 0 { format!("reverts in {left}s") } else { "deadline passed, reverting".into() }
        );
    }
    Ok(ExitCode::SUCCESS)
}
