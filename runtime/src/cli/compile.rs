//! `fwc check`, `fwc compile`, `fwc fmt`, `fwc schema`, `fwc completions`:
//! the commands that only read rule files and never touch the host.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fwc_compiler::artifacts::{self, Artifacts};
use fwc_compiler::diag::Diagnostics;
use fwc_compiler::read::source::SourceTree;
use miette::{miette, IntoDiagnostic, Result, WrapErr};

use super::Global;

/// Exit code for "the plan has changes".
pub const EXIT_CHANGES: u8 = 2;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  fwc check                 # the repository in the current directory\n  fwc check examples/fleet --json")]
pub struct CheckArgs {
    /// Rule repository (directory with fwc.kdl).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Print diagnostics as JSON (an array) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when there are warnings (lockout, shadowed rules, unused sets…): for CI.
    #[arg(long)]
    pub deny_warnings: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  fwc compile --out /tmp/art                      # the only host\n  fwc compile examples/fleet --host edge-1 --out out/edge-1\n  fwc compile --json | jq .manifest.rules\n  fwc compile examples/fleet --all-hosts --out out/   # out/<host>/ for every host")]
pub struct CompileArgs {
    /// Rule repository (directory with fwc.kdl).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Host to compile for (needed when the repository declares several).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub host: Option<String>,
    /// Directory to write nftables.json, qos.json, forward.json and manifest.json into.
    #[arg(long, required_unless_present = "json")]
    pub out: Option<PathBuf>,
    /// Commit to record in the manifest (default: the repository's HEAD, if it is a git checkout).
    #[arg(long)]
    pub commit: Option<String>,
    /// Print all artifacts as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Compile every host the repository declares, on every core with the rule files parsed
    /// once: with --out each host's artifacts go to OUT/<host>/, with --json one object keyed
    /// by host name. Nothing is written unless every host compiles.
    #[arg(long, conflicts_with = "host")]
    pub all_hosts: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  fwc fmt                 # rewrite files in place\n  fwc fmt --check         # CI: exit 1 and list files that are not formatted\n  fwc fmt --diff          # show what would change, write nothing\n  fwc fmt --check --json  # per-file status as JSON\n\nExit codes: 0 formatted (or nothing to do), 1 a file is not formatted (--check/--diff) or is not valid KDL."
)]
pub struct FmtArgs {
    /// Rule repository (directory with fwc.kdl).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Do not write; exit 1 and list the files that are not formatted.
    #[arg(long)]
    pub check: bool,
    /// Do not write; print a unified diff of what formatting would change (exit 1 if anything).
    #[arg(long)]
    pub diff: bool,
    /// Print the status of every file (and diagnostics) as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  fwc schema forward.json\n  fwc schema --out schemas/")]
pub struct SchemaArgs {
    /// Artifact file name (nftables.json, qos.json, forward.json, manifest.json, audit-entry.json); all when omitted.
    #[arg(value_hint = clap::ValueHint::Other)]
    pub name: Option<String>,
    /// Write every schema as DIR/<name>.schema.json instead of printing.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  fwc completions bash > /etc/bash_completion.d/fwc")]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell
    pub shell: clap_complete::Shell,
}

/// Print diagnostics (people: miette to stderr; machines: JSON to stdout).
pub(super) fn report(diags: &Diagnostics, json: bool, g: &Global) {
    if json {
        super::output::print(&super::output::diagnostics(diags));
    } else if !diags.is_empty() {
        eprint!("{}", diags.render(g.color_stderr()));
    }
}

pub(super) fn read_tree(dir: &Path) -> std::result::Result<SourceTree, Diagnostics> {
    SourceTree::from_dir(dir)
}

pub fn check(a: CheckArgs, g: &Global) -> Result<ExitCode> {
    let result = read_tree(&a.dir).and_then(|t| fwc_compiler::check_fleet_at(&t, jiff::Timestamp::now()).map(|w| (t, w))).and_then(|(t, w)| {
        fwc_compiler::policytest::check(&t)?;
        Ok((t, w))
    });
    match result {
        Ok((tree, fleet)) => {
            let (hosts, warnings) = (fleet.hosts.len(), fleet.warnings);
            report(&warnings, a.json, g);
            if !a.json {
                println!("ok: {} file(s), {} test file(s), {hosts} host(s), {} warning(s)", tree.files.len(), tree.tests.len(), warnings.0.len());
            }
            if a.deny_warnings && !warnings.0.is_empty() {
                eprintln!("error: {} warning(s) and --deny-warnings", warnings.0.len());
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(diags) => {
            report(&diags, a.json, g);
            Ok(ExitCode::from(1))
        }
    }
}

/// Compile `dir` for `host`, rendering diagnostics on failure (as `fwc compile` does).
pub fn compile_dir(dir: &Path, host: Option<&str>, commit: Option<&str>, json: bool, g: &Global) -> Result<Option<Artifacts>> {
    let commit = commit.map(str::to_string).or_else(|| crate::repo::checkout_commit(dir));
    match read_tree(dir).and_then(|t| fwc_compiler::compile_at(&t, host, commit.as_deref(), jiff::Timestamp::now())) {
        Ok((artifacts, warnings)) => {
            if !json {
                report(&warnings, false, g);
            }
            Ok(Some(artifacts))
        }
        Err(diags) => {
            report(&diags, json, g);
            Ok(None)
        }
    }
}

pub fn compile(a: CompileArgs, g: &Global) -> Result<ExitCode> {
    if a.all_hosts {
        return compile_all_hosts(a, g);
    }
    if let (Some(out), false) = (&a.out, a.json) {
        return compile_into(&a.dir, a.host.as_deref(), a.commit.as_deref(), out, g);
    }
    let Some(artifacts) = compile_dir(&a.dir, a.host.as_deref(), a.commit.as_deref(), a.json, g)? else {
        return Ok(ExitCode::from(1));
    };
    if let Some(out) = &a.out {
        write_artifacts(out, &artifacts)?;
        if !a.json {
            let m = &artifacts.manifest;
            eprintln!(
                "compiled {} rule(s) for host {} into {}: nftables.json qos.json forward.json manifest.json",
                m.rules.len(),
                m.host,
                out.display()
            );
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&artifacts).into_diagnostic()?);
    }
    Ok(ExitCode::SUCCESS)
}

/// `fwc compile --out DIR`: `nftables.json` written into its file as it is emitted (its text
/// is never held whole), then the other three; nothing is written when the rules have errors.
fn compile_into(dir: &Path, host: Option<&str>, commit: Option<&str>, out: &Path, g: &Global) -> Result<ExitCode> {
    let commit = commit.map(str::to_string).or_else(|| crate::repo::checkout_commit(dir));
    let at = jiff::Timestamp::now();
    let view = match read_tree(dir).and_then(|t| fwc_compiler::load_host_at(&t, host, at)) {
        Ok((view, warnings)) => {
            report(&warnings, false, g);
            view
        }
        Err(diags) => {
            report(&diags, false, g);
            return Ok(ExitCode::from(1));
        }
    };
    release_freed_memory();
    std::fs::create_dir_all(out).into_diagnostic().wrap_err_with(|| format!("cannot create {}", out.display()))?;
    // nftables.json first, then the other three while the host's plan is alive (the manifest's
    // rules are made as it is written); each file is put in place once it is whole.
    let mut nftables = tempfile::NamedTempFile::new_in(out).into_diagnostic()?;
    let (rules, host) = fwc_compiler::emit_view_to(&view, commit.as_deref(), at, &mut nftables, |rest| {
        for name in artifacts::JSON_FILE_NAMES {
            let mut tmp = tempfile::NamedTempFile::new_in(out)?;
            rest.write_file(name, &mut tmp).and_then(|()| tmp.persist(out.join(name)).map_err(|e| e.error)).map_err(|e| std::io::Error::new(e.kind(), format!("{name}: {e}")))?;
        }
        Ok((rest.manifest.rule_count(), rest.manifest.host().to_string()))
    })
    .into_diagnostic()
    .wrap_err_with(|| format!("cannot write the artifacts into {}", out.display()))?;
    nftables.persist(out.join(artifacts::NFTABLES_FILE)).into_diagnostic().wrap_err_with(|| format!("cannot write {}", out.join(artifacts::NFTABLES_FILE).display()))?;
    eprintln!("compiled {rules} rule(s) for host {host} into {}: nftables.json qos.json forward.json manifest.json", out.display());
    Ok(ExitCode::SUCCESS)
}

/// Give the memory freed so far back to the system. The files are parsed on several threads,
/// each allocating from its own malloc arena; their documents are freed once the model is
/// built, but the arenas keep the pages, and everything after the parse grows the main arena
/// beside them (at 90,000 rules, 63 MB of the peak RSS). glibc only; elsewhere nothing.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of malloc's arenas to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `fwc compile --all-hosts`: every host, in parallel, written only when all compile.
fn compile_all_hosts(a: CompileArgs, g: &Global) -> Result<ExitCode> {
    let commit = a.commit.clone().or_else(|| crate::repo::checkout_commit(&a.dir));
    let compiled = match read_tree(&a.dir).and_then(|t| fwc_compiler::compile_all_at(&t, commit.as_deref(), jiff::Timestamp::now())) {
        Ok(c) => c,
        Err(diags) => {
            report(&diags, a.json, g);
            return Ok(ExitCode::from(1));
        }
    };
    if !a.json {
        let warnings = fwc_compiler::merge_unique(compiled.iter().map(|h| h.warnings.clone()).collect());
        report(&warnings, false, g);
    }
    if let Some(out) = &a.out {
        for h in &compiled {
            write_artifacts(&out.join(&h.host), &h.artifacts)?;
        }
        if !a.json {
            eprintln!("compiled {} host(s) into {}/<host>/", compiled.len(), out.display());
        }
    }
    if a.json {
        let by_host: serde_json::Map<String, serde_json::Value> = compiled
            .into_iter()
            .map(|h| Ok((h.host, serde_json::to_value(&h.artifacts)?)))
            .collect::<std::result::Result<_, serde_json::Error>>()
            .into_diagnostic()?;
        println!("{}", serde_json::to_string_pretty(&by_host).into_diagnostic()?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Write the four artifact files into `out` (created if needed); each file atomically, streamed
/// into it as it is serialised (no text of a whole file is held).
pub fn write_artifacts(out: &Path, artifacts: &Artifacts) -> Result<()> {
    std::fs::create_dir_all(out).into_diagnostic().wrap_err_with(|| format!("cannot create {}", out.display()))?;
    for name in artifacts::FILE_NAMES {
        write_atomically(out, name, |f| artifacts.write_file(name, f))?;
    }
    Ok(())
}

/// Write the file `out/name` atomically: `write` fills a temporary file beside it, which then
/// takes the name.
fn write_atomically<T>(out: &Path, name: &str, write: impl FnOnce(&mut tempfile::NamedTempFile) -> std::io::Result<T>) -> Result<T> {
    let mut tmp = tempfile::NamedTempFile::new_in(out).into_diagnostic()?;
    let done = write(&mut tmp).into_diagnostic().wrap_err_with(|| format!("cannot write {}", out.join(name).display()))?;
    tmp.persist(out.join(name)).into_diagnostic().wrap_err_with(|| format!("cannot write {}", out.join(name).display()))?;
    Ok(done)
}

/// What `fwc fmt` did (or would do) to one file.
#[derive(Debug, serde::Serialize)]
struct FmtFile {
    path: String,
    /// `unchanged`, `formatted` (written), `not-formatted` (--check / --diff), `skipped`
    /// (template) or `error` (see diagnostics).
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
}

pub fn fmt(a: FmtArgs, g: &Global) -> Result<ExitCode> {
    let tree = read_tree(&a.dir).map_err(|d| miette!("{}", d.render(false)))?;
    let write = !a.check && !a.diff;
    let mut map = fwc_compiler::read::source::SourceMap::default();
    let mut diags = Diagnostics::default();
    let mut files = Vec::new();
    for (path, text) in tree.files.iter().chain(&tree.tests) {
        if path.ends_with(".j2") {
            files.push(FmtFile { path: path.clone(), status: "skipped", diff: None });
            continue;
        }
        let formatted = match fwc_compiler::format::format_kdl(text) {
            Ok(f) => f,
            Err(e) => {
                let id = map.add(path.clone(), text);
                diags.extend(e.diagnostics(&map, id));
                files.push(FmtFile { path: path.clone(), status: "error", diff: None });
                continue;
            }
        };
        let status = match (formatted == *text, write) {
            (true, _) => "unchanged",
            (false, true) => {
                write_keeping_metadata(&a.dir.join(path), &formatted).wrap_err_with(|| format!("writing {path}"))?;
                "formatted"
            }
            (false, false) => "not-formatted",
        };
        let diff = (a.diff && status == "not-formatted").then(|| unified_diff(path, text, &formatted));
        files.push(FmtFile { path: path.clone(), status, diff });
    }
    let failed = diags.has_errors() || (!write && files.iter().any(|f| f.status == "not-formatted"));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "files": files, "diagnostics": diags })).into_diagnostic()?);
    } else {
        render_fmt(&files, a.check, g.color_stdout());
        report(&diags, false, g);
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// People's view of `fwc fmt`: changed files on stdout (or their diffs), skipped ones on stderr.
fn render_fmt(files: &[FmtFile], check: bool, color: bool) {
    let mut out = std::io::stdout().lock();
    for f in files {
        let line = match (f.status, &f.diff) {
            ("formatted", _) => format!("formatted {}\n", f.path),
            ("not-formatted", Some(diff)) => colour_diff(diff, color),
            ("not-formatted", None) if check => format!("not formatted: {}\n", f.path),
            ("skipped", _) => {
                eprintln!("skipped {} (templates are not KDL until rendered; fmt leaves them alone)", f.path);
                continue;
            }
            _ => continue,
        };
        let _ = out.write_all(line.as_bytes());
    }
}

/// A unified diff (3 lines of context) from the file as it is to the file formatted.
fn unified_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new).unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string()
}

