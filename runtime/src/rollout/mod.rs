//! Fleet rollouts: a commit reaches the fleet in health-gated waves. The controller's
//! pure decision ([`controller`]), the rollout state on a git ref ([`state_ref`]), host reports
//! and gates from Prometheus ([`prometheus`]), promotion windows ([`window`]) and the I/O step that ties them ([`advance`]);
//! the agent's pure decision of which commit to run ([`follow`]).

pub mod advance;
pub mod controller;
pub mod endpoint;
pub mod follow;
pub mod rewind;
pub mod prometheus;
pub mod state_ref;
pub mod textfile;
pub mod trust;
pub mod window;

/// Why a rollout command failed: what happened and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutError {
    pub what: String,
    pub help: String,
}

impl RolloutError {
    pub fn new(what: impl Into<String>, help: impl Into<String>) -> RolloutError {
        RolloutError { what: what.into(), help: help.into() }
    }
}

impl std::fmt::Display for RolloutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for RolloutError {}

impl miette::Diagnostic for RolloutError {
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        (!self.help.is_empty()).then(|| Box::new(&self.help) as Box<dyn std::fmt::Display>)
    }
}
