//! Set files: `set "firehol" file="lists/firehol_level1.netset"` reads addresses from a plain
//! text file of the repository instead of KDL. A streaming line parser (no KDL, no allocation
//! per line beyond the element): one address, CIDR or range per line, `#` / `;` comments,
//! blank lines, and ipset dumps (`add NAME ELEM [options]`, `create …` lines skipped).
//!
//! Set files live under `lists/` of the repository (like rule files under `rules/`); the
//! [`SourceTree`] holds them for the work tree and for git commits alike.

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::*;
use crate::read::source::{SourceMap, SourceTree, LISTS_DIR};
use crate::{read::limits, read::setcache, read::units};

/// At most this many errors are reported per set file (a wrong file can have a million bad lines).
const MAX_ERRORS_PER_FILE: usize = 10;

/// One problem on one line of a set file: byte offset and length in the file, what, and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub help: String,
}

/// Parse the text of a set file, calling `push(element, offset, len)` for every element in
/// file order. Returns the errors (at most [`MAX_ERRORS_PER_FILE`]); elements of good lines
/// are pushed even when other lines are bad (the caller discards everything on error).
pub fn parse(text: &str, mut push: impl FnMut(AddrElem, usize, usize)) -> Vec<LineError> {
    let mut errors = Vec::new();
    let mut line_start = 0;
    for raw in text.split_inclusive('\n') {
        let start = line_start;
        line_start += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        // Most lines of a big list are one IPv4 address or network and nothing else.
        if let Some(e) = fast_v4(line.as_bytes()) {
            push(e, start, line.len());
            continue;
        }
        // Cut a comment: `#` or `;` anywhere (neither can be part of an address).
        let content = match line.find(['#', ';']) {
            Some(i) => &line[..i],
            None => line,
        };
        let mut words = content.split_ascii_whitespace();
        let Some(first) = words.next() else { continue };
        let offset_of = |w: &str| start + (w.as_ptr() as usize - line.as_ptr() as usize);
        let elem = match first {
            // ipset `save` format: `create NAME TYPE …` declares the set; `add NAME ELEM …`.
            "create" => continue,
            "add" => {
                let (Some(_name), Some(elem)) = (words.next(), words.next()) else {
                    errors.push(LineError {
                        offset: offset_of(first),
                        len: content.trim_end().len() - (offset_of(first) - start),
                        message: "ipset line `add` without a set name and an element".into(),
                        help: "ipset lines read `add NAME 192.0.2.0/24`".into(),
                    });
                    if errors.len() >= MAX_ERRORS_PER_FILE {
                        break;
                    }
                    continue;
                };
                if let Some(opt) = words.find(|w| *w == "nomatch") {
                    errors.push(LineError {
                        offset: offset_of(opt),
                        len: opt.len(),
                        message: "ipset `nomatch` entries (exceptions) are not supported".into(),
                        help: "remove the line, or list the addresses that should match instead".into(),
                    });
                    if errors.len() >= MAX_ERRORS_PER_FILE {
                        break;
                    }
                    continue;
                }
                elem
            }
            elem => {
                if let Some(extra) = words.next() {
                    errors.push(LineError {
                        offset: offset_of(extra),
                        len: extra.len(),
                        message: format!("unexpected `{extra}` after the address"),
                        help: "one address, CIDR or range per line; comments start with # or ;".into(),
                    });
                    if errors.len() >= MAX_ERRORS_PER_FILE {
                        break;
                    }
                    continue;
                }
                elem
            }
        };
        match fast_v4(elem.as_bytes()).map_or_else(|| units::parse_addr(elem), Ok) {
            Ok(v) => push(v, offset_of(elem), elem.len()),
            Err(e) => {
                errors.push(LineError { offset: offset_of(elem), len: elem.len(), message: e.message, help: e.help });
                if errors.len() >= MAX_ERRORS_PER_FILE {
                    break;
                }
            }
        }
    }
    errors
}

/// `a.b.c.d` or `a.b.c.d/len` written the way both `std` and `ipnet` read it (decimal octets
/// without leading zeros, no host bits set), parsed without them; `None` for anything else,
/// which [`units::parse_addr`] then reads (and words the error of). The general parsers were
/// the largest part of reading a million-line set file.
fn fast_v4(s: &[u8]) -> Option<AddrElem> {
    // A decimal number of 1..=max_digits digits without a leading zero, and where it ends.
    fn number(s: &[u8], at: usize, max_digits: usize) -> Option<(u32, usize)> {
        let mut v = 0u32;
        let mut i = at;
        while i < s.len() && s[i].is_ascii_digit() && i - at < max_digits {
            v = v * 10 + u32::from(s[i] - b'0');
            i += 1;
        }
        if i == at || (s[at] == b'0' && i - at > 1) || (i < s.len() && s[i].is_ascii_digit()) {
            return None;
        }
        Some((v, i))
    }
    let mut addr = 0u32;
    let mut at = 0;
    for k in 0..4 {
        if k > 0 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let (o, next) = number(s, at, 3)?;
        if o > 255 {
            return None;
        }
        addr = addr << 8 | o;
        at = next;
    }
    let len = match s.get(at) {
        None => 32,
        Some(b'/') => {
            let (l, next) = number(s, at + 1, 2)?;
            if l > 32 || next != s.len() {
                return None;
            }
            l as u8
        }
        Some(_) => return None,
    };
    if len < 32 && addr & (u32::MAX >> len) != 0 {
        return None;
    }
    let net = ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(addr), len).ok()?;
    Some(AddrElem::Net(ipnet::IpNet::V4(net)))
}

