//! Run a backend inside a named network namespace (`--netns NS`): every call happens on a
//! short-lived thread that first joins `/run/netns/NS` with setns(2), so interface lookups,
//! netlink and tc/TCX attachments see the namespace's interfaces, never the host's.
//! (The nftables backend does not need this: it runs `ip netns exec NS nft …`.)

use std::os::fd::AsRawFd;

use fwc_compiler::artifacts::{Artifacts, BackendKind};
use miette::{miette, Result};

use super::{Backend, Observation};

/// `inner`, with every call made from inside network namespace `ns`.
pub struct InNetns<B> {
    ns: String,
    inner: B,
}

impl<B> InNetns<B> {
    pub fn new(ns: impl Into<String>, inner: B) -> Self {
        InNetns { ns: ns.into(), inner }
    }
}

/// Move the calling thread into network namespace `ns` (threads it starts afterwards inherit it).
pub fn enter_netns(ns: &str) -> Result<()> {
    let path = format!("/run/netns/{ns}");
    let handle = std::fs::File::open(&path).map_err(|e| miette!("cannot open network namespace {path}: {e}"))?;
    // SAFETY: setns on this thread only; the fd is valid for the call.
    if unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(miette!("cannot enter network namespace {ns}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Run `f` on a thread that has joined network namespace `ns`.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(miette!("a backend call inside network namespace {ns} panicked")))
    })
}

impl<B: Backend + Send> Backend for InNetns<B> {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn prepare(&mut self, next: &Artifacts) -> Result<()> {
        let inner = &mut self.inner;
        in_netns(&self.ns, move || inner.prepare(next))
    }

    fn commit(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        in_netns(&self.ns, move || inner.commit())
    }

    fn rollback(&mut self, previous: Option<&Artifacts>) -> Result<()> {
        let inner = &mut self.inner;
        in_netns(&self.ns, move || inner.rollback(previous))
    }

    fn rollback_from(&mut self, previous: Option<&Artifacts>, committed: &Artifacts) -> Result<()> {
        let inner = &mut self.inner;
        in_netns(&self.ns, move || inner.rollback_from(previous, committed))
    }

    fn observe(&mut self, expected: &Artifacts) -> Result<Observation> {
        let inner = &mut self.inner;
        in_netns(&self.ns, move || inner.observe(expected))
    }
}
