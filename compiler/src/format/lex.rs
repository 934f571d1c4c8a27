//! A lossless KDL v2 token stream for the formatter: every byte of the input is either part of a
//! token (kept verbatim) or of the whitespace gap before one. Comments, slashdashes and every
//! kind of string are tokens, so the formatter can only ever change whitespace.

/// What a token is; only the distinctions the layout needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An identifier, number or keyword (`tcp`, `22`, `#true`).
    Atom,
    /// A quoted, raw or multi-line string, verbatim (its inner lines are never touched).
    Str,
    /// `// …` up to (not including) the line end.
    LineComment,
    /// `/* … */`, nested, verbatim even when it spans lines.
    BlockComment,
    /// `/-`: comments out the next node, argument, property or children block.
    Slashdash,
    /// `\`: the node continues on the next line.
    Escline,
    Open,
    Close,
    Semicolon,
    Equals,
    /// `(` or `)` of a type annotation, `[` or `]` (not KDL, but never glued to anything).
    Paren,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: Kind,
    pub text: &'a str,
}

/// The whitespace before a token (or at the end of the text).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gap {
    /// Line breaks in it (CRLF counts once).
    pub newlines: usize,
    /// Whether it holds any whitespace at all.
    pub any: bool,
    /// Spaces and tabs after its last line break (or in all of it, without one).
    pub width: usize,
}

/// The tokens of `text`, each with the gap before it, and the gap after the last one. Total:
/// any text (valid KDL or not) splits into tokens and gaps without loss.
pub fn tokens(text: &str) -> (Vec<(Gap, Token<'_>)>, Gap) {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let (gap, start) = gap_at(text, pos);
        let Some(c) = text[start..].chars().next() else { return (out, gap) };
        let rest = &text[start..];
        let (kind, len) = match c {
            '/' if rest.starts_with("//") => (Kind::LineComment, line_comment_len(rest)),
            '/' if rest.starts_with("/*") => (Kind::BlockComment, block_comment_len(rest)),
            '/' if rest.starts_with("/-") => (Kind::Slashdash, 2),
            '"' => (Kind::Str, quoted_len(rest)),
            '#' => match raw_string_len(rest) {
                Some(len) => (Kind::Str, len),
                None => (Kind::Atom, atom_len(rest)),
            },
            '\\' => (Kind::Escline, 1),
            '{' => (Kind::Open, 1),
            '}' => (Kind::Close, 1),
            ';' => (Kind::Semicolon, 1),
            '=' => (Kind::Equals, 1),
            '(' | ')' | '[' | ']' | '/' => (Kind::Paren, 1),
            _ => (Kind::Atom, atom_len(rest)),
        };
        let len = len.max(c.len_utf8()).min(rest.len());
        out.push((gap, Token { kind, text: &rest[..len] }));
        pos = start + len;
    }
}

/// KDL v2 line breaks (CRLF is one, handled by the caller).
pub fn is_newline(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{b}' | '\u{c}' | '\u{2028}' | '\u{2029}')
}

/// KDL v2 unicode spaces (not line breaks). A byte-order mark anywhere but the start is kept as text.
pub fn is_space(c: char) -> bool {
    matches!(c, '\t' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{202f}' | '\u{205f}' | '\u{3000}')
}

fn gap_at(text: &str, mut pos: usize) -> (Gap, usize) {
    let mut gap = Gap::default();
    let mut prev_cr = false;
    for c in text[pos..].chars() {
        if is_newline(c) {
            if !(c == '\n' && prev_cr) {
                gap.newlines += 1;
            }
            prev_cr = c == '\r';
            gap.width = 0;
        } else if is_space(c) {
            prev_cr = false;
            gap.width += 1;
        } else {
            break;
        }
        gap.any = true;
        pos += c.len_utf8();
    }
    (gap, pos)
}

fn line_comment_len(rest: &str) -> usize {
    rest.char_indices().find(|&(_, c)| is_newline(c)).map_or(rest.len(), |(i, _)| i)
}

/// `/* … */` with nesting; unterminated runs to the end (the parser has refused such text).
pub(crate) fn block_comment_len(rest: &str) -> usize {
    let b = rest.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth = depth.saturating_sub(1);
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// `"…"` (a backslash escapes the next character, line breaks included) or `"""…"""`.
pub(crate) fn quoted_len(rest: &str) -> usize {
    let b = rest.as_bytes();
    let close: &[u8] = if rest.starts_with("\"\"\"") { b"\"\"\"" } else { b"\"" };
    let mut i = close.len();
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
        } else if b[i..].starts_with(close) {
            return i + close.len();
        } else {
            i += 1;
        }
    }
    b.len()
}

/// `#"…"#`, `##"…"##`, `#"""…"""#`: no escapes; ends at a quote followed by as many `#`.
pub(crate) fn raw_string_len(rest: &str) -> Option<usize> {
    let b = rest.as_bytes();
    let hashes = b.iter().take_while(|&&c| c == b'#').count();
    if b.get(hashes) != Some(&b'"') {
        return None;
    }
    let open = if rest[hashes..].starts_with("\"\"\"") { 3 } else { 1 };
    let mut i = hashes + open;
    while i < b.len() {
        if b[i] == b'"' && b[i + 1..].iter().take(hashes).filter(|&&c| c == b'#').count() == hashes {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(b.len())
}

/// An identifier, number or `#keyword`: up to whitespace or a character KDL gives a meaning.
fn atom_len(rest: &str) -> usize {
    let mut chars = rest.char_indices();
    chars.next();
    chars
        .find(|&(_, c)| is_newline(c) || is_space(c) || matches!(c, '\\' | '/' | '(' | ')' | '{' | '}' | '[' | ']' | ';' | '=' | '"' | '#'))
        .map_or(rest.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, &str)> {
        tokens(text).0.into_iter().map(|(_, t)| (t.kind, t.text)).collect()
    }

    #[test]
    fn every_byte_is_a_token_or_whitespace() {
        let text = "a /-b=\"c\\\" d\" #\"x\"y\"# { /* /* n */ */ e; } // end\r\n\\ (t)1 \"\"\"\n m\n \"\"\"";
        let joined: String = tokens(text).0.iter().map(|(_, t)| t.text).collect();
        let no_ws: String = text.chars().filter(|c| !is_space(*c) && !is_newline(*c)).collect();
        assert_eq!(joined.chars().filter(|c| !is_space(*c) && !is_newline(*c)).collect::<String>(), no_ws);
        assert_eq!(
            kinds("a b=#true #\"q\"# /-c"),
            vec![(Kind::Atom, "a"), (Kind::Atom, "b"), (Kind::Equals, "="), (Kind::Atom, "#true"), (Kind::Str, "#\"q\"#"), (Kind::Slashdash, "/-"), (Kind::Atom, "c")]
        );
    }

    #[test]
    fn unterminated_and_odd_input_does_not_panic() {
        for text in ["\"", "\"\"\"", "#", "##\"", "/*", "/* /*", "\\", "é\"\\", "\"\\", "#\"\"\"x"] {
            let (toks, _) = tokens(text);
            let joined: String = toks.iter().map(|(_, t)| t.text).collect();
            assert_eq!(joined, text.trim());
        }
    }
}