/// Is `path` (as written in `file=`) a path inside the repository (relative, no `..`)?
fn inside_repository(path: &str) -> bool {
    !path.starts_with('/') && !path.contains('\\') && path.split('/').all(|c| c != ".." && !c.is_empty())
}

/// Read the files of every set that names some (`file=`), appending their elements to the
/// set's inline ones. Errors point at the `file=` value (missing file, outside the
/// repository) or at line:column of the set file (bad line).
pub fn load_all(tree: &SourceTree, map: &mut SourceMap, rs: &mut Ruleset) -> Result<(), Diagnostics> {
    let mut diags = Diagnostics::default();
    // Elements of the host so far (inline ones are already counted by limits::check_ruleset).
    let mut total: usize = rs.sets.iter().map(|s| s.elements.len()).sum();
    for set in &mut rs.sets {
        let rule = format!("set \"{}\"", set.name.value);
        for file in &set.files {
            let path = file.value.trim_start_matches("./");
            if !inside_repository(path) {
                diags.push(
                    Diagnostic::error("set-file-outside-repository", format!("set file \"{}\" is outside the repository", file.value))
                        .at(map, file.span, "not a path inside the repository")
                        .rule(&rule)
                        .help(format!("set files are part of the repository: put it under {LISTS_DIR}/ and write file=\"{LISTS_DIR}/<name>\"")),
                );
                continue;
            }
            if !path.starts_with(&format!("{LISTS_DIR}/")) {
                diags.push(
                    Diagnostic::error("set-file-location", format!("set file \"{}\" is not under {LISTS_DIR}/", file.value))
                        .at(map, file.span, "fwc reads set files from lists/")
                        .rule(&rule)
                        .help(format!("move the file to {LISTS_DIR}/ of the repository (as rule files live under rules/) and write file=\"{LISTS_DIR}/…\"")),
                );
                continue;
            }
            let Some(text) = tree.lists.get(path) else {
                let known: Vec<&str> = tree.lists.keys().map(String::as_str).collect();
                let help = match crate::suggest::did_you_mean(path, known.iter().copied()) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None => format!("add the file to the repository under {LISTS_DIR}/ (and commit it: the agent reads the commit)"),
                };
                diags.push(
                    Diagnostic::error("missing-set-file", format!("set file \"{}\" does not exist", file.value))
                        .at(map, file.span, "no such file in the repository")
                        .rule(&rule)
                        .help(help),
                );
                continue;
            };
            let id = map.add(path.to_string(), text);
            let before = set.elements.len();
            // One allocation of the right size (a million elements: no doubling on the way),
            // never past the limit.
            let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
            set.elements.reserve(lines.min(limits::MAX_SET_ELEMENTS.saturating_sub(total) + 1));
            let elements = &mut set.elements;
            let mut past_limit = None;
            let mut push = |e: AddrElem, offset: usize, len: usize| {
                let span = Span { file: id, offset: offset as u32, len: len as u32 };
                if total < limits::MAX_SET_ELEMENTS {
                    total += 1;
                    elements.push(Spanned::new(e, span));
                } else if past_limit.is_none() {
                    past_limit = Some(span);
                }
            };
            let key = tree.set_cache.0.as_ref().filter(|_| text.len() >= setcache::MIN_BYTES).map(|_| setcache::key(text));
            let cached = cached_entry(&tree.set_cache, key.as_deref());
            let errors = match &cached {
                Some(entry) => {
                    for &(e, offset, len) in &entry.elems {
                        push(e, offset as usize, len as usize);
                    }
                    Vec::new()
                }
                None => parse(text, push),
            };
            if let Some(span) = past_limit {
                set.elements.truncate(before);
                diags.push(limits::too_many_elements(map, span).rule(&rule));
                return Err(diags);
            }
            if !errors.is_empty() {
                set.elements.truncate(before);
                for e in errors {
                    diags.push(
                        Diagnostic::error("bad-set-file-line", e.message)
                            .at(map, Span { file: id, offset: e.offset as u32, len: e.len as u32 }, "in this set file")
                            .rule(&rule)
                            .help(e.help),
                    );
                }
                continue;
            }
            // A set that is exactly this file: what its layout and manifest take from it, from
            // the cache or computed once here (and stored for the next compile).
            if before == 0 && set.files.len() == 1 {
                let facts = match cached {
                    Some(entry) => entry.facts,
                    None => {
                        let facts = setcache::FileFacts {
                            merged: crate::place::setlayout::merged_compact(set.elements.iter().map(|e| &e.value)),
                            digest: crate::emit::manifest::set_digest(&set.elements),
                        };
                        if let (Some(store), Some(key)) = (&tree.set_cache.0, &key) {
                            let elems: Vec<(AddrElem, u32, u32)> = set.elements.iter().map(|e| (e.value, e.span.offset, e.span.len)).collect();
                            let entry = setcache::Entry { elems, facts };
                            store.put(key, &setcache::encode(key, &entry));
                            entry.facts
                        } else {
                            facts
                        }
                    }
                };
                set.from_file = Some(std::sync::Arc::new(facts));
            }
        }
    }
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(())
    }
}

