//! Cheap polls at fleet scale: the rule repository's refs read from a static file that any web
//! server or CDN serves, so that an idle poll is one small GET and the agent runs a git fetch
//! only when a ref it follows moved.
//!
//! The file is git's own `info/refs` (one `<oid>\t<refname>` line per ref), which `git
//! update-server-info` writes and which the stock `post-update` hook keeps current on every
//! push. A smart-HTTP poll costs the server a `git http-backend` process (and an `upload-pack`)
//! for the ref advertisement alone; a static file costs it a `sendfile`, or a `304 Not
//! Modified` when the agent sends back the file's `ETag`.
//!
//! The file is only a hint: what the agent applies still comes from the git fetch and is
//! verified there (signatures, rewinds, the rollout state's succession). A stale or withheld
//! file can only delay a change, and by at most `full_every` polls: every `full_every`-th poll
//! is a full fetch whatever the file says, and a full fetch that finds a ref the file said was
//! unchanged is reported (the file is stale: the hook is missing, or a cache serves an old copy).
//!
//! [`decide`] is pure (the table tests below); [`RefsPoll::get`] is the HTTP(S) edge.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often a full fetch happens whatever the refs file says, by default (in polls).
pub const DEFAULT_FULL_EVERY: u32 = 10;

/// The refs of `info/refs`: refname -> commit id (hex). Peeled tag lines (`^{}`) are skipped.
pub fn parse_info_refs(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut refs = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let (oid, name) = line.split_once('\t').ok_or_else(|| format!("line {}: want `<commit id>\\t<ref name>`, found {line:?}", i + 1))?;
        if !(oid.len() == 40 || oid.len() == 64) || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("line {}: {oid:?} is not a commit id", i + 1));
        }
        if !name.starts_with("refs/") {
            return Err(format!("line {}: {name:?} is not a ref name", i + 1));
        }
        if name.ends_with("^{}") {
            continue;
        }
        refs.insert(name.to_string(), oid.to_ascii_lowercase());
    }
    Ok(refs)
}

/// What the agent knows before it polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollFacts<'a> {
    /// The refs the file lists (None: the GET failed or the file could not be read).
    pub refs: Option<&'a BTreeMap<String, String>>,
    /// The refs the agent follows (`refs/heads/<branch>`, the rollout ref) with the commit its
    /// mirror holds for each (None: not fetched yet / absent).
    pub followed: &'a [(&'a str, Option<String>)],
    /// Polls since the last full fetch.
    pub polls_since_full: u32,
    pub full_every: u32,
}

