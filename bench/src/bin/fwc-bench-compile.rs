//! Compile a generated repository of N rules once, stream its artifact files out as
//! `fwc compile --out` does (nftables.json written as it is emitted, then the other three),
//! and report wall time and peak memory (ru_maxrss of this process).
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
    // As `fwc compile --out` does: nftables.json written as it is emitted, then the other three.
    let mut counted = Vec::new();
    fwc_bench::compile_like_the_cli(&tree, |name| match &out {
        Some(dir) => {
            std::fs::create_dir_all(dir).expect("out dir");
            Box::new(std::io::BufWriter::new(std::fs::File::create(dir.join(name)).expect("artifact file")))
        }
        None => {
            let sink = Counting::default();
            counted.push(sink.0.clone());
            Box::new(sink)
        }
    });
    let bytes: usize = match &out {
        Some(dir) => fwc_compiler::artifacts::FILE_NAMES.iter().map(|n| std::fs::metadata(dir.join(n)).expect("written file").len() as usize).sum(),
        None => counted.iter().map(|c| c.get()).sum(),
    };
    let elapsed = t.elapsed();
    let peak = maxrss_kib();
    let rules = fwc_bench::rule_count(n);
    println!(
        "{{\"rules\":{rules},\"compile_emit_seconds\":{:.4},\"peak_rss_kib\":{peak},\"rss_before_compile_kib\":{gen_rss},\"baseline_kib\":{before},\"bytes_per_rule_over_input\":{},\"artifact_bytes\":{bytes}}}",
        elapsed.as_secs_f64(),
        (peak.saturating_sub(gen_rss)) * 1024 / rules as u64
    );
}

/// A writer that counts the bytes it is given (the count shared, to be read after the writer
/// was handed on).
#[derive(Default)]
struct Counting(std::rc::Rc<std::cell::Cell<usize>>);

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.set(self.0.get() + buf.len());
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
