//! The byte pump of one TCP connection: both directions in the connection's task, zero copy
//! with `splice(2)` socket -> pipe -> socket (pipes from a pool, reused only after a clean
//! finish), or a buffered copy when splice is off or refused. Half-close, caps, counters, idle.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{RecvFlags, Shutdown};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::bucket::Bucket;

/// Default pipe capacity (set with F_SETPIPE_SZ; `FWC_FORWARD_PIPE_SIZE` overrides it, up to
/// the kernel's `pipe-max-size`, 1 MiB by default). Measured over loopback on the 2-core
/// bench machine, 64 KiB moved more and cost no more CPU per byte than 256 KiB or 1 MiB:
/// smaller steps keep client -> forwarder -> target pipelined (docs/performance.md).
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;
/// Buffer of the copy fallback, allocated only while a direction moves data.
const COPY_BUF: usize = 64 * 1024;

/// A pipe: read end, write end, capacity.
#[derive(Debug)]
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    size: usize,
}

/// Pipes kept for reuse. A pipe goes back only when it is known to be empty.
#[derive(Debug)]
pub struct PipePool {
    free: Mutex<Vec<Pipe>>,
    size: usize,
    max_free: usize,
    /// Pipes ever created (for tests and stats).
    pub created: AtomicU64,
}

impl PipePool {
    pub fn new(size: usize, max_free: usize) -> PipePool {
        PipePool { free: Mutex::new(Vec::new()), size, max_free, created: AtomicU64::new(0) }
    }

    pub fn get(&self) -> io::Result<Pipe> {
        if let Some(p) = self.free.lock().unwrap().pop() {
            return Ok(p);
        }
        let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // Raising the size may be refused (pipe-max-size, user pipe quota): keep what we got.
        let size = rustix::pipe::fcntl_setpipe_size(&w, self.size)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&w))
            .unwrap_or(64 * 1024);
        self.created.fetch_add(1, Relaxed);
        Ok(Pipe { r, w, size })
    }

    /// Return an empty pipe.
    fn put(&self, p: Pipe) {
        let mut f = self.free.lock().unwrap();
        if f.len() < self.max_free {
            f.push(p);
        }
    }

    pub fn free_len(&self) -> usize {
        self.free.lock().unwrap().len()
    }
}

/// What one direction needs besides the two sockets.
pub struct Flow<'a> {
    /// Bytes delivered in this direction (live, per rule).
    pub counter: &'a AtomicU64,
    /// The rule's cap in this direction (unlimited buckets cost one lock per step).
    pub bucket: &'a Bucket,
    /// Last activity of the connection, [`crate::now_ms`].
    pub activity: &'a AtomicU64,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both directions saw EOF and were delivered completely.
    Done,
    /// No byte moved for the idle timeout.
    Idle,
}

/// Move bytes both ways between `a` (client) and `b` (target) until both directions end,
/// an error occurs (the other direction is then dropped too) or the connection is idle for
/// `idle`. Returns (bytes a->b, bytes b->a) when done.
pub async fn pump(
    a: &TcpStream,
    b: &TcpStream,
    pool: Option<&PipePool>,
    up: Flow<'_>,
    down: Flow<'_>,
    idle: Duration,
) -> io::Result<(End, u64, u64)> {
    let activity = up.activity;
    let both = async {
        tokio::try_join!(one_way(a, b, pool, up), one_way(b, a, pool, down))
    };
    tokio::select! {
        r = both => { let (u, d) = r?; Ok((End::Done, u, d)) }
        _ = idle_watch(activity, idle) => Ok((End::Idle, 0, 0)),
    }
}

/// Resolves once `activity` is older than `idle`.
async fn idle_watch(activity: &AtomicU64, idle: Duration) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let last = activity.load(Relaxed);
        let now = crate::now_ms();
        if now >= last + idle_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(last + idle_ms - now)).await;
    }
}

