//! Per-source admission limits of a forward: `conn-rate-per-source` (a token
//! bucket per source) and `max-conns-per-source` (concurrent connections or UDP sessions per
//! source), the same semantics as the kernel's per-source sets. A source is an IPv4 address
//! masked to `prefix4`, an IPv6 address masked to `prefix6` (IPv4-mapped IPv6 counts as IPv4).
//! At most `size` sources are tracked per family; when that many are, idle entries (no
//! connection, bucket full again) are dropped, and if none is idle a new source is refused
//! (fail closed, like the kernel's full set).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fwc_artifacts::PerSourceLimit;

/// Why a source was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRefusal {
    /// `max-conns-per-source`: the source has that many connections open.
    MaxConns,
    /// `conn-rate-per-source`: the source's bucket is empty.
    ConnRate,
    /// The table holds `size` sources of this family and none is idle.
    Full,
}

#[derive(Debug)]
struct Entry {
    active: u64,
    tokens: f64,
    last: Instant,
}

#[derive(Debug, Default)]
struct State {
    cfg: Option<PerSourceLimit>,
    entries: HashMap<IpAddr, Entry>,
    /// Entries per family: [v4, v6].
    per_fam: [usize; 2],
    /// When a full table last found nothing to evict (a rescan waits a second).
    full_scan: Option<Instant>,
}

/// The per-source table of one forward (shared by its listeners).
#[derive(Debug, Default)]
pub struct PerSource {
    state: Mutex<State>,
}

/// One admitted connection of a source: gives its slot back on drop.
#[derive(Debug)]
pub struct SourceGuard {
    table: Arc<PerSource>,
    key: IpAddr,
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        let mut st = self.table.state.lock().unwrap();
        if let Some(e) = st.entries.get_mut(&self.key) {
            e.active = e.active.saturating_sub(1);
        }
    }
}

/// The source key of `ip` under `cfg`: the address masked to its family's prefix.
pub fn source_key(ip: IpAddr, cfg: &PerSourceLimit) -> IpAddr {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(a) => {
            let bits = if cfg.prefix4 == 0 { 0 } else { u32::MAX << (32 - u32::from(cfg.prefix4.min(32))) };
            IpAddr::V4((u32::from(a) & bits).into())
        }
        IpAddr::V6(a) => {
            let bits = if cfg.prefix6 == 0 { 0 } else { u128::MAX << (128 - u32::from(cfg.prefix6.min(128))) };
            IpAddr::V6((u128::from(a) & bits).into())
        }
    }
}

fn fam(ip: &IpAddr) -> usize {
    usize::from(ip.is_ipv6())
}

impl State {
    /// The bucket of `e` refilled to `now`.
    fn refill(cfg: &PerSourceLimit, e: &mut Entry, now: Instant) {
        if let Some(r) = cfg.conn_rate {
            let per_sec = f64::from(r.count) / f64::from(r.period_secs.max(1));
            e.tokens = (e.tokens + now.duration_since(e.last).as_secs_f64() * per_sec).min(f64::from(r.burst.max(1)));
        }
        e.last = now;
    }

    /// Drop the idle entries of family `f` (no connection, bucket full again).
    fn evict_idle(&mut self, f: usize, now: Instant) {
        let Some(cfg) = self.cfg else { return };
        let full = cfg.conn_rate.map(|r| f64::from(r.burst.max(1)));
        let before = self.entries.len();
        self.entries.retain(|k, e| {
            if fam(k) != f || e.active > 0 {
                return true;
            }
            State::refill(&cfg, e, now);
            full.is_some_and(|b| e.tokens < b)
        });
        self.per_fam[f] -= before - self.entries.len();
    }
}

impl PerSource {
    pub fn new(cfg: Option<PerSourceLimit>) -> Arc<PerSource> {
        let t = Arc::new(PerSource::default());
        t.set(cfg);
        t
    }

    /// Apply new limits in place (reload): tracked sources keep their counts and tokens.
    pub fn set(&self, cfg: Option<PerSourceLimit>) {
        let mut st = self.state.lock().unwrap();
        if st.cfg.map(|c| (c.prefix4, c.prefix6)) != cfg.map(|c| (c.prefix4, c.prefix6)) && st.entries.values().all(|e| e.active == 0) {
            st.entries.clear();
            st.per_fam = [0, 0];
        }
        st.cfg = cfg;
        st.full_scan = None;
    }