/// Whether this poll fetches with git, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollStep {
    /// Every followed ref is where the mirror has it: no git request at all.
    Skip,
    Fetch(FetchReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchReason {
    /// A followed ref moved, appeared or disappeared in the file.
    Moved(String),
    /// The mirror has never fetched (or lost a ref): the file cannot stand for it.
    NothingFetched,
    /// The refs file could not be read: fall back to git.
    NoFile,
    /// The periodic full fetch that bounds a stale file's delay.
    Periodic,
}

/// The decision of one poll.
pub fn decide(f: &PollFacts) -> PollStep {
    if f.polls_since_full + 1 >= f.full_every.max(1) {
        return PollStep::Fetch(FetchReason::Periodic);
    }
    let Some(refs) = f.refs else { return PollStep::Fetch(FetchReason::NoFile) };
    // The branch must have been fetched once: the file only says "nothing moved since".
    match f.followed.first() {
        Some((_, Some(_))) => {}
        _ => return PollStep::Fetch(FetchReason::NothingFetched),
    }
    for (name, have) in f.followed {
        if refs.get(*name) != have.as_ref() {
            return PollStep::Fetch(FetchReason::Moved((*name).to_string()));
        }
    }
    PollStep::Skip
}

/// The refs file's URL, and what the last answer was (for `If-None-Match`).
#[derive(Debug)]
pub struct RefsPoll {
    pub url: String,
    pub full_every: u32,
    polls_since_full: Cell<u32>,
    last: RefCell<Option<(Option<String>, BTreeMap<String, String>)>>,
    /// A full fetch found a ref moved that the file said had not: the file is stale.
    stale_seen: Cell<bool>,
}

/// The answer to one GET of the refs file.
pub enum Got {
    Refs(BTreeMap<String, String>),
    Failed(String),
}

impl RefsPoll {
    /// `url`: http:// or https://. Checked here so that a typo fails at start, not at the
    /// first poll.
    pub fn new(url: &str, full_every: u32) -> Result<RefsPoll, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--refs-url {url}: want an http:// or https:// URL of the repository's info/refs"));
        }
        let uri: hyper::Uri = url.parse().map_err(|e| format!("--refs-url {url}: {e}"))?;
        if uri.host().is_none() {
            return Err(format!("--refs-url {url}: no host"));
        }
        if full_every == 0 {
            return Err("--refs-full-every must be at least 1".to_string());
        }
        Ok(RefsPoll {
            url: url.to_string(),
            full_every,
            polls_since_full: Cell::new(0),
            last: RefCell::new(None),
            stale_seen: Cell::new(false),
        })
    }

    /// The default refs URL of a smart-HTTP repository URL: `<repo>/info/refs` (None for
    /// other transports).
    pub fn default_url(repo_url: &str) -> Option<String> {
        (repo_url.starts_with("http://") || repo_url.starts_with("https://")).then(|| format!("{}/info/refs", repo_url.trim_end_matches('/')))
    }

    /// GET the file (conditional on the last ETag); a 304 reuses the last refs.
    pub fn get(&self, timeout: Duration) -> Got {
        let etag = self.last.borrow().as_ref().and_then(|(e, _)| e.clone());
        match http_get(&self.url, etag.as_deref(), timeout) {
            Ok((304, _, _)) => match self.last.borrow().as_ref() {
                Some((_, refs)) => Got::Refs(refs.clone()),
                None => Got::Failed("304 Not Modified without an earlier answer".to_string()),
            },
            Ok((200, etag, body)) => match std::str::from_utf8(&body).map_err(|e| e.to_string()).and_then(parse_info_refs) {
                Ok(refs) => {
                    *self.last.borrow_mut() = Some((etag, refs.clone()));
                    Got::Refs(refs)
                }
                Err(e) => Got::Failed(format!("{}: {e}", self.url)),
            },
            Ok((status, _, _)) => Got::Failed(format!("{}: HTTP {status}", self.url)),
            Err(e) => Got::Failed(format!("{}: {e}", self.url)),
        }
    }

    pub fn polls_since_full(&self) -> u32 {
        self.polls_since_full.get()
    }

    /// Book one poll: `full` when it fetched with git.
    pub fn polled(&self, full: bool) {
        self.polls_since_full.set(if full { 0 } else { self.polls_since_full.get() + 1 });
    }

    /// A fetch found the followed refs at `found`; if the file's last answer said otherwise
    /// and the fetch was not caused by the file, the file is stale. Returns true the first
    /// time (the caller warns once).
    pub fn check_stale(&self, reason: &FetchReason, found: &[(&str, Option<String>)]) -> bool {
        if !matches!(reason, FetchReason::Periodic) {
            return false;
        }
        let last = self.last.borrow();
        let Some((_, refs)) = last.as_ref() else { return false };
        let stale = found.iter().any(|(name, have)| refs.get(*name) != have.as_ref());
        stale && !self.stale_seen.replace(true)
    }
}

