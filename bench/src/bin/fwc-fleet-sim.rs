//! Fleet rollout simulation (bench/fleet/run.sh): N simulated agents running the
//! agent's real follow core (`rollout::follow::decide`) on real libgit2 fetches (each its own
//! bare mirror, `agent::git::Mirror`), against a local git smart-HTTP server (`git
//! http-backend` behind a counting HTTP/1.1 front), with per-host jitter; the dataplane is
//! simulated (an apply of a commit whose message has `[sim: fail]` fails on the canary wave).
//! The controller is the real decision core (`rollout::controller::decide`) and the real state
//! ref I/O (`rollout::state_ref`), fed the agents' reports directly (no Prometheus scrape delay).
//!
//! `fwc-fleet-sim HOSTS POLL_SECS` -> a report on stdout (JSON): git server requests/s, bytes/s,
//! CPU; push -> canary applied; each wave's duration; time to 100 %; canary failure -> halt
//! commit -> last agent seeing it; hosts that applied the halted commit; applies after seeing
//! the halt; memory per simulated agent.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use fwc_compiler::artifacts::rollout::{RolloutPhase, RolloutState};
use fwc_runtime::agent::git::Mirror;
use fwc_runtime::rollout::controller::{self, Command as Ctl, ControllerInput, Decision, Degraded, HostReport};
use fwc_runtime::rollout::follow::{decide, FollowDecision, FollowInput, StateView};
use fwc_runtime::rollout::state_ref::{Pushed, Remote};

#[derive(Default)]
struct GitStats {
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// CPU of the server's handler threads, ns.
    thread_cpu_ns: AtomicU64,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU of every waited-for child process (the `git http-backend`s and their `upload-pack`s), s.
fn children_cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()))
        .unwrap_or(0)
}

/// One HTTP/1.1 request to `git http-backend` (CGI); `Connection: close`.
fn handle(mut c: TcpStream, root: &Path, stats: &GitStats) -> std::io::Result<()> {
    let t0 = thread_cpu_ns();
    let mut r = BufReader::new(c.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("GET").to_string(), parts.next().unwrap_or("/").to_string());
    let mut headers = HashMap::new();
    let mut head_len = line.len();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        head_len += h.len();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut body = Vec::new();
    if let Some(n) = headers.get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut sz = String::new();
            r.read_line(&mut sz)?;
            let n = usize::from_str_radix(sz.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", headers.get("content-type").cloned().unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(p) = headers.get("git-protocol") {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output()?;
    let _ = writer.join();
    let split = out.stdout.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4)).or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (cgi_head, cgi_body) = match split {
        Some((i, n)) => (String::from_utf8_lossy(&out.stdout[..i]).to_string(), &out.stdout[i + n..]),
        None => (String::new(), &out.stdout[..]),
    };
    let mut status = "200 OK".to_string();
    let mut resp_headers = String::new();
    for h in cgi_head.lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
            Some(_) => {
                resp_headers.push_str(h.trim_end());
                resp_headers.push_str("\r\n");
            }
            None => {}
        }
    }
    let head = format!("HTTP/1.1 {status}\r\n{resp_headers}Content-Length: {}\r\nConnection: close\r\n\r\n", cgi_body.len());
    c.write_all(head.as_bytes())?;
    c.write_all(cgi_body)?;
    stats.requests.fetch_add(1, Ordering::Relaxed);
    stats.bytes_in.fetch_add((head_len + headers.get("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0)) as u64, Ordering::Relaxed);
    stats.bytes_out.fetch_add((head.len() + cgi_body.len()) as u64, Ordering::Relaxed);
    stats.thread_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(t0), Ordering::Relaxed);
    Ok(())
}

fn serve_git(root: PathBuf, stats: Arc<GitStats>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let (root, stats) = (root.clone(), stats.clone());
            std::thread::spawn(move || {
                let _ = handle(c, &root, &stats);
            });
        }
    });
    port
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=sim", "-c", "user.email=sim@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn rules(hosts: usize, marker: &str) -> String {
    let mut s = format!("fwc 1\n// {marker}\nrollout {{\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=10\n    wave \"all\"\n}}\n");
    for i in 0..hosts {
        let role = if i < 10 { "canary" } else { "web" };
        s.push_str(&format!("host \"host-{i:04}\" {{\n    labels role={role}\n}}\n"));
    }
    s.push_str("input policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n");
    s
}

