//! fwc's own words for the syntax mistakes people make in rule files and templates: unquoted
//! port lists, addresses and `host:port`, single quotes, KDL v1 booleans, a missing `}` (placed
//! from the indentation), unclosed template blocks and undefined template variables.
//! It reads the source text itself, never the parser's error, so it works with any KDL parser.

use crate::format::lex;

/// One explained mistake: a byte range of the text, what is wrong, and how to write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub label: String,
    pub help: String,
}

/// The mistakes found in a KDL text that its parser rejected. Every hint names a real KDL
/// error (a bare value that is not a number, a bare keyword, an unbalanced brace), so when the
/// list is not empty it can replace the parser's own messages; empty means "not recognised".
pub fn explain(text: &str) -> Vec<Hint> {
    let mut scan = Scan::default();
    scan.run(text);
    let mut hints = scan.hints;
    for open in scan.open.iter().rev() {
        hints.push(unclosed_block(text, open));
    }
    hints.sort_by_key(|h| h.offset);
    hints
}

/// A value written in single quotes (`port='80,443'`), which KDL reads as a bare word with
/// the quotes in it. `raw` is the entry's source text (`port='80,443'` or `'80,443'`),
/// starting at byte `offset` of the file.
pub fn single_quoted(raw: &str, offset: usize) -> Option<Hint> {
    let (key, value_at) = match raw.find('=') {
        Some(i) => (Some(&raw[..i]), i + 1),
        None => (None, 0),
    };
    let value = raw[value_at..].trim_end();
    if !value.starts_with('\'') {
        return None;
    }
    let inner = value.trim_matches('\'');
    Some(Hint {
        offset: offset + value_at,
        len: value.len(),
        message: format!("{value} is in single quotes"),
        label: "single quotes".into(),
        help: format!("strings use double quotes in KDL: write {}\"{inner}\"", key.map(|k| format!("{k}=")).unwrap_or_default()),
    })
}

/// Where a template error points and what to say about it. `vars` lists the variables the
/// template could use, as dotted paths with the names under each (`host.vars` -> `wan`, …).
pub struct TemplateHint {
    pub offset: usize,
    pub len: usize,
    pub detail: String,
    pub help: String,
}

/// A block tag (`{% if %}`, `{% for %}`, …) that the template never closes.
pub fn unclosed_template_block(text: &str) -> Option<TemplateHint> {
    let mut stack: Vec<(usize, usize, &str)> = Vec::new();
    let mut rest = 0;
    while let Some(i) = text[rest..].find("{%") {
        let start = rest + i;
        let body_start = start + 2;
        let end = text[body_start..].find("%}").map_or(text.len(), |j| body_start + j + 2);
        let body = text[body_start..end.saturating_sub(2).max(body_start)].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        let word = body.split_whitespace().next().unwrap_or("");
        match word {
            "if" | "for" | "macro" | "filter" | "with" | "call" | "raw" => stack.push((start, end - start, word_static(word))),
            w if w.starts_with("end") => {
                stack.pop();
            }
            "block" => stack.push((start, end - start, "block")),
            _ => {}
        }
        rest = end;
    }
    let (offset, len, word) = stack.pop()?;
    Some(TemplateHint {
        offset,
        len,
        detail: format!("this `{{% {word} %}}` is never closed"),
        help: format!("add `{{% end{word} %}}` where the {word} block ends"),
    })
}

fn word_static(w: &str) -> &'static str {
    ["if", "for", "macro", "filter", "with", "call", "raw"].into_iter().find(|s| *s == w).unwrap_or("block")
}

