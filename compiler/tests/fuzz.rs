//! Mutation fuzzing of read → fmt → parse → check → compile, on stable Rust. Seeds are the
//! repositories of golden/ and examples/ and the regression corpus (tests/fuzz-corpus/); each
//! case mutates one file of a seed (byte flips, inserts, deletions, splices, KDL/Jinja tokens,
//! deep nesting, long lines, invalid UTF-8) and runs the whole pipeline, diagnostics rendering
//! included. A panic, an abort (stack overflow) or a case over [`CASE_LIMIT`] fails the run and
//! leaves the input under target/fuzz-crashes/ (add it to tests/fuzz-corpus/).
//!
//! The cases run in a child process (this test binary again, test `fuzz_child`), which writes
//! each input to disk before running it: an abort cannot be caught in-process, but its input
//! survives. Budget and seeds:
//!
//! - `FWC_FUZZ_SECS` — total time (default 60); half on the fixed seed, half on a rotating one.
//! - `FWC_FUZZ_SEED` — the rotating seed (default: today's date, so every day explores anew).
//!
//! Run it longer locally: `FWC_FUZZ_SECS=1800 cargo test --release -p fwc-compiler --test fuzz`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fwc_compiler::read::source::SourceTree;

mod kdl_compare;

/// The fixed seed: the same cases on every run.
const FIXED_SEED: u64 = 0x5eed_f00d_0011;
/// Longest a single case may take (debug build, a loaded CI machine).
const CASE_LIMIT: Duration = Duration::from_secs(30);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus")
}

/// A repository as files: relative path -> bytes.
type Repo = Vec<(String, Vec<u8>)>;

fn read_repo(dir: &Path) -> Repo {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
            if rel.starts_with("snapshots") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((rel, b));
            }
        }
    }
    out.sort();
    out
}

/// Every seed repository: golden/*, examples/*, and the corpus (a `*.kdl` file is the
/// `fwc.kdl` of a repository of its own; a directory is a repository).
fn seeds() -> Vec<(String, Repo)> {
    let mut out = Vec::new();
    for top in ["golden", "examples"] {
        let mut dirs: Vec<_> = std::fs::read_dir(workspace().join(top)).unwrap().flatten().map(|e| e.path()).collect();
        dirs.sort();
        for d in dirs.into_iter().filter(|d| d.join("fwc.kdl").is_file()) {
            out.push((d.strip_prefix(workspace()).unwrap().display().to_string(), read_repo(&d)));
        }
    }
    out.extend(corpus());
    out
}

fn corpus() -> Vec<(String, Repo)> {
    let mut entries: Vec<_> = std::fs::read_dir(corpus_dir()).unwrap().flatten().map(|e| e.path()).collect();
    entries.sort();
    entries
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                Some((name, read_repo(&p)))
            } else if name.ends_with(".kdl") {
                Some((name, vec![("fwc.kdl".to_string(), std::fs::read(&p).unwrap())]))
            } else {
                None // README
            }
        })
        .collect()
}

