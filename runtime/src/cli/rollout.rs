//! `fwc rollout start|advance|status|pause|resume|halt|stop` and `fwc fleet hosts`: parse the
//! arguments, call `crate::rollout` and render. The decisions live in `rollout::controller`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use miette::{IntoDiagnostic, Result};

use super::output;
use super::Global;
use crate::agent::verify::SignaturePolicy;
use crate::rollout::advance::{self, Options, Outcome};
use crate::rollout::controller::Command as Step;
use crate::rollout::prometheus::Prometheus;
use crate::rollout::state_ref::{ssh_signer, Signer};

const EXIT_CODES: &str = "Exit codes: 0 done, or nothing to do (the reason is printed); 1 error, nothing was changed \
(the repository, Prometheus or the policy could not be read, or the push failed); 4 the command does not apply to \
the rollout's state (e.g. resume a complete rollout), or that state is not one to build on (it does not verify with \
--allowed-signers / --gpg-home), nothing was changed.";

const ADVANCE_HELP: &str = "Examples:\n  \
# one step (cron: * * * * *)\n  \
fwc rollout advance --repo ssh://git@git.example.net/net/rules.git --prometheus http://prom:9090\n  \
# as a service, one step every 30 s; a git or Prometheus outage is printed and retried\n  \
fwc rollout advance --repo URL --prometheus http://prom:9090 --watch --interval 30s\n  \
# agents that require signed commits: sign the states, and verify the one built on with the agents' trust file\n  \
fwc rollout advance --repo URL --prometheus http://prom:9090 --sign-key /etc/fwc/rollout-key --allowed-signers /etc/fwc/allowed_signers\n\n\
Each step: fetch the branch and fwc-rollout, read the hosts from Prometheus (fwc_applied_commit_info, \
fwc_agent_degraded by their host label) and the gates, decide, and push at most one state commit.\n\
Exit codes: 0 done, or nothing to do (the reason is printed); 1 error, nothing was changed; 4 the state at the rollout \
ref is not one to build on, nothing was changed: it is behind what the hosts accepted (the ref was set back or \
deleted), or it does not verify with --allowed-signers / --gpg-home (unsigned, or signed by a key not listed); the \
message says which state to go on from.";

#[derive(Debug, clap::Args)]
#[command(
    about = "Roll a commit out to the fleet in health-gated waves (state on the fwc-rollout branch)",
    long_about = "Roll the rule branch's commits out to the fleet in the waves of the repository's `rollout` policy. \
The state (commit, stable commit, promoted wave, phase, reason) is rollout.json on the branch fwc-rollout of the \
same repository; every transition is one commit there, pushed without force, so `git log fwc-rollout` is the audit \
trail and two controllers never both win. Agents read the state with the same fetch as the rules.",
    after_help = "Examples:\n  \
# the automatic step, from cron, CI or a CronJob (or as a service: add --watch --interval 30s)\n  \
fwc rollout advance --repo ssh://git@git.example.net/net/rules.git --prometheus http://prom:9090\n  \
fwc rollout status --repo URL\n  \
fwc rollout pause --repo URL --reason \"change freeze\"\n  \
fwc rollout halt --rollback --repo URL --reason \"5xx on the canary\"\n  \
# roll out (or restart) one commit from the first wave\n  \
fwc rollout start --repo URL 3f2c9e1\n\n\
Exit codes: 0 done, or nothing to do; 1 error (nothing changed); 4 the command does not apply to the state.\n\
Docs: docs/fleet.md (\"The life of a rollout\", \"At 3 a.m.\")."
)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Start a rollout of COMMIT (default: the branch tip) from its first wave.
    #[command(after_help = EXIT_CODES)]
    Start(StartArgs),
    /// The automatic step: start a rollout of a new tip, promote, complete or halt. Stateless and
    /// idempotent: run it from cron, CI or a Kubernetes CronJob, or with --watch.
    #[command(after_help = ADVANCE_HELP)]
    Advance(AdvanceArgs),
    /// Show the rollout state and its latest transitions.
    #[command(after_help = EXIT_CODES)]
    Status(StatusArgs),
    /// Promote no further wave; hosts keep what they have (failures still halt).
    #[command(after_help = EXIT_CODES)]
    Pause(OperatorArgs),
    /// Continue a paused or halted rollout from its promoted wave.
    #[command(after_help = EXIT_CODES)]
    Resume(OperatorArgs),
    /// Halt the rollout; with --rollback every promoted host returns to the stable commit.
    #[command(after_help = EXIT_CODES)]
    Halt(HaltArgs),
    /// End the rollout; hosts keep what they have until the next new tip starts a rollout.
    #[command(after_help = EXIT_CODES)]
    Stop(OperatorArgs),
}

