//! UDP listeners: one session per client address with its own connected upstream socket,
//! idle expiry, a session cap that evicts the least recently active session, conn-rate on
//! new sessions and caps applied per datagram (a datagram over the cap is dropped and counted).
//!
//! Syscalls are batched (module `mmsg`): the listener drains up to 32 datagrams per
//! `recvmmsg`, and consecutive datagrams of one client go to its upstream socket with one
//! `sendmmsg`; a session drains its upstream socket the same way and sends the batch back to
//! the client with one `sendmmsg` from the listening socket. A batch short of 32 emptied the
//! queue: it clears the socket's readiness at once (`drain`), so a wakeup costs one
//! `recvmmsg`, not a second one that finds nothing; a session keeps one idle timer for its
//! life instead of arming one per batch.
//!
//! Receive buffers: the listener and every session socket ask for `Options::udp_rcvbuf`
//! (4 MiB by default, past `net.core.rmem_max` with CAP_NET_ADMIN): a sender faster than the
//! forwarder's share of the CPU fills the buffer while the forwarder waits to be scheduled,
//! instead of being dropped at the listener, and each wakeup then drains full batches.
//!
//! Offload (module `mmsg`): the listener and every session socket ask for `UDP_GRO` and send
//! runs of equal-sized datagrams as one `UDP_SEGMENT` message, where the kernel supports them
//! and `Options::udp_offload` is on; datagram boundaries, caps and counters stay per datagram.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::bucket::Bucket;
use crate::mmsg::{self, Dgram, RecvBatch};
use crate::shared::{Current, ListenerHandle};
use crate::stats::RuleStats;

/// Session cap of a rule without `max-conns`.
pub const DEFAULT_MAX_SESSIONS: usize = 16_384;

thread_local! {
    /// Receive buffers of the sessions running on this thread. A session uses them only
    /// between a `recvmmsg` and the `sendmmsg` that follows it, with no `.await` in between,
    /// so one set per thread serves all sessions and an idle session holds no buffer.
    static SESSION_BATCH: RefCell<Option<RecvBatch>> = const { RefCell::new(None) };
}

struct Session {
    id: u64,
    upstream: Arc<UdpSocket>,
    /// The upstream socket may send with UDP_SEGMENT.
    gso: bool,
    last: Arc<AtomicU64>,
    task: JoinHandle<()>,
    stats: Arc<RuleStats>,
    /// The client's per-source slot, given back when the session ends.
    source: Option<crate::persource::SourceGuard>,
}

/// How long the upstream socket of a session that ended (evicted or idle) stays open to
/// count the replies still on their way to it. Closed at once, the kernel would drop them
/// with no trace (and answer the target with ICMP port unreachable).
pub const LINGER: Duration = Duration::from_secs(2);

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        self.stats.udp_sessions_active.fetch_sub(1, Relaxed);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(linger(self.upstream.clone(), self.stats.clone()));
        }
    }
}

