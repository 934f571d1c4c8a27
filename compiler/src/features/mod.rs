//! Features every stage shares: what a value means and how it is checked, planned and
//! emitted, one file per feature: header matches, weekly time windows and rule schedules,
//! traffic quotas, per-source limits, the fleet's rollout policy, reverse-path filtering and MSS
//! clamping.

pub mod clamp;
pub mod headers;
pub mod persource;
pub mod quota;
pub mod rollout;
pub mod rpfilter;
pub mod schedule;
pub mod timewindow;
