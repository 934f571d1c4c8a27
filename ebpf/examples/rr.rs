//! A tiny HTTP-ish request/response load generator for the mixed-workload benchmark: every
//! request is a new TCP connection (a short flow) that fetches SIZE bytes.
//!   rr server ADDR:PORT SIZE
//!   rr client ADDR:PORT SIZE CONCURRENCY SECONDS [RATE]  -> one JSON line: requests/s, p50, p99
//! Without RATE the client is closed-loop (each of CONCURRENCY workers sends its next request
//! when the last one ends). With RATE (requests/s, all workers together) it is open-loop: request
//! k is due at start + k/RATE and its latency counts from that due time, so a stalled worker
//! cannot hide the queueing it causes (no coordinated omission).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn server(addr: &str, size: usize) {
    let l = TcpListener::bind(addr).expect("bind");
    let body = vec![b'x'; size];
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        let body = body.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = c.write_all(format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
            let _ = c.write_all(&body);
        });
    }
}

/// One request; its latency counts from `t` (the due time in open-loop mode).
fn one(addr: &str, size: usize, t: Instant) -> Option<Duration> {
    let sa = addr.parse().ok()?;
    let mut c = TcpStream::connect_timeout(&sa, Duration::from_secs(5)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut buf = vec![0u8; 65536];
    let mut n = 0usize;
    let mut need = usize::MAX;
    let mut head = Vec::new();
    loop {
        let k = c.read(&mut buf).ok()?;
        if k == 0 {
            break;
        }
        if need == usize::MAX {
            head.extend_from_slice(&buf[..k]);
            if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                n = head.len() - p - 4;
                need = size;
            }
        } else {
            n += k;
        }
        if n >= need {
            break;
        }
    }
    (n >= size).then(|| t.elapsed())
}

fn client(addr: &str, size: usize, conc: usize, secs: f64, rate: Option<f64>) {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..conc)
        .map(|_| {
            let addr = addr.to_string();
            let next = next.clone();
            std::thread::spawn(move || {
                let (mut lat, mut errors) = (Vec::new(), 0u64);
                loop {
                    let due = match rate {
                        None => Instant::now(),
                        Some(r) => {
                            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let due = start + Duration::from_secs_f64(k as f64 / r);
                            if due >= end {
                                break;
                            }
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            due
                        }
                    };
                    if due >= end {
                        break;
                    }
                    match one(&addr, size, due) {
                        Some(d) => lat.push(d),
                        None => errors += 1,
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut lat, mut errors) = (Vec::new(), 0);
    for h in handles {
        let (l, e) = h.join().unwrap();
        lat.extend(l);
        errors += e;
    }
    let el = start.elapsed().as_secs_f64();
    lat.sort();
    let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1))).map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN);
    println!(
        "{{\"requests\":{},\"errors\":{},\"rps\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}}}",
        lat.len(),
        errors,
        lat.len() as f64 / el,
        pct(0.5),
        pct(0.99),
        lat.last().map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN)
    );
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("server") if a.len() >= 4 => server(&a[2], a[3].parse().unwrap()),
        Some("client") if a.len() >= 6 => client(
            &a[2],
            a[3].parse().unwrap(),
            a[4].parse().unwrap(),
            a[5].parse().unwrap(),
            a.get(6).map(|r| r.parse().unwrap()),
        ),
        _ => {
            eprintln!("usage: rr server ADDR:PORT SIZE | rr client ADDR:PORT SIZE CONCURRENCY SECONDS [RATE]");
            std::process::exit(2);
        }
    }
}
