//! `fwc explain [DIR] FLOW`: what fwc's compiled rules do to one flow — the path through fwc's
//! chains, every rule that matched, the deciding rule with its KDL file:line:column, the DNAT
//! target, the QoS class and the userspace forwarder. `--live` explains the generation applied
//! on this host (the state dir) instead of the repository's files. `--rule IDENTITY` finds the
//! line of a rule named by its nftables comment (`fwc:filter:ssh`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fwc_compiler::diag::Location;
use fwc_compiler::eval::{self, Evaluator, Flow};
use fwc_compiler::read::source::SourceTree;
use miette::{miette, Result};

use super::Global;

#[derive(Debug, clap::Args)]
#[command(after_help = "FLOW is `PROTO [SRC[:PORT]] -> [DST]:PORT [in IF] [out IF] [input|forward|output]`:\n  \
a missing source is 198.18.200.1 (2001:db8:ffff::1), a missing destination address this host (198.18.1.1 / 2001:db8::1);\n  \
`forward` = routed through the host, `output` = sent by it (default: to this host).\n\n\
Examples:\n  fwc explain examples/edge-host \"tcp 203.0.113.5:40000 -> 198.18.1.1:8080\"\n  \
fwc explain \"udp -> :53 in eth0\" --json\n  fwc explain --live \"tcp 192.0.2.7 -> :22\"      # the generation applied here\n  \
fwc explain --rule fwc:filter:ssh                 # where the rule with this nft comment is written\n  \
fwc explain --live --rule fwc:forward:web         # ... in the generation applied here\n  \
fwc explain \"tcp -> :443\" --at 2026-12-05T20:00:00+01:00   # a during= rule at another time\n\n\
Exit codes: 0 explained, 1 error.")]
pub struct ExplainArgs {
    /// [DIR] FLOW: the rule repository (default `.`) and the flow to explain.
    #[arg(num_args = 1..=2, value_names = ["DIR", "FLOW"], required_unless_present = "rule")]
    pub args: Vec<String>,
    /// Instead of a flow: where the rule with this identity (the nft comment `fwc:<kind>:<name>`,
    /// as `nft list ruleset` shows it; `filter:ssh` works too) is written, file:line:column.
    #[arg(long, value_name = "IDENTITY")]
    pub rule: Option<String>,
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
    /// Explain the flow at this time (RFC 3339 with offset, e.g. 2026-12-01T09:00:00+01:00;
    /// default: now): rules with during= or until= decide by it.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
}

