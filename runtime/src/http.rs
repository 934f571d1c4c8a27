//! The agent's small HTTP server (`/metrics`, `/healthz`, `/readyz`, `POST /hooks/git`) and a
//! blocking HTTP client (the tests', and the rollout controller's for Prometheus).
//!
//! hyper 1 (HTTP/1.1) on a single-threaded tokio runtime of its own thread. Every connection
//! must send a complete request head within 10 s (also between keep-alive requests) and lives
//! at most 60 s; heads are limited to 16 KiB and bodies to 1 MiB. There is no small connection
//! cap an idle client could fill: the only cap ([`MAX_CONNS`]) guards the descriptor limit,
//! which the server raises to its hard limit. TLS is out of scope: put a reverse proxy in
//! front if the webhook must be reachable from outside.


use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{negotiate, Health, Metrics, WebhookSecret};

/// Largest request head (request line + headers) read before the connection is closed.
const MAX_HEADER: usize = 16 * 1024;
/// Largest webhook body.
const MAX_BODY: usize = 1024 * 1024;
/// A client must send a complete request head within this time (also between requests on a
/// kept-alive connection), or the connection is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest life of one connection, whatever it does (slow bodies, endless keep-alive).
const CONN_LIFETIME: Duration = Duration::from_secs(60);
/// Connections served at once. Only a guard against running out of file descriptors: idle
/// connections cost a few KiB and are closed after [`HEADER_READ_TIMEOUT`], so an idle client
/// cannot starve the probes (the agent raises its descriptor limit to fit).
pub const MAX_CONNS: usize = 16 * 1024;

/// Everything the server needs.
#[derive(Clone)]
pub struct ServerState {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    /// None = the webhook is disabled (every POST is answered 404 and counted `disabled`).
    pub webhook: Option<WebhookSecret>,
    /// Replay protection of authentic webhook requests (None: every authentic one is accepted).
    pub deliveries: Option<Arc<crate::metrics::replay::DeliveryGuard>>,
    /// Called for every authentic webhook request: wakes the reconcile loop.
    pub on_push: Arc<dyn Fn() + Send + Sync>,
}

/// A running server; stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Raise the soft limit of open files to the hard limit (the listener's connections count
/// against it). Best effort.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Bind `addr` (port 0 = any) and serve HTTP/1.1 with hyper on a thread of its own (a
/// single-threaded tokio runtime), so a busy reconcile loop never delays a scrape or a probe.
pub fn serve(addr: SocketAddr, state: ServerState) -> std::io::Result<Server> {
    raise_nofile_limit();
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("fwc-http".into()).spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNS));
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEADER.max(8192));
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut rx => break,
                    acc = listener.accept() => match acc {
                        Ok(a) => a,
                        Err(e) => {
                            // EMFILE and friends: back off instead of spinning.
                            tracing::warn!("metrics listener: accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else { continue };
                let st = state.clone();
                let conn = http.serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, std::convert::Infallible>(respond(&st, req).await) }
                    }),
                );
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CONN_LIFETIME, conn).await;
                    drop(permit);
                });
            }
        });
    })?;
    Ok(Server { addr: local, shutdown: Some(tx), thread: Some(thread) })
}

type Response = hyper::Response<http_body_util::Full<bytes::Bytes>>;

fn reply(status: u16, ctype: &str, body: impl Into<bytes::Bytes>) -> Response {
    hyper::Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, ctype)
        .body(http_body_util::Full::new(body.into()))
        .expect("static response parts are valid")
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Read the body (at most [`MAX_BODY`]) and answer.
async fn respond(st: &ServerState, req: hyper::Request<hyper::body::Incoming>) -> Response {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    if parts.headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok()).is_some_and(|n| n > MAX_BODY) {
        return reply(413, TEXT, "too large\n");
    }
    let body = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return reply(413, TEXT, "too large\n"),
        Err(_) => return reply(400, TEXT, "could not read the body\n"),
    };
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let (status, ctype, text) = route(st, parts.method.as_str(), parts.uri.path(), parts.uri.query(), &headers, &body);
    reply(status, ctype, text)
}

