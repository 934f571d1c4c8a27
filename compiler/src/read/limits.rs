//! Limits on what a rule repository may ask of the compiler. A commit is hostile input to an
//! agent running as root: every text is scanned here before the KDL parser (which recurses per
//! nesting level) sees it, and templates run on bounded fuel and output. File counts and sizes
//! are checked while the repository is read (`source`), rule and element counts once parsed.

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::{Ruleset, Span};
use crate::read::sourcemap::SourceMap;

/// Deepest `{ … }` nesting a rule file may use. fwc's language needs three levels at most.
pub const MAX_NESTING: usize = 64;
/// Deepest nesting of `/* … */` block comments.
pub const MAX_COMMENT_NESTING: usize = 64;
/// Longest line (bytes). Past this, error positions stop being useful to a person (and
/// renderers struggle); long sets belong in a set file (`set … file=`).
pub const MAX_LINE_BYTES: usize = 60_000;
/// Largest rule or test file (bytes). Set files (`lists/`) have their own, larger bound.
pub const MAX_FILE_BYTES: usize = 64 << 20;
/// Largest set file (`lists/`, bytes): a million-entry blocklist is about 16 MiB.
pub const MAX_SET_FILE_BYTES: u64 = 256 << 20;
/// Most files and directories under `rules/`, `lists/` and `tests/` together.
pub const MAX_FILES: usize = 10_000;
/// Largest sum of the sizes of the files read from a repository (bytes).
pub const MAX_TOTAL_BYTES: u64 = 1 << 30;
/// Most set elements of one host, inline and from set files together: four million-entry
/// blocklists.
pub const MAX_SET_ELEMENTS: usize = 4_000_000;
/// Most rules of one host: chain rules, forwards, shapes, sets and hosts together.
pub const MAX_RULES: usize = 100_000;
/// minijinja fuel per template render: about a second of work; a runaway loop stops here.
pub const TEMPLATE_FUEL: u64 = 20_000_000;
/// Largest rendered template (bytes). Smaller than a rule file may be: a short template can
/// amplify itself a thousandfold, and every rendered byte goes through the KDL parser once per
/// host (found by the fuzzer: 51 MB of rendered comments took 40 s to parse).
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// Stack of a parser thread: the KDL parser recurses per nesting level; with the limits above
/// it needs far less, this is the margin for whatever the pre-scan does not model.
pub const PARSER_STACK_BYTES: usize = 256 << 20;

/// One limit a text goes past: where, and what to tell the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHit {
    /// Byte offset of the first byte past the limit.
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub label: &'static str,
    pub help: String,
}

impl LimitHit {
    /// The span of the hit in source file `file` (offsets fit: files are at most
    /// [`MAX_FILE_BYTES`]).
    pub fn span(&self, file: u32) -> Span {
        let offset = u32::try_from(self.offset).unwrap_or(u32::MAX);
        Span { file, offset, len: u32::try_from(self.len).unwrap_or(0) }
    }
}

/// Check a KDL text before it is parsed: size, line length, brace and comment nesting.
pub fn check_kdl_text(text: &str) -> Result<(), LimitHit> {
    check_kdl_text_size(text)?;
    check_line_lengths(text)?;
    check_nesting(text.as_bytes())
}

fn check_kdl_text_size(text: &str) -> Result<(), LimitHit> {
    if text.len() > MAX_FILE_BYTES {
        return Err(LimitHit {
            offset: 0,
            len: 0,
            message: format!("file is {} bytes, more than the limit of {MAX_FILE_BYTES}", text.len()),
            label: "file too large",
            help: "split the rules over several files under rules/; large address lists belong in a set file (`set \"x\" file=\"lists/x.txt\"`)".into(),
        });
    }
    Ok(())
}

/// Most lines of a template (`*.kdl.j2`): minijinja counts lines in 16 bits.
pub const MAX_TEMPLATE_LINES: usize = 60_000;