/// Where the rules and the rollout state live.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// Git URL of the rule repository (https://, ssh://, git://, file://); the controller needs
    /// push access to the rollout branch only.
    #[arg(long, env = "FWC_REPO", value_hint = clap::ValueHint::Url)]
    pub repo: String,
    /// The rule branch the agents follow.
    #[arg(long, default_value = "main", value_hint = clap::ValueHint::Other)]
    pub branch: String,
    /// The branch holding rollout.json.
    #[arg(long, default_value = fwc_artifacts::rollout::DEFAULT_ROLLOUT_BRANCH, value_hint = clap::ValueHint::Other)]
    pub rollout_branch: String,
    /// Sign state commits with this ssh key (as `git commit -S` with gpg.format=ssh); needed when
    /// the agents run with --allowed-signers. A private key, or a public key held by the ssh-agent.
    #[arg(long, conflicts_with = "gpg_sign_key")]
    pub sign_key: Option<PathBuf>,
    /// Sign state commits with this GnuPG key id (GNUPGHOME from the environment); for agents
    /// run with --gpg-home.
    #[arg(long)]
    pub gpg_sign_key: Option<String>,
    /// Trust only rollout states signed by a key in this SSH allowed-signers file: the same
    /// file the agents run with (`fwc agent --allowed-signers`). Every command that writes a
    /// state verifies the one it builds on first and refuses (exit 4, nothing pushed) an
    /// unsigned or foreign one, which the agents would refuse too.
    #[arg(long, env = "FWC_ALLOWED_SIGNERS", value_hint = clap::ValueHint::FilePath)]
    pub allowed_signers: Option<PathBuf>,
    /// Trust only rollout states signed by a key in this GnuPG home (public keyring), as
    /// `fwc agent --gpg-home`; may be combined with --allowed-signers.
    #[arg(long, env = "FWC_GPG_HOME", value_hint = clap::ValueHint::DirPath)]
    pub gpg_home: Option<PathBuf>,
    /// How often a push that lost the race to another controller is re-decided and retried.
    #[arg(long, default_value = "5")]
    pub attempts: usize,
}

#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The commit (full or abbreviated hash, on the branch); default: the branch tip.
    pub commit: Option<String>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AdvanceArgs {
    /// Prometheus server scraping the agents (plain http), e.g. http://prometheus:9090.
    #[arg(long, env = "FWC_PROMETHEUS", value_hint = clap::ValueHint::Url)]
    pub prometheus: String,
    /// A declared host absent from Prometheus this long counts as missing (against the wave's
    /// max-unavailable); a shorter absence (a failed scrape) only delays promotion.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    pub missing_after: Duration,
    /// Keep running: one step every --interval (errors are printed and retried).
    #[arg(long)]
    pub watch: bool,
    /// Time between steps with --watch.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration, requires = "watch")]
    pub interval: Duration,
    /// With --watch: serve the controller's metrics on http://ADDR/metrics (e.g. 127.0.0.1:9465).
    #[arg(long, value_name = "ADDR", requires = "watch")]
    pub metrics: Option<std::net::SocketAddr>,
    /// After each step that decided, write the controller's metrics to this file (atomically),
    /// for node-exporter's textfile collector (e.g. /var/lib/node_exporter/textfile/fwc-rollout.prom).
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub textfile: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// One JSON document per step on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// How many transitions of the history to show.
    #[arg(long, default_value = "10")]
    pub history: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    /// Why (recorded in the state and the commit message).
    #[arg(long, default_value = "")]
    pub reason: String,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct HaltArgs {
    /// Promoted hosts go back to the stable commit (without it they keep what they have).
    #[arg(long)]
    pub rollback: bool,
    #[command(flatten)]
    pub op: OperatorArgs,
}

#[derive(Debug, clap::Args)]
#[command(about = "The fleet as Prometheus sees it")]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// Which host runs which commit, in which wave, healthy or not.
    #[command(after_help = "Example:\n  fwc fleet hosts --repo ssh://git@git.example.net/net/rules.git --prometheus http://prometheus:9090\n\n\
ON says whether the host runs the rollout's commit, the stable commit, another one or none; HEALTH is ok, degraded \
(with the failures and the commit they belong to), stale (not in the latest scrape, seen within --missing-after) or \
missing (declared, but not reporting).\n\
Exit codes: 0 ok; 1 error.")]
    Hosts(HostsArgs),
}

#[derive(Debug, clap::Args)]
pub struct HostsArgs {
    #[arg(long, env = "FWC_PROMETHEUS", value_hint = clap::ValueHint::Url)]
    pub prometheus: String,
    /// A host absent from the latest scrape but seen this recently is shown as `stale`.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    pub missing_after: Duration,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[arg(long)]
    pub json: bool,
}

