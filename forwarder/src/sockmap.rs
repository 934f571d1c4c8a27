//! The sockmap byte pump of one uncapped TCP connection (`Options::sockmap`): once the header
//! phase is done (PROXY header written, server name routed, target connected), both sockets
//! go into the sockhash of [`fwc_qos::sockmap::Redirector`] and the kernel moves the bytes
//! (an sk_skb stream verdict redirects each socket's data out of its peer). This task only
//! waits for EOF (then half-closes the other side once every redirected byte has entered
//! it), errors (either side's error closes both: a closed socket leaves the map by itself)
//! and idleness, and counts bytes from TCP_INFO, with no per-byte work: the rule's counters
//! are brought up to date every [`TICK`] while the connection runs and exactly at its end.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use fwc_qos::sockmap::Redirector;
use rustix::net::Shutdown;
use tokio::net::TcpStream;

use crate::splice::End;

/// How often counters and idleness are read from TCP_INFO while the kernel moves the bytes.
const TICK: Duration = Duration::from_secs(2);

/// The loaded redirection program of the process, and how many connections it took and
/// left to splice.
#[derive(Debug)]
pub struct Engine {
    map: Mutex<Redirector>,
    /// Connections handed to the kernel.
    pub linked: AtomicU64,
    /// Connections the kernel did not take (map full, socket not established): splice.
    pub fallbacks: AtomicU64,
}

impl Engine {
    /// Load the program with room for `pairs` connections (root: CAP_BPF, CAP_NET_ADMIN). On
    /// failure the caller keeps splice.
    pub fn load(pairs: u32) -> Result<Engine, fwc_qos::QosError> {
        Redirector::load(pairs).map(|r| Engine { map: Mutex::new(r), linked: AtomicU64::new(0), fallbacks: AtomicU64::new(0) })
    }
}

/// What the connection's setup wrote and read in userspace before the hand-over: the PROXY
/// header and a replayed ClientHello went to the target, the ClientHello was read from the client.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prefix {
    pub written_up: u64,
    pub read_client: u64,
}

/// The fields of `struct tcp_info` used here (offsets of the stable uapi layout).
#[derive(Debug, Clone, Copy)]
struct TcpInfo {
    last_data_recv_ms: u32,
    bytes_acked: u64,
    bytes_received: u64,
}

fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut buf = [0u8; 232];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf and len are valid for the kernel to write up to len bytes.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < 136 {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_INFO without tcpi_bytes_received"));
    }
    let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
    Ok(TcpInfo { last_data_recv_ms: u32_at(52), bytes_acked: u64_at(120), bytes_received: u64_at(128) })
}

/// Bytes written into a socket since it was opened: acknowledged plus still queued (SIOCOUTQ).
fn entered(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut outq: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut outq) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tcp_info(fd)?.bytes_acked + outq.max(0) as u64)
}

/// Make the kernel run the socket's data-ready callback now (tcp_set_rcvlowat does), so bytes
/// that arrived before the socket entered the map are redirected too, in order.
fn kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_RCVLOWAT reads one int.
    if unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, (&one as *const libc::c_int).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes a pair out of the map when the pump ends, however it ends.
struct Unlink<'a>(&'a Engine, fwc_qos::sockmap::Linked);

impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        self.0.map.lock().unwrap().unlink(self.1);
    }
}

/// Hand the connection to the kernel and wait for its end. `Ok(None)`: the pair could not be
/// linked (map full, no program), nothing was moved, the caller pumps with splice instead.
pub async fn pump(
    engine: &Engine,
    client: &TcpStream,
    upstream: &TcpStream,
    pre: Prefix,
    counters: (&AtomicU64, &AtomicU64),
    idle: Duration,
) -> io::Result<Option<End>> {
    let linked = engine.map.lock().unwrap().link(client.as_fd(), upstream.as_fd());
    let linked = match linked {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!("sockmap: {e}; this connection uses splice");
            engine.fallbacks.fetch_add(1, Relaxed);
            return Ok(None);
        }
    };
    engine.linked.fetch_add(1, Relaxed);
    // Out of the map at every end (a closed socket leaves it by itself; an error return
    // leaves the sockets open until the caller drops them).
    let _unlink = Unlink(engine, linked);
    kick(client.as_fd())?;
    kick(upstream.as_fd())?;
    let (up, down) = counters;
    let (mut up_seen, mut down_seen) = (0u64, 0u64);
    // `tcpi_bytes_received` counts a received FIN as one byte: while running, the last byte
    // is left for the final count, which knows whether each side ended with a FIN.
    let mut sync = |fins: Option<(bool, bool)>| -> io::Result<u32> {
        let (c, u) = (tcp_info(client.as_fd())?, tcp_info(upstream.as_fd())?);
        let (fc, fu) = fins.map_or((1, 1), |(a, b)| (u64::from(a), u64::from(b)));
        let (nu, nd) = (c.bytes_received.saturating_sub(fc + pre.read_client), u.bytes_received.saturating_sub(fu));
        up.fetch_add(nu.saturating_sub(up_seen), Relaxed);
        down.fetch_add(nd.saturating_sub(down_seen), Relaxed);
        (up_seen, down_seen) = (up_seen.max(nu), down_seen.max(nd));
        Ok(c.last_data_recv_ms.min(u.last_data_recv_ms))
    };
    let (fin_c, fin_u) = (AtomicBool::new(false), AtomicBool::new(false));
    let both = async {
        tokio::try_join!(
            one_way(client, upstream, pre.written_up, pre.read_client, &fin_c),
            one_way(upstream, client, 0, 0, &fin_u)
        )
    };
    tokio::pin!(both);
    let end = loop {
        tokio::select! {
            r = &mut both => { r?; break End::Done; }
            _ = tokio::time::sleep(TICK.min(idle)) => {
                if u128::from(sync(None)?) >= idle.as_millis() {
                    break End::Idle;
                }
            }
        }
    };
    sync(Some((fin_c.load(Relaxed), fin_u.load(Relaxed))))?;
    Ok(Some(end))
}

/// One direction: wait for EOF on `src` (the kernel redirects its bytes, so reading returns
/// nothing but EOF), wait until every byte `src` received has entered `dst`, then
/// shutdown(SHUT_WR) on `dst` so its peer sees EOF after the last byte.
async fn one_way(src: &TcpStream, dst: &TcpStream, written_dst: u64, read_src: u64, fin: &AtomicBool) -> io::Result<()> {
    let mut probe = [0u8; 1];
    loop {
        src.readable().await?;
        match src.try_read(&mut probe) {
            Ok(0) => break,
            // A byte the program did not take: forwarding it could reorder the stream.
            Ok(_) => return Err(io::Error::other("sockmap: bytes reached userspace; connection cut")),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    fin.store(true, Relaxed);
    // EOF: the peer's FIN is in, and counted as one byte.
    let want = written_dst + tcp_info(src.as_fd())?.bytes_received.saturating_sub(1) - read_src;
    let mut wait = Duration::from_micros(200);
    while entered(dst.as_fd())? < want {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(20));
    }
    match rustix::net::shutdown(dst, Shutdown::Write) {
        Ok(()) | Err(rustix::io::Errno::NOTCONN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
