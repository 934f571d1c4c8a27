//! The texts one run parsed ([`SourceMap`]), each with its display path and an index of line
//! starts: what a span's `file` points into, for diagnostics and `file:line:column`.

use std::sync::Arc;

/// A file as diagnostics see it: its display path and the exact text that was parsed (for a
/// template, the text rendered for one host).
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: String,
    pub text: Arc<str>,
    /// Byte offset of every line's start, built on the first lookup (diagnostics of a large
    /// file would otherwise each count lines from its start).
    line_starts: Arc<std::sync::OnceLock<Vec<usize>>>,
}

impl SourceFile {
    /// Byte offset (clamped to a character boundary) -> 1-based (line, column in chars), as
    /// [`crate::diag::line_col`] counts them.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let text: &str = &self.text;
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let starts = self.line_starts.get_or_init(|| std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect());
        let line = starts.partition_point(|&s| s <= offset);
        (line, text[starts[line - 1]..offset].chars().count() + 1)
    }
}

/// Every text parsed in one run; spans index into it by `file`.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn add(&mut self, path: impl Into<String>, text: &str) -> u32 {
        self.files.push(SourceFile { path: path.into(), text: Arc::from(text), line_starts: Default::default() });
        (self.files.len() - 1) as u32
    }
    pub fn file(&self, id: u32) -> &SourceFile {
        &self.files[id as usize]
    }
}
