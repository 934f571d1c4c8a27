//! `fwc test [DIR]`: run the repository's policy tests (`tests/**/*.kdl`) against the compiled
//! artifacts with the pure evaluator; report each expectation with its file:line and the rule
//! that decided it; `--json` and `--junit FILE` for CI.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use fwc_compiler::policytest::{self, Report, RunError};
use fwc_compiler::read::source::SourceTree;
use miette::{IntoDiagnostic, Result, WrapErr};

use super::Global;

/// Exit code when at least one expectation failed.
pub const EXIT_FAILED: u8 = 3;

#[derive(Debug, clap::Args)]
#[command(after_help = "Test files live in DIR/tests/**/*.kdl, one `expect` per line:\n  \
expect \"office reaches ssh\" accept proto=tcp from=\"203.0.113.5\" to=\":22\" rule=\"ssh\"\n  \
expect drop proto=tcp from=\"198.51.100.9\" to=\":22\"\n  \
expect forward proto=tcp to=\":8080\" reaches=\"10.0.0.5:80\"\n  \
expect shaped proto=tcp to=\":9000\" class=\"tenant-b\"\n\
See docs/testing-policies.md.\n\n\
Examples:\n  fwc test\n  fwc test examples/edge-host --junit report.xml\n  fwc test --json | jq '.results[] | select(.passed | not)'\n\n\
Exit codes: 0 every expectation holds, 1 error (rules or test files invalid; nothing evaluated), 3 an expectation failed.")]
pub struct TestArgs {
    /// Rule repository (directory with fwc.kdl and tests/).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Print the results (with each flow's full explanation) as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also run every expectation's flow through the real kernel: load the compiled ruleset
    /// into a scratch network namespace (never this host's), send the packets through veth
    /// pairs and compare the traced verdict, deciding rule and DNAT with the pure evaluator's.
    /// A disagreement fails the expectation. Needs root. Flows sent by the host itself
    /// (chain=output) are checked by the pure evaluator only.
    #[arg(long)]
    pub kernel: bool,
    /// Also write a JUnit XML report to FILE (one testcase per expectation and host).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Evaluate at this time (RFC 3339 with offset, e.g. 2026-12-01T09:00:00+01:00; default:
    /// now): rules with during= or until= decide by it. An expectation's own at="…" wins.
    /// Not with --kernel (the kernel matches the real clock).
    #[arg(long, value_name = "TIME", conflicts_with = "kernel")]
    pub at: Option<String>,
}

pub fn run(a: TestArgs, g: &Global) -> Result<ExitCode> {
    let tree = match SourceTree::from_dir(&a.dir) {
        Ok(t) => t,
        Err(d) => {
            eprint!("{}", d.render(g.color_stderr()));
            return Ok(ExitCode::from(1));
        }
    };
    let at = match &a.at {
        Some(t) => policytest::parse_at(t).map_err(|e| miette::miette!(help = "write --at 2026-12-01T09:00:00+01:00 (or …Z for UTC)", "--at: {e}"))?,
        None => jiff::Timestamp::now(),
    };
    let report = match policytest::run_at(&tree, at) {
        Ok(r) => r,
        Err(RunError::Diagnostics(d)) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&d).expect("diagnostics serialize"));
            } else {
                eprint!("{}", d.render(g.color_stderr()));
            }
            return Ok(ExitCode::from(1));
        }
        Err(RunError::Eval { host, error }) => {
            return Err(miette::miette!(
                help = "this is a bug in fwc's evaluator (it must understand everything the compiler emits); please report it with the rules",
                "cannot evaluate host {host}: {error}"
            ))
        }
    };
    let mut report = report;
    if a.kernel {
        kernel_check(&tree, &mut report)?;
    }
    if let Some(path) = &a.junit {
        std::fs::write(path, junit(&report)).into_diagnostic().wrap_err_with(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report).into_diagnostic()?);
    } else {
        print!("{}", human(&report, &a.dir.display().to_string(), g.color_stdout()));
    }
    Ok(if report.failed() > 0 { ExitCode::from(EXIT_FAILED) } else { ExitCode::SUCCESS })
}

