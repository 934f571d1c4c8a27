//! KDL v2 documents -> the typed model. Files are read by fwc's own reader ([`crate::kdl_reader`])
//! and its nodes converted by hand so every value keeps its span; templates (`*.kdl.j2`) are rendered with minijinja for one host
//! first. All problems found in a run are collected, not just the first.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kdl::KdlDocument;

use crate::kdl_reader::{self, Document as KdlDoc, Entry as KdlEntry, Node as KdlNode, TextSpan, Value as KdlValue};

use crate::diag::{Diagnostic, Diagnostics};
use crate::limits;
use crate::model::*;
use crate::source::{SourceMap, SourceTree, ROOT_FILE};
use crate::units::{self, UnitError};

/// The rule-language version this compiler reads.
pub const LANGUAGE_VERSION: i128 = 1;

const TOP_NODES: &[&str] = &["fwc", "host", "set", "input", "forward", "output", "containers", "shape", "masquerade", "snat", "rollout"];
const FILTER_ACTIONS: &[&str] = &["allow", "deny", "reject", "log"];
const FILTER_PROPS: &[&str] = &[
    "proto", "port", "sport", "from", "to", "in", "out", "log", "rate", "icmp-type", "reject-with", "log-prefix", "log-rate", "state", "on", "comment",
    // per-source limits (issue #26, crate::persource)
    "rate-per-source", "max-conns-per-source", "per-source-prefix4", "per-source-prefix6", "per-source-size", "conn-rate-per-source",
    // schedules (issue #26, crate::schedule)
    "during", "tz", "until",
];
/// A `log` rule logs and matching goes on: no verdict options (`log`, `rate`, `reject-with`).
const LOG_RULE_PROPS: &[&str] = &[
    "proto", "port", "sport", "from", "to", "in", "out", "icmp-type", "log-prefix", "log-rate", "state", "on", "comment",
    // schedules (issue #26, crate::schedule)
    "during", "tz", "until",
];
const MASQUERADE_PROPS: &[&str] = &["from", "to", "out", "proto", "port", "on", "comment"];
/// snat's `to` is the new source address, so its destination filter is `dst`.
const SNAT_PROPS: &[&str] = &["from", "dst", "to", "out", "proto", "port", "on", "comment"];
/// A `containers` rule matches a published port as the client addressed it: no `sport`/`out`
/// (the output interface is the bridge).
const CONTAINER_RULE_PROPS: &[&str] = &[
    "proto", "port", "from", "to", "in", "log", "rate", "reject-with", "log-prefix", "log-rate", "on", "comment",
    // schedules (issue #26, crate::schedule)
    "during", "tz", "until",
];
const FORWARD_PROPS: &[&str] = &[
    "proto", "listen", "to", "from", "bandwidth", "up", "down", "burst", "max-conns", "conn-rate", "proxy-protocol",
    "idle-timeout", "sni", "health-check", "health-interval", "health-timeout", "health-rise", "health-fall", "backend", "on", "comment",
    // per-source limits (issue #26, crate::persource)
    "conn-rate-per-source", "max-conns-per-source", "per-source-prefix4", "per-source-prefix6", "per-source-size", "rate-per-source",
    // schedules (issue #26, crate::schedule)
    "during", "tz", "until",
    // quota (issue #26)
    "quota", "quota-reset-day", "over-quota",
];
/// Properties that may be given several times (each occurrence counts; read from the node's entries).
const REPEATABLE_PROPS: &[&str] = &["file"];
const SET_PROPS: &[&str] = &["file", "dynamic", "timeout", "size"];
/// Largest `size=` of a dynamic set (elements per address family).
pub const MAX_DYNAMIC_SET_SIZE: i128 = 16_777_216;
const ROLLOUT_CHILDREN: &[&str] = &["wave", "probe", "window"];
const WINDOW_PROPS: &[&str] = &["allow", "deny", "tz"];
const WAVE_PROPS: &[&str] = &["on", "percent", "soak", "max-unavailable", "max-parallel"];
const ROLLOUT_PROPS: &[&str] = &["on-failure", "missing-timeout"];
const GATE_PROPS: &[&str] = &["query", "max", "min", "allow-empty"];
const PROBE_PROPS: &[&str] = &["tcp", "http"];
const SHAPE_PROPS: &[&str] = &[
    "from", "to", "proto", "port", "dev", "rate", "burst", "direction", "on", "comment",
    // quota (issue #26)
    "quota", "quota-reset-day", "over-quota",
];

/// Parse every plain `.kdl` file of the tree (templates are added per host by [`add_templates`]).
pub fn parse_plain(tree: &SourceTree, map: &mut SourceMap) -> Result<Ruleset, Diagnostics> {
    let mut rs = Ruleset::default();
    let mut diags = Diagnostics::default();
    let plain: Vec<(&String, &String)> = tree.files.iter().filter(|(p, _)| !p.ends_with(".j2")).collect();
    // Reading dominates on large repositories: parse the files on all cores, then convert
    // them in path order.
    let docs = parse_parallel(plain.iter().map(|(_, t)| t.as_str()).collect());
    // Set names of every file, so `from="office"` can suggest "@office" wherever it is declared.
    let sets: Vec<String> = docs.iter().flatten().flat_map(declared_sets).collect();
    for ((path, text), doc) in plain.into_iter().zip(docs) {
        let id = map.add(path.clone(), text);
        Parser { map, file: id, diags: &mut diags, in_template: false, sets: &sets }.document(path == ROOT_FILE, text, doc, &mut rs);
    }
    finish(rs, diags)
}

/// Render every template of the tree for `host` and parse it into `rs`.
pub fn add_templates(tree: &SourceTree, map: &mut SourceMap, mut rs: Ruleset, host: &Host) -> Result<Ruleset, Diagnostics> {
    let mut diags = Diagnostics::default();
    let templates: Vec<_> = tree.files.iter().filter(|(p, _)| p.ends_with(".j2")).collect();
    if templates.is_empty() {
        return Ok(rs);
    }
    let hosts: Vec<&Host> = if rs.hosts.is_empty() { vec![host] } else { rs.hosts.iter().collect() };
    let ctx = minijinja::context! {
        host => host_value(host),
        hosts => hosts.iter().map(|h| host_value(h)).collect::<Vec<_>>(),
    };
    let sets: Vec<String> = rs.sets.iter().map(|s| s.name.value.clone()).collect();
    for (path, text) in templates {
        // minijinja counts lines and columns in 16 bits: bound the template's own text first.
        if let Err(hit) = limits::check_template_text(text) {
            let id = map.add(path.clone(), text);
            let span = hit.span(id);
            diags.push(Diagnostic::error("limit", hit.message).at(map, span, hit.label).help(hit.help));
            continue;
        }
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        // A commit controls its templates: bound their work and their output.
        env.set_fuel(Some(limits::TEMPLATE_FUEL));
        let rendered = env.add_template(path, text).and_then(|()| {
            let mut out = limits::BoundedOutput::default();
            env.get_template(path)?.render_captured_to(&ctx, &mut out)?;
            Ok(out.into_string())
        });
        match rendered {
            Ok(out) => {
                let id = map.add(format!("{path} (rendered for host {})", host.name.value), &out);
                Parser { map, file: id, diags: &mut diags, in_template: true, sets: &sets }.file(false, &out, &mut rs);
            }
            Err(e) => {
                let id = map.add(path.clone(), text);
                let mut span = template_error_span(text, &e, id);
                let mut detail = e.detail().map(str::to_string).unwrap_or_else(|| e.kind().to_string());
                let mut help = "fix the template; see docs/rules.md, \"Templates\"".to_string();
                match e.kind() {
                    minijinja::ErrorKind::OutOfFuel => {
                        detail = format!("the template did more than {} steps of work (a loop that runs too long?)", limits::TEMPLATE_FUEL);
                    }
                    minijinja::ErrorKind::WriteFailure => {
                        detail = format!("the template rendered more than {} bytes", limits::MAX_RENDERED_BYTES);
                    }
                    minijinja::ErrorKind::UndefinedError => {
                        let known = |prefix: &str| template_names(host, prefix);
                        let at = (span.offset as usize, span.len as usize);
                        match crate::syntax_hints::undefined_variable(text, at, &host.name.value, &known) {
                            Some(h) => {
                                span = Span { file: id, offset: h.offset as u32, len: h.len as u32 };
                                (detail, help) = (h.detail, h.help);
                            }
                            None => help = "undefined variables are errors: templates see host.name, host.labels, host.vars and hosts (use `{% if x is defined %}` for optional ones)".into(),
                        }
                    }
                    minijinja::ErrorKind::SyntaxError => {
                        if let Some(h) = crate::syntax_hints::unclosed_template_block(text) {
                            span = Span { file: id, offset: h.offset as u32, len: h.len as u32 };
                            (detail, help) = (h.detail, h.help);
                        } else {
                            help = "fix the template syntax: `{{ expr }}`, `{% if … %}…{% endif %}`, `{% for … %}…{% endfor %}`".into();
                        }
                    }
                    _ => {}
                }
                diags.push(
                    Diagnostic::error("template", format!("template {path} failed to render for host \"{}\": {}", host.name.value, e.kind()))
                        .at(map, span, detail)
                        .help(help),
                );
            }
        }
    }
    finish(rs, diags)
}

/// Parse several KDL texts, spread over the available cores (largest first), results in order.
fn parse_parallel(texts: Vec<&str>) -> Vec<Result<KdlDoc, ParseFailure>> {
    let small = texts.iter().map(|t| t.len()).sum::<usize>() < 64 * 1024;
    let threads = if small { 1 } else { crate::parallel::workers(texts.len()) };
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
    crate::parallel::map_scheduled(&texts, &order, threads, |t| parse_untrusted(t))
}

/// Why a text did not become a KDL document.
pub enum ParseFailure {
    /// The text goes past a limit (nesting, line length, size); it was not parsed.
    Limit(limits::LimitHit),
    /// Not KDL v2: every problem found.
    Kdl(Vec<KdlProblem>),
}