/// The dotted variable (`host.vars.lan`) around byte range `at` of a template, and the names
/// that exist where it looked: `known(prefix)` gives the names under a dotted prefix ("" for
/// the top level), None when the prefix is not a mapping fwc knows.
pub fn undefined_variable(text: &str, at: (usize, usize), host: &str, known: &dyn Fn(&str) -> Option<Vec<String>>) -> Option<TemplateHint> {
    let is_var = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let (mut start, mut end) = (at.0.min(text.len()), (at.0 + at.1).min(text.len()));
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    while start > 0 && text[..start].chars().next_back().is_some_and(is_var) {
        start -= 1;
    }
    while end < text.len() && text[end..].chars().next().is_some_and(is_var) {
        end += 1;
    }
    // Inside the range, the first dotted name is the variable (the range may cover `{{ … }}`).
    let slice = &text[start..end];
    let name_off = slice.find(|c: char| c.is_ascii_alphabetic() || c == '_')?;
    let name_len = slice[name_off..].find(|c: char| !is_var(c)).unwrap_or(slice.len() - name_off);
    let name = slice[name_off..name_off + name_len].trim_end_matches('.');
    if name.is_empty() {
        return None;
    }
    // The longest prefix that exists says which names were possible.
    let parts: Vec<&str> = name.split('.').collect();
    let mut have = None;
    for n in (0..parts.len()).rev() {
        let prefix = parts[..n].join(".");
        if let Some(names) = known(&prefix) {
            have = Some((prefix, names));
            break;
        }
    }
    let help = match have {
        Some((prefix, names)) => {
            let what = if prefix.is_empty() { "templates see".to_string() } else { format!("{prefix} has") };
            let list = if names.is_empty() { "nothing".to_string() } else { names.join(", ") };
            let missing = parts.get(prefix.split('.').filter(|p| !p.is_empty()).count()).copied().unwrap_or(name);
            let guess = crate::suggest::did_you_mean(missing, names.iter().map(String::as_str))
                .map(|s| format!("did you mean `{}`? ", if prefix.is_empty() { s.to_string() } else { format!("{prefix}.{s}") }))
                .unwrap_or_default();
            format!("{guess}for host \"{host}\" {what}: {list}; use `{{% if {name} is defined %}}` for optional values")
        }
        None => format!("use `{{% if {name} is defined %}}` for optional values"),
    };
    Some(TemplateHint { offset: start + name_off, len: name.len(), detail: format!("`{name}` is not defined"), help })
}

/// A `{` not closed by the end of the text.
struct Open {
    offset: usize,
    /// Indentation (in characters) of the line the `{` is on.
    indent: usize,
    /// The first word of that line (the node's name), for the message.
    node: String,
}

#[derive(Default)]
struct Scan {
    hints: Vec<Hint>,
    open: Vec<Open>,
}

const DELIMITERS: &[char] = &['{', '}', '(', ')', ';', '=', '"', '[', ']'];

impl Scan {
    fn run(&mut self, text: &str) {
        let b = text.as_bytes();
        let mut i = 0;
        let mut after_eq: Option<(usize, usize)> = None; // the property name's range before `=`
        let mut prev_word: Option<(usize, usize)> = None;
        while i < b.len() {
            let c = b[i];
            match c {
                b'/' if b.get(i + 1) == Some(&b'/') => i = text[i..].find('\n').map_or(b.len(), |j| i + j),
                b'/' if b.get(i + 1) == Some(&b'*') => i += lex::block_comment_len(&text[i..]),
                b'"' => {
                    i += lex::quoted_len(&text[i..]);
                    after_eq = None;
                    prev_word = None;
                }
                b'#' if matches!(b.get(i + 1), Some(b'"') | Some(b'#')) => {
                    i += lex::raw_string_len(&text[i..]).unwrap_or_else(|| b[i..].iter().take_while(|&&c| c == b'#').count());
                    after_eq = None;
                }
                b'{' => {
                    let (indent, node) = line_head(text, i);
                    self.open.push(Open { offset: i, indent, node });
                    i += 1;
                }
                b'}' => {
                    if self.open.pop().is_none() {
                        self.hints.push(Hint {
                            offset: i,
                            len: 1,
                            message: "this `}` closes no block".into(),
                            label: "nothing to close".into(),
                            help: "remove it, or add the `{` it belongs to".into(),
                        });
                    }
                    i += 1;
                }
                b'=' => {
                    after_eq = prev_word;
                    i += 1;
                }
                c if c.is_ascii_whitespace() || DELIMITERS.contains(&(c as char)) => {
                    if c == b'\n' || c == b';' {
                        prev_word = None;
                    }
                    if !c.is_ascii_whitespace() {
                        after_eq = None;
                    }
                    i += 1;
                }
                _ => {
                    let start = i;
                    while i < b.len() && !b[i].is_ascii_whitespace() && !DELIMITERS.contains(&(b[i] as char)) {
                        if b[i] == b'/' && matches!(b.get(i + 1), Some(b'/') | Some(b'*')) {
                            break;
                        }
                        i += 1;
                    }
                    let word = &text[start..i];
                    let key = after_eq.take().map(|(s, e)| &text[s..e]);
                    if let Some(h) = bare_value(word, start, key) {
                        self.hints.push(h);
                    }
                    prev_word = Some((start, i));
                }
            }
        }
    }
}

