//! KDL v2 -> typed model. (being written)
use crate::diag::Diagnostics;
use crate::model::*;
use crate::source::{SourceMap, SourceTree};

pub fn parse_plain(_tree: &SourceTree, _map: &mut SourceMap) -> Result<Ruleset, Diagnostics> {
    Ok(Ruleset::default())
}
pub fn add_templates(_tree: &SourceTree, _map: &mut SourceMap, rs: Ruleset, _host: &Host) -> Result<Ruleset, Diagnostics> {
    Ok(rs)
}
pub fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates.into_iter().find(|c| c.starts_with(&word[..1.min(word.len())]))
}
