//! Where the QoS dataplane is pinned so that it outlives the process that loaded it.
//!
//! TCX links, the program and the maps live as long as their pins (or an open fd). A bpffs
//! only keeps pins while it is mounted somewhere: `ip netns exec NS fwc apply` runs in a
//! private mount namespace in which `/sys` is a fresh sysfs without the host's bpffs, and a
//! bpffs mounted there disappears with the process — together with the cap it enforced. So:
//!
//! 1. `/sys/fs/bpf` is a bpffs here: pin there (the host's, or a container's own);
//! 2. else, an ancestor process (the shell that ran `ip netns exec`) lives in another mount
//!    namespace whose `/sys/fs/bpf` is a bpffs: pin there, through `/proc/PID/root`;
//! 3. else, if no ancestor is in another mount namespace, this is the system's (or the
//!    container's) own mount namespace: mount a bpffs at `/sys/fs/bpf` (it stays mounted);
//! 4. else refuse, saying what to do — never pin where the pins die with the process.
//!
//! The root's name follows the network namespace: `fwc` for the namespace fwc was started in,
//! `fwc-netns-NS` for `--netns NS` and for a process already inside the named namespace NS
//! (`ip netns exec NS fwc …`), so both ways of targeting NS share one dataplane.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::{sys, QosError};

const BPFFS: &str = "/sys/fs/bpf";

/// Where fwc pins its program, maps and links unless told otherwise.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/fwc";

/// The pin root of the QoS dataplane `fwc apply` manages: [`DEFAULT_PIN_ROOT`], or
/// `/sys/fs/bpf/fwc-netns-NS` for `fwc apply --netns NS` (bpffs is shared by every network
/// namespace, so each namespace's program and maps need a root of their own).
///
/// The root is on a bpffs that outlives this process ([`resolve`]); when there is
/// none, the plain `/sys/fs/bpf/...` path is returned and loading refuses later
/// (`fwc apply` asks [`resolve`] itself, to refuse before changing anything).
pub fn pin_root_for(netns: Option<&str>) -> std::path::PathBuf {
    resolve(netns).unwrap_or_else(|_| match netns {
        None => DEFAULT_PIN_ROOT.into(),
        Some(ns) => format!("{DEFAULT_PIN_ROOT}-netns-{ns}").into(),
    })
}

/// The pin root for `netns` (`None`: the calling thread's namespace), on a bpffs that outlives
/// this process; an error says why there is none and what to do.
pub fn resolve(netns: Option<&str>) -> Result<PathBuf, QosError> {
    let name = match netns {
        Some(ns) => format!("fwc-netns-{ns}"),
        None => match current_netns_name() {
            Some(ns) => format!("fwc-netns-{ns}"),
            None => Path::new(DEFAULT_PIN_ROOT).file_name().unwrap().to_string_lossy().into_owned(),
        },
    };
    Ok(persistent_bpffs()?.join(name))
}

/// A bpffs directory whose pins outlive this process (see the module docs).
pub fn persistent_bpffs() -> Result<PathBuf, QosError> {
    if sys::is_bpffs(Path::new(BPFFS)) {
        return Ok(BPFFS.into());
    }
    let mine = mount_ns(std::process::id());
    let mut other_ns = false;
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..64 {
        if pid <= 1 {
            break;
        }
        let theirs = mount_ns(pid);
        if theirs.is_some() && theirs != mine {
            other_ns = true;
            let root = PathBuf::from(format!("/proc/{pid}/root{BPFFS}"));
            if sys::is_bpffs(&root) {
                return Ok(root);
            }
        }
        match parent_of(pid) {
            Some(p) => pid = p,
            None => break,
        }
    }
    if !other_ns {
        return Ok(BPFFS.into()); // our own mount namespace: ensure_pin_root mounts a bpffs
    }
    Err(QosError(
        "cannot pin the eBPF QoS dataplane where it outlives this process: fwc runs in a private \
         mount namespace (`ip netns exec`?) without the host's bpffs, so a cap applied from here \
         would vanish when fwc exits. Run `fwc apply --netns NS` from the host instead of \
         `ip netns exec NS fwc apply`, or mount a bpffs on the host first (`mount -t bpf bpf /sys/fs/bpf`)."
            .into(),
    ))
}

/// The name under /run/netns of the calling thread's network namespace, if it has one.
pub fn current_netns_name() -> Option<String> {
    let me = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    let rd = std::fs::read_dir("/run/netns").ok()?;
    let mut names: Vec<String> = rd
        .flatten()
        .filter(|e| e.metadata().map(|m| m.dev() == me.dev() && m.ino() == me.ino()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

fn mount_ns(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid …; comm may hold spaces and parentheses: split after the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}
