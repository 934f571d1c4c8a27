//! Loading what to apply: compile a rule repository, read an artifact dir (`fwc compile --out`)
//! or a saved plan (`fwc plan --out`); and the plan of what was loaded.

use std::path::Path;

use fwc_compiler::artifacts::{Artifacts, MANIFEST_FILE, NFTABLES_FILE};
use miette::{miette, IntoDiagnostic, Result, WrapErr};

use super::plan::{live_hash, make_plan, LivePlan, PLAN_VERSION};
use crate::state::StateDir;

/// Where the artifacts came from.
pub enum Loaded {
    /// Compiled from a rule repository or read from an artifact dir.
    Artifacts { artifacts: Box<Artifacts>, source: String },
    /// A saved plan (`fwc plan --out`).
    Plan(Box<LivePlan>),
}

/// The rules do not compile: their diagnostics, for the caller to render once (or print as
/// JSON) instead of a report wrapped in a report.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("the rules do not compile ({} error(s))", .0.errors().count())]
pub struct CompileFailed(pub fwc_compiler::diag::Diagnostics);

/// Compile a rule repository, or read an artifact dir. Compiler warnings go to stderr (with
/// colour when `color`); errors are a [`CompileFailed`]. With `state_dir`, big set files are
/// cached there (`crate::state::set_cache`): an unchanged one is not parsed again.
pub fn load_artifacts(path: &Path, host: Option<&str>, color: bool, state_dir: Option<&Path>) -> Result<(Artifacts, String)> {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if path.join(MANIFEST_FILE).is_file() && path.join(NFTABLES_FILE).is_file() {
        let a = Artifacts::read_dir(path).into_diagnostic()?;
        return Ok((a, format!("artifacts {}", abs.display())));
    }
    let mut tree = fwc_compiler::read::source::SourceTree::from_dir(path).map_err(CompileFailed)?;
    if let Some(dir) = state_dir {
        tree.set_cache = crate::state::set_cache::DirSetStore::cache(dir);
    }
    let commit = crate::repo::checkout_commit(path);
    let (a, warnings) = fwc_compiler::compile_at(&tree, host, commit.as_deref(), jiff::Timestamp::now()).map_err(CompileFailed)?;
    if !warnings.is_empty() {
        eprint!("{}", warnings.render(color));
    }
    Ok((a, format!("rules {}", abs.display())))
}

/// A saved plan file, or else a repository / artifact dir (`state_dir`: as [`load_artifacts`]).
pub fn load(path: &Path, host: Option<&str>, color: bool, state_dir: Option<&Path>) -> Result<Loaded> {
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
    let (artifacts, source) = load_artifacts(path, host, color, state_dir)?;
    Ok(Loaded::Artifacts { artifacts: Box::new(artifacts), source })
}

/// The plan of what was loaded: a fresh plan of loaded artifacts, or a saved plan re-planned
/// after checking that the live state is still the one it was made against (stale plans are
/// refused).
pub fn plan_loaded(state: &StateDir, netns: Option<&str>, loaded: Loaded) -> Result<LivePlan> {
    match loaded {
        Loaded::Plan(saved) => {
            let now = live_hash(state, netns)?;
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
            make_plan(state, netns, saved.artifacts, saved.source)
        }
        Loaded::Artifacts { artifacts, source } => make_plan(state, netns, *artifacts, source),
    }
}
