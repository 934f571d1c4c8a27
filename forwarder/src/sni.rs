//! TLS SNI routing: read the server name out of a ClientHello without decrypting anything, and
//! the route table of a listening socket shared by several forwards (`sni=` exact names and
//! single-label `*.` wildcards, plus an optional fallback).
//!
//! The parser is incremental: [`parse_client_hello`] is called on everything read so far and
//! says whether it needs more bytes. It reassembles the handshake message across TLS records
//! (a client may split the ClientHello over several records, and TCP may split records
//! anywhere) and is bounded: at most [`MAX_HELLO`] bytes of handshake message and
//! [`MAX_PEEK`] bytes in total. It is written here rather than taken from `tls-parser`
//! because that crate parses one record at a time (no reassembly of a handshake message split
//! across records) and only ~80 lines of the format matter for a server name.

use std::collections::HashMap;

/// Largest ClientHello handshake message accepted (post-quantum key shares make hellos of
/// 2-4 KiB; 16 KiB is the largest one TLS record can carry).
pub const MAX_HELLO: usize = 16 * 1024;
/// Most bytes read from a client before routing (record headers included: a hello split into
/// tiny records costs 5 bytes of header per record).
pub const MAX_PEEK: usize = 64 * 1024;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST: u8 = 0;
const MAX_RECORD: usize = 16 * 1024 + 2048;

/// What the bytes read so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// A complete prefix of a ClientHello: read more.
    NeedMore,
    /// A complete ClientHello; the server name (lower case, no trailing dot), if it sent one.
    Done(Option<String>),
    /// Not a TLS ClientHello (or over the size bounds); the reason, for logs.
    Invalid(&'static str),
}

/// Parse the ClientHello at the start of `buf` (everything read from the client so far).
pub fn parse_client_hello(buf: &[u8]) -> Hello {
    HelloParser::default().feed(buf)
}

/// The incremental parser: whole records are taken out of the buffer once, so feeding a hello
/// that arrives one byte at a time costs linear work, not quadratic.
#[derive(Debug, Default)]
pub struct HelloParser {
    /// Bytes of the buffer taken as whole records.
    consumed: usize,
    /// The handshake message reassembled from those records.
    msg: Vec<u8>,
}

impl HelloParser {
    /// `buf` is everything read so far (the same buffer, grown, on every call).
    pub fn feed(&mut self, buf: &[u8]) -> Hello {
        if buf.len() > MAX_PEEK {
            return Hello::Invalid("more than 64 KiB before the end of the ClientHello");
        }
        loop {
            if let Some(need) = handshake_len(&self.msg) {
                if need > MAX_HELLO {
                    return Hello::Invalid("ClientHello larger than 16 KiB");
                }
                if self.msg.len() >= 4 + need {
                    return match client_hello_sni(&self.msg[4..4 + need]) {
                        Ok(name) => Hello::Done(name),
                        Err(why) => Hello::Invalid(why),
                    };
                }
            }
            let rest = &buf[self.consumed..];
            if rest.is_empty() {
                return Hello::NeedMore;
            }
            if rest[0] != CONTENT_HANDSHAKE {
                return Hello::Invalid("not a TLS handshake record");
            }
            if rest.len() >= 2 && rest[1] != 3 {
                return Hello::Invalid("not a TLS record version");
            }
            if rest.len() < 5 {
                return Hello::NeedMore;
            }
            let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            if len == 0 || len > MAX_RECORD {
                return Hello::Invalid("TLS record length out of range");
            }
            let Some(body) = rest.get(5..5 + len) else {
                // A partial record: its first bytes may already show a wrong handshake header.
                let mut head: Vec<u8> = self.msg.iter().take(4).copied().collect();
                head.extend(rest[5..].iter().take(4 - head.len()));
                if head.first().is_some_and(|t| *t != HANDSHAKE_CLIENT_HELLO) {
                    return Hello::Invalid("first handshake message is not a ClientHello");
                }
                if handshake_len(&head).is_some_and(|n| n > MAX_HELLO) {
                    return Hello::Invalid("ClientHello larger than 16 KiB");
                }
                return Hello::NeedMore;
            };
            self.msg.extend_from_slice(body);
            self.consumed += 5 + len;
            if self.msg[0] != HANDSHAKE_CLIENT_HELLO {
                return Hello::Invalid("first handshake message is not a ClientHello");
            }
        }
    }
}

/// Length of the handshake message whose 4-byte header starts `msg`, once the header is there.
fn handshake_len(msg: &[u8]) -> Option<usize> {
    (msg.len() >= 4).then(|| usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]))
}

/// A cursor over a ClientHello body; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated ClientHello");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a 1- or 2-byte length prefix.
    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// The server name of a ClientHello body (after the 4-byte handshake header).
