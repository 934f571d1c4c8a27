//! `fwc agent` (pull-mode GitOps, see `crate::agent`) and `fwc audit show|verify`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use miette::{miette, IntoDiagnostic, Result, WrapErr};

use super::Global;
use crate::agent::verify::SignaturePolicy;
use crate::agent::{AgentConfig, DriftMode};
use crate::audit::AuditLog;
use crate::metrics::WebhookSecret;

#[derive(Debug, clap::Args)]
#[command(after_help = "Docs: docs/operations.md (systemd unit, Kubernetes DaemonSet, webhooks, Grafana).")]
pub struct AgentArgs {
    /// Git URL of the rule repository (https://, ssh://, git://, file://).
    #[arg(long)]
    pub repo: String,
    /// This host's name in the rule repository (`host "NAME"`; `localhost` when it declares none).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub host: String,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// How often to fetch and check for drift (`30s`, `5m`, `500ms`).
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Applied state, the git mirror, the audit log.
    #[arg(long, default_value = crate::state::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Address of /metrics, /healthz, /readyz and POST /hooks/git; `off` disables the server.
    #[arg(long, default_value = "127.0.0.1:9640")]
    pub metrics: String,
    /// File holding the webhook secret (HMAC-SHA256 key / GitLab token). Without it the webhook is off.
    #[arg(long)]
    pub webhook_secret_file: Option<PathBuf>,
    /// Require commits signed by a key in this SSH allowed-signers file (git's gpg.ssh.allowedSignersFile format).
    #[arg(long)]
    pub allowed_signers: Option<PathBuf>,
    /// Require commits signed by a key in this GnuPG home (public keyring); may be combined with --allowed-signers.
    #[arg(long)]
    pub gpg_home: Option<PathBuf>,
    /// What to do when the live dataplane differs from the applied rules.
    #[arg(long, default_value = "heal", value_parser = ["heal", "alert"])]
    pub drift: String,
    /// Apply inside this network namespace (tests, demos).
    #[arg(long, value_hint = clap::ValueHint::Other)]
    pub netns: Option<String>,
    /// Deadline of one git fetch.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub fetch_timeout: Duration,
    /// How long SIGTERM (or SIGINT) waits for an apply in progress before the agent exits anyway;
    /// the intent journal makes the next start redo and audit the cut apply. A compile in progress
    /// is abandoned at once. Keep it below systemd's TimeoutStopSec (the shipped unit: 60 s).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub stop_grace: Duration,
    /// Run one fetch + reconcile and exit: 0 applied or up to date, 3 fetch failed (also a
    /// missing branch), 4 commit refused (signature, compile, unknown --host, rewind),
    /// 5 apply failed (rolled back), 6 reconcile error, 1 configuration error.
    #[arg(long)]
    pub once: bool,
    /// Do not host the userspace forwarder in the agent (run `fwc forward --state-dir DIR` yourself).
    #[arg(long)]
    pub no_forwarder: bool,
    /// Apply a new tip even when it does not descend from the applied commit (force-push,
    /// history rewrite). Without it such a tip is refused (a rollback attack); to allow one
    /// rewind only, write the new tip's commit id to STATE_DIR/allow-rewind instead.
    #[arg(long)]
    pub allow_rewind: bool,
    /// Cheap polls for big fleets: read the repository's refs from this static file (git's
    /// `info/refs`, kept current by `git update-server-info` in the post-update hook, served by
    /// any web server or CDN) and fetch with git only when the branch or the rollout ref moved.
    /// `auto`: `<--repo>/info/refs` (http/https repositories). Off by default.
    #[arg(long, value_name = "URL|auto")]
    pub refs_url: Option<String>,
    /// With --refs-url: every Nth poll is a full git fetch whatever the file says, which bounds
    /// how long a stale or withheld refs file can delay a change (N × --interval).
    #[arg(long, default_value_t = crate::agent::refs_poll::DEFAULT_FULL_EVERY, value_name = "N")]
    pub refs_full_every: u32,
}


