//! Private directories: created 0700 whatever the umask (the state dir, its blob store, the
//! agent's and the quota ledger's dirs), and the effective uid that owns them.

use std::fs::{self, DirBuilder};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use miette::{IntoDiagnostic, Result, WrapErr};

/// The effective uid of this process.
pub(super) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Create `path` (and missing parents) with mode 0700 whatever the umask, and make an
/// existing `path` 0700 when it is ours.
pub fn create_private_dir(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot create state dir {}", path.display()))?;
    let meta = fs::metadata(path).into_diagnostic()?;
    if meta.uid() == euid() && meta.permissions().mode() & 0o7777 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot make {} private (0700)", path.display()))?;
    }
    Ok(())
}
