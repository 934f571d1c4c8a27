//! The fleet rollout policy: the checks of a `rollout { wave … }` block that need the whole
//! policy and the declared hosts, its compilation to [`RolloutPolicy`], and the assignment of
//! hosts to waves ([`wave_of`], [`fleet_plan`]) that `fwc plan`, the controller and the agent share.

use std::collections::BTreeMap;

use fwc_artifacts::rollout::{host_bucket, Gate, GateOp, MaxParallel, MaxUnavailable, RolloutPolicy, Wave, WaveSelect, Window, DEFAULT_MISSING_TIMEOUT_SECS, DEFAULT_SELF_CHECK_ATTEMPTS, DEFAULT_SELF_CHECK_SPACING_MS};
use serde::Serialize;

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::{Host, RolloutDecl, Ruleset, Selector, Span, WaveDecl};
use crate::read::source::{SourceMap, SourceTree};

/// A host the repository declares and the wave it falls in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetHost {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Index into the policy's waves; `None` without a policy.
    pub wave: Option<usize>,
}

/// A repository's rollout policy and its hosts by wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetPlan {
    /// `None`: the repository has no `rollout` block (every agent applies the branch tip).
    pub policy: Option<RolloutPolicy>,
    /// The `host` blocks, sorted by name (empty when the repository declares none).
    pub hosts: Vec<FleetHost>,
}

impl FleetPlan {
    /// The declared hosts of wave `index`, in name order.
    pub fn hosts_of(&self, index: usize) -> impl Iterator<Item = &FleetHost> {
        self.hosts.iter().filter(move |h| h.wave == Some(index))
    }
}

/// Parse the repository's plain files, check its `rollout` policy against its hosts, and
/// assign every declared host its wave. Errors (of the parse or of the policy) are returned
/// together, as `compile` does; the rule checks of each host are `check`'s job, not this.
pub fn fleet_plan(tree: &SourceTree) -> Result<FleetPlan, Diagnostics> {
    let mut map = SourceMap::default();
    let plain = crate::read::syntax::parse_plain(tree, &mut map)?;
    let diags = check(&map, &plain);
    if diags.has_errors() {
        return Err(diags);
    }
    Ok(plan_of(&plain))
}

/// The plan of an already checked ruleset.
pub fn plan_of(rs: &Ruleset) -> FleetPlan {
    let policy = rs.rollouts.first().map(compile);
    let mut hosts: Vec<FleetHost> = rs
        .hosts
        .iter()
        .map(|h| FleetHost {
            name: h.name.value.clone(),
            labels: h.labels.clone(),
            wave: policy.as_ref().map(|p| wave_of(p, &h.name.value, &h.labels)),
        })
        .collect();
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    FleetPlan { policy, hosts }
}

/// The wave of any host (declared or not: an undeclared host has no labels). The first wave
/// that takes it: `on=` as a rule's `on=` matches, `percent=p` when the host's stable
/// [`host_bucket`] is below `p * 100`, the last wave every host left. A policy that `check`
/// accepted always ends with such a wave; for any other, hosts no wave takes fall in the last.
pub fn wave_of(policy: &RolloutPolicy, host: &str, labels: &BTreeMap<String, String>) -> usize {
    let bucket = host_bucket(host);
    for (i, w) in policy.waves.iter().enumerate() {
        let takes = match &w.select {
            WaveSelect::On(text) => crate::read::syntax::parse_selector(text).is_ok_and(|s| s.matches_name(host, labels)),
            WaveSelect::Percent(p) => bucket < u32::from(*p) * 100,
            WaveSelect::Rest => true,
        };
        if takes {
            return i;
        }
    }
    policy.waves.len().saturating_sub(1)
}

