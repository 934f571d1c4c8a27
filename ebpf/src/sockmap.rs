//! Loader of `sockmap.bpf.c`: the sk_skb stream verdict program that moves the bytes of an
//! established forwarded TCP connection from one socket to the other inside the kernel.
//! [`Redirector::link`] puts both sockets of a connection in the program's sockhash (each under
//! the other's cookie), [`Redirector::unlink`] takes them out. See docs/forwarder.md.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::maps::{MapData, SockHash};
use aya::programs::SkSkb;
use aya::{Ebpf, EbpfLoader};

use crate::{AlignedAs, QosError};

static OBJECT: &AlignedAs<u64, [u8]> =
    &AlignedAs { _align: [], bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o")) };

const MAP: &str = "fwc_peers";
const PROG: &str = "fwc_redirect";

/// The loaded program and its sockhash (one per forwarder process; nothing is pinned, so it
/// goes away with the process).
pub struct Redirector {
    peers: SockHash<MapData, u64>,
    // Keeps the program (and its attachment to the map) alive.
    _ebpf: Ebpf,
}

impl std::fmt::Debug for Redirector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redirector")
    }
}

/// The cookies under which a linked pair sits in the map (for [`Redirector::unlink`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linked {
    pub a: u64,
    pub b: u64,
}

/// The kernel's cookie of a socket (`SO_COOKIE`).
pub fn cookie(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write a u64 into.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_COOKIE, (&mut v as *mut u64).cast(), &mut len)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v)
}

impl Redirector {
    /// Load and verify the program and attach it to its map as the stream verdict, with room
    /// for `pairs` connections (two sockets each). Needs CAP_BPF and CAP_NET_ADMIN (root).
    pub fn load(pairs: u32) -> Result<Redirector, QosError> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(MAP, pairs.saturating_mul(2).max(2))
            .load(&OBJECT.bytes)
            .map_err(|e| QosError(format!("loading the sockmap object: {e}")))?;
        let peers: SockHash<MapData, u64> = ebpf
            .take_map(MAP)
            .ok_or_else(|| QosError(format!("map {MAP} missing from the sockmap object")))?
            .try_into()
            .map_err(|e| QosError(format!("map {MAP}: {e}")))?;
        let map_fd = peers.fd().try_clone().map_err(|e| QosError(format!("map {MAP}: {e}")))?;
        let prog: &mut SkSkb = ebpf
            .program_mut(PROG)
            .ok_or_else(|| QosError(format!("program {PROG} missing from the sockmap object")))?
            .try_into()
            .map_err(|e| QosError(format!("program {PROG}: {e}")))?;
        prog.load().map_err(|e| QosError(format!("verifier rejected {PROG}: {e:?}")))?;
        prog.attach(&map_fd).map_err(|e| QosError(format!("attaching {PROG} to {MAP}: {e}")))?;
        Ok(Redirector { peers, _ebpf: ebpf })
    }

    /// From now on, bytes arriving on `a` leave through `b` and the other way round. Bytes
    /// already queued on either socket are not moved until the socket's data-ready callback
    /// runs again (the caller kicks it, see the forwarder). Both must be established TCP.
    pub fn link(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<Linked, QosError> {
        let l = Linked {
            a: cookie(a).map_err(|e| QosError(format!("SO_COOKIE: {e}")))?,
            b: cookie(b).map_err(|e| QosError(format!("SO_COOKIE: {e}")))?,
        };
        self.peers.insert(l.a, b.as_fd(), 0).map_err(|e| QosError(format!("sockhash insert: {e}")))?;
        if let Err(e) = self.peers.insert(l.b, a.as_fd(), 0) {
            let _ = self.peers.remove(&l.a);
            return Err(QosError(format!("sockhash insert: {e}")));
        }
        Ok(l)
    }

    /// Take a pair out of the map (a socket that is closed leaves it by itself).
    pub fn unlink(&mut self, l: Linked) {
        let _ = self.peers.remove(&l.a);
        let _ = self.peers.remove(&l.b);
    }
}