/// Check the text of a template before minijinja sees it: size, line length (its columns are
/// 16 bits too) and line count. The rendered text is checked like any rule file.
pub fn check_template_text(text: &str) -> Result<(), LimitHit> {
    check_kdl_text_size(text)?;
    check_line_lengths(text)?;
    let past = text.match_indices('\n').nth(MAX_TEMPLATE_LINES - 1).map(|(nl, _)| nl + 1);
    if let Some(offset) = past.filter(|&o| o < text.len()) {
        return Err(LimitHit {
            offset,
            len: 0,
            message: format!("the template has more than {MAX_TEMPLATE_LINES} lines"),
            label: "template too long",
            help: "split the template over several files under rules/; long address lists belong in a set file".into(),
        });
    }
    Ok(())
}

fn check_line_lengths(text: &str) -> Result<(), LimitHit> {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if line.len() > MAX_LINE_BYTES {
            let mut cut = start + MAX_LINE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            return Err(LimitHit {
                offset: cut,
                len: 0,
                message: format!("line is {} bytes long, more than the limit of {MAX_LINE_BYTES}", line.trim_end().len()),
                label: "line too long",
                help: "break the node over several lines (KDL continues a line with `\\`), or move long address lists into a set file".into(),
            });
        }
        start += line.len();
    }
    Ok(())
}

/// Track `{`/`}` outside strings and comments, and `/* */` nesting. Unterminated strings or
/// comments end the scan: the parser reports them with its own message.
fn check_nesting(b: &[u8]) -> Result<(), LimitHit> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = memchr_from(b, i, b'\n');
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = skip_block_comment(b, i)?;
            }
            b'#' if raw_string_start(b, i).is_some() => {
                let (hashes, quote_at) = raw_string_start(b, i).unwrap_or((0, i));
                i = skip_raw_string(b, quote_at, hashes);
            }
            b'"' => i = skip_string(b, i),
            b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(LimitHit {
                        offset: i,
                        len: 1,
                        message: format!("blocks are nested more than {MAX_NESTING} levels deep"),
                        label: "too deep",
                        help: "fwc rule files nest at most a few levels (a chain block holds rules); check for unbalanced `{`".into(),
                    });
                }
                i += 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

fn memchr_from(b: &[u8], from: usize, c: u8) -> usize {
    b[from..].iter().position(|&x| x == c).map_or(b.len(), |p| from + p)
}

fn skip_block_comment(b: &[u8], start: usize) -> Result<usize, LimitHit> {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < b.len() {
        if b[i] == b'/' && b[i + 1] == b'*' {
            depth += 1;
            if depth > MAX_COMMENT_NESTING {
                return Err(LimitHit {
                    offset: i,
                    len: 2,
                    message: format!("block comments are nested more than {MAX_COMMENT_NESTING} levels deep"),
                    label: "too deep",
                    help: "close the comments (`*/`) or use `//` line comments".into(),
                });
            }
            i += 2;
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return Ok(i);
            }
        } else {
            i += 1;
        }
    }
    Ok(b.len())
}

/// `#…#"` at `i`: the number of hashes and the offset of the quote.
fn raw_string_start(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + hashes) == Some(&b'"')).then_some((hashes, i + hashes))
}

fn skip_raw_string(b: &[u8], quote_at: usize, hashes: usize) -> usize {
    let multi = b[quote_at..].starts_with(b"\"\"\"");
    let close: Vec<u8> = if multi { b"\"\"\"".to_vec() } else { b"\"".to_vec() }
        .into_iter()
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let from = quote_at + if multi { 3 } else { 1 };
    b[from..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |p| from + p + close.len())
}

fn skip_string(b: &[u8], start: usize) -> usize {
    let multi = b[start..].starts_with(b"\"\"\"");
    let mut i = start + if multi { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' if !multi => return i + 1,
            b'"' if b[i..].starts_with(b"\"\"\"") => return i + 3,
            _ => i += 1,
        }
    }
    b.len()
}