/// A checked declaration as the contract type.
pub fn compile(decl: &RolloutDecl) -> RolloutPolicy {
    let waves = decl
        .waves
        .iter()
        .map(|w| Wave {
            name: w.name.value.clone(),
            select: select_of(w),
            soak_secs: w.soak_secs.as_ref().map_or(0, |s| s.value),
            max_unavailable: w.max_unavailable.as_ref().map_or(MaxUnavailable::default(), |m| m.value),
            gates: w
                .gates
                .iter()
                .filter_map(|g| {
                    let (op, threshold) = match (&g.max, &g.min) {
                        (Some(m), _) => (GateOp::AtMost, m.value),
                        (None, Some(m)) => (GateOp::AtLeast, m.value),
                        (None, None) => return None,
                    };
                    Some(Gate { name: g.name.value.clone(), query: g.query.as_ref()?.value.clone(), op, threshold, allow_empty: g.allow_empty, grace_secs: g.grace_secs.as_ref().map_or(0, |s| s.value) })
                })
                .collect(),
            max_parallel: w.max_parallel.as_ref().map(|m| m.value),
        })
        .collect();
    RolloutPolicy {
        waves,
        probes: decl.probes.iter().filter_map(|p| p.probe.as_ref().map(|p| p.value.clone())).collect(),
        windows: decl.windows.iter().map(|w| w.value.clone()).collect(),
        on_failure: decl.on_failure.as_ref().map(|o| o.value).unwrap_or_default(),
        missing_timeout_secs: decl.missing_timeout_secs.as_ref().map_or(DEFAULT_MISSING_TIMEOUT_SECS, |m| m.value),
        self_check_attempts: decl.self_check_attempts.as_ref().map_or(DEFAULT_SELF_CHECK_ATTEMPTS, |m| m.value as u32),
        self_check_spacing_ms: decl.self_check_spacing_ms.as_ref().map_or(DEFAULT_SELF_CHECK_SPACING_MS, |m| m.value),
    }
}

/// A window for people: `allow Mon-Fri 09:00-17:00 UTC+01:00`.
pub fn describe_window(w: &Window) -> String {
    let tz = match w.offset_min {
        _ if w.tz.is_some() => w.tz.clone().unwrap_or_default(),
        0 => "UTC".to_string(),
        o => format!("UTC{}{:02}:{:02}", if o < 0 { '-' } else { '+' }, o.unsigned_abs() / 60, o.unsigned_abs() % 60),
    };
    format!("{} {} {tz}", if w.allow { "allow" } else { "deny" }, crate::features::timewindow::describe(&w.window))
}

fn select_of(w: &WaveDecl) -> WaveSelect {
    match (&w.on, &w.percent) {
        (Some(on), _) => WaveSelect::On(on.value.1.clone()),
        (None, Some(p)) => WaveSelect::Percent(p.value),
        (None, None) => WaveSelect::Rest,
    }
}

/// Where one host stands in the policy: what `fwc plan` adds for a one-host plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostWave {
    pub host: String,
    /// 0-based, as `fwc_rollout_wave` reports it.
    pub index: usize,
    pub wave: String,
    pub waves: usize,
    /// Whether a `host` block declares it (an undeclared host has no labels).
    pub declared: bool,
}

impl FleetPlan {
    /// The wave of `host` (declared or not); `None` without a policy.
    pub fn host_wave(&self, host: &str) -> Option<HostWave> {
        let policy = self.policy.as_ref()?;
        let declared = self.hosts.iter().find(|h| h.name == host);
        let none = BTreeMap::new();
        let index = wave_of(policy, host, declared.map_or(&none, |h| &h.labels));
        Some(HostWave { host: host.into(), index, wave: policy.waves[index].name.clone(), waves: policy.waves.len(), declared: declared.is_some() })
    }
}

/// How a wave picks its hosts, in words.
pub fn describe_select(select: &WaveSelect) -> String {
    match select {
        WaveSelect::On(s) => format!("on=\"{s}\""),
        WaveSelect::Percent(p) => format!("the first {p}% of the fleet by a stable hash of the name (cumulative; hosts of earlier waves excluded)"),
        WaveSelect::Rest => "every host left".into(),
    }
}

/// The line `fwc plan` prints under a one-host plan.
pub fn render_host_wave(w: &HostWave, policy: &RolloutPolicy) -> String {
    let undeclared = if w.declared { "" } else { " (not declared in a host block: no labels)" };
    format!(
        "Rollout: host {}{undeclared} is in wave \"{}\", {} of {} ({}). `fwc plan --waves` lists the fleet.\n",
        w.host,
        w.wave,
        w.index + 1,
        w.waves,
        describe_select(&policy.waves[w.index].select)
    )
}

