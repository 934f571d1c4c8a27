//! Why an import stopped, with a hint for each reason.

use super::model::Refusal;

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{what}")]
    Source { what: String, hint: String },
    #[error("{} construct(s) of the original have no fwc form", .0.len())]
    Refused(Vec<Refusal>),
    /// The evaluator cannot run the original (the reason names the rule by its origin).
    #[error("the evaluator cannot run the original ruleset: {0}")]
    Eval(String),
    #[error("cannot write {path}: {error}")]
    Write { path: String, error: std::io::Error },
}

impl ImportError {
    pub fn hint(&self) -> String {
        match self {
            ImportError::Source { hint, .. } => hint.clone(),
            ImportError::Refused(_) => "change the original, or import with --partial (each is then a warning, left out of the import; add it by hand)".into(),
            ImportError::Eval(_) => "the original uses something fwc's evaluator does not model, so nothing can prove the import: import with --partial (without --verify) to write the rules without tests/imported.kdl, and check them by hand".into(),
            ImportError::Write { .. } => "choose another --out directory".into(),
        }
    }
}