/// One KDL syntax problem; callers fill in what is missing with their own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KdlProblem {
    pub offset: usize,
    pub len: usize,
    pub message: Option<String>,
    pub label: Option<String>,
    pub help: Option<String>,
}

/// Parse a text that may be hostile: limits first, then fwc's KDL reader. Call on a thread with
/// [`limits::PARSER_STACK_BYTES`] of stack (see [`limits::on_big_stack`]).
pub fn parse_untrusted(text: &str) -> Result<KdlDoc, ParseFailure> {
    limits::check_kdl_text(text).map_err(ParseFailure::Limit)?;
    kdl_reader::read(text).map_err(|e| ParseFailure::Kdl(problems(text, e)))
}

/// As [`parse_untrusted`], into the `kdl` crate's lossless tree (for `fwc fmt`).
pub fn parse_untrusted_lossless(text: &str) -> Result<KdlDocument, ParseFailure> {
    limits::check_kdl_text(text).map_err(ParseFailure::Limit)?;
    KdlDocument::parse_v2(text).map_err(|e| ParseFailure::Kdl(kdl_problems(&e)))
}

/// The problems of a text the reader refused. The `kdl` crate recovers from errors and so finds
/// every problem with its own words: it is asked (a failure is rare and never on the fast
/// path); the reader's first problem stands where that crate accepts the text.
fn problems(text: &str, e: kdl_reader::ReadError) -> Vec<KdlProblem> {
    match KdlDocument::parse_v2(text) {
        Err(ke) if !ke.diagnostics.is_empty() => kdl_problems(&ke),
        _ => vec![KdlProblem { offset: e.span.offset, len: e.span.len, message: Some(e.message), label: None, help: None }],
    }
}

fn kdl_problems(e: &kdl::KdlError) -> Vec<KdlProblem> {
    e.diagnostics
        .iter()
        .map(|d| KdlProblem { offset: d.span.offset(), len: d.span.len(), message: d.message.clone(), label: d.label.clone(), help: d.help.clone() })
        .collect()
}

fn finish(rs: Ruleset, diags: Diagnostics) -> Result<Ruleset, Diagnostics> {
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(rs)
    }
}

fn host_value(h: &Host) -> minijinja::Value {
    minijinja::context! { name => h.name.value.clone(), labels => h.labels.clone(), vars => h.vars.clone() }
}

/// The names a template can use under a dotted prefix ("" = top level), for hints.
fn template_names(host: &Host, prefix: &str) -> Option<Vec<String>> {
    let keys = |m: &BTreeMap<String, String>| m.keys().cloned().collect();
    match prefix {
        "" => Some(vec!["host".into(), "hosts".into()]),
        "host" => Some(vec!["name".into(), "labels".into(), "vars".into()]),
        "host.vars" => Some(keys(&host.vars)),
        "host.labels" => Some(keys(&host.labels)),
        _ => None,
    }
}

/// The span of the template line an error refers to.
fn template_error_span(text: &str, e: &minijinja::Error, file: u32) -> Span {
    let line = e.line().unwrap_or(1).max(1);
    let start: usize = text.split_inclusive('\n').take(line - 1).map(str::len).sum();
    let len = text[start.min(text.len())..].find('\n').unwrap_or(text.len() - start.min(text.len()));
    match e.range() {
        Some(r) => Span { file, offset: r.start as u32, len: (r.end - r.start) as u32 },
        None => Span { file, offset: start as u32, len: len as u32 },
    }
}

pub use crate::suggest::did_you_mean;

pub(crate) fn to_span(file: u32, s: TextSpan) -> Span {
    Span { file, offset: s.offset as u32, len: s.len as u32 }
}

/// Reads the nodes of one file into the ruleset, collecting diagnostics.
struct Parser<'m, 'd> {
    map: &'m SourceMap,
    file: u32,
    diags: &'d mut Diagnostics,
    in_template: bool,
    /// Names of the sets declared anywhere in the repository (for hints only).
    sets: &'m [String],
}

fn declared_sets(doc: &KdlDoc) -> impl Iterator<Item = String> + '_ {
    doc.nodes().iter().filter(|n| n.name().value() == "set").filter_map(|n| match n.entries().first().map(|e| e.value()) {
        Some(KdlValue::String(s)) => Some(s.clone()),
        _ => None,
    })
}

/// A node's properties, each with its span, read once; leftovers are unknown properties.
struct Props<'n> {
    node: &'n KdlNode,
    rule: String,
    values: BTreeMap<String, &'n KdlEntry>,
}

impl<'n> Props<'n> {
    fn get(&mut self, name: &str) -> Option<&'n KdlEntry> {
        self.values.remove(name)
    }
}

