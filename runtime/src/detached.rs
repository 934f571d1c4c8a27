//! Helper processes that must outlive the command that starts them (the confirm reverter, a
//! userspace forwarder started by `fwc apply`): their own session, SIGHUP ignored, stdin from
//! /dev/null and stdout/stderr appended to a log file in the state dir.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use miette::{IntoDiagnostic, Result, WrapErr};

/// Start `cmd` detached from this process's session, logging to `log` (created 0600).
pub fn spawn(mut cmd: Command, log: &Path, what: &str) -> Result<Child> {
    let out = crate::state::open_append_private(log).into_diagnostic().wrap_err_with(|| format!("cannot open {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out.try_clone().into_diagnostic()?).stderr(out);
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid and signal are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    cmd.spawn().into_diagnostic().wrap_err_with(|| format!("cannot start {what}"))
}
