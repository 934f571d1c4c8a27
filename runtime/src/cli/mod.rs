//! The `fwc` command line. Each subcommand lives in its own module with an `Args` struct
//! (clap) and a `run` function; this file only wires them together and maps results to the
//! documented exit codes: 0 ok, 1 error, 2 "changes present" (plan with --detailed-exitcode).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

/// Options every subcommand understands.
#[derive(Debug, Clone, clap::Args)]
pub struct Global {
    /// Colour: auto (each of stdout and stderr when it is a terminal, unless NO_COLOR is set),
    /// always, never. Applies to reports, plans, diagnostics and log lines alike.
    #[arg(long, global = true, default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
    /// More log lines on stderr: -v info, -vv debug, -vvv trace (FWC_LOG, when set, wins).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors in the log on stderr (FWC_LOG, when set, wins).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

impl Global {
    fn color_for(&self, is_terminal: bool) -> bool {
        match self.color.as_str() {
            "always" => true,
            "never" => false,
            _ => is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::env::var_os("TERM").is_none_or(|t| t != "dumb"),
        }
    }

    /// Should what goes to stdout (reports, plans) be coloured?
    pub fn color_stdout(&self) -> bool {
        use std::io::IsTerminal;
        self.color_for(std::io::stdout().is_terminal())
    }

    /// Should what goes to stderr (diagnostics, errors, log lines) be coloured?
    pub fn color_stderr(&self) -> bool {
        use std::io::IsTerminal;
        self.color_for(std::io::stderr().is_terminal())
    }

    /// The log filter: FWC_LOG (`warn`, `fwc_runtime::agent=debug`, ...) if set, else `base`
    /// moved by -v/-q.
    fn log_filter(&self, base: tracing::Level) -> tracing_subscriber::EnvFilter {
        if let Ok(f) = tracing_subscriber::EnvFilter::try_from_env("FWC_LOG") {
            return f;
        }
        use tracing::Level;
        let levels = [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE];
        let at = levels.iter().position(|l| *l == base).unwrap_or(1);
        let level = if self.quiet { Level::ERROR } else { levels[(at + self.verbose as usize).min(levels.len() - 1)] };
        tracing_subscriber::EnvFilter::new(level.as_str().to_ascii_lowercase())
    }
}

/// Is stderr the journal (systemd sets JOURNAL_STREAM to its `device:inode`)? Then log lines
/// carry neither colour nor a timestamp of their own: journald adds the time.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(js) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    js.to_str().is_some_and(|v| v == format!("{}:{}", meta.dev(), meta.ino()))
}

/// Log lines (tracing) go to stderr, coloured like the rest of stderr.
fn init_logging(g: &Global, base: tracing::Level) {
    let journal = stderr_is_journal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(g.log_filter(base))
        .with_writer(std::io::stderr)
        .with_ansi(g.color_stderr() && !(journal && g.color != "always"));
    let _ = if journal { builder.without_time().try_init() } else { builder.try_init() };
}

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

/// clap value parser for durations on the command line (humantime): `500ms`, `60s`, `5m`,
/// `1h 30m`, `1d`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        return s.parse().map(std::time::Duration::from_secs).map_err(|e| format!("\"{s}\": {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("\"{s}\" is not a duration ({e}); write 500ms, 30s, 5m, 1h 30m or 1d"))
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
        Command::Completions(a) => compile::completions(a),
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
        Command::Man(a) => man::run(a),
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

#[cfg(test)]
mod duration_tests {
    #[test]
    fn durations_as_operators_write_them() {
        use std::time::Duration;
        assert_eq!(super::parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(super::parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(super::parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(super::parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert!(super::parse_duration("soon").unwrap_err().contains("not a duration"));
    }
}
