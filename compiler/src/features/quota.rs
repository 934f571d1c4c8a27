//! Traffic quotas on forwards: the value languages of `quota="500GB/month"`,
//! `quota-reset-day=` and `over-quota=`, parsed into the model's value
//! ([`crate::model::quota::QuotaSpec`]), and the policy the manifest lists for the runtime
//! (`fwc_artifacts::quota`). Emission: `emit::nft::quota`.

pub use fwc_artifacts::quota::{OverQuota, QuotaPeriod, QuotaPolicy, WEEKDAYS};

use crate::artifacts::{BackendKind, RuleKind};
use crate::model::{ForwardRule, Spanned};
use crate::read::units::{self, UnitError};

pub use crate::model::quota::QuotaSpec;

const QUOTA_HELP: &str = "write SIZE/PERIOD with a period of day, week or month: quota=\"500GB/month\", \"2MB/day\", \"10GiB/week\"";

fn err<T>(message: impl Into<String>, help: impl Into<String>) -> Result<T, UnitError> {
    Err(UnitError { message: message.into(), help: help.into() })
}

/// `500GB/month` -> (bytes, period). Sizes as everywhere in fwc (`units::parse_size`: SI
/// `KB`/`MB`/`GB`, binary `KiB`/`MiB`/`GiB`, plain bytes), plus `TB` and `TiB`.
pub fn parse_quota(s: &str) -> Result<(u64, QuotaPeriod), UnitError> {
    let Some((size, period)) = s.trim().split_once('/') else {
        return err(format!("\"{s}\" has no period"), QUOTA_HELP);
    };
    let period = match period.trim().to_ascii_lowercase().as_str() {
        "day" | "d" | "daily" => QuotaPeriod::Day,
        "week" | "w" | "weekly" => QuotaPeriod::Week,
        "month" | "mo" | "monthly" => QuotaPeriod::Month,
        other => return err(format!("unknown quota period \"{other}\""), QUOTA_HELP),
    };
    let size = size.trim();
    let bytes = if let Some(n) = size.strip_suffix("TiB").or(size.strip_suffix("TB")) {
        let mult = if size.ends_with("TiB") { 1024f64.powi(4) } else { 1e12 };
        match n.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => (v * mult).round() as u64,
            _ => return err(format!("\"{size}\" is not a size"), QUOTA_HELP),
        }
    } else {
        units::parse_size(size).map_err(|e| UnitError { message: e.message, help: QUOTA_HELP.into() })?
    };
    if bytes == 0 {
        return err("a quota of 0 bytes lets nothing through", "deny the traffic instead, or give a size: quota=\"2MB/day\"");
    }
    // nft keeps bytes in 64 bits; anything near it is a typo.
    if bytes > 1 << 60 {
        return err(format!("\"{size}\" is more than any link can carry in a {}", period.as_str()), QUOTA_HELP);
    }
    Ok((bytes, period))
}

/// `quota-reset-day=`: 1-31 for a monthly quota (past a short month's end: its last day),
/// a weekday (`mon` … `sun`, `monday`, or 1-7 with 1 = Monday) for a weekly one.
pub fn parse_reset_day(s: &str, period: QuotaPeriod) -> Result<u8, UnitError> {
    let s = s.trim();
    match period {
        QuotaPeriod::Day => err(
            "quota-reset-day on a daily quota",
            "a daily quota resets every day at 00:00 UTC; remove quota-reset-day, or use a weekly or monthly quota",
        ),
        QuotaPeriod::Month => match s.parse::<u8>() {
            Ok(d @ 1..=31) => Ok(d),
            _ => err(
                format!("\"{s}\" is not a day of the month"),
                "write a day from 1 to 31 (in months without that day, the quota resets on the month's last day)",
            ),
        },
        QuotaPeriod::Week => {
            if let Ok(d @ 1..=7) = s.parse::<u8>() {
                return Ok(d);
            }
            let lower = s.to_ascii_lowercase();
            match WEEKDAYS.iter().position(|w| lower.len() >= 3 && w.to_ascii_lowercase().starts_with(&lower)) {
                Some(i) => Ok(i as u8 + 1),
                None => err(format!("\"{s}\" is not a weekday"), "write mon, tue, wed, thu, fri, sat or sun (or 1-7, 1 = Monday)"),
            }
        }
    }
}

