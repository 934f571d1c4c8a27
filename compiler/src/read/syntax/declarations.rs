//! `host` and `set` nodes: the fleet's hosts (labels, template vars) and address sets (listed,
//! from files, or dynamic).

use std::collections::BTreeMap;

use crate::read::kdl_reader::{Entry as KdlEntry, Node as KdlNode, Value as KdlValue};
use crate::model::*;
use crate::suggest::did_you_mean;
use crate::read::units;

use super::parser::{value_text, Parser, Props};

pub(super) const SET_PROPS: &[&str] = &["file", "dynamic", "timeout", "size"];

/// Largest `size=` of a dynamic set (elements per address family).
pub const MAX_DYNAMIC_SET_SIZE: i128 = 16_777_216;

impl Parser<'_, '_> {
    pub(super) fn host(&mut self, node: &KdlNode) -> Option<Host> {
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

    pub(super) fn set(&mut self, node: &KdlNode) -> Option<AddrSet> {
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
        Some(AddrSet { name, elements, files, dynamic, span: self.span(node.span()), from_file: None })
    }

    /// `dynamic=#true timeout="1h" size=65536`; `timeout`/`size` without `dynamic=#true` are errors.
    pub(super) fn dynamic_set(&mut self, props: &mut Props, node: &KdlNode, rule: &str) -> Option<DynamicSet> {
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
}
