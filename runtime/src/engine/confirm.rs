//! Confirm-or-revert and rollback.
//!
//! `fwc apply --confirm 60s`: after a successful apply, [`start`] writes `confirm.json` (token,
//! generation, deadline) into the state dir and starts a detached reverter process
//! (`fwc __confirm-watch`, its own session, so it survives the operator's SSH session dying).
//! [`confirm`] deletes `confirm.json`; the reverter ([`watch`]) sees it gone and exits. If the
//! deadline passes first, the reverter takes the state lock and applies the previous generation
//! (or removes everything when there was none), through the same transaction as any apply, then
//! deletes `confirm.json`. Its log is `confirm.log`. [`rollback`] cancels a pending
//! confirmation and reverts at once.
//!
//! Fail closed: the deadline does not depend on the reverter staying alive. Every command that
//! takes the state lock (`apply`, `confirm`, and `status` when it sees a passed deadline) first
//! calls [`enforce_deadline`], which reverts at once when the deadline has passed — whether the
//! reverter was killed, is stuck, or simply has not run yet. Limit: if nothing runs after the
//! reverter dies (no command, no agent tick), nothing reverts; a reboot before the deadline
//! loses the reverter too (the next command reverts).

use std::time::Duration;

use fwc_compiler::artifacts::sha256_hex;
use miette::{miette, IntoDiagnostic, Result};

use super::record;
use super::transaction::{self, ApplyOptions, ApplyReport};
use crate::audit::Action;
use crate::state::{self, PendingConfirm, StateDir, StateLock};

/// Start waiting for `fwc confirm` of `generation` (just applied) for `d`: write the pending
/// confirmation and spawn the reverter (this executable's hidden `__confirm-watch`).
pub fn start(lock: &StateLock, generation: &str, d: Duration, netns: Option<&str>) -> Result<PendingConfirm> {
    let token = sha256_hex(format!("{generation}-{}-{:?}", std::process::id(), std::time::SystemTime::now()).as_bytes())[..16].to_string();
    let deadline_unix = state::now_unix() + d.as_secs_f64().ceil() as u64;
    let mut pending = PendingConfirm { token: token.clone(), generation: generation.into(), deadline_unix, reverter_pid: None, netns: netns.map(str::to_string) };
    lock.set_pending_confirm(Some(&pending))?;
    let exe = std::env::current_exe().into_diagnostic()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("__confirm-watch").arg("--state-dir").arg(&lock.dir.path).arg("--token").arg(&token);
    if let Some(ns) = netns {
        cmd.arg("--netns").arg(ns);
    }
    let child = crate::detached::spawn(cmd, &lock.dir.path.join(state::CONFIRM_LOG), "the confirm reverter")?;
    pending.reverter_pid = Some(child.id());
    lock.set_pending_confirm(Some(&pending))?;
    lock.dir.log_confirm(&format!("{generation}: waiting for `fwc confirm` until {} (reverter pid {})", state::rfc3339(deadline_unix), child.id()));
    Ok(pending)
}

/// Confirm the pending apply (the caller holds the lock): it stays applied. Errors when
/// nothing waits for confirmation or its deadline has passed.
pub fn confirm(lock: &StateLock) -> Result<PendingConfirm> {
    let state = &lock.dir;
    let Some(p) = state.pending_confirm()? else {
        return Err(miette!("nothing to confirm: no apply is waiting for confirmation in {}", state.path.display()));
    };
    if state::now_unix() >= p.deadline_unix {
        return Err(miette!("too late: the confirmation deadline of {} has passed and it is being reverted", p.generation));
    }
    lock.set_pending_confirm(None)?;
    state.log_confirm(&format!("{}: confirmed", p.generation));
    Ok(p)
}

fn short(c: &Option<String>) -> String {
    match c {
        Some(c) if c.len() > 12 && !c.contains("dirty") => c[..12].to_string(),
        Some(c) => c.clone(),
        None => "(no commit)".into(),
    }
}

