//! Token bucket shared by all connections of a rule in one direction. Debt is allowed: a
//! transfer may take more than the tokens left (even more than the burst), the bucket goes
//! negative and the next transfer waits until it is paid back, so large reads never stall.
//! An unlimited bucket answers from one atomic flag, without its lock: the relay asks it at
//! every step and the UDP path at every datagram.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Smallest and largest chunk a capped flow moves per step.
const MIN_CHUNK: usize = 4 * 1024;
const MAX_CHUNK: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Bucket {
    state: Mutex<State>,
    /// `state.rate.is_some()`, readable without the lock (written under it by [`Bucket::set`]).
    limited: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// Bytes per second; `None` = unlimited.
    rate: Option<f64>,
    burst: f64,
    tokens: f64,
    last: Instant,
}

/// Default bucket depth for a rate: max(0.5 s of rate, 64 KiB), as the compiler documents.
pub fn default_burst(rate: u64) -> u64 {
    (rate / 2).max(64 * 1024)
}

impl Bucket {
    pub fn new(rate: Option<u64>, burst: Option<u64>) -> Bucket {
        let b = Bucket {
            state: Mutex::new(State { rate: None, burst: 0.0, tokens: 0.0, last: Instant::now() }),
            limited: AtomicBool::new(false),
        };
        b.set(rate, burst);
        b
    }

    /// Change rate and burst in place (reload); tokens are kept, clamped to the new burst.
    pub fn set(&self, rate: Option<u64>, burst: Option<u64>) {
        let mut s = self.state.lock().unwrap();
        let was_limited = s.rate.is_some();
        refill(&mut s);
        s.rate = rate.filter(|r| *r > 0).map(|r| r as f64);
        if let Some(r) = s.rate {
            s.burst = burst.unwrap_or_else(|| default_burst(r as u64)) as f64;
            if !was_limited {
                s.tokens = s.burst;
            }
            s.tokens = s.tokens.min(s.burst);
        }
        self.limited.store(s.rate.is_some(), Ordering::Release);
    }

    /// A reload that changes the rate is seen by the next step of every flow (a step already
    /// past this check moves one more chunk under the old setting).
    pub fn limited(&self) -> bool {
        self.limited.load(Ordering::Acquire)
    }

    /// How many bytes a capped flow should move per step: ~1/64 s of rate, bounded.
    pub fn chunk(&self) -> usize {
        if !self.limited() {
            return usize::MAX;
        }
        match self.state.lock().unwrap().rate {
            None => usize::MAX,
            Some(r) => ((r / 64.0) as usize).clamp(MIN_CHUNK, MAX_CHUNK),
        }
    }

    /// Wait until the bucket is out of debt (tokens > 0). Returns at once when unlimited.
    pub async fn ready(&self) {
        if !self.limited() {
            return;
        }
        loop {
            let wait = {
                let mut s = self.state.lock().unwrap();
                let Some(rate) = s.rate else { return };
                refill(&mut s);
                if s.tokens > 0.0 {
                    return;
                }
                Duration::from_secs_f64((-s.tokens + 1.0) / rate)
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// Charge `n` bytes (may go into debt).
    pub fn consume(&self, n: usize) {
        if !self.limited() {
            return;
        }
        let mut s = self.state.lock().unwrap();
        if s.rate.is_some() {
            refill(&mut s);
            s.tokens -= n as f64;
        }
    }

    /// For datagrams: charge `n` bytes if the bucket is not in debt, else refuse.
    pub fn try_consume(&self, n: usize) -> bool {
        if !self.limited() {
            return true;
        }
        let mut s = self.state.lock().unwrap();
        if s.rate.is_none() {
            return true;
        }
        refill(&mut s);
        if s.tokens > 0.0 {
            s.tokens -= n as f64;
            true
        } else {
            false
        }
    }
}

fn refill(s: &mut State) {
    let now = Instant::now();
    if let Some(rate) = s.rate {
        let dt = now.duration_since(s.last).as_secs_f64();
        s.tokens = (s.tokens + dt * rate).min(s.burst);
    }
    s.last = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debt_is_allowed_and_paid_back() {
        let b = Bucket::new(Some(1000), Some(100));
        assert!(b.try_consume(5000));
        assert!(!b.try_consume(1));
        b.set(None, None);
        assert!(b.try_consume(1_000_000));
    }

    #[tokio::test]
    async fn read_larger_than_burst_does_not_stall() {
        let b = Bucket::new(Some(100_000), Some(1000));
        let t = Instant::now();
        for _ in 0..5 {
            b.ready().await;
            b.consume(10_000);
        }
        // 50 KB at 100 KB/s with 1 KB burst: ~0.4 s (the first chunk is free).
        let e = t.elapsed().as_secs_f64();
        assert!(e > 0.3 && e < 0.8, "{e}");
    }
}
