//! UDP flood for the per-packet cost of a ruleset (bench/sets/flood.sh): what a packet costs against big sets.
//!
//! `fwc-udpflood ADDR:PORT SECONDS [SIZE] [BATCH]` sends SIZE-byte datagrams (default 64) from
//! one unconnected socket with `sendmmsg(2)`, BATCH (default 64) per call, for SECONDS,
//! and prints `{"sent":N,"failed":F,"seconds":S,"cpu_seconds":C}` (C: the sender's user+system
//! time, which on a veth path includes the receive softirq the kernel runs in its context).
//! Nobody answers, so conntrack keeps the flow `new` and every packet walks the whole filter
//! chain (iperf3's UDP handshake made its flow `established`, accepted before any set lookup).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: fwc-udpflood ADDR:PORT SECONDS [SIZE] [BATCH]");
        std::process::exit(2);
    }
    let to: SocketAddr = args[1].parse().expect("ADDR:PORT");
    let secs: f64 = args[2].parse().expect("SECONDS");
    let size: usize = args.get(3).map_or(64, |s| s.parse().expect("SIZE"));
    let batch: usize = args.get(4).map_or(64, |s| s.parse().expect("BATCH"));
    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let sock = UdpSocket::bind(bind).expect("bind");
    // Not connected: an ICMP error coming back must not fail the next call.
    // SAFETY: all-zero sockaddr structs are valid; the fields are set below.
    let mut v4: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut v6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    let (name, namelen) = match to {
        SocketAddr::V4(a) => {
            v4.sin_family = libc::AF_INET as libc::sa_family_t;
            v4.sin_port = a.port().to_be();
            v4.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            (&mut v4 as *mut libc::sockaddr_in as *mut libc::c_void, std::mem::size_of::<libc::sockaddr_in>())
        }
        SocketAddr::V6(a) => {
            v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            v6.sin6_port = a.port().to_be();
            v6.sin6_addr.s6_addr = a.ip().octets();
            (&mut v6 as *mut libc::sockaddr_in6 as *mut libc::c_void, std::mem::size_of::<libc::sockaddr_in6>())
        }
    };
    let payload = vec![0x5au8; size];
    let mut iov: Vec<libc::iovec> = (0..batch).map(|_| libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: size }).collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: an all-zero mmsghdr is valid (no name, no control); the iovec is set below.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = name;
            m.msg_hdr.msg_namelen = namelen as libc::socklen_t;
            m
        })
        .collect();
    let (mut sent, mut failed) = (0u64, 0u64);
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut calls = 0u32;
    loop {
        // SAFETY: msgs points at `batch` initialised headers whose iovecs outlive the call.
        let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), batch as u32, 0) };
        if n < 0 {
            // ENOBUFS and the like: count and go on.
            failed += 1;
        } else {
            sent += n as u64;
        }
        calls += 1;
        if calls % 16 == 0 && Instant::now() >= end {
            break;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!("{{\"sent\":{sent},\"failed\":{failed},\"seconds\":{seconds:.4},\"cpu_seconds\":{:.4}}}", cpu_seconds() - cpu0);
}
