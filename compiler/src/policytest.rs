//! Policy tests: `tests/**/*.kdl` in a rule repository states what the compiled policy must do
//! to given flows, and [`run`] holds the artifacts to it with the pure evaluator ([`crate::eval`]).
//!
//! ```kdl
//! expect "office reaches ssh" accept proto=tcp from="203.0.113.5" to=":22" host="edge-1" rule="ssh"
//! expect drop proto=tcp from="198.51.100.9" to=":22"
//! expect forward proto=tcp to=":8080" reaches="10.0.0.5:80"
//! expect forward to=":443" via=userspace reaches="api.internal:8443"
//! expect shaped proto=tcp to=":9000" class="tenant-b"
//! expect reject proto=tcp from="[2001:db8::9]" to="[2001:db8::1]:113" chain=input
//! ```
//!
//! The language reference is docs/testing-policies.md.

use std::collections::BTreeMap;

use crate::read::kdl_reader::{Entry as KdlEntry, Node as KdlNode, TextSpan, Value as KdlValue};
use serde::Serialize;

use crate::diag::{Diagnostic, Diagnostics, Location};
use crate::eval::{self, Evaluator, Explanation, Flow, FlowSpec, Origin, Verdict, L4};
use crate::model::Span;
use crate::read::source::{SourceMap, SourceTree};

/// What an expectation demands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "expect", rename_all = "lowercase")]
pub enum Expect {
    Accept,
    Drop,
    Reject,
    /// Accepted and sent on: by a kernel DNAT or the userspace forwarder.
    Forward { reaches: Option<String>, via: Option<Via> },
    /// Accepted and charged to the QoS class of rule `class`.
    Shaped { class: String },
}

/// Which dataplane forwards a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Kernel,
    Userspace,
}

impl Expect {
    pub fn word(&self) -> &'static str {
        match self {
            Expect::Accept => "accept",
            Expect::Drop => "drop",
            Expect::Reject => "reject",
            Expect::Forward { .. } => "forward",
            Expect::Shaped { .. } => "shaped",
        }
    }
}

/// One `expect` node.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyTest {
    pub name: String,
    pub location: Location,
    /// Only this host (`None`: every host of the repository).
    pub host: Option<String>,
    pub flow: Flow,
    #[serde(flatten)]
    pub expect: Expect,
    /// The rule that must decide (`policy` = the chain's policy).
    pub rule: Option<String>,
    #[serde(skip)]
    pub span: Span,
    /// `at="2026-12-01T09:00:00+01:00"`: the time the flow is evaluated at (for
    /// schedules); `None`: the run's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

const OUTCOMES: &[&str] = &["accept", "drop", "reject", "forward", "shaped"];
const PROPS: &[&str] = &["proto", "icmp-type", "icmp-code", "tcp-flags", "from", "to", "chain", "in", "out", "back-via", "host", "rule", "reaches", "via", "class", "at"];

