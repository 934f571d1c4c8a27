//! Traffic quotas (`quota="500GB/month"` on a forward): the policy the compiler lists in the
//! manifest and the runtime enforces and persists, and the period arithmetic both use. Pure:
//! UTC calendar days from Unix seconds, no clock, no time-zone database.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{BackendKind, RuleKind};

/// How long a quota's budget lasts before it starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QuotaPeriod {
    Day,
    Week,
    Month,
}

impl QuotaPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaPeriod::Day => "day",
            QuotaPeriod::Week => "week",
            QuotaPeriod::Month => "month",
        }
    }
}

/// What happens to a forward's traffic once its quota is used up (until the period's reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum OverQuota {
    /// Every further packet is dropped (new and established connections, both directions).
    Drop,
    /// Every further packet is rejected (TCP reset, ICMP port unreachable for the rest).
    Reject,
    /// Traffic goes on at this rate (bytes per second; packets above it are dropped).
    Rate { bytes_per_sec: u64 },
}

/// One quota as compiled: where it is counted and what it allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaPolicy {
    /// The rule that carries it (`forward`).
    pub kind: RuleKind,
    pub rule: String,
    /// The named nft quota object that counts it (`quota_<rule>` in `table inet fwc`).
    pub object: String,
    pub limit_bytes: u64,
    pub period: QuotaPeriod,
    /// The period's anchor: day of the month (1-31; past the month's last day: its last day)
    /// for monthly quotas, ISO weekday (1 = Monday … 7 = Sunday) for weekly ones, 0 for daily
    /// ones. The reset happens at 00:00 UTC of that day.
    pub reset_day: u8,
    pub over: OverQuota,
    /// Where it is counted and enforced.
    pub backend: BackendKind,
}

impl QuotaPolicy {
    /// `500GB/month from day 1` style one-liner for plans and status.
    pub fn describe(&self) -> String {
        let anchor = match self.period {
            QuotaPeriod::Day => "resets daily at 00:00 UTC".to_string(),
            QuotaPeriod::Week => format!("resets {} 00:00 UTC", WEEKDAYS[usize::from(self.reset_day.clamp(1, 7)) - 1]),
            QuotaPeriod::Month => format!("resets on day {} of the month, 00:00 UTC", self.reset_day),
        };
        let over = match self.over {
            OverQuota::Drop => "then drop".to_string(),
            OverQuota::Reject => "then reject".to_string(),
            OverQuota::Rate { bytes_per_sec } => format!("then {}/s", human_bytes(bytes_per_sec)),
        };
        format!("{}/{} ({anchor}; {over})", human_bytes(self.limit_bytes), self.period.as_str())
    }
}

/// `500GB`, `10GiB`, `1500B`: the largest unit that divides `n` exactly (binary first).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 8] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1 << 10, "KiB"),
        (1_000, "KB"),
    ];
    match UNITS.iter().find(|(u, _)| n >= *u && n % u == 0) {
        Some((u, name)) => format!("{}{name}", n / u),
        None => format!("{n}B"),
    }
}

/// Weekday names, ISO order (1 = Monday).
pub const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

const DAY: i64 = 86_400;

/// Days since 1970-01-01 -> (year, month 1-12, day 1-31), proleptic Gregorian.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) -> days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The anchor day of month (y, m) for reset day `d`: `d`, or the month's last day if shorter.
fn anchor(y: i64, m: u32, d: u8) -> i64 {
    days_from_civil(y, m, u32::from(d.max(1)).min(days_in_month(y, m)))
}

/// The period that contains `now` (Unix seconds): `[start, end)` in Unix seconds, both at
/// 00:00 UTC. Monthly: from the anchor day of this month (or the last month, before it) to
/// the next one; weekly: from the last anchor weekday; daily: the UTC day.
pub fn period_bounds(period: QuotaPeriod, reset_day: u8, now: i64) -> (i64, i64) {
    let today = now.div_euclid(DAY);
    let (start, end) = match period {
        QuotaPeriod::Day => (today, today + 1),
        QuotaPeriod::Week => {
            // 1970-01-01 was a Thursday (ISO 4).
            let weekday = (today + 3).rem_euclid(7) + 1;
            let back = (weekday - i64::from(reset_day.clamp(1, 7))).rem_euclid(7);
            (today - back, today - back + 7)
        }
        QuotaPeriod::Month => {
            let (y, m, _) = civil_from_days(today);
            let prev = |y: i64, m: u32| if m == 1 { (y - 1, 12) } else { (y, m - 1) };
            let next = |y: i64, m: u32| if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let this = anchor(y, m, reset_day);
            if today >= this {
                let (ny, nm) = next(y, m);
                (this, anchor(ny, nm, reset_day))
            } else {
                let (py, pm) = prev(y, m);
                (anchor(py, pm, reset_day), this)
            }
        }
    };
    (start * DAY, end * DAY)
}