/// One direction: src -> dst until EOF, then shutdown(SHUT_WR) on dst.
async fn one_way(src: &TcpStream, dst: &TcpStream, pool: Option<&PipePool>, f: Flow<'_>) -> io::Result<u64> {
    let total = match pool {
        Some(pool) => match splice_loop(src, dst, pool, &f).await? {
            Spliced::Eof(n) => n,
            Spliced::Refused(n) => n + copy_loop(src, dst, &f).await?,
        },
        None => copy_loop(src, dst, &f).await?,
    };
    // Half-close: the peer sees EOF, the other direction keeps flowing. ENOTCONN is fine
    // (the peer is already gone; the other direction will see that).
    match rustix::net::shutdown(dst, Shutdown::Write) {
        Ok(()) | Err(rustix::io::Errno::NOTCONN) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(total)
}

enum Spliced {
    Eof(u64),
    /// splice is not supported for this pair: continue with a copy (after `n` bytes).
    Refused(u64),
}

fn is_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP))
}

async fn splice_loop(src: &TcpStream, dst: &TcpStream, pool: &PipePool, f: &Flow<'_>) -> io::Result<Spliced> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    // The pipe is taken when data first arrives: idle connections hold no pipes.
    let mut pipe: Option<Pipe> = None;
    let mut total = 0u64;
    loop {
        f.bucket.ready().await;
        src.readable().await?;
        if pipe.is_none() {
            // Readiness may be spurious: take a pipe only once a byte (or EOF) is really there,
            // so thousands of idle connections hold no pipes.
            let mut probe = [0u8; 1];
            let peek = src.try_io(Interest::READABLE, || {
                rustix::net::recv(src.as_fd(), &mut probe, RecvFlags::PEEK | RecvFlags::DONTWAIT)
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            });
            match peek {
                Ok(0) => break, // EOF before any data
                Ok(_) => pipe = Some(pool.get()?),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        let p = pipe.as_ref().unwrap();
        let want = p.size.min(f.bucket.chunk());
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing.
        let r = src.try_io(Interest::READABLE, || {
            rustix::pipe::splice(src.as_fd(), None, p.w.as_fd(), None, want, flags).map_err(io::Error::from)
        });
        let mut pending = match r {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if is_refusal(&e) => {
                pool.put(pipe.take().unwrap());
                return Ok(Spliced::Refused(total));
            }
            Err(e) => return Err(e),
        };
        f.bucket.consume(pending);
        f.activity.store(crate::now_ms(), Relaxed);
        while pending > 0 {
            dst.writable().await?;
            let r = dst.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(p.r.as_fd(), None, dst.as_fd(), None, pending, flags).map_err(io::Error::from)
            });
            match r {
                Ok(n) => {
                    pending -= n;
                    total += n as u64;
                    f.counter.fetch_add(n as u64, Relaxed);
                    f.activity.store(crate::now_ms(), Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The pipe still holds data: it is dropped (closed), never pooled.
                Err(e) => return Err(e),
            }
        }
    }
    if let Some(p) = pipe {
        pool.put(p);
    }
    Ok(Spliced::Eof(total))
}

async fn copy_loop(src: &TcpStream, dst: &TcpStream, f: &Flow<'_>) -> io::Result<u64> {
    let mut buf: Vec<u8> = Vec::new();
    let mut total = 0u64;
    loop {
        f.bucket.ready().await;
        src.readable().await?;
        if buf.is_empty() {
            buf = vec![0u8; COPY_BUF];
        }
        let want = buf.len().min(f.bucket.chunk());
        let n = match src.try_read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        f.bucket.consume(n);
        f.activity.store(crate::now_ms(), Relaxed);
        let mut off = 0;
        while off < n {
            dst.writable().await?;
            match dst.try_write(&buf[off..n]) {
                Ok(w) => {
                    off += w;
                    total += w as u64;
                    f.counter.fetch_add(w as u64, Relaxed);
                    f.activity.store(crate::now_ms(), Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(total)
}