fn options(r: &RemoteArgs) -> Result<Options> {
    let signer = match (&r.sign_key, &r.gpg_sign_key) {
        (Some(k), _) => Some(ssh_signer(k)?),
        (None, Some(id)) => Some(Signer::Gpg { key: id.clone(), home: None }),
        (None, None) => None,
    };
    for f in [&r.allowed_signers, &r.gpg_home].into_iter().flatten() {
        if !f.exists() {
            return Err(miette::miette!(help = "give the trust options the agents run with (--allowed-signers, --gpg-home)", "{} does not exist", f.display()));
        }
    }
    let trust = SignaturePolicy { allowed_signers: r.allowed_signers.clone(), gpg_home: r.gpg_home.clone() };
    if signer.is_some() && !trust.enabled() {
        eprintln!("warning: signing the next rollout state without verifying the one it is built on: give the agents' --allowed-signers (or --gpg-home) so a forged state is not signed over");
    }
    Ok(Options { repo: r.repo.clone(), branch: r.branch.clone(), rollout_branch: r.rollout_branch.clone(), signer, attempts: r.attempts, trust })
}

pub fn rollout(a: RolloutArgs, g: &Global) -> Result<ExitCode> {
    match a.command {
        RolloutCommand::Start(s) => once(&s.remote, None, Step::Start { commit: s.commit.unwrap_or_default() }, s.json, g),
        RolloutCommand::Advance(s) => advance(s, g),
        RolloutCommand::Status(s) => status(s),
        RolloutCommand::Pause(o) => once(&o.remote, None, Step::Pause { reason: o.reason }, o.json, g),
        RolloutCommand::Resume(o) => once(&o.remote, None, Step::Resume { reason: o.reason }, o.json, g),
        RolloutCommand::Halt(h) => once(&h.op.remote, None, Step::Halt { rollback: h.rollback, reason: h.op.reason }, h.op.json, g),
        RolloutCommand::Stop(o) => once(&o.remote, None, Step::Stop { reason: o.reason }, o.json, g),
    }
}

fn once(r: &RemoteArgs, p: Option<&Prometheus>, step: Step, json: bool, _g: &Global) -> Result<ExitCode> {
    once_to(r, p, step, json, None)
}

fn once_to(r: &RemoteArgs, p: Option<&Prometheus>, step: Step, json: bool, textfile: Option<&Path>) -> Result<ExitCode> {
    let opts = options(r)?;
    let out = advance::step(&opts, p, &step, SystemTime::now)?;
    write_textfile(textfile, &out)?;
    render(&out, &opts, json);
    Ok(if out.result == "refused" { ExitCode::from(4) } else { ExitCode::SUCCESS })
}

/// `--textfile`: the controller's metrics for node-exporter's textfile collector, replaced
/// atomically (the collector never reads half a file).
fn write_textfile(path: Option<&Path>, out: &Outcome) -> Result<()> {
    match path {
        Some(p) if !out.metrics.is_empty() => {
            crate::state::write_atomic(p, out.metrics.as_bytes())?;
            // node-exporter runs as its own user: the metrics are not secret.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).into_diagnostic()
        }
        _ => Ok(()),
    }
}

fn advance(a: AdvanceArgs, _g: &Global) -> Result<ExitCode> {
    let mut p = Prometheus::new(&a.prometheus)?;
    p.missing_after = a.missing_after;
    if !a.watch {
        return once_to(&a.remote, Some(&p), Step::Advance, a.json, a.textfile.as_deref());
    }
    let opts = options(&a.remote)?;
    let stop = stop_signals()?;
    // One local copy for the whole watch: each step fetches only what is new. It is a scratch
    // directory, removed when the watch ends (SIGTERM from systemd, SIGINT from a terminal).
    let remote = advance::open(&opts)?;
    let exposition = crate::rollout::endpoint::Exposition::default();
    if let Some(addr) = a.metrics {
        let bound = crate::rollout::endpoint::serve(addr, exposition.clone()).map_err(|e| miette::miette!("cannot listen on {addr} (--metrics): {e}"))?;
        eprintln!("controller metrics on http://{bound}/metrics");
    }
    loop {
        match advance::step_with(&remote, &opts, Some(&p), &Step::Advance, SystemTime::now) {
            Ok(out) => {
                if let Err(e) = write_textfile(a.textfile.as_deref(), &out) {
                    eprintln!("{e:?}");
                }
                if !out.metrics.is_empty() {
                    exposition.set(out.metrics.clone());
                }
                render(&out, &opts, a.json)
            }
            // A watching controller outlives a Prometheus or git outage: say so and retry.
            Err(e) => eprintln!("{:?}", miette::Report::new(e)),
        }
        match stop.recv_timeout(a.interval) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                drop(remote);
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// SIGTERM and SIGINT as a message (the handlers are installed when this returns): the watch
/// ends after its step in progress, and its scratch clone is removed.
fn stop_signals() -> Result<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel::<bool>();
    std::thread::Builder::new()
        .name("fwc-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                let _ = ready_tx.send(false);
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                    let _ = ready_tx.send(false);
                    return;
                };
                let _ = ready_tx.send(true);
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                let _ = tx.send(());
            });
        })
        .into_diagnostic()?;
    match ready_rx.recv() {
        Ok(true) => Ok(rx),
        _ => Err(miette::miette!("cannot install the SIGTERM / SIGINT handlers")),
    }
}

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

