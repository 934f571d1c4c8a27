//! fwc-compiler: rule files -> typed model -> per-host artifacts -> diff.
//!
//! Pure: the only I/O is reading the rule files ([`source::SourceTree::from_dir`]); a tree can
//! also be built in memory (the agent reads it from git objects). Never needs root.

#![forbid(unsafe_code)]

pub mod artifacts;
pub mod check;
pub mod diag;
pub mod diff;
pub mod emit;
pub mod eval;
pub mod format;
pub mod limits;
pub mod lint;
pub mod model;
pub mod policytest;
pub mod select;
pub mod setfile;
pub mod source;
pub mod suggest;
pub mod syntax;
pub mod units;

use artifacts::Artifacts;
use diag::{Diagnostic, Diagnostics};
use model::{Host, Ruleset};
use source::{SourceMap, SourceTree};

/// One host's view of a repository, parsed and checked (warnings may remain).
#[derive(Debug)]
pub struct HostView {
    pub host: Host,
    pub ruleset: Ruleset,
    pub map: SourceMap,
    pub warnings: Diagnostics,
}

/// Parse and check `host`'s view of the repository (None = the only host). Templates are
/// rendered for that host. All errors found are returned together.
pub fn load_host(tree: &SourceTree, host: Option<&str>) -> Result<HostView, Diagnostics> {
    let mut map = SourceMap::default();
    let plain = syntax::parse_plain(tree, &mut map)?;
    let host = pick_host(&plain, host)?;
    let mut ruleset = syntax::add_templates(tree, &mut map, plain, &host)?;
    limits::check_ruleset(&map, &ruleset)?;
    setfile::load_all(tree, &mut map, &mut ruleset)?;
    let mut warnings = check::check(&map, &ruleset)?;
    warnings.0.extend(lint::lint(&map, &ruleset).0);
    Ok(HostView { host, ruleset, map, warnings })
}

/// Check the repository for every host it declares; errors of all hosts are collected
/// (an error in a plain file is reported once, not once per host).
pub fn check_all(tree: &SourceTree) -> Result<Diagnostics, Diagnostics> {
    let mut map = SourceMap::default();
    let plain = syntax::parse_plain(tree, &mut map)?;
    let mut all = Diagnostics::default();
    for name in host_names(&plain) {
        let diags = match load_host(tree, Some(&name)) {
            Ok(view) => view.warnings,
            Err(errs) => errs,
        };
        for d in diags.0 {
            if !all.0.iter().any(|seen| seen.code == d.code && seen.location == d.location && seen.message == d.message) {
                all.push(d);
            }
        }
    }
    if all.has_errors() {
        Err(all)
    } else {
        Ok(all)
    }
}

/// Names of the hosts a repository declares (`localhost` when it declares none).
pub fn host_names(rs: &Ruleset) -> Vec<String> {
    if rs.hosts.is_empty() {
        vec!["localhost".into()]
    } else {
        rs.hosts.iter().map(|h| h.name.value.clone()).collect()
    }
}

/// Compile the artifacts of one host. `commit` is recorded in the manifest.
pub fn compile(tree: &SourceTree, host: Option<&str>, commit: Option<&str>) -> Result<(Artifacts, Diagnostics), Diagnostics> {
    let view = load_host(tree, host)?;
    Ok((emit_view(&view, commit), view.warnings))
}

/// Emit the artifacts of an already checked host view.
pub fn emit_view(view: &HostView, commit: Option<&str>) -> Artifacts {
    let plan = select::plan_host(&view.ruleset, &view.host);
    let nftables = emit::nft::emit(&plan);
    let qos = emit::qos::emit(&plan);
    let forward = emit::forward::emit(&plan);
    let manifest = emit::manifest::emit(&plan, &view.map, commit, &nftables, &qos, &forward);
    Artifacts { nftables, qos, forward, manifest }
}

fn pick_host(rs: &Ruleset, host: Option<&str>) -> Result<Host, Diagnostics> {
    match (host, rs.hosts.as_slice()) {
        (None, []) | (Some("localhost"), []) => Ok(select::implicit_host()),
        (None, [only]) => Ok(only.clone()),
        (Some(name), hosts) => hosts
            .iter()
            .find(|h| h.name.value == name)
            .cloned()
            .ok_or_else(|| Diagnostics::single(Diagnostic::unknown_host(name, &host_names(rs)))),
        (None, hosts) => Err(Diagnostics::single(Diagnostic::host_required(
            &hosts.iter().map(|h| h.name.value.clone()).collect::<Vec<_>>(),
        ))),
    }
}
