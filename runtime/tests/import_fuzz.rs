//! Mutation fuzzing of `fwc import`'s readers (as tests/fuzz.rs does for the compiler), on
//! stable Rust, without root: nftables listings (`nft -j list ruleset` of the import fixtures,
//! tests/import/fuzz-seeds/, what every source becomes before translation) mutated in their
//! structure and values, and firewalld configurations (tests/import/firewalld*, cases/)
//! mutated line by line and in their attribute values, and the iptables/nft files of cases/
//! mutated the same way for the readers of an original's text (xt ICMP matches, interfaces
//! named by index, ufw's `limit`). Each case runs the pure pipeline —
//! translate (or read firewalld's XML), normalize, render, sample the proof, evaluate the
//! original — then `fwc check` on what was written. A panic fails the run and prints the
//! input; an error is a fine outcome, and so is a result `fwc check` refuses (reported).
//!
//! - `FWC_IMPORT_FUZZ_SECS` — total time (default 20; CI keeps the default).
//! - `FWC_FUZZ_SEED` — the seed (default: today's date, so every day explores anew).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fwc_runtime::import;
use fwc_runtime::import::proof::Rng;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import")
}

/// Values real configurations and fuzzing found trouble with.
const STRINGS: &[&str] = &["", "22 ", "0", "99999", "65536", "1-0", "10.0.0.9-10.0.0.1", "br-lan", "br-0123456789ab", "docker0", "lo", "@nosuch", "chainé", "*", "eth*", "::/0", "0.0.0.0/0", "fe80::/10", "ipv7", "{", "\"", "a,b", "établi", "drop", "accept", "jump", "type", "nd-router-advert", "255.255.255.255/33"];

fn mutate_json(v: &mut Value, rng: &mut Rng) {
    // Collect the paths of every node, pick one, change it.
    fn paths(v: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => m.iter().for_each(|(k, x)| paths(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out)),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| paths(x, format!("{at}/{i}"), out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    paths(v, String::new(), &mut all);
    let at = all[rng.below(all.len())].clone();
    let donor = v.pointer(&all[rng.below(all.len())]).cloned().unwrap_or(Value::Null);
    let Some(node) = v.pointer_mut(&at) else { return };
    match rng.below(8) {
        0 => *node = Value::from(STRINGS[rng.below(STRINGS.len())]),
        1 => *node = Value::from([0u64, 1, 65535, 65536, u64::MAX, 4_294_967_296][rng.below(6)]),
        2 => *node = Value::from(-1),
        3 => *node = Value::Null,
        4 => *node = donor,
        5 => {
            if let Value::Array(a) = node {
                if !a.is_empty() {
                    let i = rng.below(a.len());
                    let x = a[i].clone();
                    a.insert(i, x);
                }
            }
        }
        6 => {
            if let Value::Array(a) = node {
                if !a.is_empty() {
                    a.remove(rng.below(a.len()));
                }
            } else if let Value::Object(m) = node {
                if let Some(k) = m.keys().nth(rng.below(m.len())).cloned() {
                    m.remove(&k);
                }
            }
        }
        _ => *node = serde_json::json!({ "set": [donor, Value::from(STRINGS[rng.below(STRINGS.len())])] }),
    }
}

fn mutate_xml(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return text.to_string();
    }
    let i = rng.below(lines.len());
    match rng.below(5) {
        0 => {
            let l = lines[i].clone();
            for _ in 0..rng.below(50) + 1 {
                lines.insert(i, l.clone());
            }
        }
        1 => {
            lines.remove(i);
        }
        2 => {
            // An attribute value replaced.
            let l = &lines[i];
            if let Some(s) = l.find("=\"") {
                if let Some(e) = l[s + 2..].find('"') {
                    lines[i] = format!("{}=\"{}\"{}", &l[..s], STRINGS[rng.below(STRINGS.len())].replace('"', "&quot;"), &l[s + 2 + e + 1..]);
                }
            }
        }
        3 => {
            let j = rng.below(lines.len());
            let l = lines[j].clone();
            lines.insert(i, l);
        }
        _ => {
            let mut b = lines[i].clone().into_bytes();
            if !b.is_empty() {
                let k = rng.below(b.len());
                b[k] = b"<>\"&/ =-:,0"[rng.below(11)];
            }
            lines[i] = String::from_utf8_lossy(&b).into_owned();
        }
    }
    lines.join("\n") + "\n"
}

/// The rendered files pass `fwc check`, or do not (counted): only a panic is a failure.
fn check_written(files: &[(String, String)]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    import::write(dir.path(), files).unwrap();
    fwc_compiler::read::source::SourceTree::from_dir(dir.path()).and_then(|t| fwc_compiler::check_fleet(&t).map(|_| t)).and_then(|t| fwc_compiler::policytest::check(&t)).is_ok()
}

fn listing_case(seed: &Value, rng: &mut Rng, last: &Mutex<String>) -> bool {
    let mut v = seed.clone();
    for _ in 0..rng.below(4) + 1 {
        mutate_json(&mut v, rng);
    }
    *last.lock().unwrap() = v.to_string();
    let partial = rng.next().is_multiple_of(2);
    match import::import(v, &Default::default(), "fuzz", partial, &mut |_| {}) {
        Ok(imp) => check_written(&imp.files),
        Err(_) => true,
    }
}

fn firewalld_case(seed: &Path, rng: &mut Rng, last: &Mutex<String>) -> bool {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("etc");
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![seed.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() { stack.push(p) } else { files.push(p) }
        }
    }
    files.sort();
    let xml: Vec<&PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|x| x == "xml")).collect();
    let victim = xml.get(rng.below(xml.len())).map(|p| (*p).clone());
    for p in &files {
        let rel = p.strip_prefix(seed).unwrap();
        let to = dir.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let mut text = std::fs::read_to_string(p).unwrap_or_default();
        if Some(p) == victim.as_ref() {
            for _ in 0..rng.below(3) + 1 {
                text = mutate_xml(&text, rng);
            }
            *last.lock().unwrap() = format!("{} ({}):\n{text}", rel.display(), seed.display());
        }
        std::fs::write(&to, text).unwrap();
    }
    let lib = fixtures().join("firewalld-lib");
    match import::firewalld(&dir, &lib, false, true, rng.next().is_multiple_of(2), &mut |_| {}) {
        Ok((imp, _)) => check_written(&imp.files),
        Err(_) => true,
    }
}