/// What the fleet's policy says, per commit (computed once per commit, as each real agent
/// compiles a commit once).
#[derive(Clone)]
struct Plan {
    has_policy: bool,
    waves: HashMap<String, usize>,
    fail: bool,
}

struct Shared {
    plans: Mutex<HashMap<String, Arc<Plan>>>,
    /// host -> its report (what Prometheus would hold).
    reports: Mutex<BTreeMap<String, HostReport>>,
    events: Mutex<Vec<(f64, String, String, &'static str)>>,
    t0: Instant,
}

impl Shared {
    fn plan(&self, m: &Mirror, commit: git2::Oid) -> Arc<Plan> {
        let key = commit.to_string();
        if let Some(p) = self.plans.lock().unwrap().get(&key) {
            return p.clone();
        }
        let info = m.commit_info(commit).unwrap();
        let tree = m.source_tree(commit).unwrap();
        let fp = fwc_compiler::rollout::fleet_plan(&tree).unwrap();
        let p = Arc::new(Plan {
            has_policy: fp.policy.is_some(),
            waves: fp.hosts.iter().map(|h| (h.name.clone(), h.wave.unwrap_or(0))).collect(),
            fail: info.message.contains("[sim: fail]"),
        });
        self.plans.lock().unwrap().insert(key, p.clone());
        p
    }
    fn event(&self, host: &str, commit: &str, what: &'static str) {
        self.events.lock().unwrap().push((self.t0.elapsed().as_secs_f64(), host.to_string(), commit.to_string(), what));
    }
}

struct Agent {
    name: String,
    mirror: Mirror,
    applied: Option<String>,
    /// Halted commits this agent has seen the halt of.
    saw_halt: Vec<String>,
    last_state: Option<git2::Oid>,
}

impl Agent {
    fn poll(&mut self, sh: &Shared) {
        if self.mirror.fetch(Duration::from_secs(20)).is_err() {
            sh.event(&self.name, "", "fetch_error");
            return;
        }
        // Reporting (as to Prometheus) from the first successful fetch on, applied or not.
        sh.reports.lock().unwrap().entry(self.name.clone()).or_default().current = true;
        let Some(tip) = self.mirror.tip() else { return };
        let rtip = self.mirror.rollout_tip();
        let state: Option<RolloutState> = rtip.and_then(|r| self.mirror.rollout_state(r).ok());
        if rtip != self.last_state {
            self.last_state = rtip;
            if let Some(s) = &state {
                sh.event(&self.name, &s.commit, if s.phase == RolloutPhase::Halted { "saw_halt" } else { "saw_state" });
                if s.phase == RolloutPhase::Halted && !self.saw_halt.contains(&s.commit) {
                    self.saw_halt.push(s.commit.clone());
                }
            }
        }
        let tip_plan = sh.plan(&self.mirror, tip);
        let wave = state.as_ref().and_then(|s| git2::Oid::from_str(s.policy_commit()).ok()).map(|c| sh.plan(&self.mirror, c)).and_then(|p| p.waves.get(&self.name).copied());
        let left_rollouts = state.as_ref().is_some_and(|s| s.phase == RolloutPhase::Complete && git2::Oid::from_str(&s.commit).is_ok_and(|c| !sh.plan(&self.mirror, c).has_policy));
        let tip_s = tip.to_string();
        let view = match &state {
            Some(s) => StateView::Verified(s),
            None => StateView::Absent,
        };
        let d = decide(&FollowInput {
            branch: "main",
            tip: &tip_s,
            tip_has_policy: tip_plan.has_policy,
            left_rollouts,
            bucket: fwc_compiler::artifacts::rollout::host_bucket(&self.name),
            state: view,
            wave,
            applied: self.applied.as_deref(),
        });
        let target = match d {
            FollowDecision::Tip => Some(tip_s),
            FollowDecision::Apply { commit, .. } => Some(commit),
            FollowDecision::Hold { .. } => None,
        };
        let Some(target) = target.filter(|t| Some(t) != self.applied.as_ref()) else { return };
        let mut reports = sh.reports.lock().unwrap();
        let rep = reports.entry(self.name.clone()).or_default();
        if rep.degraded.iter().any(|d| d.commit == target) {
            return; // a failed apply is not retried in the simulation
        }
        let plan = sh.plan(&self.mirror, git2::Oid::from_str(&target).unwrap());
        if self.saw_halt.contains(&target) {
            sh.event(&self.name, &target, "apply_after_halt");
        }
        if plan.fail && plan.waves.get(&self.name) == Some(&0) {
            rep.degraded = vec![Degraded { commit: target.clone(), reason: "rolled_back".into() }];
            sh.event(&self.name, &target, "apply_failed");
        } else {
            self.applied = Some(target.clone());
            rep.applied = Some(target.clone());
            rep.degraded.clear();
            sh.event(&self.name, &target, "applied");
        }
        rep.current = true;
    }
}

/// One controller step (`fwc rollout advance`, without Prometheus): decide and push.
fn advance(url: &str, sh: &Shared) -> Option<String> {
    let remote = Remote::open(url, "main", "fwc-rollout").ok()?;
    let snap = remote.fetch().ok()?;
    let tip = snap.tip.to_string();
    let reports = sh.reports.lock().unwrap().clone();
    let candidates = controller::policy_candidates(snap.state.as_ref(), &tip, &Ctl::Advance);
    let fleet = fwc_runtime::rollout::advance::load_fleet(&remote, &candidates, &reports).ok()?;
    let state_commit = snap.state_commit.map(|c| c.to_string());
    let d = controller::decide(&ControllerInput {
        state: snap.state.as_ref(),
        state_commit: state_commit.as_deref(),
        branch: "main",
        tip: &tip,
        fleet: fleet.as_ref(),
        reports: &reports,
        gates: &[],
        command: Ctl::Advance,
        now: SystemTime::now(),
    });
    match d {
        Decision::Transition { state, summary } => {
            let id = remote.write(snap.state_commit, &state, &summary, None).ok()?;
            match remote.push(id).ok()? {
                Pushed::Ok => {
                    sh.event("controller", &state.commit, match state.phase {
                        RolloutPhase::Halted => "halt",
                        RolloutPhase::Complete => "complete",
                        _ => "promote",
                    });
                    Some(format!("{} {:?} {} ({})", state.phase.as_str(), state.promoted, summary, state.reason))
                }
                Pushed::Rejected(_) => None,
            }
        }
        _ => None,
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let hosts: usize = a.next().map(|v| v.parse().unwrap()).unwrap_or(1000);
    let poll = Duration::from_secs_f64(a.next().map(|v| v.parse().unwrap()).unwrap_or(30.0));
    let workers: usize = a.next().map(|v| v.parse().unwrap()).unwrap_or(8);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let bare = root.join("rules.git");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&root, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    git(&work, &["init", "-q"]);
    let commit = |marker: &str, msg: &str| {
        std::fs::write(work.join("fwc.kdl"), rules(hosts, marker)).unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-qm", msg]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "HEAD:main"]);
        git(&work, &["rev-parse", "HEAD"])
    };
    let stats = Arc::new(GitStats::default());
    let port = serve_git(root.clone(), stats.clone());
    let url = format!("http://127.0.0.1:{port}/rules.git");
    let file_url = format!("file://{}", bare.display());
    let c1 = commit("v1", "v1");
    let sh = Arc::new(Shared { plans: Mutex::default(), reports: Mutex::default(), events: Mutex::default(), t0: Instant::now() });

    // The agents, each with its own mirror; memory measured around their creation.
    let rss0 = rss_kib();
    let agents: Vec<Arc<Mutex<Agent>>> = (0..hosts)
        .map(|i| {
            let name = format!("host-{i:04}");
            let m = Mirror::open(&root.join("agents").join(&name), &url, "main", Duration::from_secs(20)).unwrap();
            Arc::new(Mutex::new(Agent { name, mirror: m, applied: None, saw_halt: vec![], last_state: None }))
        })
        .collect();
    // Per-host jitter: each host's first poll at a random offset in the interval.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 1_000_000) as f64 / 1_000_000.0
    };
    let start = Instant::now();
    let heap: Arc<Mutex<BinaryHeap<std::cmp::Reverse<(Instant, usize)>>>> =
        Arc::new(Mutex::new((0..hosts).map(|i| std::cmp::Reverse((start + poll.mul_f64(rnd()), i))).collect()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let polls = Arc::new(AtomicU64::new(0));
    let mut threads = vec![];
    for _ in 0..workers {
        let (heap, agents, sh, stop, polls) = (heap.clone(), agents.clone(), sh.clone(), stop.clone(), polls.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let next = heap.lock().unwrap().peek().map(|r| r.0);
                let Some((at, i)) = next else { break };
                let now = Instant::now();
                if at > now {
                    std::thread::sleep((at - now).min(Duration::from_millis(50)));
                    continue;
                }
                let popped = {
                    let mut h = heap.lock().unwrap();
                    match h.peek() {
                        Some(r) if r.0 == (at, i) => h.pop(),
                        _ => None,
                    }
                };
                if popped.is_none() {
                    continue;
                }
                agents[i].lock().unwrap().poll(&sh);
                polls.fetch_add(1, Ordering::Relaxed);
                heap.lock().unwrap().push(std::cmp::Reverse((at + poll, i)));
            }
        }));
    }
    let rss1 = rss_kib();
    eprintln!("{hosts} agents, poll {poll:?}, {workers} workers; url {url}");