/// The routes, without I/O: (status, content type, body).
fn route(st: &ServerState, method: &str, path: &str, query: Option<&str>, headers: &[(String, String)], body: &[u8]) -> (u16, &'static str, String) {
    match (method, path) {
        ("GET", "/metrics") => {
            let accept = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("accept")).map(|(_, v)| v.as_str());
            let format = negotiate(accept);
            (200, format.content_type(), st.metrics.encode_as(format))
        }
        ("GET", "/healthz") => {
            if st.health.alive() {
                (200, TEXT, "ok\n".into())
            } else {
                (503, TEXT, "reconcile loop stalled\n".into())
            }
        }
        ("GET", "/readyz") => {
            let status = st.health.status.lock().unwrap().clone();
            // `?strict=1`: degraded is not ready (a DaemonSet's rolling upgrade gates on it).
            let strict = query.is_some_and(|q| q.split('&').any(|kv| matches!(kv, "strict" | "strict=1" | "strict=true")));
            let degraded = st.health.degraded.load(Ordering::Relaxed);
            if strict && degraded {
                (503, TEXT, format!("not ready (strict): degraded: {status}\n"))
            } else if st.health.ready.load(Ordering::Relaxed) {
                let d = if st.health.degraded.load(Ordering::Relaxed) { "degraded: " } else { "" };
                (200, TEXT, format!("ready {d}{status}\n"))
            } else {
                (503, TEXT, format!("not ready: {status}\n"))
            }
        }
        ("POST", "/hooks/git") => {
            let count = |r: &str| Metrics::inc(&st.metrics.webhook_requests_total, r);
            match &st.webhook {
                None => {
                    count("disabled");
                    (404, TEXT, "webhook disabled (start the agent with --webhook-secret-file)\n".into())
                }
                Some(secret) if secret.check(headers, body) => {
                    match st.deliveries.as_ref().map(|g| g.admit(headers, body)).unwrap_or(Ok(())) {
                        Ok(()) => {
                            count("accepted");
                            (st.on_push)();
                            (202, TEXT, "fetch scheduled\n".into())
                        }
                        Err(r) => {
                            count(match r {
                                crate::metrics::replay::Refusal::Replayed => "replayed",
                                crate::metrics::replay::Refusal::Stale(_) => "stale",
                            });
                            tracing::warn!("webhook refused: {r}");
                            (409, TEXT, format!("{r}\n"))
                        }
                    }
                }
                Some(_) => {
                    count("unauthorized");
                    (401, TEXT, "missing or wrong signature\n".into())
                }
            }
        }
        (_, "/metrics" | "/healthz" | "/readyz" | "/hooks/git") => (405, TEXT, "method not allowed\n".into()),
        _ => (404, TEXT, "not found: /metrics /healthz /readyz POST /hooks/git\n".into()),
    }
}

