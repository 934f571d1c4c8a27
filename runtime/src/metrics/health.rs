//! What `/healthz` and `/readyz` report: the reconcile loop's liveness (a tick with a stall
//! deadline), readiness, degradation and a status line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What `/healthz` and `/readyz` report; updated by the reconcile loop.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds since `started` of the last reconcile loop tick.
    last_tick_ms: AtomicU64,
    /// The loop is considered stuck after this long without a tick.
    pub stall_after: Duration,
    /// Set once a commit has been applied or the existing state adopted.
    pub ready: AtomicBool,
    pub degraded: AtomicBool,
    pub status: Mutex<String>,
}

impl Health {
    pub fn new(stall_after: Duration) -> Health {
        Health {
            started: Instant::now(),
            last_tick_ms: AtomicU64::new(0),
            stall_after,
            ready: AtomicBool::new(false),
            degraded: AtomicBool::new(false),
            status: Mutex::new("starting".into()),
        }
    }

    pub fn tick(&self) {
        self.last_tick_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub fn set_status(&self, s: impl Into<String>) {
        *self.status.lock().unwrap() = s.into();
    }

    pub(crate) fn alive(&self) -> bool {
        let last = Duration::from_millis(self.last_tick_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last) < self.stall_after
    }
}