    // Every agent reports (as to Prometheus) before the controller first runs.
    while sh.reports.lock().unwrap().len() < hosts {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{:7.1}s every agent reports", sh.t0.elapsed().as_secs_f64());
    // Scenario 1 (happy path): the rollout of c1 from nothing to 100 %.
    let all_on = |c: &str| sh.reports.lock().unwrap().values().filter(|r| r.applied.as_deref() == Some(c)).count();
    let tick = Duration::from_secs(2);
    let t_push1 = sh.t0.elapsed().as_secs_f64();
    let cpu0 = (children_cpu_s(), stats.thread_cpu_ns.load(Ordering::Relaxed), stats.requests.load(Ordering::Relaxed), stats.bytes_out.load(Ordering::Relaxed), Instant::now());
    while all_on(&c1) < hosts {
        if let Some(t) = advance(&file_url, &sh) {
            eprintln!("{:7.1}s controller: {t}", sh.t0.elapsed().as_secs_f64());
            assert!(!t.starts_with("halted"), "the first rollout halted");
        }
        std::thread::sleep(tick);
    }
    while advance(&file_url, &sh).is_some() {}
    let t_full1 = sh.t0.elapsed().as_secs_f64();
    let cpu1 = (children_cpu_s(), stats.thread_cpu_ns.load(Ordering::Relaxed), stats.requests.load(Ordering::Relaxed), stats.bytes_out.load(Ordering::Relaxed), Instant::now());
    eprintln!("{t_full1:7.1}s all {hosts} on v1");

    // Scenario 2: a commit that fails on the canary: halt, nobody else applies it.
    let c2 = commit("v2", "v2 [sim: fail]");
    let t_push2 = sh.t0.elapsed().as_secs_f64();
    let mut t_halt = None;
    while t_halt.is_none() {
        if let Some(t) = advance(&file_url, &sh) {
            eprintln!("{:7.1}s controller: {t}", sh.t0.elapsed().as_secs_f64());
            if t.starts_with("halted") {
                t_halt = Some(sh.t0.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // Wait until every agent has seen the halt (at most two poll intervals).
    let seen = |sh: &Shared| sh.events.lock().unwrap().iter().filter(|e| e.3 == "saw_halt" && e.2 == c2).count();
    let deadline = Instant::now() + poll * 3;
    while seen(&sh) < hosts && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }

    let ev = sh.events.lock().unwrap().clone();
    let first = |what: &str, c: &str, host: Option<&dyn Fn(&str) -> bool>| ev.iter().filter(|e| e.3 == what && e.2 == c && host.is_none_or(|f| f(&e.1))).map(|e| e.0).fold(f64::NAN, f64::min);
    let last = |what: &str, c: &str| ev.iter().filter(|e| e.3 == what && e.2 == c).map(|e| e.0).fold(f64::NAN, f64::max);
    let canary: &dyn Fn(&str) -> bool = &|h: &str| h < "host-0010";
    let waves: Vec<usize> = {
        let p = sh.plans.lock().unwrap().get(&c1).cloned().unwrap();
        (0..3).map(|w| p.waves.values().filter(|x| **x == w).count()).collect()
    };
    let wave_done = |w: usize| {
        let p = sh.plans.lock().unwrap().get(&c1).cloned().unwrap();
        ev.iter().filter(|e| e.3 == "applied" && e.2 == c1 && p.waves.get(&e.1) == Some(&w)).map(|e| e.0).fold(f64::NAN, f64::max)
    };
    let promotes: Vec<f64> = ev.iter().filter(|e| e.1 == "controller" && e.2 == c1).map(|e| e.0).collect();
    let secs = (cpu1.4 - cpu0.4).as_secs_f64();
    let applied_c2: Vec<&String> = ev.iter().filter(|e| e.3 == "applied" && e.2 == c2).map(|e| &e.1).collect();
    let failed_c2 = ev.iter().filter(|e| e.3 == "apply_failed" && e.2 == c2).count();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report = serde_json::json!({
        "hosts": hosts,
        "poll_s": poll.as_secs_f64(),
        "wave_sizes": waves,
        "agent_polls": polls.load(Ordering::Relaxed),
        "git_requests_per_s": (cpu1.2 - cpu0.2) as f64 / secs,
        "git_bytes_out_per_s": (cpu1.3 - cpu0.3) as f64 / secs,
        "git_cpu_cores_http_backend": (cpu1.0 - cpu0.0) / secs,
        "git_cpu_cores_front": (cpu1.1 - cpu0.1) as f64 / 1e9 / secs,
        "push_to_canary_first_applied_s": first("applied", &c1, Some(canary)) - t_push1,
        "push_to_canary_wave_applied_s": wave_done(0) - t_push1,
        "controller_transitions_s": promotes.iter().map(|t| t - t_push1).collect::<Vec<_>>(),
        "wave_done_s": (0..3).map(|w| wave_done(w) - t_push1).collect::<Vec<_>>(),
        "time_to_100pct_s": t_full1 - t_push1,
        "canary_failure_s": first("apply_failed", &c2, None) - t_push2,
        "failure_to_halt_commit_s": t_halt.unwrap() - first("apply_failed", &c2, None),
        "halt_to_last_agent_seeing_it_s": last("saw_halt", &c2) - t_halt.unwrap(),
        "agents_that_saw_the_halt": seen(&sh),
        "hosts_that_applied_the_halted_commit": applied_c2.len(),
        "canary_hosts_that_failed_it": failed_c2,
        "applies_after_seeing_the_halt": ev.iter().filter(|e| e.3 == "apply_after_halt").count(),
        "fetch_errors": ev.iter().filter(|e| e.3 == "fetch_error").count(),
        "rss_kib_per_agent": (rss1.saturating_sub(rss0)) as f64 / hosts as f64,
        "loadavg": load.trim(),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
