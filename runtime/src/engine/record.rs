//! A transaction together with its audit record: the one way the CLI (apply, rollback, the
//! confirm reverter) and the agent change the host. The caller appends the record to the
//! hash-chained audit log (`<state-dir>/audit.jsonl`), adding what only it knows (the agent:
//! author, signer, its own detail).

use std::time::Instant;

use fwc_compiler::artifacts::Artifacts;
use miette::Result;

use super::transaction::{self, ApplyFailure, ApplyOptions, ApplyReport};
use crate::audit::{self, Action, AuditLog, Outcome};
use crate::backend::Backend;
use crate::state::StateLock;

/// The result of a transaction and the audit record describing it.
pub struct Recorded {
    pub result: std::result::Result<ApplyReport, ApplyFailure>,
    /// `host`, `action`, `commit`, `previous_commit`, `changes`, `result`, `detail`
    /// (`opts.source`, plus the failure) and `duration_ms` filled in.
    pub record: audit::Record,
}

/// The audit outcome of a transaction result: `ok`, `aborted` (failed in prepare, before any
/// backend changed anything), `rolled_back` (every backend is back on the previous state) or
/// `failed` (a rollback failed too).
pub fn outcome_of(result: &std::result::Result<ApplyReport, ApplyFailure>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(f) if f.phase == transaction::Phase::Prepare => Outcome::Aborted,
        Err(f) if f.rollback.iter().all(|(_, r)| r.is_ok()) => Outcome::RolledBack,
        Err(_) => Outcome::Failed,
    }
}

/// Run the apply transaction of `artifacts` over `backends` (the caller holds the state lock)
/// and describe it as an audit record of `action`.
pub fn transact(backends: &mut [Box<dyn Backend>], lock: &StateLock, artifacts: &Artifacts, opts: &ApplyOptions, action: Action) -> Result<Recorded> {
    let t0 = Instant::now();
    let before = lock.dir.current()?.map(|g| g.artifacts);
    let result = transaction::transaction(backends, lock, artifacts, opts);
    let detail = match &result {
        Ok(_) => opts.source.clone(),
        Err(e) => format!("{}: {e}", opts.source),
    };
    let record = audit::Record {
        host: artifacts.manifest.host.clone(),
        action: Some(action),
        commit: artifacts.manifest.commit.clone(),
        previous_commit: before.as_ref().and_then(|b| b.manifest.commit.clone()),
        changes: audit::changes_between(before.as_ref().map(|b| &b.manifest), &artifacts.manifest),
        result: Some(outcome_of(&result)),
        detail: Some(detail),
        duration_ms: t0.elapsed().as_millis() as u64,
        ..Default::default()
    };
    Ok(Recorded { result, record })
}

/// Append `rec` to the state dir's audit log. A log that cannot be written is reported on
/// stderr, not fatal: the change itself already happened or was rolled back.
pub fn append_or_warn(lock: &StateLock, rec: audit::Record) {
    if let Err(e) = AuditLog::in_state_dir(&lock.dir.path).append(rec) {
        eprintln!("warning: could not write the audit log in {}: {e}", lock.dir.path.display());
    }
}