/// The cache's entry for a set file's `key`, if the cache is on and holds an intact one (an
/// unusable entry is reported to the store, which warns and drops it).
fn cached_entry(cache: &setcache::SetCache, key: Option<&str>) -> Option<setcache::Entry> {
    let (store, key) = (cache.0.as_ref()?, key?);
    let bytes = store.get(key)?;
    match setcache::decode(key, &bytes) {
        Ok(entry) => Some(entry),
        Err(why) => {
            store.reject(key, &why);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elems(text: &str) -> (Vec<String>, Vec<LineError>) {
        let mut out = Vec::new();
        let errs = parse(text, |e, off, len| out.push(format!("{e}@{off}+{len}")));
        (out, errs)
    }

    #[test]
    fn netset_lines_comments_ranges_and_ipset_dumps() {
        let text = "# FireHOL level 1\n\n; other comment\n192.0.2.0/24\r\n  198.51.100.7   # trailing\n10.0.0.1-10.0.0.9;x\n2001:db8::/32\ncreate bl hash:net family inet\nadd bl 203.0.113.0/24 timeout 0\n";
        let (got, errs) = elems(text);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            got,
            [
                "192.0.2.0/24@35+12",
                "198.51.100.7@51+12",
                "10.0.0.1-10.0.0.9@77+17",
                "2001:db8::/32@97+13",
                "203.0.113.0/24@149+14"
            ]
        );
        assert_eq!(&text[149..163], "203.0.113.0/24");
    }

    #[test]
    fn bad_lines_have_positions_and_stop_after_ten() {
        let (_, errs) = elems("192.0.2.1\n192.0.2.300\n10.0.0.1 10.0.0.2\nadd x\nadd x 10.0.0.0/8 nomatch\n");
        let got: Vec<(usize, &str)> = errs.iter().map(|e| (e.offset, e.message.as_str())).collect();
        assert_eq!(
            got,
            [
                (10, "\"192.0.2.300\" is not an IP address"),
                (31, "unexpected `10.0.0.2` after the address"),
                (40, "ipset line `add` without a set name and an element"),
                (63, "ipset `nomatch` entries (exceptions) are not supported")
            ]
        );
        let many = "bad\n".repeat(1000);
        assert_eq!(elems(&many).1.len(), MAX_ERRORS_PER_FILE);
    }

    #[test]
    fn fast_path_reads_what_the_general_parser_reads() {
        let good = ["0.0.0.0", "1.2.3.4", "255.255.255.255", "10.0.0.0/8", "0.0.0.0/0", "192.0.2.0/24", "192.0.2.7/32", "100.64.0.0/10"];
        for t in good {
            assert_eq!(fast_v4(t.as_bytes()), Some(crate::read::units::parse_addr(t).unwrap()), "{t}");
        }
        // Left to the general parser (which reads or rejects them): leading zeros, host bits,
        // out of range, other forms.
        let other = ["01.2.3.4", "1.2.3.4/024", "1.2.3.4/24", "256.1.1.1", "1.2.3", "1.2.3.4.5", "1.2.3.4/33", "1.2.3.4/", "1.2.3.4 ", "1.2.3.4-1.2.3.5", "::1", "1.2.3.4/8x", "1111.2.3.4", ""];
        for t in other {
            assert_eq!(fast_v4(t.as_bytes()), None, "{t}");
        }
        // Every address and prefix the fast path takes, on random input, equals the general
        // parser's reading.
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = std::net::Ipv4Addr::from(x as u32);
            let t = if x >> 40 & 1 == 0 { a.to_string() } else { format!("{a}/{}", (x >> 48) % 40) };
            if let Some(e) = fast_v4(t.as_bytes()) {
                assert_eq!(Ok(e), crate::read::units::parse_addr(&t).map_err(|e| e.message), "{t}");
            }
        }
    }

    #[test]
    fn repository_paths() {
        assert!(inside_repository("lists/a.netset"));
        for p in ["/etc/passwd", "../x", "lists/../../x", "lists//a", "a\\b"] {
            assert!(!inside_repository(p), "{p}");
        }
    }
}
