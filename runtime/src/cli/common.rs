//! What every subcommand shares: the global options ([`Global`]: colour, verbosity, the log
//! filter), logging set-up, and the command line's duration parser.

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
pub(super) fn init_logging(g: &Global, base: tracing::Level) {
    let journal = stderr_is_journal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(g.log_filter(base))
        .with_writer(std::io::stderr)
        .with_ansi(g.color_stderr() && !(journal && g.color != "always"));
    let _ = if journal { builder.without_time().try_init() } else { builder.try_init() };
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