/// A bare word that is not a KDL value, explained (None for numbers and identifiers).
fn bare_value(word: &str, offset: usize, key: Option<&str>) -> Option<Hint> {
    let write = |v: &str| match key {
        Some(k) => format!("{k}={v}"),
        None => v.to_string(),
    };
    if matches!(word, "true" | "false" | "null") {
        return Some(Hint {
            offset,
            len: word.len(),
            message: format!("`{word}` is not a value in KDL v2"),
            label: "bare keyword".into(),
            help: format!("KDL v2 keywords start with #: write {}", write(&format!("#{word}"))),
        });
    }
    let first = word.trim_start_matches(['+', '-']).chars().next()?;
    if !(first.is_ascii_digit() || (first == '.' && word.len() > 1)) || is_number(word) {
        return None;
    }
    let quoted = format!("\"{word}\"");
    let is_port_list = word.split(',').all(|p| !p.is_empty() && p.split('-').all(|n| n.parse::<u16>().is_ok()));
    let (message, label, help) = if word.contains(',') && is_port_list {
        (
            format!("the port list {word} must be quoted"),
            "a list is a string",
            format!("write {}: several ports or ranges are one string, separated by commas", write(&quoted)),
        )
    } else if word.contains(['.', ':', '/']) {
        let what = if word.contains('/') {
            "an address range (CIDR)"
        } else if word.matches(':').count() == 1 && word.contains('.') {
            "an address:port"
        } else {
            "an address"
        };
        (
            format!("{what} must be quoted: {word}"),
            "not a KDL value",
            format!("write {}: addresses, CIDRs and host:port are strings in KDL, in double quotes", write(&quoted)),
        )
    } else {
        (format!("{word} is neither a number nor a name"), "not a KDL value", format!("write {} if it is meant as text", write(&quoted)))
    };
    Some(Hint { offset, len: word.len(), message, label: label.into(), help })
}