fn value_text(v: &KdlValue) -> Option<String> {
    match v {
        KdlValue::String(s) => Some(s.clone()),
        KdlValue::Integer(i) => Some(i.to_string()),
        KdlValue::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

impl Parser<'_, '_> {
    fn span(&self, s: TextSpan) -> Span {
        to_span(self.file, s)
    }

    fn error(&mut self, code: &str, message: impl Into<String>, span: Span, label: impl Into<String>) -> DiagBuilder<'_> {
        let d = Diagnostic::error(code, message).at(self.map, span, label);
        DiagBuilder { diags: self.diags, d: Some(d) }
    }

    fn file(&mut self, is_root: bool, text: &str, rs: &mut Ruleset) {
        let parsed = limits::on_big_stack(|| parse_untrusted(text));
        self.document(is_root, text, parsed, rs)
    }

    /// Convert an already parsed (or failed) KDL document of `text`.
    fn document(&mut self, is_root: bool, text: &str, parsed: Result<KdlDoc, ParseFailure>, rs: &mut Ruleset) {
        let doc = match parsed {
            Ok(doc) => doc,
            Err(ParseFailure::Limit(hit)) => {
                let span = hit.span(self.file);
                self.error("limit", hit.message, span, hit.label).help(hit.help);
                return;
            }
            Err(ParseFailure::Kdl(problems)) => {
                // fwc's own words first (found from the text, whatever the parser said) …
                let hints = crate::syntax_hints::explain(text);
                for h in &hints {
                    let span = Span { file: self.file, offset: h.offset as u32, len: h.len as u32 };
                    self.error("kdl-syntax", format!("syntax error: {}", h.message), span, h.label.clone()).help(h.help.clone());
                }
                if !hints.is_empty() {
                    return;
                }
                // … the parser's when the mistake is not one fwc recognises.
                for d in &problems {
                    let span = Span { file: self.file, offset: d.offset as u32, len: d.len as u32 };
                    let msg = d.message.clone().unwrap_or_else(|| "invalid KDL".into());
                    let help = d.help.clone().unwrap_or_else(|| {
                        "see docs/rules.md for the syntax; strings need double quotes, booleans are #true/#false".into()
                    });
                    let label = d.label.clone().unwrap_or_else(|| "here".into());
                    self.error("kdl-syntax", format!("syntax error: {msg}"), span, label).help(help);
                }
                return;
            }
        };
        let mut saw_version = false;
        for node in doc.nodes() {
            let name = node.name().value();
            let nspan = self.span(node.name().span());
            match name {
                "fwc" => {
                    saw_version = true;
                    self.version(node);
                }
                "host" if self.in_template => {
                    self.error("host-in-template", "host nodes cannot be declared in a template", nspan, "here")
                        .help("declare hosts in a plain .kdl file; templates are rendered once per host");
                }
                "host" => {
                    if let Some(h) = self.host(node) {
                        rs.hosts.push(h);
                    }
                }
                "set" => {
                    if let Some(s) = self.set(node) {
                        rs.sets.push(s);
                    }
                }
                "input" | "output" | "containers" => {
                    if let Some(c) = self.chain(node) {
                        rs.chains.push(c);
                    }
                }
                "forward" if is_chain_block(node) => {
                    if let Some(c) = self.chain(node) {
                        rs.chains.push(c);
                    }
                }
                "forward" => {
                    if let Some(f) = self.forward(node) {
                        rs.forwards.push(f);
                    }
                }
                "shape" => {
                    if let Some(s) = self.shape(node) {
                        rs.shapes.push(s);
                    }
                }
                "rollout" if self.in_template => {
                    self.error("rollout-in-template", "the rollout policy cannot be declared in a template", nspan, "here")
                        .rule("rollout")
                        .help("declare `rollout { … }` in a plain .kdl file; templates are rendered once per host, the policy is one for the fleet");
                }
                "rollout" => rs.rollouts.push(self.rollout(node)),
                "masquerade" | "snat" => {
                    if let Some(s) = self.snat(node) {
                        rs.snats.push(s);
                    }
                }
                other => {
                    let mut help = String::from("top-level nodes are fwc, host, set, input, forward, output, containers, shape, masquerade, snat and rollout");
                    if FILTER_ACTIONS.contains(&other) {
                        help = format!("`{other}` rules go inside a chain block: input {{ {other} \"name\" … }}");
                    } else if let Some(s) = did_you_mean(other, TOP_NODES.iter().copied()) {
                        help = format!("did you mean `{s}`?");
                    }
                    self.error("unknown-node", format!("unknown node `{other}`"), nspan, "not a node fwc knows").help(help);
                }
            }
        }
        if is_root && !saw_version {
            let span = Span { file: self.file, offset: 0, len: 0 };
            self.error("missing-version", "fwc.kdl does not say which rule-language version it uses", span, "expected `fwc 1` here")
                .help("start fwc.kdl with the line `fwc 1`");
        }
    }

    fn version(&mut self, node: &KdlNode) {
        let span = self.span(node.span());
        match node.entries().first().map(|e| e.value()) {
            Some(KdlValue::Integer(LANGUAGE_VERSION)) if node.entries().len() == 1 => {}
            Some(KdlValue::Integer(v)) => {
                self.error("unsupported-version", format!("rule-language version {v} is not supported"), span, "here")
                    .help(format!("this fwc reads version {LANGUAGE_VERSION}: write `fwc {LANGUAGE_VERSION}` or upgrade fwc"));
            }
            _ => {
                self.error("bad-version", "`fwc` takes one number, the rule-language version", span, "here")
                    .help("write `fwc 1`");
            }
        }
    }

    /// The single positional name of a node: `forward "web" …`.
    fn name(&mut self, node: &KdlNode, what: &str) -> Option<Spanned<String>> {
        let args: Vec<&KdlEntry> = node.entries().iter().filter(|e| e.name().is_none()).collect();
        let nspan = self.span(node.name().span());
        match args.first() {
            Some(e) => match e.value() {
                KdlValue::String(s) if valid_name(s) => Some(Spanned::new(s.clone(), self.span(e.span()))),
                KdlValue::String(s) => {
                    let span = self.span(e.span());
                    self.error("bad-name", format!("{what} name \"{s}\" is not allowed"), span, "this name")
                        .help("names use letters, digits, `-`, `_` and `.`, at most 48 characters, starting with a letter or digit");
                    None
                }
                _ => {
                    let span = self.span(e.span());
                    self.error("bad-name", format!("a {what} name must be a quoted string"), span, "not a string")
                        .help(format!("write {} \"my-name\" …", node.name().value()));
                    None
                }
            },
            None => {
                self.error("missing-name", format!("this {what} has no name"), nspan, "name expected after this")
                    .help(format!("every {what} is named: {} \"my-name\" …; the name appears in plans, metrics and logs", node.name().value()));
                None
            }
        }
    }

    /// Collect properties; report positional arguments after the name and duplicates.
    fn props<'n>(&mut self, node: &'n KdlNode, rule: &str, allowed: &[&str], positional: usize) -> Props<'n> {
        let mut values = BTreeMap::new();
        let mut extra_args = 0;
        for e in node.entries() {
            match e.name() {
                Some(id) => {
                    let key = id.value().to_string();
                    let span = self.span(e.span());
                    if !allowed.contains(&key.as_str()) {
                        let help = match did_you_mean(&key, allowed.iter().copied()) {
                            Some(s) => format!("did you mean `{s}`?"),
                            None => format!("{} takes: {}", node.name().value(), allowed.join(", ")),
                        };
                        self.error("unknown-property", format!("unknown property `{key}`"), span, "not a property of this node")
                            .rule(rule)
                            .help(help);
                    } else if values.insert(key.clone(), e).is_some() && !REPEATABLE_PROPS.contains(&key.as_str()) {
                        self.error("duplicate-property", format!("property `{key}` is given twice"), span, "second one")
                            .rule(rule)
                            .help("give each property once; for several values use a comma list: port=\"80,443\"");
                    }
                }
                None => {
                    extra_args += 1;
                    if extra_args > positional {
                        let span = self.span(e.span());
                        self.error("unexpected-argument", "unexpected argument", span, "not expected here")
                            .rule(rule)
                            .help("after the name, use properties (key=value)");
                    }
                }
            }
        }
        Props { node, rule: rule.to_string(), values }
    }

    fn no_children(&mut self, node: &KdlNode, rule: &str) {
        if let Some(c) = node.children() {
            let span = self.span(c.span());
            self.error("unexpected-children", format!("{rule} does not take a block"), span, "this block")
                .rule(rule)
                .help("remove the { … } block");
        }
    }

    /// A property as text (strings and numbers), with its span.
    fn text(&mut self, props: &mut Props, key: &str) -> Option<(String, Span)> {
        let e = props.get(key)?;
        let span = self.span(e.span());
        let raw = self.map.file(self.file).text.get(span.offset as usize..(span.offset + span.len) as usize).unwrap_or("");
        if let Some(h) = crate::syntax_hints::single_quoted(raw, span.offset as usize) {
            let rule = props.rule.clone();
            let at = Span { file: self.file, offset: h.offset as u32, len: h.len as u32 };
            self.error("kdl-syntax", format!("syntax error: {}", h.message), at, h.label).rule(rule).help(h.help);
            return None;
        }
        match value_text(e.value()) {
            Some(t) => Some((t, span)),
            None => {
                let rule = props.rule.clone();
                self.error("bad-value", format!("`{key}` needs a string or a number"), span, "wrong kind of value")
                    .rule(rule)
                    .help(format!("write {key}=\"…\""));
                None
            }
        }
    }

    fn required(&mut self, props: &mut Props, key: &str, example: &str) -> Option<(String, Span)> {
        if !props.values.contains_key(key) {
            let span = self.span(props.node.span());
            let rule = props.rule.clone();
            self.error("missing-property", format!("missing `{key}`"), span, format!("`{key}` missing"))
                .rule(rule)
                .help(format!("add {key}={example}"));
            return None;
        }
        self.text(props, key)
    }

    /// Parse a property's text with `f`; a unit error becomes a diagnostic at the value.
    fn parsed<T>(&mut self, props: &mut Props, key: &str, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        let (text, span) = self.text(props, key)?;
        self.convert(&props.rule.clone(), key, &text, span, f)
    }

    fn convert<T>(&mut self, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        self.convert_as(&format!("bad-{key}"), rule, key, text, span, f)
    }

    /// [`Parser::convert`] reporting under `code`.
    fn convert_as<T>(&mut self, code: &str, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        match f(text) {
            Ok(v) => Some(Spanned::new(v, span)),
            Err(e) => {
                self.error(code, format!("bad {key}: {}", e.message), span, "this value").rule(rule).help(e.help);
                None
            }
        }
    }

    fn bool(&mut self, props: &mut Props, key: &str) -> bool {
        let Some(e) = props.get(key) else { return false };
        match e.value() {
            KdlValue::Bool(b) => *b,
            _ => {
                let span = self.span(e.span());
                let rule = props.rule.clone();
                self.error("bad-value", format!("`{key}` is #true or #false"), span, "not a boolean")
                    .rule(rule)
                    .help(format!("write {key}=#true (KDL v2 booleans start with #)"));
                false
            }
        }
    }

    fn choice<T: Copy>(&mut self, props: &mut Props, key: &str, options: &[(&str, T)]) -> Option<Spanned<T>> {
        let (text, span) = self.text(props, key)?;
        if let Some((_, v)) = options.iter().find(|(n, _)| *n == text) {
            return Some(Spanned::new(*v, span));
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        let help = match did_you_mean(&text, names.iter().copied()) {
            Some(s) => format!("did you mean \"{s}\"? {key} is one of: {}", names.join(", ")),
            None => format!("{key} is one of: {}", names.join(", ")),
        };
        let rule = props.rule.clone();
        self.error(&format!("bad-{key}"), format!("bad {key}: \"{text}\""), span, "not one of the choices").rule(rule).help(help);
        None
    }

    fn number(&mut self, props: &mut Props, key: &str, min: i128, max: i128) -> Option<Spanned<u64>> {
        let e = props.get(key)?;
        let span = self.span(e.span());
        let parsed = match e.value() {
            KdlValue::Integer(i) => Some(*i),
            KdlValue::String(s) => s.parse::<i128>().ok(),
            _ => None,
        };
        match parsed {
            Some(n) if (min..=max).contains(&n) => Some(Spanned::new(n as u64, span)),
            _ => {
                let rule = props.rule.clone();
                self.error(&format!("bad-{key}"), format!("bad {key}: expected a whole number from {min} to {max}"), span, "this value")
                    .rule(rule)
                    .help(format!("write {key}={min}"));
                None
            }
        }
    }

    fn comment(&mut self, props: &mut Props) -> Option<String> {
        self.text(props, "comment").map(|(t, _)| t)
    }

    fn selector(&mut self, props: &mut Props) -> Option<Spanned<Selector>> {
        self.parsed(props, "on", parse_selector)
    }

    fn addr_match(&mut self, props: &mut Props, key: &str) -> Option<Spanned<AddrMatch>> {
        let sets = self.sets;
        self.parsed(props, key, |s| {
            parse_addr_match(s).map_err(|mut e| {
                // `from="office"` with a set `office`: the `@` was forgotten.
                if sets.iter().any(|n| n == s) {
                    e.help = format!("did you mean \"@{s}\"? set \"{s}\" exists; sets are referenced with @");
                }
                e
            })
        })
    }

    fn host(&mut self, node: &KdlNode) -> Option<Host> {
        let name = self.name(node, "host")?;
        let rule = format!("host \"{}\"", name.value);
        self.props(node, &rule, &[], 1);
        let mut labels = BTreeMap::new();
        let mut vars = BTreeMap::new();
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            let target = match child.name().value() {
                "labels" => &mut labels,
                "vars" => &mut vars,
                other => {
                    let span = self.span(child.name().span());
                    let help = match did_you_mean(other, ["labels", "vars"].into_iter()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "a host block holds `labels k=v …` and `vars k=v …`".into(),
                    };
                    self.error("unknown-node", format!("unknown node `{other}` in a host block"), span, "here").rule(&rule).help(help);
                    continue;
                }
            };
            for e in child.entries() {
                let span = self.span(e.span());
                match (e.name(), value_text(e.value())) {
                    (Some(k), Some(v)) => {
                        target.insert(k.value().to_string(), v);
                    }
                    _ => {
                        self.error("bad-value", format!("`{}` takes key=value pairs", child.name().value()), span, "not key=value")
                            .rule(&rule)
                            .help("write labels role=edge region=eu");
                    }
                }
            }
        }
        Some(Host { name, labels, vars })
    }

    fn set(&mut self, node: &KdlNode) -> Option<AddrSet> {
        let name = self.name(node, "set")?;
        let rule = format!("set \"{}\"", name.value);
        let mut props = self.props(node, &rule, SET_PROPS, usize::MAX);
        let dynamic = self.dynamic_set(&mut props, node, &rule);
        // `file=` may be repeated: every occurrence is a set file (read by setfile::load_all).
        let mut files = Vec::new();
        for e in node.entries().iter().filter(|e| e.name().is_some_and(|n| n.value() == "file")) {
            let span = self.span(e.span());
            match e.value() {
                KdlValue::String(s) => files.push(Spanned::new(s.clone(), span)),
                _ => {
                    self.error("bad-set-file", "file= is a quoted path", span, "not a string")
                        .rule(&rule)
                        .help("write file=\"lists/blocklist.netset\"");
                }
            }
        }
        let mut elements = Vec::new();
        let mut entries: Vec<&KdlEntry> = node.entries().iter().filter(|e| e.name().is_none()).skip(1).collect();
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            if child.name().value() != "-" {
                let span = self.span(child.name().span());
                self.error("unknown-node", format!("unknown node `{}` in a set", child.name().value()), span, "here")
                    .rule(&rule)
                    .help("list set elements as `- \"10.0.0.0/8\"`, one per line");
                continue;
            }
            entries.extend(child.entries().iter());
        }
        for e in entries {
            let span = self.span(e.span());
            match e.value() {
                KdlValue::String(s) => {
                    if let Some(v) = self.convert(&rule, "address", s, span, units::parse_addr) {
                        elements.push(v);
                    }
                }
                _ => {
                    self.error("bad-address", "set elements are quoted addresses", span, "not a string").rule(&rule).help("write \"192.0.2.1\"");
                }
            }
        }
        if dynamic.is_some() {
            if let Some(e) = elements.first() {
                self.error("dynamic-set-elements", format!("dynamic set \"{}\" lists elements", name.value), e.span, "element of a dynamic set")
                    .rule(&rule)
                    .help("a dynamic set starts empty and other programs (fail2ban, CrowdSec, `nft add element`) fill it; use a second, static set for fixed addresses");
            } else if let Some(f) = files.first() {
                self.error("dynamic-set-elements", format!("dynamic set \"{}\" reads a set file", name.value), f.span, "file= of a dynamic set")
                    .rule(&rule)
                    .help("a dynamic set starts empty and other programs fill it; use a second, static set for a list from a file");
            }
        }
        Some(AddrSet { name, elements, files, dynamic, span: self.span(node.span()) })
    }

    /// `dynamic=#true timeout="1h" size=65536`; `timeout`/`size` without `dynamic=#true` are errors.
    fn dynamic_set(&mut self, props: &mut Props, node: &KdlNode, rule: &str) -> Option<DynamicSet> {
        let dynamic = props.values.contains_key("dynamic") && self.bool(props, "dynamic");
        if !dynamic {
            for key in ["timeout", "size"] {
                if let Some(e) = node.entries().iter().find(|e| e.name().is_some_and(|n| n.value() == key)) {
                    let span = self.span(e.span());
                    self.error("dynamic-set-property", format!("`{key}` is only for dynamic sets"), span, "needs dynamic=#true")
                        .rule(rule)
                        .help(format!("add dynamic=#true to let other programs fill the set, or remove {key}="));
                }
            }
            return None;
        }
        let timeout = self.parsed(props, "timeout", units::parse_duration_ms);
        let size = self.number(props, "size", 1, MAX_DYNAMIC_SET_SIZE);
        let timeout_s = match timeout {
            Some(t) if t.value < 1000 || t.value / 1000 > u64::from(u32::MAX) => {
                self.error("bad-timeout", "bad timeout: a dynamic set's timeout is from 1s to about 136 years", t.span, "this value")
                    .rule(rule)
                    .help("write timeout=\"1h\" (or leave it out: elements without their own timeout stay until removed)");
                None
            }
            Some(t) => Some((t.value / 1000) as u32),
            None => None,
        };
        Some(DynamicSet { timeout_s, size: size.map(|s| s.value as u32) })
    }

    fn chain(&mut self, node: &KdlNode) -> Option<Chain> {
        let kind = match node.name().value() {
            "input" => ChainKind::Input,
            "output" => ChainKind::Output,
            "containers" => ChainKind::Containers,
            _ => ChainKind::Forward,
        };
        let rule = format!("{} chain", kind.as_str());
        let allowed: &[&str] = if kind == ChainKind::Containers { &["policy", "bridges"] } else { &["policy", "reject-with"] };
        let mut props = self.props(node, &rule, allowed, 0);
        let policy = if kind == ChainKind::Containers {
            self.choice(&mut props, "policy", &[("accept", Policy::Accept), ("drop", Policy::Drop)])
        } else {
            self.choice(&mut props, "policy", &[("accept", Policy::Accept), ("drop", Policy::Drop), ("reject", Policy::Reject)])
        };
        let bridges = self.parsed(&mut props, "bridges", parse_bridges);
        let reject_with = self.parsed(&mut props, "reject-with", units::parse_reject_with);
        if let (Some(r), false) = (&reject_with, policy.as_ref().is_some_and(|p| p.value == Policy::Reject)) {
            self.error("reject-with-without-reject", "reject-with on a chain block whose policy is not reject", r.span, "no policy=reject here")
                .rule(&rule)
                .help(format!("add policy=reject to this block ({} policy=reject reject-with=\"{}\" {{ … }}), or remove reject-with", kind.as_str(), r.value.as_str()));
        }
        let mut rules = Vec::new();
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            let action = match child.name().value() {
                "allow" => Action::Allow,
                "deny" => Action::Deny,
                "reject" => Action::Reject,
                "log" if kind == ChainKind::Containers => {
                    let span = self.span(child.name().span());
                    self.error("log-in-containers", "`log` rules are not for the containers block", span, "here")
                        .rule(&rule)
                        .help("log in the forward chain (forward { log \"x\" … }), or add log=#true to a containers rule");
                    continue;
                }
                "log" => Action::Log,
                other => {
                    let span = self.span(child.name().span());
                    let help = match did_you_mean(other, FILTER_ACTIONS.iter().copied()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None if other == "drop" || other == "accept" => {
                            format!("fwc says allow/deny/reject: write `{}`", if other == "drop" { "deny" } else { "allow" })
                        }
                        None => "chain blocks hold allow, deny, reject and log rules".into(),
                    };
                    self.error("unknown-node", format!("unknown rule `{other}` in the {} chain", kind.as_str()), span, "here").help(help);
                    continue;
                }
            };
            if let Some(r) = self.filter_rule(child, kind, action) {
                rules.push(r);
            }
        }
        Some(Chain { kind, policy, bridges, reject_with, rules, span: self.span(node.span()) })
    }

    fn filter_rule(&mut self, node: &KdlNode, chain: ChainKind, action: Action) -> Option<FilterRule> {
        let name = self.name(node, "rule")?;
        let rule = format!("{} \"{}\"", action.as_str(), name.value);
        let allowed = match (chain, action) {
            (ChainKind::Containers, _) => CONTAINER_RULE_PROPS,
            (_, Action::Log) => LOG_RULE_PROPS,
            _ => FILTER_PROPS,
        };
        let mut p = self.props(node, &rule, allowed, 1);
        self.no_children(node, &rule);
        let proto = self.choice(
            &mut p,
            "proto",
            &[("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)],
        );
        let icmp_types = self.icmp_types(&mut p, proto.as_ref());
        let log_given = p.values.contains_key("log");
        let log = self.bool(&mut p, "log");
        let log_prefix = self.parsed(&mut p, "log-prefix", units::parse_log_prefix);
        let log_rate = self.parsed(&mut p, "log-rate", units::parse_event_rate);
        if log_given && !log {
            if let Some(span) = log_prefix.as_ref().map(|x| x.span).or(log_rate.as_ref().map(|x| x.span)) {
                self.error("log-options-without-log", "log-prefix/log-rate on a rule that says log=#false", span, "nothing is logged")
                    .rule(&rule)
                    .help("remove log=#false (log-prefix and log-rate turn logging on), or remove log-prefix/log-rate");
            }
        }
        let reject_with = self.parsed(&mut p, "reject-with", units::parse_reject_with);
        if let Some(r) = &reject_with {
            if action != Action::Reject {
                self.error("reject-with-without-reject", format!("reject-with on a `{}` rule", action.as_str()), r.span, "only reject rules answer")
                    .rule(&rule)
                    .help(format!("make it a reject rule (reject \"{}\" … reject-with=\"{}\"), or remove reject-with", name.value, r.value.as_str()));
            } else if r.value == RejectWith::TcpReset && proto.as_ref().is_none_or(|p| p.value != Proto::Tcp) {
                self.error("tcp-reset-without-tcp", "reject-with=\"tcp-reset\" answers TCP only, and this rule is not proto=tcp", r.span, "TCP reset")
                    .rule(&rule)
                    .help("add proto=tcp, or reject with an ICMP code (reject-with=\"port-unreachable\", \"admin-prohibited\", …)");
            }
        }
        let r = FilterRule {
            chain,
            action,
            proto,
            icmp_types,
            reject_with,
            log: log || log_prefix.is_some() || log_rate.is_some() || action == Action::Log,
            log_prefix,
            log_rate,
            state: self.parsed(&mut p, "state", units::parse_ct_states),
            ports: self.parsed(&mut p, "port", units::parse_port_list),
            sports: self.parsed(&mut p, "sport", units::parse_port_list),
            from: self.addr_match(&mut p, "from"),
            to: self.addr_match(&mut p, "to"),
            iif: self.parsed(&mut p, "in", parse_ifname),
            oif: self.parsed(&mut p, "out", parse_ifname),
            rate: self.parsed(&mut p, "rate", units::parse_event_rate),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            per_source: self.per_source(&mut p, Some(action)),
            schedule: self.schedule(&mut p),
            name,
        };
        Some(r)
    }

    /// `icmp-type=`: names of the rule's ICMP family (`proto=icmp` or `proto=icmpv6`), or numbers.
    fn icmp_types(&mut self, p: &mut Props, proto: Option<&Spanned<Proto>>) -> Option<Spanned<Vec<u8>>> {
        let (text, span) = self.text(p, "icmp-type")?;
        let rule = p.rule.clone();
        let v6 = match proto.map(|p| p.value) {
            Some(Proto::Icmp) => false,
            Some(Proto::Icmpv6) => true,
            other => {
                // Suggest the family the names belong to.
                let names: Vec<&str> = text.split(',').map(str::trim).collect();
                let v4 = names.iter().all(|n| n.parse::<u8>().is_ok() || units::icmp_type_code(false, n).is_some());
                let v6 = names.iter().all(|n| n.parse::<u8>().is_ok() || units::icmp_type_code(true, n).is_some());
                let fix = match (v4, v6) {
                    (true, false) => "add proto=icmp".to_string(),
                    (false, true) => "add proto=icmpv6".to_string(),
                    _ => "add proto=icmp (IPv4) or proto=icmpv6 (IPv6); for both, write two rules".to_string(),
                };
                let what = match other {
                    Some(p) => format!("icmp-type on a proto={} rule", p.as_str()),
                    None => "icmp-type without proto=icmp or proto=icmpv6".to_string(),
                };
                self.error("icmp-type-without-icmp", what, span, "ICMP types need an ICMP protocol").rule(rule).help(fix);
                return None;
            }
        };
        self.convert(&rule, "icmp-type", &text, span, |s| units::parse_icmp_types(s, v6))
    }

    /// `masquerade "lan-out" from=… out=…` and `snat "office-out" from=… out=… to="198.18.0.1"`.
    fn snat(&mut self, node: &KdlNode) -> Option<SnatRule> {
        let kind = if node.name().value() == "snat" { SnatKind::Snat } else { SnatKind::Masquerade };
        let name = self.name(node, kind.as_str())?;
        let rule = format!("{} \"{}\"", kind.as_str(), name.value);
        let allowed = match kind {
            SnatKind::Masquerade => MASQUERADE_PROPS,
            SnatKind::Snat => SNAT_PROPS,
        };
        let mut p = self.props(node, &rule, allowed, 1);
        self.no_children(node, &rule);
        let (dst, to_addr) = match kind {
            SnatKind::Masquerade => (self.addr_match(&mut p, "to"), None),
            SnatKind::Snat => {
                let dst = self.addr_match(&mut p, "dst");
                let to = if p.values.contains_key("to") {
                    self.parsed(&mut p, "to", parse_snat_addr)
                } else {
                    let span = self.span(node.name().span());
                    self.error("snat-without-to", "snat needs to=, the new source address", span, "no to=")
                        .rule(&rule)
                        .help("add to=\"198.18.0.1\" (an address of this host), or use masquerade to take the out interface's address");
                    None
                };
                (dst, Some(to?))
            }
        };
        let s = SnatRule {
            kind,
            from: self.addr_match(&mut p, "from"),
            dst,
            to_addr,
            oif: self.parsed(&mut p, "out", parse_ifname),
            proto: self.choice(&mut p, "proto", &[("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)]),
            ports: self.parsed(&mut p, "port", units::parse_port_list),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            name,
        };
        Some(s)
    }

    fn forward(&mut self, node: &KdlNode) -> Option<ForwardRule> {
        let name = self.name(node, "forward")?;
        let rule = format!("forward \"{}\"", name.value);
        let mut p = self.props(node, &rule, FORWARD_PROPS, 1);
        self.no_children(node, &rule);
        let proto = self
            .choice(&mut p, "proto", &[("tcp", ForwardProto::Tcp), ("udp", ForwardProto::Udp), ("both", ForwardProto::Both)])
            .map_or(ForwardProto::Tcp, |s| s.value);
        let listen = self.required(&mut p, "listen", "\":8080\"").and_then(|(t, s)| self.convert(&rule, "listen", &t, s, parse_listen));
        let targets = self.required(&mut p, "to", "\"10.0.0.5:80\"").and_then(|(t, s)| self.convert(&rule, "to", &t, s, parse_targets));
        let bandwidth = self.parsed(&mut p, "bandwidth", units::parse_bandwidth);
        let up = self.parsed(&mut p, "up", units::parse_bandwidth).or(bandwidth.clone());
        let down = self.parsed(&mut p, "down", units::parse_bandwidth).or(bandwidth);
        let f = ForwardRule {
            proto,
            from: self.addr_match(&mut p, "from"),
            up,
            down,
            burst: self.parsed(&mut p, "burst", units::parse_size),
            max_conns: self.number(&mut p, "max-conns", 1, 10_000_000).map(|s| Spanned::new(s.value as u32, s.span)),
            conn_rate: self.parsed(&mut p, "conn-rate", units::parse_event_rate),
            proxy_protocol: self.parsed(&mut p, "proxy-protocol", parse_proxy_protocol),
            idle_timeout_ms: self.parsed(&mut p, "idle-timeout", units::parse_duration_ms),
            sni: self.parsed(&mut p, "sni", parse_sni),
            health: self.health(&mut p, &rule),
            quota: self.quota(&mut p, &rule),
            backend: self
                .choice(&mut p, "backend", &[("auto", BackendChoice::Auto), ("kernel", BackendChoice::Kernel), ("userspace", BackendChoice::Userspace)])
                .unwrap_or(Spanned::new(BackendChoice::Auto, Span::default())),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            per_source: self.per_source(&mut p, None),
            schedule: self.schedule(&mut p),
            listen: listen?,
            targets: targets?,
            name,
        };
        Some(f)
    }

    /// Per-source limits (issue #26, [`crate::persource`]) of a filter rule (`action`) or a
    /// forward (`None`): filter rules say `rate-per-source=` (new connections, as `rate=`),
    /// forwards `conn-rate-per-source=` (as `conn-rate=`).
    fn per_source(&mut self, p: &mut Props, action: Option<Action>) -> Option<PerSource> {
        use crate::persource as ps;
        let rule = p.rule.clone();
        let (rate_key, wrong_key) = if action.is_some() { ("rate-per-source", "conn-rate-per-source") } else { ("conn-rate-per-source", "rate-per-source") };
        if let Some((_, span)) = p.values.contains_key(wrong_key).then(|| self.text(p, wrong_key)).flatten() {
            let what = if action.is_some() { "a filter rule" } else { "a forward" };
            self.error("per-source-wrong-name", format!("`{wrong_key}` is not a property of {what}"), span, "wrong name")
                .rule(&rule)
                .help(format!("write {rate_key}=… ({} counts new connections per source, as {} does)", rate_key, if action.is_some() { "rate=" } else { "conn-rate=" }));
        }
        let rate = self.parsed(p, rate_key, units::parse_event_rate);
        let max_conns = self.number(p, "max-conns-per-source", 1, 10_000_000).map(|s| Spanned::new(s.value as u32, s.span));
        let prefix4 = self.parsed(p, "per-source-prefix4", ps::parse_prefix4);
        let prefix6 = self.parsed(p, "per-source-prefix6", ps::parse_prefix6);
        let size = self.parsed(p, "per-source-size", ps::parse_size);
        let first = [rate.as_ref().map(|x| x.span), max_conns.as_ref().map(|x| x.span)].into_iter().flatten().min_by_key(|s| s.offset);
        let Some(span) = first else {
            if let Some(span) = [prefix4.as_ref().map(|x| x.span), prefix6.as_ref().map(|x| x.span), size.as_ref().map(|x| x.span)].into_iter().flatten().next() {
                self.error("per-source-options-without-limit", "per-source-prefix/per-source-size without a per-source limit", span, "nothing to group or track")
                    .rule(&rule)
                    .help(format!("add {rate_key}=\"5/minute\" or max-conns-per-source=3, or remove the per-source-* settings"));
            }
            return None;
        };
        if let Some(a) = action.filter(|a| *a != Action::Allow) {
            self.error("per-source-on-non-allow", format!("per-source limits on a `{}` rule", a.as_str()), span, "only an allow rule admits sources")
                .rule(&rule)
                .help("a per-source limit caps what an allow rule lets in: put it on the allow rule (allow \"ssh\" proto=tcp port=22 rate-per-source=\"5/minute\"); a deny or reject already refuses every source");
            return None;
        }
        Some(PerSource {
            rate,
            max_conns,
            prefix4: prefix4.map_or(ps::DEFAULT_PREFIX4, |x| x.value),
            prefix6: prefix6.map_or(ps::DEFAULT_PREFIX6, |x| x.value),
            size: size.map_or(ps::DEFAULT_SIZE, |x| x.value),
            span,
        })
    }

    /// quota (issue #26): `quota="500GB/month"` with optional `quota-reset-day=` (default: day
    /// 1 / Monday) and `over-quota=` (default `drop`); those two without `quota` are errors.
    fn quota(&mut self, p: &mut Props, rule: &str) -> Option<Spanned<crate::quota::QuotaSpec>> {
        use crate::quota::*;
        let given = p.values.contains_key("quota");
        let quota = self.parsed(p, "quota", parse_quota);
        let day = self.text(p, "quota-reset-day");
        let over = self.parsed(p, "over-quota", parse_over_quota);
        let Some(q) = quota else {
            if !given {
                if let Some(span) = day.as_ref().map(|d| d.1).or(over.as_ref().map(|o| o.span)) {
                    self.error("quota-option-without-quota", "quota-reset-day/over-quota without quota", span, "no quota=")
                        .rule(rule)
                        .help("add quota=\"500GB/month\", or remove quota-reset-day and over-quota");
                }
            }
            return None;
        };
        let (limit_bytes, period) = q.value;
        let reset_day = match day {
            Some((text, span)) => self.convert(rule, "quota-reset-day", &text, span, |s| parse_reset_day(s, period))?.value,
            None if period == QuotaPeriod::Day => 0,
            None => 1,
        };
        let spec = QuotaSpec { limit_bytes, period, reset_day, over: over.map_or(OverQuota::Drop, |o| o.value) };
        Some(Spanned::new(spec, q.span))
    }

    /// `health-check="tcp"` with optional `health-interval`, `health-timeout`, `health-rise`,
    /// `health-fall`; the others without `health-check` are an error.
    fn health(&mut self, p: &mut Props, rule: &str) -> Option<Spanned<HealthSpec>> {
        let kind = self.choice(p, "health-check", &[("tcp", ())]);
        let interval = self.parsed(p, "health-interval", units::parse_duration_ms);
        let timeout = self.parsed(p, "health-timeout", units::parse_duration_ms);
        let rise = self.number(p, "health-rise", 1, 100);
        let fall = self.number(p, "health-fall", 1, 100);
        let Some(kind) = kind else {
            if let Some(span) = interval.as_ref().map(|v| v.span).or(timeout.as_ref().map(|v| v.span)).or(rise.as_ref().map(|v| v.span)).or(fall.as_ref().map(|v| v.span)) {
                self.error("health-without-check", "health-interval/-timeout/-rise/-fall without health-check", span, "no health-check")
                    .rule(rule)
                    .help("add health-check=\"tcp\", or remove the health-* settings");
            }
            return None;
        };
        let interval_ms = interval.as_ref().map_or(fwc_artifacts::DEFAULT_HEALTH_INTERVAL_MS, |v| v.value);
        let spec = HealthSpec {
            interval_ms,
            // Default: 2 s, at most half the interval.
            timeout_ms: timeout.as_ref().map_or(fwc_artifacts::DEFAULT_HEALTH_TIMEOUT_MS.min(interval_ms / 2).max(1), |v| v.value),
            rise: rise.map_or(fwc_artifacts::DEFAULT_HEALTH_RISE, |v| v.value as u32),
            fall: fall.map_or(fwc_artifacts::DEFAULT_HEALTH_FALL, |v| v.value as u32),
        };
        if spec.timeout_ms >= spec.interval_ms {
            let span = timeout.as_ref().map_or(kind.span, |v| v.span);
            self.error("bad-health-timeout", format!("health-timeout ({} ms) must be shorter than health-interval ({} ms)", spec.timeout_ms, spec.interval_ms), span, "too long")
                .rule(rule)
                .help("a probe must finish before the next one starts: shorten health-timeout or lengthen health-interval");
        }
        Some(Spanned::new(spec, kind.span))
    }

    fn shape(&mut self, node: &KdlNode) -> Option<ShapeRule> {
        let name = self.name(node, "shape")?;
        let rule = format!("shape \"{}\"", name.value);
        let mut p = self.props(node, &rule, SHAPE_PROPS, 1);
        self.no_children(node, &rule);
        let rate = self.required(&mut p, "rate", "\"20mbit\"").and_then(|(t, s)| self.convert(&rule, "rate", &t, s, units::parse_bandwidth));
        let devs = match self.text(&mut p, "dev") {
            Some((t, s)) => t.split(',').map(|d| Spanned::new(d.trim().to_string(), s)).collect(),
            None => Vec::new(),
        };
        for d in &devs {
            if !valid_ifname(&d.value) {
                self.error("bad-dev", format!("\"{}\" is not an interface name", d.value), d.span, "this value")
                    .rule(&rule)
                    .help("interface names are 1-15 characters without spaces or `/`, e.g. dev=eth1 or dev=\"eth1,eth2\"");
            }
        }
        let s = ShapeRule {
            from: self.addr_match(&mut p, "from"),
            to: self.addr_match(&mut p, "to"),
            proto: self.choice(&mut p, "proto", &[("tcp", Proto::Tcp), ("udp", Proto::Udp), ("both", Proto::Both), ("icmp", Proto::Icmp), ("icmpv6", Proto::Icmpv6)]),
            ports: self.parsed(&mut p, "port", units::parse_port_list),
            devs,
            burst: self.parsed(&mut p, "burst", units::parse_size),
            direction: self
                .choice(&mut p, "direction", &[("egress", Direction::Egress), ("ingress", Direction::Ingress)])
                .map_or(Direction::Egress, |d| d.value),
            quota: self.quota(&mut p, &rule),
            on: self.selector(&mut p),
            comment: self.comment(&mut p),
            span: self.span(node.span()),
            rate: rate?,
            name,
        };
        Some(s)
    }

    /// `rollout { wave … probe … }`: the fleet rollout policy. Values are read here; the rules
    /// that need the whole policy (one block, unique names, the last wave) are in
    /// [`crate::rollout::check`].
    fn rollout(&mut self, node: &KdlNode) -> RolloutDecl {
        let rule = "rollout";
        // A name is a mistake of its own (the policy is one per repository); the properties
        // are read below, so only the positional arguments are reported here.
        let names: Vec<_> = node.entries().iter().filter(|e| e.name().is_none()).collect();
        for e in &names {
            let span = self.span(e.span());
            self.error("unexpected-argument", "`rollout` takes no name", span, "not expected here")
                .rule(rule)
                .help("the policy is its properties and its block: rollout on-failure=\"halt\" { wave \"canary\" on=\"role=canary\"; wave \"all\" }");
        }
        let mut p = self.props(node, rule, ROLLOUT_PROPS, names.len());
        let on_failure = self.text(&mut p, "on-failure").and_then(|(t, s)| self.rollout_value(rule, "on-failure", &t, s, parse_on_failure));
        let missing_timeout_secs = self.text(&mut p, "missing-timeout").and_then(|(t, s)| self.rollout_value(rule, "missing-timeout", &t, s, parse_soak));
        let mut decl = RolloutDecl { waves: Vec::new(), probes: Vec::new(), windows: Vec::new(), on_failure, missing_timeout_secs, span: self.span(node.name().span()) };
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            match child.name().value() {
                "wave" => {
                    if let Some(w) = self.wave(child) {
                        decl.waves.push(w);
                    }
                }
                "probe" => {
                    if let Some(p) = self.probe(child) {
                        decl.probes.push(p);
                    }
                }
                "window" => {
                    if let Some(w) = self.window(child) {
                        decl.windows.push(w);
                    }
                }
                other => {
                    let span = self.span(child.name().span());
                    let help = match did_you_mean(other, ROLLOUT_CHILDREN.iter().copied()) {
                        _ if other == "gate" => "a gate belongs to a wave: wave \"canary\" on=\"role=canary\" { gate \"errors\" query=\"…\" max=0.01 }".into(),
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "a rollout block holds `wave \"name\" …` nodes (in promotion order), `probe \"name\" …` and `window allow=\"…\"` / `window deny=\"…\"` nodes".into(),
                    };
                    self.error("unknown-node", format!("unknown node `{other}` in the rollout block"), span, "here").rule(rule).help(help);
                }
            }
        }
        decl
    }

    fn wave(&mut self, node: &KdlNode) -> Option<WaveDecl> {
        let name = self.name(node, "wave")?;
        let rule = format!("wave \"{}\"", name.value);
        let mut p = self.props(node, &rule, WAVE_PROPS, 1);
        let on = self.text(&mut p, "on").and_then(|(t, s)| self.rollout_value(&rule, "on", &t, s, |t| parse_selector(t).map(|sel| (sel, t.to_string()))));
        let percent = self.text(&mut p, "percent").and_then(|(t, s)| self.rollout_value(&rule, "percent", &t, s, parse_percent));
        let soak_secs = self.text(&mut p, "soak").and_then(|(t, s)| self.rollout_value(&rule, "soak", &t, s, parse_soak));
        let max_unavailable = self.text(&mut p, "max-unavailable").and_then(|(t, s)| self.rollout_value(&rule, "max-unavailable", &t, s, parse_max_unavailable));
        let max_parallel = self.text(&mut p, "max-parallel").and_then(|(t, s)| self.rollout_value(&rule, "max-parallel", &t, s, parse_max_parallel));
        let mut gates = Vec::new();
        for child in node.children().map(|d| d.nodes()).unwrap_or_default() {
            if child.name().value() == "gate" {
                gates.extend(self.gate(child, &name.value));
                continue;
            }
            let other = child.name().value();
            let span = self.span(child.name().span());
            let help = match did_you_mean(other, ["gate"].into_iter()) {
                Some(s) => format!("did you mean `{s}`?"),
                None if other == "probe" => "probes are for the whole fleet: put `probe \"name\" …` directly in the rollout block".into(),
                None => "a wave's block holds `gate \"name\" query=\"…\" max=…` nodes".into(),
            };
            self.error("unknown-node", format!("unknown node `{other}` in a wave"), span, "here").rule(&rule).help(help);
        }
        Some(WaveDecl { name, on, percent, soak_secs, max_unavailable, max_parallel, gates, span: self.span(node.span()) })
    }

    fn gate(&mut self, node: &KdlNode, wave: &str) -> Option<GateDecl> {
        let name = self.name(node, "gate")?;
        let rule = format!("gate \"{}\" of wave \"{wave}\"", name.value);
        let mut p = self.props(node, &rule, GATE_PROPS, 1);
        self.no_children(node, &rule);
        let query = self.required(&mut p, "query", "\"sum(rate(http_requests_errors_total[5m]))\"").map(|(t, s)| Spanned::new(t, s));
        let max = self.threshold(&mut p, "max", &rule);
        let min = self.threshold(&mut p, "min", &rule);
        let allow_empty = self.bool(&mut p, "allow-empty");
        let span = self.span(node.span());
        let given = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        match (&max, &min) {
            (Some(_), Some(m)) => {
                self.error("rollout-gate-threshold", "a gate takes max= or min=, not both", m.span, "second threshold")
                    .rule(&rule)
                    .help("a gate compares every sample with one threshold: max=0.01 (at most) or min=0.99 (at least); for a band, write two gates");
            }
            (None, None) if !given("max") && !given("min") => {
                let at = self.span(node.name().span());
                self.error("rollout-gate-threshold", "this gate has no threshold", at, "max= or min= missing")
                    .rule(&rule)
                    .help("add max=0.01 (every sample at most 0.01) or min=0.99 (every sample at least 0.99)");
            }
            _ => {}
        }
        Some(GateDecl { name, query, max, min, allow_empty, span })
    }

    /// `max=0.01` / `min=1`: a finite number (a KDL number, or a string holding one).
    fn threshold(&mut self, props: &mut Props, key: &str, rule: &str) -> Option<Spanned<f64>> {
        let e = props.get(key)?;
        let span = self.span(e.span());
        let n = match e.value() {
            KdlValue::Integer(i) => Some(*i as f64),
            KdlValue::Float(f) => Some(*f),
            KdlValue::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() => Some(Spanned::new(n, span)),
            _ => {
                self.error("rollout-bad-threshold", format!("bad {key}: expected a number"), span, "this value")
                    .rule(rule)
                    .help(format!("write {key}=0.01 (a plain number; the gate's query should return the value to compare, e.g. a ratio)"));
                None
            }
        }
    }

    fn probe(&mut self, node: &KdlNode) -> Option<ProbeDecl> {
        let name = self.name(node, "probe")?;
        let rule = format!("probe \"{}\"", name.value);
        let mut p = self.props(node, &rule, PROBE_PROPS, 1);
        self.no_children(node, &rule);
        let n = name.value.clone();
        let tcp = self.text(&mut p, "tcp").and_then(|(t, s)| self.rollout_value(&rule, "tcp", &t, s, |t| parse_probe_tcp(&n, t)));
        let http = self.text(&mut p, "http").and_then(|(t, s)| self.rollout_value(&rule, "http", &t, s, |t| parse_probe_http(&n, t)));
        let has = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        let probe = match (has("tcp"), has("http")) {
            (true, true) => {
                let span = self.span(node.span());
                self.error("rollout-probe-kind", "a probe is tcp= or http=, not both", span, "this probe")
                    .rule(&rule)
                    .help("write two probes: probe \"api\" tcp=\"198.18.0.1:443\" and probe \"health\" http=\"http://127.0.0.1:8080/healthz\"");
                None
            }
            (false, false) => {
                let span = self.span(node.name().span());
                self.error("rollout-probe-kind", "this probe checks nothing", span, "tcp= or http= missing")
                    .rule(&rule)
                    .help("write tcp=\"198.18.0.1:443\" (a TCP connect) or http=\"http://127.0.0.1:8080/healthz\" (a GET that must answer 2xx)");
                None
            }
            _ => tcp.or(http),
        };
        Some(ProbeDecl { name, probe, span: self.span(node.span()) })
    }

    /// `window allow="Mon-Fri 09:00-17:00" tz="+01:00"` (or `deny=`): a promotion window; the
    /// spec and the zone are parsed by [`crate::rollout::parse_window_spec`] / [`crate::rollout::parse_window_tz`].
    fn window(&mut self, node: &KdlNode) -> Option<Spanned<fwc_artifacts::rollout::Window>> {
        let rule = "window";
        let mut p = self.props(node, rule, WINDOW_PROPS, 0);
        self.no_children(node, rule);
        let allow = self.text(&mut p, "allow");
        let deny = self.text(&mut p, "deny");
        let tz = self.text(&mut p, "tz");
        let span = self.span(node.span());
        let given = |k: &str| node.entries().iter().any(|e| e.name().is_some_and(|id| id.value() == k));
        let (is_allow, (text, at)) = match (allow, deny) {
            (Some(a), None) => (true, a),
            (None, Some(d)) => (false, d),
            (Some(_), Some(_)) => {
                self.error("rollout-window", "a window is allow= or deny=, not both", span, "this window")
                    .rule(rule)
                    .help("write two windows: window allow=\"Mon-Fri 09:00-17:00\" and window deny=\"Fri 15:00-24:00\"");
                return None;
            }
            (None, None) => {
                if !given("allow") && !given("deny") {
                    let at = self.span(node.name().span());
                    self.error("rollout-window", "this window has neither allow= nor deny=", at, "allow= or deny= missing")
                        .rule(rule)
                        .help("write window allow=\"Mon-Fri 09:00-17:00\" (promote only then) or window deny=\"Fri 15:00-24:00\" (never promote then)");
                }
                return None;
            }
        };
        let key = if is_allow { "allow" } else { "deny" };
        let spec = self.convert_as("rollout-window", rule, key, &text, at, crate::rollout::parse_window_spec)?;
        let (offset, zone) = match tz {
            Some((t, s)) => self.convert_as("rollout-window", rule, "tz", &t, s, crate::rollout::parse_window_tz)?.value,
            None => (0, None),
        };
        let (days, start_min, end_min) = spec.value;
        Some(Spanned::new(fwc_artifacts::rollout::Window { allow: is_allow, days, start_min, end_min, offset_min: offset, tz: zone }, span))
    }

    /// Schedules (issue #26): `during=`, `tz=`, `until=` ([`crate::schedule`]); `tz=` alone
    /// is an error (it says how to read the other two).
    fn schedule(&mut self, p: &mut Props) -> Option<Schedule> {
        let during = self.parsed(p, "during", crate::timewindow::parse_windows);
        let tz_text = self.text(p, "tz");
        let until_text = self.text(p, "until");
        let rule = p.rule.clone();
        let tz = match &tz_text {
            Some((t, span)) => self.convert(&rule, "tz", t, *span, crate::timewindow::parse_zone)?,
            None => Spanned::new(crate::timewindow::Zone::Utc, Span::default()),
        };
        let until = match until_text {
            Some((t, span)) => {
                let end = self.convert(&rule, "until", &t, span, |x| crate::schedule::parse_until(x, &tz.value))?;
                Some(Spanned::new(Until { text: t, end: end.value }, span))
            }
            None => None,
        };
        if during.is_none() && until.is_none() {
            if let Some((_, span)) = tz_text {
                self.error("tz-without-schedule", "tz= without during= or until=", span, "nothing to read in this zone")
                    .rule(rule)
                    .help("tz= says how to read during=\"Mon-Fri 08:00-18:00\" and until=\"2027-01-31\"; add one of them, or remove tz=");
            }
            return None;
        }
        Some(Schedule { during, tz, until, utc: Vec::new() })
    }

    /// [`Parser::convert`] with a `rollout-bad-<key>` code.
    fn rollout_value<T>(&mut self, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        self.convert_as(&format!("rollout-bad-{key}"), rule, key, text, span, f)
    }
}

/// A diagnostic being built; pushed when dropped, so `.rule()` / `.help()` can be chained.
struct DiagBuilder<'d> {
    diags: &'d mut Diagnostics,
    d: Option<Diagnostic>,
}

impl DiagBuilder<'_> {
    fn rule(mut self, rule: impl AsRef<str>) -> Self {
        self.d = self.d.take().map(|d| d.rule(rule.as_ref()));
        self
    }
    fn help(mut self, help: impl Into<String>) -> Self {
        self.d = self.d.take().map(|d| d.help(help));
        self
    }
}

impl Drop for DiagBuilder<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            self.diags.push(d);
        }
    }
}

