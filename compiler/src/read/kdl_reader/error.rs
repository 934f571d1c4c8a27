//! Why a text is not KDL v2: the first problem found, with its span.

/// A syntax error: where it is and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub span: super::TextSpan,
    pub message: String,
}

impl ReadError {
    pub(crate) fn at(offset: usize, len: usize, message: impl Into<String>) -> ReadError {
        ReadError { span: super::TextSpan { offset, len }, message: message.into() }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.span.offset)
    }
}

impl std::error::Error for ReadError {}
