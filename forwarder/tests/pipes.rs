//! Splice pipes that grow with the flow: a bulk stream through the forwarder grows
//! its pipes past the start size and stays byte-exact; request/response traffic leaves them
//! at the start size; and where the kernel refuses a size (a process without
//! CAP_SYS_RESOURCE asking past `fs.pipe-max-size`, as a non-root `fwc forward` past
//! `fs.pipe-user-pages-soft` is refused) the pipe keeps working at the size it has.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fwc_forwarder::Options;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

const SEED: u64 = 0x5eed_0024;
const K: usize = 1024;

/// A backend that reads nothing until `go` is notified, then checks `blocks` blocks of SEED.
async fn stalled_sink(blocks: u64, go: Arc<Notify>) -> SocketAddr {
    backend(move |mut s| {
        let go = go.clone();
        async move {
            go.notified().await;
            recv_stream(&mut s, SEED, blocks).await.expect("backend received the exact stream");
            let _ = s.shutdown().await;
        }
    })
    .await
}

/// Send `blocks` blocks through `addr` to a stalled sink, releasing it once `stall_blocks`
/// are written (few enough to fit the sockets' buffers): a queue builds up in front of the
/// forwarder, and a bulk sender keeps one there, so its reads fill the pipe. Returns once the
/// whole stream was delivered.
async fn bulk(addr: SocketAddr, blocks: u64, stall_blocks: u64, go: Arc<Notify>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    for i in 0..blocks {
        if i == stall_blocks {
            go.notify_one();
        }
        s.write_all(block(SEED, i)).await.unwrap();
    }
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

fn grow_opts() -> Options {
    Options { splice: true, pipe_size: 64 * K, pipe_max: 1024 * K, ..opts() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_flow_grows_its_pipe_and_a_small_one_does_not() {
    let echo = echo_backend().await;
    let (f, addr) = start(grow_opts(), vec![tcp("small", &[echo])]).await;
    for _ in 0..5 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&[7u8; 3000]).await.unwrap();
        s.shutdown().await.unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        assert_eq!(v, vec![7u8; 3000]);
    }
    assert!(eventually(Duration::from_secs(5), || f.stats("small").unwrap().conns_active == 0).await);
    let sizes = f.pooled_pipe_sizes();
    assert!(!sizes.is_empty() && sizes.iter().all(|&s| s == 64 * K), "small flows: {sizes:?}");
    f.shutdown().await;

    let go = Arc::new(Notify::new());
    let sink = stalled_sink(1024, go.clone()).await; // 64 MiB
    let (f, addr) = start(grow_opts(), vec![tcp("bulk", &[sink])]).await;
    bulk(addr, 1024, 2, go).await;
    assert!(eventually(Duration::from_secs(5), || f.stats("bulk").unwrap().conns_active == 0).await);
    assert_eq!(f.stats("bulk").unwrap().bytes_up, 1024 * BLOCK as u64);
    let sizes = f.pooled_pipe_sizes();
    assert!(sizes.iter().any(|&s| s > 64 * K && s <= 1024 * K), "a bulk flow's pipe did not grow: {sizes:?}");
    assert_eq!(f.pipes_refused(), 0);
    f.shutdown().await;
}

/// A bulk stream that stops without closing (its sender waits for an answer) arrives to its
/// last byte: the relay's reads filled the pipe, so its writes held their tails for more
/// (SPLICE_F_MORE), and the last one is pushed once the sender turns out to have nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_flow_that_pauses_open_arrives_to_its_last_byte() {
    const BLOCKS: u64 = 256; // 16 MiB
    let go = Arc::new(Notify::new());
    let sink = {
        let go = go.clone();
        backend(move |mut s| {
            let go = go.clone();
            async move {
                go.notified().await;
                let mut got = vec![0u8; BLOCK];
                for i in 0..BLOCKS {
                    s.read_exact(&mut got).await.expect("the whole stream, without an EOF");
                    assert!(got == block(SEED, i), "block {i} differs");
                }
                s.write_all(b"k").await.unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).await.unwrap();
                assert!(rest.is_empty());
            }
        })
        .await
    };
    let (f, addr) = start(grow_opts(), vec![tcp("pause", &[sink])]).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    for i in 0..BLOCKS {
        if i == 2 {
            go.notify_one();
        }
        s.write_all(block(SEED, i)).await.unwrap();
    }
    // The connection stays open: only the relay's push can deliver the last tail now.
    let mut k = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(60), s.read_exact(&mut k))
        .await
        .expect("the backend got the whole stream and answered")
        .unwrap();
    assert_eq!(&k, b"k");
    s.shutdown().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || f.stats("pause").unwrap().conns_active == 0).await);
    assert_eq!(f.stats("pause").unwrap().bytes_up, BLOCKS * BLOCK as u64);
    f.shutdown().await;
}

