//! Helpers shared by the forwarder's socket tests: listener configs, backends on loopback,
//! a deterministic byte stream to check transfers byte for byte.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use fwc_artifacts::{ForwardArtifact, ForwardTarget, Listener, ListenerProto};
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
        sni: None,
        health_check: None,
        per_source: None,
    }
}

pub fn tcp(rule: &str, targets: &[SocketAddr]) -> Listener {
    listener(rule, ListenerProto::Tcp, "127.0.0.1", 0, targets)
}

pub fn config(listeners: Vec<Listener>) -> ForwardArtifact {
    ForwardArtifact { version: 1, listeners, kernel_health: vec![], kernel_dns: vec![] }
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
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l: TcpListener = sock.listen(4096).unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(h(s));
        }
    });
    a
}

/// A backend that sends everything it receives on each connection (until EOF) to `tx`.
pub async fn capture_backend(tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>) -> SocketAddr {
    backend(move |mut s| {
        let tx = tx.clone();
        async move {
            let mut all = Vec::new();
            let _ = s.read_to_end(&mut all).await;
            let _ = tx.send(all);
        }
    })
    .await
}

pub async fn echo_backend() -> SocketAddr {
    backend(|mut s| async move {
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
        let _ = w.shutdown().await;
    })
    .await
}

/// The stream is made of 64 KiB blocks; block `i` of stream `seed` is entry `i % DISTINCT` of
/// a table generated once per seed (a prime count, so a lost, repeated or reordered block is
/// seen), which keeps the checker at memcpy/memcmp speed even in debug builds.
pub const BLOCK: usize = 64 * 1024;
const DISTINCT: u64 = 257;

fn table(seed: u64) -> &'static [u8] {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static TABLES: Mutex<Option<HashMap<u64, &'static [u8]>>> = Mutex::new(None);
    let mut g = TABLES.lock().unwrap();
    g.get_or_insert_with(HashMap::new).entry(seed).or_insert_with(|| {
        let mut v = vec![0u8; BLOCK * DISTINCT as usize];
        let mut x = seed | 1;
        for c in v.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        Box::leak(v.into_boxed_slice())
    })
}

pub fn block(seed: u64, i: u64) -> &'static [u8] {
    let j = (i % DISTINCT) as usize;
    &table(seed)[j * BLOCK..(j + 1) * BLOCK]
}

/// Write `blocks` blocks of stream `seed`, then shut down the write side.
pub async fn send_stream<W: AsyncWriteExt + Unpin>(w: &mut W, seed: u64, blocks: u64) -> std::io::Result<()> {
    for i in 0..blocks {
        w.write_all(block(seed, i)).await?;
    }
    w.shutdown().await
}

/// Read exactly `blocks` blocks of stream `seed` and then EOF; returns a checksum (FNV-1a
/// over the first 8 bytes of every block, order sensitive).
pub async fn recv_stream<R: AsyncReadExt + Unpin>(r: &mut R, seed: u64, blocks: u64) -> std::io::Result<u64> {
    let mut got = vec![0u8; BLOCK];
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    for i in 0..blocks {
        r.read_exact(&mut got).await?;
        if got != block(seed, i) {
            return Err(std::io::Error::other(format!("block {i} of stream {seed:#x} differs")));
        }
        sum = (sum ^ u64::from_le_bytes(got[..8].try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
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
