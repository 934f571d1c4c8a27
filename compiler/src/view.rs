//! One host's view of a repository ([`HostView`]): the value the pipeline's entry points
//! ([`crate::load_host`]) hand to the emitters, the evaluator and the tools.

use crate::diag::Diagnostics;
use crate::model::{Host, Ruleset};
use crate::read::sourcemap::SourceMap;

/// One host's view of a repository, parsed and checked (warnings may remain).
#[derive(Debug)]
pub struct HostView {
    pub host: Host,
    pub ruleset: Ruleset,
    pub map: SourceMap,
    pub warnings: Diagnostics,
}
