//! Compile a repository directory (the only host) and write its artifact files, as
//! `fwc compile DIR --out OUT` does, in one process: `fwc-bench-dir DIR OUT` -> JSON line with
//! wall time (read + compile + write) and peak RSS. Used by `bench/sets/run.sh` to compare
//! compiler builds without building the whole runtime.

fn main() {
    let mut args = std::env::args().skip(1);
    let (dir, out) = (args.next().expect("DIR"), args.next().expect("OUT"));
    let t = std::time::Instant::now();
    let tree = fwc_compiler::read::source::SourceTree::from_dir(std::path::Path::new(&dir)).expect("readable repository");
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap_or_else(|e| panic!("{e:?}"));
    std::fs::create_dir_all(&out).expect("out dir");
    let mut bytes = 0;
    for name in fwc_compiler::artifacts::FILE_NAMES {
        let mut f = std::fs::File::create(std::path::Path::new(&out).join(name)).expect("create");
        art.write_file(name, &mut f).expect("write");
        bytes += f.metadata().expect("written file").len() as usize;
    }
    let elapsed = t.elapsed();
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    println!("{{\"seconds\":{:.4},\"peak_rss_kib\":{},\"artifact_bytes\":{bytes}}}", elapsed.as_secs_f64(), ru.ru_maxrss);
}
