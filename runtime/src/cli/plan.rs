//! `fwc plan`: against the live host (what `fwc apply` would do), between two revisions
//! (`--from`), or the fleet by rollout wave (`--waves`); and the text of a live plan that
//! `fwc apply` and `fwc rollback` show before they ask.

use std::path::PathBuf;
use std::process::ExitCode;

use fwc_compiler::read::source::SourceTree;
use miette::{miette, IntoDiagnostic, Result};

use super::compile::{read_tree, report, EXIT_CHANGES};
use super::host::HostArgs;
use super::Global;
use crate::engine::load::load_artifacts;
use crate::engine::plan::{self, LivePlan};
use crate::engine::target;
use crate::state::{self, StateDir};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  fwc plan                               # the checkout against the live host\n  fwc plan --out plan.json && fwc apply plan.json   # apply exactly what was reviewed\n  fwc plan --from HEAD~1                 # what the last commit changed (no host needed)\n  fwc plan --from main --to feature-x --host edge-1 --json\n  fwc plan --waves                       # the fleet by rollout wave (docs/fleet.md)\n\nExit codes: 0 ok (changes or not), 1 error; with --detailed-exitcode 0 no changes, 1 error, 2 changes.")]
pub struct PlanArgs {
    /// Rule repository (directory with fwc.kdl, inside a git checkout for --from).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Host to plan for (needed when the repository declares several).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub host: Option<String>,
    /// Compare against this git revision of the rule repository instead of the live host.
    #[arg(long)]
    pub from: Option<String>,
    /// The new side: a git revision (default: the files in DIR as they are now).
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// Print the plan as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Output format of the plan: `text`, or `markdown` (plan and flow effects as a pull-request
    /// comment). `--json` prints JSON (with `flow_effects`).
    #[arg(long, default_value = "text", value_parser = ["text", "markdown"])]
    pub format: String,
    /// Exit 2 when there are changes, 0 when there are none (1 stays an error), as terraform
    /// does. Without it, plan exits 0 whether or not there are changes.
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Save the live plan (with a hash of the live state) for `fwc apply plan.json`.
    #[arg(long, conflicts_with = "from")]
    pub out: Option<PathBuf>,
    /// Show the rollout policy and every declared host by wave (with --host: that host's wave,
    /// declared or not). Reads only the rule files: no live host, no git (docs/fleet.md).
    #[arg(long, conflicts_with_all = ["from", "out", "detailed_exitcode"])]
    pub waves: bool,
    #[command(flatten)]
    pub target: HostArgs,
}

