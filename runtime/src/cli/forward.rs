//! `fwc forward`: run the userspace forwarder standalone (`--config forward.json`) or as the
//! forwarder of a state dir (`--state-dir DIR`: serves the control socket `fwc apply` talks
//! to), and `fwc forward --stats` to print a running forwarder's counters.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use fwc_compiler::artifacts::{ForwardArtifact, ListenerProto};
use fwc_forwarder::control::{self, Client, Request};
use fwc_forwarder::{Forwarder, Options, Status};
use miette::{miette, IntoDiagnostic, Result, WrapErr};

use super::Global;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
fwc forward --state-dir /var/lib/fwc          # the forwarder `fwc apply` hands forward.json to\n  \
fwc forward --config forward.json             # standalone; SIGHUP reloads the file\n  \
fwc forward --stats --state-dir /var/lib/fwc  # counters of the running forwarder (--json for machines)\n\n\
Environment: FWC_FORWARD_SPLICE=0 moves TCP with a buffered copy instead of splice(2);\n  \
FWC_FORWARD_PIPE_SIZE / FWC_FORWARD_PIPE_MAX (bytes) set the size a splice pipe starts at\n  \
(64 KiB) and grows to while a flow fills it (1 MiB; past fs.pipe-max-size needs\n  \
CAP_SYS_RESOURCE); FWC_FORWARD_UDP_OFFLOAD=0 turns off UDP_GRO/UDP_SEGMENT.")]
pub struct ForwardArgs {
    /// Run the listeners of this forward.json (`fwc compile --out DIR` writes one). SIGHUP
    /// reloads it without dropping connections of unchanged rules.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// State dir: serve the control socket DIR/forwarder.sock (used by `fwc apply` and
    /// `--stats`) and start with the forward.json last applied there. Default /var/lib/fwc
    /// unless --config is given.
    #[arg(long, value_name = "DIR", env = "FWC_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the counters of the running forwarder of the state dir and exit.
    #[arg(long)]
    pub stats: bool,
    /// With --stats: print the forwarder's full status as JSON.
    #[arg(long, requires = "stats")]
    pub json: bool,
    /// Move TCP with a buffered copy instead of splice(2).
    #[arg(long)]
    pub no_splice: bool,
    /// How long connections of a removed rule may run before they are cut.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub drain_timeout: Duration,
}


fn state_dir(a: &ForwardArgs) -> Option<PathBuf> {
    a.state_dir
        .clone()
        .or_else(|| a.config.is_none().then(|| PathBuf::from(crate::state::DEFAULT_STATE_DIR)))
}