/// `fwc plan --waves`: the policy and every declared host by wave, for people.
pub fn render_waves(plan: &FleetPlan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let Some(policy) = &plan.policy else {
        s.push_str("No rollout policy: every agent applies the branch tip as soon as it sees it.\n");
        return s;
    };
    let _ = writeln!(s, "Rollout policy: {} wave(s), {} declared host(s).", policy.waves.len(), plan.hosts.len());
    let on_failure = match policy.on_failure {
        fwc_artifacts::rollout::OnFailure::Halt => "halt (promoted hosts keep the commit)",
        fwc_artifacts::rollout::OnFailure::Rollback => "rollback (promoted hosts go back to the stable commit)",
    };
    let _ = writeln!(s, "On failure: {on_failure}; missing hosts of the wave being promoted pause the rollout after {} (missing-timeout).", format_secs(policy.missing_timeout_secs));
    let spacing = if policy.self_check_spacing_ms % 1000 == 0 { format_secs(policy.self_check_spacing_ms / 1000) } else { format!("{}ms", policy.self_check_spacing_ms) };
    let _ = writeln!(
        s,
        "Self-check after every apply: {} attempt(s) (self-check-attempts), {spacing} before the second, doubling after each failure (self-check-spacing); then the agent reverts the apply.",
        policy.self_check_attempts
    );
    for (i, w) in policy.waves.iter().enumerate() {
        let hosts: Vec<&str> = plan.hosts_of(i).map(|h| h.name.as_str()).collect();
        let _ = write!(s, "\nwave {} \"{}\": {}; {} host(s)", i + 1, w.name, describe_select(&w.select), hosts.len());
        if w.soak_secs > 0 {
            let _ = write!(s, "; soak {}", format_secs(w.soak_secs));
        }
        match w.max_unavailable {
            MaxUnavailable::Hosts(0) => {}
            MaxUnavailable::Hosts(n) => {
                let _ = write!(s, "; max-unavailable {n}");
            }
            MaxUnavailable::Percent(p) => {
                let _ = write!(s, "; max-unavailable {p}%");
            }
        }
        match w.max_parallel {
            None => {}
            Some(MaxParallel::Hosts(n)) => {
                let _ = write!(s, "; max-parallel {n}");
            }
            Some(MaxParallel::Percent(p)) => {
                let _ = write!(s, "; max-parallel {p}%");
            }
        }
        s.push('\n');
        for g in &w.gates {
            let (op, what) = match g.op {
                GateOp::AtMost => ("<=", "max"),
                GateOp::AtLeast => (">=", "min"),
            };
            let empty = if g.allow_empty { ", an empty result passes" } else { "" };
            let grace = if g.grace_secs > 0 { format!("; no answer (an error, or no samples) is waited for {} before it fails", format_secs(g.grace_secs)) } else { String::new() };
            let _ = writeln!(s, "  gate \"{}\" ({what}): every sample of {} {op} {}{empty}{grace}", g.name, g.query, g.threshold);
        }
        for h in hosts {
            let _ = writeln!(s, "  {h}");
        }
    }
    if plan.hosts.is_empty() {
        s.push_str("\nNo host block declares the fleet: each agent finds its wave from its --host name (`fwc plan --waves --host NAME`).\n");
    }
    if !policy.windows.is_empty() {
        s.push_str("\nPromotion windows (a wave is promoted only inside an allow window, if any, and outside every deny window):\n");
        for w in &policy.windows {
            let _ = writeln!(s, "  {}", describe_window(w));
        }
    }
    if !policy.probes.is_empty() {
        s.push_str("\nSelf-check probes after every apply (besides fetching the git remote):\n");
        for p in &policy.probes {
            let _ = match p {
                fwc_artifacts::rollout::Probe::Tcp { name, address } => writeln!(s, "  probe \"{name}\": TCP connect to {address}"),
                fwc_artifacts::rollout::Probe::Http { name, url } => writeln!(s, "  probe \"{name}\": HTTP GET {url}, 2xx"),
            };
        }
    }
    s
}

