//! Templates (`*.kdl.j2`): rendered with minijinja for one host, then parsed like a plain file;
//! a failed render becomes a diagnostic at the template line, with fwc's hints.

use std::collections::BTreeMap;

use crate::diag::{Diagnostic, Diagnostics};
use crate::read::limits;
use crate::model::*;
use crate::read::source::{SourceMap, SourceTree};

use super::parser::{finish, Parser};

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
                        match crate::read::syntax_hints::undefined_variable(text, at, &host.name.value, &known) {
                            Some(h) => {
                                span = Span { file: id, offset: h.offset as u32, len: h.len as u32 };
                                (detail, help) = (h.detail, h.help);
                            }
                            None => help = "undefined variables are errors: templates see host.name, host.labels, host.vars and hosts (use `{% if x is defined %}` for optional ones)".into(),
                        }
                    }
                    minijinja::ErrorKind::SyntaxError => {
                        if let Some(h) = crate::read::syntax_hints::unclosed_template_block(text) {
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

pub(super) fn host_value(h: &Host) -> minijinja::Value {
    minijinja::context! { name => h.name.value.clone(), labels => h.labels.clone(), vars => h.vars.clone() }
}

/// The names a template can use under a dotted prefix ("" = top level), for hints.
pub(super) fn template_names(host: &Host, prefix: &str) -> Option<Vec<String>> {
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
pub(super) fn template_error_span(text: &str, e: &minijinja::Error, file: u32) -> Span {
    let line = e.line().unwrap_or(1).max(1);
    let start: usize = text.split_inclusive('\n').take(line - 1).map(str::len).sum();
    let len = text[start.min(text.len())..].find('\n').unwrap_or(text.len() - start.min(text.len()));
    match e.range() {
        Some(r) => Span { file, offset: r.start as u32, len: (r.end - r.start) as u32 },
        None => Span { file, offset: start as u32, len: len as u32 },
    }
}
