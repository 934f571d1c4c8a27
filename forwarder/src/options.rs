//! Process-level settings of the forwarder (not part of `forward.json`): splice, pipe sizes,
//! UDP offload, draining, the SNI peek timeout, each with its environment override.

use std::time::Duration;

use crate::splice::{DEFAULT_PIPE_MAX, DEFAULT_PIPE_SIZE};

/// Default time a client has to send its ClientHello on an SNI-routed socket.
pub const DEFAULT_SNI_TIMEOUT: Duration = Duration::from_secs(5);

/// Default receive buffer of the UDP sockets: 4 MiB holds ~1,800 datagrams of 1,400 bytes
/// (their kernel size, ~2.3 KiB each, is what counts), ~10 ms at 180,000 datagrams/s.
pub const DEFAULT_UDP_RCVBUF: usize = 4 << 20;

/// Default room of the sockmap, in connections.
pub const DEFAULT_SOCKMAP_PAIRS: u32 = 32_768;

/// Process-level settings of the forwarder (not part of `forward.json`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Move uncapped and capped TCP with splice(2); off = buffered copy. Default on; the
    /// environment variable `FWC_FORWARD_SPLICE=0` turns it off.
    pub splice: bool,
    /// Hand established TCP connections that need no per-byte work (no cap) to the kernel:
    /// a BPF sockmap program redirects each socket's bytes to its peer (module `sockmap`);
    /// splice stays the fallback. Default off; `FWC_FORWARD_SOCKMAP=1` turns it on. Needs
    /// root (CAP_BPF, CAP_NET_ADMIN); where the program cannot load, splice is used.
    pub sockmap: bool,
    /// Connections the sockmap holds at once (two sockets each); past it, splice.
    pub sockmap_pairs: u32,
    /// Pipe capacity requested with F_SETPIPE_SZ (env `FWC_FORWARD_PIPE_SIZE` overrides the default).
    pub pipe_size: usize,
    /// Capacity a pipe grows to while a flow fills it (env `FWC_FORWARD_PIPE_MAX`; at least
    /// `pipe_size`; equal to it: pipes never grow).
    pub pipe_max: usize,
    /// Empty pipes kept for reuse.
    pub pipe_pool: usize,
    /// A write after a read that filled the pipe says `SPLICE_F_MORE`, so a bulk flow's
    /// segments leave whole (module `splice`). Default on; `FWC_FORWARD_SPLICE_MORE=0` turns
    /// it off (for side-by-side measurements).
    pub splice_more: bool,
    /// UDP offload: `UDP_GRO` on receive, `UDP_SEGMENT` (GSO) on send, where the kernel has
    /// them. Default on; `FWC_FORWARD_UDP_OFFLOAD=0` turns it off (one datagram per message).
    pub udp_offload: bool,
    /// Receive buffer asked for the UDP listener and every session socket, in bytes
    /// (`FWC_FORWARD_UDP_RCVBUF`; 0 keeps the kernel's default, `net.core.rmem_default`).
    pub udp_rcvbuf: usize,
    /// A `recvmmsg` batch short of the batch size clears the socket's readiness at once (the
    /// queue is empty), saving the `recvmmsg` that would find nothing. Default on;
    /// `FWC_FORWARD_UDP_DRAIN=0` turns it off (for side-by-side measurements).
    pub udp_drain: bool,
    /// How long connections of a removed listener may run before they are cut.
    pub drain_timeout: Duration,
    /// listen(2) backlog.
    pub backlog: i32,
    /// How long a client of an SNI-routed socket has to send its whole ClientHello before it
    /// is closed (env `FWC_FORWARD_SNI_TIMEOUT_MS`; default 5 s).
    pub sni_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let splice = !matches!(std::env::var("FWC_FORWARD_SPLICE").as_deref(), Ok("0") | Ok("off") | Ok("false"));
        Options {
            splice,
            sockmap: matches!(std::env::var("FWC_FORWARD_SOCKMAP").as_deref(), Ok("1") | Ok("on") | Ok("true")),
            sockmap_pairs: DEFAULT_SOCKMAP_PAIRS,
            pipe_size: std::env::var("FWC_FORWARD_PIPE_SIZE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_PIPE_SIZE),
            pipe_max: std::env::var("FWC_FORWARD_PIPE_MAX")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_PIPE_MAX),
            pipe_pool: 256,
            splice_more: !matches!(std::env::var("FWC_FORWARD_SPLICE_MORE").as_deref(), Ok("0") | Ok("off") | Ok("false")),
            udp_offload: !matches!(std::env::var("FWC_FORWARD_UDP_OFFLOAD").as_deref(), Ok("0") | Ok("off") | Ok("false")),
            udp_drain: !matches!(std::env::var("FWC_FORWARD_UDP_DRAIN").as_deref(), Ok("0") | Ok("off") | Ok("false")),
            udp_rcvbuf: std::env::var("FWC_FORWARD_UDP_RCVBUF")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_UDP_RCVBUF),
            drain_timeout: Duration::from_secs(30),
            backlog: 4096,
            sni_timeout: std::env::var("FWC_FORWARD_SNI_TIMEOUT_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_SNI_TIMEOUT),
        }
    }
}
