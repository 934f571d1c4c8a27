//! A forward's quota as the model holds it. Its value language (`quota="500GB/month"`,
//! `quota-reset-day=`, `over-quota=`) and the policy it becomes are [`crate::features::quota`].

use fwc_artifacts::quota::{OverQuota, QuotaPeriod};
use serde::Serialize;

/// A forward's quota as written: bytes per period, the period's anchor and what happens when
/// it is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QuotaSpec {
    pub limit_bytes: u64,
    pub period: QuotaPeriod,
    /// Day of the month (monthly, default 1), ISO weekday (weekly, default 1 = Monday), 0 for
    /// daily quotas.
    pub reset_day: u8,
    pub over: OverQuota,
}
