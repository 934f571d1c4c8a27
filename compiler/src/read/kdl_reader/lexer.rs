//! Tokens of KDL v2 read straight from the text: spaces, newlines, comments, strings
//! (identifier, quoted, raw, multi-line), numbers and keywords. The [`Cursor`] holds the
//! byte position; the grammar of nodes is in `parser.rs`.

use super::{ReadError, TextSpan, Value};

type Result<T> = std::result::Result<T, ReadError>;

/// Characters that are whitespace in KDL v2 (newlines aside).
pub fn is_unicode_space(c: char) -> bool {
    matches!(c, '\t' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}')
}

/// Code points that may not appear literally anywhere in a document.
pub fn is_disallowed(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{E}'..='\u{1F}' | '\u{7F}' | '\u{200E}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

fn is_newline_char(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{B}' | '\u{C}' | '\u{2028}' | '\u{2029}')
}

/// May `c` appear in a bare identifier?
pub fn is_ident_char(c: char) -> bool {
    !(matches!(c, '\\' | '/' | '(' | ')' | '{' | '}' | '[' | ']' | ';' | '"' | '#' | '=') || is_unicode_space(c) || is_newline_char(c) || is_disallowed(c))
}

/// The first code point that may not appear in the document (a BOM only at the start).
pub fn first_disallowed(text: &str) -> Option<(usize, char)> {
    let fast = |b: u8| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0B | 0x0C) || b == 0x7F || b >= 0x80;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !fast(bytes[i]) {
            i += 1;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        if is_disallowed(c) && !(i == 0 && c == '\u{FEFF}') {
            return Some((i, c));
        }
        i += c.len_utf8();
    }
    None
}

const KEYWORD_LIKE: &[&str] = &["true", "false", "null", "inf", "-inf", "nan"];

