//! Test helper: compare the `kdl` crate's reading of a document with fwc's reader's (nodes,
//! names, entries, values, type annotations, spans). Used by kdl_differential.rs and fuzz.rs.

use fwc_compiler::read::kdl_reader::{self, Document, Value};
use kdl::{KdlDocument, KdlValue};

fn span(s: miette::SourceSpan) -> (usize, usize) {
    (s.offset(), s.len())
}

fn rspan(s: kdl_reader::TextSpan) -> (usize, usize) {
    (s.offset(), s.len())
}

fn same_value(k: &KdlValue, r: &Value) -> bool {
    match (k, r) {
        (KdlValue::String(a), Value::String(b)) => a == b,
        (KdlValue::Integer(a), Value::Integer(b)) => a == b,
        (KdlValue::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
        (KdlValue::Bool(a), Value::Bool(b)) => a == b,
        (KdlValue::Null, Value::Null) => true,
        _ => false,
    }
}

/// Every difference between the two readings of a document, appended to `out`.
pub fn compare(k: &KdlDocument, r: &Document, path: &str, out: &mut Vec<String>) {
    if k.nodes().len() != r.nodes().len() {
        out.push(format!("{path}: {} nodes vs {}", k.nodes().len(), r.nodes().len()));
        return;
    }
    for (i, (kn, rn)) in k.nodes().iter().zip(r.nodes()).enumerate() {
        let at = format!("{path}/{i}:{}", kn.name().value());
        let mut check = |what: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{at}: {what}: kdl {a} vs fwc {b}"));
            }
        };
        check("name", format!("{:?}", (kn.name().value(), span(kn.name().span()))), format!("{:?}", (rn.name().value(), rspan(rn.name().span()))));
        check("node span", format!("{:?}", span(kn.span())), format!("{:?}", rspan(rn.span())));
        check("type", format!("{:?}", kn.ty().map(|t| (t.value().to_string(), span(t.span())))), format!("{:?}", rn.ty().map(|t| (t.value().to_string(), rspan(t.span())))));
        check("entries", kn.entries().len().to_string(), rn.entries().len().to_string());
        for (j, (ke, re)) in kn.entries().iter().zip(rn.entries()).enumerate() {
            check(&format!("entry {j} name"), format!("{:?}", ke.name().map(|n| (n.value().to_string(), span(n.span())))), format!("{:?}", re.name().map(|n| (n.value().to_string(), rspan(n.span())))));
            check(&format!("entry {j} type"), format!("{:?}", ke.ty().map(|t| t.value().to_string())), format!("{:?}", re.ty().map(|t| t.value().to_string())));
            check(&format!("entry {j} span"), format!("{:?}", span(ke.span())), format!("{:?}", rspan(re.span())));
            if !same_value(ke.value(), re.value()) {
                check(&format!("entry {j} value"), format!("{:?}", ke.value()), format!("{:?}", re.value()));
            }
        }
        drop(check);
        match (kn.children(), rn.children()) {
            (None, None) => {}
            (Some(kc), Some(rc)) => {
                if span(kc.span()) != rspan(rc.span()) {
                    out.push(format!("{at}: block span: kdl {:?} vs fwc {:?}", span(kc.span()), rspan(rc.span())));
                }
                compare(kc, rc, &at, out);
            }
            (a, b) => out.push(format!("{at}: block: kdl {} vs fwc {}", a.is_some(), b.is_some())),
        }
    }
}

