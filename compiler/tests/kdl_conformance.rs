//! fwc's KDL v2 reader against the official conformance cases (compiler/tests/kdl-conformance,
//! a copy of ../shared/kdl-conformance): every `_fail` input is refused, every other input
//! reads to the same document as its expected file (comments and layout aside, properties
//! deduplicated rightmost-wins and sorted, empty child blocks dropped, numbers by value).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fwc_compiler::read::kdl_reader::{read, Document, Value};

#[derive(Debug, PartialEq)]
enum V {
    Str(String),
    Int(i128),
    Float(u64),
    Bool(bool),
    Null,
}

#[derive(Debug, PartialEq)]
struct N {
    ty: Option<String>,
    name: String,
    args: Vec<(Option<String>, V)>,
    props: BTreeMap<String, (Option<String>, V)>,
    children: Vec<N>,
}

fn v(value: &Value) -> V {
    match value {
        Value::String(s) => V::Str(s.clone()),
        Value::Integer(i) => V::Int(*i),
        Value::Float(f) if f.is_nan() => V::Float(f64::NAN.to_bits()),
        Value::Float(f) => V::Float(f.to_bits()),
        Value::Bool(b) => V::Bool(*b),
        Value::Null => V::Null,
    }
}

/// The document as TEST-RULES.md prints it, as a value.
fn meaning(doc: &Document) -> Vec<N> {
    doc.nodes()
        .iter()
        .map(|n| {
            let mut args = Vec::new();
            let mut props = BTreeMap::new();
            for e in n.entries() {
                let ty = e.ty().map(|t| t.value().to_string());
                match e.name() {
                    Some(k) => {
                        props.insert(k.value().to_string(), (ty, v(e.value())));
                    }
                    None => args.push((ty, v(e.value()))),
                }
            }
            N {
                ty: n.ty().map(|t| t.value().to_string()),
                name: n.name().value().to_string(),
                args,
                props,
                children: n.children().map(meaning).unwrap_or_default(),
            }
        })
        .collect()
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kdl-conformance")
}

#[test]
fn official_kdl_v2_cases() {
    let dir = cases_dir();
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(dir.join("input")).expect("tests/kdl-conformance/input").map(|e| e.unwrap().path()).collect();
    inputs.sort();
    assert!(inputs.len() > 300, "expected the ~336 official cases, found {}", inputs.len());
    let (mut passed, mut failed) = (0, Vec::new());
    for path in &inputs {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let got = read(&text);
        let outcome = if name.ends_with("_fail") {
            match got {
                Err(_) => Ok(()),
                Ok(doc) => Err(format!("accepted, read as {:?}", meaning(&doc))),
            }
        } else {
            let expected_text = std::fs::read_to_string(dir.join("expected_kdl").join(format!("{name}.kdl"))).unwrap();
            let expected = read(&expected_text).map(|d| meaning(&d)).unwrap_or_else(|e| panic!("{name}: expected file unreadable: {e}"));
            match got {
                Ok(doc) if meaning(&doc) == expected => Ok(()),
                Ok(doc) => Err(format!("read as {:?}\nexpected {:?}", meaning(&doc), expected)),
                Err(e) => Err(format!("refused: {e}")),
            }
        };
        match outcome {
            Ok(()) => passed += 1,
            Err(why) => failed.push(format!("{name}: {why}")),
        }
    }
    println!("KDL v2 conformance: {passed} of {} cases pass", inputs.len());
    assert!(failed.is_empty(), "{} of {} cases fail:\n{}", failed.len(), inputs.len(), failed.join("\n"));
}

/// The copy in the repository is the shared one, where the shared folder is beside the checkout.
#[test]
fn copy_matches_shared_cases() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kdl-conformance/test_cases");
    if !shared.is_dir() {
        println!("SKIP: {} is absent; the repository's copy is used", shared.display());
        return;
    }
    for sub in ["input", "expected_kdl"] {
        let list = |d: &Path| {
            let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap())).collect();
            v.sort();
            v
        };
        assert!(list(&shared.join(sub)) == list(&cases_dir().join(sub)), "tests/kdl-conformance/{sub} differs from {}", shared.join(sub).display());
    }
}