/// `forward policy=drop { … }` is a chain block; `forward "web" listen=… to=…` is a rule.
fn is_chain_block(node: &KdlNode) -> bool {
    node.entries().iter().all(|e| e.name().is_some_and(|n| matches!(n.value(), "policy" | "reject-with")))
        && (node.children().is_some() || !node.entries().is_empty())
}

/// snat's `to=`: one IP address (the new source).
fn parse_snat_addr(s: &str) -> Result<IpAddr, UnitError> {
    s.trim().parse::<IpAddr>().map_err(|_| UnitError {
        message: format!("\"{s}\" is not an IP address"),
        help: "snat's to= is the new source address, e.g. to=\"198.18.0.1\" (to filter by destination, use dst=)".into(),
    })
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 48
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn valid_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && !s.contains(['/', ' ', '\t', '"', '\\']) && s != "." && s != ".."
}

fn parse_ifname(s: &str) -> Result<String, UnitError> {
    if valid_ifname(s) {
        Ok(s.to_string())
    } else {
        Err(UnitError {
            message: format!("\"{s}\" is not an interface name"),
            help: "interface names are 1-15 characters without spaces or `/`, e.g. in=\"eth0\"".into(),
        })
    }
}

/// `bridges="docker0,br-*"`: interface names, each may end in `*` (a prefix wildcard).
fn parse_bridges(s: &str) -> Result<Vec<String>, UnitError> {
    let help = "a comma-separated list of interface names, each may end in `*`: bridges=\"docker0,br-*,podman*\"";
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let stem = part.strip_suffix('*').unwrap_or(part);
        if part.is_empty() || !valid_ifname(part) || stem.contains('*') || (stem.is_empty() && part != "*") {
            let what = if part.is_empty() { "an empty entry".to_string() } else { format!("\"{part}\"") };
            return Err(UnitError { message: format!("{what} is not an interface name or pattern"), help: help.into() });
        }
        if part == "*" {
            return Err(UnitError { message: "\"*\" would make every interface a container bridge".into(), help: help.into() });
        }
        out.push(part.to_string());
    }
    Ok(out)
}

