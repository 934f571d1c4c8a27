//! UDP listeners: one session per client address with its own connected upstream socket,
//! idle expiry, a session cap that evicts the least recently active session, conn-rate on
//! new sessions and caps applied per datagram (a datagram over the cap is dropped and counted).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::server::{Current, ListenerHandle};
use crate::stats::RuleStats;

/// Session cap of a rule without `max-conns`.
pub const DEFAULT_MAX_SESSIONS: usize = 16_384;
const MAX_DATAGRAM: usize = 65_536;

struct Session {
    id: u64,
    upstream: Arc<UdpSocket>,
    last: Arc<AtomicU64>,
    task: JoinHandle<()>,
    stats: Arc<RuleStats>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        self.stats.udp_sessions_active.fetch_sub(1, Relaxed);
    }
}

pub(crate) async fn serve(sock: Arc<UdpSocket>, h: Arc<ListenerHandle>, mut stop: watch::Receiver<bool>) {
    let (expired_tx, mut expired) = mpsc::unbounded_channel::<(SocketAddr, u64)>();
    let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
    let mut next_id = 0u64;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            Some((addr, id)) = expired.recv() => {
                if sessions.get(&addr).map(|s| s.id) == Some(id) {
                    sessions.remove(&addr);
                }
            }
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, peer)) => {
                    let cur = h.current();
                    if let Some(s) = sessions.get(&peer) {
                        forward_up(s, &buf[..n], &cur);
                        continue;
                    }
                    if !cur.allowed(peer.ip()) || cur.rule.limits.admit_rate().is_err() {
                        cur.rule.stats.conns_refused.fetch_add(1, Relaxed);
                        continue;
                    }
                    let cap = cur.rule.limits.max_conns().map(|m| m as usize).unwrap_or(DEFAULT_MAX_SESSIONS);
                    while sessions.len() >= cap.max(1) {
                        let oldest = sessions.iter().min_by_key(|(_, s)| s.last.load(Relaxed)).map(|(a, _)| *a);
                        match oldest {
                            Some(a) => { sessions.remove(&a); }
                            None => break,
                        }
                    }
                    next_id += 1;
                    match open(&sock, peer, next_id, &h, &cur, expired_tx.clone()).await {
                        Ok(s) => {
                            forward_up(&s, &buf[..n], &cur);
                            sessions.insert(peer, s);
                        }
                        Err(e) => {
                            cur.rule.stats.connect_failures.fetch_add(1, Relaxed);
                            cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
                            tracing::debug!(rule = %cur.cfg.rule, %peer, "udp session: {e}");
                        }
                    }
                }
                Err(e) => {
                    // ICMP errors surface here on some kernels; out-of-resource: pause briefly.
                    tracing::debug!("udp recv: {e}");
                    if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ENOMEM)) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }
    }
}

/// Send on a non-blocking UDP socket straight away. (tokio's `try_send*` refuse until the
/// reactor has reported the socket writable once, which drops the first datagram of a new
/// session.) A full socket buffer returns `WouldBlock`: the datagram is dropped and counted.
fn send(s: &UdpSocket, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
    let flags = rustix::net::SendFlags::DONTWAIT;
    let r = match to {
        None => rustix::net::send(s, data, flags),
        Some(to) => rustix::net::sendto(s, data, flags, &to),
    };
    r.map_err(io::Error::from)
}

fn forward_up(s: &Session, data: &[u8], cur: &Current) {
    s.last.store(crate::now_ms(), Relaxed);
    if !cur.rule.up.try_consume(data.len()) {
        cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
        return;
    }
    match send(&s.upstream, data, None) {
        Ok(n) => {
            cur.rule.stats.bytes_up.fetch_add(n as u64, Relaxed);
        }
        Err(_) => {
            cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
        }
    }
}

async fn open(
    listener: &Arc<UdpSocket>,
    peer: SocketAddr,
    id: u64,
    h: &ListenerHandle,
    cur: &Arc<Current>,
    expired: mpsc::UnboundedSender<(SocketAddr, u64)>,
) -> io::Result<Session> {
    let cfg = &cur.cfg;
    let n = cfg.targets.len();
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "rule has no target"));
    }
    let start = h.rr.fetch_add(1, Relaxed);
    let mut last_err = io::Error::new(io::ErrorKind::NotFound, "no target address");
    let mut target = None;
    for i in 0..n {
        let t = &cfg.targets[(start + i) % n];
        match h.ctx.resolver.resolve(&t.host, t.port).await {
            Ok(a) if !a.is_empty() => {
                target = Some(a[0]);
                break;
            }
            Ok(_) => {}
            Err(e) => last_err = e,
        }
    }
    let target = target.ok_or(last_err)?;
    let local: SocketAddr = match target.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let upstream = UdpSocket::bind(local).await?;
    crate::mark_upstream(std::os::fd::AsFd::as_fd(&upstream));
    let upstream = Arc::new(upstream);
    upstream.connect(target).await?;
    let last = Arc::new(AtomicU64::new(crate::now_ms()));
    let idle_ms = if cfg.idle_timeout_ms == 0 {
        fwc_compiler::artifacts::DEFAULT_UDP_IDLE_TIMEOUT_MS
    } else {
        cfg.idle_timeout_ms
    };
    let stats = cur.rule.stats.clone();
    stats.udp_sessions_total.fetch_add(1, Relaxed);
    stats.udp_sessions_active.fetch_add(1, Relaxed);
    let task = tokio::spawn(session_task(
        listener.clone(),
        upstream.clone(),
        peer,
        id,
        last.clone(),
        idle_ms,
        cur.clone(),
        expired,
    ));
    Ok(Session { id, upstream, last, task, stats })
}

#[allow(clippy::too_many_arguments)]
async fn session_task(
    listener: Arc<UdpSocket>,
    upstream: Arc<UdpSocket>,
    peer: SocketAddr,
    id: u64,
    last: Arc<AtomicU64>,
    idle_ms: u64,
    cur: Arc<Current>,
    expired: mpsc::UnboundedSender<(SocketAddr, u64)>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let stats = &cur.rule.stats;
    loop {
        let now = crate::now_ms();
        let deadline = last.load(Relaxed) + idle_ms;
        if now >= deadline {
            let _ = expired.send((peer, id));
            return;
        }
        tokio::select! {
            r = upstream.recv(&mut buf) => {
                // An error is ECONNREFUSED from an ICMP port unreachable: keep the session,
                // the target may come back.
                if let Ok(n) = r {
                    last.store(crate::now_ms(), Relaxed);
                    if !cur.rule.down.try_consume(n) {
                        stats.udp_dropped.fetch_add(1, Relaxed);
                        continue;
                    }
                    match send(&listener, &buf[..n], Some(peer)) {
                        Ok(n) => { stats.bytes_down.fetch_add(n as u64, Relaxed); }
                        Err(_) => { stats.udp_dropped.fetch_add(1, Relaxed); }
                    }
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(deadline - now)) => {}
        }
    }
}
