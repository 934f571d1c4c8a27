//! UDP through the forwarder on loopback: round trips, one session per client, idle expiry,
//! the session cap evicting the least recently active session, per-datagram caps, and the
//! batched syscalls (bursts, 60,000-byte datagrams, many clients in one batch).

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use fwc_artifacts::ListenerProto;
use tokio::net::UdpSocket;

/// Echo backend that prefixes each answer with the source port it saw.
async fn udp_echo() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let a = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let mut out = from.port().to_be_bytes().to_vec();
            out.extend_from_slice(&buf[..n]);
            let _ = s.send_to(&out, from).await;
        }
    });
    a
}

fn udp(rule: &str, targets: &[SocketAddr]) -> fwc_artifacts::Listener {
    listener(rule, ListenerProto::Udp, "127.0.0.1", 0, targets)
}

/// Send `msg` and wait for the echo; returns the upstream source port the backend saw.
async fn roundtrip(c: &UdpSocket, to: SocketAddr, msg: &[u8]) -> Option<u16> {
    c.send_to(msg, to).await.unwrap();
    let mut buf = vec![0u8; 65536];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), c.recv_from(&mut buf)).await.ok()?.ok()?;
    assert_eq!(&buf[2..n], msg);
    Some(u16::from_be_bytes([buf[0], buf[1]]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_and_one_session_per_client() {
    let be = udp_echo().await;
    let (f, addr) = start(opts(), vec![udp("u", &[be])]).await;
    let c1 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let c2 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut p1 = None;
    for i in 0..100u32 {
        let msg = format!("datagram {i}").into_bytes();
        let p = roundtrip(&c1, addr, &msg).await.expect("echo");
        assert!(p1.is_none() || p1 == Some(p), "one upstream socket per client");
        p1 = Some(p);
    }
    let big = vec![9u8; 60_000];
    assert!(roundtrip(&c1, addr, &big).await.is_some(), "large datagram");
    let p2 = roundtrip(&c2, addr, b"other client").await.unwrap();
    assert_ne!(p1.unwrap(), p2);
    let st = f.stats("u").unwrap();
    assert_eq!(st.udp_sessions_total, 2);
    assert_eq!(st.udp_sessions_active, 2);
    assert_eq!(st.bytes_up, (0..100).map(|i| format!("datagram {i}").len() as u64).sum::<u64>() + 60_000 + 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_when_idle() {
    let be = udp_echo().await;
    let mut l = udp("exp", &[be]);
    l.idle_timeout_ms = 300;
    let (f, addr) = start(opts(), vec![l]).await;
    let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let p1 = roundtrip(&c, addr, b"a").await.unwrap();
    assert_eq!(f.stats("exp").unwrap().udp_sessions_active, 1);
    assert!(eventually(Duration::from_secs(3), || f.stats("exp").unwrap().udp_sessions_active == 0).await);
    let p2 = roundtrip(&c, addr, b"b").await.unwrap();
    assert_ne!(p1, p2, "a new session (new upstream socket) after expiry");
    assert_eq!(f.stats("exp").unwrap().udp_sessions_total, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cap_evicts_the_oldest_idle() {
    let be = udp_echo().await;
    let mut l = udp("cap", &[be]);
    l.max_conns = Some(2);
    let (f, addr) = start(opts(), vec![l]).await;
    let c: Vec<UdpSocket> = futures_join(3).await;
    let p0 = roundtrip(&c[0], addr, b"0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let p1 = roundtrip(&c[1], addr, b"1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    roundtrip(&c[2], addr, b"2").await.unwrap(); // evicts client 0
    assert_eq!(f.stats("cap").unwrap().udp_sessions_active, 2);
    assert_eq!(roundtrip(&c[1], addr, b"1").await.unwrap(), p1, "client 1 kept its session");
    let p0b = roundtrip(&c[0], addr, b"0").await.unwrap();
    assert_ne!(p0, p0b, "client 0 was evicted and got a new session");
    assert_eq!(f.stats("cap").unwrap().udp_sessions_total, 4);
}

/// Backend that answers each datagram after `delay`.
async fn udp_slow_echo(delay: Duration) -> SocketAddr {
    let s = std::sync::Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let a = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let (s, msg) = (s.clone(), buf[..n].to_vec());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut out = from.port().to_be_bytes().to_vec();
                out.extend_from_slice(&msg);
                let _ = s.send_to(&out, from).await;
            });
        }
    });
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_to_an_evicted_session_are_counted_as_dropped() {
    // Regression: a reply reaching the socket of an evicted session vanished uncounted.
    let be = udp_slow_echo(Duration::from_millis(300)).await;
    let mut l = udp("evict", &[be]);
    l.max_conns = Some(1);
    let (f, addr) = start(opts(), vec![l]).await;
    let c: Vec<UdpSocket> = futures_join(2).await;
    c[0].send_to(b"first", addr).await.unwrap();
    assert!(eventually(Duration::from_secs(2), || f.stats("evict").unwrap().udp_sessions_total == 1).await);
    // Client 1 takes the only session; client 0's answer is still on its way.
    let p1 = roundtrip(&c[1], addr, b"second").await;
    assert!(p1.is_some(), "client 1 is answered");
    assert!(
        eventually(Duration::from_secs(3), || f.stats("evict").unwrap().udp_dropped == 1).await,
        "the reply to the evicted session is counted: {:?}",
        f.stats("evict")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_of_refused_clients_are_counted_as_dropped() {
    let be = udp_echo().await;
    let mut l = udp("refuse", &[be]);
    l.allow_from = vec!["192.0.2.0/24".to_string()];
    let (f, addr) = start(opts(), vec![l]).await;
    let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..3 {
        c.send_to(b"x", addr).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(2), || f.stats("refuse").unwrap().udp_dropped == 3).await, "{:?}", f.stats("refuse"));
}

async fn futures_join(n: usize) -> Vec<UdpSocket> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_datagram_cap_drops_over_the_rate() {
    let be = udp_echo().await;
    let mut l = udp("ucap", &[be]);
    l.up_bytes_per_sec = Some(10_000);
    l.burst_bytes = Some(10_000);
    let (f, addr) = start(opts(), vec![l]).await;
    let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for _ in 0..50 {
        c.send_to(&[0u8; 1000], addr).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(2), || f.stats("ucap").unwrap().udp_dropped >= 35).await);
    let st = f.stats("ucap").unwrap();
    assert!(st.bytes_up <= 12_000, "{st:?}");
}

/// Receive one datagram within 5 s (None on timeout).
async fn recv(c: &UdpSocket, buf: &mut [u8]) -> Option<usize> {
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), c.recv_from(buf)).await.ok()?.ok()?;
    Some(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_from_one_client_is_echoed_completely() {
    // 2000 datagrams sent back to back, at most WINDOW unanswered at a time: the listener
    // finds many queued per wakeup (recvmmsg batches, one sendmmsg per run of the client),
    // the session many echoes per wakeup; the window keeps every socket buffer on the way
    // (212 KB by default) from overflowing, so none may be lost.
    const N: u32 = 2000;
    const WINDOW: u32 = 96;
    let be = udp_echo().await;
    let (f, addr) = start(opts(), vec![udp("burst", &[be])]).await;
    let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let msg = |i: u32| {
        let mut m = i.to_be_bytes().to_vec();
        m.resize(16 + (i % 48) as usize, i as u8);
        m
    };
    let mut buf = vec![0u8; 65536];
    let mut seen = HashSet::new();
    let mut ports = HashSet::new();
    let mut sent = 0u32;
    while seen.len() < N as usize {
        while sent < N && sent - (seen.len() as u32) < WINDOW {
            c.send_to(&msg(sent), addr).await.unwrap();
            sent += 1;
        }
        let n = recv(&c, &mut buf).await.unwrap_or_else(|| panic!("echo lost: {} of {N} back", seen.len()));
        ports.insert(u16::from_be_bytes([buf[0], buf[1]]));
        let i = u32::from_be_bytes(buf[2..6].try_into().unwrap());
        assert_eq!(&buf[2..n], msg(i), "datagram {i}");
        assert!(seen.insert(i), "datagram {i} twice");
    }
    let bytes: u64 = (0..N).map(|i| msg(i).len() as u64).sum();
    assert_eq!(ports.len(), 1, "one session");
    // The counters are bumped right after the send: the last echo can overtake them.
    assert!(eventually(Duration::from_secs(2), || f.stats("burst").unwrap().bytes_down == bytes + 2 * N as u64).await);
    let st = f.stats("burst").unwrap();
    assert_eq!((st.udp_sessions_total, st.udp_sessions_active), (1, 1));
    assert_eq!(st.udp_dropped, 0, "{st:?}");
    assert_eq!(st.bytes_up, bytes);
    assert_eq!(st.bytes_down, bytes + 2 * N as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_of_60000_bytes_are_forwarded_byte_exact_both_ways() {
    // Backend: records what it got and answers with the bytes reversed (same size).
    let be = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let be_addr = be.local_addr().unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = be.recv_from(&mut buf).await {
            let _ = got_tx.send(buf[..n].to_vec());
            let back: Vec<u8> = buf[..n].iter().rev().copied().collect();
            let _ = be.send_to(&back, from).await;
        }
    });
    let (f, addr) = start(opts(), vec![udp("big", &[be_addr])]).await;
    let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let pattern = |seed: u32, len: usize| -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    };
    // One burst: big, small, big, small, biggest: several large datagrams in one batch.
    let sent = [pattern(1, 60_000), pattern(2, 100), pattern(3, 60_000), pattern(4, 2049), pattern(5, 65_507)];
    for d in &sent {
        c.send_to(d, addr).await.unwrap();
    }
    let mut buf = vec![0u8; 65536];
    for d in &sent {
        let up = tokio::time::timeout(Duration::from_secs(5), got.recv()).await.unwrap().unwrap();
        assert!(up == *d, "client -> target: {} bytes arrived for {}", up.len(), d.len());
        let n = recv(&c, &mut buf).await.expect("answer");
        let back: Vec<u8> = d.iter().rev().copied().collect();
        assert!(buf[..n] == back[..], "target -> client: {n} bytes for {}", d.len());
    }
    let total: u64 = sent.iter().map(|d| d.len() as u64).sum();
    assert!(eventually(Duration::from_secs(2), || f.stats("big").unwrap().bytes_down == total).await);
    let st = f.stats("big").unwrap();
    assert_eq!((st.bytes_up, st.bytes_down, st.udp_dropped), (total, total, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_in_one_burst_get_a_session_each() {
    // 50 clients, 2 rounds sent back to back (interleaved in the listener's batches): each
    // client its own session (upstream port), the same one for both of its datagrams.
    const CLIENTS: usize = 50;
    let be = udp_echo().await;
    let (f, addr) = start(opts(), vec![udp("many", &[be])]).await;
    let c = futures_join(CLIENTS).await;
    for round in 0..2u8 {
        for (i, s) in c.iter().enumerate() {
            s.send_to(&[round, i as u8], addr).await.unwrap();
        }
    }
    let mut buf = vec![0u8; 65536];
    let mut port_of = HashMap::new();
    for (i, s) in c.iter().enumerate() {
        for round in 0..2u8 {
            let n = recv(s, &mut buf).await.unwrap_or_else(|| panic!("client {i} round {round}: no echo"));
            assert_eq!(&buf[2..n], &[round, i as u8]);
            let p = u16::from_be_bytes([buf[0], buf[1]]);
            assert_eq!(*port_of.entry(i).or_insert(p), p, "client {i} kept its session");
        }
    }
    let ports: HashSet<u16> = port_of.values().copied().collect();
    assert_eq!(ports.len(), CLIENTS, "a session (upstream socket) per client");
    assert!(eventually(Duration::from_secs(2), || f.stats("many").unwrap().bytes_down == 8 * CLIENTS as u64).await);
    let st = f.stats("many").unwrap();
    assert_eq!((st.udp_sessions_total, st.udp_sessions_active), (CLIENTS as u64, CLIENTS as u64));
    assert_eq!((st.bytes_up, st.bytes_down, st.udp_dropped), (4 * CLIENTS as u64, 8 * CLIENTS as u64, 0));
}

/// Send `payload` to `to` as one message with a `UDP_SEGMENT` cmsg of `seg` (GSO): the
/// kernel cuts it into datagrams of `seg` bytes, the last one the rest. `seg` 0: a plain
/// datagram (no cmsg).
fn send_gso(sock: &UdpSocket, to: SocketAddr, seg: u16, payload: &[u8]) {
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(to) = to else { panic!("IPv4 only") };
    // SAFETY (whole block): plain C structs, zeroed then filled; every pointer handed to
    // sendmsg (address, iovec, control buffer) lives until it returns.
    unsafe {
        let mut sin: libc::sockaddr_in = std::mem::zeroed();
        sin.sin_family = libc::AF_INET as _;
        sin.sin_port = to.port().to_be();
        sin.sin_addr.s_addr = u32::from(*to.ip()).to_be();
        let mut iov = libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: payload.len() };
        let mut ctl = [0u64; 4];
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_name = (&mut sin as *mut libc::sockaddr_in).cast();
        m.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as _;
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        if seg > 0 {
            m.msg_control = ctl.as_mut_ptr().cast();
            m.msg_controllen = libc::CMSG_SPACE(2) as _;
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = 103; // UDP_SEGMENT
            (*c).cmsg_len = libc::CMSG_LEN(2) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
        let n = libc::sendmsg(sock.as_raw_fd(), &m, 0);
        assert_eq!(n, payload.len() as isize, "sendmsg with UDP_SEGMENT: {}", std::io::Error::last_os_error());
    }
}

/// The datagrams of the test below: (GSO segment size or 0 for a plain send, sizes).
fn gso_plan() -> Vec<(u16, Vec<usize>)> {
    vec![
        (1000, vec![1000, 1000, 1000, 1000, 1000, 300]), // a GSO batch ending in a short segment
        (0, vec![77]),                                   // a peer's plain datagram in between
        (1400, vec![1400; 10]),                          // an exact batch
        (0, vec![1400]),
        (0, vec![1]),
        (512, vec![512, 512, 511]),
    ]
}

fn gso_payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 13 + j * 5 + 1) as u8).collect()
}

/// Send the plan from `sock` to `to`; the datagrams are numbered in order.
fn send_plan(sock: &UdpSocket, to: SocketAddr) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for (seg, sizes) in gso_plan() {
        let base = all.len();
        let dgrams: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| gso_payload(base + k, n)).collect();
        if seg == 0 {
            for d in &dgrams {
                send_gso(sock, to, 0, d); // no cmsg: a plain datagram
            }
        } else {
            send_gso(sock, to, seg, &dgrams.concat());
        }
        all.extend(dgrams);
    }
    all
}