/// Run every result's flow in the kernel (per host) and fail those where the kernel disagrees.
fn kernel_check(tree: &SourceTree, report: &mut Report) -> Result<()> {
    let hosts: std::collections::BTreeSet<String> = report.results.iter().map(|r| r.host.clone()).collect();
    for host in hosts {
        let (artifacts, _) = fwc_compiler::compile_at(tree, Some(&host), None, jiff::Timestamp::now()).map_err(|d| miette::miette!("{}", d.render(false)))?;
        let idx: Vec<usize> = (0..report.results.len()).filter(|&i| report.results[i].host == host).collect();
        let flows: Vec<_> = idx.iter().map(|&i| report.results[i].flow.clone()).collect();
        let outcomes = crate::kernel_eval::evaluate_all(&artifacts, &flows).map_err(|e| miette::miette!(help = "run fwc test --kernel as root; it only touches namespaces it creates", "kernel mode: {e}"))?;
        for (i, k) in idx.into_iter().zip(outcomes) {
            let r = &mut report.results[i];
            match k {
                // Schedules: the kernel matches the real clock, not an expectation's own time.
                _ if r.at.is_some() => {
                    r.decided_by.push_str(" [kernel: not checked (at= a fixed time; the kernel runs on the real clock)]");
                }
                None if r.flow.origin == fwc_compiler::eval::Origin::Output => {
                    r.decided_by.push_str(" [kernel: not sent (flows sent by the host: pure evaluator only)]");
                }
                None => {
                    r.passed = false;
                    r.actual.push_str(" [kernel: the packet never showed up in the trace]");
                }
                Some(k) => {
                    if crate::kernel_eval::agree(&r.flow, &r.explanation, &k) {
                        r.decided_by.push_str(" [kernel agrees]");
                    } else {
                        r.passed = false;
                        r.actual.push_str(&format!(" [kernel DISAGREES: {} by {}{}{}]", k.verdict.as_str(), if k.policy { "policy".to_string() } else { k.identity.clone().unwrap_or_else(|| "a built-in rule".into()) }, k.seen_dst.map(|(a, p)| format!(", destination {a} port {p}")).unwrap_or_default(), k.qos_mark.map(|m| format!(", QoS mark {m:#010x}")).unwrap_or_default()));
                    }
                }
            }
        }
    }
    Ok(())
}

fn loc(l: &fwc_compiler::diag::Location) -> String {
    format!("{}:{}:{}", l.file, l.line, l.column)
}

/// One line per expectation; failures get what was expected and what happened.
fn human(r: &Report, dir: &str, color: bool) -> String {
    let paint = |s: &str, code: &str| if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() };
    let mut out = String::new();
    if r.results.is_empty() {
        let _ = writeln!(out, "no policy tests: add expectations to tests/*.kdl (see docs/testing-policies.md)");
        return out;
    }
    for t in &r.results {
        let status = if t.passed { paint("PASS", "32") } else { paint("FAIL", "31;1") };
        let decided_at = t.decided_at.as_ref().map(|l| format!(" ({})", loc(l))).unwrap_or_default();
        let _ = writeln!(out, "{status} {} [{}] {}", loc(&t.location), t.host, t.name);
        if t.passed {
            let _ = writeln!(out, "     {}: {}{decided_at}", t.expected, t.decided_by);
            // Per-source limits: an accept holds only within them; say so.
            for l in &t.explanation.limits {
                let _ = writeln!(out, "     limit: {l}");
            }
        } else {
            let _ = writeln!(out, "     expected: {}", t.expected);
            let _ = writeln!(out, "     actual:   {}", t.actual);
            let _ = writeln!(out, "     decided by {}{decided_at}", t.decided_by);
            let _ = writeln!(out, "     see why:  fwc explain {dir} \"{}\" --host {}", flow_arg(&t.explanation.flow), t.host);
        }
    }
    let failed = r.failed();
    let _ = writeln!(out, "{} expectation(s): {} passed, {failed} failed", r.results.len(), r.results.len() - failed);
    out
}

/// The flow as `fwc explain` reads it (drop the trailing `(input)` unless it is not the default).
fn flow_arg(flow: &str) -> String {
    match flow.rsplit_once(" (") {
        Some((f, "input)")) => f.to_string(),
        Some((f, o)) => format!("{f} {}", o.trim_end_matches(')')),
        None => flow.to_string(),
    }
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one suite, one testcase per expectation and host (`classname` = the test file).
pub fn junit(r: &Report) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<testsuites name=\"fwc policy tests\" tests=\"{}\" failures=\"{}\">", r.results.len(), r.failed());
    let _ = writeln!(out, "  <testsuite name=\"fwc test\" tests=\"{}\" failures=\"{}\">", r.results.len(), r.failed());
    for t in &r.results {
        let _ = write!(
            out,
            "    <testcase classname=\"{}\" name=\"{} [{}]\" file=\"{}\" line=\"{}\"",
            xml_escape(&t.location.file),
            xml_escape(&t.name),
            xml_escape(&t.host),
            xml_escape(&t.location.file),
            t.location.line
        );
        if t.passed {
            out.push_str("/>\n");
        } else {
            let at = t.decided_at.as_ref().map(|l| format!(" ({})", loc(l))).unwrap_or_default();
            let msg = format!("expected {}, got {}", t.expected, t.actual);
            let _ = writeln!(out, ">\n      <failure message=\"{}\">{}: expected {}\nactual: {}\ndecided by {}{}</failure>\n    </testcase>",
                xml_escape(&msg), xml_escape(&loc(&t.location)), xml_escape(&t.expected), xml_escape(&t.actual), xml_escape(&t.decided_by), xml_escape(&at));
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}