/// Count (as dropped) every datagram that reaches a closed session's upstream socket during
/// [`LINGER`]; they cannot be delivered: the client has no session any more.
async fn linger(upstream: Arc<UdpSocket>, stats: Arc<RuleStats>) {
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut buf = [0u8; 64]; // only counted: a truncated datagram counts as one
    loop {
        tokio::select! {
            r = upstream.recv(&mut buf) => {
                if r.is_ok() {
                    stats.udp_dropped.fetch_add(1, Relaxed);
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}

pub(crate) async fn serve(sock: Arc<UdpSocket>, h: Arc<ListenerHandle>, mut stop: watch::Receiver<bool>) {
    let (expired_tx, mut expired) = mpsc::unbounded_channel::<(SocketAddr, u64)>();
    let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
    let mut next_id = 0u64;
    let mut batch = RecvBatch::new();
    let offload = h.ctx.opts.udp_offload;
    // Where the kernel lacks an offload, the option fails and that side stays per datagram.
    let gso = offload && mmsg::gso_supported(sock.as_fd());
    if offload && !mmsg::enable_gro(sock.as_fd()) {
        tracing::debug!("udp listener: no UDP_GRO in this kernel");
    }
    let rcvbuf = mmsg::set_rcvbuf(sock.as_fd(), h.ctx.opts.udp_rcvbuf);
    tracing::debug!("udp listener: receive buffer {rcvbuf} bytes");
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
            r = recv_batch(&sock, &mut batch, h.ctx.opts.udp_drain) => match r {
                Ok(n) => {
                    // UDP listeners have exactly one forward (sni= is TCP only).
                    let Some(cur) = h.fallback() else { continue };
                    let mut i = 0;
                    while i < n {
                        let Some(peer) = batch.from(i) else {
                            i += 1;
                            continue;
                        };
                        // The run of consecutive datagrams from this client goes out together.
                        let end = (i + 1..n).find(|&j| batch.from(j) != Some(peer)).unwrap_or(n);
                        if !sessions.contains_key(&peer) {
                            // A new client: its first datagram is admitted (or refused) as one;
                            // after a refusal the next datagram of the run is asked again.
                            if !cur.allowed(peer.ip()) || cur.rule.limits.admit_rate().is_err() {
                                cur.rule.stats.conns_refused.fetch_add(1, Relaxed);
                                cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
                                i += 1;
                                continue;
                            }
                            // Per-source limits: sessions and new sessions per source.
                            let source = match cur.rule.per_source.admit(peer.ip()) {
                                Ok(g) => g,
                                Err(_) => {
                                    cur.rule.stats.conns_refused.fetch_add(1, Relaxed);
                                    cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
                                    i += 1;
                                    continue;
                                }
                            };
                            let cap = cur.rule.limits.max_conns().map(|m| m as usize).unwrap_or(DEFAULT_MAX_SESSIONS);
                            while sessions.len() >= cap.max(1) {
                                let oldest = sessions.iter().min_by_key(|(_, s)| s.last.load(Relaxed)).map(|(a, _)| *a);
                                match oldest {
                                    Some(a) => { sessions.remove(&a); }
                                    None => break,
                                }
                            }
                            next_id += 1;
                            match open(&sock, gso, peer, next_id, &h, &cur, expired_tx.clone()).await {
                                Ok(mut s) => {
                                    s.source = source;
                                    sessions.insert(peer, s);
                                }
                                Err(e) => {
                                    cur.rule.stats.connect_failures.fetch_add(1, Relaxed);
                                    cur.rule.stats.udp_dropped.fetch_add(1, Relaxed);
                                    tracing::debug!(rule = %cur.cfg.rule, %peer, "udp session: {e}");
                                    i += 1;
                                    continue;
                                }
                            }
                        }
                        forward_up(&sessions[&peer], &batch, i..end, &cur);
                        i = end;
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

/// Wait until `sock` is readable, then receive up to [`BATCH`] datagrams with one `recvmmsg`.
/// A wakeup that finds nothing (`WouldBlock`) clears tokio's readiness and waits again.
/// Cancel-safe: nothing is received before the last `.await`.
async fn recv_batch(sock: &UdpSocket, batch: &mut RecvBatch, early_clear: bool) -> io::Result<usize> {
    loop {
        sock.readable().await?;
        let mut drained = None;
        match sock.try_io(Interest::READABLE, || drain(batch.recv(sock.as_fd()), early_clear, &mut drained)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match drained {
                Some(n) => return Ok(n),
                None => continue,
            },
            r => return r,
        }
    }
}

/// The result of a `recvmmsg` for tokio's `try_io`: a batch short of [`mmsg::BATCH`] emptied
/// the socket's queue (`recvmmsg` stops at the first would-block), so it is handed over in
/// `drained` and reported as `WouldBlock`, which clears tokio's readiness now. Otherwise the
/// next wait would return at once and spend a `recvmmsg` only to learn that the queue is empty:
/// one syscall more for every wakeup, and a wakeup is a few datagrams when the forwarder keeps
/// up. A datagram that arrives meanwhile is not missed: tokio clears the readiness only if no
/// new event came since it was read, and the socket is edge-triggered (a new datagram is a
/// new event).
/// (`Options::udp_drain` off: every result as it is.)
fn drain(r: io::Result<usize>, early_clear: bool, drained: &mut Option<usize>) -> io::Result<usize> {
    match r {
        Ok(n) if early_clear && n < mmsg::BATCH => {
            *drained = Some(n);
            Err(io::ErrorKind::WouldBlock.into())
        }
        r => r,
    }
}

/// The datagrams of the slots `range` (GRO batches cut at their boundaries) the bucket lets
/// through, and how many it refused.
fn under_cap(batch: &RecvBatch, range: Range<usize>, bucket: &Bucket) -> (Vec<Dgram>, usize) {
    let mut picks = Vec::with_capacity(range.len());
    let mut refused = 0;
    for i in range {
        for d in batch.datagrams(i) {
            if bucket.try_consume(d.len()) {
                picks.push(d);
            } else {
                refused += 1;
            }
        }
    }
    (picks, refused)
}

/// Client -> target: the slots `range` of `batch` (all from this session's client). Caps
/// per datagram (refused ones are dropped and counted), then the rest with one `sendmmsg` on
/// the connected upstream socket. `sendmmsg` never waits: a full socket buffer drops the
/// datagrams it could not take, and they are counted.
fn forward_up(s: &Session, batch: &RecvBatch, range: Range<usize>, cur: &Current) {
    s.last.store(crate::now_ms(), Relaxed);
    let (picks, refused) = under_cap(batch, range, &cur.rule.up);
    let sent = batch.send(s.upstream.as_fd(), None, &picks, s.gso);
    count(&cur.rule.stats, &cur.rule.stats.bytes_up, sent.bytes, refused + sent.dropped);
}

fn count(stats: &RuleStats, bytes: &AtomicU64, n: u64, dropped: usize) {
    if n > 0 {
        bytes.fetch_add(n, Relaxed);
    }
    if dropped > 0 {
        stats.udp_dropped.fetch_add(dropped as u64, Relaxed);
    }
}

#[allow(clippy::too_many_arguments)]
async fn open(
    listener: &Arc<UdpSocket>,
    listener_gso: bool,
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
    let start = cur.rule.rr.fetch_add(1, Relaxed);
    let mut last_err = io::Error::new(io::ErrorKind::NotFound, "no target address");
    let mut target = None;
    for i in 0..n {
        let t = &cfg.targets[(start + i) % n];
        if !cur.rule.usable(&cfg.targets, t) {
            continue;
        }
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
    let offload = h.ctx.opts.udp_offload;
    let gso = offload && mmsg::gso_supported(upstream.as_fd());
    if offload {
        mmsg::enable_gro(upstream.as_fd());
    }
    mmsg::set_rcvbuf(upstream.as_fd(), h.ctx.opts.udp_rcvbuf);
    let upstream = Arc::new(upstream);
    upstream.connect(target).await?;
    let last = Arc::new(AtomicU64::new(crate::now_ms()));
    let idle_ms = if cfg.idle_timeout_ms == 0 {
        fwc_artifacts::DEFAULT_UDP_IDLE_TIMEOUT_MS
    } else {
        cfg.idle_timeout_ms
    };
    let stats = cur.rule.stats.clone();
    stats.udp_sessions_total.fetch_add(1, Relaxed);
    stats.udp_sessions_active.fetch_add(1, Relaxed);
    let task = tokio::spawn(session_task(
        listener.clone(),
        listener_gso,
        upstream.clone(),
        peer,
        id,
        last.clone(),
        idle_ms,
        h.ctx.opts.udp_drain,
        cur.clone(),
        expired,
    ));
    Ok(Session { id, upstream, gso, last, task, stats, source: None })
}

#[allow(clippy::too_many_arguments)]
async fn session_task(
    listener: Arc<UdpSocket>,
    listener_gso: bool,
    upstream: Arc<UdpSocket>,
    peer: SocketAddr,
    id: u64,
    last: Arc<AtomicU64>,
    idle_ms: u64,
    early_clear: bool,
    cur: Arc<Current>,
    expired: mpsc::UnboundedSender<(SocketAddr, u64)>,
) {
    let stats = &cur.rule.stats;
    // One timer for the session's life, set again only when it has fired: a new sleep per
    // wakeup would put a timer into the runtime's wheel and take it out again for every batch.
    let idle = tokio::time::sleep(Duration::from_millis(idle_ms));
    tokio::pin!(idle);
    loop {
        let now = crate::now_ms();
        let deadline = last.load(Relaxed) + idle_ms;
        if now >= deadline {
            let _ = expired.send((peer, id));
            return;
        }
        if idle.is_elapsed() {
            idle.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(deadline - now));
        }
        tokio::select! {
            r = upstream.readable() => {
                if r.is_err() {
                    return; // the runtime is going away
                }
                SESSION_BATCH.with_borrow_mut(|b| {
                    let batch = b.get_or_insert_with(RecvBatch::new);
                    // An error is ECONNREFUSED from an ICMP port unreachable: keep the session,
                    // the target may come back. WouldBlock: try_io cleared the readiness (also
                    // after a batch that emptied the queue: `drain`).
                    let mut drained = None;
                    let n = match upstream.try_io(Interest::READABLE, || drain(batch.recv(upstream.as_fd()), early_clear, &mut drained)) {
                        Ok(n) => n,
                        Err(_) => match drained {
                            Some(n) => n,
                            None => return,
                        },
                    };
                    if n == 0 {
                        return;
                    }
                    last.store(crate::now_ms(), Relaxed);
                    let (picks, refused) = under_cap(batch, 0..n, &cur.rule.down);
                    let sent = batch.send(listener.as_fd(), Some(peer), &picks, listener_gso);
                    count(stats, &stats.bytes_down, sent.bytes, refused + sent.dropped);
                });
            },
            _ = &mut idle => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_batch_is_handed_over_as_would_block_so_the_readiness_clears() {
        let kind = |r: &io::Result<usize>| r.as_ref().map_err(|e| e.kind()).copied();
        // (recvmmsg's result, what try_io sees, what is handed over beside it)
        let rows: [(io::Result<usize>, Result<usize, io::ErrorKind>, Option<usize>); 5] = [
            (Ok(mmsg::BATCH), Ok(mmsg::BATCH), None),
            (Ok(mmsg::BATCH - 1), Err(io::ErrorKind::WouldBlock), Some(mmsg::BATCH - 1)),
            (Ok(1), Err(io::ErrorKind::WouldBlock), Some(1)),
            (Err(io::ErrorKind::WouldBlock.into()), Err(io::ErrorKind::WouldBlock), None),
            (Err(io::Error::from_raw_os_error(libc::ECONNREFUSED)), Err(io::ErrorKind::ConnectionRefused), None),
        ];
        for (r, seen, handed) in rows {
            let mut drained = None;
            let what = format!("{r:?}");
            assert_eq!(kind(&drain(r, true, &mut drained)), seen, "{what}");
            assert_eq!(drained, handed, "{what}");
        }
        // Turned off: a short batch is an ordinary result.
        let mut drained = None;
        assert_eq!(drain(Ok(3), false, &mut drained).ok(), Some(3));
        assert_eq!(drained, None);
    }
}
