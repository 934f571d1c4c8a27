//! `fwc rollout advance --watch --metrics ADDR`: serves the controller's metrics (the text of
//! [`super::textfile`], as of the last step that decided) on `GET /metrics`. A deliberately
//! small server on one thread: one request per connection, answered and closed; a client gets
//! 5 s to send its request head (at most 8 KiB), so a slow one delays the next scrape by at most
//! that, never the controller.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the endpoint serves; the watch loop replaces it after each step.
#[derive(Clone, Default)]
pub struct Exposition(Arc<Mutex<String>>);

impl Exposition {
    pub fn set(&self, text: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Listen on `addr` and serve `text` from a thread of its own; returns the bound address.
pub fn serve(addr: SocketAddr, text: Exposition) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("fwc-rollout-metrics".into()).spawn(move || {
        for conn in listener.incoming().flatten() {
            let _ = answer(conn, &text);
        }
    })?;
    Ok(bound)
}

fn answer(mut conn: TcpStream, text: &Exposition) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match (line.split_whitespace().next(), path.split('?').next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", text.get()),
        (Some("GET"), _) => ("404 Not Found", "only /metrics is served here\n".to_string()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".to_string()),
    };
    let reply = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    conn.write_all(reply.as_bytes())
}
