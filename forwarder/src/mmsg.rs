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
//! `rustix` 1.x wraps `sendmmsg` (used here) but not `recvmmsg` (libc).

use std::alloc::Layout;
use std::io::{self, IoSlice};
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};

use rustix::io::Errno;
use rustix::net::addr::SocketAddrArg;
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags};

/// Datagrams per `recvmmsg` / `sendmmsg`.
pub(crate) const BATCH: usize = 32;
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

/// Up to [`BATCH`] received datagrams and their source addresses.
pub(crate) struct RecvBatch {
    mem: Mapping,
    names: [libc::sockaddr_storage; BATCH],
    lens: [usize; BATCH],
    from: [Option<SocketAddr>; BATCH],
    count: usize,
}

impl RecvBatch {
    pub fn new() -> RecvBatch {
        RecvBatch {
            mem: Mapping::new(),
            // SAFETY: sockaddr_storage is a plain C struct of integers; all zeroes is valid.
            names: unsafe { mem::zeroed() },
            lens: [0; BATCH],
            from: [None; BATCH],
            count: 0,
        }
    }

    /// One non-blocking `recvmmsg`: up to [`BATCH`] datagrams. `WouldBlock` when none is
    /// queued (so that tokio's `try_io` clears the readiness).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.count = 0;
        let mut iov: [[libc::iovec; 2]; BATCH] = std::array::from_fn(|i| {
            [
                libc::iovec { iov_base: self.mem.head(i).cast(), iov_len: HEAD },
                libc::iovec { iov_base: self.mem.tail(i).cast(), iov_len: TAIL },
            ]
        });
        let names = self.names.as_mut_ptr();
        let mut msgs: [libc::mmsghdr; BATCH] = std::array::from_fn(|i| {
            // SAFETY: mmsghdr is a plain C struct (integers and raw pointers); all zeroes is a
            // valid value (null pointers with zero lengths).
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_name = names.wrapping_add(i).cast();
            m.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov[i].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            m
        });
        // SAFETY: every msgs[i] points to names[i] (with its size) and to iov[i], whose two
        // iovecs are disjoint, in-bounds ranges of our mapping (HEAD and TAIL bytes of slot
        // i); all of them outlive the call, and `&mut self` means no slice of the mapping is
        // borrowed while the kernel writes into it. The kernel writes at most iov_len bytes
        // per iovec and msg_namelen bytes per name; the timeout pointer may be null.
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
        }
        self.count = n;
        Ok(n)
    }

    /// Size of datagram `i`.
    pub fn size(&self, i: usize) -> usize {
        assert!(i < self.count);
        self.lens[i]
    }

    /// Source address of datagram `i` (None only for an address family other than IP).
    pub fn from(&self, i: usize) -> Option<SocketAddr> {
        assert!(i < self.count);
        self.from[i]
    }

    /// Datagram `i` as its head and tail parts (the tail is empty up to 2 KiB).
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

    /// Send the datagrams `slots` (indices into this batch, at most [`BATCH`]) in that order
    /// with `sendmmsg`: to `to`, or with `None` on a connected socket. Never waits. A full
    /// socket buffer (`EAGAIN`) drops the datagram it hit and all after it (as one `send` per
    /// datagram would have); any other error drops only the datagram it hit and the rest are
    /// sent on. A short count without an error (the kernel stopped at a failing datagram and
    /// kept its error to itself) sends on from that datagram. Straight on the fd rather than
    /// through tokio's `try_send*`, which refuse until the reactor has reported the socket
    /// writable once (that would drop the first datagram of a new session).
    pub fn send(&self, fd: BorrowedFd<'_>, to: Option<SocketAddr>, slots: &[usize]) -> Sent {
        assert!(slots.len() <= BATCH);
        let to = to.map(|a| a.as_any());
        let mut out = Sent::default();
        let mut done = 0;
        while done < slots.len() {
            let todo = &slots[done..];
            let iov: [[IoSlice<'_>; 2]; BATCH] = std::array::from_fn(|k| match todo.get(k) {
                Some(&i) => {
                    let (head, tail) = self.parts(i);
                    [IoSlice::new(head), IoSlice::new(tail)]
                }
                None => [IoSlice::new(&[]), IoSlice::new(&[])],
            });
            let mut ctl: [SendAncillaryBuffer<'_, '_, '_>; BATCH] = std::array::from_fn(|_| Default::default());
            let mut pairs = iov.iter().zip(ctl.iter_mut());
            let mut msgs: [MMsgHdr<'_>; BATCH] = std::array::from_fn(|_| {
                let (iov, ctl) = pairs.next().expect("BATCH pairs");
                let iov = if iov[1].is_empty() { &iov[..1] } else { &iov[..] };
                match &to {
                    Some(a) => MMsgHdr::new_with_addr(a, iov, ctl),
                    None => MMsgHdr::new(iov, ctl),
                }
            });
            match rustix::net::sendmmsg(fd, &mut msgs[..todo.len()], SendFlags::DONTWAIT) {
                Ok(0) => {
                    out.dropped += todo.len();
                    break;
                }
                Ok(k) => {
                    out.datagrams += k;
                    out.bytes += msgs[..k].iter().map(|m| m.bytes_sent() as u64).sum::<u64>();
                    done += k;
                }
                Err(Errno::AGAIN) => {
                    out.dropped += todo.len();
                    break;
                }
                Err(_) => {
                    out.dropped += 1;
                    done += 1;
                }
            }
        }
        out
    }
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
        let sent = batch.send(b.as_fd(), Some(c.local_addr().unwrap()), &picks);
        let bytes: u64 = picks.iter().map(|&i| size(i) as u64).sum();
        assert_eq!(sent, Sent { datagrams: picks.len(), bytes, dropped: 0 });
        let mut buf = vec![0u8; 65_536];
        for &i in &picks {
            let (n, from) = c.recv_from(&mut buf).unwrap();
            assert_eq!(from, b.local_addr().unwrap());
            assert_eq!(&buf[..n], &vec![i as u8; size(i)][..]);
        }
        b.connect(a.local_addr().unwrap()).unwrap();
        let sent = batch.send(b.as_fd(), None, &[25, 0]);
        assert_eq!(sent.datagrams, 2);
        assert_eq!(a.recv(&mut buf).unwrap(), size(25));
        assert_eq!(a.recv(&mut buf).unwrap(), size(0));
        assert_eq!(batch.send(b.as_fd(), None, &[]), Sent::default());
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
        let first = batch.send(tx.as_fd(), None, &all);
        assert!(first.datagrams > 0 && first.dropped > 0, "{first:?}");
        assert_eq!(first.datagrams + first.dropped, BATCH);
        assert_eq!(first.bytes, first.datagrams as u64 * 3000);
        let again = batch.send(tx.as_fd(), None, &all);
        assert_eq!(again, Sent { datagrams: 0, bytes: 0, dropped: BATCH });
    }
}
