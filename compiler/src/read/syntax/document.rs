//! One KDL document -> the ruleset: the top-level nodes dispatched to their kind's reader, and the
//! `fwc` version node.

use crate::read::kdl_reader::{Document as KdlDoc, Node as KdlNode, Value as KdlValue};
use crate::read::limits;
use crate::model::*;
use crate::suggest::did_you_mean;

use super::parser::Parser;
use super::read::{parse_untrusted, ParseFailure};
use super::rules::FILTER_ACTIONS;

/// The rule-language version this compiler reads.
pub const LANGUAGE_VERSION: i128 = 1;

pub(super) const TOP_NODES: &[&str] = &["fwc", "host", "set", "input", "forward", "output", "containers", "prerouting", "shape", "masquerade", "snat", "rollout"];

impl Parser<'_, '_> {
    pub(super) fn file(&mut self, is_root: bool, text: &str, rs: &mut Ruleset) {
        let parsed = limits::on_big_stack(|| parse_untrusted(text));
        self.document(is_root, text, parsed, rs)
    }

    /// Convert an already parsed (or failed) KDL document of `text`.
    pub(super) fn document(&mut self, is_root: bool, text: &str, parsed: Result<KdlDoc, ParseFailure>, rs: &mut Ruleset) {
        let doc = match parsed {
            Ok(doc) => doc,
            Err(ParseFailure::Limit(hit)) => {
                let span = hit.span(self.file);
                self.error("limit", hit.message, span, hit.label).help(hit.help);
                return;
            }
            Err(ParseFailure::Kdl(problems)) => {
                // fwc's own words first (found from the text, whatever the parser said) …
                let hints = crate::read::syntax_hints::explain(text);
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
        // Room for what this file adds, so the model's vectors do not grow by doubling (they
        // were up to twice their length, and each doubling held the old and the new).
        let count = |is: &dyn Fn(&KdlNode) -> bool| doc.nodes().iter().filter(|n| is(n)).count();
        rs.sets.reserve_exact(count(&|n| n.name().value() == "set"));
        rs.forwards.reserve_exact(count(&|n| n.name().value() == "forward" && !is_chain_block(n)));
        rs.shapes.reserve_exact(count(&|n| n.name().value() == "shape"));
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
                "input" | "output" | "containers" | "prerouting" => {
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
                    let mut help = String::from("top-level nodes are fwc, host, set, input, forward, output, containers, prerouting, shape, masquerade, snat and rollout");
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

    pub(super) fn version(&mut self, node: &KdlNode) {
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
}

/// `forward policy=drop { … }` is a chain block; `forward "web" listen=… to=…` is a rule.
pub(super) fn is_chain_block(node: &KdlNode) -> bool {
    node.entries().iter().all(|e| e.name().is_some_and(|n| matches!(n.value(), "policy" | "reject-with" | "router-advertisements")))
        && (node.children().is_some() || !node.entries().is_empty())
}
