//! The line format of set files: one address, CIDR or range per line, `#` / `;` comments,
//! blank lines, and ipset dumps (`add NAME ELEM [options]`, `create …` lines skipped), read by
//! a streaming line parser (no KDL, no allocation per line beyond the element). Each line is
//! read on its own, so any run of whole lines parses the same inside the file or alone. Pure.

use crate::model::*;
use crate::read::units;

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
}
