//! The I/O around the kernel's named quota objects (`quota_<rule>` in `table inet fwc`): read
//! their counts, reset them at a period's anchor, put the right `used` into a batch that
//! (re)creates them, and `sync` — read, decide, reset, log, persist — which the agent runs on
//! every reconcile and `fwc status` runs when it reports.

use std::collections::BTreeMap;
use std::path::Path;

use fwc_artifacts::quota::{utc_text, OverQuota, QuotaPolicy};
use fwc_artifacts::NFT_TABLE;
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde::Serialize;
use serde_json::Value;

use super::{decide, ledger::key, Ledger, Warning};
use crate::backend::nft::cmd::NftCmd;

/// One quota as `fwc status` and the metrics show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaStatus {
    pub kind: fwc_artifacts::RuleKind,
    pub rule: String,
    pub limit_bytes: u64,
    pub used_bytes: u64,
    pub period: fwc_artifacts::quota::QuotaPeriod,
    /// RFC 3339, UTC.
    pub period_start: String,
    pub period_end: String,
    /// `drop`, `reject`, or the fallback rate in bytes/s.
    pub over_quota: String,
    pub used_up: bool,
    /// The kernel object exists (false: not applied, or gone since; the ledger's count is shown).
    pub counted: bool,
}

/// Object name -> bytes used, from a JSON listing that has quota objects in it.
pub fn usage_of_listing(listing: &Value) -> BTreeMap<String, u64> {
    listing
        .get("nftables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("quota"))
        .filter(|q| q.get("table").and_then(Value::as_str).is_none_or(|t| t == NFT_TABLE))
        .filter_map(|q| Some((q.get("name")?.as_str()?.to_string(), q.get("used").and_then(Value::as_u64).unwrap_or(0))))
        .collect()
}

/// The live counts of fwc's quota objects (empty when the table does not exist).
pub fn live_usage(nft: &NftCmd) -> Result<BTreeMap<String, u64>> {
    let out = nft.command().args(["-j", "list", "quotas", "table", "inet", NFT_TABLE]).output().into_diagnostic().wrap_err("cannot run nft")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No such file") || err.contains("does not exist") {
            return Ok(BTreeMap::new());
        }
        return Err(miette!("nft list quotas failed: {}", err.trim()));
    }
    let v: Value = serde_json::from_slice(&out.stdout).into_diagnostic().wrap_err("nft list quotas: not JSON")?;
    Ok(usage_of_listing(&v))
}

