//! Where a value came from: the span of the text it was read from, and a value carried with
//! it (the bottom of the model: every rule type holds `Spanned` values).

use serde::Serialize;

/// Where something came from: a file (index into [`crate::read::source::SourceMap`]) and a byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct Span {
    pub file: u32,
    pub offset: u32,
    pub len: u32,
}

/// A value and the span of the text it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Spanned<T> {
    pub value: T,
    #[serde(skip)]
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

impl<T> std::ops::Deref for Spanned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}