fn write_repo(dir: &Path, repo: &Repo) {
    let _ = std::fs::remove_dir_all(dir);
    for (rel, bytes) in repo {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// The whole pipeline on the repository in `dir`. Errors are fine; only panics are bugs (and
/// aborts and hangs, which the parent process catches).
fn run_pipeline(dir: &Path) {
    format_every_kdl_file(dir);
    let tree = match SourceTree::from_dir(dir) {
        Ok(t) => t,
        Err(d) => return exercise(&d),
    };
    match fwc_compiler::check_all(&tree) {
        Ok(w) => exercise(&w),
        Err(d) => return exercise(&d),
    }
    if let Err(d) = fwc_compiler::policytest::check(&tree) {
        exercise(&d);
    }
    let mut map = Default::default();
    let Ok(rs) = fwc_compiler::read::syntax::parse_plain(&tree, &mut map) else { return };
    for host in fwc_compiler::host_names(&rs) {
        match fwc_compiler::compile(&tree, Some(&host), Some("0123456789abcdef")) {
            Ok((art, w)) => {
                exercise(&w);
                let _ = art.files();
            }
            Err(d) => exercise(&d),
        }
    }
}

/// `fwc fmt` on every `.kdl` file of the case: errors are fine, but a result that changes the
/// file's meaning (`Unstable`) or is not idempotent is a bug, like a panic.
fn format_every_kdl_file(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for p in entries.flatten().map(|e| e.path()) {
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let Some(text) = p.extension().filter(|e| *e == "kdl").and_then(|_| std::fs::read_to_string(&p).ok()) else { continue };
            same_reading(&text, &p);
            match fwc_compiler::format::format_kdl(&text) {
                Ok(out) => assert_eq!(fwc_compiler::format::format_kdl(&out).ok().as_deref(), Some(out.as_str()), "fmt is not idempotent on {}", p.display()),
                Err(e @ fwc_compiler::format::FormatError::Unstable { .. }) => panic!("fmt changed the meaning of {}: {e}", p.display()),
                Err(_) => {}
            }
        }
    }
}

/// fwc's KDL reader and the `kdl` crate read a text they both accept to the same document with
/// the same spans (a difference is a bug, like a panic; deciding differently is allowed where
/// the two follow different revisions of KDL v2, see tests/kdl_differential.rs).
fn same_reading(text: &str, path: &Path) {
    if fwc_compiler::read::limits::check_kdl_text(text).is_err() {
        return;
    }
    let both = fwc_compiler::read::limits::on_big_stack(|| (kdl::KdlDocument::parse_v2(text), fwc_compiler::read::kdl_reader::read(text)));
    if let (Ok(k), Ok(r)) = both {
        let mut diffs = Vec::new();
        kdl_compare::compare(&k, &r, "", &mut diffs);
        assert!(diffs.is_empty(), "fwc's KDL reader and the kdl crate read {} differently:\n{}", path.display(), diffs.join("\n"));
    }
}

/// Render diagnostics the ways the CLI does (people and machines).
fn exercise(d: &fwc_compiler::diag::Diagnostics) {
    let _ = d.render(false);
    let _ = d.to_string();
    let _ = serde_json::to_string(d).unwrap();
}

const TOKENS: &[&str] = &[
    "{", "}", "{\n", "\n}\n", "/*", "*/", "//", "/-", "\"", "#\"", "\"#", "\"\"\"\n", "#true", "#false", "#null", "=", ";",
    "\\", "\n", " ", "\t", "\r\n", "\u{feff}", "é", "\u{1F600}", "port=", "proto=", "from=", "to=", "listen=", "rate=",
    "backend=", "file=", "policy=", "0", "-1", "65535", "65536", "4294967296", "99999999999999999999", "1e999", "0x",
    "1..2", "80-79", "::", "::ffff:1.2.3.4", "0.0.0.0/0", "255.255.255.255/33", "192.0.2.0/24", "2001:db8::/129",
    "10.0.0.1-10.0.0.0", "@", "@x", "mbit", "gbit/s", "%", "{%", "%}", "{{", "}}", "{% for i in range(10) %}",
    "{% endfor %}", "{{ host.name }}", "{{ vars.x }}", "host \"h\" {\n", "set \"s\" ", "input {\n", "forward {\n",
    "output {\n", "shape \"s\" ", "allow \"a\" ", "deny \"d\" ", "reject \"r\" ", "forward \"f\" ", "fwc 1\n", "fwc 2\n",
    "lists/x", "../", "/etc/passwd", "tests", "expect",
];

/// Mutate `data` in place with 1–4 edits.
fn mutate(rng: &mut fastrand::Rng, data: &mut Vec<u8>, donors: &[&[u8]]) {
    for _ in 0..rng.usize(1..=4) {
        let at = rng.usize(..=data.len());
        match rng.u8(0..11) {
            0 if !data.is_empty() => {
                let i = rng.usize(..data.len());
                data[i] ^= 1 << rng.u8(0..8);
            }
            1 => data.insert(at, rng.u8(..)),
            2 if !data.is_empty() => {
                let len = rng.usize(1..=data.len().clamp(1, 64));
                let end = (at + len).min(data.len());
                data.drain(at.min(end)..end);
            }
            3 if !data.is_empty() => {
                // duplicate a range of itself
                let s = rng.usize(..data.len());
                let e = (s + rng.usize(1..=256)).min(data.len());
                let chunk = data[s..e].to_vec();
                data.splice(at..at, chunk);
            }
            4 if !donors.is_empty() => {
                // splice a chunk of another seed file
                let d = donors[rng.usize(..donors.len())];
                if !d.is_empty() {
                    let s = rng.usize(..d.len());
                    let e = (s + rng.usize(1..=200)).min(d.len());
                    data.splice(at..at, d[s..e].iter().copied());
                }
            }
            5 => {
                // deep nesting of blocks or comments
                let deep = if rng.bool() { 100 } else { 3000 };
                let n = rng.usize(1..=deep);
                let (open, close): (&[u8], &[u8]) = if rng.bool() { (b"a {", b"}") } else { (b"/*", b"*/") };
                let mut ins = open.repeat(n);
                if rng.bool() {
                    ins.extend(close.repeat(n));
                }
                data.splice(at..at, ins);
            }
            6 => {
                // a long line (wide columns)
                let wide = if rng.bool() { 500 } else { 70_000 };
                let n = rng.usize(1..=wide);
                data.splice(at..at, std::iter::repeat_n(b' ', n));
            }
            7 => {
                let bad: &[&[u8]] = &[b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x00", b"\xf4\x90\x80\x80"];
                data.splice(at..at, bad[rng.usize(..bad.len())].iter().copied());
            }
            8 if !data.is_empty() => {
                // truncate
                data.truncate(at);
            }
            _ => {
                let t = TOKENS[rng.usize(..TOKENS.len())].as_bytes();
                let times = if rng.u8(0..8) == 0 { rng.usize(1..=200) } else { 1 };
                data.splice(at..at, t.repeat(times));
            }
        }
    }
}

/// The rotating seed: `FWC_FUZZ_SEED`, else today's date (days since the epoch).
fn rotating_seed() -> u64 {
    std::env::var("FWC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 86_400)
}

fn budget() -> Duration {
    Duration::from_secs(std::env::var("FWC_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60))
}

fn crash_dir() -> PathBuf {
    workspace().join("target/fuzz-crashes")
}

/// The fuzzer proper, run by the parent in a child process (`FWC_FUZZ_CHILD=1`).
#[test]
fn fuzz_child() {
    if std::env::var_os("FWC_FUZZ_CHILD").is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let case_dir = work.path().join("repo");
    // Where the parent looks for the input of a crash (one per parent: runs may overlap).
    let current = PathBuf::from(std::env::var_os("FWC_FUZZ_CURRENT").unwrap());
    let current_txt = current.with_extension("txt");
    std::fs::create_dir_all(&current).unwrap();
    let seeds = seeds();
    let donors: Vec<Vec<u8>> = seeds.iter().flat_map(|(_, r)| r.iter().map(|(_, b)| b.clone())).collect();
    let donors: Vec<&[u8]> = donors.iter().map(Vec::as_slice).collect();
    // Watchdog: a case past CASE_LIMIT aborts the child; the parent reports the saved input.
    let started = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    {
        let started = started.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            let s = started.load(Ordering::SeqCst);
            if s != 0 && t0.elapsed().as_millis() as u64 > s + CASE_LIMIT.as_millis() as u64 {
                eprintln!("fuzz: a case ran longer than {CASE_LIMIT:?}");
                std::process::abort();
            }
        });
    }
    let half = budget() / 2;
    let mut total = 0;
    for (label, seed) in [("fixed", FIXED_SEED), ("rotating", rotating_seed())] {
        let mut rng = fastrand::Rng::with_seed(seed);
        let phase = Instant::now();
        let mut n = 0u64;
        while phase.elapsed() < half {
            let (name, repo) = &seeds[rng.usize(..seeds.len())];
            let mut repo = repo.clone();
            let which = rng.usize(..repo.len());
            mutate(&mut rng, &mut repo[which].1, &donors);
            write_repo(&case_dir, &repo);
            write_repo(&current, &repo);
            std::fs::write(&current_txt, format!("{label} seed {seed} case {n} from {name}, mutated {}\n", repo[which].0)).unwrap();
            started.store(t0.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
            run_pipeline(&case_dir);
            started.store(0, Ordering::SeqCst);
            n += 1;
        }
        eprintln!("fuzz: {n} cases on the {label} seed {seed}");
        total += n;
    }
    eprintln!("fuzz: {total} cases in {:?}, no crash", t0.elapsed());
    let _ = std::fs::remove_dir_all(&current);
    let _ = std::fs::remove_file(&current_txt);
}

/// Run the fuzzer in a child process for [`budget`]; fail, naming the saved input, on a panic,
/// an abort or a hang.
#[test]
fn fuzz_parse_check_compile() {
    if std::env::var_os("FWC_FUZZ_CHILD").is_some() {
        return;
    }
    eprintln!("fuzz: {:?} total, fixed seed {FIXED_SEED}, rotating seed {} (FWC_FUZZ_SEED to replay)", budget(), rotating_seed());
    let current = crash_dir().join(format!("current-{}", std::process::id()));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["fuzz_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("FWC_FUZZ_CHILD", "1")
        .env("FWC_FUZZ_CURRENT", &current)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let found = crash_dir().join(format!("crash-{}", SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()));
        let _ = std::fs::rename(&current, &found);
        let what = std::fs::read_to_string(current.with_extension("txt")).unwrap_or_default();
        let tail: String = err.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        panic!(
            "fuzz: the pipeline crashed ({:?}) on {what}input saved in {} — copy it to compiler/tests/fuzz-corpus/ as a regression case\n{tail}",
            out.status,
            found.display()
        );
    }
    eprint!("{}", err.lines().filter(|l| l.starts_with("fuzz:")).map(|l| format!("{l}\n")).collect::<String>());
}

/// Every corpus case (crash classes found so far and every input the fuzzer ever found) runs through
/// the pipeline without a panic, in-process like a normal test.
#[test]
fn fuzz_corpus_replays() {
    let corpus = corpus();
    assert!(corpus.len() >= 5, "the corpus is missing");
    let work = tempfile::tempdir().unwrap();
    for (name, repo) in corpus {
        let dir = work.path().join(&name);
        write_repo(&dir, &repo);
        let t0 = Instant::now();
        let r = std::panic::catch_unwind(|| run_pipeline(&dir));
        assert!(r.is_ok(), "corpus case {name} panicked");
        assert!(t0.elapsed() < CASE_LIMIT, "corpus case {name} took {:?}", t0.elapsed());
    }
}
