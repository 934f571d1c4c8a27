//! Shared helpers of the fwc-qos integration tests: a pin root that is removed on drop, packet
//! builders, and running a closure inside a network namespace.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

/// A private pin root under /sys/fs/bpf; everything pinned there (and attached through it in
/// the namespace given to [`PinRoot::in_netns`]) is removed on drop, also when a test panics.
pub struct PinRoot {
    pub path: PathBuf,
    pub netns: Option<String>,
}

impl PinRoot {
    pub fn new(tag: &str) -> PinRoot {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/sys/fs/bpf/fwc-t-{tag}-{}-{n}", std::process::id()));
        let _ = fwc_qos::detach_all(&path);
        PinRoot { path, netns: None }
    }
}

impl Drop for PinRoot {
    fn drop(&mut self) {
        let path = self.path.clone();
        match &self.netns {
            Some(ns) => {
                let ns = ns.clone();
                let _ = std::thread::spawn(move || {
                    enter_netns(&ns);
                    let _ = fwc_qos::detach_all(&path);
                })
                .join();
            }
            None => {
                let _ = fwc_qos::detach_all(&path);
            }
        }
    }
}

/// Move the calling thread into the network namespace at `/run/netns/<name>`.
pub fn enter_netns(name: &str) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/run/netns/{name}")).expect("open netns");
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {name}: {}", std::io::Error::last_os_error());
}

/// Run `f` on a thread inside network namespace `name` and return its result (panics propagate).
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(name);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

pub const MARK1: u32 = 1 << 16;
pub const MARK2: u32 = 2 << 16;

/// An Ethernet + IPv4 + TCP/UDP frame of `len` bytes with the given ECN bits and ports.
pub fn ipv4(len: usize, tcp: bool, ecn: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; len.max(64)];
    p[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut p[14..];
    ip[0] = 0x45;
    ip[1] = ecn & 3;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = if tcp { 6 } else { 17 };
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let mut sum: u32 = 0;
    for i in (0..20).step_by(2) {
        sum += u16::from_be_bytes([ip[i], ip[i + 1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let l4 = &mut ip[20..];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    if tcp {
        l4[12] = 5 << 4;
        l4[13] = 0x10; // ACK
    } else {
        l4[4..6].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    }
    p
}

/// An Ethernet + IPv6 + TCP frame with the given ECN bits.
pub fn ipv6_tcp(len: usize, ecn: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; len.max(80)];
    p[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let ip = &mut p[14..];
    ip[0] = 0x60;
    ip[1] = (ecn & 3) << 4;
    ip[4..6].copy_from_slice(&((len - 54) as u16).to_be_bytes());
    ip[6] = 6;
    ip[7] = 64;
    ip[8..10].copy_from_slice(&[0x20, 0x01]);
    ip[10..12].copy_from_slice(&[0x0d, 0xb8]);
    ip[23] = 1;
    ip[24..26].copy_from_slice(&[0x20, 0x01]);
    ip[26..28].copy_from_slice(&[0x0d, 0xb8]);
    ip[39] = 2;
    let l4 = &mut ip[40..];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[12] = 5 << 4;
    p
}