/// The checks of the policy as a whole (the values were checked when read), once per
/// repository (`ParsedRepo::parse`; every host's compile reports them): one block, at least
/// one wave, unique names, how each wave selects, the last wave taking the rest,
/// gates with a query; warnings for selectors and waves that get no declared host.
pub fn check(map: &SourceMap, rs: &Ruleset) -> Diagnostics {
    let mut out = Diagnostics::default();
    let Some(decl) = rs.rollouts.first() else { return out };
    let err = |code: &str, rule: &str, msg: String, span: Span, label: &str, help: String| {
        Diagnostic::error(code, msg).at(map, span, label).rule(rule).help(help)
    };
    for extra in &rs.rollouts[1..] {
        out.push(err(
            "rollout-duplicate",
            "rollout",
            "a second rollout block".into(),
            extra.span,
            "second one",
            format!("a repository has one rollout policy (the first is at {}); merge the waves into it", where_is(map, decl.span)),
        ));
    }
    if decl.waves.is_empty() {
        out.push(err(
            "rollout-no-waves",
            "rollout",
            "this rollout has no wave".into(),
            decl.span,
            "no `wave` inside",
            "list the waves in promotion order, the last one taking the rest: rollout { wave \"canary\" on=\"role=canary\"; wave \"all\" }".into(),
        ));
        return out;
    }
    unique(&mut out, map, "wave", decl.waves.iter().map(|w| (format!("wave \"{}\"", w.name.value), &w.name)));
    unique(&mut out, map, "probe", decl.probes.iter().map(|p| (format!("probe \"{}\"", p.name.value), &p.name)));
    let last = decl.waves.len() - 1;
    for (i, w) in decl.waves.iter().enumerate() {
        let rule = format!("wave \"{}\"", w.name.value);
        unique(&mut out, map, "gate", w.gates.iter().map(|g| (format!("gate \"{}\" of {rule}", g.name.value), &g.name)));
        if let (Some(_), Some(p)) = (&w.on, &w.percent) {
            out.push(err(
                "rollout-on-and-percent",
                &rule,
                "a wave selects its hosts by on= or by percent=, not both".into(),
                p.span,
                "second selection",
                "for a share of the labelled hosts, write two waves: wave \"canary\" on=\"role=canary\" then wave \"early\" percent=10".into(),
            ));
        }
        let sel_span = w.on.as_ref().map(|o| o.span).or(w.percent.as_ref().map(|p| p.span));
        match sel_span {
            Some(span) if i == last => out.push(err(
                "rollout-last-wave",
                &rule,
                format!("the last wave \"{}\" must take every host left, but it selects some", w.name.value),
                span,
                "the last wave takes the rest",
                "hosts it misses would never get a commit: remove this selection, or add a final wave without on=/percent=, e.g. wave \"all\"".into(),
            )),
            None if i < last => out.push(err(
                "rollout-rest-not-last",
                &rule,
                format!("wave \"{}\" takes every host left, so the waves after it get none", w.name.value),
                w.name.span,
                "no on= or percent=",
                "only the last wave takes the rest: give this wave on=\"role=canary\" or percent=10, or make it the last".into(),
            )),
            _ => {}
        }
        for g in &w.gates {
            if let Some(q) = g.query.as_ref().filter(|q| !q.value.trim().is_empty()) {
                if let Err(why) = promql_parser::parser::parse(&q.value) {
                    out.push(err(
                        "rollout-bad-query",
                        &format!("gate \"{}\" of {rule}", g.name.value),
                        format!("this gate's query is not PromQL: {}", why.trim()),
                        q.span,
                        "does not parse",
                        "the controller would count this gate as failing at every step; fix the expression (try it in Prometheus' expression browser), e.g. query=\"sum(rate(http_requests_errors_total[5m])) / sum(rate(http_requests_total[5m]))\"".into(),
                    ));
                }
            }
            if let Some(q) = g.query.as_ref().filter(|q| q.value.trim().is_empty()) {
                out.push(err(
                    "rollout-empty-query",
                    &format!("gate \"{}\" of {rule}", g.name.value),
                    "this gate's query is empty".into(),
                    q.span,
                    "empty",
                    "write the PromQL expression whose every sample must pass, e.g. query=\"sum(rate(http_requests_errors_total[5m])) / sum(rate(http_requests_total[5m]))\"".into(),
                ));
            }
        }
    }
    if !out.has_errors() {
        let w = &decl.waves[last];
        let rule = format!("wave \"{}\"", w.name.value);
        let soak = w.soak_secs.as_ref().filter(|s| s.value > 0).map(|s| (s.span, "soak="));
        for (span, what) in soak.into_iter().chain(w.gates.iter().map(|g| (g.name.span, "a gate"))) {
            out.push(
                Diagnostic::warning("rollout-last-wave-gate", format!("{what} on the last wave is never checked"))
                    .at(map, span, "never checked")
                    .rule(&rule)
                    .help("a wave's soak and gates hold back the promotion of the next wave; the rollout completes as soon as its last wave has applied the commit. Move it to the wave before"),
            );
        }
        host_warnings(&mut out, map, rs, decl);
    }
    out
}

