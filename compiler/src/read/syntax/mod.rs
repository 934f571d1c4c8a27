//! KDL v2 documents -> the typed model. Files are read by fwc's own reader ([`crate::read::kdl_reader`])
//! and its nodes converted by hand so every value keeps its span; templates (`*.kdl.j2`) are rendered with minijinja for one host
//! first. All problems found in a run are collected, not just the first.
//!
//! - [`read`]: text -> KDL documents (limits, the reader, syntax problems);
//! - [`template`]: templates rendered for one host;
//! - [`parser`]: the node reader and the property helpers every node kind uses;
//! - [`document`]: the top-level nodes, dispatched to their kind:
//!   [`declarations`] (`host`, `set`), [`rules`] (chain blocks, filter rules, snat, shape),
//!   [`forward`], [`rollout`]; [`rule_props`] holds the property groups several kinds share;
//! - [`values`]: scalar values several kinds read (names, selectors, address matches).

mod declarations;
mod document;
mod forward;
mod parser;
mod read;
mod rollout;
mod rule_props;
mod rules;
mod template;
mod values;

use crate::diag::Diagnostics;
use crate::model::Ruleset;
use crate::read::source::{SourceMap, SourceTree, ROOT_FILE};
use parser::{declared_sets, finish, Parser};
use read::parse_parallel;

pub use crate::suggest::did_you_mean;
pub use declarations::MAX_DYNAMIC_SET_SIZE;
pub use document::LANGUAGE_VERSION;
pub use read::{parse_untrusted, parse_untrusted_lossless, KdlProblem, ParseFailure};
pub use template::add_templates;
pub use values::parse_selector;

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