/// Run `body` on a runtime whose threads lack CAP_SYS_RESOURCE (capabilities are per thread;
/// threads inherit them from the thread that creates them), as a non-root forwarder does.
fn without_cap_sys_resource(body: impl std::future::Future<Output = ()> + Send + 'static) {
    std::thread::spawn(move || {
        drop_cap_sys_resource();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(body);
    })
    .join()
    .expect("the test body passed");
}

fn drop_cap_sys_resource() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_RESOURCE: u32 = 24;
    let mut h = Header { version: VERSION_3, pid: 0 };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and the two data words v3 requires, both live
    // for the call; pid 0 is the calling thread only.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()), 0);
        d[0].effective &= !(1 << CAP_SYS_RESOURCE);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()), 0);
    }
}

fn pipe_max_size() -> usize {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size").unwrap().trim().parse().unwrap()
}

#[test]
fn a_refused_pipe_size_keeps_the_pipe_working() {
    // Start past fs.pipe-max-size: every new pipe is refused its start size (and later its
    // grow) and must carry the stream at the kernel's default size.
    let too_big = pipe_max_size() * 2;
    without_cap_sys_resource(async move {
        let go = Arc::new(Notify::new());
        let sink = stalled_sink(256, go.clone()).await; // 16 MiB
        let o = Options { splice: true, pipe_size: too_big, pipe_max: too_big * 2, ..opts() };
        let (f, addr) = start(o, vec![tcp("refused", &[sink])]).await;
        bulk(addr, 256, 2, go).await;
        assert!(eventually(Duration::from_secs(5), || f.stats("refused").unwrap().conns_active == 0).await);
        assert_eq!(f.stats("refused").unwrap().bytes_up, 256 * BLOCK as u64);
        assert!(f.pipes_refused() >= 1, "the kernel was expected to refuse {too_big} bytes");
        let sizes = f.pooled_pipe_sizes();
        assert!(!sizes.is_empty() && sizes.iter().all(|&s| s < too_big), "{sizes:?}");
        f.shutdown().await;
    });
}

#[test]
fn a_refused_grow_keeps_the_pipe_at_its_size() {
    // Start at fs.pipe-max-size (allowed), grow past it (refused once, then not asked again).
    let max = pipe_max_size();
    without_cap_sys_resource(async move {
        let go = Arc::new(Notify::new());
        let sink = stalled_sink(512, go.clone()).await; // 32 MiB
        let o = Options { splice: true, pipe_size: max, pipe_max: max * 4, ..opts() };
        let (f, addr) = start(o, vec![tcp("grow", &[sink])]).await;
        bulk(addr, 512, 2, go).await;
        assert!(eventually(Duration::from_secs(5), || f.stats("grow").unwrap().conns_active == 0).await);
        assert_eq!(f.stats("grow").unwrap().bytes_up, 512 * BLOCK as u64);
        let sizes = f.pooled_pipe_sizes();
        assert!(!sizes.is_empty() && sizes.iter().all(|&s| s == max), "{sizes:?}");
        // Refused at most once per pipe (a stuck pipe is not asked again).
        assert!(f.pipes_refused() <= f.pipes_created(), "{} refusals for {} pipes", f.pipes_refused(), f.pipes_created());
        f.shutdown().await;
    });
}
