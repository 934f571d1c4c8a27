//! Compile a generated repository of N rules once, stream its artifact files out as
//! `fwc compile --out` does, and report wall time and peak memory (ru_maxrss of this process).
//! One size per process, so peaks do not mix: `fwc-bench-compile 100000 [OUT]` -> JSON line.
//! With OUT the files are written into that directory; without, into a sink that counts their
//! bytes (the same serialisation, no disk). `bench/compile/run.sh` runs 5 repeats per size.

use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let out = args.next().map(std::path::PathBuf::from);
    let before = maxrss_kib();
    let tree = fwc_bench::generate(n);
    let gen_rss = maxrss_kib();
    let t = std::time::Instant::now();
    let (art, _) = fwc_compiler::compile(&tree, None, None).expect("generated repos compile");
    let mut bytes = 0;
    for name in fwc_compiler::artifacts::FILE_NAMES {
        match &out {
            Some(dir) => {
                std::fs::create_dir_all(dir).expect("out dir");
                let mut f = std::fs::File::create(dir.join(name)).expect("artifact file");
                art.write_file(name, &mut f).expect("write");
                bytes += f.metadata().expect("written file").len() as usize;
            }
            None => {
                let mut sink = Counting(0);
                art.write_file(name, &mut sink).expect("write");
                bytes += sink.0;
            }
        }
    }
    let elapsed = t.elapsed();
    let peak = maxrss_kib();
    let rules = fwc_bench::rule_count(n);
    println!(
        "{{\"rules\":{rules},\"compile_emit_seconds\":{:.4},\"peak_rss_kib\":{peak},\"rss_before_compile_kib\":{gen_rss},\"baseline_kib\":{before},\"bytes_per_rule_over_input\":{},\"artifact_bytes\":{bytes}}}",
        elapsed.as_secs_f64(),
        (peak.saturating_sub(gen_rss)) * 1024 / rules as u64
    );
}

/// A writer that counts the bytes it is given.
struct Counting(usize);

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn maxrss_kib() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as u64
}
