//! Batched UDP syscalls for [`crate::udp`]: `recvmmsg(2)` of up to [`BATCH`] datagrams into
//! buffers allocated once, and `sendmmsg(2)` of a selection of them. All unsafe code of the
//! UDP path is in this module.
//!
//! Buffer layout of a [`RecvBatch`]: slot `i` receives into two iovecs, a 2 KiB *head* (the
//! heads are contiguous: 32 x 2 KiB = 64 KiB) and a 62 KiB *tail*, so every datagram up to
//! 65,536 bytes arrives whole in the one syscall, wherever it sits in the batch. Heads and
//! tails are one private anonymous mapping of 2 MiB *address space*; the kernel backs a page
//! only when it is first written. With datagrams up to 2 KiB (DNS, QUIC, WireGuard, games,
//! anything under the MTU) only the heads are ever touched: 64 KiB resident, as much as the
//! single 64 KiB buffer of the one-datagram-per-syscall loop before. A tail page becomes
//! resident once a datagram reaching into it has arrived and then stays (worst case, once
//! 64 KiB datagrams have landed in every slot: 2 MiB).
//!
//! Rejected alternatives: slots of 2 KiB with `MSG_TRUNC` detection cannot forward the large
//! datagram (the kernel discards the rest of a truncated datagram when it dequeues it; getting
//! it intact would need a `MSG_PEEK` per datagram), and 32 x 64 KiB from the allocator is
//! resident as soon as the allocator touches it (calloc from a reused heap region clears it).
//!
//! UDP offload: with `UDP_GRO` on a socket ([`enable_gro`]) the kernel may hand one slot a
//! *GRO batch*, several datagrams of one sender back to back, all of the size its cmsg gives
//! (the last one may be shorter); [`RecvBatch::datagrams`] cuts a slot into its datagrams at
//! exactly those boundaries. On send, consecutive datagrams of one size (the last of a run may
//! be shorter) go out as one message with a `UDP_SEGMENT` cmsg ([`gso_runs`]), which the
//! kernel (or the receiver's GRO) cuts at the same boundaries again, so a datagram is never
//! merged with or split from another. Where the kernel lacks either, the socket option fails
//! and that side stays one datagram per message; a GSO send the kernel refuses (EINVAL, EIO:
//! a segment over the path MTU, no checksum offload) is sent again datagram by datagram.
//!
//! `recvmmsg`, `sendmmsg` and the cmsgs go straight through libc (rustix 1.x wraps
//! `sendmmsg` but neither `recvmmsg` nor the UDP cmsgs).

use std::alloc::Layout;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};


/// Slots per `recvmmsg` (each a datagram, or a GRO batch of up to 64 KiB).
pub(crate) const BATCH: usize = 32;
/// Datagrams per GSO message: the kernel's `UDP_MAX_SEGMENTS` (64 on older kernels).
const MAX_SEGS: usize = 64;
/// Payload of one GSO message: one UDP datagram's worth over IPv4.
const MAX_GSO_BYTES: usize = 65_507;
/// Socket option and cmsg numbers of `SOL_UDP` (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Room for one cmsg of an int, 8-aligned (CMSG_SPACE(4) = 24 on 64-bit, 16 on 32-bit).
type CmsgBuf = [u64; 4];
/// Head of a slot: datagrams up to this size touch nothing else.
const HEAD: usize = 2048;
/// Capacity of a slot (head + tail): larger than any UDP payload (65,507 over IPv4, 65,527
/// over IPv6 without jumbograms).
const SLOT: usize = 65_536;
const TAIL: usize = SLOT - HEAD;
const MAP_LEN: usize = BATCH * SLOT;

/// A private anonymous mapping of `MAP_LEN` bytes, owned like a `Box<[u8]>`.
struct Mapping(NonNull<u8>);