fn client_hello_sni(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader(body);
    let version = r.u16()?;
    if version >> 8 != 3 {
        return Err("not a TLS ClientHello version");
    }
    r.take(32)?; // random
    let session = r.vec8()?;
    if session.len() > 32 {
        return Err("session id longer than 32 bytes");
    }
    let suites = r.vec16()?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("bad cipher suite list");
    }
    r.vec8()?; // compression methods
    if r.0.is_empty() {
        return Ok(None); // no extensions at all (SSL 3 style hello)
    }
    let mut exts = Reader(r.vec16()?);
    while !exts.0.is_empty() {
        let ty = exts.u16()?;
        let data = exts.vec16()?;
        if ty != EXT_SERVER_NAME {
            continue;
        }
        let mut list = Reader(Reader(data).vec16()?);
        while !list.0.is_empty() {
            let kind = list.u8()?;
            let name = list.vec16()?;
            if kind == NAME_TYPE_HOST {
                return normalise(name).map(Some).ok_or("server name is not a DNS name");
            }
        }
        return Ok(None);
    }
    Ok(None)
}

/// A server name as routes compare it: ASCII, lower case, no trailing dot, 1..=253 bytes.
fn normalise(name: &[u8]) -> Option<String> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > 253 || !name.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)) {
        return None;
    }
    Some(String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// Is `p` a server name a route can match: a DNS name, or `*.` and a DNS name (one label)?
pub fn valid_pattern(p: &str) -> bool {
    let name = p.strip_prefix("*.").unwrap_or(p);
    normalise(name.as_bytes()).is_some_and(|n| !n.contains('*') && n.split('.').all(|l| !l.is_empty() && l.len() <= 63))
}

/// The routes of one shared listening socket: exact names, `*.suffix` wildcards (one label),
/// and the fallback for everything else. Values are whatever the caller routes to.
#[derive(Debug)]
pub struct Table<T> {
    exact: HashMap<String, T>,
    /// Keyed by the suffix after `*.`.
    wildcard: HashMap<String, T>,
    pub fallback: Option<T>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { exact: HashMap::new(), wildcard: HashMap::new(), fallback: None }
    }
}

