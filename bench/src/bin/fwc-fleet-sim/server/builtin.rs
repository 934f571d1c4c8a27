//! The built-in server: a counting HTTP/1.1 front that runs `git http-backend` (CGI) per
//! request in a thread of this process (its CPU: the front's threads and the waited-for CGIs).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::measure::thread_cpu_ns;

#[derive(Default)]
pub(crate) struct GitStats {
    pub(crate) requests: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    /// CPU of the server's handler threads, ns.
    pub(crate) thread_cpu_ns: AtomicU64,
}

/// One HTTP/1.1 request to `git http-backend` (CGI); `Connection: close`.
fn handle(mut c: TcpStream, root: &Path, stats: &GitStats) -> std::io::Result<()> {
    let t0 = thread_cpu_ns();
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("GET").to_string(), parts.next().unwrap_or("/").to_string());
    let mut headers = HashMap::new();
    let mut head_len = line.len();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        head_len += h.len();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut body = Vec::new();
    if let Some(n) = headers.get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut sz = String::new();
            r.read_line(&mut sz)?;
            let n = usize::from_str_radix(sz.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if std::env::var_os("FWC_SIM_TRACE").is_some() {
        eprintln!("{method} {target}");
    }
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", headers.get("content-type").cloned().unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(p) = headers.get("git-protocol") {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output()?;
    let _ = writer.join();
    let split = out.stdout.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4)).or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (cgi_head, cgi_body) = match split {
        Some((i, n)) => (String::from_utf8_lossy(&out.stdout[..i]).to_string(), &out.stdout[i + n..]),
        None => (String::new(), &out.stdout[..]),
    };
    let mut status = "200 OK".to_string();
    let mut resp_headers = String::new();
    for h in cgi_head.lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
            Some(_) => {
                resp_headers.push_str(h.trim_end());
                resp_headers.push_str("\r\n");
            }
            None => {}
        }
    }
    let head = format!("HTTP/1.1 {status}\r\n{resp_headers}Content-Length: {}\r\nConnection: close\r\n\r\n", cgi_body.len());
    c.write_all(head.as_bytes())?;
    c.write_all(cgi_body)?;
    stats.requests.fetch_add(1, Ordering::Relaxed);
    stats.bytes_in.fetch_add((head_len + headers.get("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0)) as u64, Ordering::Relaxed);
    stats.bytes_out.fetch_add((head.len() + cgi_body.len()) as u64, Ordering::Relaxed);
    stats.thread_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(t0), Ordering::Relaxed);
    Ok(())
}

pub(crate) fn serve_git(root: PathBuf, stats: Arc<GitStats>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let (root, stats) = (root.clone(), stats.clone());
            std::thread::spawn(move || {
                let _ = handle(c, &root, &stats);
            });
        }
    });
    port
}