/// Receive `n` datagrams on a plain socket (no GRO: one datagram per receive).
async fn recv_n(sock: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    while got.len() < n {
        let Some(k) = recv(sock, &mut buf).await else { panic!("{} of {n} datagrams arrived", got.len()) };
        got.push(buf[..k].to_vec());
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gso_batches_and_plain_datagrams_keep_their_boundaries_both_ways() {
    // The client sends GSO batches of mixed sizes (a short last segment) and plain datagrams;
    // the forwarder's GRO listener may get a batch in one piece and must cut it at the
    // gso_size boundaries. The backend sends the same plan back (to the session socket, which
    // has GRO too). With offload on and forced off, every datagram arrives whole, in order.
    for offload in [true, false] {
        let be = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let be_addr = be.local_addr().unwrap();
        let n = gso_plan().iter().map(|(_, s)| s.len()).sum::<usize>();
        let backend = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            let mut got = Vec::new();
            let mut from = None;
            while got.len() < n {
                let (k, f) = be.recv_from(&mut buf).await.unwrap();
                from = Some(f);
                got.push(buf[..k].to_vec());
            }
            let sent = send_plan(&be, from.unwrap());
            (got, sent)
        });
        let o = fwc_forwarder::Options { udp_offload: offload, ..opts() };
        let (f, addr) = start(o, vec![udp("gso", &[be_addr])]).await;
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let sent_up = send_plan(&c, addr);
        let (got_up, sent_down) = tokio::time::timeout(Duration::from_secs(10), backend).await.expect("backend got all").unwrap();
        for (i, (g, s)) in got_up.iter().zip(&sent_up).enumerate() {
            assert_eq!(g, s, "offload={offload}: datagram {i} up ({} bytes, sent {})", g.len(), s.len());
        }
        let got_down = recv_n(&c, n).await;
        for (i, (g, s)) in got_down.iter().zip(&sent_down).enumerate() {
            assert_eq!(g, s, "offload={offload}: datagram {i} down ({} bytes, sent {})", g.len(), s.len());
        }
        let bytes: u64 = sent_up.iter().map(|d| d.len() as u64).sum();
        assert!(eventually(Duration::from_secs(2), || f.stats("gso").unwrap().bytes_down == bytes).await);
        let st = f.stats("gso").unwrap();
        assert_eq!((st.bytes_up, st.udp_dropped), (bytes, 0), "offload={offload}: {st:?}");
        f.shutdown().await;
    }
}

/// Per-source limits on UDP: `max-conns-per-source` counts sessions per source
/// address. A second session (another port) of 127.0.0.1 is refused; 127.0.0.2 is another
/// source and gets one; the status reports the table's fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_per_source() {
    let be = udp_echo().await;
    let mut l = udp("ps", &[be]);
    l.per_source = Some(fwc_artifacts::PerSourceLimit { conn_rate: None, max_conns: Some(1), prefix4: 32, prefix6: 64, size: 100 });
    let (f, addr) = start(opts(), vec![l]).await;
    let a1 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let a2 = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = UdpSocket::bind("127.0.0.2:0").await.unwrap();
    assert!(roundtrip(&a1, addr, b"first").await.is_some());
    assert!(roundtrip(&a2, addr, b"second session of the same source").await.is_none(), "over max-conns-per-source");
    assert!(roundtrip(&b, addr, b"another source").await.is_some());
    assert!(roundtrip(&a1, addr, b"the first session goes on").await.is_some());
    let st = f.stats("ps").unwrap();
    assert_eq!((st.udp_sessions_active, st.conns_refused, st.per_source_entries_v4, st.per_source_size), (2, 1, 2, 100));
    assert_eq!(st.per_source_limits, vec!["conns".to_string()]);
}
