//! The `fwc` command line. Each subcommand lives in its own module with an `Args` struct
//! (clap) and a `run` function; this file only wires them together and maps results to the
//! documented exit codes: 0 ok, 1 error, 2 "changes present" (plan with --detailed-exitcode).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod common;
pub mod compile;
pub mod agent;
mod qos;
mod forward;
pub mod apply;
mod host;
pub mod plan;
pub mod explain;
pub mod test;
pub mod import;
mod man;
pub mod output;
pub mod rollout;

pub use common::{parse_duration, Global};
use common::init_logging;

#[derive(Debug, Parser)]
#[command(
    name = "fwc",
    version,
    about = "Firewall, port forwarding and bandwidth control as code",
    long_about = "fwc compiles KDL rule files kept in git into an nftables ruleset, eBPF QoS classes and \
userspace forwarder listeners, and applies them atomically.\n\n\
Start with `fwc check` in a rule repository (a directory with fwc.kdl), then `fwc compile --out DIR` \
to see the artifacts and `fwc plan --from HEAD~1` to see what a commit changes.",
    after_help = "Exit codes: 0 ok, 1 error (nothing was applied), 2 changes present (plan --detailed-exitcode), 3 a policy test failed (fwc test).\n\
Environment: FWC_LOG (log filter on stderr: error, warn, info, debug, trace or target=level lists such as fwc_runtime::agent=debug; overrides -v/-q), NO_COLOR (no colour on any stream), FWC_STATE_DIR, FWC_NETNS, FWC_LOCK_TIMEOUT.\n\
Docs: docs/rules.md (the rule language), docs/testing-policies.md, docs/architecture.md, docs/operations.md."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pull-mode GitOps: fetch a git remote, verify, compile, apply, heal drift, serve metrics.
    Agent(agent::AgentArgs),
    /// Show or verify the hash-chained audit log.
    Audit(agent::AuditArgs),
    /// Parse and check a rule repository for every host; report all errors.
    Check(compile::CheckArgs),
    /// Compile one host's artifacts (nftables.json, qos.json, forward.json, manifest.json).
    Compile(compile::CompileArgs),
    /// Show what would change, per rule, with the backend each rule goes to.
    Plan(plan::PlanArgs),
    /// Format rule files, losing nothing (or only check, or show a diff).
    ///
    /// Formats the repository's KDL files (fwc.kdl, rules/**/*.kdl, tests/**/*.kdl) in place.
    /// Only whitespace changes: 4-space indentation per block level, one space between entries,
    /// no space around `=`, no trailing blanks, at most one blank line in a row. Comments (`//`,
    /// `/* */`, end of line), `/-` slashdashes, blank lines between groups and every value as
    /// written (quoting included) are kept, and each result is checked to mean the same rules
    /// before it is written. Templates (*.kdl.j2) are not KDL until rendered and are skipped
    /// (listed on stderr).
    Fmt(compile::FmtArgs),
    /// Print the JSON Schema of an artifact (or write all of them to a directory).
    Schema(compile::SchemaArgs),
    /// Print a shell completion script.
    Completions(compile::CompletionsArgs),
    /// Run the userspace forwarder (standalone or for a state dir), or print its counters.
    Forward(forward::ForwardArgs),
    /// eBPF QoS: per-class counters (`stats`), remove the dataplane (`detach`).
    Qos(qos::QosArgs),
    /// Apply a rule repository, artifact dir or saved plan to this host, atomically.
    Apply(apply::ApplyArgs),
    /// Keep an apply made with --confirm (otherwise it is reverted at the deadline).
    Confirm(apply::ConfirmArgs),
    /// Show the applied commit, time, rules per backend, drift and pending confirmation.
    Status(apply::StatusArgs),
    /// Go back to the previously applied artifacts.
    Rollback(apply::RollbackArgs),
    /// Run the policy tests in tests/*.kdl against the compiled rules (exit 3 if one fails).
    Test(test::TestArgs),
    /// Adopt an existing firewall (nftables, iptables, ufw, firewalld) as a rule repository, with policy tests proving it.
    Import(import::ImportArgs),
    /// Show what the compiled rules do to one flow: path, matching rules, deciding rule (file:line:col), DNAT, QoS, forwarder.
    Explain(explain::ExplainArgs),
    /// Roll commits out to the fleet in health-gated waves (docs/fleet.md).
    Rollout(rollout::RolloutArgs),
    /// The fleet as Prometheus sees it: `fwc fleet hosts`.
    Fleet(rollout::FleetArgs),
    /// (internal) the reverter process of `fwc apply --confirm`.
    #[command(name = "__confirm-watch", hide = true)]
    ConfirmWatch(apply::ConfirmWatchArgs),
    /// (packaging) write the man pages (fwc.1, fwc-SUBCOMMAND.1, ...) generated from this CLI.
    #[command(hide = true)]
    Man(man::ManArgs),
}

