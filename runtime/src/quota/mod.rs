//! Traffic quotas at run time: the usage ledger persisted in the state dir
//! (`ledger`), the pure bookkeeping decision per quota (`decide`: period, reset, restore, the
//! 80 % warning), and the thin I/O around the kernel's quota objects (`kernel`: read usage,
//! reset, restore `used` into a batch that (re)creates an object, sync).
//!
//! Usage lives in the kernel's named quota object while it exists; the ledger
//! (`<state dir>/quota.json`, written atomically) keeps the last usage seen per rule and
//! period, so a (re)created object — after a reboot, `fwc rollback`, a full replace — starts
//! from it. The nft diff never recreates an unchanged object (its counters stay), and a changed
//! limit is an in-place update of the object (the kernel keeps its count).

pub mod decide;
pub mod kernel;
pub mod ledger;

pub use decide::{decide, Decision, Warning};
pub use kernel::{restore_used, sync, usage_of_listing, QuotaStatus};
pub use ledger::{Ledger, LedgerEntry};

/// The clock quotas use: `FWC_TEST_NOW` (Unix seconds or RFC 3339; tests move time to a
/// period's anchor with it instead of sleeping), else the system clock.
pub fn now() -> i64 {
    if let Ok(v) = std::env::var("FWC_TEST_NOW") {
        if let Ok(n) = v.trim().parse::<i64>() {
            return n;
        }
        if let Ok(t) = humantime::parse_rfc3339_weak(v.trim()) {
            return t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        }
    }
    crate::state::now_unix() as i64
}