    /// Admit one new connection (or UDP session) of `ip`: `Ok(None)` without per-source
    /// limits, `Ok(Some(guard))` admitted (keep the guard while the connection lives).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Option<SourceGuard>, SourceRefusal> {
        self.admit_at(ip, Instant::now())
    }

    fn admit_at(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Result<Option<SourceGuard>, SourceRefusal> {
        let mut guard = self.state.lock().unwrap();
        let st = &mut *guard;
        let Some(cfg) = st.cfg else { return Ok(None) };
        let key = source_key(ip, &cfg);
        let f = fam(&key);
        if !st.entries.contains_key(&key) {
            if st.per_fam[f] >= cfg.size as usize {
                let rescan = st.full_scan.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
                if rescan {
                    st.evict_idle(f, now);
                }
                if st.per_fam[f] >= cfg.size as usize {
                    if rescan {
                        st.full_scan = Some(now);
                    }
                    return Err(SourceRefusal::Full);
                }
                st.full_scan = None;
            }
            let tokens = cfg.conn_rate.map_or(0.0, |r| f64::from(r.burst.max(1)));
            st.entries.insert(key, Entry { active: 0, tokens, last: now });
            st.per_fam[f] += 1;
        }
        let e = st.entries.get_mut(&key).expect("inserted above");
        if let Some(max) = cfg.max_conns {
            if e.active >= u64::from(max) {
                return Err(SourceRefusal::MaxConns);
            }
        }
        if cfg.conn_rate.is_some() {
            State::refill(&cfg, e, now);
            if e.tokens < 1.0 {
                return Err(SourceRefusal::ConnRate);
            }
            e.tokens -= 1.0;
        }
        e.active += 1;
        Ok(Some(SourceGuard { table: self.clone(), key }))
    }

    /// Sources tracked now per family `[v4, v6]`, the size per family, and the limits the
    /// table tracks (`rate`, `conns`): for the status and the `fwc_per_source_*` metrics.
    pub fn fill(&self) -> ([usize; 2], u32, Vec<String>) {
        let st = self.state.lock().unwrap();
        let limits = st.cfg.map_or(Vec::new(), |c| {
            [(c.conn_rate.is_some(), "rate"), (c.max_conns.is_some(), "conns")].into_iter().filter(|(on, _)| *on).map(|(_, n)| n.to_string()).collect()
        });
        (st.per_fam, st.cfg.map_or(0, |c| c.size), limits)
    }

    /// Put the fill into a rule's status snapshot.
    pub fn report(&self, s: &mut crate::stats::RuleStatsSnapshot) {
        let ([v4, v6], size, limits) = self.fill();
        (s.per_source_entries_v4, s.per_source_entries_v6, s.per_source_size, s.per_source_limits) = (v4 as u64, v6 as u64, u64::from(size), limits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_artifacts::ConnRateLimit;

    fn cfg(rate: Option<(u32, u32)>, max: Option<u32>, size: u32) -> Option<PerSourceLimit> {
        Some(PerSourceLimit {
            conn_rate: rate.map(|(count, burst)| ConnRateLimit { count, period_secs: 60, burst }),
            max_conns: max,
            prefix4: 32,
            prefix6: 64,
            size,
        })
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_over_its_cap_others_unaffected() {
        let t = PerSource::new(cfg(None, Some(2), 100));
        let a1 = t.admit(ip("198.18.0.1")).unwrap();
        let _a2 = t.admit(ip("198.18.0.1")).unwrap();
        assert_eq!(t.admit(ip("198.18.0.1")).unwrap_err(), SourceRefusal::MaxConns);
        assert!(t.admit(ip("198.18.0.2")).unwrap().is_some());
        drop(a1);
        assert!(t.admit(ip("198.18.0.1")).is_ok());
    }

    #[test]
    fn rate_per_source_and_ipv6_by_64() {
        let t = PerSource::new(cfg(Some((1, 2)), None, 100));
        let now = Instant::now();
        let _g: Vec<_> = (0..2).map(|_| t.admit_at(ip("2001:db8:1:1::1"), now).unwrap()).collect();
        // Another address of the same /64 shares the bucket.
        assert_eq!(t.admit_at(ip("2001:db8:1:1::2"), now).unwrap_err(), SourceRefusal::ConnRate);
        assert!(t.admit_at(ip("2001:db8:1:2::1"), now).is_ok());
        // One token back after 60 s.
        assert!(t.admit_at(ip("2001:db8:1:1::3"), now + Duration::from_secs(60)).is_ok());
    }

    #[test]
    fn full_table_refuses_new_sources_until_one_is_idle() {
        let t = PerSource::new(cfg(Some((1, 1)), Some(5), 2));
        let now = Instant::now();
        let a = t.admit_at(ip("198.18.0.1"), now).unwrap();
        let b = t.admit_at(ip("198.18.0.2"), now).unwrap();
        assert_eq!(t.admit_at(ip("198.18.0.3"), now).unwrap_err(), SourceRefusal::Full);
        // IPv6 has its own room.
        assert!(t.admit_at(ip("2001:db8::1"), now).is_ok());
        drop((a, b));
        // Closed, but the buckets are not full again yet: still tracked.
        assert_eq!(t.admit_at(ip("198.18.0.3"), now + Duration::from_secs(2)).unwrap_err(), SourceRefusal::Full);
        // After a refill the entries are idle and make room.
        assert!(t.admit_at(ip("198.18.0.3"), now + Duration::from_secs(61)).is_ok());
        assert_eq!(t.fill(), ([1, 1], 2, vec!["rate".to_string(), "conns".to_string()]));
    }
}
