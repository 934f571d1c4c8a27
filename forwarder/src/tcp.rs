//! TCP listeners: the accept loop (admission, EMFILE backoff) and one task per connection
//! that connects to a target (round-robin, failover, connect timeout), writes the PROXY
//! header and hands both sockets to the [`crate::splice`] pump.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::proxy;
use crate::server::{Current, ListenerHandle};
use crate::splice::{self, End, Flow};

/// Decrements a shared gauge on drop (owns its Arc so it can live in a spawned task).
struct Gauge(Arc<crate::stats::RuleStats>, Arc<ListenerHandle>);

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0.conns_active.fetch_sub(1, Relaxed);
        self.1.active.fetch_sub(1, Relaxed);
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
                admit(s, peer, &h);
            }
            Err(e) => {
                let cur = h.current();
                cur.rule.stats.accept_errors.fetch_add(1, Relaxed);
                if is_resource_error(&e) {
                    tracing::warn!(rule = %cur.cfg.rule, "accept: {e}; backing off {backoff:?}");
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                } else {
                    // ECONNABORTED and friends: the next accept is fine.
                    tracing::debug!(rule = %cur.cfg.rule, "accept: {e}");
                }
            }
        }
    }
}

fn admit(s: TcpStream, peer: SocketAddr, h: &Arc<ListenerHandle>) {
    let cur = h.current();
    let stats = &cur.rule.stats;
    if !cur.allowed(peer.ip()) {
        stats.conns_refused.fetch_add(1, Relaxed);
        return;
    }
    if cur.rule.limits.admit(stats.conns_active.load(Relaxed)).is_err() {
        stats.conns_refused.fetch_add(1, Relaxed);
        return; // dropping `s` closes it at once
    }
    stats.conns_total.fetch_add(1, Relaxed);
    stats.conns_active.fetch_add(1, Relaxed);
    h.active.fetch_add(1, Relaxed);
    let gauge = Gauge(cur.rule.stats.clone(), h.clone());
    let h = h.clone();
    tokio::spawn(async move {
        let _gauge = gauge;
        let mut kill = h.kill.subscribe();
        if *kill.borrow_and_update() {
            return;
        }
        tokio::select! {
            _ = kill.changed() => {}
            r = serve(s, peer, &h, &cur) => {
                if let Err(e) = r {
                    tracing::debug!(rule = %cur.cfg.rule, %peer, "connection ended: {e}");
                }
            }
        }
    });
}

async fn serve(client: TcpStream, peer: SocketAddr, h: &ListenerHandle, cur: &Current) -> io::Result<()> {
    let cfg = &cur.cfg;
    let stats = &cur.rule.stats;
    let _ = client.set_nodelay(true);
    let upstream = match connect_any(h, cur).await {
        Ok(u) => u,
        Err(e) => {
            stats.connect_failures.fetch_add(1, Relaxed);
            return Err(e);
        }
    };
    let _ = upstream.set_nodelay(true);
    if let Some(v) = cfg.proxy_protocol {
        let hdr = proxy::header(v, proxy::Transport::Stream, peer, client.local_addr()?);
        write_all(&upstream, &hdr).await?;
    }
    let activity = AtomicU64::new(crate::now_ms());
    let idle = Duration::from_millis(if cfg.idle_timeout_ms == 0 {
        fwc_artifacts::DEFAULT_TCP_IDLE_TIMEOUT_MS
    } else {
        cfg.idle_timeout_ms
    });
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
    let start = h.rr.fetch_add(1, Relaxed);
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no target address");
    for i in 0..n {
        let t = &cfg.targets[(start + i) % n];
        let addrs = match h.ctx.resolver.resolve(&t.host, t.port).await {
            Ok(a) => a,
            Err(e) => {
                last = e;
                continue;
            }
        };
        for addr in addrs.iter() {
            match tokio::time::timeout(timeout, connect_marked(*addr)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = io::Error::new(e.kind(), format!("connect {addr}: {e}")),
                Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, format!("connect {addr}: timed out")),
            }
        }
    }
    Err(last)
}

/// Connect with the forwarder's socket mark set before the SYN leaves.
async fn connect_marked(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    let sock = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    crate::mark_upstream(std::os::fd::AsFd::as_fd(&sock));
    sock.connect(addr).await
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
