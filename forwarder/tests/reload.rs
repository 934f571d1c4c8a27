//! Reload with real sockets: 100 reloads while streams run through an unchanged rule and a
//! rule whose limits change in place (no reset, no lost byte); bind conflicts fail a reload
//! before anything changes; removed rules stop accepting and drain; port moves work.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fwc_artifacts::ListenerProto;
use fwc_forwarder::{Options, ReloadError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BLOCKS: u64 = 3000;

/// Backend that checks SEED 1 coming in and sends SEED 2 back, both paced by the client.
async fn verifying_backend() -> SocketAddr {
    backend(|s| async move {
        let (mut r, mut w) = s.into_split();
        let (a, b) = tokio::join!(recv_stream(&mut r, 1, BLOCKS), send_stream(&mut w, 2, BLOCKS));
        a.expect("backend got every byte");
        b.expect("backend sent");
    })
    .await
}

/// A paced stream (one 64 KiB block every ms up, the backend's stream down) that must
/// still be running when `done` becomes true.
async fn paced_stream(addr: SocketAddr, done: Arc<AtomicBool>) -> (bool, u64) {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let up = async {
        for i in 0..BLOCKS {
            w.write_all(block(1, i)).await.expect("no reset while reloading");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let overlapped = done.load(Ordering::SeqCst);
        w.shutdown().await.unwrap();
        overlapped
    };
    let (overlapped, sum) = tokio::join!(up, recv_stream(&mut r, 2, BLOCKS));
    (overlapped, sum.expect("every byte came back"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_reloads_keep_streams() {
    let be = verifying_backend().await;
    let other = echo_backend().await;
    let stable = tcp("stable", &[be]);
    let mut inplace = tcp("inplace", &[be]);
    inplace.listen_addr = "127.0.0.2".into();
    let f = fwc_forwarder::Forwarder::new(opts());
    f.reload(config(vec![stable.clone(), inplace.clone()])).await.unwrap();
    let a_stable = f.local_addrs("stable").await[0];
    let a_inplace = f.local_addrs("inplace").await[0];

    let done = Arc::new(AtomicBool::new(false));
    let s1 = tokio::spawn(paced_stream(a_stable, done.clone()));
    let s2 = tokio::spawn(paced_stream(a_inplace, done.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;

    for i in 0..100u32 {
        let mut ls = vec![stable.clone()];
        let mut ip = inplace.clone();
        ip.max_conns = if i % 2 == 0 { Some(10 + i) } else { None };
        ip.idle_timeout_ms = 60_000 + i as u64;
        ls.push(ip);
        // Churn: a rule that comes and goes, and one whose address alternates.
        if i % 2 == 0 {
            let mut x = tcp("churn", &[other]);
            x.listen_addr = "127.0.0.3".into();
            ls.push(x);
        }
        let mut y = tcp("moving", &[other]);
        y.listen_addr = format!("127.0.1.{}", 1 + i % 3);
        ls.push(y);
        let rep = f.reload(config(ls)).await.expect("reload");
        assert_eq!(rep.changed.len(), 1, "{rep:?}");
        // A new connection through a freshly added rule works right away.
        let a = f.local_addrs("moving").await[0];
        let mut c = TcpStream::connect(a).await.unwrap();
        c.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hi");
    }
    done.store(true, Ordering::SeqCst);
    assert_eq!(f.local_addrs("stable").await, vec![a_stable], "unchanged listener kept its socket");
    assert_eq!(f.local_addrs("inplace").await, vec![a_inplace], "changed listener kept its socket");
    let (o1, _) = s1.await.unwrap();
    let (o2, _) = s2.await.unwrap();
    assert!(o1 && o2, "streams must outlive the 100 reloads");
    let st = f.stats("stable").unwrap();
    assert_eq!(st.bytes_up, BLOCKS * BLOCK as u64);
    assert_eq!(st.bytes_down, BLOCKS * BLOCK as u64);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_conflict_fails_reload_before_anything_changes() {
    let be = echo_backend().await;
    let f = fwc_forwarder::Forwarder::new(opts());
    f.reload(config(vec![tcp("a", &[be])])).await.unwrap();
    let before = f.status().await;
    // Someone else holds a port.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap().port();
    let free = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut b = tcp("b", &[be]);
    b.listen_port = free;
    let mut c = tcp("c", &[be]);
    c.listen_port = taken;
    let err = f.reload(config(vec![b, c])).await.unwrap_err();
    match &err {
        ReloadError::Conflicts(v) => {
            assert_eq!(v.len(), 1, "{v:?}");
            assert!(v[0].contains(&taken.to_string()), "{v:?}");
        }
        e => panic!("{e:?}"),
    }
    let after = f.status().await;
    assert_eq!(before.config, after.config);
    assert_eq!(before.listeners, after.listeners);
    assert!(!after.staged);
    // The free port that was bound during prepare was released again.
    std::net::TcpListener::bind(("127.0.0.1", free)).expect("prepare released its sockets");
    drop(squatter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_rule_stops_accepting_and_drains() {
    let be = echo_backend().await;
    let f = fwc_forwarder::Forwarder::new(Options { drain_timeout: Duration::from_millis(800), ..opts() });
    let mut keep = tcp("keep", &[be]);
    keep.listen_addr = "127.0.0.4".into();
    f.reload(config(vec![tcp("gone", &[be]), keep.clone()])).await.unwrap();
    let a = f.local_addrs("gone").await[0];
    let mut c = TcpStream::connect(a).await.unwrap();
    c.write_all(b"1").await.unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).await.unwrap();

    let rep = f.reload(config(vec![keep])).await.unwrap();
    assert_eq!(rep.removed.len(), 1);
    assert!(TcpStream::connect(a).await.is_err(), "a removed listener must not accept");
    // The established connection still works while draining.
    c.write_all(b"2").await.unwrap();
    c.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"2");
    assert_eq!(f.status().await.draining.len(), 1);
    // … and is cut when the drain time is over.
    let mut v = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut v)).await;
    assert!(r.is_ok(), "drain must end the connection");
    assert!(eventually(Duration::from_secs(2), || f.stats("gone").map(|s| s.conns_active) == Some(0)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_moves_between_rules_and_addresses() {
    let be = echo_backend().await;
    let port = {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let f = fwc_forwarder::Forwarder::new(opts());
    let mut a = listener("a", ListenerProto::Tcp, "127.0.0.1", port, &[be]);
    f.reload(config(vec![a.clone()])).await.unwrap();
    // Same port, now on the wildcard address: overlaps the removed one, bound at commit.
    a.listen_addr = "0.0.0.0".into();
    let rep = f.reload(config(vec![a])).await.unwrap();
    assert_eq!(rep.deferred.len(), 1, "{rep:?}");
    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    c.write_all(b"ok").await.unwrap();
    let mut b = [0u8; 2];
    c.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"ok");
}
