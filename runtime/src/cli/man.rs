//! `fwc man --out DIR` (hidden, for packaging): one roff man page per visible command, generated
//! from the clap definitions with clap_mangen so the pages never drift from `--help`.
//! `fwc.1` for the top level, `fwc-apply.1`, `fwc-qos-stats.1`, ... for the subcommands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use miette::{IntoDiagnostic, Result, WrapErr};

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  fwc man --out target/man && man -l target/man/fwc-apply.1")]
pub struct ManArgs {
    /// Directory to write the pages to (created if missing).
    #[arg(long, value_hint = clap::ValueHint::DirPath)]
    pub out: PathBuf,
}

/// Write the pages of `cmd`, the whole CLI.
pub fn run(a: ManArgs, mut cmd: clap::Command) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.out).into_diagnostic().wrap_err_with(|| format!("cannot create {}", a.out.display()))?;
    cmd.build();
    for name in write_pages(&cmd, "fwc", &a.out)? {
        println!("{}", a.out.join(name).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The file names of the pages written for `cmd` (named `name`) and its visible subcommands.
fn write_pages(cmd: &clap::Command, name: &str, out: &Path) -> Result<Vec<String>> {
    let page = cmd.clone().name(name.to_string()).bin_name(name.replace('-', " "));
    let mut roff = Vec::new();
    clap_mangen::Man::new(page).render(&mut roff).into_diagnostic()?;
    let file = format!("{name}.1");
    std::fs::write(out.join(&file), roff).into_diagnostic().wrap_err_with(|| format!("cannot write {}", out.join(&file).display()))?;
    let mut written = vec![file];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        written.extend(write_pages(sub, &format!("{name}-{}", sub.get_name()), out)?);
    }
    Ok(written)
}