/// Check the size of a parsed host view: rules and inline set elements (set files add theirs
/// while they are read, see `setfile`). The error points at the first item past the limit.
pub fn check_ruleset(map: &SourceMap, rs: &Ruleset) -> Result<(), Diagnostics> {
    let rules = rs.hosts.iter().map(|h| h.name.span).chain(rs.sets.iter().map(|s| s.span));
    let rules = rules.chain(rs.chains.iter().flat_map(|c| c.rules.iter().map(|r| r.name.span)));
    let rules = rules.chain(rs.forwards.iter().map(|f| f.name.span)).chain(rs.shapes.iter().map(|s| s.name.span));
    if let Some(span) = rules.clone().nth(MAX_RULES) {
        return Err(Diagnostics::single(
            Diagnostic::error("limit", format!("the repository declares more than {MAX_RULES} rules, forwards, shapes, sets and hosts"))
                .at(map, span, "past the limit")
                .help("merge rules that differ only in an address into one rule over a set"),
        ));
    }
    if let Some(span) = rs.sets.iter().flat_map(|s| s.elements.iter().map(|e| e.span)).nth(MAX_SET_ELEMENTS) {
        return Err(Diagnostics::single(too_many_elements(map, span)));
    }
    Ok(())
}

/// The error for the first set element past [`MAX_SET_ELEMENTS`], at `span`.
pub fn too_many_elements(map: &SourceMap, span: Span) -> Diagnostic {
    Diagnostic::error("limit", format!("the sets of this host hold more than {MAX_SET_ELEMENTS} elements together"))
        .at(map, span, "past the limit")
        .help("aggregate the addresses into larger prefixes (e.g. with `aggregate` or `iprange --optimize`), or split the hosts' sets")
}

/// Where a template renders to: refuses to grow past [`MAX_RENDERED_BYTES`].
#[derive(Debug, Default)]
pub struct BoundedOutput(Vec<u8>);

impl BoundedOutput {
    pub fn into_string(self) -> String {
        // minijinja writes only str fragments, so this is valid UTF-8.
        String::from_utf8(self.0).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            return Err(std::io::Error::other("rendered template too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `f` (a parse of untrusted text) on a thread with a large stack, so that whatever the
/// pre-scan lets through cannot overflow the caller's stack.
pub fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("fwc-parse".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(s, f)
            .expect("spawning the parser thread")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_blocks_are_refused_at_the_first_brace_past_the_limit() {
        let text = format!("fwc 1\n{}{}", "a {".repeat(1500), "}".repeat(1500));
        let hit = check_kdl_text(&text).unwrap_err();
        assert_eq!(hit.offset, 6 + 3 * MAX_NESTING + 2);
        assert!(hit.message.contains("nested"));
    }

    #[test]
    fn deep_comments_are_refused() {
        let text = format!("fwc 1\n{}{}", "/*".repeat(5000), "*/".repeat(5000));
        assert!(check_kdl_text(&text).unwrap_err().message.contains("comments"));
    }

    #[test]
    fn braces_in_strings_and_comments_do_not_count() {
        let braces = "{".repeat(200);
        let text = format!("fwc 1\nset \"{braces}\" #\"{braces}\"# \"\"\"\n{braces}\n\"\"\"\n// {braces}\n/* {braces} */\ninput {{ allow \"a\" }}\n");
        assert_eq!(check_kdl_text(&text), Ok(()));
    }

    #[test]
    fn long_lines_are_refused() {
        let text = format!("fwc 1\nset \"x\" \"{}\"\n", "1".repeat(MAX_LINE_BYTES));
        let hit = check_kdl_text(&text).unwrap_err();
        assert!(hit.message.contains("line is"));
        assert_eq!(hit.offset, 6 + MAX_LINE_BYTES);
    }

    #[test]
    fn templates_have_line_and_column_bounds_for_minijinja() {
        let wide = format!("{{{{ 1 }}}}{}\n", " ".repeat(MAX_LINE_BYTES + 10));
        assert!(check_template_text(&wide).unwrap_err().message.contains("line is"));
        let long = "// x\n".repeat(MAX_TEMPLATE_LINES + 1);
        let hit = check_template_text(&long).unwrap_err();
        assert_eq!(hit.offset, 5 * MAX_TEMPLATE_LINES);
        assert_eq!(check_template_text(&"// x\n".repeat(MAX_TEMPLATE_LINES)), Ok(()));
    }

    #[test]
    fn ordinary_rules_pass() {
        let text = "fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n";
        assert_eq!(check_kdl_text(text), Ok(()));
    }
}
