//! UDP through the forwarder on loopback: round trips, one session per client, idle expiry,
//! the session cap evicting the least recently active session, per-datagram caps.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use fwc_compiler::artifacts::ListenerProto;
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

fn udp(rule: &str, targets: &[SocketAddr]) -> fwc_compiler::artifacts::Listener {
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
