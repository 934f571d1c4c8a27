//! `fwc apply`, `fwc confirm`, `fwc status`, `fwc rollback` and the hidden confirm reverter:
//! argument parsing and rendering only. The work is done by the
//! engine (`crate::engine`: load, plan, transaction + audit record, confirm, status).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use miette::{miette, IntoDiagnostic, Result};

pub use super::host::HostArgs;
use super::host::default_state_dir;
use super::plan::{render_plan, short, Paint};
use super::Global;
use crate::audit;
use crate::engine::load::{load, plan_loaded};
use crate::engine::plan;
use crate::engine::transaction::{self, ApplyOptions};
use crate::engine::{confirm, record, status, target};
use crate::state::{self, StateDir, StateLock};

use super::output::{self, CommandResult};

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
    /// Accept a whole-table replace of fwc's nftables table where no diff can make the change
    /// (`fwc plan` names the counters, per-source tracking sets and limit state it resets).
    /// Without it such an apply is refused with exit 1 and nothing is changed.
    #[arg(long)]
    pub allow_replace: bool,
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
#[command(after_help = "Shows what going back changes (like `fwc plan`) and asks; scripts pass --auto-approve.\n\nExamples:\n  fwc rollback                 # preview, then type yes\n  fwc rollback --auto-approve --json")]
pub struct RollbackArgs {
    #[command(flatten)]
    pub target: HostArgs,
    /// Roll back without showing the plan and asking (required when stdin is not a terminal).
    #[arg(long)]
    pub auto_approve: bool,
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
// apply

fn lock_state(state: &StateDir, t: &HostArgs) -> Result<StateLock> {
    match state.lock(false) {
        Ok(l) => Ok(l),
        Err(_) if t.lock_timeout.is_some_and(|d| d.is_zero()) => state.lock(false),
        Err(_) => {
            let upto = t.lock_timeout.map(|d| format!(" (at most {:.1} s)", d.as_secs_f64())).unwrap_or_default();
            eprintln!("waiting for another fwc command to release the state lock {}{upto} …", state.path.join("lock").display());
            state.lock_within(t.lock_timeout)
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
    let color = g.color_stdout();
    let state = StateDir::new(&a.target.state_dir);
    let netns = a.target.netns.clone();
    target::check_netns(netns.as_deref())?;
    let loaded = load(&a.source, a.host.as_deref(), g.color_stderr(), Some(&a.target.state_dir))?;
    let lock = lock_state(&state, &a.target)?;
    report_enforced(confirm::enforce_deadline(&lock, netns.as_deref())?);
    if let Some(p) = state.pending_confirm()? {
        return Err(miette!(
            "the apply of {} is waiting for `fwc confirm` (reverts in {}s); run `fwc confirm` or `fwc rollback` first",
            p.generation,
            p.deadline_unix.saturating_sub(state::now_unix())
        ));
    }
    let plan = plan_loaded(&state, netns.as_deref(), loaded)?;
    if !a.json {
        print!("{}", render_plan(&plan, color));
    }
    if !plan.has_changes() && a.confirm.is_none() {
        if a.json {
            output::print(&output::versioned(&serde_json::json!({"action": "apply", "result": CommandResult::Unchanged, "generation": plan.applied_generation})));
        }
        return Ok(ExitCode::SUCCESS);
    }
    // What the host lacks and the apply cannot do without: refused, in the plan's words.
    if let Some(m) = plan.host_needs.iter().find(|m| m.blocks_apply) {
        return Err(miette!(help = "`fwc plan` lists what the host lacks", "cannot apply: {}; nothing was changed", m.text));
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
    let mut backends = transaction::default_backends(netns.as_deref(), &state.path);
    let opts = ApplyOptions {
        source: plan.source.clone(),
        netns: netns.clone(),
        no_sysctl: a.no_sysctl,
        nft_full_replace: plan.nft_full_replace_reason(),
        allow_replace: a.allow_replace,
    };
    let done = record::transact(&mut backends, &lock, &plan.artifacts, &opts, audit::Action::Apply)?;
    let outcome = done.record.result.map(CommandResult::from).unwrap_or(CommandResult::Failed);
    record::append_or_warn(&lock, done.record);
    let result = done.result;
    let report = match result {
        Ok(r) => r,
        Err(f) => {
            if a.json {
                output::print(&output::versioned(&serde_json::json!({"action": "apply", "result": outcome, "failure": f})));
            }
            eprintln!("{}", Paint(g.color_stderr()).c("1;31", &f.to_string()));
            return Ok(ExitCode::from(1));
        }
    };
    let mut pending = None;
    if let Some(d) = a.confirm {
        pending = Some(confirm::start(&lock, &report.generation, d, netns.as_deref())?);
    }
    if a.json {
        output::print(&output::versioned(&serde_json::json!({
            "action": "apply",
            "result": CommandResult::Ok,
            "generation": report.generation,
            "report": report,
            "pending_confirm": pending,
        })));
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

pub fn confirm(a: ConfirmArgs, _g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    target::check_netns(a.target.netns.as_deref())?;
    target::require_state_dir(&state)?;
    let lock = lock_state(&state, &a.target)?;
    if let Some(r) = confirm::enforce_deadline(&lock, a.target.netns.as_deref())? {
        report_enforced(Some(r));
        return Err(miette!("too late: the confirmation deadline had passed, so the unconfirmed apply has just been reverted"));
    }
    let p = confirm::confirm(&lock)?;
    println!("Confirmed {}; it stays applied.", p.generation);
    Ok(ExitCode::SUCCESS)
}

pub fn confirm_watch(a: ConfirmWatchArgs) -> Result<ExitCode> {
    confirm::watch(&StateDir::new(&a.target.state_dir), &a.token, a.target.netns.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

pub fn rollback(a: RollbackArgs, g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    target::check_netns(a.target.netns.as_deref())?;
    target::require_state_dir(&state)?;
    let lock = lock_state(&state, &a.target)?;
    if !a.auto_approve {
        if !std::io::stdin().is_terminal() {
            return Err(miette!("stdin is not a terminal, so fwc cannot ask: pass --auto-approve to roll back without asking. Nothing was changed."));
        }
        let (artifacts, source) = confirm::rollback_target(&state, "fwc rollback").map_err(|e| miette!("{e}"))?;
        let preview = plan::make_plan(&state, a.target.netns.as_deref(), artifacts, source)?;
        print!("{}", render_plan(&preview, g.color_stdout()));
        if let Some(p) = state.pending_confirm()? {
            println!("The apply of {} waiting for `fwc confirm` is cancelled.", p.generation);
        }
        if !ask("\nRoll back?")? {
            eprintln!("Rollback cancelled.");
            return Ok(ExitCode::from(1));
        }
    }
    let (report, cancelled) = match confirm::rollback(&lock, a.target.netns.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            if a.json {
                output::print(&output::versioned(&serde_json::json!({"action": "rollback", "result": CommandResult::Failed, "error": e.to_string()})));
            }
            return Err(e);
        }
    };
    if a.json {
        output::print(&output::versioned(&serde_json::json!({
            "action": "rollback",
            "result": CommandResult::Ok,
            "generation": report.generation,
            "report": report,
            "cancelled_confirm": cancelled,
        })));
    } else {
        println!(
            "{} to {} ({}) in {} ms.",
            Paint(g.color_stdout()).c("1;32", "Rolled back"),
            short(&report.commit),
            report.generation,
            report.total_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// status

pub fn status(a: StatusArgs, g: &Global) -> Result<ExitCode> {
    let state = StateDir::new(&a.target.state_dir);
    target::check_netns(a.target.netns.as_deref())?;
    target::require_state_dir(&state)?;
    // Fail closed: a confirmation past its deadline is reverted now, whatever became of the
    // reverter, and the status shows the result.
    if state.pending_confirm()?.is_some_and(|p| state::now_unix() >= p.deadline_unix) {
        let lock = lock_state(&state, &a.target)?;
        report_enforced(confirm::enforce_deadline(&lock, a.target.netns.as_deref())?);
    }
    let st = status::status_of(&state, a.target.netns.as_deref())?;
    let code = status_exit_code(&st);
    if a.json {
        output::print(&output::versioned(&st));
        return Ok(code);
    }
    let paint = Paint(g.color_stdout());
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
        // Schedules: when the applied rules change next.
        if let Some(vu) = &st.valid_until {
            if crate::agent::schedule::recompile_due(Some(vu), jiff::Timestamp::now()) {
                println!("Schedules:  {} since {vu} (a clock change or an until= passed): the agent compiles again; without it run `fwc apply`", paint.c("33", "out of date"));
            } else {
                println!("Schedules:  right until {vu} (a time zone's clock change or an until=); the agent compiles again then");
            }
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
    if !st.quotas.is_empty() {
        println!("Quotas:");
        for q in &st.quotas {
            let pct = if q.limit_bytes == 0 { 0.0 } else { q.used_bytes as f64 * 100.0 / q.limit_bytes as f64 };
            let state = if q.used_up { paint.c("1;31", &format!("used up: {}", q.over_quota)) } else { format!("{pct:.1} %") };
            println!(
                "  {} {}: {} of {} bytes per {} ({state}); period {} to {}{}",
                q.kind.as_str(),
                q.rule,
                q.used_bytes,
                q.limit_bytes,
                q.period.as_str(),
                q.period_start,
                q.period_end,
                if q.counted { "" } else { " (not counted live: the ledger's count)" }
            );
        }
    }
    if !st.target_health.is_empty() {
        println!("Targets:    (health checks)");
        for t in &st.target_health {
            println!("  {} {} {}", t.rule, t.target, if t.up { paint.c("32", "up") } else { paint.c("1;31", "down (taken out)") });
        }
    }
    if !st.per_source.is_empty() {
        println!("Per-source: (sources tracked / size per family; at the size new sources are refused)");
        for f in &st.per_source {
            let full = if f.entries >= f.size { paint.c("1;31", " FULL: new sources refused") } else { String::new() };
            println!("  {} {} {} {}: {}/{}{full}", f.kind.as_str(), f.rule, f.limit, f.family, f.entries, f.size);
        }
    }
    if let Some(a) = &st.agent {
        if let Some(h) = a.handled.as_ref().filter(|h| h.outcome != "applied") {
            println!("Agent:      {} {} ({})", paint.c("1;31", &h.outcome), short(&Some(h.commit.clone())), h.reason.as_deref().unwrap_or("-"));
        }
        if let Some(r) = &a.rollout {
            // Numbered from 1, as `fwc plan --waves` does.
            let wave = r.wave.as_ref().map(|(i, n)| format!(", wave {} \"{n}\"", i + 1)).unwrap_or_default();
            println!("Rollout:    {} of {} (stable {}){wave}", r.phase, short(&r.commit), short(&r.stable));
            if let Some(h) = &r.held {
                println!("  held back: {} — {}", paint.c("33", h), r.detail);
            }
        }
    }
    if let Some(p) = &st.pending_confirm {
        let left = p.deadline_unix as i64 - state::now_unix() as i64;
        println!(
            "Confirm:    {} waits for `fwc confirm` ({})",
            p.generation,
            if left > 0 { format!("reverts in {left}s") } else { "deadline passed, reverting".into() }
        );
    }
    Ok(code)
}

/// Exit codes of `fwc status` (docs/operations.md): 0 applied and in sync; 2 drift (the live
/// dataplane differs from what was applied); 3 nothing applied with this state dir; 4 an apply
/// waits for `fwc confirm`; 1 an error. The first that holds, in this order.
fn status_exit_code(st: &status::Status) -> ExitCode {
    if st.drift {
        ExitCode::from(2)
    } else if !st.applied {
        ExitCode::from(3)
    } else if st.pending_confirm.is_some() {
        ExitCode::from(4)
    } else {
        ExitCode::SUCCESS
    }
}

/// Tell the operator that a command found an unconfirmed apply past its deadline and reverted it.
fn report_enforced(r: Option<std::result::Result<transaction::ApplyReport, String>>) {
    match r {
        None => {}
        Some(Ok(rep)) => eprintln!("An apply was not confirmed by its deadline and its reverter was gone: reverted now ({}).", rep.generation),
        Some(Err(e)) => eprintln!("An apply was not confirmed by its deadline: REVERT FAILED: {e}"),
    }
}