/// Revert to the previous generation (or to nothing) through a full transaction, recorded in
/// the audit log as a rollback.
/// What a rollback goes back to: the previous generation's artifacts, or none (remove
/// everything) after the first apply; and how to describe it (`why: back to …`).
pub fn rollback_target(state: &crate::state::StateDir, why: &str) -> std::result::Result<(fwc_compiler::artifacts::Artifacts, String), String> {
    let cur = state.current().map_err(|e| transaction::chain(&e))?;
    let prev = state.previous().map_err(|e| transaction::chain(&e))?;
    match (&prev, &cur) {
        (Some(p), _) => Ok((p.artifacts.clone(), format!("{why}: back to {} ({})", p.name, short(&p.meta.commit)))),
        (None, Some(c)) => Ok((transaction::empty_artifacts(&c.meta.host), format!("{why}: back to nothing (first apply)"))),
        (None, None) => Err("nothing has been applied, so there is nothing to roll back".into()),
    }
}

pub fn revert(lock: &StateLock, netns: Option<&str>, why: &str) -> std::result::Result<ApplyReport, String> {
    let (artifacts, source) = rollback_target(&lock.dir, why)?;
    let mut backends = transaction::default_backends(netns, &lock.dir.path);
    let opts = ApplyOptions { source, netns: netns.map(str::to_string), no_sysctl: true, nft_full_replace: None, allow_replace: true };
    let done = record::transact(&mut backends, lock, &artifacts, &opts, Action::Rollback).map_err(|e| transaction::chain(&e))?;
    record::append_or_warn(lock, done.record);
    done.result.map_err(|f| f.to_string())
}

/// Fail closed: when a confirmation is pending and its deadline has passed, revert now (the
/// caller holds the lock, so a live reverter cannot revert twice: it finds the confirmation
/// gone and exits). Returns what was done (`None`: nothing pending past its deadline).
pub fn enforce_deadline(lock: &StateLock, netns: Option<&str>) -> Result<Option<std::result::Result<ApplyReport, String>>> {
    let state = &lock.dir;
    let Some(p) = state.pending_confirm()? else { return Ok(None) };
    if state::now_unix() < p.deadline_unix {
        return Ok(None);
    }
    // The reverter recorded the namespace it reverts in; a command run without --netns must
    // not revert the host's root namespace instead.
    let ns = p.netns.as_deref().or(netns);
    let r = revert(lock, ns, "not confirmed in time (reverter gone)");
    lock.set_pending_confirm(None)?;
    match &r {
        Ok(rep) => state.log_confirm(&format!("{}: not confirmed in time, reverted by pid {} ({})", p.generation, std::process::id(), rep.generation)),
        Err(e) => state.log_confirm(&format!("{}: not confirmed in time, REVERT FAILED: {e}", p.generation)),
    }
    Ok(Some(r))
}

/// The reverter process: wait until the pending confirmation with `token` is confirmed or
/// superseded (return), or its deadline passes (revert, log to `confirm.log`, return).
pub fn watch(state: &StateDir, token: &str, netns: Option<&str>) -> Result<()> {
    loop {
        let p = match state.pending_confirm() {
            Ok(Some(p)) if p.token == token => p,
            _ => return Ok(()), // confirmed, or superseded
        };
        if state::now_unix() >= p.deadline_unix {
            let lock = state.lock(true)?;
            match state.pending_confirm() {
                Ok(Some(p2)) if p2.token == token => {}
                _ => return Ok(()),
            }
            let r = revert(&lock, netns, "not confirmed in time");
            let _ = lock.set_pending_confirm(None);
            match r {
                Ok(rep) => state.log_confirm(&format!("{}: not confirmed in time, reverted ({})", p.generation, rep.generation)),
                Err(e) => state.log_confirm(&format!("{}: not confirmed in time, REVERT FAILED: {e}", p.generation)),
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `fwc rollback` (the caller holds the lock): cancel a pending confirmation, if any, and
/// revert to the previous generation at once. Returns the report and the cancelled
/// confirmation.
pub fn rollback(lock: &StateLock, netns: Option<&str>) -> Result<(ApplyReport, Option<PendingConfirm>)> {
    let state = &lock.dir;
    let cancelled = state.pending_confirm()?;
    if cancelled.is_some() {
        lock.set_pending_confirm(None)?;
    }
    let report = revert(lock, netns, "fwc rollback").map_err(|e| miette!("{e}"))?;
    if let Some(p) = &cancelled {
        state.log_confirm(&format!("{}: rolled back by `fwc rollback` before confirmation", p.generation));
    }
    Ok((report, cancelled))
}
