//! The byte pump of one TCP connection: both directions in the connection's task, zero copy
//! with `splice(2)` socket -> pipe -> socket (pipes from a pool, reused only after a clean
//! finish), or a buffered copy when splice is off or refused. Half-close, caps, counters, idle.
//!
//! Coalescing a bulk flow's writes: the sockets are TCP_NODELAY (a relay must not add Nagle's
//! delay to a request), so every splice out would end in a short segment. When a read filled
//! the pipe (the sender has more queued) the write says `SPLICE_F_MORE`: the tail waits for
//! the next write, which follows at once, and the next segment leaves whole. When the source
//! then turns out to have nothing (a read would block) the tail is pushed at once ([`push`]),
//! and EOF pushes it with the FIN; request/response traffic never fills a pipe and is never held.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::Shutdown;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::bucket::Bucket;

/// Size a pipe starts at (F_SETPIPE_SZ when it is created; `FWC_FORWARD_PIPE_SIZE`
/// overrides it). Small, so that request/response traffic and idle pools cost little.
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;
/// Size a pipe grows to while a flow keeps filling it (`FWC_FORWARD_PIPE_MAX` overrides it).
/// Picked by the 64 KiB - 4 MiB sweep in docs/performance.md: a bulk stream
/// through 1 MiB pipes makes ~7x fewer splice(2) calls per GB than through 64 KiB ones, and
/// whole-segment writes instead of a short segment at every 64 KiB boundary. Past
/// `fs.pipe-max-size` (1 MiB by default) only a process with CAP_SYS_RESOURCE may grow a
/// pipe; a refused grow leaves the pipe working at its size ([`PipePool::grow`]).
pub const DEFAULT_PIPE_MAX: usize = 1024 * 1024;
/// Grown pipes the pool keeps at their size (more are shrunk when they come back).
pub const KEEP_GROWN: usize = 8;
/// Buffer of the copy fallback, allocated only while a direction moves data.
const COPY_BUF: usize = 64 * 1024;

/// The grow policy of one direction, pure: a pipe grows after [`Growth::AFTER`] consecutive
/// reads that filled it (the sender had more than the pipe holds), by [`Growth::FACTOR`], up
/// to the pool's maximum. Reads cut short by a cap ([`Bucket::chunk`]) never fill the pipe, so
/// capped and request/response flows stay at the start size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Growth {
    full_reads: u32,
}

impl Growth {
    pub const AFTER: u32 = 2;
    pub const FACTOR: usize = 4;

    /// After a read of `read` bytes into an empty pipe of `size` bytes: the size to grow to.
    pub fn after_read(&mut self, read: usize, size: usize, max: usize) -> Option<usize> {
        if size >= max || read < size {
            self.full_reads = 0;
            return None;
        }
        self.full_reads += 1;
        if self.full_reads < Self::AFTER {
            return None;
        }
        self.full_reads = 0;
        Some(size.saturating_mul(Self::FACTOR).min(max))
    }
}

/// A pipe: read end, write end, capacity.
#[derive(Debug)]
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    size: usize,
    /// The kernel refused to grow it once: it keeps its size.
    stuck: bool,
}

impl Pipe {
    pub fn size(&self) -> usize {
        self.size
    }
}

/// Pipes kept for reuse (last in, first out: a flow that gives its pipe back while it waits
/// gets the same one again). A pipe goes back only when it is known to be empty.
#[derive(Debug)]
pub struct PipePool {
    free: Mutex<Vec<Pipe>>,
    size: usize,
    max: usize,
    max_free: usize,
    /// Pipes ever created (for tests and stats).
    pub created: AtomicU64,
    /// Grows (or start sizes) the kernel refused; logged once per pool.
    pub refused: AtomicU64,
    /// A write after a read that filled the pipe says `SPLICE_F_MORE` (module docs). On by
    /// default; off only to measure what it is worth ([`PipePool::hold_tails`]).
    hold_tails: bool,
}

