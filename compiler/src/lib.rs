//! fwc-compiler: rule files -> typed model -> per-host artifacts -> diff.
//!
//! Pure: the only I/O is reading the rule files ([`read::source::SourceTree::from_dir`]); a tree can
//! also be built in memory (the agent reads it from git objects). Never needs root.

#![forbid(unsafe_code)]

pub mod artifacts;
pub mod check;
pub mod diag;
pub mod diff;
pub mod emit;
pub mod eval;
pub mod features;
pub mod format;
pub mod lint;
pub mod model;
pub mod parallel;
pub mod place;
pub mod policytest;
pub mod read;
pub mod suggest;
pub mod view;

use artifacts::{Artifacts, JsonArtifacts};
use diag::{Diagnostic, Diagnostics};
use model::{Host, Ruleset};
use read::source::{SourceMap, SourceTree};
pub use view::HostView;

/// Parse and check `host`'s view of the repository (None = the only host). Templates are
/// rendered for that host. All errors found are returned together.
pub fn load_host(tree: &SourceTree, host: Option<&str>) -> Result<HostView, Diagnostics> {
    ParsedRepo::parse(tree)?.into_host(tree, host)
}

/// A repository's plain (non-template) files, parsed once and shared by every host's view.
#[derive(Debug, Clone)]
pub struct ParsedRepo {
    map: SourceMap,
    plain: Ruleset,
    /// The `rollout` policy's diagnostics: checked once per repository (it concerns the whole
    /// fleet), reported with every host's.
    rollout: Diagnostics,
}

impl ParsedRepo {
    /// Parse every plain file of `tree` (on all cores).
    pub fn parse(tree: &SourceTree) -> Result<ParsedRepo, Diagnostics> {
        let mut map = SourceMap::default();
        let plain = read::syntax::parse_plain(tree, &mut map)?;
        let rollout = features::rollout::check(&map, &plain);
        Ok(ParsedRepo { map, plain, rollout })
    }

    /// The hosts the repository declares (`localhost` when it declares none).
    pub fn host_names(&self) -> Vec<String> {
        host_names(&self.plain)
    }

    /// `host`'s view: the shared parse plus the templates rendered for it, its set files and
    /// the checks. The same as [`load_host`] without parsing the plain files again.
    pub fn load_host(&self, tree: &SourceTree, host: Option<&str>) -> Result<HostView, Diagnostics> {
        self.clone().into_host(tree, host)
    }

    /// [`ParsedRepo::load_host`] for the last (or only) host: the parse becomes the view
    /// without a copy of the model and sources (a one-host compile held both).
    pub fn into_host(self, tree: &SourceTree, host: Option<&str>) -> Result<HostView, Diagnostics> {
        let host = pick_host(&self.plain, host)?;
        let ParsedRepo { mut map, plain, rollout } = self;
        let mut ruleset = read::syntax::add_templates(tree, &mut map, plain, &host)?;
        read::limits::check_ruleset(&map, &ruleset)?;
        read::setfile::load_all(tree, &mut map, &mut ruleset)?;
        ruleset.shrink_to_fit();
        let mut warnings = match check::check(&map, &ruleset) {
            Ok(w) if !rollout.has_errors() => w,
            Ok(mut all) | Err(mut all) => {
                all.extend(rollout);
                return Err(all);
            }
        };
        warnings.extend(rollout);
        warnings.0.extend(lint::lint(&map, &ruleset).0);
        Ok(HostView { host, ruleset, map, warnings })
    }
}

/// Check the repository for every host it declares; errors of all hosts are collected
/// (an error in a plain file is reported once, not once per host).
pub fn check_all(tree: &SourceTree) -> Result<Diagnostics, Diagnostics> {
    check_fleet(tree).map(|f| f.warnings)
}

/// A whole repository checked: its hosts and the warnings of all of them.
#[derive(Debug)]
pub struct FleetCheck {
    pub hosts: Vec<String>,
    pub warnings: Diagnostics,
}

