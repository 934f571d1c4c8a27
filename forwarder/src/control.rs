//! The control protocol of a running forwarder: a unix socket (`<state-dir>/forwarder.sock`,
//! mode 0600) speaking JSON lines, one request and one response per line. Used by
//! `fwc apply` (prepare / commit / status) and `fwc forward --stats`.
//!
//! Requests: `{"op":"prepare","config":{forward.json}}`, `{"op":"commit"}`, `{"op":"abort"}`,
//! `{"op":"apply","config":{…}}` (prepare + commit), `{"op":"status"}`, `{"op":"ping"}`.
//! Responses: `{"ok":true,…}` or `{"ok":false,"error":"…","conflicts":[…]}`.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fwc_artifacts::ForwardArtifact;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::server::{Forwarder, PrepareReport, ReloadError, Status};

/// File name of the control socket inside the state dir.
pub const SOCKET_NAME: &str = "forwarder.sock";

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Validate and bind new listeners; report conflicts. Nothing live changes.
    Prepare { config: ForwardArtifact },
    /// Switch to the prepared config.
    Commit,
    /// Forget the prepared config.
    Abort,
    /// Prepare and commit in one step.
    Apply { config: ForwardArtifact },
    /// The active listener set, the committed config and the counters.
    Status,
    Ping,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bind conflicts of a failed prepare, one per listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<PrepareReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl Response {
    fn from_reload(r: Result<PrepareReport, ReloadError>) -> Response {
        match r {
            Ok(report) => Response { ok: true, report: Some(report), ..Default::default() },
            Err(e) => {
                let conflicts = match &e {
                    ReloadError::Conflicts(c) | ReloadError::Commit(c) => c.clone(),
                    _ => Vec::new(),
                };
                Response { ok: false, error: Some(e.to_string()), conflicts, ..Default::default() }
            }
        }
    }
}

/// Answer one request.
pub async fn handle(fwd: &Forwarder, req: Request) -> Response {
    match req {
        Request::Prepare { config } => Response::from_reload(fwd.prepare(config).await),
        Request::Commit => Response::from_reload(fwd.commit().await),
        Request::Apply { config } => Response::from_reload(fwd.reload(config).await),
        Request::Abort => {
            fwd.abort().await;
            Response { ok: true, ..Default::default() }
        }
        Request::Status => Response { ok: true, status: Some(fwd.status().await), ..Default::default() },
        Request::Ping => Response { ok: true, ..Default::default() },
    }
}

/// Bind the control socket. Refuses when another forwarder answers on it; a stale socket
/// file (nobody listening) is replaced.
pub fn bind(path: &Path) -> io::Result<tokio::net::UnixListener> {
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another forwarder is already serving {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let l = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Serve the control socket until the task is dropped.
pub async fn serve(fwd: Forwarder, listener: tokio::net::UnixListener) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("control accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let fwd = fwd.clone();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = tokio::io::BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                let resp = match serde_json::from_str::<Request>(&line) {
                    Ok(req) => handle(&fwd, req).await,
                    Err(e) => Response { ok: false, error: Some(format!("bad request: {e}")), ..Default::default() },
                };
                let mut out = serde_json::to_vec(&resp).expect("responses serialize");
                out.push(b'\n');
                if w.write_all(&out).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// A blocking client (for the runtime's backend and the CLI, which are synchronous).
pub struct Client {
    reader: BufReader<std::os::unix::net::UnixStream>,
    writer: std::os::unix::net::UnixStream,
}

impl Client {
    /// Connect to the forwarder of `state_dir`. `NotFound` / `ConnectionRefused` mean no
    /// forwarder is running.
    pub fn connect(state_dir: &Path, timeout: Duration) -> io::Result<Client> {
        let s = std::os::unix::net::UnixStream::connect(socket_path(state_dir))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Client { reader: BufReader::new(s.try_clone()?), writer: s })
    }

    pub fn request(&mut self, req: &Request) -> io::Result<Response> {
        let mut out = serde_json::to_vec(req).map_err(io::Error::other)?;
        out.push(b'\n');
        self.writer.write_all(&out)?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "forwarder closed the control connection"));
        }
        serde_json::from_str(&line).map_err(io::Error::other)
    }
}

/// The `forward.json` last applied in a state dir (`state.json` -> current generation), or
/// `DIR/forward.json`; `None` when there is none.
pub fn applied_config(state_dir: &Path) -> io::Result<Option<ForwardArtifact>> {
    let mut candidates = Vec::new();
    if let Ok(text) = std::fs::read_to_string(state_dir.join("state.json")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if let Some(cur) = v.get("current").and_then(|c| c.as_str()) {
                candidates.push(state_dir.join(cur).join(fwc_artifacts::FORWARD_FILE));
            }
        }
    }
    candidates.push(state_dir.join(fwc_artifacts::FORWARD_FILE));
    for p in candidates {
        match std::fs::read_to_string(&p) {
            Ok(text) => {
                let cfg = serde_json::from_str(&text)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display())))?;
                return Ok(Some(cfg));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
        }
    }
    Ok(None)
}