/// `on=` text -> a selector: a host name, or `label=value` pairs that must all match.
pub fn parse_selector(s: &str) -> Result<Selector, UnitError> {
    let help = "write on=\"edge-1\" (a host name) or on=\"role=edge,region=eu\" (labels that must all match)";
    if !s.contains('=') {
        return if valid_name(s) { Ok(Selector::Name(s.to_string())) } else { Err(UnitError { message: format!("\"{s}\" is not a host name"), help: help.into() }) };
    }
    let mut labels = BTreeMap::new();
    for part in s.split(',') {
        match part.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => return Err(UnitError { message: format!("\"{part}\" in \"{s}\" is not label=value"), help: help.into() }),
        }
    }
    Ok(Selector::Labels(labels))
}

/// `percent=50` (or `"50%"`): a whole percentage from 1 to 100.
fn parse_percent(s: &str) -> Result<u8, UnitError> {
    let help = "write percent=10 (a whole number from 1 to 100; percentages are cumulative: percent=10 then percent=50 reach 10% then 50% of the hosts left)";
    match s.trim().trim_end_matches('%').trim().parse::<u32>() {
        Ok(n @ 1..=100) => Ok(n as u8),
        Ok(n) => Err(UnitError { message: format!("{n} is not from 1 to 100"), help: help.into() }),
        Err(_) => Err(UnitError { message: format!("\"{s}\" is not a whole percentage"), help: help.into() }),
    }
}

