//! TCP through the forwarder with real sockets on loopback: byte-exact transfers (splice,
//! copy and the kernel's sockmap with its fallback to splice), half-close, PROXY v1/v2, DNS
//! targets, failover, limits, idle timeout, caps.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use fwc_artifacts::{ConnRateLimit, ForwardTarget};
use fwc_forwarder::Options;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SEED_UP: u64 = 0x1234_5678;
const SEED_DOWN: u64 = 0x8765_4321;

/// Backend: verify `blocks` of SEED_UP coming in while sending `blocks` of SEED_DOWN.
async fn both_ways_backend(blocks: u64) -> SocketAddr {
    backend(move |s| async move {
        let (mut r, mut w) = s.into_split();
        let (a, b) = tokio::join!(recv_stream(&mut r, SEED_UP, blocks), send_stream(&mut w, SEED_DOWN, blocks));
        a.expect("backend received the exact stream");
        b.expect("backend sent");
    })
    .await
}

async fn transfer_both_ways(o: Options, blocks: u64) {
    let be = both_ways_backend(blocks).await;
    let sockmap = o.sockmap;
    let (f, addr) = start(o, vec![tcp("big", &[be])]).await;
    assert_eq!(f.status().await.sockmap, sockmap, "the sockmap program loaded");
    let t = Instant::now();
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let (up, down) = tokio::join!(send_stream(&mut w, SEED_UP, blocks), recv_stream(&mut r, SEED_DOWN, blocks));
    up.unwrap();
    let sum = down.expect("client received the exact stream");
    let bytes = blocks * BLOCK as u64;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "splice={} sockmap={sockmap} {} MiB each way in {secs:.2}s ({:.0} MiB/s per direction), checksum {sum:#x}",
        f.options().splice,
        bytes >> 20,
        (bytes >> 20) as f64 / secs
    );
    assert!(eventually(Duration::from_secs(5), || f.stats("big").unwrap().conns_active == 0).await);
    let st = f.stats("big").unwrap();
    assert_eq!(st.bytes_up, bytes);
    assert_eq!(st.bytes_down, bytes);
    assert_eq!(st.conns_total, 1);
    if sockmap {
        assert_eq!(f.pipes_created(), 0, "no byte went through a splice pipe");
        assert_eq!(f.sockmap_counts(), Some((1, 0)), "(linked, fallbacks)");
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_both_ways_splice_byte_exact() {
    transfer_both_ways(Options { splice: true, ..opts() }, 16 * 1024).await; // 1 GiB each way
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_mode_byte_exact() {
    transfer_both_ways(Options { splice: false, ..opts() }, 2 * 1024).await; // 128 MiB each way
}

/// Options with the sockmap on, when this test may load BPF (root).
fn sockmap_opts(test: &str) -> Option<Options> {
    fwc_testkit::privileged(test).then(|| Options { sockmap: true, ..opts() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockmap_byte_exact_both_ways() {
    let Some(o) = sockmap_opts("sockmap_byte_exact_both_ways") else { return };
    transfer_both_ways(o, 4 * 1024).await; // 256 MiB each way
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockmap_small_flows_stay_exact_and_counted() {
    let Some(o) = sockmap_opts("sockmap_small_flows_stay_exact_and_counted") else { return };
    let be = echo_backend().await;
    let (f, addr) = start(o, vec![tcp("small", &[be])]).await;
    let mut total = 0u64;
    for i in 0..200u32 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let msg = format!("request {i} ").repeat(1 + i as usize % 50);
        s.write_all(msg.as_bytes()).await.unwrap();
        // The echo first, then the half-close: the connection is established when it is
        // handed over (the kernel takes only established sockets; a client that sends its
        // FIN before the hand-over is moved by splice instead).
        let mut v = vec![0u8; msg.len()];
        s.read_exact(&mut v).await.unwrap();
        assert_eq!(v, msg.as_bytes(), "flow {i}");
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "flow {i}: {} bytes after the echo", rest.len());
        total += msg.len() as u64;
    }
    assert!(eventually(Duration::from_secs(5), || f.stats("small").unwrap().conns_active == 0).await);
    assert_eq!(f.sockmap_counts(), Some((200, 0)), "(linked, fallbacks)");
    assert_eq!(f.pipes_created(), 0, "no byte went through a splice pipe");
    // Counted from TCP_INFO at each connection's end: exact, with no per-byte work.
    let st = f.stats("small").unwrap();
    assert_eq!((st.bytes_up, st.bytes_down), (total, total));
    assert_eq!(st.conns_total, 200);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockmap_falls_back_to_splice_when_full_or_capped() {
    let Some(o) = sockmap_opts("sockmap_falls_back_to_splice_when_full_or_capped") else { return };
    let be = echo_backend().await;
    let mut capped = tcp("capped", &[be]);
    capped.listen_addr = "127.0.0.2".into();
    capped.up_bytes_per_sec = Some(1 << 30);
    let (f, addr) = start(Options { sockmap_pairs: 1, ..o }, vec![tcp("full", &[be]), capped]).await;
    // The first connection takes the map's only pair and stays open.
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(b"first").await.unwrap();
    let mut got = [0u8; 5];
    first.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"first");
    assert_eq!(f.sockmap_counts(), Some((1, 0)));
    assert_eq!(f.pipes_created(), 0);
    // The map is full: the next connection is refused by the kernel and moved by splice.
    let mut second = TcpStream::connect(addr).await.unwrap();
    let msg = vec![9u8; 300_000];
    second.write_all(&msg).await.unwrap();
    second.shutdown().await.unwrap();
    let mut v = Vec::new();
    second.read_to_end(&mut v).await.unwrap();
    assert_eq!(v, msg);
    assert_eq!(f.sockmap_counts(), Some((1, 1)), "(linked, fallbacks)");
    assert!(f.pipes_created() > 0, "the fallback used splice");
    // A capped rule needs per-byte work in userspace: never offered to the kernel.
    let caddr = f.local_addrs("capped").await[0];
    let mut c = TcpStream::connect(caddr).await.unwrap();
    c.write_all(b"capped").await.unwrap();
    c.shutdown().await.unwrap();
    let mut v = Vec::new();
    c.read_to_end(&mut v).await.unwrap();
    assert_eq!(v, b"capped");
    assert_eq!(f.sockmap_counts(), Some((1, 1)));
    // The linked connection still works after the others, and its end frees the pair.
    first.write_all(b"again").await.unwrap();
    first.shutdown().await.unwrap();
    let mut v = Vec::new();
    first.read_to_end(&mut v).await.unwrap();
    assert_eq!(v, b"again");
    assert!(eventually(Duration::from_secs(5), || f.stats("full").unwrap().conns_active == 0).await);
    let st = f.stats("full").unwrap();
    assert_eq!((st.bytes_up, st.bytes_down), (300_010, 300_010));
    // The echo comes back before the client half-closes: the hand-over is decided while both
    // sockets are established. (A FIN that reaches the forwarder before the hand-over leaves
    // the client socket in CLOSE_WAIT, which the kernel's sockmap refuses: that connection
    // falls back to splice, correctly, and the count would say so.)
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(b"third").await.unwrap();
    let mut got = [0u8; 5];
    third.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"third");
    third.shutdown().await.unwrap();
    let mut v = Vec::new();
    third.read_to_end(&mut v).await.unwrap();
    assert!(v.is_empty());
    assert_eq!(f.sockmap_counts(), Some((2, 1)), "the pair freed by the first connection was taken again");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipes_are_pooled_after_clean_finish() {
    let be = echo_backend().await;
    let (f, addr) = start(Options { splice: true, ..opts() }, vec![tcp("pool", &[be])]).await;
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"hello").await.unwrap();
        s.shutdown().await.unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        assert_eq!(v, b"hello");
    }
    // Sequential connections reuse the same two pipes.
    assert!(f.pipes_created() <= 4, "created {}", f.pipes_created());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_keeps_the_other_direction() {
    // The backend reads everything until EOF, then answers with the byte count and closes.
    let be = backend(|mut s| async move {
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.write_all(format!("got {}", v.len()).as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
    })
    .await;
    let sockmap = fwc_testkit::privileged("half_close_keeps_the_other_direction (sockmap)");
    for (splice, sockmap) in [(true, false), (false, false), (true, sockmap)] {
        let (f, addr) = start(Options { splice, sockmap, ..opts() }, vec![tcp("hc", &[be])]).await;
        assert_eq!(f.status().await.sockmap, sockmap);
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&vec![7u8; 100_000]).await.unwrap();
        s.shutdown().await.unwrap(); // client -> target EOF
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        assert_eq!(String::from_utf8(v).unwrap(), "got 100000", "splice={splice} sockmap={sockmap}");
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v1_and_v2() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let be = capture_backend(tx).await;
    let sockmap = fwc_testkit::privileged("proxy_protocol_v1_and_v2 (sockmap)");
    for (v, sockmap) in [(1u8, false), (2, false), (1, sockmap), (2, sockmap)] {
        let mut l = tcp("pp", &[be]);
        l.proxy_protocol = Some(v);
        let (f, addr) = start(Options { sockmap, ..opts() }, vec![l]).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let me = s.local_addr().unwrap();
        s.write_all(b"payload").await.unwrap();
        s.shutdown().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
        let mut want = if v == 1 {
            format!("PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n", me.port(), addr.port()).into_bytes()
        } else {
            let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
            h.extend_from_slice(&[0x21, 0x11, 0, 12, 127, 0, 0, 1, 127, 0, 0, 1]);
            h.extend_from_slice(&me.port().to_be_bytes());
            h.extend_from_slice(&addr.port().to_be_bytes());
            h
        };
        want.extend_from_slice(b"payload");
        assert_eq!(got, want, "PROXY v{v} sockmap={sockmap}");
        // The header is the forwarder's, not the client's: bytes_up counts the payload only.
        assert!(eventually(Duration::from_secs(5), || f.stats("pp").unwrap().conns_active == 0).await);
        assert_eq!(f.stats("pp").unwrap().bytes_up, 7, "sockmap={sockmap}");
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_target_from_hosts_file() {
    // `localhost` comes from /etc/hosts (127.0.0.1 and/or ::1); the echo backend listens on
    // 127.0.0.1, so a ::1 answer first must fail over to the next address.
    let be = echo_backend().await;
    let mut l = tcp("dns", &[be]);
    l.targets = vec![ForwardTarget { host: "localhost".into(), port: be.port() }];
    let (f, addr) = start(opts(), vec![l]).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"via a name").await.unwrap();
    s.shutdown().await.unwrap();
    let mut v = Vec::new();
    s.read_to_end(&mut v).await.unwrap();
    assert_eq!(v, b"via a name");
    let st = f.stats("dns").unwrap();
    assert_eq!(st.connect_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_the_next_target() {
    // A port with nothing listening: connect is refused.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let be = echo_backend().await;
    let (f, addr) = start(opts(), vec![tcp("fo", &[dead, be])]).await;
    for i in 0..4 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("try {i}").as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        assert_eq!(v, format!("try {i}").as_bytes());
    }
    assert_eq!(f.stats("fo").unwrap().connect_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_targets_down_closes_the_client() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (f, addr) = start(opts(), vec![tcp("down", &[dead])]).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut v = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut v)).await.unwrap();
    assert!(r.is_err() || v.is_empty());
    assert!(eventually(Duration::from_secs(2), || f.stats("down").unwrap().connect_failures == 1).await);
}

/// Connect and see whether the forwarder keeps the connection (echo works) or closes it.
async fn served(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(b"x").await.ok()?;
    let mut b = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await {
        Ok(Ok(1)) => Some(s),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_conns_refuses_and_counts() {
    let be = echo_backend().await;
    let mut l = tcp("mc", &[be]);
    l.max_conns = Some(3);
    let (f, addr) = start(opts(), vec![l]).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(served(addr).await.expect("within max-conns"));
    }
    assert!(served(addr).await.is_none(), "4th connection must be refused");
    assert_eq!(f.stats("mc").unwrap().conns_refused, 1);
    drop(held.pop());
    assert!(eventually(Duration::from_secs(2), || f.stats("mc").unwrap().conns_active == 2).await);
    assert!(served(addr).await.is_some(), "a slot is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conn_rate_refuses_and_counts() {
    let be = echo_backend().await;
    let mut l = tcp("cr", &[be]);
    l.conn_rate = Some(ConnRateLimit { count: 1, period_secs: 60, burst: 5 });
    let (f, addr) = start(opts(), vec![l]).await;
    let mut ok = 0;
    for _ in 0..8 {
        if served(addr).await.is_some() {
            ok += 1;
        }
    }
    assert_eq!(ok, 5);
    assert_eq!(f.stats("cr").unwrap().conns_refused, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_from_refuses_others() {
    let be = echo_backend().await;
    let mut l = tcp("af", &[be]);
    l.allow_from = vec!["10.0.0.0/8".into()];
    let (f, addr) = start(opts(), vec![l]).await;
    assert!(served(addr).await.is_none());
    assert_eq!(f.stats("af").unwrap().conns_refused, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_cuts_silent_peers() {
    let be = echo_backend().await;
    let sockmap = fwc_testkit::privileged("idle_timeout_cuts_silent_peers (sockmap)");
    for sockmap in [false, sockmap] {
        let mut l = tcp("idle", &[be]);
        l.idle_timeout_ms = 300;
        let (f, addr) = start(Options { sockmap, ..opts() }, vec![l]).await;
        let mut s = served(addr).await.unwrap();
        let t = Instant::now();
        let mut v = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut v)).await.expect("closed by idle timeout");
        assert!(t.elapsed() >= Duration::from_millis(250), "{:?}", t.elapsed());
        assert_eq!(f.stats("idle").unwrap().idle_timeouts, 1, "sockmap={sockmap}");
        if sockmap {
            assert_eq!(f.sockmap_counts().map(|c| c.0), Some(1), "the idle connection was in the kernel's map");
        }
        f.shutdown().await;
    }
}

/// Send as fast as possible for `secs` through a rule capped at `rate` bytes/s (down and
/// up); return the measured rate after the first second (the burst).
async fn capped_rate(splice: bool, rate: u64, secs: f64) -> f64 {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, u64)>();
    let be = backend(move |mut s| {
        let tx = tx.clone();
        async move {
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0u64;
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        total += n as u64;
                        let _ = tx.send((Instant::now(), total));
                    }
                }
            }
        }
    })
    .await;
    let mut l = tcp("cap", &[be]);
    l.up_bytes_per_sec = Some(rate);
    let (f, addr) = start(Options { splice, ..opts() }, vec![l]).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let writer = tokio::spawn(async move {
        let buf = vec![1u8; 256 * 1024];
        while Instant::now() < stop {
            if s.write_all(&buf).await.is_err() {
                break;
            }
        }
    });
    let mut first: Option<(Instant, u64)> = None;
    let mut last = None;
    let t0 = Instant::now();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs_f64(secs + 1.0), rx.recv()).await {
        if ev.0 > stop {
            break;
        }
        if first.is_none() && ev.0.duration_since(t0) > Duration::from_secs(1) {
            first = Some(ev);
        }
        last = Some(ev);
    }
    writer.abort();
    f.shutdown().await;
    let (a, b) = (first.unwrap(), last.unwrap());
    (b.1 - a.1) as f64 / b.0.duration_since(a.0).as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_cap_is_accurate() {
    for splice in [true, false] {
        let rate = 2_000_000;
        let got = capped_rate(splice, rate, 4.0).await;
        let ratio = got / rate as f64;
        eprintln!("cap {rate} B/s splice={splice}: measured {got:.0} B/s ({ratio:.4})");
        assert!((0.95..1.05).contains(&ratio), "splice={splice} ratio {ratio}");
    }
}