pub fn plan(a: PlanArgs, g: &Global) -> Result<ExitCode> {
    if a.waves {
        return waves(&a, g);
    }
    let Some(from) = &a.from else {
        let req = LivePlanRequest {
            dir: a.dir,
            host: a.host,
            target: a.target,
            out: a.out,
            json: a.json,
            detailed_exitcode: a.detailed_exitcode,
        };
        return plan_live(req, g);
    };
    let (repo, sub) = crate::repo::discover(&a.dir)?;
    let old_commit = crate::repo::commit_at(&repo, from)?;
    // The old side may be refused (a symlink leaving the repository…): then, as when it
    // does not compile, all is new.
    let old_tree = crate::repo::source_tree_at(&repo, &old_commit, &sub).ok();
    let new_side = match &a.to {
        Some(to) => {
            let c = crate::repo::commit_at(&repo, to)?;
            crate::repo::source_tree_at(&repo, &c, &sub).map(|t| (t, Some(c.id().to_string())))
        }
        None => read_tree(&a.dir).map(|t| (t, None)),
    };
    let (new_tree, new_id) = match new_side {
        Ok(side) => side,
        Err(diags) => {
            report(&diags, a.json, g);
            return Ok(ExitCode::from(1));
        }
    };
    let host = a.host.as_deref();
    let now = jiff::Timestamp::now();
    // The old side may not even compile (that is often why one plans); then all is new.
    let old = old_tree.as_ref().and_then(|t| fwc_compiler::compile_at(t, host, Some(&old_commit.id().to_string()), now).ok()).map(|(art, _)| art);
    let new = match fwc_compiler::compile_at(&new_tree, host, new_id.as_deref(), now) {
        Ok((art, warnings)) => {
            if !a.json {
                report(&warnings, false, g);
            }
            art
        }
        Err(diags) => {
            report(&diags, a.json, g);
            return Ok(ExitCode::from(1));
        }
    };
    let plan = fwc_compiler::diff::plan(old.as_ref(), &new);
    let rollout = host_rollout(&new_tree, &new.manifest.host);
    // Which flows the change opens, closes or redirects (docs/testing-policies.md).
    let effects = match fwc_compiler::eval::effects::between_trees_at(old_tree.as_ref().filter(|_| old.is_some()), &new_tree, host, now) {
        Some(Ok(e)) => Some(e),
        Some(Err(e)) => return Err(miette!(help = "this is a bug in fwc's evaluator; please report it with the rules", "cannot compute flow effects: {e}")),
        None => None,
    };
    if a.json {
        let mut v = super::output::versioned(&serde_json::json!({"mode": "revisions", "has_changes": plan.has_changes()}));
        let m = v.as_object_mut().expect("an object");
        if let serde_json::Value::Object(p) = serde_json::to_value(&plan).into_diagnostic()? {
            m.extend(p);
        }
        m.insert("flow_effects".into(), serde_json::to_value(&effects).into_diagnostic()?);
        if let Some((w, _)) = &rollout {
            m.insert("rollout".into(), serde_json::to_value(w).into_diagnostic()?);
        }
        super::output::print(&v);
    } else if a.format == "markdown" {
        let e = effects.unwrap_or_default();
        print!("{}", fwc_compiler::eval::effects::render_markdown(&fwc_compiler::diff::render(&plan, false), &e));
        if let Some((w, p)) = &rollout {
            print!("\n{}", fwc_compiler::features::rollout::render_host_wave(w, p));
        }
    } else {
        print!("{}", fwc_compiler::diff::render(&plan, g.color_stdout()));
        if let Some(e) = &effects {
            print!("{}", fwc_compiler::eval::effects::render_text(e));
        }
        if let Some((w, p)) = &rollout {
            print!("\n{}", fwc_compiler::features::rollout::render_host_wave(w, p));
        }
    }
    Ok(if a.detailed_exitcode && plan.has_changes() { ExitCode::from(EXIT_CHANGES) } else { ExitCode::SUCCESS })
}

/// The wave of `host` when the repository has a rollout policy (shown under a one-host plan).
/// Files that never say `rollout` are not parsed again.
fn host_rollout(tree: &SourceTree, host: &str) -> Option<(fwc_compiler::features::rollout::HostWave, fwc_compiler::artifacts::rollout::RolloutPolicy)> {
    if !tree.files.values().any(|t| t.contains("rollout")) {
        return None;
    }
    let fleet = fwc_compiler::features::rollout::fleet_plan(tree).ok()?;
    Some((fleet.host_wave(host)?, fleet.policy?))
}

/// `fwc plan --waves [--host NAME]`: the fleet by wave, from the rule files alone.
fn waves(a: &PlanArgs, g: &Global) -> Result<ExitCode> {
    let fleet = match read_tree(&a.dir).and_then(|t| fwc_compiler::features::rollout::fleet_plan(&t)) {
        Ok(f) => f,
        Err(diags) => {
            report(&diags, a.json, g);
            return Ok(ExitCode::from(1));
        }
    };
    let one = a.host.as_deref().map(|h| fleet.host_wave(h));
    if a.json {
        let mut v = super::output::versioned(&serde_json::json!({"mode": "waves"}));
        let m = v.as_object_mut().expect("an object");
        m.insert("policy".into(), serde_json::to_value(&fleet.policy).into_diagnostic()?);
        m.insert("hosts".into(), serde_json::to_value(&fleet.hosts).into_diagnostic()?);
        if let Some(w) = &one {
            m.insert("host".into(), serde_json::to_value(w).into_diagnostic()?);
        }
        super::output::print(&v);
    } else {
        match (&one, &fleet.policy) {
            (Some(Some(w)), Some(p)) => print!("{}", fwc_compiler::features::rollout::render_host_wave(w, p)),
            _ => print!("{}", fwc_compiler::features::rollout::render_waves(&fleet)),
        }
    }
    Ok(ExitCode::SUCCESS)
}


// ---------------------------------------------------------------------------------------------
// rendering