/// `soak="10m"`: a duration in whole seconds.
fn parse_soak(s: &str) -> Result<u64, UnitError> {
    let ms = units::parse_duration_ms(s)?;
    if ms % 1000 != 0 {
        return Err(UnitError { message: format!("\"{s}\" is not a whole number of seconds"), help: "write soak=\"30s\", \"10m\" or \"1h\"".into() });
    }
    Ok(ms / 1000)
}

/// A count of hosts (`2`) or a share of a wave (`"10%"`, from `min_percent` to 100%): the value
/// of `max-unavailable=` and `max-parallel=`. Ok(Err(n)) is a count, Ok(Ok(p)) a percentage.
fn parse_count_or_percent(s: &str, min_percent: u32, help: &str) -> Result<Result<u8, u32>, UnitError> {
    let bad = |m: String| UnitError { message: m, help: help.into() };
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        return match p.trim().parse::<u32>() {
            Ok(n) if (min_percent..=100).contains(&n) => Ok(Ok(n as u8)),
            _ => Err(bad(format!("\"{s}\" is not a percentage from {min_percent}% to 100%"))),
        };
    }
    t.parse::<u32>().map(Err).map_err(|_| bad(format!("\"{s}\" is not a number of hosts or a percentage")))
}

/// `max-unavailable=2` (hosts) or `max-unavailable="10%"` (of the wave's hosts).
fn parse_max_unavailable(s: &str) -> Result<fwc_artifacts::rollout::MaxUnavailable, UnitError> {
    use fwc_artifacts::rollout::MaxUnavailable;
    let help = "write max-unavailable=2 (hosts of the wave that may be missing) or max-unavailable=\"10%\" (of the wave's hosts)";
    Ok(match parse_count_or_percent(s, 0, help)? {
        Ok(p) => MaxUnavailable::Percent(p),
        Err(n) => MaxUnavailable::Hosts(n),
    })
}

