//! Diagnostics: errors and warnings as values, each with the file, line and column it points
//! at, the rule it concerns, a label, and a hint. They render through miette for people and
//! as JSON for machines. Several are collected in one run.

use std::fmt;
use std::sync::Arc;

use miette::{LabeledSpan, SourceCode};
use serde::Serialize;

use crate::model::Span;
use crate::read::sourcemap::SourceMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// Resolved position of a diagnostic (1-based line and column, in characters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable machine name, e.g. `fwc::unknown-property`.
    pub code: String,
    pub message: String,
    /// The rule concerned, e.g. `forward "web"`.
    pub rule: Option<String>,
    #[serde(flatten)]
    pub location: Option<Location>,
    pub label: Option<String>,
    pub help: Option<String>,
    #[serde(skip)]
    source: Option<(String, Arc<str>)>,
    #[serde(skip)]
    range: Option<(usize, usize)>,
}

impl Diagnostic {
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code: format!("fwc::{code}"),
            message: message.into(),
            rule: None,
            location: None,
            label: None,
            help: None,
            source: None,
            range: None,
        }
    }

    pub fn warning(code: &str, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, message) }
    }

    /// Point at `span` (resolved against `map`) with `label`.
    pub fn at(mut self, map: &SourceMap, span: Span, label: impl Into<String>) -> Self {
        let file = map.file(span.file);
        let text = &file.text;
        // A span from a byte-oriented producer (a template engine, a scanner) may cut a
        // character: widen it to whole characters.
        let mut offset = (span.offset as usize).min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let mut end = (span.offset as usize).saturating_add(span.len as usize).clamp(offset, text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let (line, column) = file.line_col(offset);
        self.location = Some(Location { file: file.path.clone(), line, column });
        self.source = Some((file.path.clone(), file.text.clone()));
        self.range = Some((offset, end - offset));
        self.label = Some(label.into());
        self
    }

    pub fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn unknown_host(name: &str, known: &[String]) -> Self {
        let mut d = Diagnostic::error("unknown-host", format!("no host named \"{name}\" in this repository"));
        d.help = Some(match crate::suggest::did_you_mean(name, known.iter().map(String::as_str)) {
            Some(s) => format!("did you mean \"{s}\"? hosts: {}", known.join(", ")),
            None => format!("hosts declared: {}", known.join(", ")),
        });
        d
    }

    pub fn host_required(known: &[String]) -> Self {
        Diagnostic::error("host-required", "this repository declares several hosts; say which one to compile")
            .help(format!("pass --host NAME, one of: {}", known.join(", ")))
    }
}

/// Spans -> file:line:column for many spans of the same files (every rule of a host), through
/// each file's index of line starts ([`crate::read::source::SourceFile::line_col`]): locating n
/// rules costs O(n log lines), not O(n × size).
pub struct Positions<'a> {
    map: &'a SourceMap,
}

impl<'a> Positions<'a> {
    pub fn new(map: &'a SourceMap) -> Self {
        Positions { map }
    }

    pub fn locate(&mut self, span: Span) -> Location {
        let file = self.map.file(span.file);
        let (line, column) = file.line_col(span.offset as usize);
        Location { file: file.path.clone(), line, column }
    }
}

/// Byte offset -> 1-based (line, column in chars).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Some(r) => write!(f, "{r}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(&self.code))
    }
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help.as_ref().map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|(_, text)| text as &dyn SourceCode)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let (start, len) = self.range?;
        Some(Box::new(std::iter::once(LabeledSpan::new(self.label.clone(), start, len))))
    }
}

/// A list of diagnostics (errors and warnings), in the order found.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn single(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d)
    }
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0)
    }
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| !d.is_error())
    }

    /// Render for a person: miette's graphical report (colours when `color`), with a summary line.
    pub fn render(&self, color: bool) -> String {
        let handler = if color {
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode())
        } else {
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        }
        .with_width(100);
        let mut out = String::new();
        for d in &self.0 {
            // Wrap so the report header shows "file:line:col".
            let named = Located(d);
            let _ = handler.render_report(&mut out, &named);
            out.push('\n');
        }
        let (e, w) = (self.errors().count(), self.warnings().count());
        if e + w > 0 {
            out.push_str(&format!("{e} error(s), {w} warning(s)\n"));
        }
        out
    }
}

/// Adapter that names the source file in miette's output.
struct Located<'a>(&'a Diagnostic);

impl fmt::Debug for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}
impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.location {
            Some(l) => write!(f, "{}:{}:{}: {}", l.file, l.line, l.column, self.0),
            None => write!(f, "{}", self.0),
        }
    }
}
impl std::error::Error for Located<'_> {}
impl miette::Diagnostic for Located<'_> {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        miette::Diagnostic::code(self.0)
    }
    fn severity(&self) -> Option<miette::Severity> {
        miette::Diagnostic::severity(self.0)
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        miette::Diagnostic::help(self.0)
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.snippet_fits().then(|| miette::Diagnostic::source_code(self.0)).flatten()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        self.snippet_fits().then(|| miette::Diagnostic::labels(self.0)).flatten()
    }
}

/// Longest source line shown in a snippet. Past it the header's file:line:column says where;
/// a snippet of a huge line helps nobody (and miette's renderer slows down and once panicked
/// past column 65,535).
const MAX_SNIPPET_LINE: usize = 400;

impl Located<'_> {
    fn snippet_fits(&self) -> bool {
        let (Some((_, text)), Some((start, len))) = (&self.0.source, self.0.range) else { return true };
        let end = (start + len).min(text.len());
        let line_start = text[..start.min(text.len())].rfind('\n').map_or(0, |p| p + 1);
        let line_end = text[end..].find('\n').map_or(text.len(), |p| end + p);
        text[line_start..line_end].lines().all(|l| l.len() <= MAX_SNIPPET_LINE)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            match &d.location {
                Some(l) => writeln!(f, "{}:{}:{}: {:?}: {d}", l.file, l.line, l.column, d.severity)?,
                None => writeln!(f, "{:?}: {d}", d.severity)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