/// Parse every test file of `tree` (files are added to `map`). All errors are returned together.
pub fn parse(tree: &SourceTree, map: &mut SourceMap) -> Result<Vec<PolicyTest>, Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut out = Vec::new();
    for (path, text) in &tree.tests {
        let file = map.add(path.clone(), text);
        let mut p = FileParser { map, file, diags: &mut diags };
        match crate::read::limits::on_big_stack(|| crate::read::syntax::parse_untrusted(text)) {
            Err(crate::read::syntax::ParseFailure::Limit(hit)) => {
                let span = hit.span(file);
                p.error("limit", hit.message, span, hit.label).help(hit.help);
            }
            Ok(doc) => {
                for node in doc.nodes() {
                    if let Some(t) = p.node(node) {
                        out.push(t);
                    }
                }
            }
            Err(crate::read::syntax::ParseFailure::Kdl(problems)) => {
                let hints = crate::read::syntax_hints::explain(text);
                for h in &hints {
                    let span = Span { file, offset: h.offset as u32, len: h.len as u32 };
                    p.error("kdl-syntax", format!("syntax error: {}", h.message), span, h.label.clone()).help(h.help.clone());
                }
                for d in problems.iter().filter(|_| hints.is_empty()) {
                    let span = Span { file, offset: d.offset as u32, len: d.len as u32 };
                    let msg = d.message.clone().unwrap_or_else(|| "invalid KDL".into());
                    p.error("kdl-syntax", format!("syntax error: {msg}"), span, d.label.clone().unwrap_or_else(|| "here".into()))
                        .help(d.help.clone().unwrap_or_else(|| "a test file holds `expect` nodes; see docs/testing-policies.md".into()));
                }
            }
        }
    }
    let mut seen: BTreeMap<(String, Option<String>), Span> = BTreeMap::new();
    for t in &out {
        if seen.insert((t.name.clone(), t.host.clone()), t.span).is_some() {
            diags.push(
                Diagnostic::error("duplicate-test", format!("two expectations are named \"{}\"", t.name))
                    .at(map, t.span, "second one")
                    .help("give every expectation its own name; reports and JUnit files identify them by it"),
            );
        }
    }
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(out)
    }
}

struct FileParser<'a> {
    map: &'a SourceMap,
    file: u32,
    diags: &'a mut Diagnostics,
}

struct Pending<'d> {
    diags: &'d mut Diagnostics,
    d: Option<Diagnostic>,
}

impl Pending<'_> {
    fn help(mut self, h: impl Into<String>) {
        if let Some(d) = self.d.take() {
            self.diags.push(d.help(h));
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            self.diags.push(d);
        }
    }
}

