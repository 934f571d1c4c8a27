//! fwc's userspace forwarder: the dataplane for forwards the kernel cannot do (DNS targets,
//! PROXY protocol, idle timeouts, failover, `backend="userspace"`). It runs the listeners of a
//! `forward.json` ([`fwc_artifacts::ForwardArtifact`]) and reloads them without drops.
//!
//! Layout: [`server`] owns listeners and reload; [`tcp`] and [`udp`] move bytes; [`splice`] is
//! the zero-copy loop; [`bucket`] the bandwidth caps; [`limits`] max-conns / conn-rate;
//! [`proxy`] PROXY protocol headers; [`resolve`] DNS targets; [`stats`] per-rule counters;
//! [`control`] the unix-socket control protocol used by `fwc apply` and `fwc forward --stats`.

pub mod bucket;
pub mod control;
pub mod health;
pub mod kernel;
pub mod kernel_dns;
pub mod limits;
pub mod persource;
mod mmsg;
pub mod proxy;
pub mod resolve;
pub mod options;
pub mod server;
pub(crate) mod shared;
pub mod sni;
mod sockmap;
pub mod splice;
pub mod stats;
pub mod tcp;
pub mod udp;

pub use server::{Forwarder, Options, PrepareReport, ReloadError, Status};
pub use stats::RuleStatsSnapshot;

/// Milliseconds on a process-wide monotonic clock; cheap to store in an atomic for
/// last-activity tracking.
pub(crate) fn now_ms() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Put fwc's forwarder mark (`FORWARDER_SOCKET_MARK`) on an upstream socket, so the nftables
/// ruleset's `output` chain lets the forwarder reach DNS-named targets even with
/// `output policy=drop`. Needs CAP_NET_ADMIN; without it (an unprivileged run) the socket
/// simply stays unmarked, which only matters under such a policy.
pub fn mark_upstream(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let mark: u32 = fwc_artifacts::FORWARDER_SOCKET_MARK;
    // SAFETY: a valid socket fd and a 4-byte option value that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!("SO_MARK on an upstream socket: {}", std::io::Error::last_os_error());
    }
}

/// Connect with the forwarder's socket mark set before the SYN leaves (the data path's and the
/// health checks' upstream connections).
pub(crate) async fn connect_marked(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let sock = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    mark_upstream(std::os::fd::AsFd::as_fd(&sock));
    sock.connect(addr).await
}
