//! The node reader's core: [`Parser`] (one file's nodes into the ruleset, diagnostics collected)
//! and its property helpers (read once, typed, each value with its span), shared by every node kind.

use std::collections::BTreeMap;

use crate::diag::{Diagnostic, Diagnostics};
use crate::read::kdl_reader::{Document as KdlDoc, Entry as KdlEntry, Node as KdlNode, TextSpan, Value as KdlValue};
use crate::model::*;
use crate::read::source::SourceMap;
use crate::suggest::did_you_mean;
use crate::read::units::UnitError;

use super::values::{parse_addr_match, parse_selector, valid_name};

/// Properties that may be given several times (each occurrence counts; read from the node's entries).
const REPEATABLE_PROPS: &[&str] = &["file"];

pub(crate) fn to_span(file: u32, s: TextSpan) -> Span {
    Span { file, offset: s.offset as u32, len: s.len as u32 }
}

/// Reads the nodes of one file into the ruleset, collecting diagnostics.
pub(super) struct Parser<'m, 'd> {
    pub(super) map: &'m SourceMap,
    pub(super) file: u32,
    pub(super) diags: &'d mut Diagnostics,
    pub(super) in_template: bool,
    /// Names of the sets declared anywhere in the repository (for hints only).
    pub(super) sets: &'m [String],
}

pub(super) fn declared_sets(doc: &KdlDoc) -> impl Iterator<Item = String> + '_ {
    doc.nodes().iter().filter(|n| n.name().value() == "set").filter_map(|n| match n.entries().first().map(|e| e.value()) {
        Some(KdlValue::String(s)) => Some(s.clone()),
        _ => None,
    })
}

/// A node's properties, each with its span, read once; leftovers are unknown properties.
pub(super) struct Props<'n> {
    pub(super) node: &'n KdlNode,
    pub(super) rule: String,
    pub(super) values: BTreeMap<String, &'n KdlEntry>,
}

impl<'n> Props<'n> {
    pub(super) fn get(&mut self, name: &str) -> Option<&'n KdlEntry> {
        self.values.remove(name)
    }
}

pub(super) fn value_text(v: &KdlValue) -> Option<String> {
    match v {
        KdlValue::String(s) => Some(s.clone()),
        KdlValue::Integer(i) => Some(i.to_string()),
        KdlValue::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

pub(super) fn finish(rs: Ruleset, diags: Diagnostics) -> Result<Ruleset, Diagnostics> {
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(rs)
    }
}

impl Parser<'_, '_> {
    pub(super) fn span(&self, s: TextSpan) -> Span {
        to_span(self.file, s)
    }

    pub(super) fn error(&mut self, code: &str, message: impl Into<String>, span: Span, label: impl Into<String>) -> DiagBuilder<'_> {
        let d = Diagnostic::error(code, message).at(self.map, span, label);
        DiagBuilder { diags: self.diags, d: Some(d) }
    }

    /// The single positional name of a node: `forward "web" …`.
    pub(super) fn name(&mut self, node: &KdlNode, what: &str) -> Option<Spanned<String>> {
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
    pub(super) fn props<'n>(&mut self, node: &'n KdlNode, rule: &str, allowed: &[&str], positional: usize) -> Props<'n> {
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

    pub(super) fn no_children(&mut self, node: &KdlNode, rule: &str) {
        if let Some(c) = node.children() {
            let span = self.span(c.span());
            self.error("unexpected-children", format!("{rule} does not take a block"), span, "this block")
                .rule(rule)
                .help("remove the { … } block");
        }
    }

    /// A property as text (strings and numbers), with its span.
    pub(super) fn text(&mut self, props: &mut Props, key: &str) -> Option<(String, Span)> {
        let e = props.get(key)?;
        let span = self.span(e.span());
        let raw = self.map.file(self.file).text.get(span.offset as usize..(span.offset + span.len) as usize).unwrap_or("");
        if let Some(h) = crate::read::syntax_hints::single_quoted(raw, span.offset as usize) {
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

    pub(super) fn required(&mut self, props: &mut Props, key: &str, example: &str) -> Option<(String, Span)> {
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
    pub(super) fn parsed<T>(&mut self, props: &mut Props, key: &str, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        let (text, span) = self.text(props, key)?;
        self.convert(&props.rule.clone(), key, &text, span, f)
    }

    pub(super) fn convert<T>(&mut self, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        self.convert_as(&format!("bad-{key}"), rule, key, text, span, f)
    }

    /// [`Parser::convert`] reporting under `code`.
    pub(super) fn convert_as<T>(&mut self, code: &str, rule: &str, key: &str, text: &str, span: Span, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        match f(text) {
            Ok(v) => Some(Spanned::new(v, span)),
            Err(e) => {
                self.error(code, format!("bad {key}: {}", e.message), span, "this value").rule(rule).help(e.help);
                None
            }
        }
    }

    pub(super) fn bool(&mut self, props: &mut Props, key: &str) -> bool {
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

    pub(super) fn choice<T: Copy>(&mut self, props: &mut Props, key: &str, options: &[(&str, T)]) -> Option<Spanned<T>> {
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

    pub(super) fn number(&mut self, props: &mut Props, key: &str, min: i128, max: i128) -> Option<Spanned<u64>> {
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

    pub(super) fn comment(&mut self, props: &mut Props) -> Option<String> {
        self.text(props, "comment").map(|(t, _)| t)
    }

    pub(super) fn selector(&mut self, props: &mut Props) -> Option<Spanned<Selector>> {
        self.parsed(props, "on", parse_selector)
    }

    pub(super) fn addr_match(&mut self, props: &mut Props, key: &str) -> Option<Spanned<AddrMatch>> {
        let sets = self.sets;
        self.parsed(props, key, |s| addr_match_of(sets, s))
    }

    /// A list property that may start with `!` (none of the list): the parsed list, and
    /// `negated` set when it did.
    pub(super) fn parsed_not<T>(&mut self, props: &mut Props, key: &str, negated: &mut bool, f: impl Fn(&str) -> Result<T, UnitError>) -> Option<Spanned<T>> {
        let (text, span) = self.text(props, key)?;
        let (not, rest) = crate::features::headers::strip_not(&text);
        *negated = not;
        self.convert(&props.rule.clone(), key, rest, span, f)
    }

    /// [`Parser::addr_match`] that may start with `!`.
    pub(super) fn addr_match_not(&mut self, props: &mut Props, key: &str, negated: &mut bool) -> Option<Spanned<AddrMatch>> {
        let sets = self.sets;
        self.parsed_not(props, key, negated, |s| addr_match_of(sets, s))
    }
}

/// An address match (`@set` or literals); `from="office"` with a set `office`: the `@` was
/// forgotten, and the hint says so.
fn addr_match_of(sets: &[String], s: &str) -> Result<AddrMatch, UnitError> {
    parse_addr_match(s).map_err(|mut e| {
        if sets.iter().any(|n| n == s) {
            e.help = format!("did you mean \"@{s}\"? set \"{s}\" exists; sets are referenced with @");
        }
        e
    })
}

/// A diagnostic being built; pushed when dropped, so `.rule()` / `.help()` can be chained.
pub(super) struct DiagBuilder<'d> {
    diags: &'d mut Diagnostics,
    d: Option<Diagnostic>,
}

impl DiagBuilder<'_> {
    pub(super) fn rule(mut self, rule: impl AsRef<str>) -> Self {
        self.d = self.d.take().map(|d| d.rule(rule.as_ref()));
        self
    }
    pub(super) fn help(mut self, help: impl Into<String>) -> Self {
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
