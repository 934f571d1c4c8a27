//! The few bpf(2) commands aya 0.14 does not expose the way the loader needs them: open a
//! pinned object by path, read a link's info, and swap a link's program atomically.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_UPDATE: libc::c_long = 29;
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> io::Result<i64> {
    // SAFETY: attr is a zero-initialised, correctly sized bpf_attr prefix for `cmd`.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `BPF_OBJ_GET`: a new fd for the object pinned at `path`.
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut attr = [0u8; 16];
    attr[0..8].copy_from_slice(&(c.as_ptr() as u64).to_ne_bytes());
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: the kernel returned a new fd that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// What `BPF_OBJ_GET_INFO_BY_FD` says about a link.
#[derive(Debug, Clone, Copy)]
pub struct LinkInfo {
    pub link_type: u32,
    pub id: u32,
    pub prog_id: u32,
    /// TCX / netkit links: the interface index (0 once the interface is gone).
    pub ifindex: u32,
    pub attach_type: u32,
}

pub fn link_info(fd: &OwnedFd) -> io::Result<LinkInfo> {
    use std::os::fd::AsRawFd;
    let mut info = [0u64; 16]; // struct bpf_link_info is 8-aligned; 128 bytes is enough
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(128u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let w = |i: usize| -> u32 { (info[i / 2] >> (32 * (i % 2))) as u32 };
    Ok(LinkInfo { link_type: w(0), id: w(1), prog_id: w(2), ifindex: w(4), attach_type: w(5) })
}

/// Program id of a program fd.
pub fn prog_id(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut info = [0u64; 32];
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(256u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok((info[0] >> 32) as u32)
}

/// `BPF_LINK_UPDATE`: atomically make `link` run `prog` (no gap for traffic).
pub fn link_update(link: &OwnedFd, prog: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(link.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    bpf(BPF_LINK_UPDATE, &mut attr)?;
    Ok(())
}

/// Is `path` on a BPF filesystem?
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: statfs writes into the zeroed struct we pass.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == BPF_FS_MAGIC
    }
}

/// Mount a bpffs at `dir` (as systemd does at /sys/fs/bpf on most distributions).
pub fn mount_bpffs(dir: &Path) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: plain mount(2) with static strings.
    let r = unsafe { libc::mount(c"bpf".as_ptr(), c.as_ptr(), c"bpf".as_ptr(), 0, std::ptr::null()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `if_nametoindex` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns()`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