/// One GET with hyper (http or https via OpenSSL, which libgit2 already links for https
/// remotes): (status, ETag, body). 1 MiB at most.
fn http_get(url: &str, etag: Option<&str>, timeout: Duration) -> std::io::Result<(u16, Option<String>, Vec<u8>)> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = url.parse().map_err(std::io::Error::other)?;
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
    let tls = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_else(|| host.clone());
    let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".to_string());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        let mut req = hyper::Request::get(path).header(hyper::header::HOST, authority).header(hyper::header::USER_AGENT, "fwc-agent");
        if let Some(e) = etag {
            req = req.header(hyper::header::IF_NONE_MATCH, e);
        }
        // The credentials of https repositories (docs/operations.md, "Git access").
        if let (Ok(user), Ok(pass)) = (std::env::var("FWC_GIT_USERNAME"), std::env::var("FWC_GIT_PASSWORD")) {
            use base64::Engine;
            req = req.header(hyper::header::AUTHORIZATION, format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))));
        }
        let req = req.body(http_body_util::Empty::<bytes::Bytes>::new()).map_err(std::io::Error::other)?;
        async fn send<S>(io: S, req: hyper::Request<http_body_util::Empty<bytes::Bytes>>) -> std::io::Result<(u16, Option<String>, Vec<u8>)>
        where
            S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await.map_err(std::io::Error::other)?;
            let conn = tokio::spawn(conn);
            let resp = sender.send_request(req).await.map_err(std::io::Error::other)?;
            let status = resp.status().as_u16();
            let etag = resp.headers().get(hyper::header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_string);
            let body = http_body_util::Limited::new(resp.into_body(), 1 << 20).collect().await.map_err(std::io::Error::other)?.to_bytes();
            conn.abort();
            Ok((status, etag, body.to_vec()))
        }
        if tls {
            let connector = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).map_err(std::io::Error::other)?.build();
            let ssl = connector.configure().map_err(std::io::Error::other)?.into_ssl(&host).map_err(std::io::Error::other)?;
            let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(std::io::Error::other)?;
            std::pin::Pin::new(&mut stream).connect().await.map_err(|e| std::io::Error::other(format!("TLS: {e}")))?;
            send(stream, req).await
        } else {
            send(tcp, req).await
        }
    };
    rt.block_on(async { tokio::time::timeout(timeout, exchange).await.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {timeout:?}")))? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn refs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, o)| (n.to_string(), o.to_string())).collect()
    }

    #[test]
    fn info_refs_lines_parse_and_bad_ones_say_where() {
        let text = format!("{A}\trefs/heads/main\n{B}\trefs/heads/fwc-rollout\n{A}\trefs/tags/v1\n{B}\trefs/tags/v1^{{}}\n");
        let r = parse_info_refs(&text).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r["refs/heads/main"], A);
        assert!(parse_info_refs("").unwrap().is_empty());
        assert!(parse_info_refs(&format!("{A} refs/heads/main\n")).unwrap_err().starts_with("line 1:"));
        assert!(parse_info_refs("xyz\trefs/heads/main\n").unwrap_err().contains("not a commit id"));
        assert!(parse_info_refs(&format!("{A}\tmain\n")).unwrap_err().contains("not a ref name"));
    }

    #[test]
    fn poll_decisions() {
        let main = "refs/heads/main";
        let ro = "refs/heads/fwc-rollout";
        let both = refs(&[(main, A), (ro, B)]);
        let only_main = refs(&[(main, A)]);
        let moved = refs(&[(main, B), (ro, B)]);
        let have = [(main, Some(A.to_string())), (ro, Some(B.to_string()))];
        let have_no_ro = [(main, Some(A.to_string())), (ro, None)];
        let never = [(main, None), (ro, None)];
        let f = |refs, followed, polls| decide(&PollFacts { refs, followed, polls_since_full: polls, full_every: 10 });
        // (what the file says, what the mirror has, polls since full) -> step
        assert_eq!(f(Some(&both), &have, 0), PollStep::Skip);
        assert_eq!(f(Some(&both), &have, 8), PollStep::Skip);
        assert_eq!(f(Some(&both), &have, 9), PollStep::Fetch(FetchReason::Periodic));
        assert_eq!(f(Some(&moved), &have, 0), PollStep::Fetch(FetchReason::Moved(main.into())));
        // the rollout state written, deleted, or the mirror never fetched
        assert_eq!(f(Some(&both), &have_no_ro, 0), PollStep::Fetch(FetchReason::Moved(ro.into())));
        assert_eq!(f(Some(&only_main), &have, 0), PollStep::Fetch(FetchReason::Moved(ro.into())));
        assert_eq!(f(Some(&only_main), &have_no_ro, 0), PollStep::Skip);
        assert_eq!(f(Some(&both), &never, 0), PollStep::Fetch(FetchReason::NothingFetched));
        assert_eq!(f(None, &have, 0), PollStep::Fetch(FetchReason::NoFile));
        // full_every=1: every poll is a full fetch
        assert_eq!(decide(&PollFacts { refs: Some(&both), followed: &have, polls_since_full: 0, full_every: 1 }), PollStep::Fetch(FetchReason::Periodic));
    }

    #[test]
    fn a_periodic_fetch_that_finds_a_moved_ref_reports_the_file_stale_once() {
        let p = RefsPoll::new("http://127.0.0.1:1/rules.git/info/refs", 10).unwrap();
        *p.last.borrow_mut() = Some((None, refs(&[("refs/heads/main", A)])));
        let found = [("refs/heads/main", Some(B.to_string()))];
        assert!(!p.check_stale(&FetchReason::Moved("refs/heads/main".into()), &found));
        assert!(p.check_stale(&FetchReason::Periodic, &found));
        assert!(!p.check_stale(&FetchReason::Periodic, &found), "said once");
        let same = [("refs/heads/main", Some(A.to_string()))];
        let q = RefsPoll::new("http://127.0.0.1:1/x", 10).unwrap();
        *q.last.borrow_mut() = Some((None, refs(&[("refs/heads/main", A)])));
        assert!(!q.check_stale(&FetchReason::Periodic, &same));
    }

    #[test]
    fn urls_are_checked_at_start() {
        assert!(RefsPoll::new("file:///srv/rules.git/info/refs", 10).unwrap_err().contains("http"));
        assert!(RefsPoll::new("http://h/x", 0).unwrap_err().contains("at least 1"));
        assert_eq!(RefsPoll::default_url("https://git.example/rules.git/").as_deref(), Some("https://git.example/rules.git/info/refs"));
        assert_eq!(RefsPoll::default_url("ssh://git@h/rules.git"), None);
    }
}