/// Warnings that need the declared hosts: an `on=` that selects none of them, a wave that gets
/// none. Without `host` blocks the fleet is not known here: only a label selector (which an
/// undeclared host, having no labels, never matches) and a percent wave no hash can fill warn.
fn host_warnings(out: &mut Diagnostics, map: &SourceMap, rs: &Ruleset, decl: &RolloutDecl) {
    let warn = |code: &str, rule: &str, msg: String, span: Span, label: &str, help: String| {
        Diagnostic::warning(code, msg).at(map, span, label).rule(rule).help(help)
    };
    let policy = compile(decl);
    let names: Vec<&str> = rs.hosts.iter().map(|h| h.name.value.as_str()).collect();
    let mut counts = vec![0usize; decl.waves.len()];
    for h in &rs.hosts {
        counts[wave_of(&policy, &h.name.value, &h.labels)] += 1;
    }
    let mut highest_percent: Option<(u8, &str)> = None;
    for (i, w) in decl.waves.iter().enumerate() {
        let rule = format!("wave \"{}\"", w.name.value);
        if let Some(on) = &w.on {
            let selected = rs.hosts.iter().any(|h: &Host| on.value.0.matches(h));
            let undeclared_fleet = rs.hosts.is_empty() && matches!(on.value.0, Selector::Name(_));
            if !selected && !undeclared_fleet {
                let help = match &on.value.0 {
                    Selector::Name(n) => match crate::suggest::did_you_mean(n, names.iter().copied()) {
                        Some(m) => format!("did you mean on=\"{m}\"? hosts: {}", names.join(", ")),
                        None => format!("hosts: {}", names.join(", ")),
                    },
                    Selector::Labels(_) if names.is_empty() => {
                        "no host block declares labels, so no host matches; declare the fleet's hosts with `host \"name\" { labels role=canary }`".into()
                    }
                    Selector::Labels(_) => "no declared host has all these labels; check `labels` in the host blocks".into(),
                };
                out.push(warn("rollout-selector-matches-nothing", &rule, "this wave's on= selects no declared host".into(), on.span, "selects no host", help));
                continue;
            }
        }
        if let Some(p) = &w.percent {
            if let Some((before, name)) = highest_percent.filter(|(before, _)| *before >= p.value) {
                out.push(warn(
                    "rollout-empty-wave",
                    &rule,
                    format!("percent={} after wave \"{name}\" (percent={before}) gets no host", p.value),
                    p.span,
                    "not above the earlier percent",
                    format!("percentages are cumulative over the fleet's stable host hash: wave \"{name}\" already took every host below {before}%; write a percent above {before}"),
                ));
                continue;
            }
            highest_percent = Some((p.value, &w.name.value));
        }
        if !rs.hosts.is_empty() && counts[i] == 0 {
            let why = match (&w.on, &w.percent) {
                (Some(_), _) => "the hosts its on= selects are all in earlier waves".to_string(),
                (None, Some(p)) => format!("no host left has a stable hash below {}% (with few hosts, a small percentage can be empty)", p.value),
                (None, None) => "earlier waves took every declared host".to_string(),
            };
            out.push(warn(
                "rollout-empty-wave",
                &rule,
                format!("wave \"{}\" gets no declared host", w.name.value),
                w.name.span,
                "no host",
                format!("{why}; `fwc plan --waves` lists every host by wave"),
            ));
        }
    }
}

/// Errors for the second and later uses of a name among the policy's waves, probes or gates.
fn unique<'a>(out: &mut Diagnostics, map: &SourceMap, kind: &str, names: impl Iterator<Item = (String, &'a crate::model::Spanned<String>)>) {
    let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
    for (rule, n) in names {
        if let Some(first) = seen.get(n.value.as_str()) {
            out.push(
                Diagnostic::error(&format!("rollout-duplicate-{kind}"), format!("{kind} name \"{}\" is used twice", n.value))
                    .at(map, n.span, "second use")
                    .rule(rule)
                    .help(format!("{kind} names are unique in the rollout (first use: {}); rename one of them", where_is(map, *first))),
            );
        } else {
            seen.insert(&n.value, n.span);
        }
    }
}

