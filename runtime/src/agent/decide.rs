//! The agent's decisions, without I/O: which step a commit takes next (skip it, verify its
//! signature, check for a rewind, compile, refuse, adopt, apply), how failures are retried
//! (backoff), what a self-check attempt leads to, and what drift leads to. The agent loop
//! (`agent/mod.rs`) gathers the facts (git, files, the clock) and executes the steps.

use std::time::Duration;

/// Exponential backoff: `base`, 2 × base, 4 × base, … up to `cap` (fetches: 0.5 s doubling).
#[derive(Debug, Clone)]
pub struct Backoff {
    pub failures: u32,
    pub base: Duration,
    pub cap: Duration,
}

/// Shortest delay before a failed apply or heal is tried again.
pub const RETRY_MIN: Duration = Duration::from_secs(10);

impl Backoff {
    pub fn new(interval: Duration) -> Backoff {
        Backoff { failures: 0, base: Duration::from_millis(500), cap: (interval * 4).clamp(Duration::from_secs(1), Duration::from_secs(300)).max(interval) }
    }
    /// Retries of a failed apply or heal: the interval (at least [`RETRY_MIN`]), doubling, at
    /// most 32 times that and 1 h.
    pub fn for_retries(interval: Duration) -> Backoff {
        let base = interval.max(RETRY_MIN);
        Backoff { failures: 0, base, cap: (base * 32).min(Duration::from_secs(3600)).max(base) }
    }
    /// Delay before the next attempt after one more failure.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = self.base.saturating_mul(1u32 << (self.failures - 1).min(20));
        d.min(self.cap)
    }
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(2));
        let d: Vec<_> = (0..6).map(|_| b.fail().as_millis()).collect();
        assert_eq!(d, vec![500, 1000, 2000, 4000, 8000, 8000]);
        b.reset();
        assert_eq!(b.fail().as_millis(), 500);
        let mut b = Backoff::new(Duration::from_millis(200));
        assert_eq!((0..4).map(|_| b.fail().as_millis()).collect::<Vec<_>>(), vec![500, 1000, 1000, 1000]);
    }
}