/// One blocking HTTP/1.1 request (the tests' client for this endpoint): hyper's client on a
/// current-thread tokio runtime of its own, so chunked bodies, keep-alive and header parsing
/// are hyper's, not hand-written. 5 s to connect, 10 s for the answer. Returns (status, body).
/// Not for use inside a tokio runtime (it blocks).
pub fn http_request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> std::io::Result<(u16, String)> {
    use http_body_util::BodyExt;
    let timed_out = |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let stream = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await.map_err(|_| timed_out("connect"))??;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(std::io::Error::other)?;
        let conn = tokio::spawn(conn);
        let mut req = hyper::Request::builder().method(method).uri(path).header(hyper::header::HOST, addr.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(body))).map_err(std::io::Error::other)?;
        let exchange = async {
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, String::from_utf8_lossy(&body).into_owned()))
        };
        let out = tokio::time::timeout(Duration::from_secs(10), exchange).await.map_err(|_| timed_out("request"))?.map_err(std::io::Error::other);
        conn.abort();
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{fwc_signature, github_signature};
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn server_routes() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(Duration::from_secs(60)));
        let pushes = Arc::new(AtomicUsize::new(0));
        let p = pushes.clone();
        let srv = serve(
            "127.0.0.1:0".parse().unwrap(),
            ServerState {
                metrics: metrics.clone(),
                health: health.clone(),
                webhook: Some(WebhookSecret::new(b"k")),
                deliveries: Some(Arc::new(crate::metrics::replay::DeliveryGuard::in_memory())),
                on_push: Arc::new(move || {
                    p.fetch_add(1, Ordering::SeqCst);
                }),
            },
        )
        .unwrap();
        let a = srv.addr;
        health.tick();
        assert_eq!(http_request(a, "GET", "/healthz", &[], b"").unwrap().0, 200);
        assert_eq!(http_request(a, "GET", "/readyz", &[], b"").unwrap().0, 503);
        health.ready.store(true, Ordering::SeqCst);
        assert_eq!(http_request(a, "GET", "/readyz", &[], b"").unwrap().0, 200);
        assert_eq!(http_request(a, "GET", "/readyz?strict=1", &[], b"").unwrap().0, 200);
        // Strict readiness: degraded is not ready (plain /readyz still is: it serves a known state).
        health.degraded.store(true, Ordering::SeqCst);
        assert_eq!(http_request(a, "GET", "/readyz", &[], b"").unwrap().0, 200);
        let (code, text) = http_request(a, "GET", "/readyz?strict=1", &[], b"").unwrap();
        assert_eq!((code, text.starts_with("not ready (strict): degraded")), (503, true), "{text}");
        health.degraded.store(false, Ordering::SeqCst);
        let body = b"{}";
        let sig = github_signature(b"k", body);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Hub-Signature-256", &sig)], body).unwrap().0, 202);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Hub-Signature-256", "sha256=00")], body).unwrap().0, 401);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[], body).unwrap().0, 401);
        // The same signed delivery again is a replay: 409, no fetch.
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Hub-Signature-256", &sig)], body).unwrap().0, 409);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Gitlab-Token", "k")], br#"{"after":"1"}"#).unwrap().0, 202);
        // fwc's timestamped scheme: fresh accepted, stale refused, a forged timestamp unauthorized.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let fwc = |ts: i64| (ts.to_string(), fwc_signature(b"k", ts, body));
        let (ts, sig) = fwc(now);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Fwc-Timestamp", &ts), ("X-Fwc-Signature", &sig)], body).unwrap().0, 202);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Fwc-Timestamp", &ts), ("X-Fwc-Signature", &sig)], body).unwrap().0, 409);
        let (old, old_sig) = fwc(now - 3600);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Fwc-Timestamp", &old), ("X-Fwc-Signature", &old_sig)], body).unwrap().0, 409);
        assert_eq!(http_request(a, "POST", "/hooks/git", &[("X-Fwc-Timestamp", &(now + 1).to_string()), ("X-Fwc-Signature", &sig)], body).unwrap().0, 401);
        assert_eq!(http_request(a, "GET", "/nope", &[], b"").unwrap().0, 404);
        assert_eq!(http_request(a, "GET", "/hooks/git", &[], b"").unwrap().0, 405);
        assert_eq!(pushes.load(Ordering::SeqCst), 3);
        let (code, text) = http_request(a, "GET", "/metrics", &[], b"").unwrap();
        assert_eq!(code, 200);
        assert!(text.ends_with("# EOF\n"), "{text}");
        let (code, plain) = http_request(a, "GET", "/metrics", &[("Accept", "text/plain;version=0.0.4")], b"").unwrap();
        assert_eq!(code, 200);
        assert!(plain.contains("# TYPE fwc_webhook_requests_total counter") && !plain.contains("# EOF"), "{plain}");
        assert!(text.contains("fwc_webhook_requests_total{result=\"accepted\"} 3"), "{text}");
        assert!(text.contains("fwc_webhook_requests_total{result=\"unauthorized\"} 3"), "{text}");
        assert!(text.contains("fwc_webhook_requests_total{result=\"replayed\"} 2"), "{text}");
        assert!(text.contains("fwc_webhook_requests_total{result=\"stale\"} 1"), "{text}");
        // Oversized body is refused without reading it.
        let big = vec![b'x'; MAX_BODY + 1];
        assert_eq!(http_request(a, "POST", "/hooks/git", &[], &big).map(|r| r.0).unwrap_or(413), 413);
        drop(srv);
        assert!(std::net::TcpStream::connect(a).is_err());
    }
}