/// [`check_all`], also naming the hosts. The plain files are parsed once; hosts are checked
/// on every core, and their diagnostics merged in host order (deterministic).
pub fn check_fleet(tree: &SourceTree) -> Result<FleetCheck, Diagnostics> {
    check_fleet_at(tree, jiff::Timestamp::UNIX_EPOCH)
}

/// One host's compiled artifacts and its warnings.
#[derive(Debug)]
pub struct HostArtifacts {
    pub host: String,
    pub artifacts: Artifacts,
    pub warnings: Diagnostics,
}

/// Compile the artifacts of every host the repository declares, in host order. The plain
/// files are parsed once; hosts are compiled on every core. Byte for byte what [`compile`]
/// gives for each host. Errors of all hosts are returned together (each once).
pub fn compile_all(tree: &SourceTree, commit: Option<&str>) -> Result<Vec<HostArtifacts>, Diagnostics> {
    compile_all_at(tree, commit, jiff::Timestamp::UNIX_EPOCH)
}

/// Diagnostics of several hosts, in order, each distinct one once.
pub fn merge_unique(lists: Vec<Diagnostics>) -> Diagnostics {
    let mut seen = std::collections::HashSet::new();
    let mut all = Diagnostics::default();
    for d in lists.into_iter().flat_map(|l| l.0) {
        if seen.insert((d.code.clone(), format!("{:?}", d.location), d.message.clone())) {
            all.push(d);
        }
    }
    all
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
    compile_at(tree, host, commit, jiff::Timestamp::UNIX_EPOCH)
}

/// Emit the artifacts of an already checked host view, as of the Unix epoch: for policies
/// without schedules (`during=`, `until=`); whoever applies calls [`emit_view_at`] with the time.
pub fn emit_view(view: &HostView, commit: Option<&str>) -> Artifacts {
    emit_view_at(view, commit, jiff::Timestamp::UNIX_EPOCH)
}

/// Emit the artifacts of an already checked host view as they hold at `at`: rules past their
/// `until=` left out, `during=` windows in UTC for their zone's offset at `at`, and the
/// manifest's `valid_until` saying when to compile again (schedules only: without any, the
/// time changes nothing).
pub fn emit_view_at(view: &HostView, commit: Option<&str>, at: jiff::Timestamp) -> Artifacts {
    let emitted = emit_with(
        view,
        commit,
        at,
        |plan| {
            let doc = emit::nft::emit(plan);
            // Kept in the document: whoever applies it (plan, prepare, verify, record) asks again.
            let sha256 = doc.sha256().to_string();
            Ok::<_, std::convert::Infallible>((doc, sha256))
        },
        |nftables, JsonArtifacts { qos, forward, manifest }| Ok(Artifacts { nftables, qos, forward, manifest: manifest.collect() }),
    );
    let Ok(artifacts) = emitted;
    artifacts
}

/// The three JSON artifacts of [`emit_view_to`], while the host's plan is alive: the manifest's
/// rules are made as `manifest.json` is written ([`emit::manifest::Streamed`]).
pub type StreamedArtifacts<'p> = JsonArtifacts<emit::manifest::Streamed<'p>>;