/// A KDL number: decimal (with `_`, fraction, exponent) or 0x / 0o / 0b.
fn is_number(word: &str) -> bool {
    let w = word.trim_start_matches(['+', '-']).replace('_', "");
    if let Some(hex) = w.strip_prefix("0x") {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = w.strip_prefix("0o") {
        return !oct.is_empty() && oct.chars().all(|c| ('0'..='7').contains(&c));
    }
    if let Some(bin) = w.strip_prefix("0b") {
        return !bin.is_empty() && bin.chars().all(|c| c == '0' || c == '1');
    }
    w.parse::<f64>().is_ok() && !w.contains(['i', 'I', 'n', 'N'])
}

/// Indentation and first word of the line holding byte `i`.
fn line_head(text: &str, i: usize) -> (usize, String) {
    let start = text[..i].rfind('\n').map_or(0, |j| j + 1);
    let line = &text[start..];
    let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
    let word = line.trim_start().split(|c: char| c.is_whitespace() || c == '{').next().unwrap_or("").to_string();
    (indent, word)
}

/// The block opened at `open` is never closed: say where its `}` probably belongs, which is
/// before the first later line indented no deeper than the line that opened it.
fn unclosed_block(text: &str, open: &Open) -> Hint {
    let line_no = |at: usize| text[..at].matches('\n').count() + 1;
    let after = text[open.offset..].find('\n').map_or(text.len(), |j| open.offset + j + 1);
    let mut at = after;
    let mut last_inside = None;
    for line in text[after..].split_inclusive('\n') {
        let body = line.trim_start_matches([' ', '\t']);
        let indent = line.len() - body.len();
        let blank = body.trim().is_empty() || body.starts_with("//");
        if !blank && indent <= open.indent && !body.starts_with('}') {
            let word_len = body.find(char::is_whitespace).unwrap_or(body.len());
            let inside = last_inside.map(|l| format!(" after line {l}")).unwrap_or_default();
            return Hint {
                offset: at + indent,
                len: word_len,
                message: format!("the `{}` block opened at line {} is not closed", open.node, line_no(open.offset)),
                label: "`}` missing before this line".into(),
                help: format!(
                    "add `}}`{inside}: the indentation says the `{}` block ends before line {}",
                    open.node,
                    line_no(at)
                ),
            };
        }
        if !blank {
            last_inside = Some(line_no(at));
        }
        at += line.len();
    }
    Hint {
        offset: text.len(),
        len: 0,
        message: format!("the `{}` block opened at line {} is not closed", open.node, line_no(open.offset)),
        label: "`}` missing at the end".into(),
        help: format!("add `}}` at the end of the file to close the `{}` block", open.node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Hint {
        let h = explain(text);
        assert_eq!(h.len(), 1, "{h:?}");
        h.into_iter().next().unwrap()
    }

    #[test]
    fn bare_values() {
        let h = one("fwc 1\ninput {\n    allow \"w\" proto=tcp port=80,443\n}\n");
        assert_eq!(&"fwc 1\ninput {\n    allow \"w\" proto=tcp port=80,443\n}\n"[h.offset..h.offset + h.len], "80,443");
        assert!(h.help.contains("port=\"80,443\""), "{}", h.help);
        assert!(one("forward \"a\" to=198.18.2.2:80\n").message.contains("address:port"));
        assert!(one("set \"o\" 10.0.0.0/8\n").help.contains("write \"10.0.0.0/8\""));
        assert!(explain("a x=1 y=1.5 z=-2 w=0x1f v=1_000 s=\"80,443\" r=#\"a{\"# // 1,2 {\n/* 1.2.3.4 { */").is_empty());
        assert!(one("a log=true").help.contains("log=#true"));
    }

    #[test]
    fn missing_brace_from_indentation() {
        let text = "fwc 1\ninput {\n    allow \"a\"\n    allow \"b\"\n\nshape \"x\"\n";
        let h = one(text);
        assert_eq!(&text[h.offset..h.offset + h.len], "shape");
        assert!(h.message.contains("`input` block opened at line 2"), "{}", h.message);
        assert!(h.help.contains("after line 4"), "{}", h.help);
        assert_eq!(one("a {\n  b\n").label, "`}` missing at the end");
        assert!(one("a\n}\n").message.contains("closes no block"));
    }

    #[test]
    fn single_quotes() {
        let h = single_quoted("port='80,443'", 10).unwrap();
        assert_eq!((h.offset, h.len), (15, 8));
        assert!(h.help.contains("port=\"80,443\""));
        assert!(single_quoted("port=\"it's\"", 0).is_none());
    }

    #[test]
    fn template_blocks_and_variables() {
        let t = "a\n{% if x %}\nb\n{% for y in z %}{% endfor %}\n";
        let h = unclosed_template_block(t).unwrap();
        assert_eq!(&t[h.offset..h.offset + h.len], "{% if x %}");
        assert!(unclosed_template_block("{% if a %}{% endif %}").is_none());
        let t = "in=\"{{ host.vars.lann }}\"";
        let known = |p: &str| match p {
            "host.vars" => Some(vec!["lan".to_string(), "wan".to_string()]),
            "host" => Some(vec!["name".into(), "labels".into(), "vars".into()]),
            "" => Some(vec!["host".into(), "hosts".into()]),
            _ => None,
        };
        let h = undefined_variable(t, (12, 4), "edge-1", &known).unwrap();
        assert_eq!(&t[h.offset..h.offset + h.len], "host.vars.lann");
        assert!(h.help.contains("did you mean `host.vars.lan`?"), "{}", h.help);
        assert!(h.help.contains("host.vars has: lan, wan"), "{}", h.help);
    }
}
