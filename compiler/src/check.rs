//! Semantic checks. (being written)
use crate::diag::Diagnostics;
use crate::model::Ruleset;
use crate::source::SourceMap;
pub fn check(_map: &SourceMap, _rs: &Ruleset) -> Result<Diagnostics, Diagnostics> {
    Ok(Diagnostics::default())
}