/// A position in the text being read.
pub struct Cursor<'a> {
    pub text: &'a str,
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Cursor<'a> {
        Cursor { text, pos: 0 }
    }

    pub fn eof(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    pub fn peek(&self) -> Option<char> {
        self.char_at(self.pos)
    }

    fn char_at(&self, at: usize) -> Option<char> {
        match self.text.as_bytes().get(at) {
            Some(&b) if b < 0x80 => Some(b as char),
            Some(_) => self.text[at..].chars().next(),
            None => None,
        }
    }

    pub fn at(&self, s: &str) -> bool {
        self.text.as_bytes()[self.pos..].starts_with(s.as_bytes())
    }

    pub fn error(&self, message: impl Into<String>) -> ReadError {
        let len = self.peek().map_or(0, char::len_utf8);
        ReadError::at(self.pos, len, message)
    }

    /// Length of the newline at `at` (CRLF counts as one).
    fn newline_at(&self, at: usize) -> Option<usize> {
        let c = self.char_at(at)?;
        if c == '\r' && self.text.as_bytes().get(at + 1) == Some(&b'\n') {
            return Some(2);
        }
        is_newline_char(c).then(|| c.len_utf8())
    }

    pub fn at_newline(&self) -> bool {
        self.newline_at(self.pos).is_some()
    }

    /// Consume one newline if there is one.
    pub fn newline(&mut self) -> bool {
        match self.newline_at(self.pos) {
            Some(n) => {
                self.pos += n;
                true
            }
            None => false,
        }
    }

    /// `ws*`: unicode spaces and `/* … */` comments (nested). True if anything was consumed.
    fn ws(&mut self) -> Result<bool> {
        let start = self.pos;
        loop {
            match self.peek() {
                Some(c) if is_unicode_space(c) => self.pos += c.len_utf8(),
                Some('/') if self.at("/*") => self.block_comment()?,
                _ => return Ok(self.pos > start),
            }
        }
    }

    fn block_comment(&mut self) -> Result<()> {
        let open = self.pos;
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        while self.pos < bytes.len() {
            if bytes[self.pos..].starts_with(b"/*") {
                depth += 1;
                self.pos += 2;
            } else if bytes[self.pos..].starts_with(b"*/") {
                depth -= 1;
                self.pos += 2;
                if depth == 0 {
                    return Ok(());
                }
            } else {
                self.pos += 1;
            }
        }
        Err(ReadError::at(open, 2, "unclosed multi-line comment: expected `*/`"))
    }

    /// `// …` up to and including the newline (or the end).
    fn line_comment(&mut self) {
        while !self.eof() {
            if self.newline() {
                return;
            }
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
    }

    pub fn at_line_comment(&self) -> bool {
        self.at("//")
    }

    /// Consume a single-line comment (with its newline) if there is one.
    pub fn line_comment_if_any(&mut self) -> bool {
        if self.at_line_comment() {
            self.line_comment();
            true
        } else {
            false
        }
    }

    /// `escline := '\\' ws* (single-line-comment | newline | eof)`; the cursor is unmoved if
    /// the backslash does not start one.
    fn escline(&mut self) -> Result<bool> {
        if self.byte() != Some(b'\\') {
            return Ok(false);
        }
        let start = self.pos;
        self.pos += 1;
        self.ws()?;
        if self.eof() || self.newline() {
            return Ok(true);
        }
        if self.at_line_comment() {
            self.line_comment();
            return Ok(true);
        }
        self.pos = start;
        Ok(false)
    }

    /// `node-space*`: spaces, comments and line continuations within a node. True if any.
    pub fn node_space(&mut self) -> Result<bool> {
        let start = self.pos;
        while self.ws()? || self.escline()? {}
        Ok(self.pos > start)
    }

    /// `line-space*`: node space, newlines and single-line comments.
    pub fn line_space(&mut self) -> Result<()> {
        while self.node_space()? || self.newline() || self.line_comment_if_any() {}
        Ok(())
    }

    /// Does a value end here? (end, `=`, `)`, `{`, `}`, `;`, space, newline, comment, escline)
    pub fn at_value_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some('=' | ')' | '{' | '}' | ';') => true,
            Some(c) if is_unicode_space(c) || is_newline_char(c) => true,
            Some('/') => self.at("//") || self.at("/*") || self.at("/-"),
            Some('\\') => {
                let mut probe = Cursor { text: self.text, pos: self.pos };
                probe.escline().unwrap_or(false)
            }
            _ => false,
        }
    }

    fn terminated<T>(&self, v: T) -> Result<T> {
        if self.at_value_terminator() {
            Ok(v)
        } else {
            Err(self.error("a value must be followed by a space, a newline, `;`, `=`, `)`, `{` or `}`"))
        }
    }

    /// A string of any kind at the cursor, with its token span; None if the text here is not a
    /// string (a number, a keyword, or something else the caller reports).
    pub fn string(&mut self) -> Result<Option<(String, TextSpan)>> {
        let start = self.pos;
        let s = match self.peek() {
            Some('"') => self.quoted()?,
            Some('#') if matches!(self.char_at(self.pos + 1), Some('#' | '"')) => self.raw()?,
            Some(c) if is_ident_char(c) => match self.bare_identifier()? {
                Some(s) => s,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let s = self.terminated(s)?;
        Ok(Some((s, TextSpan::between(start, self.pos))))
    }

    /// An identifier string, or None where the text starts a number.
    fn bare_identifier(&mut self) -> Result<Option<String>> {
        let start = self.pos;
        let digit_at = |at: usize| self.text.as_bytes().get(at).is_some_and(u8::is_ascii_digit);
        let first = self.text.as_bytes()[start];
        let after_sign = if first == b'+' || first == b'-' { start + 1 } else { start };
        if digit_at(after_sign) || (self.text.as_bytes().get(after_sign) == Some(&b'.') && digit_at(after_sign + 1)) {
            return Ok(None);
        }
        while let Some(c) = self.peek() {
            if !is_ident_char(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        let s = &self.text[start..self.pos];
        if KEYWORD_LIKE.contains(&s) {
            return Err(ReadError::at(start, s.len(), format!("`{s}` must be quoted or written #{s} (a keyword)")));
        }
        Ok(Some(s.to_string()))
    }

    /// `"…"` or `"""` multi-line `"""`, unescaped.
    fn quoted(&mut self) -> Result<String> {
        let open = self.pos;
        if self.at("\"\"\"") {
            self.pos += 3;
            if !self.newline() {
                return Err(self.error("multi-line string opening quotes must be immediately followed by a newline"));
            }
            return self.multiline(open, None);
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            // Plain ASCII runs are copied whole.
            let run = self.text.as_bytes()[self.pos..].iter().take_while(|&&b| b.is_ascii() && !matches!(b, b'"' | b'\\' | b'\n' | b'\r' | 0x0B | 0x0C)).count();
            out.push_str(&self.text[self.pos..self.pos + run]);
            self.pos += run;
            let Some(c) = self.peek() else {
                return Err(ReadError::at(open, 1, "missing string closing quote"));
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\\' => self.escape(&mut out)?,
                c if is_newline_char(c) => return Err(self.error("unexpected newline in single-line quoted string")),
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// One escape at the cursor (`\n`, `\u{…}`, or a whitespace escape, which adds nothing).
    fn escape(&mut self, out: &mut String) -> Result<()> {
        let at = self.pos;
        self.pos += 1;
        let c = self.peek().ok_or_else(|| self.error("unfinished escape"))?;
        let simple = match c {
            '\\' => Some('\\'),
            '"' => Some('"'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{C}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            's' => Some(' '),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            self.pos += 1;
            return Ok(());
        }
        if c == 'u' {
            let bytes = self.text.as_bytes();
            if bytes.get(self.pos + 1) != Some(&b'{') {
                return Err(ReadError::at(at, 2, "invalid unicode escape: write \\u{…}"));
            }
            let digits_at = self.pos + 2;
            let n = bytes[digits_at..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
            if n == 0 || n > 6 || bytes.get(digits_at + n) != Some(&b'}') {
                return Err(ReadError::at(at, 2, "invalid unicode escape: 1 to 6 hex digits in braces"));
            }
            let v = u32::from_str_radix(&self.text[digits_at..digits_at + n], 16).unwrap_or(u32::MAX);
            let ch = char::from_u32(v).ok_or_else(|| ReadError::at(at, n + 4, "unicode escape is not a unicode scalar value"))?;
            out.push(ch);
            self.pos = digits_at + n + 1;
            return Ok(());
        }
        if is_unicode_space(c) || is_newline_char(c) {
            while let Some(c) = self.peek() {
                if is_unicode_space(c) {
                    self.pos += c.len_utf8();
                } else if !self.newline() {
                    break;
                }
            }
            return Ok(());
        }
        Err(ReadError::at(at, 1 + c.len_utf8(), format!("invalid escape `\\{c}`")))
    }

    /// `#…#"…"#…#` single- or multi-line raw string.
    fn raw(&mut self) -> Result<String> {
        let open = self.pos;
        let hashes = self.text[open..].bytes().take_while(|&b| b == b'#').count();
        self.pos += hashes;
        if self.byte() != Some(b'"') {
            return Err(self.error("a raw string is #\"…\"#"));
        }
        let close: String = format!("\"{}", "#".repeat(hashes));
        if self.at("\"\"\"") {
            self.pos += 3;
            if !self.newline() {
                return Err(self.error("multi-line raw string opening quotes must be immediately followed by a newline"));
            }
            return self.multiline(open, Some(&close));
        }
        self.pos += 1;
        let body_start = self.pos;
        loop {
            if self.eof() {
                return Err(ReadError::at(open, hashes + 1, "missing raw string closing quote"));
            }
            if self.at(&close) {
                let body = self.text[body_start..self.pos].to_string();
                self.pos += close.len();
                return Ok(body);
            }
            if self.at_newline() {
                return Err(self.error("unexpected newline in single-line raw string"));
            }
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
    }

    /// The body of a multi-line string after the opening newline: lines are dedented by the
    /// closing line's whitespace; `close` is None for quoted strings (escapes apply), else the
    /// raw string's closing `"#…`.
    fn multiline(&mut self, open: usize, close: Option<&str>) -> Result<String> {
        let raw = close.is_some();
        let quote3 = close.map_or_else(|| "\"\"\"".to_string(), |c| format!("\"\"{c}"));
        // Lines: (start, end) of each line's text before its newline.
        let mut lines: Vec<(usize, usize)> = Vec::new();
        let prefix_end;
        loop {
            let line_start = self.pos;
            // The closing line: only whitespace (and whitespace escapes) before the quotes.
            let mut probe = Cursor { text: self.text, pos: self.pos };
            let mut prefix = (line_start, line_start);
            loop {
                match probe.peek() {
                    Some(c) if is_unicode_space(c) => {
                        probe.pos += c.len_utf8();
                        prefix.1 = probe.pos;
                    }
                    Some('\\') if !raw && probe.char_at(probe.pos + 1).is_some_and(|c| is_unicode_space(c) || is_newline_char(c)) => {
                        probe.escape(&mut String::new())?;
                    }
                    _ => break,
                }
            }
            if probe.at(&quote3) {
                prefix_end = prefix;
                self.pos = probe.pos + quote3.len();
                break;
            }
            // A content line, up to its newline (whitespace escapes may join lines).
            loop {
                if self.eof() {
                    return Err(ReadError::at(open, 3, "missing multi-line string closing quotes"));
                }
                if self.at(&quote3) {
                    return Err(self.error("closing quotes of a multi-line string must be on their own line"));
                }
                if self.at_newline() {
                    break;
                }
                if !raw && self.byte() == Some(b'\\') {
                    self.escape(&mut String::new())?;
                    continue;
                }
                self.pos += self.peek().map_or(1, char::len_utf8);
            }
            lines.push((line_start, self.pos));
            self.newline();
        }
        let prefix = &self.text[prefix_end.0..prefix_end.1];
        let mut out = String::new();
        for (i, &(a, b)) in lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let line = &self.text[a..b];
            if self.blank(line, raw) {
                continue;
            }
            let Some(rest) = line.strip_prefix(prefix) else {
                return Err(ReadError::at(a, b - a, "every line of a multi-line string must start with the closing line's whitespace"));
            };
            if raw {
                out.push_str(rest);
            } else {
                let mut c = Cursor { text: self.text, pos: b - rest.len() };
                while c.pos < b {
                    match c.peek() {
                        Some('\\') => c.escape(&mut out)?,
                        Some(ch) => {
                            out.push(ch);
                            c.pos += ch.len_utf8();
                        }
                        None => break,
                    }
                }
            }
        }
        Ok(out)
    }

    /// A line of only whitespace (and, in quoted strings, whitespace escapes).
    fn blank(&self, line: &str, raw: bool) -> bool {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if is_unicode_space(c) {
                continue;
            }
            if !raw && c == '\\' && chars.peek().is_some_and(|&n| is_unicode_space(n) || is_newline_char(n)) {
                continue;
            }
            if !raw && is_newline_char(c) {
                continue;
            }
            return false;
        }
        true
    }

    /// A number at the cursor (decimal, float, `0x`, `0o`, `0b`), with `_` separators.
    pub fn number(&mut self) -> Result<Value> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut i = start;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let radix = match bytes.get(i..i + 2) {
            Some(b"0x") => 16,
            Some(b"0o") => 8,
            Some(b"0b") => 2,
            _ => 10,
        };
        let digits = |i: usize, radix: u32| {
            let mut j = i;
            if !bytes.get(j).is_some_and(|b| (*b as char).is_digit(radix)) {
                return None;
            }
            while bytes.get(j).is_some_and(|b| (*b as char).is_digit(radix) || *b == b'_') {
                j += 1;
            }
            Some(j)
        };
        let bad = |at: usize, m: &str| ReadError::at(at, 1, m.to_string());
        let clean = |a: usize, b: usize| self.text[a..b].replace('_', "");
        if radix != 10 {
            let end = digits(i + 2, radix).ok_or_else(|| bad(i + 2, "expected a digit after the number's prefix"))?;
            self.pos = end;
            let mut s = clean(i + 2, end);
            if bytes[start] == b'-' {
                s.insert(0, '-');
            }
            let v = i128::from_str_radix(&s, radix).map_err(|e| ReadError::at(start, end - start, format!("invalid integer: {e}")))?;
            return self.terminated(Value::Integer(v));
        }
        let mut end = digits(i, 10).ok_or_else(|| bad(i, "expected a number"))?;
        let mut float = false;
        if bytes.get(end) == Some(&b'.') {
            end = digits(end + 1, 10).ok_or_else(|| bad(end + 1, "a digit must follow the '.' of a float"))?;
            float = true;
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            let mut j = end + 1;
            if matches!(bytes.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            end = digits(j, 10).ok_or_else(|| bad(j, "a digit must follow the exponent mark of a float"))?;
            float = true;
        }
        self.pos = end;
        let s = clean(start, end);
        let v = if float {
            Value::Float(s.parse::<f64>().map_err(|e| ReadError::at(start, end - start, format!("invalid float: {e}")))?)
        } else {
            Value::Integer(s.parse::<i128>().map_err(|e| ReadError::at(start, end - start, format!("invalid integer: {e}")))?)
        };
        self.terminated(v)
    }

    /// `#true`, `#false`, `#null`, `#inf`, `#-inf`, `#nan`.
    pub fn keyword(&mut self) -> Result<Value> {
        let start = self.pos;
        let rest = &self.text[start + 1..];
        let (v, n) = [("true", Value::Bool(true)), ("false", Value::Bool(false)), ("null", Value::Null), ("nan", Value::Float(f64::NAN)), ("inf", Value::Float(f64::INFINITY)), ("-inf", Value::Float(f64::NEG_INFINITY))]
            .into_iter()
            .find(|(k, _)| rest.starts_with(k))
            .map(|(k, v)| (v, k.len()))
            .ok_or_else(|| self.error("unknown keyword: KDL keywords are #true, #false, #null, #inf, #-inf and #nan"))?;
        self.pos = start + 1 + n;
        self.terminated(v)
    }
}
