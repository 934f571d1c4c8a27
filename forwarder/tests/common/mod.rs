//! Helpers shared by the forwarder's socket tests: listener configs, backends on loopback,
//! a deterministic byte stream to check transfers byte for byte.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use fwc_compiler::artifacts::{ForwardArtifact, ForwardTarget, Listener, ListenerProto};
use fwc_forwarder::{Forwarder, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn listener(rule: &str, proto: ListenerProto, addr: &str, port: u16, targets: &[SocketAddr]) -> Listener {
    Listener {
        rule: rule.to_string(),
        proto,
        listen_addr: addr.to_string(),
        listen_port: port,
        targets: targets.iter().map(|t| ForwardTarget { host: t.ip().to_string(), port: t.port() }).collect(),
        allow_from: vec![],
        up_bytes_per_sec: None,
        down_bytes_per_sec: None,
        burst_bytes: None,
        max_conns: None,
        conn_rate: None,
        proxy_protocol: None,
        idle_timeout_ms: 60_000,
        connect_timeout_ms: 2_000,
    }
}

pub fn tcp(rule: &str, targets: &[SocketAddr]) -> Listener {
    listener(rule, ListenerProto::Tcp, "127.0.0.1", 0, targets)
}

pub fn config(listeners: Vec<Listener>) -> ForwardArtifact {
    ForwardArtifact { version: 1, listeners }
}

pub fn opts() -> Options {
    Options { drain_timeout: Duration::from_secs(5), ..Options::default() }
}

/// Start a forwarder with `listeners`; returns it and the bound address of the first rule.
pub async fn start(o: Options, listeners: Vec<Listener>) -> (Forwarder, SocketAddr) {
    let first = listeners[0].rule.clone();
    let f = Forwarder::new(o);
    f.reload(config(listeners)).await.expect("reload");
    let addr = f.local_addrs(&first).await[0];
    (f, addr)
}

/// A TCP backend on 127.0.0.1:0 running `h` for every connection.
pub async fn backend<F, Fut>(h: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(h(s));
        }
    });
    a
}

pub async fn echo_backend() -> SocketAddr {
    backend(|mut s| async move {
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
        let _ = w.shutdown().await;
    })
    .await
}

/// Block `i` (64 KiB) of the deterministic stream `seed`.
pub const BLOCK: usize = 64 * 1024;

pub fn block(seed: u64, i: u64, out: &mut [u8]) {
    let mut x = seed ^ (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
    for c in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
}

/// Write `blocks` blocks of stream `seed`, then shut down the write side.
pub async fn send_stream<W: AsyncWriteExt + Unpin>(w: &mut W, seed: u64, blocks: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; BLOCK];
    for i in 0..blocks {
        block(seed, i, &mut buf);
        w.write_all(&buf).await?;
    }
    w.shutdown().await
}

/// Read exactly `blocks` blocks of stream `seed` and then EOF; returns a checksum (sum of words).
pub async fn recv_stream<R: AsyncReadExt + Unpin>(r: &mut R, seed: u64, blocks: u64) -> std::io::Result<u64> {
    let mut got = vec![0u8; BLOCK];
    let mut want = vec![0u8; BLOCK];
    let mut sum = 0u64;
    for i in 0..blocks {
        r.read_exact(&mut got).await?;
        block(seed, i, &mut want);
        if got != want {
            return Err(std::io::Error::other(format!("block {i} of stream {seed:#x} differs")));
        }
        sum = sum.wrapping_add(u64::from_le_bytes(got[..8].try_into().unwrap()));
    }
    let mut one = [0u8; 1];
    let n = r.read(&mut one).await?;
    if n != 0 {
        return Err(std::io::Error::other("bytes after the end of the stream"));
    }
    Ok(sum)
}

/// Poll `f` until it is true or `t` passes.
pub async fn eventually<F: FnMut() -> bool>(t: Duration, mut f: F) -> bool {
    let end = tokio::time::Instant::now() + t;
    while tokio::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}
