//! Fleet rollout simulation (bench/fleet/run.sh): N simulated agents running the
//! agent's real follow core (`rollout::follow::decide`) on real libgit2 fetches (each its own
//! bare mirror, `agent::git::Mirror`), against a local git smart-HTTP server (`git
//! http-backend` behind a counting HTTP/1.1 front), with per-host jitter; the dataplane is
//! simulated (an apply of a commit whose message has `[sim: fail]` fails on the canary wave).
//! The controller is the real decision core (`rollout::controller::decide`) and the real state
//! ref I/O (`rollout::state_ref`), fed the agents' reports directly (no Prometheus scrape delay).
//!
//! `FWC_SIM_SERVER=nginx` serves the repository with Debian's nginx and fcgiwrap in front of
//! `git http-backend` instead (a real web server stack; its processes' CPU is read from /proc),
//! and `FWC_SIM_POLL=refs` makes the agents poll the static `info/refs` that nginx serves
//! (`fwc agent --refs-url`), fetching with git only when a ref moved.
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
use fwc_runtime::rollout::follow::{decide, succession, Accepted, FollowDecision, FollowInput, StateView};
use fwc_runtime::rollout::rewind::{behind_the_fleet, AcceptedReport};
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
    if std::env::var_os("FWC_SIM_TRACE").is_some() {
        eprintln!("{method} {target}");
    }
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

/// nginx + fcgiwrap + `git http-backend` on 127.0.0.1 (Debian's packages): smart HTTP under
/// `/rules.git/`, the static `info/refs` under `/static/rules.git/info/refs`. Stopped on drop.
struct Nginx {
    /// A cpuacct (cgroup v1) group holding the server's processes, when one can be made.
    acct: Option<PathBuf>,
    nginx: std::process::Child,
    fcgiwrap: std::process::Child,
    port: u16,
    log: PathBuf,
}

/// A server process that dies with the simulation (also when it is killed), in the cpuacct
/// cgroup `acct` when there is one (so that every descendant's CPU counts, reaped or not).
fn child<'a>(c: &'a mut Command, acct: &Option<PathBuf>) -> &'a mut Command {
    use std::os::unix::process::CommandExt;
    c.stdin(Stdio::null()).process_group(0);
    let procs = acct.as_ref().map(|d| std::ffi::CString::new(d.join("cgroup.procs").to_string_lossy().as_bytes()).unwrap());
    // SAFETY: prctl and a write to a cgroup file between fork and exec (no allocation).
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(p) = &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    let mut buf = [0u8; 12];
                    let mut n = libc::getpid() as u32;
                    let mut i = buf.len();
                    loop {
                        i -= 1;
                        buf[i] = b'0' + (n % 10) as u8;
                        n /= 10;
                        if n == 0 {
                            break;
                        }
                    }
                    libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
                    libc::close(fd);
                }
            }
            Ok(())
        })
    }
}