/// `max-parallel=50` (hosts of the wave applying at once) or `max-parallel="25%"` (of the wave).
fn parse_max_parallel(s: &str) -> Result<fwc_artifacts::rollout::MaxParallel, UnitError> {
    use fwc_artifacts::rollout::MaxParallel;
    let help = "write max-parallel=50 (at most 50 hosts of the wave apply at once) or max-parallel=\"25%\" (of the wave's hosts)";
    match parse_count_or_percent(s, 1, help)? {
        Ok(p) => Ok(MaxParallel::Percent(p)),
        Err(0) => Err(UnitError { message: "max-parallel=0 would never apply the wave".into(), help: help.into() }),
        Err(n) => Ok(MaxParallel::Hosts(n)),
    }
}

/// `on-failure="halt"` (hosts keep what they have) or `"rollback"` (promoted hosts go back to stable).
fn parse_on_failure(s: &str) -> Result<fwc_artifacts::rollout::OnFailure, UnitError> {
    use fwc_artifacts::rollout::OnFailure;
    match s.trim() {
        "halt" => Ok(OnFailure::Halt),
        "rollback" => Ok(OnFailure::Rollback),
        other => Err(UnitError {
            message: format!("\"{other}\" is not halt or rollback"),
            help: "write on-failure=\"halt\" (a failure stops the rollout; promoted hosts keep the commit) or on-failure=\"rollback\" (they go back to the stable commit)".into(),
        }),
    }
}