/// The readers of an original's text before nft or iptables loads it: the interfaces an nft
/// file names by index, iptables' ICMP matches, ufw's `limit` lines.
fn text_case(seed: &Path, rng: &mut Rng, last: &Mutex<String>) -> bool {
    let text = mutate_xml(&std::fs::read_to_string(seed).unwrap(), rng);
    *last.lock().unwrap() = text.clone();
    let _ = import::ifnames::by_index(&text);
    for line in text.lines() {
        let _ = import::xt_icmp::native(line);
    }
    let _ = import::source::ufw_limits(&text, "user.rules", &mut Vec::new());
    true
}

#[test]
fn import_readers_survive_mutated_configurations() {
    let secs: u64 = std::env::var("FWC_IMPORT_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("FWC_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 86_400);
    let listings: Vec<Value> = {
        let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("fuzz-seeds")).unwrap().flatten().map(|e| e.path()).collect();
        v.sort();
        v.iter().map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()).collect()
    };
    let mut fw_seeds: Vec<PathBuf> = ["firewalld", "firewalld-rich", "firewalld-zones", "cases/fwd-rpfilter-strict", "cases/fuzz/fwd-port-space"].iter().map(|d| fixtures().join(d)).filter(|d| d.is_dir()).collect();
    fw_seeds.sort();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut cases, mut refused_by_check) = (0, 0);
    let quiet: Box<dyn Fn(&std::panic::PanicHookInfo) + Sync + Send> = Box::new(|_| {});
    let old = std::panic::take_hook();
    std::panic::set_hook(quiet);
    let mut text_seeds: Vec<PathBuf> = std::fs::read_dir(fixtures().join("cases")).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "v4" || x == "v6" || x == "nft")).collect();
    text_seeds.sort();
    while Instant::now() < deadline {
        let kind = rng.next() % 3;
        let case_seed = rng.next();
        let last = Mutex::new(String::new());
        let run = std::panic::catch_unwind(|| {
            let mut r = Rng(case_seed | 1);
            match kind {
                0 => listing_case(&listings[r.below(listings.len())], &mut r, &last),
                1 => firewalld_case(&fw_seeds[r.below(fw_seeds.len())], &mut r, &last),
                _ => text_case(&text_seeds[r.below(text_seeds.len())], &mut r, &last),
            }
        });
        cases += 1;
        match run {
            Ok(ok) => refused_by_check += usize::from(!ok),
            Err(e) => {
                std::panic::set_hook(old);
                let input = last.lock().map(|s| s.clone()).unwrap_or_default();
                let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                panic!("fwc import panicked (FWC_FUZZ_SEED={seed}, case seed {case_seed}, {}): {msg}\ninput:\n{input}", ["a listing", "a firewalld configuration", "an iptables/nft file"][kind as usize]);
            }
        }
    }
    std::panic::set_hook(old);
    eprintln!("import fuzz: {cases} cases (seed {seed}), {refused_by_check} imports that `fwc check` refused");
    assert!(cases > 0);
}
