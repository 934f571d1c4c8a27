//! The formatter's layout: re-emits a token stream with canonical whitespace (4-space indent
//! per `{` level, one space between entries, no space around `=`, at most one blank line; the
//! gap before an end-of-line comment is kept so aligned comments stay aligned).
//! Tokens are copied verbatim and line breaks stay line breaks, so the meaning cannot change.

use super::lex::{Gap, Kind, Token};

/// One level of indentation.
pub const INDENT: &str = "    ";

/// Lay out `tokens` (each with the gap before it; see [`super::lex::tokens`]).
pub fn layout(tokens: &[(Gap, Token<'_>)]) -> String {
    let mut out = String::with_capacity(tokens.iter().map(|(_, t)| t.text.len() + 2).sum());
    let mut depth = 0usize;
    // The previous line ended in `\` (or `/-`): this one continues its node, one level deeper.
    let mut continued = false;
    for (i, (gap, tok)) in tokens.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| tokens[p].1);
        let line_start = match prev {
            None => true,
            Some(prev) if gap.newlines > 0 => {
                let keep_blank = gap.newlines > 1 && prev.kind != Kind::Open && tok.kind != Kind::Close;
                out.push_str(if keep_blank { "\n\n" } else { "\n" });
                true
            }
            Some(prev) => {
                if tok.kind == Kind::LineComment && gap.any {
                    // The gap before an end-of-line comment is kept: comments stay aligned.
                    out.extend(std::iter::repeat_n(' ', gap.width.max(1)));
                } else if space_between(prev, *tok, gap.any) {
                    out.push(' ');
                }
                false
            }
        };
        if line_start {
            let closing = tokens[i..].iter().enumerate().take_while(|(k, (g, t))| t.kind == Kind::Close && (*k == 0 || g.newlines == 0)).count();
            for _ in 0..depth.saturating_sub(closing) + usize::from(continued) {
                out.push_str(INDENT);
            }
        }
        match tok.kind {
            Kind::LineComment => out.push_str(tok.text.trim_end()),
            Kind::BlockComment => push_block_comment(&mut out, tok.text),
            _ => out.push_str(tok.text),
        }
        match tok.kind {
            Kind::Open => depth += 1,
            Kind::Close => depth = depth.saturating_sub(1),
            _ => {}
        }
        continued = match tok.kind {
            Kind::Escline | Kind::Slashdash => true,
            Kind::LineComment | Kind::BlockComment => continued && !line_start,
            _ => false,
        };
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// A block comment's lines keep their indentation; their line ends become `\n` and lose
/// trailing blanks (a comment's text is not re-indented: it may be aligned ASCII art).
fn push_block_comment(out: &mut String, text: &str) {
    let mut line = String::new();
    let mut prev_cr = false;
    for c in text.chars() {
        if super::lex::is_newline(c) {
            if !(c == '\n' && prev_cr) {
                out.push_str(line.trim_end());
                out.push('\n');
                line.clear();
            }
            prev_cr = c == '\r';
        } else {
            prev_cr = false;
            line.push(c);
        }
    }
    out.push_str(&line);
}

/// Whether one space separates `prev` and `next` on the same line (`had_space`: the input had
/// whitespace there). Where the input had none, none is added except around braces.
fn space_between(prev: Token<'_>, next: Token<'_>, had_space: bool) -> bool {
    let comment = |t: Token<'_>| matches!(t.kind, Kind::LineComment | Kind::BlockComment);
    match (prev.kind, next.kind) {
        (_, Kind::Semicolon) => false,
        (Kind::Equals, _) if !comment(next) => false,
        (_, Kind::Equals) if !comment(prev) => false,
        (Kind::Slashdash, _) => had_space,
        (Kind::Open, Kind::Close) => false,
        (_, Kind::Open) | (Kind::Open, _) | (_, Kind::Close) => true,
        _ => had_space,
    }
}