fn colour_diff(diff: &str, color: bool) -> String {
    if !color {
        return diff.to_string();
    }
    diff.split_inclusive('\n')
        .map(|l| match l.as_bytes().first() {
            Some(b'+') => format!("\x1b[32m{}\x1b[0m\n", l.trim_end_matches('\n')),
            Some(b'-') => format!("\x1b[31m{}\x1b[0m\n", l.trim_end_matches('\n')),
            Some(b'@') => format!("\x1b[36m{}\x1b[0m\n", l.trim_end_matches('\n')),
            _ => l.to_string(),
        })
        .collect()
}

/// Replace `path` with `text` atomically (a temporary file in the same directory, renamed over
/// the original: an interrupted fmt leaves the old or the new file, never half of one), keeping
/// its permissions; a symlink is followed, not replaced.
fn write_keeping_metadata(path: &Path, text: &str) -> Result<()> {
    let target = std::fs::canonicalize(path).into_diagnostic()?;
    let perms = std::fs::metadata(&target).into_diagnostic()?.permissions();
    let dir = target.parent().ok_or_else(|| miette!("{} has no parent directory", target.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).into_diagnostic()?;
    tmp.write_all(text.as_bytes()).into_diagnostic()?;
    tmp.as_file().sync_all().into_diagnostic()?;
    std::fs::set_permissions(tmp.path(), perms).into_diagnostic()?;
    tmp.persist(&target).into_diagnostic()?;
    Ok(())
}

/// Schemas of every artifact and of the audit entry, by file name.
pub fn all_schemas() -> std::collections::BTreeMap<&'static str, serde_json::Value> {
    let mut all = artifacts::schemas();
    all.insert("audit-entry.json", serde_json::to_value(schemars::schema_for!(crate::audit::AuditEntry)).expect("schema serializes"));
    all
}

