//! Plan equals apply, as a property: seeded random sequences of repository edits across the
//! language (filters with rate, per-source and schedule limits, sets and set files, dynamic
//! sets, kernel and userspace forwards with per-source limits and quotas, shapes, chains'
//! policies), each planned and applied to a real kernel in a `fwc-t-*` namespace. After each
//! apply the kernel's objects are held to the plan ([`plan_common::apply_as_planned`]: the
//! same mode, no fallback, the rules it keeps keep their handles and counters) and the
//! per-source tracking sets it does not replace keep their sources.
//!
//! Reproducible: `FWC_PROPTEST_SEED=N` runs that one sequence (a failure prints its seed and
//! the repository of every step). Time-budgeted: `FWC_PROPTEST_SECS` (default 60) bounds how
//! many new random sequences run after the fixed seeds; the budget decides how much is tried,
//! never whether a case passes. Every sequence that ever failed stays in [`REGRESSION_SEEDS`].

mod plan_common;

use std::time::{Duration, Instant};

use fwc_testkit::{privileged, Netns, Rng};
use plan_common::{apply_as_planned, set_elements, Repo};

/// Sequences that found something, run every time (add a seed here when one fails):
/// 1 and 2 fail (the apply is refused: the kernel rejects the diff) with a forward's map entry
/// read back as key and value and removed chains deleted before the chains jumping to them;
/// 4, 6 and 12 found this test's own mistakes (an nft-unchanged step whose apply changes
/// only QoS commits an empty batch).
const REGRESSION_SEEDS: &[u64] = &[1, 2, 4, 6, 12];

/// Steps per sequence.
const STEPS: usize = 8;