impl PipePool {
    /// Pipes start at `size` and may grow to `max` (at least `size`); `max_free` are kept.
    pub fn new(size: usize, max: usize, max_free: usize) -> PipePool {
        PipePool {
            free: Mutex::new(Vec::new()),
            size,
            max: max.max(size),
            max_free,
            created: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            hold_tails: true,
        }
    }

    /// Whether writes after a full read hold their tail (`SPLICE_F_MORE`); off = every write
    /// pushes its last segment at once, as before the tail was held.
    pub fn hold_tails(mut self, on: bool) -> PipePool {
        self.hold_tails = on;
        self
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn get(&self) -> io::Result<Pipe> {
        if let Some(p) = self.free.lock().unwrap().pop() {
            return Ok(p);
        }
        let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let have = rustix::pipe::fcntl_getpipe_size(&w).unwrap_or(4096);
        let mut p = Pipe { r, w, size: have, stuck: false };
        if have != self.size {
            // A user past fs.pipe-user-pages-soft gets 2-page pipes that cannot grow.
            self.grow(&mut p, self.size);
        }
        self.created.fetch_add(1, Relaxed);
        Ok(p)
    }

    /// Ask the kernel for `to` bytes. Refused (EPERM: past `fs.pipe-max-size` without
    /// CAP_SYS_RESOURCE, or past the user's `fs.pipe-user-pages-*`; ENOMEM): the pipe keeps
    /// working at its size and is not asked again; the first refusal of the pool is logged.
    pub fn grow(&self, p: &mut Pipe, to: usize) {
        match rustix::pipe::fcntl_setpipe_size(&p.w, to) {
            Ok(n) => p.size = n,
            Err(e) => {
                p.stuck = true;
                if self.refused.fetch_add(1, Relaxed) == 0 {
                    tracing::warn!(
                        "forwarder: the kernel refused a {to}-byte pipe ({e}); pipes stay at {} bytes \
                         (fs.pipe-max-size, fs.pipe-user-pages-soft; said once)",
                        p.size
                    );
                }
            }
        }
    }

    /// Return an empty pipe. Grown pipes count against the user's pipe quota
    /// (`fs.pipe-user-pages-soft`, 64 MiB by default, which a process without
    /// CAP_SYS_RESOURCE cannot pass): past [`KEEP_GROWN`] of them in the pool, a returned one
    /// is shrunk back to the start size (allowed for an empty pipe).
    fn put(&self, mut p: Pipe) {
        let mut f = self.free.lock().unwrap();
        if f.len() >= self.max_free {
            return;
        }
        if p.size > self.size && f.iter().filter(|q| q.size > self.size).count() >= KEEP_GROWN {
            if let Ok(n) = rustix::pipe::fcntl_setpipe_size(&p.w, self.size) {
                p.size = n;
            }
        }
        f.push(p);
    }

    pub fn free_len(&self) -> usize {
        self.free.lock().unwrap().len()
    }

    pub fn free_sizes(&self) -> Vec<usize> {
        self.free.lock().unwrap().iter().map(|p| p.size).collect()
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
    // A pipe is held only while bytes move: taken when the socket is readable, given back
    // (empty) whenever the socket has nothing more, so idle connections hold no pipes and no
    // probe (MSG_PEEK) is needed to tell a spurious wakeup from data.
    let mut pipe: Option<Pipe> = None;
    let mut growth = Growth::default();
    let mut total = 0u64;
    // The last write to dst left its tail waiting for more (SPLICE_F_MORE).
    let mut held = false;
    loop {
        f.bucket.ready().await;
        if let Err(e) = src.readable().await {
            if let Some(p) = pipe.take() {
                pool.put(p);
            }
            return Err(e);
        }
        if pipe.is_none() {
            pipe = Some(pool.get()?);
        }
        let p = pipe.as_mut().unwrap();
        let want = p.size.min(f.bucket.chunk());
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing.
        let r = src.try_io(Interest::READABLE, || {
            rustix::pipe::splice(src.as_fd(), None, p.w.as_fd(), None, want, flags).map_err(io::Error::from)
        });
        let mut pending = match r {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                pool.put(pipe.take().unwrap());
                if held {
                    held = false;
                    push(dst);
                }
                continue;
            }
            Err(e) if is_refusal(&e) => {
                pool.put(pipe.take().unwrap());
                if held {
                    push(dst);
                }
                return Ok(Spliced::Refused(total));
            }
            Err(e) => return Err(e),
        };
        // A read that filled the pipe left more in the socket: hold the write's tail for it.
        // Capped flows are never held (their next read may wait for the bucket).
        held = pool.hold_tails && pending == p.size && !f.bucket.limited();
        let out_flags = if held { flags | SpliceFlags::MORE } else { flags };
        f.bucket.consume(pending);
        f.activity.store(crate::now_ms(), Relaxed);
        let grow_to = if p.stuck { None } else { growth.after_read(pending, p.size, pool.max) };
        while pending > 0 {
            dst.writable().await?;
            let r = dst.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(p.r.as_fd(), None, dst.as_fd(), None, pending, out_flags).map_err(io::Error::from)
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
        if let Some(to) = grow_to {
            pool.grow(p, to);
        }
    }
    if let Some(p) = pipe {
        pool.put(p);
    }
    Ok(Spliced::Eof(total))
}

/// Send what a `SPLICE_F_MORE` write left waiting: setting TCP_NODELAY (already on: the
/// relay sets it on both sockets) pushes the socket's pending segments out.
fn push(dst: &TcpStream) {
    if let Err(e) = rustix::net::sockopt::set_tcp_nodelay(dst, true) {
        tracing::debug!("push after a held write: {e}");
    }
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

#[cfg(test)]
mod tests {
    use super::{Growth, PipePool, KEEP_GROWN};

    const K: usize = 1024;

    /// (read, size, max) per step -> the size asked for after that read.
    #[test]
    fn a_pipe_grows_after_two_full_reads_by_four_up_to_the_max() {
        let table: &[(&[(usize, usize, usize)], &[Option<usize>])] = &[
            // a bulk flow: two full reads, grow x4; again; capped at the max
            (&[(64 * K, 64 * K, 1024 * K), (64 * K, 64 * K, 1024 * K)], &[None, Some(256 * K)]),
            (&[(256 * K, 256 * K, 1024 * K), (256 * K, 256 * K, 1024 * K)], &[None, Some(1024 * K)]),
            (&[(512 * K, 512 * K, 1024 * K), (512 * K, 512 * K, 1024 * K)], &[None, Some(1024 * K)]),
            // at the max: never
            (&[(1024 * K, 1024 * K, 1024 * K), (1024 * K, 1024 * K, 1024 * K)], &[None, None]),
            // a short read (request/response, or a cap's chunk) resets the count
            (&[(64 * K, 64 * K, 1024 * K), (100, 64 * K, 1024 * K), (64 * K, 64 * K, 1024 * K)], &[None, None, None]),
            // max below the start size (FWC_FORWARD_PIPE_MAX smaller): never
            (&[(64 * K, 64 * K, 16 * K), (64 * K, 64 * K, 16 * K)], &[None, None]),
        ];
        for (steps, want) in table {
            let mut g = Growth::default();
            let got: Vec<Option<usize>> = steps.iter().map(|&(r, s, m)| g.after_read(r, s, m)).collect();
            assert_eq!(&got[..], *want, "{steps:?}");
        }
    }

    #[test]
    fn the_pool_keeps_a_few_grown_pipes_and_shrinks_the_rest() {
        let pool = PipePool::new(64 * K, 1024 * K, 256);
        let mut pipes: Vec<_> = (0..KEEP_GROWN + 4).map(|_| pool.get().unwrap()).collect();
        for p in &mut pipes {
            assert_eq!(p.size(), 64 * K);
            pool.grow(p, 256 * K);
            assert_eq!(p.size(), 256 * K);
        }
        for p in pipes {
            pool.put(p);
        }
        let mut sizes = pool.free_sizes();
        sizes.sort();
        let mut want = vec![64 * K; 4];
        want.extend(vec![256 * K; KEEP_GROWN]);
        assert_eq!(sizes, want);
        assert_eq!(pool.refused.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}
