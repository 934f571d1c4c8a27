//! The loader's error: a message that says what was being done.

/// Any failure of the loader, with a message that says what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct QosError(pub String);
