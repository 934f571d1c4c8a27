//! Per-rule admission limits: `max-conns` (concurrent connections or UDP sessions) and
//! `conn-rate` (new connections per period, token bucket with a burst). Both can be changed
//! in place on reload; a refused connection is closed at once and counted by the caller.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use fwc_artifacts::ConnRateLimit;

#[derive(Debug, Default)]
pub struct Limits {
    /// 0 = unlimited.
    max_conns: AtomicU64,
    rate: Mutex<Option<RateState>>,
}

#[derive(Debug)]
struct RateState {
    limit: ConnRateLimit,
    tokens: f64,
    last: Instant,
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    MaxConns,
    ConnRate,
}

impl Limits {
    pub fn new(max_conns: Option<u32>, rate: Option<ConnRateLimit>) -> Limits {
        let l = Limits::default();
        l.set(max_conns, rate);
        l
    }

    /// Apply new limits in place; a conn-rate whose parameters did not change keeps its tokens.
    pub fn set(&self, max_conns: Option<u32>, rate: Option<ConnRateLimit>) {
        self.max_conns.store(max_conns.unwrap_or(0) as u64, Relaxed);
        let mut r = self.rate.lock().unwrap();
        match (rate, r.as_mut()) {
            (None, _) => *r = None,
            (Some(l), Some(s)) if s.limit == l => {}
            (Some(l), _) => {
                *r = Some(RateState { limit: l, tokens: l.burst.max(1) as f64, last: Instant::now() })
            }
        }
    }

    pub fn max_conns(&self) -> Option<u64> {
        match self.max_conns.load(Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Admit one new connection given the rule's current number of active ones.
    pub fn admit(&self, active: u64) -> Result<(), Refusal> {
        if let Some(max) = self.max_conns() {
            if active >= max {
                return Err(Refusal::MaxConns);
            }
        }
        self.admit_rate()
    }

    /// Take one token of the conn-rate bucket (UDP sessions: the cap evicts instead).
    pub fn admit_rate(&self) -> Result<(), Refusal> {
        let mut r = self.rate.lock().unwrap();
        if let Some(s) = r.as_mut() {
            let now = Instant::now();
            let per_sec = s.limit.count as f64 / s.limit.period_secs.max(1) as f64;
            let burst = s.limit.burst.max(1) as f64;
            s.tokens = (s.tokens + now.duration_since(s.last).as_secs_f64() * per_sec).min(burst);
            s.last = now;
            if s.tokens < 1.0 {
                return Err(Refusal::ConnRate);
            }
            s.tokens -= 1.0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_conns_and_rate() {
        let l = Limits::new(Some(2), None);
        assert!(l.admit(1).is_ok());
        assert_eq!(l.admit(2), Err(Refusal::MaxConns));
        let l = Limits::new(None, Some(ConnRateLimit { count: 1, period_secs: 60, burst: 3 }));
        for _ in 0..3 {
            assert!(l.admit(0).is_ok());
        }
        assert_eq!(l.admit(0), Err(Refusal::ConnRate));
    }
}