/// `600` -> `10m`, `5400` -> `1h30m` (for people; `soak=` takes one unit: "90m").
pub fn format_secs(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

fn where_is(map: &SourceMap, span: Span) -> String {
    let f = map.file(span.file);
    format!("{} line {}", f.path, f.line_col(span.offset as usize).0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::source::SourceTree;
    use fwc_artifacts::window::DayWindow;

    fn tree(text: &str) -> SourceTree {
        SourceTree::from_files(vec![("fwc.kdl".to_string(), text.to_string())])
    }

    const FLEET: &str = r#"fwc 1
host "canary-1" { labels role=canary; }
host "web-1" { labels role=web; }
host "web-2" { labels role=web; }
host "web-3" { labels role=web; }
host "web-4" { labels role=web; }
"#;

    #[test]
    fn the_minimal_form_compiles_exactly_as_written() {
        let text = format!("{FLEET}rollout {{\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=50\n    wave \"all\"\n}}\n");
        let plan = fleet_plan(&tree(&text)).unwrap();
        let policy = plan.policy.clone().unwrap();
        assert_eq!(policy.waves.iter().map(|w| w.select.clone()).collect::<Vec<_>>(), vec![
            WaveSelect::On("role=canary".into()),
            WaveSelect::Percent(50),
            WaveSelect::Rest
        ]);
        assert_eq!(policy.waves[1].soak_secs, 0);
        assert_eq!(policy.waves[1].max_unavailable, MaxUnavailable::Hosts(0));
        assert!(policy.probes.is_empty());
        let names: Vec<&str> = plan.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["canary-1", "web-1", "web-2", "web-3", "web-4"]);
        assert_eq!(plan.hosts[0].wave, Some(0));
        for h in &plan.hosts[1..] {
            let want = if host_bucket(&h.name) < 5000 { 1 } else { 2 };
            assert_eq!(h.wave, Some(want), "{}", h.name);
            assert_eq!(wave_of(&policy, &h.name, &h.labels), want);
        }
    }

    /// The form of the policy with its failure handling, missing-host timeout and batches,
    /// exactly as documented.
    #[test]
    fn the_policy_properties_compile_exactly_as_written() {
        let text = format!(
            "{FLEET}rollout on-failure=\"halt\" missing-timeout=\"10m\" {{\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=50 max-parallel=\"25%\"\n    wave \"all\" max-parallel=50\n}}\n"
        );
        let p = fleet_plan(&tree(&text)).unwrap().policy.unwrap();
        assert_eq!((p.on_failure, p.missing_timeout_secs), (fwc_artifacts::rollout::OnFailure::Halt, 600));
        assert_eq!(p.waves.iter().map(|w| w.max_parallel).collect::<Vec<_>>(), [None, Some(MaxParallel::Percent(25)), Some(MaxParallel::Hosts(50))]);
        let p = fleet_plan(&tree(&format!("{FLEET}rollout on-failure=\"rollback\" missing-timeout=\"90s\" {{\n wave \"all\"\n}}\n"))).unwrap().policy.unwrap();
        assert_eq!((p.on_failure, p.missing_timeout_secs), (fwc_artifacts::rollout::OnFailure::Rollback, 90));
        // The self-check's retries: 3 attempts, 1 s apart (doubling) unless the policy says.
        assert_eq!((p.self_check_attempts, p.self_check_spacing_ms), (3, 1000));
        let p = fleet_plan(&tree(&format!("{FLEET}rollout self-check-attempts=5 self-check-spacing=\"500ms\" {{\n wave \"all\"\n}}\n"))).unwrap().policy.unwrap();
        assert_eq!((p.self_check_attempts, p.self_check_spacing_ms), (5, 500));
        // Defaults, and the policy serialises as before without them.
        let p = fleet_plan(&tree(&format!("{FLEET}rollout {{\n wave \"all\"\n}}\n"))).unwrap().policy.unwrap();
        assert_eq!((p.on_failure, p.missing_timeout_secs), (fwc_artifacts::rollout::OnFailure::Halt, 600));
        let json = serde_json::to_string(&p).unwrap();
        assert!(!json.contains("on_failure") && !json.contains("missing_timeout") && !json.contains("max_parallel"), "{json}");
        assert!(render_waves(&fleet_plan(&tree(&text)).unwrap()).contains("max-parallel 25%"));
    }

    /// Every gate's query is parsed as PromQL: a typo is an error at the query, with what the
    /// parser says; valid expressions (the documented ones among them) pass.
    #[test]
    fn gate_queries_are_parsed_as_promql() {
        let gate = |q: &str| format!("{FLEET}rollout {{\n    wave \"canary\" on=\"role=canary\" {{\n        gate \"errors\" query={} max=0.01\n    }}\n    wave \"all\"\n}}\n", serde_json::to_string(q).unwrap());
        for good in [
            "sum(rate(http_requests_errors_total[5m])) / sum(rate(http_requests_total[5m]))",
            "min(up{job=\"web\"})",
            "histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket[5m])))",
            "max(test_error_ratio)",
        ] {
            assert!(fleet_plan(&tree(&gate(good))).is_ok(), "{good}");
        }
        for bad in ["sum(rate(http_requests_total[5m])", "rate(x[5q])", "max by (host test_error_ratio)", "sum(x) +"] {
            let d = match crate::check_all(&tree(&gate(bad))) {
                Ok(w) | Err(w) => w,
            };
            let e = d.0.iter().find(|d| d.code == "fwc::rollout-bad-query").unwrap_or_else(|| panic!("{bad}: {d:?}"));
            let at = e.location.as_ref().unwrap_or_else(|| panic!("{e:?}"));
            assert_eq!((at.file.as_str(), at.line), ("fwc.kdl", 9), "{e:?}");
            assert!(e.message.starts_with("this gate's query is not PromQL: "), "{e:?}");
        }
    }

    #[test]
    fn bad_policy_properties_say_where_and_what() {
        let cases = [
            ("rollout on-failure=\"revert\" {\n wave \"all\"\n}\n", "fwc::rollout-bad-on-failure", "not halt or rollback"),
            ("rollout missing-timeout=\"soon\" {\n wave \"all\"\n}\n", "fwc::rollout-bad-missing-timeout", ""),
            ("rollout self-check-attempts=0 {\n wave \"all\"\n}\n", "fwc::bad-self-check-attempts", "from 1 to 10"),
            ("rollout self-check-spacing=\"2h\" {\n wave \"all\"\n}\n", "fwc::rollout-bad-self-check-spacing", "from 100ms to 1m"),
            ("rollout {\n wave \"all\" max-parallel=0\n}\n", "fwc::rollout-bad-max-parallel", "never apply"),
            ("rollout {\n wave \"all\" max-parallel=\"0%\"\n}\n", "fwc::rollout-bad-max-parallel", "1% to 100%"),
            ("rollout on-falure=\"halt\" {\n wave \"all\"\n}\n", "", "on-failure"),
            ("rollout {\n wave \"c\" on=\"role=canary\" {\n  gate \"e\" query=\"up\" max=1 grace=\"soon\"\n }\n wave \"all\"\n}\n", "fwc::rollout-bad-grace", "soon"),
        ];
        for (text, code, msg) in cases {
            let d = match crate::check_all(&tree(&format!("{FLEET}{text}"))) {
                Ok(w) | Err(w) => w,
            };
            let e = d.0.iter().find(|d| d.code.contains(code) && (d.message.contains(msg) || d.help.as_deref().unwrap_or("").contains(msg))).unwrap_or_else(|| panic!("{text}: {d:?}"));
            assert!(e.location.is_some(), "{e:?}");
        }
    }

    #[test]
    fn without_rollout_there_is_no_policy_and_no_wave() {
        let plan = fleet_plan(&tree(FLEET)).unwrap();
        assert_eq!(plan.policy, None);
        assert!(plan.hosts.iter().all(|h| h.wave.is_none()));
    }

    #[test]
    fn every_property_compiles() {
        let text = format!(
            r#"{FLEET}rollout {{
    wave "canary" on="canary-1" soak="10m" max-unavailable=1 {{
        gate "errors" query="sum(rate(http_requests_errors_total[5m]))" max=0.01
        gate "up" query="min(up)" min=1 allow-empty=#true grace="90s"
    }}
    wave "early" percent="25%" max-unavailable="10%"
    wave "all"
    probe "api" tcp="198.18.0.1:443"
    probe "health" http="http://127.0.0.1:8080/healthz"
}}
"#
        );
        let p = fleet_plan(&tree(&text)).unwrap().policy.unwrap();
        let w = &p.waves[0];
        assert_eq!((w.soak_secs, w.max_unavailable), (600, MaxUnavailable::Hosts(1)));
        assert_eq!(w.gates[0], Gate { name: "errors".into(), query: "sum(rate(http_requests_errors_total[5m]))".into(), op: GateOp::AtMost, threshold: 0.01, allow_empty: false, grace_secs: 0 });
        assert_eq!((w.gates[1].op, w.gates[1].threshold, w.gates[1].allow_empty, w.gates[1].grace_secs), (GateOp::AtLeast, 1.0, true, 90));
        assert_eq!((p.waves[1].select.clone(), p.waves[1].max_unavailable), (WaveSelect::Percent(25), MaxUnavailable::Percent(10)));
        assert_eq!(p.probes, vec![
            fwc_artifacts::rollout::Probe::Tcp { name: "api".into(), address: "198.18.0.1:443".into() },
            fwc_artifacts::rollout::Probe::Http { name: "health".into(), url: "http://127.0.0.1:8080/healthz".into() },
        ]);
    }

    #[test]
    fn windows_compile() {
        let text = format!(
            "{FLEET}rollout {{\n    window allow=\"Mon-Fri 09:00-17:00\" tz=\"UTC\"\n    window deny=\"Fri 15:00-24:00\"\n    window allow=\"sat,Sun 10:30-12:00\" tz=\"-05:30\"\n    window allow=\"Sat-Mon 01:00-02:00\" tz=\"+01:00\"\n    wave \"canary\" on=\"role=canary\"\n    wave \"all\"\n}}\n"
        );
        let p = fleet_plan(&tree(&text)).unwrap().policy.unwrap();
        assert_eq!(p.windows, vec![
            Window { allow: true, window: DayWindow { days: vec![0, 1, 2, 3, 4], start_min: 540, end_min: 1020 }, offset_min: 0, tz: None },
            Window { allow: false, window: DayWindow { days: vec![4], start_min: 900, end_min: 1440 }, offset_min: 0, tz: None },
            Window { allow: true, window: DayWindow { days: vec![5, 6], start_min: 630, end_min: 720 }, offset_min: -330, tz: None },
            Window { allow: true, window: DayWindow { days: vec![0, 5, 6], start_min: 60, end_min: 120 }, offset_min: 60, tz: None },
        ]);
        let described: Vec<String> = p.windows.iter().map(describe_window).collect();
        assert_eq!(described, [
            "allow Mon-Fri 09:00-17:00 UTC",
            "deny Fri 15:00-24:00 UTC",
            "allow Sat,Sun 10:30-12:00 UTC-05:30",
            "allow Mon,Sat,Sun 01:00-02:00 UTC+01:00"
        ]);
        assert!(render_waves(&fleet_plan(&tree(&text)).unwrap()).contains("Promotion windows"));
        // Without windows the policy serialises exactly as before (the field is additive).
        let none = fleet_plan(&tree(&format!("{FLEET}rollout {{\n wave \"all\"\n}}\n"))).unwrap().policy.unwrap();
        assert!(!serde_json::to_string(&none).unwrap().contains("windows"));
    }


    #[test]
    fn wave_of_an_undeclared_host() {
        let policy = fleet_plan(&tree(&format!("{FLEET}rollout {{\n wave \"c\" on=\"role=canary\"\n wave \"p\" percent=100\n wave \"all\"\n}}\n"))).unwrap().policy.unwrap();
        let none = BTreeMap::new();
        let canary = BTreeMap::from([("role".to_string(), "canary".to_string())]);
        assert_eq!(wave_of(&policy, "stranger", &none), 1, "percent=100 takes every host left");
        assert_eq!(wave_of(&policy, "stranger", &canary), 0);
    }

    #[test]
    fn percent_is_cumulative_and_stable() {
        let policy = RolloutPolicy {
            waves: [WaveSelect::Percent(10), WaveSelect::Percent(50), WaveSelect::Rest]
                .into_iter()
                .enumerate()
                .map(|(i, select)| Wave { name: format!("w{i}"), select, soak_secs: 0, max_unavailable: MaxUnavailable::default(), gates: vec![], max_parallel: None })
                .collect(),
            probes: vec![],
            windows: vec![],
            on_failure: Default::default(),
            missing_timeout_secs: DEFAULT_MISSING_TIMEOUT_SECS,
            self_check_attempts: DEFAULT_SELF_CHECK_ATTEMPTS,
            self_check_spacing_ms: DEFAULT_SELF_CHECK_SPACING_MS,
        };
        let none = BTreeMap::new();
        let mut counts = [0usize; 3];
        for i in 0..2000 {
            counts[wave_of(&policy, &format!("host-{i}"), &none)] += 1;
        }
        assert!((150..250).contains(&counts[0]) && (700..900).contains(&counts[1]) && (900..1100).contains(&counts[2]), "{counts:?}");
    }

    fn diags(text: &str) -> Vec<String> {
        let d = match crate::check_all(&tree(text)) {
            Ok(w) | Err(w) => w,
        };
        d.0.iter().map(|d| format!("{} {}", d.code, d.message)).collect()
    }

    #[test]
    fn checks() {
        let d = diags(&format!("{FLEET}rollout {{\n wave \"a\" on=\"role=canary\" percent=5\n wave \"a\" percent=50\n wave \"c\" percent=10\n}}\n"));
        assert_eq!(d, [
            "fwc::rollout-duplicate-wave wave name \"a\" is used twice",
            "fwc::rollout-on-and-percent a wave selects its hosts by on= or by percent=, not both",
            "fwc::rollout-last-wave the last wave \"c\" must take every host left, but it selects some",
        ]);
        let d = diags(&format!("{FLEET}rollout {{\n wave \"a\" on=\"role=db\"\n wave \"b\" on=\"role=canary\"\n wave \"c\" on=\"canary-1\"\n wave \"all\"\n}}\n"));
        assert_eq!(d, [
            "fwc::rollout-selector-matches-nothing this wave's on= selects no declared host",
            "fwc::rollout-empty-wave wave \"c\" gets no declared host",
        ]);
        let d = diags(&format!("{FLEET}rollout {{\n}}\nrollout {{\n wave \"x\"\n}}\n"));
        assert_eq!(d, ["fwc::rollout-duplicate a second rollout block", "fwc::rollout-no-waves this rollout has no wave"]);
    }
}