/// How a connection was routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a, T> {
    /// An `sni=` route matched the name.
    Named(&'a T),
    /// No route matched (or no name was sent): the fallback.
    Fallback(&'a T),
    /// No route matched and there is no fallback.
    Miss,
}

impl<T> Table<T> {
    /// Any `sni=` route at all (otherwise the socket needs no peeking).
    pub fn has_names(&self) -> bool {
        !self.exact.is_empty() || !self.wildcard.is_empty()
    }

    /// Add a route for `pattern` (`name` or `*.suffix`, compared case-insensitively); `None`
    /// is the fallback. Returns false when the pattern (or the fallback) is taken already.
    pub fn insert(&mut self, pattern: Option<&str>, v: T) -> bool {
        let Some(p) = pattern else {
            if self.fallback.is_some() {
                return false;
            }
            self.fallback = Some(v);
            return true;
        };
        let p = p.trim_end_matches('.').to_ascii_lowercase();
        let (map, key) = match p.strip_prefix("*.") {
            Some(suffix) => (&mut self.wildcard, suffix.to_string()),
            None => (&mut self.exact, p),
        };
        if map.contains_key(&key) {
            return false;
        }
        map.insert(key, v);
        true
    }

    /// Route a server name (already normalised by the parser): exact match, then the wildcard
    /// of its parent (`a.example.com` -> `*.example.com`; `a.b.example.com` does not match
    /// `*.example.com`), then the fallback.
    pub fn route(&self, name: Option<&str>) -> Route<'_, T> {
        let hit = name.and_then(|n| {
            self.exact.get(n).or_else(|| n.split_once('.').and_then(|(_, parent)| self.wildcard.get(parent)))
        });
        match (hit, &self.fallback) {
            (Some(v), _) => Route::Named(v),
            (None, Some(f)) => Route::Fallback(f),
            (None, None) => Route::Miss,
        }
    }

    /// Every route: (pattern, value), exact names first, then wildcards, in name order.
    pub fn routes(&self) -> Vec<(String, &T)> {
        let mut e: Vec<(String, &T)> = self.exact.iter().map(|(k, v)| (k.clone(), v)).collect();
        e.sort_by(|a, b| a.0.cmp(&b.0));
        let mut w: Vec<(String, &T)> = self.wildcard.iter().map(|(k, v)| (format!("*.{k}"), v)).collect();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        e.extend(w);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello handshake message (header included) naming `name`.
    fn hello(name: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one suite
        body.extend([1, 0]); // null compression
        let mut exts = Vec::new();
        exts.extend([0x00, 0x0b, 0, 2, 1, 0]); // ec_point_formats, before SNI
        if let Some(n) = name {
            let n = n.as_bytes();
            let mut list = vec![NAME_TYPE_HOST];
            list.extend((n.len() as u16).to_be_bytes());
            list.extend(n);
            let mut data = (list.len() as u16).to_be_bytes().to_vec();
            data.extend(list);
            exts.extend(EXT_SERVER_NAME.to_be_bytes());
            exts.extend((data.len() as u16).to_be_bytes());
            exts.extend(data);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut msg = vec![HANDSHAKE_CLIENT_HELLO, 0];
        msg.extend((body.len() as u16).to_be_bytes());
        msg.extend(body);
        msg
    }

    /// `msg` in TLS records of at most `chunk` bytes each.
    fn records(msg: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for c in msg.chunks(chunk) {
            out.extend([CONTENT_HANDSHAKE, 3, 1]);
            out.extend((c.len() as u16).to_be_bytes());
            out.extend(c);
        }
        out
    }

    #[test]
    fn name_from_one_record_and_from_every_prefix() {
        let bytes = records(&hello(Some("WWW.Example.com.")), 16384);
        for i in 0..bytes.len() {
            assert_eq!(parse_client_hello(&bytes[..i]), Hello::NeedMore, "prefix of {i} bytes");
        }
        assert_eq!(parse_client_hello(&bytes), Hello::Done(Some("www.example.com".into())));
        // Application data after the hello does not matter.
        let mut more = bytes.clone();
        more.extend([23, 3, 3, 0, 1, 0]);
        assert_eq!(parse_client_hello(&more), Hello::Done(Some("www.example.com".into())));
    }

    #[test]
    fn hello_split_over_one_byte_records() {
        let bytes = records(&hello(Some("a.example.com")), 1);
        for i in 0..bytes.len() {
            assert_eq!(parse_client_hello(&bytes[..i]), Hello::NeedMore, "prefix of {i} bytes");
        }
        assert_eq!(parse_client_hello(&bytes), Hello::Done(Some("a.example.com".into())));
        // Fed one byte at a time to one parser, as the forwarder does.
        let mut p = HelloParser::default();
        for i in 0..bytes.len() {
            assert_eq!(p.feed(&bytes[..i]), Hello::NeedMore, "prefix of {i} bytes");
        }
        assert_eq!(p.feed(&bytes), Hello::Done(Some("a.example.com".into())));
    }

    #[test]
    fn no_name_and_not_tls() {
        assert_eq!(parse_client_hello(&records(&hello(None), 100)), Hello::Done(None));
        assert!(matches!(parse_client_hello(b"GET / HTTP/1.1\r\n"), Hello::Invalid(_)));
        assert!(matches!(parse_client_hello(&[22, 9]), Hello::Invalid(_)));
        // A server hello (type 2) is not a client hello.
        let mut m = hello(Some("x.com"));
        m[0] = 2;
        assert!(matches!(parse_client_hello(&records(&m, 16384)), Hello::Invalid(_)));
        assert!(matches!(parse_client_hello(&records(&m, 3)[..8]), Hello::Invalid(_)));
    }

    #[test]
    fn bounds() {
        // A handshake header announcing 1 MiB is refused at once, not waited for.
        assert!(matches!(parse_client_hello(&[22, 3, 1, 0, 4, 1, 0x10, 0, 0]), Hello::Invalid(_)));
        // Truncated or lying inner lengths are refused, never read past.
        let good = hello(Some("example.com"));
        for cut in 4..good.len() {
            let mut m = good[..cut].to_vec();
            let len = (cut - 4) as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            let r = parse_client_hello(&records(&m, 16384));
            assert!(matches!(r, Hello::Invalid(_) | Hello::Done(None)), "cut at {cut}: {r:?}");
        }
        assert!(matches!(parse_client_hello(&vec![22u8; MAX_PEEK + 1]), Hello::Invalid(_)));
    }

    #[test]
    fn routes_exact_wildcard_fallback() {
        let mut t = Table::default();
        assert!(t.insert(Some("api.example.com"), "api"));
        assert!(t.insert(Some("*.Example.com"), "wild"));
        assert!(!t.insert(Some("*.example.com."), "again"));
        assert_eq!(t.route(Some("api.example.com")), Route::Named(&"api"));
        assert_eq!(t.route(Some("www.example.com")), Route::Named(&"wild"));
        assert_eq!(t.route(Some("a.b.example.com")), Route::Miss);
        assert_eq!(t.route(Some("example.com")), Route::Miss);
        assert_eq!(t.route(None), Route::Miss);
        assert!(t.insert(None, "default"));
        assert!(!t.insert(None, "second default"));
        assert_eq!(t.route(Some("other.org")), Route::Fallback(&"default"));
        assert_eq!(t.routes().iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["api.example.com", "*.example.com"]);
    }
}
