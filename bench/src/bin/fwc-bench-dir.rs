//! Compile a repository directory (the only host) and write its artifact files, as
//! `fwc compile DIR --out OUT` does (`fwc_bench::compile_like_the_cli`), in one process: `fwc-bench-dir DIR OUT` -> JSON line with
//! wall time (read + compile + write) and peak RSS. Used by `bench/sets/run.sh` to compare
//! compiler builds without building the whole runtime.

fn main() {
    let mut args = std::env::args().skip(1);
    let (dir, out) = (args.next().expect("DIR"), args.next().expect("OUT"));
    let t = std::time::Instant::now();
    let tree = fwc_compiler::read::source::SourceTree::from_dir(std::path::Path::new(&dir)).expect("readable repository");
    std::fs::create_dir_all(&out).expect("out dir");
    let path = |name: &str| std::path::Path::new(&out).join(name);
    fwc_bench::compile_like_the_cli(&tree, |name| Box::new(std::io::BufWriter::new(std::fs::File::create(path(name)).expect("create"))));
    let bytes: u64 = fwc_compiler::artifacts::FILE_NAMES.iter().map(|n| std::fs::metadata(path(n)).expect("written file").len()).sum();
    let elapsed = t.elapsed();
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    println!("{{\"seconds\":{:.4},\"peak_rss_kib\":{},\"artifact_bytes\":{bytes}}}", elapsed.as_secs_f64(), ru.ru_maxrss);
}