impl Nginx {
    fn start(root: &Path) -> Nginx {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = root.join("nginx");
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("fcgiwrap.sock");
        let acct = Path::new("/sys/fs/cgroup/cpuacct").join(format!("fwc-sim-{}", std::process::id()));
        let acct = std::fs::create_dir(&acct).is_ok().then_some(acct);
        // The servers' workers outlive their masters by a moment: they are reparented to this
        // process (not to an init that may not reap them) and reaped on drop.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        let fcgiwrap = child(Command::new("fcgiwrap").args(["-c", "8", "-s"]).arg(format!("unix:{}", sock.display())), &acct).spawn().expect("fcgiwrap (apt install fcgiwrap)");
        let log = dir.join("access.log");
        let conf = format!(
            "daemon off;\n{user}worker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 4096; }}\n\
             http {{\n access_log {log} combined;\n client_body_temp_path {d}/body;\n fastcgi_temp_path {d}/fcgi;\n proxy_temp_path {d}/proxy;\n\
             uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             server {{\n  listen 127.0.0.1:{port};\n\
              location = /static/rules.git/info/refs {{ alias {root}/rules.git/info/refs; default_type text/plain; }}\n\
              location /rules.git/ {{\n   client_max_body_size 0;\n   include /etc/nginx/fastcgi_params;\n\
               fastcgi_param SCRIPT_FILENAME /usr/lib/git-core/git-http-backend;\n   fastcgi_param GIT_PROJECT_ROOT {root};\n\
               fastcgi_param GIT_HTTP_EXPORT_ALL \"\";\n   fastcgi_param PATH_INFO $uri;\n   fastcgi_param GIT_PROTOCOL $http_git_protocol;\n\
               fastcgi_pass unix:{sock};\n  }}\n }}\n}}\n",
            user = if unsafe { libc::geteuid() } == 0 { "user root;\n" } else { "" },
            d = dir.display(),
            log = log.display(),
            root = root.display(),
            sock = sock.display(),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let nginx = child(Command::new("nginx").arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log")), &acct).spawn().expect("nginx (apt install nginx-light)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() || !sock.exists() {
            assert!(Instant::now() < deadline, "nginx/fcgiwrap did not start: {}", std::fs::read_to_string(dir.join("error.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx { acct, nginx, fcgiwrap, port, log }
    }

    /// CPU seconds of nginx, fcgiwrap and every process below them: the cgroup's
    /// `cpuacct.usage`, or else the live process tree's times (which miss children reaped
    /// with SIGCHLD ignored: a lower bound).
    fn cpu_s(&self) -> f64 {
        if let Some(ns) = self.acct.as_ref().and_then(|d| std::fs::read_to_string(d.join("cpuacct.usage")).ok()).and_then(|v| v.trim().parse::<f64>().ok()) {
            return ns / 1e9;
        }
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let mut procs: Vec<(u32, u32, f64)> = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            // after the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
            procs.push((pid, num(1) as u32, (num(11) + num(12) + num(13) + num(14)) / tick));
        }
        let roots = [self.nginx.id(), self.fcgiwrap.id()];
        let mut ours: Vec<u32> = roots.to_vec();
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, ppid, _) in &procs {
                if ours.contains(ppid) && !ours.contains(pid) {
                    ours.push(*pid);
                    grew = true;
                }
            }
        }
        procs.iter().filter(|(pid, _, _)| ours.contains(pid)).map(|p| p.2).sum()
    }

    /// Requests so far: (static refs GETs, smart-HTTP requests).
    fn requests(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let stat = text.lines().filter(|l| l.contains("GET /static/")).count() as u64;
        (stat, text.lines().count() as u64 - stat)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Each server is its own process group: its workers go with it.
        for c in [&mut self.nginx, &mut self.fcgiwrap] {
            unsafe { libc::kill(-(c.id() as i32), libc::SIGTERM) };
            let _ = c.wait();
        }
        if let Some(d) = &self.acct {
            for pid in std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default().lines().filter_map(|l| l.parse::<i32>().ok()) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            // The group empties when the last worker has exited.
            for _ in 0..50 {
                while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
                if std::fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
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
    let policy = "rollout {\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=10\n    wave \"all\"\n}\n";
    // A marker starting with "nopolicy" drops the rollout block (a commit that removes the policy).
    let mut s = format!("fwc 1\n// {marker}\n{}", if marker.starts_with("nopolicy") { "" } else { policy });
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
    /// host -> the last rollout state it accepted (`fwc_rollout_accepted_state`).
    accepted: Mutex<BTreeMap<String, AcceptedReport>>,
    /// The controller's last refusal to build on a state behind the fleet.
    refused: Mutex<Option<String>>,
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
    /// The last rollout state this host accepted (the agent's succession check).
    accepted: Option<Accepted>,
    /// The state this host follows (the last accepted one).
    following: Option<RolloutState>,
    /// Chaos: away (no poll, no report) until then.
    away_until: Option<Instant>,
    /// Chaos: the next self-check sees a git failure once (the retry passes).
    selfcheck_blip: bool,
}

impl Agent {
    fn poll(&mut self, sh: &Shared) {
        if let Some(until) = self.away_until {
            if Instant::now() < until {
                // Away: no poll, and Prometheus loses the host's series.
                sh.reports.lock().unwrap().remove(&self.name);
                return;
            }
            self.away_until = None;
            sh.event(&self.name, "", "back");
        }
        if self.mirror.fetch(Duration::from_secs(20)).is_err() {
            sh.event(&self.name, "", "fetch_error");
            return;
        }
        // Reporting (as to Prometheus) from the first successful fetch on, applied or not.
        sh.reports.lock().unwrap().entry(self.name.clone()).or_default().current = true;
        let Some(tip) = self.mirror.tip() else { return };
        let rtip = self.mirror.rollout_tip();
        let fetched: Option<RolloutState> = rtip.and_then(|r| self.mirror.rollout_state(r).ok());
        // The agent's succession check: a state is followed only when it descends from the last
        // one this host accepted, with a higher generation (else held `state_rewound`).
        if let (Some(r), Some(s)) = (rtip, &fetched) {
            let descends = self.accepted.as_ref().is_none_or(|a| git2::Oid::from_str(&a.commit).is_ok_and(|a| a == r || self.mirror.repo.graph_descendant_of(r, a).unwrap_or(false)));
            match succession(self.accepted.as_ref(), &r.to_string(), s.generation, descends) {
                Ok(()) => {
                    self.accepted = Some(Accepted { commit: r.to_string(), generation: s.generation });
                    sh.accepted.lock().unwrap().insert(self.name.clone(), AcceptedReport { host: self.name.clone(), state: r.to_string(), generation: s.generation });
                    self.following = Some(s.clone());
                }
                Err(_) => {
                    if rtip != self.last_state {
                        sh.event(&self.name, &s.commit, "held_state_rewound");
                    }
                }
            }
        }
        let state = self.following.clone();
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
        // The wave this host is in under the policy in force, and whether the state promoted it.
        let promoted_ok = match &state {
            None => true,
            Some(s) => wave.is_none_or(|w| s.promoted.is_some_and(|p| w <= p)) || s.stable.as_deref() == Some(target.as_str()),
        };
        if !promoted_ok {
            sh.event(&self.name, &target, "applied_before_its_wave");
        }
        if self.selfcheck_blip {
            // A git failure during the self-check: the agent retries (3 attempts by default)
            // and the second attempt passes; nothing is reverted.
            self.selfcheck_blip = false;
            sh.event(&self.name, &target, "selfcheck_retried");
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
    step(url, sh, Ctl::Advance)
}

/// One controller step with an operator's command.
fn step(url: &str, sh: &Shared, command: Ctl) -> Option<String> {
    let remote = Remote::open(url, "main", "fwc-rollout").ok()?;
    let snap = remote.fetch().ok()?;
    let tip = snap.tip.to_string();
    let reports = sh.reports.lock().unwrap().clone();
    let candidates = controller::policy_candidates(snap.state.as_ref(), &tip, &command);
    let fleet = fwc_runtime::rollout::advance::load_fleet(&remote, &candidates, &reports).ok()?;
    let state_commit = snap.state_commit.map(|c| c.to_string());
    let accepted: Vec<AcceptedReport> = sh.accepted.lock().unwrap().values().cloned().collect();
    if let Some(why) = behind_the_fleet(snap.state.as_ref(), state_commit.as_deref(), &accepted, "fwc-rollout") {
        let mut last = sh.refused.lock().unwrap();
        if last.as_deref() != Some(why.as_str()) {
            eprintln!("{:7.1}s controller refuses: {why}", sh.t0.elapsed().as_secs_f64());
            sh.event("controller", "", "refused_rewound");
        }
        *last = Some(why);
        return None;
    }
    *sh.refused.lock().unwrap() = None;
    let d = controller::decide(&ControllerInput {
        state: snap.state.as_ref(),
        state_commit: state_commit.as_deref(),
        branch: "main",
        tip: &tip,
        fleet: fleet.as_ref(),
        reports: &reports,
        gates: &[],
        command,
        now: SystemTime::now(),
    });
    match d {
        Decision::Transition { state, summary } => {
            let id = remote.write(snap.state_commit, &state, &summary, None).ok()?;
            match remote.push(id).ok()? {
                Pushed::Ok => {
                    // libgit2's local transport runs no hooks; a git server runs post-update
                    // on the controller's push.
                    if let Some(dir) = url.strip_prefix("file://") {
                        git(Path::new(dir), &["update-server-info"]);
                    }
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
    // The stock post-update hook: `info/refs` follows every push (the static refs file).
    let hook = bare.join("hooks").join("post-update");
    std::fs::write(&hook, "#!/bin/sh\nexec git update-server-info\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let stats = Arc::new(GitStats::default());
    let nginx = (std::env::var("FWC_SIM_SERVER").as_deref() == Ok("nginx")).then(|| Nginx::start(&root));
    let port = match &nginx {
        Some(n) => n.port,
        None => serve_git(root.clone(), stats.clone()),
    };
    let url = format!("http://127.0.0.1:{port}/rules.git");
    let refs_poll = std::env::var("FWC_SIM_POLL").as_deref() == Ok("refs");
    assert!(!refs_poll || nginx.is_some(), "FWC_SIM_POLL=refs needs FWC_SIM_SERVER=nginx (the static file)");
    let refs_url = format!("http://127.0.0.1:{port}/static/rules.git/info/refs");
    let file_url = format!("file://{}", bare.display());
    let c1 = commit("v1", "v1");
    let sh = Arc::new(Shared { plans: Mutex::default(), reports: Mutex::default(), events: Mutex::default(), accepted: Mutex::default(), refused: Mutex::default(), t0: Instant::now() });

    // The agents, each with its own mirror; memory measured around their creation.
    let rss0 = rss_kib();
    let agents: Vec<Arc<Mutex<Agent>>> = (0..hosts)
        .map(|i| {
            let name = format!("host-{i:04}");
            let mut m = Mirror::open(&root.join("agents").join(&name), &url, "main", Duration::from_secs(20)).unwrap();
            if refs_poll {
                m.refs_poll = Some(fwc_runtime::agent::refs_poll::RefsPoll::new(&refs_url, fwc_runtime::agent::refs_poll::DEFAULT_FULL_EVERY).unwrap());
            }
            Arc::new(Mutex::new(Agent { name, mirror: m, applied: None, saw_halt: vec![], last_state: None, accepted: None, following: None, away_until: None, selfcheck_blip: false }))
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
    eprintln!("{hosts} agents, poll {poll:?}, {workers} workers; url {url}; server {}; refs poll {refs_poll}", if nginx.is_some() { "nginx" } else { "builtin" });

    // Every agent reports (as to Prometheus) before the controller first runs.
    while sh.reports.lock().unwrap().len() < hosts {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{:7.1}s every agent reports", sh.t0.elapsed().as_secs_f64());
    // Scenario 1 (happy path): the rollout of c1 from nothing to 100 %.
    let all_on = |c: &str| sh.reports.lock().unwrap().values().filter(|r| r.applied.as_deref() == Some(c)).count();
    let tick = Duration::from_secs(2);
    let t_push1 = sh.t0.elapsed().as_secs_f64();
    let server = || match &nginx {
        Some(n) => {
            let (st, smart) = n.requests();
            (n.cpu_s(), st, smart)
        }
        None => (0.0, 0, 0),
    };
    let srv0 = server();
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
    let srv1 = server();
    eprintln!("{t_full1:7.1}s all {hosts} on v1");

    // Idle: two poll intervals in which no ref moves (what a fleet does most of the time),
    // after one interval in which every agent has fetched the completed state.
    std::thread::sleep(poll + Duration::from_secs(1));
    let idle0 = (server(), stats.requests.load(Ordering::Relaxed), children_cpu_s(), stats.thread_cpu_ns.load(Ordering::Relaxed), polls.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(poll * 2);
    let idle1 = (server(), stats.requests.load(Ordering::Relaxed), children_cpu_s(), stats.thread_cpu_ns.load(Ordering::Relaxed), polls.load(Ordering::Relaxed), Instant::now());
    let idle_s = (idle1.5 - idle0.5).as_secs_f64();
    let idle_polls = (idle1.4 - idle0.4).max(1) as f64;
    let idle = serde_json::json!({
        "seconds": idle_s,
        "polls_per_s": idle_polls / idle_s,
        "server_cpu_cores": if nginx.is_some() { (idle1.0 .0 - idle0.0 .0) / idle_s } else { (idle1.2 - idle0.2) / idle_s + (idle1.3 - idle0.3) as f64 / 1e9 / idle_s },
        "static_refs_requests_per_poll": (idle1.0 .1 - idle0.0 .1) as f64 / idle_polls,
        "smart_http_requests_per_poll": if nginx.is_some() { (idle1.0 .2 - idle0.0 .2) as f64 / idle_polls } else { (idle1.1 - idle0.1) as f64 / idle_polls },
    });
    eprintln!("{:7.1}s idle: {idle}", sh.t0.elapsed().as_secs_f64());

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

    // Scenario 3 (FWC_SIM_CHAOS=1): everyday faults during a rollout. The operator first halts
    // the failed rollout with rollback, so that an old "halted, roll back" state exists; then a
    // fixed commit rolls out while 5 % of the hosts go away for 4 poll intervals (2 minutes at
    // 30 s), 1 % see a git failure in their self-check, and the rollout ref is set back to the
    // old state once; then a commit that drops the policy rolls out.
    let chaos = std::env::var("FWC_SIM_CHAOS").as_deref() == Ok("1");
    let mut chaos_report = serde_json::Value::Null;
    if chaos {
        let ref_of = |r: &str| git(&bare, &["rev-parse", r]);
        let state_now = || -> Option<RolloutState> { serde_json::from_str(&git(&bare, &["show", "refs/heads/fwc-rollout:rollout.json"])).ok() };
        let set_ref = |id: &str| {
            git(&bare, &["update-ref", "refs/heads/fwc-rollout", id]);
            git(&bare, &["update-server-info"]);
        };
        if let Some(t) = step(&file_url, &sh, Ctl::Halt { rollback: true, reason: "sim: roll the failed commit back".into() }) {
            eprintln!("{:7.1}s operator: {t}", sh.t0.elapsed().as_secs_f64());
        }
        let old_state = ref_of("refs/heads/fwc-rollout");
        std::thread::sleep(poll + Duration::from_secs(1));
        let c3 = commit("v3", "v3: the fix");
        let t3 = sh.t0.elapsed().as_secs_f64();
        let deadline = Instant::now() + poll * 40;
        let (mut faults_at, mut replayed_at, mut restored_at, mut legit_state, mut restored_to) = (None, None, None::<f64>, None::<String>, None::<String>);
        let mut away = vec![];
        while all_on(&c3) < hosts && Instant::now() < deadline {
            if let Some(t) = advance(&file_url, &sh) {
                eprintln!("{:7.1}s controller: {t}", sh.t0.elapsed().as_secs_f64());
            }
            let st = state_now();
            let promoted = st.as_ref().filter(|s| s.commit == c3).and_then(|s| s.promoted);
            if faults_at.is_none() && promoted.is_some() {
                faults_at = Some(sh.t0.elapsed().as_secs_f64());
                for (i, a) in agents.iter().enumerate() {
                    let mut a = a.lock().unwrap();
                    if i >= 10 && i % 20 == 7 {
                        a.away_until = Some(Instant::now() + poll * 4);
                        away.push(a.name.clone());
                    }
                    if i % 100 == 3 {
                        a.selfcheck_blip = true;
                    }
                }
                eprintln!("{:7.1}s chaos: {} hosts away for {:?}, self-check blips armed", sh.t0.elapsed().as_secs_f64(), away.len(), poll * 4);
            }
            // The operator reads the controller's refusal (an alert) and restores the ref as it
            // says, one poll interval later.
            if let (Some(t), None) = (replayed_at, restored_at) {
                if sh.t0.elapsed().as_secs_f64() - t > poll.as_secs_f64() {
                    let why = sh.refused.lock().unwrap().clone();
                    if let Some(c) = why.as_deref().and_then(|w| w.split("git push --force origin ").nth(1)).and_then(|w| w.split(':').next()) {
                        set_ref(c);
                        restored_to = Some(c.to_string());
                        restored_at = Some(sh.t0.elapsed().as_secs_f64());
                        eprintln!("{:7.1}s operator: the rollout ref restored to {}", sh.t0.elapsed().as_secs_f64(), &c[..12]);
                    }
                }
            }
            if replayed_at.is_none() && promoted >= Some(1) {
                legit_state = Some(ref_of("refs/heads/fwc-rollout"));
                replayed_at = Some(sh.t0.elapsed().as_secs_f64());
                set_ref(&old_state);
                eprintln!("{:7.1}s chaos: the rollout ref set back to {}", sh.t0.elapsed().as_secs_f64(), &old_state[..12]);
            }
            std::thread::sleep(tick);
        }
        let t3_done = (all_on(&c3) == hosts).then(|| sh.t0.elapsed().as_secs_f64() - t3);
        while advance(&file_url, &sh).is_some() {}
        eprintln!("{:7.1}s chaos: {} of {hosts} on v3", sh.t0.elapsed().as_secs_f64(), all_on(&c3));
        // The policy dropped: rolled out under the stable commit's policy, wave by wave.
        let c4 = commit("nopolicy v4", "v4: no rollout block");
        let t4 = sh.t0.elapsed().as_secs_f64();
        let deadline = Instant::now() + poll * 30;
        while all_on(&c4) < hosts && Instant::now() < deadline {
            if let Some(t) = advance(&file_url, &sh) {
                eprintln!("{:7.1}s controller: {t}", sh.t0.elapsed().as_secs_f64());
            }
            std::thread::sleep(tick);
        }
        let t4_done = (all_on(&c4) == hosts).then(|| sh.t0.elapsed().as_secs_f64() - t4);
        let ev = sh.events.lock().unwrap().clone();
        let after = |t: Option<f64>| t.unwrap_or(f64::INFINITY);
        // A host "moved by the replayed state" applied something other than v3 after the replay
        // and before v4 (the old state would send it back to stable).
        let moved: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied" && e.0 >= after(replayed_at) && e.0 < t4 && e.2 != c3).map(|e| &e.1).collect();
        let rollbacks_to: std::collections::BTreeSet<&String> = ev.iter().filter(|e| e.3 == "applied" && e.0 >= t3 && e.2 == c1).map(|e| &e.1).collect();
        chaos_report = serde_json::json!({
            "hosts_away": away.len(),
            "away_for_s": (poll * 4).as_secs_f64(),
            "selfcheck_blips": ev.iter().filter(|e| e.3 == "selfcheck_retried").count(),
            "faults_from_push_s": faults_at.map(|t| t - t3),
            "replay_from_push_s": replayed_at.map(|t| t - t3),
            "controller_refused_the_replayed_state": ev.iter().any(|e| e.3 == "refused_rewound"),
            "operator_restored_after_s": restored_at.zip(replayed_at).map(|(r, p)| r - p),
            "restored_to_the_state_before_the_replay": restored_to.is_some() && restored_to == legit_state,
            "hosts_that_held_the_replayed_state": ev.iter().filter(|e| e.3 == "held_state_rewound" && e.0 >= t3).map(|e| &e.1).collect::<std::collections::BTreeSet<_>>().len(),
            "hosts_moved_by_the_replayed_state": moved.len(),
            "hosts_rolled_back_during_v3": rollbacks_to.len(),
            "v3_time_to_100pct_s": t3_done,
            "v3_hosts_on_it_at_the_end": all_on(&c3),
            "policy_drop_time_to_100pct_s": t4_done,
            "policy_drop_hosts_on_it_at_the_end": all_on(&c4),
            "hosts_that_took_the_policy_drop_before_their_wave": ev.iter().filter(|e| e.3 == "applied_before_its_wave" && e.2 == c4).count(),
            "applies_before_their_wave_any_commit": ev.iter().filter(|e| e.3 == "applied_before_its_wave").count(),
            "halts_during_v3": ev.iter().filter(|e| e.1 == "controller" && e.3 == "halt" && e.2 == c3).count(),
        });
        eprintln!("{:7.1}s chaos: {chaos_report}", sh.t0.elapsed().as_secs_f64());
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
        "server": if nginx.is_some() { "nginx+fcgiwrap+git-http-backend" } else { "builtin front+git-http-backend" },
        "refs_poll": refs_poll,
        "nginx_cpu_cores": (srv1.0 - srv0.0) / secs,
        "nginx_cpu_source": match &nginx { Some(n) if n.acct.is_some() => "cgroup cpuacct", Some(_) => "process tree (lower bound)", None => "-" },
        "nginx_static_refs_requests_per_s": (srv1.1 - srv0.1) as f64 / secs,
        "nginx_smart_http_requests_per_s": (srv1.2 - srv0.2) as f64 / secs,
        "git_requests_per_s": (cpu1.2 - cpu0.2) as f64 / secs,
        "idle": idle,
        "chaos": chaos_report,
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
