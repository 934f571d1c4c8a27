//! Active health checks with real sockets: a target that stops is taken out within
//! interval × fall (no new connection reaches its port), comes back within interval × rise
//! after it listens again; with every target down, connections still try them all.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use fwc_artifacts::HealthCheck;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A backend that answers every connection with its name; abort the handle to stop it (the
/// listening socket closes: connects are refused).
async fn named(name: &'static str, at: SocketAddr) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind(at).await.unwrap();
    let a = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(name.as_bytes()).await;
            });
        }
    });
    (a, task)
}

async fn who(fwd: SocketAddr) -> String {
    let mut s = TcpStream::connect(fwd).await.unwrap();
    let mut v = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_string(&mut v)).await;
    v
}

fn up(st: &fwc_forwarder::Status, target: SocketAddr) -> Option<bool> {
    st.health.iter().find(|h| h.target == target.to_string()).map(|h| h.up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_target_is_taken_out_within_interval_times_fall_and_back_after_rise() {
    let (a, task_a) = named("a", "127.0.0.1:0".parse().unwrap()).await;
    let (b, _task_b) = named("b", "127.0.0.1:0".parse().unwrap()).await;
    let hc = HealthCheck { interval_ms: 100, timeout_ms: 50, rise: 2, fall: 3 };
    let mut l = tcp("hc", &[a, b]);
    l.health_check = Some(hc);
    let (f, fwd) = start(opts(), vec![l]).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        seen.insert(who(fwd).await);
    }
    assert_eq!(seen.len(), 2, "both targets serve while healthy: {seen:?}");

    task_a.abort();
    let _ = task_a.await;
    let t0 = Instant::now();
    while up(&f.status().await, a) != Some(false) {
        assert!(t0.elapsed() < Duration::from_secs(3), "a never went down");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = t0.elapsed();
    // fall = 3 probes, 100 ms apart: at most ~3 intervals (+ one for the phase, + slack).
    assert!(took <= Duration::from_millis(3 * 100 + 100 + 150), "taken out after {took:?}");
    let before = f.stats("hc").unwrap().connect_failures;
    for _ in 0..6 {
        assert_eq!(who(fwd).await, "b", "no new connection is sent to the down target");
    }
    assert_eq!(f.stats("hc").unwrap().connect_failures, before);

    let (_, _task_a2) = named("a", a).await; // the same port again
    let t0 = Instant::now();
    while up(&f.status().await, a) != Some(true) {
        assert!(t0.elapsed() < Duration::from_secs(3), "a never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = t0.elapsed();
    assert!(took <= Duration::from_millis(2 * 100 + 100 + 150), "back after {took:?}");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        seen.insert(who(fwd).await);
    }
    assert_eq!(seen.len(), 2, "a serves again: {seen:?}");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_target_down_connections_still_try_them_all() {
    let (a, task_a) = named("a", "127.0.0.1:0".parse().unwrap()).await;
    let (b, task_b) = named("b", "127.0.0.1:0".parse().unwrap()).await;
    let mut l = tcp("all-down", &[a, b]);
    l.health_check = Some(HealthCheck { interval_ms: 50, timeout_ms: 25, rise: 1, fall: 1 });
    let (f, fwd) = start(opts(), vec![l]).await;
    task_a.abort();
    task_b.abort();
    let _ = (task_a.await, task_b.await);
    let t0 = Instant::now();
    loop {
        let st = f.status().await;
        if up(&st, a) == Some(false) && up(&st, b) == Some(false) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // b comes back but its probe has not run yet: the connection still finds it.
    let (_, _tb) = named("b", b).await;
    assert_eq!(who(fwd).await, "b");
    f.shutdown().await;
}
