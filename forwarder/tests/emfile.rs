//! Out of file descriptors: accept(2) fails with EMFILE while a connection waits in the
//! backlog. The listener must back off (little CPU, few retries) instead of spinning, and
//! serve the connection once descriptors are free again. Alone in its binary: it lowers
//! RLIMIT_NOFILE of the whole test process.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn cpu_secs() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emfile_on_accept_backs_off() {
    let be = echo_backend().await;
    let (f, addr) = start(opts(), vec![tcp("fd", &[be])]).await;
    let old = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let mut low = old;
    low.current = Some(512);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, low).unwrap();
    // Use up every descriptor but one, which the client socket takes.
    let mut filler = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        filler.push(f);
    }
    filler.pop();
    let mut c = TcpStream::connect(addr).await.expect("client socket");
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cpu = cpu_secs() - cpu0;
    let errs = f.stats("fd").unwrap().accept_errors;
    eprintln!("EMFILE for {:?}: {errs} accept retries, {cpu:.3} s CPU", t0.elapsed());
    assert!(errs >= 1, "accept must have failed with EMFILE");
    assert!(errs <= 40, "listener spins: {errs} retries");
    assert!(cpu < 0.5, "listener burns CPU: {cpu}");
    drop(filler);
    rustix::process::setrlimit(rustix::process::Resource::Nofile, old).unwrap();
    // Served once descriptors are back (within the max backoff of 1 s).
    c.write_all(b"back").await.unwrap();
    let mut b = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut b)).await.expect("served after backoff").unwrap();
    assert_eq!(&b, b"back");
}