// SAFETY: the mapping is plain memory owned by this value alone (nothing else holds the
// pointer); `RecvBatch` reads it only through `&self` and lets the kernel write it only
// through `&mut self`, so the usual borrow rules make sharing and sending it sound.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`: shared access is read-only.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new() -> Mapping {
        // SAFETY: asks for a fresh anonymous mapping at an address of the kernel's choice; no
        // existing memory is affected. MAP_NORESERVE: pages are only backed when written.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                MAP_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        match NonNull::new(p.cast::<u8>()) {
            Some(p) if p.as_ptr() != libc::MAP_FAILED.cast() => Mapping(p),
            // Out of address space: fail like any other allocation would.
            _ => std::alloc::handle_alloc_error(Layout::from_size_align(MAP_LEN, 4096).unwrap()),
        }
    }

    fn head(&self, i: usize) -> *mut u8 {
        debug_assert!(i < BATCH);
        self.0.as_ptr().wrapping_add(i * HEAD)
    }

    fn tail(&self, i: usize) -> *mut u8 {
        debug_assert!(i < BATCH);
        self.0.as_ptr().wrapping_add(BATCH * HEAD + i * TAIL)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`, which nothing references any
        // more (`&mut self`, and slices handed out borrow `self`).
        unsafe { libc::munmap(self.0.as_ptr().cast(), MAP_LEN) };
    }
}

/// Ask the kernel to hand this UDP socket GRO batches (`UDP_GRO`); false where it cannot.
pub(crate) fn enable_gro(fd: BorrowedFd<'_>) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1)
}

/// Give a UDP socket a receive buffer of `bytes` (the kernel doubles it for its bookkeeping),
/// past `net.core.rmem_max` where the process may (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), else up
/// to that limit. 0 leaves the kernel's default. Returns the buffer the socket has.
pub(crate) fn set_rcvbuf(fd: BorrowedFd<'_>, bytes: usize) -> usize {
    let want = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if want > 0 && !setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want) {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want);
    }
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid fd; v and len are valid for the kernel to write one int.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, (&mut v as *mut libc::c_int).cast(), &mut len) };
    if rc == 0 { v.max(0) as usize } else { 0 }
}

/// Whether this UDP socket can send with `UDP_SEGMENT` (setting the socket's default segment
/// size to 0, "none", succeeds exactly where the kernel knows the option).
pub(crate) fn gso_supported(fd: BorrowedFd<'_>) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT, 0)
}

fn setsockopt_int(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: a valid fd and a 4-byte option value that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// One datagram inside a [`RecvBatch`]: `len` bytes at `off` of slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dgram {
    slot: u16,
    off: u32,
    len: u32,
}

impl Dgram {
    pub fn len(&self) -> usize {
        self.len as usize
    }
}

/// Runs of `sizes` that can go out as one GSO message each, as (count, segment size): all of
/// one size but the last, which may be shorter; at most [`MAX_SEGS`] and [`MAX_GSO_BYTES`];
/// an empty datagram is always a message of its own. Pure.
pub(crate) fn gso_runs(sizes: &[usize], out: &mut Vec<(usize, usize)>) {
    out.clear();
    let mut i = 0;
    while i < sizes.len() {
        let g = sizes[i];
        let (mut n, mut bytes) = (1, g);
        if g > 0 {
            while i + n < sizes.len() && n < MAX_SEGS {
                let next = sizes[i + n];
                if next == 0 || next > g || bytes + next > MAX_GSO_BYTES {
                    break;
                }
                n += 1;
                bytes += next;
                if next < g {
                    break; // a shorter datagram ends the run
                }
            }
        }
        out.push((n, g));
        i += n;
    }
}

/// Up to [`BATCH`] received slots (datagrams or GRO batches) and their source addresses.
pub(crate) struct RecvBatch {
    mem: Mapping,
    names: [libc::sockaddr_storage; BATCH],
    ctl: [CmsgBuf; BATCH],
    lens: [usize; BATCH],
    /// Segment size of a GRO batch in the slot (0: one datagram).
    gso: [usize; BATCH],
    from: [Option<SocketAddr>; BATCH],
    count: usize,
}

impl RecvBatch {
    pub fn new() -> RecvBatch {
        RecvBatch {
            mem: Mapping::new(),
            // SAFETY: sockaddr_storage is a plain C struct of integers; all zeroes is valid.
            names: unsafe { mem::zeroed() },
            ctl: [[0; 4]; BATCH],
            lens: [0; BATCH],
            gso: [0; BATCH],
            from: [None; BATCH],
            count: 0,
        }
    }

    /// One non-blocking `recvmmsg`: up to [`BATCH`] slots. `WouldBlock` when none is queued
    /// (so that tokio's `try_io` clears the readiness).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.count = 0;
        let mut iov: [[libc::iovec; 2]; BATCH] = std::array::from_fn(|i| {
            [
                libc::iovec { iov_base: self.mem.head(i).cast(), iov_len: HEAD },
                libc::iovec { iov_base: self.mem.tail(i).cast(), iov_len: TAIL },
            ]
        });
        let names = self.names.as_mut_ptr();
        let ctl = self.ctl.as_mut_ptr();
        let mut msgs: [libc::mmsghdr; BATCH] = std::array::from_fn(|i| {
            // SAFETY: mmsghdr is a plain C struct (integers and raw pointers); all zeroes is a
            // valid value (null pointers with zero lengths).
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_name = names.wrapping_add(i).cast();
            m.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov[i].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            m.msg_hdr.msg_control = ctl.wrapping_add(i).cast();
            m.msg_hdr.msg_controllen = mem::size_of::<CmsgBuf>() as _;
            m
        });
        // SAFETY: every msgs[i] points to names[i] (with its size), to ctl[i] (with its size)
        // and to iov[i], whose two iovecs are disjoint, in-bounds ranges of our mapping (HEAD
        // and TAIL bytes of slot i); all of them outlive the call, and `&mut self` means no
        // slice of the mapping is borrowed while the kernel writes into it. The kernel writes
        // at most iov_len bytes per iovec, msg_namelen bytes per name and msg_controllen bytes
        // of control data; the timeout pointer may be null.
        let r = unsafe {
            libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), BATCH as _, libc::MSG_DONTWAIT as _, ptr::null_mut())
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = r as usize;
        for (i, m) in msgs.iter().enumerate().take(n) {
            self.lens[i] = (m.msg_len as usize).min(SLOT);
            self.from[i] = sockaddr(&self.names[i], m.msg_hdr.msg_namelen);
            self.gso[i] = gro_size(&m.msg_hdr).filter(|&g| g > 0 && g < self.lens[i]).unwrap_or(0);
        }
        self.count = n;
        Ok(n)
    }

    /// Bytes in slot `i` (one datagram, or all of a GRO batch).
    pub fn size(&self, i: usize) -> usize {
        assert!(i < self.count);
        self.lens[i]
    }

    /// Source address of slot `i` (None only for an address family other than IP).
    pub fn from(&self, i: usize) -> Option<SocketAddr> {
        assert!(i < self.count);
        self.from[i]
    }

    /// The datagrams of slot `i`: the slot whole, or a GRO batch cut every segment size (the
    /// last one the rest).
    pub fn datagrams(&self, i: usize) -> impl Iterator<Item = Dgram> {
        let len = self.size(i);
        let step = if self.gso[i] == 0 { len.max(1) } else { self.gso[i] };
        (0..len.max(1)).step_by(step).map(move |off| Dgram { slot: i as u16, off: off as u32, len: (len - off.min(len)).min(step) as u32 })
    }

    /// Slot `i` as its head and tail parts (the tail is empty up to 2 KiB).
    pub fn parts(&self, i: usize) -> (&[u8], &[u8]) {
        let len = self.size(i);
        // SAFETY: head(i) and tail(i) start disjoint ranges of HEAD and TAIL bytes inside the
        // mapping, and the lengths are capped to those; mapped memory is always initialised
        // (zero pages or what the kernel wrote). The slices borrow `self`, so no `recv` can
        // write meanwhile.
        unsafe {
            (
                std::slice::from_raw_parts(self.mem.head(i), len.min(HEAD)),
                std::slice::from_raw_parts(self.mem.tail(i), len.saturating_sub(HEAD)),
            )
        }
    }

    /// The bytes of datagram `d` as up to two pieces (it may straddle the head and the tail).
    fn pieces(&self, d: Dgram) -> [&[u8]; 2] {
        let (head, tail) = self.parts(d.slot as usize);
        let (off, end) = (d.off as usize, d.off as usize + d.len as usize);
        let h = &head[off.min(HEAD)..end.min(HEAD)];
        let t = &tail[off.max(HEAD) - HEAD..end.max(HEAD) - HEAD];
        [h, t]
    }

    /// Send `dgrams` (datagrams of this batch) in that order with `sendmmsg`: to `to`, or with
    /// `None` on a connected socket; with `gso`, runs of one size go as one `UDP_SEGMENT`
    /// message each ([`gso_runs`]). Never waits. A full socket buffer (`EAGAIN`) drops the
    /// message it hit and all after it (as one `send` per datagram would have); any other
    /// error drops only the message it hit (a GSO message the kernel refuses is sent again
    /// one datagram per message first). Straight on the fd rather than through tokio's
    /// `try_send*`, which refuse until the reactor has reported the socket writable once (that
    /// would drop the first datagram of a new session).
    pub fn send(&self, fd: BorrowedFd<'_>, to: Option<SocketAddr>, dgrams: &[Dgram], gso: bool) -> Sent {
        let mut runs = Vec::new();
        if gso {
            let sizes: Vec<usize> = dgrams.iter().map(|d| d.len as usize).collect();
            gso_runs(&sizes, &mut runs);
        } else {
            runs.extend(dgrams.iter().map(|d| (1, d.len as usize)));
        }
        let mut out = Sent::default();
        let mut first = 0; // first datagram of runs[r]
        let mut r = 0;
        let addr = to.map(SockAddr::from);
        while r < runs.len() {
            let (k, res) = self.send_runs(fd, addr.as_ref(), &dgrams[first..], &runs[r..]);
            for &(n, _) in &runs[r..r + k] {
                out.datagrams += n;
                out.bytes += dgrams[first..first + n].iter().map(|d| d.len as u64).sum::<u64>();
                first += n;
            }
            r += k;
            let Some(e) = res else { continue };
            let (n, _) = runs[r];
            if e == libc::EAGAIN {
                out.dropped += runs[r..].iter().map(|&(n, _)| n).sum::<usize>();
                break;
            }
            if n > 1 && matches!(e, libc::EINVAL | libc::EIO | libc::EMSGSIZE) {
                // The kernel would not segment this run: one datagram per message.
                let again = self.send(fd, to, &dgrams[first..first + n], false);
                out.datagrams += again.datagrams;
                out.bytes += again.bytes;
                out.dropped += again.dropped;
            } else {
                out.dropped += n;
            }
            first += n;
            r += 1;
        }
        out
    }

    /// One `sendmmsg` of up to [`BATCH`] messages, `runs` over `dgrams`: how many messages
    /// went, and the error that stopped the first one that did not (None: all of them went).
    fn send_runs(&self, fd: BorrowedFd<'_>, to: Option<&SockAddr>, dgrams: &[Dgram], runs: &[(usize, usize)]) -> (usize, Option<i32>) {
        let runs = &runs[..runs.len().min(BATCH)];
        let ndg: usize = runs.iter().map(|&(n, _)| n).sum();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(ndg * 2);
        for &d in &dgrams[..ndg] {
            for p in self.pieces(d) {
                if !p.is_empty() {
                    iov.push(libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() });
                }
            }
        }
        let mut ctl: Vec<CmsgBuf> = vec![[0; 4]; runs.len()];
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(runs.len());
        let (mut d0, mut iov0) = (0usize, 0usize);
        for (j, &(n, g)) in runs.iter().enumerate() {
            let pieces: usize =
                dgrams[d0..d0 + n].iter().map(|&d| self.pieces(d).iter().filter(|p| !p.is_empty()).count()).sum();
            // SAFETY: see `recv`: all zeroes is a valid mmsghdr.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            if let Some(a) = to {
                m.msg_hdr.msg_name = (&a.0 as *const libc::sockaddr_storage).cast_mut().cast();
                m.msg_hdr.msg_namelen = a.1;
            }
            m.msg_hdr.msg_iov = iov[iov0..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = pieces as _;
            if n > 1 {
                let buf = ctl[j].as_mut_ptr().cast::<u8>();
                m.msg_hdr.msg_control = buf.cast();
                // SAFETY: CMSG_SPACE/LEN are pure arithmetic.
                m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as _;
                // SAFETY: msg_control points to ctl[j], 32 bytes, 8-aligned, zeroed: room for one
                // cmsg header and a u16 (CMSG_SPACE(2) <= 24); CMSG_FIRSTHDR returns its start.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
                    ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), g as u16);
                }
            }
            msgs.push(m);
            d0 += n;
            iov0 += pieces;
        }
        // SAFETY: every msgs[j] points to `pieces` iovecs of `iov` (each a live slice of this
        // batch, which `&self` keeps from being written), to its own cmsg buffer in `ctl` and
        // to `to`'s sockaddr; all outlive the call. The kernel only reads them (and writes
        // msg_len).
        let r = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as _, libc::MSG_DONTWAIT) };
        if r < 0 {
            return (0, Some(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)));
        }
        let k = r as usize;
        if k == msgs.len() {
            (k, None)
        } else if k == 0 {
            (0, Some(libc::EAGAIN))
        } else {
            // Stopped early without an error: the next call (from message k) reports it.
            (k, None)
        }
    }
}

/// A socket address in the C form `sendmmsg` wants.
struct SockAddr(libc::sockaddr_storage, libc::socklen_t);

impl From<SocketAddr> for SockAddr {
    fn from(a: SocketAddr) -> SockAddr {
        // SAFETY: all zeroes is a valid sockaddr_storage.
        let mut st: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = match a {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let s = unsafe { &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                s.sin_family = libc::AF_INET as _;
                s.sin_port = a.port().to_be();
                s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                // SAFETY: as above, for sockaddr_in6.
                let s = unsafe { &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
                s.sin6_family = libc::AF_INET6 as _;
                s.sin6_port = a.port().to_be();
                s.sin6_addr.s6_addr = a.ip().octets();
                s.sin6_flowinfo = a.flowinfo();
                s.sin6_scope_id = a.scope_id();
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        SockAddr(st, len as libc::socklen_t)
    }
}

/// The segment size of a GRO batch from the `UDP_GRO` cmsg of a received message, if any.
fn gro_size(h: &libc::msghdr) -> Option<usize> {
    if h.msg_controllen == 0 || h.msg_control.is_null() {
        return None;
    }
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed cmsgs;
    // CMSG_FIRSTHDR/NXTHDR stay inside them and CMSG_DATA of a UDP_GRO cmsg holds an int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let g = ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(g).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// What [`RecvBatch::send`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub datagrams: usize,
    pub bytes: u64,
    pub dropped: usize,
}

fn sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match s.ss_family as libc::c_int {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says sockaddr_in, the kernel wrote all of it, and
            // sockaddr_storage is large and aligned enough for any sockaddr.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            // As std does: flowinfo and scope id as the kernel gave them.
            Some(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    /// The datagrams of `slots`, in order.
    fn dgrams(batch: &RecvBatch, slots: &[usize]) -> Vec<Dgram> {
        slots.iter().flat_map(|&i| batch.datagrams(i)).collect()
    }

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        (a, b)
    }

    #[test]
    fn receives_a_batch_with_sources_and_large_datagrams_whole() {
        let (a, b) = pair();
        let big: Vec<u8> = (0..65_507u32).map(|i| (i * 7 + 3) as u8).collect();
        a.send_to(b"one", b.local_addr().unwrap()).unwrap();
        a.send_to(&big, b.local_addr().unwrap()).unwrap();
        a.send_to(&big[..2049], b.local_addr().unwrap()).unwrap();
        a.send_to(b"", b.local_addr().unwrap()).unwrap();
        let mut batch = RecvBatch::new();
        assert_eq!(batch.recv(b.as_fd()).unwrap(), 4);
        let whole = |i| {
            let (h, t) = batch.parts(i);
            [h, t].concat()
        };
        assert_eq!(whole(0), b"one");
        assert_eq!(whole(1), big);
        assert_eq!(whole(2), &big[..2049]);
        assert_eq!(batch.size(3), 0);
        assert_eq!(batch.from(0), Some(a.local_addr().unwrap()));
        let e = batch.recv(b.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn sends_a_selection_to_an_address_and_on_a_connected_socket() {
        let (a, b) = pair();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let size = |i: usize| 100 + i * 200; // 100 .. 6300 bytes: heads only and heads + tails
        for i in 0..BATCH {
            a.send_to(&vec![i as u8; size(i)], b.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new();
        assert_eq!(batch.recv(b.as_fd()).unwrap(), BATCH);
        let picks: Vec<usize> = (0..BATCH).filter(|i| i % 3 != 1).collect();
        let sent = batch.send(b.as_fd(), Some(c.local_addr().unwrap()), &dgrams(&batch, &picks), false);
        let bytes: u64 = picks.iter().map(|&i| size(i) as u64).sum();
        assert_eq!(sent, Sent { datagrams: picks.len(), bytes, dropped: 0 });
        let mut buf = vec![0u8; 65_536];
        for &i in &picks {
            let (n, from) = c.recv_from(&mut buf).unwrap();
            assert_eq!(from, b.local_addr().unwrap());
            assert_eq!(&buf[..n], &vec![i as u8; size(i)][..]);
        }
        b.connect(a.local_addr().unwrap()).unwrap();
        let sent = batch.send(b.as_fd(), None, &dgrams(&batch, &[25, 0]), true);
        assert_eq!(sent.datagrams, 2);
        assert_eq!(a.recv(&mut buf).unwrap(), size(25));
        assert_eq!(a.recv(&mut buf).unwrap(), size(0));
        assert_eq!(batch.send(b.as_fd(), None, &[], true), Sent::default());
    }

    #[test]
    fn a_full_socket_buffer_drops_instead_of_blocking() {
        let (a, b) = pair();
        for _ in 0..BATCH {
            a.send_to(&[1u8; 3000], b.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new();
        assert_eq!(batch.recv(b.as_fd()).unwrap(), BATCH);
        // Loopback UDP never reports a full buffer (the receiver drops instead); a unix
        // datagram pair with a small send buffer whose reader never reads does (EAGAIN).
        let (tx, _rx) = std::os::unix::net::UnixDatagram::pair().unwrap();
        rustix::net::sockopt::set_socket_send_buffer_size(&tx, 16_384).unwrap();
        let all: Vec<usize> = (0..BATCH).collect();
        let first = batch.send(tx.as_fd(), None, &dgrams(&batch, &all), false);
        assert!(first.datagrams > 0 && first.dropped > 0, "{first:?}");
        assert_eq!(first.datagrams + first.dropped, BATCH);
        assert_eq!(first.bytes, first.datagrams as u64 * 3000);
        let again = batch.send(tx.as_fd(), None, &dgrams(&batch, &all), false);
        assert_eq!(again, Sent { datagrams: 0, bytes: 0, dropped: BATCH });
    }

    #[test]
    fn a_receive_buffer_is_what_was_asked_and_holds_a_burst() {
        let (a, b) = pair();
        let default = set_rcvbuf(b.as_fd(), 0);
        assert!(default > 0);
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
        let forced = unsafe { libc::geteuid() } == 0;
        let want = 4 << 20;
        let got = set_rcvbuf(b.as_fd(), want);
        // The kernel reports twice the size asked (its bookkeeping); without CAP_NET_ADMIN the
        // size stops at rmem_max.
        let expect = if forced { want } else { want.min(rmem_max) };
        assert_eq!(got, 2 * expect, "default {default}, rmem_max {rmem_max}");
        // 1,000 datagrams of 1,400 bytes sent before the reader runs all arrive (the default
        // buffer of ~208 KiB holds about 90 of them).
        if forced {
            for i in 0..1000u32 {
                let mut d = [0u8; 1400];
                d[..4].copy_from_slice(&i.to_be_bytes());
                a.send_to(&d, b.local_addr().unwrap()).unwrap();
            }
            let mut batch = RecvBatch::new();
            let mut n = 0u32;
            while let Ok(k) = batch.recv(b.as_fd()) {
                for i in 0..k {
                    assert_eq!(batch.parts(i).0[..4], n.to_be_bytes(), "in order, none lost");
                    n += 1;
                }
            }
            assert_eq!(n, 1000);
        }
    }

    #[test]
    fn gso_runs_are_one_size_with_a_shorter_last_and_bounded() {
        let table: &[(&[usize], &[(usize, usize)])] = &[
            (&[], &[]),
            (&[1400], &[(1, 1400)]),
            (&[1400, 1400, 1400], &[(3, 1400)]),
            // a shorter datagram ends a run; a longer one starts the next
            (&[1400, 1400, 500, 1400, 1400], &[(3, 1400), (2, 1400)]),
            (&[500, 1400], &[(1, 500), (1, 1400)]),
            // an empty datagram is a message of its own
            (&[200, 0, 200, 200], &[(1, 200), (1, 0), (2, 200)]),
            (&[0, 0], &[(1, 0), (1, 0)]),
            // at most MAX_SEGS datagrams and MAX_GSO_BYTES per message
            (&[10; 70], &[(64, 10), (6, 10)]),
            (&[30_000, 30_000, 30_000], &[(2, 30_000), (1, 30_000)]),
            (&[40_000, 30_000], &[(1, 40_000), (1, 30_000)]),
        ];
        let mut out = Vec::new();
        for (sizes, want) in table {
            gso_runs(sizes, &mut out);
            assert_eq!(&out[..], *want, "{sizes:?}");
        }
    }

    /// Mixed sizes sent with GSO from `b`: a receiver without GRO sees every datagram on its
    /// own, one with GRO gets batches whose cut at the gso_size cmsg gives the same datagrams
    /// in the same order, and forwarding a GRO batch again (GSO, or without) keeps them.
    #[test]
    fn gso_sends_and_gro_batches_keep_every_datagram_boundary() {
        let sizes = [1400, 1400, 1400, 500, 1400, 1400, 0, 200, 200, 3000, 3000, 17, 1400];
        let payload = |i: usize| -> Vec<u8> { (0..sizes[i]).map(|j| (i * 31 + j * 7) as u8).collect() };
        let (a, b) = pair();
        for i in 0..sizes.len() {
            a.send_to(&payload(i), b.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new();
        assert_eq!(batch.recv(b.as_fd()).unwrap(), sizes.len(), "a peer without GSO: one datagram per slot");
        let all: Vec<usize> = (0..sizes.len()).collect();
        assert!(gso_supported(b.as_fd()));

        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        let gro = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(enable_gro(gro.as_fd()));
        for to in [&plain, &gro] {
            let sent = batch.send(b.as_fd(), Some(to.local_addr().unwrap()), &dgrams(&batch, &all), true);
            assert_eq!((sent.datagrams, sent.dropped), (sizes.len(), 0));
            assert_eq!(sent.bytes, sizes.iter().sum::<usize>() as u64);
        }
        let mut buf = vec![0u8; 65_536];
        plain.set_nonblocking(true).unwrap();
        for i in 0..sizes.len() {
            let n = plain.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &payload(i)[..], "datagram {i} without GRO");
        }
        assert!(plain.recv(&mut buf).is_err(), "no more datagrams");

        let mut got = RecvBatch::new();
        let slots = got.recv(gro.as_fd()).unwrap();
        assert!(slots < sizes.len(), "loopback hands GSO messages to a GRO socket whole ({slots} slots)");
        let cut = dgrams(&got, &(0..slots).collect::<Vec<_>>());
        let whole = |b: &RecvBatch, d: Dgram| b.pieces(d).concat();
        assert_eq!(cut.len(), sizes.len());
        for (i, &d) in cut.iter().enumerate() {
            assert_eq!(whole(&got, d), payload(i), "datagram {i} cut from a GRO batch");
        }

        // A GRO batch forwarded again, with GSO and without: the same datagrams arrive.
        for gso in [true, false] {
            let sent = got.send(gro.as_fd(), Some(plain.local_addr().unwrap()), &cut, gso);
            assert_eq!((sent.datagrams, sent.dropped), (sizes.len(), 0), "gso={gso}");
            for i in 0..sizes.len() {
                let n = plain.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &payload(i)[..], "datagram {i} forwarded from a GRO batch, gso={gso}");
            }
        }
    }

    #[test]
    fn a_gso_message_the_kernel_refuses_is_sent_datagram_by_datagram() {
        // The kernel refuses GSO (EINVAL) on a socket without UDP checksums (SO_NO_CHECK),
        // as it does a segment over the path MTU; plain datagrams still go.
        let (a, b) = pair();
        for i in 0..4u8 {
            a.send_to(&[i; 1000], b.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new();
        assert_eq!(batch.recv(b.as_fd()).unwrap(), 4);
        let one: libc::c_int = 1;
        // SAFETY: a valid fd and a 4-byte option value that outlives the call.
        let rc = unsafe {
            libc::setsockopt(b.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, (&one as *const libc::c_int).cast(), 4)
        };
        assert_eq!(rc, 0);
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent = batch.send(b.as_fd(), Some(c.local_addr().unwrap()), &dgrams(&batch, &[0, 1, 2, 3]), true);
        assert_eq!(sent, Sent { datagrams: 4, bytes: 4000, dropped: 0 });
        let mut buf = [0u8; 4096];
        for i in 0..4u8 {
            let n = c.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 1000][..]);
        }
    }
}
