//! `fwc explain [DIR] FLOW`: what fwc's compiled rules do to one flow — the path through fwc's
//! chains, every rule that matched, the deciding rule with its KDL file:line:column, the DNAT
//! target, the QoS class and the userspace forwarder. `--live` explains the generation applied
//! on this host (the state dir) instead of the repository's files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fwc_compiler::diag::Location;
use fwc_compiler::eval::{self, Evaluator, Flow};
use fwc_compiler::source::SourceTree;
use miette::{miette, Result};

use super::Global;

#[derive(Debug, clap::Args)]
#[command(after_help = "FLOW is `PROTO [SRC[:PORT]] -> [DST]:PORT [in IF] [out IF] [input|forward|output]`:\n  \
a missing source is 198.18.200.1 (2001:db8:ffff::1), a missing destination address this host (198.18.1.1 / 2001:db8::1);\n  \
`forward` = routed through the host, `output` = sent by it (default: to this host).\n\n\
Examples:\n  fwc explain examples/edge-host \"tcp 203.0.113.5:40000 -> 198.18.1.1:8080\"\n  \
fwc explain \"udp -> :53 in eth0\" --json\n  fwc explain --live \"tcp 192.0.2.7 -> :22\"      # the generation applied here\n\n\
Exit codes: 0 explained, 1 error.")]
pub struct ExplainArgs {
    /// [DIR] FLOW: the rule repository (default `.`) and the flow to explain.
    #[arg(num_args = 1..=2, value_names = ["DIR", "FLOW"], required = true)]
    pub args: Vec<String>,
    /// Host to compile for (repositories that declare several).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub host: Option<String>,
    /// Explain the generation applied on this host (read from the state dir) instead of DIR's files.
    #[arg(long)]
    pub live: bool,
    /// State dir for --live.
    #[arg(long, env = "FWC_STATE_DIR", default_value = crate::state::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Print the explanation as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ExplainArgs, g: &Global) -> Result<ExitCode> {
    let (dir, flow_text) = match a.args.as_slice() {
        [f] => (PathBuf::from("."), f.clone()),
        [d, f] => (PathBuf::from(d), f.clone()),
        _ => unreachable!("clap takes one or two"),
    };
    let flow = Flow::parse(&flow_text).map_err(|e| miette!(help = e.help.clone(), "cannot read the flow \"{flow_text}\": {e}"))?;
    let (artifacts, host, locs) = if a.live {
        let state = crate::state::StateDir::new(&a.state_dir);
        let generation = state.current()?.ok_or_else(|| {
            miette!(help = "apply a repository first (`fwc apply`), or explain the files with `fwc explain DIR FLOW`", "nothing is applied in {}", a.state_dir.display())
        })?;
        // The applied artifacts carry rule identities; positions come from DIR when it is a repository.
        let locs = locations(&dir, Some(&generation.artifacts.manifest.host), g).unwrap_or_default();
        let host = generation.artifacts.manifest.host.clone();
        (generation.artifacts, format!("{host} (applied generation {})", generation.name), locs)
    } else {
        let tree = match SourceTree::from_dir(&dir) {
            Ok(t) => t,
            Err(d) => {
                eprint!("{}", d.render(g.color_stderr()));
                return Ok(ExitCode::from(1));
            }
        };
        match fwc_compiler::load_host(&tree, a.host.as_deref()) {
            Ok(view) => {
                let artifacts = fwc_compiler::emit_view(&view, None);
                let host = view.host.name.value.clone();
                (artifacts, host, eval::rule_locations(&view))
            }
            Err(d) => {
                eprint!("{}", d.render(g.color_stderr()));
                return Ok(ExitCode::from(1));
            }
        }
    };
    let ev = Evaluator::new(&artifacts).map_err(|e| miette!("{e}"))?;
    let x = ev.explain(&flow).map_err(|e| miette!(help = "this is a bug in fwc's evaluator; please report it with the rules", "{e}"))?;
    if a.json {
        let v = serde_json::json!({ "host": host, "explanation": x, "locations": locs });
        println!("{}", serde_json::to_string_pretty(&v).expect("explanation serializes"));
    } else {
        print!("{}", eval::render::text(&x, &host, &locs));
    }
    Ok(ExitCode::SUCCESS)
}

/// Rule locations of `dir`'s files for `host`, if `dir` is a rule repository that compiles.
fn locations(dir: &Path, host: Option<&str>, _g: &Global) -> Option<BTreeMap<String, Location>> {
    if !dir.join(fwc_compiler::source::ROOT_FILE).is_file() {
        return None;
    }
    let tree = SourceTree::from_dir(dir).ok()?;
    let view = fwc_compiler::load_host(&tree, host).ok()?;
    Some(eval::rule_locations(&view))
}

/// Flow effects of a live plan (`fwc plan` without `--from`): the generation applied in
/// `state` against the rules in `dir` (None when `dir` is not a rule repository or does not compile).
pub fn live_flow_effects(state: &crate::state::StateDir, dir: &Path, host: Option<&str>) -> Result<Option<fwc_compiler::eval::effects::FlowEffects>> {
    if !dir.join(fwc_compiler::source::ROOT_FILE).is_file() {
        return Ok(None);
    }
    let Ok(tree) = SourceTree::from_dir(dir) else { return Ok(None) };
    let applied = state.current()?.map(|g| g.artifacts);
    match fwc_compiler::eval::effects::against_applied(applied.as_ref(), &tree, host) {
        None => Ok(None),
        Some(Ok(e)) => Ok(Some(e)),
        Some(Err(e)) => Err(miette!(help = "this is a bug in fwc's evaluator; please report it with the rules", "cannot compute flow effects: {e}")),
    }
}
