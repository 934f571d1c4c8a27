//! `fwc fmt`: canonical layout of one KDL file that loses nothing. Only whitespace changes
//! (indentation, spacing, blank-line runs); comments, slashdashes, blank lines between groups
//! and every value as written (quoting included) are kept, and the result is verified to mean
//! the same document before it is returned.

mod layout;
pub(crate) mod lex;

use kdl::KdlDocument;

use crate::diag::{Diagnostic, Diagnostics};
use crate::read::limits::{self, LimitHit};
use crate::model::Span;
use crate::read::source::SourceMap;
use crate::read::syntax::{parse_untrusted_lossless, ParseFailure};

pub use layout::INDENT;

/// Why a file was not formatted. Nothing is returned to write in any of these cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The file goes past a parsing limit (size, line length, nesting); see [`limits`].
    Limit(LimitHit),
    /// The file is not valid KDL v2: every problem the parser found.
    Syntax(Vec<SyntaxProblem>),
    /// The formatted text would not mean the same document (a bug in the formatter: the file
    /// is left as it is). `offset` is where the two texts first differ.
    Unstable { offset: usize },
}

/// One KDL syntax error: where, and what the parser said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxProblem {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub label: String,
    pub help: Option<String>,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::Limit(hit) => write!(f, "{}", hit.message),
            FormatError::Syntax(problems) => match problems.first() {
                Some(p) => write!(f, "syntax error: {}", p.message),
                None => write!(f, "syntax error"),
            },
            FormatError::Unstable { .. } => write!(f, "formatting would change what the file means; it was left unchanged"),
        }
    }
}

impl std::error::Error for FormatError {}

impl FormatError {
    /// The error as diagnostics pointing into `file` of `map` (file:line:column, label, hint).
    pub fn diagnostics(&self, map: &SourceMap, file: u32) -> Diagnostics {
        let span = |offset: usize, len: usize| Span { file, offset: u32::try_from(offset).unwrap_or(u32::MAX), len: u32::try_from(len).unwrap_or(0) };
        match self {
            FormatError::Limit(hit) => Diagnostics::single(Diagnostic::error("limit", hit.message.clone()).at(map, hit.span(file), hit.label).help(hit.help.clone())),
            FormatError::Syntax(problems) => Diagnostics(
                problems
                    .iter()
                    .map(|p| {
                        Diagnostic::error("kdl-syntax", format!("syntax error: {}", p.message))
                            .at(map, span(p.offset, p.len), p.label.clone())
                            .help(p.help.clone().unwrap_or_else(|| "fix the syntax; `fwc check` explains KDL v2 habits (quotes, #true/#false)".into()))
                    })
                    .collect(),
            ),
            FormatError::Unstable { offset } => Diagnostics::single(
                Diagnostic::error("fmt-unstable", self.to_string())
                    .at(map, span(*offset, 0), "the formatted text differs in meaning from here")
                    .help("this is a bug in `fwc fmt`; please report it with the file"),
            ),
        }
    }
}

/// Format one KDL file (`fwc.kdl`, `rules/*.kdl`, `tests/*.kdl`). Templates (`*.kdl.j2`) are
/// not KDL until rendered and must not be passed here. See docs/rules.md, "Formatting".
pub fn format_kdl(text: &str) -> Result<String, FormatError> {
    let before = limits::on_big_stack(|| parse_untrusted_lossless(text)).map_err(|f| failure(f, text))?;
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(body) => ("\u{feff}", body),
        None => ("", text),
    };
    let (tokens, _) = lex::tokens(body);
    let out = format!("{bom}{}", layout::layout(&tokens));
    verify(text, &out, before)?;
    Ok(out)
}

/// Is `text` already formatted? (Errors as [`format_kdl`].)
pub fn is_formatted(text: &str) -> Result<bool, FormatError> {
    format_kdl(text).map(|out| out == text)
}

fn failure(f: ParseFailure, text: &str) -> FormatError {
    let hints = crate::read::syntax_hints::explain(text);
    match f {
        ParseFailure::Limit(hit) => FormatError::Limit(hit),
        // fwc's own words when it recognises the mistake (see syntax_hints), else the parser's.
        ParseFailure::Kdl(_) if !hints.is_empty() => FormatError::Syntax(
            hints.into_iter().map(|h| SyntaxProblem { offset: h.offset, len: h.len, message: h.message, label: h.label, help: Some(h.help) }).collect(),
        ),
        ParseFailure::Kdl(problems) => FormatError::Syntax(
            problems
                .into_iter()
                .map(|d| SyntaxProblem {
                    offset: d.offset,
                    len: d.len,
                    message: d.message.unwrap_or_else(|| "invalid KDL".into()),
                    label: d.label.unwrap_or_else(|| "here".into()),
                    help: d.help,
                })
                .collect(),
        ),
    }
}

/// The formatted text keeps every non-blank character in order and parses to the same document
/// (formatting and comments aside, which the first check covers).
fn verify(text: &str, out: &str, mut before: KdlDocument) -> Result<(), FormatError> {
    let visible = |c: &char| !lex::is_space(*c) && !lex::is_newline(*c);
    let (mut a, mut b) = (text.char_indices().filter(|(_, c)| visible(c)), out.chars().filter(visible));
    loop {
        match (a.next(), b.next()) {
            (None, None) => break,
            (Some((_, x)), Some(y)) if x == y => {}
            (at, _) => return Err(FormatError::Unstable { offset: at.map_or(text.len(), |(i, _)| i) }),
        }
    }
    let same = limits::on_big_stack(|| match parse_untrusted_lossless(out) {
        Ok(mut after) => {
            before.clear_format_recursive();
            after.clear_format_recursive();
            before == after
        }
        Err(_) => false,
    });
    if same {
        Ok(())
    } else {
        Err(FormatError::Unstable { offset: 0 })
    }
}

#[cfg(test)]
mod tests;