/// Does this command run a long-lived server (which must survive peers closing sockets)?
fn runs_a_server(command: &Command) -> bool {
    match command {
        Command::Agent(_) => true,
        Command::Forward(a) => !a.stats,
        Command::ConfirmWatch(_) => true,
        _ => false,
    }
}

/// For a short-lived command that reads, builds and drops big buffers one after another (a
/// million-entry set: the file's text, its cache entry, the 28 MB `nftables.json`, the
/// generation's copy): malloc keeps freed memory for the next allocation instead of giving
/// each big buffer back to the kernel and taking fresh zeroed pages for the next (glibc
/// serves blocks of 128 KiB and more with their own `mmap`, and trims its heap's top). Half
/// of the page faults of a one-element `fwc apply` of a 1M set went. Not for the servers: they
/// would keep their peak memory for their whole life. glibc only; elsewhere nothing.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tunables; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every command that prints a report dies quietly on a closed pipe (`fwc status --json |
    // head`) instead of panicking in println!. Only the long-running servers (the agent, the
    // forwarder) keep Rust's SIGPIPE=ignore: they write to sockets that peers may close, and a
    // peer going away must not kill them.
    if !runs_a_server(&cli.command) {
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if matches!(cli.command, Command::Apply(_) | Command::Plan(_)) {
        keep_freed_memory();
    }
    let g = cli.global.clone();
    // The agent is a service: its events (applies, refusals, drift) are its log, one line each.
    let base = if matches!(cli.command, Command::Agent(_)) { tracing::Level::INFO } else { tracing::Level::WARN };
    init_logging(&g, base);
    let result = match cli.command {
        Command::Agent(a) => agent::agent(a, &g),
        Command::Audit(a) => agent::audit(a, &g),
        Command::Check(a) => compile::check(a, &g),
        Command::Compile(a) => compile::compile(a, &g),
        Command::Plan(a) => plan::plan(a, &g),
        Command::Fmt(a) => compile::fmt(a, &g),
        Command::Schema(a) => compile::schema(a, &g),
        Command::Completions(a) => compile::completions(a, <Cli as clap::CommandFactory>::command()),
        Command::Forward(a) => forward::run(a, &g),
        Command::Qos(a) => qos::run(a, &g),
        Command::Apply(a) => apply::apply(a, &g),
        Command::Confirm(a) => apply::confirm(a, &g),
        Command::Status(a) => apply::status(a, &g),
        Command::Rollback(a) => apply::rollback(a, &g),
        Command::ConfirmWatch(a) => apply::confirm_watch(a),
        Command::Test(a) => test::run(a, &g),
        Command::Explain(a) => explain::run(a, &g),
        Command::Import(a) => import::run(a, &g),
        Command::Man(a) => man::run(a, <Cli as clap::CommandFactory>::command()),
        Command::Rollout(a) => rollout::rollout(a, &g),
        Command::Fleet(a) => rollout::fleet(a, &g),
    };
    match result {
        Ok(code) => code,
        Err(report) => {
            // Diagnostics of rules that do not compile: rendered once, as `fwc check` does.
            if let Some(failed) = report.downcast_ref::<crate::engine::load::CompileFailed>() {
                eprint!("{}", failed.0.render(g.color_stderr()));
                return ExitCode::from(1);
            }
            let handler = if g.color_stderr() {
                miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode())
            } else {
                miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
            };
            let mut out = String::new();
            match handler.render_report(&mut out, report.as_ref()) {
                Ok(()) => eprint!("{out}"),
                Err(_) => eprintln!("{report:?}"),
            }
            ExitCode::from(1)
        }
    }
}