pub fn agent(a: AgentArgs, _g: &Global) -> Result<ExitCode> {
    let metrics_addr: Option<SocketAddr> = match a.metrics.as_str() {
        "off" | "none" | "" => None,
        s => Some(s.parse().map_err(|e| miette!("--metrics {s}: {e} (want IP:PORT or off)"))?),
    };
    let webhook = match &a.webhook_secret_file {
        Some(f) => {
            let bytes = std::fs::read(f).into_diagnostic().wrap_err_with(|| format!("cannot read {}", f.display()))?;
            let s = WebhookSecret::new(&bytes);
            if bytes.iter().all(|b| b.is_ascii_whitespace()) {
                return Err(miette!("{} is empty", f.display()));
            }
            Some(s)
        }
        None => None,
    };
    for f in [&a.allowed_signers, &a.gpg_home].into_iter().flatten() {
        if !f.exists() {
            return Err(miette!("{} does not exist", f.display()));
        }
    }
    if a.interval.is_zero() {
        return Err(miette!("--interval must be more than 0"));
    }
    let refs_url = match a.refs_url.as_deref() {
        None => None,
        Some("auto") => Some(
            crate::agent::refs_poll::RefsPoll::default_url(&a.repo)
                .ok_or_else(|| miette!("--refs-url auto needs an http:// or https:// --repo (this one is {}); give the refs file's URL", a.repo))?,
        ),
        Some(u) => Some(u.to_string()),
    };
    if let Some(u) = &refs_url {
        crate::agent::refs_poll::RefsPoll::new(u, a.refs_full_every).map_err(|e| miette!("{e}"))?;
    }
    let cfg = AgentConfig {
        repo_url: a.repo,
        host: a.host,
        branch: a.branch,
        interval: a.interval,
        state_dir: a.state_dir,
        metrics_addr,
        webhook,
        signatures: SignaturePolicy { allowed_signers: a.allowed_signers, gpg_home: a.gpg_home },
        drift: if a.drift == "alert" { DriftMode::Alert } else { DriftMode::Heal },
        netns: a.netns,
        fetch_timeout: a.fetch_timeout,
        stop_grace: a.stop_grace,
        once: a.once,
        forwarder: !a.no_forwarder,
        allow_rewind: a.allow_rewind,
        refs_url,
        refs_full_every: a.refs_full_every,
    };
    let code = crate::agent::run(cfg)?;
    Ok(ExitCode::from(code))
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Print the audit log.
    Show(AuditOpts),
    /// Check the hash chain: exit 1 when an entry was edited, deleted, reordered or torn.
    Verify(AuditOpts),
}

#[derive(Debug, clap::Args)]
pub struct AuditOpts {
    #[arg(long, default_value = crate::state::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn audit(a: AuditArgs, _g: &Global) -> Result<ExitCode> {
    match a.command {
        AuditCommand::Show(o) => {
            let log = AuditLog::in_state_dir(&o.state_dir);
            let entries = log.entries().into_diagnostic()?;
            if o.json {
                super::output::print(&super::output::versioned(&serde_json::json!({ "entries": entries })));
            } else {
                for e in &entries {
                    let commit = e.commit.as_deref().map(|c| &c[..c.len().min(12)]).unwrap_or("-");
                    let changes: Vec<String> = e
                        .changes
                        .iter()
                        .map(|(b, c)| format!("{b} +{} ~{} -{}", c.added.len(), c.changed.len(), c.removed.len()))
                        .collect();
                    println!(
                        "{:>5}  {}  {:<6} {:<11} {commit}  {}{}{}",
                        e.seq,
                        e.time,
                        e.action.as_str(),
                        e.result.as_str(),
                        e.author.as_deref().unwrap_or(""),
                        e.signer.as_deref().map(|s| format!(" signed by {s}")).unwrap_or_default(),
                        if changes.is_empty() { String::new() } else { format!("  [{}]", changes.join(", ")) },
                    );
                    if let Some(d) = &e.detail {
                        for l in d.lines().take(6) {
                            println!("         {l}");
                        }
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Verify(o) => {
            let log = AuditLog::in_state_dir(&o.state_dir);
            let rep = log.verify().into_diagnostic()?;
            if o.json {
                super::output::print(&super::output::versioned(&rep));
            } else {
                for f in &rep.findings {
                    println!("{}: {}", log.path.display(), f.message);
                }
                for t in &rep.torn_recovered {
                    println!("note: recovered earlier: {t} (see {})", log.torn_path.display());
                }
                if rep.ok() {
                    println!(
                        "{}: {} entries, chain intact{}",
                        log.path.display(),
                        rep.entries,
                        rep.last_hash.as_deref().map(|h| format!(", head {h}")).unwrap_or_default()
                    );
                }
            }
            Ok(if rep.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}