impl FileParser<'_> {
    fn span(&self, s: TextSpan) -> Span {
        Span { file: self.file, offset: s.offset() as u32, len: s.len() as u32 }
    }

    fn error(&mut self, code: &str, message: impl Into<String>, span: Span, label: impl Into<String>) -> Pending<'_> {
        let d = Diagnostic::error(code, message).at(self.map, span, label);
        Pending { diags: self.diags, d: Some(d) }
    }

    fn node(&mut self, node: &KdlNode) -> Option<PolicyTest> {
        let nspan = self.span(node.span());
        if node.name().value() != "expect" {
            let span = self.span(node.name().span());
            self.error("unknown-node", format!("unknown node `{}` in a test file", node.name().value()), span, "not `expect`")
                .help("test files hold only `expect` nodes: expect \"name\" accept proto=tcp from=\"203.0.113.5\" to=\":22\"");
            return None;
        }
        let args: Vec<&KdlEntry> = node.entries().iter().filter(|e| e.name().is_none()).collect();
        let (name_entry, outcome_entry) = match args.as_slice() {
            [o] => (None, *o),
            [n, o] => (Some(*n), *o),
            _ => {
                self.error("bad-expect", "`expect` takes an optional name and one outcome", nspan, "here")
                    .help("write expect \"name\" accept|drop|reject|forward|shaped key=value…");
                return None;
            }
        };
        let outcome_span = self.span(outcome_entry.span());
        let outcome = match outcome_entry.value() {
            KdlValue::String(s) if OUTCOMES.contains(&s.as_str()) => s.clone(),
            other => {
                let text = match other {
                    KdlValue::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let help = match crate::suggest::did_you_mean(&text, OUTCOMES.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("the outcome is one of: {}", OUTCOMES.join(", ")),
                };
                self.error("bad-outcome", format!("unknown outcome `{text}`"), outcome_span, "not an outcome").help(help);
                return None;
            }
        };
        let mut props: BTreeMap<String, (String, Span)> = BTreeMap::new();
        let mut ok = true;
        for e in node.entries() {
            let Some(id) = e.name() else { continue };
            let key = id.value().to_string();
            let span = self.span(e.span());
            if !PROPS.contains(&key.as_str()) {
                let help = match crate::suggest::did_you_mean(&key, PROPS.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("expect takes: {}", PROPS.join(", ")),
                };
                self.error("unknown-property", format!("unknown property `{key}`"), span, "not a property of expect").help(help);
                ok = false;
                continue;
            }
            let value = match e.value() {
                KdlValue::String(s) => s.clone(),
                KdlValue::Integer(i) => i.to_string(),
                _ => {
                    self.error("bad-value", format!("`{key}` takes a string"), span, "here").help(format!("write {key}=\"…\""));
                    ok = false;
                    continue;
                }
            };
            if props.insert(key.clone(), (value, span)).is_some() {
                self.error("duplicate-property", format!("property `{key}` is given twice"), span, "second one").help("give each property once");
                ok = false;
            }
        }
        let mut take = |k: &str| props.remove(k);
        let mut spec = FlowSpec::default();
        let bad = |this: &mut Self, key: &str, span: Span, msg: String, help: String| {
            this.error("bad-expect", format!("{key}: {msg}"), span, "here").help(help);
        };
        if let Some((v, span)) = take("proto") {
            match L4::parse(&v) {
                Some(p) => spec.proto = Some(p),
                None => {
                    bad(self, "proto", span, format!("unknown protocol \"{v}\""), "one of tcp, udp, icmp, icmpv6, another IP protocol's name (gre, esp, igmp, …) or a number 0-255".into());
                    ok = false;
                }
            }
        }
        for key in ["from", "to"] {
            if let Some((v, span)) = take(key) {
                match eval::flow::parse_endpoint(&v) {
                    Ok(ep) if key == "from" => spec.from = ep,
                    Ok(ep) => spec.to = ep,
                    Err(e) => {
                        bad(self, key, span, e.message, "write an address and/or port: \"203.0.113.5\", \":22\", \"10.0.0.5:80\", \"[2001:db8::1]:443\"".into());
                        ok = false;
                    }
                }
            }
        }
        if let Some((v, span)) = take("chain") {
            match Origin::parse(&v) {
                Some(o) => spec.origin = Some(o),
                None => {
                    bad(self, "chain", span, format!("unknown chain \"{v}\""), "input (to this host), forward (routed through it) or output (sent by it)".into());
                    ok = false;
                }
            }
        }
        if let Some((v, span)) = take("icmp-type") {
            match eval::flow::parse_icmp_type(spec.proto.unwrap_or(L4::Tcp), &v) {
                Ok(t) => spec.icmp_type = Some(t),
                Err(e) => {
                    bad(self, "icmp-type", span, e.message, "write proto=icmp icmp-type=\"echo-reply\" (or proto=icmpv6 …; nft's names or a number)".into());
                    ok = false;
                }
            }
        }
        if let Some((v, span)) = take("icmp-code") {
            match eval::flow::parse_icmp_code(spec.proto.unwrap_or(L4::Tcp), &v) {
                Ok(c) => spec.icmp_code = Some(c),
                Err(e) => {
                    bad(self, "icmp-code", span, e.message, "write proto=icmp icmp-type=\"destination-unreachable\" icmp-code=\"frag-needed\" (nft's names or a number)".into());
                    ok = false;
                }
            }
        }
        if let Some((v, span)) = take("tcp-flags") {
            match eval::flow::parse_tcp_flag_bits(&v) {
                Ok(f) => spec.tcp_flags = Some(f),
                Err(e) => {
                    bad(self, "tcp-flags", span, e.message, "write the packet's flags: tcp-flags=\"ack\", \"syn,ack\", \"none\"".into());
                    ok = false;
                }
            }
        }
        spec.iif = take("in").map(|v| v.0);
        spec.oif = take("out").map(|v| v.0);
        // The route back to the source (reverse-path filtering): an interface or `none`.
        spec.back = take("back-via").map(|v| eval::flow::parse_route_back(&v.0));
        let host = take("host").map(|v| v.0);
        let rule = take("rule").map(|v| v.0);
        let at = take("at");
        if let Some((v, span)) = &at {
            if let Err(e) = parse_at(v) {
                bad(self, "at", *span, e, "write an RFC 3339 time with its offset: at=\"2026-12-01T09:00:00+01:00\"".into());
                ok = false;
            }
        }
        let reaches = take("reaches");
        let via = take("via");
        let class = take("class");
        let expect = match outcome.as_str() {
            "accept" => Expect::Accept,
            "drop" => Expect::Drop,
            "reject" => Expect::Reject,
            "forward" => {
                let via = match via.clone() {
                    None => None,
                    Some((v, _)) if v == "kernel" => Some(Via::Kernel),
                    Some((v, _)) if v == "userspace" => Some(Via::Userspace),
                    Some((v, span)) => {
                        bad(self, "via", span, format!("\"{v}\" is not a dataplane"), "via=kernel or via=userspace".into());
                        return None;
                    }
                };
                Expect::Forward { reaches: reaches.clone().map(|r| r.0), via }
            }
            _ => match class {
                Some((c, _)) => Expect::Shaped { class: c },
                None => {
                    self.error("bad-expect", "`expect shaped` needs class=", outcome_span, "which class?")
                        .help("name the rule whose QoS class the flow is charged to: class=\"tenant-b\"");
                    return None;
                }
            },
        };
        if !matches!(expect, Expect::Forward { .. }) {
            for (k, v) in [("reaches", &reaches), ("via", &via)] {
                if let Some((_, span)) = v {
                    self.error("bad-expect", format!("`{k}` belongs to `expect forward`"), *span, "here")
                        .help(format!("write expect forward … {k}=…"));
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let flow = match spec.build() {
            Ok(f) => f,
            Err(e) => {
                self.error("bad-flow", e.message, nspan, "this expectation").help(e.help);
                return None;
            }
        };
        let name = match name_entry.map(|e| (e.value(), e.span())) {
            Some((KdlValue::String(s), _)) => s.clone(),
            Some((_, span)) => {
                let span = self.span(span);
                self.error("bad-name", "an expectation's name is a quoted string", span, "here").help("write expect \"office reaches ssh\" accept …");
                return None;
            }
            None => format!("{} {flow}", outcome),
        };
        Some(PolicyTest { name, location: eval::locate(self.map, nspan), host, flow, expect, rule, span: nspan, at: at.map(|a| a.0) })
    }
}

/// The result of one expectation on one host.
#[derive(Debug, Clone, Serialize)]
pub struct TestResult {
    pub name: String,
    pub host: String,
    pub location: Location,
    /// The flow evaluated.
    pub flow: Flow,
    pub passed: bool,
    /// What was expected, in words.
    pub expected: String,
    /// What the evaluator found, in words.
    pub actual: String,
    /// The deciding rule's identity and where it is written.
    pub decided_by: String,
    pub decided_at: Option<Location>,
    pub explanation: Explanation,
    /// The expectation's own `at=` time, when it gives one (schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// Every expectation's result, in file order (then host order).
#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub results: Vec<TestResult>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.results.iter().filter(|r| !r.passed).count()
    }
}

/// Why `run` could not run the tests.
#[derive(Debug)]
pub enum RunError {
    /// The rules or the test files have errors.
    Diagnostics(Diagnostics),
    /// The compiled artifacts use something the evaluator does not understand.
    Eval { host: String, error: eval::EvalError },
}

/// Parse the tests of `tree`, compile every host they concern, and evaluate each expectation.
pub fn run(tree: &SourceTree) -> Result<Report, RunError> {
    run_at(tree, jiff::Timestamp::UNIX_EPOCH)
}

/// An RFC 3339 time (`--at`, a test's `at=`): `2026-12-01T09:00:00+01:00`, `…Z`.
pub fn parse_at(s: &str) -> Result<jiff::Timestamp, String> {
    s.trim().parse::<jiff::Timestamp>().map_err(|_| format!("\"{s}\" is not an RFC 3339 time with an offset (like 2026-12-01T09:00:00+01:00)"))
}

/// [`run`] with the artifacts compiled and the flows evaluated at `at` (a test's own `at=`
/// wins): schedules (`during=`, `until=`) decide by it.
pub fn run_at(tree: &SourceTree, at: jiff::Timestamp) -> Result<Report, RunError> {
    let mut map = SourceMap::default();
    let tests = parse(tree, &mut map).map_err(RunError::Diagnostics)?;
    let plain = crate::read::syntax::parse_plain(tree, &mut SourceMap::default()).map_err(RunError::Diagnostics)?;
    let all_hosts = crate::host_names(&plain);
    unknown_hosts(&tests, &all_hosts, &map).map_err(RunError::Diagnostics)?;
    let mut hosts: BTreeMap<(String, jiff::Timestamp), (Evaluator, BTreeMap<String, Location>)> = BTreeMap::new();
    let mut report = Report::default();
    for t in &tests {
        let names: Vec<String> = match &t.host {
            Some(h) => vec![h.clone()],
            None => all_hosts.clone(),
        };
        let when = t.at.as_deref().and_then(|a| parse_at(a).ok()).unwrap_or(at);
        for h in names {
            let key = (h.clone(), when);
            if !hosts.contains_key(&key) {
                let view = crate::load_host(tree, Some(&h)).map_err(RunError::Diagnostics)?;
                let artifacts = crate::emit_view_at(&view, None, when);
                let ev = Evaluator::new(&artifacts).map_err(|error| RunError::Eval { host: h.clone(), error })?.at(when);
                hosts.insert(key.clone(), (ev, eval::rule_locations(&view)));
            }
            let (ev, locs) = &hosts[&key];
            let x = ev.explain(&t.flow).map_err(|error| RunError::Eval { host: h.clone(), error })?;
            report.results.push(judge(t, &h, x, locs));
        }
    }
    Ok(report)
}

/// Validate the test files of `tree` (syntax, flows, hosts) without evaluating them: `fwc check`.
pub fn check(tree: &SourceTree) -> Result<(), Diagnostics> {
    let mut map = SourceMap::default();
    let tests = parse(tree, &mut map)?;
    let plain = crate::read::syntax::parse_plain(tree, &mut SourceMap::default())?;
    unknown_hosts(&tests, &crate::host_names(&plain), &map)
}

/// Check that every `host=` names a host of the repository (also used by `fwc check`).
pub fn unknown_hosts(tests: &[PolicyTest], hosts: &[String], map: &SourceMap) -> Result<(), Diagnostics> {
    let mut diags = Diagnostics::default();
    for t in tests {
        if let Some(h) = &t.host {
            if !hosts.contains(h) {
                let mut d = Diagnostic::unknown_host(h, hosts).at(map, t.span, "in this expectation");
                d = d.rule(format!("expect \"{}\"", t.name));
                diags.push(d);
            }
        }
    }
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(())
    }
}

/// `fwc:forward:web` -> `web`.
fn rule_name(identity: &str) -> &str {
    identity.rsplit(':').next().unwrap_or(identity)
}

/// Compare one explanation with its expectation.
pub fn judge(t: &PolicyTest, host: &str, x: Explanation, locs: &BTreeMap<String, Location>) -> TestResult {
    let accepted = x.verdict == Verdict::Accept && x.userspace.as_ref().is_none_or(|u| u.allowed);
    let forwarded_to: Vec<String> = {
        let mut v = Vec::new();
        if let Some((a, p)) = x.dnat {
            v.push(if a.is_ipv6() { format!("[{a}]:{p}") } else { format!("{a}:{p}") });
        }
        if let Some(u) = &x.userspace {
            v.extend(u.targets.iter().cloned());
        }
        v.extend(x.dnat_name.clone());
        v
    };
    let actual = describe(&x, &forwarded_to);
    let (mut passed, expected) = match &t.expect {
        Expect::Accept => (accepted, "accept".to_string()),
        // A client the userspace forwarder's allow_from refuses does not get through either.
        Expect::Drop => (x.verdict == Verdict::Drop || (x.verdict == Verdict::Accept && !accepted), "drop".to_string()),
        Expect::Reject => (x.verdict == Verdict::Reject, "reject".to_string()),
        Expect::Forward { reaches, via } => {
            let by_kernel = x.dnat.is_some() || x.dnat_name.is_some();
            let by_user = x.userspace.is_some();
            let via_ok = match via {
                None => by_kernel || by_user,
                Some(Via::Kernel) => by_kernel,
                Some(Via::Userspace) => by_user,
            };
            let reach_ok = reaches.as_ref().is_none_or(|r| forwarded_to.iter().any(|f| f == r));
            let mut e = "forwarded".to_string();
            if let Some(v) = via {
                e.push_str(match v {
                    Via::Kernel => " by a kernel DNAT",
                    Via::Userspace => " by the userspace forwarder",
                });
            }
            if let Some(r) = reaches {
                e.push_str(&format!(" to {r}"));
            }
            (accepted && via_ok && reach_ok, e)
        }
        Expect::Shaped { class } => (accepted && x.qos.iter().any(|q| &q.rule == class), format!("charged to the QoS class of \"{class}\"")),
    };
    // The rule that decided: for a forward its DNAT/listener, for a shape its class, else the verdict's rule.
    let decider: Option<String> = match &t.expect {
        Expect::Forward { .. } if x.dnat_rule.is_some() => x.dnat_rule.clone(),
        Expect::Forward { .. } if x.userspace.is_some() => x.userspace.as_ref().map(|u| format!("fwc:forward:{}", u.rule)),
        _ => x.decided_by.identity.clone(),
    };
    let mut expected = expected;
    if let Some(want) = &t.rule {
        expected.push_str(&format!(", decided by {}", if want == "policy" { "the chain policy".into() } else { format!("rule \"{want}\"") }));
        let ok = match (want.as_str(), &decider) {
            ("policy", _) => x.decided_by.index.is_none(),
            (w, Some(id)) => rule_name(id) == w,
            (_, None) => false,
        };
        passed &= ok;
    }
    let decided_by = match &t.expect {
        Expect::Forward { .. } | Expect::Shaped { .. } if decider.is_some() => decider.clone().unwrap_or_default(),
        _ => x.decided_by.what.clone(),
    };
    let decided_at = decider.as_deref().and_then(|id| locs.get(id)).cloned();
    TestResult {
        name: t.name.clone(),
        host: host.to_string(),
        location: t.location.clone(),
        flow: t.flow.clone(),
        passed,
        expected,
        actual,
        decided_by,
        decided_at,
        explanation: x,
        at: t.at.clone(),
    }
}

/// The evaluator's finding in one line: `drop by rule fwc:filter:blocked`, `accept, DNAT to 10.0.0.5:80, class tenant-b`.
fn describe(x: &Explanation, forwarded_to: &[String]) -> String {
    let mut s = format!("{} by {}", x.verdict.as_str(), x.decided_by.what);
    if let Some((a, p)) = x.dnat {
        s.push_str(&format!(", DNAT to {}", if a.is_ipv6() { format!("[{a}]:{p}") } else { format!("{a}:{p}") }));
    }
    if let Some(n) = &x.dnat_name {
        s.push_str(&format!(", DNAT to the addresses of {n}"));
    }
    if let Some(u) = &x.userspace {
        if u.allowed {
            s.push_str(&format!(", userspace forwarder \"{}\" to {}", u.rule, forwarded_to.join(",")));
        } else {
            s.push_str(&format!(", userspace forwarder \"{}\" refuses this client (allow_from)", u.rule));
        }
    }
    for q in &x.qos {
        s.push_str(&format!(", QoS class {} of \"{}\" ({:?})", q.id, q.rule, q.direction).to_lowercase().replace("qos", "QoS"));
    }
    if !x.limits.is_empty() {
        // Per-source limits: the evaluator cannot know the source's history.
        s.push_str(", if the source is within its per-source limits");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(rules: &str, tests: &str) -> SourceTree {
        SourceTree::from_files([("fwc.kdl".to_string(), format!("fwc 1\n{rules}")), ("tests/t.kdl".to_string(), tests.to_string())])
    }

    #[test]
    fn parses_every_outcome_with_positions() {
        let t = tree(
            "",
            "expect \"office reaches ssh\" accept proto=tcp from=\"203.0.113.5\" to=\":22\" rule=\"ssh\"\n\
             expect drop to=\":23\"\n\
             expect forward to=\":8080\" reaches=\"10.0.0.5:80\" via=kernel\n\
             expect shaped to=\":9000\" class=\"tenant-b\"\n\
             expect reject proto=udp from=\"[2001:db8::9]:53\" to=\"[2001:db8::1]:113\"\n",
        );
        let tests = parse(&t, &mut SourceMap::default()).unwrap();
        assert_eq!(tests.len(), 5);
        assert_eq!(tests[0].name, "office reaches ssh");
        assert_eq!((tests[0].location.file.as_str(), tests[0].location.line, tests[0].location.column), ("tests/t.kdl", 1, 1));
        assert_eq!(tests[1].name, "drop tcp 198.18.200.1:40000 -> 198.18.1.1:23 (input)");
        assert_eq!(tests[1].location.line, 2);
        assert_eq!(tests[2].expect, Expect::Forward { reaches: Some("10.0.0.5:80".into()), via: Some(Via::Kernel) });
        assert!(tests[4].flow.is_ipv6());
    }

    fn errors(tests: &str) -> Vec<(String, usize, usize, String)> {
        let t = tree("", tests);
        let mut map = SourceMap::default();
        let d = parse(&t, &mut map).unwrap_err();
        d.0.iter()
            .map(|d| {
                let l = d.location.clone().unwrap();
                (d.code.clone(), l.line, l.column, d.help.clone().unwrap_or_default())
            })
            .collect()
    }

    #[test]
    fn bad_test_files_get_positions_and_hints() {
        assert_eq!(errors("expect acept to=\":22\"")[0].0, "fwc::bad-outcome");
        assert!(errors("expect acept to=\":22\"")[0].3.contains("`accept`"));
        let e = errors("expect accept to=\":22\"\nexpect drop prot=tcp to=\":22\"");
        assert_eq!((e[0].0.as_str(), e[0].1, e[0].2), ("fwc::unknown-property", 2, 13));
        assert!(e[0].3.contains("`proto`"));
        assert_eq!(errors("allow \"x\"")[0].0, "fwc::unknown-node");
        assert_eq!(errors("expect shaped to=\":1\"")[0].0, "fwc::bad-expect");
        assert_eq!(errors("expect drop reaches=\"1.2.3.4:5\" to=\":1\"")[0].0, "fwc::bad-expect");
        assert_eq!(errors("expect drop to=\"nowhere:22\"")[0].0, "fwc::bad-expect");
        assert_eq!(errors("expect drop proto=tcp")[0].0, "fwc::bad-flow");
        assert_eq!(errors("expect \"a\" drop to=\":1\"\nexpect \"a\" drop to=\":2\"")[0].0, "fwc::duplicate-test");
        assert_eq!(errors("expect drop to=\":1\" {")[0].0, "fwc::kdl-syntax");
    }
}