/// `2026-11-26T00:00:00Z` for Unix seconds (UTC, whole seconds).
pub fn utc_text(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(DAY));
    let s = t.rem_euclid(DAY);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i64, m: u32, d: u32, h: i64) -> i64 {
        days_from_civil(y, m, d) * DAY + h * 3600
    }

    #[test]
    fn civil_round_trips() {
        for z in -800_000..800_000i64 {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(utc_text(at(2026, 11, 26, 15)), "2026-11-26T15:00:00Z");
        assert_eq!(human_bytes(500_000_000_000), "500GB");
        assert_eq!(human_bytes(10 << 30), "10GiB");
        assert_eq!(human_bytes(125_000), "125KB");
        assert_eq!(human_bytes(1500), "1500B");
    }

    #[test]
    fn monthly_periods_follow_the_anchor() {
        let p = |d: u8, now: i64| {
            let (s, e) = period_bounds(QuotaPeriod::Month, d, now);
            (utc_text(s), utc_text(e))
        };
        // The form: day 1.
        assert_eq!(p(1, at(2026, 11, 26, 15)), ("2026-11-01T00:00:00Z".into(), "2026-12-01T00:00:00Z".into()));
        // Before this month's anchor: the period started last month.
        assert_eq!(p(15, at(2026, 11, 14, 23)), ("2026-10-15T00:00:00Z".into(), "2026-11-15T00:00:00Z".into()));
        assert_eq!(p(15, at(2026, 11, 15, 0)), ("2026-11-15T00:00:00Z".into(), "2026-12-15T00:00:00Z".into()));
        // Day 31 in February: the last day of February, then back to the 31st.
        assert_eq!(p(31, at(2027, 2, 28, 1)), ("2027-02-28T00:00:00Z".into(), "2027-03-31T00:00:00Z".into()));
        assert_eq!(p(31, at(2027, 2, 27, 1)), ("2027-01-31T00:00:00Z".into(), "2027-02-28T00:00:00Z".into()));
        assert_eq!(p(31, at(2028, 2, 29, 0)), ("2028-02-29T00:00:00Z".into(), "2028-03-31T00:00:00Z".into()));
        assert_eq!(p(30, at(2027, 4, 30, 0)), ("2027-04-30T00:00:00Z".into(), "2027-05-30T00:00:00Z".into()));
        // Across the year.
        assert_eq!(p(1, at(2026, 12, 31, 23)), ("2026-12-01T00:00:00Z".into(), "2027-01-01T00:00:00Z".into()));
    }

    #[test]
    fn weekly_and_daily_periods() {
        // 2026-11-26 is a Thursday.
        let (s, e) = period_bounds(QuotaPeriod::Week, 1, at(2026, 11, 26, 15));
        assert_eq!((utc_text(s), utc_text(e)), ("2026-11-23T00:00:00Z".into(), "2026-11-30T00:00:00Z".into()));
        let (s, _) = period_bounds(QuotaPeriod::Week, 4, at(2026, 11, 26, 0));
        assert_eq!(utc_text(s), "2026-11-26T00:00:00Z");
        let (s, _) = period_bounds(QuotaPeriod::Week, 5, at(2026, 11, 26, 0));
        assert_eq!(utc_text(s), "2026-11-20T00:00:00Z");
        let (s, e) = period_bounds(QuotaPeriod::Day, 0, at(2026, 11, 26, 15));
        assert_eq!((utc_text(s), utc_text(e)), ("2026-11-26T00:00:00Z".into(), "2026-11-27T00:00:00Z".into()));
    }

    #[test]
    fn every_instant_is_in_its_period() {
        let mut rng = 12345u64;
        for _ in 0..20_000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let now = (rng >> 20) as i64 % (200 * 365 * DAY);
            for (period, day) in [(QuotaPeriod::Day, 0), (QuotaPeriod::Week, (rng % 7 + 1) as u8), (QuotaPeriod::Month, (rng % 31 + 1) as u8)] {
                let (s, e) = period_bounds(period, day, now);
                assert!(s <= now && now < e, "{period:?} {day} {now}");
                // The next period starts where this one ends.
                assert_eq!(period_bounds(period, day, e).0, e);
            }
        }
    }
}