pub fn run(args: ForwardArgs, _g: &Global) -> Result<ExitCode> {
    if args.stats {
        return stats(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().into_diagnostic()?;
    rt.block_on(serve(args))
}

fn read_config(p: &PathBuf) -> Result<ForwardArtifact> {
    let text = std::fs::read_to_string(p).into_diagnostic().wrap_err_with(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).into_diagnostic().wrap_err_with(|| format!("parsing {}", p.display()))
}

async fn serve(args: ForwardArgs) -> Result<ExitCode> {
    let mut opts = Options { drain_timeout: args.drain_timeout, ..Options::default() };
    if args.no_splice {
        opts.splice = false;
    }
    let fwd = Forwarder::new(opts);
    let dir = state_dir(&args);
    // The control socket first: a second forwarder on the same state dir stops here.
    let ctl = match &dir {
        Some(d) => {
            let sock = control::socket_path(d);
            Some(control::bind(&sock).into_diagnostic().wrap_err_with(|| format!("control socket {}", sock.display()))?)
        }
        None => None,
    };
    let initial = match (&args.config, &dir) {
        (Some(p), _) => Some(read_config(p)?),
        (None, Some(d)) => control::applied_config(d).into_diagnostic()?,
        (None, None) => None,
    };
    if let Some(cfg) = initial {
        let n = cfg.listeners.len();
        fwd.reload(cfg).await.map_err(|e| miette!("{e}"))?;
        eprintln!("fwc forward: {n} listener(s) active");
    }
    if let Some(l) = ctl {
        eprintln!("fwc forward: control socket {}", control::socket_path(dir.as_ref().unwrap()).display());
        tokio::spawn(control::serve(fwd.clone(), l));
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).into_diagnostic()?;
    let mut int = signal(SignalKind::interrupt()).into_diagnostic()?;
    let mut hup = signal(SignalKind::hangup()).into_diagnostic()?;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                if let Some(p) = &args.config {
                    match read_config(p) {
                        Ok(cfg) => match fwd.reload(cfg).await {
                            Ok(r) => eprintln!(
                                "fwc forward: reloaded: {} added, {} removed, {} changed, {} unchanged",
                                r.added.len() + r.deferred.len(), r.removed.len(), r.changed.len(), r.unchanged
                            ),
                            Err(e) => eprintln!("fwc forward: reload refused, still running the old config: {e}"),
                        },
                        Err(e) => eprintln!("fwc forward: reload refused: {e:?}"),
                    }
                }
            }
        }
    }
    fwd.shutdown().await;
    if let Some(d) = &dir {
        let _ = std::fs::remove_file(control::socket_path(d));
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(args: &ForwardArgs) -> Result<ExitCode> {
    let dir = args.state_dir.clone().unwrap_or_else(|| PathBuf::from(crate::state::DEFAULT_STATE_DIR));
    let mut c = Client::connect(&dir, Duration::from_secs(10)).map_err(|e| {
        miette!(
            help = format!("start one with `fwc forward --state-dir {}`", dir.display()),
            "no forwarder answers at {}: {e}",
            control::socket_path(&dir).display()
        )
    })?;
    let r = c.request(&Request::Status).into_diagnostic()?;
    let st = r.status.ok_or_else(|| miette!("forwarder status failed: {}", r.error.unwrap_or_default()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&st).into_diagnostic()?);
    } else {
        print!("{}", render(&st));
    }
    Ok(ExitCode::SUCCESS)
}

/// Human-readable counters: one line per rule, then the listeners.
pub fn render(st: &Status) -> String {
    let mut out = format!("forwarder pid {} (splice {})\n", st.pid, if st.splice { "on" } else { "off" });
    out.push_str(&format!(
        "{:<24} {:>8} {:>10} {:>9} {:>14} {:>14} {:>9} {:>8}\n",
        "RULE", "ACTIVE", "TOTAL", "REFUSED", "BYTES UP", "BYTES DOWN", "UDP SESS", "FAILED"
    ));
    for r in &st.rules {
        out.push_str(&format!(
            "{:<24} {:>8} {:>10} {:>9} {:>14} {:>14} {:>9} {:>8}\n",
            r.rule,
            r.conns_active,
            r.conns_total,
            r.conns_refused,
            r.bytes_up,
            r.bytes_down,
            r.udp_sessions_active,
            r.connect_failures
        ));
    }
    out.push_str("\nlisteners:\n");
    for l in &st.listeners {
        let p = if l.proto == ListenerProto::Tcp { "tcp" } else { "udp" };
        let sni = l.sni.as_deref().map(|n| format!(" sni {n}")).unwrap_or_default();
        out.push_str(&format!("  {p} {:<22} {}{sni} ({} active)\n", l.local.to_string(), l.rule, l.conns_active));
    }
    if !st.health.is_empty() {
        out.push_str("\ntarget health:\n");
        for h in &st.health {
            let state = if h.up { "up" } else { "DOWN" };
            out.push_str(&format!("  {:<24} {:<28} {state:<5} ({} checks, {} failed)\n", h.rule, h.target, h.checks, h.failures));
        }
    }
    for s in &st.sni_listeners {
        let at = s.local.map(|a| a.to_string()).unwrap_or_else(|| format!("{}:{}", s.listen_addr, s.listen_port));
        out.push_str(&format!(
            "  sni {at}: {} routed, {} to the fallback ({}), {} unmatched closed, {} not TLS, {} timed out\n",
            s.routed,
            s.to_fallback,
            s.fallback.as_deref().unwrap_or("none"),
            s.misses,
            s.parse_failures,
            s.timeouts
        ));
    }
    for l in &st.draining {
        out.push_str(&format!("  draining {} {} ({} active)\n", l.local, l.rule, l.conns_active));
    }
    out
}