pub fn schema(a: SchemaArgs, _g: &Global) -> Result<ExitCode> {
    let all = all_schemas();
    let selected: Vec<(&str, &serde_json::Value)> = match &a.name {
        Some(n) => {
            let key = all.keys().find(|k| **k == n.as_str() || k.trim_end_matches(".json") == n.as_str()).ok_or_else(|| {
                miette!(help = format!("one of: {}", all.keys().copied().collect::<Vec<_>>().join(", ")), "no artifact named {n}")
            })?;
            vec![(*key, &all[key])]
        }
        None => all.iter().map(|(k, v)| (*k, v)).collect(),
    };
    match &a.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).into_diagnostic()?;
            for (name, schema) in selected {
                let file = dir.join(format!("{}.schema.json", name.trim_end_matches(".json")));
                std::fs::write(&file, artifacts::to_pretty(schema)).into_diagnostic()?;
            }
        }
        None => {
            for (_, schema) in selected {
                print!("{}", artifacts::to_pretty(schema));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn completions(a: CompletionsArgs, full: clap::Command) -> Result<ExitCode> {
    let mut cmd = completion_command(full);
    clap_complete::generate(a.shell, &mut cmd, "fwc", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// The CLI as shells should see it: clap_complete offers hidden subcommands (`__confirm-watch`,
/// `man`) too, so they are left out of a copy of the command tree `full` (the whole CLI).
pub fn completion_command(full: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let mut cmd = clap::Command::new("fwc").subcommand_required(true);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(version) = full.get_version() {
        cmd = cmd.version(version.to_string());
    }
    cmd.args(full.get_arguments().cloned()).subcommands(visible)
}