/// A repository drawn from the language's constructs; [`Repo::render`] writes it.
#[derive(Debug, Clone, Default)]
struct Model {
    policy: &'static str,
    /// (name, port, extra properties)
    filters: Vec<(String, u16, String)>,
    /// office set: addresses (a change of one prefix into a range changes its flags).
    office: Vec<String>,
    /// lists/blocked.netset: addresses.
    setfile: Vec<String>,
    /// dynamic set (timeout, size), or none.
    banned: Option<(&'static str, u32)>,
    /// (name, listen port, proto, extra properties)
    forwards: Vec<(String, u16, &'static str, String)>,
    /// shape rate, or none.
    shape: Option<&'static str>,
}

impl Model {
    fn new() -> Model {
        Model { policy: "drop", filters: vec![("ssh".into(), 22, String::new())], ..Default::default() }
    }

    fn render(&self) -> Vec<(String, String)> {
        let mut k = String::from("fwc 1\n");
        if !self.office.is_empty() {
            k += &format!("set \"office\" {}\n", self.office.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(" "));
        }
        if !self.setfile.is_empty() {
            k += "set \"blocked\" file=\"lists/blocked.netset\"\n";
        }
        if let Some((t, size)) = self.banned {
            k += &format!("set \"banned\" dynamic=#true timeout=\"{t}\" size={size}\n");
        }
        k += &format!("input policy={} {{\n", self.policy);
        if !self.setfile.is_empty() {
            k += "    deny \"blocked\" from=\"@blocked\"\n";
        }
        if self.banned.is_some() {
            k += "    deny \"banned\" from=\"@banned\"\n";
        }
        for (name, port, extra) in &self.filters {
            k += &format!("    allow \"{name}\" proto=tcp port={port}{extra}\n");
        }
        if !self.office.is_empty() {
            k += "    allow \"office\" proto=tcp port=443 from=\"@office\"\n";
        }
        k += "}\n";
        for (name, port, proto, extra) in &self.forwards {
            k += &format!("forward \"{name}\" proto={proto} listen=\":{port}\" to=\"198.19.0.2:{port}\"{extra}\n");
        }
        if let Some(rate) = self.shape {
            k += &format!("shape \"guests\" from=\"10.2.0.0/16\" rate=\"{rate}\" dev=eth1\n");
        }
        let mut files = vec![("fwc.kdl".to_string(), k)];
        if !self.setfile.is_empty() {
            files.push(("lists/blocked.netset".into(), self.setfile.join("\n") + "\n"));
        }
        files
    }

    /// One random edit.
    fn edit(&mut self, rng: &mut Rng) {
        let filter_extras = ["", " rate=\"10/second\"", " rate-per-source=\"5/minute burst 5\"", " max-conns-per-source=3",
            " rate-per-source=\"5/minute\" per-source-size=4096", " during=\"Mon-Fri 08:00-18:00\" tz=\"Europe/Berlin\"", " during=\"Sat,Sun 10:00-22:00\""];
        let forward_extras = ["", " conn-rate-per-source=\"20/second\"", " max-conns-per-source=50", " quota=\"1GB/day\"",
            " quota=\"2GB/month\" over-quota=\"1mbit\"", " backend=\"userspace\"", " conn-rate-per-source=\"10/second burst 20\" max-conns-per-source=4"];
        match rng.below(12) {
            0 => {
                let n = self.filters.len() as u16;
                self.filters.push((format!("f{}", rng.below(1000)), 1000 + n * 7 + rng.below(5) as u16, rng.pick(&filter_extras).to_string()));
            }
            1 if self.filters.len() > 1 => {
                let i = rng.below(self.filters.len());
                self.filters.remove(i);
            }
            2 if !self.filters.is_empty() => {
                let i = rng.below(self.filters.len());
                self.filters[i].2 = rng.pick(&filter_extras).to_string();
            }
            3 => {
                let a = rng.pick(&["203.0.113.5", "203.0.113.0/24", "2001:db8:1::/48", "198.51.100.7", "198.51.100.0/25"]).to_string();
                if let Some(i) = self.office.iter().position(|x| *x == a) {
                    self.office.remove(i);
                } else {
                    self.office.push(a);
                }
            }
            4 => {
                let a = format!("192.0.2.{}", rng.below(40));
                if let Some(i) = self.setfile.iter().position(|x| *x == a) {
                    self.setfile.remove(i);
                } else {
                    self.setfile.push(a);
                }
            }
            5 => self.banned = [None, Some(("1h", 65536)), Some(("2h", 65536)), Some(("1h", 1024))][rng.below(4)],
            6 if self.forwards.len() < 4 => {
                let port = 8000 + rng.below(50) as u16;
                if !self.forwards.iter().any(|f| f.1 == port) {
                    self.forwards.push((format!("w{port}"), port, *rng.pick(&["tcp", "udp"]), rng.pick(&forward_extras).to_string()));
                }
            }
            7 if !self.forwards.is_empty() => {
                let i = rng.below(self.forwards.len());
                self.forwards.remove(i);
            }
            8 if !self.forwards.is_empty() => {
                let i = rng.below(self.forwards.len());
                self.forwards[i].2 = if self.forwards[i].2 == "tcp" { "udp" } else { "tcp" };
            }
            9 if !self.forwards.is_empty() => {
                let i = rng.below(self.forwards.len());
                self.forwards[i].3 = rng.pick(&forward_extras).to_string();
            }
            10 => self.policy = if self.policy == "drop" { "accept" } else { "drop" },
            _ => self.shape = [None, Some("20mbit"), Some("50mbit")][rng.below(3)],
        }
    }
}

/// One sequence: a fresh namespace (with an `eth1` for the shape), `STEPS` edits, each
/// planned and applied and held to its plan. Err: the seed, the step and the repository.
fn sequence(seed: u64) -> Result<(), String> {
    let ns = Netns::new("pp");
    ns.exec(&["ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p"]);
    ns.exec(&["ip", "link", "set", "eth1", "up"]);
    ns.exec(&["ip", "link", "set", "eth1p", "up"]);
    let r = Repo::new(&ns.name);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut m = Model::new();
    let mut history = Vec::new();
    for step in 0..STEPS {
        m.edit(&mut rng);
        let files = m.render();
        history.push(files[0].1.clone());
        let owned: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        r.write(&owned);
        if !files.iter().any(|(n, _)| n == "lists/blocked.netset") {
            let _ = std::fs::remove_file(r.repo.join("lists/blocked.netset"));
        }
        // Sources the per-source rate sets track now (as the kernel would add them).
        let tracked: Vec<String> = set_elements(&r.live_or_empty()).into_keys().filter(|n| n.starts_with("_ps_") && n.ends_with("_r_v4")).collect();
        for set in &tracked {
            ns.exec(&["nft", "add", "element", "inet", "fwc", set, "{ 198.18.9.9 timeout 1h }"]);
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply_as_planned(&r, &files[0].1)));
        let plan = match result {
            Ok(p) => p,
            Err(e) => {
                let why = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                return Err(format!("seed {seed}, step {step}: {why}\nrepositories:\n{}", history.join("----\n")));
            }
        };
        let redeclared = plan["nftables"]["redeclared"].to_string();
        let after = set_elements(&r.live());
        for set in &tracked {
            if let Some(e) = after.get(set) {
                if !redeclared.contains(&format!("\"{set}\"")) && !e.contains(&"\"198.18.9.9\"".to_string()) {
                    return Err(format!("seed {seed}, step {step}: {set} lost its tracked source\nrepositories:\n{}", history.join("----\n")));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn plan_equals_apply_over_random_edit_sequences() {
    if !privileged("plan_equals_apply_over_random_edit_sequences") {
        return;
    }
    if let Some(seed) = std::env::var("FWC_PROPTEST_SEED").ok().and_then(|s| s.trim().parse().ok()) {
        sequence(seed).unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    for &seed in REGRESSION_SEEDS {
        sequence(seed).unwrap_or_else(|e| panic!("{e}"));
    }
    let budget = Duration::from_secs(std::env::var("FWC_PROPTEST_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60));
    let t0 = Instant::now();
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7);
    while t0.elapsed() < budget {
        eprintln!("property: seed {seed} (FWC_PROPTEST_SEED={seed} repeats it)");
        sequence(seed).unwrap_or_else(|e| panic!("{e}\n(add {seed} to REGRESSION_SEEDS once fixed)"));
        seed = seed.wrapping_add(0x9E37_79B9);
    }
}