/// `tcp="198.18.0.1:443"`, `"[2001:db8::1]:443"` or `"git.example.com:22"`.
fn parse_probe_tcp(name: &str, s: &str) -> Result<fwc_artifacts::rollout::Probe, UnitError> {
    let help = "write tcp=\"198.18.0.1:443\", \"[2001:db8::1]:443\" or \"git.example.com:22\" (an address or DNS name and a port)";
    let bad = |m: String| UnitError { message: m, help: help.into() };
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => rest.split_once("]:").ok_or_else(|| bad(format!("\"{s}\" has no port")))?,
        None => s.rsplit_once(':').ok_or_else(|| bad(format!("\"{s}\" has no port")))?,
    };
    let ok_host = host.parse::<IpAddr>().is_ok() || (!looks_like_ipv4(host) && valid_dns_name(host) && !host.contains(':'));
    if !ok_host {
        return Err(bad(format!("\"{host}\" is neither an IP address nor a DNS name")));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(fwc_artifacts::rollout::Probe::Tcp { name: name.into(), address: s.into() }),
        _ => Err(bad(format!("\"{port}\" is not a port from 1 to 65535"))),
    }
}

/// `http="http://127.0.0.1:8080/healthz"`: plain HTTP (the agent has no TLS client).
fn parse_probe_http(name: &str, s: &str) -> Result<fwc_artifacts::rollout::Probe, UnitError> {
    let help = "write http=\"http://127.0.0.1:8080/healthz\" (a GET that must answer 2xx)";
    if s.starts_with("https://") {
        return Err(UnitError { message: format!("\"{s}\" is HTTPS; probes speak plain HTTP"), help: "probe a plain-HTTP health endpoint (for a TLS port, a tcp= probe checks that it accepts connections)".into() });
    }
    let Some(rest) = s.strip_prefix("http://") else {
        return Err(UnitError { message: format!("\"{s}\" is not an http:// URL"), help: help.into() });
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains(['@', ' ']) {
        return Err(UnitError { message: format!("\"{s}\" names no host"), help: help.into() });
    }
    Ok(fwc_artifacts::rollout::Probe::Http { name: name.into(), url: s.into() })
}

fn parse_addr_match(s: &str) -> Result<AddrMatch, UnitError> {
    if let Some(name) = s.strip_prefix('@') {
        if !valid_name(name) {
            return Err(UnitError { message: format!("\"{s}\" is not a set reference"), help: "write from=\"@setname\"".into() });
        }
        return Ok(AddrMatch::Set(name.to_string()));
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        out.push(units::parse_addr(part)?);
    }
    Ok(AddrMatch::Literal(out))
}

fn parse_proxy_protocol(s: &str) -> Result<u8, UnitError> {
    match s {
        "1" | "v1" => Ok(1),
        "2" | "v2" => Ok(2),
        _ => Err(UnitError { message: format!("PROXY protocol version \"{s}\" does not exist"), help: "write proxy-protocol=1 or proxy-protocol=2".into() }),
    }
}

const LISTEN_HELP: &str = "write listen=\":8080\", \"203.0.113.1:80\", \"[2001:db8::1]:443\" or a range \":27015-27020\"";

/// `":8080"`, `"0.0.0.0:80"`, `"[::1]:80-90"`, or a bare port number.
fn parse_listen(s: &str) -> Result<Listen, UnitError> {
    let bad = |m: String| UnitError { message: m, help: LISTEN_HELP.into() };
    if let Ok(ports) = units::parse_port_range(s) {
        return Ok(Listen { addr: None, ports });
    }
    let (host, ports) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(|| bad(format!("\"{s}\" has no port")))?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or_else(|| bad(format!("\"{s}\" has no port")))?
    };
    let addr = if host.is_empty() {
        None
    } else {
        Some(host.parse::<IpAddr>().map_err(|_| bad(format!("\"{host}\" is not an IP address (listen addresses are literals)")))?)
    };
    let ports = units::parse_port_range(ports).map_err(|e| UnitError { message: e.message, help: LISTEN_HELP.into() })?;
    Ok(Listen { addr, ports })
}

const TARGET_HELP: &str = "write to=\"10.0.0.5:80\", \"10.0.0.5\" (same port), \"[2001:db8::5]:80\", \"api.internal:8443\" or several, comma separated";

fn parse_targets(s: &str) -> Result<Vec<Target>, UnitError> {
    s.split(',').map(|t| parse_target(t.trim())).collect()
}

fn parse_target(s: &str) -> Result<Target, UnitError> {
    let bad = |m: String| UnitError { message: m, help: TARGET_HELP.into() };
    if s.is_empty() {
        return Err(bad("empty target".into()));
    }
    let port = |p: &str| units::parse_port_range(p).map_err(|e| UnitError { message: e.message, help: TARGET_HELP.into() });
    if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = match rest.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => (h, Some(p.strip_prefix(':').ok_or_else(|| bad(format!("\"{s}\": expected :port after ]")))?)),
            None => return Err(bad(format!("\"{s}\" misses the closing ]"))),
        };
        let ip: IpAddr = h.parse().map_err(|_| bad(format!("\"{h}\" is not an IPv6 address")))?;
        return Ok(Target { host: TargetHost::Ip(ip), ports: p.map(port).transpose()? });
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(Target { host: TargetHost::Ip(ip), ports: None });
    }
    let (host, ports) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(port(p)?)),
        None => (s, None),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Target { host: TargetHost::Ip(ip), ports });
    }
    if looks_like_ipv4(host) {
        return Err(bad(format!("\"{host}\" is not a valid IPv4 address")));
    }
    if !valid_dns_name(host) {
        return Err(bad(format!("\"{host}\" is neither an IP address nor a DNS name")));
    }
    Ok(Target { host: TargetHost::Dns(host.to_ascii_lowercase()), ports })
}

/// `sni=`: a DNS name, or `*.` and a DNS name (the wildcard covers exactly one label).
fn parse_sni(s: &str) -> Result<String, UnitError> {
    let help = "write sni=\"www.example.com\" or sni=\"*.example.com\" (one wildcard label, leftmost)";
    let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    let host = name.strip_prefix("*.").unwrap_or(&name);
    if host.parse::<IpAddr>().is_ok() {
        return Err(UnitError { message: format!("\"{s}\" is an IP address; TLS server names are DNS names"), help: help.into() });
    }
    if !valid_dns_name(host) {
        return Err(UnitError { message: format!("\"{s}\" is not a DNS name or *.name"), help: help.into() });
    }
    Ok(name)
}

fn looks_like_ipv4(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit() || c == '.') && s.contains('.')
}

fn valid_dns_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-') && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_and_targets() {
        assert_eq!(parse_listen(":8080").unwrap(), Listen { addr: None, ports: PortRange::single(8080) });
        assert_eq!(parse_listen("8080").unwrap().ports, PortRange::single(8080));
        assert_eq!(parse_listen("[2001:db8::1]:80-90").unwrap().ports, PortRange { lo: 80, hi: 90 });
        assert!(parse_listen("example.com:80").is_err());
        let t = parse_targets("10.0.0.8:7000,10.0.0.9:7000").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(parse_target("api.internal:8443").unwrap().host, TargetHost::Dns("api.internal".into()));
        assert_eq!(parse_target("[2001:db8::5]").unwrap().ports, None);
        assert!(parse_target("10.0.0.300:80").is_err());
        assert!(parse_target("bad_name:80").is_err());
    }

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("prot", FILTER_PROPS.iter().copied()), Some("proto"));
        assert_eq!(did_you_mean("bandwith", FORWARD_PROPS.iter().copied()), Some("bandwidth"));
        assert_eq!(did_you_mean("zzzzzz", FORWARD_PROPS.iter().copied()), None);
    }
}
