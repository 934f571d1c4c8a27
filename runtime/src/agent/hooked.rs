//! The agent's test hooks: a backend wrapper that injects apply and rollback failures and
//! slow commits, active only with `FWC_AGENT_TEST_HOOKS=1`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fwc_compiler::artifacts::{Artifacts, BackendKind};
use miette::miette;

use crate::backend::{Backend, Observation};

/// Test hooks, active only with `FWC_AGENT_TEST_HOOKS=1`: a commit whose message contains
/// `[fwc-test: fail-apply]` makes the first backend fail right after its commit (so the real
/// rollback path runs), while the file named by `FWC_AGENT_TEST_FAIL_FILE` exists its commit
/// and rollback fail (a persistent failure), and `FWC_AGENT_TEST_SLOW_COMMIT_MS` sleeps after every backend commit
/// (a window for `kill -9` in the middle of an apply).
pub(super) struct Hooked {
    pub(super) inner: Box<dyn Backend>,
    pub(super) fail_commit: Arc<AtomicBool>,
    pub(super) slow: Option<Duration>,
    /// While this file exists, commit and rollback fail (a persistent failure).
    pub(super) fail_file: Option<PathBuf>,
}

impl Hooked {
    fn failing(&self) -> bool {
        self.fail_file.as_deref().is_some_and(Path::exists)
    }
}

impl Backend for Hooked {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn prepare(&mut self, next: &Artifacts) -> miette::Result<()> {
        self.inner.prepare(next)
    }
    fn commit(&mut self) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.commit()?;
        if let Some(d) = self.slow {
            eprintln!("fwc-agent-test: committed {}, sleeping {d:?}", self.inner.kind().as_str());
            std::thread::sleep(d);
        }
        if self.fail_commit.swap(false, Ordering::SeqCst) {
            return Err(miette!("injected failure after commit ([fwc-test: fail-apply])"));
        }
        Ok(())
    }
    fn rollback(&mut self, previous: Option<&Artifacts>) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected rollback failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.rollback(previous)
    }
    fn rollback_from(&mut self, previous: Option<&Artifacts>, committed: &Artifacts) -> miette::Result<()> {
        if self.failing() {
            return Err(miette!("injected rollback failure (FWC_AGENT_TEST_FAIL_FILE exists)"));
        }
        self.inner.rollback_from(previous, committed)
    }
    fn observe(&mut self, expected: &Artifacts) -> miette::Result<Observation> {
        self.inner.observe(expected)
    }
}

pub(super) const FAIL_MARKER: &str = "[fwc-test: fail-apply]";
