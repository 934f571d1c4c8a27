//! SNI routing with real TLS: `openssl s_server` backends with certificates made by
//! `openssl req` in the test, `curl --resolve` and `openssl s_client -servername` as clients,
//! several forwards sharing one listening socket by `sni=` (exact, `*.` wildcard, fallback).
//! Also: a ClientHello split into 1-byte TCP segments (and into 1-byte TLS records) still
//! routes and reaches the target byte for byte; a non-TLS client is closed within the peek
//! timeout; PROXY protocol and limits on SNI routes; the TLS session handed to the kernel's
//! sockmap after the ClientHello was routed and replayed.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fwc_artifacts::Listener;
use fwc_forwarder::Forwarder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A child process killed (and reaped) on drop, also when the test panics.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTPS backend: `openssl s_server -WWW` in its own directory, serving `id.txt` = `name`,
/// with a self-signed certificate for `cn` made by `openssl req`.
struct TlsBackend {
    addr: SocketAddr,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn tls_backend(name: &str, cn: &str) -> TlsBackend {
    let dir = tempfile::tempdir().unwrap();
    let ok = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-keyout", "key.pem", "-out", "cert.pem", "-subj", &format!("/CN={cn}")])
        .args(["-addext", &format!("subjectAltName=DNS:{cn}")])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl req runs");
    assert!(ok.success(), "openssl req");
    std::fs::write(dir.path().join("id.txt"), name).unwrap();
    for _ in 0..5 {
        let port = free_port();
        let child = Command::new("openssl")
            .args(["s_server", "-quiet", "-WWW", "-cert", "cert.pem", "-key", "key.pem"])
            .args(["-accept", &format!("127.0.0.1:{port}")])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server runs");
        let mut p = Proc(child);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if std::net::TcpStream::connect(addr).is_ok() {
                return TlsBackend { addr, _proc: p, _dir: dir };
            }
            if p.0.try_wait().unwrap().is_some() {
                break; // the port was taken meanwhile: try another
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("openssl s_server did not start");
}

fn sni(mut l: Listener, name: Option<&str>) -> Listener {
    l.sni = name.map(str::to_string);
    l
}

/// `curl --resolve NAME:PORT:127.0.0.1 https://NAME:PORT/id.txt` (NAME may be an IP: no SNI).
async fn curl(name: &str, fwd: SocketAddr) -> Option<String> {
    let port = fwd.port();
    let url = format!("https://{name}:{port}/id.txt");
    let out = tokio::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", "--resolve", &format!("{name}:{port}:127.0.0.1"), &url])
        .output()
        .await
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// `openssl s_client -servername NAME -connect ADDR`, sending an HTTP request for id.txt.
async fn s_client(name: &str, connect: SocketAddr) -> String {
    let mut child = tokio::process::Command::new("openssl")
        .args(["s_client", "-quiet", "-servername", name, "-connect", &connect.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"GET /id.txt HTTP/1.0\r\n\r\n").await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await.expect("s_client finishes");
    drop(stdin);
    String::from_utf8_lossy(&out.unwrap().stdout).to_string()
}

async fn shared(f: &Forwarder, rule: &str) -> SocketAddr {
    f.local_addrs(rule).await[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_name_wildcard_and_fallback_with_curl_and_s_client() {
    let api = tls_backend("api", "api.example.com");
    let wild = tls_backend("wild", "*.example.com");
    let other = tls_backend("fallback", "default.test");
    let f = Forwarder::new(opts());
    f.reload(config(vec![
        sni(tcp("web-api", &[api.addr]), Some("api.example.com")),
        sni(tcp("web-wild", &[wild.addr]), Some("*.example.com")),
        tcp("web-default", &[other.addr]),
    ]))
    .await
    .unwrap();
    let addr = shared(&f, "web-api").await;
    assert_eq!(shared(&f, "web-wild").await, addr, "one socket for all three forwards");

    assert_eq!(curl("api.example.com", addr).await.as_deref(), Some("api"));
    assert_eq!(curl("API.Example.COM", addr).await.as_deref(), Some("api"), "names compare case-insensitively");
    assert_eq!(curl("www.example.com", addr).await.as_deref(), Some("wild"));
    assert_eq!(curl("a.b.example.com", addr).await.as_deref(), Some("fallback"), "*. matches one label");
    assert_eq!(curl("example.com", addr).await.as_deref(), Some("fallback"));
    assert_eq!(curl("127.0.0.1", addr).await.as_deref(), Some("fallback"), "no SNI at all");
    assert!(s_client("api.example.com", addr).await.contains("api"));
    assert!(s_client("shop.example.com", addr).await.contains("wild"));

    let st = f.status().await;
    let s = &st.sni_listeners[0];
    assert_eq!(s.routes, vec![("api.example.com".into(), "web-api".into()), ("*.example.com".into(), "web-wild".into())]);
    assert_eq!(s.fallback.as_deref(), Some("web-default"));
    assert_eq!((s.routed, s.to_fallback, s.misses, s.parse_failures), (5, 3, 0, 0));
    assert_eq!(f.stats("web-api").unwrap().conns_total, 3);
    assert_eq!(f.stats("web-wild").unwrap().conns_total, 2);
    assert_eq!(f.stats("web-default").unwrap().conns_total, 3);
    assert!(f.stats("web-api").unwrap().bytes_down > 0);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_tls_session_runs_in_the_kernels_sockmap() {
    if !fwc_testkit::privileged("a_routed_tls_session_runs_in_the_kernels_sockmap") {
        return;
    }
    let api = tls_backend("api", "api.example.com");
    let other = tls_backend("fallback", "default.test");
    let f = Forwarder::new(fwc_forwarder::Options { sockmap: true, ..opts() });
    f.reload(config(vec![sni(tcp("web-api", &[api.addr]), Some("api.example.com")), tcp("web-default", &[other.addr])]))
        .await
        .unwrap();
    assert!(f.status().await.sockmap, "the sockmap program loaded");
    let addr = shared(&f, "web-api").await;
    // The hello is read and replayed in userspace, the rest of the handshake and the HTTP
    // exchange move inside the kernel.
    assert_eq!(curl("api.example.com", addr).await.as_deref(), Some("api"));
    assert_eq!(curl("127.0.0.1", addr).await.as_deref(), Some("fallback"));
    assert!(s_client("api.example.com", addr).await.contains("api"));
    assert_eq!(f.sockmap_counts(), Some((3, 0)), "(linked, fallbacks)");
    assert_eq!(f.pipes_created(), 0, "no byte went through a splice pipe");
    assert!(eventually(Duration::from_secs(5), || f.stats("web-api").unwrap().conns_active == 0).await);
    let st = f.stats("web-api").unwrap();
    assert_eq!(st.conns_total, 2);
    assert!(st.bytes_up > 0 && st.bytes_down > 0, "{st:?}");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fallback_unmatched_names_are_closed_and_counted() {
    let api = tls_backend("api", "api.example.com");
    let f = Forwarder::new(opts());
    f.reload(config(vec![sni(tcp("only-api", &[api.addr]), Some("api.example.com"))])).await.unwrap();
    let addr = shared(&f, "only-api").await;
    assert_eq!(curl("api.example.com", addr).await.as_deref(), Some("api"));
    assert_eq!(curl("www.example.com", addr).await, None);
    assert_eq!(curl("127.0.0.1", addr).await, None);
    let s = f.status().await.sni_listeners[0].clone();
    assert_eq!((s.routed, s.misses, s.fallback), (1, 2, None));
    assert_eq!(f.stats("only-api").unwrap().conns_total, 1, "misses are not connections of the route");
    f.shutdown().await;
}

/// A real ClientHello for `name`: what `openssl s_client -servername name` sends first.
async fn captured_hello(name: &str) -> Vec<u8> {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let client = tokio::process::Command::new("openssl")
        .args(["s_client", "-servername", name, "-connect", &addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (mut s, _) = l.accept().await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    // The hello is one flight: read until the record layer says it is complete.
    while !matches!(fwc_forwarder::sni::parse_client_hello(&got), fwc_forwarder::sni::Hello::Done(_)) {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "s_client closed before its hello was complete");
        got.extend_from_slice(&buf[..n]);
    }
    drop(client);
    got
}

/// Re-frame a hello (one record) into TLS records of one byte of handshake each.
fn one_byte_records(hello: &[u8]) -> Vec<u8> {
    let len = usize::from(u16::from_be_bytes([hello[3], hello[4]]));
    let msg = &hello[5..5 + len];
    msg.iter().flat_map(|b| [22, 3, 1, 0, 1, *b]).collect()
}

/// Send `bytes` one byte per TCP segment (NODELAY, a pause between writes), then EOF.
async fn trickle(to: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.set_nodelay(true).unwrap();
    for b in bytes {
        s.write_all(&[*b]).await.unwrap();
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_in_one_byte_segments_and_records_routes_and_is_replayed_exactly() {
    let (tx_a, mut rx_a) = tokio::sync::mpsc::unbounded_channel();
    let (tx_b, mut rx_b) = tokio::sync::mpsc::unbounded_channel();
    let a = capture_backend(tx_a).await;
    let b = capture_backend(tx_b).await;
    let mut o = opts();
    o.sni_timeout = Duration::from_secs(20);
    let f = Forwarder::new(o);
    f.reload(config(vec![sni(tcp("a", &[a]), Some("a.example.com")), sni(tcp("b", &[b]), Some("*.example.net"))]))
        .await
        .unwrap();
    let addr = shared(&f, "a").await;

    let hello = captured_hello("a.example.com").await;
    assert_eq!(hello[0], 22, "a TLS handshake record");
    let mut sent = hello.clone();
    sent.extend_from_slice(b"after the hello");
    trickle(addr, &sent).await;
    let got = tokio::time::timeout(Duration::from_secs(10), rx_a.recv()).await.unwrap().unwrap();
    assert_eq!(got, sent, "the peeked hello and what followed reach the target byte for byte");

    let framed = one_byte_records(&captured_hello("x.example.net").await);
    trickle(addr, &framed).await;
    let got = tokio::time::timeout(Duration::from_secs(10), rx_b.recv()).await.unwrap().unwrap();
    assert_eq!(got, framed, "a hello in 1-byte TLS records, sent in 1-byte segments");
    assert!(rx_a.try_recv().is_err());
    let s = &f.status().await.sni_listeners[0];
    assert_eq!((s.routed, s.parse_failures, s.timeouts), (2, 0, 0));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_tls_client_is_closed_within_the_peek_timeout() {
    let be = echo_backend().await;
    let mut o = opts();
    o.sni_timeout = Duration::from_millis(400);
    let f = Forwarder::new(o);
    f.reload(config(vec![sni(tcp("tls", &[be]), Some("a.example.com")), tcp("fallback", &[be])])).await.unwrap();
    let addr = shared(&f, "tls").await;

    // Silent client (waits for a banner): closed at the timeout, even with a fallback.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("closed, not left open");
    let waited = t0.elapsed();
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert!(waited >= Duration::from_millis(350) && waited < Duration::from_millis(2000), "closed after {waited:?}");

    // Plain HTTP: not a ClientHello, closed at once.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap();
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert!(t0.elapsed() < Duration::from_millis(350), "closed at once, not at the timeout");

    let st = &f.status().await.sni_listeners[0];
    assert_eq!((st.timeouts, st.parse_failures, st.routed, st.to_fallback), (1, 1, 0, 0));
    assert_eq!(f.stats("fallback").unwrap().conns_total, 0);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_and_limits_work_on_sni_routes() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cap = capture_backend(tx).await;
    let hold = backend(|mut s| async move {
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b).await;
    })
    .await;
    let mut pp = sni(tcp("pp", &[cap]), Some("pp.example.com"));
    pp.proxy_protocol = Some(1);
    let mut limited = sni(tcp("limited", &[hold]), Some("one.example.com"));
    limited.max_conns = Some(1);
    let mut denied = sni(tcp("denied", &[hold]), Some("no.example.com"));
    denied.allow_from = vec!["192.0.2.0/24".into()];
    let f = Forwarder::new(opts());
    f.reload(config(vec![pp, limited, denied])).await.unwrap();
    let addr = shared(&f, "pp").await;

    // PROXY header first, then the ClientHello exactly.
    let hello = captured_hello("pp.example.com").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let client_port = s.local_addr().unwrap().port();
    s.write_all(&hello).await.unwrap();
    s.shutdown().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    let header = format!("PROXY TCP4 127.0.0.1 127.0.0.1 {client_port} {}\r\n", addr.port());
    assert_eq!(&got[..header.len()], header.as_bytes());
    assert_eq!(&got[header.len()..], &hello[..]);

    // max-conns=1 on one route: the second connection to that route is refused.
    let one = captured_hello("one.example.com").await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(&one).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || f.stats("limited").unwrap().conns_active == 1).await);
    let mut second = TcpStream::connect(addr).await.unwrap();
    second.write_all(&one).await.unwrap();
    let mut buf = [0u8; 8];
    let r = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf)).await.unwrap();
    assert!(matches!(r, Ok(0) | Err(_)));
    assert_eq!(f.stats("limited").unwrap().conns_refused, 1);

    // allow-from on a route: 127.0.0.1 is not in 192.0.2.0/24.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&captured_hello("no.example.com").await).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap();
    assert!(matches!(r, Ok(0) | Err(_)));
    assert_eq!(f.stats("denied").unwrap().conns_refused, 1);
    assert_eq!(f.stats("pp").unwrap().conns_refused, 0);
    drop(first);
    f.shutdown().await;
}

#[tokio::test]
async fn a_reload_refuses_two_fallbacks_or_a_name_twice_on_one_socket() {
    let be: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let f = Forwarder::new(opts());
    let err = f.reload(config(vec![tcp("a", &[be]), tcp("b", &[be])])).await.unwrap_err().to_string();
    assert!(err.contains("appears twice") && err.contains("second fallback"), "{err}");
    let err = f
        .reload(config(vec![sni(tcp("a", &[be]), Some("x.example.com")), sni(tcp("b", &[be]), Some("X.example.com"))]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("appears twice"), "{err}");
    let mut u = sni(listener("u", fwc_artifacts::ListenerProto::Udp, "127.0.0.1", 0, &[be]), Some("x.example.com"));
    u.idle_timeout_ms = 1000;
    let err = f.reload(config(vec![u])).await.unwrap_err().to_string();
    assert!(err.contains("TCP only"), "{err}");
}