/// `over-quota=`: `drop`, `reject`, or a fallback rate (`1mbit`, `100KB/s`).
pub fn parse_over_quota(s: &str) -> Result<OverQuota, UnitError> {
    match s.trim() {
        "drop" => Ok(OverQuota::Drop),
        "reject" => Ok(OverQuota::Reject),
        other => match units::parse_bandwidth(other) {
            Ok(b) => Ok(OverQuota::Rate { bytes_per_sec: b.0 }),
            Err(_) => err(
                format!("\"{other}\" is neither drop, reject nor a rate"),
                "write over-quota=\"drop\" (the default), \"reject\", or a rate the traffic slows to, such as \"1mbit\"",
            ),
        },
    }
}

/// The nft quota object that counts forward `rule`.
pub fn object_name(rule: &str) -> String {
    format!("quota_{rule}")
}

/// The nft quota object that counts shape `rule` (forwards and shapes may share a name).
pub fn shape_object_name(rule: &str) -> String {
    format!("qshape_{rule}")
}

/// The policy the manifest lists for a shape with a quota.
pub fn shape_policy(s: &crate::model::ShapeRule) -> Option<QuotaPolicy> {
    let q = s.quota.as_ref()?;
    Some(QuotaPolicy {
        kind: RuleKind::Shape,
        rule: s.name.value.clone(),
        object: shape_object_name(&s.name.value),
        limit_bytes: q.value.limit_bytes,
        period: q.value.period,
        reset_day: q.value.reset_day,
        over: q.value.over,
        backend: BackendKind::Nftables,
    })
}

/// The policy the manifest lists for a forward with a quota.
pub fn forward_policy(f: &ForwardRule, backend: BackendKind) -> Option<QuotaPolicy> {
    let q: &Spanned<QuotaSpec> = f.quota.as_ref()?;
    Some(QuotaPolicy {
        kind: RuleKind::Forward,
        rule: f.name.value.clone(),
        object: object_name(&f.name.value),
        limit_bytes: q.value.limit_bytes,
        period: q.value.period,
        reset_day: q.value.reset_day,
        over: q.value.over,
        backend,
    })
}

/// What the plan and `explain` say about a quota: `quota 500000000000 bytes/month (resets …)`.
pub fn describe(q: &QuotaSpec) -> String {
    let p = QuotaPolicy {
        kind: RuleKind::Forward,
        rule: String::new(),
        object: String::new(),
        limit_bytes: q.limit_bytes,
        period: q.period,
        reset_day: q.reset_day,
        over: q.over,
        backend: BackendKind::Nftables,
    };
    format!("quota {}", p.describe())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_values() {
        assert_eq!(parse_quota("500GB/month").unwrap(), (500_000_000_000, QuotaPeriod::Month));
        assert_eq!(parse_quota("2MB/day").unwrap(), (2_000_000, QuotaPeriod::Day));
        assert_eq!(parse_quota("10GiB/week").unwrap(), (10 * 1024 * 1024 * 1024, QuotaPeriod::Week));
        assert_eq!(parse_quota("1.5TB/month").unwrap(), (1_500_000_000_000, QuotaPeriod::Month));
        assert_eq!(parse_quota("1TiB/month").unwrap().0, 1u64 << 40);
        assert!(parse_quota("500GB/fortnight").unwrap_err().message.contains("fortnight"));
        assert!(parse_quota("500GB").is_err());
        assert!(parse_quota("0GB/day").is_err());
        assert!(parse_quota("5mbit/day").is_err());
    }

    #[test]
    fn reset_days() {
        assert_eq!(parse_reset_day("1", QuotaPeriod::Month).unwrap(), 1);
        assert_eq!(parse_reset_day("31", QuotaPeriod::Month).unwrap(), 31);
        assert!(parse_reset_day("0", QuotaPeriod::Month).is_err());
        assert!(parse_reset_day("32", QuotaPeriod::Month).is_err());
        assert_eq!(parse_reset_day("mon", QuotaPeriod::Week).unwrap(), 1);
        assert_eq!(parse_reset_day("Sunday", QuotaPeriod::Week).unwrap(), 7);
        assert_eq!(parse_reset_day("5", QuotaPeriod::Week).unwrap(), 5);
        assert!(parse_reset_day("8", QuotaPeriod::Week).is_err());
        assert!(parse_reset_day("m", QuotaPeriod::Week).is_err());
        assert!(parse_reset_day("1", QuotaPeriod::Day).is_err());
    }

    #[test]
    fn over_quota_values() {
        assert_eq!(parse_over_quota("drop").unwrap(), OverQuota::Drop);
        assert_eq!(parse_over_quota("reject").unwrap(), OverQuota::Reject);
        assert_eq!(parse_over_quota("1mbit").unwrap(), OverQuota::Rate { bytes_per_sec: 125_000 });
        assert!(parse_over_quota("explode").unwrap_err().message.contains("explode"));
    }
}