pub(super) struct Paint(pub(super) bool);
impl Paint {
    pub(super) fn c(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

pub(super) fn short(c: &Option<String>) -> String {
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
    if let Some(n) = p.nftables.as_ref().filter(|n| n.mode != crate::backend::nft::NftMode::Unchanged) {
        s.push_str(&format!("\nnftables: {}\n", n.describe()));
        for o in &n.objects {
            s.push_str(&format!("    {o}\n"));
        }
        for r in &n.resets {
            s.push_str(&format!("  {} {r}\n", paint.c("1;33", "!")));
        }
        if n.needs_allow_replace {
            s.push_str(&format!(
                "  {}\n",
                paint.c("1;33", "no diff can make this change: `fwc apply` refuses it unless given --allow-replace")
            ));
        }
    }
    if !p.host_needs.is_empty() {
        s.push_str(&format!("\n{}\n", paint.c("1;33", "Warning: the host lacks what the apply needs:")));
        for m in &p.host_needs {
            let blocks = if m.blocks_apply { " (fwc apply refuses this)" } else { "" };
            s.push_str(&format!("  {} {}{blocks}\n", paint.c("33", "!"), m.text));
        }
    }
    if !p.published_open.is_empty() {
        s.push_str(&format!("\n{}\n", paint.c("1;33", "Warning: published container ports open to everyone:")));
        for w in &p.published_open {
            s.push_str(&format!("  {} {w}\n", paint.c("33", "!")));
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
pub(crate) struct LivePlanRequest {
    pub dir: PathBuf,
    pub host: Option<String>,
    pub target: HostArgs,
    pub out: Option<PathBuf>,
    pub json: bool,
    pub detailed_exitcode: bool,
}

pub(crate) fn plan_live(req: LivePlanRequest, g: &Global) -> Result<ExitCode> {
    target::check_netns(req.target.netns.as_deref())?;
    let (artifacts, source) = match load_artifacts(&req.dir, req.host.as_deref(), g.color_stderr(), Some(&req.target.state_dir)) {
        Ok(x) => x,
        Err(e) => {
            // Rules with errors: the JSON document on stdout for machines, the report (once)
            // on stderr for people, exit 1.
            if let (true, Some(failed)) = (req.json, e.downcast_ref::<crate::engine::load::CompileFailed>()) {
                super::output::print(&super::output::diagnostics(&failed.0));
            }
            return Err(e);
        }
    };
    let state = StateDir::new(&req.target.state_dir);
    let plan = plan::make_plan(&state, req.target.netns.as_deref(), artifacts, source)?;
    if let Some(out) = &req.out {
        state::write_atomic(out, fwc_compiler::artifacts::to_pretty(&plan).as_bytes())?;
    }
    let effects = super::explain::live_flow_effects(&state, &req.dir, req.host.as_deref(), req.target.netns.as_deref())?;
    let rollout = fwc_compiler::read::source::SourceTree::from_dir(&req.dir).ok().and_then(|t| host_rollout(&t, &plan.host));
    if req.json {
        let mut v = super::output::versioned(&serde_json::json!({"mode": "live", "has_changes": plan.has_changes()}));
        let m = v.as_object_mut().expect("an object");
        if let serde_json::Value::Object(p) = serde_json::to_value(&plan).into_diagnostic()? {
            m.extend(p);
        }
        m.remove("artifacts");
        m.insert("flow_effects".into(), serde_json::to_value(&effects).into_diagnostic()?);
        if let Some((w, _)) = &rollout {
            m.insert("rollout".into(), serde_json::to_value(w).into_diagnostic()?);
        }
        super::output::print(&v);
    } else {
        print!("{}", render_plan(&plan, g.color_stdout()));
        if let Some(e) = &effects {
            print!("{}", fwc_compiler::eval::effects::render_text(e));
        }
        if let Some((w, p)) = &rollout {
            print!("\n{}", fwc_compiler::features::rollout::render_host_wave(w, p));
        }
        if let Some(out) = &req.out {
            println!("Saved the plan to {}; apply exactly it with `fwc apply {}`.", out.display(), out.display());
        }
    }
    Ok(if req.detailed_exitcode && plan.has_changes() { ExitCode::from(EXIT_CHANGES) } else { ExitCode::SUCCESS })
}
