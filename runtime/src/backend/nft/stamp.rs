//! "Nothing changed since fwc last saw the table in sync": the kernel's nftables generation id
//! (`NFT_MSG_GETGEN`, bumped by every committed nftables transaction of a network namespace,
//! whoever sends it) with the boot and the namespace, recorded in the state dir's cache when an
//! observation proved the live table equal to an applied `nftables.json`. While the stamp still
//! matches, the plan and the next apply need not list (or render) a single set element.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use miette::{miette, Result};
use serde::{Deserialize, Serialize};

/// Where the live nftables state stands: boot, network namespace and generation id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub boot: String,
    pub netns_inode: u64,
    pub genid: u32,
}

impl Token {
    /// The token after exactly one more committed transaction.
    pub fn next(&self) -> Token {
        Token { genid: self.genid.wrapping_add(1), ..self.clone() }
    }
}

/// The token of namespace `netns` (None: the caller's own).
pub fn token(netns: Option<&str>) -> Result<Token> {
    let read = || -> Result<Token> {
        let mut boot = String::new();
        std::fs::File::open("/proc/sys/kernel/random/boot_id").and_then(|mut f| f.read_to_string(&mut boot)).map_err(|e| miette!("cannot read the boot id: {e}"))?;
        let ino = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| miette!("cannot stat the network namespace: {e}"))?.ino();
        Ok(Token { boot: boot.trim().to_string(), netns_inode: ino, genid: genid()? })
    };
    match netns {
        Some(ns) => crate::backend::netns::in_netns(ns, read),
        None => read(),
    }
}

/// `NFT_MSG_GETGEN` over a netfilter netlink socket of the calling thread's namespace.
fn genid() -> Result<u32> {
    // SAFETY: plain socket calls on a descriptor owned here and closed below.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
    if fd < 0 {
        return Err(miette!("cannot open a netfilter netlink socket: {}", std::io::Error::last_os_error()));
    }
    let result = (|| {
        const NFNL_SUBSYS_NFTABLES: u16 = 10;
        const NFT_MSG_GETGEN: u16 = 16;
        const NFTA_GEN_ID: u16 = 1;
        let mut msg = Vec::with_capacity(20);
        msg.extend_from_slice(&20u32.to_ne_bytes());
        msg.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN).to_ne_bytes());
        msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        msg.extend_from_slice(&[0, 0, 0, 0]); // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, res_id 0
        // SAFETY: msg outlives the call.
        if unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), 0) } < 0 {
            return Err(miette!("cannot ask the kernel for the nftables generation: {}", std::io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 20 {
            return Err(miette!("no answer from the kernel for the nftables generation: {}", std::io::Error::last_os_error()));
        }
        let buf = &buf[..n as usize];
        let u16_at = |o: usize| u16::from_ne_bytes([buf[o], buf[o + 1]]);
        if u16_at(4) == libc::NLMSG_ERROR as u16 {
            return Err(miette!("the kernel refused the nftables generation request"));
        }
        let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).min(buf.len());
        let mut o = 20;
        while o + 4 <= len {
            let (alen, atype) = (u16_at(o) as usize, u16_at(o + 2) & 0x3fff);
            if alen < 4 {
                break;
            }
            if atype == NFTA_GEN_ID && o + 8 <= len {
                return Ok(u32::from_be_bytes([buf[o + 4], buf[o + 5], buf[o + 6], buf[o + 7]]));
            }
            o += (alen + 3) & !3;
        }
        Err(miette!("the kernel's answer has no nftables generation id"))
    })();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    result
}

/// The stamp file in a cache dir.
fn path(cache_dir: &Path) -> PathBuf {
    cache_dir.join("nft-in-sync.json")
}

#[derive(Serialize, Deserialize, PartialEq)]
struct Stamp {
    token: Token,
    /// sha256 of the `nftables.json` the live table was equal to.
    nftables_sha256: String,
}

/// Whether the live table was last seen equal to the `nftables.json` of digest `digest`, at
/// exactly `now` (nothing was committed since).
pub fn in_sync(cache_dir: &Path, now: &Token, digest: &str) -> bool {
    std::fs::read(path(cache_dir))
        .ok()
        .and_then(|b| serde_json::from_slice::<Stamp>(&b).ok())
        .is_some_and(|s| s.token == *now && s.nftables_sha256 == digest)
}

/// Record that at `now` the live table equals the `nftables.json` of digest `digest`.
pub fn record(cache_dir: &Path, now: &Token, digest: &str) {
    let s = Stamp { token: now.clone(), nftables_sha256: digest.to_string() };
    if std::fs::create_dir_all(cache_dir).is_ok() {
        let _ = crate::state::write_atomic(&path(cache_dir), &serde_json::to_vec(&s).unwrap_or_default());
    }
}

/// Forget the stamp (the table changed in a way not proven equal to anything).
pub fn forget(cache_dir: &Path) {
    let _ = std::fs::remove_file(path(cache_dir));
}