fn render(out: &Outcome, opts: &Options, json: bool) {
    if json {
        output::print(&output::versioned(out));
        return;
    }
    match out.result {
        "transition" => {
            println!("{}", out.message);
            if let Some(s) = &out.state {
                println!("  {}", s.reason);
            }
            println!("  state commit {} pushed to {}", short(out.pushed.as_deref().unwrap_or("")), opts.rollout_branch);
        }
        "refused" => eprintln!("not done: {}", out.message),
        _ => println!("nothing to do: {}", out.message),
    }
    if out.lost_races > 0 {
        println!("  (another controller moved {} first {} time(s); decided again on its state)", opts.rollout_branch, out.lost_races);
    }
}

fn status(a: StatusArgs) -> Result<ExitCode> {
    let opts = options(&a.remote)?;
    let st = advance::status(&opts, a.history)?;
    if a.json {
        output::print(&output::versioned(&st));
        return Ok(ExitCode::SUCCESS);
    }
    match &st.state {
        None => println!("no rollout yet in {} (branch {} is empty); the next `fwc rollout advance` starts one of {} tip {}", st.repo, st.rollout_branch, st.branch, short(&st.tip)),
        Some(s) => {
            println!("rollout of {} ({})", s.commit, s.branch);
            println!("  phase:     {}{} since {}", s.phase.as_str(), if s.rollback { " (rollback to stable)" } else { "" }, s.since);
            println!("  promoted:  {}{}", advance::promoted_name(s), s.promoted_at.as_deref().map(|t| format!(" at {t}")).unwrap_or_default());
            println!("  waves:     {}", s.waves.join(" -> "));
            println!("  stable:    {}", s.stable.as_deref().unwrap_or("none yet (where stable is called for, hosts keep what they have)"));
            println!("  reason:    {}", s.reason);
            if st.tip != s.commit {
                println!("  tip of {}: {} (not this rollout's commit)", st.branch, short(&st.tip));
            }
        }
    }
    if !st.history.is_empty() {
        println!("history ({}, newest first):", st.rollout_branch);
        for h in &st.history {
            println!("  {} {} {}  ({})", h.time, short(&h.id), h.message.lines().next().unwrap_or(""), h.author);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn fleet(a: FleetArgs, _g: &Global) -> Result<ExitCode> {
    let FleetCommand::Hosts(h) = a.command;
    let opts = options(&h.remote)?;
    let mut p = Prometheus::new(&h.prometheus)?;
    p.missing_after = h.missing_after;
    let view = advance::hosts(&opts, &p)?;
    if h.json {
        output::print(&output::versioned(&view));
        return Ok(ExitCode::SUCCESS);
    }
    match &view.state {
        Some(s) => println!("rollout of {}: {}, promoted {}; stable {}", short(&s.commit), s.phase.as_str(), advance::promoted_name(s), s.stable.as_deref().map(short).unwrap_or("none")),
        None => println!("no rollout state; waves of the tip {}", short(&view.tip)),
    }
    println!("{:<24} {:<14} {:<8} {:<13} {:<9} {}", "HOST", "WAVE", "ON", "COMMIT", "HEALTH", "DETAIL");
    for r in &view.hosts {
        let wave = r.wave_name.clone().unwrap_or_else(|| "-".into());
        let commit = r.applied.as_deref().map(short).unwrap_or("-");
        let mut detail = r.degraded.join(", ");
        if !r.declared {
            detail = if detail.is_empty() { "not declared in the repository".into() } else { format!("{detail}; not declared") };
        }
        println!("{:<24} {:<14} {:<8} {:<13} {:<9} {}", r.host, wave, r.on, commit, r.health, detail);
    }
    Ok(ExitCode::SUCCESS)
}
