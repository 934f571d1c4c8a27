//! Text -> KDL documents: limits first, then fwc's reader; a refused text's problems in the `kdl`
//! crate's words; many files parsed on all cores.

use kdl::KdlDocument;

use crate::read::kdl_reader::{self, Document as KdlDoc};
use crate::read::limits;

/// Parse several KDL texts, spread over the available cores (largest first), results in order.
pub(super) fn parse_parallel(texts: Vec<&str>) -> Vec<Result<KdlDoc, ParseFailure>> {
    let small = texts.iter().map(|t| t.len()).sum::<usize>() < 64 * 1024;
    let threads = if small { 1 } else { crate::parallel::workers(texts.len()) };
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
    crate::parallel::map_scheduled(&texts, &order, threads, |t| parse_untrusted(t))
}

/// Why a text did not become a KDL document.
pub enum ParseFailure {
    /// The text goes past a limit (nesting, line length, size); it was not parsed.
    Limit(limits::LimitHit),
    /// Not KDL v2: every problem found.
    Kdl(Vec<KdlProblem>),
}

/// One KDL syntax problem; callers fill in what is missing with their own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KdlProblem {
    pub offset: usize,
    pub len: usize,
    pub message: Option<String>,
    pub label: Option<String>,
    pub help: Option<String>,
}

/// Parse a text that may be hostile: limits first, then fwc's KDL reader. Call on a thread with
/// [`limits::PARSER_STACK_BYTES`] of stack (see [`limits::on_big_stack`]).
pub fn parse_untrusted(text: &str) -> Result<KdlDoc, ParseFailure> {
    limits::check_kdl_text(text).map_err(ParseFailure::Limit)?;
    kdl_reader::read(text).map_err(|e| ParseFailure::Kdl(problems(text, e)))
}

/// As [`parse_untrusted`], into the `kdl` crate's lossless tree (for `fwc fmt`).
pub fn parse_untrusted_lossless(text: &str) -> Result<KdlDocument, ParseFailure> {
    limits::check_kdl_text(text).map_err(ParseFailure::Limit)?;
    KdlDocument::parse_v2(text).map_err(|e| ParseFailure::Kdl(kdl_problems(&e)))
}

/// The problems of a text the reader refused. The `kdl` crate recovers from errors and so finds
/// every problem with its own words: it is asked (a failure is rare and never on the fast
/// path); the reader's first problem stands where that crate accepts the text.
pub(super) fn problems(text: &str, e: kdl_reader::ReadError) -> Vec<KdlProblem> {
    match KdlDocument::parse_v2(text) {
        Err(ke) if !ke.diagnostics.is_empty() => kdl_problems(&ke),
        _ => vec![KdlProblem { offset: e.span.offset, len: e.span.len, message: Some(e.message), label: None, help: None }],
    }
}

pub(super) fn kdl_problems(e: &kdl::KdlError) -> Vec<KdlProblem> {
    e.diagnostics
        .iter()
        .map(|d| KdlProblem { offset: d.span.offset(), len: d.span.len(), message: d.message.clone(), label: d.label.clone(), help: d.help.clone() })
        .collect()
}
