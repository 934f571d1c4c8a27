//! The bookkeeping of one quota as a pure function of (policy, ledger entry, the kernel's
//! count, now): which period it is, whether the kernel object must be reset, what `used` a
//! (re)created object starts from, what the ledger records and what to log. Table tests below.

use fwc_artifacts::quota::{period_bounds, QuotaPolicy};

use super::LedgerEntry;

/// A message to log once per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warning {
    /// 80 % of the quota is used.
    Eighty,
    /// The quota is used up: the over-quota action applies until the reset.
    UsedUp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub period_start: i64,
    pub period_end: i64,
    /// Bytes used in the current period.
    pub used: u64,
    /// The kernel object counts an earlier period: reset it (`nft reset quota`).
    pub reset: bool,
    /// What the ledger records now.
    pub entry: LedgerEntry,
    pub warnings: Vec<Warning>,
}

/// `live`: the kernel object's count (`None`: the object does not exist).
pub fn decide(policy: &QuotaPolicy, saved: Option<&LedgerEntry>, live: Option<u64>, now: i64) -> Decision {
    let (start, end) = period_bounds(policy.period, policy.reset_day, now);
    // The ledger's usage when it is of this period (an older period's usage is over).
    let saved_now = saved.filter(|e| e.period_start == start);
    let (used, reset) = match (live, saved) {
        // The kernel counts, but since a period that ended: start again from zero.
        (Some(u), Some(e)) if e.period_start < start => (0, u > 0),
        // The kernel's count is the truth; it is never below what was restored into it,
        // unless the object was recreated outside fwc: then keep the larger one (never lose
        // what was counted; the next (re)creation restores it).
        (Some(u), _) => (u.max(saved_now.map_or(0, |e| e.used)), false),
        (None, _) => (saved_now.map_or(0, |e| e.used), false),
    };
    let (mut warned, mut exhausted) = saved_now.map_or((false, false), |e| (e.warned, e.exhausted));
    let mut warnings = Vec::new();
    if !warned && u128::from(used) * 100 >= u128::from(policy.limit_bytes) * 80 {
        warned = true;
        warnings.push(Warning::Eighty);
    }
    if !exhausted && used >= policy.limit_bytes {
        exhausted = true;
        warnings.push(Warning::UsedUp);
    }
    Decision { period_start: start, period_end: end, used, reset, entry: LedgerEntry { period_start: start, used, warned, exhausted }, warnings }
}

#[cfg(test)]
mod tests {
    use fwc_artifacts::quota::{days_from_civil, OverQuota, QuotaPeriod};
    use fwc_artifacts::{BackendKind, RuleKind};

    use super::*;

    fn policy() -> QuotaPolicy {
        QuotaPolicy {
            kind: RuleKind::Forward,
            rule: "game".into(),
            object: "quota_game".into(),
            limit_bytes: 1000,
            period: QuotaPeriod::Month,
            reset_day: 1,
            over: OverQuota::Drop,
            backend: BackendKind::Nftables,
        }
    }
    fn at(y: i64, m: u32, d: u32) -> i64 {
        days_from_civil(y, m, d) * 86_400 + 3600
    }
    fn entry(start: i64, used: u64) -> LedgerEntry {
        LedgerEntry { period_start: start, used, warned: false, exhausted: false }
    }

    #[test]
    fn table() {
        let p = policy();
        let nov = days_from_civil(2026, 11, 1) * 86_400;
        let dec = days_from_civil(2026, 12, 1) * 86_400;
        let now = at(2026, 11, 26);
        let next = at(2026, 12, 1);
        struct Case {
            what: &'static str,
            saved: Option<LedgerEntry>,
            live: Option<u64>,
            now: i64,
            used: u64,
            reset: bool,
            start: i64,
            warnings: Vec<Warning>,
        }
        let cases = [
            Case { what: "first sight", saved: None, live: Some(10), now, used: 10, reset: false, start: nov, warnings: vec![] },
            Case { what: "kernel counts on", saved: Some(entry(nov, 10)), live: Some(500), now, used: 500, reset: false, start: nov, warnings: vec![] },
            Case { what: "after a reboot: restore", saved: Some(entry(nov, 700)), live: None, now, used: 700, reset: false, start: nov, warnings: vec![] },
            Case { what: "object recreated outside fwc: keep the larger", saved: Some(entry(nov, 700)), live: Some(5), now, used: 700, reset: false, start: nov, warnings: vec![] },
            Case { what: "80 %", saved: Some(entry(nov, 700)), live: Some(800), now, used: 800, reset: false, start: nov, warnings: vec![Warning::Eighty] },
            Case { what: "used up", saved: Some(LedgerEntry { warned: true, ..entry(nov, 900) }), live: Some(1200), now, used: 1200, reset: false, start: nov, warnings: vec![Warning::UsedUp] },
            Case { what: "period over: reset", saved: Some(entry(nov, 1200)), live: Some(1300), now: next, used: 0, reset: true, start: dec, warnings: vec![] },
            Case { what: "period over, object gone: nothing to restore", saved: Some(entry(nov, 1200)), live: None, now: next, used: 0, reset: false, start: dec, warnings: vec![] },
        ];
        for c in cases {
            let d = decide(&p, c.saved.as_ref(), c.live, c.now);
            assert_eq!((d.used, d.reset, d.period_start, &d.warnings), (c.used, c.reset, c.start, &c.warnings), "{}", c.what);
            assert_eq!(d.entry.used, c.used, "{}", c.what);
        }
    }

    #[test]
    fn warnings_are_logged_once_per_period() {
        let p = policy();
        let now = at(2026, 11, 26);
        let first = decide(&p, None, Some(850), now);
        assert_eq!(first.warnings, vec![Warning::Eighty]);
        let again = decide(&p, Some(&first.entry), Some(900), now);
        assert!(again.warnings.is_empty());
        // The next period warns again.
        let next = decide(&p, Some(&again.entry), Some(0), at(2026, 12, 2));
        let later = decide(&p, Some(&next.entry), Some(820), at(2026, 12, 3));
        assert_eq!(later.warnings, vec![Warning::Eighty]);
    }
}
