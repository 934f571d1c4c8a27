//! New-connection rate through a forward, for bench/apply/run.sh.
//!
//! `fwc-connrate serve ADDR:PORT` accepts connections and closes them at once.
//! `fwc-connrate connect ADDR:PORT SECONDS THREADS` opens connections as fast as it can for
//! SECONDS on THREADS threads (connect with a 200 ms timeout, then close with RST so no
//! TIME_WAIT piles up on the client) and
//! prints `{"connections":N,"failures":F,"per_sec":R}`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => {
            let l = TcpListener::bind(&args[2]).expect("bind");
            for s in l.incoming() {
                drop(s);
            }
        }
        Some("connect") => {
            let addr: SocketAddr = args[2].parse().expect("ADDR:PORT");
            let secs: f64 = args[3].parse().expect("SECONDS");
            let threads: usize = args[4].parse().expect("THREADS");
            let ok = Arc::new(AtomicU64::new(0));
            let bad = Arc::new(AtomicU64::new(0));
            let t0 = Instant::now();
            let end = t0 + Duration::from_secs_f64(secs);
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    let (ok, bad) = (ok.clone(), bad.clone());
                    std::thread::spawn(move || {
                        while Instant::now() < end {
                            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                                Ok(s) => {
                                    let _ = socket_linger0(&s);
                                    ok.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(_) => {
                                    bad.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            let el = t0.elapsed().as_secs_f64();
            let n = ok.load(Ordering::Relaxed);
            println!(
                "{{\"connections\":{n},\"failures\":{},\"per_sec\":{:.0}}}",
                bad.load(Ordering::Relaxed),
                n as f64 / el
            );
        }
        _ => {
            eprintln!("usage: fwc-connrate serve ADDR:PORT | connect ADDR:PORT SECONDS THREADS");
            std::process::exit(2);
        }
    }
}

/// Close with RST (SO_LINGER 0): no TIME_WAIT, so ephemeral ports are reused at once.
fn socket_linger0(s: &TcpStream) -> std::io::Result<()> {
    s.set_linger_zero()
}

trait LingerZero {
    fn set_linger_zero(&self) -> std::io::Result<()>;
}

impl LingerZero for TcpStream {
    fn set_linger_zero(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        #[repr(C)]
        struct Linger {
            l_onoff: i32,
            l_linger: i32,
        }
        let l = Linger { l_onoff: 1, l_linger: 0 };
        // SOL_SOCKET = 1, SO_LINGER = 13 on Linux.
        let rc = unsafe { setsockopt(self.as_raw_fd(), 1, 13, &l as *const Linger as *const u8, std::mem::size_of::<Linger>() as u32) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

extern "C" {
    fn setsockopt(fd: i32, level: i32, name: i32, val: *const u8, len: u32) -> i32;
}