/// `nft reset quota inet fwc <object>`: the count starts again from zero.
fn reset(nft: &NftCmd, object: &str) -> Result<()> {
    let out = nft.command().args(["reset", "quota", "inet", NFT_TABLE, object]).output().into_diagnostic().wrap_err("cannot run nft")?;
    if !out.status.success() {
        return Err(miette!("nft reset quota {object} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Put the usage to start from into every quota object `tx` adds: the live count when the
/// object exists (a full replace deletes and recreates it; an `add` of an existing object
/// with a changed limit updates the limit and keeps the kernel's count), else the ledger's
/// for the current period (after a reboot, a rollback that removed it, …). Never counted
/// twice: the value replaces the count, it is not added to it.
pub fn restore_used(tx: &mut Value, live: &BTreeMap<String, u64>, state_dir: Option<&Path>, policies: &[QuotaPolicy], now: i64) {
    let ledger = state_dir.map(Ledger::load).unwrap_or_default();
    let Some(cmds) = tx.get_mut("nftables").and_then(Value::as_array_mut) else { return };
    for c in cmds {
        let Some(q) = c.get_mut("add").and_then(|a| a.get_mut("quota")).and_then(Value::as_object_mut) else { continue };
        let Some(name) = q.get("name").and_then(Value::as_str).map(str::to_string) else { continue };
        let Some(p) = policies.iter().find(|p| p.object == name) else { continue };
        let d = decide(p, ledger.quotas.get(&key(p.kind, &p.rule)), live.get(&name).copied(), now);
        // The kernel refuses a count above the limit (EINVAL): a lowered limit below the usage
        // starts used up, which is what the usage says.
        let limit = q.get("bytes").and_then(Value::as_u64).unwrap_or(p.limit_bytes);
        q.insert("used".into(), Value::from(d.used.min(limit)));
    }
}

fn over_text(o: OverQuota) -> String {
    match o {
        OverQuota::Drop => "drop".into(),
        OverQuota::Reject => "reject".into(),
        OverQuota::Rate { bytes_per_sec } => format!("{bytes_per_sec} bytes/s"),
    }
}

/// Read every quota's count, reset those whose period is over, log the 80 % and used-up
/// messages once per period, and persist the ledger.
pub fn sync(nft: &NftCmd, state_dir: &Path, policies: &[QuotaPolicy], now: i64) -> Result<Vec<QuotaStatus>> {
    if policies.is_empty() {
        return Ok(Vec::new());
    }
    let live = live_usage(nft)?;
    let mut ledger = Ledger::load(state_dir);
    let mut out = Vec::new();
    for p in policies {
        let k = key(p.kind, &p.rule);
        let counted = live.get(&p.object).copied();
        let d = decide(p, ledger.quotas.get(&k), counted, now);
        if d.reset {
            reset(nft, &p.object)?;
            tracing::info!(rule = %p.rule, "quota of {} {} reset: a new {} started at {}", p.kind.as_str(), p.rule, p.period.as_str(), utc_text(d.period_start));
        }
        for w in &d.warnings {
            match w {
                Warning::Eighty => tracing::warn!(
                    rule = %p.rule,
                    "quota of {} {}: {} of {} bytes used (80 % or more) in the {} ending {}",
                    p.kind.as_str(), p.rule, d.used, p.limit_bytes, p.period.as_str(), utc_text(d.period_end)
                ),
                Warning::UsedUp => tracing::warn!(
                    rule = %p.rule,
                    "quota of {} {} is used up ({} of {} bytes): over-quota={} until {}",
                    p.kind.as_str(), p.rule, d.used, p.limit_bytes, over_text(p.over), utc_text(d.period_end)
                ),
            }
        }
        ledger.quotas.insert(k, d.entry);
        out.push(QuotaStatus {
            kind: p.kind,
            rule: p.rule.clone(),
            limit_bytes: p.limit_bytes,
            used_bytes: d.used,
            period: p.period,
            period_start: utc_text(d.period_start),
            period_end: utc_text(d.period_end),
            over_quota: over_text(p.over),
            used_up: d.used >= p.limit_bytes,
            counted: counted.is_some(),
        });
    }
    ledger.save(state_dir)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use fwc_artifacts::quota::{OverQuota, QuotaPeriod};
    use fwc_artifacts::{BackendKind, RuleKind};
    use serde_json::json;

    use super::*;

    fn policy(limit: u64) -> QuotaPolicy {
        QuotaPolicy {
            kind: RuleKind::Forward,
            rule: "dl".into(),
            object: "quota_dl".into(),
            limit_bytes: limit,
            period: QuotaPeriod::Day,
            reset_day: 0,
            over: OverQuota::Drop,
            backend: BackendKind::Nftables,
        }
    }

    fn tx(bytes: u64) -> Value {
        json!({"nftables": [
            {"add": {"table": {"family": "inet", "name": "fwc"}}},
            {"add": {"quota": {"family": "inet", "table": "fwc", "name": "quota_dl", "bytes": bytes, "inv": true}}},
            {"add": {"quota": {"family": "inet", "table": "fwc", "name": "quota_other", "bytes": 5, "inv": true}}},
        ]})
    }

    /// The live count goes into a recreated object, capped at its limit (the kernel refuses
    /// a count above it: a limit lowered below the usage failed the apply with EINVAL).
    #[test]
    fn restore_puts_the_live_count_capped_at_the_limit() {
        let live = BTreeMap::from([("quota_dl".to_string(), 2_500_000u64)]);
        let mut t = tx(3_000_000);
        restore_used(&mut t, &live, None, &[policy(3_000_000)], 0);
        assert_eq!(t["nftables"][1]["add"]["quota"]["used"], 2_500_000);
        // A quota fwc has no policy for is left alone.
        assert!(t["nftables"][2]["add"]["quota"].get("used").is_none());
        let mut t = tx(2_000_000);
        restore_used(&mut t, &live, None, &[policy(2_000_000)], 0);
        assert_eq!(t["nftables"][1]["add"]["quota"]["used"], 2_000_000);
    }

    /// Without a live object (a reboot), the ledger's count of the current period is restored.
    #[test]
    fn restore_takes_the_ledger_without_a_live_object() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::default();
        ledger.quotas.insert("forward:dl".into(), crate::quota::LedgerEntry { period_start: 86_400, used: 1234, warned: false, exhausted: false });
        ledger.save(dir.path()).unwrap();
        let mut t = tx(3_000_000);
        restore_used(&mut t, &BTreeMap::new(), Some(dir.path()), &[policy(3_000_000)], 86_400 + 5);
        assert_eq!(t["nftables"][1]["add"]["quota"]["used"], 1234);
        // The next day: nothing to restore.
        let mut t = tx(3_000_000);
        restore_used(&mut t, &BTreeMap::new(), Some(dir.path()), &[policy(3_000_000)], 2 * 86_400 + 5);
        assert_eq!(t["nftables"][1]["add"]["quota"]["used"], 0);
    }

    #[test]
    fn usage_is_read_from_a_listing() {
        let l = json!({"nftables": [{"metainfo": {}}, {"quota": {"family": "inet", "name": "quota_dl", "table": "fwc", "handle": 3, "bytes": 9, "used": 7, "inv": true}}]});
        assert_eq!(usage_of_listing(&l), BTreeMap::from([("quota_dl".to_string(), 7)]));
    }
}