pub fn run(a: ExplainArgs, g: &Global) -> Result<ExitCode> {
    if let Some(id) = &a.rule {
        return find_rule(&a, id, g);
    }
    let (dir, flow_text) = match a.args.as_slice() {
        [f] => (PathBuf::from("."), f.clone()),
        [d, f] => (PathBuf::from(d), f.clone()),
        _ => unreachable!("clap takes one or two"),
    };
    let flow = Flow::parse(&flow_text).map_err(|e| miette!(help = e.help.clone(), "cannot read the flow \"{flow_text}\": {e}"))?;
    let at = match &a.at {
        Some(t) => fwc_compiler::policytest::parse_at(t).map_err(|e| miette!(help = "write --at 2026-12-01T09:00:00+01:00 (or …Z for UTC)", "--at: {e}"))?,
        None => jiff::Timestamp::now(),
    };
    let (artifacts, host, locs) = if a.live {
        let state = crate::state::StateDir::new(&a.state_dir);
        let generation = state.current()?.ok_or_else(|| {
            miette!(help = "apply a repository first (`fwc apply`), or explain the files with `fwc explain DIR FLOW`", "nothing is applied in {}", a.state_dir.display())
        })?;
        // Positions as the applied generation's manifest recorded them; for manifests written
        // before fwc recorded them, from DIR when it is a repository.
        let mut locs = locations(&dir, Some(&generation.artifacts.manifest.host), g).unwrap_or_default();
        locs.extend(eval::manifest_locations(&generation.artifacts.manifest));
        let host = generation.artifacts.manifest.host.clone();
        (generation.artifacts, format!("{host} (applied generation {})", generation.name), locs)
    } else {
        let Some(view) = load_view(&dir, a.host.as_deref(), g) else { return Ok(ExitCode::from(1)) };
        let artifacts = fwc_compiler::emit_view_at(&view, None, at);
        let host = view.host.name.value.clone();
        (artifacts, host, eval::rule_locations(&view))
    };
    let ev = Evaluator::new(&artifacts).map_err(|e| miette!("{e}"))?.at(at);
    let x = ev.explain(&flow).map_err(|e| miette!(help = "this is a bug in fwc's evaluator; please report it with the rules", "{e}"))?;
    // Schedules: the time the rules were evaluated at, when any rule depends on it.
    let timed = artifacts.manifest.valid_until.is_some();
    if a.json {
        let mut v = serde_json::json!({ "host": host, "explanation": x, "locations": locs });
        if timed {
            v["at"] = serde_json::Value::String(at.to_string());
        }
        println!("{}", serde_json::to_string_pretty(&v).expect("explanation serializes"));
    } else {
        print!("{}", eval::render::text(&x, &host, &locs));
        if timed {
            println!("at:      {at} (rules with during=/until= decided by this time; --at to change it)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--rule IDENTITY`: the rule's position and summary, from DIR's files or (`--live`) the applied
/// generation's manifest.
fn find_rule(a: &ExplainArgs, id: &str, g: &Global) -> Result<ExitCode> {
    use fwc_compiler::artifacts::parse_rule_comment;
    let ident = if id.starts_with("fwc:") { id.to_string() } else { format!("fwc:{id}") };
    let (kind, name) = parse_rule_comment(&ident).ok_or_else(|| {
        miette!(help = "give the comment nft shows on fwc's rules: fwc:<kind>:<name>, kind one of filter, forward, shape, set, chain", "\"{id}\" is not an fwc rule identity")
    })?;
    let dir = PathBuf::from(a.args.first().map(String::as_str).unwrap_or("."));
    let (manifest, locs, whence) = if a.live {
        let state = crate::state::StateDir::new(&a.state_dir);
        let generation = state.current()?.ok_or_else(|| miette!(help = "without --live, DIR's files are searched", "nothing is applied in {}", a.state_dir.display()))?;
        let locs = eval::manifest_locations(&generation.artifacts.manifest);
        let whence = format!("applied generation {}{}", generation.name, generation.meta.commit.as_deref().map(|c| format!(", commit {}", &c[..c.len().min(12)])).unwrap_or_default());
        (generation.artifacts.manifest, locs, whence)
    } else {
        let Some(view) = load_view(&dir, a.host.as_deref(), g) else { return Ok(ExitCode::from(1)) };
        (fwc_compiler::emit_view_at(&view, None, jiff::Timestamp::now()).manifest, eval::rule_locations(&view), format!("{}", dir.display()))
    };
    let Some(rule) = manifest.rules.iter().find(|r| r.kind == kind && r.name == name) else {
        return Err(miette!(help = "`fwc explain --rule` knows the rules of one host (--host); fwc's own rules have no comment", "no {} \"{name}\" on host {} ({whence})", kind.as_str(), manifest.host));
    };
    let at = locs.get(&ident).map(|l| format!("{}:{}:{}", l.file, l.line, l.column));
    if a.json {
        let v = serde_json::json!({ "identity": ident, "host": manifest.host, "location": locs.get(&ident), "rule": rule, "from": whence });
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
    } else {
        println!("{ident}  {}", at.as_deref().unwrap_or("(position not recorded)"));
        println!("  {} \"{name}\" on host {}: {}", kind.as_str(), manifest.host, rule.summary);
        println!("  backends: {} ({})", rule.backends.iter().map(|b| b.as_str()).collect::<Vec<_>>().join(", "), rule.reason);
        println!("  from: {whence}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `dir`'s rules for `host`, checked; diagnostics are printed (None: exit 1).
fn load_view(dir: &Path, host: Option<&str>, g: &Global) -> Option<fwc_compiler::HostView> {
    let loaded = SourceTree::from_dir(dir).and_then(|tree| fwc_compiler::load_host(&tree, host));
    match loaded {
        Ok(view) => Some(view),
        Err(d) => {
            eprint!("{}", d.render(g.color_stderr()));
            None
        }
    }
}

/// Rule locations of `dir`'s files for `host`, if `dir` is a rule repository that compiles.
fn locations(dir: &Path, host: Option<&str>, _g: &Global) -> Option<BTreeMap<String, Location>> {
    if !dir.join(fwc_compiler::read::source::ROOT_FILE).is_file() {
        return None;
    }
    let tree = SourceTree::from_dir(dir).ok()?;
    let view = fwc_compiler::load_host(&tree, host).ok()?;
    Some(eval::rule_locations(&view))
}

/// Flow effects of a live plan (`fwc plan` without `--from`): the generation applied in
/// `state` against the rules in `dir` (None when `dir` is not a rule repository or does not compile).
pub fn live_flow_effects(state: &crate::state::StateDir, dir: &Path, host: Option<&str>, netns: Option<&str>) -> Result<Option<fwc_compiler::eval::effects::FlowEffects>> {
    if !dir.join(fwc_compiler::read::source::ROOT_FILE).is_file() {
        return Ok(None);
    }
    let Ok(tree) = SourceTree::from_dir(dir) else { return Ok(None) };
    let applied = state.current()?.map(|g| g.artifacts);
    let now = jiff::Timestamp::now();
    // The host's other tables (an original firewall still loaded beside fwc, Docker's, …)
    // decide flows too: both sides are evaluated with them, so a flow's fate is what the host
    // does now and after the apply. Tables the evaluator cannot run are left out, said so.
    if let Some(foreign) = other_tables(netns) {
        match fwc_compiler::eval::effects::against_applied_beside(applied.as_ref(), &tree, host, now, &foreign) {
            Some(Ok(e)) => return Ok(Some(e)),
            Some(Err(e)) => eprintln!("note: flow effects leave the host's other nftables tables out (fwc's evaluator cannot run them: {e})"),
            None => return Ok(None),
        }
    }
    match fwc_compiler::eval::effects::against_applied_at(applied.as_ref(), &tree, host, now) {
        None => Ok(None),
        Some(Ok(e)) => Ok(Some(e)),
        Some(Err(e)) => Err(miette!(help = "this is a bug in fwc's evaluator; please report it with the rules", "cannot compute flow effects: {e}")),
    }
}

/// This host's (or network namespace's) nftables tables other than fwc's own (`nft -j list
/// ruleset`), or `None` when there are none or nft cannot list them (not root, no nft).
fn other_tables(netns: Option<&str>) -> Option<serde_json::Value> {
    let own = |o: &serde_json::Value| {
        let body = o.as_object().and_then(|m| m.values().next());
        let table = body.and_then(|b| b.get(if o.get("table").is_some() { "name" } else { "table" })).and_then(serde_json::Value::as_str);
        table.is_some_and(|t| t == "fwc" || t.starts_with("fwc-") || t.starts_with("fwc_"))
    };
    // The full listing carries every element of fwc's own sets (seconds for a million-entry
    // blocklist): the terse one says first whether any other table is there at all.
    if let Ok(terse) = crate::backend::nft::NftCmd::new(netns.map(str::to_string)).list_ruleset_terse() {
        let tables = terse.get("nftables").and_then(serde_json::Value::as_array).map(|a| a.iter().filter(|o| o.get("table").is_some()).collect::<Vec<_>>()).unwrap_or_default();
        if tables.iter().all(|o| own(o)) {
            return None;
        }
    }
    let listing = match crate::import::source::live_native(netns) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("note: flow effects leave the host's other nftables tables out ({e})");
            return None;
        }
    };
    if listing.to_string().contains(crate::import::source::XT_MARK) {
        eprintln!("note: flow effects leave the host's other nftables tables out (an iptables match nftables cannot express is loaded)");
        return None;
    }
    let objs: Vec<serde_json::Value> = listing.get("nftables")?.as_array()?.iter().filter(|o| o.get("metainfo").is_none() && !own(o)).cloned().collect();
    if !objs.iter().any(|o| o.get("chain").is_some()) {
        return None;
    }
    Some(serde_json::json!({ "nftables": objs }))
}
