//! TCP listeners: the accept loop (admission, EMFILE backoff) and one task per connection
//! that routes by TLS server name on a shared socket, connects to a target (round-robin,
//! failover, connect timeout), writes the PROXY header and the peeked ClientHello, and hands
//! both sockets to the kernel's sockmap (no cap, when loaded: module `sockmap`) or to the
//! [`crate::splice`] pump.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::proxy;
use crate::shared::{Current, ListenerHandle, Routes};
use crate::sni::{self, Route};
use crate::splice::{self, End, Flow};

/// An open connection of a rule: decrements the rule's gauge on drop.
struct RuleGauge(Arc<crate::stats::RuleStats>);

impl Drop for RuleGauge {
    fn drop(&mut self) {
        self.0.conns_active.fetch_sub(1, Relaxed);
    }
}

/// An open connection of a socket (for draining): decrements on drop.
struct SocketGauge(Arc<ListenerHandle>);

impl Drop for SocketGauge {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Relaxed);
    }
}

/// Errors of accept(2) that mean "out of a resource": back off instead of spinning.
fn is_resource_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

pub(crate) async fn accept_loop(listener: TcpListener, h: Arc<ListenerHandle>, mut stop: watch::Receiver<bool>) {
    const MIN_BACKOFF: Duration = Duration::from_millis(5);
    const MAX_BACKOFF: Duration = Duration::from_secs(1);
    let mut backoff = MIN_BACKOFF;
    loop {
        if *stop.borrow() {
            break;
        }
        let r = tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = listener.accept() => r,
        };
        match r {
            Ok((s, peer)) => {
                backoff = MIN_BACKOFF;
                accept(s, peer, &h);
            }
            Err(e) => {
                let routes = h.routes();
                for cur in routes.routes().into_iter().map(|r| r.1).chain(routes.fallback.as_ref()) {
                    cur.rule.stats.accept_errors.fetch_add(1, Relaxed);
                }
                if is_resource_error(&e) {
                    tracing::warn!("accept: {e}; backing off {backoff:?}");
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                } else {
                    // ECONNABORTED and friends: the next accept is fine.
                    tracing::debug!("accept: {e}");
                }
            }
        }
    }
}

/// A socket of one forward admits at once (a refusal costs no task); a socket routed by TLS
/// server name reads the ClientHello first, in the connection's task.
fn accept(s: TcpStream, peer: SocketAddr, h: &Arc<ListenerHandle>) {
    let routes = h.routes();
    if routes.has_names() {
        let h2 = h.clone();
        spawn_conn(h, async move { route_and_serve(s, peer, &h2, &routes).await });
        return;
    }
    let Some(cur) = routes.fallback.clone() else { return };
    let Some(gauge) = admit(&cur, peer) else { return };
    let h2 = h.clone();
    spawn_conn(h, async move {
        let _gauge = gauge;
        serve(s, peer, &h2, &cur, Vec::new()).await
    });
}

/// Admission of a new connection to a forward: `from=`, `max-conns`, `conn-rate`. A refused
/// connection is counted and closed by the caller (dropping it).
fn admit(cur: &Current, peer: SocketAddr) -> Option<(RuleGauge, Option<crate::persource::SourceGuard>)> {
    let stats = &cur.rule.stats;
    if !cur.allowed(peer.ip()) || cur.rule.limits.admit(stats.conns_active.load(Relaxed)).is_err() {
        stats.conns_refused.fetch_add(1, Relaxed);
        return None;
    }
    // Per-source limits, after the rule's own (the kernel's order).
    let source = match cur.rule.per_source.admit(peer.ip()) {
        Ok(g) => g,
        Err(why) => {
            tracing::debug!(rule = %cur.cfg.rule, %peer, ?why, "per-source limit: refused");
            stats.conns_refused.fetch_add(1, Relaxed);
            return None;
        }
    };
    stats.conns_total.fetch_add(1, Relaxed);
    stats.conns_active.fetch_add(1, Relaxed);
    Some((RuleGauge(stats.clone()), source))
}

/// Run one connection's task; the listener's kill switch cuts it.
fn spawn_conn(h: &Arc<ListenerHandle>, conn: impl std::future::Future<Output = io::Result<()>> + Send + 'static) {
    h.active.fetch_add(1, Relaxed);
    let gauge = SocketGauge(h.clone());
    let mut kill = h.kill.subscribe();
    tokio::spawn(async move {
        let _gauge = gauge;
        if *kill.borrow_and_update() {
            return;
        }
        tokio::select! {
            _ = kill.changed() => {}
            r = conn => {
                if let Err(e) = r {
                    tracing::debug!("connection ended: {e}");
                }
            }
        }
    });
}

/// Read the ClientHello (bounded in size by the parser, in time by the socket's timeout),
/// pick the route, admit, and serve with the bytes read replayed to the target.
async fn route_and_serve(s: TcpStream, peer: SocketAddr, h: &ListenerHandle, routes: &Routes) -> io::Result<()> {
    let c = &h.sni;
    let (bytes, name) = match tokio::time::timeout(h.ctx.opts.sni_timeout, read_hello(&s)).await {
        Err(_) => {
            c.timeouts.fetch_add(1, Relaxed);
            return Ok(());
        }
        Ok(Err(e)) => {
            c.parse_failures.fetch_add(1, Relaxed);
            return Err(io::Error::new(e.kind(), format!("{peer}: no ClientHello: {e}")));
        }
        Ok(Ok(hello)) => hello,
    };
    let cur = match routes.route(name.as_deref()) {
        Route::Named(cur) => {
            c.routed.fetch_add(1, Relaxed);
            cur
        }
        Route::Fallback(cur) => {
            c.fallback.fetch_add(1, Relaxed);
            cur
        }
        Route::Miss => {
            c.misses.fetch_add(1, Relaxed);
            return Ok(());
        }
    };
    let Some(_gauge) = admit(cur, peer) else { return Ok(()) };
    serve(s, peer, h, cur, bytes).await
}

