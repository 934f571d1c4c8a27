//! The agent's HTTP listener under idle-connection pressure: a real `fwc agent` process, 500
//! TCP connections that never send a byte held open, and `/healthz`, `/readyz`, `/metrics`
//! and `POST /hooks/git` still answering (the old hand-written server stopped at 64).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use fwc_runtime::metrics::{github_signature, http_request};
use fwc_testkit::{privileged, Netns};

mod agent_common;
use agent_common::*;

#[test]
fn five_hundred_idle_connections_do_not_starve_probes_metrics_or_the_webhook() {
    if !privileged("five_hundred_idle_connections_do_not_starve_probes_metrics_or_the_webhook") {
        return;
    }
    // This process holds 500 sockets too.
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(8192);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let ns = Netns::new("http");
    let repo = Repo::new();
    let c1 = repo.commit(&allow(80, "web"), "v1", None, false);
    let state = repo.root.join("state");
    let secret = repo.root.join("hook.secret");
    std::fs::write(&secret, "hunter2\n").unwrap();
    let agent = AgentProc::start(&state, &repo.url(), &ns.name, &["--no-forwarder", "--webhook-secret-file", secret.to_str().unwrap()], &[]);
    wait_entry(&state, &c1, "apply", &agent);

    let idle: Vec<TcpStream> = (0..500).map(|i| TcpStream::connect(agent.metrics).unwrap_or_else(|e| panic!("connection {i}: {e}"))).collect();
    // Give the server time to accept them all.
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    assert_eq!(http_request(agent.metrics, "GET", "/healthz", &[], b"").unwrap().0, 200);
    assert_eq!(http_request(agent.metrics, "GET", "/readyz", &[], b"").unwrap().0, 200);
    let (code, m) = http_request(agent.metrics, "GET", "/metrics", &[], b"").unwrap();
    assert_eq!(code, 200);
    assert!(m.contains(&format!("fwc_applied_commit_info{{host=\"localhost\",commit=\"{c1}\"}} 1")), "{m}");
    let body = br#"{"after":"x1"}"#;
    let sig = github_signature(b"hunter2", body);
    assert_eq!(http_request(agent.metrics, "POST", "/hooks/git", &[("X-Hub-Signature-256", &sig)], body).unwrap().0, 202);
    eprintln!("four requests with 500 idle connections open: {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(5), "the requests must not wait for idle connections to time out");

    // The idle connections are closed by the server's header-read timeout (10 s), not kept forever.
    let mut first = idle.into_iter().next().unwrap();
    first.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t1 = Instant::now();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut first, &mut buf).unwrap_or(0);
    assert!(n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&buf[..n]));
    assert!(t1.elapsed() < Duration::from_secs(15), "idle connection held {:?}", t1.elapsed());
}
