//! The compiler's cost guard: `fwc-bench-compile` compiles the generated repository of
//! [`RULES`] mixed rules (`fwc_bench::generate`: sets, filter rules in the `input`, `forward`
//! and `output` chains, kernel and userspace forwards, capped forwards, shapes — the mix of the
//! benchmark's 90,000-rule figure) and streams its artifact files out, under callgrind; the
//! instruction count it executes (which repeats exactly, whatever the machine's speed or load)
//! may not rise more than 10 % over the count committed in `instructions.baseline`. A drop of
//! more than 10 % passes and says to refresh the baseline.
//!
//! Refresh the baseline (after a deliberate change of the compiler's cost, or of the toolchain):
//! `FWC_INSTRUCTIONS_UPDATE=1 cargo test -p fwc-bench --test instructions -- --nocapture`,
//! then commit `bench/tests/instructions.baseline` with the reason in the message. The count
//! belongs to the build profile the test runs in (CI's `cargo test`: the dev profile); a run in
//! another profile prints SKIP.

use std::path::Path;
use std::process::Command;

/// Size of the generated repository: big enough that the per-rule work dominates start-up,
/// small enough that the dev-profile build runs in ~30 s under callgrind.
const RULES: usize = 1000;
/// Allowed rise over the baseline.
const TOLERANCE: f64 = 0.10;

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    }
}

/// Instructions executed by `bin RULES` (all threads), from callgrind's summary line.
fn instructions(bin: &str, out_dir: &Path) -> u64 {
    let out = out_dir.join("callgrind.out");
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(bin)
        .arg(RULES.to_string())
        .output()
        .expect("valgrind runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "callgrind run of {bin} {RULES} failed:\n{stderr}");
    stderr
        .lines()
        .find_map(|l| l.split_once("Collected : ").and_then(|(_, n)| n.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no 'Collected :' line in callgrind's output:\n{stderr}"))
}

/// `key=value` lines of the baseline file.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// The guarded repository holds every part of the benchmark's mix, so a cost added to any of
/// them shows in the count: filter rules in all three chains, sets, kernel, capped and
/// userspace forwards, shapes.
#[test]
fn the_guarded_repository_holds_the_whole_mix() {
    use fwc_compiler::artifacts::{BackendKind, RuleKind};
    let (art, _) = fwc_compiler::compile(&fwc_bench::generate(RULES), None, None).expect("the generated repository compiles");
    let rules = &art.manifest.rules;
    for chain in ["input", "forward", "output"] {
        assert!(rules.iter().any(|r| r.kind == RuleKind::Filter && r.chain.as_deref() == Some(chain)), "no filter rule in {chain}");
    }
    let has = |kind: RuleKind, backend: BackendKind| rules.iter().any(|r| r.kind == kind && r.backends.contains(&backend));
    assert!(rules.iter().any(|r| r.kind == RuleKind::Set), "no set");
    assert!(has(RuleKind::Forward, BackendKind::Nftables), "no kernel forward");
    assert!(has(RuleKind::Forward, BackendKind::Qos), "no capped forward");
    assert!(has(RuleKind::Forward, BackendKind::Userspace), "no userspace forward");
    assert!(has(RuleKind::Shape, BackendKind::Qos), "no shape");
}

#[test]
fn compile_instructions_stay_within_ten_percent_of_the_baseline() {
    if !fwc_testkit::tool("compile_instructions_stay_within_ten_percent_of_the_baseline", "valgrind", "valgrind") {
        return;
    }
    let baseline_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/instructions.baseline");
    let baseline = std::fs::read_to_string(&baseline_path).unwrap_or_default();
    let update = std::env::var_os("FWC_INSTRUCTIONS_UPDATE").is_some();
    if !update && field(&baseline, "profile").is_some_and(|p| p != profile()) {
        eprintln!("SKIP compile instructions: the baseline is of the {} profile, this build is {}", field(&baseline, "profile").unwrap_or("?"), profile());
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let got = instructions(env!("CARGO_BIN_EXE_fwc-bench-compile"), dir.path());
    if update {
        let text = format!(
            "# Instructions of `fwc-bench-compile {RULES}` under callgrind (bench/tests/instructions.rs).\n\
             # Refresh: FWC_INSTRUCTIONS_UPDATE=1 cargo test -p fwc-bench --test instructions\n\
             rules={RULES}\nprofile={}\ninstructions={got}\n",
            profile()
        );
        std::fs::write(&baseline_path, text).expect("writing the baseline");
        eprintln!("instructions: baseline written: {got}");
        return;
    }
    let want: u64 = field(&baseline, "instructions")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{} has no instructions= line (write it with FWC_INSTRUCTIONS_UPDATE=1)", baseline_path.display()));
    assert_eq!(field(&baseline, "rules"), Some(RULES.to_string().as_str()), "the baseline is of another repository size");
    let ratio = got as f64 / want as f64;
    eprintln!("instructions: {got} now, {want} in the baseline ({ratio:.3}x)");
    assert!(
        ratio <= 1.0 + TOLERANCE,
        "compiling {RULES} generated rules now executes {got} instructions, {ratio:.3}x the baseline's {want} \
         (more than {:.0} % over): find the change that costs it (callgrind_annotate), or, if the cost is deliberate, \
         refresh the baseline (see bench/tests/instructions.rs)",
        TOLERANCE * 100.0
    );
    if ratio < 1.0 - TOLERANCE {
        eprintln!("instructions: {:.0} % under the baseline: refresh it so the guard keeps the gain", (1.0 - ratio) * 100.0);
    }
}