/// Read from the client until the bytes so far hold a whole ClientHello; returns them (to be
/// replayed) and the server name.
async fn read_hello(s: &TcpStream) -> io::Result<(Vec<u8>, Option<String>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut parser = sni::HelloParser::default();
    let mut chunk = [0u8; 4096];
    loop {
        s.readable().await?;
        let room = (sni::MAX_PEEK + 1 - buf.len()).min(chunk.len());
        match s.try_read(&mut chunk[..room]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before the end of the ClientHello")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        match parser.feed(&buf) {
            sni::Hello::NeedMore => {}
            sni::Hello::Done(name) => return Ok((buf, name)),
            sni::Hello::Invalid(why) => return Err(io::Error::new(io::ErrorKind::InvalidData, why)),
        }
    }
}

/// Connect to a target, write the PROXY header and the bytes already read from the client
/// (a peeked ClientHello), then pump both ways.
async fn serve(client: TcpStream, peer: SocketAddr, h: &ListenerHandle, cur: &Current, replay: Vec<u8>) -> io::Result<()> {
    let cfg = &cur.cfg;
    let stats = &cur.rule.stats;
    // The client socket is TCP_NODELAY already: accepted from a listener that has it (`bind`).
    let upstream = match connect_any(h, cur).await {
        Ok(u) => u,
        Err(e) => {
            stats.connect_failures.fetch_add(1, Relaxed);
            return Err(io::Error::new(e.kind(), format!("rule {}: {e}", cfg.rule)));
        }
    };
    let _ = upstream.set_nodelay(true);
    let mut pre = crate::sockmap::Prefix { written_up: 0, read_client: replay.len() as u64 };
    if let Some(v) = cfg.proxy_protocol {
        let hdr = proxy::header(v, proxy::Transport::Stream, peer, client.local_addr()?);
        write_all(&upstream, &hdr).await?;
        pre.written_up += hdr.len() as u64;
    }
    pre.written_up += replay.len() as u64;
    if !replay.is_empty() {
        cur.rule.up.ready().await;
        cur.rule.up.consume(replay.len());
        write_all(&upstream, &replay).await?;
        stats.bytes_up.fetch_add(replay.len() as u64, Relaxed);
    }
    let activity = AtomicU64::new(crate::now_ms());
    let idle = Duration::from_millis(if cfg.idle_timeout_ms == 0 {
        fwc_artifacts::DEFAULT_TCP_IDLE_TIMEOUT_MS
    } else {
        cfg.idle_timeout_ms
    });
    // A connection with no per-byte work (no cap) goes to the kernel when the sockmap program
    // is loaded; a pair the kernel does not take (map full, a socket no longer established)
    // falls back to splice with nothing moved.
    if let Some(engine) = h.ctx.sockmap.as_ref().filter(|_| !cur.rule.up.limited() && !cur.rule.down.limited()) {
        let counters = (&stats.bytes_up, &stats.bytes_down);
        match crate::sockmap::pump(engine, &client, &upstream, pre, counters, idle).await? {
            Some(End::Idle) => {
                stats.idle_timeouts.fetch_add(1, Relaxed);
                return Ok(());
            }
            Some(End::Done) => return Ok(()),
            None => {}
        }
    }
    let pool = if h.ctx.opts.splice { Some(&h.ctx.pool) } else { None };
    let up = Flow { counter: &stats.bytes_up, bucket: &cur.rule.up, activity: &activity };
    let down = Flow { counter: &stats.bytes_down, bucket: &cur.rule.down, activity: &activity };
    let (end, _, _) = splice::pump(&client, &upstream, pool, up, down, idle).await?;
    if end == End::Idle {
        stats.idle_timeouts.fetch_add(1, Relaxed);
    }
    Ok(())
}

/// Connect to the targets in round-robin order starting at the listener's cursor; every
/// address of every target is tried before giving up.
async fn connect_any(h: &ListenerHandle, cur: &Current) -> io::Result<TcpStream> {
    let cfg = &cur.cfg;
    let n = cfg.targets.len();
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "rule has no target"));
    }
    let timeout = Duration::from_millis(if cfg.connect_timeout_ms == 0 {
        fwc_artifacts::DEFAULT_CONNECT_TIMEOUT_MS
    } else {
        cfg.connect_timeout_ms
    });
    let start = cur.rule.rr.fetch_add(1, Relaxed);
    // The error to report is built only when an attempt fails: the accept path of a
    // connection that connects at once allocates nothing here.
    let mut last: Option<io::Error> = None;
    for i in 0..n {
        let t = &cfg.targets[(start + i) % n];
        if !cur.rule.usable(&cfg.targets, t) {
            continue;
        }
        // An IP literal target (the common case) is its own address, without the resolver's
        // shared lists.
        let one;
        let resolved;
        let addrs: &[SocketAddr] = match crate::resolve::literal(&t.host) {
            Some(ip) => {
                one = [SocketAddr::new(ip, t.port)];
                &one
            }
            None => match h.ctx.resolver.resolve(&t.host, t.port).await {
                Ok(a) => {
                    resolved = a;
                    &resolved
                }
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            },
        };
        for addr in addrs {
            match tokio::time::timeout(timeout, crate::connect_marked(*addr)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = Some(io::Error::new(e.kind(), format!("connect {addr}: {e}"))),
                Err(_) => last = Some(io::Error::new(io::ErrorKind::TimedOut, format!("connect {addr}: timed out"))),
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no target address")))
}

async fn write_all(s: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        s.writable().await?;
        match s.try_write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
