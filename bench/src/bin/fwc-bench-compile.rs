//! Compile a generated repository of N rules once and report wall time and peak memory
//! (ru_maxrss of this process). One size per process, so peaks do not mix:
//! `fwc-bench-compile 100000` -> JSON line. `bench/compile/run.sh` runs 5 repeats per size.

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let before = maxrss_kib();
    let tree = fwc_bench::generate(n);
    let gen_rss = maxrss_kib();
    let t = std::time::Instant::now();
    let (art, _) = fwc_compiler::compile(&tree, None, None).expect("generated repos compile");
    let files = art.files();
    let elapsed = t.elapsed();
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    let peak = maxrss_kib();
    let rules = fwc_bench::rule_count(n);
    println!(
        "{{\"rules\":{rules},\"compile_emit_seconds\":{:.4},\"peak_rss_kib\":{peak},\"rss_before_compile_kib\":{gen_rss},\"baseline_kib\":{before},\"bytes_per_rule_over_input\":{},\"artifact_bytes\":{bytes}}}",
        elapsed.as_secs_f64(),
        (peak.saturating_sub(gen_rss)) * 1024 / rules as u64
    );
}

fn maxrss_kib() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64
}
