//! `fwc qos stats` (per-class counters of the eBPF QoS dataplane) and `fwc qos detach`
//! (remove everything fwc's QoS attached and pinned). Both find the pins `fwc apply` made
//! (`--netns NS`: those of that namespace); `stats` names classes after the rules of the
//! state dir's applied generation.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use fwc_compiler::artifacts::QosArtifact;
use fwc_qos::Qos;
use miette::{miette, IntoDiagnostic, Result};

use super::Global;

#[derive(Debug, clap::Args)]
pub struct QosArgs {
    #[command(subcommand)]
    pub cmd: QosCmd,
}

#[derive(Debug, Subcommand)]
pub enum QosCmd {
    /// Print per-class counters: passed, paced (EDT), ECN-marked, fast-pass, dropped.
    Stats(StatsArgs),
    /// Detach the QoS program from every interface and remove its pins (program and maps).
    Detach(DetachArgs),
}

/// Which pins: those `fwc apply` made for the host or for `--netns NS`, or a directory.
#[derive(Debug, clap::Args)]
pub struct PinArgs {
    /// The network namespace `fwc apply --netns NS` targeted: its pins are under
    /// /sys/fs/bpf/fwc-netns-NS.
    #[arg(long, value_hint = clap::ValueHint::Other, env = "FWC_NETNS")]
    pub netns: Option<String>,
    /// Pin directory of the program and maps [default: /sys/fs/bpf/fwc, or
    /// /sys/fs/bpf/fwc-netns-NS with --netns].
    #[arg(long, conflicts_with = "netns")]
    pub pin_dir: Option<PathBuf>,
}

impl PinArgs {
    fn dir(&self) -> PathBuf {
        self.pin_dir.clone().unwrap_or_else(|| fwc_qos::pin_root_for(self.netns.as_deref()))
    }
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub pins: PinArgs,
    /// State dir of the apply: its applied rules name the classes.
    #[arg(long, env = "FWC_STATE_DIR", default_value = crate::state::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Name classes after the rules of this qos.json (or an artifact directory holding it)
    /// instead of the state dir's.
    #[arg(long)]
    pub artifacts: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct DetachArgs {
    #[command(flatten)]
    pub pins: PinArgs,
}

pub fn run(a: QosArgs, _g: &Global) -> Result<ExitCode> {
    match a.cmd {
        QosCmd::Stats(s) => stats(s),
        QosCmd::Detach(d) => {
            let dir = d.pins.dir();
            fwc_qos::detach_all(&dir).map_err(|e| miette!("{e}"))?;
            println!("eBPF QoS detached; {} removed", dir.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[derive(serde::Serialize)]
struct Row {
    class: u32,
    rule: Option<String>,
    direction: Option<String>,
    rate_bytes_per_sec: u64,
    burst_bytes: u64,
    flags: Vec<&'static str>,
    credit_bytes: i64,
    #[serde(flatten)]
    stats: fwc_qos::Stats,
}

/// The classes' rules: from `--artifacts`, else from the state dir's applied generation, else
/// none (the table shows `-`).
fn labels(a: &StatsArgs) -> Result<QosArtifact> {
    let Some(p) = &a.artifacts else {
        let applied = crate::state::StateDir::new(&a.state_dir).current().ok().flatten();
        return Ok(applied.map(|g| g.artifacts.qos).unwrap_or_default());
    };
    let file = if p.is_dir() { p.join(fwc_compiler::artifacts::QOS_FILE) } else { p.clone() };
    let text = std::fs::read_to_string(&file).into_diagnostic()?;
    serde_json::from_str(&text).map_err(|e| miette!("{}: {e}", file.display()))
}

fn stats(a: StatsArgs) -> Result<ExitCode> {
    let pin_dir = a.pins.dir();
    let q = Qos::open_pinned(&pin_dir).map_err(|e| {
        let hint = if a.pins.netns.is_none() && a.pins.pin_dir.is_none() { "; for `fwc apply --netns NS` pass --netns NS" } else { "" };
        miette!("{e} (is a QoS class applied?{hint})")
    })?;
    let art = labels(&a)?;
    let e = |e: fwc_qos::QosError| miette!("{e}");
    let mut rows = Vec::new();
    let unclassified = q.stats(0).map_err(e)?;
    for (id, cfg) in q.classes().map_err(e)? {
        let c = art.classes.iter().find(|c| c.id == id);
        let mut flags = Vec::new();
        for (bit, name) in [(fwc_qos::maps::F_ECN, "ecn"), (fwc_qos::maps::F_EDT, "edt"), (fwc_qos::maps::F_FASTPASS, "fastpass")] {
            if cfg.flags & bit != 0 {
                flags.push(name);
            }
        }
        rows.push(Row {
            class: id,
            rule: c.map(|c| c.rule.clone()),
            direction: c.map(|c| format!("{:?}", c.direction).to_lowercase()),
            rate_bytes_per_sec: cfg.rate,
            burst_bytes: cfg.burst,
            flags,
            credit_bytes: q.class_state(id).map_err(e)?.credit,
            stats: q.stats(id).map_err(e)?,
        });
    }
    if a.json {
        let v = serde_json::json!({ "pin_dir": pin_dir, "classes": rows, "unclassified": unclassified });
        println!("{}", serde_json::to_string_pretty(&v).into_diagnostic()?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>5}  {:<20} {:>11} {:>12} {:>12} {:>10} {:>8} {:>8} {:>9} {:>10} {:>12}",
        "class", "rule", "rate", "passed", "bytes", "fast", "ecn", "paced", "dropped", "drop%", "credit"
    );
    for r in &rows {
        let rule = match (&r.rule, &r.direction) {
            (Some(n), Some(d)) => format!("{n} ({d})"),
            _ => "-".into(),
        };
        let total = r.stats.passed_pkts + r.stats.dropped_pkts;
        let pct = if total == 0 { 0.0 } else { 100.0 * r.stats.dropped_pkts as f64 / total as f64 };
        println!(
            "{:>5}  {:<20} {:>11} {:>12} {:>12} {:>10} {:>8} {:>8} {:>9} {:>9.2}% {:>12}",
            r.class,
            rule,
            human_rate(r.rate_bytes_per_sec),
            r.stats.passed_pkts,
            r.stats.passed_bytes,
            r.stats.fast_pkts,
            r.stats.ecn_pkts,
            r.stats.paced_pkts,
            r.stats.dropped_pkts,
            pct,
            r.credit_bytes
        );
    }
    println!("unclassified: {} packets, {} bytes passed", unclassified.passed_pkts, unclassified.passed_bytes);
    Ok(ExitCode::SUCCESS)
}

fn human_rate(bytes_per_sec: u64) -> String {
    let bits = bytes_per_sec as f64 * 8.0;
    if bits >= 1e9 {
        format!("{:.2}gbit", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.2}mbit", bits / 1e6)
    } else {
        format!("{:.0}kbit", bits / 1e3)
    }
}