/// [`emit_view_at`] with `nftables.json` written into `nftables` as it is emitted, in blocks,
/// and hashed on the way: its text is never held whole (`fwc compile --out`). Then `rest` is
/// given the other three artifacts, to write after it ([`JsonArtifacts::write_file`]): the
/// manifest's rules are made while it is written, never held together. The files' bytes are
/// those of [`emit_view_at`]'s artifacts.
pub fn emit_view_to<R>(
    view: &HostView,
    commit: Option<&str>,
    at: jiff::Timestamp,
    nftables: &mut dyn std::io::Write,
    rest: impl FnOnce(&StreamedArtifacts<'_>) -> std::io::Result<R>,
) -> std::io::Result<R> {
    emit_with(view, commit, at, |plan| emit::nft::emit_to(plan, nftables).map(|s| ((), s.sha256)), |(), json| rest(&json))
}

/// The host's plan at `at`, its nftables document made by `nft` (which also gives the document's
/// sha256), then the other artifacts and the manifest (its rules not made yet), given to `then`
/// while the plan is alive.
fn emit_with<N, R, E>(
    view: &HostView,
    commit: Option<&str>,
    at: jiff::Timestamp,
    nft: impl FnOnce(&place::select::HostPlan) -> Result<(N, String), E>,
    then: impl FnOnce(N, StreamedArtifacts<'_>) -> Result<R, E>,
) -> Result<R, E> {
    let resolved;
    let ruleset = if features::schedule::any(&view.ruleset) {
        resolved = features::schedule::resolve(&view.ruleset, at);
        &resolved
    } else {
        &view.ruleset
    };
    let plan = place::select::plan_host(ruleset, &view.host);
    let (nftables, nft_sha256) = nft(&plan)?;
    let qos = emit::qos::emit(&plan);
    let forward = emit::forward::emit(&plan);
    let mut manifest = emit::manifest::streamed(&plan, &view.map, commit, &nft_sha256, &qos, &forward);
    manifest.valid_until = features::schedule::valid_until(&view.ruleset, at).map(|t| t.to_string());
    then(nftables, JsonArtifacts { qos, forward, manifest })
}

/// [`compile`] as of `at` ([`emit_view_at`]); the warnings include the schedule notes
/// (`fwc::rule-expires-soon`, `fwc::rule-expired`) for `at`.
pub fn compile_at(tree: &SourceTree, host: Option<&str>, commit: Option<&str>, at: jiff::Timestamp) -> Result<(Artifacts, Diagnostics), Diagnostics> {
    let (view, warnings) = load_host_at(tree, host, at)?;
    Ok((emit_view_at(&view, commit, at), warnings))
}

/// [`load_host`] and the warnings of a compile as of `at` (the view's, with the schedule
/// notes): what [`compile_at`] reports, before anything is emitted (`fwc compile --out`
/// then writes the files as they are emitted: [`emit_view_to`]).
pub fn load_host_at(tree: &SourceTree, host: Option<&str>, at: jiff::Timestamp) -> Result<(HostView, Diagnostics), Diagnostics> {
    let view = load_host(tree, host)?;
    let mut warnings = view.warnings.clone();
    warnings.extend(features::schedule::notes(&view.map, &view.ruleset, at));
    Ok((view, warnings))
}

/// [`compile_all`] as of `at` (see [`compile_at`]).
pub fn compile_all_at(tree: &SourceTree, commit: Option<&str>, at: jiff::Timestamp) -> Result<Vec<HostArtifacts>, Diagnostics> {
    let repo = ParsedRepo::parse(tree)?;
    let hosts = repo.host_names();
    let results = parallel::map_ordered(&hosts, |name| {
        let view = repo.load_host(tree, Some(name))?;
        let mut warnings = view.warnings.clone();
        warnings.extend(features::schedule::notes(&view.map, &view.ruleset, at));
        Ok(HostArtifacts { host: name.clone(), artifacts: emit_view_at(&view, commit, at), warnings })
    });
    let mut compiled = Vec::with_capacity(hosts.len());
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(h) => compiled.push(h),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(compiled)
    } else {
        Err(merge_unique(errors))
    }
}

/// [`check_fleet`] with the schedule notes for `at` (`fwc check`).
pub fn check_fleet_at(tree: &SourceTree, at: jiff::Timestamp) -> Result<FleetCheck, Diagnostics> {
    let repo = ParsedRepo::parse(tree)?;
    let hosts = repo.host_names();
    let per_host = parallel::map_ordered(&hosts, |name| match repo.load_host(tree, Some(name)) {
        Ok(view) => {
            let mut w = view.warnings;
            w.extend(features::schedule::notes(&view.map, &view.ruleset, at));
            w
        }
        Err(errs) => errs,
    });
    let all = merge_unique(per_host);
    if all.has_errors() {
        Err(all)
    } else {
        Ok(FleetCheck { hosts, warnings: all })
    }
}

fn pick_host(rs: &Ruleset, host: Option<&str>) -> Result<Host, Diagnostics> {
    match (host, rs.hosts.as_slice()) {
        (None, []) | (Some("localhost"), []) => Ok(place::select::implicit_host()),
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
