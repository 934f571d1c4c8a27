//! Connections per second through a TCP forwarder (bench/forward/cps.sh): a client that
//! opens connections back to back on several threads, each sending PAYLOAD bytes,
//! half-closing, reading the echo to EOF and checking it byte for byte; and the echo server
//! behind the forwarder. Native threads and blocking sockets, so the client is not the
//! bottleneck the Python one was.
//!
//!   fwc-bench-cps echo ADDR:PORT [--threads 4]
//!   fwc-bench-cps connect ADDR:PORT [--conns 2000] [--threads 4] [--payload 64]
//!
//! `connect` prints one JSON line: {"conns":N,"failed":F,"secs":S,"per_sec":R}.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn usage() -> ! {
    eprintln!("usage: fwc-bench-cps echo ADDR:PORT [--threads N]\n       fwc-bench-cps connect ADDR:PORT [--conns N] [--threads N] [--payload BYTES]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        usage();
    }
    let addr: SocketAddr = args[1].parse().unwrap_or_else(|_| usage());
    let mut threads = 4usize;
    let mut conns = 2000u64;
    let mut payload = 64usize;
    let mut i = 2;
    while i < args.len() {
        let v = args.get(i + 1).and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| usage());
        match args[i].as_str() {
            "--threads" => threads = v as usize,
            "--conns" => conns = v,
            "--payload" => payload = v as usize,
            _ => usage(),
        }
        i += 2;
    }
    match args[0].as_str() {
        "echo" => echo(addr, threads),
        "connect" => connect(addr, conns, threads.max(1), payload),
        _ => usage(),
    }
}

/// Accept on `threads` threads; per connection read to EOF, answer with the same bytes, close.
fn echo(addr: SocketAddr, threads: usize) {
    let l = Arc::new(TcpListener::bind(addr).expect("bind"));
    eprintln!("echo on {}", l.local_addr().unwrap());
    let hs: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::with_capacity(1 << 20);
                loop {
                    let Ok((mut s, _)) = l.accept() else { continue };
                    buf.clear();
                    if s.read_to_end(&mut buf).is_ok() {
                        let _ = s.write_all(&buf);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
}

fn connect(addr: SocketAddr, conns: u64, threads: usize, payload: usize) {
    let msg: Arc<Vec<u8>> = Arc::new((0..payload).map(|i| (i % 251) as u8).collect());
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (msg, next, failed) = (msg.clone(), next.clone(), failed.clone());
            std::thread::spawn(move || {
                let mut got = Vec::with_capacity(payload);
                while next.fetch_add(1, Ordering::Relaxed) < conns {
                    got.clear();
                    let ok = (|| -> std::io::Result<bool> {
                        let mut s = TcpStream::connect(addr)?;
                        s.set_nodelay(true)?;
                        s.write_all(&msg)?;
                        s.shutdown(Shutdown::Write)?;
                        s.read_to_end(&mut got)?;
                        Ok(got[..] == msg[..])
                    })();
                    if !matches!(ok, Ok(true)) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
    let secs = t0.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    println!(
        "{{\"conns\":{conns},\"failed\":{failed},\"secs\":{secs:.4},\"per_sec\":{:.1}}}",
        (conns - failed) as f64 / secs
    );
}
