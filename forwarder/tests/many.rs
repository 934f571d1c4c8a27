//! 10,000 concurrent idle connections held by a forwarder running in a child process (this
//! test binary re-executed; the backend runs in a second child), with the forwarder's memory
//! per connection printed: RSS growth of the forwarder process, plus the kernel's socket
//! memory. A forwarded connection costs the forwarder 2 descriptors: where RLIMIT_NOFILE
//! cannot be raised to fit 20,000 (no CAP_SYS_RESOURCE), the test holds as many as fit and
//! says so. The children die with the test.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const WANT: usize = 10_000;

/// Raise RLIMIT_NOFILE to `n` or as far as allowed; returns the soft limit in force.
fn raise_nofile(n: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    if setrlimit(Resource::Nofile, Rlimit { current: Some(n), maximum: Some(n.max(cur.maximum.unwrap_or(n))) }).is_err() {
        let hard = cur.maximum.unwrap_or(n).min(n);
        let _ = setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: cur.maximum });
    }
    getrlimit(Resource::Nofile).current.unwrap_or(n)
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

/// TCP memory of the kernel in pages (/proc/net/sockstat, "TCP: … mem N").
fn kernel_tcp_pages() -> u64 {
    let s = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let l = s.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let f: Vec<&str> = l.split_whitespace().collect();
    f.iter().position(|w| *w == "mem").map(|i| f[i + 1].parse().unwrap()).unwrap_or(0)
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Block until stdin closes (the parent closed it or died).
async fn until_stdin_closes() {
    tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        let _ = std::io::stdin().read_line(&mut s);
    })
    .await
    .unwrap();
}

/// Child: a backend that holds every connection and prints `COUNT n` as they arrive.
#[test]
#[ignore = "helper process of ten_thousand_idle_connections"]
fn backend_child() {
    if std::env::var("FWC_T_BACKEND").is_err() {
        return;
    }
    raise_nofile(65_536);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let a = backend(move |mut s| {
            let _ = tx.send(());
            async move {
                let mut b = [0u8; 1];
                let _ = s.read(&mut b).await;
            }
        })
        .await;
        println!("READY {a}");
        std::io::stdout().flush().unwrap();
        let count = async {
            let mut n = 0u64;
            while rx.recv().await.is_some() {
                n += 1;
                if n.is_multiple_of(250) || rx.is_empty() {
                    println!("COUNT {n}");
                    std::io::stdout().flush().unwrap();
                }
            }
        };
        tokio::select! { _ = count => {}, _ = until_stdin_closes() => {} }
    });
}

/// Child: runs a forwarder for the config in FWC_T_CONFIG until its stdin closes.
#[test]
#[ignore = "helper process of ten_thousand_idle_connections"]
fn forwarder_child() {
    let Ok(cfg) = std::env::var("FWC_T_CONFIG") else { return };
    raise_nofile(65_536);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let f = fwc_forwarder::Forwarder::new(opts());
        f.reload(serde_json::from_str(&cfg).unwrap()).await.unwrap();
        let a = f.local_addrs("many").await[0];
        println!("READY {a}");
        std::io::stdout().flush().unwrap();
        until_stdin_closes().await;
    });
}

fn child(test: &str, env: (&str, &str)) -> (Kill, BufReader<std::process::ChildStdout>, std::net::SocketAddr) {
    let mut c = Kill(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", test, "--nocapture", "--test-threads=1"])
            .env(env.0, env.1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // libtest prints "test NAME ... " without a newline before the test's own output.
    let out = BufReader::new(c.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = out;
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(i) = line.find("READY ") {
                let _ = tx.send((out, line[i + 6..].trim().parse().unwrap()));
                return;
            }
        }
    });
    let (out, addr) = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("{test} did not get READY"));
    (c, out, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections() {
    let limit = raise_nofile(65_536);
    // The forwarder needs 2 descriptors per connection plus a few of its own.
    let conns = WANT.min((limit as usize).saturating_sub(64) / 2);
    if conns < WANT {
        eprintln!(
            "NOTE: RLIMIT_NOFILE is capped at {limit} here (no CAP_SYS_RESOURCE): holding {conns} connections \
             instead of {WANT}"
        );
    }
    let (_backend, mut be_out, be) = child("backend_child", ("FWC_T_BACKEND", "1"));
    let mut l = tcp("many", &[be]);
    l.connect_timeout_ms = 60_000;
    l.idle_timeout_ms = 3_600_000; // a SYN lost to a full backlog is retried after 1 s, 3 s …
    let cfg = serde_json::to_string(&config(vec![l])).unwrap();
    let (fwd, _out, addr) = child("forwarder_child", ("FWC_T_CONFIG", &cfg));
    let pid = fwd.0.id();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss0 = rss_kib(pid);
    let k0 = kernel_tcp_pages();
    let t = Instant::now();
    // The backend reports its count; the client keeps at most 1,000 connections in flight so
    // no accept queue overflows (an overflowed handshake is only retried after seconds).
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let r2 = reached.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while be_out.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if let Some(i) = line.find("COUNT ") {
                r2.store(line[i + 6..].trim().parse().unwrap(), std::sync::atomic::Ordering::SeqCst);
            }
            line.clear();
        }
    });
    let count = || reached.load(std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut held = Vec::with_capacity(conns);
    for i in 0..conns as u64 {
        while i > count() + 1000 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    eprintln!("{conns} client connects done in {:?}", t.elapsed());
    let want = conns as u64;
    while count() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reached = count();
    assert_eq!(reached, want, "connections that reached the backend");
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss1 = rss_kib(pid);
    let k1 = kernel_tcp_pages();
    let per_conn = (rss1.saturating_sub(rss0)) as f64 * 1024.0 / conns as f64;
    let kernel_per_conn = (k1.saturating_sub(k0)) as f64 * 4096.0 / conns as f64;
    eprintln!(
        "{conns} idle connections held (opened in {took:?}): forwarder RSS {rss0} KiB -> {rss1} KiB = {per_conn:.0} \
         bytes per connection in userspace; kernel TCP buffer memory +{kernel_per_conn:.0} bytes per forwarded connection \
         (4 sockets, all on this host)"
    );
    assert!(per_conn < 16_384.0, "{per_conn} bytes per connection");
    drop(held);
}
